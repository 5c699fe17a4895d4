//! The notifier's promises: the records list it wrote stands until the store shows it, a flood is
//! counted and never waits, dropped sets come back, retries land or fail for good, a namespace that
//! floods delays only itself, and shutdown waits for a delivery under way.

use cmset_core::set::SetKind;

use super::*;

fn record(trigger: &str, once: &str) -> NotificationStatus {
    NotificationStatus {
        trigger: trigger.into(),
        service: "hook".into(),
        once: once.into(),
        result: NotificationResult::Delivered,
        ..Default::default()
    }
}

fn set() -> SetId {
    (SetKind::ConfigMapSet, Key::new("shop", "web"))
}

#[test]
fn a_list_written_stands_for_the_sets_until_the_store_shows_it() {
    let mut state = State::default();
    let written = vec![record("on-rollout-failed", "web-2@t")];
    state.pending.insert(set(), (Instant::now(), written.clone()));
    // The store is behind: the list written is what the set has.
    let behind = vec![record("on-rollout-failed", "")];
    assert_eq!(state.records(&set(), &behind), written);
    assert!(state.pending.contains_key(&set()));
    // The store caught up: its list, and nothing pending.
    assert_eq!(state.records(&set(), &written), written);
    assert!(state.pending.is_empty());
}

#[test]
fn a_list_written_long_ago_gives_way_to_the_stores() {
    let mut state = State::default();
    let long_ago = Instant::now()
        .checked_sub(PENDING_FOR + Duration::from_secs(1))
        .expect("the clock is past that");
    state
        .pending
        .insert(set(), (long_ago, vec![record("on-rollout-failed", "web-2@t")]));
    let stored = vec![record("on-rollout-failed", "edited")];
    assert_eq!(state.records(&set(), &stored), stored);
    assert!(state.pending.is_empty());
}

#[tokio::test]
async fn shutdown_waits_for_a_delivery_under_way_and_then_queues_nothing() {
    let (_tx, loaded) = watch::channel(Arc::new(Loaded::default()));
    let (notifier, _queues) = Notifier::new(loaded, Policy::default());
    let flight = (set(), records::key_of(&record("on-rollout-failed", "")));
    notifier.state().in_flight.insert(flight.clone());
    assert!(
        !notifier.drain(Duration::from_millis(120)).await,
        "still under way"
    );
    assert!(notifier.closing.load(Ordering::SeqCst));
    notifier.state().in_flight.remove(&flight);
    assert!(notifier.drain(Duration::from_millis(120)).await);
}

fn context(metrics: Arc<crate::platform::metrics::Metrics>) -> Context {
    context_with_store(metrics).0
}

/// A context, and the writer of its store of ConfigMapSets.
fn context_with_store(
    metrics: Arc<crate::platform::metrics::Metrics>,
) -> (
    Context,
    kube::runtime::reflector::store::Writer<cmset_api::ConfigMapSet>,
) {
    context_with_clock(metrics, crate::engine::context::system_clock())
}

/// A context reading `clock`, and the writer of its store of ConfigMapSets.
fn context_with_clock(
    metrics: Arc<crate::platform::metrics::Metrics>,
    clock: crate::engine::context::Clock,
) -> (
    Context,
    kube::runtime::reflector::store::Writer<cmset_api::ConfigMapSet>,
) {
    use std::sync::RwLock;
    let (service, _handle) =
        tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
    let (sets, writer) = kube::runtime::reflector::store::<cmset_api::ConfigMapSet>();
    let stores = crate::engine::stores::Stores {
        sets,
        secret_sets: None,
        workloads: Arc::new(RwLock::new(HashMap::new())),
        templates: None,
    };
    let ctx = Context::new(
        kube::Client::new(service, "team"),
        Arc::new(crate::engine::index::Index::new(None)),
        stores,
        metrics,
        clock,
        None,
    );
    (ctx, writer)
}

/// A failed set `name` subscribed to `on-rollout-failed` through the webhook `hook`, whose record
/// heard nothing yet.
fn failing_set(name: &str) -> cmset_api::ConfigMapSet {
    failing_set_via(name, &["hook"])
}

