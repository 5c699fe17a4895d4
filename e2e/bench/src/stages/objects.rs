//! The objects a stage works on: sets and their Deployments, unrelated objects, and whether they converged.

use super::*;

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
