//! Steady churn: one set at a time at a rate, each change timed to its Deployment naming the new revision.

use super::*;

/// What a churn driver sent.
pub(super) struct Driven {
    pub(super) sent: usize,
    pub(super) failed: usize,
    pub(super) skipped: usize,
    pub(super) sending: Duration,
}

/// Changes one set at a time at `rate` per second until `stop` completes, round robin over the sets
/// that have no change in flight, and expects each change's Deployment to name its new revision (timed
/// from the PATCH response to the watch event).
pub(super) async fn drive_churn(
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
pub(super) async fn collect_churn(
    ctx: &mut Ctx,
    tracker: &Tracker,
    d: &Driven,
    what: &str,
) -> (Vec<f64>, usize) {
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
