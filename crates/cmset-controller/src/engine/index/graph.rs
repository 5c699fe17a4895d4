//! The reader graph: which ConfigMap and Secret names each reader (opted-in workload, history object)
//! names, the readers listed under every set those names can refer to, each workload's wave and
//! health, and the history objects' views.
//!
//! Written only by the watches of the readers' kinds: every kind its own entries ([`Graph::link`] by
//! all of them, [`Graph::progress`] by the workload watches, [`Graph::insert_history`] and
//! [`Graph::remove_history`] by the ReplicaSet and ControllerRevision watches).

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use cmset_core::revisions::naming;
use cmset_core::set::SetKind;
use cmset_core::workloads::health::{Health, Wave};
use cmset_core::workloads::observe::{HistoryKind, HistoryObject, RefNames, WorkloadKind};
use sha2::{Digest, Sha256};

use crate::engine::sparse::ShrinkIfSparse;

use super::sets::Sets;
use super::{Key, Readers, SetId, Triggers};

/// Something that names ConfigMaps or Secrets in its pod template: an opted-in workload or a history
/// object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReaderKind {
    Workload(WorkloadKind),
    History(HistoryKind),
}

/// The sets `names` can refer to, by [`naming::set_candidates`]: ConfigMap names to ConfigMapSets,
/// Secret names to SecretSets.
pub(super) fn candidates(namespace: &str, names: &RefNames) -> BTreeSet<SetId> {
    names
        .iter()
        .flat_map(|(kind, name)| {
            let set_kind = SetKind::of_revisions(kind);
            naming::set_candidates(name).map(move |set| (set_kind, Key::new(namespace, set)))
        })
        .collect()
}

#[derive(Default)]
pub(super) struct Graph {
    /// The ConfigMap and Secret names each reader's template names.
    names: HashMap<(ReaderKind, Key), RefNames>,
    /// By (set kind, namespace, candidate set name): the readers naming it or one of its revisions.
    readers: HashMap<SetId, ReaderList>,
    /// Each opted-in workload's rollout wave and health: a change matters to the rollouts of the
    /// sets it reads.
    progress: HashMap<(WorkloadKind, Key), (Wave, Health)>,
    history: HashMap<(HistoryKind, Key), Arc<HistoryObject>>,
    /// What each opted-in workload's own reconcile last planned from, as its watch saw it: its
    /// fingerprint, since this only ever answers whether that moved.
    planned_from: HashMap<(WorkloadKind, Key), Fingerprint>,
}

/// The readers listed under one candidate set, sorted and without repeats. Most sets have one reader
/// and its history object under each of their two candidate names, and a `BTreeSet` allocates a whole
/// node (368 B) for one entry, where this holds exactly the entries (`examples/index_footprint.rs`).
/// Inserting and removing move the entries after the place: cheap at the tens of readers a set has,
/// linear at worst.
#[derive(Debug, Default)]
struct ReaderList(Vec<(ReaderKind, String)>);

/// Up to this many readers a list grows one at a time; beyond, as a `Vec` does.
const EXACT_UP_TO: usize = 4;

impl ReaderList {
    fn insert(&mut self, kind: ReaderKind, name: &str) {
        if let Err(at) = self.find(kind, name) {
            if self.0.len() == self.0.capacity() && self.0.len() < EXACT_UP_TO {
                // Most lists hold a workload and its newest history object: room for exactly those,
                // not the four a push reserves.
                self.0.reserve_exact(1);
            }
            self.0.insert(at, (kind, name.to_string()));
        }
    }

    fn remove(&mut self, kind: ReaderKind, name: &str) {
        if let Ok(at) = self.find(kind, name) {
            self.0.remove(at);
            self.0.shrink_if_sparse();
        }
    }

    fn find(&self, kind: ReaderKind, name: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|(k, n)| (*k, n.as_str()).cmp(&(kind, name)))
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn iter(&self) -> impl Iterator<Item = &(ReaderKind, String)> {
        self.0.iter()
    }
}

/// What of a workload its own reconcile plans from, beyond the sets it reads: the names its pod
/// template references and the template's labels (the rest of the spec never moves a reference), its
/// labels (opt-in, wave, move mark), its annotations (cmset's hold), whether it is being deleted, and
/// its health while a rollout budget reads it.
#[derive(Debug, Hash)]
pub(in crate::engine::index) struct PlannedFrom {
    pub references: RefNames,
    pub template_labels: std::collections::BTreeMap<String, String>,
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
    pub deleting: bool,
    pub health: Option<Health>,
}

/// The first 16 bytes of the SHA-256 of a [`PlannedFrom`]. Kept whole, its references and its two
/// label maps held three B-tree nodes per workload: with its table entry 1.9 KiB, an eighth of the
/// heap a set read by one Deployment cost at 1,000 sets (a dhat profile; the entry is now 0.16 KiB),
/// where the only question asked of it is whether it moved.
type Fingerprint = [u8; 16];

