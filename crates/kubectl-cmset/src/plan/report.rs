//! What a plan says, as data: serialized as it is for `-o json|yaml` (versioned, with the schema
//! shipped as `docs/plan.schema.json`), rendered for people by [`super::render`].

use std::collections::BTreeMap;

use cmset_core::set::SetRef;
use serde::Serialize;

/// The document `-o json|yaml` prints.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanDocument {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// `cluster` or `files`.
    pub against: &'static str,
    /// Why this mode, for people (the first line of the table).
    pub mode_note: String,
    pub plans: Vec<SetPlan>,
}

pub const API_VERSION: &str = "cmset.dev/v1alpha1";
pub const KIND: &str = "Plan";

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SetName {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl SetName {
    /// `configmapset/app`.
    pub fn resource(&self) -> String {
        format!("{}/{}", self.kind.to_ascii_lowercase(), self.name)
    }
}

/// One set's plan, verdict first.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetPlan {
    pub set: SetName,
    /// The file and document it came from.
    pub from: String,
    pub verdict: VerdictReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<Revision>,
    /// What the keys were compared with: the live revision's name, `--base`, or nothing (a new set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_against: Option<String>,
    pub keys: Vec<Key>,
    pub validation: Validation,
    pub checks: Checks,
    pub workloads: Vec<WorkloadRow>,
    pub holds: Vec<Hold>,
    /// Every change window that binds the set, the set's own and the cluster's, with its next opening
    /// (as `kubectl cmset windows` lists them).
    pub windows: Vec<crate::windows::WindowRow>,
    pub rollback: Vec<Rollback>,
    pub unknown: Vec<String>,
    pub basis: Basis,
}

impl SetPlan {
    /// A set refused before anything else could be planned.
    pub fn refused(set: SetName, from: String, messages: Vec<String>, basis: Basis) -> Self {
        Self {
            set,
            from,
            verdict: VerdictReport::refused(messages.clone()),
            revision: None,
            keys_against: None,
            keys: Vec::new(),
            validation: Validation {
                messages,
                webhook: None,
            },
            checks: Checks::default(),
            workloads: Vec::new(),
            holds: Vec::new(),
            windows: Vec::new(),
            rollback: Vec::new(),
            unknown: Vec::new(),
            basis,
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VerdictReport {
    /// `rollsOut`, `held`, `refused`, `noChange` or `revert`.
    pub result: String,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// For a revert: the number the revision had.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
}

impl VerdictReport {
    pub fn refused(messages: Vec<String>) -> Self {
        Self {
            result: "refused".into(),
            summary: format!("refused: {}", messages.join("; ")),
            ..Self::default()
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    /// Identical to kustomize's configMapGenerator/secretGenerator name for this content.
    pub name: String,
    /// Made by this change, or an existing one reused.
    pub new: bool,
    /// The number it gets.
    pub number: Option<i64>,
    /// The number it had, when it exists already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_number: Option<i64>,
    /// Revisions this change prunes.
    pub prunes: Vec<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Key {
    pub key: String,
    /// `added`, `removed` or `changed`.
    pub change: String,
    /// The key's diff as `kubectl cmset diff` prints it; never for a SecretSet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    /// The messages `kubectl apply` would give (empty: valid).
    pub messages: Vec<String>,
    /// The webhook's own answer to a server-side dry run, when one was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Checks {
    /// The checks that would run against the revision (a Job each).
    pub run: Vec<String>,
    /// Checks whose earlier verdicts already cover the revision.
    pub covered: Vec<String>,
}

impl Checks {
    pub fn of(set: SetRef<'_>, revision: Option<&str>) -> Self {
        let records = set.status().and_then(|s| s.checks.as_deref()).unwrap_or_default();
        let mut checks = Self::default();
        for check in set.checks() {
            let covered = records
                .iter()
                .any(|r| Some(r.revision.as_str()) == revision && r.name == check.name && r.passed.is_some());
            if covered {
                checks.covered.push(check.name.clone());
            } else {
                checks.run.push(check.name.clone());
            }
        }
        checks
    }
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wave: Option<i32>,
    pub kind: String,
    pub name: String,
    pub from: String,
    pub to: String,
    pub action: String,
    /// The earliest time it can move, RFC 3339; absent when it does not move or no time is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub earliest: Option<String>,
    /// What it waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// The rollout's phase meanwhile: `Waiting`, `Paused`, `AwaitingPromotion`, `Checking`.
    pub phase: String,
    /// The window's name, `OutsideWindow`, `budget`, ...
    pub by: String,
    pub from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    pub workload: String,
    /// What `kubectl rollout undo` would return it to, afterwards.
    pub undo_to: String,
    /// Whether that revision is kept.
    pub kept: bool,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Basis {
    /// When the plan was made (its clock's start), RFC 3339.
    pub at: String,
    pub current_revision: Option<String>,
    /// `Kind/name` to resourceVersion, of every object read: compare them to detect a stale plan.
    pub resource_versions: BTreeMap<String, String>,
}
