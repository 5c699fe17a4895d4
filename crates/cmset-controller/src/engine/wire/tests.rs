//! Each wire type decodes an object as the API server sends it into what the index would have read
//! from the whole object: the same views, the same reference names, no managedFields, no status.

use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;
use crate::engine::index::Indexed;
use crate::engine::views;

fn metadata(name: &str) -> Value {
    json!({
        "name": name,
        "namespace": "shop",
        "uid": format!("uid-{name}"),
        "resourceVersion": "4242",
        "generation": 3,
        "labels": {"app": "web", "cmset.dev/managed": "true"},
        "annotations": {"deployment.kubernetes.io/revision": "7"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web",
                             "controller": true, "blockOwnerDeletion": true}],
        "creationTimestamp": "2026-11-25T10:00:00Z",
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                           "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
    })
}

/// A pod spec as a real Deployment's template has it: references among much else.
fn pod_spec() -> Value {
    json!({
        "containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.9",
            "args": ["--port=8080"],
            "ports": [{"containerPort": 8080}],
            "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}},
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
            "env": [
                {"name": "LITERAL", "value": "not a reference"},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "app-5g7bm8k4f2", "key": "MODE"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
            ],
            "envFrom": [{"secretRef": {"name": "creds-2t9h5m6c8b"}, "prefix": "DB_"}]
        }],
        "initContainers": [{"name": "init", "image": "busybox", "envFrom": [{"configMapRef": {"name": "boot"}}]}],
        "volumes": [
            {"name": "cache", "emptyDir": {}},
            {"name": "config", "configMap": {"name": "app-5g7bm8k4f2", "defaultMode": 420}},
            {"name": "all", "projected": {"sources": [{"secret": {"name": "tls"}}, {"downwardAPI": {"items": []}}]}}
        ],
        "nodeName": "node-1",
        "restartPolicy": "Always",
        "aFieldOfTomorrow": {"nested": [1, 2, 3]}
    })
}

/// Decodes `value` whole as `K`, and through the wire type `W`; both slimmed as the watch does.
fn both<W: DeserializeOwned, K: DeserializeOwned + From<W> + Indexed>(value: Value) -> (K, K) {
    let mut whole: K = serde_json::from_value(value.clone()).unwrap();
    let mut wire: K = K::from(serde_json::from_value::<W>(value).unwrap());
    whole.slim();
    wire.slim();
    (whole, wire)
}

#[test]
fn a_replica_set_decodes_to_the_same_history_view() {
    let value = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata("web-7d4b9c"),
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()}},
        "status": {"replicas": 2, "readyReplicas": 2, "observedGeneration": 3}
    });
    let (whole, wire) = both::<WireReplicaSet, ReplicaSet>(value);
    let view = views::replica_set_view(&wire).expect("a template");
    assert_eq!(views::replica_set_view(&whole), Some(view.clone()));
    assert_eq!(view.owner_uid.as_deref(), Some("uid-web"));
    assert_eq!(
        view.referenced
            .config_maps
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["app-5g7bm8k4f2", "boot"]
    );
    assert!(wire.status.is_none() && wire.metadata.managed_fields.is_none());
    assert_eq!(
        wire.metadata.resource_version.as_deref(),
        Some("4242"),
        "the watch resumes from it"
    );
}

#[test]
fn a_job_and_a_controller_revision_decode_to_the_same_history_views() {
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata("nightly-29001"),
        "spec": {"backoffLimit": 2, "template": {"spec": pod_spec()}},
        "status": {"succeeded": 1}
    });
    let (whole, wire) = both::<WireJob, Job>(job);
    assert_eq!(views::job_view(&wire), views::job_view(&whole));
    assert!(views::job_view(&wire).is_some());

    let revision = json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": metadata("db-6f8d7c9b5"),
        "data": {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "db"}},
                                        "spec": pod_spec()}}},
        "revision": 4
    });
    let (whole, wire) = both::<WireControllerRevision, ControllerRevision>(revision);
    let view = views::controller_revision_view(&wire).expect("a template");
    assert_eq!(views::controller_revision_view(&whole), Some(view));
    assert_eq!(wire.revision, 4);
}

