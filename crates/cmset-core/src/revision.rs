//! What a revision ConfigMap looks like: its content, metadata and owners, and how an existing ConfigMap
//! that already holds a revision's name is judged (adopt it, or count a collision).

use std::collections::BTreeMap;

use cmset_api::{ConfigMapSet, labels};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value, json};

use crate::hash::content_hash;
use crate::naming::{revision_name, set_label_value};
use crate::observe::{HistoryObject, RevisionView};

/// The hash of the set's content with no collision count: the identity of a revision's content.
pub fn content_identity(set: &ConfigMapSet) -> String {
    let t = &set.spec.template;
    content_hash(t.data.as_ref(), t.binary_data.as_ref(), 0)
}

/// The name a new revision of the current content gets, given the set's collision count.
pub fn next_revision_name(set: &ConfigMapSet) -> String {
    let t = &set.spec.template;
    let count = collision_count(set);
    revision_name(
        &set_name(set),
        &content_hash(t.data.as_ref(), t.binary_data.as_ref(), count),
    )
}

pub fn collision_count(set: &ConfigMapSet) -> i32 {
    set.status.as_ref().and_then(|s| s.collision_count).unwrap_or(0)
}

pub(crate) fn set_name(set: &ConfigMapSet) -> String {
    set.metadata.name.clone().unwrap_or_default()
}

pub fn set_uid(set: &ConfigMapSet) -> String {
    set.metadata.uid.clone().unwrap_or_default()
}

/// Labels every revision carries: the template's, then cmset's own (which win; validation rejects
/// template keys under `cmset.dev/` anyway).
pub fn desired_labels(set: &ConfigMapSet) -> BTreeMap<String, String> {
    let mut labels = set.spec.template.metadata.labels.clone();
    labels.insert(labels::SET.to_string(), set_label_value(&set_name(set)));
    labels
}

/// Annotations a revision with this number and content carries.
pub fn desired_annotations(set: &ConfigMapSet, number: i64, content: &str) -> BTreeMap<String, String> {
    let mut annotations = set.spec.template.metadata.annotations.clone();
    annotations.insert(labels::REVISION.to_string(), number.to_string());
    annotations.insert(labels::CONTENT_HASH.to_string(), content.to_string());
    annotations
}

/// The controller reference from a revision to its set: deleting the set lets the garbage collector
/// delete every revision that has no other owner.
pub fn set_owner_reference(set: &ConfigMapSet) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", cmset_api::GROUP, cmset_api::VERSION),
        kind: "ConfigMapSet".to_string(),
        name: set_name(set),
        uid: set_uid(set),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// An extra, non-controller owner: the ReplicaSet or ControllerRevision that names the revision. The
/// garbage collector deletes a ConfigMap only when all of its owners are gone, so the revision then lives
/// exactly as long as a rollback to that history object is possible, even after the set is deleted.
pub fn history_owner_reference(history: &HistoryObject) -> OwnerReference {
    OwnerReference {
        api_version: history.kind.api_version().to_string(),
        kind: history.kind.as_str().to_string(),
        name: history.name.clone(),
        uid: history.uid.clone(),
        controller: Some(false),
        // No blocking: a ReplicaSet's deletion must never wait on a ConfigMap.
        block_owner_deletion: Some(false),
    }
}

/// The ConfigMap of a new revision: immutable, owned by the set.
pub fn new_revision(set: &ConfigMapSet, name: &str, number: i64) -> ConfigMap {
    let t = &set.spec.template;
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: set.metadata.namespace.clone(),
            labels: Some(desired_labels(set)),
            annotations: Some(desired_annotations(set, number, &content_identity(set))),
            owner_references: Some(vec![set_owner_reference(set)]),
            ..ObjectMeta::default()
        },
        immutable: Some(true),
        data: t.data.clone().filter(|d| !d.is_empty()),
        binary_data: t.binary_data.clone().filter(|d| !d.is_empty()),
    }
}

/// What to make of a ConfigMap that already holds the name a new revision was meant to get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExistingName {
    /// Same content, same set as controller: it is this revision already (the create raced a restart,
    /// or the cache had not seen it yet).
    Adopt,
    /// Same content and no controller at all: most likely what kustomize's configMapGenerator made
    /// under the very same name (cmset's names are its names). It becomes the revision (see
    /// [`claim_patch`]), so a team replacing a generator by a set rolls no pod.
    Claim,
    /// Other content or another controller: never overwritten, never deleted; the set's collision
    /// count is bumped so that the next name differs.
    Collision,
}

pub fn classify_existing(existing: &ConfigMap, set: &ConfigMapSet) -> ExistingName {
    let controller = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let t = &set.spec.template;
    let same_data = non_empty(existing.data.as_ref()) == non_empty(t.data.as_ref());
    let same_binary = non_empty(existing.binary_data.as_ref()) == non_empty(t.binary_data.as_ref());
    let same_content = same_data && same_binary;
    match controller {
        Some(c) if c.uid == set_uid(set) && same_content && existing.immutable == Some(true) => {
            ExistingName::Adopt
        }
        None if same_content && existing.metadata.deletion_timestamp.is_none() => ExistingName::Claim,
        _ => ExistingName::Collision,
    }
}

