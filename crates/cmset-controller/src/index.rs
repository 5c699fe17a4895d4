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

use cmset_api::{ConfigMapSet, SecretSet, labels};
use cmset_core::health::{Health, Wave};
use cmset_core::naming;
use cmset_core::observe::{HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind};
use cmset_core::refs::Referenced;
use cmset_core::set::{SetKind, SetRef};
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::views::{self, Workload};

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

/// Reconciles a change asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Triggers {
    pub sets: BTreeSet<SetId>,
    pub workloads: BTreeSet<(WorkloadKind, Key)>,
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

/// A kind the operator watches: its watch, and how its objects enter and leave the index.
pub trait Indexed:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Names the kind in logs and relist bookkeeping.
    const NAME: &'static str;

    /// The label selector of its watch: as narrow as cmset's job allows.
    fn selector() -> Option<String>;

    /// Drops what no decision reads, before the object is cached or indexed.
    fn slim(&mut self) {
        self.meta_mut().managed_fields = None;
        if let Some(a) = self.meta_mut().annotations.as_mut() {
            a.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers);
    fn unindex(key: &Key, state: &mut State, out: &mut Triggers);
    /// Every key of this kind in the index (read only when a watch relists).
    fn indexed_keys(state: &State) -> Vec<Key>;
}

/// The sets of both kinds: kept whole in a store; the index keeps their facts and follows their
/// sources.
macro_rules! indexed_set {
    ($set:ty, $kind:expr) => {
        impl Indexed for $set {
            const NAME: &'static str = stringify!($set);

            fn selector() -> Option<String> {
                None
            }

            fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
                let id: SetId = ($kind, key.clone());
                let previous = state.sets.get(&id).cloned();
                let facts = match previous.as_ref() {
                    // The same spec (only status or metadata moved): keep the facts and when they
                    // changed.
                    Some(f)
                        if f.generation == self.metadata.generation
                            && f.uid == self.uid().unwrap_or_default() =>
                    {
                        f.clone()
                    }
                    _ => SetFacts::of(SetRef::from(self), Instant::now()),
                };
                let old_source = previous.and_then(|f| f.source);
                state.track_source(&id, old_source.as_deref(), facts.source.as_deref());
                state.sets.insert(id.clone(), facts);
                let tracked =
                    self.spec.rollout.is_some() || self.status.as_ref().is_some_and(|s| s.rollout.is_some());
                if tracked {
                    state.tracked.insert(id.clone());
                } else {
                    state.tracked.remove(&id);
                }
                state.trigger_readers(&id, out);
            }

            fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
                let id: SetId = ($kind, key.clone());
                if let Some(facts) = state.sets.remove(&id) {
                    state.track_source(&id, facts.source.as_deref(), None);
                }
                state.tracked.remove(&id);
                state.trigger_readers(&id, out);
            }

            fn indexed_keys(state: &State) -> Vec<Key> {
                state
                    .sets
                    .keys()
                    .filter(|(kind, _)| *kind == $kind)
                    .map(|(_, key)| key.clone())
                    .collect()
            }
        }
    };
}

indexed_set!(ConfigMapSet, SetKind::ConfigMapSet);
indexed_set!(SecretSet, SetKind::SecretSet);

/// ConfigMaps and Secrets, watched metadata-only and without a selector: a revision is recognised by
/// its `cmset.dev/set` label, a source by its name (sources are other tools' objects, which cmset
/// never labels). Nothing is stored: the index keeps the revisions' metadata and the versions of the
/// sources some set versions, and lets every other object pass.
macro_rules! indexed_revision_or_source {
    ($object:ty, $kind:expr, $name:literal) => {
        impl Indexed for PartialObjectMeta<$object> {
            const NAME: &'static str = $name;

            fn selector() -> Option<String> {
                None
            }

            fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
                unindex_revision($kind, key, state, out);
                if let Some(label) = self.labels().get(labels::SET).cloned() {
                    index_revision($kind, key, views::revision_view(self), label, state, out);
                }
                state.source_seen($kind, key, self.resource_version(), out);
            }

            fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
                unindex_revision($kind, key, state, out);
                state.source_seen($kind, key, None, out);
            }

            fn indexed_keys(state: &State) -> Vec<Key> {
                let revisions = state
                    .revision_labels
                    .keys()
                    .filter(|(kind, _)| *kind == $kind)
                    .map(|(_, key)| key.clone());
                let sources = state
                    .source_versions
                    .iter()
                    .filter(|((kind, _), version)| *kind == $kind && version.is_some())
                    .map(|((_, key), _)| key.clone());
                revisions
                    .chain(sources)
                    .collect::<BTreeSet<Key>>()
                    .into_iter()
                    .collect()
            }
        }
    };
}

