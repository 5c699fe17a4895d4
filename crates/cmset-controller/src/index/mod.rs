//! The operator's index: what each reconcile needs, kept current by watch events, looked up by key.
//!
//! Every watched kind implements [`Indexed`] once, here: how one of its objects enters and leaves the
//! index, and which reconciles that change must trigger. Reconcilers and mappers then answer their
//! questions with map lookups whose cost grows with the objects that matter to one set or workload,
//! never with everything in the namespace:
//!
//! - set → its revisions ([`Index::revisions`]);
//! - set → the workloads and history objects (ReplicaSets, ControllerRevisions) that name it or one of
//!   its revisions ([`Index::readers`]), through [`naming::set_candidates`], so a ConfigMap name maps to
//!   its set in O(1);
//! - workload → the sets it reads ([`Index::sets_read`]);
//! - set → facts computed once per spec change ([`SetFacts`]: the content identity, whether the spec is
//!   valid, when it last changed), so a workload reconcile never hashes a set's content.
//!
//! Only keys and small views live here. Sets and workloads themselves stay in kube's reflector stores
//! (shared `Arc`s, which the controllers need anyway); revisions and history objects have no store at
//! all: the index keeps the few names a decision reads and drops the rest of the object.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use cmset_core::health::{Health, Wave};
use cmset_core::naming;
use cmset_core::observe::{HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind};
use cmset_core::refs::Referenced;
use cmset_core::set::{SetKind, SetRef};
use kube::Resource;
use kube::runtime::watcher;

mod kinds;
#[cfg(test)]
mod tests;
mod triggers;

pub use kinds::Indexed;
pub use triggers::{TriggerReceivers, TriggerSenders, Triggers, trigger_channels};

/// An object's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    fn of<K: Resource>(obj: &K) -> Option<Self> {
        Some(Self {
            namespace: obj.meta().namespace.clone()?,
            name: obj.meta().name.clone()?,
        })
    }
}

/// A set of either kind, by key: a ConfigMapSet and a SecretSet may share a name.
pub type SetId = (SetKind, Key);

/// Something that names ConfigMaps or Secrets in its pod template: an opted-in workload or a history
/// object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReaderKind {
    Workload(WorkloadKind),
    History(HistoryKind),
    /// A Pod made from a template cmset rewrote: it keeps the revisions it names in use (a Pod can
    /// outlive its ReplicaSet), but takes no part in any decision, so it triggers nothing.
    Pod,
}

/// What the index knows of a set beyond its object, computed once per change of its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetFacts {
    pub uid: String,
    pub generation: Option<i64>,
    /// Whether the spec is valid (if not, workloads stay on the last good revision).
    pub valid: bool,
    /// The content identity of a valid spec that holds its content itself. In source mode the
    /// identity is the source's, which the index learns when the set controller reads it
    /// ([`Index::source`]).
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
                .then(|| cmset_core::revision::inline_identity(set))
                .flatten(),
            source: set.source_name().map(str::to_string),
            label: naming::set_label_value(set.name()),
            changed_at,
        }
    }
}

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

