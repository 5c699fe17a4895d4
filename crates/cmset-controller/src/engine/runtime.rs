//! Wires the watches and the index of one scope (one namespace, or all of them), and hands a leader
//! what it runs its controllers from: their queues, the start of leading, the workload kinds served.
//! The controllers themselves are started above the engine, in the `wiring` room (`wiring::lead`).
//!
//! Every watch is as narrow as cmset's job allows, because an operator's memory grows with what it
//! caches (the failure of tools that watch every ConfigMap in the cluster); each kind's selector and
//! slimming live with its [`Indexed`] impl:
//! - ConfigMapSets and SecretSets: all in scope (they are cmset's own); kept whole in a store, but
//!   decoded without their managedFields.
//! - ConfigMaps and Secrets: metadata only, no selector (a source is another tool's object, found by
//!   name); indexed, not stored: the index keeps the revisions (label `cmset.dev/set`) and the versions
//!   of the sources some set versions, and lets every other object pass. Secret values are never
//!   watched: a source is read (GET) only when its version moved.
//! - Workloads of every kind in the table (`cmset_core::workloads::kinds`) that the server serves (see
//!   [`crate::engine::served`]): label `cmset.dev/enabled=true`; watched as dynamic objects, stored slim.
//! - ReplicaSets, ControllerRevisions, Jobs: label `cmset.dev/managed=true` (which cmset puts on the
//!   pod templates it rewrites, and on a CronJob's job template); reduced to the names they reference,
//!   not stored. Watched only by the leader, from its takeover on: admission never reads history, so
//!   a standby decodes none of it, and only pruning waits for their first lists.
//! - Pods: not watched. The set controller lists them (label `cmset.dev/managed=true`) only when a
//!   prune is due, since a Pod whose owner is gone may still run a revision nothing indexed names.
//! - AnalysisTemplates (cluster-scoped, cmset's own), only with a Prometheus to measure with: all, kept
//!   whole in a store; a change reconciles the sets that name the template.
//! - ChangeWindows (cluster-scoped, cmset's own), unless `--change-windows=false`: all, kept whole in
//!   a store; a change reconciles every set. Until they are listed, and while they cannot be, moves
//!   wait (windows fail closed).
//!
//! Every watch event passes through the [`Index`], which sends the reconciles it triggers to the
//! controllers (`reconcile_on`): no mapper ever walks a cache.

use std::sync::Arc;
use std::time::Duration;

use cmset_api::{AnalysisTemplate, ChangeWindow, ConfigMapSet, SecretSet, WindowOverride};
use futures::channel::mpsc::UnboundedSender;
use futures::{FutureExt, Stream, StreamExt, future::BoxFuture};
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tracing::{debug, warn};

use crate::engine::index::{Index, Indexed, TriggerReceivers, TriggerSenders, trigger_channels};
use crate::engine::rollout_budget::RolloutBudget;
use crate::engine::served::{self, Served, ServedKind};
use crate::engine::stored_workload::StoredWorkload;
use crate::engine::stores::Stores;
use crate::engine::tasks::spawn_owned;
use crate::engine::wire;
use crate::platform::backoff::{ExpiryGate, WatchBackoff};

fn watch_config<K: Indexed>() -> watcher::Config {
    let config = watcher::Config::default();
    match K::selector() {
        Some(selector) => config.labels(&selector),
        None => config,
    }
}

/// The watches' retry delays: kube's default backoff (0.8 s doubling to 30 s, reset only after 2 min
/// without errors) but capped at 5 s, so that after an API server outage every watch is back within
/// seconds of it rather than half a minute later. A watch retry costs one request per kind, and the
/// reset timer still keeps a watch that fails right after every list from looping.
pub(crate) fn watch_backoff() -> ResetTimerBackoff<WatchBackoff> {
    ResetTimerBackoff::new(WatchBackoff::default(), Duration::from_secs(120))
}