indexed_revision_or_source!(ConfigMap, Referenced::ConfigMap, "ConfigMap");
indexed_revision_or_source!(Secret, Referenced::Secret, "Secret");

fn index_revision(
    kind: Referenced,
    key: &Key,
    view: RevisionView,
    label: String,
    state: &mut State,
    out: &mut Triggers,
) {
    let set_kind = SetKind::of_revisions(kind);
    let view = Arc::new(view);
    if let Some(set) = state.set_of_revision(set_kind, &key.namespace, &view, &label) {
        state.trigger_readers(&set, out);
        out.sets.insert(set);
    }
    state
        .revisions
        .entry((set_kind, Key::new(&key.namespace, &label)))
        .or_default()
        .insert(key.name.clone(), view);
    state.revision_labels.insert((kind, key.clone()), label);
}

fn unindex_revision(kind: Referenced, key: &Key, state: &mut State, out: &mut Triggers) {
    let Some(label) = state.revision_labels.remove(&(kind, key.clone())) else {
        return;
    };
    let set_kind = SetKind::of_revisions(kind);
    let by_label = (set_kind, Key::new(&key.namespace, &label));
    let Some(revisions) = state.revisions.get_mut(&by_label) else {
        return;
    };
    let removed = revisions.remove(&key.name);
    if let Some(set) = removed.and_then(|view| state.set_of_revision(set_kind, &key.namespace, &view, &label))
    {
        state.trigger_readers(&set, out);
        out.sets.insert(set);
    }
    if state.revisions.get(&by_label).is_some_and(BTreeMap::is_empty) {
        state.revisions.remove(&by_label);
    }
}

fn workload_keys(state: &State, kind: WorkloadKind) -> Vec<Key> {
    state
        .reader_names
        .keys()
        .filter(|(k, _)| *k == ReaderKind::Workload(kind))
        .map(|(_, key)| key.clone())
        .collect()
}

/// Opted-in workloads: only the references of their pod template are kept (see
/// [`cmset_core::slim`]); the store keeps the slim object for the controller keyed by it.
macro_rules! indexed_workload {
    ($kind:ty, $name:literal) => {
        impl Indexed for $kind {
            const NAME: &'static str = $name;

            fn selector() -> Option<String> {
                Some(format!("{}={}", labels::ENABLED, labels::ENABLED_VALUE))
            }

            fn slim(&mut self) {
                self.metadata.managed_fields = None;
                // Of its annotations only cmset's hold is read; `rollout undo` history lives elsewhere.
                if let Some(a) = self.metadata.annotations.as_mut() {
                    a.retain(|k, _| k == cmset_core::hold::HELD_SINCE);
                }
                if self
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.is_empty())
                {
                    self.metadata.annotations = None;
                }
                if let Some(pod) = self.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
                    *pod = cmset_core::slim::references_only(pod);
                }
            }

            fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
                let kind = <$kind as Workload>::KIND;
                let view = views::opted_in(self)
                    .then(|| views::workload_view(self))
                    .flatten();
                let names = view.as_ref().map(|v| v.referenced()).unwrap_or_default();
                state.link_reader(ReaderKind::Workload(kind), key, names, out);
                let progress = view.map(|v| (v.wave, v.health));
                state.workload_progress(kind, key, progress, out);
            }

            fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
                let kind = <$kind as Workload>::KIND;
                state.workload_progress(kind, key, None, out);
                state.unlink_reader(ReaderKind::Workload(kind), key, out);
            }

            fn indexed_keys(state: &State) -> Vec<Key> {
                workload_keys(state, <$kind as Workload>::KIND)
            }
        }
    };
}

indexed_workload!(Deployment, "Deployment");
indexed_workload!(StatefulSet, "StatefulSet");
indexed_workload!(DaemonSet, "DaemonSet");

