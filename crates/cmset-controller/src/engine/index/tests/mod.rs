//! The index's tests: watch events in, triggered reconciles and query answers out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, SecretSet, labels};
use cmset_core::set::SetKind;
use cmset_core::workloads::observe::WorkloadKind;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use cmset_core::rollout::window_hold::{ClusterView, UnknownCause, WindowsUnknown};

use super::{Index, Indexed, Key, SetId, SourceLookup, Triggers};
use crate::engine::stored_workload::StoredWorkload;

const NS: &str = "team";

fn index() -> Index {
    let index = Index::new(None);
    for kind in [
        "ConfigMapSet",
        "SecretSet",
        "ConfigMap",
        "Deployment",
        "ReplicaSet",
        "ControllerRevision",
    ] {
        index.expect(kind);
    }
    index.settle();
    index
}

/// Deployments reach the index as the workload watch delivers them: dynamic objects of the table's
/// kind, slimmed. (A test-only impl, so that the scenarios below read as typed objects.)
impl Indexed for Deployment {
    type Wire = Self;
    const NAME: &'static str = "Deployment";

    fn selector() -> Option<String> {
        Some(super::workloads::selector())
    }

    fn slim(&mut self) {
        let stored = stored(self);
        let mut object = stored.body();
        object["metadata"] = serde_json::to_value(&stored.metadata).unwrap();
        *self = serde_json::from_value(object).unwrap();
    }

    fn index(&self, key: &Key, state: &mut super::State, out: &mut Triggers) {
        let ops: &dyn super::kinds::Ops<StoredWorkload> = &WorkloadKind::Deployment;
        ops.index(&stored(self), key, state, out);
    }

    fn unindex(key: &Key, state: &mut super::State, out: &mut Triggers) {
        let ops: &dyn super::kinds::Ops<StoredWorkload> = &WorkloadKind::Deployment;
        ops.unindex(key, state, out);
    }

    fn indexed_keys(state: &super::State) -> Vec<Key> {
        let ops: &dyn super::kinds::Ops<StoredWorkload> = &WorkloadKind::Deployment;
        ops.keys(state)
    }
}

/// A Deployment as its watch stores it.
fn stored(d: &Deployment) -> StoredWorkload {
    let object = serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
    StoredWorkload::slim(WorkloadKind::Deployment, object)
}

fn set(name: &str, generation: i64) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        name,
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("K".to_string(), generation.to_string())])),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: 10,
            rollout: None,
            config_map_name: None,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some(format!("uid-{name}"));
    set.metadata.generation = Some(generation);
    set
}

fn deployment(name: &str, reads: &[&str]) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("uid-{name}")),
            labels: Some(BTreeMap::from([(labels::ENABLED.into(), "true".into())])),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        env_from: Some(
                            reads
                                .iter()
                                .map(|r| EnvFromSource {
                                    config_map_ref: Some(ConfigMapEnvSource {
                                        name: r.to_string(),
                                        optional: None,
                                    }),
                                    ..EnvFromSource::default()
                                })
                                .collect(),
                        ),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

fn revision(set: &str, name: &str) -> PartialObjectMeta<ConfigMap> {
    PartialObjectMeta {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([(labels::SET.into(), set.into())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "cmset.dev/v1alpha1".into(),
                kind: "ConfigMapSet".into(),
                name: set.into(),
                uid: format!("uid-{set}"),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        _phantom: Default::default(),
    }
}

fn key(name: &str) -> Key {
    Key::new(NS, name)
}

fn cms(name: &str) -> SetId {
    (SetKind::ConfigMapSet, key(name))
}

fn workloads(keys: &[&str]) -> BTreeSet<(WorkloadKind, Key)> {
    keys.iter().map(|k| (WorkloadKind::Deployment, key(k))).collect()
}

/// The revision of `set`'s content, named and marked as the set controller makes it.
fn revision_of(set: &ConfigMapSet) -> PartialObjectMeta<ConfigMap> {
    let content = cmset_core::revisions::revision::inline_identity(set.into()).unwrap();
    let name = set.metadata.name.clone().unwrap();
    let mut r = revision(
        &name,
        &cmset_core::revisions::naming::revision_name(&name, &content),
    );
    r.metadata.annotations = Some(BTreeMap::from([(labels::CONTENT_HASH.into(), content)]));
    r
}

mod readiness;
mod refused_kinds;
mod sources;
mod templates_and_overrides;
mod triggers;
mod windows;

#[allow(unused_imports)]
use readiness::*;
#[allow(unused_imports)]
use refused_kinds::*;
#[allow(unused_imports)]
use sources::*;
#[allow(unused_imports)]
use templates_and_overrides::*;
#[allow(unused_imports)]
use triggers::*;
#[allow(unused_imports)]
use windows::*;
