//! Measures analysis runs off the reconcile path: a reconcile hands over the runs its plan found due
//! (queries the planner rendered, never text from a status), and returns at once. Each run is queried
//! in a task of its own, at most `--analysis-concurrency` at a time, each within the Prometheus
//! client's timeout; a run already being measured is not sent again. An answer is kept in memory,
//! keyed by set and run, and the set is asked to reconcile: its next plan takes the answer (see
//! [`crate::reconcile::analysis_io`]). So a Prometheus that is slow or unreachable holds no reconcile, and no
//! other set's revision or rollback waits for it.
//!
//! Memory stays bounded: a set keeps at most one answer per run its plan wants, the answers its next
//! plan does not want (its rollout moved on, its spec changed) are dropped then, and everything of a
//! set goes when it is deleted or stops asking for analysis. Answers live in this process only: a
//! replica that takes the lease measures again what was due.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cmset_api::{AnalysisRunStatus, RolloutStatus};
use cmset_core::analysis::QueryOutcome;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::sync::Semaphore;
use tracing::debug;

use crate::engine::context::Clock;
use crate::engine::index::{Index, SetId};
use crate::reconcile::prometheus::Prometheus;

/// How many queries may be in flight at once by default (`--analysis-concurrency`).
pub const DEFAULT_CONCURRENCY: usize = 8;

/// One run of one rollout, as the planner rendered it: what a measurement is kept under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RunKey {
    /// The rollout's revision, and when it started: a run of another rollout is another run, even
    /// with the same query.
    pub revision: String,
    pub started_at: Option<String>,
    pub template: String,
    pub workload_kind: Option<String>,
    pub workload: Option<String>,
    pub wave: i32,
    pub query: String,
}

impl RunKey {
    pub fn of(rollout: &RolloutStatus, run: &AnalysisRunStatus) -> Self {
        Self {
            revision: rollout.revision.clone(),
            started_at: rollout.started_at.as_ref().map(|t| t.0.to_string()),
            template: run.template.clone(),
            workload_kind: run.workload_kind.clone(),
            workload: run.workload.clone(),
            wave: run.wave,
            query: run.query.clone(),
        }
    }
}

/// A measurement taken, waiting for its set's next plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    pub run: RunKey,
    pub outcome: QueryOutcome,
    /// When the query was sent (after its turn came).
    pub sent_at: Time,
    /// When the answer came: the time the measurement counts as taken.
    pub at: Time,
}

#[derive(Default)]
struct State {
    in_flight: HashMap<SetId, HashSet<RunKey>>,
    finished: HashMap<SetId, HashMap<RunKey, Finished>>,
}

/// See the module's documentation. One per leading scope.
pub struct Measurer {
    prometheus: Arc<Prometheus>,
    turns: Arc<Semaphore>,
    /// Asked to reconcile a set whose measurement came.
    index: Arc<Index>,
    clock: Clock,
    state: Mutex<State>,
}

impl Measurer {
    /// A measurer asking `prometheus`, at most `concurrency` queries at once (at least one).
    pub fn new(
        prometheus: Arc<Prometheus>,
        concurrency: usize,
        index: Arc<Index>,
        clock: Clock,
    ) -> Arc<Self> {
        Arc::new(Self {
            prometheus,
            turns: Arc::new(Semaphore::new(concurrency.max(1))),
            index,
            clock,
            state: Mutex::default(),
        })
    }

    /// The longest one query takes, connecting included.
    pub fn timeout(&self) -> Duration {
        self.prometheus.timeout()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts measuring `runs` of set `set`, each unless it is being measured already. Returns at once.
    pub fn request(self: &Arc<Self>, set: &SetId, runs: impl IntoIterator<Item = RunKey>) {
        let mut state = self.state();
        for run in runs {
            let in_flight = state.in_flight.entry(set.clone()).or_default();
            if !in_flight.insert(run.clone()) {
                continue;
            }
            debug!(set = ?set, template = %run.template, workload = ?run.workload, "analysis query handed over");
            tokio::spawn(self.clone().measure(set.clone(), run));
        }
    }

    async fn measure(self: Arc<Self>, set: SetId, run: RunKey) {
        let Ok(_turn) = self.turns.clone().acquire_owned().await else {
            return;
        };
        let sent_at = (self.clock)();
        let outcome = self.prometheus.query(&run.query).await;
        let at = (self.clock)();
        {
            let mut state = self.state();
            // Forgotten meanwhile (the set deleted, or no longer asking for analysis): dropped.
            let wanted = state
                .in_flight
                .get_mut(&set)
                .is_some_and(|runs| runs.remove(&run));
            if state.in_flight.get(&set).is_some_and(HashSet::is_empty) {
                state.in_flight.remove(&set);
            }
            if !wanted {
                return;
            }
            let finished = Finished {
                run: run.clone(),
                outcome,
                sent_at,
                at,
            };
            state
                .finished
                .entry(set.clone())
                .or_default()
                .insert(run, finished);
        }
        self.index.remind_set(&set);
    }

    /// The measurements of set `set` taken and not yet dropped.
    pub fn finished(&self, set: &SetId) -> Vec<Finished> {
        let state = self.state();
        state
            .finished
            .get(set)
            .map(|f| f.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Keeps of set `set`'s measurements only those `keep` wants.
    pub fn keep(&self, set: &SetId, keep: impl Fn(&Finished) -> bool) {
        let mut state = self.state();
        if let Some(finished) = state.finished.get_mut(set) {
            finished.retain(|_, f| keep(f));
            if finished.is_empty() {
                state.finished.remove(set);
            }
        }
    }

    /// Forgets everything of set `set`: measurements taken, and those under way (their answers are
    /// dropped when they come).
    pub fn forget(&self, set: &SetId) {
        let mut state = self.state();
        state.finished.remove(set);
        state.in_flight.remove(set);
    }

    /// Runs being measured now (queued for a turn included), and measurements kept: for tests.
    pub fn sizes(&self) -> (usize, usize) {
        let state = self.state();
        (
            state.in_flight.values().map(HashSet::len).sum(),
            state.finished.values().map(HashMap::len).sum(),
        )
    }
}