fn index_history(
    view: Option<HistoryObject>,
    kind: HistoryKind,
    key: &Key,
    state: &mut State,
    out: &mut Triggers,
) {
    let Some(view) = view else {
        unindex_history(kind, key, state, out);
        return;
    };
    state.link_reader(ReaderKind::History(kind), key, view.referenced.clone(), out);
    state.history.insert((kind, key.clone()), Arc::new(view));
}

fn unindex_history(kind: HistoryKind, key: &Key, state: &mut State, out: &mut Triggers) {
    state.history.remove(&(kind, key.clone()));
    state.unlink_reader(ReaderKind::History(kind), key, out);
}

fn history_keys(state: &State, kind: HistoryKind) -> Vec<Key> {
    state
        .history
        .keys()
        .filter(|(k, _)| *k == kind)
        .map(|(_, key)| key.clone())
        .collect()
}

fn managed_selector() -> Option<String> {
    Some(format!("{}=true", labels::MANAGED_TEMPLATE))
}

/// ReplicaSets of rewritten templates: reduced to the names they reference; never cached whole.
impl Indexed for ReplicaSet {
    const NAME: &'static str = "ReplicaSet";

    fn selector() -> Option<String> {
        managed_selector()
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index_history(
            views::replica_set_view(self),
            HistoryKind::ReplicaSet,
            key,
            state,
            out,
        );
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex_history(HistoryKind::ReplicaSet, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        history_keys(state, HistoryKind::ReplicaSet)
    }
}

/// ControllerRevisions of rewritten templates (StatefulSets, DaemonSets), reduced likewise.
impl Indexed for ControllerRevision {
    const NAME: &'static str = "ControllerRevision";

    fn selector() -> Option<String> {
        managed_selector()
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index_history(
            views::controller_revision_view(self),
            HistoryKind::ControllerRevision,
            key,
            state,
            out,
        );
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex_history(HistoryKind::ControllerRevision, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        history_keys(state, HistoryKind::ControllerRevision)
    }
}

/// Pods of rewritten templates: reduced to the names they reference, so that a revision a running Pod
/// names is never pruned (answered here instead of by listing the namespace's Pods at each prune).
impl Indexed for Pod {
    const NAME: &'static str = "Pod";

    fn selector() -> Option<String> {
        managed_selector()
    }

