//! Leading one scope: assembles the context its controllers share (the engine's parts, the measurer,
//! the notifier) and runs the set and workload controllers from the scope's warm index.
//!
//! Here rather than in the engine: the context draws on the reconcile and notify rooms, and the
//! engine must not need them to compile. The scope itself (watches, index, stores, queues) is the
//! engine's ([`Scope`]).

use std::sync::Arc;
use std::time::Duration;

use cmset_api::{ConfigMapSet, SecretSet};
use futures::{FutureExt, Stream, StreamExt, future::BoxFuture};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller};
use kube::{Client, Resource};
use tracing::{debug, warn};

use crate::engine::context::{Clock, Context as EngineContext};
use crate::engine::index::{Indexed, SetId};
use crate::engine::pacer::{Pacer, paced};
use crate::engine::runtime::Scope;
use crate::engine::served::ServedKind;
use crate::engine::stored_workload::StoredWorkload;
use crate::engine::tasks::spawn_owned;
use crate::engine::views::Object;
use crate::notify::config_watch::Loaded;
use crate::notify::notifier::{self, Notifier};
use crate::platform::error::Error;
use crate::platform::leader::Term;
use crate::platform::metrics::Metrics;
use crate::reconcile::context::Context;
use crate::reconcile::measurer::Measurer;
use crate::reconcile::prometheus::Prometheus;
use crate::reconcile::{set_controller, workload_controller};

/// How long shutdown waits for notifications under way (each bounded by its service's timeouts).
const NOTIFICATIONS_DRAIN: Duration = Duration::from_secs(15);

/// Tuning of one scope's controllers.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Set reconciles at once, per set kind.
    pub concurrency: u16,
    /// Workload reconciles at once, per workload kind.
    pub workload_concurrency: u16,
    /// How long a workload that reads several sets waits after the last change to one of them (see
    /// `workload_controller`).
    pub multi_set_window: Duration,
    pub instance: Option<String>,
    /// Whether SecretSets (and so Secrets) are served.
    pub secret_sets: bool,
    /// Where the metric analysis of rollouts queries, if anywhere (`--prometheus-url`).
    pub prometheus: Option<Arc<Prometheus>>,
    /// How many analysis queries may be in flight at once (`--analysis-concurrency`).
    pub analysis_concurrency: usize,
    /// This replica's term as leader, which bounds every write (`None` without leader election).
    pub term: Option<Term>,
    /// The notification configuration as last read (see [`crate::notify`]); `None`: no notifier.
    pub notifications: Option<tokio::sync::watch::Receiver<Arc<Loaded>>>,
    /// The admin's bounds on notifications (`--notifications-max-*`).
    pub notification_policy: notifier::Policy,
}

