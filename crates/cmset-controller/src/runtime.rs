//! Wires watches, caches and the two controllers for one scope (one namespace, or all of them).
//!
//! Every watch is as narrow as cmset's job allows, because an operator's memory grows with what it
//! caches (the failure of tools that watch every ConfigMap in the cluster):
//! - ConfigMapSets: all in scope (they are cmset's own).
//! - revision ConfigMaps: label `cmset.dev/set`, metadata only.
//! - Deployments, StatefulSets, DaemonSets: label `cmset.dev/enabled=true` (opted in).
//! - ReplicaSets, ControllerRevisions: label `cmset.dev/managed=true`, which cmset puts on the pod
//!   templates it rewrites and the workload controllers copy onto their history objects.
//! - Pods: never watched; listed by label only when a prune is about to happen.
//!
//! Each watch feeds one shared cache; the controllers subscribe to it instead of opening their own.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cmset_api::{ConfigMapSet, labels};
use futures::{FutureExt, Stream, StreamExt, future::BoxFuture};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ReflectHandle, Store};
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};

use crate::context::{Clock, Context, Stores};
use crate::metrics::Metrics;
use crate::views::{self, Workload};
use crate::{set_controller, workload_controller};

/// Tuning of one scope's controllers.
#[derive(Clone, Debug)]
pub struct Settings {
    pub concurrency: u16,
    /// Triggers of one workload within this window become one reconcile: sets changed by one apply
    /// land within it, so the workload rolls once.
    pub workload_debounce: Duration,
    pub instance: Option<String>,
}

const BUFFER: usize = 1024;

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Drops what no cmset decision reads before an object enters a cache.
fn slim<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
    if let Some(a) = obj.meta_mut().annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// A shared, label-selected, slimmed watch: its cache, a subscription for controllers, and the future
