//! `kubectl cmset status` (alias `why`): the set's own state, and for every workload of its namespace
//! that references it, which revision it runs and why. A ConfigMapSet is referenced through ConfigMap
//! references only, a SecretSet through Secret references only (`secretRef`, `secretKeyRef`, secret
//! volumes and projections): a `secretRef` to `app` says nothing about ConfigMapSet `app`.
//!
//! Opted-in workloads are explained by cmset's one decision ([`cmset_core::rollout::decide::target`]), asked
//! from what the plugin lists (the set, its revisions, the workload's pod template and wave) exactly as
//! the workload controller, the admission webhook and the set planner ask it, so that none of them can
//! disagree: current, pending, pinned by a rollback, waiting for its wave or held by a failed rollout,
//! rolled back. A set that holds its content is decided from that content's identity, as the
//! controller decides it, so the plugin is not behind when the set's status is; in source mode (the
//! plugin does not read the source) and for an invalid spec, from what the status records. The set's
//! status entry for a workload supplies the messages (why it waits, why it was rolled back). What only
//! the plugin sees stays here: workloads without the opt-in label (the set's status never lists them,
//! so their pod templates are read) and sets whose controller has not yet made a revision for the spec.
//!
//! A set rolled out in waves (`status.rollout`, workloads labelled `cmset.dev/wave`) also gets a
//! rollout line (the wave in progress, its stabilization window, or why the rollout failed) and a WAVE
//! column. `Waiting` and `RolledBack` are decided by the controller from the workloads' health, which
//! the plugin does not read: the rollout the status records gates the decision
//! ([`cmset_core::rollout::waves::gate`]), and the gate says who waits and who is rolled back. A set without
//! waves prints exactly as it did before waves existed.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{RolloutPhase, RolloutStatus, Strategy, WorkloadState, WorkloadStatus, labels};
use cmset_core::revisions::naming::refers_to_set;
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::decide::{self, Identity, Observed};
use cmset_core::rollout::pinning::workload_status;
use cmset_core::rollout::waves::gated_state;
use cmset_core::set::{SetKind, SetRef};
use cmset_core::workloads::health::Wave;
use cmset_core::workloads::observe::{RevisionView, WorkloadKind, WorkloadView};
use cmset_core::workloads::refs::{Referenced, find_refs_to};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use crate::address::resource;
use crate::age::human_duration;
use crate::revisions::{ObjectName, Revision, column, current_name, serialize_kind};
use crate::style::{Palette, Role, visible};
use crate::table::{Cell, render};

/// A workload of any built-in kind (Deployment, StatefulSet, DaemonSet, CronJob, Job, Rollout), reduced
/// to what `status` reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub uid: String,
    /// The workload's own labels (where the opt-in label lives).
    pub labels: BTreeMap<String, String>,
    pub pod_spec: Option<PodSpec>,
}

/// Why a workload runs what it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Runs the current revision.
    Current,
    /// Held on an older revision by a rollback until the content changes.
    Pinned,
    /// cmset is about to move it to the current revision.
    Pending,
    /// Lacks the opt-in label: cmset leaves it alone.
    NotOptedIn,
    /// Held on its revision: an earlier wave has not yet rolled out, or the rollout failed.
    Waiting,
    /// Moved back by cmset to the revision it ran before, because its rollout failed.
    RolledBack,
}

impl State {
    fn role(self) -> Role {
        match self {
            State::Current => Role::Good,
            State::Pinned | State::Pending | State::Waiting => Role::Attention,
            State::RolledBack => Role::Bad,
            State::NotOptedIn => Role::Muted,
        }
    }
}

/// A workload's rollout wave, from its `cmset.dev/wave` label (absent is 0): a number, or the label's
/// text when it is not a valid wave (serialized as that string).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum WaveLabel {
    Number(i32),
    Invalid(String),
}

impl WaveLabel {
    fn of(wave: &Wave) -> Self {
        match wave {
            Wave::Number(n) => Self::Number(*n),
            Wave::Invalid(text) => Self::Invalid(text.clone()),
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Number(n) => n.to_string(),
            Self::Invalid(text) => format!("{text:?}"),
        }
    }
}

/// One workload that references the set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReport {
    pub kind: String,
    pub name: String,
    pub opted_in: bool,
    /// Its rollout wave. Only for opted-in workloads of a set that rolls out in waves (its status has a
    /// rollout, or a workload has a wave other than 0); left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<WaveLabel>,
    /// The ConfigMap (of a ConfigMapSet) or Secret (of a SecretSet) its pod template names for this set:
    /// the revision it runs, or the bare set name. Serialized as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    /// That revision's number, `null` for the bare set name or an unknown revision.
    pub revision: Option<i64>,
    pub state: State,
    pub explanation: String,
}

/// A status condition, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// The current revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrentRevision {
    /// Serialized as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    pub revision: Option<i64>,
}

/// Everything `status` reports, as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// `ConfigMapSet` or `SecretSet`.
    #[serde(serialize_with = "serialize_kind")]
    pub kind: SetKind,
    pub set: String,
    pub namespace: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `observedGeneration` differs from `generation`: cmset has not yet acted on the latest spec.
    pub status_behind_spec: bool,
    pub current_revision: Option<CurrentRevision>,
    /// The `Ready` condition, if the set has one.
    pub ready: Option<ConditionReport>,
    /// The `Valid` condition: whether the set's content passes its `spec.validation`; left out for a
    /// set that declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ConditionReport>,
    /// The rollout of the current revision, when the set's status records one; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutReport>,
    /// Workloads referencing the set: opted-in ones and the others, by kind and name.
    pub workloads: Vec<WorkloadReport>,
    /// Who hears about the set's rollouts, and the last delivery to each (`status.notifications`);
    /// left out when nobody subscribed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<cmset_api::NotificationStatus>,
}

/// How a rollout stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    Progressing,
    Checking,
    Paused,
    AwaitingPromotion,
    Waiting,
    Complete,
    Failed,
}

impl Phase {
    fn of(phase: RolloutPhase) -> Self {
        match phase {
            RolloutPhase::Progressing => Self::Progressing,
            RolloutPhase::Checking => Self::Checking,
            RolloutPhase::Paused => Self::Paused,
            RolloutPhase::AwaitingPromotion => Self::AwaitingPromotion,
            RolloutPhase::Waiting => Self::Waiting,
            RolloutPhase::Complete => Self::Complete,
            RolloutPhase::Failed => Self::Failed,
        }
    }
}

/// The rollout of the set's current revision, wave by wave (`status.rollout`, with the spec's
/// `rollout` settings that explain it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReport {
    /// The revision rolled out. Serialized as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    pub revision: Option<i64>,
    pub phase: Phase,
    /// The wave in progress; when the rollout failed, the wave it failed in.
    pub wave: i32,
    /// The waves of this rollout, lowest first.
    pub waves: Vec<i32>,
    /// `spec.rollout.stabilizationSeconds` (0 when left out).
    pub stabilization_seconds: i32,
    /// `spec.rollout.autoRollback`.
    pub auto_rollback: bool,
    /// `spec.rollout.strategy`, when it is `Immediate` (only change windows hold the rollout); left out for
    /// `Waves`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// Since when every workload of the wave in progress is complete and healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_healthy_since: Option<Time>,
    /// For how many seconds, as of when the plugin ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave_healthy_seconds: Option<i64>,
    /// Seconds until the stabilization window ends and the next wave moves (or the rollout completes),
    /// while the rollout progresses and its wave is healthy; 0 when due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stabilization_left_seconds: Option<i64>,
    /// Why it failed, naming the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when it has been paused or awaiting promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_since: Option<Time>,
    /// For how many seconds, as of when the plugin ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_seconds: Option<i64>,
    /// While `waiting`: `OutsideWindow`, or the name of the Deny window that holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// While `waiting`: when the change windows next let moves happen; absent when none opens within
    /// the years cmset looks ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window: Option<Time>,
    /// Seconds from when the plugin ran until `nextWindow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window_seconds: Option<i64>,
    /// The WindowOverride that lets the rollout through the change windows (`kubectl cmset promote
    /// --override-window`), as the controller recorded it in the set's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_override: Option<String>,
    /// Who created that WindowOverride, as cmset's webhook recorded it, or "not recorded".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_override_by: Option<String>,
    /// The set carries the annotation `cmset.dev/window-override` of earlier versions: it is ignored and
    /// lets nothing through.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub window_override_ignored: bool,
    /// Each query of the rollout's metric analysis: its last value, its condition and its verdict
    /// (`status.rollout.analysis`, as the operator recorded it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub analysis: Vec<cmset_api::AnalysisRunStatus>,
}

/// What the plugin knows about the set: its revisions' names and numbers, and what cmset's decision
/// ([`decide::target`]) is made from.
struct Known {
    set: String,
    /// The kind of the set's revisions, so of the references that can be the set's.
    kind: Referenced,
    numbers: BTreeMap<String, Option<i64>>,
    /// What is known of the content of the set's spec: its identity when the set holds its content,
    /// what the status records in source mode (the plugin does not read the source).
    identity: Option<String>,
    valid: bool,
    /// The revisions listed, as the controller observes them.
    views: Vec<RevisionView>,
    /// The lowest wave among the opted-in workloads that reference the set.
    lowest_wave: i32,
}

impl Known {
    fn new(set: SetRef<'_>, revisions: &[Revision<'_>]) -> Self {
        let mut numbers: BTreeMap<String, Option<i64>> = BTreeMap::new();
        if let Some(status) = set.status() {
            for h in &status.history {
                numbers.insert(h.name.clone(), Some(h.revision));
            }
            if let Some(current) = &status.current_revision {
                numbers.insert(current.clone(), status.revision);
            }
        }
        // The revisions themselves are the most direct record of their numbers.
        for r in revisions {
            numbers.insert(r.name.clone(), r.number);
        }
        let views = revisions
            .iter()
            .map(|r| RevisionView {
                name: r.name.clone(),
                uid: r.meta.uid.clone().unwrap_or_default(),
                labels: r.meta.labels.clone().unwrap_or_default(),
                annotations: r.meta.annotations.clone().unwrap_or_default(),
                owner_references: r.meta.owner_references.clone().unwrap_or_default(),
                being_deleted: r.meta.deletion_timestamp.is_some(),
                created: r.meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
                resource_version: r.meta.resource_version.clone(),
            })
            .collect();
        Self {
            set: set.name().to_string(),
            kind: set.kind().revision_kind(),
            numbers,
            identity: inline_identity(set),
            valid: set.validate().is_ok(),
            views,
            lowest_wave: 0,
        }
    }

    /// With the lowest wave among `workloads` that reference the set and are opted in.
    fn reading(mut self, workloads: &[Workload]) -> Self {
        self.lowest_wave = workloads
            .iter()
            .filter(|w| opted_in(w) && !set_references(w.pod_spec.as_ref(), &self).is_empty())
            .filter_map(|w| wave_of(w).number())
            .min()
            .unwrap_or(0);
        self
    }

    /// The set as the workload controller observes it.
    fn observed<'a>(&'a self, set: SetRef<'a>) -> Observed<'a> {
        Observed {
            set,
            identity_generation: set.generation(),
            identity: match &self.identity {
                _ if !self.valid => Identity::Invalid,
                Some(identity) => Identity::Known(identity),
                None => Identity::Recorded,
            },
            revisions: &self.views,
            lowest_wave: self.lowest_wave,
            // The windows as the controller last judged them (the plugin does not evaluate them here),
            // less a WindowOverride it let the rollout through by since.
            window_held: set.status().and_then(|s| s.rollout.as_ref()).is_some_and(|r| {
                r.phase == cmset_api::RolloutPhase::Waiting
                    && cmset_core::policy::break_glass::granted(set).is_none()
            }),
            window_override: None,
        }
    }

    /// Whether a reference (of the set's revision kind) to `name` is a reference to the set: its bare
    /// name or one of its revisions (including one that no longer exists), by cmset's one rule,
    /// [`refers_to_set`].
    fn claims(&self, name: &str) -> bool {
        refers_to_set(&self.set, name)
    }

    fn number(&self, name: &str) -> Option<i64> {
        self.numbers.get(name).copied().flatten()
    }
}

fn opted_in(workload: &Workload) -> bool {
    workload.labels.get(labels::ENABLED).map(String::as_str) == Some(labels::ENABLED_VALUE)
}

fn wave_of(workload: &Workload) -> Wave {
    Wave::parse(workload.labels.get(labels::WAVE).map(String::as_str))
}

