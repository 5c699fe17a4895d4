//! The schema of results.json: what each stage of each configuration measured, with the floor taken
//! just before it, and the run's meta and flags. Also the nearest-rank percentiles the stages compute
//! their latencies with. Fields are added with `#[serde(default)]`, so older files still read.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Deserializer, Serialize};

use crate::install::ReplicaMemory;
use crate::metrics::Admission;
use crate::operator::Memory;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub meta: Meta,
    /// One per configuration, in the order they ran.
    #[serde(default)]
    pub configurations: Vec<ConfigResults>,
    /// Figures that could not be measured (a timeout, an error), in words, each naming its
    /// configuration.
    #[serde(default)]
    pub failures: Vec<String>,
    pub total_seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    pub started_utc: String,
    /// `git rev-parse HEAD` of the tree the bench ran from, and whether that tree had changes
    /// (`git status --porcelain` not empty). The operator was built from it unless `operator_source`
    /// says otherwise.
    pub commit: String,
    pub dirty: Option<bool>,
    /// The operator binary: its path inside the repository, or only its file name (no path of the
    /// machine the run was made on).
    pub operator: String,
    /// `built from this tree` (run.sh built it) or `given` (BENCH_OPERATOR_BIN).
    pub operator_source: String,
    pub operator_version: String,
    pub operator_args: Vec<String>,
    pub server_version: String,
    pub cpus: usize,
    /// Every replica count, Lease and webhook setting comes from the configuration's name.
    pub replicas: usize,
    pub lease_duration_s: u64,
    pub flags: Flags,
    /// Where the operator's requests by verb and resource come from: the run's FlowSchemas matching
    /// its identity, or why there are none.
    #[serde(default)]
    pub operator_requests: String,
    /// CPU the bench itself used over the whole run (it shares the machine with what it measures).
    pub bench_cpu_s: f64,
}

/// The flags that shape the figures (paths left out).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Flags {
    pub configurations: Vec<String>,
    pub sets: usize,
    pub rate: f64,
    pub duration_s: u64,
    pub scales: Vec<usize>,
    pub leak_sets: usize,
    pub leak_cycles: usize,
    pub fanout_workloads: usize,
    pub readers: usize,
    pub readers_rate: f64,
    pub readers_duration_s: u64,
    pub noop_sets: usize,
    pub large_set_kib: usize,
    pub large_set_changes: usize,
    pub flood_changes: usize,
    pub unrelated_configmaps: usize,
    pub unrelated_deployments: usize,
    pub concurrency: usize,
    pub floor_changes: usize,
    pub failover_after_s: u64,
    pub restart_window_s: u64,
    pub timeout_secs: u64,
    pub timeout_per_set_ms: u64,
    pub skipped: Vec<String>,
    pub strict: bool,
}

impl Flags {
    /// The command line that repeats this run's figures (`cmset-bench` flags).
    pub fn command_line(&self) -> String {
        let join = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let mut s = format!(
            "--configurations {} --sets {} --rate {} --duration {} --scales {} --leak-sets {} \
             --unrelated-configmaps {} --unrelated-deployments {} --concurrency {} --floor-changes {} \
             --failover-after {} --restart-window {} --timeout-secs {} --timeout-per-set-ms {} \
             --fanout-workloads {} --noop-sets {} --large-set-kib {} --large-set-changes {} \
             --readers {} --readers-rate {} --readers-duration {} --leak-cycles {} --flood-changes {}",
            self.configurations.join(","),
            self.sets,
            self.rate,
            self.duration_s,
            join(&self.scales),
            self.leak_sets,
            self.unrelated_configmaps,
            self.unrelated_deployments,
            self.concurrency,
            self.floor_changes,
            self.failover_after_s,
            self.restart_window_s,
            self.timeout_secs,
            self.timeout_per_set_ms,
            self.fanout_workloads,
            self.noop_sets,
            self.large_set_kib,
            self.large_set_changes,
            self.readers,
            self.readers_rate,
            self.readers_duration_s,
            self.leak_cycles.max(1),
            self.flood_changes.max(1)
        );
        for skip in &self.skipped {
            let _ = write!(s, " --skip-{skip}");
        }
        if self.strict {
            s += " --strict";
        }
        s
    }
}