/// Reconciles `scope` from its warm index, from now until `shutdown` resolves and the reconciles in
/// flight have finished: no relist, every object already observed is queued at once. Called once per
/// scope, when this replica takes the lease. A workload kind served later gets its controller then;
/// one that stops being served stops its controller.
pub async fn lead_scope(
    scope: &Scope,
    client: Client,
    settings: Settings,
    metrics: Arc<Metrics>,
    clock: Clock,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let Some(triggers) = scope.take_triggers() else {
        warn!("a scope can only be led once");
        return;
    };
    let history_client = client.clone();
    let mut engine = EngineContext::new(
        client,
        scope.index.clone(),
        scope.stores.clone(),
        metrics,
        clock.clone(),
        settings.instance.clone(),
    );
    engine.multi_set_window = settings.multi_set_window;
    engine.term = settings.term.clone();
    let mut context = Context::new(engine);
    context.measurer = settings.prometheus.clone().map(|prometheus| {
        Measurer::new(
            prometheus,
            settings.analysis_concurrency,
            scope.index.clone(),
            clock,
        )
    });
    let notifier_queues = settings.notifications.clone().map(|loaded| {
        let (notifier, queues) = Notifier::new(loaded, settings.notification_policy);
        let notifier = Arc::new(notifier);
        context.notifier = Some(notifier.clone());
        (notifier, queues)
    });
    let ctx = Arc::new(context);
    // A deleted set's series go with it (only the leader reports them), and so do its
    // measurements and the set controller's memory of its writes: a set deleted without a
    // finalizer is never reconciled again to forget them itself. Weak: the index outlives no
    // context, and must not keep one alive.
    let gone_ctx = Arc::downgrade(&ctx);
    scope.index.on_set_gone(Arc::new(move |id: &SetId| {
        let Some(ctx) = gone_ctx.upgrade() else { return };
        let (kind, key) = id;
        let labels = set_controller::set_labels(*kind, &key.namespace, &key.name);
        ctx.metrics.observe_rollout(&labels, None);
        ctx.metrics.forget_analysis(&labels);
        ctx.forget_set(id);
        if let Some(notifier) = &ctx.notifier {
            notifier.forget(id);
        }
    }));
    // The notifier's tasks get the engine's part of the context only: notify needs no controller.
    if let Some((notifier, queues)) = notifier_queues {
        tokio::spawn(notifier::run(notifier.clone(), queues, ctx.engine.clone()));
        tokio::spawn(notifier::observe_on_change(notifier, ctx.engine.clone()));
    }
    let launcher = Launcher {
        config: controller::Config::default().concurrency(settings.concurrency),
        workload_config: controller::Config::default().concurrency(settings.workload_concurrency),
        pacing: pacing_limit(settings.concurrency),
        workload_pacing: pacing_limit(settings.workload_concurrency),
        ctx,
        shutdown: shutdown.clone(),
    };
    let sets_ctl = set_controller::NAME;
    let stores = &scope.stores;
    let controllers = futures::stream::FuturesUnordered::new();
    controllers.push(launcher.controller(
        stores.sets.clone(),
        triggers.sets,
        sets_ctl,
        set_controller::reconcile::<ConfigMapSet>,
        set_controller::error_policy::<ConfigMapSet>,
    ));
    if let Some(store) = &stores.secret_sets {
        controllers.push(launcher.controller(
            store.clone(),
            triggers.secret_sets,
            sets_ctl,
            set_controller::reconcile::<SecretSet>,
            set_controller::error_policy::<SecretSet>,
        ));
    }
    let history_watches = scope.start_leading(&history_client);
    scope
        .lead_workload_kinds(controllers, shutdown, |kind, queue| {
            launcher.workload_controller(kind, queue)
        })
        .await;
    drop(history_watches);
    // The controllers are done (shutdown): the notifications under way finish and are recorded,
    // within the grace period the caller allows, so the next leader sends none of them again.
    if let Some(notifier) = &launcher.ctx.notifier
        && !notifier.drain(NOTIFICATIONS_DRAIN).await
    {
        warn!(
            ?NOTIFICATIONS_DRAIN,
            "notifications still under way at shutdown; the next leader may send them again"
        );
    }
}

/// What starts each controller of a scope: their tuning, the context they share and the shutdown
/// signal.
struct Launcher<Shutdown> {
    config: controller::Config,
    workload_config: controller::Config,
    /// How many triggers each controller may have that have not started (see `engine::pacer`).
    pacing: usize,
    workload_pacing: usize,
    ctx: Arc<Context>,
    shutdown: Shutdown,
}

