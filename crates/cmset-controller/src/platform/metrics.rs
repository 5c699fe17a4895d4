//! Prometheus metrics. Labels take values from small fixed sets (controller names, error categories,
//! write operations, workload kinds, rollout phases, verdicts), never error strings. The one exception
//! is the per-set metrics of rollouts and analysis, labelled with the set (namespace, kind, name) and
//! its analysis templates and workloads: there are as many of them as sets under way, and every series
//! of a set is removed when the set goes ([`Metrics::observe_rollout`] with `None`,
//! [`Metrics::forget_analysis`]), and those of an analysis its spec no longer names or of a workload
//! gone from it at its next reconcile ([`Metrics::retain_analysis`]), so the count follows the cluster
//! instead of growing with its history.
//!
//! The process's own figures (`process_resident_memory_bytes`, ...) come from [`process`], read at each
//! scrape.

mod process;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub category: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabel {
    /// create_revision, patch_revision, delete_revision, write_status, patch_workload, publish_event.
    pub operation: &'static str,
}

/// One watch event as the index received it: the kind watched (`ConfigMapSet`, `ReplicaSet`, `Deployment`,
/// …) and what the event was (`apply` for an object added or changed, `delete`, `listed` for an object
/// of a list, as after a start or an expired watch).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchEventLabels {
    pub kind: &'static str,
    pub event: &'static str,
}

/// Why a replica's index does not know the cluster's ChangeWindows (`not_listed`, `forbidden`,
/// `list_failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WindowsUnknownLabels {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// patched, unchanged or error.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabel {
    /// started, completed, failed or rolled_back.
    pub event: &'static str,
}

/// One notification's fate. `service` and `trigger` are names from the operator's
/// `cmset-notifications` ConfigMap (or built in), so there are as many as the admin configured.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotificationLabels {
    pub service: String,
    pub trigger: String,
    /// delivered, failed (for good, after the retries) or dropped (the queue was full; nothing was
    /// recorded, so the set is observed again once the queue has room, see
    /// `notify::notifier`).
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// get, list, watch, create, patch, update or delete.
    pub verb: &'static str,
    /// The resource's plural (configmaps, secrets, ...).
    pub resource: &'static str,
}

/// A ConfigMapSet or SecretSet, as the labels `namespace`, `set_kind` and `set`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct SetLabels {
    pub namespace: String,
    /// `ConfigMapSet` or `SecretSet`.
    pub kind: &'static str,
    pub name: String,
}

impl EncodeLabelSet for SetLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        [
            ("namespace", self.namespace.as_str()),
            ("set_kind", self.kind),
            ("set", self.name.as_str()),
        ]
        .encode(encoder)
    }
}

/// Where a set's rollout stands, for [`Metrics::observe_rollout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolloutGauges {
    /// One of [`ROLLOUT_PHASES`].
    pub phase: &'static str,
    /// The wave in progress (the wave it failed in, once failed).
    pub wave: i64,
    /// When the wave in progress opened, in seconds since the epoch; `None` when no wave is open.
    pub wave_opened_at: Option<i64>,
    pub progress_deadline_seconds: i64,
}

/// Every phase a rollout reports (`RolloutPhase::as_str`): a set has a series for its current phase
/// only.
pub const ROLLOUT_PHASES: [&str; 6] = [
    "Progressing",
    "Paused",
    "AwaitingPromotion",
    "Waiting",
    "Complete",
    "Failed",
];

/// The verdicts of one analysis measurement.
pub const ANALYSIS_VERDICTS: [&str; 3] = ["passed", "failed", "inconclusive"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    #[prometheus(flatten)]
    pub set: SetLabels,
    /// One of [`ROLLOUT_PHASES`].
    pub phase: &'static str,
}

/// Where content was refused for failing `spec.validation`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ValidationLabels {
    #[prometheus(flatten)]
    pub set: SetLabels,
    /// `admission` (the webhook refused an apply) or `controller` (no revision was made).
    pub stage: &'static str,
}