impl PlannedFrom {
    fn fingerprint(&self) -> Fingerprint {
        let mut hasher = Fingerprinter(Sha256::new());
        // `Hash` writes every string with a terminator and every collection and option with its
        // length or variant first, so two values that differ never write the same bytes.
        self.hash(&mut hasher);
        let digest = hasher.0.finalize();
        let mut fingerprint = Fingerprint::default();
        let len = fingerprint.len();
        fingerprint.copy_from_slice(&digest[..len]);
        fingerprint
    }
}

/// Feeds what `Hash` writes into SHA-256.
struct Fingerprinter(Sha256);

impl Hasher for Fingerprinter {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    /// Not asked for: the digest is read from the SHA-256 itself.
    fn finish(&self) -> u64 {
        0
    }
}

impl Graph {
    /// Records which ConfigMaps and Secrets a reader names (none: it is gone), and asks the sets it
    /// named before or names now to reconcile: their status and history protection depend on it.
    pub(super) fn link(
        &mut self,
        kind: ReaderKind,
        key: &Key,
        names: RefNames,
        sets: &Sets,
        out: &mut Triggers,
    ) {
        let previous = self.names.remove(&(kind, key.clone())).unwrap_or_default();
        if previous == names {
            // A status update, a scale, a new image: nothing a set decides from changed.
            if !names.is_empty() {
                self.names.insert((kind, key.clone()), names);
            }
            return;
        }
        for set in candidates(&key.namespace, &previous) {
            if let Some(readers) = self.readers.get_mut(&set) {
                readers.remove(kind, &key.name);
                if readers.is_empty() {
                    self.readers.remove(&set);
                }
            }
        }
        for set in candidates(&key.namespace, &names) {
            self.readers.entry(set).or_default().insert(kind, &key.name);
        }
        sets.trigger_named(&key.namespace, &previous, out);
        sets.trigger_named(&key.namespace, &names, out);
        if !names.is_empty() {
            self.names.insert((kind, key.clone()), names);
        }
        self.names.shrink_if_sparse();
        self.readers.shrink_if_sparse();
    }

    /// Records a workload's wave and health (none: it is gone or not opted in). A new wave concerns
    /// every set it reads (it may begin to take part in waves); a new health only the sets whose
    /// rollouts are tracked.
    pub(super) fn progress(
        &mut self,
        kind: WorkloadKind,
        key: &Key,
        progress: Option<(Wave, Health)>,
        sets: &Sets,
        out: &mut Triggers,
    ) {
        let slot = (kind, key.clone());
        let previous = match progress {
            Some(progress) => self.progress.insert(slot.clone(), progress),
            None => {
                let removed = self.progress.remove(&slot);
                self.progress.shrink_if_sparse();
                removed
            }
        };
        let now = self.progress.get(&slot);
        if previous.as_ref() == now {
            return;
        }
        let wave_moved = previous.as_ref().map(|p| &p.0) != now.map(|p| &p.0);
        let Some(names) = self.names.get(&(ReaderKind::Workload(kind), key.clone())) else {
            return;
        };
        for set in candidates(&key.namespace, names) {
            if sets.contains(&set) && (wave_moved || sets.is_tracked(&set)) {
                out.sets.insert(set);
            }
        }
    }

    /// The names reader `key` of `kind` names, as indexed.
    pub(super) fn names(&self, kind: ReaderKind, key: &Key) -> Option<&RefNames> {
        self.names.get(&(kind, key.clone()))
    }

    /// Records what workload `key` of `kind` plans from now (`None`: it is gone); whether that moved.
    pub(super) fn planned_from(&mut self, kind: WorkloadKind, key: &Key, now: Option<PlannedFrom>) -> bool {
        let slot = (kind, key.clone());
        let now = now.as_ref().map(PlannedFrom::fingerprint);
        let before = match now {
            Some(now) => self.planned_from.insert(slot, now),
            None => {
                let removed = self.planned_from.remove(&slot);
                self.planned_from.shrink_if_sparse();
                removed
            }
        };
        before != now
    }

    /// Asks the sets `kind` `key` names to reconcile.
    pub(super) fn trigger_sets_read(&self, kind: ReaderKind, key: &Key, sets: &Sets, out: &mut Triggers) {
        if let Some(names) = self.names.get(&(kind, key.clone())) {
            sets.trigger_named(&key.namespace, names, out);
        }
    }

    pub(super) fn insert_history(&mut self, kind: HistoryKind, key: &Key, view: HistoryObject) {
        self.history.insert((kind, key.clone()), Arc::new(view));
    }

    pub(super) fn remove_history(&mut self, kind: HistoryKind, key: &Key) {
        self.history.remove(&(kind, key.clone()));
        self.history.shrink_if_sparse();
    }

    /// Triggers the workloads that read set `set`.
    pub(super) fn trigger_readers(&self, set: &SetId, out: &mut Triggers) {
        for (kind, name) in self.readers.get(set).into_iter().flat_map(ReaderList::iter) {
            if let ReaderKind::Workload(kind) = kind {
                out.workloads.insert((*kind, Key::new(&set.1.namespace, name)));
            }
        }
    }