/// The names through which `spec` references the set, in [`find_refs_to`] order, without repeats: only
/// references of the set's revision kind count.
fn set_references(spec: Option<&PodSpec>, known: &Known) -> Vec<String> {
    let mut seen = BTreeSet::new();
    spec.map(|spec| find_refs_to(spec, known.kind))
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| known.claims(n) && seen.insert(n.clone()))
        .collect()
}

fn revision_phrase(number: Option<i64>, name: &str) -> String {
    match number {
        Some(n) => format!("revision {n}"),
        None => name.to_string(),
    }
}

/// The rollout the set's status records.
fn rollout_status(set: SetRef<'_>) -> Option<&RolloutStatus> {
    set.status()?.rollout.as_ref()
}

/// `message` without `prefix`, which would repeat what the plugin already says around it.
fn without_prefix<'m>(message: &'m str, prefix: &str) -> &'m str {
    message.strip_prefix(prefix).unwrap_or(message)
}

/// "wave 1", "waves 1 and 2", "waves 1, 2 and 3".
fn waves_phrase(waves: &[i32]) -> String {
    match waves {
        [] => "no wave".to_string(),
        [one] => format!("wave {one}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(i32::to_string).collect();
            format!("waves {} and {last}", init.join(", "))
        }
    }
}

/// What a `Waiting` workload waits for. A failed rollout holds it for good (until the content changes);
/// otherwise it waits for the waves before its own, as far as the status's rollout says, else for what
/// the set's record says.
fn waiting_why(set: SetRef<'_>, known: &Known, entry: Option<&WorkloadStatus>, wave: &Wave) -> String {
    let rollout = rollout_status(set);
    if let Some(r) = rollout.filter(|r| r.phase == RolloutPhase::Failed) {
        return format!(
            "held: the rollout of {} failed in wave {}",
            revision_phrase(known.number(&r.revision), &r.revision),
            r.wave
        );
    }
    if let Some(r) = rollout.filter(|r| r.phase == RolloutPhase::Paused) {
        return format!("held: the rollout is paused in wave {}", r.wave);
    }
    if let (Some(r), Some(own)) = (rollout, wave.number())
        && r.phase.is_under_way()
    {
        let before: Vec<i32> = r
            .waves
            .iter()
            .copied()
            .filter(|w| (r.wave..own).contains(w))
            .collect();
        if !before.is_empty() {
            return format!(
                "waiting: {} must complete and stay healthy first",
                waves_phrase(&before)
            );
        }
    }
    if let Some(r) = rollout.filter(|r| r.phase == RolloutPhase::Waiting) {
        return format!("held by a change window: {}", window_phrase(r));
    }
    match entry.and_then(|e| e.message.as_deref()).filter(|m| !m.is_empty()) {
        Some(m) if m.starts_with("waiting") || m.starts_with("held") => m.to_string(),
        Some(m) => format!("waiting: {m}"),
        None => match wave.problem() {
            Some(problem) => format!("waiting: {problem}"),
            None => "waiting: held until the earlier waves have rolled out".to_string(),
        },
    }
}

/// Which window holds a `Waiting` rollout: the controller's message, else its reason in words.
fn window_phrase(r: &RolloutStatus) -> String {
    match (
        r.message.as_deref().filter(|m| !m.is_empty()),
        r.reason.as_deref(),
    ) {
        (Some(m), _) => m.to_string(),
        (None, Some("OutsideWindow") | None) => "outside every Allow window".to_string(),
        (None, Some(deny)) => format!("Deny window {deny}"),
    }
}

/// Why cmset moved a workload back to the revision it ran before, its record's `previousRevision`
/// (else `now`, the reference it names now). Until the workload names it, it is being moved there.
fn rolled_back_why(set: SetRef<'_>, known: &Known, entry: Option<&WorkloadStatus>, now: &str) -> String {
    let to = entry.and_then(|e| e.previous_revision.as_deref()).unwrap_or(now);
    let head = format!(
        "{} {} by cmset",
        if to == now {
            "rolled back to"
        } else {
            "rolling back to"
        },
        revision_phrase(known.number(to), to)
    );
    match entry.and_then(|e| e.message.as_deref()).filter(|m| !m.is_empty()) {
        // The controller's message starts by saying where it went, as the head does.
        Some(m) => format!("{head}: {}", without_prefix(m, &format!("rolled back to {to}: "))),
        None => match rollout_status(set).filter(|r| r.phase == RolloutPhase::Failed) {
            Some(r) => format!(
                "{head}: the rollout of {} failed in wave {}",
                revision_phrase(known.number(&r.revision), &r.revision),
                r.wave
            ),
            None => format!("{head}: its rollout failed"),
        },
    }
}

/// The explanation of an opted-in workload whose template cannot change after creation (a Job): cmset
/// named its revision when it was created (the admission webhook), and never moves it, so whatever it
/// names is what it keeps; only new ones get the current revision.
fn created_with(
    kind: WorkloadKind,
    state: WorkloadState,
    current: &str,
    shown: &str,
    known: &Known,
    report: impl Fn(State, String) -> WorkloadReport,
) -> WorkloadReport {
    let now = revision_phrase(known.number(current), current);
    if state == WorkloadState::Current && shown == current {
        return report(
            State::Current,
            format!("current (a {kind} keeps the revision it was created with)"),
        );
    }
    let why = match known.number(shown) {
        Some(n) => format!(
            "kept on revision {n}, which it was created with: a {kind}'s template cannot change, so cmset \
             never moves it; a new {kind} gets {now}"
        ),
        None if shown == known.set => format!(
            "names the set itself, not a revision: it was created while cmset's webhook did not answer, \
             and a {kind}'s template cannot change; recreate it to run {now}"
        ),
        None => format!(
            "left on {shown}: a {kind}'s template cannot change, so cmset never moves it; a new {kind} \
             gets {now}"
        ),
    };
    report(State::Pinned, why)
}

/// The explanation of one workload, or `None` when it does not reference the set. Without the other
/// workloads that read the set, its own wave is taken for the lowest (see [`status_report_at`]).
pub fn explain(
    set: SetRef<'_>,
    known_revisions: &[Revision<'_>],
    workload: &Workload,
) -> Option<WorkloadReport> {
    let known = Known::new(set, known_revisions).reading(std::slice::from_ref(workload));
    let mut report = explain_with(set, &known, workload)?;
    if !uses_waves(set, std::slice::from_ref(&report)) {
        report.wave = None;
    }
    Some(report)
}

/// Whether waves are worth showing: the status records a rollout, or a workload has a wave other than 0.
fn uses_waves(set: SetRef<'_>, reports: &[WorkloadReport]) -> bool {
    rollout_status(set).is_some()
        || reports
            .iter()
            .any(|r| r.wave.as_ref().is_some_and(|w| *w != WaveLabel::Number(0)))
}

fn explain_with(set: SetRef<'_>, known: &Known, workload: &Workload) -> Option<WorkloadReport> {
    let refs = set_references(workload.pod_spec.as_ref(), known);
    let decision = opted_in(workload).then(|| decide_for(set, known, workload));
    let current = match &decision {
        Some(Decision::Decided { current, .. }) => Some(current.as_str()),
        _ => current_name(set),
    };
    // The interesting reference: one that is not the current revision, if any.
    let shown = refs
        .iter()
        .find(|n| Some(n.as_str()) != current)
        .or(refs.first())?
        .clone();
    let wave = wave_of(workload);
    let report = |state: State, explanation: String| WorkloadReport {
        kind: workload.kind.to_string(),
        name: workload.name.clone(),
        opted_in: state != State::NotOptedIn,
        wave: (state != State::NotOptedIn).then(|| WaveLabel::of(&wave)),
        revision: known.number(&shown),
        object: ObjectName::new(known.kind, &shown),
        state,
        explanation,
    };

    if !workload.kind.is_mutable()
        && let Some(Decision::Decided { state, current }) = &decision
    {
        return Some(created_with(
            workload.kind,
            *state,
            current,
            &shown,
            known,
            report,
        ));
    }

    let Some(decision) = &decision else {
        let why = match workload.labels.get(labels::ENABLED) {
            None => format!(
                "not opted in: label {}={} is missing; cmset does not manage it",
                labels::ENABLED,
                labels::ENABLED_VALUE
            ),
            Some(other) => format!(
                "not opted in: label {} is {other:?}, not {:?}; cmset does not manage it",
                labels::ENABLED,
                labels::ENABLED_VALUE
            ),
        };
        return Some(report(State::NotOptedIn, why));
    };

    let entry = recorded(set, workload, &refs);
    // During a rollout in waves, what the record says of a workload that runs (or is about to run) the
    // current revision: "rolling out", "healthy", or why it failed.
    let rollout_note = || {
        entry
            .filter(|_| rollout_status(set).is_some())
            .and_then(|e| e.message.as_deref())
            .filter(|m| !m.is_empty())
            .map_or(String::new(), |m| format!("; {m}"))
    };
    let pending = || {
        let why = match current {
            Some(c) => format!(
                "pending: cmset is moving it to {}{}",
                revision_phrase(known.number(c), c),
                rollout_note()
            ),
            None => "pending: the set has no current revision yet".to_string(),
        };
        report(State::Pending, why)
    };
    let pinned = || {
        let why = format!(
            "pinned to {} by a rollback; moves again when the set's content changes",
            revision_phrase(known.number(&shown), &shown)
        );
        report(State::Pinned, why)
    };
    let waiting = || report(State::Waiting, waiting_why(set, known, entry, &wave));
    let rolled_back = || report(State::RolledBack, rolled_back_why(set, known, entry, &shown));

    Some(match decision {
        Decision::Undecided if current_name(set).is_none() => {
            // The set's controller has not made a revision yet: what its status records, if anything.
            match entry.map(|e| e.state) {
                Some(WorkloadState::Pinned) => pinned(),
                Some(WorkloadState::Waiting) => waiting(),
                Some(WorkloadState::RolledBack) => rolled_back(),
                _ => pending(),
            }
        }
        Decision::Undecided => report(
            State::Pending,
            "pending: the set has no revision for its current spec yet; cmset moves nothing until it has"
                .to_string(),
        ),
        Decision::Unknown => report(
            State::Pinned,
            format!(
                "left on {shown}, which is no revision of the set that cmset knows (pruned, or never \
                 one): cmset does not move it"
            ),
        ),
        Decision::Decided { state, .. } => match *state {
            WorkloadState::Current => report(
                State::Current,
                format!("current (updated by cmset){}", rollout_note()),
            ),
            WorkloadState::Pinned => pinned(),
            WorkloadState::Pending => pending(),
            WorkloadState::Waiting => waiting(),
            WorkloadState::RolledBack => rolled_back(),
        },
    })
}

/// The set's status entry for this workload, when it describes what the workload references now (an
/// older record was about another template).
fn recorded<'s>(set: SetRef<'s>, workload: &Workload, refs: &[String]) -> Option<&'s WorkloadStatus> {
    set.status()
        .into_iter()
        .flat_map(|s| s.workloads.iter())
        .find(|w| {
            (w.uid == workload.uid || (w.kind == workload.kind.as_str() && w.name == workload.name))
                && refs.contains(&w.revision)
        })
}

/// cmset's decision for an opted-in workload's references to the set.
enum Decision {
    /// The set has no revision for its spec yet, or (in source mode, or with an invalid spec) its status
    /// does not describe the spec yet: cmset moves nothing until it has.
    Undecided,
    /// None of its references is the set's to move: they have the form of the set's revisions, but no
    /// revision cmset knows has that name.
    Unknown,
    /// The state the set's status gives it, or will give it once the set's controller has caught up,
    /// and the current revision.
    Decided { state: WorkloadState, current: String },
}

/// cmset's decision, asked as the workload controller asks it ([`decide::target`]), from the set, its
/// revisions as listed and the workload. The state is the one the set planner records: the reference
/// rules ([`workload_status`]), then the rollout's gate ([`gated_state`]), which reads back the waits and
/// rollbacks the controller decided from the workloads' health (which the plugin does not read).
fn decide_for(set: SetRef<'_>, known: &Known, workload: &Workload) -> Decision {
    let Some(pod_spec) = workload.pod_spec.clone() else {
        return Decision::Unknown;
    };
    let view = WorkloadView {
        kind: workload.kind,
        name: workload.name.clone(),
        uid: workload.uid.clone(),
        pod_spec,
        template_labels: BTreeMap::new(),
        wave: wave_of(workload),
        health: Default::default(),
    };
    let Ok(target) = decide::target(&known.observed(set), &view) else {
        return Decision::Undecided;
    };
    let Some(entry) = workload_status(&view, &target) else {
        return Decision::Unknown;
    };
    let opting_in = view.referenced_names_of(known.kind).contains(&known.set);
    Decision::Decided {
        state: gated_state(entry.state, &target.gate, opting_in),
        current: target.current,
    }
}

