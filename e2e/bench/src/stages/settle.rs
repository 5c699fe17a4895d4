//! Waiting until what a stage set off is over, so that the next window starts clean.

use super::*;

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
