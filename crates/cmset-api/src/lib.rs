//! The `ConfigMapSet` custom resource (`configmapsets.cmset.dev`, version `v1alpha1`), the
//! `SecretSet` ([`secret_set`], `secretsets.cmset.dev`) and the `AnalysisTemplate` their rollouts
//! name ([`analysis`], `analysistemplates.cmset.dev`).
//!
//! This crate holds only types and constants: no client, no async. Everything a user writes in YAML and
//! everything cmset reports back is defined here, so the CRD generated from it is the API contract.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod analysis;
pub mod checks;
pub mod labels;
pub mod overrides;
pub mod secret_set;
pub mod validation;
pub mod windows;

pub use analysis::{
    AnalysisArg, AnalysisArgType, AnalysisRef, AnalysisRunStatus, AnalysisTemplate, AnalysisTemplateSpec,
    AnalysisVerdict,
};
pub use checks::{Check, CheckRecord};
pub use overrides::{OverriddenKind, OverriddenRollout, OverriddenSet, WindowOverride, WindowOverrideSpec};
pub use secret_set::{SecretSet, SecretSetSpec, SecretSetStatus, SecretTemplate};
pub use validation::{ConfigMapKeyRef, ContentFormat, KeyValidation, SchemaSource, ValidationSpec};
pub use windows::{ChangeWindow, ChangeWindowSpec, RolloutWindow, WindowKind};

/// API group of every cmset resource.
pub const GROUP: &str = "cmset.dev";
/// The only served version.
pub const VERSION: &str = "v1alpha1";
/// Default number of old, unused revisions kept per set, the same default as Deployments use.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
/// Upper bound on keys per map. It bounds the cost the API server estimates for the CEL rules below.
pub const MAX_KEYS: u32 = 10_000;
/// A ConfigMap (and so a revision) may hold at most this many bytes: the sum of its `data` values and
/// decoded `binaryData` values (Kubernetes does not count keys).
pub const MAX_CONFIGMAP_BYTES: usize = 1024 * 1024;

/// Longest name of an object Kubernetes accepts (a DNS subdomain, RFC 1123).
pub const MAX_DNS_SUBDOMAIN_LEN: usize = 253;
/// Records of `status.notifications` one set keeps at most (one per subscription and condition).
pub const MAX_NOTIFICATION_RECORDS: u32 = 128;

/// A DNS subdomain (RFC 1123) as Kubernetes checks most object names, without the length limit:
/// dot-separated parts of lowercase letters, digits and `-`, each starting and ending with a letter or
/// digit. The same expression as Kubernetes' own `dns1123SubdomainFmt`.
pub const DNS_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// Desired configuration: cmset turns every distinct content of `template` into an immutable,
/// content-hashed ConfigMap revision and points opted-in workloads at the current one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cmset.dev",
    version = "v1alpha1",
    kind = "ConfigMapSet",
    plural = "configmapsets",
    singular = "configmapset",
    shortname = "cmset",
    namespaced,
    doc = "A ConfigMapSet owns the immutable, content-hashed ConfigMap revisions of one configuration and keeps opted-in workloads pointed at the current one.",
    status = "ConfigMapSetStatus",
    printcolumn = r#"{"name":"Revision","type":"integer","description":"Number of the current revision","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"ConfigMap","type":"string","description":"Name of the current revision's ConfigMap","jsonPath":".status.currentRevision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name.size() <= 242").message("metadata.name must be at most 242 characters so that '-<hash>' fits in a ConfigMap name (253)"),
    validation = Rule::new("!has(self.spec.configMapName) || !has(self.spec.template) || (!has(self.spec.template.data) && !has(self.spec.template.binaryData))").message("spec.configMapName names the source of the content: spec.template.data and spec.template.binaryData must then be left out"),
)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSetSpec {
    /// The ConfigMap every revision is stamped from: its content (`data`, `binaryData`) unless
    /// `configMapName` names a source, and in any case the labels and annotations of the revisions.
    #[serde(default)]
    pub template: ConfigMapTemplate,

    /// Source mode: a ConfigMap in the same namespace, produced by another tool (a Helm chart, a
    /// generator), whose `data` and `binaryData` are versioned instead of `template.data`/`binaryData`.
    /// cmset only reads it; whatever produces it keeps writing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = MAX_DNS_SUBDOMAIN_LEN), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub config_map_name: Option<String>,

    /// How many old revisions that nothing uses any more are kept for rollback (default 10). Revisions
    /// still named by a workload, one of its ReplicaSets or ControllerRevisions, or a Pod are always kept.
    #[serde(default = "default_revision_history_limit")]
    #[schemars(range(min = 0))]
    pub revision_history_limit: i32,

    /// How a new revision reaches the workloads: in waves (by their `cmset.dev/wave` label), gated on
    /// their health, and rolled back when it fails. Left out, every workload moves at once and a
    /// failure is only reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,

    /// The format and schema each key's value must have: content that fails is refused at admission,
    /// and never becomes a revision.
    #[serde(default, skip_serializing_if = "ValidationSpec::is_empty")]
    pub validation: ValidationSpec,

    /// The application's own checks, each a Job run against a new revision before its rollout's first
    /// wave opens: a failed check fails the revision and nothing moves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = checks::MAX_CHECKS))]
    pub checks: Vec<Check>,
}

