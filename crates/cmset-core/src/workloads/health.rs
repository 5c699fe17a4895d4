//! Whether a workload's rollout is complete and healthy, read from its status the way `kubectl rollout
//! status` reads it, and its rollout wave, read from its label.
//!
//! The I/O layer copies the few status fields each kind needs into a [`Progress`]; everything else is
//! decided here, so each rule can be tested from literal numbers.

use cmset_api::labels;
use serde_json::Value;

use crate::workloads::kinds::HealthRule;

/// The status fields of one workload that its health is read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    Deployment {
        generation: i64,
        observed_generation: i64,
        /// `spec.replicas` (1 when left out).
        replicas: i32,
        /// `status.replicas`: pods of every ReplicaSet, old ones included.
        total: i32,
        updated: i32,
        available: i32,
        /// The `Progressing` condition says `ProgressDeadlineExceeded`.
        deadline_exceeded: bool,
    },
    StatefulSet {
        generation: i64,
        observed_generation: i64,
        /// `spec.replicas` (1 when left out).
        replicas: i32,
        /// The rolling update's partition: ordinals below it keep the old revision.
        partition: i32,
        /// `updateStrategy: OnDelete`: pods take a new template only when someone deletes them.
        on_delete: bool,
        updated: i32,
        ready: i32,
        current_revision: Option<String>,
        update_revision: Option<String>,
    },
    DaemonSet {
        generation: i64,
        observed_generation: i64,
        desired: i32,
        /// `updateStrategy: OnDelete`.
        on_delete: bool,
        updated: i32,
        available: i32,
    },
    /// An Argo Rollouts `Rollout`: its controller sums its rollout up in `status.phase`.
    ArgoRollout {
        generation: i64,
        /// `status.observedGeneration` (Argo writes it as a string); `None` when absent or not a number.
        observed_generation: Option<i64>,
        phase: Option<String>,
        message: Option<String>,
    },
    /// A declared kind, read by the conventions most controllers follow.
    Conditions {
        generation: i64,
        observed_generation: Option<i64>,
        /// The `Ready` condition's status, else the `Available` one's: `None` when it reports neither.
        ready: Option<bool>,
    },
    /// A kind with nothing to roll out (a CronJob): the move is the whole change.
    Moved,
}

/// How a workload's rollout stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Health {
    /// Its current template is rolled out and every pod is available.
    Healthy,
    /// Still rolling out, or not every pod is available (or there is no status yet).
    #[default]
    Progressing,
    /// It reported that it cannot progress.
    Failed(String),
}

impl Health {
    pub fn is_healthy(&self) -> bool {
        *self == Self::Healthy
    }
}

/// The health of a workload with this status, by the rules of `kubectl rollout status` for its kind.
///
/// `kubectl rollout status` refuses an `OnDelete` StatefulSet or DaemonSet: its pods take a new
/// template only when deleted by hand, which cmset does not wait for. Such a workload counts as healthy
/// once its controller has seen the change and its pods are ready, so that it neither holds later waves
/// nor fails every rollout at the deadline.
pub fn health(progress: &Progress) -> Health {
    let complete = match *progress {
        Progress::Deployment {
            generation,
            observed_generation,
            replicas,
            total,
            updated,
            available,
            deadline_exceeded,
        } => {
            if observed_generation < generation {
                return Health::Progressing;
            }
            // Only a condition about the current template counts, which the generation check ensures.
            if deadline_exceeded {
                return Health::Failed(
                    "reported ProgressDeadlineExceeded (its Progressing condition)".to_string(),
                );
            }
            updated >= replicas && total <= updated && available >= updated
        }
        Progress::StatefulSet {
            generation,
            observed_generation,
            replicas,
            partition,
            on_delete,
            updated,
            ready,
            ref current_revision,
            ref update_revision,
        } => {
            if observed_generation < generation || observed_generation == 0 {
                return Health::Progressing;
            }
            let all_ready = ready >= replicas;
            if on_delete {
                all_ready
            } else if partition > 0 {
                // A partitioned update is complete once the ordinals above the partition run it.
                all_ready && updated >= (replicas - partition).max(0)
            } else {
                all_ready && current_revision.is_some() && current_revision == update_revision
            }
        }
        Progress::DaemonSet {
            generation,
            observed_generation,
            desired,
            on_delete,
            updated,
            available,
        } => observed_generation >= generation && (on_delete || updated >= desired) && available >= desired,
        Progress::ArgoRollout {
            generation,
            observed_generation,
            ref phase,
            ref message,
        } => {
            if observed_generation.is_some_and(|o| o < generation) {
                return Health::Progressing;
            }
            match phase.as_deref() {
                Some("Healthy") => true,
                Some("Degraded") => {
                    let why = message
                        .as_deref()
                        .filter(|m| !m.is_empty())
                        .unwrap_or("no message");
                    return Health::Failed(format!("reported phase Degraded ({why})"));
                }
                // Progressing, Paused (a step or a person paused it), or no status yet.
                _ => false,
            }
        }
        Progress::Conditions {
            generation,
            observed_generation,
            ready,
        } => observed_generation.is_none_or(|o| o >= generation) && ready.unwrap_or(true),
        Progress::Moved => true,
    };
    if complete {
        Health::Healthy
    } else {
        Health::Progressing
    }
}

