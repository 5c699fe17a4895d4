//! The stages of a run. Each returns its figures; a wait that runs out becomes a failed figure (a
//! count of what did not converge, and a line in `failures`), never a hang.

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
    floor_ready: bool,
    /// The run's FlowSchemas that count the operator's own requests, when they could be made.
    pub identity: Option<crate::identity::Schemas>,
    /// The replicas' own ServiceAccount, when the run made one.
    pub run_identity: Option<crate::identity::Identity>,
    /// Deployments made so far in the fan-out floor's namespace (made once per run, grown as needed).
    pub fanout_floor_workloads: usize,
    pub floor_changes: usize,
    floor_rounds: usize,
    values: AtomicU64,
    /// When the run started (for the progress lines).
    pub started: Instant,
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

// ------------------------------------------------------------------------------------------- floor --

const FLOOR_ROUND: &str = "bench.cmset.dev/floor-round";

/// The bare API cost of one change on this machine, in a namespace no operator watches and no webhook
/// is called for: create a ConfigMap, point a Deployment's template at it, patch an annotation on a
/// ConfigMapSet. The namespace and its sets and Deployments are made once per run; each measurement
/// deletes the ConfigMaps it made.
pub async fn floor(ctx: &mut Ctx) -> Result<Floor> {
    let (ns, c) = (ctx.floor_ns.clone(), ctx.concurrency);
    let (sets, deployments) = (
        ctx.sets(&ns),
        Api::<Deployment>::namespaced(ctx.client.clone(), &ns),
    );
    let configmaps = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns);
    if !ctx.floor_ready {
        ctx.create_namespace(&ns).await?;
        bounded(c, c, |i| {
            let (sets, deployments) = (sets.clone(), deployments.clone());
            async move {
                create(&sets, &cluster::set_object(&format!("floor-{i}"), "0")?).await?;
                let d = cluster::deployment_object(&format!("floor-{i}"), "floor-cm", false)?;
                create(&deployments, &d).await
            }
        })
        .await?;
        ctx.floor_ready = true;
    }
    ctx.floor_rounds += 1;
    let round = ctx.floor_rounds.to_string();
    let change = |worker: usize, k: usize| {
        let (sets, deployments, configmaps, round) = (
            sets.clone(),
            deployments.clone(),
            configmaps.clone(),
            round.clone(),
        );
        async move {
            let name = format!("floor-{worker}");
            let cm_name = format!("floor-{round}-{worker}-{k}");
            let cm: ConfigMap = serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": cm_name, "labels": {FLOOR_ROUND: round}},
                "data": {"v": k.to_string()},
            }))?;
            create(&configmaps, &cm).await?;
            let template = Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{
                "name": "app",
                "image": "registry.k8s.io/pause:3.9",
                "envFrom": [{"configMapRef": {"name": cm_name, "optional": true}}],
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
    let sequential = ctx.floor_changes;
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
    let (lp, dp) = (
        ListParams::default().labels(&format!("{FLOOR_ROUND}={round}")),
        DeleteParams::default(),
    );
    cluster::retry("delete the floor's ConfigMaps", || {
        configmaps.delete_collection(&dp, &lp)
    })
    .await?;
    Ok(Floor {
        sequential_changes: seq.len(),
        seq_p50_ms: crate::report::percentile(&seq, 50.0),
        seq_p90_ms: crate::report::percentile(&seq, 90.0),
        concurrency: c,
        concurrent_changes: total,
        concurrent_rate: total as f64 / took,
        concurrent_ms_per_change: took * 1000.0 / total as f64,
    })
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

/// Deployments among the first `n` that do not name their set's current revision (by the set's spec
/// on the API server and what the watch last saw): what a stage left unconverged.
pub async fn unconverged(ctx: &Ctx, ns: &str, n: usize, tracker: &Tracker) -> Result<Vec<String>> {
    let (api, lp) = (ctx.sets(ns), ListParams::default());
    let sets = cluster::retry("list sets", || api.list(&lp)).await?;
    let mut wrong = vec![];
    for set in sets {
        let name = set.metadata.name.clone().unwrap_or_default();
        let Some(i) = (0..n).find(|i| set_name(*i) == name) else {
            continue;
        };
        let value = serde_json::to_value(&set.spec)?;
        let v = value
            .pointer("/template/data/v")
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        let want = revision_name(&name, v);
        if tracker.current(&deployment_name(i)).as_deref() != Some(want.as_str()) {
            wrong.push(deployment_name(i));
        }
    }
    Ok(wrong)
}

/// Fails the figure when a Deployment does not name its set's current revision.
pub async fn check_converged(ctx: &mut Ctx, ns: &str, n: usize, tracker: &Tracker, after: &str) -> usize {
    match unconverged(ctx, ns, n, tracker).await {
        Ok(wrong) if wrong.is_empty() => 0,
        Ok(wrong) => {
            ctx.fail(format!(
                "after {after}: {} Deployments do not name their set's current revision (e.g. {})",
                wrong.len(),
                wrong[0]
            ));
            wrong.len()
        }
        Err(e) => {
            ctx.fail(format!("after {after}: cannot check convergence: {e}"));
            n
        }
    }
}

// ------------------------------------------------------------------------------------------- meter --

/// Counters at the start of a measured window.
pub struct Meter {
    api: Option<RequestCounts>,
    /// Requests dispatched by flow schema (the operator's own, when `Ctx::identity` is set).
    dispatched: Option<BTreeMap<String, f64>>,
    op: crate::metrics::Scrape,
    cpu: Option<Duration>,
    slots: Vec<Option<Duration>>,
    others: Vec<(String, Option<Duration>)>,
}

impl Meter {
    pub async fn start(ctx: &Ctx, install: &Install) -> Self {
        let body = cluster::apiserver_metrics(&ctx.client).await.ok();
        Self {
            api: body.as_deref().map(cluster::parse_request_counts),
            dispatched: body.as_deref().map(crate::identity::parse_dispatched),
            op: install.scrape().await,
            cpu: install.cpu(),
            slots: install.cpu_by_slot(),
            others: ctx.pids.iter().map(|(n, p)| (n.clone(), cpu_of(*p))).collect(),
        }
    }

    /// The window's cost per change; `bench` holds the requests the bench sent in it, by (verb, resource).
    pub async fn finish(
        self,
        ctx: &mut Ctx,
        install: &Install,
        changes: usize,
        bench: &RequestCounts,
    ) -> Cost {
        let per = |v: f64| v / changes.max(1) as f64;
        let cpu_ms = match (self.cpu, install.cpu()) {
            (Some(a), Some(b)) => Some(per(ms(b.saturating_sub(a)))),
            _ => None,
        };
        let leader = install.leader().await;
        let cpu_by_role = install
            .cpu_by_slot()
            .iter()
            .zip(&self.slots)
            .enumerate()
            .filter_map(|(slot, (now, before))| {
                Some((
                    role(leader, slot).to_string(),
                    per(ms((*now)?.saturating_sub((*before)?))),
                ))
            })
            .collect();
        let other_cpu = self
            .others
            .iter()
            .filter_map(|(name, before)| {
                let pid = ctx.pids.iter().find(|(n, _)| n == name)?.1;
                Some((name.clone(), per(ms(cpu_of(pid)?.saturating_sub((*before)?)))))
            })
            .collect();
        let body = cluster::apiserver_metrics(&ctx.client).await;
        let after = body.as_deref().map(cluster::parse_request_counts);
        let op_delta = install.scrape().await.since(&self.op);
        let identity = match (&ctx.identity, &self.dispatched, &body) {
            (Some(schemas), Some(before), Ok(body)) => {
                let after = crate::identity::parse_dispatched(body);
                Some(schemas.requests(&crate::identity::delta(&after, before)))
            }
            _ => None,
        };
        let writes = match (self.api, after) {
            (Some(before), Ok(after)) => {
                let mut w = writes_from(&cluster::delta(&after, &before), bench, changes);
                if let Some(identity) = identity {
                    w.operator_identity = identity.iter().map(|(k, v)| (k.clone(), per(*v))).collect();
                    w.operator_identity_per_change = Some(w.operator_identity.values().sum::<f64>() + 0.0);
                }
                w.operator_self = op_delta
                    .writes
                    .iter()
                    .map(|(k, v)| (k.clone(), per(*v)))
                    .filter(|(_, v)| *v > 0.0)
                    .collect();
                w.operator_self_per_change = w.operator_self.values().sum();
                Some(w)
            }
            (_, Err(e)) => {
                ctx.fail(format!("API server /metrics: {e}"));
                None
            }
            (None, _) => None,
        };
        // Both replicas hear the same events; one replica's share is what one of them costs.
        let replicas = install.replicas.len().max(1) as f64;
        let watch_events_per_change = op_delta
            .watch_events
            .iter()
            .map(|(k, v)| (k.clone(), per(*v) / replicas))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        let reconciles_per_change = op_delta
            .reconciles
            .iter()
            .map(|(k, v)| (k.clone(), per(*v)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        Cost {
            cpu_ms_per_change: cpu_ms,
            watch_events_per_change,
            reconciles_per_change,
            cpu_x_floor: cpu_ms.zip(ctx.floor.as_ref()).map(|(c, f)| c / f.seq_p50_ms),
            cpu_ms_per_change_by_role: cpu_by_role,
            other_cpu_ms_per_change: other_cpu,
            writes,
            admission: Some(Admission::from_delta(&op_delta)),
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

pub(crate) fn set_patches(n: usize) -> RequestCounts {
    [(
        ("PATCH".to_string(), "configmapsets.cmset.dev".to_string()),
        n as f64,
    )]
    .into()
}

// ------------------------------------------------------------------------------------------ settle --

/// Waits until what `changes` changes set off is over, so that a window's counts are whole and the
/// next window starts clean: kube-controller-manager has observed every tracked Deployment, none of
/// them changed for `quiet`, and no replica sent a write for `quiet`. (The controller manager writes
/// at most 20 requests/s per controller by default, so its rollouts trail the operator.) Bounded by
/// `ctx.timeout(changes)`; a timeout is a failed figure.
pub async fn settle(
    ctx: &mut Ctx,
    install: &Install,
    tracker: Option<&Tracker>,
    changes: usize,
    what: &str,
) -> Option<f64> {
    let start = Instant::now();
    let deadline = start + ctx.timeout(changes);
    let mut last = install.writes_total().await;
    let (mut last_write, mut said) = (start, start);
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = install.writes_total().await;
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

/// Installs the operator (both replicas at once, the webhook in its configuration) on a namespace
/// whose sets and Deployments exist, and times until every Deployment names its set's first revision.
pub async fn converge(
    ctx: &mut Ctx,
    ns: &str,
    n: usize,
    tracker: &Tracker,
    config: Configuration,
) -> Result<(Install, Convergence)> {
    let start = Instant::now();
    for i in 0..n {
        tracker.expect(&deployment_name(i), &revision_name(&set_name(i), "0"), start);
    }
    let mut install = Install::start(ctx, ns, config).await?;
    let timeout = ctx.timeout(n);
    let ready = install.ready(ctx, start, timeout).await;
    let late = tracker.drain(start + timeout).await;
    let arrivals = tracker.take_arrivals();
    let mut c = Convergence {
        sets: n,
        converged: arrivals.len(),
        ready_s: ready.as_ref().ok().map(Duration::as_secs_f64),
        floor: ctx.floor.clone(),
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
        &install,
        Some(tracker),
        2 * n,
        &format!("initial convergence of {n}"),
    )
    .await;
    c.cpu_ms_per_set = install.cpu().map(|d| ms(d) / n as f64);
    c.admission = Some(Admission::from_delta(&install.scrape().await));
    c.replicas = install.memory().await;
    Ok((install, c))
}

// ------------------------------------------------------------------------------------------- churn --

/// What a churn driver sent.
struct Driven {
    sent: usize,
    failed: usize,
    skipped: usize,
    sending: Duration,
}

/// Changes one set at a time at `rate` per second until `stop` completes, round robin over the sets
/// that have no change in flight, and expects each change's Deployment to name its new revision (timed
/// from the PATCH response to the watch event).
async fn drive_churn(
    ctx: &Ctx,
    ns: &str,
    n: usize,
    tracker: &Arc<Tracker>,
    rate: f64,
    stop: impl Future<Output = ()>,
) -> Driven {
    let sets = ctx.sets(ns);
    let inflight: Arc<Mutex<HashSet<usize>>> = Arc::default();
    let errors = Arc::new(AtomicU64::new(0));
    let permits = Arc::new(tokio::sync::Semaphore::new(ctx.concurrency));
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (mut cursor, mut sent, mut skipped) = (0usize, 0usize, 0usize);
    let mut tasks = tokio::task::JoinSet::new();
    let start = Instant::now();
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = ticker.tick() => {}
        }
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
    Driven {
        sent,
        failed: errors.load(Ordering::Relaxed) as usize,
        skipped,
        sending,
    }
}

/// Waits for every change of a churn to arrive; the latencies, and the number that did not.
async fn collect_churn(ctx: &mut Ctx, tracker: &Tracker, d: &Driven, what: &str) -> (Vec<f64>, usize) {
    let late = tracker.drain(Instant::now() + ctx.timeout_base).await;
    let latencies: Vec<f64> = tracker.take_arrivals().iter().map(|a| ms(a.latency)).collect();
    if d.failed > 0 {
        ctx.fail(format!("{what}: {} set PATCHes failed", d.failed));
    }
    if !late.is_empty() {
        ctx.fail(format!(
            "{what}: {} changes did not reach their Deployment within {:?} of the end (e.g. {} names {:?}, expected {})",
            late.len(),
            ctx.timeout_base,
            late[0].0,
            late[0].2,
            late[0].1
        ));
    }
    (latencies, late.len())
}

/// Steady churn at `rate` for `duration`.
pub async fn churn(
    ctx: &mut Ctx,
    ns: &str,
    n: usize,
    tracker: &Arc<Tracker>,
    install: &Install,
    rate: f64,
    duration: Duration,
) -> Churn {
    let meter = Meter::start(ctx, install).await;
    let d = drive_churn(ctx, ns, n, tracker, rate, tokio::time::sleep(duration)).await;
    let (latencies, late) = collect_churn(ctx, tracker, &d, "churn").await;
    let patched = d.sent - d.failed;
    let settle_s = settle(ctx, install, Some(tracker), patched, "churn").await;
    let mut cost = meter.finish(ctx, install, patched, &set_patches(patched)).await;
    cost.settle_s = settle_s;
    Churn {
        target_rate: rate,
        achieved_rate: d.sent as f64 / d.sending.as_secs_f64(),
        duration_s: d.sending.as_secs_f64(),
        changes: patched,
        converged: latencies.len(),
        timed_out: late,
        skipped_busy: d.skipped,
        latency: latency(&latencies, ctx.floor.as_ref()),
        cost,
        latencies_ms: latencies,
        floor: ctx.floor.clone(),
    }
}

// ---------------------------------------------------------------------------------------- failover --

/// What cmset watches (as `resource.group`): a replica that starts cold lists each of these.
const CMSET_KINDS: [&str; 7] = [
    "configmapsets.cmset.dev",
    "secretsets.cmset.dev",
    "configmaps",
    "secrets",
    "deployments.apps",
    "statefulsets.apps",
    "daemonsets.apps",
];

/// What the failover stage saw, in time since the leader was frozen.
#[derive(Default)]
struct Takeover {
    leader: Option<Duration>,
    write: Option<Duration>,
    rollout: Option<Duration>,
    /// The API server's LIST requests between the freeze and the standby's first write, and the
    /// bench's own among them.
    lists: Option<RequestCounts>,
    /// The operator identity's requests in that time, by `VERB resource` (when they are counted).
    identity: Option<BTreeMap<String, f64>>,
    bench_lists: u64,
    /// LISTs the standby's admission handler sent in that time (not the takeover's cost), by resource.
    admission_lists: BTreeMap<String, f64>,
    standby: usize,
    error: Option<String>,
}

/// During churn at `rate`, freezes the leader (SIGSTOP) after `warmup` and times until the standby
/// leads, writes, and a Deployment moves; churn goes on for `warmup` more. Then the old leader is
/// thawed (it should find its Lease taken and exit) and replaced, as its container would be
/// restarted, and every change must have reached its Deployment.
pub async fn failover(
    ctx: &mut Ctx,
    ns: &str,
    n: usize,
    tracker: &Arc<Tracker>,
    install: &mut Install,
    rate: f64,
    warmup: Duration,
) -> Failover {
    let lease = ctx.launch.lease_duration_s;
    let mut f = Failover {
        lease_duration_s: lease,
        target_s: lease as f64 + 2.0,
        floor: ctx.floor.clone(),
        ..Failover::default()
    };
    let Some(leader) = install.leader().await else {
        ctx.fail("failover: no replica leads");
        return f;
    };
    let meter = Meter::start(ctx, install).await;
    let limit = Duration::from_secs(3 * lease) + ctx.timeout_base;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let shared: &Ctx = ctx;
    let frozen_install: &Install = install;
    let observe = async move {
        let mut t = Takeover {
            standby: (leader + 1) % frozen_install.replicas.len(),
            ..Takeover::default()
        };
        tokio::time::sleep(warmup).await;
        let standby = &frozen_install.replicas[t.standby];
        let scraped = standby.scrape().await;
        let writes_before = scraped.writes_total();
        let body_before = cluster::apiserver_metrics(&shared.client).await.ok();
        let lists_before = body_before.as_deref().map(cluster::parse_request_counts);
        let dispatched_before = body_before.as_deref().map(crate::identity::parse_dispatched);
        let bench_lists_before = tracker.lists();
        // Its counters up to now, kept in the sums once it no longer answers.
        frozen_install.replicas[leader].scrape().await;
        frozen_install.replicas[leader].freeze();
        let frozen = Instant::now();
        while t.write.is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let s = standby.scrape().await;
            if t.leader.is_none() && s.leader >= 1.0 {
                t.leader = Some(frozen.elapsed());
            }
            if s.writes_total() > writes_before {
                t.write = Some(frozen.elapsed());
                let body_after = cluster::apiserver_metrics(&shared.client).await.ok();
                let lists_after = body_after.as_deref().map(cluster::parse_request_counts);
                if let (Some(schemas), Some(before), Some(after)) =
                    (&shared.identity, &dispatched_before, body_after.as_deref())
                {
                    let after = crate::identity::parse_dispatched(after);
                    t.identity = Some(schemas.requests(&crate::identity::delta(&after, before)));
                }
                t.bench_lists = tracker.lists() - bench_lists_before;
                t.admission_lists = s
                    .since(&scraped)
                    .admission_requests
                    .into_iter()
                    .filter(|((verb, _), n)| verb == "list" && *n > 0.0)
                    .map(|((_, resource), n)| (resource, n))
                    .collect();
                t.lists = lists_before
                    .as_ref()
                    .zip(lists_after)
                    .map(|(b, a)| cluster::delta(&a, b));
            } else if frozen.elapsed() > limit {
                t.error = Some(format!(
                    "the standby did not write within {limit:?} of the freeze"
                ));
                break;
            }
        }
        // A workload moving: the first Deployment to name a new revision after the standby took over.
        if let Some(took) = t.leader.or(t.write) {
            let deadline = Instant::now() + shared.timeout_base;
            while Instant::now() < deadline {
                if let Some(at) = tracker.last_arrival_after(frozen + took) {
                    t.rollout = Some(at - frozen);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        tokio::time::sleep(warmup).await;
        let _ = stop_tx.send(());
        t
    };
    let stop = async {
        let _ = stop_rx.await;
    };
    let (d, t) = tokio::join!(drive_churn(shared, ns, n, tracker, rate, stop), observe);

    // The old leader wakes up to a Lease that is not its own any more: it must stop acting, and either
    // exit (its container is then restarted, here: replaced) or stay on as a standby.
    let old = &mut install.replicas[leader];
    old.thaw();
    let thawed = Instant::now();
    let bound = Duration::from_secs(lease + 5);
    // Standing by must last: a replica on its way out reports no leadership while it releases the
    // Lease (up to 2 s), then exits.
    let mut standing_since: Option<Instant> = None;
    let replace = loop {
        if let Some(status) = old.exited() {
            f.old_leader = format!(
                "exited by itself after {:.1} s ({status}); replaced",
                thawed.elapsed().as_secs_f64()
            );
            f.old_leader_exited = true;
            break true;
        }
        if !old.leads().await && old.is_ready().await {
            let since = *standing_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_secs(3) {
                f.old_leader = format!(
                    "stands by (since {:.1} s after SIGCONT)",
                    since.duration_since(thawed).as_secs_f64()
                );
                break false;
            }
        } else {
            standing_since = None;
        }
        if thawed.elapsed() > bound {
            f.old_leader = format!(
                "neither exited nor stood by within {bound:?} of SIGCONT{}: killed and replaced",
                if old.leads().await {
                    " (still reporting itself leader)"
                } else {
                    ""
                }
            );
            ctx.fail(format!("failover: the old leader {}", f.old_leader));
            break true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if replace {
        let replaced = match install.replace(ctx, leader).await {
            Ok(()) => install
                .ready(ctx, Instant::now(), ctx.timeout_base)
                .await
                .map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = replaced {
            ctx.fail(format!("failover: the replaced replica: {e}"));
        }
    }

    if let Some(e) = &t.error {
        ctx.fail(format!("failover: {e}"));
    }
    f.to_leader_s = t.leader.map(|d| d.as_secs_f64());
    f.to_first_write_s = t.write.map(|d| d.as_secs_f64());
    f.to_first_rollout_s = t.rollout.map(|d| d.as_secs_f64());
    f.within_target = f.to_first_write_s.map(|s| s <= f.target_s);
    if t.write.is_some() && t.rollout.is_none() {
        ctx.fail("failover: no Deployment moved after the standby took over");
    }
    if let Some(requests) = &t.identity {
        // Its LISTs, those of the standby's admission handler (answering, not taking over) taken out.
        let mut lists: BTreeMap<String, f64> = requests
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("LIST ")?.to_string(), *v)))
            .collect();
        for (resource, n) in &t.admission_lists {
            if let Some(key) = [
                resource.clone(),
                format!("{resource}.cmset.dev"),
                format!("{resource}.apps"),
            ]
            .into_iter()
            .find(|k| lists.contains_key(k))
            {
                *lists.entry(key).or_default() -= n;
            }
        }
        lists.retain(|_, v| *v > 0.0);
        f.identity_list_requests = Some(lists.values().sum::<f64>() + 0.0);
        f.identity_list_by_resource = lists;
    }
    if let Some(lists) = &t.lists {
        f.list_by_resource = lists
            .iter()
            .filter(|((verb, _), _)| verb == "LIST")
            .map(|((_, res), v)| (res.clone(), *v))
            .collect();
        if t.bench_lists > 0 {
            *f.list_by_resource.entry("deployments.apps".into()).or_default() -= t.bench_lists as f64;
        }
        // The operator names resources by their plural alone; the API server's counters add the group.
        for (resource, n) in &t.admission_lists {
            let key = [
                resource.clone(),
                format!("{resource}.cmset.dev"),
                format!("{resource}.apps"),
            ]
            .into_iter()
            .find(|k| f.list_by_resource.contains_key(k))
            .unwrap_or_else(|| resource.clone());
            *f.list_by_resource.entry(key).or_default() -= n;
        }
        f.list_by_resource.retain(|_, v| *v > 0.0);
        f.bench_lists_subtracted = t.bench_lists;
        f.admission_lists_subtracted = t.admission_lists.values().sum::<f64>() + 0.0;
        f.list_requests = Some(f.list_by_resource.values().sum::<f64>() + 0.0);
        f.list_requests_cmset_kinds = Some(
            f.list_by_resource
                .iter()
                .filter(|(res, _)| CMSET_KINDS.contains(&res.as_str()))
                .map(|(_, v)| v)
                .sum::<f64>()
                + 0.0,
        );
    } else if t.write.is_some() {
        ctx.fail("failover: the API server's LIST counts could not be read");
    }
    let (latencies, late) = collect_churn(ctx, tracker, &d, "failover").await;
    let patched = d.sent - d.failed;
    f.changes = patched;
    f.converged = latencies.len();
    f.timed_out = late;
    f.latency = latency(&latencies, ctx.floor.as_ref());
    let settle_s = settle(ctx, install, Some(tracker), patched, "failover").await;
    f.unconverged = check_converged(ctx, ns, n, tracker, "failover").await;
    f.cost = meter.finish(ctx, install, patched, &set_patches(patched)).await;
    f.cost.settle_s = settle_s;
    f
}

// ------------------------------------------------------------------------------------------- burst --

/// Changes every set at once (`concurrency` PATCHes in flight) and times until every Deployment names
/// its new revision.
pub async fn burst(ctx: &mut Ctx, ns: &str, n: usize, tracker: &Tracker, install: &Install) -> Burst {
    let meter = Meter::start(ctx, install).await;
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
        floor: ctx.floor.clone(),
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
    let settle_s = settle(ctx, install, Some(tracker), n, &format!("the burst of {n}")).await;
    b.cost = meter.finish(ctx, install, n, &set_patches(n)).await;
    b.cost.settle_s = settle_s;
    b
}

// ----------------------------------------------------------------------------------------- restart --

/// Kills both replicas, starts them again, and counts their writes until `window` after the install
/// is ready again.
pub async fn restart(ctx: &mut Ctx, install: &mut Install, window: Duration) -> Result<Restart> {
    let before = cluster::apiserver_requests(&ctx.client).await?;
    install.kill_all().await;
    let start = Instant::now();
    for slot in 0..install.replicas.len() {
        install.replace(ctx, slot).await?;
    }
    let ready = install.ready(ctx, start, ctx.timeout_base).await?;
    tokio::time::sleep(window).await;
    let after = cluster::apiserver_requests(&ctx.client).await?;
    let writes: BTreeMap<String, f64> = cluster::delta(&after, &before)
        .into_iter()
        .filter(|((verb, res), _)| cluster::writer(verb, res) == Writer::Operator)
        .map(|((verb, res), v)| (format!("{verb} {res}"), v))
        .collect();
    let mut fresh = 0.0;
    for r in &install.replicas {
        fresh += r.scrape().await.writes_total();
    }
    Ok(Restart {
        ready_s: ready.as_secs_f64(),
        window_s: start.elapsed().as_secs_f64(),
        operator_self_writes: fresh,
        operator_apiserver_total: writes.values().sum::<f64>() + 0.0,
        operator_apiserver_writes: writes,
    })
}

// ------------------------------------------------------------------------------------------ memory --

const LEAK_LABEL: &str = "bench.cmset.dev/leak";

fn leak_set_name(i: usize) -> String {
    format!("leak-{i:05}")
}

/// Leak sets whose status names their first revision, and those whose revision ConfigMaps still exist.
async fn leak_state(ctx: &Ctx, ns: &str) -> Result<(usize, usize, usize)> {
    let lp = ListParams::default().labels(&format!("{LEAK_LABEL}=true"));
    let api = ctx.sets(ns);
    let sets = cluster::retry("list leak sets", || api.list(&lp)).await?;
    let current = sets
        .iter()
        .filter(|s| {
            let name = s.metadata.name.clone().unwrap_or_default();
            s.status.as_ref().and_then(|st| st.current_revision.as_deref())
                == Some(revision_name(&name, "0").as_str())
        })
        .count();
    let cms = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(cmset_api::labels::SET);
    let revisions = cluster::retry("list revisions", || cms.list_metadata(&lp)).await?;
    let leak_revisions = revisions
        .iter()
        .filter(|cm| {
            cm.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(cmset_api::labels::SET))
                .is_some_and(|s| s.starts_with("leak-"))
        })
        .count();
    Ok((sets.items.len(), current, leak_revisions))
}

/// Polls `leak_state` until `done` holds, at most `timeout`; less often for more sets (each poll
/// lists them all, and their revisions).
async fn wait_leak(
    ctx: &Ctx,
    ns: &str,
    k: usize,
    done: impl Fn((usize, usize, usize)) -> bool,
) -> Result<(usize, usize, usize)> {
    let timeout = ctx.timeout(k);
    let every = Duration::from_millis((k as u64 / 2).max(1000));
    let deadline = Instant::now() + timeout;
    loop {
        let state = leak_state(ctx, ns).await?;
        if done(state) {
            return Ok(state);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "not done within {timeout:?}: {} sets, {} on their revision, {} revisions",
                state.0, state.1, state.2
            )
            .into());
        }
        tokio::time::sleep(every).await;
    }
}

/// Waits until every replica has gone idle (together at most `IDLE_CPU` of CPU in the last
/// `IDLE_WINDOW`, read from /proc so that watching costs them nothing): it has taken in every watch event
/// it was sent and acted on it. The operator exposes no count of what its stores hold, so this is how
/// the bench knows that it has seen what the API server now holds. Bounded by `timeout`; the time it
/// took, or an error.
pub async fn idle(install: &Install, timeout: Duration) -> Result<Duration> {
    let start = Instant::now();
    let mut window: std::collections::VecDeque<(Instant, Option<Duration>)> = Default::default();
    loop {
        let (now, cpu) = (Instant::now(), install.cpu());
        window.push_back((now, cpu));
        while window
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > IDLE_WINDOW)
        {
            window.pop_front();
        }
        if let Some((t, Some(then))) = window.front()
            && now.duration_since(*t) + Duration::from_millis(300) >= IDLE_WINDOW
            && let Some(cpu) = cpu
            && cpu.saturating_sub(*then) <= IDLE_CPU
        {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return Err(format!("the replicas did not go idle within {timeout:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Idle: both replicas together used at most this much CPU in the last `IDLE_WINDOW` (what a Lease
/// renewal and a metrics scrape cost, well under one watch event's worth at scale).
const IDLE_CPU: Duration = Duration::from_millis(60);
const IDLE_WINDOW: Duration = Duration::from_secs(3);

/// Deletes the revision ConfigMaps of the leak sets itself, as the garbage collector would once their
/// owners are gone (the collector deletes at kube-controller-manager's 20 requests/s: 5,000 revisions
/// took longer than the stage's bound in every published run). One the collector deleted first is done.
async fn delete_leak_revisions(ctx: &Ctx, ns: &str) -> Result<usize> {
    let cms = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(cmset_api::labels::SET);
    let revisions = cluster::retry("list revisions", || cms.list_metadata(&lp)).await?;
    let names: Vec<String> = revisions
        .iter()
        .filter(|cm| {
            cm.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(cmset_api::labels::SET))
                .is_some_and(|s| s.starts_with("leak-"))
        })
        .filter_map(|cm| cm.metadata.name.clone())
        .collect();
    let dp = DeleteParams::default();
    bounded(names.len(), ctx.concurrency, |i| {
        let (cms, name, dp) = (cms.clone(), names[i].clone(), dp.clone());
        async move {
            match cluster::retry(&format!("delete {name}"), || cms.delete(&name, &dp)).await {
                Ok(_) => Ok(()),
                Err(e) if e.to_string().contains("(404)") => Ok(()),
                Err(e) => Err(e),
            }
        }
    })
    .await?;
    Ok(names.len())
}

/// RSS of every replica before `k` sets are created, once they all have their revision, and once they
/// and their revisions are deleted again and every replica has gone idle: memory the replicas keep for
/// objects that are gone.
pub async fn leak(ctx: &mut Ctx, ns: &str, install: &Install, k: usize) -> Result<Leak> {
    idle(install, ctx.timeout_base).await?;
    let before = install.memory().await;
    let sets = ctx.sets(ns);
    let start = Instant::now();
    bounded(k, ctx.concurrency, |i| {
        let sets = sets.clone();
        async move {
            let mut set = cluster::set_object(&leak_set_name(i), "0")?;
            set.metadata.labels = Some([(LEAK_LABEL.to_string(), "true".to_string())].into());
            create(&sets, &set).await
        }
    })
    .await?;
    wait_leak(ctx, ns, k, |(_, current, _)| current == k).await?;
    let created_s = start.elapsed().as_secs_f64();
    settle(ctx, install, None, k, "creating the leak sets").await;
    idle(install, ctx.timeout(k)).await?;
    let peak = install.memory().await;
    let start = Instant::now();
    let lp = ListParams::default().labels(&format!("{LEAK_LABEL}=true"));
    let dp = DeleteParams::default();
    cluster::retry("delete the leak sets", || sets.delete_collection(&dp, &lp)).await?;
    let revisions_deleted = delete_leak_revisions(ctx, ns).await?;
    wait_leak(ctx, ns, k, |(sets, _, revisions)| sets == 0 && revisions == 0).await?;
    let deleted_s = start.elapsed().as_secs_f64();
    // Every replica has seen (and dropped) every deletion once it has nothing left to do.
    let idle_s = idle(install, ctx.timeout(k)).await?.as_secs_f64();
    let after = install.memory().await;
    let replicas = before
        .iter()
        .zip(&peak)
        .zip(&after)
        .map(|((b, p), a)| LeakReplica {
            role: a.role.clone(),
            before: b.memory,
            peak: p.memory,
            after: a.memory,
            kept_kib_per_set: b
                .memory
                .zip(a.memory)
                .map(|(b, a)| (a.rss_kib as f64 - b.rss_kib as f64) / k as f64),
            after_pct_of_before: b
                .memory
                .zip(a.memory)
                .map(|(b, a)| a.rss_kib as f64 * 100.0 / b.rss_kib.max(1) as f64),
        })
        .collect();
    Ok(Leak {
        sets: k,
        created_s,
        deleted_s,
        revisions_deleted_by_bench: revisions_deleted,
        idle_s,
        replicas,
    })
}

/// RSS of every replica before and after the namespace fills with unrelated objects.
pub async fn unrelated(
    ctx: &mut Ctx,
    ns: &str,
    install: &Install,
    configmaps: usize,
    deployments: usize,
) -> Result<MemoryFigures> {
    let before = install.memory().await;
    let took = populate_unrelated(ctx, ns, configmaps, deployments).await?;
    // Let the replicas see (or ignore) every event, then some more.
    settle(ctx, install, None, 0, "unrelated objects").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = install.memory().await;
    let rss = |m: &[crate::install::ReplicaMemory]| -> Option<u64> {
        m.iter().map(|r| r.memory.map(|m| m.rss_kib)).sum()
    };
    Ok(MemoryFigures {
        rss_ratio: rss(&before)
            .zip(rss(&after))
            .map(|(b, a)| a as f64 / b.max(1) as f64),
        before_unrelated: before,
        after_unrelated: after,
        unrelated_configmaps: configmaps,
        unrelated_deployments: deployments,
        create_seconds: took.as_secs_f64(),
    })
}
