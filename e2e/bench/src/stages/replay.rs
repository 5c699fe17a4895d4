//! The replay floor: the burst's requests sent by a bare client, with no operator to decide them.
//!
//! The old floor (`floor.rs`) sends three cheap writes per change from one client into a namespace
//! nobody watches, with no webhook: an operator that cost nothing would still reach only about half of
//! it. The replay sends, per change, exactly what a change through cmset sends:
//!
//! 1. the bench's merge PATCH of the set (as the burst sends it);
//! 2. the revision: a POST of a ConfigMap shaped as the revision cmset made for the sample set of the
//!    stage's namespace (its labels, annotations, owner reference, `immutable`), answered with metadata
//!    only, as cmset asks;
//! 3. the workload: cmset's JSON patch (a `test` of the uid, a `test` of the name it read and a
//!    `replace`), field manager `cmset-controller`, answered with metadata only;
//! 4. the set's status: a server-side apply (forced, `cmset-controller`) of the sample set's status
//!    with the names swapped, guarded by the resourceVersion the PATCH returned;
//! 5. the Event: an events.k8s.io/v1 Event shaped as the sample's.
//!
//! Steps 2 to 5 run at cmset's default reconcile concurrency (16 set and 16 workload reconciles in
//! flight), the PATCHes at the burst's. Meanwhile what loads the API server besides the requests is
//! there too: with the webhook configuration, a webhook registered as the bench registers cmset's and
//! answering (`null_webhook`: allowed, nothing read); the bench's tracker watching the Deployments; and
//! two idle watchers per kind the replicas watch (sets, ConfigMaps as metadata, opted-in Deployments,
//! and the leader's ReplicaSets), which read every byte of every event and decode none. What is left
//! out is cmset: its decisions, its decoding, its answers to admission. The burst's share of the
//! replay's rate is then what cmset itself costs in throughput.

use std::sync::atomic::AtomicUsize;

use futures::AsyncReadExt;
use k8s_openapi::api::events::v1::Event as EventV1;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::*;
use crate::report::Replay;

/// cmset's defaults (`--concurrency`, `--workload-concurrency`).
const SET_RECONCILES: usize = 16;
const WORKLOAD_RECONCILES: usize = 16;
const METADATA_ANSWER: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// What cmset wrote for the sample set (the first of the stage's namespace), as the shapes to replay.
struct Sample {
    set: String,
    deployment: String,
    set_uid: String,
    revision_name: String,
    /// The revision ConfigMap, without what the server sets.
    revision: Value,
    status: Value,
    event: Value,
}

impl Sample {
    async fn read(client: &Client, ns: &str) -> Result<Self> {
        let (set, deployment) = (set_name(0), deployment_name(0));
        let stored = Api::<ConfigMapSet>::namespaced(client.clone(), ns)
            .get(&set)
            .await?;
        let set_uid = stored.metadata.uid.clone().unwrap_or_default();
        let mut status = serde_json::to_value(&stored.status)?;
        // The notifier's and the checks' records are not the set controller's to write.
        if let Some(s) = status.as_object_mut() {
            s.remove("notifications");
            s.remove("checks");
        }
        let revision_name = status["currentRevision"]
            .as_str()
            .ok_or("the sample set has no current revision")?
            .to_string();
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(&revision_name)
            .await?;
        let mut revision = serde_json::to_value(&cm)?;
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "selfLink",
            "namespace",
        ] {
            revision["metadata"].as_object_mut().map(|m| m.remove(field));
        }
        let events = Api::<EventV1>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await?;
        let event = events
            .items
            .into_iter()
            .find(|e| {
                e.reporting_controller.as_deref() == Some(cmset_api::labels::FIELD_MANAGER)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(set.as_str())
            })
            .ok_or("cmset posted no Event about the sample set")?;
        let mut event = serde_json::to_value(&event)?;
        event["metadata"] = json!({});
        Ok(Self {
            set,
            deployment,
            set_uid,
            revision_name,
            revision,
            status,
            event,
        })
    }

    /// `shape` with the sample's names and uid swapped for change `i`'s.
    fn swap(&self, shape: &Value, i: usize, revision: &str, set_uid: &str) -> Result<Value> {
        let text = shape
            .to_string()
            .replace(&self.revision_name, revision)
            .replace(&self.set_uid, set_uid)
            .replace(&self.set, &set_name(i))
            .replace(&self.deployment, &deployment_name(i));
        Ok(serde_json::from_str(&text)?)
    }
}

