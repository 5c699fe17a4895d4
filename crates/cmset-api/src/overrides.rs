//! Break glass: `WindowOverride` (`windowoverrides.cmset.dev`), one rollout of one set let through
//! the change windows.
//!
//! It is an object so that the API server, not cmset, decides who may break the glass: creating one
//! needs `create` on `windowoverrides.cmset.dev`, which only ClusterRole `cmset-break-glass` grants
//! (never `edit`, `admin` nor `cmset-edit`). It names the set by kind, name and uid (a set deleted and
//! created again under the same name is another set) and the rollout by revision and start, so it lets
//! that one rollout through and nothing after it.
//!
//! `spec.requestedBy` is written by cmset's admission webhook when the API server calls it for the
//! create: the user as the API server authenticated them, whatever the creator wrote there. Absent
//! (the webhook did not answer; it fails open), the override still counts, since RBAC admitted the
//! create, and its record reads "not recorded".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The text shown where an override has no record of who created it.
pub const NOT_RECORDED: &str = "not recorded";

/// One rollout of one set that the change windows may not hold.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cmset.dev",
    version = "v1alpha1",
    kind = "WindowOverride",
    plural = "windowoverrides",
    singular = "windowoverride",
    shortname = "wo",
    namespaced,
    derive = "PartialEq",
    doc = "A WindowOverride lets one rollout of one ConfigMapSet or SecretSet through the change windows (break glass). Creating one needs ClusterRole cmset-break-glass; cmset's admission webhook records who created it.",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.set.kind"}"#,
    printcolumn = r#"{"name":"Set","type":"string","jsonPath":".spec.set.name"}"#,
    printcolumn = r#"{"name":"Revision","type":"string","jsonPath":".spec.rollout.revision"}"#,
    printcolumn = r#"{"name":"Requested-By","type":"string","jsonPath":".spec.requestedBy"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
// What an override lets through is fixed when it is created (the webhook keeps the record too, on
// servers too old for this rule): to let another rollout through, create another.
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self == oldSelf",
    "message": "a WindowOverride's spec is immutable: create another",
}]))]
pub struct WindowOverrideSpec {
    /// The set whose rollout goes through the windows.
    pub set: OverriddenSet,

    /// The rollout it lets through: the set's `status.rollout` revision and start when it was created.
    pub rollout: OverriddenRollout,

    /// Why, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,

    /// Who created it, as the API server authenticated them: written by cmset's admission webhook at
    /// creation, replacing whatever the creator put here. Absent when the webhook did not answer
    /// ("not recorded").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub requested_by: Option<String>,
}

/// The set an override is for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverriddenSet {
    pub kind: OverriddenKind,

    /// The set's name, in the override's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// The set's `metadata.uid`: an override counts only for that very object, not for a set created
    /// again under the same name.
    #[schemars(length(min = 1, max = 128))]
    pub uid: String,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum OverriddenKind {
    ConfigMapSet,
    SecretSet,
}

impl OverriddenKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMapSet => "ConfigMapSet",
            Self::SecretSet => "SecretSet",
        }
    }
}

/// A rollout of a set: its revision and when it started (`status.rollout.revision` and
/// `status.rollout.startedAt`). A revision rolled out again starts again, so this names one rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OverriddenRollout {
    #[schemars(length(min = 1, max = 253))]
    pub revision: String,

    pub started_at: Time,
}