/// The status fields `rule` reads, from a workload of `generation` whose spec and status are `object`
/// (the API server's JSON form; its metadata is not read).
pub fn progress(rule: HealthRule, generation: i64, object: &Value) -> Progress {
    let int = |pointer: &str| object.pointer(pointer).and_then(Value::as_i64);
    let int32 = |pointer: &str, default: i32| {
        int(pointer)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(default)
    };
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let on_delete = || text("/spec/updateStrategy/type").as_deref() == Some("OnDelete");
    match rule {
        HealthRule::Deployment => Progress::Deployment {
            generation,
            observed_generation: int("/status/observedGeneration").unwrap_or(0),
            replicas: int32("/spec/replicas", 1),
            total: int32("/status/replicas", 0),
            updated: int32("/status/updatedReplicas", 0),
            available: int32("/status/availableReplicas", 0),
            deadline_exceeded: condition(object, "Progressing")
                .is_some_and(|c| c.get("reason").and_then(Value::as_str) == Some("ProgressDeadlineExceeded")),
        },
        HealthRule::StatefulSet => Progress::StatefulSet {
            generation,
            observed_generation: int("/status/observedGeneration").unwrap_or(0),
            replicas: int32("/spec/replicas", 1),
            partition: int32("/spec/updateStrategy/rollingUpdate/partition", 0),
            on_delete: on_delete(),
            updated: int32("/status/updatedReplicas", 0),
            ready: int32("/status/readyReplicas", 0),
            current_revision: text("/status/currentRevision"),
            update_revision: text("/status/updateRevision"),
        },
        HealthRule::DaemonSet => Progress::DaemonSet {
            generation,
            observed_generation: int("/status/observedGeneration").unwrap_or(0),
            desired: int32("/status/desiredNumberScheduled", 0),
            on_delete: on_delete(),
            updated: int32("/status/updatedNumberScheduled", 0),
            available: int32("/status/numberAvailable", 0),
        },
        HealthRule::ArgoRollout => Progress::ArgoRollout {
            generation,
            observed_generation: observed_generation(object),
            phase: text("/status/phase"),
            message: text("/status/message"),
        },
        HealthRule::Conditions => Progress::Conditions {
            generation,
            observed_generation: observed_generation(object),
            ready: ["Ready", "Available"].into_iter().find_map(|type_| {
                let status = condition(object, type_)?.get("status")?.as_str()?;
                Some(status == "True")
            }),
        },
        HealthRule::Moved => Progress::Moved,
    }
}

