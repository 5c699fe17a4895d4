//! `kubectl cmset pause|resume|promote`: what each writes on the set, decided from the set alone.
//!
//! Each is an annotation (never the spec, so a GitOps tool that owns the spec sees no drift), written
//! with a merge patch of the set's metadata: `cmset.dev/paused: "true"` holds the rollout,
//! `cmset.dev/promoted: <revision>/<wave>@<rollout>` lets the wave after that one open in that rollout
//! (named by its `startedAt`), and in no later rollout of the same revision. The controller reads
//! them on its next reconcile; the record stays in the API, so a restart changes nothing.

use cmset_api::{Promotion, RolloutPhase, labels};
use cmset_core::set::{SetRef, rollout_id};
use serde::Serialize;
use serde_json::{Value, json};

/// What the user asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Promote,
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
                message: if paused {
                    format!("{id} resumed: its rollout goes on where it stood")
                } else {
                    format!("{id} is not paused")
                },
            })
        }
        Action::Promote => promote(set, id),
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
        RolloutPhase::Progressing | RolloutPhase::AwaitingPromotion => {}
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
    let when = if rollout.phase == RolloutPhase::AwaitingPromotion {
        "now"
    } else {
        "once it is done and stable"
    };
    Ok(Steer {
        patch: Some(json!({"metadata": {"annotations": {labels::PROMOTED: value}}})),
        annotation: labels::PROMOTED.to_string(),
        value: Some(value),
        message: format!(
            "{id}: wave {} of {} promoted; wave {next} opens {when}",
            rollout.wave, rollout.revision
        ),
    })
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, RolloutSpec, RolloutStatus};

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
}
