//! A rollout held by a person has stopped clocks (issue 25, "pause stops the clocks"); one held by a
//! change window does not (issue 36, "a window holds moves, not judgement"). Over random rollouts:
//!
//! - paused (or awaiting promotion) for any length of time, a rollout never fails because time passed:
//!   only a failure its workloads report fails it;
//! - when the hold ends, each workload's deadline has exactly the time it had left when the hold began
//!   (in whole seconds, as the API keeps them), however long the hold lasted;
//! - whatever the change windows do, a workload moved at `t0` and never healthy fails the rollout (and
//!   is rolled back) at `t0 + progressDeadlineSeconds`, and the planner looks again by then;
//! - a set without `spec.rollout` whose readers all run its current revision gets no rollout record,
//!   no event and no timer from a window (or a pause), whatever its readers' health.
//!
//! The planner is driven directly ([`plan_waves`]) with what the status recorded, as after a restart.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{RolloutPhase, RolloutSpec, RolloutStatus, WorkloadState, WorkloadStatus};
use cmset_core::rollout::waves::{Member, WaveInput, plan_waves};
use cmset_core::rollout::window_hold::{WindowHold, WindowState};
use cmset_core::workloads::health::{Health, Wave};
use cmset_core::workloads::kinds::WorkloadKind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;

const START: i64 = 1_800_000_000;
const CURRENT: &str = "app-new";
const PREVIOUS: &str = "app-old";

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(START + second).unwrap())
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second() - START
}

/// One workload of wave 0, moved to the current revision at `moved`.
fn entry(name: &str, moved: i64) -> WorkloadStatus {
    WorkloadStatus {
        kind: "Deployment".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        revision: CURRENT.into(),
        state: WorkloadState::Current,
        moved_at: Some(at(moved)),
        previous_revision: Some(PREVIOUS.into()),
        ..WorkloadStatus::default()
    }
}

/// A rollout of two waves in wave 0, under way and not held.
fn progressing() -> RolloutStatus {
    RolloutStatus {
        revision: CURRENT.into(),
        phase: RolloutPhase::Progressing,
        wave: 0,
        waves: vec![0, 1],
        started_at: Some(at(0)),
        ..RolloutStatus::default()
    }
}

/// A rollout of two waves in wave 0, held in `phase` since `since`.
fn held(phase: RolloutPhase, since: i64) -> RolloutStatus {
    RolloutStatus {
        revision: CURRENT.into(),
        phase,
        wave: 0,
        waves: vec![0, 1],
        started_at: Some(at(0)),
        held_since: Some(at(since)),
        ..RolloutStatus::default()
    }
}

struct Case {
    spec: RolloutSpec,
    previous: RolloutStatus,
    entries: BTreeMap<String, WorkloadStatus>,
    revisions: BTreeSet<String>,
    /// Each workload's health and wave, by UID.
    observed: BTreeMap<String, (Health, Wave)>,
}

impl Case {
    fn new(deadline: i32, previous: RolloutStatus, moved: &[i64], healths: Vec<Health>) -> Self {
        let mut entries: BTreeMap<String, WorkloadStatus> = moved
            .iter()
            .enumerate()
            .map(|(i, m)| entry(&format!("w{i}"), *m))
            .map(|e| (e.uid.clone(), e))
            .collect();
        // A workload of wave 1, waiting for wave 0.
        let waiting = WorkloadStatus {
            kind: "Deployment".into(),
            name: "later".into(),
            uid: "uid-later".into(),
            revision: PREVIOUS.into(),
            state: WorkloadState::Waiting,
            wave: 1,
            ..WorkloadStatus::default()
        };
        let mut observed: BTreeMap<String, (Health, Wave)> = entries
            .keys()
            .cloned()
            .zip(healths)
            .map(|(uid, health)| (uid, (health, Wave::Number(0))))
            .collect();
        observed.insert(waiting.uid.clone(), (Health::Healthy, Wave::Number(1)));
        entries.insert(waiting.uid.clone(), waiting);
        Self {
            spec: RolloutSpec {
                progress_deadline_seconds: deadline,
                auto_rollback: true,
                ..RolloutSpec::default()
            },
            previous,
            entries,
            revisions: BTreeSet::from([CURRENT.to_string(), PREVIOUS.to_string()]),
            observed,
        }
    }