/// A check of `spec.checks` that finished, and how.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabels {
    #[prometheus(flatten)]
    pub set: SetLabels,
    pub check: String,
    /// `passed` or `failed`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    #[prometheus(flatten)]
    pub set: SetLabels,
    pub template: String,
    /// One of [`ANALYSIS_VERDICTS`].
    pub verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MeasuredLabels {
    #[prometheus(flatten)]
    pub set: SetLabels,
    pub template: String,
    /// The workload measured; empty when the template runs once per wave.
    pub workload: String,
}

/// The (template, workload) pairs a set has analysis series for: what [`Metrics::forget_analysis`]
/// removes (a `Family` cannot be searched by part of its labels).
type AnalysisKeys = Arc<Mutex<HashMap<SetLabels, BTreeSet<(String, String)>>>>;

#[derive(Clone)]
pub struct Metrics {
    pub reconciles: Family<ControllerLabel, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabel, Histogram>,
    pub writes: Family<WriteLabel, Counter>,
    /// Writes the API server refused because the object had changed since it was read.
    pub write_conflicts: Family<WriteLabel, Counter>,
    /// Watch events received, by kind and event: what a change costs every replica to hear.
    pub watch_events: Family<WatchEventLabels, Counter>,
    /// This replica's scopes that do not know the cluster's ChangeWindows now, by cause: their sets'
    /// moves wait. Every replica reports its own (a standby's admission decides from its own view).
    pub change_windows_unknown: Family<WindowsUnknownLabels, Gauge>,
    pub revisions_created: Counter,
    pub revisions_pruned: Counter,
    pub validation_failures: Family<ValidationLabels, Counter>,
    /// How long each finished check Job ran, from its start to its end as the Job records them.
    pub check_duration: Family<CheckLabels, Histogram>,
    pub workloads_updated: Family<KindLabel, Counter>,
    pub workloads_rolled_back: Family<KindLabel, Counter>,
    pub rollouts: Family<RolloutLabel, Counter>,
    pub leader: Gauge,
    pub admissions: Family<ResultLabel, Counter>,
    /// Time from an AdmissionReview's arrival to its answer, as the handler sees it.
    pub admission_duration: Histogram,
    /// Requests the admission handler itself sent to the API server, by verb and resource.
    pub admission_requests: Family<RequestLabels, Counter>,
    // Written only through their methods (observe_rollout, analysis_measured, observe_budget), which
    // keep one phase per set and know which series to remove.
    /// 1 for each set's current rollout phase.
    rollout_phase: Family<PhaseLabels, Gauge>,
    /// How many rollouts a change window holds now (phase `Waiting`), and which.
    rollouts_held_by_window: Gauge,
    held_by_window: Arc<Mutex<std::collections::HashSet<SetLabels>>>,
    rollout_wave: Family<SetLabels, Gauge>,
    rollout_wave_opened: Family<SetLabels, Gauge>,
    rollout_progress_deadline: Family<SetLabels, Gauge>,
    analysis_measurements: Family<VerdictLabels, Counter>,
    analysis_value: Family<MeasuredLabels, Gauge<f64, AtomicU64>>,
    /// Held while the two analysis families change, so that a measurement and a `forget_analysis`
    /// of the same set cannot leave a series behind.
    analysis_keys: AnalysisKeys,
    /// Workloads moving at once at most (0: no cap).
    budget_limit: Gauge,
    /// Workloads moved and not yet healthy.
    budget_in_use: Gauge,
    /// Workloads waiting for the budget to move.
    budget_waiting: Gauge,
    pub notifications: Family<NotificationLabels, Counter>,
    /// Sets with a dropped notification that the notifier could not remember to observe again (it
    /// remembers that many already): each waits for its next reconcile.
    pub notification_retries_forgotten: Counter,
    /// Entries of the notification configuration refused (each is skipped; the rest works).
    pub notification_config_problems: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 14))),
            writes: Family::default(),
            write_conflicts: Family::default(),
            watch_events: Family::default(),
            change_windows_unknown: Family::default(),
            revisions_created: Counter::default(),
            revisions_pruned: Counter::default(),
            validation_failures: Family::default(),
            // 0.5 s to about 17 min: a check's deadline is at most 10 min.
            check_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.5, 2.0, 12))
            }),
            workloads_updated: Family::default(),
            workloads_rolled_back: Family::default(),
            rollouts: Family::default(),
            leader: Gauge::default(),
            admissions: Family::default(),
            // 50 µs to about 1.6 s: an answer from memory takes well under a millisecond.
            admission_duration: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            admission_requests: Family::default(),
            rollout_phase: Family::default(),
            rollouts_held_by_window: Gauge::default(),
            held_by_window: Arc::default(),
            rollout_wave: Family::default(),
            rollout_wave_opened: Family::default(),
            rollout_progress_deadline: Family::default(),
            analysis_measurements: Family::default(),
            analysis_value: Family::default(),
            analysis_keys: AnalysisKeys::default(),
            budget_limit: Gauge::default(),
            budget_in_use: Gauge::default(),
            budget_waiting: Gauge::default(),
            notifications: Family::default(),
            notification_retries_forgotten: Counter::default(),
            notification_config_problems: Gauge::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric, under `cmset_`, and the process and heap collectors, which name their own.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_collector(Box::new(process::ProcessCollector));
        registry.register_collector(Box::new(crate::platform::heap::HeapCollector));
        let r = registry.sub_registry_with_prefix("cmset");
        r.register("reconciles", "Reconciliations run", self.reconciles.clone());
        r.register(
            "reconcile_errors",
            "Reconciliations that failed, by error category",
            self.errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Time spent in one reconciliation",
            self.duration.clone(),
        );
        r.register(
            "api_writes",
            "Write requests sent to the API server, by operation",
            self.writes.clone(),
        );
        r.register(
            "api_write_conflicts",
            "Write requests the API server refused because the object changed since it was read (409 Conflict), by operation",
            self.write_conflicts.clone(),
        );
        r.register(
            "watch_events",
            "Watch events received, by kind and event (apply, delete, or listed for an object of a list)",
            self.watch_events.clone(),
        );
        r.register(
            "change_windows_unknown",
            "Scopes of this replica whose cluster ChangeWindows are unknown now (not listed yet, forbidden, or their list failed), by cause: every move of their sets waits",
            self.change_windows_unknown.clone(),
        );
        // Every cause is exposed from the start, so that an alert on it has a series to read.
        for cause in cmset_core::rollout::window_hold::UnknownCause::ALL {
            let _ = self.change_windows_unknown.get_or_create(&WindowsUnknownLabels {
                cause: cause.as_str(),
            });
        }
        r.register(
            "revisions_created",
            "Revision ConfigMaps created",
            self.revisions_created.clone(),
        );
        r.register(
            "revisions_pruned",
            "Old revision ConfigMaps deleted",
            self.revisions_pruned.clone(),
        );
        r.register(
            "validation_failures",
            "Contents of a set refused for failing its spec.validation, by stage: admission (an apply refused) or controller (no revision made)",
            self.validation_failures.clone(),
        );
        r.register(
            "check_duration_seconds",
            "Time a check Job of spec.checks ran, by set, check and result (passed or failed)",
            self.check_duration.clone(),
        );
        r.register(
            "workloads_updated",
            "Workloads whose references were moved",
            self.workloads_updated.clone(),
        );
        r.register(
            "workloads_rolled_back",
            "Workloads cmset moved back to their previous revision after a failed rollout",
            self.workloads_rolled_back.clone(),
        );
        r.register(
            "rollouts",
            "Tracked rollouts of a set's revision: started, completed, failed, and rolled_back (a failed rollout in which cmset rolled a workload back)",
            self.rollouts.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader lease",
            self.leader.clone(),
        );
        r.register(
            "admissions",
            "Workloads seen by the admission webhook, by result",
            self.admissions.clone(),
        );
        r.register(
            "admission_duration_seconds",
            "Time the admission webhook took to answer one AdmissionReview",
            self.admission_duration.clone(),
        );
        r.register(
            "admission_api_requests",
            "Requests the admission webhook sent to the API server while answering, by verb and resource",
            self.admission_requests.clone(),
        );
        r.register(
            "rollout_phase",
            "1 for the current phase of each set's rollout (Progressing, Paused, AwaitingPromotion, Complete or Failed)",
            self.rollout_phase.clone(),
        );
        r.register(
            "rollouts_held_by_window",
            "How many sets' rollouts a change window holds now (phase Waiting)",
            self.rollouts_held_by_window.clone(),
        );
        r.register(
            "rollout_wave",
            "The wave in progress of each set's rollout (the wave it failed in, once failed)",
            self.rollout_wave.clone(),
        );
        r.register(
            "rollout_wave_opened_timestamp_seconds",
            "When the wave in progress of each set's rollout opened, in seconds since the epoch",
            self.rollout_wave_opened.clone(),
        );
        r.register(
            "rollout_progress_deadline_seconds",
            "Each set's progressDeadlineSeconds: how long a moved workload has to become healthy",
            self.rollout_progress_deadline.clone(),
        );
        r.register(
            "analysis_measurements",
            "Analysis measurements taken, by set, template and verdict (passed, failed or inconclusive)",
            self.analysis_measurements.clone(),
        );
        r.register(
            "analysis_value",
            "The last value an analysis template measured, by set, template and workload (empty when the template runs once per wave)",
            self.analysis_value.clone(),
        );
        r.register(
            "budget_limit",
            "Workloads that may be moving at once across all sets (0: no cap)",
            self.budget_limit.clone(),
        );
        r.register(
            "budget_in_use",
            "Workloads moving: moved to a new revision and not yet healthy",
            self.budget_in_use.clone(),
        );
        r.register(
            "budget_waiting",
            "Workloads waiting for the budget before they move",
            self.budget_waiting.clone(),
        );
        r.register(
            "notifications",
            "Notifications about rollouts, by service, trigger and result",
            self.notifications.clone(),
        );
        r.register(
            "notification_retries_forgotten",
            "Sets with a dropped notification not remembered to be observed again (too many remembered already); each waits for its next reconcile",
            self.notification_retries_forgotten.clone(),
        );
        r.register(
            "notification_config_problems",
            "Entries of the cmset-notifications configuration refused",
            self.notification_config_problems.clone(),
        );
    }

    pub fn reconciled(&self, controller: &'static str, took: Duration) {
        self.reconciles
            .get_or_create(&ControllerLabel { controller })
            .inc();
        self.duration
            .get_or_create(&ControllerLabel { controller })
            .observe(took.as_secs_f64());
    }

    pub fn failed(&self, controller: &'static str, category: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { controller, category })
            .inc();
    }

    pub fn wrote(&self, operation: &'static str) {
        self.writes.get_or_create(&WriteLabel { operation }).inc();
    }

    pub fn conflicted(&self, operation: &'static str) {
        self.write_conflicts
            .get_or_create(&WriteLabel { operation })
            .inc();
    }

    /// Reports where `set`'s rollout stands; `None` (the set is gone, or has no rollout) removes every
    /// rollout series of the set.
    pub fn observe_rollout(&self, set: &SetLabels, rollout: Option<&RolloutGauges>) {
        let current = rollout.map(|r| r.phase);
        {
            let mut held = self.held_by_window.lock().unwrap_or_else(PoisonError::into_inner);
            let changed = if current == Some("Waiting") {
                held.insert(set.clone())
            } else {
                held.remove(set)
            };
            if changed {
                self.rollouts_held_by_window
                    .set(i64::try_from(held.len()).unwrap_or(i64::MAX));
            }
        }
        for phase in ROLLOUT_PHASES {
            if Some(phase) != current {
                self.rollout_phase.remove(&PhaseLabels {
                    set: set.clone(),
                    phase,
                });
            }
        }
        let Some(rollout) = rollout else {
            self.rollout_wave.remove(set);
            self.rollout_wave_opened.remove(set);
            self.rollout_progress_deadline.remove(set);
            return;
        };
        self.rollout_phase
            .get_or_create(&PhaseLabels {
                set: set.clone(),
                phase: rollout.phase,
            })
            .set(1);
        self.rollout_wave.get_or_create(set).set(rollout.wave);
        match rollout.wave_opened_at {
            Some(at) => {
                self.rollout_wave_opened.get_or_create(set).set(at);
            }
            None => {
                self.rollout_wave_opened.remove(set);
            }
        }
        self.rollout_progress_deadline
            .get_or_create(set)
            .set(rollout.progress_deadline_seconds);
    }

    /// Counts one measurement of `template` (on `workload`, or `""` when it runs once per wave) and
    /// keeps its value; a measurement without a value (an inconclusive query) removes the last one, so
    /// that a stale value does not pass for a fresh one.
    pub fn analysis_measured(
        &self,
        set: &SetLabels,
        template: &str,
        workload: &str,
        verdict: &'static str,
        value: Option<f64>,
    ) {
        let mut keys = self.analysis_keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.entry(set.clone())
            .or_default()
            .insert((template.to_string(), workload.to_string()));
        self.analysis_measurements
            .get_or_create(&VerdictLabels {
                set: set.clone(),
                template: template.to_string(),
                verdict,
            })
            .inc();
        let measured = MeasuredLabels {
            set: set.clone(),
            template: template.to_string(),
            workload: workload.to_string(),
        };
        match value {
            Some(v) => {
                self.analysis_value.get_or_create(&measured).set(v);
            }
            None => {
                self.analysis_value.remove(&measured);
            }
        }
    }

    /// Removes every analysis series of `set` (the set is gone, or its rollout no longer analyses).
    pub fn forget_analysis(&self, set: &SetLabels) {
        self.retain_analysis(set, |_| false, |_| false);
    }

    /// Removes the analysis series of `set` whose template `named` denies (its spec no longer names
    /// it), and the values of workloads `member` denies (deleted, or no longer reading the set); a
    /// template's measurement counts stay while it is named.
    pub fn retain_analysis(
        &self,
        set: &SetLabels,
        named: impl Fn(&str) -> bool,
        member: impl Fn(&str) -> bool,
    ) {
        let mut all = self.analysis_keys.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(held) = all.get_mut(set) else {
            return;
        };
        let gone = |(template, workload): &(String, String)| {
            !named(template) || (!workload.is_empty() && !member(workload))
        };
        let keys: BTreeSet<(String, String)> = held.iter().filter(|k| gone(k)).cloned().collect();
        held.retain(|k| !gone(k));
        if held.is_empty() {
            all.remove(set);
        }
        let templates: BTreeSet<&String> = keys
            .iter()
            .map(|(template, _)| template)
            .filter(|template| !named(template))
            .collect();
        for template in templates {
            for verdict in ANALYSIS_VERDICTS {
                self.analysis_measurements.remove(&VerdictLabels {
                    set: set.clone(),
                    template: template.clone(),
                    verdict,
                });
            }
        }
        for (template, workload) in keys {
            self.analysis_value.remove(&MeasuredLabels {
                set: set.clone(),
                template,
                workload,
            });
        }
    }

    /// Reports the budget of workloads moving at once: its cap (`None`: no cap, reported as 0), the
    /// workloads moving and those waiting for it.
    pub fn observe_budget(&self, limit: Option<u64>, in_use: u64, waiting: u64) {
        let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.budget_limit.set(limit.map_or(0, gauge));
        self.budget_in_use.set(gauge(in_use));
        self.budget_waiting.set(gauge(waiting));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str) -> SetLabels {
        SetLabels {
            namespace: "team-a".to_string(),
            kind: "ConfigMapSet",
            name: name.to_string(),
        }
    }

    /// The sample lines of a scrape whose name starts with `prefix`, sorted.
    fn samples(metrics: &Metrics, prefix: &str) -> Vec<String> {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    const PROGRESSING: RolloutGauges = RolloutGauges {
        phase: "Progressing",
        wave: 1,
        wave_opened_at: Some(1_700_000_000),
        progress_deadline_seconds: 600,
    };

    #[test]
    fn a_rollout_reports_its_current_phase_only_and_goes_with_its_set() {
        let metrics = Metrics::default();
        metrics.observe_rollout(&set("web"), Some(&PROGRESSING));
        let labels = r#"namespace="team-a",set_kind="ConfigMapSet",set="web""#;
        assert_eq!(
            samples(&metrics, "cmset_rollout_"),
            [
                format!("cmset_rollout_phase{{{labels},phase=\"Progressing\"}} 1"),
                format!("cmset_rollout_progress_deadline_seconds{{{labels}}} 600"),
                format!("cmset_rollout_wave_opened_timestamp_seconds{{{labels}}} 1700000000"),
                format!("cmset_rollout_wave{{{labels}}} 1"),
            ]
        );

        // The next phase replaces the last; a rollout with no open wave has no opening time.
        let awaiting = RolloutGauges {
            phase: "AwaitingPromotion",
            wave_opened_at: None,
            ..PROGRESSING
        };
        metrics.observe_rollout(&set("web"), Some(&awaiting));
        metrics.observe_rollout(&set("api"), Some(&PROGRESSING));
        let web = samples(&metrics, "cmset_rollout_")
            .into_iter()
            .filter(|l| l.contains(r#"set="web""#))
            .collect::<Vec<_>>();
        assert_eq!(
            web,
            [
                format!("cmset_rollout_phase{{{labels},phase=\"AwaitingPromotion\"}} 1"),
                format!("cmset_rollout_progress_deadline_seconds{{{labels}}} 600"),
                format!("cmset_rollout_wave{{{labels}}} 1"),
            ]
        );

        metrics.observe_rollout(&set("web"), None);
        let left = samples(&metrics, "cmset_rollout_");
        assert_eq!(left.len(), 4, "{left:?}");
        assert!(left.iter().all(|l| l.contains(r#"set="api""#)), "{left:?}");
    }

    #[test]
    fn rollouts_held_by_a_window_are_counted_until_they_go_on_or_their_set_goes() {
        let metrics = Metrics::default();
        let waiting = RolloutGauges {
            phase: "Waiting",
            ..PROGRESSING
        };
        let held = |m: &Metrics| samples(m, "cmset_rollouts_held_by_window");
        assert_eq!(held(&metrics), ["cmset_rollouts_held_by_window 0"]);
        metrics.observe_rollout(&set("web"), Some(&waiting));
        metrics.observe_rollout(&set("api"), Some(&waiting));
        metrics.observe_rollout(&set("api"), Some(&waiting));
        assert_eq!(
            held(&metrics),
            ["cmset_rollouts_held_by_window 2"],
            "each set once"
        );
        metrics.observe_rollout(&set("web"), Some(&PROGRESSING));
        assert_eq!(held(&metrics), ["cmset_rollouts_held_by_window 1"]);
        metrics.observe_rollout(&set("api"), None);
        assert_eq!(held(&metrics), ["cmset_rollouts_held_by_window 0"]);
    }

    #[test]
    fn analysis_counts_verdicts_keeps_the_last_value_and_is_forgotten_with_its_set() {
        let metrics = Metrics::default();
        metrics.analysis_measured(&set("web"), "error-rate", "frontend", "passed", Some(0.01));
        metrics.analysis_measured(&set("web"), "error-rate", "frontend", "failed", Some(0.2));
        metrics.analysis_measured(&set("web"), "smoke", "", "passed", Some(1.0));
        metrics.analysis_measured(&set("api"), "smoke", "", "passed", Some(1.0));
        let labels = r#"namespace="team-a",set_kind="ConfigMapSet",set="web""#;
        let web = |metrics: &Metrics| {
            samples(metrics, "cmset_analysis_")
                .into_iter()
                .filter(|l| l.contains(r#"set="web""#))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            web(&metrics),
            [
                format!(
                    "cmset_analysis_measurements_total{{{labels},template=\"error-rate\",verdict=\"failed\"}} 1"
                ),
                format!(
                    "cmset_analysis_measurements_total{{{labels},template=\"error-rate\",verdict=\"passed\"}} 1"
                ),
                format!(
                    "cmset_analysis_measurements_total{{{labels},template=\"smoke\",verdict=\"passed\"}} 1"
                ),
                format!("cmset_analysis_value{{{labels},template=\"error-rate\",workload=\"frontend\"}} 0.2"),
                format!("cmset_analysis_value{{{labels},template=\"smoke\",workload=\"\"}} 1.0"),
            ]
        );

        // A measurement without a value leaves no stale one behind.
        metrics.analysis_measured(&set("web"), "smoke", "", "inconclusive", None);
        assert!(
            !web(&metrics)
                .iter()
                .any(|l| l.starts_with("cmset_analysis_value") && l.contains("smoke")),
            "{:?}",
            web(&metrics)
        );

        metrics.forget_analysis(&set("web"));
        assert_eq!(web(&metrics), Vec::<String>::new());
        assert_eq!(
            samples(&metrics, "cmset_analysis_").len(),
            2,
            "the other set's stay"
        );
    }

    #[test]
    fn series_of_a_dropped_analysis_or_a_gone_workload_disappear() {
        let metrics = Metrics::default();
        let web = set("web");
        metrics.analysis_measured(&web, "error-rate", "frontend", "passed", Some(0.01));
        metrics.analysis_measured(&web, "error-rate", "backend", "passed", Some(0.02));
        metrics.analysis_measured(&web, "smoke", "", "passed", Some(1.0));
        metrics.analysis_measured(&set("api"), "smoke", "", "passed", Some(1.0));
        let labels = r#"namespace="team-a",set_kind="ConfigMapSet",set="web""#;

        // backend is deleted: its value goes; error-rate's counts stay (still named).
        metrics.retain_analysis(&web, |_| true, |w| w == "frontend");
        assert_eq!(
            samples(&metrics, "cmset_analysis_value")
                .into_iter()
                .filter(|l| l.contains(r#"set="web""#))
                .collect::<Vec<_>>(),
            [
                format!(
                    "cmset_analysis_value{{{labels},template=\"error-rate\",workload=\"frontend\"}} 0.01"
                ),
                format!("cmset_analysis_value{{{labels},template=\"smoke\",workload=\"\"}} 1.0"),
            ]
        );
        assert!(
            samples(&metrics, "cmset_analysis_measurements_total")
                .iter()
                .any(|l| l.contains(r#"set="web""#) && l.contains("error-rate")),
        );

        // The spec drops error-rate: every series of it goes, smoke's stay.
        metrics.retain_analysis(&web, |t| t == "smoke", |_| true);
        let web_lines: Vec<String> = samples(&metrics, "cmset_analysis_")
            .into_iter()
            .filter(|l| l.contains(r#"set="web""#))
            .collect();
        assert_eq!(
            web_lines,
            [
                format!(
                    "cmset_analysis_measurements_total{{{labels},template=\"smoke\",verdict=\"passed\"}} 1"
                ),
                format!("cmset_analysis_value{{{labels},template=\"smoke\",workload=\"\"}} 1.0"),
            ]
        );

        // No analysis named any more: nothing of web is left, the other set's stay.
        metrics.retain_analysis(&web, |_| false, |_| true);
        assert_eq!(samples(&metrics, "cmset_analysis_").len(), 2, "api's two series");
    }

    #[test]
    fn the_budget_reports_no_cap_as_zero() {
        let metrics = Metrics::default();
        metrics.observe_budget(Some(5), 3, 7);
        assert_eq!(
            samples(&metrics, "cmset_budget_"),
            [
                "cmset_budget_in_use 3",
                "cmset_budget_limit 5",
                "cmset_budget_waiting 7"
            ]
        );
        metrics.observe_budget(None, 0, 0);
        assert_eq!(
            samples(&metrics, "cmset_budget_"),
            [
                "cmset_budget_in_use 0",
                "cmset_budget_limit 0",
                "cmset_budget_waiting 0"
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn process_metrics_have_the_standard_names_without_the_prefix() {
        let metrics = Metrics::default();
        let names: Vec<String> = samples(&metrics, "process_")
            .iter()
            .filter_map(|l| l.split(' ').next().map(str::to_string))
            .collect();
        for name in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
    }
}
