//! Turns API objects into the plain views `cmset-core` plans from.

use cmset_core::health::{Progress, Wave, health};
use cmset_core::observe::{HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind, WorkloadView};
use cmset_core::refs;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::core::PartialObjectMeta;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

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

/// A workload kind cmset rewrites: its pod template and its kind.
pub trait Workload: Object {
    const KIND: WorkloadKind;
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// The status fields its health is read from (see [`cmset_core::health`]).
    fn progress(&self) -> Progress;
}

fn generation<K: Resource>(obj: &K) -> i64 {
    obj.meta().generation.unwrap_or(0)
}

impl Workload for Deployment {
    const KIND: WorkloadKind = WorkloadKind::Deployment;
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
    fn progress(&self) -> Progress {
        let status = self.status.clone().unwrap_or_default();
        let deadline_exceeded = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded"));
        Progress::Deployment {
            generation: generation(self),
            observed_generation: status.observed_generation.unwrap_or(0),
            replicas: self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            total: status.replicas.unwrap_or(0),
            updated: status.updated_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            deadline_exceeded,
        }
    }
}

impl Workload for StatefulSet {
    const KIND: WorkloadKind = WorkloadKind::StatefulSet;
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
    fn progress(&self) -> Progress {
        let status = self.status.clone().unwrap_or_default();
        let spec = self.spec.as_ref();
        let strategy = spec.and_then(|s| s.update_strategy.as_ref());
        let partition = strategy
            .and_then(|u| u.rolling_update.as_ref())
            .and_then(|r| r.partition)
            .unwrap_or(0);
        let on_delete = is_on_delete(strategy.and_then(|u| u.type_.as_deref()));
        Progress::StatefulSet {
            generation: generation(self),
            observed_generation: status.observed_generation.unwrap_or(0),
            replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
            partition,
            on_delete,
            updated: status.updated_replicas.unwrap_or(0),
            ready: status.ready_replicas.unwrap_or(0),
            current_revision: status.current_revision,
            update_revision: status.update_revision,
        }
    }
}

impl Workload for DaemonSet {
    const KIND: WorkloadKind = WorkloadKind::DaemonSet;
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().map(|s| &s.template)
    }
    fn progress(&self) -> Progress {
        let status = self.status.clone().unwrap_or_default();
        Progress::DaemonSet {
            generation: generation(self),
            observed_generation: status.observed_generation.unwrap_or(0),
            desired: status.desired_number_scheduled,
            on_delete: is_on_delete(
                self.spec
                    .as_ref()
                    .and_then(|s| s.update_strategy.as_ref())
                    .and_then(|u| u.type_.as_deref()),
            ),
            updated: status.updated_number_scheduled.unwrap_or(0),
            available: status.number_available.unwrap_or(0),
        }
    }
}

/// An `updateStrategy.type` of `OnDelete` (StatefulSets and DaemonSets spell it alike).
fn is_on_delete(strategy_type: Option<&str>) -> bool {
    strategy_type == Some("OnDelete")
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

pub fn workload_view<K: Workload>(obj: &K) -> Option<WorkloadView> {
    let template = obj.template()?;
    Some(WorkloadView {
        kind: K::KIND,
        name: obj.meta().name.clone()?,
        uid: obj.meta().uid.clone()?,
        pod_spec: template.spec.clone().unwrap_or_default(),
        template_labels: template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default(),
        wave: Wave::parse(obj.labels().get(cmset_api::labels::WAVE).map(String::as_str)),
        health: health(&obj.progress()),
    })
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
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn progress_reads_the_update_strategy() {
        let sts = |strategy: serde_json::Value| -> StatefulSet {
            serde_json::from_value(json!({
                "metadata": {"name": "db", "generation": 3},
                "spec": {"selector": {}, "serviceName": "db", "template": {}, "replicas": 2,
                         "updateStrategy": strategy},
                "status": {"replicas": 2, "observedGeneration": 3, "readyReplicas": 2, "updatedReplicas": 1},
            }))
            .unwrap()
        };
        let Progress::StatefulSet {
            on_delete, partition, ..
        } = sts(json!({"type": "OnDelete"})).progress()
        else {
            panic!("a StatefulSet's progress")
        };
        assert_eq!((on_delete, partition), (true, 0));
        let rolling = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 1}});
        let Progress::StatefulSet {
            on_delete, partition, ..
        } = sts(rolling).progress()
        else {
            panic!("a StatefulSet's progress")
        };
        assert_eq!((on_delete, partition), (false, 1));

        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "agent", "generation": 1},
            "spec": {"selector": {}, "template": {}, "updateStrategy": {"type": "OnDelete"}},
        }))
        .unwrap();
        assert!(matches!(
            ds.progress(),
            Progress::DaemonSet { on_delete: true, .. }
        ));
    }
}