/// A failed set `name` subscribed to `on-rollout-failed` through each webhook of `services`,
/// whose records heard nothing yet.
fn failing_set_via(name: &str, services: &[&str]) -> cmset_api::ConfigMapSet {
    let mut set = cmset_api::ConfigMapSet::new(name, Default::default());
    set.metadata.namespace = Some("shop".into());
    let subscribe = |service: &str| {
        (
            format!("notifications.cmset.dev/subscribe.on-rollout-failed.{service}"),
            String::new(),
        )
    };
    set.metadata.annotations = Some(services.iter().copied().map(subscribe).collect());
    let heard_nothing = |service: &str| NotificationStatus {
        result: NotificationResult::Subscribed,
        service: service.into(),
        ..record("on-rollout-failed", "")
    };
    set.status = Some(cmset_api::ConfigMapSetStatus {
        rollout: Some(cmset_api::RolloutStatus {
            revision: format!("{name}-2"),
            phase: cmset_api::RolloutPhase::Failed,
            ..Default::default()
        }),
        notifications: Some(services.iter().copied().map(heard_nothing).collect()),
        ..Default::default()
    });
    set
}

/// A notification configuration with a webhook service of each name of `services`.
fn webhooks(services: &[&str]) -> Loaded {
    let data = services
        .iter()
        .map(|s| {
            (
                format!("service.webhook.{s}"),
                format!("url: http://127.0.0.1:9/{s}"),
            )
        })
        .collect();
    let (config, problems) = cmset_core::notify::config::parse(&data, &Default::default());
    assert!(problems.is_empty(), "{problems:?}");
    Loaded {
        config: Some(config),
        problems,
    }
}

fn dropped_count(metrics: &crate::platform::metrics::Metrics, service: &str) -> u64 {
    metrics
        .notifications
        .get_or_create(&NotificationLabels {
            service: service.into(),
            trigger: "on-rollout-failed".into(),
            result: "dropped",
        })
        .get()
}

#[tokio::test]
async fn a_flood_fills_the_queue_counts_the_overflow_and_never_waits() {
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let ctx = context(metrics.clone());
    let data = [(
        "service.webhook.hook".to_string(),
        "url: http://127.0.0.1:9/hook".to_string(),
    )]
    .into();
    let (config, problems) = cmset_core::notify::config::parse(&data, &Default::default());
    assert!(problems.is_empty(), "{problems:?}");
    let loaded = Loaded {
        config: Some(config),
        problems,
    };
    let (_tx, rx) = watch::channel(Arc::new(loaded));
    // No task takes from the queue: every delivery waits there. One namespace may fill it all.
    let (notifier, _queues) = Notifier::with_share(rx, Policy::default(), QUEUE);
    let started = Instant::now();
    for i in 0..QUEUE + 100 {
        notifier.observe(&ctx, SetRef::ConfigMap(&failing_set(&format!("set-{i}"))));
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "observing never waits for the queue"
    );
    let dropped = || {
        metrics
            .notifications
            .get_or_create(&NotificationLabels {
                service: "hook".into(),
                trigger: "on-rollout-failed".into(),
                result: "dropped",
            })
            .get()
    };
    assert_eq!(dropped(), 100);
    assert_eq!(notifier.state().in_flight.len(), QUEUE);
    // Seen again, a set queued already is not queued twice, and one dropped is tried again.
    notifier.observe(&ctx, SetRef::ConfigMap(&failing_set("set-0")));
    notifier.observe(
        &ctx,
        SetRef::ConfigMap(&failing_set(&format!("set-{}", QUEUE + 1))),
    );
    assert_eq!(notifier.state().in_flight.len(), QUEUE);
    assert_eq!(dropped(), 101);
    // The sets dropped are remembered, each once, to be observed again when the queue has room.
    assert_eq!(notifier.state().dropped.len(), 100);
    assert_eq!(metrics.notification_retries_forgotten.get(), 0);
}

