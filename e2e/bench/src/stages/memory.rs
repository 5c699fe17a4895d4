//! Memory: RSS kept for sets created and deleted again (the leak), and RSS as unrelated objects fill the
//! namespace.

use super::*;

pub(super) const LEAK_LABEL: &str = "bench.cmset.dev/leak";

pub(super) fn leak_set_name(i: usize) -> String {
    format!("leak-{i:05}")
}

/// Leak sets whose status names their first revision, and those whose revision ConfigMaps still exist.
pub(super) async fn leak_state(ctx: &Ctx, ns: &str) -> Result<(usize, usize, usize)> {
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
pub(super) async fn wait_leak(
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
pub(super) const IDLE_CPU: Duration = Duration::from_millis(60);
pub(super) const IDLE_WINDOW: Duration = Duration::from_secs(3);

/// Deletes the revision ConfigMaps of the leak sets itself, as the garbage collector would once their
/// owners are gone (the collector deletes at kube-controller-manager's 20 requests/s: 5,000 revisions
/// took longer than the stage's bound in every published run). One the collector deleted first is done.
pub(super) async fn delete_leak_revisions(ctx: &Ctx, ns: &str) -> Result<usize> {
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
