//! One thing wrong with one field of a spec, said so that a user can act on it. Validation, window
//! parsing and the content checks all report in these terms.

use std::fmt;

/// One thing wrong with a ConfigMapSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Path of the offending field as a user writes it, e.g. `spec.template.data["bad key"]`.
    pub field: String,
    /// What is wrong and what is allowed, e.g. `key must consist of alphanumeric characters, '-', '_' or '.'`.
    pub message: String,
}

impl Problem {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}
