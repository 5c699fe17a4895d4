//! `cmset-bench`: the project's benchmark (`make bench`). One run measures, against the cluster in
//! KUBECONFIG and all on the same machine in the same minutes, each configuration in turn (by default
//! the default install, `webhook`: two replicas with leader election, both serving the admission
//! webhook; then `no-webhook`, the same without it), each in fresh namespaces with fresh processes:
//!
//! 1. initial convergence of N sets and N opted-in Deployments;
//! 2. steady churn at a fixed rate: latency from a set's PATCH to its Deployment naming the revision;
//! 3. a burst: every set changed at once;
//! 4. API requests per change, from the API server's own counters, by verb and resource, and the
//!    admission webhook's latency and requests per admission, from the operator's own;
//! 5. failover: the leader frozen during churn, until the standby acts, and what that cost;
//! 6. writes after a restart of both replicas (there should be none);
//! 7. no-op: unchanged sets applied again (no write, little CPU);
//! 8. a large set (near the ConfigMap size limit) changed many times: CPU per change, RSS flat;
//!    with the webhook, a flood: a bystander's changes timed quiet and while another namespace applies
//!    costly sets (see `flood`);
//! 9. fan-out: one set read by many Deployments, one change, against the floor of as many patches;
//! 10. memory: after sets are created and deleted again, and with many unrelated objects;
//! 11. convergence and a burst at several numbers of sets, each in a fresh namespace.
//!
//! When the replicas run under their own identity, the run gives them a ServiceAccount of its own and
//! counts that identity's requests by verb and resource (`identity`).
//!
//! Before each stage the floor is measured again (what one change costs the bare API, no operator
//! involved); every time is also given as a multiple of its stage's floor, so runs on noisy shared
//! machines compare.

mod audit;
mod cluster;
mod flood;
mod identity;
mod install;
mod machine;
mod metrics;
mod null_webhook;
mod operator;
mod readers;
mod report;
mod service;
mod shapes;
mod stages;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use kube::Client;

use cluster::{Result, Tracker};
use install::{Configuration, Install};
use operator::{Launch, cpu_of};
use report::{ConfigResults, Flags, Results, Scale};
use stages::Ctx;

