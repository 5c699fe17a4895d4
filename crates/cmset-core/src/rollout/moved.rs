//! The mark a budgeted move leaves on a workload (label [`MOVED`]), so that the cluster-wide
//! rollout budget counts moves, not sickness.
//!
//! A budget slot belongs to a workload from the moment cmset moves its references to a revision it did
//! not run until it is healthy at the generation that move gave it. Health alone cannot say which
//! workloads those are: a Deployment created broken, an HPA scale-up with Pending pods or a DaemonSet
//! short of a node rolls out too, and counting them would let one tenant's broken workloads hold every
//! slot. So the move itself writes, in the same guarded patch, the generation it gives the workload
//! (the generation it had plus one: the patch changes the pod template and is tested against the
//! generation it was planned from). The mark lives in the API, so a restarted or new leader counts
//! exactly the moves under way. It stops counting when the workload moves on (a rollback, another
//! edit: a later generation), reports failure, stops reading the set, or is deleted; once it is healthy
//! at that generation the controller removes it, so a later scale-up at the same generation is not a
//! move either.
//!
//! A label, not an annotation: every watched workload has labels (it is selected by
//! `cmset.dev/enabled`), so the mark is one `add` under a map that exists, never a write of a whole map
//! over someone else's keys; and `kubectl rollout undo` copies a ReplicaSet's annotations back onto a
//! Deployment, not its labels.

use json_patch::jsonptr::Pointer;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use serde_json::Value;

pub use cmset_api::labels::{BUDGET_CAP, MOVED};

use crate::workloads::health::Health;

const LABELS: &Pointer = Pointer::from_static("/metadata/labels");
const GENERATION: &Pointer = Pointer::from_static("/metadata/generation");

/// The generation a mark records, if it reads as one.
pub fn marked_generation(mark: Option<&str>) -> Option<i64> {
    mark?.parse().ok()
}

/// Whether a workload at `generation` with mark `mark`, in `health`, holds a budget slot: cmset moved it
/// to this very generation, it still reads a set, and it is rolling out there.
pub fn holds_slot(mark: Option<&str>, generation: i64, health: &Health, reads: bool) -> bool {
    reads && *health == Health::Progressing && marked_generation(mark) == Some(generation)
}

/// The operations that mark a move planned at `generation` under a budget of `cap`: a test that the
/// generation is still that one (so the move gives it exactly `generation + 1`), the mark, and the cap
/// beside it ([`BUDGET_CAP`]). `add` replaces an older mark.
pub fn mark_operations(generation: i64, cap: usize) -> Vec<PatchOperation> {
    vec![
        PatchOperation::Test(TestOperation {
            path: GENERATION.to_buf(),
            value: Value::from(generation),
        }),
        PatchOperation::Add(AddOperation {
            path: LABELS.with_trailing_token(MOVED),
            value: Value::from((generation + 1).to_string()),
        }),
        PatchOperation::Add(AddOperation {
            path: LABELS.with_trailing_token(BUDGET_CAP),
            value: Value::from(cap.to_string()),
        }),
    ]
}

/// The cap a mark's [`BUDGET_CAP`] label records, if it reads as one.
pub fn marked_cap(label: Option<&str>) -> Option<usize> {
    label?.parse().ok()
}

/// Whether the mark on a workload at `generation` in `health` has served its purpose and is removed:
/// the move it records is healthy, or it records no move of this generation (the workload moved on),
/// where it could only mislead later.
pub fn mark_done(mark: Option<&str>, generation: i64, health: &Health) -> bool {
    mark.is_some() && (*health == Health::Healthy || marked_generation(mark) != Some(generation))
}

