//! Opted-in workloads of every kind in the table (`cmset_core::kinds`), watched as dynamic objects:
//! only the references of their pod template are kept (see [`cmset_core::slim`]); the store keeps the
//! slim object for the controller keyed by it, and the index their names, wave and health.

use cmset_api::labels;
use cmset_core::observe::WorkloadKind;
use kube::api::DynamicObject;

use super::Ops;
use crate::index::{Key, ReaderKind, State, Triggers};
use crate::views;

/// Only workloads that opted in are watched.
pub fn selector() -> String {
    format!("{}={}", labels::ENABLED, labels::ENABLED_VALUE)
}

/// Drops what no decision reads, before the object is stored or indexed: managed fields, owner
/// references, every annotation but cmset's hold, and of its body all but the template's labels and
/// references and the fields its health rule reads ([`cmset_core::slim::workload_body`]).
pub fn slim(kind: WorkloadKind, obj: &mut DynamicObject) {
    let metadata = &mut obj.metadata;
    metadata.managed_fields = None;
    metadata.owner_references = None;
    if let Some(a) = metadata.annotations.as_mut() {
        a.retain(|k, _| k == cmset_core::hold::HELD_SINCE);
    }
    if metadata.annotations.as_ref().is_some_and(|a| a.is_empty()) {
        metadata.annotations = None;
    }
    obj.data = cmset_core::slim::workload_body(kind, &obj.data);
}

impl Ops<DynamicObject> for WorkloadKind {
    fn index(&self, obj: &DynamicObject, key: &Key, state: &mut State, out: &mut Triggers) {
        let kind = *self;
        let view = views::workload_view(kind, obj);
        let names = view.as_ref().map(|v| v.referenced()).unwrap_or_default();
        state
            .graph
            .link(ReaderKind::Workload(kind), key, names, &state.sets, out);
        // A kind whose template never changes after creation (a Job) has no rollout to follow.
        let progress = view.filter(|_| kind.is_mutable()).map(|v| (v.wave, v.health));
        state.graph.progress(kind, key, progress, &state.sets, out);
    }

    fn unindex(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        state.graph.progress(*self, key, None, &state.sets, out);
        state.graph.link(
            ReaderKind::Workload(*self),
            key,
            Default::default(),
            &state.sets,
            out,
        );
    }

    fn keys(&self, state: &State) -> Vec<Key> {
        state.graph.keys(ReaderKind::Workload(*self))
    }
}