impl<Shutdown> Launcher<Shutdown>
where
    Shutdown: std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
{
    /// One controller keyed by `K`, reconciling what its store holds and what the index triggers.
    fn controller<K, Reconcile, Fut>(
        &self,
        store: Store<K>,
        triggers: impl Stream<Item = ObjectRef<K>> + Send + 'static,
        name: &'static str,
        reconcile: Reconcile,
        error_policy: fn(Arc<K>, &Error, Arc<Context>) -> controller::Action,
    ) -> BoxFuture<'static, ()>
    where
        K: Object + Indexed,
        Reconcile: Fn(Arc<K>, Arc<Context>) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<controller::Action, Error>> + Send + 'static,
    {
        // Every reconcile comes through `triggers`: the index's, and each object's own changes (see
        // `engine::runtime`'s `stored_watch`), which flow only while this replica leads.
        let pacer = Pacer::new(self.pacing);
        let started = pacer.clone();
        let resync = every_object_each(set_controller::RESYNC, store.clone());
        let stream = Controller::for_shared_stream(futures::stream::pending(), store)
            .with_config(self.config.clone())
            .reconcile_on(paced(futures::stream::select(triggers, resync), pacer.clone()))
            .graceful_shutdown_on(self.shutdown.clone())
            .run(
                // Each reconcile a task of its own, on whichever worker is free (see `tasks`).
                move |obj, ctx| {
                    started.started(
                        obj.meta().namespace.as_deref(),
                        obj.meta().name.as_deref().unwrap_or_default(),
                    );
                    spawn_owned(reconcile(obj, ctx))
                },
                error_policy,
                self.ctx.clone(),
            )
            .inspect(move |r| gone_from_store(r, &pacer))
            .map(|r| r.map_err(|e| crate::platform::redact::controller_error(&e).to_string()));
        log_results(stream, name)
    }

    /// The workload controller of one served kind: stops when the kind stops being served, or at
    /// shutdown.
    fn workload_controller(
        &self,
        kind: &ServedKind,
        queue: futures::channel::mpsc::UnboundedReceiver<ObjectRef<StoredWorkload>>,
    ) -> BoxFuture<'static, ()> {
        let workload_kind = kind.kind;
        let stopped = futures::future::select(self.shutdown.clone().boxed(), kind.stopped().boxed())
            .map(drop)
            .shared();
        let pacer = Pacer::new(self.workload_pacing);
        let started = pacer.clone();
        let stream = Controller::for_shared_stream_with(
            futures::stream::pending(),
            kind.store.clone(),
            kind.resource.clone(),
        )
        .with_config(self.workload_config.clone())
        .reconcile_on(paced(queue, pacer.clone()))
        .graceful_shutdown_on(stopped)
        .run(
            move |obj, ctx| {
                started.started(
                    obj.meta().namespace.as_deref(),
                    obj.meta().name.as_deref().unwrap_or_default(),
                );
                spawn_owned(workload_controller::reconcile(workload_kind, obj, ctx))
            },
            move |obj, error, ctx| workload_controller::error_policy(workload_kind, obj, error, ctx),
            self.ctx.clone(),
        )
        .inspect(move |r| gone_from_store(r, &pacer))
        .map(|r| r.map_err(|e| crate::platform::redact::controller_error(&e).to_string()));
        log_results(stream, workload_controller::NAME)
    }
}

/// How many triggers a controller of `concurrency` may have let through that have not started: eight
/// times as many as it runs at once. The next ones are always ready, and the repeats a burst brings (a
/// set's creation, its revision, its own status write) merge, in the pacer's queue or in the
/// scheduler. The scheduler's room is then that of 128 objects (at the default 16), whatever the
/// number of sets.
fn pacing_limit(concurrency: u16) -> usize {
    usize::from(concurrency.max(1)) * 8
}

/// A trigger whose object was gone from the store by its turn never starts: its place is free.
fn gone_from_store<T, E, QueueErr>(result: &Result<T, controller::Error<E, QueueErr>>, pacer: &Pacer)
where
    E: std::error::Error + 'static,
    QueueErr: std::error::Error + 'static,
{
    if let Err(controller::Error::ObjectNotFound(obj)) = result {
        pacer.started(obj.namespace.as_deref(), &obj.name);
    }
}

/// A tick each `period`, the first one `period` from now (a fresh leader queues everything already).
fn every(period: Duration) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}

