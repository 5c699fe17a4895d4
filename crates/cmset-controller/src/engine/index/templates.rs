//! Which sets name which AnalysisTemplate (`spec.rollout.analysis[].template`), so that a template
//! created, edited or deleted reconciles exactly the sets that name it, without walking every set.
//!
//! Written by the set watches ([`Templates::follow`], through the sets' [`super::Indexed`] impls);
//! read by the AnalysisTemplate watch ([`super::Index::handle_template`]).

use std::collections::{BTreeSet, HashMap};

use crate::engine::sparse::ShrinkIfSparse;

use super::{SetId, Triggers};

#[derive(Default)]
pub(super) struct Templates {
    /// Template name → the sets that name it.
    named_by: HashMap<String, BTreeSet<SetId>>,
    /// Set → the template names it names (to undo when its spec changes).
    names: HashMap<SetId, BTreeSet<String>>,
}

impl Templates {
    /// Set `id` names `names` now (none: it names no template, or it was deleted).
    pub(super) fn follow(&mut self, id: &SetId, names: BTreeSet<String>) {
        let old = match names.is_empty() {
            true => self.names.remove(id).unwrap_or_default(),
            false => self.names.insert(id.clone(), names.clone()).unwrap_or_default(),
        };
        for gone in old.difference(&names) {
            if let Some(sets) = self.named_by.get_mut(gone) {
                sets.remove(id);
                if sets.is_empty() {
                    self.named_by.remove(gone);
                }
            }
        }
        self.names.shrink_if_sparse();
        self.named_by.shrink_if_sparse();
        for name in names.difference(&old) {
            self.named_by.entry(name.clone()).or_default().insert(id.clone());
        }
    }

    /// Triggers the sets that name template `name`.
    pub(super) fn trigger_naming(&self, name: &str, out: &mut Triggers) {
        if let Some(sets) = self.named_by.get(name) {
            out.sets.extend(sets.iter().cloned());
        }
    }

    /// The template names some set names.
    pub(super) fn named(&self) -> impl Iterator<Item = &str> {
        self.named_by.keys().map(String::as_str)
    }

    pub(super) fn len(&self) -> usize {
        self.named_by.len()
    }
}
