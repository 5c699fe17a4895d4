//! The sources that source-mode sets version: which sets version each, the version the watch last saw
//! of it, and what the set controller last read of it; from these, whether that read is still fresh
//! ([`SourceLookup`]).
//!
//! Each map has one writer: which sets version a source, the set watches ([`Sources::follow`]); the
//! versions seen, the ConfigMap and Secret watches ([`Sources::seen`]); the reads, the set controller
//! ([`Sources::record`], through [`super::Index::record_source`]). What is known of a source is
//! dropped with the last set that versions it.

use std::collections::{BTreeSet, HashMap};

use cmset_core::set::SetKind;
use cmset_core::workloads::refs::Referenced;

use crate::engine::sparse::ShrinkIfSparse;

use super::{Key, SetId, Triggers};

/// What the set controller last read of a source: the version read and the identity of its content
/// (`None`: it did not exist).
#[derive(Clone, Debug, PartialEq, Eq)]
struct SourceRead {
    version: Option<String>,
    identity: Option<String>,
}

/// What is known of a source's content right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceLookup {
    /// Read at the version the watch last saw: its identity, or `None` when it does not exist.
    Fresh(Option<String>),
    /// Never read, or changed since: the set controller reads it.
    Stale,
}

/// A read of a source that differs from the one before.
pub(super) struct NewRead {
    /// The sets that version the source.
    pub(super) sets: Vec<SetId>,
    /// Whether its content identity changed (a first read counts as a change).
    pub(super) content_changed: bool,
}

#[derive(Default)]
pub(super) struct Sources {
    /// By source kind and key: the names of the sets in its namespace that version it.
    sets: HashMap<(Referenced, Key), BTreeSet<String>>,
    /// The resourceVersion the watch last saw of each source some set versions (`None`: deleted).
    versions: HashMap<(Referenced, Key), Option<String>>,
    /// What the set controller last read of each such source.
    reads: HashMap<(Referenced, Key), SourceRead>,
}

impl Sources {
    /// Follows a set's source: from now on the watch's events for `new` trigger the set, and `old`'s
    /// no longer do (what was known of it is dropped once no set versions it).
    pub(super) fn follow(&mut self, set: &SetId, old: Option<&str>, new: Option<&str>) {
        if old == new {
            return;
        }
        let kind = set.0.revision_kind();
        if let Some(old) = old {
            let source = (kind, Key::new(&set.1.namespace, old));
            if let Some(sets) = self.sets.get_mut(&source) {
                sets.remove(&*set.1.name);
                if sets.is_empty() {
                    self.sets.remove(&source);
                    self.versions.remove(&source);
                    self.reads.remove(&source);
                    self.sets.shrink_if_sparse();
                    self.versions.shrink_if_sparse();
                    self.reads.shrink_if_sparse();
                }
            }
        }
        if let Some(new) = new {
            self.sets
                .entry((kind, Key::new(&set.1.namespace, new)))
                .or_default()
                .insert(set.1.name.to_string());
        }
    }

    /// The watch saw a ConfigMap or Secret at `version` (`None`: deleted). If a set versions it and the
    /// version moved, that set reconciles and reads it again.
    pub(super) fn seen(&mut self, kind: Referenced, key: &Key, version: Option<String>, out: &mut Triggers) {
        let source = (kind, key.clone());
        let Some(sets) = self.sets.get(&source) else {
            return;
        };
        if self.versions.get(&source) == Some(&version) {
            return;
        }
        let set_kind = SetKind::of_revisions(kind);
        out.sets
            .extend(sets.iter().map(|name| (set_kind, Key::new(&key.namespace, name))));
        self.versions.insert(source, version);
    }

    /// Records what the set controller read of a source some set versions; `None` when nothing is
    /// new (no set versions it, or the same read again).
    pub(super) fn record(
        &mut self,
        kind: SetKind,
        key: &Key,
        version: Option<String>,
        identity: Option<String>,
    ) -> Option<NewRead> {
        let source = (kind.revision_kind(), key.clone());
        let sets = self.sets.get(&source)?;
        let sets = sets
            .iter()
            .map(|name| (kind, Key::new(&key.namespace, name)))
            .collect();
        let read = SourceRead { version, identity };
        let previous = self.reads.insert(source, read.clone());
        if previous.as_ref() == Some(&read) {
            return None;
        }
        Some(NewRead {
            sets,
            content_changed: previous.is_none_or(|p| p.identity != read.identity),
        })
    }

    pub(super) fn lookup(&self, kind: Referenced, key: &Key) -> SourceLookup {
        let source = (kind, key.clone());
        let Some(read) = self.reads.get(&source) else {
            return SourceLookup::Stale;
        };
        match self.versions.get(&source) {
            // The watch saw another version than the one read: read again.
            Some(seen) if *seen != read.version => SourceLookup::Stale,
            // Seen at that version, or not seen at all since the set began to version it (the read
            // came after the set was indexed, so it is at least as new as anything the watch dropped).
            _ => SourceLookup::Fresh(read.identity.clone()),
        }
    }

    /// The keys of every source of `kind` the watch has seen and not seen deleted.
    pub(super) fn keys(&self, kind: Referenced) -> impl Iterator<Item = Key> + '_ {
        self.versions
            .iter()
            .filter(move |((k, _), version)| *k == kind && version.is_some())
            .map(|((_, key), _)| key.clone())
    }

    pub(super) fn len(&self) -> usize {
        self.sets.len()
    }
}
