//! Prometheus metrics. Every label takes values from a small fixed set (controller names, error
//! categories, write operations, workload kinds), never object names or error strings.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// get, list, watch, create, patch, update or delete.
    pub verb: &'static str,
    /// The resource's plural (configmaps, secrets, ...).
    pub resource: &'static str,
}

#[derive(Clone)]
pub struct Metrics {
    pub reconciles: Family<ControllerLabel, Counter>,
    pub errors: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabel, Histogram>,
    pub writes: Family<WriteLabel, Counter>,
    pub revisions_created: Counter,
    pub revisions_pruned: Counter,
    pub workloads_updated: Family<KindLabel, Counter>,
    pub workloads_rolled_back: Family<KindLabel, Counter>,
    pub rollouts: Family<RolloutLabel, Counter>,
    pub leader: Gauge,
    pub admissions: Family<ResultLabel, Counter>,
    /// Time from an AdmissionReview's arrival to its answer, as the handler sees it.
    pub admission_duration: Histogram,
    /// Requests the admission handler itself sent to the API server, by verb and resource.
    pub admission_requests: Family<RequestLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 14))),
            writes: Family::default(),
            revisions_created: Counter::default(),
            revisions_pruned: Counter::default(),
            workloads_updated: Family::default(),
            workloads_rolled_back: Family::default(),
            rollouts: Family::default(),
            leader: Gauge::default(),
            admissions: Family::default(),
            // 50 µs to about 1.6 s: an answer from memory takes well under a millisecond.
            admission_duration: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            admission_requests: Family::default(),
        }
    }
}

impl Metrics {
    pub fn register(&self, registry: &mut Registry) {
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
}