pub(crate) fn default_revision_history_limit() -> i32 {
    DEFAULT_REVISION_HISTORY_LIMIT
}

/// Default of [`RolloutSpec::progress_deadline_seconds`], the same as a Deployment's.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;

/// How a new revision is rolled out to the workloads that read the set.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// Seconds every workload of a wave must stay healthy on the new revision before the next wave
    /// moves (default 0).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub stabilization_seconds: i32,

    /// Seconds a workload has, from being moved to the new revision, to complete its rollout and be
    /// healthy; later it counts as failed (default 600). A Deployment whose own `Progressing` condition
    /// reports `ProgressDeadlineExceeded` fails at once.
    #[serde(default = "default_progress_deadline_seconds")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: i32,

    /// Move a failed workload back to the revision it ran before, in one patch, as `kubectl rollout
    /// undo` would. Either way a failure stops the rollout: later waves never receive the revision.
    #[serde(default)]
    pub auto_rollback: bool,

    /// Hold the rollout: no workload is moved to a new revision and no wave opens until it is false
    /// again; workloads already moved stay where they are. (`kubectl cmset pause` holds it without
    /// changing the spec: annotation `cmset.dev/paused`.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// `Manual`: after each wave's stabilization window the next wave waits for `kubectl cmset
    /// promote` (recorded in annotation `cmset.dev/promoted`, outside the spec). `Auto` (the default):
    /// it opens at once.
    #[serde(default, skip_serializing_if = "Promotion::is_auto")]
    pub promotion: Promotion,

    /// Metric analysis: AnalysisTemplates (cluster-scoped, installed by cluster admins) whose
    /// Prometheus queries run during each wave's stabilization window, with the arguments each
    /// declares. A query that fails its condition more often than the template's failureLimit fails
    /// the wave, as an unhealthy workload does; one with no data, or an unreachable Prometheus, holds
    /// the wave until the progress deadline fails it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis: Vec<AnalysisRef>,

    /// When workloads may move: moving a workload to a new revision and opening a
    /// wave happen only while the windows allow, and a rollout held by them waits where it stands
    /// (phase `Waiting`) with its clocks stopped. Rollbacks, new workloads and revisions are never
    /// held. They add to the cluster's `ChangeWindow`s, so they can only narrow them: these Allow
    /// windows and the cluster's must each allow a move.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = windows::MAX_WINDOWS))]
    pub windows: Vec<RolloutWindow>,

    /// `Waves` (the default): the rollout goes wave by wave, held by pauses, promotions, windows and
    /// the cluster's rollout budget. `Immediate`: every new revision reaches every reader at once, with
    /// no wave, pause or budget, and no rollback (cmset's own, or a manual one) leaves a reader on an
    /// older revision: for credentials a secret manager rotates and soon revokes. Change windows still
    /// bind it (the set's own, and the cluster's unless a ChangeWindow exempts `Immediate`): held, every
    /// reader keeps its revision until a window lets it move.
    #[serde(default, skip_serializing_if = "Strategy::is_waves")]
    pub strategy: Strategy,
}

