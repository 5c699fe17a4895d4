//! Which revision a workload should name now, for every set it reads: the one decision that the
//! workload controller, the admission webhook, the set planner (for the state it records of each
//! workload) and `kubectl cmset` make, asked in one place so that they cannot disagree (waves, pins,
//! rollbacks and holds included).
//!
//! The inputs are what an observer knows of each set: the set itself (its spec and status), the content
//! identity of its spec (computed once per spec change by the caller, or the identity of its source's
//! content in source mode), the revision objects labelled for it, and the lowest wave among the
//! workloads that read it. Where that is not enough to decide (the revision for the spec does not exist
//! yet, the source was not read yet, the observer is a moment behind the set), the answer is
//! [`Undecided`]: the caller waits for its observations to catch up rather than guess.

use cmset_api::{ConfigMapSetStatus, WorkloadState};
use std::time::Duration;

use crate::rollout::pinning::SetTarget;
use crate::rollout::waves;
use crate::set::SetRef;
use crate::workloads::observe::{HistoryObject, RevisionView, WorkloadView};

/// What is known of the content of a set's spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity<'a> {
    /// The content identity of a valid spec (or of its source's content).
    Known(&'a str),
    /// The spec is invalid: workloads stay on the last good revision its status records.
    Invalid,
    /// In source mode, the source has not been read at its current version yet.
    Unread,
    /// The observer does not know the content (`kubectl cmset` does not read a set's source): the
    /// current revision is the one the set's status records, once the status describes the spec, as
    /// for an [invalid](Self::Invalid) spec. A change of the source's content shows once the set's
    /// controller has recorded its revision.
    Recorded,
}

/// One set a workload reads, as observed.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub set: SetRef<'a>,
    /// The generation of the set the identity was computed from: an identity computed from another
    /// generation than the set's is stale.
    pub identity_generation: Option<i64>,
    pub identity: Identity<'a>,
    /// The revision objects labelled for the set (of any owner; the decision filters them).
    pub revisions: &'a [RevisionView],
    /// The lowest wave among the workloads that read the set (0 without waves).
    pub lowest_wave: i32,
    /// The change windows hold the set's moves now, before any override (see
    /// [`crate::rollout::window_hold::WindowState::gate_inputs`]).
    /// Admission of a new workload passes false (its first start names the current revision), but for
    /// a Job a CronJob starts (see [`crate::admission::windows_apply`]).
    pub window_held: bool,
    /// The revision whose rollout a WindowOverride lets through the windows (see
    /// [`crate::rollout::window_hold::WindowState::gate_inputs`]): `window_held` does not hold a move to it.
    pub window_override: Option<&'a str>,
}

/// Why a decision cannot be made yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Undecided {
    /// This set (kind and name) has no revision for its spec yet, or is not fully observed.
    Set(String),
}

impl std::fmt::Display for Undecided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Set(set) => write!(f, "{set} has no revision for its current spec yet"),
        }
    }
}

/// Where `workload`'s references to `observed.set` should point: the set's current revision and what
/// the rollout of that revision lets this workload do.
pub fn target(observed: &Observed<'_>, workload: &WorkloadView) -> Result<SetTarget, Undecided> {
    target_seeing(observed, workload, &[])
}

/// [`target`], by an observer that also sees the retained ReplicaSets and ControllerRevisions of the
/// namespace (`history`, of any owner): when the set's status has no rollout record for the workload
/// (it was lost), they tell whether it ran the current revision, so that a rollback is not taken for a
/// missed update (see [`crate::rollout::pinning::rollout_record`]). The set planner decides so.
pub fn target_seeing(
    observed: &Observed<'_>,
    workload: &WorkloadView,
    history: &[HistoryObject],
) -> Result<SetTarget, Undecided> {
    let set = observed.set;
    let undecided = || Undecided::Set(format!("{} {}", set.kind(), set.name()));
    if observed.identity_generation != set.generation() {
        return Err(undecided());
    }
    let identity = match observed.identity {
        Identity::Known(identity) => Some(identity),
        Identity::Invalid | Identity::Recorded => None,
        Identity::Unread => return Err(undecided()),
    };
    let target = SetTarget::observed_seeing(set, identity, observed.revisions, &workload.uid, history)
        .ok_or_else(undecided)?;
    // A WindowOverride lets through the rollout of the revision it names, not a newer one the status
    // does not record yet.
    let window_held = observed.window_held && observed.window_override != Some(target.current.as_str());
    // A revision the set's checks have not passed is held like a change window holds one: nothing
    // moves to it (an opting-in workload still starts), and a rollback is never held.
    let records = set.status().and_then(|s| s.checks.as_deref()).unwrap_or_default();
    let checks_held =
        crate::rollout::check_gate::held(set.checks(), &target.current, observed.revisions, records);
    let gate = waves::gate(
        set,
        &target.current,
        workload,
        observed.lowest_wave,
        window_held || checks_held,
    );
    Ok(target.gated(gate))
}