#[derive(Clone, Debug, Parser)]
#[command(
    name = "cmset-bench",
    about = "The cmset benchmark: each figure also as a multiple of the bare API floor",
    // A flag given again wins (`make bench-smoke BENCH_ARGS="--sets 50"`).
    args_override_self = true
)]
struct Args {
    /// Configurations to measure, in this order, each with fresh namespaces and processes: `webhook`
    /// (the default install: the admission webhook registered and served by both replicas) and
    /// `no-webhook` (the same two replicas without it).
    #[arg(long, env = "CMSET_BENCH_CONFIGURATIONS", value_delimiter = ',', action = clap::ArgAction::Set,
          default_values_t = [Configuration::Webhook, Configuration::NoWebhook])]
    configurations: Vec<Configuration>,
    /// Sets (each with one Deployment) in the main namespace: convergence, churn, burst, failover,
    /// restart, memory.
    #[arg(long, env = "CMSET_BENCH_SETS", default_value_t = 1000, value_parser = at_least_one)]
    sets: usize,
    /// Set changes per second during steady churn (and around the failover).
    #[arg(long, env = "CMSET_BENCH_RATE", default_value_t = 20.0, value_parser = positive_rate)]
    rate: f64,
    /// Seconds of steady churn.
    #[arg(long, env = "CMSET_BENCH_DURATION", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    duration: u64,
    /// Numbers of sets for the scale stage, each in a fresh namespace.
    #[arg(long, env = "CMSET_BENCH_SCALES", value_delimiter = ',', action = clap::ArgAction::Set,
          default_values_t = [100, 1000, 5000], value_parser = at_least_one)]
    scales: Vec<usize>,
    /// Sets created and deleted again (no workloads) for the memory-after-deletion figure.
    #[arg(long, env = "CMSET_BENCH_LEAK_SETS", default_value_t = 5000, value_parser = at_least_one)]
    leak_sets: usize,
    /// Times the memory stage's sets are created and deleted, RSS read after each (memory over time:
    /// the last cycle should be within 2% of the middle one).
    #[arg(long, env = "CMSET_BENCH_LEAK_CYCLES", default_value_t = 1, value_parser = at_least_one)]
    leak_cycles: usize,
    /// Deployments reading the one set of the fan-out stage (one change must move them all).
    #[arg(long, env = "CMSET_BENCH_FANOUT_WORKLOADS", default_value_t = 200, value_parser = at_least_one)]
    fanout_workloads: usize,
    /// Opted-in Deployments (two pods each) reading one set in the readers' churn stage, and as many
    /// reading no set.
    #[arg(long, env = "CMSET_BENCH_READERS", default_value_t = 50, value_parser = at_least_one)]
    readers: usize,
    /// Deployment changes per second (restart, scale, new image) in the readers' churn stage.
    #[arg(long, env = "CMSET_BENCH_READERS_RATE", default_value_t = 2.0, value_parser = positive_rate)]
    readers_rate: f64,
    /// Seconds of churn of each group in the readers' churn stage.
    #[arg(long, env = "CMSET_BENCH_READERS_DURATION", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    readers_duration: u64,
    /// Server-side applies of unchanged sets in the no-op stage (round robin over `--sets`).
    #[arg(long, env = "CMSET_BENCH_NOOP_SETS", default_value_t = 1000, value_parser = at_least_one)]
    noop_sets: usize,
    /// KiB of data in the large set (a ConfigMap holds at most 1 MiB).
    #[arg(long, env = "CMSET_BENCH_LARGE_SET_KIB", default_value_t = 900, value_parser = large_set_kib)]
    large_set_kib: usize,
    /// Changes of the large set, one after the other.
    #[arg(long, env = "CMSET_BENCH_LARGE_SET_CHANGES", default_value_t = 100, value_parser = at_least_one)]
    large_set_changes: usize,
    /// Bystander changes timed without and then during the flood of costly sets (with the webhook).
    #[arg(long, env = "CMSET_BENCH_FLOOD_CHANGES", default_value_t = 20, value_parser = at_least_one)]
    flood_changes: usize,
    /// Unrelated ConfigMaps added to the main namespace for the memory figure.
    #[arg(long, env = "CMSET_BENCH_UNRELATED_CONFIGMAPS", default_value_t = 10_000)]
    unrelated_configmaps: usize,
    /// Unrelated (not opted-in) Deployments added to the main namespace for the memory figure.
    #[arg(long, env = "CMSET_BENCH_UNRELATED_DEPLOYMENTS", default_value_t = 1_000)]
    unrelated_deployments: usize,
    /// Seconds of churn before the leader is frozen, and after the standby took over.
    #[arg(long, env = "CMSET_BENCH_FAILOVER_AFTER", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    failover_after: u64,
    /// The replicas' `--lease-duration-seconds`: the install's (15) unless there is a reason.
    #[arg(long, env = "CMSET_BENCH_LEASE_DURATION_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..))]
    lease_duration_seconds: u64,
    /// The operator binary under test.
    #[arg(
        long,
        env = "CMSET_BENCH_OPERATOR_BIN",
        default_value = "target/release/cmset-controller"
    )]
    operator_bin: PathBuf,
    /// Kubeconfig the operator runs with (default: KUBECONFIG, the admin).
    #[arg(long, env = "CMSET_BENCH_OPERATOR_KUBECONFIG")]
    operator_kubeconfig: Option<PathBuf>,
    /// One more argument for every replica (repeat for several), e.g. `--operator-arg=--concurrency=8`.
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// Output directory (default: target/bench/<UTC timestamp>).
    #[arg(long, env = "CMSET_BENCH_OUT")]
    out: Option<PathBuf>,
    /// Client requests in flight for bulk creation, the burst and the floor's concurrent rate.
    #[arg(long, env = "CMSET_BENCH_CONCURRENCY", default_value_t = 32, value_parser = at_least_one)]
    concurrency: usize,
    /// Sequential changes timed for each floor.
    #[arg(long, env = "CMSET_BENCH_FLOOR_CHANGES", default_value_t = 60, value_parser = at_least_one)]
    floor_changes: usize,
    /// Seconds every wait is allowed, plus `--timeout-per-set-ms` for each object waited on.
    #[arg(long, env = "CMSET_BENCH_TIMEOUT_SECS", default_value_t = 120)]
    timeout_secs: u64,
    #[arg(long, env = "CMSET_BENCH_TIMEOUT_PER_SET_MS", default_value_t = 100)]
    timeout_per_set_ms: u64,
    /// Seconds after the restarted replicas are ready during which their writes are counted.
    #[arg(long, env = "CMSET_BENCH_RESTART_WINDOW", default_value_t = 10)]
    restart_window: u64,
    /// Another process whose CPU per change is reported, as `name=pid` (e.g. the API server).
    /// The API server's audit log (`run.sh` passes the local control plane's): each window's LISTs
    /// are counted by the client that sent them.
    #[arg(long, env = "CMSET_BENCH_AUDIT_LOG")]
    audit_log: Option<PathBuf>,
    #[arg(long = "pid", value_parser = parse_pid)]
    pids: Vec<(String, u32)>,
    /// An earlier results.json to show beside this run in the table and the plots.
    #[arg(long, env = "CMSET_BENCH_BASELINE")]
    baseline: Option<PathBuf>,
    /// Also copy results.json, table.md, the plots and a digest of the logs into this directory
    /// (e.g. e2e/bench/results).
    #[arg(long, env = "CMSET_BENCH_PUBLISH")]
    publish: Option<PathBuf>,
    /// Exit non-zero unless every figure was measured in every configuration and every workload
    /// converged (for bench-smoke).
    #[arg(long)]
    strict: bool,
    #[arg(long)]
    skip_floor: bool,
    #[arg(long)]
    skip_churn: bool,
    #[arg(long)]
    skip_burst: bool,
    /// Skip the replay floor taken before the burst (the burst's share of it is then not known).
    #[arg(long)]
    skip_replay: bool,
    #[arg(long)]
    skip_failover: bool,
    #[arg(long)]
    skip_restart: bool,
    #[arg(long)]
    skip_noop: bool,
    #[arg(long)]
    skip_large_set: bool,
    #[arg(long)]
    skip_flood: bool,
    #[arg(long)]
    skip_fanout: bool,
    #[arg(long)]
    skip_readers_churn: bool,
    #[arg(long)]
    skip_leak: bool,
    #[arg(long)]
    skip_memory: bool,
    #[arg(long)]
    skip_scales: bool,
}

