//! The watched kinds: one [`Indexed`] impl per kind, saying how its objects enter and leave the index.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use cmset_api::{ConfigMapSet, SecretSet, labels};
use cmset_core::observe::{HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind};
use cmset_core::refs::Referenced;
use cmset_core::set::{SetKind, SetRef};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::{Key, ReaderKind, SetFacts, SetId, State, Triggers};
use crate::views::{self, Workload};

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