/// Passes over the first expiry (410 Gone) of a watch per grace period, so that it relists at once
/// instead of after a backoff step (see [`ExpiryGate`]).
pub(crate) fn relist_at_once_on_expiry<T>(
    kind: &'static str,
    stream: impl Stream<Item = Result<T, watcher::Error>>,
) -> impl Stream<Item = Result<T, watcher::Error>> {
    let mut gate = ExpiryGate::default();
    stream.filter(move |item| {
        let expired = matches!(item, Err(watcher::Error::WatchError(status)) if status.code == 410);
        let skip = expired && gate.pass_over(std::time::Instant::now());
        if skip {
            debug!(kind, "watch expired (410 Gone); listing again at once");
        }
        futures::future::ready(!skip)
    })
}

pub(crate) fn log_watch_error(kind: &'static str, e: &watcher::Error) {
    warn!(kind, error = %crate::platform::redact::watcher_error(e), "watch error; retrying with backoff");
}

/// A watch that only feeds the index (revisions, history objects): nothing is cached whole.
fn indexed_watch<K: Indexed>(
    client: &Client,
    namespace: Option<&str>,
    index: Arc<Index>,
) -> BoxFuture<'static, ()> {
    index.expect(K::NAME);
    relist_at_once_on_expiry(
        K::NAME,
        wire::watch_as::<K::Wire, K>(client, namespace, watch_config::<K>()),
    )
    .backoff(watch_backoff())
    .modify(K::slim)
    .for_each(move |event| {
        match event {
            Ok(event) => {
                index.handle(&event);
            }
            Err(e) => log_watch_error(K::NAME, &e),
        }
        futures::future::ready(())
    })
    .boxed()
}

/// Whether a list's objects reach the controller's queue, when this replica takes the lease while the
/// list is under way. An object listed before then is not queued as it arrives (a standby queues
/// nothing), and the queueing of everything stored that leading starts with does not see it either: a
/// store shows a list only once the list is done. So the objects listed while following are queued
/// when the list ends, if this replica leads by then; otherwise leading will queue them from the
/// store.
#[derive(Debug, Default)]
pub(crate) struct ListedWhileFollowing {
    missed: bool,
}

impl ListedWhileFollowing {
    /// Observes one event of the watch; true when every object of the store must be queued now.
    pub(crate) fn queue_all_now<K>(&mut self, event: &watcher::Event<K>, leading: bool) -> bool {
        match event {
            watcher::Event::Init => {
                self.missed = false;
                false
            }
            watcher::Event::InitApply(_) => {
                self.missed |= !leading;
                false
            }
            watcher::Event::InitDone => std::mem::take(&mut self.missed) && leading,
            watcher::Event::Apply(_) | watcher::Event::Delete(_) => false,
        }
    }
}

/// A watch that fills a store a controller is keyed by, and feeds the index. While this replica leads,
/// each object applied is also sent to its own controller's queue (`own`): the controller reconciles
/// what changed, as kube's own store subscription would make it, but a standby queues nothing.
fn stored_watch<K: Indexed>(
    client: &Client,
    namespace: Option<&str>,
    index: Arc<Index>,
    own: UnboundedSender<ObjectRef<K>>,
) -> (Store<K>, BoxFuture<'static, ()>) {
    let (reader, writer) = reflector::store();
    index.expect(K::NAME);
    let stored = reader.clone();
    let mut listed = ListedWhileFollowing::default();
    let watch = wire::watch_as::<K::Wire, K>(client, namespace, watch_config::<K>());
    let driver = relist_at_once_on_expiry(K::NAME, watch)
        .backoff(watch_backoff())
        .modify(K::slim)
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    let triggered = index.handle(&event);
                    let leading = index.is_leading();
                    // A change is queued when the index says it can alter the object's plan (not the
                    // echo of cmset's own status write). A deleted object is queued too: its
                    // controller may hold a requeue for it up to the resync period out, which would
                    // keep the entry (and the heap pages it sits on) that long. Queued now, it fires
                    // at once, finds the object gone from the store and is dropped, with no reconcile.
                    let queue = match &event {
                        watcher::Event::Apply(obj) => triggered.own.then_some(obj),
                        watcher::Event::InitApply(obj) | watcher::Event::Delete(obj) => Some(obj),
                        watcher::Event::Init | watcher::Event::InitDone => None,
                    };
                    if let Some(obj) = queue
                        && leading
                    {
                        let _ = own.unbounded_send(ObjectRef::from_obj(obj));
                    }
                    if listed.queue_all_now(&event, leading) {
                        queue_all(&stored, &own);
                    }
                }
                Err(e) => log_watch_error(K::NAME, &e),
            }
            futures::future::ready(())
        })
        .boxed();
    (reader, driver)
}

