//! What a revision looks like (a ConfigMap of a ConfigMapSet, a Secret of a SecretSet): its content,
//! metadata and owners, and how an existing object that already holds a revision's name is judged
//! (adopt it, take it over, or count a collision).

use std::collections::BTreeMap;
use std::fmt;

use cmset_api::labels;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Map, Value, json};

use crate::revisions::naming::{revision_name, set_label_value};
use crate::set::{Content, SetRef};
use crate::workloads::observe::{HistoryObject, RevisionView, WorkloadKind, WorkloadView};

/// The name a new revision of `content` gets, given the set's collision count.
pub fn next_revision_name(set: SetRef<'_>, content: &Content<'_>) -> String {
    revision_name(set.name(), &content.hash(set.collision_count()))
}

/// The identity of the content a set holds itself; `None` in source mode, where the source holds it.
pub fn inline_identity(set: SetRef<'_>) -> Option<String> {
    match set.source() {
        crate::set::Source::Inline(content) => Some(content.identity()),
        crate::set::Source::Named(_) => None,
    }
}

pub fn set_uid(set: SetRef<'_>) -> String {
    set.uid()
}

/// Labels every revision carries: the template's, then cmset's own (which win; validation rejects
/// template keys under `cmset.dev/` anyway).
pub fn desired_labels(set: SetRef<'_>) -> BTreeMap<String, String> {
    let mut labels = set.template_metadata().labels.clone();
    labels.insert(labels::SET.to_string(), set_label_value(set.name()));
    labels
}

/// Annotations a revision with this number and content carries.
pub fn desired_annotations(set: SetRef<'_>, number: i64, content: &str) -> BTreeMap<String, String> {
    let mut annotations = set.template_metadata().annotations.clone();
    annotations.insert(labels::REVISION.to_string(), number.to_string());
    annotations.insert(labels::CONTENT_HASH.to_string(), content.to_string());
    annotations
}

/// The controller reference from a revision to its set: deleting the set lets the garbage collector
/// delete every revision that has no other owner.
pub fn set_owner_reference(set: SetRef<'_>) -> OwnerReference {
    OwnerReference {
        api_version: format!("{}/{}", cmset_api::GROUP, cmset_api::VERSION),
        kind: set.kind().as_str().to_string(),
        name: set.name().to_string(),
        uid: set.uid(),
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

/// At most this many workloads own a new revision: an owner reference is about 150 bytes, and a set
/// with more readers than this keeps the rest of its new revisions' owners by their history objects.
pub const MAX_READER_OWNERS: usize = 64;

/// The kinds a revision may be owned by as a reader: the `apps/v1` ones, which every supported server
/// serves at that version (an owner reference must name a version the garbage collector can resolve).
const READER_OWNER_KINDS: [WorkloadKind; 3] = [
    WorkloadKind::Deployment,
    WorkloadKind::StatefulSet,
    WorkloadKind::DaemonSet,
];

/// `workload`, a reader of a set, as an owner of the set's new revision: it keeps the revision after
/// the set is gone, for as long as it lives (its ReplicaSets or ControllerRevisions then need no owner
/// patch of their own). Never a controller and never blocking. `None` for kinds it cannot own.
pub fn reader_owner_reference(workload: &WorkloadView) -> Option<OwnerReference> {
    (READER_OWNER_KINDS.contains(&workload.kind) && !workload.uid.is_empty()).then(|| OwnerReference {
        api_version: "apps/v1".to_string(),
        kind: workload.kind.as_str().to_string(),
        name: workload.name.clone(),
        uid: workload.uid.clone(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    })
}

/// Whether `owner` is a reader owning a revision (see [`reader_owner_reference`]): that says nothing of
/// whether the revision is in use, which the reader's own names and history tell.
pub fn is_reader_owner(owner: &OwnerReference) -> bool {
    owner.api_version == "apps/v1"
        && owner.controller != Some(true)
        && READER_OWNER_KINDS.iter().any(|k| k.as_str() == owner.kind)
}

/// A new revision to create: a ConfigMap or a Secret. Its `Debug` never shows a Secret's values.
#[derive(Clone, PartialEq)]
pub enum NewRevision {
    ConfigMap(ConfigMap),
    Secret(Secret),
}

impl NewRevision {
    pub fn name(&self) -> &str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Self::ConfigMap(cm) => &cm.metadata,
            Self::Secret(s) => &s.metadata,
        }
    }

    pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Self::ConfigMap(cm) => &mut cm.metadata,
            Self::Secret(s) => &mut s.metadata,
        }
    }

    /// The ConfigMap, for a ConfigMapSet's revision.
    pub fn config_map(&self) -> Option<&ConfigMap> {
        match self {
            Self::ConfigMap(cm) => Some(cm),
            Self::Secret(_) => None,
        }
    }
}

impl fmt::Debug for NewRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, content) = match self {
            Self::ConfigMap(cm) => ("ConfigMap", Content::of_config_map(cm)),
            Self::Secret(s) => ("Secret", Content::of_secret(s)),
        };
        f.debug_struct("NewRevision")
            .field("kind", &kind)
            .field("metadata", self.metadata())
            .field("content", &content)
            .finish()
    }
}

