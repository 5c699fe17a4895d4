//! The workload kinds one scope serves, as the API server offers them.
//!
//! Every kind of the table (`cmset_core::kinds`) is looked up in discovery: the built-in `apps/v1`
//! kinds and `batch/v1` Jobs are always there; a CronJob is served at `batch/v1` or, on servers older
//! than 1.21, `batch/v1beta1`; an Argo Rollout or a declared kind only once its CRD is installed. Every
//! [`DISCOVERY`](Settings) interval the kinds are looked up again: a kind that appeared starts its watch
//! (and, on the leader, its controller) without a restart; a kind the server answers it no longer
//! serves (its CRD was removed) stops, and what its objects named leaves the index. A kind that is
//! not installed never holds anything up: readiness waits only for the kinds found in the first
//! round, and only those whose watch could start.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cmset_core::kinds::Kinds;
use cmset_core::observe::WorkloadKind;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::future::{AbortHandle, Abortable, join_all};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt, TryStreamExt, future::BoxFuture};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, discovery};
use tracing::{debug, info, warn};

use crate::index::workloads;
use crate::index::{Index, TriggerSenders, WorkloadQueue};
use crate::stored_workload::StoredWorkload;
use crate::stores::WorkloadStore;

/// Workloads listed per request. A listed workload arrives as a whole `DynamicObject`, a tree of
/// small allocations several times the size of the slim copy kept, and a page of them is alive at
/// once while the slim copies are allocated in between: glibc cannot give that peak back. With kube's
/// 500, 1,000 Deployments left the arenas 13 MiB larger than what stayed in use; 100 costs 10 list
/// requests per 1,000 workloads, at start-up and on a relist only.
const WORKLOAD_LIST_PAGE: u32 = 100;

/// Queues a reconcile of every workload `store` holds.
fn queue_stored(
    store: &Store<StoredWorkload>,
    queue: &UnboundedSender<ObjectRef<StoredWorkload>>,
    resource: &ApiResource,
) {
    for obj in store.state() {
        let _ = queue.unbounded_send(ObjectRef::from_obj_with(obj.as_ref(), resource.clone()));
    }
}

/// A workload kind being served: its resource, its store and its controller's queue.
pub struct ServedKind {
    pub kind: WorkloadKind,
    pub resource: ApiResource,
    pub store: Store<StoredWorkload>,
    receiver: Mutex<Option<UnboundedReceiver<ObjectRef<StoredWorkload>>>>,
    sender: UnboundedSender<ObjectRef<StoredWorkload>>,
    stopped: tokio::sync::watch::Sender<bool>,
}