/// Whether a set's status moving from `old` to `new` can move a decision [`target`] makes for a reader
/// that already runs the current revision: the rollout (a wave opens, a rollback, a pause), which
/// revisions failed, and which workloads are pinned or rolled back. A new current revision is not
/// such news (the readers not on it wait to move, see [`status_wakes_readers`]), nor are conditions,
/// the observed generation, revisions coming into use or the records of moves made.
pub fn status_moves_decisions(old: &ConfigMapSetStatus, new: &ConfigMapSetStatus) -> bool {
    let failed = |s: &ConfigMapSetStatus| -> Vec<String> {
        s.history
            .iter()
            .filter(|h| h.failed)
            .map(|h| h.name.clone())
            .collect()
    };
    let held = |s: &ConfigMapSetStatus| -> Vec<(String, WorkloadState)> {
        s.workloads
            .iter()
            .filter(|w| matches!(w.state, WorkloadState::Pinned | WorkloadState::RolledBack))
            .map(|w| (w.uid.clone(), w.state))
            .collect()
    };
    old.rollout != new.rollout || failed(old) != failed(new) || held(old) != held(new)
}

/// Whether a set's status written as `new` over `old` must wake the workloads that read it: it moved
/// what their decisions read ([`status_moves_decisions`]), or some of them still wait to move (held by
/// a wave, a window, a pause, or not moved yet), whose gate may have opened with whatever changed.
pub fn status_wakes_readers(old: &ConfigMapSetStatus, new: &ConfigMapSetStatus) -> bool {
    status_moves_decisions(old, new)
        // Trimmed entries may be waiting ones.
        || new.omitted_workloads > 0
        || new
            .workloads
            .iter()
            .any(|w| matches!(w.state, WorkloadState::Pending | WorkloadState::Waiting))
}

/// The targets of every set `workload` reads, or the first set it must wait for.
pub fn targets(observed: &[Observed<'_>], workload: &WorkloadView) -> Result<Vec<SetTarget>, Undecided> {
    observed.iter().map(|o| target(o, workload)).collect()
}

/// How long a workload that reads several sets still waits after the last change to one of them, so
/// that sets changed by one apply land in one rollout: `None` when it need not wait. `changed_ago` is,
/// for each set it reads, how long ago its content last changed.
pub fn gathering_left(changed_ago: &[Duration], window: Duration) -> Option<Duration> {
    if changed_ago.len() < 2 {
        return None;
    }
    let latest = changed_ago.iter().min()?;
    window.checked_sub(*latest).filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmset_api::{RolloutPhase, RolloutStatus, WorkloadStatus};

    #[test]
    fn only_what_readers_decide_from_makes_a_status_news_to_them() {
        let workload = |state| WorkloadStatus {
            uid: "u1".into(),
            name: "web".into(),
            revision: "app-1".into(),
            state,
            ..WorkloadStatus::default()
        };
        let base = ConfigMapSetStatus {
            observed_generation: Some(1),
            revision: Some(1),
            current_revision: Some("app-1".into()),
            workloads: vec![workload(WorkloadState::Pending)],
            ..ConfigMapSetStatus::default()
        };
        let changed = |f: &dyn Fn(&mut ConfigMapSetStatus)| {
            let mut new = base.clone();
            f(&mut new);
            status_moves_decisions(&base, &new)
        };
        // A record of the move that just happened, a new observed generation, conditions: no news.
        assert!(!changed(&|s| s.workloads = vec![workload(WorkloadState::Current)]));
        assert!(!changed(&|s| s.observed_generation = Some(2)));
        assert!(!changed(&|s| s.workloads[0].rolled_out = Some("app-1".into())));
        assert!(!changed(&|s| {
            s.conditions
                .push(serde_json::from_value(serde_json::json!({"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "RolledOut", "message": ""})).unwrap())
        }));
        // A new current revision alone: the readers not on it are Pending, and that wakes them.
        assert!(!changed(&|s| s.current_revision = Some("app-2".into())));
        // What a reader's decision reads: news.
        assert!(changed(&|s| s.workloads = vec![workload(WorkloadState::Pinned)]));
        assert!(changed(
            &|s| s.workloads = vec![workload(WorkloadState::RolledBack)]
        ));
        assert!(changed(&|s| {
            s.rollout = Some(RolloutStatus {
                phase: RolloutPhase::Progressing,
                wave: 1,
                ..RolloutStatus::default()
            })
        }));
        assert!(!changed(&|s| s.history.push(Default::default())));
        assert!(changed(&|s| {
            s.history.push(cmset_api::RevisionStatus {
                failed: true,
                ..Default::default()
            })
        }));
        assert!(!status_moves_decisions(&base, &base));
        // Readers that still wait are woken by any status; once all have moved, only by news.
        let moved = ConfigMapSetStatus {
            workloads: vec![workload(WorkloadState::Current)],
            ..base.clone()
        };
        assert!(status_wakes_readers(&moved, &base), "one is Pending");
        let waiting = ConfigMapSetStatus {
            workloads: vec![workload(WorkloadState::Waiting)],
            ..base.clone()
        };
        assert!(status_wakes_readers(&moved, &waiting));
        assert!(!status_wakes_readers(&base, &moved));
        let mut pinned = moved.clone();
        pinned.workloads[0].state = WorkloadState::Pinned;
        assert!(status_wakes_readers(&moved, &pinned));
    }

    #[test]
    fn one_set_never_waits_for_the_window() {
        let window = Duration::from_millis(500);
        assert_eq!(gathering_left(&[Duration::ZERO], window), None);
        assert_eq!(gathering_left(&[], window), None);
    }

    #[test]
    fn several_sets_wait_out_the_window_after_the_latest_change() {
        let window = Duration::from_millis(500);
        let ago = [Duration::from_millis(100), Duration::from_secs(60)];
        assert_eq!(gathering_left(&ago, window), Some(Duration::from_millis(400)));
        let ago = [Duration::from_millis(500), Duration::from_secs(60)];
        assert_eq!(gathering_left(&ago, window), None);
    }
}