/// The rollout the set's status records, with the spec's settings and the times as of `now`.
fn rollout_report(set: SetRef<'_>, known: &Known, now: Timestamp) -> Option<RolloutReport> {
    let r = rollout_status(set)?;
    let spec = set.rollout();
    let stabilization_seconds = spec.map_or(0, |s| s.stabilization_seconds);
    let healthy = r
        .wave_healthy_since
        .as_ref()
        .map(|since| (now.as_second() - since.0.as_second()).max(0));
    let phase = Phase::of(r.phase);
    let left = healthy
        .filter(|_| phase == Phase::Progressing)
        .map(|h| (i64::from(stabilization_seconds) - h).max(0));
    // Only while the rollout is under way: a finished one needs no override.
    let granted = cmset_core::policy::break_glass::granted(set).filter(|_| r.phase.is_under_way());
    Some(RolloutReport {
        object: ObjectName::new(known.kind, &r.revision),
        revision: known.number(&r.revision),
        phase,
        wave: r.wave,
        waves: r.waves.clone(),
        stabilization_seconds,
        auto_rollback: spec.is_some_and(|s| s.auto_rollback),
        strategy: spec.map(|s| s.strategy).filter(|s| *s == Strategy::Immediate),
        started_at: r.started_at.clone(),
        wave_healthy_since: r.wave_healthy_since.clone(),
        wave_healthy_seconds: healthy,
        stabilization_left_seconds: left,
        message: r.message.clone(),
        held_since: r.held_since.clone(),
        held_seconds: r
            .held_since
            .as_ref()
            .map(|since| (now.as_second() - since.0.as_second()).max(0)),
        reason: r.reason.clone(),
        next_window: r.next_window.clone(),
        next_window_seconds: r
            .next_window
            .as_ref()
            .map(|t| (t.0.as_second() - now.as_second()).max(0)),
        window_override: granted.map(|(name, _)| name.to_string()),
        window_override_by: granted.map(|(_, by)| by.to_string()),
        window_override_ignored: set.window_override().is_some(),
        analysis: r.analysis.clone(),
    })
}

/// The whole report as of the current time: see [`status_report_at`].
pub fn status_report(set: SetRef<'_>, revisions: &[Revision<'_>], workloads: &[Workload]) -> StatusReport {
    status_report_at(set, revisions, workloads, Timestamp::now())
}