/// The operations that remove mark `mark`, guarded so that a mark written meanwhile is kept, and the
/// cap label beside it when there is one (`cap`, as the workload shows it; a mark of an earlier version
/// has none).
pub fn unmark_operations(mark: &str, cap: Option<&str>) -> Vec<PatchOperation> {
    let path = LABELS.with_trailing_token(MOVED);
    let mut operations = vec![
        PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: Value::from(mark),
        }),
        PatchOperation::Remove(RemoveOperation { path }),
    ];
    if let Some(cap) = cap {
        let path = LABELS.with_trailing_token(BUDGET_CAP);
        operations.push(PatchOperation::Test(TestOperation {
            path: path.clone(),
            value: Value::from(cap),
        }));
        operations.push(PatchOperation::Remove(RemoveOperation { path }));
    }
    operations
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn apply(object: &Value, operations: Vec<PatchOperation>) -> Result<Value, json_patch::PatchError> {
        let mut object = object.clone();
        json_patch::patch(&mut object, &json_patch::Patch(operations))?;
        Ok(object)
    }

    #[test]
    fn only_a_move_to_this_generation_that_still_rolls_out_holds_a_slot() {
        let rolling = Health::Progressing;
        let cases = [
            (
                Some("4"),
                4,
                Health::Progressing,
                true,
                true,
                "moved to 4, rolling",
            ),
            (
                None,
                4,
                Health::Progressing,
                true,
                false,
                "never moved by cmset: broken on its own",
            ),
            (
                Some("3"),
                4,
                Health::Progressing,
                true,
                false,
                "moved on since: rolled back or edited",
            ),
            (
                Some("5"),
                4,
                Health::Progressing,
                true,
                false,
                "a mark from elsewhere (rollout undo)",
            ),
            (Some("4"), 4, Health::Healthy, true, false, "healthy"),
            (
                Some("4"),
                4,
                Health::Failed("deadline".into()),
                true,
                false,
                "declared failed",
            ),
            (
                Some("4"),
                4,
                rolling.clone(),
                false,
                false,
                "stopped reading the set",
            ),
            (Some("x"), 4, rolling, true, false, "not a generation"),
        ];
        for (mark, generation, health, reads, holds, why) in cases {
            assert_eq!(holds_slot(mark, generation, &health, reads), holds, "{why}");
        }
    }

    #[test]
    fn the_mark_is_added_with_the_generation_the_move_gives_and_guarded_by_the_one_it_had() {
        let labelled = json!({"metadata": {"generation": 7, "labels": {"cmset.dev/enabled": "true"}}});
        let marked = apply(&labelled, mark_operations(7, 3)).unwrap();
        assert_eq!(
            marked["metadata"]["labels"],
            json!({"cmset.dev/enabled": "true", "cmset.dev/moved": "8", "cmset.dev/budget-cap": "3"})
        );
        let labels = &marked["metadata"]["labels"];
        assert_eq!(marked_cap(labels["cmset.dev/budget-cap"].as_str()), Some(3));
        let remarked = apply(
            &json!({"metadata": {"generation": 8, "labels": labels}}),
            mark_operations(8, 2),
        )
        .unwrap();
        assert_eq!(
            remarked["metadata"]["labels"]["cmset.dev/moved"], "9",
            "an older mark is replaced"
        );
        assert_eq!(remarked["metadata"]["labels"]["cmset.dev/budget-cap"], "2");
        // Planned from generation 6, the object is at 7 now: the patch fails rather than mark wrong.
        assert!(apply(&labelled, mark_operations(6, 3)).is_err());
    }

    #[test]
    fn the_mark_is_removed_once_the_move_is_healthy_and_only_if_unchanged() {
        assert!(mark_done(Some("8"), 8, &Health::Healthy));
        assert!(!mark_done(Some("8"), 8, &Health::Progressing));
        assert!(!mark_done(None, 8, &Health::Healthy));
        assert!(
            mark_done(Some("8"), 9, &Health::Progressing),
            "a stale mark goes too"
        );
        assert!(mark_done(Some("x"), 8, &Health::Progressing));
        let object = json!({"metadata": {"labels": {"a": "b", "cmset.dev/moved": "8"}}});
        let unmarked = apply(&object, unmark_operations("8", None)).unwrap();
        assert_eq!(unmarked["metadata"]["labels"], json!({"a": "b"}));
        assert!(
            apply(&object, unmark_operations("7", None)).is_err(),
            "a newer mark stays"
        );
        let capped =
            json!({"metadata": {"labels": {"a": "b", "cmset.dev/moved": "8", "cmset.dev/budget-cap": "2"}}});
        let unmarked = apply(&capped, unmark_operations("8", Some("2"))).unwrap();
        assert_eq!(
            unmarked["metadata"]["labels"],
            json!({"a": "b"}),
            "the cap goes with the mark"
        );
        assert!(
            apply(&capped, unmark_operations("8", Some("3"))).is_err(),
            "a cap written meanwhile stays"
        );
    }
}
