//! The rollout of a set's current revision, wave by wave: which workloads may move now, when a wave is
//! done, when the rollout failed, and which workloads are moved back.
//!
//! The state machine lives in the set's `status.rollout` and nothing else, so a restart of the operator
//! continues where it stood; each plan is a function of that record, the workloads' health and `now`:
//!
//! - **Progressing**, wave `w`: workloads of waves up to `w` may run the revision, higher waves are
//!   `Waiting`. Wave `w` is done when each of its workloads runs the revision and is healthy; it must
//!   stay so for `stabilizationSeconds` (counted from `waveHealthySince`, cleared when one of them is
//!   unhealthy again), then the next wave opens. After the last wave the rollout is **Complete**.
//! - A workload of wave `w` that reports failure, or is not healthy `progressDeadlineSeconds` after it
//!   was moved (`movedAt`), fails the rollout: **Failed**, in wave `w`. Nothing else moves to the
//!   revision. With `autoRollback`, each failing workload of wave `w` becomes `RolledBack`: the
//!   workload controller moves it to its `previousRevision`.
//! - A new current revision (the content changed) starts a fresh rollout at the lowest wave.
//! - **Paused** (`spec.rollout.paused`, or `kubectl cmset pause`): no workload is moved to the revision
//!   and no wave opens; workloads already moved stay, and a failure among them still fails the rollout.
//!   Resumed, it goes on where it stood.
//! - **AwaitingPromotion** (`spec.rollout.promotion: Manual`): a wave that is done and stable does not
//!   open the next one until the set records a promotion of that wave (`kubectl cmset promote`).
//!   After the last wave nothing is left to promote: the rollout completes.
//! - Paused and AwaitingPromotion stop the rollout's clocks (a person is looking): no deadline,
//!   stabilization window or analysis interval runs out, and each has the time it had left when the
//!   hold ends.
//! - **Waiting** (a change window holds it): no workload is moved to the revision and no wave opens,
//!   but the clocks run. A window holds moves, not judgement: a workload already moved that is not
//!   healthy by its deadline fails the rollout (and is rolled back, with `autoRollback`), and a wave
//!   that becomes healthy and stable, its analysis passed, opens the next as soon as the window lets it.
//!
//! - **Immediate** (`spec.rollout.strategy`): every reader moves at once, with no wave, pause,
//!   budget or rollback. Only a change window that binds the set holds it: the readers that would
//!   move wait where they stand (**Waiting**), and move when the window opens.
//!
//! Workloads pinned by a manual rollback take no part. A set is tracked only when it asks for it
//! (`spec.rollout`), a workload that reads it has a wave, a hold (pause, window) keeps a reader of it
//! from moving, or a rollout of its current revision is recorded (until the revision changes);
//! otherwise every workload moves at once, as before waves existed. So a hold of a set with nothing
//! to move makes no rollout record: no phantom rollout starts, fails or completes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cmset_api::{
    AnalysisRunStatus, AnalysisVerdict, ConfigMapSetStatus, RolloutPhase, RolloutSpec, RolloutStatus,
    WorkloadState, WorkloadStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::SignedDuration;

use crate::analysis::{self, Analysis, WaveStage, WaveSubject, Workload};
use crate::rollout::window_hold::WindowState;
use crate::set::{Promoted, SetRef, rollout_id};
use crate::workloads::health::{Health, Wave};
use crate::workloads::kinds::WorkloadKind;
use crate::workloads::observe::WorkloadView;
use crate::workloads::refs::Referenced;

/// One workload that reads the set, with the status entry the reference rules gave it (`Current`,
/// `Pending` or `Pinned`).
#[derive(Clone, Debug)]
pub struct Member<'a> {
    pub entry: WorkloadStatus,
    /// Its kind, as the index knows it (`entry.kind` names it).
    pub kind: WorkloadKind,
    pub wave: &'a Wave,
    pub health: &'a Health,
    /// It references the set's bare name: it is opting in and has no revision to protect, so it moves
    /// whatever the waves say.
    pub opting_in: bool,
}

impl<'a> Member<'a> {
    /// `view` reads the set named `set_name`, whose revisions are objects of `kind`.
    pub fn new(entry: WorkloadStatus, view: &'a WorkloadView, kind: Referenced, set_name: &str) -> Self {
        let opting_in = view.referenced_names_of(kind).contains(set_name);
        Self {
            entry,
            kind: view.kind,
            wave: &view.wave,
            health: &view.health,
            opting_in,
        }
    }
}

/// What the rollout planner reads besides the members.
#[derive(Clone, Debug)]
pub struct WaveInput<'a> {
    pub spec: Option<&'a RolloutSpec>,
    pub current: &'a str,
    /// The rollout the status records.
    pub previous: Option<&'a RolloutStatus>,
    /// The status entries the status records, by workload UID.
    pub previous_entries: &'a BTreeMap<String, WorkloadStatus>,
    /// Names of the set's revisions that exist, current included.
    pub revisions: &'a BTreeSet<String>,
    pub now: &'a Time,
    /// The rollout is held (see [`crate::set::SetRef::paused`]).
    pub paused: bool,
    /// Each next wave waits for a promotion.
    pub manual_promotion: bool,
    /// The promotion recorded on the set, if any.
    pub promoted: Option<Promoted<'a>>,
    /// Workloads waiting for the cluster-wide rollout budget, by UID, with where each stands.
    pub budget_waiting: &'a BTreeMap<String, String>,
    /// The set's namespace: `{{namespace}}` in its analysis queries.
    pub namespace: &'a str,
    /// The set's metric analysis, when its spec asks for one.
    pub analysis: Option<WaveAnalysis<'a>>,
    /// The set's strategy is `Immediate`: every reader moves at once, held only by the change windows
    /// that bind it (see [`crate::rollout::window_hold`]).
    pub immediate: bool,
    /// What the change windows say of the set now.
    pub windows: &'a WindowState,
}

