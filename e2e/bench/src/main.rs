//! `cmset-bench`: the project's benchmark (`make bench`). One run measures, against the cluster in
//! KUBECONFIG and all on the same machine in the same minutes:
//!
//! 1. the floor: what one change costs the bare API, no operator involved;
//! 2. initial convergence of N sets and N opted-in Deployments;
//! 3. steady churn at a fixed rate: latency from a set's PATCH to its Deployment naming the revision;
//! 4. a burst: every set changed at once;
//! 5. API requests per change, from the API server's own counters, by verb and resource;
//! 6. writes after a restart (there should be none);
//! 7. operator CPU per change and memory, also with many unrelated objects in the namespace;
//! 8. the burst again at several numbers of sets, each in a fresh namespace.
//!
//! Every time is also given as a multiple of the floor, so runs on noisy shared machines compare.

mod cluster;
mod operator;
mod report;
mod stages;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use kube::Client;

use cluster::{Result, Tracker};
use operator::{Launch, cpu_of};
use report::{MemoryFigures, Results, Scale};
use stages::Ctx;

#[derive(Clone, Debug, Parser)]
#[command(
    name = "cmset-bench",
    about = "The cmset benchmark: each figure also as a multiple of the bare API floor"
)]
struct Args {
    /// Sets (each with one Deployment) in the main namespace: convergence, churn, burst, restart, memory.
    #[arg(long, env = "CMSET_BENCH_SETS", default_value_t = 1000, value_parser = at_least_one)]
    sets: usize,
    /// Set changes per second during steady churn.
    #[arg(long, env = "CMSET_BENCH_RATE", default_value_t = 20.0, value_parser = positive_rate)]
    rate: f64,
    /// Seconds of steady churn.
    #[arg(long, env = "CMSET_BENCH_DURATION", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    duration: u64,
    /// Numbers of sets for the scale stage, each in a fresh namespace.
    #[arg(long, env = "CMSET_BENCH_SCALES", value_delimiter = ',', default_values_t = [100, 1000, 5000], value_parser = at_least_one)]
    scales: Vec<usize>,
    /// Unrelated ConfigMaps added to the main namespace for the memory figure.
    #[arg(long, env = "CMSET_BENCH_UNRELATED_CONFIGMAPS", default_value_t = 10_000)]
    unrelated_configmaps: usize,
    /// Unrelated (not opted-in) Deployments added to the main namespace for the memory figure.
    #[arg(long, env = "CMSET_BENCH_UNRELATED_DEPLOYMENTS", default_value_t = 1_000)]
    unrelated_deployments: usize,
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
    /// One more argument for the operator (repeat for several), e.g. `--operator-arg=--concurrency=8`.
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// Output directory (default: target/bench/<UTC timestamp>).
    #[arg(long, env = "CMSET_BENCH_OUT")]
    out: Option<PathBuf>,
    /// Client requests in flight for bulk creation, the burst and the floor's concurrent rate.
    #[arg(long, env = "CMSET_BENCH_CONCURRENCY", default_value_t = 32, value_parser = at_least_one)]
    concurrency: usize,
    /// Sequential changes timed for the floor.
    #[arg(long, env = "CMSET_BENCH_FLOOR_CHANGES", default_value_t = 60, value_parser = at_least_one)]
    floor_changes: usize,
    /// Seconds every wait is allowed, plus `--timeout-per-set-ms` for each object waited on.
    #[arg(long, env = "CMSET_BENCH_TIMEOUT_SECS", default_value_t = 120)]
    timeout_secs: u64,
    #[arg(long, env = "CMSET_BENCH_TIMEOUT_PER_SET_MS", default_value_t = 100)]
    timeout_per_set_ms: u64,
    /// Seconds after the restarted operator is ready during which its writes are counted.
    #[arg(long, env = "CMSET_BENCH_RESTART_WINDOW", default_value_t = 10)]
    restart_window: u64,
    /// Another process whose CPU per change is reported, as `name=pid` (e.g. the API server).
    #[arg(long = "pid", value_parser = parse_pid)]
    pids: Vec<(String, u32)>,
    /// An earlier results.json to show beside this run in the table and the plots.
    #[arg(long, env = "CMSET_BENCH_BASELINE")]
    baseline: Option<PathBuf>,
    /// Also copy results.json, table.md and the plots into this directory (e.g. e2e/bench/results).
    #[arg(long, env = "CMSET_BENCH_PUBLISH")]
    publish: Option<PathBuf>,
    /// Exit non-zero unless every figure was measured and every workload converged (for bench-smoke).
    #[arg(long)]
    strict: bool,
    #[arg(long)]
    skip_floor: bool,
    #[arg(long)]
    skip_churn: bool,
    #[arg(long)]
    skip_burst: bool,
    #[arg(long)]
    skip_restart: bool,
    #[arg(long)]
    skip_memory: bool,
    #[arg(long)]
    skip_scales: bool,
}

