//! The stages of a run. Each returns its figures; a wait that runs out becomes a failed figure (a
//! count of what did not converge, and a line in `failures`), never a hang.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmset_api::ConfigMapSet;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::cluster::{
    self, RequestCounts, Result, Tracker, Writer, bounded, create, deployment_name, patch_set, revision_name,
    set_name,
};
use crate::operator::{Launch, Operator, cpu_of};
use crate::report::{Burst, Churn, Convergence, Cost, Floor, MemoryFigures, Restart, Writes, latency};

/// What every stage shares.
pub struct Ctx {
    pub client: Client,
    pub launch: Launch,
    pub concurrency: usize,
    pub floor: Option<Floor>,
    /// Other processes whose CPU per change is reported (`--pid name=pid`), the bench included.
    pub pids: Vec<(String, u32)>,
    pub failures: Vec<String>,
    /// Namespaces this run created and has not deleted yet (deleted on the way out, whatever happens).
    pub namespaces: Arc<Mutex<Vec<String>>>,
    /// Time allowed for a wait on `n` objects: base + n × per-object.
    pub timeout_base: Duration,
    pub timeout_per_object: Duration,
    /// Settled: the operator sent no write, and no tracked Deployment changed, for this long.
    pub quiet: Duration,
    values: AtomicU64,
}

impl Ctx {
    pub fn new(client: Client, launch: Launch, concurrency: usize) -> Self {
        Self {
            client,
            launch,
            concurrency,
            floor: None,
            pids: vec![],
            failures: vec![],
            namespaces: Arc::default(),
            timeout_base: Duration::from_secs(120),
            timeout_per_object: Duration::from_millis(100),
            quiet: Duration::from_secs(2),
            values: AtomicU64::new(1),
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
    fn next_value(&self) -> String {
        format!("c{}", self.values.fetch_add(1, Ordering::Relaxed))
    }

    pub fn fail(&mut self, what: impl Into<String>) {
        let what = what.into();
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

    fn sets(&self, ns: &str) -> Api<ConfigMapSet> {
        Api::namespaced(self.client.clone(), ns)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ------------------------------------------------------------------------------------------- floor --

/// The bare API cost of one change on this machine, in a namespace no operator watches: create a
/// ConfigMap, point a Deployment's template at it, patch an annotation on a ConfigMapSet.
pub async fn floor(ctx: &mut Ctx, ns: &str, sequential: usize) -> Result<Floor> {
    ctx.create_namespace(ns).await?;
    let c = ctx.concurrency;
    let (sets, deployments) = (
        ctx.sets(ns),
        Api::<Deployment>::namespaced(ctx.client.clone(), ns),
    );
    let configmaps = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    bounded(c, c, |i| {
        let (sets, deployments) = (sets.clone(), deployments.clone());
        async move {
            create(&sets, &cluster::set_object(&format!("floor-{i}"), "0")?).await?;
            let d = cluster::deployment_object(&format!("floor-{i}"), "floor-cm", false)?;
            create(&deployments, &d).await
        }
    })
    .await?;
    let change = |worker: usize, k: usize| {
        let (sets, deployments, configmaps) = (sets.clone(), deployments.clone(), configmaps.clone());
        async move {
            let name = format!("floor-{worker}");
            let cm = format!("floor-{worker}-{k}");
            create(
                &configmaps,
                &cluster::configmap_object(&cm, &[("v", &k.to_string())])?,
            )
            .await?;
            let template = Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.9",
                "envFrom": [{"configMapRef": {"name": cm, "optional": true}}],
            }]}}}}));
            let pp = PatchParams::default();
            cluster::retry("patch floor Deployment", || {
                deployments.patch(&name, &pp, &template)
            })
            .await?;
            let note =
                Patch::Merge(json!({"metadata": {"annotations": {"bench.cmset.dev/change": k.to_string()}}}));
            cluster::retry("patch floor set", || sets.patch(&name, &pp, &note)).await?;
            Result::<()>::Ok(())
        }
    };
    // Sequential: one change at a time, after a few to warm connections and caches.
    let mut seq = vec![];
    for k in 0..sequential + 3 {
        let start = Instant::now();
        change(0, k).await?;
        if k >= 3 {
            seq.push(ms(start.elapsed()));
        }
    }
    seq.sort_by(f64::total_cmp);
    // Concurrent: `c` workers, each on its own objects, as many changes as the burst sends at a time.
    let per_worker = (sequential.max(8 * c)).div_ceil(c);
    let start = Instant::now();
    bounded(c, c, |w| {
        let change = &change;
        async move {
            for k in 0..per_worker {
                change(w, 1000 + k).await?;
            }
            Ok(())
        }
    })
    .await?;
    let took = start.elapsed().as_secs_f64();
    let total = per_worker * c;
    let floor = Floor {
        sequential_changes: seq.len(),
        seq_p50_ms: crate::report::percentile(&seq, 50.0),
        seq_p90_ms: crate::report::percentile(&seq, 90.0),
        concurrency: c,
        concurrent_changes: total,
        concurrent_rate: total as f64 / took,
        concurrent_ms_per_change: took * 1000.0 / total as f64,
    };
    ctx.delete_namespace(ns).await;
    Ok(floor)
}

