//! The workload kinds one scope serves, as the API server offers them.
//!
//! Every kind of the table (`cmset_core::workloads::kinds`) is looked up in discovery: the built-in `apps/v1`
//! kinds and `batch/v1` Jobs are always there; a CronJob is served at `batch/v1` or, on servers older
//! than 1.21, `batch/v1beta1`; an Argo Rollout or a declared kind only once its CRD is installed. Every
//! [`DISCOVERY`](Settings) interval the kinds are looked up again: a kind that appeared starts its watch
//! (and, on the leader, its controller) without a restart; a kind the server answers it no longer
//! serves (its CRD was removed) stops, and what its objects named leaves the index. A kind that is
//! not installed never holds anything up: readiness waits only for the kinds found in the first
//! round, and only those whose watch could start.
//!
//! A refusal is not a removal. When the list or watch of a kind discovery still serves is refused
//! (403: a Role revoked or replaced for a while; 404) or its list fails, the kind keeps being served:
//! what it last listed stays in its store and the index (budget slots included), the index marks it
//! unavailable so that the sets it may read plan nothing and say why, and the watch retries with
//! backoff (0.8 s doubling to 5 s), from a full list. That list replaces the store and ends the mark.
//! Each change of state is logged once, not every retry; the next discovery round comes at once, and
//! only discovery answering that the kind is gone removes it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use cmset_core::workloads::kinds::Kinds;
use cmset_core::workloads::observe::WorkloadKind;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures::future::{AbortHandle, Abortable, join_all};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt, future::BoxFuture};
use kube::api::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, discovery};
use tracing::{debug, info, warn};

use crate::engine::index::workloads;
use crate::engine::index::{Index, TriggerSenders, WorkloadQueue};
use crate::engine::stored_workload::StoredWorkload;
use crate::engine::stores::WorkloadStore;
use crate::engine::wire::WireWorkload;

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

/// Why the watch of a served kind cannot list or watch it now.
#[derive(Debug, PartialEq)]
struct Unavailable {
    why: String,
    /// The watch must start over from a full list: it was refused a watch, so it cannot know what
    /// it missed meanwhile, nor tell when it is back (a resumed watch says nothing until an object
    /// changes). A failed list is listed again by the watcher itself.
    relist: bool,
}

/// What `error` says of the watch of a served kind: unavailable when the API server refused its list
/// or watch (403: cmset lacks RBAC for it, for now or for good, as for a declared kind whose rule was
/// not added; 404: its CRD may have just been removed), or its list failed. `None` for a watch cut or a
/// failed watch start the watcher resumes from where it was.
fn unavailability(error: &watcher::Error) -> Option<Unavailable> {
    let refused = |status: &kube::core::Status| match status.code {
        403 => Some("403 Forbidden: cmset's service account may not list or watch it".to_string()),
        404 => Some("404 Not Found".to_string()),
        _ => None,
    };
    match error {
        watcher::Error::InitialListFailed(e) => {
            let refusal = match e {
                kube::Error::Api(status) => refused(status),
                _ => None,
            };
            let why = refusal
                .unwrap_or_else(|| format!("its list failed: {}", crate::platform::redact::api_error(e)));
            Some(Unavailable { why, relist: false })
        }
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) => {
            refused(status).map(|why| Unavailable { why, relist: true })
        }
        watcher::Error::WatchError(status) => refused(status).map(|why| Unavailable { why, relist: true }),
        _ => None,
    }
}