/// One replay object pair: the set's uid is read from its PATCH's answer, the Deployment's from its
/// creation.
struct Target {
    deployment_uid: String,
    /// The name its template reads before the change.
    reads: String,
}

/// Replays the burst of `n` changes in namespace `<sample_ns>-replay` (made and filled on the first
/// call of a configuration): see the module documentation.
pub async fn replay(
    ctx: &mut Ctx,
    sample_ns: &str,
    n: usize,
    install: &Install,
    webhook: bool,
) -> Result<Replay> {
    let sample = Arc::new(Sample::read(&ctx.client, sample_ns).await?);
    let ns = format!("{sample_ns}-replay");
    ctx.create_namespace(&ns).await?;
    if webhook {
        if ctx.null_webhook.is_none() {
            ctx.null_webhook = Some(crate::null_webhook::NullWebhook::start().await?);
        }
        let hook = ctx.null_webhook.as_ref().expect("just started");
        let (port, ca) = (hook.port, hook.ca_bundle.clone());
        ctx.register_webhook_with_ca(&format!("cmset-bench-{ns}"), &ns, port, &ca)
            .await?;
        // The API server reads registrations from its own watch: give it a moment to see this one.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let targets = Arc::new(make_targets(ctx, &ns, n).await?);
    let tracker = Tracker::start(&ctx.client, &ns);
    if !tracker.synced(ctx.timeout(n)).await {
        return Err("the replay's Deployment watch did not sync".into());
    }
    let watchers = idle_watchers(&ctx.client, &ns);
    // The watches' initial lists, and kube-controller-manager's first ReplicaSets, before the window.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let meter = Meter::start(ctx, install).await;
    let sets = ctx.sets(&ns);
    let values: Vec<String> = (0..n).map(|_| ctx.next_value()).collect();
    let slots = Arc::new((
        Semaphore::new(SET_RECONCILES),
        Semaphore::new(WORKLOAD_RECONCILES),
    ));
    let failed = Arc::new((AtomicUsize::new(0), Mutex::new(None::<String>)));
    let operator = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let sent = bounded(n, ctx.concurrency, |i| {
        let (sets, value, client, ns) = (sets.clone(), values[i].clone(), ctx.client.clone(), ns.clone());
        let (sample, targets, slots, failed, operator, tracker) = (
            sample.clone(),
            targets.clone(),
            slots.clone(),
            failed.clone(),
            operator.clone(),
            &tracker,
        );
        async move {
            let set = set_name(i);
            let patch = Patch::Merge(json!({"spec": {"template": {"data": {"v": value}}}}));
            let params = PatchParams::default();
            let patched =
                cluster::retry(&format!("patch {set}"), || sets.patch(&set, &params, &patch)).await?;
            let revision = revision_name(&set, &value);
            tracker.expect(&deployment_name(i), &revision, Instant::now());
            // cmset's part runs beside the bench's PATCHes, as the operator does.
            let handle = tokio::spawn(async move {
                let done = operator_requests(
                    &client,
                    &ns,
                    &sample,
                    &targets[i],
                    &slots,
                    i,
                    &value,
                    &revision,
                    &patched,
                )
                .await;
                if let Err(e) = done {
                    failed.0.fetch_add(1, Ordering::Relaxed);
                    failed.1.lock().expect("lock").get_or_insert(e.to_string());
                }
            });
            operator.lock().expect("lock").push(handle);
            Ok(())
        }
    })
    .await;
    let timeout = ctx.timeout(n);
    let late = tracker.drain(start + timeout).await;
    let handles: Vec<_> = std::mem::take(&mut *operator.lock().expect("lock"));
    for h in handles {
        let _ = h.await;
    }
    let arrivals = tracker.take_arrivals();
    let mut bench = RequestCounts::new();
    for (verb, resource) in [
        ("PATCH", "configmapsets.cmset.dev"),
        ("POST", "configmaps"),
        ("PATCH", "deployments.apps"),
        ("APPLY", "configmapsets.cmset.dev/status"),
        ("POST", "events.events.k8s.io"),
    ] {
        bench.insert((verb.to_string(), resource.to_string()), n as f64);
    }
    let cost = meter.finish(ctx, install, n, &bench).await;
    for w in watchers {
        w.abort();
    }
    // kube-controller-manager rolls the replay's Deployments out at its own pace (20 writes/s): left
    // to it before the burst, so that the burst neither waits for nor pays for them.
    let deadline = Instant::now() + timeout;
    while tracker.rollouts().0 > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if tracker.rollouts().0 > 0 {
        eprintln!(
            "bench:   the replay's rollouts still pending after {timeout:?}: {}",
            tracker.rollouts().0
        );
    }
    let mut r = Replay {
        changes: n,
        converged: arrivals.len(),
        concurrency: ctx.concurrency,
        set_reconciles: SET_RECONCILES,
        workload_reconciles: WORKLOAD_RECONCILES,
        webhook,
        cost,
        ..Replay::default()
    };
    if let Err(e) = sent {
        return Err(format!("replay of {n}: {e}").into());
    }
    let failures = failed.0.load(Ordering::Relaxed);
    if failures > 0 {
        let first = failed.1.lock().expect("lock").clone().unwrap_or_default();
        return Err(format!("replay of {n}: {failures} changes failed; the first: {first}").into());
    }
    if late.is_empty() && arrivals.len() == n {
        let secs = last_landed_s(&arrivals, start);
        r.seconds = Some(secs);
        r.rate = Some(n as f64 / secs);
    } else {
        ctx.fail(format!(
            "replay of {n}: {} of {n} Deployments did not name their new revision within {timeout:?}",
            n - arrivals.len()
        ));
    }
    Ok(r)
}

/// `n` sets and `n` opted-in Deployments whose template reads a name of its own (`<set>-init`) and is
/// already marked as cmset marks the templates it manages, so their ReplicaSets are watched too.
async fn make_targets(ctx: &Ctx, ns: &str, n: usize) -> Result<Vec<Target>> {
    let sets = ctx.sets(ns);
    let deployments = Api::<Deployment>::namespaced(ctx.client.clone(), ns);
    let made: Mutex<Vec<Option<Target>>> = Mutex::new((0..n).map(|_| None).collect());
    bounded(n, ctx.concurrency, |i| {
        let (sets, deployments, made) = (sets.clone(), deployments.clone(), &made);
        async move {
            let set = set_name(i);
            create(&sets, &cluster::set_object(&set, "0")?).await?;
            let reads = format!("{set}-init");
            let mut d = cluster::deployment_object(&deployment_name(i), &reads, true)?;
            if let Some(t) = d.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
                t.labels.get_or_insert_default().insert(
                    cmset_api::labels::MANAGED_TEMPLATE.to_string(),
                    "true".to_string(),
                );
            }
            let params = kube::api::PostParams::default();
            let created =
                cluster::retry("create a replay Deployment", || deployments.create(&params, &d)).await?;
            made.lock().expect("lock")[i] = Some(Target {
                deployment_uid: created.metadata.uid.unwrap_or_default(),
                reads,
            });
            Ok(())
        }
    })
    .await?;
    made.into_inner()
        .expect("lock")
        .into_iter()
        .map(|t| t.ok_or_else(|| "a replay Deployment was not made".into()))
        .collect()
}