// ----------------------------------------------------------------------------------------- objects --

/// `n` sets and `n` opted-in Deployments, Deployment `d-i` reading set `s-i` by its bare name.
pub async fn populate(ctx: &Ctx, ns: &str, n: usize) -> Result<Duration> {
    let start = Instant::now();
    let sets = ctx.sets(ns);
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    bounded(2 * n, ctx.concurrency, |k| {
        let (sets, deployments) = (sets.clone(), deployments.clone());
        async move {
            let i = k / 2;
            if k % 2 == 0 {
                create(&sets, &cluster::set_object(&set_name(i), "0")?).await
            } else {
                let d = cluster::deployment_object(&deployment_name(i), &set_name(i), true)?;
                create(&deployments, &d).await
            }
        }
    })
    .await?;
    Ok(start.elapsed())
}

/// Unrelated objects: ConfigMaps no set owns, Deployments that did not opt in (each reading one of
/// those ConfigMaps).
pub async fn populate_unrelated(
    ctx: &Ctx,
    ns: &str,
    configmaps: usize,
    deployments: usize,
) -> Result<Duration> {
    let start = Instant::now();
    let cms = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    let deps = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    bounded(configmaps + deployments, ctx.concurrency, |k| {
        let (cms, deps) = (cms.clone(), deps.clone());
        async move {
            if k < configmaps {
                let cm = cluster::configmap_object(&format!("unrelated-{k:05}"), &[("LOG_LEVEL", "info")])?;
                create(&cms, &cm).await
            } else {
                let i = k - configmaps;
                let reads = format!("unrelated-{:05}", i % configmaps.max(1));
                create(
                    &deps,
                    &cluster::deployment_object(&format!("unrelated-{i:05}"), &reads, false)?,
                )
                .await
            }
        }
    })
    .await?;
    Ok(start.elapsed())
}

// ------------------------------------------------------------------------------------------- meter --

/// Counters at the start of a measured window.
pub struct Meter {
    api: Option<RequestCounts>,
    op_writes: Option<BTreeMap<String, f64>>,
    cpu: Option<Duration>,
    others: Vec<(String, Option<Duration>)>,
}

impl Meter {
    pub async fn start(ctx: &Ctx, op: &Operator) -> Self {
        Self {
            api: cluster::apiserver_requests(&ctx.client).await.ok(),
            op_writes: op.writes().await,
            cpu: op.cpu(),
            others: ctx.pids.iter().map(|(n, p)| (n.clone(), cpu_of(*p))).collect(),
        }
    }

    /// The window's cost per change; `bench` holds the requests the bench sent in it, by (verb, resource).
    pub async fn finish(self, ctx: &mut Ctx, op: &Operator, changes: usize, bench: &RequestCounts) -> Cost {
        let per = |v: f64| v / changes.max(1) as f64;
        let cpu_ms = match (self.cpu, op.cpu()) {
            (Some(a), Some(b)) => Some(per(ms(b.saturating_sub(a)))),
            _ => None,
        };
        let other_cpu = self
            .others
            .iter()
            .filter_map(|(name, before)| {
                let pid = ctx.pids.iter().find(|(n, _)| n == name)?.1;
                Some((name.clone(), per(ms(cpu_of(pid)?.saturating_sub((*before)?)))))
            })
            .collect();
        let after = cluster::apiserver_requests(&ctx.client).await;
        let op_after = op.writes().await;
        let writes = match (self.api, after) {
            (Some(before), Ok(after)) => {
                let mut w = writes_from(&cluster::delta(&after, &before), bench, changes);
                if let (Some(a), Some(b)) = (&self.op_writes, &op_after) {
                    w.operator_self = b
                        .iter()
                        .map(|(k, v)| (k.clone(), per(v - a.get(k).copied().unwrap_or(0.0))))
                        .filter(|(_, v)| *v > 0.0)
                        .collect();
                    w.operator_self_per_change = w.operator_self.values().sum();
                }
                Some(w)
            }
            (_, Err(e)) => {
                ctx.fail(format!("API server /metrics: {e}"));
                None
            }
            (None, _) => None,
        };
        Cost {
            cpu_ms_per_change: cpu_ms,
            cpu_x_floor: cpu_ms.zip(ctx.floor.as_ref()).map(|(c, f)| c / f.seq_p50_ms),
            other_cpu_ms_per_change: other_cpu,
            writes,
            settle_s: None,
        }
    }
}