    /// The planner at `now`, paused or not, with what the status records.
    fn plan(&self, now: i64, paused: bool) -> cmset_core::rollout::waves::WaveOutcome {
        self.plan_windowed(now, paused, &WindowState::default())
    }

    /// The planner at `now`, held by the change windows until `opens` (seconds from START).
    fn plan_outside_windows(&self, now: i64, opens: i64) -> cmset_core::rollout::waves::WaveOutcome {
        let windows = WindowState {
            held: Some(WindowHold {
                reason: "freeze".into(),
                by: "Deny window spec.rollout.windows[0] (freeze)".into(),
                opens_at: Some(at(opens).0),
            }),
            changes_at: Some(at(opens).0),
            invalid: false,
            break_glass: Default::default(),
            cluster_unknown: None,
        };
        self.plan_windowed(now, false, &windows)
    }

    fn plan_windowed(
        &self,
        now: i64,
        paused: bool,
        windows: &WindowState,
    ) -> cmset_core::rollout::waves::WaveOutcome {
        let now = at(now);
        let waiting = BTreeMap::new();
        let input = WaveInput {
            spec: Some(&self.spec),
            current: CURRENT,
            previous: Some(&self.previous),
            previous_entries: &self.entries,
            revisions: &self.revisions,
            now: &now,
            paused,
            manual_promotion: self.previous.phase == RolloutPhase::AwaitingPromotion,
            promoted: None,
            budget_waiting: &waiting,
            namespace: "team",
            analysis: None,
            immediate: false,
            windows,
        };
        let members = self
            .entries
            .values()
            .map(|e| {
                let (health, wave) = &self.observed[&e.uid];
                let mut entry = e.clone();
                // What the reference rules say before the planner: moved ones are Current.
                if entry.state == WorkloadState::Waiting {
                    entry.state = WorkloadState::Pending;
                }
                Member {
                    entry,
                    kind: WorkloadKind::Deployment,
                    wave,
                    health,
                    opting_in: false,
                }
            })
            .collect();
        plan_waves(&input, members)
    }

    /// The status the plan records, as the next plan reads it.
    fn record(&mut self, outcome: &cmset_core::rollout::waves::WaveOutcome) {
        self.previous = outcome.rollout.clone().unwrap();
        self.entries = outcome
            .entries
            .iter()
            .map(|e| (e.uid.clone(), e.clone()))
            .collect();
    }
}

/// Any health a reader may have when a window starts, a reported failure included.
fn any_health() -> impl Strategy<Value = Health> {
    prop_oneof![
        Just(Health::Healthy),
        Just(Health::Progressing),
        Just(Health::Failed("crashed".into())),
    ]
}

