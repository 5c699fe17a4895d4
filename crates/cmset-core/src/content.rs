//! Whether a set is acceptable before it becomes a revision: the checks its schema cannot express
//! ([`validate`]), each key's declared format and schema ([`content_check`]), and the application's
//! own checker run as a Job ([`checks`]). The webhook, the controller and `kubectl cmset validate`
//! call the same functions.
//!
//! Uses [`crate::status`], [`crate::workloads`], [`crate::set`], [`crate::revisions`] and
//! [`crate::policy`] (a set's windows are validated where they are parsed).

pub mod checks;
pub mod content_check;
pub mod validate;
