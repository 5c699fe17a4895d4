//! Prints what decoding one watch event's object costs, whole (the k8s-openapi type, as the watches
//! decoded before; `DynamicObject` for a workload) and as the wire types decode it now, for the kinds
//! cmset indexes, and what reading one AdmissionReview of a set costs `/validate-set` (whole: the
//! `serde_json::Value` it decoded before; wire: `SetReview`, which keeps the content as text):
//! `cargo run --release -p cmset-controller --example decode_cost`. Each figure is the median of 15
//! rounds, in nanoseconds per object, next to the floor of the same run: reading the same bytes into
//! `serde::de::IgnoredAny` (the JSON has to be read either way).
use std::time::Instant;

use cmset_controller::engine::wire::{
    WireControllerRevision, WireMeta, WirePod, WireReplicaSet, WireWorkload,
};
use cmset_controller::serving::set_admission::SetReview;
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::DynamicObject;
use kube::core::PartialObjectMeta;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::{Value, json};

const ROUNDS: usize = 15;
const PER_ROUND: usize = 4_000;

fn metadata(name: &str) -> Value {
    json!({
        "name": name, "namespace": "cmset-bench", "uid": "0b0e4a52-5a3c-4c64-9d0e-6d0f6c1d1d1d",
        "resourceVersion": "123456", "generation": 3, "creationTimestamp": "2026-11-25T00:00:00Z",
        "labels": {"app": "bench", "cmset.dev/managed": "true", "pod-template-hash": "7d4b9c"},
        "annotations": {"deployment.kubernetes.io/revision": "3"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "bench-7d4b9c",
            "uid": "1c1e4a52-5a3c-4c64-9d0e-6d0f6c1d1d1d", "controller": true, "blockOwnerDeletion": true}],
        "managedFields": [
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
             "time": "2026-11-25T00:00:00Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                          "f:ownerReferences": {".": {}, "k:{\"uid\":\"1c1e4a52\"}": {}}},
                          "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:envFrom": {}, "f:image": {},
                                     "f:imagePullPolicy": {}, "f:name": {}, "f:resources": {}}},
                                     "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {}}}},
            {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-25T00:00:02Z",
             "fieldsType": "FieldsV1", "subresource": "status",
             "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}}},
                          "f:containerStatuses": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}}
        ]
    })
}

fn pod_spec() -> Value {
    json!({
        "containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.9", "imagePullPolicy": "IfNotPresent",
            "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}},
            "envFrom": [{"configMapRef": {"name": "bench-00042-5g7bm8k4f2"}}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]
        }],
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
        "securityContext": {}, "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    })
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata("bench-7d4b9c-x2x9q"), "spec": pod_spec(),
        "status": {"phase": "Running", "podIP": "10.0.0.7", "hostIP": "10.0.0.1", "qosClass": "Burstable",
            "startTime": "2026-11-25T00:00:00Z",
            "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-25T00:00:00Z"},
                           {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T00:00:02Z"},
                           {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-25T00:00:02Z"},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-25T00:00:00Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "started": true, "restartCount": 0,
                "image": "registry.k8s.io/pause:3.9", "imageID": "docker-pullable://registry.k8s.io/pause@sha256:7031",
                "containerID": "containerd://4f1c", "state": {"running": {"startedAt": "2026-11-25T00:00:01Z"}},
                "lastState": {}}]}})
}

fn replica_set() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": metadata("bench-7d4b9c"),
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench", "pod-template-hash": "7d4b9c"}}, "spec": pod_spec()}},
        "status": {"replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 3}})
}

fn controller_revision() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": metadata("db-6f8d7c9b5"),
        "data": {"spec": {"template": {"$patch": "replace", "metadata": {"labels": {"app": "db"}}, "spec": pod_spec()}}},
        "revision": 4})
}

