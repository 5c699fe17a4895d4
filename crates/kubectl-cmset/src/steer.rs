//! `kubectl cmset pause|resume|promote`: what each writes on the set, decided from the set alone.
//!
//! Each is an annotation (never the spec, so a GitOps tool that owns the spec sees no drift), written
//! with a merge patch of the set's metadata: `cmset.dev/paused: "true"` holds the rollout,
//! `cmset.dev/promoted: <revision>/<wave>@<rollout>` lets the wave after that one open in that rollout
//! (named by its `startedAt`), and in no later rollout of the same revision. The controller reads
//! them on its next reconcile; the record stays in the API, so a restart changes nothing.
//!
//! `promote --override-window` writes `cmset.dev/window-override: <revision>@<rollout>`: the change
//! windows let that one rollout through, and nothing else (no wave is promoted, no later rollout is let
//! through). Who asked is not the plugin's to say: cmset's admission webhook records it
//! (`cmset.dev/window-override-by: <user> <time>` and a proof), for users the API server authorizes
//! to break the glass (ClusterRole `cmset-break-glass`), and refuses everyone else. The plugin clears
//! any earlier record in the same patch and tells what the webhook recorded ([`recorded`]).

use std::collections::BTreeMap;

use cmset_api::{Promotion, RolloutPhase, labels};
use cmset_core::set::{SetRef, rollout_id};
use cmset_core::window_hold::override_value;
use serde::Serialize;
use serde_json::{Value, json};

/// What the user asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Promote,
    /// `promote --override-window`.
    OverrideWindow,
}

/// What to write, and what to tell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Steer {
    /// The merge patch of the set's metadata; `None` when nothing needs writing.
    #[serde(skip)]
    pub patch: Option<Value>,
    /// The annotation written (or removed) and its value.
    pub annotation: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Who asked, and when, for an override of the windows: what cmset's webhook recorded
    /// (`cmset.dev/window-override-by`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// What happens now, in a sentence.
    pub message: String,
}

/// What `action` writes on `set` (named `id`, such as `configmapset/app`), or why it cannot.
pub fn steer(action: Action, set: SetRef<'_>, id: &str) -> Result<Steer, String> {
    let annotated = |key: &str| {
        set.metadata()
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .cloned()
    };
    let spec_paused = set.rollout().is_some_and(|r| r.paused);
    match action {
        Action::Pause => {
            let already = annotated(labels::PAUSED).as_deref() == Some("true") || spec_paused;
            Ok(Steer {
                patch: (!already).then(|| json!({"metadata": {"annotations": {labels::PAUSED: "true"}}})),
                annotation: labels::PAUSED.to_string(),
                value: Some("true".into()),
                by: None,
                message: if already {
                    format!("{id} is paused already")
                } else {
                    format!(
                        "{id} paused: no workload moves to a new revision and no wave opens until `kubectl cmset resume {id}`"
                    )
                },
            })
        }
        Action::Resume => {
            if spec_paused {
                return Err(format!(
                    "{id} is paused by its spec (spec.rollout.paused: true); set it to false where the set is defined"
                ));
            }
            let paused = annotated(labels::PAUSED).is_some();
            Ok(Steer {
                patch: paused.then(|| json!({"metadata": {"annotations": {labels::PAUSED: null}}})),
                annotation: labels::PAUSED.to_string(),
                value: None,
                by: None,
                message: if paused {
                    format!("{id} resumed: its rollout goes on where it stood")
                } else {
                    format!("{id} is not paused")
                },
            })
        }
        Action::Promote => promote(set, id),
        Action::OverrideWindow => override_window(set, id),
    }
}