/// cmset's four requests for change `i`, each under the reconcile slot that sends it in cmset.
#[allow(clippy::too_many_arguments)]
async fn operator_requests(
    client: &Client,
    ns: &str,
    sample: &Sample,
    target: &Target,
    slots: &(Semaphore, Semaphore),
    i: usize,
    value: &str,
    revision: &str,
    patched: &ConfigMapSet,
) -> Result<()> {
    let set = set_name(i);
    let set_uid = patched.metadata.uid.clone().unwrap_or_default();
    let mut cm = sample.swap(&sample.revision, i, revision, &set_uid)?;
    cm["data"] = json!({"v": value});
    {
        let _slot = slots.0.acquire().await?;
        let request = kube::core::Request::new(format!("/api/v1/namespaces/{ns}/configmaps"))
            .create(&post_params(), serde_json::to_vec(&cm)?)?;
        client.request_text(metadata_answer(request)).await?;
    }
    {
        let _slot = slots.1.acquire().await?;
        let ops = json!([
            {"op": "test", "path": "/metadata/uid", "value": target.deployment_uid},
            {"op": "test", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": target.reads},
            {"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": revision},
        ]);
        // kube's typed JSON patch needs a crate the bench has no other use for: the request is built
        // as kube builds it (content type `application/json-patch+json`, the field manager).
        let url = format!(
            "/apis/apps/v1/namespaces/{ns}/deployments/{}?fieldManager={}",
            deployment_name(i),
            cmset_api::labels::FIELD_MANAGER
        );
        let request = http::Request::patch(url)
            .header(http::header::CONTENT_TYPE, "application/json-patch+json")
            .body(serde_json::to_vec(&ops)?)?;
        client.request_text(metadata_answer(request)).await?;
    }
    let _slot = slots.0.acquire().await?;
    let mut status = sample.swap(&sample.status, i, revision, &set_uid)?;
    status["observedGeneration"] = json!(patched.metadata.generation);
    let body = json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": "ConfigMapSet",
        "metadata": {"resourceVersion": patched.metadata.resource_version},
        "status": status,
    });
    let request = kube::core::Request::new(format!("/apis/cmset.dev/v1alpha1/namespaces/{ns}/configmapsets"))
        .patch_subresource(
            "status",
            &set,
            &PatchParams::apply(cmset_api::labels::FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )?;
    client.request_text(request).await?;
    let mut event = sample.swap(&sample.event, i, revision, &set_uid)?;
    event["metadata"] = json!({"name": format!("{set}.{revision}")});
    if let Some(regarding) = event["regarding"].as_object_mut() {
        regarding.insert("resourceVersion".into(), json!(patched.metadata.resource_version));
    }
    let request = kube::core::Request::new(format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"))
        .create(&kube::api::PostParams::default(), serde_json::to_vec(&event)?)?;
    client.request_text(request).await?;
    Ok(())
}

fn post_params() -> kube::api::PostParams {
    kube::api::PostParams {
        field_manager: Some(cmset_api::labels::FIELD_MANAGER.to_string()),
        ..kube::api::PostParams::default()
    }
}

fn metadata_answer(mut request: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    request.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ANSWER),
    );
    request
}

