//! Wires the watches, the index and the two controllers of one scope (one namespace, or all of them).
//!
//! Every watch is as narrow as cmset's job allows, because an operator's memory grows with what it
//! caches (the failure of tools that watch every ConfigMap in the cluster); each kind's selector and
//! slimming live with its [`Indexed`] impl:
//! - ConfigMapSets and SecretSets: all in scope (they are cmset's own); kept whole in a store.
//! - ConfigMaps and Secrets: metadata only, no selector (a source is another tool's object, found by
//!   name); indexed, not stored: the index keeps the revisions (label `cmset.dev/set`) and the versions
//!   of the sources some set versions, and lets every other object pass. Secret values are never
//!   watched: a source is read (GET) only when its version moved.
//! - Deployments, StatefulSets, DaemonSets: label `cmset.dev/enabled=true`; stored slim.
//! - ReplicaSets, ControllerRevisions: label `cmset.dev/managed=true` (which cmset puts on the pod
//!   templates it rewrites); reduced to the names they reference, not stored.
//! - Pods: never watched; listed by label only when a prune is about to happen.
//!
//! Every watch event passes through the [`Index`], which sends the reconciles it triggers to the
//! controllers (`reconcile_on`): no mapper ever walks a cache.

use std::sync::Arc;
use std::time::Duration;

use cmset_api::{ConfigMapSet, SecretSet};
use futures::{FutureExt, Stream, StreamExt, future::BoxFuture};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, ReflectHandle, Store};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use kube::{Api, Client};
use tracing::{debug, warn};

use crate::backoff::{ExpiryGate, WatchBackoff};
use crate::context::{Clock, Context, Stores};
use crate::error::Error;
use crate::index::{Index, Indexed, trigger_channels};
use crate::metrics::Metrics;
use crate::views::Object;
use crate::{set_controller, workload_controller};

/// Tuning of one scope's controllers.
#[derive(Clone, Debug)]
pub struct Settings {
    pub concurrency: u16,
    /// How long a workload that reads several sets waits after the last change to one of them (see
    /// `workload_controller`).
    pub multi_set_window: Duration,
    pub instance: Option<String>,
    /// Whether SecretSets (and so Secrets) are served.
    pub secret_sets: bool,
}

/// Every kind watched, each feeding the index once: ConfigMapSet, ConfigMap, Deployment, StatefulSet,
/// DaemonSet, ReplicaSet, ControllerRevision; with SecretSets, also SecretSet and Secret.
const WATCHED_KINDS: usize = 7;
const SECRET_KINDS: usize = 2;

const BUFFER: usize = 1024;

fn api<K: Indexed>(client: &Client, namespace: Option<&str>) -> Api<K> {
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

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
fn watch_backoff() -> ResetTimerBackoff<WatchBackoff> {
    ResetTimerBackoff::new(WatchBackoff::default(), Duration::from_secs(120))
}

/// Passes over the first expiry (410 Gone) of a watch per grace period, so that it relists at once
/// instead of after a backoff step (see [`ExpiryGate`]).
fn relist_at_once_on_expiry<K: Indexed, T>(
    stream: impl Stream<Item = Result<T, watcher::Error>>,
) -> impl Stream<Item = Result<T, watcher::Error>> {
    let mut gate = ExpiryGate::default();
    stream.filter(move |item| {
        let expired = matches!(item, Err(watcher::Error::WatchError(status)) if status.code == 410);
        let skip = expired && gate.pass_over(std::time::Instant::now());
        if skip {
            debug!(kind = K::NAME, "watch expired (410 Gone); listing again at once");
        }
        futures::future::ready(!skip)
    })
}

fn log_watch_errors<K: Indexed>(e: &watcher::Error) {
    warn!(kind = K::NAME, error = %e, "watch error; retrying with backoff");
}

/// A watch that only feeds the index (revisions, history objects): nothing is cached whole.
fn indexed_watch<K: Indexed>(
    client: &Client,
    namespace: Option<&str>,
    index: Arc<Index>,
) -> BoxFuture<'static, ()> {
    relist_at_once_on_expiry::<K, _>(watcher(api::<K>(client, namespace), watch_config::<K>()))
        .backoff(watch_backoff())
        .modify(K::slim)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    index.handle(&event);
                }
                Err(e) => log_watch_errors::<K>(&e),
            }
            futures::future::ready(())
        })
        .boxed()
}

/// A watch that fills a shared store a controller is keyed by, and feeds the index.
fn stored_watch<K: Indexed>(
    client: &Client,
    namespace: Option<&str>,
    index: Arc<Index>,
) -> (Store<K>, ReflectHandle<K>, BoxFuture<'static, ()>) {
    let (reader, writer) = reflector::store_shared(BUFFER);
    let subscriber = writer.subscribe().expect("a shared store can be subscribed to");
    let driver = relist_at_once_on_expiry::<K, _>(watcher(api::<K>(client, namespace), watch_config::<K>()))
        .backoff(watch_backoff())
        .modify(K::slim)
        .reflect_shared(writer)
        .for_each(move |event| {
            match event {
                Ok(event) => {
                    index.handle(&event);
                }
                Err(e) => log_watch_errors::<K>(&e),
            }
            futures::future::ready(())
        })
        .boxed();
    (reader, subscriber, driver)
}

fn log_results<S, T, E>(stream: S, controller: &'static str) -> BoxFuture<'static, ()>
where
    S: Stream<Item = Result<T, E>> + Send + 'static,
    T: std::fmt::Debug + Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    stream
        .for_each(move |r| async move {
            match r {
                Ok(o) => debug!(controller, object = ?o, "reconciled"),
                Err(e) => debug!(controller, error = %e, "reconcile failed"),
            }
        })
        .boxed()
}