/// The `WindowOverridden` Event: which WindowOverride let the rollout through, and who created it as
/// cmset's webhook recorded it ("not recorded" when it did not answer).
fn overridden_message(current: &str, grant: &crate::policy::break_glass::OverrideView) -> String {
    format!(
        "The rollout of {current} goes through the change windows: overridden by WindowOverride {} (requested by {})",
        grant.name,
        grant.by()
    )
}

/// What the planner knows of a set's metric analysis (see [`crate::analysis`]).
#[derive(Clone, Copy, Debug)]
pub struct WaveAnalysis<'a> {
    /// The set's analyses, resolved against their templates, or why they cannot run (a template
    /// missing, an argument refused, no Prometheus configured): then the wave holds as for an
    /// inconclusive measurement, and fails at its deadline.
    pub analyses: &'a Result<Vec<Analysis>, String>,
    /// The runs of this rollout as last recorded, or as last planned with the measurements just taken
    /// recorded (the I/O layer measures the runs a plan lists in [`WaveOutcome::analysis_due`], then
    /// plans again). Only what they measured is read: every run is computed afresh from the analyses
    /// and the members (see [`analysis::plan_runs`]).
    pub runs: &'a [AnalysisRunStatus],
}

/// What the rollout planner decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WaveOutcome {
    pub rollout: Option<RolloutStatus>,
    /// The members' entries, states and messages decided.
    pub entries: Vec<WorkloadStatus>,
    /// Look again after this long even if nothing changes: a deadline or a stabilization window ends.
    pub recheck_in: Option<Duration>,
    pub events: Vec<WaveEvent>,
    /// The runs of the wave whose analysis holds it that are due to be measured now, as the planner
    /// computed them (queries rendered from the analyses, the current revision, the wave and its
    /// members): the only queries the I/O layer sends.
    pub analysis_due: Vec<AnalysisRunStatus>,
}

/// Something worth an event on the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaveEvent {
    /// The rollout of a new revision began: its first wave may move.
    Started(String),
    /// The next wave may move.
    WaveStarted(String),
    /// A paused rollout goes on.
    Resumed(String),
    /// A wave's metric analysis failed (the rollout fails with it).
    AnalysisFailed(String),
    /// Held by a person: paused.
    Paused(String),
    /// Held by a change window.
    Waiting(String),
    /// The change windows hold the rollout, and a person let it through (`kubectl cmset promote
    /// --override-window`).
    WindowOverridden(String),
    /// A wave is done; the next waits for a promotion.
    AwaitingPromotion(String),
    Complete(String),
    /// Failed, with the message that names the workload and why.
    Failed(String),
    /// The set's checks run against the revision; nothing moves until they pass (see
    /// [`crate::rollout::check_gate`]).
    Checking(String),
    /// A check failed against the revision (the rollout fails with it).
    CheckFailed(String),
}

/// Why a workload of the wave in progress fails the rollout, if it does.
fn failure(member: &Member<'_>, deadline: i64, now: &Time) -> Option<String> {
    if member.entry.state != WorkloadState::Current {
        return None;
    }
    match member.health {
        Health::Healthy => None,
        Health::Failed(why) => Some(why.clone()),
        Health::Progressing => {
            let moved = member.entry.moved_at.as_ref()?;
            let due = moved.0.checked_add(SignedDuration::from_secs(deadline)).ok()?;
            (now.0 >= due).then(|| {
                format!("was not healthy within progressDeadlineSeconds ({deadline}s) of being moved")
            })
        }
    }
}

/// Whether `member` would move to the current revision if nothing held it: a hold makes it wait. A
/// workload naming the bare set opts in, and a hold never keeps it from its first start.
fn waits_to_move(member: &Member<'_>) -> bool {
    member.entry.state == WorkloadState::Pending && !member.opting_in
}

/// Whether a rollout in `phase` is planned on a stopped clock: a person holds it (paused, or awaiting
/// a promotion) and is looking. A change window holds moves only, never the judgement of what moved.
fn stops_clocks(phase: RolloutPhase) -> bool {
    matches!(phase, RolloutPhase::Paused | RolloutPhase::AwaitingPromotion)
}

