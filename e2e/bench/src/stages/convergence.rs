//! Initial convergence: the operator installed on a namespace whose sets and Deployments exist.

use super::*;

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