    fn slim(&mut self) {
        let spec = self.spec.as_ref().map(cmset_core::slim::references_only);
        *self = Pod {
            metadata: ObjectMeta {
                name: self.metadata.name.take(),
                namespace: self.metadata.namespace.take(),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        };
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        let names = self.spec.as_ref().map(RefNames::of).unwrap_or_default();
        state.link_reader(ReaderKind::Pod, key, names, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        state.unlink_reader(ReaderKind::Pod, key, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state
            .reader_names
            .keys()
            .filter(|(k, _)| *k == ReaderKind::Pod)
            .map(|(_, key)| key.clone())
            .collect()
    }
}

fn send_to<K: Resource<DynamicType = ()>>(queue: &UnboundedSender<ObjectRef<K>>, key: &Key) -> bool {
    queue
        .unbounded_send(ObjectRef::new(&key.name).within(&key.namespace))
        .is_ok()
}

/// Where triggered reconciles go: one queue per controller.
#[derive(Clone)]
pub struct TriggerSenders {
    pub sets: UnboundedSender<ObjectRef<ConfigMapSet>>,
    pub secret_sets: UnboundedSender<ObjectRef<SecretSet>>,
    pub deployments: UnboundedSender<ObjectRef<Deployment>>,
    pub statefulsets: UnboundedSender<ObjectRef<StatefulSet>>,
    pub daemonsets: UnboundedSender<ObjectRef<DaemonSet>>,
}

/// The receiving ends, for [`kube::runtime::Controller::reconcile_on`].
pub struct TriggerReceivers {
    pub sets: UnboundedReceiver<ObjectRef<ConfigMapSet>>,
    pub secret_sets: UnboundedReceiver<ObjectRef<SecretSet>>,
    pub deployments: UnboundedReceiver<ObjectRef<Deployment>>,
    pub statefulsets: UnboundedReceiver<ObjectRef<StatefulSet>>,
    pub daemonsets: UnboundedReceiver<ObjectRef<DaemonSet>>,
}

pub fn trigger_channels() -> (TriggerSenders, TriggerReceivers) {
    let (sets, sets_rx) = unbounded();
    let (secret_sets, secret_sets_rx) = unbounded();
    let (deployments, deployments_rx) = unbounded();
    let (statefulsets, statefulsets_rx) = unbounded();
    let (daemonsets, daemonsets_rx) = unbounded();
    (
        TriggerSenders {
            sets,
            secret_sets,
            deployments,
            statefulsets,
            daemonsets,
        },
        TriggerReceivers {
            sets: sets_rx,
            secret_sets: secret_sets_rx,
            deployments: deployments_rx,
            statefulsets: statefulsets_rx,
            daemonsets: daemonsets_rx,
        },
    )
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
        let Some(senders) = self.senders.as_ref().filter(|_| self.is_leading()) else {
            return;
        };
        for (kind, key) in &out.sets {
            match kind {
                SetKind::ConfigMapSet => send_to(&senders.sets, key),
                SetKind::SecretSet => send_to(&senders.secret_sets, key),
            };
        }
        for (kind, key) in &out.workloads {
            // A closed queue means its controller stopped (shutdown): nothing left to trigger.
            let sent = match kind {
                WorkloadKind::Deployment => send_to(&senders.deployments, key),
                WorkloadKind::StatefulSet => send_to(&senders.statefulsets, key),
                WorkloadKind::DaemonSet => send_to(&senders.daemonsets, key),
            };
            if !sent {
                tracing::debug!(%kind, "trigger queue closed");
            }
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

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSetSpec, ConfigMapTemplate};
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    const NS: &str = "team";

    fn index() -> Index {
        Index::new(7, None)
    }

    fn set(name: &str, generation: i64) -> ConfigMapSet {
        let mut set = ConfigMapSet::new(
            name,
            ConfigMapSetSpec {
                template: ConfigMapTemplate {
                    data: Some(BTreeMap::from([("K".to_string(), generation.to_string())])),
                    ..ConfigMapTemplate::default()
                },
                revision_history_limit: 10,
                rollout: None,
                config_map_name: None,
            },
        );
        set.metadata.namespace = Some(NS.into());
        set.metadata.uid = Some(format!("uid-{name}"));
        set.metadata.generation = Some(generation);
        set
    }

    fn deployment(name: &str, reads: &[&str]) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                uid: Some(format!("uid-{name}")),
                labels: Some(BTreeMap::from([(labels::ENABLED.into(), "true".into())])),
                ..ObjectMeta::default()
            },
            spec: Some(DeploymentSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "app".into(),
                            env_from: Some(
                                reads
                                    .iter()
                                    .map(|r| EnvFromSource {
                                        config_map_ref: Some(ConfigMapEnvSource {
                                            name: r.to_string(),
                                            optional: None,
                                        }),
                                        ..EnvFromSource::default()
                                    })
                                    .collect(),
                            ),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }

    fn revision(set: &str, name: &str) -> PartialObjectMeta<ConfigMap> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                labels: Some(BTreeMap::from([(labels::SET.into(), set.into())])),
                owner_references: Some(vec![OwnerReference {
                    api_version: "cmset.dev/v1alpha1".into(),
                    kind: "ConfigMapSet".into(),
                    name: set.into(),
                    uid: format!("uid-{set}"),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..ObjectMeta::default()
            },
            _phantom: Default::default(),
        }
    }

    fn key(name: &str) -> Key {
        Key::new(NS, name)
    }

    fn cms(name: &str) -> SetId {
        (SetKind::ConfigMapSet, key(name))
    }

    fn workloads(keys: &[&str]) -> BTreeSet<(WorkloadKind, Key)> {
        keys.iter().map(|k| (WorkloadKind::Deployment, key(k))).collect()
    }

    #[test]
    fn a_set_change_triggers_exactly_the_workloads_that_read_it() {
        let index = index();
        index.handle(&watcher::Event::Apply(set("app", 1)));
        index.handle(&watcher::Event::Apply(set("other", 1)));
        index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
        index.handle(&watcher::Event::Apply(deployment("api", &["app-d2c65kk9hm"])));
        index.handle(&watcher::Event::Apply(deployment("unrelated", &["other"])));
        let out = index.handle(&watcher::Event::Apply(set("app", 2)));
        assert_eq!(out.workloads, workloads(&["api", "web"]));
        assert!(
            out.sets.is_empty(),
            "the set's own controller sees its own change"
        );
    }

    fn with_wave(mut deployment: Deployment, wave: &str) -> Deployment {
        if let Some(labels) = deployment.metadata.labels.as_mut() {
            labels.insert(labels::WAVE.into(), wave.into());
        }
        deployment
    }

    fn available(mut deployment: Deployment) -> Deployment {
        deployment.metadata.generation = Some(1);
        deployment.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(1),
            updated_replicas: Some(1),
            available_replicas: Some(1),
            ..Default::default()
        });
        deployment
    }