    fn readers_of<'a>(&'a self, set: &'a SetId) -> impl Iterator<Item = (ReaderKind, Key)> + 'a {
        self.readers
            .get(set)
            .into_iter()
            .flat_map(ReaderList::iter)
            .map(|(kind, name)| (*kind, Key::new(&set.1.namespace, name)))
    }

    /// The workloads and history objects listed under set `set`.
    pub(super) fn readers(&self, set: &SetId) -> Readers {
        let mut readers = Readers::default();
        for (kind, key) in self.readers_of(set) {
            match kind {
                ReaderKind::Workload(kind) => readers.workloads.push((kind, key.name.into())),
                ReaderKind::History(kind) => {
                    if let Some(h) = self.history.get(&(kind, key)) {
                        readers.history.push(h.as_ref().clone());
                    }
                }
            }
        }
        readers
    }

    /// The lowest valid wave among the workloads listed under set `set` (0 when none has one).
    pub(super) fn lowest_wave(&self, set: &SetId) -> i32 {
        self.readers_of(set)
            .filter_map(|(kind, key)| match kind {
                ReaderKind::Workload(kind) => self.progress.get(&(kind, key)),
                ReaderKind::History(_) => None,
            })
            .filter_map(|(wave, _)| wave.number())
            .min()
            .unwrap_or(0)
    }

    /// The keys of every reader of `kind`.
    pub(super) fn keys(&self, kind: ReaderKind) -> Vec<Key> {
        self.names
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// The keys of every history object of `kind`.
    pub(super) fn history_keys(&self, kind: HistoryKind) -> Vec<Key> {
        self.history
            .keys()
            .filter(|(k, _)| *k == kind)
            .map(|(_, key)| key.clone())
            .collect()
    }

    /// How many readers and history objects are indexed.
    pub(super) fn sizes(&self) -> (usize, usize) {
        (self.names.len(), self.history.len())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn planned(config_map: &str, template_labels: &[(&str, &str)], own: &[(&str, &str)]) -> PlannedFrom {
        PlannedFrom {
            references: RefNames {
                config_maps: [config_map.to_string()].into(),
                secrets: Default::default(),
            },
            template_labels: labels(template_labels),
            labels: Some(labels(own)),
            annotations: None,
            deleting: false,
            health: None,
        }
    }

    #[test]
    fn a_reader_list_is_sorted_without_repeats_and_holds_one_reader_in_room_for_one() {
        let deployment = ReaderKind::Workload(WorkloadKind::Deployment);
        let replica_set = ReaderKind::History(HistoryKind::ReplicaSet);
        let mut list = ReaderList::default();
        list.insert(replica_set, "web-5d9f");
        assert_eq!(list.0.capacity(), 1);
        for (kind, name) in [
            (deployment, "web"),
            (replica_set, "web-5d9f"),
            (deployment, "api"),
        ] {
            list.insert(kind, name);
        }
        let listed: Vec<_> = list.iter().map(|(k, n)| (*k, n.as_str())).collect();
        assert_eq!(
            listed,
            [
                (deployment, "api"),
                (deployment, "web"),
                (replica_set, "web-5d9f")
            ]
        );
        list.remove(deployment, "web");
        list.remove(deployment, "absent");
        let listed: Vec<_> = list.iter().map(|(k, n)| (*k, n.as_str())).collect();
        assert_eq!(listed, [(deployment, "api"), (replica_set, "web-5d9f")]);
        list.remove(deployment, "api");
        list.remove(replica_set, "web-5d9f");
        assert!(list.is_empty());
    }

    #[test]
    fn what_a_workload_planned_from_is_kept_as_a_fingerprint_that_moves_with_it() {
        let mut graph = Graph::default();
        let key = Key::new("ns", "app");
        let kind = WorkloadKind::Deployment;
        let first = || {
            planned(
                "app-config-abc",
                &[("app", "web")],
                &[("cmset.dev/enabled", "true")],
            )
        };
        assert!(graph.planned_from(kind, &key, Some(first())), "first seen");
        assert!(!graph.planned_from(kind, &key, Some(first())), "the same again");
        let renamed = planned(
            "app-config-def",
            &[("app", "web")],
            &[("cmset.dev/enabled", "true")],
        );
        assert!(
            graph.planned_from(kind, &key, Some(renamed)),
            "another revision named"
        );
        assert!(graph.planned_from(kind, &key, Some(first())), "back");
        // A label moved from the template to the workload itself is a change, not the same bytes.
        let moved = planned(
            "app-config-abc",
            &[],
            &[("app", "web"), ("cmset.dev/enabled", "true")],
        );
        assert!(graph.planned_from(kind, &key, Some(moved)));
        let mut healthy = first();
        healthy.health = Some(Health::Healthy);
        assert!(graph.planned_from(kind, &key, Some(first())));
        assert!(
            graph.planned_from(kind, &key, Some(healthy)),
            "its health, when a budget reads it"
        );
        let mut failed = first();
        failed.health = Some(Health::Failed("stuck".into()));
        assert!(graph.planned_from(kind, &key, Some(failed)));
        assert!(graph.planned_from(kind, &key, None), "gone");
        assert!(!graph.planned_from(kind, &key, None), "gone already");
        assert!(graph.planned_from.is_empty());
    }
}
