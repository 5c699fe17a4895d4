//! What the plugin knows of a set, read from the set and the revisions it lists: its revisions' names
//! and numbers, and the set as the workload controller observes it, which cmset's decision
//! ([`cmset_core::rollout::decide::target`]) is made from. Also the few facts every part of the report reads of
//! a workload: whether it opted in, its wave, and which of its references are the set's.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::labels;
use cmset_core::revisions::naming::refers_to_set;
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::decide::{Identity, Observed};
use cmset_core::set::SetRef;
use cmset_core::workloads::health::Wave;
use cmset_core::workloads::observe::RevisionView;
use cmset_core::workloads::refs::{Referenced, find_refs_to};
use k8s_openapi::api::core::v1::PodSpec;

use super::Workload;
use crate::revisions::Revision;

/// What the plugin knows about the set: its revisions' names and numbers, and what cmset's decision
/// ([`cmset_core::rollout::decide::target`]) is made from.
pub(super) struct Known {
    pub(super) set: String,
    /// The kind of the set's revisions, so of the references that can be the set's.
    pub(super) kind: Referenced,
    numbers: BTreeMap<String, Option<i64>>,
    /// What is known of the content of the set's spec: its identity when the set holds its content,
    /// what the status records in source mode (the plugin does not read the source).
    identity: Option<String>,
    valid: bool,
    /// The revisions listed, as the controller observes them.
    views: Vec<RevisionView>,
    /// The lowest wave among the opted-in workloads that reference the set.
    lowest_wave: i32,
}

impl Known {
    pub(super) fn new(set: SetRef<'_>, revisions: &[Revision<'_>]) -> Self {
        let mut numbers: BTreeMap<String, Option<i64>> = BTreeMap::new();
        if let Some(status) = set.status() {
            for h in &status.history {
                numbers.insert(h.name.clone(), Some(h.revision));
            }
            if let Some(current) = &status.current_revision {
                numbers.insert(current.clone(), status.revision);
            }
        }
        // The revisions themselves are the most direct record of their numbers.
        for r in revisions {
            numbers.insert(r.name.clone(), r.number);
        }
        let views = revisions
            .iter()
            .map(|r| RevisionView {
                name: r.name.clone(),
                uid: r.meta.uid.clone().unwrap_or_default(),
                labels: r.meta.labels.clone().unwrap_or_default(),
                annotations: r.meta.annotations.clone().unwrap_or_default(),
                owner_references: r.meta.owner_references.clone().unwrap_or_default(),
                being_deleted: r.meta.deletion_timestamp.is_some(),
                created: r.meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
                resource_version: r.meta.resource_version.clone(),
            })
            .collect();
        Self {
            set: set.name().to_string(),
            kind: set.kind().revision_kind(),
            numbers,
            identity: inline_identity(set),
            valid: set.validate().is_ok(),
            views,
            lowest_wave: 0,
        }
    }

    /// With the lowest wave among `workloads` that reference the set and are opted in.
    pub(super) fn reading(mut self, workloads: &[Workload]) -> Self {
        self.lowest_wave = workloads
            .iter()
            .filter(|w| opted_in(w) && !set_references(w.pod_spec.as_ref(), &self).is_empty())
            .filter_map(|w| wave_of(w).number())
            .min()
            .unwrap_or(0);
        self
    }

    /// The set as the workload controller observes it.
    pub(super) fn observed<'a>(&'a self, set: SetRef<'a>) -> Observed<'a> {
        Observed {
            set,
            identity_generation: set.generation(),
            identity: match &self.identity {
                _ if !self.valid => Identity::Invalid,
                Some(identity) => Identity::Known(identity),
                None => Identity::Recorded,
            },
            revisions: &self.views,
            lowest_wave: self.lowest_wave,
            // The windows as the controller last judged them (the plugin does not evaluate them here),
            // less a WindowOverride it let the rollout through by since.
            window_held: set.status().and_then(|s| s.rollout.as_ref()).is_some_and(|r| {
                r.phase == cmset_api::RolloutPhase::Waiting
                    && cmset_core::policy::break_glass::granted(set).is_none()
            }),
            window_override: None,
        }
    }

    /// Whether a reference (of the set's revision kind) to `name` is a reference to the set: its bare
    /// name or one of its revisions (including one that no longer exists), by cmset's one rule,
    /// [`refers_to_set`].
    fn claims(&self, name: &str) -> bool {
        refers_to_set(&self.set, name)
    }

    pub(super) fn number(&self, name: &str) -> Option<i64> {
        self.numbers.get(name).copied().flatten()
    }
}

pub(super) fn opted_in(workload: &Workload) -> bool {
    workload.labels.get(labels::ENABLED).map(String::as_str) == Some(labels::ENABLED_VALUE)
}

pub(super) fn wave_of(workload: &Workload) -> Wave {
    Wave::parse(workload.labels.get(labels::WAVE).map(String::as_str))
}

/// The names through which `spec` references the set, in [`find_refs_to`] order, without repeats: only
/// references of the set's revision kind count.
pub(super) fn set_references(spec: Option<&PodSpec>, known: &Known) -> Vec<String> {
    let mut seen = BTreeSet::new();
    spec.map(|spec| find_refs_to(spec, known.kind))
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| known.claims(n) && seen.insert(n.clone()))
        .collect()
}

pub(super) fn revision_phrase(number: Option<i64>, name: &str) -> String {
    match number {
        Some(n) => format!("revision {n}"),
        None => name.to_string(),
    }
}
