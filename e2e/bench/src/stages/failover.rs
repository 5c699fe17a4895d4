//! Failover: the leader frozen during churn, timed until the standby leads, writes and moves a workload.

use super::*;

/// What cmset watches (as `resource.group`): a replica that starts cold lists each of these.
pub(super) const CMSET_KINDS: [&str; 7] = [
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
pub(super) struct Takeover {
    pub(super) leader: Option<Duration>,
    pub(super) write: Option<Duration>,
    pub(super) rollout: Option<Duration>,
    /// The API server's LIST requests between the freeze and the standby's first write, and the
    /// bench's own among them.
    pub(super) lists: Option<RequestCounts>,
    /// The operator identity's requests in that time, by `VERB resource` (when they are counted).
    pub(super) identity: Option<BTreeMap<String, f64>>,
    pub(super) bench_lists: u64,
    /// LISTs the standby's admission handler sent in that time (not the takeover's cost), by resource.
    pub(super) admission_lists: BTreeMap<String, f64>,
    pub(super) standby: usize,
    pub(super) error: Option<String>,
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