impl ServedKind {
    /// The receiving end of its controller's queue: taken once, by the controller of a leader.
    pub fn take_queue(&self) -> Option<UnboundedReceiver<ObjectRef<StoredWorkload>>> {
        self.receiver.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Queues a reconcile of every object its store holds (a new leader, or a controller started
    /// late).
    pub fn queue_all(&self) {
        queue_stored(&self.store, &self.sender, &self.resource);
    }

    /// Resolves once the kind is no longer served.
    pub fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopped = self.stopped.subscribe();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    }
}

/// The kinds served now, by kind. Each change replaces the map.
pub type Served = BTreeMap<WorkloadKind, Arc<ServedKind>>;

/// What discovery says of a kind.
#[derive(Debug, PartialEq)]
enum Found {
    Served(ApiResource),
    /// The server answered that it serves none of the kind's versions.
    Absent,
    /// Discovery failed: keep whatever was decided before.
    Unknown,
}

/// Kinds every supported server serves at their one version: no need to ask.
fn always_served(kind: WorkloadKind) -> Option<ApiResource> {
    let spec = kind.spec();
    let stable = matches!(
        (spec.group, spec.versions, spec.declared),
        ("apps", ["v1"], false)
    ) || kind == WorkloadKind::Job;
    stable.then(|| {
        let gvk = GroupVersionKind::gvk(spec.group, spec.versions[0], spec.kind);
        ApiResource::from_gvk_with_plural(&gvk, spec.plural.unwrap_or_default())
    })
}

/// Whether an error of discovery says the group, version or kind does not exist.
fn is_absent(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 404,
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// The API server's refusal of a kind's list: forbidden (cmset lacks RBAC for it, as for a declared
/// kind whose rule was not added) or not found (its CRD was just removed). Its code, if so.
fn refusal(error: &watcher::Error) -> Option<u16> {
    let code = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => status.code,
        watcher::Error::WatchError(status) => status.code,
        _ => return None,
    };
    matches!(code, 403 | 404).then_some(code)
}

async fn find(client: &Client, kind: WorkloadKind) -> Found {
    if let Some(resource) = always_served(kind) {
        return Found::Served(resource);
    }
    let spec = kind.spec();
    let mut answered = true;
    for version in spec.versions {
        let gvk = GroupVersionKind::gvk(spec.group, version, spec.kind);
        match discovery::pinned_kind(client, &gvk).await {
            Ok((resource, _)) => return Found::Served(resource),
            Err(e) if is_absent(&e) => {}
            Err(e) => {
                debug!(%kind, version, error = %crate::redact::api_error(&e), "discovery failed");
                answered = false;
            }
        }
    }
    if answered { Found::Absent } else { Found::Unknown }
}

/// How the scope's workload kinds are served.
pub struct Settings {
    pub kinds: Kinds,
    /// How often discovery is asked again.
    pub discovery: Duration,
}

/// Serves the workload kinds of one scope for as long as the returned future runs: finds them, runs
/// a watch per served kind (filling its store and the index), and publishes the kinds served now on
/// `served`.
pub fn serve(
    client: Client,
    namespace: Option<String>,
    settings: Settings,
    index: Arc<Index>,
    senders: TriggerSenders,
    stores: Arc<RwLock<HashMap<WorkloadKind, WorkloadStore>>>,
    served: tokio::sync::watch::Sender<Served>,
) -> BoxFuture<'static, ()> {
    let (refused, mut refusals) = unbounded();
    let mut supervisor = Supervisor {
        client,
        namespace,
        index,
        senders,
        stores,
        served,
        running: HashMap::new(),
        refused,
        told: HashMap::new(),
    };
    async move {
        let mut watches = FuturesUnordered::new();
        let mut settled = false;
        loop {
            let answered_all = supervisor.round(&settings.kinds, &mut watches).await;
            if !settled && answered_all {
                // Readiness waits for the kinds found now, never for one installed later.
                supervisor.index.settle();
                settled = true;
            }
            let wait = if settled {
                settings.discovery
            } else {
                Duration::from_secs(2)
            };
            let sleep = tokio::time::sleep(wait);
            tokio::pin!(sleep);
            loop {
                tokio::select! {
                    () = &mut sleep => break,
                    Some(_) = watches.next() => {}
                    Some((kind, code)) = refusals.next() => supervisor.refused(kind, code),
                }
            }
        }
    }
    .boxed()
}

/// The kinds running now, and what starting and stopping one touches.
struct Supervisor {
    client: Client,
    namespace: Option<String>,
    index: Arc<Index>,
    senders: TriggerSenders,
    stores: Arc<RwLock<HashMap<WorkloadKind, WorkloadStore>>>,
    served: tokio::sync::watch::Sender<Served>,
    running: HashMap<WorkloadKind, AbortHandle>,
    /// Where a watch says the API server refused its list.
    refused: UnboundedSender<(WorkloadKind, u16)>,
    /// The refusals logged, so that one repeated every round is logged once.
    told: HashMap<WorkloadKind, u16>,
}

type Watches = FuturesUnordered<Abortable<BoxFuture<'static, ()>>>;