    #[test]
    fn health_wakes_only_tracked_sets_and_a_new_wave_wakes_every_set_read() {
        let index = index();
        let mut tracked = set("app", 1);
        tracked.spec.rollout = Some(cmset_api::RolloutSpec::default());
        index.handle(&watcher::Event::Apply(tracked));
        index.handle(&watcher::Event::Apply(set("plain", 1)));
        index.handle(&watcher::Event::Apply(deployment("web", &["app", "plain"])));
        // A status update that makes it healthy matters to the tracked set only.
        let out = index.handle(&watcher::Event::Apply(available(deployment(
            "web",
            &["app", "plain"],
        ))));
        assert_eq!(out.sets, BTreeSet::from([cms("app")]));
        assert!(out.workloads.is_empty());
        // The same health again: nothing.
        let out = index.handle(&watcher::Event::Apply(available(deployment(
            "web",
            &["app", "plain"],
        ))));
        assert_eq!(out, Triggers::default());
        // A wave label matters to both: the plain set starts tracking a rollout.
        let waved = with_wave(available(deployment("web", &["app", "plain"])), "2");
        let out = index.handle(&watcher::Event::Apply(waved));
        assert_eq!(out.sets, BTreeSet::from([cms("app"), cms("plain")]));
    }

    #[test]
    fn the_lowest_wave_of_a_set_s_readers_comes_from_the_index() {
        let index = index();
        index.handle(&watcher::Event::Apply(set("app", 1)));
        assert_eq!(index.lowest_wave(&cms("app")), 0, "no readers");
        index.handle(&watcher::Event::Apply(with_wave(deployment("b", &["app"]), "3")));
        index.handle(&watcher::Event::Apply(with_wave(
            deployment("c", &["app"]),
            "later",
        )));
        index.handle(&watcher::Event::Apply(with_wave(
            deployment("d", &["other"]),
            "1",
        )));
        assert_eq!(
            index.lowest_wave(&cms("app")),
            3,
            "invalid labels and other sets' readers do not count"
        );
        index.handle(&watcher::Event::Apply(with_wave(deployment("a", &["app"]), "2")));
        assert_eq!(index.lowest_wave(&cms("app")), 2);
        index.handle(&watcher::Event::Delete(with_wave(deployment("a", &["app"]), "2")));
        assert_eq!(index.lowest_wave(&cms("app")), 3);
    }

    #[test]
    fn a_workload_that_switches_sets_triggers_the_old_and_the_new_one() {
        let index = index();
        for name in ["a", "b", "c"] {
            index.handle(&watcher::Event::Apply(set(name, 1)));
        }
        let first = index.handle(&watcher::Event::Apply(deployment("web", &["a", "b"])));
        assert_eq!(first.sets, [cms("a"), cms("b")].into());
        let switched = index.handle(&watcher::Event::Apply(deployment("web", &["b-d2c65kk9hm", "c"])));
        assert_eq!(switched.sets, [cms("a"), cms("b"), cms("c")].into());
        assert_eq!(index.readers(&cms("a")).workloads, vec![]);
        assert_eq!(
            index.readers(&cms("c")).workloads,
            vec![(WorkloadKind::Deployment, "web".to_string())]
        );
    }

