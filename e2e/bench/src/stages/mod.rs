//! The stages of a run. Each returns its figures; a wait that runs out becomes a failed figure (a
//! count of what did not converge, and a line in `failures`), never a hang. One file per stage, and
//! the pieces they share (objects, meter, settle); what every stage shares ([`Ctx`]) is here.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmset_api::ConfigMapSet;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::cluster::{
    self, RequestCounts, Result, Tracker, Writer, bounded, create, deployment_name, patch_set, revision_name,
    set_name,
};
use crate::install::{Configuration, Install, role};
use crate::metrics::Admission;
use crate::operator::{Launch, cpu_of};
use crate::report::{
    Burst, Churn, Convergence, Cost, Failover, Floor, Leak, LeakReplica, MemoryFigures, Restart, Writes,
    latency,
};

mod burst;
mod churn;
mod convergence;
mod failover;
mod floor;
mod memory;
mod meter;
mod objects;
mod replay;
mod restart;
mod settle;

pub use burst::*;
pub use churn::*;
pub use convergence::*;
pub use failover::*;
pub use floor::*;
pub use memory::*;
pub use meter::*;
pub use objects::*;
pub use replay::*;
pub use restart::*;
pub use settle::*;

/// What every stage shares.
pub struct Ctx {
    pub client: Client,
    pub launch: Launch,
    pub concurrency: usize,
    /// The floor of the stage being measured (taken again before each stage): every ratio uses it.
    pub floor: Option<Floor>,
    /// The configuration being measured, for the failure messages.
    pub config: Option<Configuration>,
    /// Other processes whose CPU per change is reported (`--pid name=pid`), the bench included.
    pub pids: Vec<(String, u32)>,
    pub failures: Vec<String>,
    /// Namespaces this run created and has not deleted yet (deleted on the way out, whatever happens).
    pub namespaces: Arc<Mutex<Vec<String>>>,
    /// Webhook registrations this run created and has not deleted yet (cluster-scoped: the
    /// namespace's deletion does not take them).
    pub registrations: Arc<Mutex<Vec<String>>>,
    /// Time allowed for a wait on `n` objects: base + n × per-object.
    pub timeout_base: Duration,
    pub timeout_per_object: Duration,
    /// Settled: the operator sent no write, and no tracked Deployment changed, for this long.
    pub quiet: Duration,
    /// The floor's namespace (created by the first floor, kept for the run) and its sequential changes.
    pub floor_ns: String,
    pub(crate) floor_ready: bool,
    /// The run's FlowSchemas that count the operator's own requests, when they could be made.
    pub identity: Option<crate::identity::Schemas>,
    /// The replicas' own ServiceAccount, when the run made one.
    pub run_identity: Option<crate::identity::Identity>,
    /// The API server's audit log, when the run can read it (`--audit-log`): whose LISTs each window saw.
    pub audit: Option<crate::audit::AuditLog>,
    /// The replay floor's webhook (made once per run, when a configuration with the webhook replays).
    pub null_webhook: Option<crate::null_webhook::NullWebhook>,
    /// Deployments made so far in the fan-out floor's namespace (made once per run, grown as needed).
    pub fanout_floor_workloads: usize,
    pub floor_changes: usize,
    floor_rounds: usize,
    values: AtomicU64,
    /// When the run started (for the progress lines).
    pub started: Instant,
}

/// Seconds from `start` until the last of `arrivals` landed: a burst's (or its replay's) length.
pub(crate) fn last_landed_s(arrivals: &[cluster::Arrival], start: Instant) -> f64 {
    arrivals
        .iter()
        .map(|a| a.at)
        .max()
        .unwrap_or(start)
        .duration_since(start)
        .as_secs_f64()
}

impl Ctx {
    pub fn new(client: Client, launch: Launch, concurrency: usize, floor_ns: String) -> Self {
        Self {
            client,
            launch,
            concurrency,
            floor: None,
            config: None,
            pids: vec![],
            failures: vec![],
            namespaces: Arc::default(),
            registrations: Arc::default(),
            timeout_base: Duration::from_secs(120),
            timeout_per_object: Duration::from_millis(100),
            quiet: Duration::from_secs(2),
            floor_ns,
            floor_ready: false,
            fanout_floor_workloads: 0,
            identity: None,
            run_identity: None,
            audit: None,
            null_webhook: None,
            floor_changes: 60,
            floor_rounds: 0,
            values: AtomicU64::new(1),
            started: Instant::now(),
        }
    }

    pub fn timeout(&self, n: usize) -> Duration {
        self.timeout_base + self.timeout_per_object * n as u32
    }

    /// `n` changes done in `secs`, as time per change ÷ the floor's concurrent time per change.
    fn rate_x_floor(&self, n: usize, secs: f64) -> Option<f64> {
        self.floor
            .as_ref()
            .map(|f| secs * 1000.0 / n as f64 / f.concurrent_ms_per_change)
    }

    /// A content no set has held before in this run.
    pub(crate) fn next_value(&self) -> String {
        format!("c{}", self.values.fetch_add(1, Ordering::Relaxed))
    }

    pub fn fail(&mut self, what: impl Into<String>) {
        let what = match self.config {
            Some(c) => format!("[{c}] {}", what.into()),
            None => what.into(),
        };
        eprintln!("bench: FAILED: {what}");
        self.failures.push(what);
    }

    pub async fn create_namespace(&self, name: &str) -> Result<()> {
        cluster::create_namespace(&self.client, name).await?;
        self.namespaces.lock().expect("lock").push(name.to_string());
        Ok(())
    }

    pub async fn delete_namespace(&mut self, name: &str) -> Option<f64> {
        let timeout = self.timeout_base * 5;
        match cluster::delete_namespace(&self.client, name, timeout).await {
            Ok(took) => {
                self.namespaces.lock().expect("lock").retain(|n| n != name);
                Some(took.as_secs_f64())
            }
            Err(e) => {
                self.fail(format!("delete namespace {name}: {e}"));
                None
            }
        }
    }

    pub async fn register_webhook(&self, name: &str, namespace: &str, port: u16) -> Result<()> {
        self.registrations.lock().expect("lock").push(name.to_string());
        cluster::register_webhook(&self.client, name, namespace, port).await
    }

    /// A registration as `register_webhook`'s, of a webhook whose CA the bench already has (the replay's).
    pub async fn register_webhook_with_ca(
        &self,
        name: &str,
        namespace: &str,
        port: u16,
        ca: &str,
    ) -> Result<()> {
        self.registrations.lock().expect("lock").push(name.to_string());
        cluster::register_webhook_with_ca(&self.client, name, namespace, port, Some(ca)).await
    }

    pub async fn unregister_webhook(&self, name: &str) {
        match cluster::delete_registration(&self.client, name).await {
            Ok(()) => self.registrations.lock().expect("lock").retain(|n| n != name),
            Err(e) => eprintln!("bench: {e}"),
        }
    }

    pub(crate) fn sets(&self, ns: &str) -> Api<ConfigMapSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Measures the floor again, for the stage about to run; a floor that cannot be measured is a
    /// failed figure, and the stage's ratios are then missing.
    pub async fn refloor(&mut self, stage: &str) -> Option<Floor> {
        match floor(self).await {
            Ok(f) => {
                eprintln!(
                    "bench:   floor before {stage}: sequential p50 {:.1} ms; {:.0} changes/s at {} in flight",
                    f.seq_p50_ms, f.concurrent_rate, f.concurrency
                );
                self.floor = Some(f);
            }
            Err(e) => {
                self.fail(format!("floor before {stage}: {e}"));
                self.floor = None;
            }
        }
        self.floor.clone()
    }
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