fn parse_pid(s: &str) -> std::result::Result<(String, u32), String> {
    let (name, pid) = s.split_once('=').ok_or("expected name=pid")?;
    Ok((name.to_string(), pid.parse().map_err(|e| format!("{e}"))?))
}

/// `YYYYmmddTHHMMSSZ`, the name of a run's output directory.
fn utc_stamp(t: SystemTime) -> String {
    jiff::Timestamp::try_from(t)
        .map(|ts| ts.strftime("%Y%m%dT%H%M%SZ").to_string())
        .unwrap_or_else(|_| "unknown-time".to_string())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let started = SystemTime::now();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/bench").join(utc_stamp(started)));
    if let Err(e) = std::fs::create_dir_all(&out) {
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
    let mut ctx = match context(&args, client, &out) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let namespaces = ctx.namespaces.clone();
    let t0 = Instant::now();
    let fatal = tokio::select! {
        r = run(&args, &mut ctx, &mut results, started) => r.err().map(|e| e.to_string()),
        _ = tokio::signal::ctrl_c() => Some("interrupted".to_string()),
    };
    if let Some(e) = &fatal {
        ctx.fail(format!("run stopped: {e}"));
    }
    // Whatever happened, leave no bench namespace behind (the operator died with its handle).
    let leftovers: Vec<String> = namespaces.lock().expect("lock").clone();
    for ns in leftovers {
        eprintln!("bench: deleting namespace {ns}");
        ctx.delete_namespace(&ns).await;
    }
    results.failures = std::mem::take(&mut ctx.failures);
    results.total_seconds = t0.elapsed().as_secs_f64();
    results.meta.bench_cpu_s = cpu_of(std::process::id()).map_or(0.0, |d| d.as_secs_f64());
    let baseline = args.baseline.as_ref().and_then(|p| {
        let text = std::fs::read_to_string(p).ok()?;
        serde_json::from_str::<Results>(&text)
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

fn context(args: &Args, client: Client, out: &Path) -> Result<Ctx> {
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
        log_dir: out.to_path_buf(),
    };
    let mut ctx = Ctx::new(client, launch, args.concurrency);
    ctx.timeout_base = Duration::from_secs(args.timeout_secs);
    ctx.timeout_per_object = Duration::from_millis(args.timeout_per_set_ms);
    ctx.pids = args.pids.clone();
    ctx.pids.push(("cmset-bench".into(), std::process::id()));
    Ok(ctx)
}

async fn run(args: &Args, ctx: &mut Ctx, results: &mut Results, started: SystemTime) -> Result<()> {
    let nanos = started.duration_since(UNIX_EPOCH)?.subsec_nanos();
    let run_id = format!("cmset-bench-{:05x}", (nanos ^ std::process::id()) & 0xfffff);
    let server_version = ctx.client.apiserver_version().await?;
    results.meta = report::Meta {
        started_utc: utc_stamp(started),
        operator_bin: args.operator_bin.display().to_string(),
        operator_version: operator::version_of(&ctx.launch.bin),
        operator_args: args.operator_args.clone(),
        server_version: server_version.git_version,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        sets: args.sets,
        rate: args.rate,
        duration_s: args.duration,
        scales: args.scales.clone(),
        concurrency: args.concurrency,
        unrelated_configmaps: args.unrelated_configmaps,
        unrelated_deployments: args.unrelated_deployments,
        bench_cpu_s: 0.0,
    };
    eprintln!(
        "bench: {run_id}: operator {} against {}",
        results.meta.operator_bin, results.meta.server_version
    );

    if !args.skip_floor {
        eprintln!("bench: [1/8] floor");
        let floor = stages::floor(ctx, &format!("{run_id}-floor"), args.floor_changes).await?;
        eprintln!(
            "bench:   sequential p50 {:.1} ms; {:.0} changes/s at {} in flight",
            floor.seq_p50_ms, floor.concurrent_rate, floor.concurrency
        );
        ctx.floor = Some(floor.clone());
        results.floor = Some(floor);
    }

    // The main namespace: everything but the scale stage.
    let ns = run_id.clone();
    let n = args.sets;
    ctx.create_namespace(&ns).await?;
    eprintln!("bench: [2/8] initial convergence: creating {n} sets and Deployments");
    let took = stages::populate(ctx, &ns, n).await?;
    eprintln!(
        "bench:   created in {:.1} s; starting the operator",
        took.as_secs_f64()
    );
    let tracker = std::sync::Arc::new(Tracker::start(&ctx.client, &ns));
    if !tracker.synced(ctx.timeout(n)).await {
        return Err("the Deployment watch did not sync".into());
    }
    let (mut op, initial) = stages::converge(ctx, &ns, n, &tracker).await?;
    eprintln!(
        "bench:   {} of {n} converged in {} s",
        initial.converged,
        initial.seconds.map_or("-".into(), |s| format!("{s:.1}"))
    );
    let after_initial = initial.memory;
    results.initial = Some(initial);

    if !args.skip_churn {
        eprintln!(
            "bench: [3/8] steady churn: {}/s for {} s",
            args.rate, args.duration
        );
        let c = stages::churn(
            ctx,
            &ns,
            n,
            &tracker,
            &op,
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
        eprintln!("bench: [4/8] burst of {n} (and [5/8] writes per change)");
        let b = stages::burst(ctx, &ns, n, &tracker, &op).await;
        eprintln!(
            "bench:   {}",
            b.rate.map_or("timed out".into(), |r| format!("{r:.1} changes/s"))
        );
        results.burst = Some(b);
    }

    if !args.skip_restart {
        eprintln!("bench: [6/8] restart");
        match stages::restart(ctx, &ns, &mut op, Duration::from_secs(args.restart_window)).await {
            Ok(r) => {
                eprintln!("bench:   {} writes after the restart", r.operator_self_writes);
                results.restart = Some(r);
            }
            Err(e) => ctx.fail(format!("restart: {e}")),
        }
    }

    let mut memory = MemoryFigures {
        after_initial,
        ..MemoryFigures::default()
    };
    if !args.skip_memory {
        eprintln!(
            "bench: [7/8] memory with {} unrelated ConfigMaps and {} unrelated Deployments",
            args.unrelated_configmaps, args.unrelated_deployments
        );
        match stages::unrelated(
            ctx,
            &ns,
            &op,
            args.unrelated_configmaps,
            args.unrelated_deployments,
        )
        .await
        {
            Ok(m) => memory = MemoryFigures { after_initial, ..m },
            Err(e) => ctx.fail(format!("memory: {e}")),
        }
    }
    results.memory = Some(memory);
    op.kill().await;
    drop(tracker);
    ctx.delete_namespace(&ns).await;

    if !args.skip_scales {
        for (k, &n) in args.scales.iter().enumerate() {
            eprintln!("bench: [8/8] scale {}/{}: {n} sets", k + 1, args.scales.len());
            let s = scale(ctx, &format!("{run_id}-n{n}"), n).await?;
            results.scales.push(s);
        }
    }
    Ok(())
}

/// Initial convergence and a burst at `n` sets in a fresh namespace, deleted afterwards.
async fn scale(ctx: &mut Ctx, ns: &str, n: usize) -> Result<Scale> {
    ctx.create_namespace(ns).await?;
    let took = stages::populate(ctx, ns, n).await?;
    eprintln!("bench:   created in {:.1} s", took.as_secs_f64());
    let tracker = Tracker::start(&ctx.client, ns);
    if !tracker.synced(ctx.timeout(n)).await {
        return Err("the Deployment watch did not sync".into());
    }
    let (mut op, initial) = stages::converge(ctx, ns, n, &tracker).await?;
    eprintln!(
        "bench:   initial: {}",
        initial
            .sets_per_s
            .map_or("timed out".into(), |r| format!("{r:.1} sets/s"))
    );
    // A burst on a namespace that never converged would measure the leftovers.
    let burst = if initial.sets_per_s.is_some() {
        let b = stages::burst(ctx, ns, n, &tracker, &op).await;
        eprintln!(
            "bench:   burst: {}",
            b.rate.map_or("timed out".into(), |r| format!("{r:.1} changes/s"))
        );
        Some(b)
    } else {
        None
    };
    op.kill().await;
    drop(tracker);
    let namespace_delete_s = ctx.delete_namespace(ns).await;
    Ok(Scale {
        sets: n,
        initial,
        burst,
        namespace_delete_s,
    })
}

fn write_outputs(out: &Path, r: &Results, baseline: Option<&Results>, publish: Option<&Path>) -> Result<()> {
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let table = report::table(r, baseline);
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
    }
}
