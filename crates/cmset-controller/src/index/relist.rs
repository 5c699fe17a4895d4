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
    /// The kinds watched now.
    watched: HashSet<&'static str>,
    /// The kinds watched when the replica settled its start-up: readiness waits for these only.
    required: Option<HashSet<&'static str>>,
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

    pub(super) fn expect(&mut self, kind: &'static str) {
        self.watched.insert(kind);
    }

    /// `kind` is no longer watched.
    pub(super) fn forget(&mut self, kind: &'static str) {
        self.watched.remove(kind);
        if let Some(required) = self.required.as_mut() {
            required.remove(kind);
        }
        self.listed.remove(kind);
        self.relisting.remove(kind);
    }

    pub(super) fn settle(&mut self) {
        self.required.get_or_insert_with(|| self.watched.clone());
    }

    pub(super) fn is_ready(&self) -> bool {
        self.required
            .as_ref()
            .is_some_and(|required| required.is_subset(&self.listed))
    }

    pub(super) fn is_complete(&self) -> bool {
        self.is_ready() && self.watched.is_subset(&self.listed)
    }
}