/// Everything indexed, for all namespaces in scope.
#[derive(Default)]
pub struct State {
    sets: HashMap<SetId, SetFacts>,
    /// By (set kind, namespace, value of the `cmset.dev/set` label), then by revision name.
    revisions: HashMap<SetId, BTreeMap<String, Arc<RevisionView>>>,
    /// The label each revision was indexed under, by its kind and key.
    revision_labels: HashMap<(Referenced, Key), String>,
    history: HashMap<(HistoryKind, Key), Arc<HistoryObject>>,
    /// The ConfigMap and Secret names each reader's template names.
    reader_names: HashMap<(ReaderKind, Key), RefNames>,
    /// By (set kind, namespace, candidate set name): the readers naming it or one of its revisions.
    readers: HashMap<SetId, BTreeSet<(ReaderKind, String)>>,
    /// Each opted-in workload's rollout wave and health: a change matters to the rollouts of the
    /// sets it reads.
    progress: HashMap<(WorkloadKind, Key), (Wave, Health)>,
    /// Sets whose rollouts are tracked (`spec.rollout`, or a rollout recorded in their status): the
    /// health of their readers is watched for them.
    tracked: HashSet<SetId>,
    /// By source kind and key: the names of the sets in its namespace that version it.
    source_sets: HashMap<(Referenced, Key), BTreeSet<String>>,
    /// The resourceVersion the watch last saw of each source some set versions (`None`: deleted).
    source_versions: HashMap<(Referenced, Key), Option<String>>,
    /// What the set controller last read of each such source.
    source_reads: HashMap<(Referenced, Key), SourceRead>,
    /// Keys seen since a watch (re)started its list, by kind: what was not seen is gone.
    relisting: HashMap<&'static str, HashSet<Key>>,
    listed: HashSet<&'static str>,
}

impl State {
    /// Records which ConfigMaps and Secrets a reader names, and asks the sets it named before or names
    /// now to reconcile: their status and history protection depend on it.
    fn link_reader(&mut self, kind: ReaderKind, key: &Key, names: RefNames, out: &mut Triggers) {
        let previous = self.reader_names.remove(&(kind, key.clone())).unwrap_or_default();
        if previous == names {
            // A status update, a scale, a new image: nothing a set decides from changed.
            if !names.is_empty() {
                self.reader_names.insert((kind, key.clone()), names);
            }
            return;
        }
        for set in candidates(&key.namespace, &previous) {
            if let Some(readers) = self.readers.get_mut(&set) {
                readers.remove(&(kind, key.name.clone()));
                if readers.is_empty() {
                    self.readers.remove(&set);
                }
            }
        }
        for set in candidates(&key.namespace, &names) {
            self.readers
                .entry(set)
                .or_default()
                .insert((kind, key.name.clone()));
        }
        if kind != ReaderKind::Pod {
            self.trigger_sets_named(&key.namespace, &previous, out);
            self.trigger_sets_named(&key.namespace, &names, out);
        }
        if !names.is_empty() {
            self.reader_names.insert((kind, key.clone()), names);
        }
    }

    fn unlink_reader(&mut self, kind: ReaderKind, key: &Key, out: &mut Triggers) {
        self.link_reader(kind, key, RefNames::default(), out);
    }

    /// Records a workload's wave and health. A new wave concerns every set it reads (it may begin to
    /// take part in waves); a new health only the sets whose rollouts are tracked.
    fn workload_progress(
        &mut self,
        kind: WorkloadKind,
        key: &Key,
        progress: Option<(Wave, Health)>,
        out: &mut Triggers,
    ) {
        let slot = (kind, key.clone());
        let previous = match progress {
            Some(progress) => self.progress.insert(slot.clone(), progress),
            None => self.progress.remove(&slot),
        };
        let now = self.progress.get(&slot);
        if previous.as_ref() == now {
            return;
        }
        let wave_moved = previous.as_ref().map(|p| &p.0) != now.map(|p| &p.0);
        let Some(names) = self.reader_names.get(&(ReaderKind::Workload(kind), key.clone())) else {
            return;
        };
        for set in candidates(&key.namespace, names) {
            if self.sets.contains_key(&set) && (wave_moved || self.tracked.contains(&set)) {
                out.sets.insert(set);
            }
        }
    }

    /// Triggers the existing sets that `names` refer to.
    fn trigger_sets_named(&self, namespace: &str, names: &RefNames, out: &mut Triggers) {
        for set in candidates(namespace, names) {
            if self.sets.contains_key(&set) {
                out.sets.insert(set);
            }
        }
    }