/// Plans the rollout of `input.current` for `members`.
pub fn plan_waves(input: &WaveInput<'_>, members: Vec<Member<'_>>) -> WaveOutcome {
    let unfinished = input
        .previous
        .is_some_and(|p| p.revision == input.current && p.phase != RolloutPhase::Complete);
    // A completed rollout's record stays until the revision changes: dropping it would change the
    // notifications' once-per keys, and announce the same rollout again.
    let completed = input
        .previous
        .is_some_and(|p| p.revision == input.current && p.phase == RolloutPhase::Complete);
    // A hold (a pause, a change window) tracks a set only while a reader of it waits to move: the
    // hold of a set with nothing to move makes no rollout, so it starts, fails or completes none.
    let on_hold = input.paused || input.windows.held.is_some();
    let tracked = input.spec.is_some()
        || (on_hold && members.iter().any(waits_to_move))
        || members.iter().any(|m| *m.wave != Wave::Number(0))
        || completed
        || unfinished;
    // Rotated credentials reach every reader at once: no wave, pause or budget; only windows bind.
    if input.immediate {
        return plan_immediate(input, members);
    }
    if !tracked {
        let entries = members
            .into_iter()
            .map(|m| waiting_for_budget(m.entry, input))
            .collect();
        return WaveOutcome {
            entries,
            ..WaveOutcome::default()
        };
    }
    let spec = input.spec.cloned().unwrap_or_default();
    let now = input.now;
    let fresh = input.previous.is_none_or(|p| p.revision != input.current);
    // A rollout held by a person (paused, awaiting promotion) is planned on its own clock, which
    // stands still at the instant the hold began: no deadline, window or interval runs out while a
    // person looks. When the hold ends, its clocks move later by the hold's length (see
    // `resume_clocks`). A change window holds moves, not judgement: its rollout runs on `now`.
    let frozen_at = input
        .previous
        .filter(|p| !fresh && stops_clocks(p.phase))
        .and_then(|p| p.held_since.clone());
    let clock = frozen_at.clone().unwrap_or_else(|| now.clone());
    let clock = &clock;
    let mut members: Vec<Member<'_>> = members
        .into_iter()
        .map(|m| carry_forward(m, input, fresh, clock))
        .collect();

    let takes_part = |m: &Member<'_>| {
        m.wave.number().is_some()
            && !matches!(m.entry.state, WorkloadState::Pinned | WorkloadState::RolledBack)
    };
    let waves: Vec<i32> = members
        .iter()
        .filter(|m| takes_part(m))
        .filter_map(|m| m.wave.number())
        .collect::<BTreeSet<i32>>()
        .into_iter()
        .collect();
    let mut rollout = match input.previous {
        Some(p) if !fresh => p.clone(),
        _ => RolloutStatus {
            revision: input.current.to_string(),
            phase: RolloutPhase::Progressing,
            wave: waves.first().copied().unwrap_or(0),
            waves: Vec::new(),
            wave_healthy_since: None,
            started_at: Some(whole_second_after(now)),
            message: None,
            held_since: None,
            reason: None,
            next_window: None,
            stale_promotion: input
                .promoted
                .filter(|p| p.rollout.is_none() && p.revision == input.current)
                .map(|p| p.value.to_string()),
            analysis: Vec::new(),
        },
    };
    rollout.waves = waves.clone();
    // Held (by a person or a window), the rollout is planned as progressing; it is held again below if
    // it still is.
    let held_before = rollout
        .phase
        .is_under_way()
        .then(|| (rollout.phase, rollout.held_since.take()));
    let was_paused = rollout.phase == RolloutPhase::Paused;
    let was_waiting = rollout.phase == RolloutPhase::Waiting;
    if held_before.is_some() {
        rollout.phase = RolloutPhase::Progressing;
    }
    let mut held = None;
    // The windows hold this rollout unless a person let this very rollout through.
    let grant = input.windows.override_for(&rollout).cloned();
    let overridden = grant.is_some();
    let window_hold = input.windows.held.as_ref().filter(|_| !overridden);

    let mut events = Vec::new();
    if fresh {
        events.push(WaveEvent::Started(format!(
            "Rollout of {} started: wave {} moves ({})",
            input.current,
            rollout.wave,
            wave_list(&waves)
        )));
    }
    let mut recheck: Vec<Duration> = Vec::new();
    let mut analysis_failure: Option<String> = None;
    let mut analysis_due: Vec<AnalysisRunStatus> = Vec::new();
    let mut judged_now = false;
    let deadline = i64::from(spec.progress_deadline_seconds);
    while rollout.phase == RolloutPhase::Progressing {
        let wave = rollout.wave;
        let in_wave: Vec<&Member<'_>> = members
            .iter()
            .filter(|m| takes_part(m) && m.wave.number() == Some(wave))
            .collect();
        let failures: Vec<String> = in_wave
            .iter()
            .filter_map(|m| {
                failure(m, deadline, clock).map(|why| format!("{} {} {why}", m.entry.kind, m.entry.name))
            })
            .collect();
        if !failures.is_empty() {
            let message = format!(
                "the rollout of {} failed in wave {wave}: {}",
                input.current,
                crate::status::message::join_capped(&failures, 512)
            );
            rollout.phase = RolloutPhase::Failed;
            rollout.wave_healthy_since = None;
            rollout.message = Some(message.clone());
            events.push(WaveEvent::Failed(message));
            break;
        }
        let overdue_in = in_wave
            .iter()
            .filter(|m| m.entry.state == WorkloadState::Current && !m.health.is_healthy())
            .filter_map(|m| m.entry.moved_at.as_ref())
            .filter_map(|moved| time_left(moved, deadline, clock));
        recheck.extend(overdue_in);
        let done = in_wave
            .iter()
            .all(|m| m.entry.state == WorkloadState::Current && m.health.is_healthy());
        if !done {
            rollout.wave_healthy_since = None;
            break;
        }
        if !in_wave.is_empty() {
            let since = rollout
                .wave_healthy_since
                .get_or_insert_with(|| whole_second_after(clock))
                .clone();
            let window_left = time_left(&since, i64::from(spec.stabilization_seconds), clock);
            if let Some(analysis) = &input.analysis {
                let stage = WaveStage {
                    window_over: window_left.is_none(),
                    deadline_passed: wave_deadline_passed(&in_wave, &rollout, deadline, clock),
                };
                let previous = input.previous_runs(fresh);
                let judging = Judging {
                    stage,
                    clock,
                    healthy_since: &since,
                };
                let judged = judge_wave(analysis, input, wave, &in_wave, &members, judging, previous);
                rollout.analysis = judged.runs;
                judged_now = true;
                // A run due now is measured before the wave is judged on it: the I/O layer measures
                // `analysis_due` and plans again.
                let measure_first = !judged.due_now.is_empty();
                match judged.verdict {
                    AnalysisVerdict::Passed if measure_first => {
                        analysis_due = judged.due_now;
                        recheck.extend(judged.due_in);
                        break;
                    }
                    AnalysisVerdict::Passed => {}
                    AnalysisVerdict::Failed => {
                        let message = format!(
                            "the rollout of {} failed in wave {wave}: {}",
                            input.current, judged.why
                        );
                        rollout.phase = RolloutPhase::Failed;
                        rollout.wave_healthy_since = None;
                        rollout.message = Some(message.clone());
                        events.push(WaveEvent::AnalysisFailed(format!(
                            "Analysis of wave {wave} of {} failed: {}",
                            input.current, judged.why
                        )));
                        events.push(WaveEvent::Failed(message));
                        analysis_failure = Some(format!("failed its wave's analysis: {}", judged.why));
                        break;
                    }
                    AnalysisVerdict::Running | AnalysisVerdict::Inconclusive => {
                        analysis_due = judged.due_now;
                        recheck.extend(judged.due_in);
                        recheck.extend(window_left);
                        break;
                    }
                }
            }
            if let Some(left) = window_left {
                recheck.push(left);
                break;
            }
        }
        let next = waves.iter().find(|&&w| w > wave).copied();
        if next.is_some() && input.paused {
            held = Some(RolloutPhase::Paused);
            break;
        }
        let promoted = input.promoted.is_some_and(|p| promotes(&p, &rollout, wave));
        if next.is_some() && input.manual_promotion && !promoted {
            held = Some(RolloutPhase::AwaitingPromotion);
            break;
        }
        if next.is_some() && window_hold.is_some() {
            held = Some(RolloutPhase::Waiting);
            break;
        }
        rollout.wave_healthy_since = None;
        match next {
            Some(next) => {
                rollout.wave = next;
                let how = if input.manual_promotion {
                    "promoted"
                } else {
                    "healthy"
                };
                events.push(WaveEvent::WaveStarted(format!(
                    "Wave {wave} of {} is {how}; wave {next} moves now",
                    input.current
                )));
            }
            None => {
                rollout.phase = RolloutPhase::Complete;
                events.push(WaveEvent::Complete(format!(
                    "Rollout of {} is complete in every wave ({})",
                    input.current,
                    wave_list(&waves)
                )));
            }
        }
    }

    // Paused, or outside the windows, the rollout is held wherever it stands (the gate keeps every
    // workload not moved yet). A wave that awaits its promotion awaits it inside a window too: a
    // person is asked, and its clocks stop.
    if rollout.phase == RolloutPhase::Progressing && input.paused {
        held = Some(RolloutPhase::Paused);
    } else if rollout.phase == RolloutPhase::Progressing && window_hold.is_some() && held.is_none() {
        held = Some(RolloutPhase::Waiting);
    }
    if let Some(phase) = held.filter(|_| rollout.phase == RolloutPhase::Progressing) {
        rollout.phase = phase;
        rollout.held_since = match held_before {
            Some((before, since)) if before == phase => since,
            _ => {
                events.push(hold_event(phase, &rollout, input.current, window_hold));
                Some(whole_second_after(now))
            }
        };
    }
    // Held by a window: why, and until when, for people and tools.
    match window_hold.filter(|_| rollout.phase == RolloutPhase::Waiting) {
        Some(hold) => {
            rollout.reason = Some(hold.reason.clone());
            rollout.next_window = hold.opens_at.map(Time);
            rollout.message = Some(hold.by.clone());
        }
        None => {
            rollout.reason = None;
            rollout.next_window = None;
            if was_waiting && rollout.phase != RolloutPhase::Failed {
                rollout.message = None;
            }
        }
    }
    // Released by the windows (or let through them): it goes on. A rollout that failed, or that a
    // person holds now, does not resume.
    let released =
        window_hold.is_none() && !matches!(rollout.phase, RolloutPhase::Failed | RolloutPhase::Paused);
    if was_waiting && released {
        let why = if let Some(grant) = grant.as_ref().filter(|_| input.windows.held.is_some()) {
            events.push(WaveEvent::WindowOverridden(overridden_message(
                input.current,
                grant,
            )));
            "overridden"
        } else {
            "the change windows allow moves again"
        };
        events.push(WaveEvent::Resumed(format!(
            "The rollout of {} resumes in wave {}: {why}",
            input.current, rollout.wave
        )));
    }

    if was_paused && !matches!(rollout.phase, RolloutPhase::Paused | RolloutPhase::Waiting) {
        events.push(WaveEvent::Resumed(format!(
            "The rollout of {} is resumed in wave {}",
            input.current, rollout.wave
        )));
    }

    // A failed rollout moves its failing workloads back, if asked to; the others stay as they are.
    if rollout.phase == RolloutPhase::Failed && spec.auto_rollback {
        for m in members.iter_mut() {
            let in_failed_wave = takes_part(m) && m.wave.number() == Some(rollout.wave);
            let why = in_failed_wave
                .then(|| {
                    failure(m, deadline, clock).or_else(|| {
                        // A failed analysis fails every workload of the wave that runs the revision.
                        analysis_failure
                            .clone()
                            .filter(|_| m.entry.state == WorkloadState::Current)
                    })
                })
                .flatten();
            if let Some(why) = why {
                roll_back(m, &why, input);
            }
        }
    }
    // Runs no analysis of this pass computed are kept only when they are runs cmset computes: the
    // status, writable by the set's namespace, shows nothing else.
    if !judged_now {
        // No analysis asked for: no run is one cmset computes. Analyses that cannot run: nothing to
        // compare with, the runs stay (none is ever sent).
        let analyses: Option<&[Analysis]> = match input.analysis.map(|a| a.analyses) {
            Some(Err(_)) => None,
            Some(Ok(analyses)) => Some(analyses),
            None => Some(&[]),
        };
        if let Some(analyses) = analyses {
            let subject = WaveSubject {
                namespace: input.namespace,
                revision: input.current,
                wave: rollout.wave,
            };
            rollout.analysis = analysis::known_runs(
                analyses,
                &subject,
                &workloads_by_wave(&members),
                &rollout.analysis,
            );
        }
    }
    // Earlier waves keep only their compact record (see [`analysis::kept`]), also in the pass that
    // judged a wave and moved on.
    rollout.analysis.retain(|r| analysis::kept(r, rollout.wave));
    rollout.analysis = analysis::compact(std::mem::take(&mut rollout.analysis));
    // A person's hold ended (or another hold began): the clocks go on with the time they had left.
    let still_held = frozen_at.is_some() && rollout.held_since == frozen_at;
    if let Some(since) = frozen_at.as_ref().filter(|_| !still_held) {
        resume_clocks(&mut rollout, &mut members, since, now);
    }
    let clock = if still_held { clock } else { now };
    let entries = members
        .into_iter()
        .map(|m| decide_entry(m, &rollout, deadline, input, clock))
        .collect();
    // Held by a person, nothing runs out: the next look comes with the change that ends the hold.
    // Held by a window, the clocks run: it looks again at the first deadline, end of stabilization or
    // due measurement, or when the windows may let it go. Under way, it also looks again when the
    // windows may begin to hold it.
    let held_now = stops_clocks(rollout.phase);
    let window_recheck = match rollout.phase {
        RolloutPhase::Waiting => rollout.next_window.as_ref().map(|t| t.0),
        RolloutPhase::Progressing => input.windows.changes_at,
        _ => None,
    }
    .map(|at| time_until(at, now));
    let recheck = recheck
        .into_iter()
        .min()
        .filter(|_| !held_now)
        .into_iter()
        .chain(window_recheck)
        .min();
    WaveOutcome {
        rollout: Some(rollout),
        entries,
        recheck_in: recheck,
        events,
        // Held by a person, nothing is measured either.
        analysis_due: if held_now { Vec::new() } else { analysis_due },
    }
}