/// The fields of a workload's body that `rule` reads (JSON pointers; `/status/conditions` whole): what
/// a slim copy of the object keeps for its health (see [`crate::workloads::slim::workload_body`]).
pub fn fields(rule: HealthRule) -> &'static [&'static str] {
    match rule {
        HealthRule::Deployment => &[
            "/spec/replicas",
            "/status/observedGeneration",
            "/status/replicas",
            "/status/updatedReplicas",
            "/status/availableReplicas",
            "/status/conditions",
        ],
        HealthRule::StatefulSet => &[
            "/spec/replicas",
            "/spec/updateStrategy/type",
            "/spec/updateStrategy/rollingUpdate/partition",
            "/status/observedGeneration",
            "/status/updatedReplicas",
            "/status/readyReplicas",
            "/status/currentRevision",
            "/status/updateRevision",
        ],
        HealthRule::DaemonSet => &[
            "/spec/updateStrategy/type",
            "/status/observedGeneration",
            "/status/desiredNumberScheduled",
            "/status/updatedNumberScheduled",
            "/status/numberAvailable",
        ],
        HealthRule::ArgoRollout => &["/status/observedGeneration", "/status/phase", "/status/message"],
        HealthRule::Conditions => &["/status/observedGeneration", "/status/conditions"],
        HealthRule::Moved => &[],
    }
}

/// `status.observedGeneration`, as a number or a string holding one (Argo Rollouts writes a string).
fn observed_generation(object: &Value) -> Option<i64> {
    match object.pointer("/status/observedGeneration")? {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The status condition of `type_`, if reported.
fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
}

/// A workload's rollout wave, from its `cmset.dev/wave` label.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wave {
    Number(i32),
    /// The label is not a number from 0 to [`labels::MAX_WAVE`]: the text it holds.
    Invalid(String),
}

impl Default for Wave {
    fn default() -> Self {
        Self::Number(0)
    }
}

impl Wave {
    /// The wave a label value gives; no label means wave 0.
    pub fn parse(label: Option<&str>) -> Self {
        let Some(text) = label else {
            return Self::Number(0);
        };
        match text.parse::<i32>() {
            Ok(n) if (0..=labels::MAX_WAVE).contains(&n) && !text.starts_with('+') => Self::Number(n),
            _ => Self::Invalid(text.to_string()),
        }
    }

    pub fn number(&self) -> Option<i32> {
        match self {
            Self::Number(n) => Some(*n),
            Self::Invalid(_) => None,
        }
    }

