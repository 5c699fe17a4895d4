//! Stages that each ask what one shape of use costs: one set read by many workloads (fan-out), a GitOps
//! tool re-applying sets that did not change (no-op), and a set near the ConfigMap size limit changed
//! again and again (large set). Each runs in the main namespace with its own objects, after the
//! stages on the main sets, and leaves its objects there (the namespace goes at the end).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cmset_api::ConfigMapSet;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;

use crate::cluster::{
    self, Result, Tracker, bounded, create, patch_set, revision_name, revision_name_of, set_name,
};
use crate::install::Install;
use crate::report::{Bystander, FanOut, LargeSet, NoOp, latency};
use crate::stages::{Ctx, Meter, idle, last_landed_s, ms, set_patches, settle};

// ------------------------------------------------------------------------------------------ fan-out --

const FANOUT_SET: &str = "fanout";

fn fanout_deployment(i: usize) -> String {
    format!("fan-{i:05}")
}

/// The floor of a fan-out: `w` Deployment pod-template patches sent by the bench itself, `concurrency`
/// in flight, in a namespace no operator watches; the time until the last one was answered. Its
/// Deployments are made once per run (not timed).
async fn fanout_floor(ctx: &mut Ctx, w: usize) -> Result<Duration> {
    let ns = format!("{}-fanout", ctx.floor_ns);
    let api = Api::<Deployment>::namespaced(ctx.client.clone(), &ns);
    if ctx.fanout_floor_workloads == 0 {
        ctx.create_namespace(&ns).await?;
    }
    let made = ctx.fanout_floor_workloads;
    if w > made {
        bounded(w - made, ctx.concurrency, |k| {
            let api = api.clone();
            async move {
                let i = made + k;
                create(
                    &api,
                    &cluster::deployment_object(&fanout_deployment(i), "fanout-0", false)?,
                )
                .await
            }
        })
        .await?;
        ctx.fanout_floor_workloads = w;
    }
    let reads = format!("fanout-{}", ctx.next_value());
    let template = Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{
        "name": "app",
        "image": "registry.k8s.io/pause:3.9",
        "envFrom": [{"configMapRef": {"name": reads, "optional": true}}],
    }]}}}}));
    let pp = PatchParams::default();
    let start = Instant::now();
    bounded(w, ctx.concurrency, |i| {
        let (api, template, pp) = (api.clone(), template.clone(), pp.clone());
        async move {
            let name = fanout_deployment(i);
            cluster::retry(&format!("patch {name}"), || api.patch(&name, &pp, &template))
                .await
                .map(drop)
        }
    })
    .await?;
    Ok(start.elapsed())
}

/// One set read by `w` opted-in Deployments: once they all name its first revision and the rollouts
/// settled, the floor for `w` patches is taken, then the set is changed once and timed from just before
/// its PATCH until the last Deployment names the new revision.
pub async fn fanout(
    ctx: &mut Ctx,
    ns: &str,
    w: usize,
    tracker: &Tracker,
    install: &Install,
) -> Result<FanOut> {
    let setup = Instant::now();
    let sets = ctx.sets(ns);
    create(&sets, &cluster::set_object(FANOUT_SET, "0")?).await?;
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    let first = revision_name(FANOUT_SET, "0");
    bounded(w, ctx.concurrency, |i| {
        let deployments = deployments.clone();
        async move {
            create(
                &deployments,
                &cluster::deployment_object(&fanout_deployment(i), FANOUT_SET, true)?,
            )
            .await
        }
    })
    .await?;
    for i in 0..w {
        tracker.expect(&fanout_deployment(i), &first, setup);
    }
    let late = tracker.drain(setup + ctx.timeout(w)).await;
    tracker.take_arrivals();
    if !late.is_empty() {
        return Err(format!(
            "{} of {w} fan-out Deployments did not name the set's first revision within {:?}",
            late.len(),
            ctx.timeout(w)
        )
        .into());
    }
    settle(ctx, install, Some(tracker), w, "setting up the fan-out").await;
    let setup_s = setup.elapsed().as_secs_f64();
    let floor = fanout_floor(ctx, w).await;
    if let Err(e) = &floor {
        ctx.fail(format!("fan-out: the floor of {w} patches: {e}"));
    }
    let floor_s = floor.ok().map(|d| d.as_secs_f64());

    let meter = Meter::start(ctx, install).await;
    let value = ctx.next_value();
    let want = revision_name(FANOUT_SET, &value);
    let start = Instant::now();
    patch_set(&sets, FANOUT_SET, &value).await?;
    for i in 0..w {
        tracker.expect(&fanout_deployment(i), &want, start);
    }
    let late = tracker.drain(start + ctx.timeout(w)).await;
    let arrivals = tracker.take_arrivals();
    let seconds = late.is_empty().then(|| last_landed_s(&arrivals, start));
    if !late.is_empty() {
        ctx.fail(format!(
            "fan-out: {} of {w} Deployments did not name the new revision within {:?}",
            late.len(),
            ctx.timeout(w)
        ));
    }
    let latencies: Vec<f64> = arrivals.iter().map(|a| ms(a.latency)).collect();
    let settle_s = settle(ctx, install, Some(tracker), w, "the fan-out's change").await;
    let mut cost = meter.finish(ctx, install, 1, &set_patches(1)).await;
    cost.settle_s = settle_s;
    Ok(FanOut {
        workloads: w,
        moved: arrivals.len(),
        seconds,
        floor_seconds: floor_s,
        concurrency: ctx.concurrency,
        beyond_floor_s: seconds.zip(floor_s).map(|(s, f)| s - f),
        x_floor: seconds.zip(floor_s).map(|(s, f)| s / f),
        setup_s,
        latency: latency(&latencies, ctx.floor.as_ref()),
        cost,
        floor: ctx.floor.clone(),
    })
}

