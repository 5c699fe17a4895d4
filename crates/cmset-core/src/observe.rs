//! Plain views of what the I/O layer observed in the cluster. The planners take these, never API objects
//! fetched on their own, so every decision can be tested from literal data.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::health::{Health, Wave};
use crate::refs::{self, Referenced};

/// The workload kinds cmset rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 3] = [Self::Deployment, Self::StatefulSet, Self::DaemonSet];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::DaemonSet => "DaemonSet",
        }
    }

    pub fn parse(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl std::fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An opted-in workload: its identity and the pod spec of its current template.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadView {
    pub kind: WorkloadKind,
    pub name: String,
    pub uid: String,
    pub pod_spec: PodSpec,
    /// Labels of the pod template (cmset adds [`cmset_api::labels::MANAGED_TEMPLATE`] when it rewrites).
    pub template_labels: BTreeMap<String, String>,
    /// Its rollout wave (label `cmset.dev/wave`).
    pub wave: Wave,
    /// How its current template's rollout stands, from its status.
    pub health: Health,
}

impl WorkloadView {
    /// Every ConfigMap name the pod template references, in any form.
    pub fn referenced_names(&self) -> BTreeSet<String> {
        self.referenced_names_of(Referenced::ConfigMap)
    }

    /// Every name of an object of `kind` the pod template references, in any form.
    pub fn referenced_names_of(&self, kind: Referenced) -> BTreeSet<String> {
        refs::find_refs_to(&self.pod_spec, kind)
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    /// Every ConfigMap and Secret name the pod template references.
    pub fn referenced(&self) -> RefNames {
        RefNames::of(&self.pod_spec)
    }
}

/// The ConfigMap and Secret names a pod spec references: two separate name spaces, since a ConfigMap and
/// a Secret may share a name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RefNames {
    pub config_maps: BTreeSet<String>,
    pub secrets: BTreeSet<String>,
}

impl RefNames {
    pub fn of(spec: &PodSpec) -> Self {
        let names = |kind| {
            refs::find_refs_to(spec, kind)
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        Self {
            config_maps: names(Referenced::ConfigMap),
            secrets: names(Referenced::Secret),
        }
    }

    /// The names of objects of `kind`.
    pub fn get(&self, kind: Referenced) -> &BTreeSet<String> {
        match kind {
            Referenced::ConfigMap => &self.config_maps,
            Referenced::Secret => &self.secrets,
        }
    }

    pub fn contains(&self, kind: Referenced, name: &str) -> bool {
        self.get(kind).contains(name)
    }

    pub fn is_empty(&self) -> bool {
        self.config_maps.is_empty() && self.secrets.is_empty()
    }

    pub fn extend(&mut self, other: &RefNames) {
        self.config_maps.extend(other.config_maps.iter().cloned());
        self.secrets.extend(other.secrets.iter().cloned());
    }

    /// Every (kind, name) pair.
    pub fn iter(&self) -> impl Iterator<Item = (Referenced, &str)> {
        let config_maps = self
            .config_maps
            .iter()
            .map(|n| (Referenced::ConfigMap, n.as_str()));
        let secrets = self.secrets.iter().map(|n| (Referenced::Secret, n.as_str()));
        config_maps.chain(secrets)
    }
}

/// The kinds of object that keep an old pod template for rollback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HistoryKind {
    /// Kept by Deployments (`kubectl rollout undo` returns to one).
    ReplicaSet,
    /// Kept by StatefulSets and DaemonSets.
    ControllerRevision,
}

impl HistoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReplicaSet => "ReplicaSet",
            Self::ControllerRevision => "ControllerRevision",
        }
    }

    pub fn api_version(self) -> &'static str {
        "apps/v1"
    }
}

/// A retained ReplicaSet or ControllerRevision, reduced to what cmset needs: who owns it and which
/// ConfigMaps and Secrets its pod template names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryObject {
    pub kind: HistoryKind,
    pub name: String,
    pub uid: String,
    /// UID of the workload that controls it, if any.
    pub owner_uid: Option<String>,
    pub referenced: RefNames,
}

/// A revision (a ConfigMap, or a Secret of a SecretSet), metadata only: content never needs to be read once the name is known, because
/// revisions are immutable and named by their content.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RevisionView {
    pub name: String,
    pub uid: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub owner_references: Vec<OwnerReference>,
    pub being_deleted: bool,
}

impl RevisionView {
    /// The revision number recorded on it, if it parses.
    pub fn number(&self) -> Option<i64> {
        self.annotations.get(cmset_api::labels::REVISION)?.parse().ok()
    }

    /// Whether the set with this UID is its controller.
    pub fn is_controlled_by(&self, set_uid: &str) -> bool {
        self.owner_references
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == set_uid)
    }
}