/// An opted-in Deployment, watched as a dynamic object of the kinds table (before: `DynamicObject`).
fn deployment() -> Value {
    let mut meta = metadata("bench-00042");
    meta["labels"] = json!({"app": "bench", "cmset.dev/enabled": "true"});
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "bench"}}, "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600, "strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": "bench", "cmset.dev/managed": "true"}}, "spec": pod_spec()}},
        "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
            "availableReplicas": 2,
            "conditions": [
                {"type": "Available", "status": "True", "lastUpdateTime": "2026-11-25T00:00:02Z",
                 "lastTransitionTime": "2026-11-25T00:00:02Z", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability."},
                {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-11-25T00:00:02Z",
                 "lastTransitionTime": "2026-11-25T00:00:00Z", "reason": "NewReplicaSetAvailable",
                 "message": "ReplicaSet \"bench-00042-7d4b9c\" has successfully progressed."}]}})
}

/// The AdmissionReview of a ConfigMapSet without `spec.validation` whose template holds `keys` keys of
/// 1 KiB each, as the API server sends it on an update.
fn set_review(keys: usize) -> Value {
    let data: serde_json::Map<String, Value> = (0..keys)
        .map(|i| (format!("key-{i:03}.properties"), Value::from("x=1\n".repeat(256))))
        .collect();
    let object = json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet",
        "metadata": metadata("bench-00042"),
        "spec": {"revisionHistoryLimit": 10, "template": {"data": data}},
        "status": {"currentRevision": "bench-00042-5g7bm8k4f2", "observedGeneration": 3}});
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "0b0e4a52-5a3c-4c64-9d0e-6d0f6c1d1d1d", "operation": "UPDATE",
            "name": "bench-00042", "namespace": "cmset-bench",
            "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": "ConfigMapSet"},
            "resource": {"group": "cmset.dev", "version": "v1alpha1", "resource": "configmapsets"},
            "userInfo": {"username": "system:serviceaccount:argocd:argocd-application-controller"},
            "object": object.clone(), "oldObject": object, "dryRun": false}})
}

fn config_map_metadata() -> Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": metadata("bench-00042-5g7bm8k4f2")})
}

/// Median nanoseconds per object of decoding `bytes` as `T`.
fn median_ns<T: DeserializeOwned>(bytes: &[u8]) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..PER_ROUND {
                std::hint::black_box(serde_json::from_slice::<T>(std::hint::black_box(bytes)).unwrap());
            }
            start.elapsed().as_nanos() as f64 / PER_ROUND as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn row<W: DeserializeOwned, K: DeserializeOwned>(kind: &str, value: Value) {
    let bytes = serde_json::to_vec(&value).unwrap();
    let floor = median_ns::<IgnoredAny>(&bytes);
    let whole = median_ns::<K>(&bytes);
    let wire = median_ns::<W>(&bytes);
    println!(
        "| {kind} | {} | {floor:.0} | {whole:.0} ({:.2}x) | {wire:.0} ({:.2}x) | {:.2} |",
        bytes.len(),
        whole / floor,
        wire / floor,
        whole / wire
    );
}

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!(
        "decode cost per object, median of {ROUNDS} rounds of {PER_ROUND}; commit {commit}; release build"
    );
    println!();
    println!(
        "| kind | bytes | floor ns (IgnoredAny) | whole ns (x floor) | wire ns (x floor) | whole / wire |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    row::<WireWorkload, DynamicObject>("Deployment (a workload)", deployment());
    row::<WirePod, Pod>("Pod", pod());
    row::<WireReplicaSet, ReplicaSet>("ReplicaSet", replica_set());
    row::<WireControllerRevision, ControllerRevision>("ControllerRevision", controller_revision());
    row::<WireMeta<ConfigMap>, PartialObjectMeta<ConfigMap>>(
        "ConfigMap (metadata only)",
        config_map_metadata(),
    );
    row::<SetReview, Value>("AdmissionReview of a set, 4 KiB", set_review(4));
    row::<SetReview, Value>("AdmissionReview of a set, 64 KiB", set_review(64));
}