fn promote(set: SetRef<'_>, id: &str) -> Result<Steer, String> {
    if set.rollout().is_none_or(|r| r.promotion != Promotion::Manual) {
        return Err(format!(
            "{id} promotes its waves by itself (spec.rollout.promotion is not Manual): nothing to promote"
        ));
    }
    let Some(rollout) = set.status().and_then(|s| s.rollout.as_ref()) else {
        return Err(format!("{id} has no rollout under way: nothing to promote"));
    };
    match rollout.phase {
        // Held by a window, a promotion is recorded ahead, as while progressing.
        RolloutPhase::Progressing | RolloutPhase::AwaitingPromotion | RolloutPhase::Waiting => {}
        RolloutPhase::Paused => {
            return Err(format!(
                "{id} is paused: resume it first (`kubectl cmset resume {id}`)"
            ));
        }
        phase => {
            return Err(format!(
                "the rollout of {} is {}: nothing to promote",
                rollout.revision,
                phase.as_str().to_lowercase()
            ));
        }
    }
    let Some(next) = rollout.waves.iter().find(|&&w| w > rollout.wave) else {
        return Err(format!(
            "wave {} is the last wave of {}'s rollout: it completes without a promotion",
            rollout.wave, rollout.revision
        ));
    };
    // Naming the rollout (its start), so that a later rollout of the same revision needs its own.
    let value = match &rollout.started_at {
        Some(started) => format!("{}/{}@{}", rollout.revision, rollout.wave, rollout_id(started)),
        None => format!("{}/{}", rollout.revision, rollout.wave),
    };
    let when = match rollout.phase {
        RolloutPhase::AwaitingPromotion => "now".to_string(),
        RolloutPhase::Waiting => format!(
            "once it is done and stable and the change windows allow (now: `kubectl cmset promote \
             --override-window {id}`)"
        ),
        _ => "once it is done and stable".to_string(),
    };
    Ok(Steer {
        patch: Some(json!({"metadata": {"annotations": {labels::PROMOTED: value}}})),
        annotation: labels::PROMOTED.to_string(),
        value: Some(value),
        by: None,
        message: format!(
            "{id}: wave {} of {} promoted; wave {next} opens {when}",
            rollout.wave, rollout.revision
        ),
    })
}

/// Lets the rollout under way through the change windows: any phase under way may be held by a
/// window now or later, so it is allowed whether or not one holds it at this instant.
fn override_window(set: SetRef<'_>, id: &str) -> Result<Steer, String> {
    let Some(rollout) = set.status().and_then(|s| s.rollout.as_ref()) else {
        return Err(format!(
            "{id} has no rollout under way: nothing for the change windows to let through"
        ));
    };
    if !rollout.phase.is_under_way() {
        return Err(format!(
            "the rollout of {} is {}: nothing for the change windows to let through (an override names one \
             rollout; the next one needs its own)",
            rollout.revision,
            rollout.phase.as_str().to_lowercase()
        ));
    }
    // The value names the rollout by its start: without one the controller could not match it.
    let Some(value) = override_value(rollout) else {
        return Err(format!(
            "the rollout of {} has no start time recorded yet: try again in a moment",
            rollout.revision
        ));
    };
    let annotations = set.metadata().annotations.as_ref();
    let annotated = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
    // Already recorded by the webhook (a record without its proof is asked for again).
    let by =
        annotated(labels::WINDOW_OVERRIDE_BY).filter(|_| annotated(labels::WINDOW_OVERRIDE_PROOF).is_some());
    if annotated(labels::WINDOW_OVERRIDE).as_deref() == Some(value.as_str()) && by.is_some() {
        let who = by.as_deref().map_or(String::new(), |b| format!(" (by {b})"));
        return Ok(Steer {
            patch: None,
            annotation: labels::WINDOW_OVERRIDE.to_string(),
            value: Some(value),
            by,
            message: format!(
                "the rollout of {} of {id} is already let through the change windows{who}",
                rollout.revision
            ),
        });
    }
    let what = match rollout.phase {
        RolloutPhase::Waiting => {
            let held = rollout
                .reason
                .as_deref()
                .map_or(String::new(), |r| format!(" ({r})"));
            format!("it was held by a change window{held} and goes on now")
        }
        _ => "no change window will hold it".to_string(),
    };
    // The override lifts the windows only: say what else still holds the rollout.
    let still = match rollout.phase {
        RolloutPhase::Paused => format!("; it is still paused: `kubectl cmset resume {id}`"),
        RolloutPhase::AwaitingPromotion => {
            format!("; its next wave still awaits `kubectl cmset promote {id}`")
        }
        _ => String::new(),
    };
    Ok(Steer {
        // The record is the webhook's to write: an earlier one is cleared.
        patch: Some(json!({"metadata": {"annotations": {
            labels::WINDOW_OVERRIDE: value,
            labels::WINDOW_OVERRIDE_BY: null,
            labels::WINDOW_OVERRIDE_PROOF: null,
        }}})),
        annotation: labels::WINDOW_OVERRIDE.to_string(),
        value: Some(value),
        by: None,
        message: format!(
            "{id}: the rollout of {} is let through the change windows: {what}{still}",
            rollout.revision
        ),
    })
}