    /// Why the label cannot be used, for the workload's status.
    pub fn problem(&self) -> Option<String> {
        match self {
            Self::Number(_) => None,
            Self::Invalid(text) => Some(format!(
                "label {} is {text:?}, not a whole number from 0 to {}; held where it is until it is fixed",
                labels::WAVE,
                labels::MAX_WAVE
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(
        generation: i64,
        observed: i64,
        replicas: i32,
        total: i32,
        updated: i32,
        available: i32,
    ) -> Progress {
        Progress::Deployment {
            generation,
            observed_generation: observed,
            replicas,
            total,
            updated,
            available,
            deadline_exceeded: false,
        }
    }

    #[test]
    fn deployment_health_follows_kubectl_rollout_status() {
        let cases = [
            // (progress, expected, why)
            (
                deployment(2, 1, 3, 3, 3, 3),
                Health::Progressing,
                "generation not observed yet",
            ),
            (
                deployment(2, 2, 3, 3, 1, 3),
                Health::Progressing,
                "not every replica updated",
            ),
            (
                deployment(2, 2, 3, 4, 3, 3),
                Health::Progressing,
                "an old replica still terminating",
            ),
            (
                deployment(2, 2, 3, 3, 3, 2),
                Health::Progressing,
                "an updated replica not available",
            ),
            (
                deployment(2, 2, 3, 3, 3, 3),
                Health::Healthy,
                "all updated and available",
            ),
            (deployment(2, 2, 0, 0, 0, 0), Health::Healthy, "scaled to zero"),
        ];
        for (progress, expected, why) in cases {
            assert_eq!(health(&progress), expected, "{why}");
        }
    }

    #[test]
    fn a_deployment_past_its_own_deadline_fails_but_only_for_its_current_template() {
        let mut progress = deployment(2, 2, 3, 3, 3, 0);
        if let Progress::Deployment {
            deadline_exceeded, ..
        } = &mut progress
        {
            *deadline_exceeded = true;
        }
        assert!(matches!(health(&progress), Health::Failed(_)));
        if let Progress::Deployment { generation, .. } = &mut progress {
            *generation = 3;
        }
        assert_eq!(
            health(&progress),
            Health::Progressing,
            "the condition is about an older template"
        );
    }

    fn stateful_set(partition: i32, updated: i32, ready: i32, current: &str, update: &str) -> Progress {
        Progress::StatefulSet {
            generation: 4,
            observed_generation: 4,
            replicas: 3,
            partition,
            on_delete: false,
            updated,
            ready,
            current_revision: Some(current.to_string()),
            update_revision: Some(update.to_string()),
        }
    }

    #[test]
    fn stateful_set_health_needs_the_update_revision_ready_everywhere() {
        assert_eq!(health(&stateful_set(0, 3, 3, "web-2", "web-2")), Health::Healthy);
        assert_eq!(
            health(&stateful_set(0, 3, 2, "web-2", "web-2")),
            Health::Progressing
        );
        assert_eq!(
            health(&stateful_set(0, 2, 3, "web-1", "web-2")),
            Health::Progressing
        );
        assert_eq!(
            health(&stateful_set(2, 1, 3, "web-1", "web-2")),
            Health::Healthy,
            "partitioned"
        );
        assert_eq!(
            health(&stateful_set(2, 0, 3, "web-1", "web-2")),
            Health::Progressing
        );
        let unobserved = Progress::StatefulSet {
            generation: 1,
            observed_generation: 0,
            replicas: 0,
            partition: 0,
            on_delete: false,
            updated: 0,
            ready: 0,
            current_revision: None,
            update_revision: None,
        };
        assert_eq!(health(&unobserved), Health::Progressing);
    }

    #[test]
    fn on_delete_workloads_are_healthy_once_seen_and_ready_since_nothing_updates_their_pods() {
        let sts = |observed, ready| Progress::StatefulSet {
            generation: 4,
            observed_generation: observed,
            replicas: 3,
            partition: 0,
            on_delete: true,
            updated: 0,
            ready,
            current_revision: Some("db-1".into()),
            update_revision: Some("db-2".into()),
        };
        assert_eq!(health(&sts(4, 3)), Health::Healthy);
        assert_eq!(health(&sts(3, 3)), Health::Progressing, "change not seen yet");
        assert_eq!(health(&sts(4, 2)), Health::Progressing, "a pod not ready");
        let ds = |observed, available| Progress::DaemonSet {
            generation: 2,
            observed_generation: observed,
            desired: 2,
            on_delete: true,
            updated: 0,
            available,
        };
        assert_eq!(health(&ds(2, 2)), Health::Healthy);
        assert_eq!(health(&ds(1, 2)), Health::Progressing);
        assert_eq!(health(&ds(2, 1)), Health::Progressing);
    }

    #[test]
    fn daemon_set_health_needs_every_scheduled_pod_updated_and_available() {
        let ds = |observed, desired, updated, available| Progress::DaemonSet {
            generation: 2,
            observed_generation: observed,
            desired,
            on_delete: false,
            updated,
            available,
        };
        assert_eq!(health(&ds(2, 2, 2, 2)), Health::Healthy);
        assert_eq!(health(&ds(1, 2, 2, 2)), Health::Progressing);
        assert_eq!(health(&ds(2, 2, 1, 2)), Health::Progressing);
        assert_eq!(health(&ds(2, 2, 2, 1)), Health::Progressing);
    }

    #[test]
    fn each_rule_reads_its_kind_s_status_fields_from_json() {
        use serde_json::json;
        let deployment = json!({
            "spec": {"replicas": 3},
            "status": {"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3, "availableReplicas": 3,
                       "conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}]}
        });
        assert_eq!(
            progress(HealthRule::Deployment, 4, &deployment),
            Progress::Deployment {
                generation: 4,
                observed_generation: 4,
                replicas: 3,
                total: 3,
                updated: 3,
                available: 3,
                deadline_exceeded: true,
            }
        );
        let sts = json!({
            "spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}},
            "status": {"observedGeneration": 2, "readyReplicas": 1, "updatedReplicas": 0,
                       "currentRevision": "db-1", "updateRevision": "db-2"}
        });
        let Progress::StatefulSet {
            replicas,
            partition,
            on_delete,
            ref update_revision,
            ..
        } = progress(HealthRule::StatefulSet, 2, &sts)
        else {
            panic!("a StatefulSet's progress")
        };
        assert_eq!(
            (replicas, partition, on_delete),
            (1, 1, false),
            "replicas default to 1"
        );
        assert_eq!(update_revision.as_deref(), Some("db-2"));
        let ds = json!({"spec": {"updateStrategy": {"type": "OnDelete"}},
                        "status": {"desiredNumberScheduled": 2, "numberAvailable": 2}});
        assert!(matches!(
            progress(HealthRule::DaemonSet, 1, &ds),
            Progress::DaemonSet {
                on_delete: true,
                desired: 2,
                available: 2,
                observed_generation: 0,
                ..
            }
        ));
        assert_eq!(progress(HealthRule::Moved, 9, &json!({})), Progress::Moved);
    }

    #[test]
    fn a_rollout_is_healthy_or_failed_by_its_phase_for_the_generation_it_observed() {
        use serde_json::json;
        let rollout = |observed: Value, phase: &str| {
            health(&progress(
                HealthRule::ArgoRollout,
                5,
                &json!({"status": {"observedGeneration": observed, "phase": phase, "message": "canary failed"}}),
            ))
        };
        let cases = [
            (json!("5"), "Healthy", Health::Healthy, "observed, healthy"),
            (json!(5), "Healthy", Health::Healthy, "a number is read too"),
            (
                json!("4"),
                "Healthy",
                Health::Progressing,
                "the phase is about an older spec",
            ),
            (json!("5"), "Progressing", Health::Progressing, "still rolling"),
            (
                json!("5"),
                "Paused",
                Health::Progressing,
                "paused at a step, or by someone",
            ),
            (
                json!(null),
                "Healthy",
                Health::Healthy,
                "no observedGeneration: the phase is all there is",
            ),
        ];
        for (observed, phase, expected, why) in cases {
            assert_eq!(rollout(observed, phase), expected, "{why}");
        }
        assert!(matches!(rollout(json!("5"), "Degraded"), Health::Failed(m) if m.contains("canary failed")));
        assert_eq!(
            rollout(json!("4"), "Degraded"),
            Health::Progressing,
            "an older spec's failure"
        );
    }

    #[test]
    fn a_declared_kind_follows_observed_generation_and_ready_or_available_else_moved_is_done() {
        use serde_json::json;
        let declared =
            |status: Value| health(&progress(HealthRule::Conditions, 3, &json!({ "status": status })));
        let cond = |type_: &str, status: &str| json!({"type": type_, "status": status});
        let cases = [
            (json!(null), Health::Healthy, "no status at all: moved is done"),
            (
                json!({"observedGeneration": 2}),
                Health::Progressing,
                "not observed yet",
            ),
            (
                json!({"observedGeneration": 3}),
                Health::Healthy,
                "observed, no conditions",
            ),
            (
                json!({"observedGeneration": 3, "conditions": [cond("Ready", "False")]}),
                Health::Progressing,
                "not ready",
            ),
            (
                json!({"observedGeneration": 3, "conditions": [cond("Ready", "True")]}),
                Health::Healthy,
                "ready",
            ),
            (
                json!({"conditions": [cond("Available", "False")]}),
                Health::Progressing,
                "Available when no Ready",
            ),
            (
                json!({"conditions": [cond("Available", "False"), cond("Ready", "True")]}),
                Health::Healthy,
                "Ready first",
            ),
        ];
        for (status, expected, why) in cases {
            assert_eq!(declared(status), expected, "{why}");
        }
    }

    #[test]
    fn wave_labels() {
        assert_eq!(Wave::parse(None), Wave::Number(0));
        assert_eq!(Wave::parse(Some("0")), Wave::Number(0));
        assert_eq!(Wave::parse(Some("3")), Wave::Number(3));
        assert_eq!(Wave::parse(Some("1000")), Wave::Number(1000));
        for bad in ["-1", "1001", "one", "", "+1", "1.5", " 1"] {
            let wave = Wave::parse(Some(bad));
            assert_eq!(wave, Wave::Invalid(bad.to_string()), "{bad:?}");
            assert!(wave.problem().unwrap().contains(labels::WAVE));
        }
    }
}