/// Everything one configuration measured, each stage with the floor taken just before it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigResults {
    /// `webhook` or `no-webhook` (`legacy` for a results.json from before configurations existed: one
    /// replica without leader election or webhook).
    pub name: String,
    /// What was installed, in words.
    pub install: String,
    pub initial: Option<Convergence>,
    pub churn: Option<Churn>,
    pub burst: Option<Burst>,
    pub failover: Option<Failover>,
    pub restart: Option<Restart>,
    pub leak: Option<Leak>,
    /// Every cycle of `--leak-cycles` (the first is also `leak`): memory over time.
    pub leak_cycles: Vec<Leak>,
    pub memory: Option<MemoryFigures>,
    pub noop: Option<NoOp>,
    pub large_set: Option<LargeSet>,
    /// With the webhook: a bystander's changes while another namespace applies costly sets.
    pub flood: Option<crate::flood::Flood>,
    pub fanout: Option<FanOut>,
    pub readers_churn: Option<ReadersChurn>,
    pub scales: Vec<Scale>,
    /// Replicas that exited by themselves (e.g. lost their Lease while the API server was away) and
    /// were started again before a stage, as the kubelet would; none in a clean run.
    pub restarted: Vec<String>,
    pub seconds: f64,
}

/// The bare API cost of one change, no operator involved: create a ConfigMap, patch a Deployment's
/// pod template, patch an annotation on a ConfigMapSet.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Floor {
    pub sequential_changes: usize,
    pub seq_p50_ms: f64,
    pub seq_p90_ms: f64,
    pub concurrency: usize,
    pub concurrent_changes: usize,
    pub concurrent_rate: f64,
    pub concurrent_ms_per_change: f64,
}

