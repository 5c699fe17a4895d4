//! Readers' own churn: what cmset costs while the workloads that read a set are restarted, scaled and
//! re-imaged with no config change, against the same churn of workloads that read no set.
//!
//! `n` opted-in Deployments read one set and `n` others read a plain ConfigMap, each with two
//! replicas that the simulated node runs. After a quiet window (the idle cost), the others are churned
//! for `duration` at `rate` Deployment changes per second, then the readers. Each change is, in turn
//! for a Deployment: a restart (a template annotation), a scale to 3, a new image, a scale back to 2.
//! Every figure is per second of churn; CPU is also given above the idle window's.
//!
//! Then the realistic stage of config changes: `n` more opted-in Deployments, two pods each, each
//! reading a set of its own, whose sets change in turn at `rate` changes per second for `duration`.
//! Each change rolls its Deployment's pods, as it would in production (the other stages' Deployments
//! run none). Its figures are per change, with the latency from the set's PATCH to its Deployment
//! naming the new revision.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::cluster::{self, RequestCounts, Result, Tracker, bounded, create, revision_name};
use crate::install::Install;
use crate::report::{ConfigWithPods, Cost, ReadersChurn, ReadersChurnPhase, latency};
use crate::stages::{Ctx, Meter, set_patches, settle};

const READERS_SET: &str = "readers";
const PLAIN_CONFIGMAP: &str = "readers-plain";
/// The label that tells the two groups' pods apart (and selects them for counting).
const GROUP: &str = "bench-churn";
const REPLICAS: i32 = 2;

fn name(group: &str, i: usize) -> String {
    format!("{group}-{i:03}")
}

/// The set the `i`th Deployment of the config stage reads.
fn own_set(i: usize) -> String {
    format!("own-{i:03}")
}

pub async fn readers_churn(
    ctx: &mut Ctx,
    ns: &str,
    install: &Install,
    tracker: &Tracker,
    n: usize,
    rate: f64,
    duration: Duration,
) -> Result<ReadersChurn> {
    let setup = Instant::now();
    create(&ctx.sets(ns), &cluster::set_object(READERS_SET, "0")?).await?;
    let plain = cluster::configmap_object(PLAIN_CONFIGMAP, &[("LOG_LEVEL", "info")])?;
    create(&Api::namespaced(ctx.client.clone(), ns), &plain).await?;
    let sets = ctx.sets(ns);
    bounded(n, ctx.concurrency, |i| {
        let sets = sets.clone();
        async move { create(&sets, &cluster::set_object(&own_set(i), "0")?).await }
    })
    .await?;
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    bounded(3 * n, ctx.concurrency, |k| {
        let deployments = deployments.clone();
        async move {
            let i = k / 3;
            let (group, reads, opted_in) = match k % 3 {
                0 => ("reader", READERS_SET.to_string(), true),
                1 => ("other", PLAIN_CONFIGMAP.to_string(), false),
                _ => ("config", own_set(i), true),
            };
            let mut d = cluster::deployment_object(&name(group, i), &reads, opted_in)?;
            let spec = d.spec.as_mut().ok_or("a Deployment without spec")?;
            spec.replicas = Some(REPLICAS);
            let labels = spec
                .template
                .metadata
                .get_or_insert_default()
                .labels
                .get_or_insert_default();
            labels.insert(GROUP.into(), group.into());
            create(&deployments, &d).await
        }
    })
    .await?;
    let first = revision_name(READERS_SET, "0");
    for i in 0..n {
        tracker.expect(&name("reader", i), &first, setup);
        tracker.expect(&name("config", i), &revision_name(&own_set(i), "0"), setup);
    }
    let late = tracker.drain(setup + ctx.timeout(n)).await;
    tracker.take_arrivals();
    if !late.is_empty() {
        return Err(format!(
            "{} of {} readers did not name their set's first revision",
            late.len(),
            2 * n
        )
        .into());
    }
    wait_ready(&deployments, 3 * n, ctx.timeout(6 * n)).await?;
    settle(ctx, install, None, 3 * n, "setting up the readers' churn").await;
    let setup_s = setup.elapsed().as_secs_f64();

    // The idle cost of the same processes, for CPU above it.
    let idle_window = Duration::from_secs(10);
    let meter = Meter::start(ctx, install).await;
    tokio::time::sleep(idle_window).await;
    let idle = meter
        .finish(
            ctx,
            install,
            idle_window.as_secs() as usize,
            &RequestCounts::new(),
        )
        .await;

    let others = phase(ctx, ns, install, "other", n, rate, duration, &idle).await?;
    let readers = phase(ctx, ns, install, "reader", n, rate, duration, &idle).await?;
    let config = config_changes(ctx, ns, install, tracker, n, rate, duration).await?;
    Ok(ReadersChurn {
        workloads: n,
        replicas: REPLICAS,
        rate,
        duration_s: duration.as_secs_f64(),
        setup_s,
        idle,
        others,
        readers,
        config: Some(config),
    })
}

