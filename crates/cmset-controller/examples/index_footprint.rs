//! Prints the heap bytes the index holds per added set, in the bench's shape: each set has one
//! revision (a ConfigMap cmset made, owned by the set and by the ReplicaSet that names it), one
//! opted-in Deployment reading it through `envFrom`, and that Deployment's ReplicaSet.
//! `cargo run --release -p cmset-controller --example index_footprint`. Counted by dhat's allocator
//! as (bytes at 1,000 sets − bytes at 100) ÷ 900, so the figures are exact and do not depend on the
//! machine; the stores, kube-runtime's controllers and the status are not in them.
use std::collections::BTreeMap;

use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate};
use cmset_controller::engine::index::{Index, Key};
use cmset_controller::engine::stored_workload::StoredWorkload;
use cmset_core::revisions::{naming, revision};
use cmset_core::set::SetKind;
use cmset_core::workloads::observe::WorkloadKind;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::json;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const NS: &str = "cmset-bench";

fn live() -> usize {
    dhat::HeapStats::get().curr_bytes
}

fn set(i: usize) -> ConfigMapSet {
    let name = format!("bench-{i:05}");
    let mut set = ConfigMapSet::new(
        &name,
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("v".to_string(), "0".to_string())])),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: 10,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some(format!("0b0e4a52-5a3c-4c64-9d0e-{i:012}"));
    set.metadata.generation = Some(1);
    set.metadata.resource_version = Some(format!("{}", 100_000 + i));
    set
}

fn owner(api_version: &str, kind: &str, name: &str, uid: &str, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.into(),
        controller: Some(controller),
        block_owner_deletion: Some(controller),
    }
}

/// The revision the set controller makes of `set`'s content, as the metadata watch delivers it once
/// the ReplicaSet naming it owns it too.
fn revision_of(set: &ConfigMapSet, i: usize) -> PartialObjectMeta<ConfigMap> {
    let set_ref = set.into();
    let content = revision::inline_identity(set_ref).unwrap();
    let name = set.metadata.name.clone().unwrap();
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(naming::revision_name(&name, &content)),
            namespace: Some(NS.into()),
            uid: Some(format!("1c1e4a52-5a3c-4c64-9d0e-{i:012}")),
            resource_version: Some(format!("{}", 200_000 + i)),
            labels: Some(revision::desired_labels(set_ref)),
            annotations: Some(revision::desired_annotations(set_ref, 1, &content)),
            owner_references: Some(vec![
                revision::set_owner_reference(set_ref),
                owner(
                    "apps/v1",
                    "ReplicaSet",
                    &format!("app-{i:05}-5d9f7c6b8"),
                    &format!("3e1e4a52-5a3c-4c64-9d0e-{i:012}"),
                    false,
                ),
            ]),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

/// The opted-in Deployment reading `config_map`, as its watch stores it.
fn deployment(i: usize, config_map: &str) -> StoredWorkload {
    let name = format!("app-{i:05}");
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "uid": format!("2d1e4a52-5a3c-4c64-9d0e-{i:012}"),
            "resourceVersion": format!("{}", 300_000 + i), "generation": 2,
            "labels": {"cmset.dev/enabled": "true"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                    "envFrom": [{"configMapRef": {"name": config_map}}]}]}}},
        "status": {"observedGeneration": 2, "replicas": 0}
    });
    StoredWorkload::slim(WorkloadKind::Deployment, serde_json::from_value(object).unwrap())
}

/// The Deployment's ReplicaSet, whose template names the same revision.
fn replica_set(i: usize, config_map: &str) -> ReplicaSet {
    let app = format!("app-{i:05}");
    serde_json::from_value(json!({
        "metadata": {"name": format!("{app}-5d9f7c6b8"), "namespace": NS,
            "uid": format!("3e1e4a52-5a3c-4c64-9d0e-{i:012}"), "resourceVersion": format!("{}", 400_000 + i),
            "ownerReferences": [owner("apps/v1", "Deployment", &app, &format!("2d1e4a52-5a3c-4c64-9d0e-{i:012}"), true)]},
        "spec": {"selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}},
                "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                    "envFrom": [{"configMapRef": {"name": config_map}}]}]}}}
    }))
    .unwrap()
}

/// A settled index holding `n` sets in the bench's shape.
fn index_of(n: usize) -> Index {
    let index = Index::new(None);
    for kind in ["ConfigMapSet", "ConfigMap", "Deployment", "ReplicaSet"] {
        index.expect(kind);
    }
    index.settle();
    for i in 0..n {
        let set = set(i);
        let revision = revision_of(&set, i);
        let name = revision.metadata.name.clone().unwrap();
        index.handle(&Event::Apply(set));
        index.handle(&Event::Apply(revision));
        index.handle_workload(WorkloadKind::Deployment, &Event::Apply(deployment(i, &name)));
        index.handle(&Event::Apply(replica_set(i, &name)));
    }
    // The shape is what the figures claim only if the index linked it all.
    let first = (SetKind::ConfigMapSet, Key::new(NS, "bench-00000"));
    let readers = index.readers(&first);
    assert_eq!(readers.workloads.len(), 1, "the Deployment reads the set");
    assert_eq!(readers.history.len(), 1, "its ReplicaSet names the revision");
    assert_eq!(index.revisions(SetKind::ConfigMapSet, NS, "bench-00000").len(), 1);
    index
}

fn held_by(n: usize) -> usize {
    let before = live();
    let index = index_of(n);
    let held = live() - before;
    drop(index);
    held
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let (small, large) = (100, 1000);
    let (at_small, at_large) = (held_by(small), held_by(large));
    println!("Heap the index holds, by dhat (per set: one revision, one Deployment, one ReplicaSet):\n");
    println!("| sets | bytes |\n| ---: | ---: |");
    println!("| {small} | {at_small} |\n| {large} | {at_large} |");
    println!(
        "\nper added set: {:.0} B",
        (at_large - at_small) as f64 / (large - small) as f64
    );
}
