//! Status conditions in the standard `metav1.Condition` shape, updated so that a condition's
//! `lastTransitionTime` moves only when its status does: re-planning an unchanged world yields an equal
//! status, and so no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub const READY: &str = "Ready";
pub const STALLED: &str = "Stalled";
/// `True` while the set is on its way to `Ready` (a rollout in progress, held, or waiting on something
/// outside the set): kstatus' "abnormal-true" condition, which Helm 4's `--wait`, Argo CD and Flux
/// read as in progress. Absent once the set is `Ready` or `Stalled`.
pub const RECONCILING: &str = "Reconciling";
/// `False` while the operator cannot see the cluster's ChangeWindows (its reason names why); absent
/// while it can.
pub const WINDOWS_KNOWN: &str = "ChangeWindowsKnown";

/// `False` while the set's content fails its `spec.validation` (no revision is made of it); `True` once
/// the current revision holds it; absent for a set that declares no validation.
pub const VALID: &str = "Valid";

/// The desired state of one condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired<'a> {
    pub type_: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

/// Returns `conditions` with `desired` set; the transition time is kept when the status is unchanged.
pub fn set(
    conditions: &[Condition],
    desired: Desired<'_>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let status = if desired.status { "True" } else { "False" };
    put(conditions, status, desired, generation, now)
}

/// Returns `conditions` with the condition of `desired.type_` `Unknown` (cmset cannot tell; its
/// `status` field is not read); the transition time is kept while it stays so.
pub fn set_unknown(
    conditions: &[Condition],
    desired: Desired<'_>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    put(conditions, "Unknown", desired, generation, now)
}

fn put(
    conditions: &[Condition],
    status: &str,
    desired: Desired<'_>,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let previous = conditions.iter().find(|c| c.type_ == desired.type_);
    let last_transition_time = match previous {
        Some(p) if p.status == status => p.last_transition_time.clone(),
        _ => now.clone(),
    };
    let updated = Condition {
        type_: desired.type_.to_string(),
        status: status.to_string(),
        reason: desired.reason.to_string(),
        message: desired.message,
        observed_generation: generation,
        last_transition_time,
    };
    let mut out: Vec<Condition> = conditions
        .iter()
        .filter(|c| c.type_ != desired.type_)
        .cloned()
        .collect();
    out.push(updated);
    out.sort_by(|a, b| a.type_.cmp(&b.type_));
    out
}

/// Returns `conditions` with [`RECONCILING`] derived from the others: `True`, with the `Ready`
/// condition's reason, message and observed generation, while `Ready` is not `True` and the set is
/// not `Stalled`; absent otherwise. kstatus reads no `Ready` condition of a custom resource, only these two, so without it a
/// set in the middle of a rollout would count as done.
pub fn with_reconciling(conditions: &[Condition], now: &Time) -> Vec<Condition> {
    let is_true = |type_: &str| conditions.iter().any(|c| c.type_ == type_ && c.status == "True");
    let ready = conditions.iter().find(|c| c.type_ == READY);
    match ready {
        Some(ready) if ready.status != "True" && !is_true(STALLED) => set(
            conditions,
            Desired {
                type_: RECONCILING,
                status: true,
                reason: &ready.reason,
                message: ready.message.clone(),
            },
            ready.observed_generation,
            now,
        ),
        _ => remove(conditions, RECONCILING),
    }
}

/// Returns `conditions` without the condition of this type.
pub fn remove(conditions: &[Condition], type_: &str) -> Vec<Condition> {
    conditions.iter().filter(|c| c.type_ != type_).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn ready(status: bool, reason: &'static str) -> Desired<'static> {
        Desired {
            type_: READY,
            status,
            reason,
            message: reason.to_lowercase(),
        }
    }

    #[test]
    fn reconciling_follows_ready_unless_stalled() {
        let types = |c: &[Condition]| -> Vec<(String, String)> {
            c.iter().map(|c| (c.type_.clone(), c.status.clone())).collect()
        };
        let pending = set(&[], ready(false, "RolloutProgressing"), Some(2), &at(100));
        let reconciling = with_reconciling(&pending, &at(100));
        assert_eq!(
            types(&reconciling),
            [
                ("Ready".into(), "False".into()),
                ("Reconciling".into(), "True".into())
            ]
        );
        let r = reconciling.iter().find(|c| c.type_ == RECONCILING).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.observed_generation),
            ("RolloutProgressing", Some(2))
        );
        let stalled = set(
            &reconciling,
            Desired {
                type_: STALLED,
                ..ready(true, "RolloutFailed")
            },
            Some(2),
            &at(200),
        );
        assert_eq!(
            types(&with_reconciling(&stalled, &at(200))),
            [
                ("Ready".into(), "False".into()),
                ("Stalled".into(), "True".into())
            ]
        );
        let done = set(&reconciling, ready(true, "RolledOut"), Some(2), &at(300));
        assert_eq!(
            types(&with_reconciling(&done, &at(300))),
            [("Ready".into(), "True".into())]
        );
        let unknown = set_unknown(&done, ready(false, "WorkloadsUnobserved"), Some(2), &at(400));
        let r = with_reconciling(&unknown, &at(400));
        assert!(
            r.iter().any(|c| c.type_ == RECONCILING && c.status == "True"),
            "Unknown is not done"
        );
        assert_eq!(with_reconciling(&r, &at(500)), r, "re-deriving changes nothing");
    }

    #[test]
    fn transition_time_moves_only_with_status() {
        let first = set(&[], ready(false, "RolloutPending"), Some(1), &at(100));
        assert_eq!(first[0].last_transition_time, at(100));
        let same_status = set(&first, ready(false, "Other"), Some(2), &at(200));
        assert_eq!(same_status[0].last_transition_time, at(100));
        assert_eq!(same_status[0].reason, "Other");
        let flipped = set(&same_status, ready(true, "RolledOut"), Some(2), &at(300));
        assert_eq!(flipped[0].last_transition_time, at(300));
        assert_eq!(flipped[0].status, "True");
    }

    #[test]
    fn unknown_moves_the_transition_time_once_and_back_again() {
        let ready_true = set(&[], ready(true, "RolledOut"), Some(1), &at(100));
        let unknown = set_unknown(&ready_true, ready(true, "Unobserved"), Some(1), &at(200));
        assert_eq!(
            (
                unknown[0].status.as_str(),
                unknown[0].last_transition_time.clone()
            ),
            ("Unknown", at(200)),
            "the desired status is not read"
        );
        let still = set_unknown(&unknown, ready(false, "Unobserved"), Some(1), &at(300));
        assert_eq!(still, unknown, "staying Unknown changes nothing");
        let back = set(&still, ready(true, "RolledOut"), Some(1), &at(400));
        assert_eq!(
            (back[0].status.as_str(), back[0].last_transition_time.clone()),
            ("True", at(400))
        );
    }

    #[test]
    fn setting_the_same_condition_again_is_equal() {
        let once = set(&[], ready(true, "RolledOut"), Some(3), &at(100));
        let twice = set(&once, ready(true, "RolledOut"), Some(3), &at(999));
        assert_eq!(once, twice);
    }

    #[test]
    fn other_conditions_are_kept_and_sorted() {
        let with_stalled = set(
            &[],
            Desired {
                type_: STALLED,
                status: true,
                reason: "InvalidSpec",
                message: String::new(),
            },
            None,
            &at(1),
        );
        let both = set(&with_stalled, ready(false, "InvalidSpec"), None, &at(1));
        assert_eq!(
            both.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
            vec![READY, STALLED]
        );
        assert_eq!(remove(&both, STALLED).len(), 1);
    }
}
