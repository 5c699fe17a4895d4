//! What the planner's test files share: planning at a fixed time, revisions as the set controller
//! makes them, and a Deployment reading one ConfigMap.
// Each test file uses part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{ConfigMapSet, labels};
use cmset_core::revisions::revision::set_owner_reference;
use cmset_core::rollout::plan::{SetInput, SetPlan, plan_set};
use cmset_core::set::SourceState;
use cmset_core::workloads::health::{Health, Wave};
use cmset_core::workloads::observe::{HistoryObject, RevisionView, WorkloadKind, WorkloadView};
use k8s_openapi::api::core::v1::{ConfigMapEnvSource, Container, EnvFromSource, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Plans `set` from these observations, always at the same time. `pods` as the I/O layer passes them:
/// `None` until it has listed them.
pub fn plan_seeing(
    set: &ConfigMapSet,
    revisions: &[RevisionView],
    workloads: &[WorkloadView],
    history: &[HistoryObject],
    pods: Option<&BTreeSet<String>>,
) -> SetPlan {
    plan_set(&SetInput {
        set: set.into(),
        source: SourceState::Inline,
        revisions,
        workloads,
        history,
        pod_refs: pods,
        now: Time(Timestamp::from_second(1_800_000_000).unwrap()),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        schemas: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
    })
}

/// Revision `name` of `set` with `number`, as the set controller would have made it. Its content mark
/// is the name's suffix, as for revisions made without collisions.
pub fn revision_of(set: &ConfigMapSet, name: &str, number: i64) -> RevisionView {
    let content = name.rsplit('-').next().unwrap().to_string();
    RevisionView {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([(labels::SET.to_string(), set.metadata.name.clone().unwrap())]),
        annotations: BTreeMap::from([
            (labels::REVISION.to_string(), number.to_string()),
            (labels::CONTENT_HASH.to_string(), content),
        ]),
        owner_references: vec![set_owner_reference(set.into())],
        being_deleted: false,
        created: Some(number),
        resource_version: None,
    }
}

/// A healthy Deployment `name` of `wave` whose one container reads ConfigMap `reads` (by `envFrom`).
pub fn deployment_reading(name: &str, wave: Wave, reads: &str) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: name.into(),
        uid: format!("uid-{name}"),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(vec![EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: reads.to_string(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        template_labels: BTreeMap::new(),
        wave,
        health: Health::Healthy,
    }
}