// -------------------------------------------------------------------------------------------- no-op --

/// The field manager of the no-op applies (what a GitOps tool would be).
const GITOPS_MANAGER: &str = "cmset-bench-gitops";
/// The annotation each no-op apply sets (as a GitOps tool's tracking annotation): metadata changes, so
/// the API server stores the object and every watcher gets an event; the spec does not.
const APPLIED: &str = "bench.cmset.dev/applied";

/// Server-side applies of `applies` sets of the main namespace (`n` of them, round robin) with the spec
/// they already have, and a new annotation: counts the operator's writes (there should be none) and
/// its CPU per apply, once both replicas went idle again.
pub async fn noop(ctx: &mut Ctx, ns: &str, n: usize, applies: usize, install: &Install) -> Result<NoOp> {
    let sets = ctx.sets(ns);
    let lp = ListParams::default();
    let listed = cluster::retry("list sets", || sets.list(&lp)).await?;
    // Name → (the spec's data, generation) as the API server holds them now.
    let current: BTreeMap<String, (serde_json::Value, Option<i64>)> = listed
        .items
        .iter()
        .filter_map(|s: &ConfigMapSet| {
            let name = s.metadata.name.clone()?;
            let data = serde_json::to_value(&s.spec)
                .ok()?
                .pointer("/template/data")
                .cloned()?;
            Some((name, (data, s.metadata.generation)))
        })
        .collect();
    let targets: Vec<String> = (0..applies).map(|i| set_name(i % n)).collect();
    if let Some(missing) = targets.iter().find(|t| !current.contains_key(*t)) {
        return Err(format!("no-op: set {missing} is not there").into());
    }
    idle(install, ctx.timeout_base).await?;
    let meter = Meter::start(ctx, install).await;
    let round = ctx.next_value();
    let pp = PatchParams::apply(GITOPS_MANAGER).force();
    let changed = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    bounded(applies, ctx.concurrency, |i| {
        let (sets, name, pp, changed) = (sets.clone(), targets[i].clone(), pp.clone(), &changed);
        let (data, generation) = current[&name].clone();
        let round = format!("{round}-{i}");
        async move {
            let body = Patch::Apply(json!({
                "apiVersion": "cmset.dev/v1alpha1",
                "kind": "ConfigMapSet",
                "metadata": {"name": name, "annotations": {APPLIED: round}},
                "spec": {"template": {"data": data}},
            }));
            let after = cluster::retry(&format!("apply {name}"), || sets.patch(&name, &pp, &body)).await?;
            if after.metadata.generation != generation {
                changed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        }
    })
    .await?;
    let seconds = start.elapsed().as_secs_f64();
    settle(ctx, install, None, applies, "the no-op applies").await;
    let idle_s = match idle(install, ctx.timeout(applies)).await {
        Ok(d) => Some(d.as_secs_f64()),
        Err(e) => {
            ctx.fail(format!("no-op: {e}"));
            None
        }
    };
    // The API server counts a server-side apply as verb APPLY.
    let bench: cluster::RequestCounts = [(
        ("APPLY".to_string(), "configmapsets.cmset.dev".to_string()),
        applies as f64,
    )]
    .into();
    let cost = meter.finish(ctx, install, applies, &bench).await;
    let writes = cost.writes.as_ref();
    Ok(NoOp {
        applies,
        sets: n.min(applies),
        seconds,
        spec_changed: changed.into_inner(),
        idle_s,
        // `+ 0.0`: no writes is 0, not -0.
        operator_writes: writes.map(|w| w.operator_self_per_change * applies as f64 + 0.0),
        operator_writes_apiserver: writes.map(|w| {
            let per_apply = match w.operator_identity_per_change {
                Some(_) => identity_writes(&w.operator_identity),
                None => w.operator_per_change,
            };
            per_apply * applies as f64 + 0.0
        }),
        cpu_ms_per_set: cost.cpu_ms_per_change,
        cost,
        floor: ctx.floor.clone(),
    })
}

/// The writes among an identity's requests by `VERB resource`, its Lease renewals left out (they
/// come with time, not with what it is sent).
fn identity_writes(requests: &BTreeMap<String, f64>) -> f64 {
    requests
        .iter()
        .filter(|(k, _)| {
            let (verb, resource) = k.split_once(' ').unwrap_or((k, ""));
            matches!(
                verb,
                "CREATE" | "UPDATE" | "PATCH" | "DELETE" | "DELETECOLLECTION"
            ) && resource != "leases.coordination.k8s.io"
        })
        .map(|(_, v)| v)
        .sum::<f64>()
        + 0.0
}

// ---------------------------------------------------------------------------------------- large set --

const LARGE_SET: &str = "large";
/// A small set and its Deployment in the large set's namespace, changed one change at a time while the
/// large set is judged and planned: whether the other sets' watches and reconciles stall meanwhile.
const BYSTANDER: &str = "large-bystander";
/// Bytes per key of the large set's data (it is split over keys of this size).
const CHUNK: usize = 100 * 1024;
/// Large changes made while the bystander is timed (after the metered ones, so that its changes do not
/// count in the large set's CPU per change).
const STALL_CHANGES: usize = 20;

/// About `kib` KiB of data that does not compress to nothing: keys `blob-NN`, each a JSON array of
/// 16-character strings of letters and digits from a fixed pseudo-random sequence. The large set
/// declares them JSON whose strings match a pattern, so that every change is judged in full. (Quotes
/// are the only character JSON escapes here, and serde_json escapes them as Go does, so the revision's
/// name is computed as for the small sets.)
fn large_data(kib: usize) -> BTreeMap<String, String> {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const WORD: usize = 16;
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ALPHABET[(state % ALPHABET.len() as u64) as usize] as char
    };
    let mut left = kib * 1024;
    let mut out = BTreeMap::new();
    let mut k = 0;
    while left > 0 {
        let len = left.clamp(WORD + 4, CHUNK);
        let mut blob = String::with_capacity(len + WORD + 3);
        blob.push('[');
        while blob.len() + WORD + 3 <= len {
            if blob.len() > 1 {
                blob.push(',');
            }
            blob.push('"');
            blob.extend((0..WORD).map(|_| next()));
            blob.push('"');
        }
        blob.push(']');
        left -= left.min(len);
        out.insert(format!("blob-{k:02}"), blob);
        k += 1;
    }
    out
}

