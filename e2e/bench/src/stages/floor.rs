//! The bare API floor: what one change costs on this machine with no operator and no webhook.

use super::*;

pub(super) const FLOOR_ROUND: &str = "bench.cmset.dev/floor-round";

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