/// How a new revision reaches the readers.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Strategy {
    #[default]
    Waves,
    Immediate,
}

impl Strategy {
    pub fn is_waves(&self) -> bool {
        *self == Self::Waves
    }
}

/// Whether the next wave opens by itself or when someone promotes the rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Promotion {
    #[default]
    Auto,
    Manual,
}

impl Promotion {
    pub fn is_auto(&self) -> bool {
        *self == Self::Auto
    }
}

fn default_progress_deadline_seconds() -> i32 {
    DEFAULT_PROGRESS_DEADLINE_SECONDS
}

impl Default for RolloutSpec {
    fn default() -> Self {
        Self {
            stabilization_seconds: 0,
            progress_deadline_seconds: DEFAULT_PROGRESS_DEADLINE_SECONDS,
            auto_rollback: false,
            paused: false,
            promotion: Promotion::Auto,
            analysis: Vec::new(),
            windows: Vec::new(),
            strategy: Strategy::Waves,
        }
    }
}

/// Content and metadata of the ConfigMap revisions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.data) || !has(self.binaryData) || !self.data.exists(k, k in self.binaryData)",
    "message": "a key may not appear in both data and binaryData",
}]))]
pub struct ConfigMapTemplate {
    /// Labels and annotations copied onto every revision. They are not part of the content hash:
    /// changing them updates the existing revisions in place and rolls no pods.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,

    /// UTF-8 entries, as in a ConfigMap's `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = MAX_KEYS))]
    pub data: Option<BTreeMap<String, String>>,

    /// Binary entries, base64-encoded, as in a ConfigMap's `binaryData`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "binary_data_schema")]
    pub binary_data: Option<BTreeMap<String, ByteString>>,
}

/// `ByteString` has no schema of its own: a map of base64 strings, as in a ConfigMap.
fn binary_data_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": { "type": "string", "format": "byte" },
        "maxProperties": MAX_KEYS,
    })
}

/// The part of object metadata a template may set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// What cmset observed and did, compatible with kstatus (`observedGeneration`, `Ready`, `Reconciling`
/// and `Stalled` conditions), so `kubectl wait --for=condition=Ready`, GitOps health checks and Helm's
/// `--wait` work.
// Lists are always serialized, empty ones as `[]`: status is written by server-side apply, and sending
// an empty list is what clears one that became empty.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSetStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Number of the current revision. Numbers only grow; returning to old content renumbers the
    /// existing revision instead of creating a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,

    /// Name of the ConfigMap holding the current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,

    /// Bumped when a revision name is already taken by a ConfigMap with other content or another owner;
    /// it enters the hash so that the next name differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,

    /// `Ready`: the current revision exists and every opted-in workload either uses it or is pinned
    /// to an older revision by a rollback. `Stalled`: the spec cannot be rolled out as it is.
    #[serde(default)]
    pub conditions: Vec<Condition>,

    /// Opted-in workloads of the namespace that reference this set, and the revision each runs. When
    /// the list would outgrow the status (thousands of readers), the settled ones are counted in
    /// `settledWorkloads` instead, and what still does not fit is counted in `omittedWorkloads`;
    /// `kubectl cmset status` lists every workload either way, from the workloads themselves.
    #[serde(default)]
    pub workloads: Vec<WorkloadStatus>,

    /// Workloads left out of `workloads` because they are settled: each runs the current revision,
    /// ran it while it was current, and waits for nothing. Only their rollout record is kept (which
    /// tells a later `kubectl rollout undo` from an update not yet made). Absent while every workload
    /// fits in `workloads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_workloads: Option<SettledWorkloads>,

    /// Workloads neither in `workloads` nor in `settledWorkloads`, because the status would have
    /// outgrown what the API server stores. Their state is still counted in the `Ready` condition.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub omitted_workloads: i32,

    /// Every revision that exists, newest first.
    #[serde(default)]
    pub history: Vec<RevisionStatus>,

    /// The rollout of the current revision: the wave in progress, or how it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,

    /// Who hears about this set's rollouts (its `notifications.cmset.dev/subscribe.*` annotations and
    /// the operator's `cmset-notifications` subscriptions that select it), and the last delivery to
    /// each. Written by the notifier alone, under its own field manager (`cmset-notifications`): the
    /// set controller's status writes never carry it. At most 128 records
    /// (`MAX_NOTIFICATION_RECORDS`); the subscriptions beyond are refused (an Event says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_NOTIFICATION_RECORDS))]
    pub notifications: Option<Vec<NotificationStatus>>,

    /// The checks (`spec.checks`) cmset ran against the revisions in `history`: each Job's uid and
    /// verdict. Written by the checks alone, under their own field manager (`cmset-checks`): the set
    /// controller's status writes never carry it. At most 128 records (`MAX_CHECK_RECORDS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = checks::MAX_CHECK_RECORDS))]
    pub checks: Option<Vec<CheckRecord>>,
}

