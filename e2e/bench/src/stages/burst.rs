//! Burst: every set changed at once, timed until every Deployment names its new revision.

use super::*;

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
    // The machine's share while the changes were landing, not while kube-controller-manager catches up.
    let landing = meter.share_so_far(ctx, install);
    let arrivals = tracker.take_arrivals();
    let mut b = Burst {
        changes: n,
        converged: arrivals.len(),
        floor: ctx.floor.clone(),
        ..Burst::default()
    };
    if late.is_empty() && arrivals.len() == n {
        let secs = last_landed_s(&arrivals, start);
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
    if landing.is_some() {
        b.cost.cpu_share = landing;
    }
    b
}