/// Whether `promotion` lets the wave after `wave` open in `rollout`: it names the rollout's revision
/// and that wave, and either this very rollout or (naming none) it was not already there when the
/// rollout began.
fn promotes(promotion: &Promoted<'_>, rollout: &RolloutStatus, wave: i32) -> bool {
    if promotion.revision != rollout.revision || promotion.wave != wave {
        return false;
    }
    match promotion.rollout {
        Some(id) => rollout.started_at.as_ref().is_some_and(|t| rollout_id(t) == id),
        None => rollout.stale_promotion.as_deref() != Some(promotion.value),
    }
}

/// A person's hold (paused, awaiting promotion) that began at `since` is over at `now`: every clock of the rollout that was running when it
/// began, or was started while it lasted (at `since`), moves later by its length in whole seconds.
/// Each deadline, stabilization window and analysis interval then has the time it had left.
fn resume_clocks(rollout: &mut RolloutStatus, members: &mut [Member<'_>], since: &Time, now: &Time) {
    let held = whole_second_after(now).0.duration_since(since.0);
    if !held.is_positive() {
        return;
    }
    let shift = |t: &mut Option<Time>| {
        if let Some(time) = t.as_mut().filter(|time| time.0 <= since.0)
            && let Ok(later) = time.0.checked_add(held)
        {
            time.0 = later;
        }
    };
    shift(&mut rollout.wave_healthy_since);
    for run in &mut rollout.analysis {
        shift(&mut run.last_measured_at);
        shift(&mut run.streak_since);
    }
    for m in members {
        shift(&mut m.entry.moved_at);
    }
}

fn hold_event(
    phase: RolloutPhase,
    rollout: &RolloutStatus,
    current: &str,
    window: Option<&crate::rollout::window_hold::WindowHold>,
) -> WaveEvent {
    let wave = rollout.wave;
    match phase {
        RolloutPhase::Waiting => {
            let by = window.map_or("a change window", |w| w.by.as_str());
            let opens = match window.and_then(|w| w.opens_at) {
                Some(at) => format!("moves resume at {at}"),
                None => "no window opens within the years cmset looks ahead".to_string(),
            };
            WaveEvent::Waiting(format!(
                "The rollout of {current} waits in wave {wave}, held by {by}; {opens}"
            ))
        }
        RolloutPhase::AwaitingPromotion => WaveEvent::AwaitingPromotion(format!(
            "Wave {wave} of {current} is done; the next wave waits for `kubectl cmset promote`"
        )),
        _ => WaveEvent::Paused(format!(
            "The rollout of {current} is paused in wave {wave}: nothing more moves until it is resumed"
        )),
    }
}

/// How long from `now` until `at`, at least a second (a recheck due now comes a moment later).
fn time_until(at: k8s_openapi::jiff::Timestamp, now: &Time) -> Duration {
    let left = at.duration_since(now.0);
    Duration::try_from(left)
        .unwrap_or_default()
        .max(Duration::from_secs(1))
}

fn wave_list(waves: &[i32]) -> String {
    let list: Vec<String> = waves.iter().map(i32::to_string).collect();
    format!("waves {}", list.join(", "))
}

/// `now`, rounded up to a whole second. The API keeps timestamps to the second; rounding down would
/// end a window or a deadline up to a second early.
impl WaveInput<'_> {
    /// The analysis runs this rollout has so far: none for a rollout that starts.
    fn previous_runs(&self, fresh: bool) -> &[AnalysisRunStatus] {
        match &self.analysis {
            Some(analysis) if !fresh => analysis.runs,
            _ => &[],
        }
    }
}