/// One subscription of a set (a trigger, a service and a recipient) and what it last heard.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotificationStatus {
    /// `on-rollout-failed`, ... or a trigger of the operator's configuration.
    pub trigger: String,
    /// Which condition of the trigger, by its index: in records written before `conditionKey`
    /// (read, then rewritten with it); 0 in newer ones.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub condition: i32,
    /// Which condition of the trigger, by a hash of its content (`on`, `when`, `send`, `oncePer`):
    /// reordering or appending conditions keeps the records of the others.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub condition_key: String,
    /// The service's name in the configuration (`slack`, `teams`, a webhook's name).
    pub service: String,
    /// The channel or named webhook; empty for a webhook service.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub recipient: String,
    /// The event last heard, by its once-per key: an event with the same key is not sent again. When
    /// the subscription was first seen, the event that already stood (a subscription hears of what
    /// happens after it exists); empty when none did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub once: String,
    /// `Subscribed` (nothing sent yet), `Delivered`, `Retrying` (the event of `once` failed in a way
    /// that may pass and is tried again, with backoff, until it lands or the operator's
    /// `--notifications-max-age` has passed since `firstAttempt`), or `Failed` (for good).
    pub result: NotificationResult,
    /// When it was delivered, last attempted, failed, or first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Time>,
    /// While `Retrying`, and once `Failed` after retrying: when the event of `once` was first
    /// attempted. The maximum age counts from here, whichever replica leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_attempt: Option<Time>,
    /// Attempts at the event of `once` (every try of every delivery).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub attempts: i32,
    /// Why the last delivery failed (never a credential).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum NotificationResult {
    #[default]
    Subscribed,
    Delivered,
    Retrying,
    Failed,
}

impl NotificationResult {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Subscribed => "Subscribed",
            Self::Delivered => "Delivered",
            Self::Retrying => "Retrying",
            Self::Failed => "Failed",
        }
    }
}