/// The AnalysisTemplate watch (cluster-scoped: every template, kept whole in a store, which the set
/// controller resolves analyses against). A template created, changed or deleted reconciles the sets
/// that name it (see [`Index::handle_template`]).
fn templates_watch(client: &Client, index: Arc<Index>) -> (Store<AnalysisTemplate>, BoxFuture<'static, ()>) {
    use crate::engine::index::TEMPLATES;
    let (reader, writer) = reflector::store();
    index.expect(TEMPLATES);
    let api: Api<AnalysisTemplate> = Api::all(client.clone());
    let driver = relist_at_once_on_expiry(TEMPLATES, watcher(api, watcher::Config::default()))
        .backoff(watch_backoff())
        .modify(|template| template.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    index.handle_template(&event);
                }
                Err(e) => {
                    log_watch_error(TEMPLATES, &e);
                    // Refused (RBAC not updated yet, say) or failed: only analysed sets wait for it.
                    if let watcher::Error::InitialListFailed(e) = &e {
                        index.templates_unavailable(format!(
                            "their list failed: {}",
                            crate::platform::redact::api_error(e)
                        ));
                    }
                }
            }
            futures::future::ready(())
        })
        .boxed();
    (reader, driver)
}

/// The WindowOverride watch (break glass; namespaced, in the scope): nothing is cached whole, the
/// index keeps what a decision reads, by the set each names (see [`Index::handle_override`]). An
/// override created reconciles its set at once. A list that fails (the CRD not installed yet, or
/// refused) holds nothing up: without overrides the windows hold as they would anyway.
fn overrides_watch(client: &Client, namespace: Option<&str>, index: Arc<Index>) -> BoxFuture<'static, ()> {
    use crate::engine::index::OVERRIDES;
    index.expect(OVERRIDES);
    let api: Api<WindowOverride> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    relist_at_once_on_expiry(OVERRIDES, watcher(api, watcher::Config::default()))
        .backoff(watch_backoff())
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    index.handle_override(&event);
                }
                Err(e) => {
                    log_watch_error(OVERRIDES, &e);
                    if let watcher::Error::InitialListFailed(e) = &e {
                        index.overrides_unavailable(format!(
                            "their list failed: {}",
                            crate::platform::redact::api_error(e)
                        ));
                    }
                }
            }
            futures::future::ready(())
        })
        .boxed()
}

/// How long the first list of ChangeWindows may take before every set says that its moves wait for
/// it (they wait from the start).
pub const WINDOWS_FIRST_LIST_PATIENCE: Duration = Duration::from_secs(30);

/// The ChangeWindow watch (cluster-scoped, few objects, kept whole in a store): each change parses
/// the windows again and reconciles every set (see [`Index::handle_change_window`]). Windows fail
/// closed: until a list succeeds, and while lists fail, moves wait (see [`Index::windows_unavailable`]);
/// only a 404 (the CRD is not installed) means there are none.
fn windows_watch(client: &Client, index: Arc<Index>) -> BoxFuture<'static, ()> {
    use crate::engine::index::WINDOWS;
    let (reader, writer) = reflector::store();
    index.watch_windows();
    let api: Api<ChangeWindow> = Api::all(client.clone());
    let patience = {
        let index = index.clone();
        async move {
            tokio::time::sleep(WINDOWS_FIRST_LIST_PATIENCE).await;
            index.windows_not_listed_within(WINDOWS_FIRST_LIST_PATIENCE);
        }
    };
    let watch = relist_at_once_on_expiry(WINDOWS, watcher(api, watcher::Config::default()))
        .backoff(watch_backoff())
        .modify(|window| window.metadata.managed_fields = None)
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    index.handle_change_window(&event, &reader.state());
                }
                Err(e) => {
                    log_watch_error(WINDOWS, &e);
                    if let watcher::Error::InitialListFailed(e) = &e {
                        match windows_list_failure(e) {
                            Some(unknown) => drop(index.windows_unavailable(unknown)),
                            None => drop(index.windows_absent()),
                        }
                    }
                }
            }
            futures::future::ready(())
        });
    futures::future::join(watch, patience).map(drop).boxed()
}