/// Runs every watch and controller of one scope until `shutdown` resolves.
pub async fn run_scope(
    client: Client,
    namespace: Option<String>,
    settings: Settings,
    metrics: Arc<Metrics>,
    clock: Clock,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
    ready: tokio::sync::mpsc::Sender<()>,
) {
    let ns = namespace.as_deref();
    let (senders, triggers) = trigger_channels();
    let kinds = WATCHED_KINDS + if settings.secret_sets { SECRET_KINDS } else { 0 };
    let index = Arc::new(Index::new(kinds, Some(senders)));

    let (sets, sets_sub, sets_watch) = stored_watch::<ConfigMapSet>(&client, ns, index.clone());
    let (deployments, deploy_sub, deploy_watch) = stored_watch::<Deployment>(&client, ns, index.clone());
    let (statefulsets, sts_sub, sts_watch) = stored_watch::<StatefulSet>(&client, ns, index.clone());
    let (daemonsets, ds_sub, ds_watch) = stored_watch::<DaemonSet>(&client, ns, index.clone());
    let mut watches = vec![
        sets_watch,
        deploy_watch,
        sts_watch,
        ds_watch,
        indexed_watch::<PartialObjectMeta<ConfigMap>>(&client, ns, index.clone()),
        indexed_watch::<ReplicaSet>(&client, ns, index.clone()),
        indexed_watch::<ControllerRevision>(&client, ns, index.clone()),
    ];
    let secret_sets = settings.secret_sets.then(|| {
        let (store, subscription, watch) = stored_watch::<SecretSet>(&client, ns, index.clone());
        watches.push(watch);
        watches.push(indexed_watch::<PartialObjectMeta<Secret>>(
            &client,
            ns,
            index.clone(),
        ));
        (store, subscription)
    });
    let watches = futures::future::join_all(watches);

    let stores = Stores {
        sets: sets.clone(),
        secret_sets: secret_sets.as_ref().map(|(store, _)| store.clone()),
        deployments: deployments.clone(),
        statefulsets: statefulsets.clone(),
        daemonsets: daemonsets.clone(),
    };
    let mut context = Context::new(
        client.clone(),
        index.clone(),
        stores,
        metrics,
        clock,
        settings.instance.clone(),
    );
    context.multi_set_window = settings.multi_set_window;
    let ctx = Arc::new(context);
    let wiring = Wiring {
        config: controller::Config::default().concurrency(settings.concurrency),
        ctx: ctx.clone(),
        shutdown: shutdown.clone(),
    };
    let (sets_ctl, workload_ctl) = (set_controller::NAME, workload_controller::NAME);
    let mut controllers = vec![
        wiring.controller(
            (sets_sub, sets),
            triggers.sets,
            sets_ctl,
            set_controller::reconcile::<ConfigMapSet>,
            set_controller::error_policy::<ConfigMapSet>,
        ),
        wiring.controller(
            (deploy_sub, deployments),
            triggers.deployments,
            workload_ctl,
            workload_controller::reconcile::<Deployment>,
            workload_controller::error_policy::<Deployment>,
        ),
        wiring.controller(
            (sts_sub, statefulsets),
            triggers.statefulsets,
            workload_ctl,
            workload_controller::reconcile::<StatefulSet>,
            workload_controller::error_policy::<StatefulSet>,
        ),
        wiring.controller(
            (ds_sub, daemonsets),
            triggers.daemonsets,
            workload_ctl,
            workload_controller::reconcile::<DaemonSet>,
            workload_controller::error_policy::<DaemonSet>,
        ),
    ];
    if let Some((store, subscription)) = secret_sets {
        controllers.push(wiring.controller(
            (subscription, store),
            triggers.secret_sets,
            sets_ctl,
            set_controller::reconcile::<SecretSet>,
            set_controller::error_policy::<SecretSet>,
        ));
    }
    let controllers = futures::future::join_all(controllers);

    // Readiness: once every watch has listed everything (the index counts them).
    let readiness = async move {
        while !index.is_ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        debug!(sizes = ?index.sizes(), "index filled");
        let _ = ready.send(()).await;
    };

    tokio::select! {
        _ = controllers => {}
        _ = watches => {}
        _ = readiness.then(|_| futures::future::pending::<()>()) => {}
        // The controllers only see the shutdown signal once their caches are ready; a SIGTERM before
        // that (an API server that refuses us, say) must still stop the process at once.
        _ = shutdown => {}
    }
}

/// What every controller of a scope shares: its tuning, its context and the shutdown signal.
struct Wiring<Shutdown> {
    config: controller::Config,
    ctx: Arc<Context>,
    shutdown: Shutdown,
}

impl<Shutdown> Wiring<Shutdown>
where
    Shutdown: std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
{
    /// One controller keyed by `K`, reconciling what its store holds and what the index triggers.
    fn controller<K, Reconcile, Fut>(
        &self,
        (subscription, store): (ReflectHandle<K>, Store<K>),
        triggers: impl Stream<Item = ObjectRef<K>> + Send + 'static,
        name: &'static str,
        reconcile: Reconcile,
        error_policy: fn(Arc<K>, &Error, Arc<Context>) -> controller::Action,
    ) -> BoxFuture<'static, ()>
    where
        K: Object + Indexed,
        Reconcile: FnMut(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<controller::Action, Error>> + Send + 'static,
    {
        let stream = Controller::for_shared_stream(subscription, store)
            .with_config(self.config.clone())
            .reconcile_on(triggers)
            .graceful_shutdown_on(self.shutdown.clone())
            .run(reconcile, error_policy, self.ctx.clone());
        log_results(stream, name)
    }
}
