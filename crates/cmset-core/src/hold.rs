//! Holding a new Deployment until the sets it reads have revisions.
//!
//! A Deployment created in the same apply as its ConfigMapSet often arrives first (kustomize, Argo CD
//! and Flux order custom resources after built-in kinds, and `kubectl apply` sends one object at a
//! time). The webhook cannot point it at a revision that does not exist yet, and a Deployment stored
//! naming the bare set gets a first ReplicaSet for a ConfigMap that is not there: its pods cannot
//! start, and `rollout undo` could return to it. A *paused* Deployment gets no ReplicaSet at all, so the
//! webhook creates it paused with [`HELD_SINCE`]; the controller unpauses it in the very patch that
//! points it at the revisions (its first ReplicaSet is then the right one), or after
//! [`HOLD_LIMIT_SECONDS`] if no set turns up (the name was a plain ConfigMap still to come).
//!
//! Only new Deployments are held: pausing one that runs would stop a rollout someone started, and
//! StatefulSets and DaemonSets cannot be paused.

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use serde_json::{Value, json};

pub use cmset_api::labels::{HELD_SINCE, HOLD_LIMIT_SECONDS};

const ANNOTATIONS: &Pointer = Pointer::from_static("/metadata/annotations");
const PAUSED: &Pointer = Pointer::from_static("/spec/paused");

/// Whether the object (as admitted) is paused already, by whoever wrote it: then it is not held, and a
/// pause that is not cmset's is never lifted by cmset.
pub fn is_paused(object: &Value) -> bool {
    object.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
}

/// The operations that hold a Deployment being created: paused, with the time the hold began.
pub fn hold_operations(object: &Value, now: &str) -> Vec<PatchOperation> {
    let annotation = if object
        .pointer("/metadata/annotations")
        .is_some_and(Value::is_object)
    {
        AddOperation {
            path: ANNOTATIONS.with_trailing_token(HELD_SINCE),
            value: Value::from(now),
        }
    } else {
        AddOperation {
            path: ANNOTATIONS.to_buf(),
            value: json!({ HELD_SINCE: now }),
        }
    };
    vec![
        PatchOperation::Add(AddOperation {
            path: PAUSED.to_buf(),
            value: Value::Bool(true),
        }),
        PatchOperation::Add(annotation),
    ]
}

/// The operations that lift the hold that began at `since`, guarded so that a hold replaced meanwhile
/// (another value) is left alone.
pub fn release_operations(since: &str) -> Vec<PatchOperation> {
    let annotation: PointerBuf = ANNOTATIONS.with_trailing_token(HELD_SINCE);
    vec![
        PatchOperation::Test(TestOperation {
            path: annotation.clone(),
            value: Value::from(since),
        }),
        // `add` sets the field whether or not it is still there.
        PatchOperation::Add(AddOperation {
            path: PAUSED.to_buf(),
            value: Value::Bool(false),
        }),
        PatchOperation::Remove(RemoveOperation { path: annotation }),
    ]
}

/// When a hold that began at `since` (seconds) ends at the latest: `None` if it is over at `now`, else
/// the seconds left.
pub fn hold_left(since: i64, now: i64) -> Option<i64> {
    let left = since.saturating_add(HOLD_LIMIT_SECONDS).saturating_sub(now);
    (left > 0).then_some(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(object: &Value, operations: Vec<PatchOperation>) -> Result<Value, json_patch::PatchError> {
        let mut doc = object.clone();
        json_patch::patch(&mut doc, &operations).map(|()| doc)
    }

    #[test]
    fn a_hold_pauses_and_records_when_with_or_without_annotations() {
        let bare = json!({"metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let held = apply(&bare, hold_operations(&bare, "2026-11-23T10:00:00Z")).unwrap();
        assert_eq!(held["spec"]["paused"], true);
        assert_eq!(
            held["metadata"]["annotations"][HELD_SINCE],
            "2026-11-23T10:00:00Z"
        );

        let annotated = json!({"metadata": {"annotations": {"team": "a"}}, "spec": {}});
        let held = apply(&annotated, hold_operations(&annotated, "t")).unwrap();
        assert_eq!(
            held["metadata"]["annotations"],
            json!({"team": "a", HELD_SINCE: "t"})
        );
    }

    #[test]
    fn a_release_unpauses_removes_the_record_and_only_for_the_same_hold() {
        let bare = json!({"metadata": {"annotations": {"team": "a"}}, "spec": {}});
        let held = apply(&bare, hold_operations(&bare, "t1")).unwrap();
        let released = apply(&held, release_operations("t1")).unwrap();
        assert_eq!(released["spec"]["paused"], false);
        assert_eq!(released["metadata"]["annotations"], json!({"team": "a"}));
        assert!(
            apply(&held, release_operations("t2")).is_err(),
            "another hold is not ours to lift"
        );
        assert!(
            apply(&released, release_operations("t1")).is_err(),
            "released once"
        );
    }

    #[test]
    fn only_an_explicit_pause_counts_as_paused() {
        assert!(is_paused(&json!({"spec": {"paused": true}})));
        assert!(!is_paused(&json!({"spec": {"paused": false}})));
        assert!(!is_paused(&json!({"spec": {}})));
    }

    #[test]
    fn holds_end_after_the_limit() {
        assert_eq!(hold_left(100, 100), Some(HOLD_LIMIT_SECONDS));
        assert_eq!(hold_left(100, 100 + HOLD_LIMIT_SECONDS - 1), Some(1));
        assert_eq!(hold_left(100, 100 + HOLD_LIMIT_SECONDS), None);
        assert_eq!(hold_left(i64::MAX, 0), Some(i64::MAX), "no overflow");
    }
}
