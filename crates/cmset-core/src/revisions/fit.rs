//! A set's status that fits whatever its fan-out.
//!
//! A status lists every workload that reads the set. At a few hundred bytes an entry, a set read by
//! 20,000 workloads would write several MiB, and the API server refuses any object over what etcd
//! stores (1.5 MiB by default, spec included): the write would fail on every reconcile. So once the
//! list outgrows [`WORKLOADS_BUDGET`], it keeps what is not settled and counts the rest:
//!
//! 1. A settled workload (it runs the current revision, its rollout record says it ran it while it was
//!    current, nothing is rolling out to it and nothing is said of it) leaves the list; only its rollout
//!    record stays, as 12 hexadecimal digits of its UID's hash in [`SettledWorkloads`] (15 bytes instead of about 200).
//!    [`crate::rollout::pinning::rollout_record`] reads it back, so a later `kubectl rollout undo` is still
//!    told apart from an update not yet made.
//! 2. If the list still does not fit, entries that carry nothing a decision reads back (waiting or
//!    pending, with no move time, message or previous revision: all of it is the workload's own) leave
//!    it, then settled UIDs beyond the budget, then whatever is left from the end. They are counted in
//!    `omittedWorkloads`, which says the status was trimmed.
//!
//! The `Ready` condition is computed before this, from every workload. A status that fits is left
//! exactly as planned, so small sets look as they always did.

use cmset_api::{ConfigMapSetStatus, RolloutPhase, SettledWorkloads, WorkloadState, WorkloadStatus};
use sha2::{Digest, Sha256};

/// How large `workloads` and `settledWorkloads` may grow together, in bytes of JSON (estimated from
/// above). Half of etcd's default request limit leaves the other half to the spec, the history, the
/// rollout and the notification records.
pub const WORKLOADS_BUDGET: usize = 512 * 1024;

/// How many hexadecimal digits of a UID's SHA-256 a settled workload keeps: 48 bits, so two of 20,000
/// workloads share them with a chance of about 7 in 10^7. Hashed rather than cut, since nothing
/// promises which part of a UID varies. A shared key can only leave a workload pinned after a
/// rollback, never move one that was rolled back.
pub const UID_DIGITS: usize = 12;