fn writes_from(delta: &RequestCounts, bench: &RequestCounts, changes: usize) -> Writes {
    let per = changes.max(1) as f64;
    let mut w = Writes {
        changes,
        bench_requests_subtracted: bench.values().sum(),
        ..Writes::default()
    };
    for ((verb, resource), count) in delta {
        let count = count
            - bench
                .get(&(verb.clone(), resource.clone()))
                .copied()
                .unwrap_or(0.0);
        if count <= 0.0 || verb == "WATCH" {
            continue;
        }
        let key = format!("{verb} {resource}");
        let map = match cluster::writer(verb, resource) {
            Writer::Operator => &mut w.operator,
            Writer::ControllerManager => &mut w.controller_manager,
            Writer::Other => &mut w.other,
            Writer::Read => &mut w.reads,
        };
        map.insert(key, count / per);
    }
    w.operator_per_change = w.operator.values().sum();
    w.operator_excl_events_per_change = w
        .operator
        .iter()
        .filter(|(k, _)| !k.ends_with(" events.events.k8s.io"))
        .map(|(_, v)| v)
        .sum();
    w.controller_manager_per_change = w.controller_manager.values().sum();
    w
}

fn set_patches(n: usize) -> RequestCounts {
    [(
        ("PATCH".to_string(), "configmapsets.cmset.dev".to_string()),
        n as f64,
    )]
    .into()
}

// ------------------------------------------------------------------------------------------ settle --