/// The patch that makes an unowned ConfigMap of the revision's name and content the revision: the set as
/// its controller, cmset's label (so its watch sees it, and the planner brings the rest of its metadata
/// to what is desired), and `immutable: true`. It carries the version that was compared, so that a
/// content change in between makes it fail instead of claiming other content.
pub fn claim_patch(existing: &ConfigMap, set: &ConfigMapSet) -> Value {
    let mut owners: Vec<OwnerReference> = existing.metadata.owner_references.clone().unwrap_or_default();
    owners.push(set_owner_reference(set));
    json!({
        "metadata": {
            "resourceVersion": existing.metadata.resource_version,
            "labels": { labels::SET: set_label_value(&set_name(set)) },
            "ownerReferences": owners,
        },
        "immutable": true,
    })
}

fn non_empty<V>(map: Option<&BTreeMap<String, V>>) -> Option<&BTreeMap<String, V>> {
    map.filter(|m| !m.is_empty())
}

/// The strategic-merge patch that brings a revision's metadata to what is desired, or `None` when it is
/// already there. Labels and annotations not desired are removed (cmset created the object and owns its
/// metadata); owner references are only ever added, merged by UID, because the garbage collector removes
/// the ones whose owner is gone and a stale cache must never drop a live one.
pub fn metadata_patch(
    current: &RevisionView,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    owners: &[OwnerReference],
) -> Option<Value> {
    let mut metadata = Map::new();
    if let Some(diff) = map_diff(&current.labels, labels) {
        metadata.insert("labels".into(), diff);
    }
    if let Some(diff) = map_diff(&current.annotations, annotations) {
        metadata.insert("annotations".into(), diff);
    }
    let missing: Vec<&OwnerReference> = owners
        .iter()
        .filter(|o| !current.owner_references.iter().any(|c| c.uid == o.uid))
        .collect();
    if !missing.is_empty() {
        metadata.insert("ownerReferences".into(), json!(missing));
    }
    if metadata.is_empty() {
        None
    } else {
        Some(json!({ "metadata": metadata }))
    }
}

/// A merge-patch fragment turning `current` into `desired`: changed or new keys with their value,
/// removed keys as null.
fn map_diff(current: &BTreeMap<String, String>, desired: &BTreeMap<String, String>) -> Option<Value> {
    let mut diff = Map::new();
    for (k, v) in desired {
        if current.get(k) != Some(v) {
            diff.insert(k.clone(), Value::String(v.clone()));
        }
    }
    for k in current.keys() {
        if !desired.contains_key(k) {
            diff.insert(k.clone(), Value::Null);
        }
    }
    (!diff.is_empty()).then_some(Value::Object(diff))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmset_api::ConfigMapSetSpec;

    fn set() -> ConfigMapSet {
        let mut set = ConfigMapSet::new("app", ConfigMapSetSpec::default());
        set.metadata.uid = Some("set-uid".into());
        set.spec.template.data = Some(BTreeMap::from([("K".into(), "1".into())]));
        set
    }

    fn configmap(value: &str, controller: Option<&str>, immutable: Option<bool>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some("app-x".into()),
                resource_version: Some("42".into()),
                owner_references: controller.map(|uid| {
                    vec![OwnerReference {
                        uid: uid.into(),
                        controller: Some(true),
                        ..OwnerReference::default()
                    }]
                }),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("K".into(), value.into())])),
            immutable,
            ..ConfigMap::default()
        }
    }

    #[test]
    fn an_existing_name_is_adopted_claimed_or_a_collision() {
        use ExistingName::*;
        let table = [
            (
                configmap("1", Some("set-uid"), Some(true)),
                Adopt,
                "this set's own revision",
            ),
            (
                configmap("1", None, None),
                Claim,
                "a generator's ConfigMap: same content, no controller",
            ),
            (
                configmap("1", None, Some(true)),
                Claim,
                "the same, immutable already",
            ),
            (
                configmap("2", None, None),
                Collision,
                "no controller, other content",
            ),
            (
                configmap("1", Some("other"), Some(true)),
                Collision,
                "another controller",
            ),
            (
                configmap("2", Some("set-uid"), Some(true)),
                Collision,
                "this set's, other content",
            ),
        ];
        for (existing, expected, why) in table {
            assert_eq!(classify_existing(&existing, &set()), expected, "{why}");
        }
        let mut going = configmap("1", None, None);
        // Any time will do: only the presence of a deletion timestamp matters.
        going.metadata.deletion_timestamp = serde_json::from_value(json!("2026-11-23T10:00:00Z")).unwrap();
        assert_eq!(classify_existing(&going, &set()), Collision, "being deleted");
    }

    #[test]
    fn a_claim_adds_the_set_as_controller_its_label_and_immutability_on_the_compared_version() {
        let mut existing = configmap("1", None, None);
        existing.metadata.owner_references = Some(vec![OwnerReference {
            uid: "someone".into(),
            controller: Some(false),
            ..OwnerReference::default()
        }]);
        let patch = claim_patch(&existing, &set());
        assert_eq!(patch["immutable"], true);
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["metadata"]["labels"][labels::SET], "app");
        let owners = patch["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 2, "existing owners are kept");
        assert_eq!(owners[1]["uid"], "set-uid");
        assert_eq!(owners[1]["controller"], true);
    }
}
