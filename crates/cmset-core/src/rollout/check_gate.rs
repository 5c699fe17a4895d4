//! What the set's checks (`spec.checks`) do to the rollout of its current revision.
//!
//! The waves are planned as if there were no check; this stage then holds a rollout that is still
//! under way in phase `Checking` while a check has no verdict, and fails it when one failed. The
//! workloads themselves are held by the decision every workload goes through ([`held`], read by
//! [`crate::rollout::decide`]), so a workload never moves to a revision that has not passed, whichever replica
//! or path asks.
//!
//! A rollout that completed, or failed for another reason, is left alone: checks gate the way into a
//! revision, and editing a check later does not pull back a revision already rolled out.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_api::{Check, CheckRecord, RolloutPhase, RolloutStatus, WorkloadState};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::content::checks::{self, CheckPlan, Gate, JobOutcome};
use crate::rollout::waves::{WaveEvent, WaveOutcome, whole_second_after};
use crate::workloads::observe::RevisionView;

/// How often a rollout in `Checking` looks at its check Jobs again.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// `rollout.reason` of a rollout failed by a check: the notification `on-check-failed` stands on it.
pub const CHECK_FAILED: &str = "CheckFailed";

/// The checks of one revision, for the I/O layer: the Jobs to create, the verdicts to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckRun {
    /// The revision checked, and the hash part of its name (the Jobs' names carry it).
    pub revision: String,
    pub revision_hash: String,
    /// The uid of the revision object checked: its records name it.
    pub revision_uid: String,
    /// The verdicts already recorded for it in the set's status.
    pub recorded: BTreeMap<String, checks::Verdict>,
    /// The uids of the Jobs cmset created for it and has no verdict of yet, by check hash: a Job of the
    /// check's name counts only if its uid is here.
    pub started: BTreeMap<String, String>,
    pub plan: CheckPlan,
}

/// Whether `checks` hold a move to revision `current` among `revisions`: some check has not passed
/// against it, as the set's status (`records`) says. A revision not observed yet has no verdict, so it
/// is held.
pub fn held(checks: &[Check], current: &str, revisions: &[RevisionView], records: &[CheckRecord]) -> bool {
    if checks.is_empty() {
        return false;
    }
    let uid = revisions
        .iter()
        .find(|r| r.name == current)
        .map_or("", |r| r.uid.as_str());
    !checks::allows_move(checks, &checks::recorded(records, current, uid))
}

/// The checks due against revision `current` (named `<set_name>-<hash>`), from the verdicts the set's
/// status records for it (`records`) and the Jobs that run (`jobs`, by check hash); `None` when the set
/// declares no check, or the rollout of `current` the status records (`recorded_rollout`) is over:
/// complete, or failed for another reason. A rollout is judged by its record, not by this plan: a set
/// no workload reads would otherwise complete in the very plan that should check it.
pub fn run(
    set_name: &str,
    checks: &[Check],
    current: &str,
    revisions: &[RevisionView],
    records: &[CheckRecord],
    recorded_rollout: Option<&RolloutStatus>,
    jobs: &BTreeMap<String, JobOutcome>,
) -> Option<CheckRun> {
    if checks.is_empty() {
        return None;
    }
    let rollout = recorded_rollout.filter(|r| r.revision == current);
    let revision_uid = revisions
        .iter()
        .find(|r| r.name == current)
        .map(|r| r.uid.clone())
        .unwrap_or_default();
    let recorded = checks::recorded(records, current, &revision_uid);
    let plan = checks::plan_checks(checks, &recorded, jobs);
    let failed_by_check = rollout.is_some_and(|r| r.reason.as_deref() == Some(CHECK_FAILED));
    if rollout.is_some_and(|r| !r.phase.is_under_way()) && !failed_by_check {
        return None;
    }
    let revision_hash = current.strip_prefix(set_name)?.strip_prefix('-')?.to_string();
    Some(CheckRun {
        revision: current.to_string(),
        revision_hash,
        started: checks::started(records, current, &revision_uid),
        revision_uid,
        recorded,
        plan,
    })
}

