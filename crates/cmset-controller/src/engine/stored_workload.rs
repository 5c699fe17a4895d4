//! An opted-in workload as the reflector stores keep it: its slimmed metadata and its slimmed body
//! ([`cmset_core::workloads::slim::workload_body`]) held as JSON text.
//!
//! Why text: a parsed `serde_json::Value` spends a B-tree node (about 600 bytes) on every object in
//! it, however few its fields, and a slim Deployment body still has fifteen or so; as text the same
//! body is a few hundred bytes. The body is read only to compute a view or plan a patch, once per
//! event or reconcile, and parsing it then costs microseconds, while the store holds every opted-in
//! workload of the cluster for as long as it exists (`examples/store_footprint.rs` measures both).

use std::borrow::Cow;

use cmset_core::workloads::observe::WorkloadKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ApiResource;
use kube::core::DynamicResourceScope;
use kube::runtime::watcher;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::wire::WireWorkload;

/// One stored workload of any kind of the table (see the module's doc).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct StoredWorkload {
    pub metadata: ObjectMeta,
    /// The slim body, serialized.
    body: Box<str>,
}

impl StoredWorkload {
    /// Slims `obj`, a workload of `kind` as the API server sent it, for storing: managed fields,
    /// owner references and every annotation but cmset's hold go from its metadata, and of its body
    /// all but what decisions read.
    pub fn slim(kind: WorkloadKind, obj: WireWorkload) -> Self {
        let WireWorkload { mut metadata, data } = obj;
        metadata.managed_fields = None;
        metadata.owner_references = None;
        if let Some(a) = metadata.annotations.as_mut() {
            a.retain(|k, _| k == cmset_core::rollout::hold::HELD_SINCE);
        }
        if metadata.annotations.as_ref().is_some_and(|a| a.is_empty()) {
            metadata.annotations = None;
        }
        let body = cmset_core::workloads::slim::workload_body(kind, &data)
            .to_string()
            .into_boxed_str();
        Self { metadata, body }
    }

    /// The slim body, parsed.
    pub fn body(&self) -> Value {
        // It was serialized from a `Value` here, so it parses; an object is what a body always is.
        serde_json::from_str(&self.body).unwrap_or_else(|_| Value::Object(Default::default()))
    }

    /// The event `event` of a workload watch of `kind`, its objects slimmed.
    pub fn event(kind: WorkloadKind, event: watcher::Event<WireWorkload>) -> watcher::Event<Self> {
        use watcher::Event::*;
        let slim = |obj| Self::slim(kind, obj);
        match event {
            Apply(obj) => Apply(slim(obj)),
            Delete(obj) => Delete(slim(obj)),
            Init => Init,
            InitApply(obj) => InitApply(slim(obj)),
            InitDone => InitDone,
        }
    }
}

impl kube::Resource for StoredWorkload {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn deployment() -> WireWorkload {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "team", "uid": "u1", "generation": 2,
                "labels": {"cmset.dev/enabled": "true"},
                "annotations": {"cmset.dev/held-since": "2026-11-25T00:00:00Z", "note": "x"},
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "o"}]
            },
            "spec": {"replicas": 2, "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i", "envFrom": [{"configMapRef": {"name": "app"}}]}]}
            }},
            "status": {"observedGeneration": 2, "replicas": 2}
        }))
        .unwrap()
    }

    #[test]
    fn the_stored_body_is_the_slim_body_and_the_metadata_keeps_only_what_decides() {
        let obj = deployment();
        let expected = cmset_core::workloads::slim::workload_body(WorkloadKind::Deployment, &obj.data);
        let stored = StoredWorkload::slim(WorkloadKind::Deployment, obj);
        assert_eq!(stored.body(), expected);
        let meta = &stored.metadata;
        assert!(meta.managed_fields.is_none() && meta.owner_references.is_none());
        let annotations: Vec<_> = meta
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(annotations, [cmset_core::rollout::hold::HELD_SINCE]);
        assert_eq!(meta.uid.as_deref(), Some("u1"));
    }

    #[test]
    fn events_keep_their_kind_and_slim_their_objects() {
        let event = StoredWorkload::event(WorkloadKind::Deployment, watcher::Event::Apply(deployment()));
        let watcher::Event::Apply(stored) = event else {
            panic!("an apply stays an apply");
        };
        assert!(
            stored
                .body()
                .pointer("/spec/template/spec/containers/0/image")
                .is_none()
        );
        assert!(
            stored
                .body()
                .pointer("/spec/template/spec/containers/0/envFrom")
                .is_some()
        );
        assert!(matches!(
            StoredWorkload::event(WorkloadKind::Deployment, watcher::Event::InitDone),
            watcher::Event::InitDone
        ));
    }
}