    /// Triggers the workloads that read set `set`.
    fn trigger_readers(&self, set: &SetId, out: &mut Triggers) {
        for (kind, name) in self.readers.get(set).into_iter().flatten() {
            if let ReaderKind::Workload(kind) = kind {
                out.workloads.insert((*kind, Key::new(&set.1.namespace, name)));
            }
        }
    }

    /// The set a revision belongs to: its controller if that is a set of the revision's kind, else the
    /// set named by its label.
    fn set_of_revision(
        &self,
        kind: SetKind,
        namespace: &str,
        revision: &RevisionView,
        label: &str,
    ) -> Option<SetId> {
        let controller = revision
            .owner_references
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == kind.as_str())
            .map(|o| o.name.as_str());
        let id = (kind, Key::new(namespace, controller.unwrap_or(label)));
        self.sets.contains_key(&id).then_some(id)
    }

    /// Follows a set's source: from now on the watch's events for `new` trigger the set, and `old`'s
    /// no longer do (what was known of it is dropped once no set versions it).
    fn track_source(&mut self, set: &SetId, old: Option<&str>, new: Option<&str>) {
        if old == new {
            return;
        }
        let kind = set.0.revision_kind();
        if let Some(old) = old {
            let source = (kind, Key::new(&set.1.namespace, old));
            if let Some(sets) = self.source_sets.get_mut(&source) {
                sets.remove(&set.1.name);
                if sets.is_empty() {
                    self.source_sets.remove(&source);
                    self.source_versions.remove(&source);
                    self.source_reads.remove(&source);
                }
            }
        }
        if let Some(new) = new {
            self.source_sets
                .entry((kind, Key::new(&set.1.namespace, new)))
                .or_default()
                .insert(set.1.name.clone());
        }
    }

    /// The watch saw a ConfigMap or Secret at `version` (`None`: deleted). If a set versions it and the
    /// version moved, that set reconciles and reads it again.
    fn source_seen(&mut self, kind: Referenced, key: &Key, version: Option<String>, out: &mut Triggers) {
        let source = (kind, key.clone());
        let Some(sets) = self.source_sets.get(&source) else {
            return;
        };
        let set_kind = SetKind::of_revisions(kind);
        let ids: Vec<SetId> = sets
            .iter()
            .map(|name| (set_kind, Key::new(&key.namespace, name)))
            .collect();
        if self.source_versions.get(&source) == Some(&version) {
            return;
        }
        self.source_versions.insert(source, version);
        out.sets.extend(ids);
    }

    fn source_lookup(&self, kind: Referenced, key: &Key) -> SourceLookup {
        let source = (kind, key.clone());
        let Some(read) = self.source_reads.get(&source) else {
            return SourceLookup::Stale;
        };
        match self.source_versions.get(&source) {
            // The watch saw another version than the one read: read again.
            Some(seen) if *seen != read.version => SourceLookup::Stale,
            // Seen at that version, or not seen at all since the set began to version it (the read
            // came after the set was indexed, so it is at least as new as anything the watch dropped).
            _ => SourceLookup::Fresh(read.identity.clone()),
        }
    }
}

/// The sets `names` can refer to, by [`naming::set_candidates`]: ConfigMap names to ConfigMapSets,
/// Secret names to SecretSets.
fn candidates(namespace: &str, names: &RefNames) -> BTreeSet<SetId> {
    names
        .iter()
        .flat_map(|(kind, name)| {
            let set_kind = SetKind::of_revisions(kind);
            naming::set_candidates(name).map(move |set| (set_kind, Key::new(namespace, set)))
        })
        .collect()
}