/// `outcome` with the rollout of `current` held in `Checking` or failed, as `run`'s gate says;
/// `previous`: the rollout the status records.
pub fn apply(
    mut outcome: WaveOutcome,
    run: &CheckRun,
    previous: Option<&RolloutStatus>,
    now: &Time,
) -> WaveOutcome {
    let current = run.revision.as_str();
    let previous = previous.filter(|p| p.revision == current);
    let fresh = || RolloutStatus {
        revision: current.to_string(),
        phase: RolloutPhase::Progressing,
        started_at: Some(whole_second_after(now)),
        ..RolloutStatus::default()
    };
    match &run.plan.gate {
        // A set with checks always keeps a record of its rollout, even one the waves do not track: the
        // record of its last check (or failure) is then replaced, never dropped.
        Gate::Open => {
            if outcome.rollout.is_none() {
                let settled = outcome
                    .entries
                    .iter()
                    .all(|e| matches!(e.state, WorkloadState::Current | WorkloadState::Pinned));
                let mut rollout = fresh();
                if settled {
                    rollout.phase = RolloutPhase::Complete;
                }
                outcome.rollout = Some(rollout);
            }
            outcome
        }
        Gate::Checking => {
            let mut rollout = outcome.rollout.take().unwrap_or_else(fresh);
            let summary = checks::summary(&run.plan);
            rollout.phase = RolloutPhase::Checking;
            rollout.held_since = None;
            rollout.wave_healthy_since = None;
            rollout.message = Some(summary.clone());
            // Nothing moves while checking, so no wave event stands; the start of the checks is told once.
            outcome.events.clear();
            if previous.is_none_or(|p| p.phase != RolloutPhase::Checking) {
                outcome.events.push(WaveEvent::Checking(format!(
                    "Rollout of {current} waits for its checks: {}",
                    summary.trim_start_matches("checks: ")
                )));
            }
            outcome.rollout = Some(rollout);
            outcome.analysis_due.clear();
            outcome.recheck_in = Some(outcome.recheck_in.map_or(POLL_EVERY, |r| r.min(POLL_EVERY)));
            outcome
        }
        Gate::Failed(why) => {
            let mut rollout = outcome.rollout.take().unwrap_or_else(fresh);
            let message = format!("the checks of {current} failed: {why}");
            let newly = previous.is_none_or(|p| p.phase != RolloutPhase::Failed);
            rollout.phase = RolloutPhase::Failed;
            rollout.reason = Some(CHECK_FAILED.to_string());
            rollout.held_since = None;
            rollout.wave_healthy_since = None;
            rollout.message = Some(message.clone());
            outcome.events.clear();
            if newly {
                outcome.events.push(WaveEvent::CheckFailed(format!(
                    "A check of {current} failed; nothing moves to it: {why}"
                )));
                outcome.events.push(WaveEvent::Failed(message));
            }
            outcome.rollout = Some(rollout);
            outcome.analysis_due.clear();
            outcome
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::checks::{RESULTS_ANNOTATION, check_hash};
    use serde_json::json;

    fn check(name: &str) -> Check {
        Check {
            name: name.into(),
            job_template: json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "i"}]}}}}),
        }
    }

    /// A revision as observed, and the records the set's status keeps of its checks.
    struct Rev(RevisionView, Vec<CheckRecord>);

    fn revision(name: &str, verdicts: &[(&Check, bool)]) -> Rev {
        let records = verdicts
            .iter()
            .map(|(c, passed)| CheckRecord {
                revision: name.into(),
                revision_uid: "u".into(),
                name: c.name.clone(),
                hash: check_hash(c),
                job_uid: "j".into(),
                passed: Some(*passed),
                message: (!passed).then(|| format!("check {} failed: bad", c.name)),
            })
            .collect();
        let view = RevisionView {
            name: name.into(),
            uid: "u".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            owner_references: Vec::new(),
            being_deleted: false,
            created: None,
            resource_version: None,
        };
        Rev(view, records)
    }

    fn split(revisions: &[Rev]) -> (Vec<RevisionView>, Vec<CheckRecord>) {
        let views = revisions.iter().map(|r| r.0.clone()).collect();
        let records = revisions.iter().flat_map(|r| r.1.clone()).collect();
        (views, records)
    }

    fn held_in(checks: &[Check], current: &str, revisions: &[Rev]) -> bool {
        let (views, records) = split(revisions);
        held(checks, current, &views, &records)
    }

    fn run_in(
        set: &str,
        checks: &[Check],
        current: &str,
        revisions: &[Rev],
        rollout: Option<&RolloutStatus>,
        jobs: &BTreeMap<String, JobOutcome>,
    ) -> Option<CheckRun> {
        let (views, records) = split(revisions);
        run(set, checks, current, &views, &records, rollout, jobs)
    }

    fn now() -> Time {
        Time("2026-11-28T12:00:00Z".parse().expect("a timestamp"))
    }

    fn started(revision: &str) -> WaveOutcome {
        WaveOutcome {
            rollout: Some(RolloutStatus {
                revision: revision.into(),
                phase: RolloutPhase::Progressing,
                ..RolloutStatus::default()
            }),
            events: vec![WaveEvent::Started(
                "Rollout of web-abc started: wave 0 moves".into(),
            )],
            ..WaveOutcome::default()
        }
    }

    #[test]
    fn a_set_without_checks_holds_nothing_and_runs_nothing() {
        assert!(!held_in(&[], "web-abc", &[]));
        assert_eq!(run_in("web", &[], "web-abc", &[], None, &BTreeMap::new()), None);
    }

    #[test]
    fn a_revision_is_held_until_every_check_passed_against_it() {
        let (a, b) = (check("a"), check("b"));
        let checks = [a.clone(), b.clone()];
        assert!(held_in(&checks, "web-abc", &[]), "not observed yet");
        assert!(held_in(&checks, "web-abc", &[revision("web-abc", &[(&a, true)])]));
        assert!(held_in(
            &checks,
            "web-abc",
            &[revision("web-abc", &[(&a, true), (&b, false)])]
        ));
        assert!(!held_in(
            &checks,
            "web-abc",
            &[revision("web-abc", &[(&a, true), (&b, true)])]
        ));
        // Another revision's verdicts say nothing of this one.
        assert!(held_in(
            &checks,
            "web-abc",
            &[revision("web-old", &[(&a, true), (&b, true)])]
        ));
    }

    #[test]
    fn only_cmsets_record_of_that_very_object_counts() {
        let a = check("a");
        let checks = std::slice::from_ref(&a);
        // A verdict written into the revision's annotation, as anyone who may edit the namespace can.
        let mut forged = revision("web-abc", &[]);
        let verdict = json!({check_hash(&a): {"name": "a", "passed": true}}).to_string();
        forged.0.annotations.insert(RESULTS_ANNOTATION.into(), verdict);
        assert!(held_in(checks, "web-abc", &[forged]));
        let run = run_in(
            "web",
            checks,
            "web-abc",
            &[revision("web-abc", &[])],
            None,
            &BTreeMap::new(),
        );
        assert_eq!(run.map(|r| r.plan.gate), Some(Gate::Checking));
        // A record of another object of that name (deleted and made again) says nothing of this one.
        let mut other = revision("web-abc", &[(&a, true)]);
        other.0.uid = "another".into();
        assert!(held_in(checks, "web-abc", &[other]));
    }

    #[test]
    fn an_edited_check_is_due_again_on_a_revision_that_passed_the_old_one() {
        let old = check("a");
        let mut edited = old.clone();
        edited.job_template =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "j"}]}}}});
        assert!(held_in(
            &[edited],
            "web-abc",
            &[revision("web-abc", &[(&old, true)])]
        ));
    }

    #[test]
    fn while_a_check_runs_the_rollout_is_checking_and_says_so_once() {
        let a = check("a");
        let jobs = [(check_hash(&a), JobOutcome::Running)].into();
        let run = run_in("web", &[a], "web-abc", &[], None, &jobs).expect("checks run");
        assert_eq!(run.revision_hash, "abc");
        let outcome = apply(started("web-abc"), &run, None, &now());
        let rollout = outcome.rollout.clone().expect("a rollout");
        assert_eq!(rollout.phase, RolloutPhase::Checking);
        assert_eq!(rollout.message.as_deref(), Some("checks: a running"));
        assert_eq!(
            outcome.events,
            vec![WaveEvent::Checking(
                "Rollout of web-abc waits for its checks: a running".into()
            )]
        );
        assert_eq!(outcome.recheck_in, Some(POLL_EVERY));
        // Planned again while still checking: no second event.
        let again = apply(started("web-abc"), &run, Some(&rollout), &now());
        assert!(again.events.is_empty(), "{:?}", again.events);
    }

    #[test]
    fn a_set_that_records_no_rollout_gets_one_while_checking() {
        let a = check("a");
        let outcome = WaveOutcome::default();
        let run = run_in("web", &[a], "web-abc", &[], None, &BTreeMap::new()).expect("checks run");
        let rollout = apply(outcome, &run, None, &now()).rollout.expect("a rollout");
        assert_eq!(
            (rollout.revision.as_str(), rollout.phase),
            ("web-abc", RolloutPhase::Checking)
        );
        assert_eq!(rollout.message.as_deref(), Some("checks: a starting"));
    }

    #[test]
    fn a_failed_check_fails_the_rollout_once_with_its_message() {
        let a = check("a");
        let revisions = [revision("web-abc", &[(&a, false)])];
        let run = run_in(
            "web",
            std::slice::from_ref(&a),
            "web-abc",
            &revisions,
            None,
            &BTreeMap::new(),
        )
        .expect("checks run");
        let outcome = apply(started("web-abc"), &run, None, &now());
        let rollout = outcome.rollout.clone().expect("a rollout");
        assert_eq!(rollout.phase, RolloutPhase::Failed);
        assert_eq!(rollout.reason.as_deref(), Some(CHECK_FAILED));
        assert_eq!(
            rollout.message.as_deref(),
            Some("the checks of web-abc failed: check a failed: bad")
        );
        assert!(matches!(
            outcome.events.as_slice(),
            [WaveEvent::CheckFailed(_), WaveEvent::Failed(_)]
        ));
        let again = apply(started("web-abc"), &run, Some(&rollout), &now());
        assert!(again.events.is_empty());
        // Recorded as failed by its check, the rollout is still the checks' to keep failed.
        let kept = run_in(
            "web",
            &[a],
            "web-abc",
            &revisions,
            Some(&rollout),
            &BTreeMap::new(),
        );
        assert_eq!(
            kept.map(|r| r.plan.gate),
            Some(Gate::Failed("check a failed: bad".into()))
        );
    }

    #[test]
    fn checks_leave_a_finished_rollout_alone_and_open_when_all_passed() {
        let a = check("a");
        let mut complete = started("web-abc").rollout.expect("a rollout");
        complete.phase = RolloutPhase::Complete;
        let checks = std::slice::from_ref(&a);
        assert_eq!(
            run_in("web", checks, "web-abc", &[], Some(&complete), &BTreeMap::new()),
            None
        );
        let mut failed = complete.clone();
        failed.phase = RolloutPhase::Failed;
        assert_eq!(
            run_in("web", checks, "web-abc", &[], Some(&failed), &BTreeMap::new()),
            None
        );
        // A record of another revision's rollout says nothing of this one's.
        let mut older = complete;
        older.revision = "web-old".into();
        assert!(run_in("web", checks, "web-abc", &[], Some(&older), &BTreeMap::new()).is_some());

        let revisions = [revision("web-abc", &[(&a, true)])];
        let run = run_in("web", &[a], "web-abc", &revisions, None, &BTreeMap::new()).expect("checks run");
        assert_eq!(run.plan.gate, Gate::Open);
        assert_eq!(apply(started("web-abc"), &run, None, &now()), started("web-abc"));
        // Untracked by the waves, the rollout still has a record: the last one is replaced, not dropped.
        // Complete when no workload waits to move, else under way until the waves find it complete.
        let rollout = apply(WaveOutcome::default(), &run, None, &now())
            .rollout
            .expect("a record");
        assert_eq!(
            (rollout.revision.as_str(), rollout.phase),
            ("web-abc", RolloutPhase::Complete)
        );
        let moving = WaveOutcome {
            entries: vec![cmset_api::WorkloadStatus {
                state: WorkloadState::Pending,
                ..cmset_api::WorkloadStatus::default()
            }],
            ..WaveOutcome::default()
        };
        let rollout = apply(moving, &run, None, &now()).rollout.expect("a record");
        assert_eq!(rollout.phase, RolloutPhase::Progressing);
    }
}
