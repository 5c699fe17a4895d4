//! What a run found: `results.json` (everything), `table.md` (the summary, also printed) and two SVG
//! plots. Every time is also given as a multiple of the floor measured just before its stage, because
//! the machines are shared and noisy: only those ratios compare across runs. A run measures one or
//! more configurations (with and without the webhook); the table shows them side by side.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Deserializer, Serialize};

use crate::cluster::Result;
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

// ------------------------------------------------------------------------------------ old results --

/// A results.json from before configurations (one operator process, no webhook, one floor per run).
#[derive(Deserialize)]
struct Legacy {
    #[serde(default)]
    meta: LegacyMeta,
    floor: Option<Floor>,
    initial: Option<Convergence>,
    churn: Option<Churn>,
    burst: Option<Burst>,
    restart: Option<Restart>,
    memory: Option<LegacyMemory>,
    #[serde(default)]
    scales: Vec<Scale>,
    #[serde(default)]
    failures: Vec<String>,
    #[serde(default)]
    total_seconds: f64,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LegacyMeta {
    started_utc: String,
    operator_bin: String,
    operator_version: String,
    operator_args: Vec<String>,
    server_version: String,
    cpus: usize,
    sets: usize,
    rate: f64,
    duration_s: u64,
    scales: Vec<usize>,
    concurrency: usize,
    unrelated_configmaps: usize,
    unrelated_deployments: usize,
    bench_cpu_s: f64,
}

#[derive(Deserialize)]
struct LegacyMemory {
    after_initial: Option<Memory>,
    before_unrelated: Option<Memory>,
    after_unrelated: Option<Memory>,
    #[serde(default)]
    unrelated_configmaps: usize,
    #[serde(default)]
    unrelated_deployments: usize,
    #[serde(default)]
    create_seconds: f64,
    rss_ratio: Option<f64>,
}

fn single(m: Option<Memory>) -> Vec<ReplicaMemory> {
    m.map(|m| ReplicaMemory {
        role: "single".into(),
        memory: Some(m),
    })
    .into_iter()
    .collect()
}

impl Legacy {
    fn convert(self) -> Results {
        let floor = self.floor;
        let mut initial = self.initial;
        if let Some(c) = &mut initial {
            c.floor = floor.clone();
            if c.replicas.is_empty() {
                c.replicas = single(self.memory.as_ref().and_then(|m| m.after_initial));
            }
        }
        let mut churn = self.churn;
        if let Some(c) = &mut churn {
            c.floor = floor.clone();
        }
        let mut burst = self.burst;
        if let Some(b) = &mut burst {
            b.floor = floor.clone();
        }
        let mut scales = self.scales;
        for s in &mut scales {
            s.initial.floor = floor.clone();
            if let Some(b) = &mut s.burst {
                b.floor = floor.clone();
            }
        }
        let m = self.meta;
        Results {
            meta: Meta {
                started_utc: m.started_utc,
                operator: Path::new(&m.operator_bin)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                operator_source: "given".into(),
                operator_version: m.operator_version,
                operator_args: m.operator_args,
                server_version: m.server_version,
                cpus: m.cpus,
                replicas: 1,
                flags: Flags {
                    configurations: vec!["legacy".into()],
                    sets: m.sets,
                    rate: m.rate,
                    duration_s: m.duration_s,
                    scales: m.scales,
                    concurrency: m.concurrency,
                    unrelated_configmaps: m.unrelated_configmaps,
                    unrelated_deployments: m.unrelated_deployments,
                    ..Flags::default()
                },
                bench_cpu_s: m.bench_cpu_s,
                ..Meta::default()
            },
            configurations: vec![ConfigResults {
                name: "legacy".into(),
                initial,
                churn,
                burst,
                restart: self.restart,
                memory: self.memory.map(|m| MemoryFigures {
                    before_unrelated: single(m.before_unrelated),
                    after_unrelated: single(m.after_unrelated),
                    unrelated_configmaps: m.unrelated_configmaps,
                    unrelated_deployments: m.unrelated_deployments,
                    create_seconds: m.create_seconds,
                    rss_ratio: m.rss_ratio,
                }),
                scales,
                ..ConfigResults::default()
            }],
            failures: self.failures,
            total_seconds: self.total_seconds,
        }
    }
}

/// Reads a results.json, of this version or from before configurations existed (as one
/// configuration named `legacy`).
pub fn load(text: &str) -> Result<Results> {
    let value: serde_json::Value = serde_json::from_str(text)?;
    if value.get("configurations").is_some() {
        Ok(serde_json::from_value(value)?)
    } else {
        Ok(serde_json::from_value::<Legacy>(value)?.convert())
    }
}

// ---------------------------------------------------------------------------------------- paths --

/// Replaces every path under /work, /root, /home or /tmp with `<path>`: a published result holds no
/// path of the machine it was made on.
pub fn scrub_paths(text: &str) -> String {
    const ROOTS: [&str; 4] = ["/work", "/root", "/home", "/tmp"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        // Only where a path can start (not inside `a/tmp/b`), and only the root itself or below it
        // (not `/workspace`).
        let starts = out.chars().last().is_none_or(|p| !is_path_char(p));
        let root = ROOTS.iter().find(|r| {
            rest.strip_prefix(**r)
                .is_some_and(|after| after.chars().next().is_none_or(|n| n == '/' || !is_path_char(n)))
        });
        if starts && root.is_some() {
            let len = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
            out.push_str("<path>");
            rest = &rest[len..];
        } else {
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '~' | '@' | '%')
}

// -------------------------------------------------------------------------------------- numbers --

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

fn num(v: f64) -> String {
    let v = v + 0.0; // -0.0 prints as "-0"
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(num).unwrap_or_else(|| "-".into())
}

fn ratio(v: Option<f64>) -> String {
    v.map(|v| format!("{}×", num(v))).unwrap_or_default()
}

fn mib_of(m: Option<Memory>) -> String {
    m.map(|m| num(m.rss_kib as f64 / 1024.0))
        .unwrap_or_else(|| "-".into())
}

/// `leader 37.8 / standby 20.1 MiB` (or `single 37.8 MiB`).
fn replicas_mib(replicas: &[ReplicaMemory]) -> String {
    if replicas.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = replicas
        .iter()
        .map(|r| format!("{} {}", r.role, mib_of(r.memory)))
        .collect();
    format!("{} MiB", parts.join(" / "))
}

/// `leader 100.4%, standby 99.1%`.
pub fn pct_by_role(pct: &BTreeMap<String, f64>) -> String {
    if pct.is_empty() {
        return "-".into();
    }
    pct.iter()
        .map(|(role, v)| format!("{role} {}%", num(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `p50 / p99 ms (n admissions)`, or why there is none.
fn admission_latency(a: Option<&Admission>) -> String {
    match a {
        None => "-".into(),
        Some(a) if a.admissions == 0.0 => "no admissions".into(),
        Some(a) => format!(
            "{} / {} ms ({} admissions)",
            opt(a.p50_ms),
            opt(a.p99_ms),
            num(a.admissions)
        ),
    }
}

/// `1.00 (LIST configmapsets 1.00)`.
fn admission_requests(a: Option<&Admission>) -> String {
    match a {
        Some(a) if a.admissions > 0.0 => {
            let total = opt(a.requests_per_admission_total);
            if a.requests_per_admission.is_empty() {
                total
            } else {
                let parts: Vec<String> = a
                    .requests_per_admission
                    .iter()
                    .map(|(k, v)| format!("{k} {}", num(*v)))
                    .collect();
                format!("{total} ({})", parts.join(", "))
            }
        }
        Some(_) => "no admissions".into(),
        None => "-".into(),
    }
}

/// One summary row: figure, value, value as a multiple of its stage's floor.
type Row = (String, String, String);

/// `total (part, part, …)`, or the total alone when there are no parts.
fn total_and_parts(total: f64, parts: &[String]) -> String {
    let total = num(total);
    if parts.is_empty() {
        total
    } else {
        format!("{total} ({})", parts.join(", "))
    }
}

fn cost_rows(row: &mut impl FnMut(&str, String, String), stage: &str, cost: &Cost) {
    row(
        &format!("{stage}: admission p50 / p99, server side"),
        admission_latency(cost.admission.as_ref()),
        String::new(),
    );
    row(
        &format!("{stage}: API requests per admission"),
        admission_requests(cost.admission.as_ref()),
        String::new(),
    );
    let by_role: Vec<String> = cost
        .cpu_ms_per_change_by_role
        .iter()
        .map(|(k, v)| format!("{k} {}", num(*v)))
        .collect();
    row(
        &format!("{stage}: operator CPU per change"),
        format!(
            "{} ms{}",
            opt(cost.cpu_ms_per_change),
            if by_role.is_empty() {
                String::new()
            } else {
                format!(" ({})", by_role.join(", "))
            }
        ),
        ratio(cost.cpu_x_floor),
    );
    if let Some(w) = &cost.writes
        && let Some(total) = w.operator_identity_per_change
    {
        let parts: Vec<String> = w
            .operator_identity
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            &format!("{stage}: the operator identity's API requests per change, by verb and resource"),
            total_and_parts(total, &parts),
            String::new(),
        );
    }
    if !cost.watch_events_per_change.is_empty() {
        let mut by_count: Vec<(&String, &f64)> = cost.watch_events_per_change.iter().collect();
        by_count.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = by_count
            .iter()
            .filter(|(_, v)| **v >= 0.005)
            .map(|(k, v)| format!("{k} {}", num(**v)))
            .collect();
        row(
            &format!("{stage}: watch events per change and replica, by kind"),
            total_and_parts(cost.watch_events_per_change.values().sum(), &parts),
            String::new(),
        );
    }
    if !cost.reconciles_per_change.is_empty() {
        let parts: Vec<String> = cost
            .reconciles_per_change
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            &format!("{stage}: reconciles per change, by controller"),
            total_and_parts(cost.reconciles_per_change.values().sum(), &parts),
            String::new(),
        );
    }
    if let Some(w) = &cost.writes {
        row(
            &format!("{stage}: operator writes per change (excluding events)"),
            format!(
                "{} ({})",
                num(w.operator_per_change),
                num(w.operator_excl_events_per_change)
            ),
            String::new(),
        );
    }
}

fn latency_cells(l: &Latency) -> (String, String) {
    (
        format!(
            "{} / {} / {} / {} ms",
            num(l.p50_ms),
            num(l.p90_ms),
            num(l.p99_ms),
            num(l.max_ms)
        ),
        match (l.p50_x_floor, l.p90_x_floor, l.p99_x_floor, l.max_x_floor) {
            (Some(a), Some(b), Some(c), Some(d)) => {
                format!("{} / {} / {} / {}×", num(a), num(b), num(c), num(d))
            }
            _ => String::new(),
        },
    )
}

fn rows(r: &ConfigResults) -> Vec<Row> {
    let mut rows: Vec<Row> = vec![];
    let mut row = |a: &str, b: String, c: String| rows.push((a.to_string(), b, c));
    if let Some(c) = &r.initial {
        row(
            "initial convergence",
            match c.sets_per_s {
                Some(v) => format!("{} sets/s ({} sets in {} s)", num(v), c.sets, opt(c.seconds)),
                None => format!("TIMEOUT ({} of {} converged)", c.converged, c.sets),
            },
            ratio(c.x_floor),
        );
        row(
            "initial convergence: admission p50 / p99, server side",
            admission_latency(c.admission.as_ref()),
            String::new(),
        );
        row(
            "initial convergence: API requests per admission",
            admission_requests(c.admission.as_ref()),
            String::new(),
        );
    }
    if let Some(c) = &r.churn {
        let label = "churn latency p50 / p90 / p99 / max";
        match &c.latency {
            Some(l) => {
                let (value, x) = latency_cells(l);
                let timed_out = if c.timed_out > 0 {
                    format!(", {} TIMED OUT", c.timed_out)
                } else {
                    String::new()
                };
                row(
                    label,
                    format!(
                        "{value} ({} changes at {}/s{timed_out})",
                        c.changes,
                        num(c.achieved_rate)
                    ),
                    x,
                );
            }
            None => row(label, "no change converged".into(), String::new()),
        }
        cost_rows(&mut row, "churn", &c.cost);
    }
    if let Some(b) = &r.burst {
        row(
            "burst: every set changed at once",
            match b.rate {
                Some(v) => format!(
                    "{} changes/s ({} changes in {} s)",
                    num(v),
                    b.changes,
                    opt(b.seconds)
                ),
                None => format!("TIMEOUT ({} of {} converged)", b.converged, b.changes),
            },
            ratio(b.x_floor),
        );
        cost_rows(&mut row, "burst", &b.cost);
        if let Some(w) = &b.cost.writes {
            row(
                "burst: operator's own count of its writes per change",
                num(w.operator_self_per_change),
                String::new(),
            );
            row(
                "burst: kube-controller-manager writes per change",
                num(w.controller_manager_per_change),
                String::new(),
            );
        }
        if !b.cost.other_cpu_ms_per_change.is_empty() {
            let others: Vec<String> = b
                .cost
                .other_cpu_ms_per_change
                .iter()
                .map(|(k, v)| format!("{k} {}", num(*v)))
                .collect();
            row(
                "burst: CPU ms per change of the others",
                others.join(", "),
                String::new(),
            );
        }
    }
    if let Some(f) = &r.failover {
        row(
            &format!(
                "failover: leader frozen → standby's first write (target ≤ {} s)",
                num(f.target_s)
            ),
            match (f.to_first_write_s, f.within_target) {
                (Some(s), Some(true)) => format!("{} s, within target", num(s)),
                (Some(s), _) => format!("{} s, OVER TARGET", num(s)),
                (None, _) => "NOT MEASURED".into(),
            },
            String::new(),
        );
        row(
            "failover: → standby leads / → first Deployment moves",
            format!("{} / {} s", opt(f.to_leader_s), opt(f.to_first_rollout_s)),
            String::new(),
        );
        let lists: Vec<String> = f
            .list_by_resource
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            "failover: LIST requests from freeze to first write (of cmset's kinds)",
            match (f.list_requests, f.list_requests_cmset_kinds) {
                (Some(n), Some(k)) => format!("{} ({})", num(n), num(k)),
                _ => "-".into(),
            },
            String::new(),
        );
        row(
            "failover: LIST requests by resource",
            if lists.is_empty() {
                "-".into()
            } else {
                lists.join(", ")
            },
            String::new(),
        );
        if let Some(n) = f.identity_list_requests {
            let parts: Vec<String> = f
                .identity_list_by_resource
                .iter()
                .map(|(k, v)| format!("{k} {}", num(*v)))
                .collect();
            row(
                "failover: the operator identity's LIST requests from freeze to first write",
                if parts.is_empty() {
                    num(n)
                } else {
                    format!("{} ({})", num(n), parts.join(", "))
                },
                String::new(),
            );
        }
        let label = "failover: churn latency p50 / p90 / p99 / max";
        match &f.latency {
            Some(l) => {
                let (value, x) = latency_cells(l);
                row(label, format!("{value} ({} changes)", f.changes), x);
            }
            None => row(label, "no change converged".into(), String::new()),
        }
        row(
            "failover: every change reached its Deployment",
            if f.timed_out == 0 && f.unconverged == 0 && f.converged == f.changes {
                format!("yes ({} of {})", f.converged, f.changes)
            } else {
                format!(
                    "NO: {} of {} arrived, {} Deployments off their set's revision",
                    f.converged, f.changes, f.unconverged
                )
            },
            String::new(),
        );
        row(
            "failover: the old leader after SIGCONT",
            f.old_leader.clone(),
            String::new(),
        );
    }
    if let Some(x) = &r.restart {
        row(
            "writes after a restart of both replicas (until ready + window)",
            format!(
                "{} (API server: {}; window {} s)",
                num(x.operator_self_writes),
                num(x.operator_apiserver_total),
                num(x.window_s - x.ready_s)
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.noop {
        row(
            &format!(
                "no-op: {} unchanged sets applied again: operator writes, own count (API server) (goal 0)",
                x.applies
            ),
            format!(
                "{} ({}){}",
                opt(x.operator_writes),
                opt(x.operator_writes_apiserver),
                if x.spec_changed > 0 {
                    format!("; {} applies CHANGED THE SPEC", x.spec_changed)
                } else {
                    String::new()
                }
            ),
            String::new(),
        );
        row(
            "no-op: operator CPU per set applied (goal ≤ 0.3 ms)",
            format!("{} ms", opt(x.cpu_ms_per_set)),
            ratio(x.cost.cpu_x_floor),
        );
    }
    if let Some(x) = &r.large_set {
        row(
            &format!(
                "large set: {} KiB changed {} times, latency p50 / p90 / p99 / max",
                x.kib, x.changes
            ),
            x.latency
                .as_ref()
                .map_or("no change converged".into(), |l| latency_cells(l).0),
            x.latency.as_ref().map(|l| latency_cells(l).1).unwrap_or_default(),
        );
        row(
            "large set: operator CPU per change",
            format!("{} ms", opt(x.cost.cpu_ms_per_change)),
            ratio(x.cost.cpu_x_floor),
        );
        row(
            "large set: RSS before → after its changes (goal: flat)",
            format!(
                "{} → {} ({})",
                replicas_mib(&x.before),
                replicas_mib(&x.after),
                pct_by_role(&x.after_pct_of_before)
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.flood {
        let p50_p99 = |l: &Option<Latency>| {
            l.as_ref()
                .map_or("-".into(), |l| format!("{} / {}", num(l.p50_ms), num(l.p99_ms)))
        };
        row(
            &format!(
                "flood: a bystander's admission p50 / p99 ms, quiet → while another namespace applies costly sets ({} changes each; goal p99 < 1000)",
                x.changes
            ),
            format!(
                "{} → {}",
                p50_p99(&x.quiet_admission),
                p50_p99(&x.flooded_admission)
            ),
            String::new(),
        );
        row(
            "flood: a bystander's change p50 / p99 ms, quiet → flooded (goal: as fast)",
            format!(
                "{} → {} (p50 × {})",
                p50_p99(&x.quiet_change),
                p50_p99(&x.flooded_change),
                x.change_p50_ratio.map_or("-".into(), num)
            ),
            String::new(),
        );
        row(
            "flood: the bare API's own create p50 / p99 ms, quiet → flooded (what the flood costs the API server itself)",
            format!(
                "{} → {} (p50 × {})",
                p50_p99(&x.quiet_bare),
                p50_p99(&x.flooded_bare),
                x.bare_p50_ratio.map_or("-".into(), num)
            ),
            String::new(),
        );
        row(
            "flood: the costly sets applied meanwhile: judged in full / backtracking refused / over the judging budget / other failures",
            format!(
                "{} / {} / {} / {}",
                x.flood_judged, x.flood_backtracking, x.flood_over_budget, x.flood_other
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.fanout {
        row(
            &format!(
                "fan-out: one set read by {} Deployments, one change → all moved (goal ≤ floor + 1 s)",
                x.workloads
            ),
            match (x.seconds, x.floor_seconds) {
                (Some(s), Some(f)) => format!(
                    "{} s; floor ({} patches, {} in flight) {} s; {:+.2} s beyond it",
                    num(s),
                    x.workloads,
                    x.concurrency,
                    num(f),
                    s - f
                ),
                (Some(s), None) => format!("{} s; no floor", num(s)),
                (None, _) => format!("TIMEOUT ({} of {} moved)", x.moved, x.workloads),
            },
            ratio(x.x_floor),
        );
        row(
            "fan-out: operator CPU / its own count of writes / its identity's API requests, for the one change",
            format!(
                "{} ms / {} / {}",
                opt(x.cost.cpu_ms_per_change),
                x.cost
                    .writes
                    .as_ref()
                    .map_or("-".into(), |w| num(w.operator_self_per_change)),
                opt(x
                    .cost
                    .writes
                    .as_ref()
                    .and_then(|w| w.operator_identity_per_change))
            ),
            String::new(),
        );
    }
    if let Some(x) = &r.readers_churn {
        for (what, p) in [
            ("others' churn (no set read)", &x.others),
            ("readers' churn (no config change)", &x.readers),
        ] {
            let writes = p.cost.writes.as_ref();
            let reconciles: f64 = p.cost.reconciles_per_change.values().sum();
            row(
                &format!(
                    "{what}: {} Deployments × {} pods, {} changes/s for {:.0} s: pod events/s; CPU ms/s above idle, leader / standby (goal < 5); operator writes/s {}; reconciles/s",
                    x.workloads,
                    x.replicas,
                    num(x.rate),
                    x.duration_s,
                    writes.map_or(String::new(), |w| format!("{:?}", w.operator_self)),
                ),
                format!(
                    "{}; {} / {}; {}; {}",
                    num(p.pod_events_per_s),
                    opt(p.cpu_ms_per_s_above_idle_leader),
                    opt(p.cpu_ms_per_s_above_idle_standby),
                    writes.map_or("-".into(), |w| num(w.operator_self_per_change)),
                    num(reconciles),
                ),
                String::new(),
            );
        }
        if let Some(c) = &x.config {
            let stage = format!(
                "config changes with pods ({} Deployments × {} pods, a set each, {} changes/s)",
                x.workloads,
                x.replicas,
                num(c.rate)
            );
            let (value, x_floor) = c
                .latency
                .as_ref()
                .map_or(("-".into(), String::new()), latency_cells);
            row(
                &format!("{stage}: latency p50 / p90 / p99 / max ({} changes)", c.changes),
                value,
                x_floor,
            );
            row(
                &format!("{stage}: pod events per change"),
                num(c.pod_events_per_change),
                String::new(),
            );
            cost_rows(&mut row, &stage, &c.cost);
        }
    }
    if let Some(c) = &r.initial {
        row(
            "RSS after initial convergence",
            replicas_mib(&c.replicas),
            String::new(),
        );
    }
    if let Some(l) = &r.leak {
        let parts: Vec<String> = l
            .replicas
            .iter()
            .map(|x| {
                format!(
                    "{} {} / {} / {} MiB",
                    x.role,
                    mib_of(x.before),
                    mib_of(x.peak),
                    mib_of(x.after)
                )
            })
            .collect();
        let kept: Vec<String> = l
            .replicas
            .iter()
            .map(|x| format!("{} {}", x.role, opt(x.kept_kib_per_set)))
            .collect();
        row(
            &format!("RSS before / with / after {} sets created and deleted", l.sets),
            parts.join("; "),
            String::new(),
        );
        row(
            "RSS kept per created-and-deleted set (KiB)",
            kept.join(", "),
            String::new(),
        );
        let pct: Vec<String> = l
            .replicas
            .iter()
            .map(|x| format!("{} {}%", x.role, opt(x.after_pct_of_before)))
            .collect();
        row(
            &format!(
                "RSS after {} sets created and deleted, % of before (goal ≤ 105%)",
                l.sets
            ),
            pct.join(", "),
            String::new(),
        );
    }
    if r.leak_cycles.len() > 1 {
        let cycles = &r.leak_cycles;
        let roles: Vec<String> = cycles[0].replicas.iter().map(|x| x.role.clone()).collect();
        let after = |c: &Leak, role: &str| -> Option<Memory> {
            c.replicas.iter().find(|x| x.role == role).and_then(|x| x.after)
        };
        let series: Vec<String> = roles
            .iter()
            .map(|role| {
                let mib: Vec<String> = cycles.iter().map(|c| mib_of(after(c, role))).collect();
                format!("{role} {}", mib.join(" → "))
            })
            .collect();
        row(
            &format!(
                "RSS after each of {} cycles of {} sets created and deleted (MiB)",
                cycles.len(),
                cycles[0].sets
            ),
            series.join("; "),
            String::new(),
        );
        let (last, middle) = (cycles.len() - 1, cycles.len() / 2 - 1);
        let plateau: Vec<String> = roles
            .iter()
            .map(|role| {
                let pct = after(&cycles[middle], role)
                    .zip(after(&cycles[last], role))
                    .map(|(m, l)| l.rss_kib as f64 * 100.0 / m.rss_kib.max(1) as f64);
                format!("{role} {}%", opt(pct))
            })
            .collect();
        let heap: Vec<String> = roles
            .iter()
            .map(|role| {
                let mib: Vec<String> = cycles
                    .iter()
                    .map(|c| {
                        after(c, role)
                            .and_then(|m| m.heap_in_use_kib)
                            .map_or("-".into(), |k| format!("{:.1}", k as f64 / 1024.0))
                    })
                    .collect();
                format!("{role} {}", mib.join(" → "))
            })
            .collect();
        row(
            "heap in use after each cycle (MiB; what RSS would be if the allocator kept no free memory)",
            heap.join("; "),
            String::new(),
        );
        row(
            &format!(
                "RSS after cycle {} as % of cycle {} (goal: within 2% of 100)",
                last + 1,
                middle + 1
            ),
            plateau.join(", "),
            String::new(),
        );
    }
    if let Some(m) = &r.memory {
        row(
            &format!(
                "RSS before / after {} unrelated ConfigMaps + {} Deployments",
                m.unrelated_configmaps, m.unrelated_deployments
            ),
            format!(
                "{} → {}",
                replicas_mib(&m.before_unrelated),
                replicas_mib(&m.after_unrelated)
            ),
            m.rss_ratio
                .map(|v| format!("{:+.1}%", (v - 1.0) * 100.0))
                .unwrap_or_default(),
        );
    }
    let smallest = r.scales.iter().min_by_key(|s| s.sets);
    if let (Some(small), Some(large)) = (smallest, r.scales.iter().max_by_key(|s| s.sets))
        && large.sets > small.sets
    {
        use crate::operator::Memory;
        // Each replica's growth of one reading from the smallest scale to the largest, per set.
        let per_added_set = |kib: fn(Memory) -> Option<u64>| -> String {
            let parts: Vec<String> = large
                .initial
                .replicas
                .iter()
                .map(|x| {
                    let before = small.initial.replicas.iter().find(|y| y.role == x.role);
                    let reading = |m: Option<Memory>| m.and_then(kib);
                    let per_set = reading(x.memory)
                        .zip(reading(before.and_then(|y| y.memory)))
                        .map(|(l, s)| (l as f64 - s as f64) / (large.sets - small.sets) as f64);
                    format!("{} {}", x.role, opt(per_set))
                })
                .collect();
            format!("{} ({} → {} sets)", parts.join(", "), small.sets, large.sets)
        };
        row(
            "RSS per added set, smallest to largest scale (KiB)",
            per_added_set(|m| Some(m.rss_kib)),
            String::new(),
        );
        // The heap the program holds, without the free pages glibc keeps or returns between
        // readings, which move RSS by megabytes either way.
        row(
            "heap in use per added set, smallest to largest scale (KiB)",
            per_added_set(|m| m.heap_in_use_kib),
            String::new(),
        );
    }
    if let Some(s) = r.scales.iter().max_by_key(|s| s.sets) {
        let parts: Vec<String> = s
            .initial
            .replicas
            .iter()
            .map(|x| {
                format!(
                    "{} {}",
                    x.role,
                    x.memory
                        .map_or("-".into(), |m| num(m.rss_kib as f64 / s.sets as f64))
                )
            })
            .collect();
        row(
            "RSS per set at the largest scale (KiB)",
            format!("{} ({} sets)", parts.join(", "), s.sets),
            String::new(),
        );
    }
    let restarted: Vec<&String> = r
        .restarted
        .iter()
        .chain(r.scales.iter().flat_map(|s| &s.restarted))
        .collect();
    if !r.name.is_empty() && r.name != "legacy" {
        row(
            "replicas that exited unasked (started again before the next stage)",
            if restarted.is_empty() {
                "none".into()
            } else {
                restarted
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            String::new(),
        );
    }
    rows
}

fn floor_cell(f: Option<&Floor>) -> String {
    f.map_or("-".into(), |f| {
        format!("{} ms, {} /s", num(f.seq_p50_ms), num(f.concurrent_rate))
    })
}

/// The floor each stage was measured against.
fn floors(r: &ConfigResults) -> Vec<(String, String)> {
    let mut out = vec![];
    if let Some(c) = &r.initial {
        out.push(("initial convergence".into(), floor_cell(c.floor.as_ref())));
    }
    if let Some(c) = &r.churn {
        out.push(("churn".into(), floor_cell(c.floor.as_ref())));
    }
    if let Some(b) = &r.burst {
        out.push(("burst".into(), floor_cell(b.floor.as_ref())));
    }
    if let Some(f) = &r.failover {
        out.push(("failover".into(), floor_cell(f.floor.as_ref())));
    }
    if let Some(x) = &r.noop {
        out.push(("no-op".into(), floor_cell(x.floor.as_ref())));
    }
    if let Some(x) = &r.large_set {
        out.push(("large set".into(), floor_cell(x.floor.as_ref())));
    }
    if let Some(x) = &r.fanout {
        out.push(("fan-out".into(), floor_cell(x.floor.as_ref())));
    }
    for s in &r.scales {
        out.push((format!("scale {}", s.sets), floor_cell(s.initial.floor.as_ref())));
    }
    out
}

/// Rows of several configurations side by side: labels in the order they first appear.
fn side_by_side(columns: &[Vec<(String, String, String)>]) -> Vec<(String, Vec<(String, String)>)> {
    let mut labels: Vec<String> = vec![];
    for col in columns {
        for (label, _, _) in col {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
    }
    labels
        .into_iter()
        .map(|label| {
            let cells = columns
                .iter()
                .map(|col| {
                    col.iter()
                        .find(|(l, _, _)| *l == label)
                        .map(|(_, v, x)| (v.clone(), x.clone()))
                        .unwrap_or_default()
                })
                .collect();
            (label, cells)
        })
        .collect()
}

/// The Markdown summary: every configuration side by side, and with a baseline (an earlier
/// results.json), its configurations in more columns.
pub fn table(r: &Results, baseline: Option<&Results>) -> String {
    let mut out = String::new();
    let m = &r.meta;
    let _ = writeln!(
        out,
        "## cmset bench, {}\n\ncommit `{}`{}; operator `{}` ({}, {}); API server {}, {} CPUs; {} replicas, \
         lease {} s; run took {:.0} s.\n\nflags: `{}`{}\n",
        m.started_utc,
        if m.commit.is_empty() { "?" } else { &m.commit },
        match m.dirty {
            Some(true) => " (with uncommitted changes)",
            Some(false) => "",
            None => " (tree state unknown)",
        },
        m.operator,
        if m.operator_version.is_empty() {
            "?"
        } else {
            &m.operator_version
        },
        if m.operator_source.is_empty() {
            "?"
        } else {
            &m.operator_source
        },
        m.server_version,
        m.cpus,
        m.replicas,
        m.lease_duration_s,
        r.total_seconds,
        m.flags.command_line(),
        if m.operator_args.is_empty() {
            String::new()
        } else {
            format!("; operator flags: `{}`", m.operator_args.join(" "))
        }
    );
    for c in &r.configurations {
        let _ = writeln!(out, "- `{}`: {}", c.name, c.install);
    }
    if !r.configurations.is_empty() {
        out += "\n";
    }
    let mut names: Vec<String> = r.configurations.iter().map(|c| c.name.clone()).collect();
    let mut columns: Vec<Vec<Row>> = r.configurations.iter().map(rows).collect();
    if let Some(base) = baseline {
        for c in &base.configurations {
            names.push(format!("baseline {} ({})", c.name, base.meta.started_utc));
            columns.push(rows(c));
        }
    }
    out += "| figure |";
    for n in &names {
        let _ = write!(out, " {n} | × floor |");
    }
    out += "\n| --- |";
    out += &" --- | --- |".repeat(names.len());
    out += "\n";
    for (label, cells) in side_by_side(&columns) {
        let _ = write!(out, "| {label} |");
        for (v, x) in cells {
            let _ = write!(out, " {v} | {x} |");
        }
        out += "\n";
    }

    // The floor each stage's ratios use.
    let floor_cols: Vec<Vec<Row>> = r
        .configurations
        .iter()
        .map(|c| {
            floors(c)
                .into_iter()
                .map(|(a, b)| (a, b, String::new()))
                .collect()
        })
        .collect();
    if floor_cols.iter().any(|c| !c.is_empty()) {
        out +=
            "\nThe floor before each stage (sequential p50 of one change; changes/s in flight):\n\n| stage |";
        for c in &r.configurations {
            let _ = write!(out, " {} |", c.name);
        }
        out += "\n| --- |";
        out += &" --- |".repeat(r.configurations.len());
        out += "\n";
        for (label, cells) in side_by_side(&floor_cols) {
            let _ = write!(out, "| {label} |");
            for (v, _) in cells {
                let _ = write!(out, " {v} |");
            }
            out += "\n";
        }
    }

    for c in &r.configurations {
        if c.scales.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\nScale, {}:\n", c.name);
        out += "| sets | initial sets/s | × floor | burst changes/s | × floor | operator CPU ms/change | × floor \
                | operator writes/change | admission p50 / p99 (burst) | RSS after convergence |\n\
                | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
        for s in &c.scales {
            let b = s.burst.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.sets,
                s.initial
                    .sets_per_s
                    .map(num)
                    .unwrap_or_else(|| format!("TIMEOUT ({}/{})", s.initial.converged, s.sets)),
                ratio(s.initial.x_floor),
                if s.burst.is_none() {
                    "-".into()
                } else {
                    b.rate
                        .map(num)
                        .unwrap_or_else(|| format!("TIMEOUT ({}/{})", b.converged, b.changes))
                },
                ratio(b.x_floor),
                opt(b.cost.cpu_ms_per_change),
                ratio(b.cost.cpu_x_floor),
                opt(b.cost.writes.as_ref().map(|w| w.operator_per_change)),
                admission_latency(b.cost.admission.as_ref()),
                replicas_mib(&s.initial.replicas),
            );
        }
    }

    // Requests per change of the burst, by verb and resource, configurations side by side.
    let breakdown: Vec<Vec<Row>> = r
        .configurations
        .iter()
        .map(|c| {
            let mut rows = vec![];
            if let Some(w) = c.burst.as_ref().and_then(|b| b.cost.writes.as_ref()) {
                for (by, map) in [
                    ("operator", &w.operator),
                    ("kube-controller-manager", &w.controller_manager),
                    ("other", &w.other),
                    ("reads (anyone)", &w.reads),
                    ("operator's own count", &w.operator_self),
                ] {
                    for (k, v) in map {
                        rows.push((format!("{by} | {k}"), num(*v), String::new()));
                    }
                }
            }
            rows
        })
        .collect();
    if breakdown.iter().any(|c| !c.is_empty()) {
        out += "\nBurst, requests per change by verb and resource (API server counters, the bench's own removed):\n\n\
                | by | request |";
        for c in &r.configurations {
            let _ = write!(out, " {} |", c.name);
        }
        out += "\n| --- | --- |";
        out += &" --- |".repeat(r.configurations.len());
        out += "\n";
        for (label, cells) in side_by_side(&breakdown) {
            let _ = write!(out, "| {label} |");
            for (v, _) in cells {
                let _ = write!(out, " {} |", if v.is_empty() { "-" } else { &v });
            }
            out += "\n";
        }
    }
    if !r.failures.is_empty() {
        out += "\nFailed figures:\n\n";
        for f in &r.failures {
            let _ = writeln!(out, "- {f}");
        }
    }
    out
}

// ---------------------------------------------------------------------------------------- plots --

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn plot_err<E: std::fmt::Debug>(e: E) -> crate::cluster::Error {
    format!("plot: {e:?}").into()
}

/// Every configuration of this run, then the baseline's, with a name for the legend.
fn series<'a>(r: &'a Results, baseline: Option<&'a Results>) -> Vec<(String, &'a ConfigResults)> {
    let mut out: Vec<(String, &ConfigResults)> =
        r.configurations.iter().map(|c| (c.name.clone(), c)).collect();
    if let Some(b) = baseline {
        out.extend(
            b.configurations
                .iter()
                .map(|c| (format!("baseline {}", c.name), c)),
        );
    }
    out
}

/// (a) The latency distribution of steady churn, as a CDF on a log time axis.
pub fn plot_churn(path: &Path, r: &Results, baseline: Option<&Results>) -> Result<()> {
    let lines: Vec<(String, Vec<f64>)> = series(r, baseline)
        .into_iter()
        .filter_map(|(name, c)| {
            let churn = c.churn.as_ref()?;
            let mut v: Vec<f64> = churn.latencies_ms.iter().copied().filter(|v| *v > 0.0).collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| (format!("{name} (p50 {} ms)", num(percentile(&v, 50.0))), v))
        })
        .collect();
    let lo = lines.iter().map(|(_, v)| v[0]).fold(f64::INFINITY, f64::min);
    let hi = lines.iter().map(|(_, v)| v[v.len() - 1]).fold(0.0, f64::max);
    let floor_ms = r
        .configurations
        .iter()
        .find_map(|c| c.churn.as_ref()?.floor.as_ref().map(|f| f.seq_p50_ms));
    let (lo, hi) = if lines.is_empty() {
        (1.0, 10.0)
    } else {
        (lo.min(floor_ms.unwrap_or(lo)) * 0.8, hi * 1.25)
    };
    // At least a decade, so the log axis has labels.
    let lo = lo.min(hi / 10.0);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let caption = format!(
        "Steady churn: change to rollout latency ({} sets, {}/s)",
        r.meta.flags.sets, r.meta.flags.rate
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|v| num(*v))
        .x_desc("latency from the set's PATCH response to the Deployment naming the revision (ms)")
        .y_desc("fraction of changes")
        .draw()
        .map_err(plot_err)?;
    for (i, (name, v)) in lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = v.len() as f64;
        let points = v.iter().enumerate().map(|(k, ms)| (*ms, (k + 1) as f64 / n));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(plot_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if let Some(f) = floor_ms {
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new([(f, 0.0), (f, 1.0)], grey.stroke_width(1)))
            .map_err(plot_err)?
            .label(format!("floor: one bare change, p50 {} ms", num(f)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// (b) Cost per change against the number of sets: operator CPU per change, and the burst's time per
/// change as a multiple of its floor.
pub fn plot_scaling(path: &Path, r: &Results, baseline: Option<&Results>) -> Result<()> {
    type Pick = fn(&Scale) -> Option<f64>;
    let cpu: Pick = |s| s.burst.as_ref()?.cost.cpu_ms_per_change;
    let time: Pick = |s| s.burst.as_ref()?.x_floor;
    let runs = series(r, baseline);
    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let panels = root.split_evenly((1, 2));
    let sets: Vec<f64> = runs
        .iter()
        .flat_map(|(_, c)| c.scales.iter().map(|s| s.sets as f64))
        .collect();
    let x_lo = sets.iter().copied().fold(f64::INFINITY, f64::min).min(100.0) * 0.7;
    let x_hi = sets.iter().copied().fold(0.0, f64::max).max(1000.0) * 1.4;
    for (panel, (title, y_desc, pick)) in panels.iter().zip([
        ("Operator CPU per change (burst)", "CPU ms per change", cpu),
        (
            "Burst time per change ÷ floor",
            "× the bare API's time per change",
            time,
        ),
    ]) {
        let values: Vec<f64> = runs
            .iter()
            .flat_map(|(_, c)| c.scales.iter().filter_map(pick))
            .filter(|v| *v > 0.0)
            .collect();
        let y_lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let y_hi = values.iter().copied().fold(0.0, f64::max);
        let (y_lo, y_hi) = if values.is_empty() {
            (0.1, 10.0)
        } else {
            (y_lo / 2.0, y_hi * 2.0)
        };
        let y_lo = y_lo.min(y_hi / 10.0);
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(60)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| num(*v))
            .x_desc("ConfigMapSets (and Deployments) in the namespace")
            .y_desc(y_desc)
            .draw()
            .map_err(plot_err)?;
        for (i, (name, c)) in runs.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = c
                .scales
                .iter()
                .filter_map(|s| Some((s.sets as f64, pick(s)?)))
                .filter(|(_, v)| *v > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            chart
                .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

// --------------------------------------------------------------------------------- completeness --

/// The figures a configuration should have produced but did not (for `--strict`): every stage that
/// ran has its numbers, its floor and its ratios; with the webhook, admissions were answered and their
/// latency is known; without it, none was.
pub fn missing(c: &ConfigResults, webhook: bool, identity: bool) -> Vec<String> {
    let mut out = vec![];
    let mut need = |ok: bool, what: &str| {
        if !ok {
            out.push(format!("[{}] no figure: {what}", c.name));
        }
    };
    let admission_ok = |a: Option<&Admission>| match a {
        None => false,
        Some(a) if webhook => a.admissions > 0.0 && a.p50_ms.is_some() && a.p99_ms.is_some(),
        Some(a) => a.admissions == 0.0,
    };
    let replicas_ok = |r: &[ReplicaMemory]| r.len() == 2 && r.iter().all(|m| m.memory.is_some());
    // At the install's start the webhook is called only once its CA is registered: a small namespace
    // may converge before that, so convergence needs admissions only to be absent without a webhook.
    let convergence = |need: &mut dyn FnMut(bool, &str), c: &Convergence, what: &str| {
        need(c.sets_per_s.is_some(), &format!("{what}: sets/s"));
        need(c.x_floor.is_some(), &format!("{what}: × floor"));
        need(
            webhook || admission_ok(c.admission.as_ref()),
            &format!("{what}: admissions (none)"),
        );
        need(replicas_ok(&c.replicas), &format!("{what}: RSS of both replicas"));
    };
    let cost = |need: &mut dyn FnMut(bool, &str), cost: &Cost, what: &str| {
        need(
            cost.cpu_x_floor.is_some(),
            &format!("{what}: CPU per change × floor"),
        );
        need(cost.writes.is_some(), &format!("{what}: writes per change"));
        need(
            !identity
                || cost
                    .writes
                    .as_ref()
                    .is_some_and(|w| w.operator_identity_per_change.is_some()),
            &format!("{what}: the operator identity's requests per change"),
        );
        need(
            admission_ok(cost.admission.as_ref()),
            &format!("{what}: admissions ({})", if webhook { "some" } else { "none" }),
        );
    };
    if let Some(i) = &c.initial {
        convergence(&mut need, i, "initial convergence");
    }
    if let Some(ch) = &c.churn {
        need(
            ch.latency.as_ref().is_some_and(|l| l.p99_x_floor.is_some()),
            "churn latency × floor",
        );
        need(
            ch.timed_out == 0 && ch.converged == ch.changes,
            "churn: every change converged",
        );
        cost(&mut need, &ch.cost, "churn");
    }
    if let Some(b) = &c.burst {
        need(b.x_floor.is_some(), "burst changes/s × floor");
        cost(&mut need, &b.cost, "burst");
    }
    if let Some(f) = &c.failover {
        need(f.to_first_write_s.is_some(), "failover: standby's first write");
        need(f.to_leader_s.is_some(), "failover: standby leads");
        need(f.to_first_rollout_s.is_some(), "failover: first Deployment moved");
        need(f.list_requests.is_some(), "failover: LIST requests");
        need(
            !identity || f.identity_list_requests.is_some(),
            "failover: the operator identity's LIST requests",
        );
        need(
            f.latency.as_ref().is_some_and(|l| l.max_x_floor.is_some()),
            "failover: churn latency × floor",
        );
        need(
            f.timed_out == 0 && f.unconverged == 0 && f.converged == f.changes,
            "failover: every change converged",
        );
    }
    if let Some(l) = &c.leak {
        need(
            l.replicas.len() == 2
                && l.replicas
                    .iter()
                    .all(|r| r.kept_kib_per_set.is_some() && r.after_pct_of_before.is_some()),
            "RSS of both replicas before and after the leak sets",
        );
    }
    if let Some(x) = &c.noop {
        need(
            x.operator_writes.is_some() && x.operator_writes_apiserver.is_some(),
            "no-op: operator writes",
        );
        need(x.cpu_ms_per_set.is_some(), "no-op: CPU per set");
        need(x.idle_s.is_some(), "no-op: the replicas idle again");
        need(x.spec_changed == 0, "no-op: applies that left the spec as it was");
    }
    if let Some(x) = &c.large_set {
        need(
            x.converged == x.changes && x.latency.is_some(),
            "large set: every change converged",
        );
        need(x.cost.cpu_x_floor.is_some(), "large set: CPU per change × floor");
        need(
            replicas_ok(&x.before) && replicas_ok(&x.after) && x.after_pct_of_before.len() == 2,
            "large set: RSS of both replicas before and after",
        );
    }
    if let Some(x) = &c.flood {
        need(
            x.quiet_change.is_some() && x.flooded_change.is_some() && x.late == 0,
            "flood: every bystander change arrived, quiet and flooded",
        );
        need(
            x.quiet_admission.is_some() && x.flooded_admission.is_some(),
            "flood: the bystander's admissions, quiet and flooded",
        );
        need(x.flood_judged + x.flood_backtracking > 0, "flood: the flood ran");
    }
    if let Some(x) = &c.fanout {
        need(x.seconds.is_some(), "fan-out: every Deployment moved");
        need(x.x_floor.is_some(), "fan-out: × the floor of its patches");
        need(
            x.cost.cpu_ms_per_change.is_some() && x.cost.writes.is_some(),
            "fan-out: CPU and writes",
        );
    }
    if let Some(x) = &c.readers_churn {
        for (what, p) in [("others", &x.others), ("readers", &x.readers)] {
            need(
                p.pod_events_per_s > 0.0,
                &format!("readers' churn ({what}): pods were churned"),
            );
            need(
                p.cpu_ms_per_s_above_idle_leader.is_some() && p.cpu_ms_per_s_above_idle_standby.is_some(),
                &format!("readers' churn ({what}): CPU of both replicas above idle"),
            );
        }
        match &x.config {
            Some(c) => {
                need(c.latency.is_some(), "config changes with pods: latency");
                need(
                    c.pod_events_per_change > 0.0,
                    "config changes with pods: pods were rolled",
                );
                cost(&mut need, &c.cost, "config changes with pods");
            }
            None => need(false, "config changes with pods"),
        }
    }
    if let Some(m) = &c.memory {
        need(
            replicas_ok(&m.before_unrelated) && replicas_ok(&m.after_unrelated),
            "RSS of both replicas before and after the unrelated objects",
        );
    }
    for s in &c.scales {
        convergence(&mut need, &s.initial, &format!("scale {}", s.sets));
        match &s.burst {
            Some(b) => {
                need(b.x_floor.is_some(), &format!("scale {}: burst × floor", s.sets));
                cost(&mut need, &b.cost, &format!("scale {}: burst", s.sets));
            }
            None => need(false, &format!("scale {}: burst", s.sets)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_reports_watch_events_by_kind_most_first_and_reconciles_by_controller() {
        let cost = Cost {
            watch_events_per_change: [
                ("Pod apply".to_string(), 1.5),
                ("Deployment apply".to_string(), 2.5),
            ]
            .into(),
            reconciles_per_change: [("set".to_string(), 6.5), ("workload".to_string(), 5.25)].into(),
            ..Cost::default()
        };
        let mut rows = Vec::new();
        cost_rows(
            &mut |figure, value, _| rows.push((figure.to_string(), value)),
            "churn",
            &cost,
        );
        let value = |figure: &str| rows.iter().find(|(f, _)| f == figure).map(|(_, v)| v.clone());
        assert_eq!(
            value("churn: watch events per change and replica, by kind").as_deref(),
            Some("4.00 (Deployment apply 2.50, Pod apply 1.50)")
        );
        assert_eq!(
            value("churn: reconciles per change, by controller").as_deref(),
            Some("11.8 (set 6.50, workload 5.25)")
        );
        // An operator that does not count them: no row.
        let mut rows = Vec::new();
        cost_rows(
            &mut |figure, value, _| rows.push((figure.to_string(), value)),
            "churn",
            &Cost::default(),
        );
        assert!(
            !rows
                .iter()
                .any(|(f, _)| f.contains("watch events") || f.contains("reconciles"))
        );
    }

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
    }

    #[test]
    fn paths_of_the_machine_are_scrubbed() {
        assert_eq!(
            scrub_paths(r#"operator "/work/wt-bench/target/release/cmset-controller" ok"#),
            r#"operator "<path>" ok"#
        );
        assert_eq!(
            scrub_paths("log at /tmp/x.log, kubeconfig /root/.kube/config; /home/u/a:b"),
            "log at <path>, kubeconfig <path>; <path>:b"
        );
        // Not a path of the machine: only the start of a path counts, and only these roots.
        let kept = "target/bench/work/x /workspace-ish /usr/bin/x a/tmp/b /tmpfoo";
        assert_eq!(scrub_paths(kept), kept);
        assert_eq!(scrub_paths("/work"), "<path>");
    }

    #[test]
    fn a_results_json_from_before_configurations_reads_as_one_named_legacy() {
        let old = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/results/before/results.json"
        ))
        .unwrap();
        let r = load(&old).unwrap();
        assert_eq!(r.configurations.len(), 1);
        let c = &r.configurations[0];
        assert_eq!(c.name, "legacy");
        assert!(
            c.churn.as_ref().unwrap().floor.is_some(),
            "the run's floor for every stage"
        );
        assert_eq!(c.initial.as_ref().unwrap().replicas[0].role, "single");
        assert!(!r.meta.operator.contains('/'), "{}", r.meta.operator);
        let t = table(&r, Some(&r));
        assert!(t.contains("baseline legacy"), "{t}");
        assert!(t.contains("| churn latency p50 / p90 / p99 / max |"), "{t}");
        // And this version's own output reads back.
        let again = load(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(again.configurations[0].name, "legacy");
    }

    #[test]
    fn plots_and_table_from_a_sparse_result() {
        let dir = std::env::temp_dir().join(format!("cmset-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = ConfigResults {
            name: "webhook".into(),
            churn: Some(Churn {
                latencies_ms: vec![10.0, 20.0, 30.0],
                ..Churn::default()
            }),
            ..ConfigResults::default()
        };
        c.scales.push(Scale {
            sets: 100,
            burst: Some(Burst {
                x_floor: Some(3.0),
                cost: Cost {
                    cpu_ms_per_change: Some(2.0),
                    ..Cost::default()
                },
                ..Burst::default()
            }),
            ..Scale::default()
        });
        let mut other = c.clone();
        other.name = "no-webhook".into();
        let r = Results {
            configurations: vec![c, other],
            ..Results::default()
        };
        plot_churn(&dir.join("a.svg"), &r, Some(&r)).unwrap();
        plot_scaling(&dir.join("b.svg"), &r, None).unwrap();
        assert!(
            std::fs::read_to_string(dir.join("b.svg"))
                .unwrap()
                .contains("<svg")
        );
        let t = table(&r, Some(&r));
        assert!(
            t.contains("| figure | webhook | × floor | no-webhook | × floor |"),
            "{t}"
        );
        assert!(t.contains("Scale, no-webhook"), "{t}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn memory_per_added_set_from_the_smallest_to_the_largest_scale() {
        let at = |sets: usize, rss_kib: u64, heap_kib: Option<u64>| Scale {
            sets,
            initial: Convergence {
                replicas: vec![ReplicaMemory {
                    role: "leader".into(),
                    memory: Some(Memory {
                        rss_kib,
                        heap_in_use_kib: heap_kib,
                        ..Memory::default()
                    }),
                }],
                ..Convergence::default()
            },
            ..Scale::default()
        };
        let mut c = ConfigResults {
            name: "webhook".into(),
            ..ConfigResults::default()
        };
        c.scales = vec![at(2000, 59_388, Some(35_079)), at(100, 27_196, Some(2_738))];
        let t = |c: &ConfigResults| {
            rows(c)
                .into_iter()
                .filter(|(name, ..)| name.contains("per added set"))
                .map(|(name, value, _)| format!("{name}: {value}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            t(&c),
            [
                "RSS per added set, smallest to largest scale (KiB): leader 16.9 (100 → 2000 sets)",
                "heap in use per added set, smallest to largest scale (KiB): leader 17.0 (100 → 2000 sets)",
            ]
        );
        // A replica that did not report its heap (an operator without the gauge) shows none.
        c.scales[1] = at(100, 27_196, None);
        assert!(t(&c)[1].ends_with("leader - (100 → 2000 sets)"), "{:?}", t(&c));
    }

    #[test]
    fn strict_wants_every_figure() {
        let empty = ConfigResults {
            name: "webhook".into(),
            initial: Some(Convergence::default()),
            ..ConfigResults::default()
        };
        let m = missing(&empty, true, false);
        assert!(
            m.iter().any(|s| s.contains("initial convergence: sets/s")),
            "{m:?}"
        );
        let quiet = Convergence {
            sets_per_s: Some(1.0),
            x_floor: Some(1.0),
            admission: Some(Admission::default()),
            replicas: vec![
                ReplicaMemory {
                    role: "leader".into(),
                    memory: Some(Memory::default()),
                };
                2
            ],
            ..Convergence::default()
        };
        let ok = ConfigResults {
            name: "no-webhook".into(),
            initial: Some(quiet),
            ..ConfigResults::default()
        };
        assert_eq!(missing(&ok, false, false), Vec::<String>::new());
        let mut churned = ok.clone();
        churned.churn = Some(Churn {
            latency: latency(&[1.0], Some(&Floor::default())),
            cost: Cost {
                cpu_x_floor: Some(1.0),
                writes: Some(Writes::default()),
                admission: Some(Admission::default()),
                ..Cost::default()
            },
            ..Churn::default()
        });
        assert_eq!(missing(&churned, false, false), Vec::<String>::new());
        let m = missing(&churned, true, false);
        assert!(
            m.len() == 1 && m[0].contains("churn: admissions (some)"),
            "with the webhook, churn is admitted: {m:?}"
        );
        let mut noop = ok.clone();
        noop.noop = Some(NoOp {
            operator_writes: Some(0.0),
            operator_writes_apiserver: Some(0.0),
            cpu_ms_per_set: Some(0.1),
            idle_s: Some(3.0),
            spec_changed: 2,
            ..NoOp::default()
        });
        let m = missing(&noop, false, false);
        assert!(
            m.len() == 1 && m[0].contains("applies that left the spec as it was"),
            "an apply that changed the spec is no no-op: {m:?}"
        );
        let mut fanout = ok.clone();
        fanout.fanout = Some(FanOut {
            seconds: Some(1.0),
            ..FanOut::default()
        });
        let m = missing(&fanout, false, false);
        assert!(
            m.iter().any(|s| s.contains("fan-out: × the floor")),
            "the fan-out needs its floor: {m:?}"
        );
    }
}