/// The index of one scope, shared by its watches (writers) and its readers: the reconcilers on the
/// leader, and the admission webhook on every replica.
pub struct Index {
    state: RwLock<State>,
    senders: Option<TriggerSenders>,
    kinds: usize,
    /// Whether triggered reconciles are sent: only once this replica leads. A standby keeps its index
    /// warm and sends nothing.
    leading: AtomicBool,
    /// Counts every change applied, so that a reader can wait for the next one (admission waiting for
    /// a set created moments before to get its revision).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Index {
    /// An index fed by `kinds` watches, sending what they trigger to `senders` (none in tests that
    /// drive reconciles by hand).
    pub fn new(kinds: usize, senders: Option<TriggerSenders>) -> Self {
        Self {
            state: RwLock::new(State::default()),
            senders,
            kinds,
            leading: AtomicBool::new(false),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// From now on the reconciles that changes trigger are sent (this replica leads).
    pub fn lead(&self) {
        self.leading.store(true, Ordering::SeqCst);
    }

    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// A receiver that is told of every change applied to the index from now on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind, still consistent per entry.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event and sends the reconciles it triggers.
    pub fn handle<K: Indexed>(&self, event: &watcher::Event<K>) -> Triggers {
        let mut out = Triggers::default();
        {
            let mut state = self.write();
            match event {
                watcher::Event::Apply(obj) => {
                    if let Some(key) = Key::of(obj) {
                        obj.index(&key, &mut state, &mut out);
                    }
                }
                watcher::Event::Delete(obj) => {
                    if let Some(key) = Key::of(obj) {
                        K::unindex(&key, &mut state, &mut out);
                    }
                }
                watcher::Event::Init => {
                    state.relisting.insert(K::NAME, HashSet::new());
                }
                watcher::Event::InitApply(obj) => {
                    if let Some(key) = Key::of(obj) {
                        obj.index(&key, &mut state, &mut out);
                        state.relisting.entry(K::NAME).or_default().insert(key);
                    }
                }
                watcher::Event::InitDone => {
                    let seen = state.relisting.remove(K::NAME).unwrap_or_default();
                    for key in K::indexed_keys(&state) {
                        if !seen.contains(&key) {
                            K::unindex(&key, &mut state, &mut out);
                        }
                    }
                    state.listed.insert(K::NAME);
                }
            }
        }
        self.changed();
        self.send(&out);
        out
    }

    fn send(&self, out: &Triggers) {
        if let Some(senders) = self.senders.as_ref().filter(|_| self.is_leading()) {
            senders.send(out);
        }
    }

    /// Whether every watch has delivered its first full list.
    pub fn is_ready(&self) -> bool {
        self.read().listed.len() >= self.kinds
    }

    pub fn set_facts(&self, set: &SetId) -> Option<SetFacts> {
        self.read().sets.get(set).cloned()
    }

    /// The revisions labelled for the set of `kind` whose label value is `label`.
    pub fn revisions(&self, kind: SetKind, namespace: &str, label: &str) -> Vec<RevisionView> {
        self.read()
            .revisions
            .get(&(kind, Key::new(namespace, label)))
            .map(|r| r.values().map(|v| v.as_ref().clone()).collect())
            .unwrap_or_default()
    }

    /// The workloads and history objects that name set `set` or one of its revisions. (A reader is
    /// listed under every set its names could refer to; the planners look at the names themselves.)
    pub fn readers(&self, set: &SetId) -> Readers {
        let state = self.read();
        let mut readers = Readers::default();
        for (kind, name) in state.readers.get(set).into_iter().flatten() {
            match kind {
                ReaderKind::Workload(kind) => readers.workloads.push((*kind, name.clone())),
                ReaderKind::Pod => {}
                ReaderKind::History(kind) => {
                    let key = (*kind, Key::new(&set.1.namespace, name));
                    if let Some(h) = state.history.get(&key) {
                        readers.history.push(h.as_ref().clone());
                    }
                }
            }
        }
        readers
    }

    /// The names of objects of `kind` that the Pods listed under set `set` reference: a revision among
    /// them is in use.
    pub fn pod_refs(&self, set: &SetId, kind: Referenced) -> BTreeSet<String> {
        let state = self.read();
        state
            .readers
            .get(set)
            .into_iter()
            .flatten()
            .filter(|(reader, _)| *reader == ReaderKind::Pod)
            .filter_map(|(_, name)| {
                state
                    .reader_names
                    .get(&(ReaderKind::Pod, Key::new(&set.1.namespace, name)))
            })
            .flat_map(|names| names.get(kind).iter().cloned())
            .collect()
    }

    /// The lowest valid wave among the opted-in workloads that name set `set` or one of its revisions
    /// (0 when none has one).
    pub fn lowest_wave(&self, set: &SetId) -> i32 {
        let state = self.read();
        state
            .readers
            .get(set)
            .into_iter()
            .flatten()
            .filter_map(|(kind, name)| match kind {
                ReaderKind::Workload(kind) => state.progress.get(&(*kind, Key::new(&set.1.namespace, name))),
                ReaderKind::History(_) | ReaderKind::Pod => None,
            })
            .filter_map(|(wave, _)| wave.number())
            .min()
            .unwrap_or(0)
    }

    /// The existing sets that the ConfigMap and Secret names `names` refer to, with their facts.
    pub fn sets_read(&self, namespace: &str, names: &RefNames) -> Vec<(SetId, SetFacts)> {
        let state = self.read();
        candidates(namespace, names)
            .into_iter()
            .filter_map(|set| {
                let facts = state.sets.get(&set)?.clone();
                Some((set, facts))
            })
            .collect()
    }

    /// Whether a set of `namespace` claims `name`, a name of objects of kind `of`: its bare name or a
    /// name of its revisions' form (see [`naming::set_candidates`]).
    pub fn claims(&self, namespace: &str, of: Referenced, name: &str) -> bool {
        let state = self.read();
        let kind = SetKind::of_revisions(of);
        naming::set_candidates(name).any(|set| state.sets.contains_key(&(kind, Key::new(namespace, set))))
    }

    /// What is known of the content of source `name` of the sets of `kind` in `namespace`.
    pub fn source(&self, kind: SetKind, namespace: &str, name: &str) -> SourceLookup {
        self.read()
            .source_lookup(kind.revision_kind(), &Key::new(namespace, name))
    }

    /// Records what the set controller read of a source: its version and content identity (`None`:
    /// it does not exist). A read of a new version triggers the readers of the sets that version it: a
    /// workload may have waited for it (see `workload_controller`), and the content may have changed,
    /// in which case those sets also count as changed now.
    pub fn record_source(
        &self,
        kind: SetKind,
        namespace: &str,
        name: &str,
        version: Option<String>,
        identity: Option<String>,
    ) -> Triggers {
        let mut out = Triggers::default();
        {
            let mut state = self.write();
            let source = (kind.revision_kind(), Key::new(namespace, name));
            let Some(sets) = state.source_sets.get(&source).cloned() else {
                return out;
            };
            let read = SourceRead { version, identity };
            let previous = state.source_reads.insert(source, read.clone());
            if previous.as_ref() == Some(&read) {
                return out;
            }
            let content_changed = previous.is_none_or(|p| p.identity != read.identity);
            let now = Instant::now();
            for set in sets {
                let id = (kind, Key::new(namespace, &set));
                if let Some(facts) = state.sets.get_mut(&id).filter(|_| content_changed) {
                    facts.changed_at = now;
                }
                state.trigger_readers(&id, &mut out);
            }
        }
        self.changed();
        self.send(&out);
        out
    }

    /// Sizes of the index, for tests and the debug log.
    pub fn sizes(&self) -> BTreeMap<&'static str, usize> {
        let state = self.read();
        BTreeMap::from([
            ("sets", state.sets.len()),
            ("revisions", state.revision_labels.len()),
            ("readers", state.reader_names.len()),
            ("history", state.history.len()),
            ("sources", state.source_sets.len()),
        ])
    }
}

/// What reads one set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Readers {
    pub workloads: Vec<(WorkloadKind, String)>,
    pub history: Vec<HistoryObject>,
}