/// The object of a new revision: immutable, owned by the set, holding `content`.
pub fn new_revision(set: SetRef<'_>, content: &Content<'_>, name: &str, number: i64) -> NewRevision {
    let metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: set.metadata().namespace.clone(),
        labels: Some(desired_labels(set)),
        annotations: Some(desired_annotations(set, number, &content.identity())),
        owner_references: Some(vec![set_owner_reference(set)]),
        ..ObjectMeta::default()
    };
    match *content {
        Content::ConfigMap { data, binary_data } => NewRevision::ConfigMap(ConfigMap {
            metadata,
            immutable: Some(true),
            data: data.filter(|d| !d.is_empty()).cloned(),
            binary_data: binary_data.filter(|d| !d.is_empty()).cloned(),
        }),
        Content::Secret { type_, data } => NewRevision::Secret(Secret {
            metadata,
            immutable: Some(true),
            type_: Some(
                type_
                    .filter(|t| !t.is_empty())
                    .unwrap_or(crate::set::DEFAULT_SECRET_TYPE)
                    .to_string(),
            ),
            data: data.filter(|d| !d.is_empty()).cloned(),
            string_data: None,
        }),
    }
}

/// What to make of an object that already holds the name a new revision was meant to get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExistingName {
    /// Same content, same set as controller: it is this revision already (the create raced a restart,
    /// or the cache had not seen it yet).
    Adopt,
    /// Same content and no controller at all: most likely what kustomize's configMapGenerator or
    /// secretGenerator made under the very same name (cmset's names are its names). It becomes the
    /// revision (see [`claim_patch`]), so a team replacing a generator by a set rolls no pod.
    Claim,
    /// Other content or another controller: never overwritten, never deleted; the set's collision
    /// count is bumped so that the next name differs.
    Collision,
}

/// The object found under a revision's name, as far as judging it goes.
#[derive(Clone, Copy, Debug)]
pub struct Existing<'a> {
    pub metadata: &'a ObjectMeta,
    pub content: Content<'a>,
    pub immutable: Option<bool>,
}

impl<'a> Existing<'a> {
    pub fn config_map(cm: &'a ConfigMap) -> Self {
        Self {
            metadata: &cm.metadata,
            content: Content::of_config_map(cm),
            immutable: cm.immutable,
        }
    }

    pub fn secret(secret: &'a Secret) -> Self {
        Self {
            metadata: &secret.metadata,
            content: Content::of_secret(secret),
            immutable: secret.immutable,
        }
    }
}

pub fn classify_existing(existing: Existing<'_>, set: SetRef<'_>, content: &Content<'_>) -> ExistingName {
    let controller = existing
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let same_content = existing.content.same(content);
    match controller {
        Some(c) if c.uid == set.uid() && same_content && existing.immutable == Some(true) => {
            ExistingName::Adopt
        }
        None if same_content && existing.metadata.deletion_timestamp.is_none() => ExistingName::Claim,
        _ => ExistingName::Collision,
    }
}

/// The patch that makes an unowned object of the revision's name and content the revision: the set as
/// its controller, cmset's label (so its watch sees it, and the planner brings the rest of its metadata
/// to what is desired), and `immutable: true`. It carries the version that was compared, so that a
/// content change in between makes it fail instead of claiming other content.
pub fn claim_patch(existing: &ObjectMeta, set: SetRef<'_>) -> Value {
    let mut owners: Vec<OwnerReference> = existing.owner_references.clone().unwrap_or_default();
    owners.push(set_owner_reference(set));
    json!({
        "metadata": {
            "resourceVersion": existing.resource_version,
            "labels": { labels::SET: set_label_value(set.name()) },
            "ownerReferences": owners,
        },
        "immutable": true,
    })
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

/// The live revision holding `content`: found by its content mark, or failing that (someone removed the
/// annotation) by the collision-free name, which only this content can have. The metadata stage then
/// restores the mark.
pub(crate) fn revision_with_content<'a, I>(
    set: SetRef<'_>,
    owned: I,
    content: &str,
) -> Option<&'a RevisionView>
where
    I: IntoIterator<Item = &'a RevisionView>,
    I::IntoIter: Clone,
{
    let live = owned.into_iter().filter(|r| !r.being_deleted);
    let plain_name = revision_name(set.name(), content);
    live.clone()
        .find(|r| r.annotations.get(labels::CONTENT_HASH).map(String::as_str) == Some(content))
        .or_else(|| {
            live.clone()
                .find(|r| r.name == plain_name && !r.annotations.contains_key(labels::CONTENT_HASH))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmset_api::{ConfigMapSet, ConfigMapSetSpec};

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
            let set = set();
            let content = Content::of_template(&set.spec.template);
            assert_eq!(
                classify_existing(Existing::config_map(&existing), (&set).into(), &content),
                expected,
                "{why}"
            );
        }
        let mut going = configmap("1", None, None);
        // Any time will do: only the presence of a deletion timestamp matters.
        going.metadata.deletion_timestamp = serde_json::from_value(json!("2026-11-23T10:00:00Z")).unwrap();
        let set = set();
        let content = Content::of_template(&set.spec.template);
        assert_eq!(
            classify_existing(Existing::config_map(&going), (&set).into(), &content),
            Collision,
            "being deleted"
        );
    }

    #[test]
    fn a_claim_adds_the_set_as_controller_its_label_and_immutability_on_the_compared_version() {
        let mut existing = configmap("1", None, None);
        existing.metadata.owner_references = Some(vec![OwnerReference {
            uid: "someone".into(),
            controller: Some(false),
            ..OwnerReference::default()
        }]);
        let set = set();
        let patch = claim_patch(&existing.metadata, (&set).into());
        assert_eq!(patch["immutable"], true);
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        assert_eq!(patch["metadata"]["labels"][labels::SET], "app");
        let owners = patch["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 2, "existing owners are kept");
        assert_eq!(owners[1]["uid"], "set-uid");
        assert_eq!(owners[1]["controller"], true);
    }
}