impl Args {
    fn flags(&self) -> Flags {
        let skipped = [
            ("floor", self.skip_floor),
            ("churn", self.skip_churn),
            ("burst", self.skip_burst),
            ("replay", self.skip_replay),
            ("failover", self.skip_failover),
            ("restart", self.skip_restart),
            ("noop", self.skip_noop),
            ("large-set", self.skip_large_set),
            ("flood", self.skip_flood),
            ("fanout", self.skip_fanout),
            ("readers-churn", self.skip_readers_churn),
            ("leak", self.skip_leak),
            ("memory", self.skip_memory),
            ("scales", self.skip_scales),
        ];
        Flags {
            configurations: self.configurations.iter().map(|c| c.name().to_string()).collect(),
            sets: self.sets,
            rate: self.rate,
            duration_s: self.duration,
            scales: self.scales.clone(),
            leak_sets: self.leak_sets,
            leak_cycles: self.leak_cycles,
            fanout_workloads: self.fanout_workloads,
            readers: self.readers,
            readers_rate: self.readers_rate,
            readers_duration_s: self.readers_duration,
            noop_sets: self.noop_sets,
            large_set_kib: self.large_set_kib,
            large_set_changes: self.large_set_changes,
            flood_changes: self.flood_changes,
            unrelated_configmaps: self.unrelated_configmaps,
            unrelated_deployments: self.unrelated_deployments,
            concurrency: self.concurrency,
            floor_changes: self.floor_changes,
            failover_after_s: self.failover_after,
            restart_window_s: self.restart_window,
            timeout_secs: self.timeout_secs,
            timeout_per_set_ms: self.timeout_per_set_ms,
            skipped: skipped
                .iter()
                .filter(|(_, s)| *s)
                .map(|(n, _)| n.to_string())
                .collect(),
            strict: self.strict,
        }
    }
}

fn parse_pid(s: &str) -> std::result::Result<(String, u32), String> {
    let (name, pid) = s.split_once('=').ok_or("expected name=pid")?;
    Ok((name.to_string(), pid.parse().map_err(|e| format!("{e}"))?))
}

/// Resolves on SIGTERM (never, if its handler cannot be installed).
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            term.recv().await;
        }
        Err(_) => futures::future::pending().await,
    }
}

/// `YYYYmmddTHHMMSSZ`, the name of a run's output directory.
fn utc_stamp(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.strftime("%Y%m%dT%H%M%SZ").to_string())
        .unwrap_or_else(|_| "unknown-time".to_string())
}

/// `git rev-parse HEAD` and whether the tree has changes, of the tree the bench runs in.
fn git_state() -> (String, Option<bool>) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    let dirty = git(&["status", "--porcelain"]).map(|s| !s.is_empty());
    (commit, dirty)
}