/// Replicas' memory: a list with roles, or (in a results.json from before) the one process's.
fn replicas_or_single<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<ReplicaMemory>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Many(Vec<ReplicaMemory>),
        One(Option<Memory>),
    }
    Ok(match Either::deserialize(d)? {
        Either::Many(v) => v,
        Either::One(None) => vec![],
        Either::One(Some(m)) => vec![ReplicaMemory {
            role: "single".into(),
            memory: Some(m),
        }],
    })
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Convergence {
    pub sets: usize,
    pub converged: usize,
    /// From the install's start until every Deployment named its revision.
    pub seconds: Option<f64>,
    /// From the install's start until one replica led with synced caches and the other stood by (and
    /// the webhook's CA was registered).
    pub ready_s: Option<f64>,
    pub sets_per_s: Option<f64>,
    /// Time per set ÷ the floor's concurrent time per change.
    pub x_floor: Option<f64>,
    /// Both replicas' CPU per set, until the window settled.
    pub cpu_ms_per_set: Option<f64>,
    /// RSS of each replica after convergence.
    #[serde(alias = "memory", deserialize_with = "replicas_or_single")]
    pub replicas: Vec<ReplicaMemory>,
    /// How long the rollouts and the operator took to go quiet afterwards (CPU is counted until then).
    pub settle_s: Option<f64>,
    /// Admission reviews from the install's start until the window settled.
    pub admission: Option<Admission>,
    pub floor: Option<Floor>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Each ÷ the floor's sequential p50.
    pub p50_x_floor: Option<f64>,
    pub p90_x_floor: Option<f64>,
    pub p99_x_floor: Option<f64>,
    pub max_x_floor: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Cost {
    /// CPU per change of every replica together (the install's cost).
    pub cpu_ms_per_change: Option<f64>,
    /// ÷ the floor's sequential p50 (a per-machine yardstick for "one change").
    pub cpu_x_floor: Option<f64>,
    /// The same by the role each replica had at the window's end (`leader`, `standby`).
    pub cpu_ms_per_change_by_role: BTreeMap<String, f64>,
    /// CPU per change of the other processes watched (`--pid`), and of the bench itself.
    pub other_cpu_ms_per_change: BTreeMap<String, f64>,
    pub writes: Option<Writes>,
    /// Watch events per change that one replica received (every replica's count ÷ replicas), by
    /// `kind event` (`cmset_watch_events_total`); absent for an operator that does not count them.
    pub watch_events_per_change: BTreeMap<String, f64>,
    /// Reconciles per change, by controller (`cmset_reconciles_total`, every replica: only the leader
    /// reconciles).
    pub reconciles_per_change: BTreeMap<String, f64>,
    /// The admission webhook in the window (every replica).
    pub admission: Option<Admission>,
    /// The window ends when the rollouts and the operator went quiet: this long after the last change
    /// landed.
    pub settle_s: Option<f64>,
    /// Each process's CPU in the window as a share of the machine's (`/proc/stat`); for a burst, from
    /// its first PATCH until its last change landed.
    pub cpu_share: Option<crate::machine::CpuShare>,
    /// The LISTs the API server's audit log shows in the window, by client (absent without the log).
    pub lists: Option<Vec<crate::audit::ListCount>>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Churn {
    pub target_rate: f64,
    pub achieved_rate: f64,
    pub duration_s: f64,
    pub changes: usize,
    pub converged: usize,
    pub timed_out: usize,
    /// Ticks at which every set still had a change in flight (none was sent).
    pub skipped_busy: usize,
    pub latency: Option<Latency>,
    pub cost: Cost,
    pub latencies_ms: Vec<f64>,
    pub floor: Option<Floor>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Burst {
    pub changes: usize,
    pub converged: usize,
    /// From the first PATCH sent until every Deployment named its new revision.
    pub seconds: Option<f64>,
    pub rate: Option<f64>,
    /// Time per change ÷ the floor's concurrent time per change.
    pub x_floor: Option<f64>,
    /// Per change, from its PATCH response.
    pub latency: Option<Latency>,
    pub cost: Cost,
    pub floor: Option<Floor>,
    /// The replay floor taken just before the burst (`stages::replay`).
    pub replay: Option<Replay>,
    /// The burst's rate as a share of the replay's (1.0: cmset costs no throughput at all).
    pub share_of_replay: Option<f64>,
}

/// The replay floor: the burst's requests (the bench's PATCH and cmset's four) sent by a bare client,
/// with the webhook registered (a null one) and the watches open, but no operator deciding anything.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Replay {
    pub changes: usize,
    pub converged: usize,
    /// From the first PATCH sent until every Deployment named its new revision.
    pub seconds: Option<f64>,
    pub rate: Option<f64>,
    /// The bench's PATCHes in flight, and cmset's requests in flight as cmset's defaults allow them.
    pub concurrency: usize,
    pub set_reconciles: usize,
    pub workload_reconciles: usize,
    /// Whether the null webhook was registered (the `webhook` configuration).
    pub webhook: bool,
    /// The window's cost: the replicas (idle, they watch another namespace), the control plane, the
    /// bench, the machine's share, whose LISTs.
    pub cost: Cost,
}

/// The leader frozen (SIGSTOP) during churn: how long until the standby acts, and what that cost.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Failover {
    pub lease_duration_s: u64,
    /// Lease duration + 2 s.
    pub target_s: f64,
    /// From the freeze until the standby's leader gauge read 1.
    pub to_leader_s: Option<f64>,
    /// From the freeze until the standby's first write (its `cmset_api_writes_total` moved).
    pub to_first_write_s: Option<f64>,
    /// From the freeze until a Deployment named a new revision after the standby led.
    pub to_first_rollout_s: Option<f64>,
    pub within_target: Option<bool>,
    /// The API server's LIST requests from the freeze to the standby's first write, by resource,
    /// the bench's own removed.
    pub list_requests: Option<f64>,
    /// Of those, LISTs of the kinds cmset watches (what the standby's own start costs; the rest is
    /// the cluster's other clients, e.g. namespace deletions of other tenants).
    pub list_requests_cmset_kinds: Option<f64>,
    pub list_by_resource: BTreeMap<String, f64>,
    /// The LISTs the operator's identity sent in that time (see the README), by resource, its
    /// admission handler's taken out: the standby's own, where they are counted.
    pub identity_list_requests: Option<f64>,
    pub identity_list_by_resource: BTreeMap<String, f64>,
    pub bench_lists_subtracted: u64,
    /// LISTs the standby's admission webhook sent in that time (answering admissions, not taking
    /// over), also taken out.
    pub admission_lists_subtracted: f64,
    /// What the old leader did once thawed (SIGCONT).
    pub old_leader: String,
    pub old_leader_exited: bool,
    /// The churn around it: changes sent, and how many reached their Deployment.
    pub changes: usize,
    pub converged: usize,
    pub timed_out: usize,
    pub latency: Option<Latency>,
    /// Deployments not naming their set's current revision once it settled (must be 0).
    pub unconverged: usize,
    pub cost: Cost,
    pub floor: Option<Floor>,
}

/// API requests per change, from the API server's `apiserver_request_total` (by `verb resource`), and
/// the operator's own `cmset_api_writes_total` (by operation).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Writes {
    pub changes: usize,
    pub operator: BTreeMap<String, f64>,
    pub controller_manager: BTreeMap<String, f64>,
    /// Writes neither of the two sends (node heartbeats, other tenants of a shared cluster).
    pub other: BTreeMap<String, f64>,
    /// GET and LIST by anyone (watches excluded).
    pub reads: BTreeMap<String, f64>,
    pub operator_per_change: f64,
    pub operator_excl_events_per_change: f64,
    pub controller_manager_per_change: f64,
    pub operator_self: BTreeMap<String, f64>,
    pub operator_self_per_change: f64,
    /// Every request the operator's identity sent (reads included; watches where the API server
    /// counts them), by `VERB resource`, per change: from the run's FlowSchemas (see the README).
    #[serde(default)]
    pub operator_identity: BTreeMap<String, f64>,
    #[serde(default)]
    pub operator_identity_per_change: Option<f64>,
    /// The bench's own requests taken out of the counts.
    pub bench_requests_subtracted: f64,
}

