//! The bookkeeping of a watch's (re)list (`Init`, `InitApply`…, `InitDone`): the keys seen since the
//! list began, so that what it did not see can be dropped when it ends, the kinds that have listed
//! once, so that the index knows when it is ready, and the kinds whose watch cannot list or watch now.
//!
//! Written by [`super::Index::handle`], and by the workload watches' refusals
//! ([`super::Index::unavailable`]).

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;

use super::{Indexed, Key};

/// The history kinds, watched only from the takeover on (see `Scope::start_leading`): a standby
/// decodes none of them. They never hold readiness nor a set's moves, only what needs every history
/// object: pruning, and history's owner references on revisions (see [`Relist::history_listed`]).
pub(super) const HISTORY: [&str; 3] = [
    <ReplicaSet as Indexed>::NAME,
    <ControllerRevision as Indexed>::NAME,
    <Job as Indexed>::NAME,
];

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
    /// Kinds whose watch cannot list or watch now (refused, or its list failed), with why. What they
    /// listed last stays indexed, but may be stale: a refusal is not a removal (only discovery says a
    /// kind is gone). Their next full list ends it.
    unavailable: BTreeMap<&'static str, String>,
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

    /// The watch of `kind` cannot list or watch now, for `why`. Whether that is news (it was
    /// available, or unavailable for another reason).
    pub(super) fn unavailable(&mut self, kind: &'static str, why: String) -> bool {
        self.unavailable.insert(kind, why.clone()).as_ref() != Some(&why)
    }

    /// `kind` listed in full again; whether it was unavailable until now.
    pub(super) fn available(&mut self, kind: &'static str) -> bool {
        self.unavailable.remove(kind).is_some()
    }

    /// The kinds unavailable now, with why, and whether each has ever listed (what it last listed is
    /// indexed) or not (nothing of it is known).
    pub(super) fn unavailable_kinds(&self) -> impl Iterator<Item = (&'static str, &str, bool)> + '_ {
        self.unavailable
            .iter()
            .map(|(kind, why)| (*kind, why.as_str(), self.listed.contains(kind)))
    }

    /// Why `kind` cannot list now, if it never has: nothing of it is known.
    pub(super) fn never_listed(&self, kind: &'static str) -> Option<&str> {
        let why = self.unavailable.get(kind)?;
        (!self.listed.contains(kind)).then_some(why.as_str())
    }

    /// Whether `kind` has delivered a list, or cannot: nothing more is coming for now.
    fn settled(&self, kind: &'static str) -> bool {
        self.listed.contains(kind) || self.unavailable.contains_key(kind)
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
        self.unavailable.remove(kind);
    }

    /// The kinds watched now, but the history kinds (which may be watched already when this replica
    /// leads from the start), are the ones readiness waits for.
    pub(super) fn settle(&mut self) {
        let watched = &self.watched;
        self.required.get_or_insert_with(|| {
            watched
                .iter()
                .filter(|kind| !HISTORY.contains(kind))
                .copied()
                .collect()
        });
    }

    /// A kind refused before its first list does not hold readiness up (admission answers without
    /// it); the sets it may read hold instead (see [`super::Index::unobserved_readers`]).
    pub(super) fn is_ready(&self) -> bool {
        self.required
            .as_ref()
            .is_some_and(|required| required.iter().all(|kind| self.settled(kind)))
    }

    pub(super) fn is_complete(&self) -> bool {
        self.is_ready() && self.watched.iter().all(|kind| self.settled(kind))
    }

    /// As [`Relist::is_complete`], but for the history kinds.
    pub(super) fn is_complete_but_history(&self) -> bool {
        self.is_ready()
            && (self.watched.iter())
                .filter(|kind| !HISTORY.contains(kind))
                .all(|kind| self.settled(kind))
    }

    /// Whether every history kind has delivered a full list: until then history is unknown (a refused
    /// list included), not empty.
    pub(super) fn history_listed(&self) -> bool {
        HISTORY.iter().all(|kind| self.listed.contains(kind))
    }
}