#[test]
fn dropped_sets_are_remembered_once_oldest_first_and_up_to_a_cap() {
    let mut dropped = Dropped::default();
    for name in ["a", "b", "a", "c"] {
        assert!(dropped.remember(&set_id(name), 3));
    }
    assert_eq!(dropped.len(), 3, "each set once");
    assert!(!dropped.remember(&set_id("d"), 3), "past the cap: not remembered");
    assert!(dropped.remember(&set_id("b"), 3), "one remembered already stays");
    dropped.forget(&set_id("b"));
    assert_eq!(dropped.take(5), vec![set_id("a"), set_id("c")]);
    assert_eq!(dropped.len(), 0);
    assert!(dropped.order.is_empty());
    // Taken, then remembered again: behind those remembered meanwhile.
    for name in ["x", "y", "z"] {
        dropped.remember(&set_id(name), 3);
    }
    assert_eq!(dropped.take(1), vec![set_id("x")]);
    dropped.remember(&set_id("x"), 3);
    assert_eq!(dropped.take(3), vec![set_id("y"), set_id("z"), set_id("x")]);
    assert_eq!(dropped.take(1), vec![]);
}

/// Issue 27: sets whose every notification was dropped write nothing, so nothing reconciles them.
/// As deliveries finish, the notifier observes them again from the store, no more of them than the
/// queue has room for, until each notification was queued exactly once.
#[tokio::test]
async fn sets_whose_every_notification_was_dropped_are_queued_as_deliveries_finish() {
    const SERVICES: [&str; 2] = ["hook", "hook2"];
    // Half the queue's worth of sets fills it (two notifications each); the next ones drop both.
    const FILLING: usize = QUEUE / 2;
    const SETS: usize = FILLING + 60;
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let (ctx, mut store) = context_with_store(metrics.clone());
    let (_tx, rx) = watch::channel(Arc::new(webhooks(&SERVICES)));
    // No task takes from the queue: the test plays the workers. One namespace may fill it all.
    let (notifier, queues) = Notifier::with_share(rx, Policy::default(), QUEUE);
    let name = |i: usize| format!("set-{i}");
    for i in 0..SETS {
        let set = failing_set_via(&name(i), &SERVICES);
        store.apply_watcher_event(&kube::runtime::watcher::Event::Apply(set.clone()));
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
    }
    let dropped_now = || SERVICES.iter().map(|s| dropped_count(&metrics, s)).sum::<u64>();
    assert_eq!(dropped_now(), 2 * (SETS - FILLING) as u64);
    assert_eq!(notifier.state().dropped.len(), SETS - FILLING);
    // One of them is deleted before its turn comes: it is forgotten, not observed.
    let deleted = failing_set_via(&name(SETS - 1), &SERVICES);
    store.apply_watcher_event(&kube::runtime::watcher::Event::Delete(deleted));

    // Deliveries finish in batches of 1 to WORKERS, with no reconcile of any set meanwhile.
    let mut queued: HashMap<(SetId, SubscriptionKey), u32> = HashMap::new();
    let (mut round, mut retried_total) = (0, 0);
    loop {
        let batch: Vec<Delivery> = (0..=round % WORKERS)
            .map_while(|_| queues.deliveries.try_recv().ok())
            .collect();
        if batch.is_empty() {
            break;
        }
        round += 1;
        for delivery in batch {
            *queued
                .entry((delivery.set.clone(), delivery.key.clone()))
                .or_default() += 1;
            let free = notifier.deliveries.free();
            let record = NotificationStatus {
                result: NotificationResult::Delivered,
                ..records::subscribed(&delivery.key, &delivery.once, &(ctx.clock)())
            };
            let retried = notifier.finished(&ctx, &delivery, record);
            assert!(
                retried <= free,
                "{retried} sets observed again for {free} free slots"
            );
            retried_total += retried;
        }
    }

    // Every notification of every set still there was queued, each exactly once.
    let twice: Vec<_> = queued.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "queued more than once: {twice:?}");
    assert_eq!(queued.len(), 2 * (SETS - 1));
    for i in 0..SETS - 1 {
        for service in SERVICES {
            let key = SubscriptionKey {
                trigger: "on-rollout-failed".into(),
                condition: cmset_core::notify::triggers::built_in("on-rollout-failed")
                    .unwrap()
                    .conditions[0]
                    .key(),
                service: service.into(),
                recipient: String::new(),
            };
            assert!(
                queued.contains_key(&(set_id(&name(i)), key)),
                "set {i} via {service}"
            );
        }
    }
    assert!(
        !queued.keys().any(|(set, _)| *set == set_id(&name(SETS - 1))),
        "the deleted set is not sent"
    );
    let state = notifier.state();
    assert_eq!(state.dropped.len(), 0, "nothing left to try again");
    assert!(state.in_flight.is_empty());
    assert!(
        retried_total >= SETS - FILLING,
        "each dropped set was observed again ({retried_total})"
    );
    assert_eq!(metrics.notification_retries_forgotten.get(), 0);
}

