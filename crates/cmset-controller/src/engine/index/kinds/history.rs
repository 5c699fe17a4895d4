//! History objects of rewritten templates: ReplicaSets (of Deployments and Argo Rollouts),
//! ControllerRevisions (of StatefulSets and DaemonSets) and Jobs (of CronJobs), reduced to the names
//! they reference; never cached whole.

use cmset_core::workloads::observe::{HistoryKind, HistoryObject, RefNames};
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;

use super::{Indexed, managed_selector};
use crate::engine::index::{Key, ReaderKind, State, Triggers};
use crate::engine::views;
use crate::engine::wire::{WireControllerRevision, WireJob, WireReplicaSet};

impl Indexed for ReplicaSet {
    type Wire = WireReplicaSet;
    const NAME: &'static str = "ReplicaSet";

    fn selector() -> Option<String> {
        managed_selector()
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index(
            HistoryKind::ReplicaSet,
            views::replica_set_view(self),
            key,
            state,
            out,
        );
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(HistoryKind::ReplicaSet, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state.graph.history_keys(HistoryKind::ReplicaSet)
    }
}

impl Indexed for ControllerRevision {
    type Wire = WireControllerRevision;
    const NAME: &'static str = "ControllerRevision";

    fn selector() -> Option<String> {
        managed_selector()
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        let view = views::controller_revision_view(self);
        index(HistoryKind::ControllerRevision, view, key, state, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(HistoryKind::ControllerRevision, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state.graph.history_keys(HistoryKind::ControllerRevision)
    }
}

impl Indexed for Job {
    type Wire = WireJob;
    const NAME: &'static str = "Job";

    fn selector() -> Option<String> {
        managed_selector()
    }

    fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        index(HistoryKind::Job, views::job_view(self), key, state, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        unindex(HistoryKind::Job, key, state, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state.graph.history_keys(HistoryKind::Job)
    }
}

/// A history object as the watch sees it (`None`: it holds no template cmset can read).
fn index(kind: HistoryKind, view: Option<HistoryObject>, key: &Key, state: &mut State, out: &mut Triggers) {
    let Some(view) = view else {
        unindex(kind, key, state, out);
        return;
    };
    let names = view.referenced.clone();
    let reader = ReaderKind::History(kind);
    let before = state.graph.names(reader, key).cloned().unwrap_or_default();
    let mut linked = Triggers::default();
    state.graph.link(reader, key, names, &state.sets, &mut linked);
    if is_news(&before, &view, key, state) {
        out.sets.append(&mut linked.sets);
    }
    state.graph.insert_history(kind, key, view);
}

/// Whether a history object's names matter to its sets' plans. One that stops naming a revision may
/// let it be pruned. One that starts naming a revision protects it, which a set needs to hear only to
/// add the object to the revision's owners: not when the revision lists it or its workload already
/// (a revision is created owned by the workloads that read it, so a Deployment's new ReplicaSet is no
/// news).
fn is_news(before: &RefNames, now: &HistoryObject, key: &Key, state: &State) -> bool {
    if before
        .iter()
        .any(|(kind, name)| !now.referenced.contains(kind, name))
    {
        return true;
    }
    now.referenced
        .iter()
        .filter(|(kind, name)| !before.contains(*kind, name))
        .any(
            |(kind, name)| match state.revisions.get(kind, &Key::new(&key.namespace, name)) {
                Some((_, revision)) => !revision
                    .owner_references()
                    .iter()
                    .any(|o| o.uid == now.uid || now.owner_uid.as_deref() == Some(o.uid.as_str())),
                // Not a revision (another ConfigMap the template names), or one not seen yet, whose own
                // event plans its set with this object in view.
                None => false,
            },
        )
}

fn unindex(kind: HistoryKind, key: &Key, state: &mut State, out: &mut Triggers) {
    state.graph.remove_history(kind, key);
    let names = Default::default();
    state
        .graph
        .link(ReaderKind::History(kind), key, names, &state.sets, out);
}