/// Where the rollout of the current revision stands. It is the rollout's only memory: the controller
/// decides from it (and the workloads' own status), so a restart continues exactly where it was.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The revision being rolled out (the current one).
    pub revision: String,
    /// `Progressing`, `Paused` (held: `spec.rollout.paused` or `kubectl cmset pause`),
    /// `AwaitingPromotion` (a wave is done; the next waits for `kubectl cmset promote`), `Waiting` (held
    /// by a change window: see `reason` and `nextWindow`), `Complete` or `Failed`.
    pub phase: RolloutPhase,
    /// The wave in progress: workloads of this wave and lower ones may run the revision, higher waves
    /// wait. When the rollout failed, the wave it failed in.
    pub wave: i32,
    /// The waves of this rollout, lowest first (the `cmset.dev/wave` labels of the workloads taking
    /// part).
    #[serde(default)]
    pub waves: Vec<i32>,
    /// When every workload of the wave in progress was last seen complete and healthy, while it still
    /// is: the stabilization window counts from here. A pause or a wait for a promotion stops that
    /// clock: when the rollout goes on, this moves later by the time it was held. A change window
    /// does not stop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_healthy_since: Option<Time>,
    /// When this rollout began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Why it failed, naming the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when it has been `Paused`, `AwaitingPromotion` or `Waiting`. While a person holds it
    /// (`Paused`, `AwaitingPromotion`), no deadline, window or analysis interval runs out: the
    /// rollout's clocks stand still at this instant. A change window (`Waiting`) holds moves only:
    /// the workloads already moved keep their deadlines, stabilization and analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Time>,
    /// While `Waiting`: `OutsideWindow` (Allow windows apply and none is open) or the name of the open
    /// Deny window that holds it (`DenyWindow` when it has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While `Waiting`: when the windows next let moves happen. Absent when no window opens within
    /// the years cmset looks ahead (a schedule that never fires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Time>,
    /// A promotion (`cmset.dev/promoted` naming no rollout) that was on the set when this rollout
    /// began: it was given to an earlier rollout of the same revision and does not promote this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_promotion: Option<String>,
    /// The metric analysis of this rollout (`spec.rollout.analysis`): each query of the wave in
    /// progress (or the wave it ended in), its last value, its condition and its verdict; of earlier
    /// waves, the queries that name no workload and any that did not pass (a passed wave's
    /// per-workload queries are not kept, so thousands of workloads do not outgrow the object).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis: Vec<AnalysisRunStatus>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum RolloutPhase {
    #[default]
    Progressing,
    /// The set's checks (`spec.checks`) run against the revision; wave 0 opens when every one passed.
    Checking,
    Paused,
    AwaitingPromotion,
    Waiting,
    Complete,
    Failed,
}

impl RolloutPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Progressing => "Progressing",
            Self::Checking => "Checking",
            Self::Paused => "Paused",
            Self::AwaitingPromotion => "AwaitingPromotion",
            Self::Waiting => "Waiting",
            Self::Complete => "Complete",
            Self::Failed => "Failed",
        }
    }

    /// Still under way: progressing, held by a person (paused, awaiting promotion) or by a window.
    pub fn is_under_way(self) -> bool {
        matches!(
            self,
            Self::Progressing | Self::Checking | Self::Paused | Self::AwaitingPromotion | Self::Waiting
        )
    }

    /// Held: nothing more moves to the revision and no next wave opens. (Only `Paused` and
    /// `AwaitingPromotion` also stop the rollout's clocks.)
    pub fn is_held(self) -> bool {
        matches!(
            self,
            Self::Checking | Self::Paused | Self::AwaitingPromotion | Self::Waiting
        )
    }
}

/// One opted-in workload that references the set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    /// `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: String,
    pub name: String,
    /// Identifies the object instance: a workload deleted and created again under the same name is new.
    pub uid: String,
    /// The ConfigMap the workload's pod template names for this set (a revision, or the bare set name).
    pub revision: String,
    /// `Current`, `Pinned` (a rollback or an edit chose an older revision; left alone until the set's
    /// content changes), `Pending` (cmset is about to move it to the current revision), `Waiting` (held
    /// for a later wave, or by a failed rollout) or `RolledBack` (moved back by cmset after its rollout
    /// failed).
    pub state: WorkloadState,
    /// Its rollout wave: the `cmset.dev/wave` label (absent means 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub wave: i32,
    /// When cmset saw it move to the current revision: its progress deadline counts from here. A hold
    /// of the rollout (paused, awaiting promotion) stops that clock: when the rollout goes on, this
    /// moves later by the time it was held, so the deadline keeps the time it had left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved_at: Option<Time>,
    /// The revision it ran before the current one: where an automatic rollback takes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_revision: Option<String>,
    /// What it waits for, how its rollout goes, or why it was rolled back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last revision cmset saw this workload run while that revision was current. This is the
    /// durable record that tells a deliberate rollback apart from an update not yet made; it lives here
    /// because `kubectl rollout undo` restores a Deployment's annotations, but never this status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_out: Option<String>,
}

