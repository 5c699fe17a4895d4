//! Break glass: the WindowOverrides of the scope, by the set they name (namespace, kind, name), so that
//! a set's reconcile reads its own in O(its overrides) and an override created or deleted reconciles
//! exactly the set it names.
//!
//! Written by the WindowOverride watch ([`super::Index::handle_override`]); read by the set and
//! workload reconciles ([`super::Index::window_override`]). Only the few fields a decision reads are
//! kept ([`OverrideView`]), not the objects.

use std::collections::{BTreeMap, HashMap};

use cmset_core::policy::break_glass::OverrideView;

use crate::engine::sparse::ShrinkIfSparse;

use super::{Key, SetId, Triggers};

#[derive(Default)]
pub(super) struct Overrides {
    /// Set → its overrides, by name.
    by_set: HashMap<SetId, BTreeMap<String, OverrideView>>,
    /// Override (namespace, name) → the set it names: to drop it when it is deleted or changed.
    names: HashMap<Key, SetId>,
}

impl Overrides {
    /// Indexes `view`, of namespace `namespace` (replacing what that override named before); triggers
    /// the set it names and, if it named another before, that one too.
    pub(super) fn apply(&mut self, namespace: &str, view: OverrideView, out: &mut Triggers) {
        let key = Key::new(namespace, &view.name);
        let id: SetId = (view.set_kind, Key::new(namespace, &view.set_name));
        if let Some(old) = self.names.get(&key).filter(|old| **old != id).cloned() {
            self.drop_from(&old, &key.name);
            out.sets.insert(old);
        }
        self.names.insert(key, id.clone());
        self.by_set
            .entry(id.clone())
            .or_default()
            .insert(view.name.clone(), view);
        out.sets.insert(id);
    }

    /// Drops the override `key`; triggers the set it named.
    pub(super) fn remove(&mut self, key: &Key, out: &mut Triggers) {
        if let Some(id) = self.names.remove(key) {
            self.drop_from(&id, &key.name);
            out.sets.insert(id);
        }
        self.names.shrink_if_sparse();
    }

    fn drop_from(&mut self, id: &SetId, name: &str) {
        if let Some(overrides) = self.by_set.get_mut(id) {
            overrides.remove(name);
            if overrides.is_empty() {
                self.by_set.remove(id);
            }
        }
        self.by_set.shrink_if_sparse();
    }

    /// The overrides that name set `id` (by namespace, kind and name: the uid is the caller's to check).
    pub(super) fn for_set(&self, id: &SetId) -> Vec<OverrideView> {
        self.by_set
            .get(id)
            .map(|o| o.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every override indexed, by key.
    pub(super) fn keys(&self) -> impl Iterator<Item = &Key> {
        self.names.keys()
    }

    pub(super) fn len(&self) -> usize {
        self.names.len()
    }
}
