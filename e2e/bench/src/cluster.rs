//! The bench's side of the API: its namespaces and objects, bounded-concurrency bulk requests, a watch
//! that times when Deployments name a revision, and the API server's own request counters.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmset_api::ConfigMapSet;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::json;
use sha2::{Digest, Sha256};

/// No single request may take longer than this (kube's client has no timeout of its own).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The label that opts a workload in.
pub fn enabled_label() -> String {
    format!(
        "{}={}",
        cmset_api::labels::ENABLED,
        cmset_api::labels::ENABLED_VALUE
    )
}

pub fn set_name(i: usize) -> String {
    format!("s-{i:05}")
}

pub fn deployment_name(i: usize) -> String {
    format!("d-{i:05}")
}

/// The revision cmset names for a set holding `{v: <value>}`.
pub fn revision_name(set: &str, value: &str) -> String {
    format!("{set}-{}", content_hash(&[("v", value)].into()))
}

/// The revision cmset names for a set holding `data`.
pub fn revision_name_of(set: &str, data: &BTreeMap<&str, &str>) -> String {
    format!("{set}-{}", content_hash(data))
}

/// kustomize's hash of a ConfigMap's data (as cmset-core computes it). Plain ASCII keys and values need
/// no escaping, so serde_json's compact encoding equals Go's here.
fn content_hash(data: &BTreeMap<&str, &str>) -> String {
    let input = json!({"data": data, "kind": "ConfigMap", "name": ""}).to_string();
    Sha256::digest(input.as_bytes())
        .iter()
        .take(5)
        .flat_map(|b| [b >> 4, b & 0x0f])
        .map(|n| match n {
            0 => 'g',
            1 => 'h',
            3 => 'k',
            0xa => 'm',
            0xe => 't',
            n => char::from_digit(u32::from(n), 16).expect("a nibble is a hex digit"),
        })
        .collect()
}

pub fn set_object(name: &str, value: &str) -> Result<ConfigMapSet> {
    // Built from JSON so the bench keeps compiling while the API types gain optional fields.
    Ok(serde_json::from_value(json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": "ConfigMapSet",
        "metadata": {"name": name},
        "spec": {"template": {"data": {"v": value}}},
    }))?)
}

/// A Deployment with no replicas (no pods, but each template change still makes a ReplicaSet) reading
/// ConfigMap `reads` through `envFrom`.
pub fn deployment_object(name: &str, reads: &str, opted_in: bool) -> Result<Deployment> {
    let labels = if opted_in {
        json!({cmset_api::labels::ENABLED: cmset_api::labels::ENABLED_VALUE})
    } else {
        json!({})
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.9",
                    "envFrom": [{"configMapRef": {"name": reads, "optional": !opted_in}}],
                }]},
            },
        },
    }))?)
}

pub fn configmap_object(name: &str, data: &[(&str, &str)]) -> Result<ConfigMap> {
    let data: BTreeMap<&str, &str> = data.iter().copied().collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": data,
    }))?)
}

/// The ConfigMap the first container's first `envFrom` names.
pub fn env_from_name(d: &Deployment) -> Option<&str> {
    let spec = d.spec.as_ref()?.template.spec.as_ref()?;
    let source = spec.containers.first()?.env_from.as_ref()?.first()?;
    Some(source.config_map_ref.as_ref()?.name.as_str())
}

/// Runs one request with a timeout, retrying what is worth retrying (throttling, server errors,
/// transport errors) a few times; "already exists" on a retried create counts as done.
pub async fn retry<T, F, Fut>(what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let mut attempt = 0;
    loop {
        attempt += 1;
        let err: Error = match tokio::time::timeout(REQUEST_TIMEOUT, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(kube::Error::Api(s))) if !(s.code == 429 || s.code >= 500) => {
                return Err(format!("{what}: {} ({})", s.message, s.code).into());
            }
            Ok(Err(e)) => format!("{what}: {e}").into(),
            Err(_) => format!("{what}: no answer in {REQUEST_TIMEOUT:?}").into(),
        };
        if attempt >= 4 {
            return Err(err);
        }
        tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
    }
}

