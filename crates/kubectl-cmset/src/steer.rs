//! `kubectl cmset pause|resume|promote`: what each writes on the set, decided from the set alone.
//!
//! Each is an annotation (never the spec, so a GitOps tool that owns the spec sees no drift), written
//! with a merge patch of the set's metadata: `cmset.dev/paused: "true"` holds the rollout,
//! `cmset.dev/promoted: <revision>/<wave>@<rollout>` lets the wave after that one open in that rollout
//! (named by its `startedAt`), and in no later rollout of the same revision. The controller reads
//! them on its next reconcile; the record stays in the API, so a restart changes nothing.
//!
//! `promote --override-window` creates a `WindowOverride` (`windowoverrides.cmset.dev`) naming the
//! set (kind, name, uid) and the rollout under way (revision and start): the change windows let that
//! one rollout through, and nothing else (no wave is promoted, no later rollout is let through). The API
//! server decides who may: only ClusterRole `cmset-break-glass` grants creating one. Who did is not the
//! plugin's to say: cmset's admission webhook records it (`spec.requestedBy`, the user as the API
//! server authenticated them), and the plugin tells what was stored ([`recorded`]).

use cmset_api::overrides::NOT_RECORDED;
use cmset_api::{
    OverriddenKind, OverriddenRollout, OverriddenSet, Promotion, RolloutPhase, WindowOverride,
    WindowOverrideSpec, labels,
};
use cmset_core::set::{SetKind, SetRef, rollout_id};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

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
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Steer {
    /// The merge patch of the set's metadata; `None` when nothing needs writing.
    #[serde(skip)]
    pub patch: Option<Value>,
    /// The WindowOverride to create (`promote --override-window`).
    #[serde(skip)]
    pub create: Option<WindowOverride>,
    /// The annotation written (or removed) and its value.
    pub annotation: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Who asked, for an override of the windows: what cmset's webhook recorded in the WindowOverride
    /// (`spec.requestedBy`), or "not recorded".
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
                create: None,
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
                create: None,
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
        create: None,
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
    // The override names the rollout by its start: without one the controller could not match it.
    let Some(started_at) = rollout.started_at.clone() else {
        return Err(format!(
            "the rollout of {} has no start time recorded yet: try again in a moment",
            rollout.revision
        ));
    };
    let uid = set.uid();
    if uid.is_empty() {
        return Err(format!("{id} has no uid: it is not stored yet"));
    }
    let value = format!("{}@{}", rollout.revision, rollout_id(&started_at));
    let kind = match set.kind() {
        SetKind::ConfigMapSet => OverriddenKind::ConfigMapSet,
        SetKind::SecretSet => OverriddenKind::SecretSet,
    };
    let mut object = WindowOverride::new(
        &override_name(set.name(), kind, &uid, &value),
        WindowOverrideSpec {
            set: OverriddenSet {
                kind,
                name: set.name().to_string(),
                uid,
            },
            rollout: OverriddenRollout {
                revision: rollout.revision.clone(),
                started_at,
            },
            reason: None,
            // The webhook's to write: whatever is here is replaced with the authenticated user.
            requested_by: None,
        },
    );
    object.metadata.namespace = Some(set.namespace().to_string());
    // Owned by the set: deleted with it (the uid binds it anyway; this only tidies up).
    object.metadata.owner_references = Some(vec![OwnerReference {
        api_version: format!("{}/{}", cmset_api::GROUP, cmset_api::VERSION),
        kind: kind.as_str().to_string(),
        name: set.name().to_string(),
        uid: object.spec.set.uid.clone(),
        ..OwnerReference::default()
    }]);
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
        patch: None,
        create: Some(object),
        annotation: String::new(),
        value: Some(value),
        by: None,
        message: format!(
            "{id}: the rollout of {} is let through the change windows: {what}{still}",
            rollout.revision
        ),
    })
}

/// The name of the WindowOverride of one rollout of one set: the set's name and a digest of what it
/// names, so that asking twice finds the first instead of making a second.
pub fn override_name(set: &str, kind: OverriddenKind, uid: &str, rollout: &str) -> String {
    let digest = Sha256::digest(format!("{}\0{set}\0{uid}\0{rollout}", kind.as_str()).as_bytes());
    let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
    // A set's name is at most 253 characters, as is this one's.
    let prefix: String = set.chars().take(253 - 1 - hex.len()).collect();
    format!("{prefix}-{hex}")
}