/// The whole report: the set, and every workload among `workloads` that references it, by kind and
/// name. `now` is when the rollout's stabilization window is measured.
pub fn status_report_at(
    set: SetRef<'_>,
    revisions: &[Revision<'_>],
    workloads: &[Workload],
    now: Timestamp,
) -> StatusReport {
    let known = Known::new(set, revisions).reading(workloads);
    let mut reports: Vec<(WorkloadKind, WorkloadReport)> = workloads
        .iter()
        .filter_map(|w| explain_with(set, &known, w).map(|r| (w.kind, r)))
        .collect();
    reports.sort_by(|(ka, a), (kb, b)| ka.cmp(kb).then_with(|| a.name.cmp(&b.name)));
    let mut reports: Vec<WorkloadReport> = reports.into_iter().map(|(_, r)| r).collect();
    if !uses_waves(set, &reports) {
        for r in &mut reports {
            r.wave = None;
        }
    }
    let generation = set.generation();
    let observed_generation = set.status().and_then(|s| s.observed_generation);
    StatusReport {
        kind: set.kind(),
        set: set.name().to_string(),
        namespace: set.metadata().namespace.clone().unwrap_or_default(),
        generation,
        observed_generation,
        status_behind_spec: observed_generation != generation,
        current_revision: current_name(set).map(|c| CurrentRevision {
            object: ObjectName::new(known.kind, c),
            revision: known.number(c),
        }),
        ready: set.condition("Ready").map(|c| ConditionReport {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        }),
        validation: set.condition("Valid").map(|c| ConditionReport {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        }),
        rollout: rollout_report(set, &known, now),
        workloads: reports,
        notifications: set
            .status()
            .and_then(|s| s.notifications.clone())
            .unwrap_or_default(),
    }
}

/// One line per subscription: who hears of what, and how the last delivery went.
fn notification_lines(records: &[cmset_api::NotificationStatus]) -> Vec<(String, Option<Role>)> {
    use cmset_api::NotificationResult;
    records
        .iter()
        .map(|r| {
            let target = match r.recipient.as_str() {
                "" => r.service.clone(),
                recipient => format!("{}:{recipient}", r.service),
            };
            let when = r
                .time
                .as_ref()
                .map(|t| format!(" at {}", t.0))
                .unwrap_or_default();
            let (last, role) = match r.result {
                NotificationResult::Subscribed => ("nothing sent yet".to_string(), None),
                NotificationResult::Delivered => (
                    format!(
                        "delivered{when} ({} attempt{})",
                        r.attempts,
                        if r.attempts == 1 { "" } else { "s" }
                    ),
                    Some(Role::Good),
                ),
                NotificationResult::Retrying => (
                    format!(
                        "retrying (last tried{when}, {} attempts so far): {}",
                        r.attempts,
                        r.message.as_deref().unwrap_or("no reason given")
                    ),
                    Some(Role::Attention),
                ),
                NotificationResult::Failed => (
                    format!(
                        "failed{when} after {} attempts: {}",
                        r.attempts,
                        r.message.as_deref().unwrap_or("no reason given")
                    ),
                    Some(Role::Bad),
                ),
            };
            (format!("{} to {target}: {last}", r.trigger), role)
        })
        .collect()
}

/// The built-in kinds, in the table's order, joined as a phrase: `Deployment, ..., Job or Rollout`.
fn kinds_phrase(name: impl Fn(WorkloadKind) -> String) -> String {
    let names: Vec<String> = WorkloadKind::BUILT_IN.into_iter().map(name).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Keeps the workloads `selector` names: `NAME`, or `KIND/NAME` where KIND is what the table of kinds
/// calls a kind ([`WorkloadKind::is_called`]: its kind, plural or short name, any case: `deployment/web`,
/// `deploy/web`, `sts/db`, `ds/agent`, `cj/report`, `job/migrate`, `ro/web`).
pub fn select(report: &mut StatusReport, selector: &str) -> Result<(), String> {
    let (kind, name) = match selector.split_once('/') {
        Some((called, name)) => {
            let kind = WorkloadKind::BUILT_IN
                .into_iter()
                .find(|k| k.is_called(called))
                .ok_or_else(|| {
                    format!(
                        "unknown workload kind {:?}: use {}",
                        called.to_ascii_lowercase(),
                        kinds_phrase(|k| k.as_str().to_ascii_lowercase())
                    )
                })?;
            (Some(kind), name)
        }
        None => (None, selector),
    };
    report
        .workloads
        .retain(|w| w.name == name && kind.is_none_or(|k| k.as_str() == w.kind));
    if report.workloads.is_empty() {
        return Err(format!(
            "no {} {selector:?} in namespace {:?} references {} {:?}",
            kinds_phrase(|k| k.to_string()),
            report.namespace,
            resource(report.kind),
            report.set
        ));
    }
    Ok(())
}

/// The report as text: a few lines about the set, then a table of workloads.
/// One line per query of the analysis: wave, template (and workload), verdict, last value against
/// its condition, measurements, and what the last one said.
fn analysis_lines(runs: &[cmset_api::AnalysisRunStatus]) -> Vec<(String, Option<Role>)> {
    use cmset_api::AnalysisVerdict;
    runs.iter()
        .map(|run| {
            let role = match run.verdict {
                AnalysisVerdict::Passed => Some(Role::Good),
                AnalysisVerdict::Failed => Some(Role::Bad),
                AnalysisVerdict::Inconclusive => Some(Role::Attention),
                AnalysisVerdict::Running => None,
            };
            let of = match (&run.workload_kind, &run.workload, run.workloads.as_slice()) {
                (Some(kind), Some(name), _) => format!(" of {kind} {name}"),
                // A group of runs measured alike: how many, and the first few.
                (Some(kind), None, names) if names.len() > 1 => {
                    let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
                    let more = if names.len() > 3 { ", …" } else { "" };
                    format!(" of {} {kind}s ({}{more})", names.len(), shown.join(", "))
                }
                _ => String::new(),
            };
            let value = run.last_value.as_deref().unwrap_or("no value yet");
            let mut text = format!(
                "wave {}: {}{of} {}: {value} (wants {}), {} measured, {} failed",
                run.wave,
                run.template,
                run.verdict.as_str(),
                run.condition,
                run.measurements,
                run.failures
            );
            if let Some(message) = &run.message {
                text.push_str(&format!(": {message}"));
            }
            (text, role)
        })
        .collect()
}

pub fn render_text(report: &StatusReport, palette: Palette) -> String {
    let mut out = String::new();
    // A field without a name continues the one before it.
    let mut field = |name: &str, value: String, role: Option<Role>| {
        let label = if name.is_empty() {
            String::new()
        } else {
            format!("{name}:")
        };
        out.push_str(&format!("{label:<14}{}\n", palette.paint(role, &visible(&value))));
    };
    let revision_kind = report.kind.revision_kind();
    field(
        report.kind.as_str(),
        format!("{} (namespace {})", report.set, report.namespace),
        None,
    );
    match &report.current_revision {
        Some(c) => field(
            "Current",
            format!(
                "{}, {revision_kind} {}",
                revision_phrase(c.revision, "revision ?"),
                c.object.name()
            ),
            None,
        ),
        None => field("Current", "none yet".to_string(), Some(Role::Attention)),
    }
    match &report.ready {
        Some(c) => {
            let role = match c.status.as_str() {
                "True" => Role::Good,
                "False" => Role::Bad,
                _ => Role::Attention,
            };
            let mut text = format!("{} ({})", c.status, c.reason);
            if !c.message.is_empty() {
                text.push_str(&format!(": {}", c.message));
            }
            field("Ready", text, Some(role));
        }
        None => field(
            "Ready",
            "unknown: no Ready condition yet".to_string(),
            Some(Role::Attention),
        ),
    }
    if let Some(valid) = &report.validation {
        let (text, role) = match valid.status.as_str() {
            "True" => (
                "passed: the current revision's content passes spec.validation".to_string(),
                Role::Good,
            ),
            // Ready says the same in full when it is the cause; said here so it is not missed.
            _ => (format!("failed: {}", valid.message), Role::Bad),
        };
        field("Validation", text, Some(role));
    }
    if let Some(rollout) = &report.rollout {
        let id = format!("{}/{}", resource(report.kind), report.set);
        for (i, (text, role)) in rollout_lines(rollout, &id).into_iter().enumerate() {
            field(if i == 0 { "Rollout" } else { "" }, text, role);
        }
        for (i, (text, role)) in analysis_lines(&rollout.analysis).into_iter().enumerate() {
            field(if i == 0 { "Analysis" } else { "" }, text, role);
        }
    }
    for (i, (text, role)) in notification_lines(&report.notifications).into_iter().enumerate() {
        field(if i == 0 { "Subscribed" } else { "" }, text, role);
    }
    let number = |g: Option<i64>| g.map_or("none".to_string(), |g| g.to_string());
    if report.status_behind_spec {
        field(
            "Generation",
            format!(
                "{}, observed {}: status is behind the spec",
                number(report.generation),
                number(report.observed_generation)
            ),
            Some(Role::Bad),
        );
    } else {
        field(
            "Generation",
            format!(
                "{}, observed {}",
                number(report.generation),
                number(report.observed_generation)
            ),
            None,
        );
    }
    out.push('\n');

    if report.workloads.is_empty() {
        out.push_str(&format!(
            "No {} in namespace {} references {}.\n",
            kinds_phrase(|k| k.to_string()),
            visible(&report.namespace),
            visible(&report.set)
        ));
        return out;
    }
    // The WAVE column only for a set rolled out in waves: other sets print as they always did.
    let waves = report.rollout.is_some() || report.workloads.iter().any(|w| w.wave.is_some());
    let rows: Vec<Vec<Cell>> = report
        .workloads
        .iter()
        .map(|w| {
            let mut row = vec![Cell::new(format!("{}/{}", w.kind, w.name))];
            if waves {
                row.push(Cell::new(
                    w.wave.as_ref().map_or("-".to_string(), WaveLabel::text),
                ));
            }
            row.extend([
                Cell::new(w.revision.map_or("-".to_string(), |n| n.to_string())),
                Cell::new(w.object.name()),
                Cell::styled(&w.explanation, Some(w.state.role())),
            ]);
            row
        })
        .collect();
    let headers: &[&str] = if waves {
        &["WORKLOAD", "WAVE", "REVISION", column(revision_kind), "WHY"]
    } else {
        &["WORKLOAD", "REVISION", column(revision_kind), "WHY"]
    };
    out.push_str(&render(headers, &rows, palette));
    out
}

/// The rollout's lines of text, each with its role: what stands, then what follows from it. `id`
/// (`configmapset/app`) names the set in the commands suggested.
fn rollout_lines(r: &RolloutReport, id: &str) -> Vec<(String, Option<Role>)> {
    let name = r.object.name();
    let revision = match r.revision {
        Some(n) => format!("revision {n} ({name})"),
        None => name.to_string(),
    };
    let mut lines = Vec::new();
    match r.phase {
        Phase::Progressing => {
            let of = if r.waves.is_empty() {
                String::new()
            } else {
                format!(" of {:?}", r.waves)
            };
            lines.push((
                format!("{revision}: wave {}{of} in progress", r.wave),
                Some(Role::Attention),
            ));
            if let (Some(healthy), Some(left)) = (r.wave_healthy_seconds, r.stabilization_left_seconds) {
                let next = match r.waves.iter().find(|&&w| w > r.wave) {
                    Some(next) => format!("wave {next} moves"),
                    None => "the rollout completes".to_string(),
                };
                let when = if left > 0 {
                    format!("{} left", human_duration(left))
                } else {
                    "due now".to_string()
                };
                lines.push((
                    format!(
                        "wave {} healthy for {}; {next} after stabilizationSeconds {} ({when})",
                        r.wave,
                        human_duration(healthy),
                        r.stabilization_seconds
                    ),
                    None,
                ));
            }
        }
        Phase::Checking => {
            lines.push((
                format!("{revision}: checking before wave {} moves", r.wave),
                Some(Role::Attention),
            ));
            // The controller's message lists each check: running, passed, or failed and why.
            if let Some(m) = r.message.as_deref().filter(|m| !m.is_empty()) {
                lines.push((m.to_string(), None));
            }
        }
        Phase::Waiting => {
            let since = r
                .held_seconds
                .map_or(String::new(), |s| format!(" for {}", human_duration(s)));
            lines.push((
                format!(
                    "{revision}: wave {} waiting: held by a change window{since}",
                    r.wave
                ),
                Some(Role::Attention),
            ));
            let why = match (
                r.message.as_deref().filter(|m| !m.is_empty()),
                r.reason.as_deref(),
            ) {
                (Some(m), Some(reason)) => format!("{m} (reason {reason})"),
                (Some(m), None) => m.to_string(),
                (None, Some("OutsideWindow")) => "outside every Allow window (reason OutsideWindow)".into(),
                (None, Some(deny)) => format!("Deny window {deny} is open (reason {deny})"),
                (None, None) => "a change window".to_string(),
            };
            lines.push((format!("held by: {why}"), None));
            // The next window as the controller computed it; `windows` recomputes it live.
            let resume = match (&r.next_window, r.next_window_seconds) {
                (Some(t), Some(s)) if s > 0 => format!("moves resume at {} (in {})", t.0, human_duration(s)),
                (Some(t), _) => format!("moves resume at {} (due now)", t.0),
                (None, _) => "no window opens within 10 years: moves do not resume by themselves".to_string(),
            };
            lines.push((resume, None));
            lines.push((
                format!("to let this rollout through now: kubectl cmset promote --override-window {id}"),
                None,
            ));
        }
        Phase::Paused | Phase::AwaitingPromotion => {
            let (what, how) = if r.phase == Phase::Paused {
                ("paused", "kubectl cmset resume")
            } else {
                ("done; the next wave awaits promotion", "kubectl cmset promote")
            };
            let since = r
                .held_seconds
                .map_or(String::new(), |s| format!(" for {}", human_duration(s)));
            lines.push((
                format!("{revision}: wave {} {what}{since}", r.wave),
                Some(Role::Attention),
            ));
            lines.push((format!("to go on: {how}"), None));
        }
        Phase::Complete => {
            let waves = if r.waves.len() > 1 {
                format!(" in {}", waves_phrase(&r.waves))
            } else {
                String::new()
            };
            lines.push((format!("{revision}: complete{waves}"), Some(Role::Good)));
        }
        Phase::Failed => {
            // The controller's message starts by saying what failed where, as the line does.
            let why = r
                .message
                .as_deref()
                .map(|m| without_prefix(m, &format!("the rollout of {name} failed in wave {}: ", r.wave)))
                .filter(|m| !m.is_empty())
                .map_or(String::new(), |m| format!(": {m}"));
            lines.push((
                format!("{revision}: failed in wave {}{why}", r.wave),
                Some(Role::Bad),
            ));
            let later: Vec<i32> = r.waves.iter().copied().filter(|&w| w > r.wave).collect();
            let mut then = Vec::new();
            if !later.is_empty() {
                then.push(format!("{} will not receive it", waves_phrase(&later)));
            }
            then.push(if r.auto_rollback {
                "failed workloads are moved back to the revision they ran before (autoRollback)".to_string()
            } else {
                "autoRollback is off: failed workloads stay on it".to_string()
            });
            lines.push((then.join("; "), None));
        }
    }
    if let (Some(name), Some(by)) = (&r.window_override, &r.window_override_by) {
        lines.push((
            format!("let through the change windows by WindowOverride {name} (requested by {by})"),
            Some(Role::Attention),
        ));
    }
    if r.window_override_ignored {
        lines.push((
            "the annotation cmset.dev/window-override is ignored: it lets nothing through; break glass with \
             kubectl cmset promote --override-window (a WindowOverride)"
                .to_string(),
            Some(Role::Attention),
        ));
    }
    if r.strategy == Some(Strategy::Immediate) {
        lines.push((
            "strategy: Immediate: every new revision reaches every reader at once; only change windows hold it"
                .to_string(),
            None,
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSet, SecretSet};
    use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;

    const T: &str = "2026-01-01T00:00:00Z";

    /// The revisions of [`ready_set`]: the current one holds the set's content.
    fn cms() -> Vec<ConfigMap> {
        vec![
            revision("app-ffffffffff", Some(1), T, &[]),
            revision("app-bbbbbbbbbb", Some(2), T, &[]),
            holding_the_spec(revision("app-cccccccccc", Some(3), T, &[])),
        ]
    }

    fn spec(names: &[&str]) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(
                    names
                        .iter()
                        .map(|n| EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: n.to_string(),
                                optional: None,
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn deployment(name: &str, opted_in: Option<&str>, refs: &[&str]) -> Workload {
        Workload {
            kind: WorkloadKind::Deployment,
            name: name.into(),
            uid: format!("{name}-uid"),
            labels: opted_in
                .map(|v| BTreeMap::from([(labels::ENABLED.to_string(), v.to_string())]))
                .unwrap_or_default(),
            pod_spec: Some(spec(refs)),
        }
    }

    /// ConfigMapSet `app` on revision 3 (app-cccccccccc), after revisions 1 and 2, with the status
    /// entries given.
    fn ready_set(workloads: Vec<cmset_api::WorkloadStatus>) -> ConfigMapSet {
        let mut s = set(Some("app-cccccccccc"), Some(3), workloads);
        let history = [
            ("app-cccccccccc", 3),
            ("app-bbbbbbbbbb", 2),
            ("app-ffffffffff", 1),
        ];
        s.status.as_mut().unwrap().history = history
            .into_iter()
            .map(|(name, revision)| cmset_api::RevisionStatus {
                name: name.into(),
                revision,
                in_use: true,
                failed: false,
            })
            .collect();
        s.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "RolledOut".into(),
            message: "every opted-in workload runs revision 3 or is pinned".into(),
            observed_generation: Some(3),
            last_transition_time: Time(T.parse().unwrap()),
        }];
        s
    }

    fn why(set: &ConfigMapSet, w: &Workload) -> Option<(State, String, Option<i64>, String)> {
        let cms = cms();
        let revs = revisions_of(SetRef::from(set), &cms);
        explain(SetRef::from(set), &revs, w)
            .map(|r| (r.state, r.object.name().to_string(), r.revision, r.explanation))
    }

    #[test]
    fn explanations_for_each_state() {
        let set = ready_set(vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("Deployment", "old", "app-ffffffffff", WorkloadState::Pinned),
            workload("Deployment", "late", "app-bbbbbbbbbb", WorkloadState::Pending),
        ]);
        let on = Some("true");
        let cases = [
            (
                deployment("web", on, &["app-cccccccccc"]),
                Some((
                    State::Current,
                    "app-cccccccccc",
                    Some(3),
                    "current (updated by cmset)",
                )),
            ),
            (
                deployment("old", on, &["app-ffffffffff"]),
                Some((
                    State::Pinned,
                    "app-ffffffffff",
                    Some(1),
                    "pinned to revision 1 by a rollback; moves again when the set's content changes",
                )),
            ),
            (
                deployment("late", on, &["app-bbbbbbbbbb"]),
                Some((
                    State::Pending,
                    "app-bbbbbbbbbb",
                    Some(2),
                    "pending: cmset is moving it to revision 3",
                )),
            ),
            (
                deployment("legacy", None, &["app"]),
                Some((
                    State::NotOptedIn,
                    "app",
                    None,
                    "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
                )),
            ),
            (
                deployment("off", Some("false"), &["app-cccccccccc"]),
                Some((
                    State::NotOptedIn,
                    "app-cccccccccc",
                    Some(3),
                    "not opted in: label cmset.dev/enabled is \"false\", not \"true\"; cmset does not manage it",
                )),
            ),
            // A new opted-in workload naming the bare set: cmset is about to point it at a revision.
            (
                deployment("new", on, &["app"]),
                Some((
                    State::Pending,
                    "app",
                    None,
                    "pending: cmset is moving it to revision 3",
                )),
            ),
            // Other ConfigMaps, and sets whose names merely start the same, are not references.
            (
                deployment("other", on, &["app-config-dddddddddd", "unrelated"]),
                None,
            ),
        ];
        for (w, want) in cases {
            let got = why(&set, &w);
            let want = want.map(|(s, c, n, e)| (s, c.to_string(), n, e.to_string()));
            assert_eq!(got, want, "{}", w.name);
        }
    }

    #[test]
    fn a_lagging_record_is_replaced_by_cmsets_rule() {
        // The status still says `web` is current, but a rollback just named revision 1; the record of the
        // rollout (rolledOut = current) shows it is a rollback: pinned.
        let mut entry = workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current);
        entry.rolled_out = Some("app-cccccccccc".into());
        let set = ready_set(vec![entry]);
        let w = deployment("web", Some("true"), &["app-ffffffffff"]);
        assert_eq!(why(&set, &w).unwrap().0, State::Pinned);
        // Without that record, cmset would move it: pending.
        let set = ready_set(vec![]);
        assert_eq!(why(&set, &w).unwrap().0, State::Pending);
        // A reference to a pruned revision (no ConfigMap, not in history) is still recognised; cmset
        // knows no such revision of the set, so it leaves it where it is.
        let w = deployment("web", Some("true"), &["app-dddddddddd"]);
        let (state, cm, number, why) = why(&set, &w).unwrap();
        assert_eq!(
            (state, cm.as_str(), number, why.as_str()),
            (
                State::Pinned,
                "app-dddddddddd",
                None,
                "left on app-dddddddddd, which is no revision of the set that cmset knows (pruned, or \
                 never one): cmset does not move it"
            )
        );
    }

    #[test]
    fn a_set_without_status() {
        let mut set = ready_set(vec![]);
        set.status = None;
        let w = deployment("web", Some("true"), &["app"]);
        // Its controller has made nothing yet.
        let set = SetRef::from(&set);
        let r = explain(set, &[], &w).unwrap();
        assert_eq!(r.state, State::Pending);
        assert_eq!(r.explanation, "pending: the set has no current revision yet");
        // Once the revision holding its content exists, cmset moves the workload there, status or not.
        let cms = cms();
        let revs = revisions_of(set, &cms);
        let r = explain(set, &revs, &w).unwrap();
        assert_eq!(
            (r.state, r.explanation.as_str()),
            (State::Pending, "pending: cmset is moving it to revision 3")
        );
        let report = status_report(set, &revs, &[w]);
        assert!(report.status_behind_spec);
        let text = render_text(&report, Palette::PLAIN);
        assert!(text.contains("Current:      none yet\n"), "{text}");
        assert!(
            text.contains("Ready:        unknown: no Ready condition yet\n"),
            "{text}"
        );
        assert!(
            text.contains("Generation:   3, observed none: status is behind the spec\n"),
            "{text}"
        );
    }

    #[test]
    fn subscriptions_and_their_last_deliveries_are_listed() {
        use cmset_api::{NotificationResult, NotificationStatus};
        let mut set = ready_set(vec![]);
        let at = |t: &str| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                t.parse().unwrap(),
            ))
        };
        set.status.as_mut().unwrap().notifications = Some(vec![
            NotificationStatus {
                trigger: "on-rollout-failed".into(),
                service: "slack".into(),
                recipient: "ops".into(),
                once: "app-cccccccccc@2026-11-26T09:00:00Z".into(),
                result: NotificationResult::Delivered,
                time: at("2026-11-26T09:05:00Z"),
                attempts: 3,
                ..Default::default()
            },
            NotificationStatus {
                trigger: "on-rolled-back".into(),
                service: "pager".into(),
                result: NotificationResult::Failed,
                time: at("2026-11-26T09:05:01Z"),
                attempts: 4,
                message: Some("the receiver answered 503".into()),
                ..Default::default()
            },
            NotificationStatus {
                trigger: "on-rollout-completed".into(),
                service: "teams".into(),
                recipient: "prod".into(),
                ..Default::default()
            },
        ]);
        let set = SetRef::from(&set);
        let cms = cms();
        let report = status_report(set, &revisions_of(set, &cms), &[]);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "Subscribed:   on-rollout-failed to slack:ops: delivered at 2026-11-26T09:05:00Z (3 attempts)\n\
                 \x20             on-rolled-back to pager: failed at 2026-11-26T09:05:01Z after 4 attempts: the receiver answered 503\n\
                 \x20             on-rollout-completed to teams:prod: nothing sent yet\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["notifications"][0]["recipient"], "ops");
        assert_eq!(json["notifications"][1]["result"], "Failed");
        // Nobody subscribed: no line, no key.
        let quiet = status_report(SetRef::from(&ready_set(vec![])), &[], &[]);
        assert!(!render_text(&quiet, Palette::PLAIN).contains("Subscribed:"));
        assert!(
            serde_json::to_value(&quiet)
                .unwrap()
                .get("notifications")
                .is_none()
        );
    }

    fn full_report() -> StatusReport {
        let set = ready_set(vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("StatefulSet", "db", "app-ffffffffff", WorkloadState::Pinned),
        ]);
        let mut db = deployment("db", Some("true"), &["app-ffffffffff"]);
        db.kind = WorkloadKind::StatefulSet;
        db.uid = "db-uid".into();
        let workloads = [
            db,
            deployment("web", Some("true"), &["app-cccccccccc"]),
            deployment("legacy", None, &["app"]),
            deployment("unrelated", Some("true"), &["other"]),
        ];
        let cms = cms();
        let set = SetRef::from(&set);
        status_report(set, &revisions_of(set, &cms), &workloads)
    }

    #[test]
    fn text() {
        let text = render_text(&full_report(), Palette::PLAIN);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ConfigMapSet: app (namespace demo)");
        assert_eq!(lines[1], "Current:      revision 3, ConfigMap app-cccccccccc");
        assert_eq!(
            lines[2],
            "Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned"
        );
        assert_eq!(lines[3], "Generation:   3, observed 3");
        assert_eq!(lines[4], "");
        assert_eq!(
            lines[5..].join("\n"),
            "\
WORKLOAD            REVISION   CONFIGMAP        WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
StatefulSet/db      1          app-ffffffffff   pinned to revision 1 by a rollback; moves again when the set's content changes"
        );
        let coloured = render_text(&full_report(), Palette::COLOR);
        assert!(coloured.contains("\u{1b}[32mcurrent (updated by cmset)\u{1b}[0m"));
        assert!(coloured.contains("\u{1b}[32mTrue (RolledOut)"));
        assert!(!crate::style::has_escapes(&text));
    }

    #[test]
    fn status_behind_spec_is_said() {
        let mut set = ready_set(vec![]);
        set.metadata.generation = Some(4);
        let report = status_report(SetRef::from(&set), &[], &[]);
        assert!(report.status_behind_spec);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Generation:   4, observed 3: status is behind the spec\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "No Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout in namespace demo \
                 references app.\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn json_shape() {
        let value = serde_json::to_value(full_report()).unwrap();
        assert_eq!(value["kind"], "ConfigMapSet");
        assert_eq!(value["set"], "app");
        assert_eq!(value["namespace"], "demo");
        assert_eq!(value["generation"], 3);
        assert_eq!(value["observedGeneration"], 3);
        assert_eq!(value["statusBehindSpec"], false);
        assert_eq!(
            value["currentRevision"],
            json!({"configMap": "app-cccccccccc", "revision": 3})
        );
        assert_eq!(value["ready"]["status"], "True");
        assert_eq!(value["ready"]["reason"], "RolledOut");
        assert_eq!(
            value["workloads"][0],
            json!({
                "kind": "Deployment",
                "name": "legacy",
                "optedIn": false,
                "configMap": "app",
                "revision": null,
                "state": "notOptedIn",
                "explanation": "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
            })
        );
        let states: Vec<&str> = value["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["notOptedIn", "current", "pinned"]);
    }

    #[test]
    fn selecting_one_workload() {
        let mut r = full_report();
        select(&mut r, "web").unwrap();
        assert_eq!(r.workloads.len(), 1);
        let mut r = full_report();
        select(&mut r, "sts/db").unwrap();
        assert_eq!(r.workloads[0].kind, "StatefulSet");
        let mut r = full_report();
        assert!(
            select(&mut r, "Deployment/db")
                .unwrap_err()
                .contains("no Deployment, StatefulSet")
        );
        let mut r = full_report();
        assert!(
            select(&mut r, "pod/web")
                .unwrap_err()
                .contains("unknown workload kind")
        );
    }

    /// A pod spec naming `name` through one form of Secret reference.
    fn secret_spec(form: &str, name: &str) -> PodSpec {
        let app = json!({"name": "app"});
        let value = match form {
            "volume" => json!({
                "volumes": [{"name": "v", "secret": {"secretName": name}}],
                "containers": [app],
            }),
            "projected" => json!({
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": name}}]}}],
                "containers": [app],
            }),
            "envFrom" => json!({
                "containers": [{"name": "app", "envFrom": [{"secretRef": {"name": name}}]}],
            }),
            "secretKeyRef" => json!({
                "containers": [{"name": "app", "env": [{
                    "name": "PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": name, "key": "password"}},
                }]}],
            }),
            other => panic!("no form {other}"),
        };
        serde_json::from_value(value).unwrap()
    }

    fn secret_deployment(name: &str, opted_in: bool, form: &str, secret: &str) -> Workload {
        Workload {
            pod_spec: Some(secret_spec(form, secret)),
            ..deployment(name, opted_in.then_some("true"), &[])
        }
    }

    /// SecretSet `app`, ready on revision 3, with `web` current, `old` pinned and `late` pending.
    fn ready_secret_set() -> SecretSet {
        let mut s = secret_set(
            Some("app-cccccccccc"),
            Some(3),
            vec![
                workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
                workload("Deployment", "old", "app-ffffffffff", WorkloadState::Pinned),
                workload("Deployment", "late", "app-bbbbbbbbbb", WorkloadState::Pending),
            ],
        );
        let ready = ready_set(vec![]).status.unwrap();
        let status = s.status.as_mut().unwrap();
        status.conditions = ready.conditions;
        status.history = ready.history;
        s
    }

    /// Its revision Secrets, holding values no output may show.
    fn secrets() -> Vec<Secret> {
        vec![
            secret_revision("app-ffffffffff", Some(1), T, None, &[("password", SECRET_TEXT)]),
            secret_revision("app-bbbbbbbbbb", Some(2), T, None, &[("password", SECRET_BINARY)]),
            secret_revision("app-cccccccccc", Some(3), T, None, &[("password", SECRET_OTHER)]),
        ]
    }

    fn secret_report(workloads: &[Workload]) -> StatusReport {
        let set = ready_secret_set();
        let secrets = secrets();
        let set = SetRef::from(&set);
        status_report(set, &revisions_of(set, &secrets), workloads)
    }

    #[test]
    fn a_secret_set_is_explained_through_secret_references_only() {
        let set = ready_secret_set();
        let secrets = secrets();
        let set = SetRef::from(&set);
        let revs = revisions_of(set, &secrets);
        let why =
            |w: &Workload| explain(set, &revs, w).map(|r| (r.state, r.object, r.revision, r.explanation));
        let secret = |name: &str| ObjectName::Secret(name.into());
        let cases = [
            (
                secret_deployment("web", true, "volume", "app-cccccccccc"),
                Some((
                    State::Current,
                    secret("app-cccccccccc"),
                    Some(3),
                    "current (updated by cmset)",
                )),
            ),
            (
                secret_deployment("old", true, "projected", "app-ffffffffff"),
                Some((
                    State::Pinned,
                    secret("app-ffffffffff"),
                    Some(1),
                    "pinned to revision 1 by a rollback; moves again when the set's content changes",
                )),
            ),
            (
                secret_deployment("late", true, "secretKeyRef", "app-bbbbbbbbbb"),
                Some((
                    State::Pending,
                    secret("app-bbbbbbbbbb"),
                    Some(2),
                    "pending: cmset is moving it to revision 3",
                )),
            ),
            (
                secret_deployment("legacy", false, "envFrom", "app"),
                Some((
                    State::NotOptedIn,
                    secret("app"),
                    None,
                    "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
                )),
            ),
            // A ConfigMap reference names no Secret, even with the set's revision's name.
            (deployment("configmaps", Some("true"), &["app-cccccccccc"]), None),
            // Another SecretSet's revisions, and plain Secrets, are not references to this one.
            (
                secret_deployment("other", true, "envFrom", "app-config-dddddddddd"),
                None,
            ),
        ];
        for (w, want) in cases {
            let want = want.map(|(s, o, n, e)| (s, o, n, e.to_string()));
            assert_eq!(why(&w), want, "{}", w.name);
        }
    }

    #[test]
    fn a_config_map_set_ignores_secret_references_of_its_name() {
        let set = ready_set(vec![]);
        let cms = cms();
        let set = SetRef::from(&set);
        let revs = revisions_of(set, &cms);
        for form in ["volume", "projected", "envFrom", "secretKeyRef"] {
            for name in ["app", "app-cccccccccc"] {
                let w = secret_deployment("web", true, form, name);
                assert_eq!(explain(set, &revs, &w), None, "{form} {name}");
            }
        }
    }

    #[test]
    fn a_secret_set_s_status_text_and_json() {
        let report = secret_report(&[
            secret_deployment("web", true, "envFrom", "app-cccccccccc"),
            secret_deployment("legacy", false, "volume", "app"),
            deployment("configmaps", Some("true"), &["app-cccccccccc"]),
        ]);
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
SecretSet:    app (namespace demo)
Current:      revision 3, Secret app-cccccccccc
Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned
Generation:   3, observed 3

WORKLOAD            REVISION   SECRET           WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["kind"], "SecretSet");
        assert_eq!(
            value["currentRevision"],
            json!({"secret": "app-cccccccccc", "revision": 3})
        );
        assert_eq!(
            value["workloads"][1],
            json!({
                "kind": "Deployment",
                "name": "web",
                "optedIn": true,
                "secret": "app-cccccccccc",
                "revision": 3,
                "state": "current",
                "explanation": "current (updated by cmset)",
            })
        );
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        assert!(yaml.starts_with("kind: SecretSet\nset: app\n"), "{yaml}");
        for out in [text, value.to_string(), yaml] {
            assert!(!out.contains("configMap") && !out.contains("ConfigMap "), "{out}");
            assert_no_secret_values(&out);
        }
    }

    #[test]
    fn selecting_a_workload_of_a_secret_set() {
        let mut report = secret_report(&[secret_deployment("web", true, "envFrom", "app-cccccccccc")]);
        let err = select(&mut report, "deploy/api").unwrap_err();
        assert_eq!(
            err,
            "no Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout \"deploy/api\" in namespace \
             \"demo\" references secretset \"app\""
        );
        let mut report = secret_report(&[secret_deployment("web", true, "envFrom", "app-cccccccccc")]);
        select(&mut report, "deploy/web").unwrap();
        assert_eq!(report.workloads.len(), 1);
    }

    // Rollouts in waves. The set moves from revision 3 (app-cccccccccc) to revision 4 (app-dddddddddd):
    // `web` (no wave label, so wave 0), `api` (wave 1) and `db` (wave 2) take part; `legacy` is not
    // opted in.

    const NOW: &str = "2026-01-01T00:10:00Z";
    const NEW: &str = "app-dddddddddd";
    const OLD: &str = "app-cccccccccc";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    /// `seconds` before [`NOW`].
    fn ago(seconds: i64) -> Time {
        Time(now() - jiff::SignedDuration::from_secs(seconds))
    }

    /// The revisions once revision 4 holds the set's content.
    fn cms4() -> Vec<ConfigMap> {
        vec![
            revision("app-ffffffffff", Some(1), T, &[]),
            revision("app-bbbbbbbbbb", Some(2), T, &[]),
            revision(OLD, Some(3), T, &[]),
            holding_the_spec(revision(NEW, Some(4), T, &[])),
        ]
    }

    fn waved(mut w: Workload, wave: &str) -> Workload {
        w.labels.insert(labels::WAVE.to_string(), wave.to_string());
        w
    }

    fn entry(
        kind: &str,
        name: &str,
        revision: &str,
        state: WorkloadState,
        wave: i32,
        message: Option<&str>,
    ) -> cmset_api::WorkloadStatus {
        cmset_api::WorkloadStatus {
            wave,
            message: message.map(str::to_string),
            ..workload(kind, name, revision, state)
        }
    }

    #[test]
    fn validation_is_shown_when_the_set_declares_it() {
        let mut set = ready_set(vec![]);
        let refused = "content not made into revision app-dddddddddd (workloads stay on revision 3 (app-cccccccccc)): \
                       key \"app.json\": is not valid JSON at line 2 column 1: trailing comma";
        set.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Valid".into(),
            ..condition("False", "ValidationFailed", refused)
        }];
        let cms = cms();
        let report = status_report((&set).into(), &revisions_of((&set).into(), &cms), &[]);
        assert_eq!(
            report.validation.as_ref().map(|v| v.status.as_str()),
            Some("False")
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(&format!("Validation:   failed: {refused}\n")),
            "{text}"
        );
        set.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Valid".into(),
            ..condition("True", "ContentValid", "")
        }];
        let report = status_report((&set).into(), &revisions_of((&set).into(), &cms), &[]);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Validation:   passed: the current revision's content passes spec.validation\n"),
            "{text}"
        );
        // No validation declared: no line, no field.
        set.status.as_mut().unwrap().conditions.clear();
        let report = status_report((&set).into(), &revisions_of((&set).into(), &cms), &[]);
        assert!(!render_text(&report, Palette::PLAIN).contains("Validation:"));
        assert!(serde_json::to_value(&report).unwrap().get("validation").is_none());
    }

    fn condition(status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(3),
            last_transition_time: Time(T.parse().unwrap()),
        }
    }

    /// ConfigMapSet `app` on revision 4, with `spec.rollout` and the status given.
    fn rollout_set(
        rollout: cmset_api::RolloutStatus,
        ready: Condition,
        workloads: Vec<cmset_api::WorkloadStatus>,
    ) -> ConfigMapSet {
        let mut s = set(Some(NEW), Some(4), workloads);
        s.spec.rollout = Some(cmset_api::RolloutSpec {
            stabilization_seconds: 30,
            auto_rollback: true,
            ..Default::default()
        });
        let status = s.status.as_mut().unwrap();
        status.conditions = vec![ready];
        status.rollout = Some(rollout);
        status.history = vec![
            cmset_api::RevisionStatus {
                name: NEW.into(),
                revision: 4,
                in_use: true,
                failed: rollout_failed(status),
            },
            cmset_api::RevisionStatus {
                name: OLD.into(),
                revision: 3,
                in_use: true,
                failed: false,
            },
        ];
        s
    }

    fn rollout_failed(status: &cmset_api::ConfigMapSetStatus) -> bool {
        status
            .rollout
            .as_ref()
            .is_some_and(|r| r.phase == RolloutPhase::Failed)
    }

    fn rollout(phase: RolloutPhase, wave: i32, healthy_since: Option<Time>) -> cmset_api::RolloutStatus {
        cmset_api::RolloutStatus {
            revision: NEW.into(),
            phase,
            wave,
            waves: vec![0, 1, 2],
            wave_healthy_since: healthy_since,
            started_at: Some(ago(120)),
            message: None,
            held_since: None,
            analysis: Vec::new(),
            ..cmset_api::RolloutStatus::default()
        }
    }

    fn sts(mut w: Workload) -> Workload {
        w.kind = WorkloadKind::StatefulSet;
        w
    }

    fn rollout_workloads(web: &str, api: &str, db: &str) -> Vec<Workload> {
        let on = Some("true");
        vec![
            deployment("web", on, &[web]),
            waved(deployment("api", on, &[api]), "1"),
            waved(sts(deployment("db", on, &[db])), "2"),
            deployment("legacy", None, &["app"]),
        ]
    }

    fn rollout_report_of(set: &ConfigMapSet, workloads: &[Workload]) -> StatusReport {
        let cms = cms4();
        let set = SetRef::from(set);
        status_report_at(set, &revisions_of(set, &cms), workloads, now())
    }

    /// Wave 0 is done and has been healthy for 12 of its 30 stabilization seconds; waves 1 and 2 wait.
    fn mid_rollout() -> ConfigMapSet {
        rollout_set(
            rollout(RolloutPhase::Progressing, 0, Some(ago(12))),
            condition("False", "RollingOut", "revision 4 is rolling out in wave 0"),
            vec![
                entry(
                    "Deployment",
                    "web",
                    NEW,
                    WorkloadState::Current,
                    0,
                    Some("healthy"),
                ),
                entry(
                    "Deployment",
                    "api",
                    OLD,
                    WorkloadState::Waiting,
                    1,
                    Some("waiting for wave 0 to complete"),
                ),
                entry(
                    "StatefulSet",
                    "db",
                    OLD,
                    WorkloadState::Waiting,
                    2,
                    Some("waiting for wave 0 to complete"),
                ),
            ],
        )
    }

    #[test]
    fn a_paused_rollout_and_one_awaiting_promotion_say_since_when_and_what_goes_on() {
        let mut set = mid_rollout();
        let rollout = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        rollout.phase = RolloutPhase::Paused;
        rollout.held_since = Some(ago(90));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Rollout:      revision 4 (app-dddddddddd): wave 0 paused for 90s\n              to go on: kubectl cmset resume\n"),
            "{text}"
        );
        assert!(text.contains("held: the rollout is paused in wave 0"), "{text}");
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "paused");
        assert_eq!(value["rollout"]["heldSince"], "2026-01-01T00:08:30Z");
        assert_eq!(value["rollout"]["heldSeconds"], 90);

        let rollout = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        rollout.phase = RolloutPhase::AwaitingPromotion;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("wave 0 done; the next wave awaits promotion for 90s\n              to go on: kubectl cmset promote\n"),
            "{text}"
        );
        assert!(text.contains("waiting: wave 0 must complete"), "{text}");
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rollout"]["phase"],
            "awaitingPromotion"
        );
    }

    #[test]
    fn a_set_mid_rollout() {
        let report = rollout_report_of(&mid_rollout(), &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
ConfigMapSet: app (namespace demo)
Current:      revision 4, ConfigMap app-dddddddddd
Ready:        False (RollingOut): revision 4 is rolling out in wave 0
Rollout:      revision 4 (app-dddddddddd): wave 0 of [0, 1, 2] in progress
              wave 0 healthy for 12s; wave 1 moves after stabilizationSeconds 30 (18s left)
Generation:   3, observed 3

WORKLOAD            WAVE   REVISION   CONFIGMAP        WHY
Deployment/api      1      3          app-cccccccccc   waiting: wave 0 must complete and stay healthy first
Deployment/legacy   -      -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      0      4          app-dddddddddd   current (updated by cmset); healthy
StatefulSet/db      2      3          app-cccccccccc   waiting: waves 0 and 1 must complete and stay healthy first
"
        );
        let coloured = render_text(&report, Palette::COLOR);
        assert!(
            coloured
                .contains("\u{1b}[33mrevision 4 (app-dddddddddd): wave 0 of [0, 1, 2] in progress\u{1b}[0m")
        );
        assert!(coloured.contains("\u{1b}[33mwaiting: wave 0 must complete"));

        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(
            value["rollout"],
            json!({
                "configMap": NEW,
                "revision": 4,
                "phase": "progressing",
                "wave": 0,
                "waves": [0, 1, 2],
                "stabilizationSeconds": 30,
                "autoRollback": true,
                "startedAt": "2026-01-01T00:08:00Z",
                "waveHealthySince": "2026-01-01T00:09:48Z",
                "waveHealthySeconds": 12,
                "stabilizationLeftSeconds": 18,
            })
        );
        assert_eq!(
            value["workloads"][0],
            json!({
                "kind": "Deployment",
                "name": "api",
                "optedIn": true,
                "wave": 1,
                "configMap": OLD,
                "revision": 3,
                "state": "waiting",
                "explanation": "waiting: wave 0 must complete and stay healthy first",
            })
        );
        // Not opted in: no wave.
        assert_eq!(value["workloads"][1].get("wave"), None);
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        assert!(
            yaml.contains("rollout:\n  configMap: app-dddddddddd\n  revision: 4\n  phase: progressing\n")
        );
        assert!(yaml.contains("  state: waiting\n"), "{yaml}");
    }

    #[test]
    fn the_stabilization_window_of_the_last_wave_and_when_it_is_due() {
        let mut set = mid_rollout();
        let status = set.status.as_mut().unwrap();
        let r = status.rollout.as_mut().unwrap();
        r.wave = 2;
        r.wave_healthy_since = Some(ago(45));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, NEW, NEW));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "Rollout:      revision 4 (app-dddddddddd): wave 2 of [0, 1, 2] in progress\n              \
                 wave 2 healthy for 45s; the rollout completes after stabilizationSeconds 30 (due now)\n"
            ),
            "{text}"
        );
        assert_eq!(report.rollout.unwrap().stabilization_left_seconds, Some(0));
        // Without spec.rollout, the window is 0 seconds; without a healthy wave, there is no window yet.
        set.spec.rollout = None;
        set.status
            .as_mut()
            .unwrap()
            .rollout
            .as_mut()
            .unwrap()
            .wave_healthy_since = None;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, NEW, NEW));
        let r = report.rollout.as_ref().unwrap();
        assert_eq!(
            (
                r.stabilization_seconds,
                r.auto_rollback,
                r.stabilization_left_seconds
            ),
            (0, false, None)
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(!text.contains("healthy for"), "{text}");
    }

    /// Wave 0 failed: `web` did not become healthy on revision 4 and cmset moved it back to revision 3;
    /// `worker` (wave 0 too) is fine on revision 4; waves 1 and 2 never receive it.
    fn failed_rollout(web_refers_to: &str) -> (ConfigMapSet, Vec<Workload>) {
        let mut r = rollout(RolloutPhase::Failed, 0, None);
        r.message = Some(format!(
            "the rollout of {NEW} failed in wave 0: Deployment web reported ProgressDeadlineExceeded (its \
             Progressing condition)"
        ));
        let held = format!("held: the rollout of {NEW} failed in wave 0");
        let mut web = entry(
            "Deployment",
            "web",
            web_refers_to,
            WorkloadState::RolledBack,
            0,
            Some(&format!(
                "rolled back to {OLD}: it reported ProgressDeadlineExceeded (its Progressing condition)"
            )),
        );
        web.previous_revision = Some(OLD.into());
        web.moved_at = Some(ago(700));
        let set = rollout_set(
            r,
            condition(
                "False",
                "RolloutFailed",
                "the rollout of revision 4 failed in wave 0",
            ),
            vec![
                web,
                entry("Deployment", "worker", NEW, WorkloadState::Current, 0, None),
                entry("Deployment", "api", OLD, WorkloadState::Waiting, 1, Some(&held)),
                entry("StatefulSet", "db", OLD, WorkloadState::Waiting, 2, Some(&held)),
            ],
        );
        let mut workloads = rollout_workloads(web_refers_to, OLD, OLD);
        workloads.push(deployment("worker", Some("true"), &[NEW]));
        (set, workloads)
    }

    #[test]
    fn a_failed_rollout_with_a_rolled_back_workload() {
        let (set, workloads) = failed_rollout(OLD);
        let report = rollout_report_of(&set, &workloads);
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
ConfigMapSet: app (namespace demo)
Current:      revision 4, ConfigMap app-dddddddddd
Ready:        False (RolloutFailed): the rollout of revision 4 failed in wave 0
Rollout:      revision 4 (app-dddddddddd): failed in wave 0: Deployment web reported ProgressDeadlineExceeded (its Progressing condition)
              waves 1 and 2 will not receive it; failed workloads are moved back to the revision they ran before (autoRollback)
Generation:   3, observed 3

WORKLOAD            WAVE   REVISION   CONFIGMAP        WHY
Deployment/api      1      3          app-cccccccccc   held: the rollout of revision 4 failed in wave 0
Deployment/legacy   -      -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      0      3          app-cccccccccc   rolled back to revision 3 by cmset: it reported ProgressDeadlineExceeded (its Progressing condition)
Deployment/worker   0      4          app-dddddddddd   current (updated by cmset)
StatefulSet/db      2      3          app-cccccccccc   held: the rollout of revision 4 failed in wave 0
"
        );
        let coloured = render_text(&report, Palette::COLOR);
        assert!(coloured.contains("\u{1b}[1m\u{1b}[31mrevision 4 (app-dddddddddd): failed in wave 0"));
        assert!(coloured.contains("\u{1b}[1m\u{1b}[31mrolled back to revision 3 by cmset"));

        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "failed");
        assert_eq!(value["rollout"]["wave"], 0);
        assert_eq!(
            value["rollout"]["message"],
            format!(
                "the rollout of {NEW} failed in wave 0: Deployment web reported ProgressDeadlineExceeded (its \
                 Progressing condition)"
            )
        );
        assert_eq!(value["rollout"].get("stabilizationLeftSeconds"), None);
        let web = &value["workloads"][2];
        assert_eq!(
            (&web["name"], &web["state"], &web["wave"], &web["revision"]),
            (&json!("web"), &json!("rolledBack"), &json!(0), &json!(3))
        );
    }

    #[test]
    fn a_rollback_recorded_before_the_workload_moved_back() {
        // The controller decided the rollback; the workload still names revision 4 for a moment.
        let (set, workloads) = failed_rollout(NEW);
        let report = rollout_report_of(&set, &workloads);
        let web = report.workloads.iter().find(|w| w.name == "web").unwrap();
        assert_eq!((web.state, web.revision), (State::RolledBack, Some(4)));
        assert_eq!(
            web.explanation,
            "rolling back to revision 3 by cmset: it reported ProgressDeadlineExceeded (its Progressing \
             condition)"
        );
    }

    #[test]
    fn waiting_and_rolled_back_without_a_message() {
        let (mut set, workloads) = failed_rollout(OLD);
        let status = set.status.as_mut().unwrap();
        for w in &mut status.workloads {
            w.message = None;
        }
        status.rollout.as_mut().unwrap().message = None;
        set.spec.rollout.as_mut().unwrap().auto_rollback = false;
        let report = rollout_report_of(&set, &workloads);
        let why = |name: &str| {
            report
                .workloads
                .iter()
                .find(|w| w.name == name)
                .unwrap()
                .explanation
                .clone()
        };
        assert_eq!(
            why("web"),
            "rolled back to revision 3 by cmset: the rollout of revision 4 failed in wave 0"
        );
        assert_eq!(why("db"), "held: the rollout of revision 4 failed in wave 0");
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "Rollout:      revision 4 (app-dddddddddd): failed in wave 0\n              \
                 waves 1 and 2 will not receive it; autoRollback is off: failed workloads stay on it\n"
            ),
            "{text}"
        );

        // While progressing, with no rollout wave to wait for (its wave label is not one), the record
        // says what it waits for.
        let mut set = mid_rollout();
        let status = set.status.as_mut().unwrap();
        status.rollout.as_mut().unwrap().wave = 1;
        status.workloads[1].message = Some("label cmset.dev/wave is being fixed".into());
        let mut workloads = rollout_workloads(NEW, OLD, OLD);
        workloads[1] = waved(deployment("api", Some("true"), &[OLD]), "one");
        let report = rollout_report_of(&set, &workloads);
        let api = report.workloads.iter().find(|w| w.name == "api").unwrap();
        assert_eq!(api.explanation, "waiting: label cmset.dev/wave is being fixed");
        let db = report.workloads.iter().find(|w| w.name == "db").unwrap();
        assert_eq!(
            db.explanation,
            "waiting: wave 1 must complete and stay healthy first"
        );
    }

    const HELD_BY: &str = "Deny window spec.rollout.windows[0] (freeze), open until 2026-01-01T06:00:00Z";

    /// Wave 0 is done; a Deny window (`freeze`) holds wave 1 from moving, for 5 minutes now and until
    /// 06:00 (5h50m after [`NOW`]).
    fn held_by_a_window() -> ConfigMapSet {
        let mut r = rollout(RolloutPhase::Waiting, 1, None);
        r.held_since = Some(ago(300));
        r.reason = Some("freeze".into());
        r.message = Some(HELD_BY.into());
        r.next_window = Some(Time("2026-01-01T06:00:00Z".parse().unwrap()));
        let held = format!("held by a change window: {HELD_BY}");
        rollout_set(
            r,
            condition(
                "False",
                "Waiting",
                "revision 4 waits in wave 1 for a change window",
            ),
            vec![
                entry(
                    "Deployment",
                    "web",
                    NEW,
                    WorkloadState::Current,
                    0,
                    Some("healthy"),
                ),
                entry("Deployment", "api", OLD, WorkloadState::Waiting, 1, Some(&held)),
                entry(
                    "StatefulSet",
                    "db",
                    OLD,
                    WorkloadState::Waiting,
                    2,
                    Some("waiting for wave 1 to complete"),
                ),
            ],
        )
    }

    #[test]
    fn a_rollout_held_by_a_change_window_says_which_and_until_when() {
        let report = rollout_report_of(&held_by_a_window(), &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "\
Rollout:      revision 4 (app-dddddddddd): wave 1 waiting: held by a change window for 5m
              held by: Deny window spec.rollout.windows[0] (freeze), open until 2026-01-01T06:00:00Z (reason freeze)
              moves resume at 2026-01-01T06:00:00Z (in 5h50m)
              to let this rollout through now: kubectl cmset promote --override-window configmapset/app
"
            ),
            "{text}"
        );
        // Its own wave is the one held: the window is why it waits.
        let api = report.workloads.iter().find(|w| w.name == "api").unwrap();
        assert_eq!(api.state, State::Waiting);
        assert_eq!(api.explanation, format!("held by a change window: {HELD_BY}"));
        let db = report.workloads.iter().find(|w| w.name == "db").unwrap();
        assert_eq!(
            db.explanation,
            "waiting: wave 1 must complete and stay healthy first"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "waiting");
        assert_eq!(value["rollout"]["reason"], "freeze");
        assert_eq!(value["rollout"]["nextWindow"], "2026-01-01T06:00:00Z");
        assert_eq!(value["rollout"]["nextWindowSeconds"], 5 * 3600 + 50 * 60);
        assert_eq!(value["rollout"]["heldSeconds"], 300);
        assert_eq!(value["rollout"].get("windowOverrideBy"), None);
    }

    #[test]
    fn a_window_that_never_opens_and_one_outside_every_allow() {
        let mut set = held_by_a_window();
        let r = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        r.message = None;
        r.reason = Some("OutsideWindow".into());
        r.next_window = None;
        r.held_since = None;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "\
Rollout:      revision 4 (app-dddddddddd): wave 1 waiting: held by a change window
              held by: outside every Allow window (reason OutsideWindow)
              no window opens within 10 years: moves do not resume by themselves
"
            ),
            "{text}"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"].get("nextWindow"), None);
    }

    #[test]
    fn an_override_in_force_and_the_immediate_strategy_are_said() {
        let mut set = held_by_a_window();
        set.metadata.annotations = Some(
            [
                (labels::WINDOW_OVERRIDE, format!("{NEW}@2026-01-01T00:08:00Z")),
                (labels::WINDOW_OVERRIDE_BY, "ana 2026-01-01T00:09:00Z".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        let r = set.status.as_mut().unwrap().rollout.as_mut().unwrap();
        r.phase = RolloutPhase::Progressing;
        r.reason = None;
        r.message = None;
        r.next_window = None;
        r.held_since = None;
        // The old annotation is said to be ignored, and names no one.
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("the annotation cmset.dev/window-override is ignored: it lets nothing through"),
            "{text}"
        );
        assert!(!text.contains("by ana"), "{text}");
        // A WindowOverride let it through, as the controller recorded: the override and who are shown.
        set.metadata.annotations = None;
        let granted = |by: Option<&str>| Condition {
            type_: "WindowOverride".into(),
            status: "True".into(),
            reason: "Granted".into(),
            message: cmset_core::policy::break_glass::granted_message(
                &cmset_core::policy::break_glass::OverrideView {
                    name: "app-break".into(),
                    set_kind: cmset_core::set::SetKind::ConfigMapSet,
                    set_name: "app".into(),
                    set_uid: "set-uid".into(),
                    revision: NEW.into(),
                    started_at: "2026-01-01T00:08:00Z".parse().unwrap(),
                    requested_by: by.map(str::to_string),
                },
            ),
            observed_generation: None,
            last_transition_time: Time("2026-01-01T00:09:01Z".parse().unwrap()),
        };
        set.status.as_mut().unwrap().conditions.push(granted(Some("ana")));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "              let through the change windows by WindowOverride app-break (requested by ana)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("is ignored"), "{text}");
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["windowOverride"], "app-break");
        assert_eq!(value["rollout"]["windowOverrideBy"], "ana");
        // Created while the webhook did not answer: "not recorded".
        let conditions = &mut set.status.as_mut().unwrap().conditions;
        conditions.pop();
        conditions.push(granted(None));
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("by WindowOverride app-break (requested by not recorded)"),
            "{text}"
        );

        let mut set = mid_rollout();
        set.spec.rollout.as_mut().unwrap().strategy = Strategy::Immediate;
        let report = rollout_report_of(&set, &rollout_workloads(NEW, OLD, OLD));
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("              strategy: Immediate: every new revision reaches every reader at once; only change windows hold it\n"),
            "{text}"
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rollout"]["strategy"],
            "Immediate"
        );
        // Waves, the default, is not said.
        let report = rollout_report_of(&mid_rollout(), &rollout_workloads(NEW, OLD, OLD));
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rollout"].get("strategy"),
            None
        );
    }

    #[test]
    fn an_invalid_wave_label() {
        let set = mid_rollout();
        let mut workloads = rollout_workloads(NEW, OLD, OLD);
        workloads[1] = waved(deployment("api", Some("true"), &[OLD]), "one");
        let mut set = set;
        set.status.as_mut().unwrap().workloads[1].message = None;
        let report = rollout_report_of(&set, &workloads);
        let api = &report.workloads[0];
        assert_eq!(api.wave, Some(WaveLabel::Invalid("one".into())));
        assert_eq!(
            api.explanation,
            "waiting: label cmset.dev/wave is \"one\", not a whole number from 0 to 1000; held where it is \
             until it is fixed"
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(text.contains("\nDeployment/api      \"one\"   3 "), "{text}");
        assert_eq!(
            serde_json::to_value(&report).unwrap()["workloads"][0]["wave"],
            "one"
        );
    }

    #[test]
    fn a_complete_rollout() {
        let set = rollout_set(
            rollout(RolloutPhase::Complete, 2, None),
            condition(
                "True",
                "RolledOut",
                "every opted-in workload runs revision 4 or is pinned",
            ),
            vec![
                entry("Deployment", "web", NEW, WorkloadState::Current, 0, None),
                entry("Deployment", "api", NEW, WorkloadState::Current, 1, None),
                entry("StatefulSet", "db", NEW, WorkloadState::Current, 2, None),
            ],
        );
        let report = rollout_report_of(&set, &rollout_workloads(NEW, NEW, NEW));
        assert_eq!(
            render_text(&report, Palette::PLAIN),
            "\
ConfigMapSet: app (namespace demo)
Current:      revision 4, ConfigMap app-dddddddddd
Ready:        True (RolledOut): every opted-in workload runs revision 4 or is pinned
Rollout:      revision 4 (app-dddddddddd): complete in waves 0, 1 and 2
Generation:   3, observed 3

WORKLOAD            WAVE   REVISION   CONFIGMAP        WHY
Deployment/api      1      4          app-dddddddddd   current (updated by cmset)
Deployment/legacy   -      -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      0      4          app-dddddddddd   current (updated by cmset)
StatefulSet/db      2      4          app-dddddddddd   current (updated by cmset)
"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["phase"], "complete");
        assert_eq!(value["rollout"].get("waveHealthySince"), None);
        let coloured = render_text(&report, Palette::COLOR);
        assert!(coloured.contains("\u{1b}[32mrevision 4 (app-dddddddddd): complete in waves 0, 1 and 2"));
    }

    #[test]
    fn a_set_without_waves_prints_as_before() {
        // An explicit wave 0 is no wave at all: no rollout line, no WAVE column, no `wave` or `rollout`
        // in JSON, and the same output at any time.
        let mut set = ready_set(vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("StatefulSet", "db", "app-ffffffffff", WorkloadState::Pinned),
        ]);
        let mut db = waved(sts(deployment("db", Some("true"), &["app-ffffffffff"])), "0");
        db.uid = "db-uid".into();
        let workloads = [
            db,
            waved(deployment("web", Some("true"), &["app-cccccccccc"]), "0"),
            deployment("legacy", None, &["app"]),
        ];
        let cms = cms();
        let report = |set: &ConfigMapSet| {
            let set = SetRef::from(set);
            status_report_at(set, &revisions_of(set, &cms), &workloads, now())
        };
        let before = "\
ConfigMapSet: app (namespace demo)
Current:      revision 3, ConfigMap app-cccccccccc
Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned
Generation:   3, observed 3

WORKLOAD            REVISION   CONFIGMAP        WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
StatefulSet/db      1          app-ffffffffff   pinned to revision 1 by a rollback; moves again when the set's content changes
";
        let r = report(&set);
        assert_eq!(render_text(&r, Palette::PLAIN), before);
        let json = serde_json::to_string(&r).unwrap();
        assert!(!json.contains("wave") && !json.contains("rollout"), "{json}");
        assert_eq!(r, full_report());
        // A spec.rollout alone changes nothing until the status records a rollout.
        set.spec.rollout = Some(Default::default());
        assert_eq!(render_text(&report(&set), Palette::PLAIN), before);
        // A workload in a later wave shows the column, even before a rollout is recorded.
        set.spec.rollout = None;
        let mut workloads = workloads.clone();
        workloads[1] = waved(deployment("web", Some("true"), &["app-cccccccccc"]), "3");
        let set = SetRef::from(&set);
        let r = status_report_at(set, &revisions_of(set, &cms), &workloads, now());
        let text = render_text(&r, Palette::PLAIN);
        assert!(
            text.contains("\nWORKLOAD            WAVE   REVISION   CONFIGMAP        WHY\n"),
            "{text}"
        );
        assert!(
            text.contains("\nDeployment/web      3      3          app-cccccccccc   current"),
            "{text}"
        );
        assert!(text.contains("\nStatefulSet/db      0      1 "), "{text}");
        assert!(text.contains("\nDeployment/legacy   -      - "), "{text}");
    }

    #[test]
    fn a_secret_set_s_rollout_shows_no_secret_value() {
        let set = mid_rollout();
        let mut s = secret_set(None, None, vec![]);
        s.spec.rollout = set.spec.rollout;
        s.status = set.status;
        let mut secrets = secrets();
        secrets.push(secret_revision(
            NEW,
            Some(4),
            T,
            None,
            &[("password", SECRET_TEXT)],
        ));
        let workloads = [
            secret_deployment("web", true, "envFrom", NEW),
            waved(secret_deployment("api", true, "volume", OLD), "1"),
            waved(secret_deployment("db", true, "secretKeyRef", OLD), "2"),
        ];
        let set = SetRef::from(&s);
        let report = status_report_at(set, &revisions_of(set, &secrets), &workloads, now());
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Rollout:      revision 4 (app-dddddddddd): wave 0 of [0, 1, 2] in progress\n"),
            "{text}"
        );
        assert!(
            text.contains("\nWORKLOAD         WAVE   REVISION   SECRET           WHY\n"),
            "{text}"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["rollout"]["secret"], NEW);
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        for out in [text, value.to_string(), yaml] {
            assert!(!out.contains("configMap") && !out.contains("ConfigMap "), "{out}");
            assert_no_secret_values(&out);
        }
    }

    // Every built-in kind of the table: CronJobs and Rollouts are explained like Deployments; a Job keeps
    // the revision it was created with.

    fn of_kind(kind: WorkloadKind, name: &str, opted_in: bool, refs: &[&str]) -> Workload {
        Workload {
            kind,
            ..deployment(name, opted_in.then_some("true"), refs)
        }
    }

    #[test]
    fn explanations_for_every_kind() {
        let set = ready_set(vec![
            workload("CronJob", "report", "app-cccccccccc", WorkloadState::Current),
            workload("Rollout", "canary", "app-ffffffffff", WorkloadState::Pinned),
            workload("Job", "migrate", "app-cccccccccc", WorkloadState::Current),
        ]);
        use WorkloadKind as K;
        let cases = [
            (
                of_kind(K::CronJob, "report", true, &["app-cccccccccc"]),
                State::Current,
                "app-cccccccccc",
                "current (updated by cmset)",
            ),
            (
                of_kind(K::CronJob, "nightly", true, &["app-bbbbbbbbbb"]),
                State::Pending,
                "app-bbbbbbbbbb",
                "pending: cmset is moving it to revision 3",
            ),
            (
                of_kind(K::Rollout, "canary", true, &["app-ffffffffff"]),
                State::Pinned,
                "app-ffffffffff",
                "pinned to revision 1 by a rollback; moves again when the set's content changes",
            ),
            (
                of_kind(K::Rollout, "fresh", true, &["app"]),
                State::Pending,
                "app",
                "pending: cmset is moving it to revision 3",
            ),
            (
                of_kind(K::Job, "migrate", true, &["app-cccccccccc"]),
                State::Current,
                "app-cccccccccc",
                "current (a Job keeps the revision it was created with)",
            ),
            // Created before the set's content changed: it runs to the end on what it was given.
            (
                of_kind(K::Job, "backfill", true, &["app-bbbbbbbbbb"]),
                State::Pinned,
                "app-bbbbbbbbbb",
                "kept on revision 2, which it was created with: a Job's template cannot change, so cmset \
                 never moves it; a new Job gets revision 3",
            ),
            // Created while the webhook was down: nothing will ever move it.
            (
                of_kind(K::Job, "early", true, &["app"]),
                State::Pinned,
                "app",
                "names the set itself, not a revision: it was created while cmset's webhook did not \
                 answer, and a Job's template cannot change; recreate it to run revision 3",
            ),
            (
                of_kind(K::Job, "manual", false, &["app-bbbbbbbbbb"]),
                State::NotOptedIn,
                "app-bbbbbbbbbb",
                "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
            ),
        ];
        for (w, state, name, explanation) in cases {
            let got = why(&set, &w).unwrap_or_else(|| panic!("{}/{} references the set", w.kind, w.name));
            assert_eq!(
                (got.0, got.1.as_str(), got.3.as_str()),
                (state, name, explanation),
                "{}/{}",
                w.kind,
                w.name
            );
        }
    }

    /// A report with one workload of every built-in kind, each named after its kind (`cronjob-x`).
    fn report_of_every_kind() -> StatusReport {
        let set = ready_set(vec![]);
        let workloads: Vec<Workload> = WorkloadKind::BUILT_IN
            .into_iter()
            .map(|k| {
                of_kind(
                    k,
                    &format!("{}-x", k.as_str().to_ascii_lowercase()),
                    true,
                    &["app-cccccccccc"],
                )
            })
            .collect();
        let cms = cms();
        let set = SetRef::from(&set);
        status_report(set, &revisions_of(set, &cms), &workloads)
    }

    #[test]
    fn every_kind_is_listed_by_kind_and_name() {
        let report = report_of_every_kind();
        let listed: Vec<String> = report
            .workloads
            .iter()
            .map(|w| format!("{}/{}", w.kind, w.name))
            .collect();
        assert_eq!(
            listed,
            [
                "CronJob/cronjob-x",
                "DaemonSet/daemonset-x",
                "Deployment/deployment-x",
                "Job/job-x",
                "Rollout/rollout-x",
                "StatefulSet/statefulset-x",
            ]
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains(
                "\nCronJob/cronjob-x           3          app-cccccccccc   current (updated by cmset)\n"
            ),
            "{text}"
        );
        assert!(text.contains("\nRollout/rollout-x           3 "), "{text}");
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["workloads"][3]["kind"], "Job");
    }

    #[test]
    fn every_kind_is_selected_by_each_name_the_table_gives_it() {
        for kind in WorkloadKind::BUILT_IN {
            let name = format!("{}-x", kind.as_str().to_ascii_lowercase());
            let calls = std::iter::once(kind.as_str().to_string())
                .chain(std::iter::once(kind.as_str().to_ascii_uppercase()))
                .chain(kind.spec().aliases.iter().map(|a| a.to_string()));
            for called in calls {
                let mut report = report_of_every_kind();
                select(&mut report, &format!("{called}/{name}")).unwrap();
                let picked: Vec<&str> = report.workloads.iter().map(|w| w.kind.as_str()).collect();
                assert_eq!(picked, [kind.as_str()], "{called}/{name}");
            }
        }
        // The names kubectl users type, spelled out.
        for (selector, kind) in [
            ("cronjob/cronjob-x", "CronJob"),
            ("cj/cronjob-x", "CronJob"),
            ("cronjobs/cronjob-x", "CronJob"),
            ("job/job-x", "Job"),
            ("jobs/job-x", "Job"),
            ("rollout/rollout-x", "Rollout"),
            ("ro/rollout-x", "Rollout"),
            ("rollouts/rollout-x", "Rollout"),
            ("deploy/deployment-x", "Deployment"),
            ("sts/statefulset-x", "StatefulSet"),
            ("ds/daemonset-x", "DaemonSet"),
        ] {
            let mut report = report_of_every_kind();
            select(&mut report, selector).unwrap();
            assert_eq!(report.workloads[0].kind, kind, "{selector}");
        }
        // A kind that exists but names another workload, and a kind that is no workload kind.
        let mut report = report_of_every_kind();
        assert_eq!(
            select(&mut report, "cj/job-x").unwrap_err(),
            "no Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout \"cj/job-x\" in namespace \
             \"demo\" references configmapset \"app\""
        );
        let mut report = report_of_every_kind();
        assert_eq!(
            select(&mut report, "Pod/web").unwrap_err(),
            "unknown workload kind \"pod\": use deployment, statefulset, daemonset, cronjob, job or rollout"
        );
    }

    #[test]
    fn each_analysis_query_shows_its_value_condition_and_verdict() {
        use cmset_api::{AnalysisRunStatus, AnalysisVerdict};
        let runs = [
            AnalysisRunStatus {
                template: "error-rate".into(),
                wave: 0,
                query: "q".into(),
                condition: "result < 0.05".into(),
                last_value: Some("0.01".into()),
                verdict: AnalysisVerdict::Passed,
                measurements: 3,
                ..AnalysisRunStatus::default()
            },
            AnalysisRunStatus {
                template: "latency".into(),
                workload_kind: Some("Deployment".into()),
                workload: Some("web".into()),
                wave: 1,
                condition: "result <= 0.3".into(),
                verdict: AnalysisVerdict::Inconclusive,
                measurements: 1,
                message: Some("no data".into()),
                ..AnalysisRunStatus::default()
            },
        ];
        let lines = analysis_lines(&runs);
        assert_eq!(
            lines[0],
            (
                "wave 0: error-rate Passed: 0.01 (wants result < 0.05), 3 measured, 0 failed".to_string(),
                Some(Role::Good)
            )
        );
        assert_eq!(
            lines[1].0,
            "wave 1: latency of Deployment web Inconclusive: no value yet (wants result <= 0.3), 1 measured, 0 failed: no data"
        );
        assert_eq!(lines[1].1, Some(Role::Attention));

        let group = AnalysisRunStatus {
            template: "restarts".into(),
            workload_kind: Some("Deployment".into()),
            workloads: (0..2_487).map(|n| format!("reader-{n:04}")).collect(),
            wave: 1,
            condition: "result == 0".into(),
            last_value: Some("0".into()),
            verdict: AnalysisVerdict::Running,
            measurements: 1,
            ..AnalysisRunStatus::default()
        };
        assert_eq!(
            analysis_lines(&[group])[0].0,
            "wave 1: restarts of 2487 Deployments (reader-0000, reader-0001, reader-0002, …) Running: 0 \
             (wants result == 0), 1 measured, 0 failed"
        );
    }
}