/// that drives it.
fn shared_watch<K>(
    api: Api<K>,
    selector: Option<&str>,
) -> (Store<K>, ReflectHandle<K>, BoxFuture<'static, ()>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store_shared(BUFFER);
    let subscriber = writer.subscribe().expect("a shared store can be subscribed to");
    let mut config = watcher::Config::default();
    if let Some(s) = selector {
        config = config.labels(s);
    }
    let driver = watcher(api, config)
        .default_backoff()
        .modify(slim::<K>)
        .reflect_shared(writer)
        .for_each(|event| async move {
            if let Err(e) = event {
                warn!(kind = %K::kind(&()), error = %e, "watch error; retrying with backoff");
            }
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
    let enabled = format!("{}={}", labels::ENABLED, labels::ENABLED_VALUE);
    let managed = format!("{}=true", labels::MANAGED_TEMPLATE);

    let (sets, sets_sub, sets_watch) = shared_watch::<ConfigMapSet>(api(&client, ns), None);
    let (deployments, deploy_sub, deploy_watch) =
        shared_watch::<Deployment>(api(&client, ns), Some(&enabled));
    let (statefulsets, sts_sub, sts_watch) = shared_watch::<StatefulSet>(api(&client, ns), Some(&enabled));
    let (daemonsets, ds_sub, ds_watch) = shared_watch::<DaemonSet>(api(&client, ns), Some(&enabled));
    let (replica_sets, rs_sub, rs_watch) = shared_watch::<ReplicaSet>(api(&client, ns), Some(&managed));
    let (controller_revisions, cr_sub, cr_watch) =
        shared_watch::<ControllerRevision>(api(&client, ns), Some(&managed));

    let (revisions, revisions_writer) = reflector::store::<PartialObjectMeta<ConfigMap>>();
    let revision_config = watcher::Config::default().labels(labels::SET);
    // `Api<PartialObjectMeta<_>>` makes metadata-only requests.
    let revision_stream = watcher(api::<PartialObjectMeta<ConfigMap>>(&client, ns), revision_config)
        .default_backoff()
        .modify(slim::<PartialObjectMeta<ConfigMap>>)
        .reflect(revisions_writer)
        .touched_objects();

    let stores = Stores {
        sets: sets.clone(),
        revisions: revisions.clone(),
        deployments: deployments.clone(),
        statefulsets: statefulsets.clone(),
        daemonsets: daemonsets.clone(),
        replica_sets,
        controller_revisions,
    };
    let mut context = Context::new(
        client.clone(),
        stores.clone(),
        metrics,
        clock,
        settings.instance.clone(),
    );
    context.caches_ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caches_ready = context.caches_ready.clone();
    let ctx = Arc::new(context);

    let set_config = controller::Config::default().concurrency(settings.concurrency);
    let sets_for = |store: Store<ConfigMapSet>| {
        move |names: (Option<String>, BTreeSet<String>)| {
            set_controller::sets_referenced(&store, names.0, names.1)
        }
    };
    let by_workload = |w: &dyn WorkloadRefs| (w.ns(), w.names());
    let set_ctl = Controller::for_shared_stream(sets_sub.clone(), sets.clone())
        .with_config(set_config)
        .owns_stream(revision_stream)
        .watches_shared_stream(deploy_sub.clone(), {
            let f = sets_for(sets.clone());
            move |w: Arc<Deployment>| f(by_workload(w.as_ref()))
        })
        .watches_shared_stream(sts_sub.clone(), {
            let f = sets_for(sets.clone());
            move |w: Arc<StatefulSet>| f(by_workload(w.as_ref()))
        })
        .watches_shared_stream(ds_sub.clone(), {
            let f = sets_for(sets.clone());
            move |w: Arc<DaemonSet>| f(by_workload(w.as_ref()))
        })
        .watches_shared_stream(rs_sub, {
            let f = sets_for(sets.clone());
            move |r: Arc<ReplicaSet>| {
                let names = views::replica_set_view(&r)
                    .map(|h| h.referenced)
                    .unwrap_or_default();
                f((r.namespace(), names))
            }
        })
        .watches_shared_stream(cr_sub, {
            let f = sets_for(sets.clone());
            move |r: Arc<ControllerRevision>| {
                let names = views::controller_revision_view(&r)
                    .map(|h| h.referenced)
                    .unwrap_or_default();
                f((r.namespace(), names))
            }
        })
        .graceful_shutdown_on(shutdown.clone())
        .run(
            set_controller::reconcile,
            set_controller::error_policy,
            ctx.clone(),
        );

    let workload_config = controller::Config::default()
        .concurrency(settings.concurrency)
        .debounce(settings.workload_debounce);
    let deploy_ctl = workload_controller_for(
        deploy_sub,
        deployments,
        sets_sub.clone(),
        &workload_config,
        &ctx,
        shutdown.clone(),
    );
    let sts_ctl = workload_controller_for(
        sts_sub,
        statefulsets,
        sets_sub.clone(),
        &workload_config,
        &ctx,
        shutdown.clone(),
    );
    let ds_ctl = workload_controller_for(
        ds_sub,
        daemonsets,
        sets_sub,
        &workload_config,
        &ctx,
        shutdown.clone(),
    );

    // Readiness: once every cache has its first full list.
    let readiness = {
        let s = stores.clone();
        async move {
            let _ = s.sets.wait_until_ready().await;
            let _ = s.deployments.wait_until_ready().await;
            let _ = s.statefulsets.wait_until_ready().await;
            let _ = s.daemonsets.wait_until_ready().await;
            let _ = s.replica_sets.wait_until_ready().await;
            let _ = s.controller_revisions.wait_until_ready().await;
            let _ = s.revisions.wait_until_ready().await;
            caches_ready.store(true, std::sync::atomic::Ordering::Release);
            let _ = ready.send(()).await;
        }
    };

    let watches = futures::future::join_all(vec![
        sets_watch,
        deploy_watch,
        sts_watch,
        ds_watch,
        rs_watch,
        cr_watch,
    ]);
    let controllers = futures::future::join_all(vec![
        log_results(set_ctl, set_controller::NAME),
        deploy_ctl,
        sts_ctl,
        ds_ctl,
    ]);
    tokio::select! {
        _ = controllers => {}
        _ = watches => {}
        _ = readiness.then(|_| futures::future::pending::<()>()) => {}
        // The controllers only see the shutdown signal once their caches are ready; a SIGTERM before
        // that (an API server that refuses us, say) must still stop the process at once.
        _ = shutdown => {}
    }
}

/// Names and namespace of what a workload references, for the set controller's mapper.
trait WorkloadRefs {
    fn ns(&self) -> Option<String>;
    fn names(&self) -> BTreeSet<String>;
}

impl<K: Workload> WorkloadRefs for K {
    fn ns(&self) -> Option<String> {
        self.namespace()
    }
    fn names(&self) -> BTreeSet<String> {
        views::workload_view(self)
            .map(|v| v.referenced_names())
            .unwrap_or_default()
    }
}

fn workload_controller_for<K: Workload>(
    subscription: ReflectHandle<K>,
    store: Store<K>,
    sets: ReflectHandle<ConfigMapSet>,
    config: &controller::Config,
    ctx: &Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> BoxFuture<'static, ()> {
    let mapper_store = store.clone();
    let stream = Controller::for_shared_stream(subscription, store)
        .with_config(config.clone())
        .watches_shared_stream(sets, move |set: Arc<ConfigMapSet>| {
            workload_controller::workloads_referencing(&mapper_store, &set)
        })
        .graceful_shutdown_on(shutdown)
        .run(
            workload_controller::reconcile::<K>,
            workload_controller::error_policy::<K>,
            ctx.clone(),
        );
    log_results(stream, workload_controller::NAME)
}