/// What a failed list of ChangeWindows says of them: unknown, and why; `None` for a 404 (the CRD is
/// not installed: there are none).
fn windows_list_failure(e: &kube::Error) -> Option<cmset_core::rollout::window_hold::WindowsUnknown> {
    use cmset_core::rollout::window_hold::{UnknownCause, WindowsUnknown};
    let detail = crate::platform::redact::api_error(e).to_string();
    match crate::platform::error::api_code(e) {
        Some(404) => None,
        Some(403) => Some(WindowsUnknown {
            cause: UnknownCause::Forbidden,
            detail,
        }),
        _ => Some(WindowsUnknown {
            cause: UnknownCause::ListFailed,
            detail,
        }),
    }
}

/// per scope and keeps it warm; admission answers from it, and the leader reconciles from it.
pub struct Scope {
    namespace: Option<String>,
    pub index: Arc<Index>,
    pub stores: Stores,
    senders: TriggerSenders,
    receivers: std::sync::Mutex<Option<TriggerReceivers>>,
    /// The workload kinds served now (see [`crate::engine::served`]).
    served: tokio::sync::watch::Receiver<Served>,
}

impl Scope {
    /// Starts watching: the returned future drives every watch of the scope (forever; drop it to stop).
    /// AnalysisTemplates are watched only when `analysis` (the operator has a Prometheus to measure
    /// with); ChangeWindows only when `change_windows` (`--change-windows`).
    #[allow(clippy::too_many_arguments)]
    pub fn watch(
        client: &Client,
        namespace: Option<String>,
        secret_sets: bool,
        analysis: bool,
        change_windows: bool,
        kinds: served::Settings,
        budget: Option<Arc<RolloutBudget>>,
    ) -> (Arc<Self>, BoxFuture<'static, ()>) {
        let ns = namespace.as_deref();
        let (senders, receivers) = trigger_channels();
        let index = Arc::new(Index::new(Some(senders.clone())).with_budget(budget.clone()));
        if let Some(budget) = &budget {
            budget.route(namespace.clone(), &index);
        }

        let (sets, sets_watch) =
            stored_watch::<ConfigMapSet>(client, ns, index.clone(), senders.sets.clone());
        let mut watches = vec![
            sets_watch,
            indexed_watch::<PartialObjectMeta<ConfigMap>>(client, ns, index.clone()),
        ];
        let secret_sets = secret_sets.then(|| {
            let (store, watch) =
                stored_watch::<SecretSet>(client, ns, index.clone(), senders.secret_sets.clone());
            watches.push(watch);
            watches.push(indexed_watch::<PartialObjectMeta<Secret>>(
                client,
                ns,
                index.clone(),
            ));
            store
        });
        if change_windows {
            watches.push(windows_watch(client, index.clone()));
        }
        // A set's own windows hold it with or without the cluster's: break glass is always watched.
        watches.push(overrides_watch(client, ns, index.clone()));
        let templates = analysis.then(|| {
            let (store, watch) = templates_watch(client, index.clone());
            watches.push(watch);
            store
        });
        let stores = Stores {
            sets,
            secret_sets,
            workloads: Default::default(),
            templates,
        };
        let (served_tx, served) = tokio::sync::watch::channel(Served::new());
        watches.push(served::serve(
            client.clone(),
            namespace.clone(),
            kinds,
            index.clone(),
            senders.clone(),
            stores.workloads.clone(),
            served_tx,
        ));
        let scope = Arc::new(Self {
            namespace,
            index,
            stores,
            senders,
            receivers: std::sync::Mutex::new(Some(receivers)),
            served,
        });
        // Each watch a task of its own: decoding and indexing one kind's events need not wait for
        // another's.
        let watches = watches.into_iter().map(crate::engine::tasks::spawn_owned);
        (scope, futures::future::join_all(watches).map(drop).boxed())
    }

