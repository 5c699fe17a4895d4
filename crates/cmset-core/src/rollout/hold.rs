//! Holding a new Deployment (or another kind whose table entry says how) until the sets it reads have
//! revisions.
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
//! The same holds for a new Argo Rollout (also `spec.paused`) and a new CronJob (`spec.suspend`: no
//! Job starts while it is suspended). Only new objects are held: pausing one that runs would stop a
//! rollout someone started; StatefulSets, DaemonSets and Jobs cannot be held (see [`crate::workloads::kinds`]).

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use serde_json::{Value, json};

pub use cmset_api::labels::{HELD_SINCE, HOLD_LIMIT_SECONDS};

use crate::workloads::kinds::WorkloadKind;

const ANNOTATIONS: &Pointer = Pointer::from_static("/metadata/annotations");

/// The field that holds an object of `kind`, if it can be held.
fn switch(kind: WorkloadKind) -> Option<PointerBuf> {
    PointerBuf::parse(kind.spec().hold?).ok()
}

/// Whether objects of `kind` can be held at creation.
pub fn can_hold(kind: WorkloadKind) -> bool {
    switch(kind).is_some()
}

/// Whether the object (as admitted) is paused already, by whoever wrote it: then it is not held, and a
/// pause that is not cmset's is never lifted by cmset.
pub fn is_paused(kind: WorkloadKind, object: &Value) -> bool {
    switch(kind).is_some_and(|p| object.pointer(p.as_str()).and_then(Value::as_bool) == Some(true))
}

/// The operations that hold an object of `kind` being created: paused (or suspended), with the time
/// the hold began. None for a kind that cannot be held.
pub fn hold_operations(kind: WorkloadKind, object: &Value, now: &str) -> Vec<PatchOperation> {
    let Some(paused) = switch(kind) else {
        return Vec::new();
    };
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
            path: paused,
            value: Value::Bool(true),
        }),
        PatchOperation::Add(annotation),
    ]
}

/// The operations that lift the hold that began at `since`, guarded so that a hold replaced meanwhile
/// (another value) is left alone.
pub fn release_operations(kind: WorkloadKind, since: &str) -> Vec<PatchOperation> {
    let Some(paused) = switch(kind) else {
        return Vec::new();
    };
    let annotation: PointerBuf = ANNOTATIONS.with_trailing_token(HELD_SINCE);
    vec![
        PatchOperation::Test(TestOperation {
            path: annotation.clone(),
            value: Value::from(since),
        }),
        // `add` sets the field whether or not it is still there.
        PatchOperation::Add(AddOperation {
            path: paused,
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
        let held = apply(
            &bare,
            hold_operations(WorkloadKind::Deployment, &bare, "2026-11-23T10:00:00Z"),
        )
        .unwrap();
        assert_eq!(held["spec"]["paused"], true);
        assert_eq!(
            held["metadata"]["annotations"][HELD_SINCE],
            "2026-11-23T10:00:00Z"
        );

        let annotated = json!({"metadata": {"annotations": {"team": "a"}}, "spec": {}});
        let held = apply(
            &annotated,
            hold_operations(WorkloadKind::Deployment, &annotated, "t"),
        )
        .unwrap();
        assert_eq!(
            held["metadata"]["annotations"],
            json!({"team": "a", HELD_SINCE: "t"})
        );
    }

    #[test]
    fn a_release_unpauses_removes_the_record_and_only_for_the_same_hold() {
        let bare = json!({"metadata": {"annotations": {"team": "a"}}, "spec": {}});
        let held = apply(&bare, hold_operations(WorkloadKind::Deployment, &bare, "t1")).unwrap();
        let released = apply(&held, release_operations(WorkloadKind::Deployment, "t1")).unwrap();
        assert_eq!(released["spec"]["paused"], false);
        assert_eq!(released["metadata"]["annotations"], json!({"team": "a"}));
        assert!(
            apply(&held, release_operations(WorkloadKind::Deployment, "t2")).is_err(),
            "another hold is not ours to lift"
        );
        assert!(
            apply(&released, release_operations(WorkloadKind::Deployment, "t1")).is_err(),
            "released once"
        );
    }

    #[test]
    fn only_an_explicit_pause_counts_as_paused() {
        let d = WorkloadKind::Deployment;
        assert!(is_paused(d, &json!({"spec": {"paused": true}})));
        assert!(!is_paused(d, &json!({"spec": {"paused": false}})));
        assert!(!is_paused(d, &json!({"spec": {}})));
        let cron = WorkloadKind::CronJob;
        assert!(is_paused(cron, &json!({"spec": {"suspend": true}})));
        assert!(
            !is_paused(cron, &json!({"spec": {"paused": true}})),
            "a CronJob is held by suspend"
        );
        assert!(!is_paused(
            WorkloadKind::StatefulSet,
            &json!({"spec": {"paused": true}})
        ));
    }

    #[test]
    fn each_kind_is_held_by_its_own_switch_and_some_cannot_be() {
        let bare = json!({"metadata": {"name": "nightly"}, "spec": {"schedule": "@daily"}});
        let held = apply(&bare, hold_operations(WorkloadKind::CronJob, &bare, "t")).unwrap();
        assert_eq!(held["spec"]["suspend"], true);
        let released = apply(&held, release_operations(WorkloadKind::CronJob, "t")).unwrap();
        assert_eq!(released["spec"]["suspend"], false);
        let rollout = apply(&bare, hold_operations(WorkloadKind::Rollout, &bare, "t")).unwrap();
        assert_eq!(rollout["spec"]["paused"], true);
        for kind in [
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
            WorkloadKind::Job,
        ] {
            assert!(!can_hold(kind));
            assert!(hold_operations(kind, &bare, "t").is_empty(), "{kind}");
            assert!(release_operations(kind, "t").is_empty(), "{kind}");
        }
    }

    #[test]
    fn holds_end_after_the_limit() {
        assert_eq!(hold_left(100, 100), Some(HOLD_LIMIT_SECONDS));
        assert_eq!(hold_left(100, 100 + HOLD_LIMIT_SECONDS - 1), Some(1));
        assert_eq!(hold_left(100, 100 + HOLD_LIMIT_SECONDS), None);
        assert_eq!(hold_left(i64::MAX, 0), Some(i64::MAX), "no overflow");
    }
}
