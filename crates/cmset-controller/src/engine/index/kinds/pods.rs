//! Pods of rewritten templates: reduced to the names they reference, so that a revision a running Pod
//! names is never pruned (answered here instead of by listing the namespace's Pods at each prune).

use cmset_core::observe::RefNames;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Indexed, managed_selector};
use crate::engine::index::{Key, ReaderKind, State, Triggers};
use crate::engine::wire::WirePod;

impl Indexed for Pod {
    type Wire = WirePod;
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
        state.graph.link(ReaderKind::Pod, key, names, &state.sets, out);
    }

    fn unindex(key: &Key, state: &mut State, out: &mut Triggers) {
        let names = RefNames::default();
        state.graph.link(ReaderKind::Pod, key, names, &state.sets, out);
    }

    fn indexed_keys(state: &State) -> Vec<Key> {
        state.graph.keys(ReaderKind::Pod)
    }
}
