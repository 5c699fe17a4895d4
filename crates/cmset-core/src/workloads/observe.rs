//! Plain views of what the I/O layer observed in the cluster. The planners take these, never API objects
//! fetched on their own, so every decision can be tested from literal data.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use cmset_api::labels;
use serde::Deserialize;
use serde_json::Value;

use crate::workloads::health::{self, Health, Wave};
use crate::workloads::refs::{self, Referenced};

pub use crate::workloads::kinds::WorkloadKind;

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
    /// The view of a workload object of `kind` (as JSON, in the API server's form), whether or not it
    /// opted in; `None` when it has no pod template where its kind keeps one.
    pub fn of(kind: WorkloadKind, object: &Value) -> Option<Self> {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let labels = object
            .pointer("/metadata/labels")
            .and_then(|l| BTreeMap::<String, String>::deserialize(l).ok())
            .unwrap_or_default();
        let identity = Identity {
            name: text("/metadata/name"),
            uid: text("/metadata/uid"),
            generation: object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            labels: &labels,
        };
        Self::of_parts(kind, &identity, object)
    }

    /// The view of a workload of `kind` from its identity and its body (the object's JSON, of which
    /// only the fields under `spec` and `status` are read).
    pub fn of_parts(kind: WorkloadKind, identity: &Identity<'_>, body: &Value) -> Option<Self> {
        let template = body.pointer(kind.template().as_str())?;
        let pod_spec = PodSpec::deserialize(template.get("spec")?).ok()?;
        let template_labels = template
            .pointer("/metadata/labels")
            .and_then(|l| BTreeMap::<String, String>::deserialize(l).ok())
            .unwrap_or_default();
        let progress = health::progress(kind.spec().health, identity.generation, body);
        Some(Self {
            kind,
            name: identity.name.to_string(),
            uid: identity.uid.to_string(),
            pod_spec,
            template_labels,
            wave: Wave::parse(identity.labels.get(labels::WAVE).map(String::as_str)),
            health: health::health(&progress),
        })
    }

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

/// Who a workload is, from its metadata.
#[derive(Clone, Copy, Debug)]
pub struct Identity<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub generation: i64,
    pub labels: &'a BTreeMap<String, String>,
}

/// The value of label `key` of an object as JSON.
pub fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object.pointer("/metadata/labels")?.get(key)?.as_str()
}

/// Whether an object (as JSON) carries the opt-in label.
pub fn opted_in(object: &Value) -> bool {
    label(object, labels::ENABLED) == Some(labels::ENABLED_VALUE)
}

/// The ConfigMap and Secret names a pod spec references: two separate name spaces, since a ConfigMap and
/// a Secret may share a name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RefNames {
    pub config_maps: Names,
    pub secrets: Names,
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
    pub fn get(&self, kind: Referenced) -> &Names {
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

/// Names, sorted and without repeats, in exactly the room they take. The index keeps the names of every
/// reader and history object for as long as they exist, most of them one name or two, where a
/// `BTreeSet` would hold a 280-byte node for one.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Names(Box<[String]>);

impl Names {
    pub fn contains(&self, name: &str) -> bool {
        self.0.binary_search_by(|n| n.as_str().cmp(name)).is_ok()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<String> for Names {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        let mut names: Vec<String> = names.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        Names(names.into_boxed_slice())
    }
}

impl<const N: usize> From<[String; N]> for Names {
    fn from(names: [String; N]) -> Self {
        names.into_iter().collect()
    }
}

impl IntoIterator for Names {
    type Item = String;
    type IntoIter = std::vec::IntoIter<String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a Names {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// The kinds of object that keep an old pod template for rollback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HistoryKind {
    /// Kept by Deployments (`kubectl rollout undo` returns to one).
    ReplicaSet,
    /// Kept by StatefulSets and DaemonSets.
    ControllerRevision,
    /// Made by CronJobs: each runs the template it was made from.
    Job,
}

impl HistoryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReplicaSet => "ReplicaSet",
            Self::ControllerRevision => "ControllerRevision",
            Self::Job => "Job",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Self::ReplicaSet | Self::ControllerRevision => "apps/v1",
            Self::Job => "batch/v1",
        }
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
    /// When it was created, in Unix seconds: when its content first became the set's. A move to it
    /// takes its turn in the rollout budget's line from this, so the line is the same on any replica,
    /// before and after a restart.
    pub created: Option<i64>,
    /// Its resourceVersion as observed: the precondition of its deletion.
    pub resource_version: Option<String>,
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Names are the set of what they were made from, as a `BTreeSet` would be: the same order,
        /// the same members, the same comparisons, in room for exactly the members.
        #[test]
        fn names_hold_what_a_sorted_set_would(
            a in proptest::collection::vec("[a-c]{0,3}", 0..8),
            b in proptest::collection::vec("[a-c]{0,3}", 0..8),
            probe in "[a-c]{0,3}",
        ) {
            let (names_a, set_a): (Names, BTreeSet<String>) =
                (a.iter().cloned().collect(), a.iter().cloned().collect());
            let (names_b, set_b): (Names, BTreeSet<String>) =
                (b.iter().cloned().collect(), b.iter().cloned().collect());
            prop_assert!(names_a.iter().eq(set_a.iter()));
            prop_assert_eq!(names_a.len(), set_a.len());
            prop_assert_eq!(names_a.is_empty(), set_a.is_empty());
            prop_assert_eq!(names_a.contains(&probe), set_a.contains(&probe));
            prop_assert_eq!(names_a.cmp(&names_b), set_a.cmp(&set_b));
            prop_assert_eq!(names_a == names_b, set_a == set_b);
            prop_assert!(names_a.clone().into_iter().eq(set_a.into_iter()));
            prop_assert_eq!(names_a.0.len(), names_a.len());
        }
    }

    #[test]
    fn a_pod_spec_s_names_are_kept_apart_by_kind() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"name": "app",
                "envFrom": [{"configMapRef": {"name": "b"}}, {"configMapRef": {"name": "a"}},
                    {"secretRef": {"name": "a"}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "b"}}]
        }))
        .unwrap();
        let names = RefNames::of(&spec);
        assert_eq!(names.config_maps, ["a".to_string(), "b".to_string()].into());
        assert_eq!(names.secrets, ["a".to_string()].into());
        assert!(names.contains(Referenced::Secret, "a") && !names.contains(Referenced::Secret, "b"));
        let pairs: Vec<_> = names.iter().collect();
        assert_eq!(
            pairs,
            [
                (Referenced::ConfigMap, "a"),
                (Referenced::ConfigMap, "b"),
                (Referenced::Secret, "a")
            ]
        );
    }
}