/// The key of `uid` that [`SettledWorkloads::uids`] keeps.
pub fn short_uid(uid: &str) -> String {
    use std::fmt::Write;
    let digest = Sha256::digest(uid.as_bytes());
    digest
        .iter()
        .take(UID_DIGITS / 2)
        .fold(String::with_capacity(UID_DIGITS), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// Whether `status` records the workload with `uid` as settled on `current`.
pub fn is_settled_on(status: &ConfigMapSetStatus, current: &str, uid: &str) -> bool {
    status
        .settled_workloads
        .as_ref()
        .filter(|s| s.revision == current)
        .is_some_and(|s| s.uids.binary_search(&short_uid(uid)).is_ok())
}

/// How many workloads read the set: listed, settled and omitted.
pub fn workload_count(status: &ConfigMapSetStatus) -> usize {
    let settled = status
        .settled_workloads
        .as_ref()
        .map_or(0, |s| usize::try_from(s.count).unwrap_or(0));
    status.workloads.len() + settled + usize::try_from(status.omitted_workloads).unwrap_or(0)
}

/// `status` with its workloads fitted into `budget` bytes (see the [module](self) documentation).
pub fn fit_workloads(mut status: ConfigMapSetStatus, budget: usize) -> ConfigMapSetStatus {
    status.settled_workloads = None;
    status.omitted_workloads = 0;
    let listed: usize = status.workloads.iter().map(entry_bytes).sum();
    if listed <= budget {
        return status;
    }
    let Some(current) = status.current_revision.clone() else {
        return status;
    };
    let rolling = status
        .rollout
        .as_ref()
        .is_some_and(|r| r.revision == current && r.phase != RolloutPhase::Complete);
    let (settled, mut kept): (Vec<WorkloadStatus>, Vec<WorkloadStatus>) =
        std::mem::take(&mut status.workloads)
            .into_iter()
            .partition(|w| !rolling && is_settled(w, &current));
    let mut uids: Vec<String> = settled.iter().map(|w| short_uid(&w.uid)).collect();
    uids.sort_unstable();
    // Two UIDs with one key need it once; `count` still counts both.
    uids.dedup();
    let mut count = settled.len();

    let mut used: usize = kept.iter().map(entry_bytes).sum::<usize>() + uids.len() * SETTLED_UID_BYTES;
    let mut omitted = 0usize;
    // Entries whose every field is the workload's own go first, last listed first.
    while used > budget {
        let Some(at) = kept.iter().rposition(carries_nothing_read_back) else {
            break;
        };
        used -= entry_bytes(&kept.remove(at));
        omitted += 1;
    }
    while used > budget && !uids.is_empty() {
        uids.pop();
        used -= SETTLED_UID_BYTES;
        count -= 1;
        omitted += 1;
    }
    while used > budget {
        let Some(last) = kept.pop() else { break };
        used -= entry_bytes(&last);
        omitted += 1;
    }
    status.workloads = kept;
    status.omitted_workloads = i32::try_from(omitted).unwrap_or(i32::MAX);
    status.settled_workloads = (!uids.is_empty()).then(|| SettledWorkloads {
        revision: current,
        count: i32::try_from(count).unwrap_or(i32::MAX),
        uids,
    });
    status
}

/// Bytes a settled UID takes in JSON: its digits, two quotes and a comma.
const SETTLED_UID_BYTES: usize = UID_DIGITS + 3;

/// Runs the current revision, ran it while it was current, and nothing is said of it.
fn is_settled(w: &WorkloadStatus, current: &str) -> bool {
    w.state == WorkloadState::Current
        && w.revision == current
        && w.rolled_out.as_deref() == Some(current)
        && w.message.is_none()
}

/// A waiting or pending entry with no move time, message or previous revision: the next plan derives
/// all of it from the workload itself.
fn carries_nothing_read_back(w: &WorkloadStatus) -> bool {
    matches!(w.state, WorkloadState::Waiting | WorkloadState::Pending)
        && w.moved_at.is_none()
        && w.message.is_none()
        && w.previous_revision.is_none()
}

/// An upper bound of an entry's size in JSON: its strings, and the keys, quotes and timestamp around
/// them.
fn entry_bytes(w: &WorkloadStatus) -> usize {
    let optional = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() + 24);
    // `{"kind":"","name":"","uid":"","revision":"","state":"RolledBack"}` and a comma, then a wave,
    // a move time, and the optional strings with their keys; messages may need escaping (× 2).
    let fixed = 72 + if w.wave != 0 { 20 } else { 0 } + if w.moved_at.is_some() { 44 } else { 0 };
    fixed
        + w.kind.len()
        + w.name.len()
        + w.uid.len()
        + w.revision.len()
        + optional(&w.rolled_out)
        + optional(&w.previous_revision)
        + w.message.as_ref().map_or(0, |m| 2 * m.len() + 12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmset_api::RolloutStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    fn uid(i: usize) -> String {
        format!(
            "{:08x}-{:04x}-4000-8000-{:012x}",
            i * 2_654_435_761 % (1 << 32),
            i % 65_536,
            i
        )
    }

    fn entry(i: usize, state: WorkloadState, revision: &str, rolled_out: Option<&str>) -> WorkloadStatus {
        WorkloadStatus {
            kind: "Deployment".into(),
            name: format!("reader-{i:05}"),
            uid: uid(i),
            revision: revision.into(),
            state,
            rolled_out: rolled_out.map(Into::into),
            ..WorkloadStatus::default()
        }
    }

    fn status(workloads: Vec<WorkloadStatus>, rollout: Option<RolloutStatus>) -> ConfigMapSetStatus {
        ConfigMapSetStatus {
            current_revision: Some("app-new".into()),
            workloads,
            rollout,
            ..ConfigMapSetStatus::default()
        }
    }

    fn settled(n: usize) -> Vec<WorkloadStatus> {
        (0..n)
            .map(|i| entry(i, WorkloadState::Current, "app-new", Some("app-new")))
            .collect()
    }

    fn json_len(s: &ConfigMapSetStatus) -> usize {
        serde_json::to_vec(s).unwrap().len()
    }

    #[test]
    fn a_status_that_fits_is_left_as_planned() {
        let planned = status(settled(100), None);
        assert_eq!(fit_workloads(planned.clone(), WORKLOADS_BUDGET), planned);
    }

    #[test]
    fn twenty_thousand_settled_readers_write_under_a_mebibyte_and_keep_every_record() {
        let mut all = settled(20_000);
        all[7].state = WorkloadState::Pinned;
        all[7].revision = "app-old".into();
        let fitted = fit_workloads(status(all.clone(), None), WORKLOADS_BUDGET);
        let bytes = json_len(&fitted);
        assert!(bytes < 1 << 20, "{bytes} bytes");
        assert_eq!(fitted.omitted_workloads, 0);
        assert_eq!(
            fitted.workloads,
            vec![all[7].clone()],
            "the pinned one stays listed"
        );
        assert_eq!(fitted.settled_workloads.as_ref().unwrap().count, 19_999);
        assert_eq!(workload_count(&fitted), 20_000);
        for w in all.iter().filter(|w| w.state == WorkloadState::Current) {
            assert!(is_settled_on(&fitted, "app-new", &w.uid), "{}", w.name);
        }
        assert!(!is_settled_on(&fitted, "app-new", &all[7].uid));
        assert!(
            !is_settled_on(&fitted, "app-newer", &all[0].uid),
            "only on its revision"
        );
    }

    #[test]
    fn nothing_settles_while_the_current_revision_rolls_out() {
        let rollout = RolloutStatus {
            revision: "app-new".into(),
            phase: RolloutPhase::Progressing,
            ..RolloutStatus::default()
        };
        let mut all = settled(2_000);
        for w in &mut all[..100] {
            w.moved_at = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        }
        let waiting = (2_000..6_000).map(|i| entry(i, WorkloadState::Waiting, "app-old", Some("app-old")));
        all.extend(waiting);
        let fitted = fit_workloads(status(all, Some(rollout)), WORKLOADS_BUDGET);
        assert_eq!(fitted.settled_workloads, None);
        assert!(fitted.omitted_workloads > 0);
        assert!(json_len(&fitted) <= WORKLOADS_BUDGET + 1_024);
        let moved = fitted.workloads.iter().filter(|w| w.moved_at.is_some()).count();
        assert_eq!(moved, 100, "entries whose move time a deadline reads stay");
        let current = fitted
            .workloads
            .iter()
            .filter(|w| w.state == WorkloadState::Current)
            .count();
        assert_eq!(current, 2_000, "plain waiting entries leave first");
        assert_eq!(workload_count(&fitted), 6_000);
    }

    #[test]
    fn a_completed_rollout_settles_its_readers() {
        let rollout = RolloutStatus {
            revision: "app-new".into(),
            phase: RolloutPhase::Complete,
            ..RolloutStatus::default()
        };
        let fitted = fit_workloads(status(settled(5_000), Some(rollout)), WORKLOADS_BUDGET);
        assert_eq!(fitted.workloads, vec![]);
        assert_eq!(fitted.settled_workloads.unwrap().count, 5_000);
    }

    #[test]
    fn a_settled_key_is_twelve_hex_digits_of_the_uids_hash() {
        // As `printf uid-web | sha256sum | cut -c1-12` prints it.
        assert_eq!(short_uid("uid-web"), "02134b3f2d83");
        assert_ne!(
            short_uid("uid-web-1"),
            short_uid("uid-web-2"),
            "UIDs alike differ in their keys"
        );
    }

    proptest! {
        /// Whatever the mix, the fitted lists stay within the budget (from above), every workload is
        /// listed, settled or counted, and an entry is never changed, only moved or counted.
        #[test]
        fn the_fitted_status_stays_within_its_budget(
            states in proptest::collection::vec(0u8..5, 0..3_000),
            budget in 1_000usize..200_000,
        ) {
            let all: Vec<WorkloadStatus> = states.iter().enumerate().map(|(i, s)| match s {
                0 | 1 => entry(i, WorkloadState::Current, "app-new", Some("app-new")),
                2 => entry(i, WorkloadState::Waiting, "app-old", Some("app-old")),
                3 => entry(i, WorkloadState::Pinned, "app-old", Some("app-new")),
                _ => WorkloadStatus { message: Some("rolled back: not ready".into()),
                                      ..entry(i, WorkloadState::RolledBack, "app-old", Some("app-new")) },
            }).collect();
            let fitted = fit_workloads(status(all.clone(), None), budget);
            prop_assert_eq!(workload_count(&fitted), all.len());
            let used: usize = fitted.workloads.iter().map(entry_bytes).sum::<usize>()
                + fitted.settled_workloads.as_ref().map_or(0, |s| s.uids.len() * SETTLED_UID_BYTES);
            prop_assert!(used <= budget, "{} > {}", used, budget);
            for w in &fitted.workloads {
                prop_assert!(all.contains(w));
            }
            let actual = serde_json::to_vec(&fitted.workloads).unwrap().len();
            let estimated: usize = fitted.workloads.iter().map(entry_bytes).sum();
            prop_assert!(actual <= estimated + 2, "{} > {}", actual, estimated);
        }
    }
}