/// Every object `store` holds, each `period`: a controller's resync, as triggers, so that it is paced
/// like them (kube-runtime's `reconcile_all_on` would hand the scheduler every object at once).
fn every_object_each<K>(
    period: Duration,
    store: Store<K>,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    every(period).flat_map(move |()| {
        let refs: Vec<ObjectRef<K>> = store
            .state()
            .iter()
            .map(|obj| ObjectRef::from_obj(obj.as_ref()))
            .collect();
        futures::stream::iter(refs)
    })
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_resync_ticks_once_a_period_and_not_at_once() {
        let period = Duration::from_secs(30 * 60);
        let ticks = every(period);
        futures::pin_mut!(ticks);
        let started = tokio::time::Instant::now();
        for n in 1..=3 {
            ticks.next().await.unwrap();
            assert_eq!(started.elapsed(), period * n);
        }
    }

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("team".into()),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    /// The set controllers' resync as `Launcher::controller` wires it, paced like the triggers (here
    /// two at a time): with no trigger and every reconcile awaiting change, each stored object is
    /// reconciled once a period, and only then.
    #[tokio::test(start_paused = true)]
    async fn every_stored_object_is_reconciled_again_each_period_and_only_then() {
        let period = Duration::from_secs(60);
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        for name in ["a", "b", "c"] {
            writer.apply_watcher_event(&Event::InitApply(config_map(name)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let pacer = Pacer::new(2);
        let started = pacer.clone();
        let resync = every_object_each(period, store.clone());
        let controller = Controller::for_shared_stream(futures::stream::pending(), store)
            .reconcile_on(paced(
                futures::stream::select(futures::stream::pending(), resync),
                pacer,
            ))
            .run(
                move |cm: Arc<ConfigMap>, seen: Arc<Mutex<Vec<String>>>| {
                    started.started(
                        cm.meta().namespace.as_deref(),
                        cm.meta().name.as_deref().unwrap_or_default(),
                    );
                    async move {
                        seen.lock().unwrap().push(cm.metadata.name.clone().unwrap());
                        Ok::<_, std::convert::Infallible>(controller::Action::await_change())
                    }
                },
                |_, _, _| controller::Action::await_change(),
                seen.clone(),
            )
            .for_each(|_| async {});
        let begun = tokio::time::Instant::now();
        let run = tokio::spawn(controller);
        let reconciled_by = |at: Duration| {
            let mut names = seen.lock().unwrap().clone();
            names.sort();
            assert!(begun.elapsed() >= at);
            names
        };
        tokio::time::sleep(period - Duration::from_secs(1)).await;
        assert!(
            reconciled_by(period - Duration::from_secs(1)).is_empty(),
            "nothing before the first period"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(reconciled_by(period), ["a", "b", "c"]);
        tokio::time::sleep(period).await;
        assert_eq!(reconciled_by(period * 2), ["a", "a", "b", "b", "c", "c"]);
        run.abort();
    }

    /// What the paced burst's reconciles saw: the names reconciled, and the most triggers waiting.
    type Observed = (Arc<Mutex<Vec<String>>>, Arc<Mutex<usize>>);

    /// A burst paced as `Launcher::controller` paces it: every object is reconciled once however many
    /// triggers it had, never more than the limit are let through unstarted, and a trigger for an object not in the store (deleted
    /// before its turn) gives its place back instead of stalling the rest.
    #[tokio::test(start_paused = true)]
    async fn a_paced_burst_reaches_every_object_and_an_absent_one_frees_its_place() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Init);
        let names: Vec<String> = (0..200).map(|i| format!("cm-{i:03}")).collect();
        for name in &names {
            writer.apply_watcher_event(&Event::InitApply(config_map(name)));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let limit = 4;
        let pacer = Pacer::new(limit);
        let (tx, rx) = futures::channel::mpsc::unbounded();
        // Absent ones first, more of them than the limit: without their places back, nothing else runs.
        for i in 0..limit + 2 {
            tx.unbounded_send(ObjectRef::<ConfigMap>::new(&format!("gone-{i}")).within("team"))
                .unwrap();
        }
        // Each object twice: the repeat, queued behind the limit, merges into the first.
        for name in names.iter().chain(&names) {
            tx.unbounded_send(ObjectRef::new(name).within("team")).unwrap();
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let most_waiting = Arc::new(Mutex::new(0));
        let started = pacer.clone();
        let watched = pacer.clone();
        let controller = Controller::for_shared_stream(futures::stream::pending(), store)
            .with_config(controller::Config::default().concurrency(2))
            .reconcile_on(paced(rx, pacer.clone()))
            .run(
                move |cm: Arc<ConfigMap>, ctx: Arc<Observed>| {
                    let waiting = watched.waiting();
                    let mut most = ctx.1.lock().unwrap();
                    *most = (*most).max(waiting);
                    drop(most);
                    started.started(
                        cm.meta().namespace.as_deref(),
                        cm.meta().name.as_deref().unwrap_or_default(),
                    );
                    async move {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        ctx.0.lock().unwrap().push(cm.metadata.name.clone().unwrap());
                        Ok::<_, std::convert::Infallible>(controller::Action::await_change())
                    }
                },
                |_, _, _| controller::Action::await_change(),
                Arc::new((seen.clone(), most_waiting.clone())),
            )
            .inspect(move |r| gone_from_store(r, &pacer))
            .for_each(|_| async {});
        let run = tokio::spawn(controller);
        // Paused time: this passes at once. Shorter than the pacer's safety net (`STALE`), so the
        // absent ones' places can only have come back through `gone_from_store`.
        tokio::time::sleep(crate::engine::pacer::STALE / 2).await;
        let mut reconciled = seen.lock().unwrap().clone();
        reconciled.sort();
        assert_eq!(reconciled, names, "every object once, the absent ones never");
        assert!(*most_waiting.lock().unwrap() <= limit);
        run.abort();
    }
}
