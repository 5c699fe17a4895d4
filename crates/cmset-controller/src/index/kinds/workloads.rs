//! Opted-in workloads (Deployments, StatefulSets, DaemonSets): only the references of their pod
//! template are kept (see [`cmset_core::slim`]); the store keeps the slim object for the controller
//! keyed by it, and the index their names, wave and health.

use cmset_api::labels;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Indexed;
use crate::index::{Key, ReaderKind, State, Triggers};
use crate::views::{self, Workload};

/// The three built-in workload kinds are indexed alike, each through the shared functions below; a
/// macro is the simplest way to say so once (a blanket impl over `Workload` would overlap the other
/// kinds' impls).
macro_rules! indexed_workload {
    ($kind:ty, $name:literal) => {
        impl Indexed for $kind {
            const NAME: &'static str = $name;

            fn selector() -> Option<String> {
                selector()
            }

            fn slim(&mut self) {
                slim(
                    &mut self.metadata,
                    self.spec.as_mut().map(|s| &mut s.template),
                );
            }

            fn index(&self, key: &Key, state: &mut State, out: &mut Triggers) {
                index(self, key, state, out);
            }

            fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
                unindex::<Self>(key, state, out);
            }

            fn indexed_keys(state: &State) -> Vec<Key> {
                state.graph.keys(ReaderKind::Workload(Self::KIND))
            }
        }
    };
}

indexed_workload!(Deployment, "Deployment");
indexed_workload!(StatefulSet, "StatefulSet");
indexed_workload!(DaemonSet, "DaemonSet");

/// Only workloads that opted in are watched.
fn selector() -> Option<String> {
    Some(format!("{}={}", labels::ENABLED, labels::ENABLED_VALUE))
}

fn slim(metadata: &mut ObjectMeta, template: Option<&mut PodTemplateSpec>) {
    metadata.managed_fields = None;
    // Of its annotations only cmset's hold is read; `rollout undo` history lives elsewhere.
    if let Some(a) = metadata.annotations.as_mut() {
        a.retain(|k, _| k == cmset_core::hold::HELD_SINCE);
    }
    if metadata.annotations.as_ref().is_some_and(|a| a.is_empty()) {
        metadata.annotations = None;
    }
    if let Some(pod) = template.and_then(|t| t.spec.as_mut()) {
        *pod = cmset_core::slim::references_only(pod);
    }
}

fn index<W: Workload>(workload: &W, key: &Key, state: &mut State, out: &mut Triggers) {
    let view = views::opted_in(workload)
        .then(|| views::workload_view(workload))
        .flatten();
    let names = view.as_ref().map(|v| v.referenced()).unwrap_or_default();
    let reader = ReaderKind::Workload(W::KIND);
    state.graph.link(reader, key, names, &state.sets, out);
    let progress = view.map(|v| (v.wave, v.health));
    state.graph.progress(W::KIND, key, progress, &state.sets, out);
}

fn unindex<W: Workload>(key: &Key, state: &mut State, out: &mut Triggers) {
    state.graph.progress(W::KIND, key, None, &state.sets, out);
    let reader = ReaderKind::Workload(W::KIND);
    state
        .graph
        .link(reader, key, Default::default(), &state.sets, out);
}