/// A wave's analysis, judged.
struct JudgedWave {
    runs: Vec<AnalysisRunStatus>,
    verdict: AnalysisVerdict,
    /// Why it failed, or what it waits for.
    why: String,
    /// When a run of the wave is next due to be measured.
    due_in: Option<Duration>,
    /// The runs of the wave due to be measured now.
    due_now: Vec<AnalysisRunStatus>,
}

/// Where the wave being judged stands: its stage, the rollout's clock (which a person's hold stops),
/// and since when all its workloads are healthy (only measurements from then on can pass it).
struct Judging<'a> {
    stage: WaveStage,
    clock: &'a Time,
    healthy_since: &'a Time,
}

/// The runs of wave `wave` planned (carrying on `previous`), each settled at the stage, and the wave's
/// verdict. Analyses that cannot run make one run that is inconclusive, failing at the deadline.
fn judge_wave(
    analysis: &WaveAnalysis<'_>,
    input: &WaveInput<'_>,
    wave: i32,
    in_wave: &[&Member<'_>],
    members: &[Member<'_>],
    Judging {
        stage,
        clock,
        healthy_since,
    }: Judging<'_>,
    previous: &[AnalysisRunStatus],
) -> JudgedWave {
    let subject = WaveSubject {
        namespace: input.namespace,
        revision: input.current,
        wave,
    };
    let analyses = match analysis.analyses {
        Ok(analyses) => analyses,
        Err(why) => {
            let verdict = if stage.deadline_passed {
                AnalysisVerdict::Failed
            } else {
                AnalysisVerdict::Inconclusive
            };
            let why = format!("the analysis cannot run: {why}");
            let mut runs: Vec<AnalysisRunStatus> =
                previous.iter().filter(|r| r.wave != wave).cloned().collect();
            runs.push(AnalysisRunStatus {
                template: input
                    .spec
                    .map(|s| {
                        s.analysis
                            .iter()
                            .map(|a| a.template.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default(),
                wave,
                verdict,
                message: Some(why.clone()),
                ..AnalysisRunStatus::default()
            });
            return JudgedWave {
                runs,
                verdict,
                why,
                // Looked at again when the templates or the operator's settings change; and anyway
                // at the deadline.
                due_in: Some(Duration::from_secs(30)),
                due_now: Vec::new(),
            };
        }
    };
    // The workloads each wave has, from the members (the index), never from the status: this wave's
    // that take part, and for the runs recorded of other waves, every member of theirs.
    let mut workloads = workloads_by_wave(members);
    workloads.insert(wave, in_wave.iter().map(|m| workload(m)).collect());
    let mut runs = analysis::plan_runs(analyses, &subject, &workloads, previous);
    let mut due_in: Option<Duration> = None;
    let mut due_now = Vec::new();
    for run in runs.iter_mut().filter(|r| r.wave == wave) {
        let Some(a) = analyses.iter().find(|a| a.template == run.template) else {
            continue;
        };
        analysis::restart_streak(run, healthy_since);
        analysis::settle(run, a, stage);
        if let Some(due) = analysis::due_in(run, a, clock, Some(healthy_since)) {
            due_in = Some(due_in.map_or(due, |d| d.min(due)));
            if due.is_zero() {
                due_now.push(run.clone());
            }
        }
    }
    let verdict = analysis::wave_verdict(&runs, wave);
    let why = crate::status::message::join_capped(&analysis::clauses(&runs, wave, verdict), 512);
    JudgedWave {
        runs,
        verdict,
        why,
        due_in,
        due_now,
    }
}

fn workload<'m>(m: &'m Member<'_>) -> Workload<'m> {
    Workload {
        kind: m.kind,
        name: &m.entry.name,
    }
}

/// The members of each wave, for the analysis runs: the workloads cmset observes.
fn workloads_by_wave<'m>(members: &'m [Member<'_>]) -> BTreeMap<i32, Vec<Workload<'m>>> {
    let mut workloads: BTreeMap<i32, Vec<Workload<'m>>> = BTreeMap::new();
    for m in members {
        if let Some(w) = m.wave.number() {
            workloads.entry(w).or_default().push(workload(m));
        }
    }
    workloads
}

/// Whether the progress deadline of wave members has passed: counted from the latest move into the
/// wave (or the rollout's start), as a workload's own deadline is.
fn wave_deadline_passed(in_wave: &[&Member<'_>], rollout: &RolloutStatus, deadline: i64, now: &Time) -> bool {
    let latest = in_wave
        .iter()
        .filter_map(|m| m.entry.moved_at.as_ref())
        .max_by_key(|t| t.0)
        .or(rollout.started_at.as_ref());
    latest.is_some_and(|since| time_left(since, deadline, now).is_none())
}

pub(crate) fn whole_second_after(now: &Time) -> Time {
    let second = now.0.as_second() + i64::from(now.0.subsec_nanosecond() > 0);
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap_or(now.0))
}

/// Time left from `now` until `seconds` after `since`, if any.
fn time_left(since: &Time, seconds: i64, now: &Time) -> Option<Duration> {
    let due = since.0.checked_add(SignedDuration::from_secs(seconds)).ok()?;
    let left = due.duration_since(now.0);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or_default())
}

/// The member's entry with what the status recorded of this rollout: when it moved, what it ran
/// before, and a rollback already decided.
fn carry_forward<'a>(mut m: Member<'a>, input: &WaveInput<'_>, fresh: bool, clock: &Time) -> Member<'a> {
    let previous = input
        .previous_entries
        .get(&m.entry.uid)
        .filter(|p| p.kind == m.entry.kind);
    let this_rollout = previous.filter(|_| !fresh);
    let rolled_back = this_rollout.filter(|p| p.state == WorkloadState::RolledBack);
    if let Some(p) = rolled_back {
        // Decided already: it stays rolled back (the workload controller may not have moved it yet).
        m.entry.state = WorkloadState::RolledBack;
        m.entry.previous_revision = p.previous_revision.clone();
        m.entry.moved_at = p.moved_at.clone();
        m.entry.message = p.message.clone();
    } else if m.entry.state == WorkloadState::Current {
        m.entry.moved_at = this_rollout
            .and_then(|p| p.moved_at.clone())
            .or_else(|| Some(whole_second_after(clock)));
        m.entry.previous_revision = this_rollout
            .and_then(|p| p.previous_revision.clone())
            .or_else(|| {
                previous
                    .map(|p| p.revision.clone())
                    .filter(|r| r != input.current && input.revisions.contains(r))
            });
    }
    m
}

/// Marks a failing member to be moved back to the revision it ran before; without one it stays.
fn roll_back(m: &mut Member<'_>, why: &str, input: &WaveInput<'_>) {
    match m.entry.previous_revision.clone() {
        Some(to) if input.revisions.contains(&to) => {
            m.entry.state = WorkloadState::RolledBack;
            m.entry.message = Some(format!("rolled back to {to}: it {why}"));
        }
        _ => {
            m.entry.message = Some(format!(
                "failed: it {why}; not rolled back: it ran no earlier revision of the set that still exists"
            ));
        }
    }
}

/// The member's final state and message under the rollout as decided.
fn decide_entry(
    mut m: Member<'_>,
    rollout: &RolloutStatus,
    deadline: i64,
    input: &WaveInput<'_>,
    clock: &Time,
) -> WorkloadStatus {
    let wave = m.wave.number();
    m.entry.wave = wave.unwrap_or(0);
    let failed = failure(&m, deadline, clock);
    let entry = &mut m.entry;
    match entry.state {
        WorkloadState::Pinned | WorkloadState::RolledBack => {}
        WorkloadState::Current => {
            let in_progress = rollout.phase != RolloutPhase::Complete && wave == Some(rollout.wave);
            if entry.message.is_none() && in_progress {
                entry.message = Some(match (failed, m.health) {
                    (Some(why), _) => format!("failed: it {why}"),
                    (None, Health::Healthy) => "healthy".to_string(),
                    (None, _) => "rolling out".to_string(),
                });
            }
        }
        WorkloadState::Pending | WorkloadState::Waiting => {
            let held = match (wave, rollout.phase) {
                _ if m.opting_in => None,
                (None, _) => m.wave.problem(),
                (Some(_), RolloutPhase::Complete) => None,
                (Some(_), RolloutPhase::Failed) => Some(format!(
                    "held: the rollout of {} failed in wave {}",
                    input.current, rollout.wave
                )),
                (Some(w), RolloutPhase::Progressing) if w > rollout.wave => {
                    Some(format!("waiting for wave {} to complete", rollout.wave))
                }
                (Some(_), RolloutPhase::Progressing) => None,
                (Some(_), RolloutPhase::Paused) => Some("held: the rollout is paused".to_string()),
                (Some(_), RolloutPhase::Checking) => {
                    Some(format!("waiting for the checks of {} to pass", input.current))
                }
                (Some(w), RolloutPhase::AwaitingPromotion) if w > rollout.wave => Some(format!(
                    "waiting for wave {} to be promoted (kubectl cmset promote)",
                    rollout.wave
                )),
                (Some(_), RolloutPhase::AwaitingPromotion) => None,
                (Some(_), RolloutPhase::Waiting) => Some(format!(
                    "held by a change window: {}",
                    rollout.message.as_deref().unwrap_or("outside the windows")
                )),
            };
            match held {
                Some(message) => {
                    entry.state = WorkloadState::Waiting;
                    entry.message = Some(message);
                }
                None => entry.state = WorkloadState::Pending,
            }
        }
    }
    waiting_for_budget(m.entry, input)
}

/// Plans an `Immediate` set: every reader moves to the current revision at once, with no wave, pause,
/// budget or rollback, and nothing to track. Only the change windows bind it (the cluster's, unless
/// they exempt the strategy, and its own): then the readers that would move wait where they stand,
/// and a rollout record says why and until when (and gives an override a rollout to name). A record
/// of the current revision, once made, goes on to `Complete` when no reader waits any more.
fn plan_immediate(input: &WaveInput<'_>, members: Vec<Member<'_>>) -> WaveOutcome {
    let mut entries: Vec<WorkloadStatus> = members.into_iter().map(|m| m.entry).collect();
    let previous = input.previous.filter(|p| p.revision == input.current);
    let was_waiting = previous.is_some_and(|p| p.phase == RolloutPhase::Waiting);
    let would_move = entries
        .iter()
        .any(|e| matches!(e.state, WorkloadState::Pending | WorkloadState::Waiting));
    let hold = input.windows.held.as_ref().filter(|_| would_move);
    let Some(mut rollout) = previous.cloned().or_else(|| {
        hold.map(|_| RolloutStatus {
            revision: input.current.to_string(),
            phase: RolloutPhase::Progressing,
            started_at: Some(whole_second_after(input.now)),
            ..RolloutStatus::default()
        })
    }) else {
        return WaveOutcome {
            entries,
            ..WaveOutcome::default()
        };
    };
    let grant = input.windows.override_for(&rollout).cloned();
    let overridden = grant.is_some();
    let mut events = Vec::new();
    match hold.filter(|_| !overridden) {
        Some(hold) => {
            rollout.reason = Some(hold.reason.clone());
            rollout.next_window = hold.opens_at.map(Time);
            rollout.message = Some(hold.by.clone());
            if !was_waiting {
                rollout.phase = RolloutPhase::Waiting;
                rollout.held_since = Some(whole_second_after(input.now));
                events.push(hold_event(
                    RolloutPhase::Waiting,
                    &rollout,
                    input.current,
                    Some(hold),
                ));
            }
            let message = format!("held by a change window: {}", hold.by);
            for entry in entries.iter_mut().filter(|e| e.state == WorkloadState::Pending) {
                entry.state = WorkloadState::Waiting;
                entry.message = Some(message.clone());
            }
        }
        None => {
            rollout.phase = if would_move {
                RolloutPhase::Progressing
            } else {
                RolloutPhase::Complete
            };
            rollout.held_since = None;
            rollout.reason = None;
            rollout.next_window = None;
            rollout.message = None;
            if was_waiting {
                let why = if let Some(grant) = &grant {
                    events.push(WaveEvent::WindowOverridden(overridden_message(
                        input.current,
                        grant,
                    )));
                    "overridden"
                } else {
                    "the change windows allow moves again"
                };
                events.push(WaveEvent::Resumed(format!(
                    "The rollout of {} resumes: {why}",
                    input.current
                )));
            }
            if rollout.phase == RolloutPhase::Complete
                && previous.is_none_or(|p| p.phase != RolloutPhase::Complete)
            {
                events.push(WaveEvent::Complete(format!(
                    "Rollout of {} reached every reader",
                    input.current
                )));
            }
        }
    }
    let recheck_in = match rollout.phase {
        RolloutPhase::Waiting => rollout.next_window.as_ref().map(|t| t.0),
        _ => input.windows.changes_at,
    }
    .map(|at| time_until(at, input.now));
    WaveOutcome {
        rollout: Some(rollout),
        entries,
        recheck_in,
        events,
        analysis_due: Vec::new(),
    }
}

/// A workload that would move now but waits for the cluster-wide rollout budget is `Waiting`, saying
/// where it stands.
fn waiting_for_budget(mut entry: WorkloadStatus, input: &WaveInput<'_>) -> WorkloadStatus {
    if entry.state == WorkloadState::Pending
        && let Some(waiting) = input.budget_waiting.get(&entry.uid)
    {
        entry.state = WorkloadState::Waiting;
        entry.message = Some(waiting.clone());
    }
    entry
}

/// What the workload controller may do with a workload's references to one set, by what the set's
/// status records of the rollout of its current revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Move to the current revision.
    Open,
    /// Stay: its wave is not open, or the rollout failed. A reference to the bare set name goes to
    /// `keep` (the revision the workload ran, when known) rather than to the held-back revision.
    Held { keep: Option<String> },
    /// Move back from the current revision to `to`: its rollout failed and cmset rolls it back.
    RollBack { to: String },
}

/// The gate for `workload` on the references to `set`, whose current revision is `current`.
/// `lowest_wave` is the lowest wave among the workloads that read the set: before the status records a
/// rollout of `current`, only that wave moves (with no waves at all, that is every workload, at once).
/// `window_held`: the change windows hold the set's moves now (see [`crate::rollout::window_hold`]); like a
/// pause, it keeps every workload where it stands, and never holds a rollback.
pub fn gate(
    set: SetRef<'_>,
    current: &str,
    workload: &WorkloadView,
    lowest_wave: i32,
    window_held: bool,
) -> Gate {
    let status = set.status();
    let entry = status.and_then(|s| s.workloads.iter().find(|w| w.uid == workload.uid));
    let rollout = status
        .and_then(|s| s.rollout.as_ref())
        .filter(|r| r.revision == current);
    // A held workload keeps what it ran; one that runs nothing of the set yet (it just opted in) gets
    // the newest revision that did not fail, never the one still on trial or the one that failed.
    let keep = || {
        entry
            .filter(|e| e.state != WorkloadState::Current)
            .map(|e| e.revision.clone())
            .filter(|r| r != set.name() && r != current)
            .or_else(|| status.and_then(|s| last_good(s, current)))
    };
    // Rotated credentials reach every reader at once and nothing rolls back; only a change window
    // that binds the set keeps each reader where it stands.
    if set.immediate() {
        return if window_held {
            Gate::Held { keep: keep() }
        } else {
            Gate::Open
        };
    }
    let wave = workload.wave.number();
    // Paused or outside the windows, nothing more moves to the revision (what moved already stays: a
    // hold keeps it).
    let paused = set.paused() || window_held;
    let Some(rollout) = rollout else {
        return match wave {
            Some(w) if w <= lowest_wave && !paused => Gate::Open,
            _ => Gate::Held { keep: keep() },
        };
    };
    if let Some(to) = entry
        .filter(|e| e.state == WorkloadState::RolledBack)
        .and_then(|e| e.previous_revision.clone())
    {
        return Gate::RollBack { to };
    }
    match (rollout.phase, wave) {
        (RolloutPhase::Complete, Some(_)) => Gate::Open,
        (phase, Some(w)) if phase.is_under_way() && w <= rollout.wave && !paused => Gate::Open,
        _ => Gate::Held { keep: keep() },
    }
}

/// The state a workload has under `gate`, when the reference rules alone give it `state` (`Current`,
/// `Pending` or `Pinned`, see [`crate::rollout::pinning::workload_status`]): the state [`plan_waves`] gave it
/// when it wrote the rollout that the gate reads back. Marked for rollback, it is `RolledBack` (moved
/// back already or not yet); held back, a workload that would move is `Waiting`, unless it names the
/// bare set (`opting_in`: it moves whatever the waves say).
pub fn gated_state(state: WorkloadState, gate: &Gate, opting_in: bool) -> WorkloadState {
    match gate {
        Gate::RollBack { .. } => WorkloadState::RolledBack,
        Gate::Held { .. } if state == WorkloadState::Pending && !opting_in => WorkloadState::Waiting,
        _ => state,
    }
}

/// The newest revision in the history other than `current` that no rollout failed with.
fn last_good(status: &ConfigMapSetStatus, current: &str) -> Option<String> {
    status
        .history
        .iter()
        .filter(|h| h.name != current && !h.failed)
        .max_by_key(|h| h.revision)
        .map(|h| h.name.clone())
}

/// What a status write tells of the rollout, for the metrics: counted once, when the status that
/// records it is written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transitions {
    pub started: bool,
    pub completed: bool,
    pub failed: bool,
    /// The first workload of the rollout was rolled back.
    pub rolled_back: bool,
}

/// The rollout events between status `old` and status `new`.
pub fn transitions(old: &ConfigMapSetStatus, new: &ConfigMapSetStatus) -> Transitions {
    let Some(rollout) = new.rollout.as_ref() else {
        return Transitions::default();
    };
    let same = old.rollout.as_ref().filter(|o| o.revision == rollout.revision);
    let was = |phase| same.is_some_and(|o| o.phase == phase);
    let any_rolled_back =
        |s: &ConfigMapSetStatus| s.workloads.iter().any(|w| w.state == WorkloadState::RolledBack);
    Transitions {
        started: same.is_none(),
        completed: rollout.phase == RolloutPhase::Complete && !was(RolloutPhase::Complete),
        failed: rollout.phase == RolloutPhase::Failed && !was(RolloutPhase::Failed),
        rolled_back: any_rolled_back(new) && !(same.is_some() && any_rolled_back(old)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn timestamps_are_rounded_up_to_the_second_the_api_keeps() {
        let exact = Time(Timestamp::from_second(100).unwrap());
        assert_eq!(whole_second_after(&exact), exact);
        let later = Time(Timestamp::new(100, 1).unwrap());
        assert_eq!(
            whole_second_after(&later),
            Time(Timestamp::from_second(101).unwrap())
        );
    }
}
