//! Status conditions in the standard `metav1.Condition` shape, updated so that a condition's
//! `lastTransitionTime` moves only when its status does: re-planning an unchanged world yields an equal
//! status, and so no write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

pub const READY: &str = "Ready";
pub const STALLED: &str = "Stalled";
/// `False` while the operator cannot see the cluster's ChangeWindows (its reason names why); absent
/// while it can.
pub const WINDOWS_KNOWN: &str = "ChangeWindowsKnown";

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