fn health() -> impl Strategy<Value = Health> {
    prop_oneof![
        3 => Just(Health::Progressing),
        1 => Just(Health::Healthy),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Paused for any length of time, with workloads still rolling out long past their deadline: no
    /// failure, nothing rolled back, the hold and its instant kept. (The hold began before any deadline
    /// ran out, as a status the planner wrote always shows.)
    #[test]
    fn a_paused_rollout_never_fails_by_time(
        deadline in 1_000..3_600i32,
        moved in prop::collection::vec(0..1_000i64, 1..4),
        healths in prop::collection::vec(health(), 4),
        hold_part in 0.0..1.0f64,
        later in prop::collection::vec(0..10_000_000i64, 1..5),
    ) {
        let healths = healths[..moved.len()].to_vec();
        let (first, last) = (*moved.iter().min().unwrap(), *moved.iter().max().unwrap());
        let room = first + i64::from(deadline) - last;
        #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
        let hold_at = last + (hold_part * (room - 1) as f64) as i64;
        let mut case = Case::new(deadline, held(RolloutPhase::Paused, hold_at), &moved, healths);
        let mut now = hold_at;
        for step in later {
            now += step;
            let outcome = case.plan(now, true);
            let rollout = outcome.rollout.clone().unwrap();
            prop_assert_eq!(rollout.phase, RolloutPhase::Paused, "{:?}", rollout);
            prop_assert_eq!(rollout.held_since, Some(at(hold_at)));
            prop_assert_eq!(outcome.recheck_in, None);
            prop_assert!(outcome.entries.iter().all(|e| e.state != WorkloadState::RolledBack));
            case.record(&outcome);
        }
    }

    /// A window holds moves, not judgement: whatever the windows do (holding or not, opening soon or
    /// late), a workload moved at `moved` that never becomes healthy fails the rollout and is rolled
    /// back exactly at its deadline; until then the rollout is under way, `Waiting` while a window
    /// holds it, and the planner always looks again by the deadline.
    #[test]
    fn a_window_never_stops_a_moved_workloads_deadline(
        deadline in 60..3_600i32,
        moved in 0..1_000i64,
        history in prop::collection::vec((1..900i64, any::<bool>(), 1..100_000i64), 1..12),
        held_at_deadline in any::<bool>(),
    ) {
        let mut case = Case::new(deadline, progressing(), &[moved], vec![Health::Progressing]);
        let due = moved + i64::from(deadline);
        let plan = |case: &Case, now: i64, held: bool, opens_in: i64| if held {
            case.plan_outside_windows(now, now + opens_in)
        } else {
            case.plan(now, false)
        };
        let mut now = moved;
        for (step, held, opens_in) in history {
            now += step;
            if now >= due {
                break;
            }
            let outcome = plan(&case, now, held, opens_in);
            let rollout = outcome.rollout.clone().unwrap();
            let phase = if held { RolloutPhase::Waiting } else { RolloutPhase::Progressing };
            prop_assert_eq!(rollout.phase, phase, "{:?}", rollout);
            let left = outcome.recheck_in.map(|d| i64::try_from(d.as_secs()).unwrap());
            prop_assert!(left.is_some_and(|left| left <= due - now), "{:?} at {} for {}", left, now, due);
            prop_assert!(outcome.entries.iter().all(|e| e.state != WorkloadState::RolledBack));
            case.record(&outcome);
        }
        let outcome = plan(&case, due, held_at_deadline, 3_600);
        let rollout = outcome.rollout.clone().unwrap();
        prop_assert_eq!(rollout.phase, RolloutPhase::Failed, "{:?}", rollout);
        let w0 = outcome.entries.iter().find(|e| e.name == "w0").unwrap();
        prop_assert_eq!(w0.state, WorkloadState::RolledBack);
        prop_assert_eq!(seconds(w0.moved_at.as_ref().unwrap()), moved, "no clock was shifted");
    }

    /// A rollback is never held: a workload that reports failure while a window holds the rollout
    /// fails it, and is rolled back.
    #[test]
    fn a_rollback_is_never_held_by_a_window(
        moved in 0..1_000i64,
        hold_at in 1_000..2_000i64,
        later in 0..10_000_000i64,
    ) {
        let case = Case::new(600, held(RolloutPhase::Waiting, hold_at), &[moved], vec![Health::Failed("crashed".into())]);
        let now = hold_at + later;
        let outcome = case.plan_outside_windows(now, now + 3_600);
        prop_assert_eq!(outcome.rollout.unwrap().phase, RolloutPhase::Failed);
        prop_assert!(outcome.entries.iter().any(|e| e.state == WorkloadState::RolledBack));
    }

    /// The same rollout with a workload that reports its own failure fails, paused or not.
    #[test]
    fn a_reported_failure_fails_a_paused_rollout(
        moved in 0..1_000i64,
        hold_at in 1_000..2_000i64,
        later in 0..10_000_000i64,
    ) {
        let case = Case::new(600, held(RolloutPhase::Paused, hold_at), &[moved], vec![Health::Failed("crashed".into())]);
        let outcome = case.plan(hold_at + later, true);
        prop_assert_eq!(outcome.rollout.unwrap().phase, RolloutPhase::Failed);
    }

    /// Resumed after any hold, paused or awaiting promotion: a workload moved at `moved` that was still
    /// rolling out has exactly the time it had left when the hold began, and fails when that runs out.
    #[test]
    fn a_resumed_rollout_has_the_time_it_had_left(
        deadline in 10..3_600i32,
        moved in 0..1_000i64,
        hold_after in 0..9i64,
        hold in 0..10_000_000i64,
        awaiting in any::<bool>(),
    ) {
        let hold_at = moved + hold_after;
        let phase = if awaiting { RolloutPhase::AwaitingPromotion } else { RolloutPhase::Paused };
        let mut case = Case::new(deadline, held(phase, hold_at), &[moved], vec![Health::Progressing]);
        let resumed_at = hold_at + hold;
        let outcome = case.plan(resumed_at, false);
        let rollout = outcome.rollout.clone().unwrap();
        prop_assert_eq!(rollout.phase, RolloutPhase::Progressing, "{:?}", rollout);
        prop_assert_eq!(rollout.held_since, None);
        let entry = outcome.entries.iter().find(|e| e.name == "w0").unwrap();
        prop_assert_eq!(seconds(entry.moved_at.as_ref().unwrap()), moved + hold);
        case.record(&outcome);
        let left = i64::from(deadline) - hold_after;
        let just_before = case.plan(resumed_at + left - 1, false).rollout.unwrap();
        prop_assert_eq!(just_before.phase, RolloutPhase::Progressing);
        let at_deadline = case.plan(resumed_at + left, false).rollout.unwrap();
        prop_assert_eq!(at_deadline.phase, RolloutPhase::Failed);
    }

    /// No phantom rollouts: a set without `spec.rollout` whose readers (of no wave) all run its
    /// current revision, or are pinned by a rollback, has nothing to move. Whatever the windows and a
    /// pause do over time, and whatever its readers' health (one failing at the very moment a window
    /// starts), it gets no rollout record, no event, no timer and no measurement, and no reader changes
    /// state. (A record of an earlier revision's rollout, if any, goes: it is not this revision's.)
    #[test]
    fn a_hold_never_makes_a_rollout_for_a_set_with_nothing_to_move(
        readers in prop::collection::vec((any_health(), any::<bool>()), 1..5),
        earlier in prop::option::of(prop_oneof![
            Just(RolloutPhase::Complete),
            Just(RolloutPhase::Failed),
            Just(RolloutPhase::Waiting),
        ]),
        history in prop::collection::vec((1..100_000i64, any::<bool>(), any::<bool>()), 1..8),
    ) {
        let waves: Vec<Wave> = readers.iter().map(|_| Wave::Number(0)).collect();
        let entries: Vec<WorkloadStatus> = readers
            .iter()
            .enumerate()
            .map(|(i, (_, pinned))| WorkloadStatus {
                kind: "Deployment".into(),
                name: format!("w{i}"),
                uid: format!("uid-w{i}"),
                revision: if *pinned { PREVIOUS.into() } else { CURRENT.into() },
                state: if *pinned { WorkloadState::Pinned } else { WorkloadState::Current },
                rolled_out: Some(CURRENT.into()),
                ..WorkloadStatus::default()
            })
            .collect();
        let previous = earlier.map(|phase| RolloutStatus {
            revision: PREVIOUS.into(),
            phase,
            started_at: Some(at(0)),
            ..RolloutStatus::default()
        });
        let previous_entries: BTreeMap<String, WorkloadStatus> =
            entries.iter().map(|e| (e.uid.clone(), e.clone())).collect();
        let revisions = BTreeSet::from([CURRENT.to_string(), PREVIOUS.to_string()]);
        let waiting = BTreeMap::new();
        let mut now = 0;
        for (step, window, paused) in history {
            now += step;
            let windows = if window {
                WindowState {
                    held: Some(WindowHold {
                        reason: "freeze".into(),
                        by: "Deny window of ChangeWindow freeze".into(),
                        opens_at: Some(at(now + 3_600).0),
                    }),
                    changes_at: Some(at(now + 3_600).0),
                    invalid: false,
                    break_glass: Default::default(),
                    cluster_unknown: None,
                }
            } else {
                WindowState::default()
            };
            let clock = at(now);
            let input = WaveInput {
                spec: None,
                current: CURRENT,
                previous: previous.as_ref(),
                previous_entries: &previous_entries,
                revisions: &revisions,
                now: &clock,
                paused,
                manual_promotion: false,
                promoted: None,
                budget_waiting: &waiting,
                namespace: "team",
                analysis: None,
                immediate: false,
                windows: &windows,
            };
            let members = entries
                .iter()
                .zip(&readers)
                .zip(&waves)
                .map(|((e, (health, _)), wave)| Member {
                    entry: e.clone(),
                    kind: WorkloadKind::Deployment,
                    wave,
                    health,
                    opting_in: false,
                })
                .collect();
            let outcome = plan_waves(&input, members);
            prop_assert_eq!(&outcome.rollout, &None, "window {}, paused {}", window, paused);
            prop_assert!(outcome.events.is_empty(), "{:?}", outcome.events);
            prop_assert_eq!(outcome.recheck_in, None);
            prop_assert!(outcome.analysis_due.is_empty());
            prop_assert_eq!(&outcome.entries, &entries);
        }
    }
}
