//! The bookkeeping of a watch's (re)list (`Init`, `InitApply`…, `InitDone`): the keys seen since the
//! list began, so that what it did not see can be dropped when it ends, and the kinds that have listed
//! once, so that the index knows when it is ready.
//!
//! Written only by [`super::Index::handle`].

use std::collections::{HashMap, HashSet};

use super::Key;

#[derive(Default)]
pub(super) struct Relist {
    /// Keys seen since a watch (re)started its list, by kind: what was not seen is gone.
    relisting: HashMap<&'static str, HashSet<Key>>,
    /// The kinds whose watches have delivered a full list.
    listed: HashSet<&'static str>,
}

impl Relist {
    /// The watch of `kind` begins to list.
    pub(super) fn start(&mut self, kind: &'static str) {
        self.relisting.insert(kind, HashSet::new());
    }

    /// The list of `kind` holds `key`.
    pub(super) fn seen(&mut self, kind: &'static str, key: Key) {
        self.relisting.entry(kind).or_default().insert(key);
    }

    /// The list of `kind` is complete: returns the keys it held, and counts `kind` as listed.
    pub(super) fn done(&mut self, kind: &'static str) -> HashSet<Key> {
        self.listed.insert(kind);
        self.relisting.remove(kind).unwrap_or_default()
    }

    /// How many kinds have listed once.
    pub(super) fn listed(&self) -> usize {
        self.listed.len()
    }
}