/// Creates, ignoring "already exists" (a retried create whose first attempt landed).
pub async fn create<K>(api: &Api<K>, obj: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let pp = PostParams::default();
    match retry(&format!("create {name}"), || api.create(&pp, obj)).await {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("(409)") => Ok(()),
        Err(e) => Err(e),
    }
}

/// `f(0..n)` with at most `concurrency` in flight; stops at the first error.
pub async fn bounded<F, Fut>(n: usize, concurrency: usize, f: F) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await
}

/// A merge patch of a set's data: the one kind of change the bench makes.
pub async fn patch_set(api: &Api<ConfigMapSet>, set: &str, value: &str) -> Result<()> {
    let patch = Patch::Merge(json!({"spec": {"template": {"data": {"v": value}}}}));
    let pp = PatchParams::default();
    retry(&format!("patch {set}"), || api.patch(set, &pp, &patch))
        .await
        .map(drop)
}

/// The label on every bench namespace that its webhook registration selects (Kubernetes 1.20 has no
/// `kubernetes.io/metadata.name` label yet).
pub const NAMESPACE_LABEL: &str = "cmset-bench";

pub async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/part-of": "cmset-bench",
            NAMESPACE_LABEL: name,
        }},
    }))?;
    create(&Api::<Namespace>::all(client.clone()), &ns).await
}

/// Lets the operator's ServiceAccount keep its leader Lease in `namespace` (deleted with it). The
/// shipped Role grants the one Lease `cmset-controller` in cmset-system, which the e2e suite's
/// leader-election tests use on a shared cluster; the bench's replicas elect their leader in the
/// namespace they watch instead, with the install's Lease name and duration.
/// `also` is the run's own ServiceAccount (namespace, name) for its replicas, when it made one.
pub async fn grant_lease(client: &Client, namespace: &str, also: Option<&(String, String)>) -> Result<()> {
    let mut subjects =
        vec![json!({"kind": "ServiceAccount", "name": "cmset-controller", "namespace": "cmset-system"})];
    if let Some((ns, name)) = also {
        subjects.push(json!({"kind": "ServiceAccount", "name": name, "namespace": ns}));
    }
    let role: Role = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "cmset-bench-leader-election"},
        "rules": [{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create", "get", "update"],
        }],
    }))?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "cmset-bench-leader-election"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "cmset-bench-leader-election",
        },
        "subjects": subjects,
    }))?;
    create(&Api::<Role>::namespaced(client.clone(), namespace), &role).await?;
    create(
        &Api::<RoleBinding>::namespaced(client.clone(), namespace),
        &binding,
    )
    .await
}

/// The webhook registration of config/webhook for one namespace, at a loopback URL (as config/dev and
/// the e2e harness register it): opted-in Deployments, StatefulSets and DaemonSets, CREATE and UPDATE,
/// `failurePolicy: Ignore`, 5 s. No caBundle: the operator adds its CA, as in a cluster.
pub async fn register_webhook(client: &Client, name: &str, namespace: &str, port: u16) -> Result<()> {
    register_webhook_with_ca(client, name, namespace, port, None).await
}

/// The same registration with a `caBundle` (base64 PEM) from the start.
pub async fn register_webhook_with_ca(
    client: &Client,
    name: &str,
    namespace: &str,
    port: u16,
    ca_bundle: Option<&str>,
) -> Result<()> {
    let mut client_config = json!({"url": format!("https://127.0.0.1:{port}/mutate")});
    if let Some(ca) = ca_bundle {
        client_config["caBundle"] = ca.into();
    }
    let registration: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "cmset-bench"}},
        "webhooks": [{
            "name": "workloads.cmset.dev",
            "clientConfig": client_config,
            "rules": [{
                "apiGroups": ["apps"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["deployments", "statefulsets", "daemonsets"],
            }],
            "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: namespace}},
            "objectSelector": {"matchLabels": {cmset_api::labels::ENABLED: cmset_api::labels::ENABLED_VALUE}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "reinvocationPolicy": "IfNeeded",
            "admissionReviewVersions": ["v1"],
        }],
    }))?;
    create(
        &Api::<MutatingWebhookConfiguration>::all(client.clone()),
        &registration,
    )
    .await
}