/// What the large set declares its keys to be: JSON arrays of words of letters and digits.
fn large_validation() -> serde_json::Value {
    json!({"keys": {"blob-*": {"format": "json", "schema": {
        "type": "array",
        "items": {"type": "string", "pattern": "^[A-Za-z0-9]+$"},
    }}}})
}

fn large_revision(data: &BTreeMap<String, String>, v: &str) -> String {
    let mut all: BTreeMap<&str, &str> = data.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.insert("v", v);
    revision_name_of(LARGE_SET, &all)
}

/// One set of about `kib` KiB, whose content is validated, read by one Deployment, changed `changes`
/// times one after the other (one small key each time, the rest unchanged): latency and CPU per change,
/// and RSS before and after. Then a small set's changes are timed, first alone and then while the large
/// set keeps changing: a judging or a plan that held the engine's thread would show there.
pub async fn large_set(
    ctx: &mut Ctx,
    ns: &str,
    kib: usize,
    changes: usize,
    tracker: &Tracker,
    install: &Install,
) -> Result<LargeSet> {
    let data = large_data(kib);
    let sets = ctx.sets(ns);
    let mut template = json!(data);
    template["v"] = json!("0");
    let set: ConfigMapSet = serde_json::from_value(json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": "ConfigMapSet",
        "metadata": {"name": LARGE_SET},
        "spec": {"template": {"data": template}, "validation": large_validation()},
    }))?;
    let start = Instant::now();
    create(&sets, &set).await?;
    create(&sets, &cluster::set_object(BYSTANDER, "0")?).await?;
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    for name in [LARGE_SET, BYSTANDER] {
        create(&deployments, &cluster::deployment_object(name, name, true)?).await?;
    }
    tracker.expect(LARGE_SET, &large_revision(&data, "0"), start);
    tracker.expect(BYSTANDER, &revision_name(BYSTANDER, "0"), start);
    if !tracker.drain(start + ctx.timeout_base).await.is_empty() {
        return Err(format!(
            "the large set's Deployment or its bystander's did not name its first revision within {:?}",
            ctx.timeout_base
        )
        .into());
    }
    tracker.take_arrivals();
    settle(ctx, install, Some(tracker), 2, "creating the large set").await;
    idle(install, ctx.timeout_base).await?;
    let before = install.memory().await;

    let meter = Meter::start(ctx, install).await;
    let mut late = 0;
    for _ in 0..changes {
        let value = ctx.next_value();
        patch_set(&sets, LARGE_SET, &value).await?;
        tracker.expect(LARGE_SET, &large_revision(&data, &value), Instant::now());
        late += usize::from(
            !tracker
                .wait_for(LARGE_SET, Instant::now() + ctx.timeout_base)
                .await,
        );
    }
    let latencies: Vec<f64> = tracker.take_arrivals().iter().map(|a| ms(a.latency)).collect();
    if late > 0 {
        ctx.fail(format!(
            "large set: {late} of {changes} changes did not reach its Deployment within {:?}",
            ctx.timeout_base
        ));
    }
    let settle_s = settle(ctx, install, Some(tracker), changes, "the large set's changes").await;
    if let Err(e) = idle(install, ctx.timeout(changes)).await {
        ctx.fail(format!("large set: {e}"));
    }
    let mut cost = meter.finish(ctx, install, changes, &set_patches(changes)).await;
    cost.settle_s = settle_s;
    let after = install.memory().await;
    let after_pct_of_before = before
        .iter()
        .zip(&after)
        .filter_map(|(b, a)| {
            let (b, a_kib) = (b.memory?.rss_kib, a.memory?.rss_kib);
            Some((a.role.clone(), a_kib as f64 * 100.0 / b.max(1) as f64))
        })
        .collect();

    let stall = bystander(ctx, &sets, &data, tracker, changes.min(STALL_CHANGES)).await?;
    if stall.late > 0 {
        ctx.fail(format!(
            "large set: {} bystander changes did not reach its Deployment within {:?}",
            stall.late, ctx.timeout_base
        ));
    }
    settle(ctx, install, Some(tracker), changes, "the bystander's changes").await;
    Ok(LargeSet {
        kib: data.values().map(String::len).sum::<usize>() / 1024,
        changes,
        converged: latencies.len(),
        latency: latency(&latencies, ctx.floor.as_ref()),
        before,
        after,
        after_pct_of_before,
        cost,
        floor: ctx.floor.clone(),
        bystander: Some(stall),
    })
}

