//! Prints the heap bytes one stored workload costs, as the store keeps it now and as it kept it
//! before: `cargo run --release -p cmset-controller --example store_footprint`. Counted by dhat's
//! allocator, so the figures are exact and do not depend on the machine.
use std::sync::Arc;

use cmset_controller::engine::stored_workload::StoredWorkload;
use cmset_core::workloads::observe::WorkloadKind;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use serde_json::json;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn live() -> usize {
    dhat::HeapStats::get().curr_bytes
}

fn full(i: usize) -> serde_json::Value {
    let name = format!("bench-{i:05}");
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "cmset-bench", "uid": "0b0e4a52-5a3c-4c64-9d0e-6d0f6c1d1d1d",
            "resourceVersion": "123456", "generation": 3, "creationTimestamp": "2026-11-25T00:00:00Z",
            "labels": {"cmset.dev/enabled": "true"},
            "annotations": {"deployment.kubernetes.io/revision": "3"},
            "managedFields": [{"manager": "bench", "operation": "Apply", "apiVersion": "apps/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            "template": {"metadata": {"labels": {"app": name, "cmset.dev/managed": "true"}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                    "envFrom": [{"configMapRef": {"name": format!("cfg-{i:05}-7f9c2d8b4h"), "optional": false}}],
                    "resources": {}, "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
                    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}}},
        "status": {"observedGeneration": 3, "replicas": 0, "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "ok", "lastUpdateTime": "2026-11-25T00:00:00Z", "lastTransitionTime": "2026-11-25T00:00:00Z"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": "ok", "lastUpdateTime": "2026-11-25T00:00:00Z", "lastTransitionTime": "2026-11-25T00:00:00Z"}]}
    })
}

fn measure<T>(label: &str, n: usize, make: impl Fn(usize) -> T) {
    let before = live();
    let kept: Vec<Arc<T>> = (0..n).map(|i| Arc::new(make(i))).collect();
    let after = live();
    println!("| {label} | {:.0} |", (after - before) as f64 / n as f64);
    drop(kept);
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let n = 1000;
    let kind = WorkloadKind::Deployment;
    println!("Heap bytes per stored Deployment ({n} stored, the bench's shape):\n");
    println!("| stored as | bytes |\n| --- | --- |");
    measure(
        "StoredWorkload: slim metadata, slim body as JSON text (now)",
        n,
        |i| StoredWorkload::slim(kind, serde_json::from_value(full(i)).unwrap()),
    );
    measure("of which the metadata", n, |i| {
        StoredWorkload::slim(kind, serde_json::from_value(full(i)).unwrap()).metadata
    });
    measure("DynamicObject, slim body as a parsed Value (f643814)", n, |i| {
        let stored = StoredWorkload::slim(kind, serde_json::from_value(full(i)).unwrap());
        DynamicObject {
            types: None,
            metadata: stored.metadata.clone(),
            data: stored.body(),
        }
    });
    measure("typed Deployment, pod spec slimmed (1ac590d)", n, |i| {
        let mut d: Deployment = serde_json::from_value(full(i)).unwrap();
        d.metadata.managed_fields = None;
        d.metadata.annotations = None;
        let spec = d.spec.as_mut().unwrap();
        spec.template.spec = spec
            .template
            .spec
            .as_ref()
            .map(cmset_core::workloads::slim::references_only);
        d
    });
}