/// What the two replicas watch in `ns`, watched twice and read to the last byte, decoded by no one.
fn idle_watchers(client: &Client, ns: &str) -> Vec<tokio::task::JoinHandle<()>> {
    let enabled = format!(
        "labelSelector={}%3D{}",
        cmset_api::labels::ENABLED,
        cmset_api::labels::ENABLED_VALUE
    );
    let managed = format!("labelSelector={}%3Dtrue", cmset_api::labels::MANAGED_TEMPLATE);
    let watches = [
        (
            format!("/apis/cmset.dev/v1alpha1/namespaces/{ns}/configmapsets?"),
            None,
            2,
        ),
        (
            format!("/api/v1/namespaces/{ns}/configmaps?"),
            Some(METADATA_ANSWER),
            2,
        ),
        (
            format!("/apis/apps/v1/namespaces/{ns}/deployments?{enabled}&"),
            None,
            2,
        ),
        // History kinds: the leader only.
        (
            format!("/apis/apps/v1/namespaces/{ns}/replicasets?{managed}&"),
            None,
            1,
        ),
    ];
    let mut out = vec![];
    for (path, accept, replicas) in watches {
        for _ in 0..replicas {
            out.push(tokio::spawn(drain_watch(client.clone(), path.clone(), accept)));
        }
    }
    out
}

async fn drain_watch(client: Client, path: String, accept: Option<&'static str>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let url = format!("{path}watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=290");
        let mut request = match http::Request::get(url).body(vec![]) {
            Ok(r) => r,
            Err(_) => return,
        };
        if let Some(accept) = accept {
            request
                .headers_mut()
                .insert(http::header::ACCEPT, http::HeaderValue::from_static(accept));
        }
        match client.request_stream(request).await {
            Ok(stream) => {
                let mut stream = Box::pin(stream);
                while matches!(stream.read(&mut buf).await, Ok(k) if k > 0) {}
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