#[test]
fn a_pod_decodes_to_the_same_references_and_no_status() {
    let value = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": metadata("web-7d4b9c-x2x9q"),
        "spec": pod_spec(),
        "status": {"phase": "Running", "podIP": "10.0.0.7",
                   "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "pause",
                                          "imageID": "sha256:abc", "state": {"running": {}}}]}
    });
    let whole: Pod = serde_json::from_value(value.clone()).unwrap();
    let wire = Pod::from(serde_json::from_value::<WirePod>(value).unwrap());
    assert_eq!(wire.status, None);
    assert_eq!(wire.metadata.managed_fields, None);
    let names = cmset_core::workloads::observe::RefNames::of(wire.spec.as_ref().unwrap());
    assert_eq!(
        names,
        cmset_core::workloads::observe::RefNames::of(whole.spec.as_ref().unwrap()),
        "the Pod's references, as the whole Pod has them"
    );
    assert!(names.secrets.contains("creds-2t9h5m6c8b") && names.secrets.contains("tls"));
}

/// Objects without the parts the index reads decode as the whole type would: no template, no view.
#[test]
fn objects_without_a_template_have_no_view() {
    let rs: ReplicaSet = WireReplicaSet::deserialize(json!({"metadata": metadata("bare")}))
        .unwrap()
        .into();
    assert_eq!(views::replica_set_view(&rs), None);
    let cr: ControllerRevision =
        WireControllerRevision::deserialize(json!({"metadata": metadata("bare"), "revision": 1, "data": {}}))
            .unwrap()
            .into();
    assert_eq!(views::controller_revision_view(&cr), None);
    let job: Job = WireJob::deserialize(json!({"metadata": metadata("bare"), "spec": {}}))
        .unwrap()
        .into();
    assert_eq!(views::job_view(&job), None);
}

/// A ConfigMap's metadata as a metadata-only watch sends it: the same revision view as the whole
/// PartialObjectMeta gives, and asked for as metadata only.
#[test]
fn a_config_map_s_metadata_decodes_to_the_same_revision_view() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::core::PartialObjectMeta;

    let mut meta = metadata("app-5g7bm8k4f2");
    meta["labels"] = json!({"cmset.dev/set": "app", "cmset.dev/revision": "3"});
    let value = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta});
    let (whole, wire) = both::<WireMeta<ConfigMap>, PartialObjectMeta<ConfigMap>>(value);
    assert_eq!(views::revision_view(&wire), views::revision_view(&whole));
    assert!(wire.metadata.managed_fields.is_none());
    assert!(
        <WireMeta<ConfigMap> as Resource>::metadata_api(),
        "the API server sends no data"
    );
    assert_eq!(wire_path::<ConfigMap>(), "/api/v1/namespaces/shop/configmaps");
}

fn wire_path<K: Resource<DynamicType = ()>>() -> String {
    <WireMeta<K> as Resource>::url_path(&(), Some("shop"))
}

/// A workload as its watch sends it: stored exactly as the whole dynamic object was, for a built-in kind
/// and for a declared kind that keeps its template outside `spec`.
#[test]
fn a_workload_decodes_to_the_same_stored_workload_as_the_whole_dynamic_object() {
    use cmset_core::workloads::observe::WorkloadKind;
    use kube::api::DynamicObject;

    use crate::engine::stored_workload::StoredWorkload;

    let mut meta = metadata("web");
    meta["labels"] = json!({"cmset.dev/enabled": "true"});
    meta["annotations"] = json!({"cmset.dev/held-since": "2026-11-25T10:00:00Z"});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()}},
        "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                   "availableReplicas": 2,
                   "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                                   "message": "Deployment has minimum availability."}]}
    });
    let whole: DynamicObject = serde_json::from_value(deployment.clone()).unwrap();
    let wire = WireWorkload::deserialize(deployment).unwrap();
    assert!(wire.metadata.managed_fields.is_none());
    assert_eq!(
        wire.data.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["spec", "status"]
    );
    let (from_whole, from_wire) = (
        StoredWorkload::slim(
            WorkloadKind::Deployment,
            WireWorkload {
                metadata: whole.metadata,
                data: whole.data,
            },
        ),
        StoredWorkload::slim(WorkloadKind::Deployment, wire),
    );
    assert_eq!(from_wire.metadata, from_whole.metadata);
    assert_eq!(from_wire.body(), from_whole.body());
    assert_eq!(
        views::workload_view(WorkloadKind::Deployment, &from_wire).map(|v| v.referenced()),
        views::workload_view(WorkloadKind::Deployment, &from_whole).map(|v| v.referenced())
    );

    // Fields in any order, and ones that are not `spec` kept too.
    let odd = json!({"data": {"x": 1}, "metadata": {"name": "w", "managedFields": [{"manager": "m"}]},
                     "kind": "Thing", "apiVersion": "example.com/v1"});
    let wire = WireWorkload::deserialize(odd).unwrap();
    assert_eq!(
        (wire.metadata.name.as_deref(), wire.data),
        (Some("w"), json!({"data": {"x": 1}}))
    );
    assert!(WireWorkload::deserialize(json!(["not", "an", "object"])).is_err());
}