/// `steer`, an override written, told with what cmset's admission webhook recorded in the set's
/// annotations as `stored`: the user the API server authenticated. Without a record the webhook did
/// not see the patch (it fails open while cmset is down), and the override lets nothing through.
pub fn recorded(mut steer: Steer, stored: &BTreeMap<String, String>) -> Steer {
    let get = |key: &str| stored.get(key).cloned();
    let same = get(labels::WINDOW_OVERRIDE) == steer.value;
    match get(labels::WINDOW_OVERRIDE_BY).filter(|_| same && get(labels::WINDOW_OVERRIDE_PROOF).is_some()) {
        Some(by) => {
            steer.message = format!("{} (recorded by cmset for {by})", steer.message);
            steer.by = Some(by);
        }
        None => {
            steer.message = format!(
                "{}: the override is stored, but cmset's admission webhook did not record it, so it lets \
                 nothing through (is cmset running?); run this again once it is",
                steer
                    .message
                    .split_once(':')
                    .map_or(steer.message.as_str(), |(id, _)| id)
            );
        }
    }
    steer
}

#[cfg(test)]
mod tests {
    use cmset_api::{
        ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, RolloutSpec, RolloutStatus, Strategy,
    };

    use super::*;

    fn set(
        spec: Option<RolloutSpec>,
        rollout: Option<(RolloutPhase, i32)>,
        annotations: &[(&str, &str)],
    ) -> ConfigMapSet {
        let mut set = ConfigMapSet::new(
            "app",
            ConfigMapSetSpec {
                rollout: spec,
                ..Default::default()
            },
        );
        set.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        set.status = rollout.map(|(phase, wave)| ConfigMapSetStatus {
            rollout: Some(RolloutStatus {
                revision: "app-2222222222".into(),
                phase,
                wave,
                waves: vec![0, 1, 2],
                ..Default::default()
            }),
            ..Default::default()
        });
        set
    }

    fn manual() -> Option<RolloutSpec> {
        Some(RolloutSpec {
            promotion: Promotion::Manual,
            ..Default::default()
        })
    }

    const ID: &str = "configmapset/app";

    #[test]
    fn pause_and_resume_write_and_remove_the_annotation_once() {
        let s = set(None, None, &[]);
        let paused = steer(Action::Pause, (&s).into(), ID).unwrap();
        assert_eq!(
            paused.patch,
            Some(json!({"metadata": {"annotations": {"cmset.dev/paused": "true"}}}))
        );
        assert!(paused.message.contains("kubectl cmset resume configmapset/app"));
        assert_eq!(
            steer(Action::Resume, (&s).into(), ID).unwrap().patch,
            None,
            "not paused"
        );

        let s = set(None, None, &[(labels::PAUSED, "true")]);
        assert_eq!(
            steer(Action::Pause, (&s).into(), ID).unwrap().patch,
            None,
            "paused already"
        );
        let resumed = steer(Action::Resume, (&s).into(), ID).unwrap();
        assert_eq!(
            resumed.patch,
            Some(json!({"metadata": {"annotations": {"cmset.dev/paused": null}}}))
        );
    }

    #[test]
    fn a_pause_in_the_spec_is_not_the_plugin_s_to_lift() {
        let spec = Some(RolloutSpec {
            paused: true,
            ..Default::default()
        });
        let s = set(spec, None, &[]);
        let error = steer(Action::Resume, (&s).into(), ID).unwrap_err();
        assert!(error.contains("spec.rollout.paused: true"), "{error}");
    }