impl Supervisor {
    /// Asks discovery about every kind and starts or stops each as it says. Whether every kind got an
    /// answer.
    async fn round(&mut self, kinds: &Kinds, watches: &mut Watches) -> bool {
        let mut answered_all = true;
        // Asked all at once: readiness waits for the whole round, and each answer is a round trip.
        let found = join_all(kinds.iter().map(|kind| find(&self.client, kind))).await;
        for (kind, found) in kinds.iter().zip(found) {
            let current = self.served.borrow().get(&kind).map(|s| s.resource.clone());
            match found {
                Found::Served(resource) if current.as_ref() == Some(&resource) => {}
                Found::Served(resource) => {
                    if current.is_some() {
                        // Another version now (a server upgraded past batch/v1beta1): the new
                        // watch's list replaces what the index holds of the kind, so nothing is
                        // dropped in between for a set to prune.
                        self.stop(kind);
                    }
                    info!(%kind, api_version = %resource.api_version, "serving workload kind");
                    watches.push(self.start(kind, resource));
                }
                Found::Absent if current.is_some() => {
                    info!(%kind, "workload kind no longer served; stopping it");
                    self.retire(kind);
                }
                Found::Absent => {}
                Found::Unknown => answered_all = false,
            }
        }
        answered_all
    }

    /// A kind cmset cannot list would keep every set from planning (nothing in scope may be missing):
    /// it is not served until discovery next finds it.
    fn refused(&mut self, kind: WorkloadKind, code: u16) {
        if !self.running.contains_key(&kind) {
            return;
        }
        if self.told.insert(kind, code) != Some(code) {
            warn!(
                %kind,
                code,
                "the API server refused to list this workload kind (403: cmset lacks list, watch and \
                 patch on it; 404: it was just removed); not serving it, trying again at the next discovery"
            );
        }
        self.retire(kind);
    }

    fn start(&mut self, kind: WorkloadKind, resource: ApiResource) -> Abortable<BoxFuture<'static, ()>> {
        let (serving, watch) = start(
            &self.client,
            self.namespace.as_deref(),
            kind,
            resource,
            &self.index,
            self.refused.clone(),
        );
        let (handle, registration) = AbortHandle::new_pair();
        self.running.insert(kind, handle);
        self.stores.write().unwrap_or_else(|e| e.into_inner()).insert(
            kind,
            WorkloadStore {
                resource: serving.resource.clone(),
                store: serving.store.clone(),
            },
        );
        let queue = WorkloadQueue {
            resource: serving.resource.clone(),
            sender: serving.sender.clone(),
        };
        self.senders
            .workloads
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind, queue);
        self.served.send_modify(|s| {
            s.insert(kind, serving);
        });
        Abortable::new(watch, registration)
    }

    /// Stops the watch and the controller of `kind`; the index keeps what it holds of the kind.
    fn stop(&mut self, kind: WorkloadKind) {
        if let Some(handle) = self.running.remove(&kind) {
            handle.abort();
        }
        self.senders
            .workloads
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&kind);
        self.stores
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&kind);
        let mut gone = None;
        self.served.send_modify(|s| gone = s.remove(&kind));
        if let Some(gone) = gone {
            gone.stopped.send_replace(true);
        }
    }

    /// Stops `kind` and drops what its objects named: it is gone.
    fn retire(&mut self, kind: WorkloadKind) {
        self.stop(kind);
        self.index.forget_workloads(kind);
    }
}