/// Waits until what `changes` changes set off is over, so that a window's counts are whole and the
/// next window starts clean: kube-controller-manager has observed every tracked Deployment, none of
/// them changed for `quiet`, and the operator sent no write for `quiet`. (The controller manager
/// writes at most 20 requests/s per controller by default, so its rollouts trail the operator.)
/// Bounded by `ctx.timeout(changes)`; a timeout is a failed figure.
pub async fn settle(
    ctx: &mut Ctx,
    op: &Operator,
    tracker: Option<&Tracker>,
    changes: usize,
    what: &str,
) -> Option<f64> {
    let start = Instant::now();
    let deadline = start + ctx.timeout(changes);
    let mut last = op.writes_total().await;
    let (mut last_write, mut said) = (start, start);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = op.writes_total().await;
        if now != last {
            last = now;
            last_write = Instant::now();
        }
        let (unobserved, deployments_quiet) = tracker.map_or((0, Duration::MAX), Tracker::rollouts);
        if unobserved == 0 && deployments_quiet >= ctx.quiet && last_write.elapsed() >= ctx.quiet {
            return Some(start.elapsed().as_secs_f64());
        }
        if Instant::now() >= deadline {
            ctx.fail(format!(
                "after {what}: not settled within {:?} ({unobserved} rollouts pending, last operator write {:.0} s ago)",
                ctx.timeout(changes),
                last_write.elapsed().as_secs_f64()
            ));
            return None;
        }
        if said.elapsed() >= Duration::from_secs(20) {
            eprintln!(
                "bench:   {what}: settling for {:.0} s: {unobserved} rollouts pending, last operator write {:.1} s ago",
                start.elapsed().as_secs_f64(),
                last_write.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
    }
}

// -------------------------------------------------------------------------------------- convergence --

/// Starts the operator on a namespace whose sets and Deployments exist, and times until every
/// Deployment names its set's first revision.
pub async fn converge(
    ctx: &mut Ctx,
    ns: &str,
    n: usize,
    tracker: &Tracker,
) -> Result<(Operator, Convergence)> {
    let start = Instant::now();
    for i in 0..n {
        tracker.expect(&deployment_name(i), &revision_name(&set_name(i), "0"), start);
    }
    let mut op = Operator::spawn(&ctx.launch, ns)?;
    let timeout = ctx.timeout(n);
    let ready = op.ready(timeout).await;
    let late = tracker.drain(start + timeout).await;
    let arrivals = tracker.take_arrivals();
    let mut c = Convergence {
        sets: n,
        converged: arrivals.len(),
        ready_s: ready.as_ref().ok().map(Duration::as_secs_f64),
        ..Convergence::default()
    };
    if let Err(e) = ready {
        ctx.fail(format!("initial convergence of {n} sets: {e}"));
    }
    if late.is_empty() {
        let last = arrivals.iter().map(|a| a.at).max().unwrap_or(start);
        let secs = last.duration_since(start).as_secs_f64();
        c.seconds = Some(secs);
        c.sets_per_s = Some(n as f64 / secs);
        c.x_floor = ctx.rate_x_floor(n, secs);
    } else {
        let (d, want, now) = &late[0];
        ctx.fail(format!(
            "initial convergence of {n} sets: {} Deployments did not name their revision within {timeout:?} \
             (e.g. {d} names {now:?}, expected {want})",
            late.len()
        ));
    }
    c.settle_s = settle(
        ctx,
        &op,
        Some(tracker),
        2 * n,
        &format!("initial convergence of {n}"),
    )
    .await;
    c.cpu_ms_per_set = op.cpu().map(|d| ms(d) / n as f64);
    c.memory = op.memory();
    Ok((op, c))
}

// ------------------------------------------------------------------------------------------- churn --

/// Changes one set at a time at `rate` per second for `duration`, round robin over the sets that have
/// no change in flight, and times each change from its PATCH response to the watch event showing its
/// Deployment on the new revision.
pub async fn churn(
    ctx: &mut Ctx,
    ns: &str,
    n: usize,
    tracker: &Arc<Tracker>,
    op: &Operator,
    rate: f64,
    duration: Duration,
) -> Churn {
    let meter = Meter::start(ctx, op).await;
    let sets = ctx.sets(ns);
    let inflight: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let permits = Arc::new(tokio::sync::Semaphore::new(ctx.concurrency));
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut cursor, mut sent, mut skipped) = (0usize, 0usize, 0usize);
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    while start.elapsed() < duration {
        ticker.tick().await;
        let free = (0..n).map(|k| (cursor + k) % n).find(|i| {
            !inflight.lock().expect("lock").contains(i) && !tracker.is_pending(&deployment_name(*i))
        });
        let Some(i) = free else {
            skipped += 1;
            continue;
        };
        cursor = i + 1;
        sent += 1;
        inflight.lock().expect("lock").insert(i);
        let value = ctx.next_value();
        let (sets, tracker, inflight, errors, permits) = (
            sets.clone(),
            tracker.clone(),
            inflight.clone(),
            errors.clone(),
            permits.clone(),
        );
        tasks.spawn(async move {
            let _permit = permits.acquire().await;
            let set = set_name(i);
            match patch_set(&sets, &set, &value).await {
                Ok(()) => tracker.expect(&deployment_name(i), &revision_name(&set, &value), Instant::now()),
                Err(_) => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            inflight.lock().expect("lock").remove(&i);
        });
    }
    let sending = start.elapsed();
    // Every PATCH is bounded by its own timeouts and retries.
    while tasks.join_next().await.is_some() {}
    let late = tracker.drain(Instant::now() + ctx.timeout_base).await;
    let latencies: Vec<f64> = tracker.take_arrivals().iter().map(|a| ms(a.latency)).collect();
    let failed_patches = errors.load(Ordering::Relaxed) as usize;
    if failed_patches > 0 {
        ctx.fail(format!("churn: {failed_patches} set PATCHes failed"));
    }
    if !late.is_empty() {
        ctx.fail(format!(
            "churn: {} changes did not reach their Deployment within {:?} of the end (e.g. {} names {:?}, expected {})",
            late.len(),
            ctx.timeout_base,
            late[0].0,
            late[0].2,
            late[0].1
        ));
    }
    let patched = sent - failed_patches;
    let settle_s = settle(ctx, op, Some(tracker), patched, "churn").await;
    let mut cost = meter.finish(ctx, op, patched, &set_patches(patched)).await;
    cost.settle_s = settle_s;
    Churn {
        target_rate: rate,
        achieved_rate: sent as f64 / sending.as_secs_f64(),
        duration_s: sending.as_secs_f64(),
        changes: patched,
        converged: latencies.len(),
        timed_out: late.len(),
        skipped_busy: skipped,
        latency: latency(&latencies, ctx.floor.as_ref()),
        cost,
        latencies_ms: latencies,
    }
}

// ------------------------------------------------------------------------------------------- burst --

/// Changes every set at once (`concurrency` PATCHes in flight) and times until every Deployment names
/// its new revision.
pub async fn burst(ctx: &mut Ctx, ns: &str, n: usize, tracker: &Tracker, op: &Operator) -> Burst {
    let meter = Meter::start(ctx, op).await;
    let sets = ctx.sets(ns);
    let values: Vec<String> = (0..n).map(|_| ctx.next_value()).collect();
    let start = Instant::now();
    let sent = bounded(n, ctx.concurrency, |i| {
        let (sets, value) = (sets.clone(), values[i].clone());
        async move {
            let set = set_name(i);
            patch_set(&sets, &set, &value).await?;
            tracker.expect(&deployment_name(i), &revision_name(&set, &value), Instant::now());
            Ok(())
        }
    })
    .await;
    let timeout = ctx.timeout(n);
    if let Err(e) = sent {
        ctx.fail(format!("burst of {n}: {e}"));
    }
    let late = tracker.drain(start + timeout).await;
    let arrivals = tracker.take_arrivals();
    let mut b = Burst {
        changes: n,
        converged: arrivals.len(),
        ..Burst::default()
    };
    if late.is_empty() && arrivals.len() == n {
        let secs = arrivals
            .iter()
            .map(|a| a.at)
            .max()
            .unwrap_or(start)
            .duration_since(start)
            .as_secs_f64();
        b.seconds = Some(secs);
        b.rate = Some(n as f64 / secs);
        b.x_floor = ctx.rate_x_floor(n, secs);
    } else {
        ctx.fail(format!(
            "burst of {n}: {} of {n} Deployments did not name their new revision within {timeout:?}",
            n - arrivals.len()
        ));
    }
    let latencies: Vec<f64> = arrivals.iter().map(|a| ms(a.latency)).collect();
    b.latency = latency(&latencies, ctx.floor.as_ref());
    let settle_s = settle(ctx, op, Some(tracker), n, &format!("the burst of {n}")).await;
    b.cost = meter.finish(ctx, op, n, &set_patches(n)).await;
    b.cost.settle_s = settle_s;
    b
}

// ----------------------------------------------------------------------------------------- restart --

/// Kills the operator, starts it again, and counts its writes until `window` after it is ready.
pub async fn restart(ctx: &mut Ctx, ns: &str, op: &mut Operator, window: Duration) -> Result<Restart> {
    let before = cluster::apiserver_requests(&ctx.client).await?;
    op.kill().await;
    let mut fresh = Operator::spawn(&ctx.launch, ns)?;
    let ready = fresh.ready(ctx.timeout_base).await?;
    tokio::time::sleep(window).await;
    let after = cluster::apiserver_requests(&ctx.client).await?;
    let writes: BTreeMap<String, f64> = cluster::delta(&after, &before)
        .into_iter()
        .filter(|((verb, res), _)| cluster::writer(verb, res) == Writer::Operator)
        .map(|((verb, res), v)| (format!("{verb} {res}"), v))
        .collect();
    let r = Restart {
        ready_s: ready.as_secs_f64(),
        window_s: fresh.started.elapsed().as_secs_f64(),
        operator_self_writes: fresh.writes_total().await.unwrap_or(f64::NAN),
        operator_apiserver_total: writes.values().sum(),
        operator_apiserver_writes: writes,
    };
    *op = fresh;
    Ok(r)
}

// ------------------------------------------------------------------------------------------ memory --

/// RSS of the running operator before and after the namespace fills with unrelated objects.
pub async fn unrelated(
    ctx: &mut Ctx,
    ns: &str,
    op: &Operator,
    configmaps: usize,
    deployments: usize,
) -> Result<MemoryFigures> {
    let before = op.memory();
    let took = populate_unrelated(ctx, ns, configmaps, deployments).await?;
    // Let the operator see (or ignore) every event, then some more.
    settle(ctx, op, None, 0, "unrelated objects").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = op.memory();
    Ok(MemoryFigures {
        before_unrelated: before,
        after_unrelated: after,
        unrelated_configmaps: configmaps,
        unrelated_deployments: deployments,
        create_seconds: took.as_secs_f64(),
        rss_ratio: before
            .zip(after)
            .map(|(b, a)| a.rss_kib as f64 / b.rss_kib.max(1) as f64),
        ..MemoryFigures::default()
    })
}