    #[test]
    fn a_workload_event_that_changes_no_reference_triggers_nothing() {
        let index = index();
        index.handle(&watcher::Event::Apply(set("app", 1)));
        index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
        let mut scaled = deployment("web", &["app"]);
        scaled.spec.as_mut().unwrap().replicas = Some(5);
        assert_eq!(index.handle(&watcher::Event::Apply(scaled)), Triggers::default());
    }

    #[test]
    fn a_revision_triggers_its_set_and_the_set_s_readers() {
        let index = index();
        index.handle(&watcher::Event::Apply(set("app", 1)));
        index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
        let out = index.handle(&watcher::Event::Apply(revision("app", "app-d2c65kk9hm")));
        assert_eq!(out.sets, [cms("app")].into());
        assert_eq!(out.workloads, workloads(&["web"]));
        assert_eq!(index.revisions(SetKind::ConfigMapSet, NS, "app").len(), 1);
        let gone = index.handle(&watcher::Event::Delete(revision("app", "app-d2c65kk9hm")));
        assert_eq!(gone.sets, [cms("app")].into());
        assert!(index.revisions(SetKind::ConfigMapSet, NS, "app").is_empty());
    }

    #[test]
    fn facts_are_computed_once_per_spec_change() {
        let index = index();
        index.handle(&watcher::Event::Apply(set("app", 1)));
        let first = index.set_facts(&cms("app")).unwrap();
        assert_eq!(first.identity.as_deref().map(str::len), Some(10));
        let mut status_only = set("app", 1);
        status_only.status = Some(Default::default());
        index.handle(&watcher::Event::Apply(status_only));
        assert_eq!(
            index.set_facts(&cms("app")).unwrap(),
            first,
            "a status write changes no fact"
        );
        index.handle(&watcher::Event::Apply(set("app", 2)));
        let second = index.set_facts(&cms("app")).unwrap();
        assert_ne!(second.identity, first.identity);
        assert!(second.changed_at >= first.changed_at);
    }

    #[test]
    fn a_relist_drops_what_it_did_not_see_and_counts_as_listed() {
        let index = index();
        index.handle(&watcher::Event::Apply(set("app", 1)));
        index.handle(&watcher::Event::Apply(deployment("web", &["app"])));
        index.handle(&watcher::Event::Apply(deployment("gone", &["app"])));
        index.handle::<Deployment>(&watcher::Event::Init);
        index.handle(&watcher::Event::InitApply(deployment("web", &["app"])));
        let out = index.handle::<Deployment>(&watcher::Event::InitDone);
        assert_eq!(out.sets, [cms("app")].into(), "the set learns that `gone` went");
        assert_eq!(
            index.readers(&cms("app")).workloads,
            vec![(WorkloadKind::Deployment, "web".to_string())]
        );
        assert!(!index.is_ready(), "only one of seven kinds has listed");
    }

    #[test]
    fn a_workload_s_cached_template_keeps_only_its_references() {
        let mut d = deployment("web", &["app"]);
        d.spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("big".into());
        d.metadata.annotations = Some(BTreeMap::from([("note".into(), "x".into())]));
        let mut held = d.clone();
        d.slim();
        assert_eq!(d.metadata.annotations, None);
        // cmset's hold is the one annotation a decision reads.
        held.annotations_mut()
            .insert(cmset_core::hold::HELD_SINCE.into(), "t".into());
        held.slim();
        assert_eq!(
            held.metadata.annotations,
            Some(BTreeMap::from([(
                cmset_core::hold::HELD_SINCE.into(),
                "t".into()
            )]))
        );
        let container = &d.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(container.image, None);
        assert_eq!(container.env_from.as_ref().map(Vec::len), Some(1));
    }

    fn secret_set(name: &str, source: &str) -> SecretSet {
        let mut set = SecretSet::new(
            name,
            cmset_api::SecretSetSpec {
                secret_name: source.into(),
                revision_history_limit: 10,
                rollout: None,
                ..cmset_api::SecretSetSpec::default()
            },
        );
        set.metadata.namespace = Some(NS.into());
        set.metadata.uid = Some(format!("uid-{name}"));
        set.metadata.generation = Some(1);
        set
    }

    fn secret_meta(name: &str, version: &str) -> PartialObjectMeta<Secret> {
        PartialObjectMeta {
            types: None,
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(NS.into()),
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            _phantom: Default::default(),
        }
    }