/// The watch of one served kind: fills its store and the index; while this replica leads, each
/// object applied is also queued for its controller (see `runtime::stored_watch`).
fn start(
    client: &Client,
    namespace: Option<&str>,
    kind: WorkloadKind,
    resource: ApiResource,
    index: &Arc<Index>,
    refused: UnboundedSender<(WorkloadKind, u16)>,
) -> (Arc<ServedKind>, BoxFuture<'static, ()>) {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    let (sender, receiver) = unbounded();
    let serving = Arc::new(ServedKind {
        kind,
        resource: resource.clone(),
        store: reader,
        receiver: Mutex::new(Some(receiver)),
        sender: sender.clone(),
        stopped: tokio::sync::watch::Sender::new(false),
    });
    index.expect(kind.as_str());
    let index = index.clone();
    let stored = serving.store.clone();
    let mut listed = crate::runtime::ListedWhileFollowing::default();
    let config = watcher::Config::default()
        .labels(&workloads::selector())
        .page_size(WORKLOAD_LIST_PAGE);
    let watch = crate::runtime::relist_at_once_on_expiry(kind.as_str(), watcher(api, config))
        .backoff(crate::runtime::watch_backoff())
        .map_ok(move |event| StoredWorkload::event(kind, event))
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    index.handle_workload(kind, &event);
                    let leading = index.is_leading();
                    if let watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) = &event
                        && leading
                    {
                        let _ = sender.unbounded_send(ObjectRef::from_obj_with(obj, resource.clone()));
                    }
                    if listed.queue_all_now(&event, leading) {
                        queue_stored(&stored, &sender, &resource);
                    }
                }
                Err(e) => match refusal(&e) {
                    Some(code) => {
                        let _ = refused.unbounded_send((kind, code));
                    }
                    None => crate::runtime::log_watch_error(kind.as_str(), &e),
                },
            }
            futures::future::ready(())
        })
        .boxed();
    (serving, watch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_stable_built_in_kinds_skip_discovery() {
        for kind in [
            WorkloadKind::Deployment,
            WorkloadKind::StatefulSet,
            WorkloadKind::DaemonSet,
            WorkloadKind::Job,
        ] {
            let resource = always_served(kind).expect("always served");
            assert_eq!(resource.kind, kind.as_str());
            assert_eq!(Some(resource.plural.as_str()), kind.spec().plural);
        }
        assert_eq!(always_served(WorkloadKind::Job).unwrap().api_version, "batch/v1");
        assert!(
            always_served(WorkloadKind::CronJob).is_none(),
            "its version depends on the server"
        );
        assert!(
            always_served(WorkloadKind::Rollout).is_none(),
            "only once its CRD is installed"
        );
    }

    /// A client whose requests `answer` answers by path, and the paths it was asked.
    fn discovery_server(answer: fn(&str) -> (u16, serde_json::Value)) -> (Client, Arc<Mutex<Vec<String>>>) {
        use http_body_util::BodyExt;
        type Body = kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let record = asked.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_string();
                let _ = request.into_body().collect().await;
                let (code, body) = answer(&path);
                record.lock().unwrap().push(path);
                send.send_response(
                    http::Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
        });
        (Client::new(service, "default"), asked)
    }

    fn resources(group_version: &str, kinds: &[(&str, &str)]) -> serde_json::Value {
        let resources: Vec<_> = kinds
            .iter()
            .map(|(kind, plural)| {
                serde_json::json!({"name": plural, "singularName": "", "namespaced": true, "kind": kind,
                                   "verbs": ["list", "watch", "patch"]})
            })
            .collect();
        serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                           "resources": resources})
    }

    fn failure(code: u16) -> (u16, serde_json::Value) {
        let status =
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code});
        (code, status)
    }

    #[tokio::test]
    async fn discovery_finds_the_version_the_server_serves_and_tells_absent_from_unknown() {
        // Kubernetes 1.20: batch/v1 has Jobs but no CronJobs; no Argo Rollouts installed.
        let (client, asked) = discovery_server(|path| match path {
            "/apis/batch/v1" => (200, resources("batch/v1", &[("Job", "jobs")])),
            "/apis/batch/v1beta1" => (200, resources("batch/v1beta1", &[("CronJob", "cronjobs")])),
            _ => failure(404),
        });
        let Found::Served(cron) = find(&client, WorkloadKind::CronJob).await else {
            panic!("CronJobs are served at batch/v1beta1")
        };
        assert_eq!(
            (cron.api_version.as_str(), cron.plural.as_str()),
            ("batch/v1beta1", "cronjobs")
        );
        assert_eq!(find(&client, WorkloadKind::Rollout).await, Found::Absent);
        assert!(matches!(
            find(&client, WorkloadKind::Deployment).await,
            Found::Served(_)
        ));
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "/apis/batch/v1",
                "/apis/batch/v1beta1",
                "/apis/argoproj.io/v1alpha1"
            ],
            "the stable kinds cost no request"
        );

        // A server that fails to answer: nothing is decided about the kind.
        let (client, _) = discovery_server(|_| failure(500));
        assert_eq!(find(&client, WorkloadKind::Rollout).await, Found::Unknown);
    }
}