#[tokio::test]
async fn past_the_cap_a_dropped_set_is_counted_and_left_to_its_next_reconcile() {
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let ctx = context(metrics.clone());
    let (_tx, rx) = watch::channel(Arc::new(webhooks(&["hook"])));
    let (mut notifier, _queues) = Notifier::with_share(rx, Policy::default(), QUEUE);
    notifier.remembered_max = 10;
    for i in 0..QUEUE + 25 {
        notifier.observe(&ctx, SetRef::ConfigMap(&failing_set(&format!("set-{i}"))));
    }
    assert_eq!(dropped_count(&metrics, "hook"), 25);
    assert_eq!(notifier.state().dropped.len(), 10);
    assert_eq!(metrics.notification_retries_forgotten.get(), 15);
    // Forgotten with the set.
    notifier.forget(&set_id(&format!("set-{QUEUE}")));
    assert_eq!(notifier.state().dropped.len(), 9);
}

#[tokio::test]
async fn a_bad_subscription_is_reported_once_not_at_every_reconcile() {
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let ctx = context(metrics.clone());
    let data = [("service.slack".to_string(), "token: xoxb-1".to_string())].into();
    let (config, _) = cmset_core::notify::config::parse(&data, &Default::default());
    let (_tx, rx) = watch::channel(Arc::new(Loaded {
        config: Some(config),
        problems: vec![],
    }));
    let (notifier, _queues) = Notifier::new(rx, Policy::default());
    let mut set = cmset_api::ConfigMapSet::new("web", Default::default());
    set.metadata.namespace = Some("shop".into());
    // A set may not name a URL of its own.
    set.metadata.annotations = Some(
        [(
            "notifications.cmset.dev/subscribe.on-rollout-failed.slack".to_string(),
            "https://hooks.example.invalid/T0/B0/secret".to_string(),
        )]
        .into(),
    );
    for _ in 0..3 {
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
    }
    let reported = notifier
        .state()
        .reported
        .get(&set_id("web"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        !format!("{reported:?}").contains("secret"),
        "the refused recipient is not quoted"
    );
    // One Event, sent off the reconcile path.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events = metrics
        .writes
        .get_or_create(&crate::platform::metrics::WriteLabel {
            operation: "publish_event",
        })
        .get();
    assert_eq!(events, 1);
    // Fixed: forgotten, and a later problem is told again.
    set.metadata.annotations = None;
    notifier.observe(&ctx, SetRef::ConfigMap(&set));
    assert!(!notifier.state().reported.contains_key(&set_id("web")));
}

fn set_id(name: &str) -> SetId {
    (SetKind::ConfigMapSet, Key::new("shop", name))
}

#[test]
fn without_a_list_written_the_stores_is_the_sets() {
    let mut state = State::default();
    let stored = vec![record("on-rollout-completed", "web-1@t")];
    assert_eq!(state.records(&set(), &stored), stored);
}

/// A receiver on 127.0.0.1 answering 503 to its first `failing` requests and 200 after; its URL
/// and how many requests it saw.
async fn receiver(failing: usize) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            if counter.fetch_add(1, Ordering::SeqCst) < failing {
                axum::http::StatusCode::SERVICE_UNAVAILABLE
            } else {
                axum::http::StatusCode::OK
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/hook"), seen)
}

/// A clock the test moves, and the context that reads it.
struct Moved {
    now: Arc<Mutex<jiff::Timestamp>>,
}

impl Moved {
    fn clock(&self) -> crate::engine::context::Clock {
        let now = self.now.clone();
        Arc::new(move || k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(*now.lock().unwrap()))
    }

    fn advance(&self, seconds: i64) {
        let mut now = self.now.lock().unwrap();
        *now = now.checked_add(jiff::SignedDuration::from_secs(seconds)).unwrap();
    }
}

/// A notifier for one webhook `hook` at `url` that does not retry within a delivery, its queues,
/// its context and the set `web` (failed, subscribed to `on-rollout-failed`) in its store.
fn retrying_notifier(
    url: &str,
    max_age: Duration,
    moved: &Moved,
    metrics: Arc<crate::platform::metrics::Metrics>,
) -> (Notifier, Queues, Context, cmset_api::ConfigMapSet) {
    let (ctx, mut store) = context_with_clock(metrics, moved.clock());
    let data = [(
        "service.webhook.hook".to_string(),
        format!("url: {url}\nretries: 0\ntimeout: 2s"),
    )]
    .into();
    let (config, problems) = cmset_core::notify::config::parse(&data, &Default::default());
    assert!(problems.is_empty(), "{problems:?}");
    let (_tx, rx) = watch::channel(Arc::new(Loaded {
        config: Some(config),
        problems,
    }));
    let (notifier, queues) = Notifier::new(
        rx,
        Policy {
            max_age,
            ..Policy::default()
        },
    );
    let set = failing_set("web");
    store.apply_watcher_event(&kube::runtime::watcher::Event::Apply(set.clone()));
    (notifier, queues, ctx, set)
}

fn the_record(notifier: &Notifier) -> NotificationStatus {
    let state = notifier.state();
    let (_, list) = state.pending.get(&set_id("web")).expect("a record written");
    assert_eq!(list.len(), 1, "{list:?}");
    list[0].clone()
}

/// Issue 36: a receiver that answers 503 for a while hears of the failed rollout once it is back:
/// each retryable failure is recorded `Retrying` (not `Failed`), the set is looked at again when
/// the backoff has passed (not before), and the event is delivered exactly once.
#[tokio::test]
async fn a_retryable_failure_is_retried_until_it_lands() {
    let (url, seen) = receiver(3).await;
    let moved = Moved {
        now: Arc::new(Mutex::new("2026-11-26T09:00:00Z".parse().unwrap())),
    };
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let (notifier, queues, ctx, set) =
        retrying_notifier(&url, Duration::from_secs(3600), &moved, metrics.clone());
    let sender = Sender::new();
    notifier.observe(&ctx, SetRef::ConfigMap(&set));
    for attempt in 1..=3 {
        let delivery = queues.deliveries.try_recv().expect("queued");
        deliver(&notifier, &ctx, &sender, delivery).await;
        let record = the_record(&notifier);
        assert_eq!(record.result, NotificationResult::Retrying, "{record:?}");
        assert_eq!(record.attempts, attempt);
        assert_eq!(
            record.first_attempt.as_ref().map(|t| t.0.to_string()).as_deref(),
            Some("2026-11-26T09:00:00Z")
        );
        assert!(
            notifier.state().wakes.contains_key(&set_id("web")),
            "a wake is asked for"
        );
        // Not due yet: nothing queued.
        moved.advance(1);
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
        assert!(queues.deliveries.try_recv().is_err(), "sent before its backoff");
        moved.advance(60);
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
    }
    let delivery = queues.deliveries.try_recv().expect("queued once due");
    deliver(&notifier, &ctx, &sender, delivery).await;
    let record = the_record(&notifier);
    assert_eq!(
        (record.result, record.attempts),
        (NotificationResult::Delivered, 4)
    );
    moved.advance(3600);
    notifier.observe(&ctx, SetRef::ConfigMap(&set));
    assert!(queues.deliveries.try_recv().is_err(), "delivered once");
    assert_eq!(seen.load(Ordering::SeqCst), 4);
    let counted = |result| {
        metrics
            .notifications
            .get_or_create(&NotificationLabels {
                service: "hook".into(),
                trigger: "on-rollout-failed".into(),
                result,
            })
            .get()
    };
    assert_eq!(
        (counted("retrying"), counted("delivered"), counted("failed")),
        (3, 1, 0)
    );
}

/// Past the maximum age since its first attempt, a notification that still fails is `Failed`,
/// and nothing more is sent for that event.
#[tokio::test]
async fn past_the_maximum_age_a_retried_notification_fails_for_good() {
    let (url, seen) = receiver(usize::MAX).await;
    let moved = Moved {
        now: Arc::new(Mutex::new("2026-11-26T09:00:00Z".parse().unwrap())),
    };
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let (notifier, queues, ctx, set) = retrying_notifier(&url, Duration::from_secs(90), &moved, metrics);
    let sender = Sender::new();
    notifier.observe(&ctx, SetRef::ConfigMap(&set));
    let mut results = Vec::new();
    while let Ok(delivery) = queues.deliveries.try_recv() {
        deliver(&notifier, &ctx, &sender, delivery).await;
        results.push(the_record(&notifier).result);
        moved.advance(60);
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
        assert!(results.len() < 10, "{results:?}");
    }
    use NotificationResult::{Failed, Retrying};
    assert_eq!(results, [Retrying, Retrying, Failed]);
    assert_eq!(seen.load(Ordering::SeqCst), 3);
    moved.advance(3600);
    notifier.observe(&ctx, SetRef::ConfigMap(&set));
    assert!(queues.deliveries.try_recv().is_err());
}

/// Issue 36: an annotation naming 200 Slack channels through the admin's bot token sends nothing
/// (more than `max_recipients`), and one Warning Event says why, without the channels.
#[tokio::test]
async fn a_set_naming_200_channels_queues_nothing_and_is_told_why() {
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let ctx = context(metrics.clone());
    let data = [("service.slack".to_string(), "token: xoxb-1".to_string())].into();
    let (config, _) = cmset_core::notify::config::parse(&data, &Default::default());
    let (_tx, rx) = watch::channel(Arc::new(Loaded {
        config: Some(config),
        problems: vec![],
    }));
    let (notifier, queues) = Notifier::new(rx, Policy::default());
    let mut set = failing_set("web");
    let channels: Vec<String> = (0..200).map(|i| format!("#team-{i}")).collect();
    set.metadata.annotations = Some(
        [(
            "notifications.cmset.dev/subscribe.on-rollout-failed.slack".to_string(),
            channels.join(";"),
        )]
        .into(),
    );
    set.status.as_mut().unwrap().notifications = None;
    for _ in 0..3 {
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
    }
    let mut queued = 0;
    while queues.deliveries.try_recv().is_ok() {
        queued += 1;
    }
    assert_eq!(queued, 0, "at most 10, and in fact none");
    let (pending, reported) = {
        let state = notifier.state();
        let reported = state.reported.get(&set_id("web")).cloned();
        (
            state.pending.contains_key(&set_id("web")),
            reported.unwrap_or_default(),
        )
    };
    assert!(!pending, "no subscription recorded");
    assert_eq!(reported.len(), 1, "{reported:?}");
    assert!(
        reported[0].message.contains("names 200 recipients"),
        "{reported:?}"
    );
    assert!(!reported[0].message.contains("#team-"), "{reported:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let events = metrics
        .writes
        .get_or_create(&crate::platform::metrics::WriteLabel {
            operation: "publish_event",
        })
        .get();
    assert_eq!(events, 1);
}

/// Issue 36: queues are fair per namespace. With 500 deliveries of one namespace queued, another
/// namespace's single one goes out among the first few, and the flood's overflow is its own.
#[tokio::test]
async fn a_flooding_namespace_delays_only_its_own_notifications() {
    let metrics = Arc::new(crate::platform::metrics::Metrics::default());
    let ctx = context(metrics.clone());
    let (_tx, rx) = watch::channel(Arc::new(webhooks(&["hook"])));
    let (notifier, queues) = Notifier::new(rx, Policy::default());
    for i in 0..500 {
        let mut set = failing_set(&format!("flood-{i}"));
        set.metadata.namespace = Some("flood".into());
        notifier.observe(&ctx, SetRef::ConfigMap(&set));
    }
    let mut quiet = failing_set("web");
    quiet.metadata.namespace = Some("quiet".into());
    notifier.observe(&ctx, SetRef::ConfigMap(&quiet));
    // The flood fills its share; the rest was dropped (and is remembered), the quiet set was not.
    assert_eq!(dropped_count(&metrics, "hook"), (500 - PER_NAMESPACE) as u64);
    let first: Vec<String> = (0..3)
        .map(|_| {
            queues
                .deliveries
                .try_recv()
                .expect("queued")
                .set
                .1
                .namespace
                .to_string()
        })
        .collect();
    assert!(first.contains(&"quiet".to_string()), "{first:?}");
    assert_eq!(first, ["flood", "quiet", "flood"]);
    // Two of the flood's deliveries went: two of its dropped sets are looked at again, no more
    // (the others would only drop again).
    assert_eq!(notifier.retry_dropped(&ctx), 2);
    assert_eq!(notifier.state().dropped.len(), 500 - PER_NAMESPACE - 2);
}