/// The watcher `start` makes, as the workload watches need it:
/// - started over, from a full list, after each error that needs it (see [`Unavailable::relist`]); the
///   error is passed on first;
/// - its `Init` passed on only once the list it begins has answered: kube's backoff takes any event for
///   progress, so a list refused every time would be retried at the backoff's first step forever. A
///   list that fails never began, and its `Init` is dropped.
fn workload_events<S, K>(start: impl Fn() -> S + Send + 'static) -> impl Stream<Item = S::Item> + Send
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    futures::stream::unfold(
        (start().boxed(), start, None),
        |(mut stream, start, ahead)| async move {
            let item = match ahead {
                Some(item) => item,
                None => stream.next().await?,
            };
            let (item, ahead) = match item {
                Ok(watcher::Event::Init) => match stream.next().await? {
                    Err(e) => (Err(e), None),
                    next => (Ok(watcher::Event::Init), Some(next)),
                },
                item => (item, None),
            };
            let relist = matches!(&item, Err(e) if unavailability(e).is_some_and(|u| u.relist));
            let stream = if relist { start().boxed() } else { stream };
            Some((item, (stream, start, ahead)))
        },
    )
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
                debug!(%kind, version, error = %crate::platform::redact::api_error(&e), "discovery failed");
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
    let (unavailable, mut unavailables) = unbounded();
    let mut supervisor = Supervisor {
        client,
        namespace,
        index,
        senders,
        stores,
        served,
        running: HashMap::new(),
        unavailable,
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
                    // A kind that just became unavailable may be gone (its CRD removed): ask now.
                    Some(kind) = unavailables.next() => {
                        debug!(%kind, "asking discovery whether the unavailable kind is still served");
                        break;
                    }
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
    /// Where a watch says its kind just became unavailable (see [`unavailability`]).
    unavailable: UnboundedSender<WorkloadKind>,
}

/// One kind's watch, running as a task; it ends when aborted (see `Supervisor::stop`).
type Watch = crate::engine::tasks::Owned<Result<(), futures::future::Aborted>>;
type Watches = FuturesUnordered<Watch>;

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

    fn start(&mut self, kind: WorkloadKind, resource: ApiResource) -> Watch {
        let (serving, watch) = start(
            &self.client,
            self.namespace.as_deref(),
            kind,
            resource,
            &self.index,
            self.unavailable.clone(),
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
        // A task of its own, so that kinds decode their events on any worker (see `crate::engine::tasks`).
        crate::engine::tasks::spawn_owned(Abortable::new(watch, registration))
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
    unavailable: UnboundedSender<WorkloadKind>,
) -> (Arc<ServedKind>, BoxFuture<'static, ()>) {
    // Decoded by the wire type: no managedFields, one pass over the bytes.
    let api: Api<WireWorkload> = match namespace {
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
    let mut listed = crate::engine::runtime::ListedWhileFollowing::default();
    let config = watcher::Config::default()
        .labels(&workloads::selector())
        .page_size(WORKLOAD_LIST_PAGE);
    // Whether the index holds the kind unavailable (the watch's own view, for logging each change once).
    let mut unobserved = false;
    let events = workload_events(move || watcher(api.clone(), config.clone()));
    let watch = crate::engine::runtime::relist_at_once_on_expiry(kind.as_str(), events)
        .backoff(crate::engine::runtime::watch_backoff())
        .map_ok(move |event| StoredWorkload::event(kind, event))
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    let triggered = index.handle_workload(kind, &event);
                    if matches!(event, watcher::Event::InitDone) && std::mem::take(&mut unobserved) {
                        info!(%kind, "workload kind listed again; the sets it may read plan from its fresh list");
                    }
                    let leading = index.is_leading();
                    // A change is queued when the index says it can alter the workload's plan: not a
                    // status step of its rollout, nor the echo of cmset's own patch.
                    let queue = match &event {
                        watcher::Event::Apply(obj) => triggered.own.then_some(obj),
                        watcher::Event::InitApply(obj) => Some(obj),
                        _ => None,
                    };
                    if let Some(obj) = queue
                        && leading
                    {
                        let _ = sender.unbounded_send(ObjectRef::from_obj_with(obj, resource.clone()));
                    }
                    if listed.queue_all_now(&event, leading) {
                        queue_stored(&stored, &sender, &resource);
                    }
                }
                Err(e) => match unavailability(&e) {
                    Some(Unavailable { why, .. }) => {
                        if index.unavailable(kind, why.clone()).is_some() {
                            warn!(
                                %kind,
                                %why,
                                "cannot list or watch this workload kind; keeping what it last listed, and the \
                                 sets it may read hold until it lists again (retrying with backoff)"
                            );
                            if !std::mem::replace(&mut unobserved, true) {
                                let _ = unavailable.unbounded_send(kind);
                            }
                        } else {
                            debug!(%kind, %why, "still cannot list or watch this workload kind");
                        }
                    }
                    None => crate::engine::runtime::log_watch_error(kind.as_str(), &e),
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

    // --------------------------------------------------------------- a refused list or watch --

    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::engine::index::{Key, SetId, trigger_channels};
    use cmset_core::set::SetKind;

    const NS: &str = "team";
    const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/team/deployments";

    /// How the mocked API server answers one request.
    enum Answer {
        Json(u16, serde_json::Value),
        /// A watch that sends these events and ends.
        Events(Vec<serde_json::Value>),
        /// A watch that stays open with nothing to tell.
        Never,
    }

    /// The Deployments' requests, with the code each was answered, and when each came.
    #[derive(Default)]
    struct Asked {
        requests: Vec<(String, u16)>,
        at: Vec<tokio::time::Instant>,
    }

    /// A request to the Deployments' collection, as a scenario states it: `list`, or `watch from <rv>`.
    fn deployment_request(query: &str) -> String {
        let param = |name: &str| {
            query
                .split('&')
                .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_string)
        };
        match param("watch") {
            Some(_) => format!("watch from {}", param("resourceVersion").unwrap_or_default()),
            None => "list".to_string(),
        }
    }

    /// A client of an API server that serves the built-in kinds of 1.20 (no CronJobs at batch/v1,
    /// no Argo Rollouts): every other kind lists empty and watches quietly, and the Deployments'
    /// collection is answered by `deployments` (given how many requests it had before). Also the
    /// Deployments' requests, with the code each was answered.
    fn api_server(
        deployments: impl Fn(&str, usize) -> Answer + Send + 'static,
    ) -> (Client, Arc<Mutex<Asked>>) {
        use http_body_util::BodyExt;
        type Body = kube::client::Body;
        let (service, mut handle) = tower_test::mock::pair::<http::Request<Body>, http::Response<Body>>();
        let asked = Arc::new(Mutex::new(Asked::default()));
        let record = asked.clone();
        tokio::spawn(async move {
            let mut open_watches = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let path = request.uri().path().to_string();
                let query = request.uri().query().unwrap_or_default().to_string();
                let _ = request.into_body().collect().await;
                let answer = if path == DEPLOYMENTS {
                    let n = record.lock().unwrap().requests.len();
                    let answer = deployments(&query, n);
                    let code = match &answer {
                        Answer::Json(code, _) => *code,
                        Answer::Events(_) | Answer::Never => 200,
                    };
                    let mut record = record.lock().unwrap();
                    record.requests.push((deployment_request(&query), code));
                    record.at.push(tokio::time::Instant::now());
                    answer
                } else if path.starts_with("/apis/apps/v1/namespaces/team/")
                    || path == "/apis/batch/v1/namespaces/team/jobs"
                {
                    if query.contains("watch=true") {
                        Answer::Never
                    } else {
                        Answer::Json(200, list(&[], "1"))
                    }
                } else {
                    // Discovery of CronJobs and Rollouts: not served.
                    let (code, body) = failure(404);
                    Answer::Json(code, body)
                };
                let (code, body) = match answer {
                    Answer::Json(code, body) => (code, serde_json::to_vec(&body).unwrap()),
                    Answer::Events(events) => {
                        let lines: Vec<String> = events.iter().map(|e| e.to_string() + "\n").collect();
                        (200, lines.concat().into_bytes())
                    }
                    Answer::Never => {
                        open_watches.push(send);
                        continue;
                    }
                };
                send.send_response(
                    http::Response::builder()
                        .status(code)
                        .body(Body::from(body))
                        .unwrap(),
                );
            }
        });
        (Client::new(service, NS), asked)
    }

    /// An opted-in Deployment reading ConfigMap `reads`.
    fn deployment(name: &str, reads: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "uid": format!("u-{name}"), "resourceVersion": "5",
                         "generation": 1, "labels": {"cmset.dev/enabled": "true"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "app", "envFrom": [{"configMapRef": {"name": reads}}]}]}}}
        })
    }

    fn list(items: &[serde_json::Value], resource_version: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": resource_version},
                           "items": items})
    }

    fn cms(name: &str) -> SetId {
        (SetKind::ConfigMapSet, Key::new(NS, name))
    }

    /// What one scenario runs: the scope's workload kinds served from `client`.
    struct Scope {
        index: Arc<Index>,
        served: tokio::sync::watch::Receiver<Served>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Scope {
        fn serve(client: Client) -> Self {
            let (senders, _receivers) = trigger_channels();
            let index = Arc::new(Index::new(Some(senders.clone())));
            let (served_tx, served) = tokio::sync::watch::channel(Served::new());
            let settings = Settings {
                kinds: Kinds::built_in(),
                discovery: Duration::from_secs(600),
            };
            let stores = Arc::new(RwLock::new(HashMap::new()));
            let task = tokio::spawn(serve(
                client,
                Some(NS.to_string()),
                settings,
                index.clone(),
                senders,
                stores,
                served_tx,
            ));
            Self { index, served, task }
        }

        /// The names the Deployments' store holds.
        fn stored(&self) -> Vec<String> {
            let served = self.served.borrow();
            let deployments = served
                .get(&WorkloadKind::Deployment)
                .expect("Deployments are served");
            let mut names: Vec<String> = deployments
                .store
                .state()
                .iter()
                .filter_map(|d| d.metadata.name.clone())
                .collect();
            names.sort();
            names
        }

        fn readers(&self, set: &str) -> Vec<String> {
            let readers = self.index.readers(&cms(set)).workloads;
            readers.into_iter().map(|(_, name)| name).collect()
        }

        async fn until(&self, what: &str, holds: impl Fn(&Self) -> bool) {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !holds(self) {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for: {what}"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    impl Drop for Scope {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    fn forbidden() -> Vec<(String, String)> {
        vec![(
            "Deployment".to_string(),
            "403 Forbidden: cmset's service account may not list or watch it".to_string(),
        )]
    }

    /// The refused lists, and the time between each and the next.
    fn refused_lists(asked: &Mutex<Asked>) -> Vec<Duration> {
        let asked = asked.lock().unwrap();
        let at: Vec<_> = asked
            .requests
            .iter()
            .zip(&asked.at)
            .filter(|((request, code), _)| request == "list" && *code == 403)
            .map(|(_, at)| *at)
            .collect();
        at.windows(2).map(|w| w[1] - w[0]).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_list_keeps_the_kind_and_what_it_listed_until_a_list_succeeds_again() {
        let restored = Arc::new(AtomicBool::new(false));
        let rights = restored.clone();
        let (client, asked) = api_server(move |query, n| match (n, deployment_request(query).as_str()) {
            (0, "list") => Answer::Json(200, list(&[deployment("web", "app")], "7")),
            // The watch expires: the watcher lists again, and cmset's right to list was revoked.
            (1, "watch from 7") => Answer::Events(vec![serde_json::json!({"type": "ERROR", "object":
                {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}})]),
            (_, "list") if !rights.load(Ordering::SeqCst) => {
                let (code, body) = failure(403);
                Answer::Json(code, body)
            }
            (_, "list") => Answer::Json(200, list(&[deployment("api", "other")], "9")),
            (_, "watch from 9") => Answer::Never,
            (n, request) => panic!("unexpected request {n}: {request}"),
        });
        let scope = Scope::serve(client);
        scope
            .until("the refusal marks Deployments unavailable", |s| {
                s.index.unobserved_readers(&cms("app")) == forbidden()
            })
            .await;
        assert_eq!(
            scope.stored(),
            ["web"],
            "the store keeps what the kind last listed"
        );
        assert_eq!(scope.readers("app"), ["web"], "and so does the index");
        assert_eq!(
            scope.index.unobserved_readers(&cms("other")),
            vec![],
            "web reads only app"
        );
        assert!(scope.index.is_ready() && scope.index.is_complete());
        // Retried with backoff: 0.8 s doubling (each up to a fifth shorter), whatever events the
        // watcher makes between two refused lists.
        scope
            .until("four refused lists", |_| refused_lists(&asked).len() == 3)
            .await;
        let gaps = refused_lists(&asked);
        assert!(
            gaps[0] >= Duration::from_millis(640)
                && gaps[1] >= Duration::from_millis(1280)
                && gaps[2] >= Duration::from_millis(2560),
            "{gaps:?}"
        );
        assert_eq!(scope.stored(), ["web"]);

        // Restored: the next retry lists, and that list replaces everything.
        restored.store(true, Ordering::SeqCst);
        scope
            .until("the kind lists again", |s| {
                s.index.unobserved_readers(&cms("app")).is_empty()
            })
            .await;
        assert_eq!(scope.stored(), ["api"]);
        assert_eq!(
            (scope.readers("app"), scope.readers("other")),
            (vec![], vec!["api".to_string()])
        );
        scope
            .until("the watch resumes from the fresh list", |_| {
                asked
                    .lock()
                    .unwrap()
                    .requests
                    .last()
                    .is_some_and(|(r, _)| r == "watch from 9")
            })
            .await;

        let asked = asked.lock().unwrap().requests.clone();
        let refused = asked.len() - 4;
        assert!(refused >= 4, "{asked:?}");
        let mut expected = vec![("list".to_string(), 200), ("watch from 7".to_string(), 200)];
        expected.extend(std::iter::repeat_n(("list".to_string(), 403), refused));
        expected.extend([("list".to_string(), 200), ("watch from 9".to_string(), 200)]);
        assert_eq!(
            asked, expected,
            "the refused list is retried with backoff, and the kind is never stopped"
        );
        assert!(scope.served.borrow().contains_key(&WorkloadKind::Deployment));
    }

    #[tokio::test]
    async fn a_refused_watch_starts_over_from_a_full_list() {
        let restored = Arc::new(AtomicBool::new(false));
        let rights = restored.clone();
        let (client, asked) = api_server(move |query, n| match (n, deployment_request(query).as_str()) {
            (0, "list") => Answer::Json(200, list(&[deployment("web", "app")], "7")),
            (_, _) if !rights.load(Ordering::SeqCst) => {
                let (code, body) = failure(403);
                Answer::Json(code, body)
            }
            (_, "list") => Answer::Json(200, list(&[deployment("web", "app")], "8")),
            (_, "watch from 8") => Answer::Never,
            (n, request) => panic!("unexpected request {n}: {request}"),
        });
        let scope = Scope::serve(client);
        scope
            .until("the refused watch marks Deployments unavailable", |s| {
                s.index.unobserved_readers(&cms("app")) == forbidden()
            })
            .await;
        assert_eq!(scope.stored(), ["web"]);
        restored.store(true, Ordering::SeqCst);
        scope
            .until("the kind lists again", |s| {
                s.index.unobserved_readers(&cms("app")).is_empty()
            })
            .await;
        scope
            .until("the watch resumes from the fresh list", |_| {
                asked
                    .lock()
                    .unwrap()
                    .requests
                    .last()
                    .is_some_and(|(r, _)| r == "watch from 8")
            })
            .await;
        let asked = asked.lock().unwrap().requests.clone();
        // A watch resumed from 7 would not say when it is back, nor what it missed: it lists.
        let refused_lists = asked.len() - 4;
        let mut expected = vec![("list".to_string(), 200), ("watch from 7".to_string(), 403)];
        expected.extend(std::iter::repeat_n(("list".to_string(), 403), refused_lists));
        expected.extend([("list".to_string(), 200), ("watch from 8".to_string(), 200)]);
        assert_eq!(asked, expected);
        assert_eq!(scope.stored(), ["web"]);
    }
}