    #[test]
    fn promote_records_the_revision_and_wave_it_lets_go_on() {
        let s = set(manual(), Some((RolloutPhase::AwaitingPromotion, 0)), &[]);
        let promoted = steer(Action::Promote, (&s).into(), ID).unwrap();
        assert_eq!(
            promoted.patch,
            Some(json!({"metadata": {"annotations": {"cmset.dev/promoted": "app-2222222222/0"}}}))
        );
        assert!(
            promoted.message.contains("wave 1 opens now"),
            "{}",
            promoted.message
        );
        // Naming the rollout by its start, so that a later rollout of the same revision needs its own.
        let mut started = s.clone();
        let rollout = started.status.as_mut().unwrap().rollout.as_mut().unwrap();
        rollout.started_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-25T16:00:05Z".parse().unwrap(),
        ));
        let promoted = steer(Action::Promote, (&started).into(), ID).unwrap();
        assert_eq!(
            promoted.value.as_deref(),
            Some("app-2222222222/0@2026-11-25T16:00:05Z")
        );
        let parsed = cmset_core::set::Promoted::parse(promoted.value.as_deref().unwrap()).unwrap();
        assert_eq!(
            (parsed.revision, parsed.wave, parsed.rollout),
            ("app-2222222222", 0, Some("2026-11-25T16:00:05Z"))
        );
        let early = set(manual(), Some((RolloutPhase::Progressing, 1)), &[]);
        let early = steer(Action::Promote, (&early).into(), ID).unwrap();
        assert_eq!(early.value.as_deref(), Some("app-2222222222/1"));
        assert!(early.message.contains("once it is done and stable"));
        // Held by a change window: recorded ahead; the windows are lifted by the other flag only.
        let held = set(manual(), Some((RolloutPhase::Waiting, 0)), &[]);
        let held = steer(Action::Promote, (&held).into(), ID).unwrap();
        assert_eq!(held.value.as_deref(), Some("app-2222222222/0"));
        assert!(
            held.message.ends_with(
                "wave 1 opens once it is done and stable and the change windows allow (now: `kubectl \
                 cmset promote --override-window configmapset/app`)"
            ),
            "{}",
            held.message
        );
        assert!(!held.patch.unwrap().to_string().contains(labels::WINDOW_OVERRIDE));
    }

    #[test]
    fn promote_says_why_there_is_nothing_to_promote() {
        let cases = [
            (
                set(None, Some((RolloutPhase::AwaitingPromotion, 0)), &[]),
                "is not Manual",
            ),
            (set(manual(), None, &[]), "no rollout under way"),
            (
                set(manual(), Some((RolloutPhase::Paused, 0)), &[]),
                "resume it first",
            ),
            (
                set(manual(), Some((RolloutPhase::Complete, 2)), &[]),
                "is complete",
            ),
            (set(manual(), Some((RolloutPhase::Failed, 1)), &[]), "is failed"),
            (
                set(manual(), Some((RolloutPhase::Progressing, 2)), &[]),
                "the last wave",
            ),
        ];
        for (s, expected) in cases {
            let error = steer(Action::Promote, (&s).into(), ID).unwrap_err();
            assert!(error.contains(expected), "{error} lacks {expected:?}");
        }
    }

    const STARTED: &str = "2026-11-25T16:00:05Z";
    const VALUE: &str = "app-2222222222@2026-11-25T16:00:05Z";

    fn override_window() -> Action {
        Action::OverrideWindow
    }

    /// `set` with its rollout started at [`STARTED`], held for `reason` when given.
    fn started(mut s: ConfigMapSet, reason: Option<&str>) -> ConfigMapSet {
        if let Some(r) = s.status.as_mut().and_then(|s| s.rollout.as_mut()) {
            r.started_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                STARTED.parse().unwrap(),
            ));
            r.reason = reason.map(str::to_string);
        }
        s
    }

    #[test]
    fn override_window_lets_the_rollout_under_way_through_and_nothing_else() {
        // The record is the webhook's: the plugin names no one, and clears an earlier record.
        let patch = Some(json!({"metadata": {"annotations": {
            "cmset.dev/window-override": VALUE,
            "cmset.dev/window-override-by": null,
            "cmset.dev/window-override-proof": null,
        }}}));
        // (phase, what the message says)
        let cases = [
            (
                RolloutPhase::Waiting,
                "let through the change windows: it was held by a change window (freeze) and goes on now",
            ),
            (RolloutPhase::Progressing, "no change window will hold it"),
            (
                RolloutPhase::Paused,
                "it is still paused: `kubectl cmset resume configmapset/app`",
            ),
            (
                RolloutPhase::AwaitingPromotion,
                "its next wave still awaits `kubectl cmset promote configmapset/app`",
            ),
        ];
        for (phase, says) in cases {
            let s = started(set(manual(), Some((phase, 0)), &[]), Some("freeze"));
            let done = steer(override_window(), (&s).into(), ID).unwrap();
            assert_eq!(done.patch, patch, "{phase:?}");
            assert_eq!(done.by, None);
            assert_eq!(done.value.as_deref(), Some(VALUE));
            assert!(done.message.contains(says), "{phase:?}: {}", done.message);
            // It promotes no wave.
            assert!(!done.patch.unwrap().to_string().contains(labels::PROMOTED));
        }
        // The value is the one the controller matches.
        let s = started(set(None, Some((RolloutPhase::Waiting, 1)), &[]), None);
        let value = steer(override_window(), (&s).into(), ID).unwrap().value.unwrap();
        let rollout = s.status.as_ref().unwrap().rollout.as_ref().unwrap();
        assert_eq!(Some(value), cmset_core::window_hold::override_value(rollout));
    }

    #[test]
    fn override_window_of_the_same_rollout_twice_writes_nothing() {
        let annotations = [
            (labels::WINDOW_OVERRIDE, VALUE),
            (labels::WINDOW_OVERRIDE_BY, "bo 2026-11-25T17:00:00Z"),
            (labels::WINDOW_OVERRIDE_PROOF, "cHJvb2Y="),
        ];
        let s = started(
            set(None, Some((RolloutPhase::Progressing, 1)), &annotations),
            None,
        );
        let again = steer(override_window(), (&s).into(), ID).unwrap();
        assert_eq!(again.patch, None);
        assert!(
            again
                .message
                .contains("already let through the change windows (by bo 2026-11-25T17:00:00Z)"),
            "{}",
            again.message
        );
        // A record without the webhook's proof (written by hand, or while cmset was down) is asked
        // for again.
        let s = started(
            set(None, Some((RolloutPhase::Progressing, 1)), &annotations[..2]),
            None,
        );
        assert!(steer(override_window(), (&s).into(), ID).unwrap().patch.is_some());
        // An override of an earlier rollout does not count: this one gets its own.
        let earlier = [(labels::WINDOW_OVERRIDE, "app-1111111111@2026-11-20T10:00:00Z")];
        let s = started(set(None, Some((RolloutPhase::Waiting, 1)), &earlier), None);
        assert!(steer(override_window(), (&s).into(), ID).unwrap().patch.is_some());
    }

    #[test]
    fn the_override_is_told_with_the_user_the_webhook_recorded() {
        let s = started(set(None, Some((RolloutPhase::Waiting, 1)), &[]), Some("freeze"));
        let asked = steer(override_window(), (&s).into(), ID).unwrap();
        let stored = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let done = recorded(
            asked.clone(),
            &stored(&[
                (labels::WINDOW_OVERRIDE, VALUE),
                (labels::WINDOW_OVERRIDE_BY, "ana@corp 2026-11-25T18:30:00Z"),
                (labels::WINDOW_OVERRIDE_PROOF, "cHJvb2Y="),
            ]),
        );
        assert_eq!(done.by.as_deref(), Some("ana@corp 2026-11-25T18:30:00Z"));
        assert!(
            done.message
                .ends_with("goes on now (recorded by cmset for ana@corp 2026-11-25T18:30:00Z)"),
            "{}",
            done.message
        );
        // No webhook saw the patch: stored, not recorded, and said so.
        let unrecorded = recorded(asked, &stored(&[(labels::WINDOW_OVERRIDE, VALUE)]));
        assert_eq!(unrecorded.by, None);
        assert_eq!(
            unrecorded.message,
            "configmapset/app: the override is stored, but cmset's admission webhook did not record it, so \
             it lets nothing through (is cmset running?); run this again once it is"
        );
    }

    #[test]
    fn override_window_says_why_there_is_nothing_to_let_through() {
        let immediate = Some(RolloutSpec {
            strategy: Strategy::Immediate,
            ..Default::default()
        });
        let cases = [
            (set(None, None, &[]), "no rollout under way"),
            (
                started(set(None, Some((RolloutPhase::Complete, 2)), &[]), None),
                "is complete: nothing for the change windows to let through",
            ),
            (
                started(set(None, Some((RolloutPhase::Failed, 1)), &[]), None),
                "is failed",
            ),
            (
                set(None, Some((RolloutPhase::Waiting, 0)), &[]),
                "no start time recorded yet",
            ),
        ];
        for (s, expected) in cases {
            let error = steer(override_window(), (&s).into(), ID).unwrap_err();
            assert!(error.contains(expected), "{error} lacks {expected:?}");
        }
        // An Immediate set held by a window has a rollout to let through.
        let held = started(set(immediate, Some((RolloutPhase::Waiting, 0)), &[]), None);
        assert!(
            steer(override_window(), (&held).into(), ID)
                .unwrap()
                .patch
                .is_some()
        );
    }
}
