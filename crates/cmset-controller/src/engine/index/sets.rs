//! What the index knows of each set: its [`SetFacts`], and whether its rollout is tracked.
//!
//! Written by the set watches (ConfigMapSet, SecretSet: [`Sets::record`], [`Sets::remove`]), and in
//! one field by the set controller's read of a source ([`Sets::content_changed`]: in source mode the
//! source's content is the set's).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use cmset_core::revisions::naming;
use cmset_core::set::{SetKind, SetRef};
use cmset_core::workloads::observe::RefNames;

use crate::engine::sparse::ShrinkIfSparse;

use super::graph::candidates;
use super::{Key, SetId, Triggers};

/// What the index knows of a set beyond its object, computed once per change of its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetFacts {
    pub uid: String,
    pub generation: Option<i64>,
    /// Whether the spec is valid (if not, workloads stay on the last good revision).
    pub valid: bool,
    /// The content identity of a valid spec that holds its content itself. In source mode the
    /// identity is the source's, which the index learns when the set controller reads it
    /// ([`super::Index::source`]).
    pub identity: Option<String>,
    /// The source it versions, in source mode (a ConfigMap for a ConfigMapSet, a Secret for a
    /// SecretSet).
    pub source: Option<String>,
    /// The value of the `cmset.dev/set` label on its revisions.
    pub label: String,
    /// When this process saw its content change last (or first saw the set).
    pub changed_at: Instant,
}

impl SetFacts {
    fn of(set: SetRef<'_>, changed_at: Instant) -> Self {
        let valid = set.validate().is_ok();
        Self {
            uid: set.uid(),
            generation: set.generation(),
            valid,
            identity: valid
                .then(|| cmset_core::revisions::revision::inline_identity(set))
                .flatten(),
            source: set.source_name().map(str::to_string),
            label: naming::set_label_value(set.name()),
            changed_at,
        }
    }
}

/// The sets of both kinds in scope.
#[derive(Default)]
pub(super) struct Sets {
    facts: HashMap<SetId, SetFacts>,
    /// Sets whose rollouts are tracked (`spec.rollout`, or a rollout recorded in their status): the
    /// health of their readers is watched for them.
    tracked: HashSet<SetId>,
}

impl Sets {
    /// Records the set as the watch now sees it. Its facts are computed again only when its spec moved
    /// (another generation, or another object of the same name); a write of its status or metadata
    /// keeps them, and when they changed. Returns the source it versioned before.
    pub(super) fn record(&mut self, id: &SetId, set: SetRef<'_>) -> Option<String> {
        let previous = self.facts.get(id);
        let facts = match previous {
            // The same spec (only status or metadata moved): keep the facts and when they changed.
            Some(f) if f.generation == set.generation() && f.uid == set.uid() => f.clone(),
            _ => SetFacts::of(set, Instant::now()),
        };
        let tracked = set.rollout().is_some() || set.status().is_some_and(|s| s.rollout.is_some());
        if tracked {
            self.tracked.insert(id.clone());
        } else {
            self.tracked.remove(id);
        }
        self.facts.insert(id.clone(), facts).and_then(|f| f.source)
    }

    /// Forgets a deleted set; returns its facts.
    pub(super) fn remove(&mut self, id: &SetId) -> Option<SetFacts> {
        self.tracked.remove(id);
        self.tracked.shrink_if_sparse();
        let facts = self.facts.remove(id);
        self.facts.shrink_if_sparse();
        facts
    }

    /// The content of a source-mode set changed at `now` (the set controller read a new identity).
    pub(super) fn content_changed(&mut self, id: &SetId, now: Instant) {
        if let Some(facts) = self.facts.get_mut(id) {
            facts.changed_at = now;
        }
    }

    pub(super) fn get(&self, id: &SetId) -> Option<&SetFacts> {
        self.facts.get(id)
    }

    pub(super) fn contains(&self, id: &SetId) -> bool {
        self.facts.contains_key(id)
    }

    pub(super) fn is_tracked(&self, id: &SetId) -> bool {
        self.tracked.contains(id)
    }

    pub(super) fn len(&self) -> usize {
        self.facts.len()
    }

    /// The keys of every set of `kind`.
    pub(super) fn keys(&self, kind: SetKind) -> Vec<Key> {
        self.facts
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// Triggers every set in scope.
    pub(super) fn trigger_all(&self, out: &mut Triggers) {
        out.sets.extend(self.facts.keys().cloned());
    }

    /// Triggers the existing sets that `names` refer to.
    pub(super) fn trigger_named(&self, namespace: &str, names: &RefNames, out: &mut Triggers) {
        for set in candidates(namespace, names) {
            if self.contains(&set) {
                out.sets.insert(set);
            }
        }
    }
}