    /// Whether this scope serves objects of `namespace`.
    pub fn serves(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// Whether every watch needed at start-up has listed everything once.
    pub fn is_ready(&self) -> bool {
        self.index.is_ready()
    }

    /// The receiving ends of the queues of this scope's set controllers, to run them with: taken once,
    /// when this replica takes the lease (`None` after: a scope can only be led once).
    pub fn take_triggers(&self) -> Option<TriggerReceivers> {
        self.receivers.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Leading starts, once the set controllers are in place: from here on changes trigger
    /// reconciles, and everything observed so far is queued once (an object changed in between is
    /// queued twice, and reconciled once), from the warm index, with no relist. The history kinds are
    /// watched from now on, until the returned handles are dropped: their first lists' end triggers
    /// every set (which prunes only from then on).
    pub fn start_leading(&self, client: &Client) -> Vec<crate::engine::tasks::Owned<()>> {
        self.index.lead();
        let history_watches = self.watch_history(client);
        queue_all(&self.stores.sets, &self.senders.sets);
        if let Some(store) = &self.stores.secret_sets {
            queue_all(store, &self.senders.secret_sets);
        }
        debug!(sizes = ?self.index.sizes(), "leading from the warm index");
        history_watches
    }

    /// The watches of the history kinds (ReplicaSets, ControllerRevisions, Jobs), each a task of its
    /// own, running until the returned handles are dropped. They never hold readiness nor a set's
    /// moves (see [`Index::history_listed`]).
    fn watch_history(&self, client: &Client) -> Vec<crate::engine::tasks::Owned<()>> {
        let ns = self.namespace.as_deref();
        vec![
            spawn_owned(indexed_watch::<ReplicaSet>(client, ns, self.index.clone())),
            spawn_owned(indexed_watch::<ControllerRevision>(
                client,
                ns,
                self.index.clone(),
            )),
            spawn_owned(indexed_watch::<Job>(client, ns, self.index.clone())),
        ]
    }

    /// Runs `controllers`, and a workload controller started by `start_workload_controller` for every
    /// kind served, as kinds come and go, until `shutdown`; then waits for every controller to finish.
    /// The engine knows which kinds are served and their queues; what reconciles them is the caller's.
    pub async fn lead_workload_kinds(
        &self,
        mut controllers: futures::stream::FuturesUnordered<BoxFuture<'static, ()>>,
        shutdown: impl std::future::Future<Output = ()>,
        start_workload_controller: impl Fn(
            &ServedKind,
            futures::channel::mpsc::UnboundedReceiver<ObjectRef<StoredWorkload>>,
        ) -> BoxFuture<'static, ()>,
    ) {
        let mut served = self.served.clone();
        let mut led: Vec<Arc<ServedKind>> = Vec::new();
        let shutdown = shutdown.fuse();
        futures::pin_mut!(shutdown);
        loop {
            let now: Vec<Arc<ServedKind>> = served.borrow_and_update().values().cloned().collect();
            for kind in now {
                if led.iter().any(|l| Arc::ptr_eq(l, &kind)) {
                    continue;
                }
                if let Some(queue) = kind.take_queue() {
                    controllers.push(start_workload_controller(&kind, queue));
                    kind.queue_all();
                }
                led.push(kind);
            }
            // Forget kinds no longer served (their controllers stop on their own).
            let current = served.borrow().clone();
            led.retain(|l| current.get(&l.kind).is_some_and(|c| Arc::ptr_eq(c, l)));
            tokio::select! {
                changed = served.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                Some(()) = controllers.next() => {}
                () = &mut shutdown => break,
            }
        }
        while controllers.next().await.is_some() {}
    }
}

/// Queues a reconcile of every object `store` holds.
fn queue_all<K: Indexed>(store: &Store<K>, queue: &UnboundedSender<ObjectRef<K>>) {
    for obj in store.state() {
        let _ = queue.unbounded_send(ObjectRef::from_obj(obj.as_ref()));
    }
}

/// Every scope this process serves.
#[derive(Clone, Default)]
pub struct Scopes {
    pub scopes: Vec<Arc<Scope>>,
    /// The window in which a workload reading several sets gathers their changes (`Settings`).
    pub multi_set_window: Duration,
    /// The workload kinds of the table, declared ones included.
    pub kinds: cmset_core::workloads::kinds::Kinds,
    /// A cluster-wide rollout budget is set: admission leaves references where they are on update,
    /// and the workload controller moves them in the budget's order.
    pub budgeted: bool,
}

impl Scopes {
    /// The scope that serves `namespace`, if any.
    pub fn serving(&self, namespace: &str) -> Option<&Arc<Scope>> {
        self.scopes.iter().find(|s| s.serves(namespace))
    }

    pub fn are_ready(&self) -> bool {
        self.scopes.iter().all(|s| s.is_ready())
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;

    use super::ListedWhileFollowing;

    /// Feeds `events`, each with whether this replica leads as it arrives; returns the events after
    /// which everything stored is queued.
    fn queued_after(events: &[(Event<()>, bool)]) -> Vec<usize> {
        let mut listed = ListedWhileFollowing::default();
        events
            .iter()
            .enumerate()
            .filter(|(_, (event, leading))| listed.queue_all_now(event, *leading))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn a_list_that_began_while_following_is_queued_whole_once_it_ends_under_the_lease() {
        use Event::*;
        // The lease is taken after the first page: the store only shows the list at its end.
        let taken_mid_list = [
            (Init, false),
            (InitApply(()), false),
            (InitApply(()), true),
            (InitDone, true),
            (Apply(()), true),
        ];
        assert_eq!(queued_after(&taken_mid_list), vec![3]);
        // Leading before the list began: each object was queued as it came.
        let led_throughout = [(Init, true), (InitApply(()), true), (InitDone, true)];
        assert_eq!(queued_after(&led_throughout), Vec::<usize>::new());
        // Still following at the end: leading queues the then complete store itself.
        let followed_throughout = [(Init, false), (InitApply(()), false), (InitDone, false)];
        assert_eq!(queued_after(&followed_throughout), Vec::<usize>::new());
        // A relist under the lease forgets what an earlier, followed list missed.
        let relisted = [
            (Init, false),
            (InitApply(()), false),
            (InitDone, false),
            (Init, true),
            (InitApply(()), true),
            (InitDone, true),
        ];
        assert_eq!(queued_after(&relisted), Vec::<usize>::new());
        // An empty list missed nothing.
        assert_eq!(
            queued_after(&[(Init, false), (InitDone, true)]),
            Vec::<usize>::new()
        );
    }
}

#[cfg(test)]
mod windows_tests {
    use cmset_core::rollout::window_hold::UnknownCause;
    use kube::core::Status;

    use super::windows_list_failure;

    fn answered(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            reason: reason.into(),
            ..Status::failure("no", reason)
        }))
    }

    #[test]
    fn a_failed_list_of_change_windows_is_unknown_unless_the_crd_is_absent() {
        let cause = |e: &kube::Error| windows_list_failure(e).map(|u| u.cause);
        assert_eq!(cause(&answered(404, "NotFound")), None, "no CRD: no windows");
        assert_eq!(cause(&answered(403, "Forbidden")), Some(UnknownCause::Forbidden));
        assert_eq!(
            cause(&answered(503, "ServiceUnavailable")),
            Some(UnknownCause::ListFailed)
        );
        let forbidden = windows_list_failure(&answered(403, "Forbidden")).unwrap();
        assert_eq!(forbidden.detail, "the API server answered 403 Forbidden");
    }
}