/// `steer`, its WindowOverride created (or found there, `existed`), told with what cmset's admission
/// webhook recorded in it: the user the API server authenticated. Without a record the webhook did
/// not answer (it fails open while cmset is down): the override counts all the same, since the API
/// server let you create it, and its record says "not recorded".
pub fn recorded(mut steer: Steer, stored: &WindowOverride, existed: bool) -> Steer {
    let name = stored.metadata.name.clone().unwrap_or_default();
    let by = stored.spec.requested_by.clone().filter(|b| !b.is_empty());
    let id = steer
        .message
        .split_once(':')
        .map_or(steer.message.clone(), |(id, _)| id.to_string());
    steer.message = match (existed, &by) {
        (true, _) => format!(
            "{id}: the rollout {} is already let through the change windows by WindowOverride {name} \
             (requested by {})",
            steer.value.as_deref().unwrap_or_default(),
            by.as_deref().unwrap_or(NOT_RECORDED)
        ),
        (false, Some(user)) => format!(
            "{} (WindowOverride {name}, recorded by cmset for {user})",
            steer.message
        ),
        (false, None) => format!(
            "{} (WindowOverride {name}; who created it is not recorded: cmset's admission webhook did not \
             answer)",
            steer.message
        ),
    };
    steer.by = Some(by.unwrap_or_else(|| NOT_RECORDED.to_string()));
    steer.annotation = format!("windowoverride/{name}");
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
        set.metadata.namespace = Some("team".into());
        set.metadata.uid = Some("set-uid".into());
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
    fn override_window_creates_an_override_of_this_set_and_this_rollout_only() {
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
            // Nothing is written on the set: no annotation, no wave promoted.
            assert_eq!(done.patch, None, "{phase:?}");
            assert_eq!(done.by, None);
            assert_eq!(done.value.as_deref(), Some(VALUE));
            assert!(done.message.contains(says), "{phase:?}: {}", done.message);
            let object = serde_json::to_value(done.create.unwrap()).unwrap();
            assert_eq!(
                object,
                json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "WindowOverride",
                       "metadata": {"name": override_name("app", OverriddenKind::ConfigMapSet, "set-uid", VALUE),
                                    "namespace": "team",
                                    "ownerReferences": [{"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet",
                                                         "name": "app", "uid": "set-uid"}]},
                       "spec": {"set": {"kind": "ConfigMapSet", "name": "app", "uid": "set-uid"},
                                "rollout": {"revision": "app-2222222222", "startedAt": STARTED}}}),
                "the record is the webhook's: the plugin names no one"
            );
        }
    }

    #[test]
    fn override_names_are_stable_per_rollout_and_valid() {
        let name = override_name("app", OverriddenKind::ConfigMapSet, "set-uid", VALUE);
        assert_eq!(
            name,
            override_name("app", OverriddenKind::ConfigMapSet, "set-uid", VALUE)
        );
        assert!(
            name.starts_with("app-") && name.len() == "app-".len() + 10,
            "{name}"
        );
        for other in [
            override_name("app", OverriddenKind::SecretSet, "set-uid", VALUE),
            override_name("app", OverriddenKind::ConfigMapSet, "another-uid", VALUE),
            override_name(
                "app",
                OverriddenKind::ConfigMapSet,
                "set-uid",
                "app-2222222222@2026-11-25T17:00:00Z",
            ),
        ] {
            assert_ne!(name, other);
        }
        let long = "a".repeat(253);
        assert_eq!(
            override_name(&long, OverriddenKind::ConfigMapSet, "u", VALUE).len(),
            253
        );
    }

    fn stored(by: Option<&str>) -> WindowOverride {
        let s = started(set(None, Some((RolloutPhase::Waiting, 1)), &[]), Some("freeze"));
        let mut object = steer(override_window(), (&s).into(), ID).unwrap().create.unwrap();
        object.spec.requested_by = by.map(str::to_string);
        object
    }

    #[test]
    fn the_override_is_told_with_the_user_the_webhook_recorded() {
        let s = started(set(None, Some((RolloutPhase::Waiting, 1)), &[]), Some("freeze"));
        let asked = steer(override_window(), (&s).into(), ID).unwrap();
        let name = override_name("app", OverriddenKind::ConfigMapSet, "set-uid", VALUE);
        let done = recorded(asked.clone(), &stored(Some("ana@corp")), false);
        assert_eq!(done.by.as_deref(), Some("ana@corp"));
        assert_eq!(
            done.message,
            format!(
                "configmapset/app: the rollout of app-2222222222 is let through the change windows: it was \
                 held by a change window (freeze) and goes on now (WindowOverride {name}, recorded by cmset \
                 for ana@corp)"
            )
        );
        // The webhook did not answer: the override counts, and says who is not recorded.
        let unrecorded = recorded(asked.clone(), &stored(None), false);
        assert_eq!(unrecorded.by.as_deref(), Some("not recorded"));
        assert!(
            unrecorded.message.contains("is not recorded"),
            "{}",
            unrecorded.message
        );
        // Asked twice for the same rollout: the first override is found, and told.
        let again = recorded(asked, &stored(Some("bo")), true);
        assert_eq!(
            again.message,
            format!(
                "configmapset/app: the rollout {VALUE} is already let through the change windows by \
                 WindowOverride {name} (requested by bo)"
            )
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
                .create
                .is_some()
        );
    }
}