/// The operator binary as the record names it: its path inside the working directory (the
/// repository), or only its file name.
fn binary_name(bin: &Path) -> String {
    let cwd = std::env::current_dir().ok();
    match cwd.as_deref().and_then(|cwd| bin.strip_prefix(cwd).ok()) {
        Some(inside) => inside.display().to_string(),
        None if bin.is_relative() => bin.display().to_string(),
        None => bin
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let started = SystemTime::now();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/bench").join(utc_stamp(started)));
    // A reused directory (bench-smoke's) keeps the logs of this run only.
    let _ = std::fs::remove_dir_all(out.join("logs"));
    if let Err(e) = std::fs::create_dir_all(out.join("logs")) {
        eprintln!("bench: cannot create {}: {e}", out.display());
        return std::process::ExitCode::FAILURE;
    }
    let mut results = Results::default();
    let client = match Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench: no cluster (KUBECONFIG): {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let nanos = started.duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let run_id = format!("cmset-bench-{:05x}", (nanos ^ std::process::id()) & 0xfffff);
    let mut ctx = match context(&args, client, &out, &run_id) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // The operator's own requests are told apart only when it runs under an identity of its own.
    results.meta.operator_requests = match &args.operator_kubeconfig {
        Some(_) => match own_identity(&mut ctx, &run_id, &out).await {
            Ok(what) => what,
            Err(e) => {
                eprintln!("bench: the operator's own requests will not be counted: {e}");
                format!("not counted: {e}")
            }
        },
        None => "not counted: the operator runs with the bench's own credentials (no --operator-kubeconfig)"
            .into(),
    };
    let (namespaces, registrations) = (ctx.namespaces.clone(), ctx.registrations.clone());
    let t0 = Instant::now();
    let fatal = tokio::select! {
        r = run(&args, &mut ctx, &mut results, started, &run_id) => r.err().map(|e| e.to_string()),
        _ = tokio::signal::ctrl_c() => Some("interrupted".to_string()),
        // `timeout`, a CI job cancelled: cleaned up as after Ctrl-C.
        _ = terminated() => Some("terminated (SIGTERM)".to_string()),
    };
    ctx.config = None;
    if let Some(e) = &fatal {
        ctx.fail(format!("run stopped: {e}"));
    }
    // Whatever happened, leave no bench namespace or registration behind (the replicas died with
    // their handles).
    let leftovers: Vec<String> = registrations.lock().expect("lock").clone();
    for name in leftovers {
        ctx.unregister_webhook(&name).await;
    }
    if let Some(s) = &ctx.identity {
        s.remove(&ctx.client).await;
    }
    if let Some(id) = &ctx.run_identity {
        id.remove(&ctx.client).await;
    }
    let leftovers: Vec<String> = namespaces.lock().expect("lock").clone();
    for ns in leftovers {
        eprintln!("bench: deleting namespace {ns}");
        ctx.delete_namespace(&ns).await;
    }
    if args.strict {
        for c in &results.configurations {
            let webhook = c.name == Configuration::Webhook.name();
            let expected = report::Expected {
                webhook,
                identity: ctx.identity.is_some(),
                replay: !args.skip_replay && !args.skip_burst,
                audit: ctx.audit.is_some(),
            };
            for m in report::missing(c, expected) {
                ctx.failures.push(m);
            }
        }
    }
    results.failures = std::mem::take(&mut ctx.failures);
    results.total_seconds = t0.elapsed().as_secs_f64();
    results.meta.bench_cpu_s = cpu_of(std::process::id()).map_or(0.0, |d| d.as_secs_f64());
    let baseline = args.baseline.as_ref().and_then(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        report::load(&text)
            .map_err(|e| eprintln!("bench: baseline {}: {e}", p.display()))
            .ok()
    });
    if let Err(e) = write_outputs(&out, &results, baseline.as_ref(), args.publish.as_deref()) {
        eprintln!("bench: writing results: {e}");
        return std::process::ExitCode::FAILURE;
    }
    if fatal.is_some() || (args.strict && !results.failures.is_empty()) {
        eprintln!("bench: {} failed figure(s)", results.failures.len());
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}

/// Gives the replicas a ServiceAccount of the run's own, with the install's rights, and counts its
/// requests by verb and resource (see `identity`); in words, where the counts come from.
async fn own_identity(ctx: &mut Ctx, run_id: &str, out: &Path) -> Result<String> {
    let ns = format!("{run_id}-identity");
    ctx.create_namespace(&ns).await?;
    let id = identity::Identity::make(&ctx.client, run_id, &ns, &ctx.launch.kubeconfig, out).await;
    let id = match id {
        Ok(id) => id,
        Err(e) => {
            // Half-made copies of the bindings go; the namespace goes at the end.
            identity::Identity {
                run: run_id.to_string(),
                account: (ns.clone(), String::new()),
                kubeconfig: out.join("operator-identity.kubeconfig"),
            }
            .remove(&ctx.client)
            .await;
            return Err(e);
        }
    };
    ctx.launch.kubeconfig = id.kubeconfig.clone();
    let account = id.account.clone();
    ctx.run_identity = Some(id);
    let schemas = identity::Schemas::install(&ctx.client, run_id, account.clone(), ctx.concurrency).await?;
    let n = schemas.names.len();
    ctx.identity = Some(schemas);
    Ok(format!(
        "ServiceAccount <run>-identity/{} with copies of {}/{}'s bindings; {n} FlowSchemas matching it \
         (apiserver_flowcontrol_dispatched_requests_total)",
        account.1,
        identity::SERVICE_ACCOUNT.0,
        identity::SERVICE_ACCOUNT.1
    ))
}

fn context(args: &Args, client: Client, out: &Path, run_id: &str) -> Result<Ctx> {
    let kubeconfig = match (&args.operator_kubeconfig, std::env::var_os("KUBECONFIG")) {
        (Some(k), _) => k.clone(),
        (None, Some(k)) => PathBuf::from(k),
        (None, None) => return Err("set KUBECONFIG or --operator-kubeconfig for the operator".into()),
    };
    if !args.operator_bin.is_file() {
        return Err(format!("no operator binary at {}", args.operator_bin.display()).into());
    }
    let launch = Launch {
        bin: std::fs::canonicalize(&args.operator_bin)?,
        kubeconfig,
        extra_args: args.operator_args.clone(),
        log_dir: out.join("logs"),
        lease_duration_s: args.lease_duration_seconds,
    };
    let mut ctx = Ctx::new(client, launch, args.concurrency, format!("{run_id}-floor"));
    ctx.timeout_base = Duration::from_secs(args.timeout_secs);
    ctx.timeout_per_object = Duration::from_millis(args.timeout_per_set_ms);
    ctx.floor_changes = args.floor_changes;
    ctx.pids = args.pids.clone();
    ctx.pids.push(("cmset-bench".into(), std::process::id()));
    ctx.audit = args
        .audit_log
        .clone()
        .filter(|p| p.is_file())
        .map(|path| audit::AuditLog { path });
    Ok(ctx)
}

async fn run(
    args: &Args,
    ctx: &mut Ctx,
    results: &mut Results,
    started: SystemTime,
    run_id: &str,
) -> Result<()> {
    let server_version = ctx.client.apiserver_version().await?;
    let (commit, dirty) = git_state();
    results.meta = report::Meta {
        started_utc: utc_stamp(started),
        commit,
        dirty,
        operator: binary_name(&args.operator_bin),
        operator_source: std::env::var("CMSET_BENCH_OPERATOR_SOURCE").unwrap_or_else(|_| "given".into()),
        operator_version: operator::version_of(&ctx.launch.bin),
        operator_args: args.operator_args.clone(),
        server_version: server_version.git_version,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        replicas: install::REPLICAS,
        lease_duration_s: args.lease_duration_seconds,
        flags: args.flags(),
        operator_requests: std::mem::take(&mut results.meta.operator_requests),
        bench_cpu_s: 0.0,
    };
    eprintln!(
        "bench: {run_id}: operator {} ({}) against {}; configurations {}",
        results.meta.operator,
        results.meta.operator_version,
        results.meta.server_version,
        results.meta.flags.configurations.join(", ")
    );
    for &config in &args.configurations {
        ctx.config = Some(config);
        results.configurations.push(ConfigResults {
            name: config.name().to_string(),
            install: config.describe(args.lease_duration_seconds),
            ..ConfigResults::default()
        });
        let into = results.configurations.last_mut().expect("just pushed");
        let t = Instant::now();
        // A configuration that cannot go on is a failed figure; the next one still runs.
        if let Err(e) = run_configuration(args, ctx, config, run_id, into).await {
            ctx.fail(format!("stopped: {e}"));
        }
        into.seconds = t.elapsed().as_secs_f64();
    }
    ctx.config = None;
    Ok(())
}

/// Before a stage: the floor again, unless floors are skipped.
async fn floor_before(args: &Args, ctx: &mut Ctx, stage: &str) {
    if !args.skip_floor {
        ctx.refloor(stage).await;
    }
}

async fn run_configuration(
    args: &Args,
    ctx: &mut Ctx,
    config: Configuration,
    run_id: &str,
    results: &mut ConfigResults,
) -> Result<()> {
    let since = ctx.started;
    let step = |k: u32, what: &str| {
        eprintln!(
            "bench: [{config}] [{k}/11] {what} (at {:.0} s)",
            since.elapsed().as_secs_f64()
        )
    };
    // The main namespace: everything but the scale stage.
    let ns = format!("{run_id}-{config}");
    let n = args.sets;
    ctx.create_namespace(&ns).await?;
    step(
        1,
        &format!("initial convergence: creating {n} sets and Deployments"),
    );
    let took = stages::populate(ctx, &ns, n).await?;
    eprintln!("bench:   created in {:.1} s", took.as_secs_f64());
    floor_before(args, ctx, "initial convergence").await;
    let tracker = std::sync::Arc::new(Tracker::start(&ctx.client, &ns));
    if !tracker.synced(ctx.timeout(n)).await {
        return Err("the Deployment watch did not sync".into());
    }
    eprintln!(
        "bench:   installing: two replicas{}",
        if config.webhook() { " and the webhook" } else { "" }
    );
    let (mut install, initial) = stages::converge(ctx, &ns, n, &tracker, config).await?;
    eprintln!(
        "bench:   {} of {n} converged in {} s",
        initial.converged,
        initial.seconds.map_or("-".into(), |s| format!("{s:.1}"))
    );
    results.initial = Some(initial);

    if !args.skip_churn {
        revive(ctx, &mut install, "churn", &mut results.restarted).await?;
        step(
            2,
            &format!("steady churn: {}/s for {} s", args.rate, args.duration),
        );
        floor_before(args, ctx, "churn").await;
        let c = stages::churn(
            ctx,
            &ns,
            n,
            &tracker,
            &install,
            args.rate,
            Duration::from_secs(args.duration),
        )
        .await;
        if let Some(l) = &c.latency {
            eprintln!(
                "bench:   {} changes; p50 {:.0} ms, p99 {:.0} ms",
                c.changes, l.p50_ms, l.p99_ms
            );
        }
        results.churn = Some(c);
    }

    if !args.skip_burst {
        revive(ctx, &mut install, "burst", &mut results.restarted).await?;
        step(3, &format!("burst of {n} (and writes per change)"));
        floor_before(args, ctx, "burst").await;
        let replay = match args.skip_replay {
            true => None,
            false => match stages::replay(ctx, &ns, n, &install, config.webhook()).await {
                Ok(r) => {
                    eprintln!(
                        "bench:   replay floor: {}",
                        r.rate.map_or("timed out".into(), |r| format!("{r:.1} changes/s"))
                    );
                    Some(r)
                }
                Err(e) => {
                    ctx.fail(format!("replay floor: {e}"));
                    None
                }
            },
        };
        let mut b = stages::burst(ctx, &ns, n, &tracker, &install).await;
        b.share_of_replay = b
            .rate
            .zip(replay.as_ref().and_then(|r| r.rate))
            .map(|(burst, replay)| burst / replay);
        b.replay = replay;
        eprintln!(
            "bench:   {}{}",
            b.rate.map_or("timed out".into(), |r| format!("{r:.1} changes/s")),
            b.share_of_replay.map_or(String::new(), |s| format!(
                ", {:.0}% of the replay floor",
                100.0 * s
            ))
        );
        results.burst = Some(b);
    }

    if !args.skip_failover {
        revive(ctx, &mut install, "failover", &mut results.restarted).await?;
        step(
            4,
            &format!(
                "failover: the leader frozen during churn at {}/s (lease {} s)",
                args.rate, args.lease_duration_seconds
            ),
        );
        floor_before(args, ctx, "failover").await;
        let f = stages::failover(
            ctx,
            &ns,
            n,
            &tracker,
            &mut install,
            args.rate,
            Duration::from_secs(args.failover_after),
        )
        .await;
        eprintln!(
            "bench:   standby leads after {} s, first write after {} s; {} LISTs",
            f.to_leader_s.map_or("-".into(), |s| format!("{s:.1}")),
            f.to_first_write_s.map_or("-".into(), |s| format!("{s:.1}")),
            f.list_requests.map_or("-".into(), |s| format!("{s:.0}")),
        );
        results.failover = Some(f);
    }

    if !args.skip_restart {
        step(5, "restart of both replicas");
        match stages::restart(ctx, &mut install, Duration::from_secs(args.restart_window)).await {
            Ok(r) => {
                eprintln!("bench:   {} writes after the restart", r.operator_self_writes);
                results.restart = Some(r);
            }
            Err(e) => ctx.fail(format!("restart: {e}")),
        }
    }
    stages::check_converged(ctx, &ns, n, &tracker, "the main namespace's stages").await;

    if !args.skip_noop {
        revive(ctx, &mut install, "no-op", &mut results.restarted).await?;
        step(
            6,
            &format!("no-op: {} unchanged sets applied again", args.noop_sets),
        );
        floor_before(args, ctx, "no-op").await;
        match shapes::noop(ctx, &ns, n, args.noop_sets, &install).await {
            Ok(x) => {
                eprintln!(
                    "bench:   {} operator writes; {} ms CPU per set",
                    x.operator_writes.map_or("-".into(), |w| format!("{w:.0}")),
                    x.cpu_ms_per_set.map_or("-".into(), |c| format!("{c:.2}"))
                );
                results.noop = Some(x);
            }
            Err(e) => ctx.fail(format!("no-op: {e}")),
        }
    }

    if !args.skip_large_set {
        revive(ctx, &mut install, "large set", &mut results.restarted).await?;
        step(
            7,
            &format!(
                "large set: {} KiB changed {} times",
                args.large_set_kib, args.large_set_changes
            ),
        );
        floor_before(args, ctx, "large set").await;
        match shapes::large_set(
            ctx,
            &ns,
            args.large_set_kib,
            args.large_set_changes,
            &tracker,
            &install,
        )
        .await
        {
            Ok(x) => {
                eprintln!(
                    "bench:   {} ms CPU per change; RSS after {}",
                    x.cost.cpu_ms_per_change.map_or("-".into(), |c| format!("{c:.1}")),
                    report::pct_by_role(&x.after_pct_of_before)
                );
                results.large_set = Some(x);
            }
            Err(e) => ctx.fail(format!("large set: {e}")),
        }
    }

    if !args.skip_flood && install.webhook.is_some() {
        revive(ctx, &mut install, "flood", &mut results.restarted).await?;
        step(
            7,
            &format!(
                "flood: {} bystander changes, quiet then while another namespace applies costly sets",
                args.flood_changes
            ),
        );
        floor_before(args, ctx, "flood").await;
        match flood::flood(ctx, &ns, n, args.flood_changes, &install, &tracker).await {
            Ok(x) => {
                let p99 = |l: &Option<report::Latency>| {
                    l.as_ref().map_or("-".into(), |l| format!("{:.0}", l.p99_ms))
                };
                eprintln!(
                    "bench:   admission p99 {} → {} ms; change p99 {} → {} ms; flood applies judged {}, backtracking {}, over budget {}, other {}",
                    p99(&x.quiet_admission),
                    p99(&x.flooded_admission),
                    p99(&x.quiet_change),
                    p99(&x.flooded_change),
                    x.flood_judged,
                    x.flood_backtracking,
                    x.flood_over_budget,
                    x.flood_other
                );
                if x.late > 0 {
                    ctx.fail(format!(
                        "flood: {} bystander changes did not arrive in time",
                        x.late
                    ));
                }
                results.flood = Some(x);
            }
            Err(e) => ctx.fail(format!("flood: {e}")),
        }
    }

    if !args.skip_fanout {
        revive(ctx, &mut install, "fan-out", &mut results.restarted).await?;
        step(
            8,
            &format!(
                "fan-out: one set read by {} Deployments, one change",
                args.fanout_workloads
            ),
        );
        floor_before(args, ctx, "fan-out").await;
        match shapes::fanout(ctx, &ns, args.fanout_workloads, &tracker, &install).await {
            Ok(x) => {
                eprintln!(
                    "bench:   all moved in {} s; the floor's {} patches took {} s",
                    x.seconds.map_or("-".into(), |s| format!("{s:.2}")),
                    x.workloads,
                    x.floor_seconds.map_or("-".into(), |s| format!("{s:.2}"))
                );
                results.fanout = Some(x);
            }
            Err(e) => ctx.fail(format!("fan-out: {e}")),
        }
    }

    if !args.skip_readers_churn {
        revive(ctx, &mut install, "readers' churn", &mut results.restarted).await?;
        step(
            8,
            &format!(
                "readers' churn: {} Deployments reading a set and {} reading none, 2 pods each, {} changes/s for {} s each",
                args.readers, args.readers, args.readers_rate, args.readers_duration
            ),
        );
        let duration = Duration::from_secs(args.readers_duration);
        match readers::readers_churn(
            ctx,
            &ns,
            &install,
            &tracker,
            args.readers,
            args.readers_rate,
            duration,
        )
        .await
        {
            Ok(x) => {
                for (what, p) in [("others", &x.others), ("readers", &x.readers)] {
                    eprintln!(
                        "bench:   {what}: {:.1} pod events/s; CPU above idle {:?} / {:?} ms/s (leader / standby); operator writes {:?}",
                        p.pod_events_per_s,
                        p.cpu_ms_per_s_above_idle_leader,
                        p.cpu_ms_per_s_above_idle_standby,
                        p.cost.writes.as_ref().map(|w| &w.operator_self),
                    );
                }
                results.readers_churn = Some(x);
            }
            Err(e) => ctx.fail(format!("readers' churn: {e}")),
        }
    }

    if !args.skip_leak {
        revive(ctx, &mut install, "leak", &mut results.restarted).await?;
        for cycle in 1..=args.leak_cycles {
            step(
                9,
                &format!(
                    "memory: {} sets created and deleted (cycle {cycle} of {})",
                    args.leak_sets, args.leak_cycles
                ),
            );
            match stages::leak(ctx, &ns, &install, args.leak_sets).await {
                Ok(l) => {
                    for r in &l.replicas {
                        eprintln!(
                            "bench:   {} RSS after: {:?} KiB",
                            r.role,
                            r.after.map(|m| m.rss_kib)
                        );
                    }
                    if results.leak.is_none() {
                        results.leak = Some(l.clone());
                    }
                    results.leak_cycles.push(l);
                }
                Err(e) => {
                    ctx.fail(format!("leak, cycle {cycle}: {e}"));
                    break;
                }
            }
        }
    }

    if !args.skip_memory {
        revive(ctx, &mut install, "memory", &mut results.restarted).await?;
        step(
            10,
            &format!(
                "memory with {} unrelated ConfigMaps and {} unrelated Deployments",
                args.unrelated_configmaps, args.unrelated_deployments
            ),
        );
        match stages::unrelated(
            ctx,
            &ns,
            &install,
            args.unrelated_configmaps,
            args.unrelated_deployments,
        )
        .await
        {
            Ok(m) => results.memory = Some(m),
            Err(e) => ctx.fail(format!("memory: {e}")),
        }
    }
    install.shutdown(ctx).await;
    drop(tracker);
    ctx.delete_namespace(&ns).await;

    if !args.skip_scales {
        for (k, &n) in args.scales.iter().enumerate() {
            step(11, &format!("scale {}/{}: {n} sets", k + 1, args.scales.len()));
            let s = scale(args, ctx, &format!("{ns}-n{n}"), n, config).await?;
            results.scales.push(s);
        }
    }
    Ok(())
}

/// Before a stage: a replica that exited by itself is started again, as the kubelet restarts a
/// container, and noted (its configuration's figures went on without it for a while).
async fn revive(ctx: &mut Ctx, install: &mut Install, stage: &str, noted: &mut Vec<String>) -> Result<()> {
    for r in install.revive(ctx).await? {
        eprintln!("bench:   {r} had exited; started again before {stage}");
        noted.push(format!("{r}, before {stage}"));
    }
    Ok(())
}

/// Initial convergence and a burst at `n` sets in a fresh namespace, deleted afterwards.
async fn scale(args: &Args, ctx: &mut Ctx, ns: &str, n: usize, config: Configuration) -> Result<Scale> {
    ctx.create_namespace(ns).await?;
    let took = stages::populate(ctx, ns, n).await?;
    eprintln!("bench:   created in {:.1} s", took.as_secs_f64());
    floor_before(args, ctx, &format!("scale {n}")).await;
    let tracker = Tracker::start(&ctx.client, ns);
    if !tracker.synced(ctx.timeout(n)).await {
        return Err("the Deployment watch did not sync".into());
    }
    let (install, initial) = stages::converge(ctx, ns, n, &tracker, config).await?;
    eprintln!(
        "bench:   initial: {}",
        initial
            .sets_per_s
            .map_or("timed out".into(), |r| format!("{r:.1} sets/s"))
    );
    // A burst on a namespace that never converged would measure the leftovers.
    let (mut install, mut restarted) = (install, vec![]);
    revive(ctx, &mut install, &format!("the burst of {n}"), &mut restarted).await?;
    let burst = if initial.sets_per_s.is_some() {
        let b = stages::burst(ctx, ns, n, &tracker, &install).await;
        eprintln!(
            "bench:   burst: {}",
            b.rate.map_or("timed out".into(), |r| format!("{r:.1} changes/s"))
        );
        Some(b)
    } else {
        None
    };
    install.shutdown(ctx).await;
    drop(tracker);
    let namespace_delete_s = ctx.delete_namespace(ns).await;
    Ok(Scale {
        sets: n,
        initial,
        burst,
        namespace_delete_s,
        restarted,
    })
}

/// A published log: the operator's lines without the two it writes for every change (created
/// revision, moved references), which it counts instead; no path of the machine.
fn log_digest(text: &str) -> String {
    const PER_CHANGE: [&str; 2] = ["created revision", "moved references"];
    let mut omitted = [0usize; 2];
    let mut out = String::new();
    for line in text.lines() {
        match PER_CHANGE
            .iter()
            .position(|m| line.contains(r#""level":"INFO""#) && line.contains(&format!(r#""message":"{m}""#)))
        {
            Some(k) => omitted[k] += 1,
            None => {
                out += line;
                out.push('\n');
            }
        }
    }
    if omitted.iter().any(|n| *n > 0) {
        out += &format!(
            "[cmset-bench: {} \"created revision\" and {} \"moved references\" lines omitted]\n",
            omitted[0], omitted[1]
        );
    }
    report::scrub_paths(&out)
}

fn write_outputs(out: &Path, r: &Results, baseline: Option<&Results>, publish: Option<&Path>) -> Result<()> {
    // No path of the machine in what may be published (a failure message may quote one).
    std::fs::write(
        out.join("results.json"),
        report::scrub_paths(&serde_json::to_string_pretty(r)?),
    )?;
    let table = report::scrub_paths(&report::table(r, baseline));
    std::fs::write(out.join("table.md"), &table)?;
    report::plot_churn(&out.join("churn_latency.svg"), r, baseline)?;
    report::plot_scaling(&out.join("cost_per_change.svg"), r, baseline)?;
    println!("{table}");
    eprintln!("bench: results in {}", out.display());
    if let Some(dir) = publish {
        std::fs::create_dir_all(dir)?;
        for f in [
            "results.json",
            "table.md",
            "churn_latency.svg",
            "cost_per_change.svg",
        ] {
            std::fs::copy(out.join(f), dir.join(f))?;
        }
        // The logs of this run only.
        let logs = dir.join("logs");
        if logs.is_dir() {
            std::fs::remove_dir_all(&logs)?;
        }
        std::fs::create_dir_all(&logs)?;
        for entry in std::fs::read_dir(out.join("logs"))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path)?;
                std::fs::write(logs.join(path.file_name().expect("a file")), log_digest(&text))?;
            }
        }
        eprintln!("bench: published to {}", dir.display());
    }
    Ok(())
}

/// Counts every figure is divided by: zero would make them meaningless, so it is refused up front.
fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1".to_string()),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

/// A ConfigMap's data may hold at most 1 MiB, and the revision adds a little metadata.
fn large_set_kib(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(n) if (1..=1000).contains(&n) => Ok(n),
        Ok(_) => Err("must be from 1 to 1000 (KiB; a ConfigMap holds at most 1 MiB)".to_string()),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

fn positive_rate(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        Ok(_) => Err("must be a positive number of changes per second".to_string()),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps() {
        assert_eq!(utc_stamp(UNIX_EPOCH), "19700101T000000Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_709_210_096); // 2024-02-29 12:34:56 UTC
        assert_eq!(utc_stamp(t), "20240229T123456Z");
    }

    #[test]
    fn counts_and_rates_that_would_divide_by_zero_are_refused() {
        let parse = |extra: &[&str]| Args::try_parse_from([&["cmset-bench"], extra].concat());
        for bad in [
            &["--sets", "0"][..],
            &["--sets=-3"],
            &["--rate", "0"],
            &["--rate", "NaN"],
            &["--duration", "0"],
            &["--scales", "100,0"],
            &["--concurrency", "0"],
            &["--floor-changes", "x"],
            &["--leak-sets", "0"],
            &["--fanout-workloads", "0"],
            &["--noop-sets", "0"],
            &["--large-set-kib", "0"],
            &["--large-set-kib", "1024"],
            &["--large-set-changes", "0"],
            &["--configurations", "webhook,nope"],
        ] {
            let err = parse(bad).expect_err(&format!("{bad:?} is refused"));
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad:?}: {err}"
            );
        }
        let ok = parse(&["--sets", "5", "--rate", "0.5", "--scales", "5,10"]).unwrap();
        assert_eq!((ok.sets, ok.rate, ok.scales), (5, 0.5, vec![5, 10]));
        // Given again (bench-smoke's flags, then BENCH_ARGS), the last one wins.
        let again = parse(&["--sets", "5", "--scales", "5,10", "--sets", "7", "--scales", "20"]).unwrap();
        assert_eq!((again.sets, again.scales), (7, vec![20]));
        let pids = parse(&["--pid", "a=1", "--pid", "b=2"]).unwrap();
        assert_eq!(pids.pids.len(), 2, "repeatable flags still add up");
    }

    #[test]
    fn both_configurations_by_default_and_the_flags_on_record() {
        let args = Args::try_parse_from(["cmset-bench"]).unwrap();
        assert_eq!(
            args.configurations,
            [Configuration::Webhook, Configuration::NoWebhook]
        );
        let one =
            Args::try_parse_from(["cmset-bench", "--configurations", "no-webhook", "--skip-leak"]).unwrap();
        let flags = one.flags();
        assert_eq!(flags.configurations, ["no-webhook"]);
        assert!(
            flags
                .command_line()
                .starts_with("--configurations no-webhook --sets 1000"),
            "{}",
            flags.command_line()
        );
        assert!(flags.command_line().ends_with("--skip-leak"));
    }

    #[test]
    fn published_logs_hold_no_path_and_no_per_change_lines() {
        let log = r#"{"timestamp":"2026-01-01T00:00:00Z","level":"INFO","message":"created revision","set":"s-00001"}
{"timestamp":"2026-01-01T00:00:00Z","level":"WARN","message":"cannot read /work/x/operator.kubeconfig"}
{"timestamp":"2026-01-01T00:00:00Z","level":"INFO","message":"became leader"}
"#;
        let d = log_digest(log);
        assert!(!d.contains("/work"), "{d}");
        assert!(
            d.contains("became leader") && d.contains("cannot read <path>"),
            "{d}"
        );
        assert!(d.contains("1 \"created revision\""), "{d}");
    }

    #[test]
    fn binaries_are_named_without_the_machines_paths() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            binary_name(&cwd.join("target/release/cmset-controller")),
            "target/release/cmset-controller"
        );
        assert_eq!(
            binary_name(Path::new("/opt/x/cmset-controller")),
            "cmset-controller"
        );
    }
}