/// The settled readers of a set, counted instead of listed (see `ConfigMapSetStatus::workloads`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SettledWorkloads {
    /// The revision they run: the current one when this was written.
    pub revision: String,
    /// How many.
    pub count: i32,
    /// A key per UID, sorted: the first 12 hexadecimal digits of the UID's SHA-256 (a third of the
    /// room a UID takes).
    pub uids: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum WorkloadState {
    #[default]
    Pending,
    Current,
    Pinned,
    Waiting,
    RolledBack,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// One revision ConfigMap of the set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionStatus {
    pub name: String,
    pub revision: i64,
    /// Whether anything still uses it (a workload, a retained ReplicaSet or ControllerRevision, a Pod):
    /// such a revision is never pruned.
    pub in_use: bool,
    /// Its rollout failed (a workload did not become healthy on it); cmset does not try it again
    /// unless the content changes to it anew.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

impl ConfigMapSetStatus {
    /// The condition of the given type, if any.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

impl ConfigMapSet {
    /// The condition of the given type, if any.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.status.as_ref()?.condition(type_)
    }
}

/// The ConfigMapSet CRD as YAML, exactly as committed under `crds/`.
pub fn crd_yaml() -> String {
    use kube::CustomResourceExt;
    to_yaml(&ConfigMapSet::crd())
}

/// Every CRD of cmset: its name (also its file name under `crds/`, with `.yaml`) and its YAML, exactly
/// as committed.
pub fn crd_yamls() -> Vec<(&'static str, String)> {
    use kube::CustomResourceExt;
    vec![
        (ConfigMapSet::crd_name(), crd_yaml()),
        (SecretSet::crd_name(), to_yaml(&secret_set::crd())),
        (AnalysisTemplate::crd_name(), to_yaml(&AnalysisTemplate::crd())),
        (ChangeWindow::crd_name(), to_yaml(&ChangeWindow::crd())),
        (WindowOverride::crd_name(), to_yaml(&WindowOverride::crd())),
    ]
}

fn to_yaml(crd: &CustomResourceDefinition) -> String {
    let mut crd = serde_json::to_value(crd).expect("a CRD always serializes");
    drop_nullable(&mut crd);
    keep_droppable_status_objects_nullable(&mut crd);
    let yaml = serde_yaml_ng::to_string(&crd).expect("a CRD always serializes");
    format!(
        "# Generated by `cargo run -p cmset-api --bin crdgen`; do not edit. `make crds` rewrites it.\n{yaml}"
    )
}

/// The status fields holding an object that cmset's status apply may leave out after it once sent it.
const DROPPABLE_STATUS_OBJECTS: [&str; 2] = ["rollout", "settledWorkloads"];

/// Marks [`DROPPABLE_STATUS_OBJECTS`] nullable again. Server-side apply on a v1.20 API server leaves
/// `null` behind when a manager stops applying an object field it owned (a set that a change window
/// held, and that holds nothing any more, drops `rollout`), and then refuses the status it made itself
/// unless the schema allows `null` there: the set's status stopped following its changes. Newer servers
/// remove the field; readers take `null` as absent either way.
fn keep_droppable_status_objects_nullable(crd: &mut serde_json::Value) {
    let versions = crd
        .pointer_mut("/spec/versions")
        .and_then(serde_json::Value::as_array_mut);
    for version in versions.into_iter().flatten() {
        for field in DROPPABLE_STATUS_OBJECTS {
            let pointer = format!("/schema/openAPIV3Schema/properties/status/properties/{field}");
            if let Some(serde_json::Value::Object(schema)) = version.pointer_mut(&pointer) {
                schema.insert("nullable".into(), serde_json::Value::Bool(true));
            }
        }
    }
}

/// Removes `nullable: true`, which schemars gives every `Option` field. The API server publishes a
/// nullable field in OpenAPI v2 without its type (v2 has no `nullable`), so `kubectl explain` showed
/// `rollout <>` and could not descend into it. Without it nothing is lost: cmset never writes a null
/// (absent options are left out), and the API server prunes a null that a client sends for a field
/// that is not nullable, as if the field were absent.
fn drop_nullable(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(map) => {
            if map.get("nullable") == Some(&serde_json::Value::Bool(true)) {
                map.remove("nullable");
                // An optional enum lists `null` among its values; without `nullable` it cannot be one.
                if let Some(serde_json::Value::Array(values)) = map.get_mut("enum") {
                    values.retain(|v| !v.is_null());
                }
            }
            map.values_mut().for_each(drop_nullable);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nullable),
        _ => {}
    }
}