/// Readers' own churn (no config change): every "per change" figure of its costs is per second.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadersChurn {
    /// Opted-in Deployments reading one set, and as many reading a plain ConfigMap.
    pub workloads: usize,
    pub replicas: i32,
    /// Deployment changes per second (restart, scale up, new image, scale down, in turn).
    pub rate: f64,
    pub duration_s: f64,
    pub setup_s: f64,
    /// A quiet window just before, per second.
    pub idle: Cost,
    /// The churn of Deployments that read no set.
    pub others: ReadersChurnPhase,
    /// The same churn of the set's readers.
    pub readers: ReadersChurnPhase,
    /// Config changes of as many Deployments with pods, each reading a set of its own.
    pub config: Option<ConfigWithPods>,
}

/// The realistic stage: config changes whose rollouts run pods. Its cost is per change.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ConfigWithPods {
    pub changes: usize,
    pub rate: f64,
    pub sending_s: f64,
    /// Pod watch events (creations, updates, deletions) per change: each rolls two pods.
    pub pod_events_per_change: f64,
    pub latency: Option<Latency>,
    pub cost: Cost,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadersChurnPhase {
    pub changes: usize,
    /// Pod watch events (creations, updates, deletions) per second: the churn's size.
    pub pod_events_per_s: f64,
    pub cpu_ms_per_s_above_idle_leader: Option<f64>,
    pub cpu_ms_per_s_above_idle_standby: Option<f64>,
    pub cost: Cost,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Restart {
    pub ready_s: f64,
    pub window_s: f64,
    /// Everything the new processes counted since they started.
    pub operator_self_writes: f64,
    /// What the API server saw of the operator's kinds of writes from the kill to the window's end.
    pub operator_apiserver_writes: BTreeMap<String, f64>,
    pub operator_apiserver_total: f64,
}

/// One replica's RSS before sets were created, with them, and after they were deleted.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LeakReplica {
    pub role: String,
    pub before: Option<Memory>,
    pub peak: Option<Memory>,
    pub after: Option<Memory>,
    /// (after − before) ÷ sets: what each created-and-deleted set left behind.
    pub kept_kib_per_set: Option<f64>,
    /// after ÷ before, in percent (goal: within 5% of 100).
    #[serde(default)]
    pub after_pct_of_before: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Leak {
    pub sets: usize,
    /// Until every set's status named its first revision.
    pub created_s: f64,
    /// Until the sets and their revisions were gone.
    pub deleted_s: f64,
    /// Revisions of the deleted sets the bench deleted itself rather than wait for the garbage
    /// collector (the ones the collector had not reached yet).
    #[serde(default)]
    pub revisions_deleted_by_bench: usize,
    /// From then until every replica went idle (had taken in every deletion); RSS "after" is read then.
    #[serde(default)]
    pub idle_s: f64,
    pub replicas: Vec<LeakReplica>,
}

/// One set read by many Deployments, changed once.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct FanOut {
    pub workloads: usize,
    /// Deployments that named the new revision in time.
    pub moved: usize,
    /// From just before the set's PATCH until the last Deployment named the new revision.
    pub seconds: Option<f64>,
    /// The floor: as many Deployment patches sent by the bench itself, `concurrency` in flight, until
    /// the last was answered.
    pub floor_seconds: Option<f64>,
    pub concurrency: usize,
    /// `seconds` − `floor_seconds` (goal: ≤ 1 s).
    pub beyond_floor_s: Option<f64>,
    /// `seconds` ÷ `floor_seconds`.
    pub x_floor: Option<f64>,
    /// Creating the set and the Deployments until they all named its first revision and settled.
    pub setup_s: f64,
    /// Per Deployment, from just before the set's PATCH.
    pub latency: Option<Latency>,
    /// The one change's cost (CPU and writes "per change" are the whole fan-out's).
    pub cost: Cost,
    /// The floor taken just before the stage (CPU × floor uses it).
    pub floor: Option<Floor>,
}

