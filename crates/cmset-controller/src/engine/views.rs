//! Turns API objects into the plain views `cmset-core` plans from.

#[cfg(test)]
use cmset_core::workloads::health::Health;
use cmset_core::workloads::observe::{
    HistoryKind, HistoryObject, Identity, RefNames, RevisionView, WorkloadKind, WorkloadView,
};
use cmset_core::workloads::refs;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::engine::stored_workload::StoredWorkload;

/// A namespaced kind a controller is keyed by, kept whole in a store: what kube's controller and store
/// need of it.
pub trait Object:
    Resource<DynamicType = (), Scope = NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<T> Object for T where
    T: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// Whether the workload carries the opt-in label.
pub fn opted_in<K: Resource>(obj: &K) -> bool {
    obj.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(cmset_api::labels::ENABLED))
        .map(String::as_str)
        == Some(cmset_api::labels::ENABLED_VALUE)
}

/// The view of an opted-in workload of `kind`; `None` when it did not opt in or has no pod template
/// where its kind keeps one.
pub fn workload_view(kind: WorkloadKind, obj: &StoredWorkload) -> Option<WorkloadView> {
    if !opted_in(obj) {
        return None;
    }
    let meta = &obj.metadata;
    let no_labels = Default::default();
    let identity = Identity {
        name: meta.name.as_deref()?,
        uid: meta.uid.as_deref()?,
        generation: meta.generation.unwrap_or(0),
        labels: meta.labels.as_ref().unwrap_or(&no_labels),
    };
    WorkloadView::of_parts(kind, &identity, &obj.body())
}

fn controller_uid<K: Resource>(obj: &K) -> Option<String> {
    obj.owner_references()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

pub fn replica_set_view(rs: &ReplicaSet) -> Option<HistoryObject> {
    let spec = rs.spec.as_ref()?.template.as_ref()?.spec.as_ref()?;
    Some(HistoryObject {
        kind: HistoryKind::ReplicaSet,
        name: rs.name_any(),
        uid: rs.uid()?,
        owner_uid: controller_uid(rs),
        referenced: RefNames::of(spec),
    })
}

/// A Job a CronJob made from a template cmset rewrote.
pub fn job_view(job: &Job) -> Option<HistoryObject> {
    let spec = job.spec.as_ref()?.template.spec.as_ref()?;
    Some(HistoryObject {
        kind: HistoryKind::Job,
        name: job.name_any(),
        uid: job.uid()?,
        owner_uid: controller_uid(job),
        referenced: RefNames::of(spec),
    })
}

pub fn controller_revision_view(cr: &ControllerRevision) -> Option<HistoryObject> {
    let spec = refs::pod_spec_from_controller_revision_data(&cr.data.as_ref()?.0)?;
    Some(HistoryObject {
        kind: HistoryKind::ControllerRevision,
        name: cr.name_any(),
        uid: cr.uid()?,
        owner_uid: controller_uid(cr),
        referenced: RefNames::of(&spec),
    })
}

/// A revision (ConfigMap or Secret) from its metadata.
pub fn revision_view<K>(cm: &PartialObjectMeta<K>) -> RevisionView
where
    PartialObjectMeta<K>: Resource,
{
    RevisionView {
        name: cm.name_any(),
        uid: cm.uid().unwrap_or_default(),
        labels: cm.labels().clone(),
        annotations: cm.annotations().clone(),
        owner_references: cm.owner_references().to_vec(),
        being_deleted: cm.metadata.deletion_timestamp.is_some(),
        created: cm.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()),
        resource_version: cm.metadata.resource_version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn dynamic(value: serde_json::Value) -> StoredWorkload {
        let kind = WorkloadKind::parse(value["kind"].as_str().unwrap()).unwrap();
        StoredWorkload::slim(kind, serde_json::from_value(value).unwrap())
    }

    #[test]
    fn a_view_needs_the_opt_in_and_a_template_where_the_kind_keeps_it() {
        let cron = |labels: serde_json::Value| {
            dynamic(json!({
                "apiVersion": "batch/v1beta1", "kind": "CronJob",
                "metadata": {"name": "nightly", "namespace": "team", "uid": "u1", "generation": 2, "labels": labels},
                "spec": {"schedule": "@daily", "jobTemplate": {"spec": {"template": {
                    "metadata": {"labels": {"app": "nightly"}},
                    "spec": {"containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "app"}}]}]}
                }}}}
            }))
        };
        let view = workload_view(WorkloadKind::CronJob, &cron(json!({"cmset.dev/enabled": "true"}))).unwrap();
        assert_eq!((view.name.as_str(), view.uid.as_str()), ("nightly", "u1"));
        assert!(view.referenced_names().contains("app"));
        assert!(view.health.is_healthy(), "a CronJob has nothing to roll out");
        assert!(workload_view(WorkloadKind::CronJob, &cron(json!({}))).is_none());
        assert!(
            workload_view(
                WorkloadKind::Deployment,
                &cron(json!({"cmset.dev/enabled": "true"}))
            )
            .is_none(),
            "a Deployment's template is not where a CronJob keeps it"
        );
    }

    #[test]
    fn a_rollouts_health_is_its_phase_once_its_generation_is_observed() {
        let rollout = |observed: &str, phase: &str| {
            dynamic(json!({
                "kind": "Rollout",
                "metadata": {"name": "web", "uid": "u", "generation": 3, "labels": {"cmset.dev/enabled": "true"}},
                "spec": {"template": {"spec": {"containers": []}}},
                "status": {"observedGeneration": observed, "phase": phase, "message": "too slow"}
            }))
        };
        let health = |o, p| {
            workload_view(WorkloadKind::Rollout, &rollout(o, p))
                .unwrap()
                .health
        };
        assert!(health("3", "Healthy").is_healthy());
        assert_eq!(health("2", "Healthy"), Health::Progressing);
        assert_eq!(health("3", "Paused"), Health::Progressing);
        assert!(matches!(health("3", "Degraded"), Health::Failed(m) if m.contains("too slow")));
    }
}