/// The bystander's changes, one at a time: as many alone as there will be large changes (at least
/// five), then for as long as `large_changes` changes of the large set take, which are made one after
/// the other meanwhile.
async fn bystander(
    ctx: &Ctx,
    sets: &Api<ConfigMapSet>,
    data: &BTreeMap<String, String>,
    tracker: &Tracker,
    large_changes: usize,
) -> Result<Bystander> {
    let timeout = ctx.timeout_base;
    let change = async |deployment: &str| -> Result<bool> {
        let value = ctx.next_value();
        patch_set(sets, deployment, &value).await?;
        let name = if deployment == LARGE_SET {
            large_revision(data, &value)
        } else {
            revision_name(deployment, &value)
        };
        tracker.expect(deployment, &name, Instant::now());
        Ok(tracker.wait_for(deployment, Instant::now() + timeout).await)
    };
    // After each of its changes, a ConfigMap created by the bench itself in a namespace no operator
    // watches: what the API server and the machine alone lose meanwhile.
    // (Not without the floor's namespace: `--skip-floor`.)
    let bare = async |tag: &str| -> Result<Option<f64>> {
        if !ctx.floor_ready {
            return Ok(None);
        }
        let took = crate::flood::bare_changes(ctx, &ctx.floor_ns, &format!("large-{tag}"), 1).await?;
        Ok(took.first().copied())
    };
    let mut late = 0;
    let mut bare_alone = Vec::new();
    for _ in 0..large_changes.max(5) {
        late += usize::from(!change(BYSTANDER).await?);
        bare_alone.extend(bare(&ctx.next_value()).await?);
    }
    let alone = tracker.take_arrivals();

    let large_done = std::cell::Cell::new(false);
    let large = async {
        let mut late = 0;
        for _ in 0..large_changes {
            late += usize::from(!change(LARGE_SET).await?);
        }
        large_done.set(true);
        Result::<usize>::Ok(late)
    };
    let small = async {
        let (mut late, mut bare_during) = (0, Vec::new());
        while !large_done.get() {
            late += usize::from(!change(BYSTANDER).await?);
            bare_during.extend(bare(&ctx.next_value()).await?);
        }
        Result::<_>::Ok((late, bare_during))
    };
    let (large_late, small) = tokio::join!(large, small);
    let (large_late, (small_late, bare_during)) = (large_late?, small?);
    let during: Vec<f64> = tracker
        .take_arrivals()
        .iter()
        .filter(|a| a.deployment == BYSTANDER)
        .map(|a| ms(a.latency))
        .collect();
    let alone: Vec<f64> = alone.iter().map(|a| ms(a.latency)).collect();
    let (changes_alone, changes_during) = (alone.len(), during.len());
    let (alone, during) = (latency(&alone, None), latency(&during, None));
    Ok(Bystander {
        large_changes,
        p99_ratio: alone
            .as_ref()
            .zip(during.as_ref())
            .map(|(a, d)| d.p99_ms / a.p99_ms.max(f64::MIN_POSITIVE)),
        changes_alone,
        changes_during,
        alone,
        during,
        bare_alone: latency(&bare_alone, None),
        bare_during: latency(&bare_during, None),
        late: late + small_late,
        large_late,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_writes_leave_out_reads_and_lease_renewals() {
        let r: BTreeMap<String, f64> = [
            ("GET configmaps".to_string(), 3.0),
            ("UPDATE leases.coordination.k8s.io".to_string(), 5.0),
            ("PATCH deployments.apps".to_string(), 1.0),
            ("CREATE configmaps".to_string(), 2.0),
            ("other".to_string(), 4.0),
        ]
        .into();
        assert_eq!(identity_writes(&r), 3.0);
        assert_eq!(identity_writes(&BTreeMap::new()), 0.0);
    }

    #[test]
    fn large_data_is_the_size_asked_in_keys_a_configmap_takes() {
        let data = large_data(900);
        let total = data.values().map(String::len).sum::<usize>();
        // Each key falls short of its share by less than a word.
        assert!(total <= 900 * 1024 && total > 900 * 1024 - 9 * 20, "{total}");
        assert_eq!(data.len(), 9, "{:?}", data.keys().collect::<Vec<_>>());
        assert!(data.values().all(|v| v.len() <= CHUNK));
        for blob in data.values() {
            let words: Vec<String> = serde_json::from_str(blob).expect("a JSON array of strings");
            assert!(
                words
                    .iter()
                    .all(|w| w.len() == 16 && w.bytes().all(|b| b.is_ascii_alphanumeric())),
                "what the large set's validation declares, and only quotes for JSON to escape"
            );
        }
        assert_eq!(
            large_validation()["keys"]["blob-*"]["schema"]["items"]["pattern"],
            "^[A-Za-z0-9]+$"
        );
        // The same data every time, and a change of `v` is a new revision.
        assert_eq!(large_data(3), large_data(3));
        assert_ne!(large_revision(&data, "c1"), large_revision(&data, "c2"));
        assert_eq!(large_data(1).len(), 1);
    }
}