pub async fn delete_registration(client: &Client, name: &str) -> Result<()> {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    let dp = DeleteParams::default();
    match retry(&format!("delete webhook registration {name}"), || {
        api.delete(name, &dp)
    })
    .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.to_string().contains("(404)") => Ok(()),
        Err(e) => Err(e),
    }
}

/// Whether the operator has put its CA into a registration's caBundle yet.
pub async fn has_ca_bundle(client: &Client, name: &str) -> bool {
    let api = Api::<MutatingWebhookConfiguration>::all(client.clone());
    match tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(name)).await {
        Ok(Ok(Some(r))) => r
            .webhooks
            .and_then(|w| w.into_iter().next())
            .and_then(|w| w.client_config.ca_bundle)
            .is_some_and(|b| !b.0.is_empty()),
        _ => false,
    }
}

/// Deletes a namespace and waits (one GET a second) until it is gone, at most `timeout`.
pub async fn delete_namespace(client: &Client, name: &str, timeout: Duration) -> Result<Duration> {
    let api = Api::<Namespace>::all(client.clone());
    let start = Instant::now();
    let dp = DeleteParams::background();
    match retry(&format!("delete namespace {name}"), || api.delete(name, &dp)).await {
        Ok(_) => {}
        Err(e) if e.to_string().contains("(404)") => return Ok(start.elapsed()),
        Err(e) => return Err(e),
    }
    while start.elapsed() < timeout {
        match tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(name)).await {
            Ok(Ok(None)) => return Ok(start.elapsed()),
            Ok(_) | Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    Err(format!("namespace {name} still exists after {timeout:?}").into())
}

// ------------------------------------------------------------------------------ Deployment watch --

/// One Deployment reached the name it was expected to reach.
#[derive(Clone, Debug)]
pub struct Arrival {
    pub deployment: String,
    /// From the change's PATCH response (or the given start) to the watch event.
    pub latency: Duration,
    pub at: Instant,
}

#[derive(Default)]
struct TrackState {
    /// What each opted-in Deployment names now, and since when.
    current: HashMap<String, (String, Instant)>,
    /// What a Deployment is expected to name, counted from when.
    pending: HashMap<String, (String, Instant)>,
    arrivals: Vec<Arrival>,
    /// Deployments whose latest generation kube-controller-manager has not observed yet.
    unobserved: HashSet<String>,
    /// The last event of any tracked Deployment (an operator patch or a controller-manager status write).
    last_event: Option<Instant>,
    synced: bool,
    /// LIST requests the watch sent (one per (re)list: it lists in one page).
    lists: u64,
}

/// Watches the opted-in Deployments of a namespace (label-selected, so unrelated ones cost nothing)
/// and times when each one names the revision it is expected to name.
pub struct Tracker {
    state: Arc<Mutex<TrackState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    pub fn start(client: &Client, namespace: &str) -> Self {
        let api = Api::<Deployment>::namespaced(client.clone(), namespace);
        let state = Arc::new(Mutex::new(TrackState::default()));
        let shared = state.clone();
        let mut config = watcher::Config::default().labels(&enabled_label());
        // One LIST per (re)list, so that the bench knows how many of the API server's LISTs are its own.
        config.page_size = None;
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let now = Instant::now();
                let mut s = shared.lock().expect("tracker lock");
                match event {
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                        let Some(name) = d.metadata.name.as_deref() else {
                            continue;
                        };
                        let observed = d.status.as_ref().and_then(|st| st.observed_generation);
                        if d.metadata
                            .generation
                            .is_some_and(|g| observed.is_none_or(|o| o < g))
                        {
                            s.unobserved.insert(name.to_string());
                        } else {
                            s.unobserved.remove(name);
                        }
                        s.last_event = Some(now);
                        if let Some(reads) = env_from_name(&d) {
                            s.observe(name, reads, now);
                        }
                    }
                    Ok(watcher::Event::InitDone) => s.synced = true,
                    Ok(watcher::Event::Delete(d)) => {
                        if let Some(name) = d.metadata.name.as_deref() {
                            s.current.remove(name);
                            s.unobserved.remove(name);
                        }
                    }
                    // The backoff retries a failed watch; the waits bound how long that may take.
                    Ok(watcher::Event::Init) => s.lists += 1,
                    Err(_) => {}
                }
            }
        });
        Self { state, task }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackState> {
        self.state.lock().expect("tracker lock")
    }

    /// Waits until the initial list is in, at most `timeout`.
    pub async fn synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.lock().synced {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Expects `deployment` to come to name `name`, timed from `since`.
    pub fn expect(&self, deployment: &str, name: &str, since: Instant) {
        let mut s = self.lock();
        match s.current.get(deployment) {
            // Already there (the watch event beat the PATCH response, or nothing had to change).
            Some((now, at)) if now == name => {
                let at = *at;
                s.arrivals.push(Arrival {
                    deployment: deployment.to_string(),
                    latency: at.saturating_duration_since(since),
                    at: at.max(since),
                });
            }
            _ => {
                s.pending
                    .insert(deployment.to_string(), (name.to_string(), since));
            }
        }
    }

    /// LIST requests this watch has sent so far.
    pub fn lists(&self) -> u64 {
        self.lock().lists
    }

    /// What `deployment` names now, as far as the watch has seen.
    pub fn current(&self, deployment: &str) -> Option<String> {
        self.lock().current.get(deployment).map(|(n, _)| n.clone())
    }

    /// When the latest arrival so far happened (none taken yet counts).
    pub fn last_arrival_after(&self, t: Instant) -> Option<Instant> {
        self.lock()
            .arrivals
            .iter()
            .map(|a| a.at)
            .filter(|at| *at > t)
            .min()
    }

    pub fn is_pending(&self, deployment: &str) -> bool {
        self.lock().pending.contains_key(deployment)
    }

    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    /// Deployments kube-controller-manager has not caught up with, and how long since any tracked
    /// Deployment changed: together, whether the rollouts the changes caused are done.
    pub fn rollouts(&self) -> (usize, Duration) {
        let s = self.lock();
        let quiet = s.last_event.map_or(Duration::MAX, |t| t.elapsed());
        (s.unobserved.len(), quiet)
    }

    /// Takes the arrivals recorded so far.
    pub fn take_arrivals(&self) -> Vec<Arrival> {
        std::mem::take(&mut self.lock().arrivals)
    }

    /// Waits until `deployment` names what it is expected to, at most until `deadline`; false (and the
    /// expectation given up) when it did not in time.
    pub async fn wait_for(&self, deployment: &str, deadline: Instant) -> bool {
        loop {
            if !self.is_pending(deployment) {
                return true;
            }
            if Instant::now() >= deadline {
                return self.lock().pending.remove(deployment).is_none();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits until nothing is pending, at most until `deadline`; what is still pending then is given up
    /// (returned, and forgotten) as timed out.
    pub async fn drain(&self, deadline: Instant) -> Vec<(String, String, String)> {
        loop {
            if self.pending() == 0 {
                return vec![];
            }
            if Instant::now() >= deadline {
                let mut s = self.lock();
                let pending = std::mem::take(&mut s.pending);
                let mut late: Vec<_> = pending
                    .into_iter()
                    .map(|(d, (want, _))| {
                        let now = s.current.get(&d).map(|(n, _)| n.clone()).unwrap_or_default();
                        (d, want, now)
                    })
                    .collect();
                late.sort();
                return late;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl TrackState {
    fn observe(&mut self, deployment: &str, reads: &str, now: Instant) {
        let changed = self.current.get(deployment).is_none_or(|(n, _)| n != reads);
        if changed {
            self.current
                .insert(deployment.to_string(), (reads.to_string(), now));
        }
        if self
            .pending
            .get(deployment)
            .is_some_and(|(want, _)| want == reads)
        {
            let (_, since) = self.pending.remove(deployment).expect("pending entry");
            self.arrivals.push(Arrival {
                deployment: deployment.to_string(),
                latency: now.saturating_duration_since(since),
                at: now,
            });
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ----------------------------------------------------------------------- API server request counts --

/// `apiserver_request_total` summed over codes and content types, by `(verb, resource)`, where a
/// resource is written like kubectl does (`deployments.apps`, `configmapsets.cmset.dev/status`).
pub type RequestCounts = BTreeMap<(String, String), f64>;

/// Scrapes the API server's `/metrics` (needs the admin's `get` on the non-resource URL).
pub async fn apiserver_requests(client: &Client) -> Result<RequestCounts> {
    Ok(parse_request_counts(&apiserver_metrics(client).await?))
}

/// The API server's `/metrics` exposition.
pub async fn apiserver_metrics(client: &Client) -> Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    retry("GET /metrics", || client.request_text(request.clone())).await
}

pub fn parse_request_counts(body: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        let mut resource = get("resource").to_string();
        if resource.is_empty() {
            continue; // non-resource URLs (/metrics, /healthz, ...)
        }
        if !get("group").is_empty() {
            resource = format!("{resource}.{}", get("group"));
        }
        if !get("subresource").is_empty() {
            resource = format!("{resource}/{}", get("subresource"));
        }
        *counts.entry((get("verb").to_string(), resource)).or_default() += value;
    }
    counts
}

/// Prometheus label pairs `k="v",...`; values may hold escaped quotes and commas.
fn parse_labels(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut chars = s.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() || chars.next() != Some('"') {
            break;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_string(), value);
        if chars.next_if_eq(&',').is_none() {
            break;
        }
    }
    out
}

pub fn delta(after: &RequestCounts, before: &RequestCounts) -> RequestCounts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Who sends a request, judged by what it is: there is no client label in these counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// cmset: revisions, guarded workload patches, set status, events.k8s.io events.
    Operator,
    /// kube-controller-manager: ReplicaSets, Deployment status and revision annotations, core events.
    ControllerManager,
    /// The bench's own set patches (subtracted), and anything else (leases, other tenants).
    Other,
    /// GET, LIST, WATCH.
    Read,
}

pub fn writer(verb: &str, resource: &str) -> Writer {
    let write = matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION"
    );
    if !write {
        return Writer::Read;
    }
    let patch = matches!(verb, "PATCH" | "APPLY");
    match resource {
        "configmaps" | "configmapsets.cmset.dev/status" | "events.events.k8s.io" => Writer::Operator,
        "deployments.apps" | "statefulsets.apps" | "daemonsets.apps" if patch => Writer::Operator,
        "deployments.apps"
        | "deployments.apps/status"
        | "replicasets.apps"
        | "replicasets.apps/status"
        | "controllerrevisions.apps"
        | "events" => Writer::ControllerManager,
        _ => Writer::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revision_names_are_kustomize_names() {
        // From cmset-core's vectors, printed by `kubectl kustomize` for
        // `{name: nginx-config, literals: [APP_VERSION=1]}`.
        assert_eq!(content_hash(&[("APP_VERSION", "1")].into()), "d2c65kk9hm");
        assert_eq!(revision_name("s-00001", "0").len(), "s-00001-".len() + 10);
    }

    #[test]
    fn counts_by_verb_and_resource() {
        let body = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 4
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",contentType="application/json;as=Table,x",dry_run="",group="cmset.dev",resource="configmapsets",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="",contentType="text/plain",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 9
"#;
        let counts = parse_request_counts(body);
        assert_eq!(counts[&("POST".into(), "configmaps".into())], 5.0);
        assert_eq!(
            counts[&("PATCH".into(), "configmapsets.cmset.dev/status".into())],
            2.0
        );
        assert_eq!(counts.len(), 2);
        assert_eq!(writer("PATCH", "deployments.apps"), Writer::Operator);
        assert_eq!(writer("PUT", "deployments.apps"), Writer::ControllerManager);
        assert_eq!(writer("POST", "events"), Writer::ControllerManager);
        assert_eq!(writer("LIST", "configmaps"), Writer::Read);
    }
}
