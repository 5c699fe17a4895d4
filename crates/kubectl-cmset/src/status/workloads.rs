//! Which revision each workload that references the set runs, and why: the WHY column and the
//! `workloads` of `-o json|yaml`. Opted-in workloads are explained by cmset's one decision
//! ([`cmset_core::rollout::decide::target`]) gated by the rollout the status records
//! ([`cmset_core::rollout::waves::gated_state`]); the set's status entry for a workload supplies the messages
//! (why it waits, why it was rolled back). Workloads without the opt-in label, and sets whose
//! controller has not yet made a revision for the spec, are explained from what only the plugin sees.

use std::collections::BTreeMap;

use cmset_api::{RolloutPhase, WorkloadState, WorkloadStatus, labels};
use cmset_core::rollout::decide;
use cmset_core::rollout::pinning::workload_status;
use cmset_core::rollout::waves::gated_state;
use cmset_core::set::SetRef;
use cmset_core::workloads::health::Wave;
use cmset_core::workloads::observe::{WorkloadKind, WorkloadView};
use k8s_openapi::api::core::v1::PodSpec;
use serde::Serialize;

use super::known::{Known, opted_in, revision_phrase, set_references, wave_of};
use super::rollout::{rollout_status, waves_phrase, window_phrase, without_prefix};
use crate::revisions::{ObjectName, Revision, current_name};
use crate::style::Role;

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
    pub(super) fn role(self) -> Role {
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

    pub(super) fn text(&self) -> String {
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
/// workloads that read the set, its own wave is taken for the lowest (see [`super::status_report_at`]).
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
pub(super) fn uses_waves(set: SetRef<'_>, reports: &[WorkloadReport]) -> bool {
    rollout_status(set).is_some()
        || reports
            .iter()
            .any(|r| r.wave.as_ref().is_some_and(|w| *w != WaveLabel::Number(0)))
}

pub(super) fn explain_with(set: SetRef<'_>, known: &Known, workload: &Workload) -> Option<WorkloadReport> {
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

#[cfg(test)]
mod tests {
    use cmset_api::ConfigMapSet;
    use cmset_core::set::SetRef;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;
    use crate::status::fixtures::*;
    use crate::status::render_text;
    use crate::style::Palette;

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
}