/// Sets applied again unchanged (server-side apply, a new annotation, the same spec).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NoOp {
    pub applies: usize,
    /// Distinct sets among them (round robin over the main namespace's sets).
    pub sets: usize,
    /// Sending every apply.
    pub seconds: f64,
    /// Applies after which the set's generation had moved (must be 0: the spec did not change).
    pub spec_changed: usize,
    /// From the last apply until both replicas were idle again (the window ends then).
    pub idle_s: Option<f64>,
    /// The operator's writes in the window, by its own count (`cmset_api_writes_total`; goal: 0).
    pub operator_writes: Option<f64>,
    /// The same from the API server's counters: the operator identity's writes but its Lease
    /// renewals when its requests are counted by identity, else the operator's kinds of writes by
    /// anyone (see the README).
    pub operator_writes_apiserver: Option<f64>,
    /// Both replicas' CPU per apply (goal: ≤ 0.3 ms).
    pub cpu_ms_per_set: Option<f64>,
    /// Everything per apply.
    pub cost: Cost,
    /// The floor taken just before the stage (CPU × floor uses it).
    pub floor: Option<Floor>,
}

/// One set near the ConfigMap size limit, read by one Deployment, changed many times in a row.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LargeSet {
    /// Its data, in KiB.
    pub kib: usize,
    pub changes: usize,
    pub converged: usize,
    /// From each PATCH's response until the Deployment named the new revision.
    pub latency: Option<Latency>,
    /// RSS with the set at its first revision, and after every change settled.
    pub before: Vec<ReplicaMemory>,
    pub after: Vec<ReplicaMemory>,
    /// after ÷ before in percent, by role (goal: flat).
    pub after_pct_of_before: BTreeMap<String, f64>,
    pub cost: Cost,
    /// The floor taken just before the stage (CPU × floor uses it).
    pub floor: Option<Floor>,
    /// A small set's changes alone and while the large set changes (goal: no stall).
    pub bystander: Option<Bystander>,
}

/// A small set changed one change at a time, alone and then while a costly set keeps changing: from each
/// PATCH's response until its Deployment named the new revision. Had the costly set's judging or plan
/// held the engine's thread, the watches and reconciles of every other set would have waited.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Bystander {
    /// The costly set's changes made while the bystander was timed.
    pub large_changes: usize,
    pub changes_alone: usize,
    pub changes_during: usize,
    pub alone: Option<Latency>,
    pub during: Option<Latency>,
    /// During ÷ alone, of p99.
    pub p99_ratio: Option<f64>,
    /// The bare API meanwhile: a ConfigMap created by the bench in a namespace no operator watches,
    /// after each of the small set's changes, alone and during.
    pub bare_alone: Option<Latency>,
    pub bare_during: Option<Latency>,
    /// Changes that did not reach their Deployment in time: the bystander's, the costly set's.
    pub late: usize,
    pub large_late: usize,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MemoryFigures {
    #[serde(deserialize_with = "replicas_or_single")]
    pub before_unrelated: Vec<ReplicaMemory>,
    #[serde(deserialize_with = "replicas_or_single")]
    pub after_unrelated: Vec<ReplicaMemory>,
    pub unrelated_configmaps: usize,
    pub unrelated_deployments: usize,
    pub create_seconds: f64,
    /// RSS of all replicas with the unrelated objects ÷ RSS before them (same processes).
    pub rss_ratio: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Scale {
    pub sets: usize,
    pub initial: Convergence,
    pub burst: Option<Burst>,
    pub namespace_delete_s: Option<f64>,
    pub restarted: Vec<String>,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn latency(ms: &[f64], floor: Option<&Floor>) -> Option<Latency> {
    if ms.is_empty() {
        return None;
    }
    let mut sorted = ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let x = |v: f64| floor.map(|f| v / f.seq_p50_ms);
    let (p50, p90, p99, max) = (
        percentile(&sorted, 50.0),
        percentile(&sorted, 90.0),
        percentile(&sorted, 99.0),
        sorted[sorted.len() - 1],
    );
    Some(Latency {
        p50_ms: p50,
        p90_ms: p90,
        p99_ms: p99,
        max_ms: max,
        p50_x_floor: x(p50),
        p90_x_floor: x(p90),
        p99_x_floor: x(p99),
        max_x_floor: x(max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
    }
}
