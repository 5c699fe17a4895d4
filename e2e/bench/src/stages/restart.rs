//! Restart: both replicas killed and started again, their writes counted until they are quiet.

use super::*;

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