/// The realistic stage: the config Deployments' own sets change in turn at `rate`, each change rolling
/// its Deployment's two pods. Measured per change, from the first PATCH until the rollouts and the
/// operator went quiet.
async fn config_changes(
    ctx: &mut Ctx,
    ns: &str,
    install: &Install,
    tracker: &Tracker,
    n: usize,
    rate: f64,
    duration: Duration,
) -> Result<ConfigWithPods> {
    let counter = PodEvents::start(ctx, ns, "config").await;
    let sets = ctx.sets(ns);
    let meter = Meter::start(ctx, install).await;
    let start = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let (mut sent, mut failed) = (0usize, 0usize);
    while start.elapsed() < duration {
        ticker.tick().await;
        let i = sent % n;
        // Values 1, 2, ... per set: every change is a new revision.
        let value = (sent / n + 1).to_string();
        match cluster::patch_set(&sets, &own_set(i), &value).await {
            Ok(()) => tracker.expect(
                &name("config", i),
                &revision_name(&own_set(i), &value),
                Instant::now(),
            ),
            Err(_) => failed += 1,
        }
        sent += 1;
    }
    let sending_s = start.elapsed().as_secs_f64();
    let late = tracker.drain(Instant::now() + ctx.timeout_base).await;
    let latencies: Vec<f64> = tracker
        .take_arrivals()
        .iter()
        .map(|a| a.latency.as_secs_f64() * 1000.0)
        .collect();
    let patched = sent - failed;
    let settle_s = settle(ctx, install, Some(tracker), patched, "config changes with pods").await;
    let mut cost = meter.finish(ctx, install, patched, &set_patches(patched)).await;
    cost.settle_s = settle_s;
    let pod_events = counter.stop();
    if failed > 0 || !late.is_empty() {
        ctx.fail(format!(
            "config changes with pods: {failed} of {sent} set PATCHes failed, {} did not reach their Deployment",
            late.len()
        ));
    }
    Ok(ConfigWithPods {
        changes: patched,
        rate,
        sending_s,
        pod_events_per_change: pod_events as f64 / patched.max(1) as f64,
        latency: latency(&latencies, ctx.floor.as_ref()),
        cost,
    })
}

/// One group's churn, measured per second.
#[allow(clippy::too_many_arguments)]
async fn phase(
    ctx: &mut Ctx,
    ns: &str,
    install: &Install,
    group: &str,
    n: usize,
    rate: f64,
    duration: Duration,
    idle: &Cost,
) -> Result<ReadersChurnPhase> {
    let counter = PodEvents::start(ctx, ns, group).await;
    let meter = Meter::start(ctx, install).await;
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    let start = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    let (mut sent, mut failed) = (0usize, 0usize);
    while start.elapsed() < duration {
        ticker.tick().await;
        let (i, round) = (sent % n, sent / n);
        let change = match round % 4 {
            0 => {
                json!({"spec": {"template": {"metadata": {"annotations": {"bench/restarted": sent.to_string()}}}}})
            }
            1 => json!({"spec": {"replicas": REPLICAS + 1}}),
            2 => {
                let image = ["registry.k8s.io/pause:3.8", "registry.k8s.io/pause:3.9"][(round / 4) % 2];
                json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
            }
            _ => json!({"spec": {"replicas": REPLICAS}}),
        };
        let patched = deployments
            .patch(
                &name(group, i),
                &PatchParams::default(),
                &Patch::Strategic(&change),
            )
            .await;
        failed += usize::from(patched.is_err());
        sent += 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    let pod_events = counter.stop();
    let bench: RequestCounts = [(("PATCH".to_string(), "deployments.apps".to_string()), sent as f64)].into();
    let cost = meter.finish(ctx, install, seconds.round() as usize, &bench).await;
    if failed > 0 {
        ctx.fail(format!(
            "readers' churn ({group}): {failed} of {sent} Deployment patches failed"
        ));
    }
    // The next phase starts from a quiet cluster.
    settle(ctx, install, None, 2 * n, &format!("the churn of {group}s")).await;
    let above = |role: &str| -> Option<f64> {
        let during = cost.cpu_ms_per_change_by_role.get(role)?;
        Some(during - idle.cpu_ms_per_change_by_role.get(role)?)
    };
    Ok(ReadersChurnPhase {
        changes: sent,
        pod_events_per_s: pod_events as f64 / seconds,
        cpu_ms_per_s_above_idle_leader: above("leader"),
        cpu_ms_per_s_above_idle_standby: above("standby"),
        cost,
    })
}

/// The watch events of one group's pods, counted from [`PodEvents::start`] to [`PodEvents::stop`].
struct PodEvents {
    counted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl PodEvents {
    async fn start(ctx: &Ctx, ns: &str, group: &str) -> Self {
        let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns);
        let counted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(count_events(pods, format!("{GROUP}={group}"), counted.clone()));
        // The watch's initial list is not churn.
        tokio::time::sleep(Duration::from_secs(1)).await;
        counted.store(0, Ordering::Relaxed);
        Self { counted, task }
    }

    fn stop(self) -> u64 {
        self.task.abort();
        self.counted.load(Ordering::Relaxed)
    }
}

/// Counts the watch events of the pods `selector` selects, after the initial list, into `counted`.
async fn count_events(pods: Api<Pod>, selector: String, counted: Arc<AtomicU64>) {
    let config = watcher::Config::default().labels(&selector);
    let mut events = std::pin::pin!(watcher(pods, config));
    while let Some(event) = events.next().await {
        if let Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) = event {
            counted.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Waits until `count` Deployments of the namespace have all their replicas ready.
async fn wait_ready(deployments: &Api<Deployment>, count: usize, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let listed = deployments.list(&ListParams::default()).await?;
        let ready = listed
            .items
            .iter()
            .filter(|d| {
                let want = d.spec.as_ref().and_then(|s| s.replicas);
                let status = d.status.as_ref();
                want == Some(REPLICAS) && status.and_then(|s| s.ready_replicas) == Some(REPLICAS)
            })
            .count();
        if ready >= count {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!("only {ready} of {count} Deployments have {REPLICAS} pods ready").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