    fn sec(name: &str) -> SetId {
        (SetKind::SecretSet, key(name))
    }

    #[test]
    fn a_source_s_new_version_triggers_the_set_that_versions_it_and_nothing_else_does() {
        let index = index();
        index.handle(&watcher::Event::Apply(secret_set("db", "db-credentials")));
        let out = index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "7")));
        assert_eq!(out.sets, [sec("db")].into());
        // The same version again (a relist), and an unrelated Secret: nothing.
        assert_eq!(
            index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "7"))),
            Triggers::default()
        );
        assert_eq!(
            index.handle(&watcher::Event::Apply(secret_meta("unrelated", "1"))),
            Triggers::default()
        );
        // A ConfigMap of the source's name is not the source.
        let mut cm = revision("x", "db-credentials");
        cm.metadata.labels = None;
        cm.metadata.owner_references = None;
        assert_eq!(index.handle(&watcher::Event::Apply(cm)).sets, BTreeSet::new());
        // Deleted: the set learns it.
        assert_eq!(
            index
                .handle(&watcher::Event::Delete(secret_meta("db-credentials", "7")))
                .sets,
            [sec("db")].into()
        );
    }

    #[test]
    fn a_read_is_fresh_until_the_watch_sees_another_version() {
        let index = index();
        index.handle(&watcher::Event::Apply(secret_set("db", "db-credentials")));
        let lookup = || index.source(SetKind::SecretSet, NS, "db-credentials");
        assert_eq!(lookup(), SourceLookup::Stale, "never read");
        index.record_source(
            SetKind::SecretSet,
            NS,
            "db-credentials",
            Some("7".into()),
            Some("9k5ddchd8d".into()),
        );
        assert_eq!(
            lookup(),
            SourceLookup::Fresh(Some("9k5ddchd8d".into())),
            "read, the watch silent so far"
        );
        index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "7")));
        assert_eq!(
            lookup(),
            SourceLookup::Fresh(Some("9k5ddchd8d".into())),
            "seen at the version read"
        );
        index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "8")));
        assert_eq!(lookup(), SourceLookup::Stale, "moved since the read");
        index.record_source(SetKind::SecretSet, NS, "db-credentials", None, None);
        index.handle(&watcher::Event::Delete(secret_meta("db-credentials", "8")));
        assert_eq!(lookup(), SourceLookup::Fresh(None), "gone, and read as gone");
    }

    #[test]
    fn a_read_of_a_new_version_wakes_the_readers_even_when_the_content_is_the_same() {
        let index = index();
        index.handle(&watcher::Event::Apply(secret_set("db", "db-credentials")));
        let mut web = deployment("web", &[]);
        let container = &mut web
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0];
        container.env_from = Some(vec![k8s_openapi::api::core::v1::EnvFromSource {
            secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                name: "db".into(),
                optional: None,
            }),
            ..Default::default()
        }]);
        index.handle(&watcher::Event::Apply(web));
        let record = |version: &str, identity: &str| {
            index.record_source(
                SetKind::SecretSet,
                NS,
                "db-credentials",
                Some(version.into()),
                Some(identity.into()),
            )
        };
        let first = record("7", "aaaaaaaaaa");
        assert_eq!(first.workloads, workloads(&["web"]));
        let changed_at = index.set_facts(&sec("db")).unwrap().changed_at;
        // Rewritten with the same content (a refreshed annotation): the waiting workload moves on, and
        // the set does not count as changed.
        assert_eq!(record("8", "aaaaaaaaaa").workloads, workloads(&["web"]));
        assert_eq!(index.set_facts(&sec("db")).unwrap().changed_at, changed_at);
        // The same read again: nothing.
        assert_eq!(record("8", "aaaaaaaaaa"), Triggers::default());
        // A set switching to another source stops following the old one.
        let mut moved = secret_set("db", "other");
        moved.metadata.generation = Some(2);
        index.handle(&watcher::Event::Apply(moved));
        assert_eq!(
            index.handle(&watcher::Event::Apply(secret_meta("db-credentials", "9"))),
            Triggers::default()
        );
        assert_eq!(
            index
                .handle(&watcher::Event::Apply(secret_meta("other", "1")))
                .sets,
            [sec("db")].into()
        );
    }
}