/// A set as its watch sends it, after GitOps applies and cmset's status apply: the same set as the
/// whole decode gives once slimmed (spec and status whole), the same URL, and a client-side apply's copy
/// of the object never read.
#[test]
fn a_set_decodes_to_the_same_stored_set_without_managed_fields() {
    use cmset_api::{ConfigMapSet, SecretSet};

    let mut meta = metadata("app");
    meta["annotations"] = json!({
        "argocd.argoproj.io/tracking-id": "shop:cmset.dev/ConfigMapSet:shop/app",
        LAST_APPLIED: "{\"apiVersion\":\"cmset.dev/v1alpha1\",\"kind\":\"ConfigMapSet\",\"spec\":{}}"
    });
    let set = json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet", "metadata": meta,
        "spec": {"revisionHistoryLimit": 4, "template": {"data": {"MODE": "fast", "app.yaml": "a: 1\n"}},
                 "rollout": {"stabilizationSeconds": 30, "paused": true}},
        "status": {"observedGeneration": 3, "revision": 7, "currentRevision": "app-5g7bm8k4f2",
                   "conditions": [{"type": "Ready", "status": "True", "reason": "RolledOut", "message": "",
                                   "lastTransitionTime": "2026-11-25T10:00:00Z"}]}
    });
    let (whole, wire) = both::<WireConfigMapSet, ConfigMapSet>(set.clone());
    assert_eq!(json(&wire), json(&whole));
    assert_eq!((&wire.spec, &wire.status), (&whole.spec, &whole.status));
    assert!(wire.status.is_some() && wire.metadata.managed_fields.is_none());
    assert_eq!(
        wire.metadata
            .annotations
            .as_ref()
            .map(|a| a.keys().collect::<Vec<_>>()),
        Some(vec![&"argocd.argoproj.io/tracking-id".to_string()])
    );
    assert_eq!(
        <WireConfigMapSet as Resource>::url_path(&(), Some("shop")),
        "/apis/cmset.dev/v1alpha1/namespaces/shop/configmapsets"
    );

    let secret_set = json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet", "metadata": metadata("creds"),
        "spec": {"secretName": "creds"}
    });
    let (whole, wire) = both::<WireSecretSet, SecretSet>(secret_set);
    assert_eq!(json(&wire), json(&whole));
    assert!(wire.status.is_none());
    assert_eq!(
        <WireSecretSet as Resource>::url_path(&(), Some("shop")),
        "/apis/cmset.dev/v1alpha1/namespaces/shop/secretsets"
    );

    // What the whole type refuses, the wire type refuses too.
    let mut bad = set;
    bad["spec"]["revisionHistoryLimit"] = json!("four");
    assert!(serde_json::from_value::<ConfigMapSet>(bad.clone()).is_err());
    assert!(serde_json::from_value::<WireConfigMapSet>(bad).is_err());
}

fn json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap()
}

/// The annotations are read as given, but for a client-side apply's copy, whatever it holds.
#[test]
fn annotations_pass_over_the_last_applied_copy_only() {
    let mut meta = metadata("web-7d4b9c");
    meta["annotations"] = json!({"a": "1", LAST_APPLIED: "{\"huge\": true}", "z": "2"});
    let rs: ReplicaSet = WireReplicaSet::deserialize(json!({"metadata": meta}))
        .unwrap()
        .into();
    assert_eq!(
        rs.metadata.annotations,
        Some(
            [
                ("a".to_string(), "1".to_string()),
                ("z".to_string(), "2".to_string())
            ]
            .into()
        )
    );
    let mut meta = metadata("web-7d4b9c");
    meta["annotations"] = Value::Null;
    let rs: ReplicaSet = WireReplicaSet::deserialize(json!({"metadata": meta}))
        .unwrap()
        .into();
    assert_eq!(rs.metadata.annotations, None);
    let mut meta = metadata("web-7d4b9c");
    meta["annotations"] = json!({"a": 1});
    assert!(
        WireReplicaSet::deserialize(json!({"metadata": meta})).is_err(),
        "values are strings"
    );
}
