//! The leader's notifier: each set reconcile tells it the set as the store shows it
//! ([`Notifier::observe`]), which asks the core what the set's records should be and what to send
//! (`cmset_core::notify::records::compose`, outside the notifier's lock: it renders the messages),
//! and queues the deliveries. Nothing here makes a reconcile wait: deliveries run on [`WORKERS`] tasks
//! from a queue of [`QUEUE`], fair between namespaces ([`FairQueue`]: each namespace's turn in order,
//! at most [`PER_NAMESPACE`] of one namespace), so one namespace's flood delays its own messages and
//! not the others'. A notification that finds the queue (or its namespace's share) full is counted as
//! dropped and sent later, since nothing recorded it.
//!
//! "Later" must not wait for a reconcile that may not come: a set whose every notification was
//! dropped writes nothing, so nothing reconciles it until the set controller's resync. The notifier
//! therefore remembers the sets it dropped a notification of (their keys, each once, at most
//! [`REMEMBERED`]; one more is counted in `cmset_notification_retries_forgotten_total` and waits for
//! its next reconcile), oldest first. Each time a delivery finishes, it observes again, as the store
//! shows them now, at most as many of those sets as the queue has free slots, and only of namespaces
//! with room in their share (`retry_dropped`). A set deleted meanwhile is forgotten. So a flood drains
//! at the pace of the deliveries, and a finished delivery costs at most one observation per free slot
//! (and a scan of at most [`SCANNED`] keys), however many sets there are.
//!
//! The records live in the set's `status.notifications`, written by one task under the field manager
//! [`FIELD_MANAGER`], one set at a time, so two deliveries to one set cannot write over each other.
//! Until the store shows a list this process wrote, that list (`pending`) is what the set is taken to
//! have: a reconcile in between sends nothing twice.
//!
//! A delivery that failed in a way that may pass is recorded `Retrying` (the core decides, from the
//! record it had and [`Policy::max_age`]); the notifier then observes the set again when the record is
//! due (`wake_retries`), so the retry does not wait for a reconcile either. The record, not this
//! memory, says what is owed: a new leader finds it at its first reconcile of the set.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cmset_api::{NotificationResult, NotificationStatus};
use cmset_core::notify::records::{self, Composed};
use cmset_core::notify::request::{self, HttpRequest};
use cmset_core::notify::triggers::SubscriptionKey;
use cmset_core::notify::{Problem, SetView, config::Service, subscriptions};
use cmset_core::set::{SetKind, SetRef};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use super::config_watch::Loaded;
use super::fair_queue::FairQueue;
use super::sender::{Outcome, Sender};
use crate::engine::context::Context;
use crate::engine::index::{Key, SetId};
use crate::platform::metrics::NotificationLabels;

/// The field manager of `status.notifications`.
pub const FIELD_MANAGER: &str = "cmset-notifications";
/// Deliveries waiting at most; beyond, dropped (the set is remembered and observed again once the
/// queue has room).
pub const QUEUE: usize = 1024;
/// Sets with a dropped notification remembered at most. Each is remembered once, so this is only
/// reached with more sets than this dropping at once; a set's key is about a hundred bytes.
pub const REMEMBERED: usize = 16 * QUEUE;
/// Remembered sets looked at, at most, when the queue has room: a bound on the work of each finished
/// delivery when most remembered sets are of a namespace whose share is full.
const SCANNED: usize = 4 * QUEUE;
/// Deliveries of one namespace waiting at most: a flood leaves the rest of the queue to the others.
pub const PER_NAMESPACE: usize = QUEUE / 4;
/// Deliveries in flight at once: a receiver that never answers holds one of them for its timeouts.
pub const WORKERS: usize = 8;
/// How long a list this process wrote stands in for the set's until the store shows it: past that,
/// someone else changed it and the store is right.
const PENDING_FOR: Duration = Duration::from_secs(120);
/// How long after a failed write of records it is tried again.
const WRITE_RETRY: Duration = Duration::from_secs(5);

/// The admin's bounds on notifications, from the operator's flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// How long a notification that fails in a way that may pass is tried again, from its first
    /// attempt (`--notifications-max-age`).
    pub max_age: Duration,
    /// Recipients one set may name in all its annotations (`--notifications-max-recipients`).
    pub max_recipients: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(3600),
            max_recipients: subscriptions::DEFAULT_MAX_RECIPIENTS,
        }
    }
}

/// One notification to deliver: every message of it, then its record.
struct Delivery {
    set: SetId,
    regarding: ObjectReference,
    key: SubscriptionKey,
    once: String,
    /// The record it had when queued: a `Retrying` one carries the first attempt and the attempts.
    previous: Option<NotificationStatus>,
    service: Service,
    requests: Vec<HttpRequest>,
}

/// The sets that had a notification dropped, oldest first, each once: what [`Notifier::retry_dropped`]
/// observes again. Keys only, never the sets.
#[derive(Default)]
struct Dropped {
    /// Each set's place in `order`.
    place: HashMap<SetId, u64>,
    order: BTreeMap<u64, SetId>,
    next: u64,
}

impl Dropped {
    /// Remembers `set`, unless it is remembered already. Whether it is remembered now (`false`: `cap`
    /// sets are, and it is not one of them).
    fn remember(&mut self, set: &SetId, cap: usize) -> bool {
        if self.place.contains_key(set) {
            return true;
        }
        if self.place.len() >= cap {
            return false;
        }
        self.place.insert(set.clone(), self.next);
        self.order.insert(self.next, set.clone());
        self.next += 1;
        true
    }

    fn forget(&mut self, set: &SetId) {
        if let Some(place) = self.place.remove(set) {
            self.order.remove(&place);
        }
    }

    /// Up to `n` of the sets remembered longest that `fits` accepts, forgotten; the others keep their
    /// place. At most [`SCANNED`] sets are looked at.
    fn take_fitting(&mut self, n: usize, mut fits: impl FnMut(&SetId) -> bool) -> Vec<SetId> {
        let chosen: Vec<u64> = self
            .order
            .iter()
            .take(SCANNED)
            .filter(|(_, set)| fits(set))
            .map(|(place, _)| *place)
            .take(n)
            .collect();
        chosen
            .into_iter()
            .filter_map(|place| {
                let set = self.order.remove(&place)?;
                self.place.remove(&set);
                Some(set)
            })
            .collect()
    }

    /// The `n` sets remembered longest, forgotten.
    #[cfg(test)]
    fn take(&mut self, n: usize) -> Vec<SetId> {
        self.take_fitting(n, |_| true)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.place.len()
    }
}

#[derive(Default)]
struct State {
    /// Subscriptions of sets being delivered now: not queued twice.
    in_flight: HashSet<(SetId, SubscriptionKey)>,
    /// Lists written (or to write) that the store does not show yet.
    pending: HashMap<SetId, (Instant, Vec<NotificationStatus>)>,
    /// What is wrong with each set's subscriptions, as last reported: told once, not at every reconcile.
    reported: HashMap<SetId, Vec<Problem>>,
    /// Sets with a notification dropped since they were last observed.
    dropped: Dropped,
    /// When each set with a `Retrying` record is to be observed again (the earliest asked for).
    wakes: HashMap<SetId, tokio::time::Instant>,
}

impl State {
    /// Logs `problems` and names them in a Warning Event on the set, when they differ from those last
    /// reported for it.
    fn report(&mut self, ctx: &Context, set: SetRef<'_>, id: &SetId, mut problems: Vec<Problem>) {
        problems.sort();
        problems.dedup();
        let before = self.reported.get(id).map_or(&[][..], Vec::as_slice);
        if before == problems.as_slice() {
            return;
        }
        for problem in &problems {
            warn!(set = %set.name(), key = %problem.key, problem = %problem.message, "notification subscription not taken as written");
        }
        if problems.is_empty() {
            self.reported.remove(id);
            return;
        }
        let note = problems.iter().map(ToString::to_string).collect::<Vec<_>>();
        ctx.publish_soon(
            Event {
                type_: EventType::Warning,
                reason: "InvalidNotificationSubscription".into(),
                note: Some(cmset_core::status::message::join_capped(
                    &note,
                    cmset_core::rollout::plan::EVENT_MESSAGE_MAX_LEN,
                )),
                action: "Notify".into(),
                secondary: None,
            },
            reference(set),
        );
        self.reported.insert(id.clone(), problems);
    }

    /// The set's records: the pending list while the store has not caught up with it, else the
    /// store's (and the pending list goes).
    fn records(&mut self, set: &SetId, stored: &[NotificationStatus]) -> Vec<NotificationStatus> {
        match self.pending.get(set) {
            Some((since, list)) if list.as_slice() != stored && since.elapsed() < PENDING_FOR => list.clone(),
            Some(_) => {
                self.pending.remove(set);
                stored.to_vec()
            }
            None => stored.to_vec(),
        }
    }
}

pub struct Notifier {
    loaded: watch::Receiver<Arc<Loaded>>,
    deliveries: Arc<FairQueue<Delivery>>,
    writes: mpsc::UnboundedSender<SetId>,
    wakes: mpsc::UnboundedSender<(SetId, tokio::time::Instant)>,
    policy: Policy,
    state: Mutex<State>,
    /// Set at shutdown: nothing new is queued, what is under way finishes (see [`Notifier::drain`]).
    closing: AtomicBool,
    /// Writes of records queued or being made.
    writes_outstanding: AtomicUsize,
    /// Held while dropped sets are observed again: one delivery's free slots are not counted by two.
    retrying: Mutex<()>,
    /// Sets remembered at most ([`REMEMBERED`]; smaller in tests).
    remembered_max: usize,
}

/// What the notifier's tasks take from: handed to [`run`].
pub struct Queues {
    deliveries: Arc<FairQueue<Delivery>>,
    writes: mpsc::UnboundedReceiver<SetId>,
    wakes: mpsc::UnboundedReceiver<(SetId, tokio::time::Instant)>,
}

impl Notifier {
    pub fn new(loaded: watch::Receiver<Arc<Loaded>>, policy: Policy) -> (Self, Queues) {
        Self::with_share(loaded, policy, PER_NAMESPACE)
    }

    /// With `per_namespace` deliveries of one namespace queued at most.
    fn with_share(
        loaded: watch::Receiver<Arc<Loaded>>,
        policy: Policy,
        per_namespace: usize,
    ) -> (Self, Queues) {
        let deliveries = Arc::new(FairQueue::new(QUEUE, per_namespace));
        let (writes_tx, writes) = mpsc::unbounded_channel();
        let (wakes_tx, wakes) = mpsc::unbounded_channel();
        let notifier = Self {
            loaded,
            deliveries: deliveries.clone(),
            writes: writes_tx,
            wakes: wakes_tx,
            policy,
            state: Mutex::default(),
            closing: AtomicBool::new(false),
            writes_outstanding: AtomicUsize::new(0),
            retrying: Mutex::default(),
            remembered_max: REMEMBERED,
        };
        (
            notifier,
            Queues {
                deliveries,
                writes,
                wakes,
            },
        )
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes in `set` as the store shows it: records new and gone subscriptions, and queues what to
    /// send. Cheap when nothing is configured or the set has no subscription and no record.
    pub fn observe(&self, ctx: &Context, set: SetRef<'_>) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let loaded = self.loaded.borrow().clone();
        let Some(config) = loaded.config.as_ref() else {
            return;
        };
        let empty = Default::default();
        let meta = set.metadata();
        let (labels, annotations) = (
            meta.labels.as_ref().unwrap_or(&empty),
            meta.annotations.as_ref().unwrap_or(&empty),
        );
        let (subs, problems) = subscriptions::of_set(config, annotations, labels, self.policy.max_recipients);
        let default_status = Default::default();
        let status = set.status().unwrap_or(&default_status);
        let stored = status.notifications.as_deref().unwrap_or(&[]);
        let id: SetId = (set.kind(), Key::new(set.namespace(), set.name()));
        let mut state = self.state();
        if subs.is_empty() && stored.is_empty() && !state.pending.contains_key(&id) {
            state.report(ctx, set, &id, problems);
            return;
        }
        drop(state);
        let annotation_problems = problems;
        // Declared, but their service or trigger missing for now: their records stay.
        let held = subscriptions::held(config, annotations, labels, self.policy.max_recipients);
        let view = SetView {
            kind: set.kind(),
            name: set.name(),
            namespace: set.namespace(),
            labels,
            annotations,
            status,
        };
        let now = (ctx.clock)();
        let compose =
            |current: &[NotificationStatus]| records::compose(config, &view, &subs, &held, current, &now);
        // Composing renders the messages: not under the lock every reconcile and delivery takes. A
        // delivery that recorded meanwhile makes it compose again (from the third time on, under the
        // lock), so its record is never written over.
        let mut state = self.state();
        let mut tries = 0;
        let (composed, current) = loop {
            let current = state.records(&id, stored);
            tries += 1;
            if tries == 3 {
                break (compose(&current), current);
            }
            drop(state);
            let composed = compose(&current);
            state = self.state();
            if state.records(&id, stored) == current {
                break (composed, current);
            }
        };
        let Composed {
            records,
            changed,
            send,
            problems,
            retry_at,
        } = composed;
        if let Some(at) = retry_at {
            self.wake_at(&mut state, &id, &now, &at);
        }
        let mut problems = problems;
        problems.extend(annotation_problems);
        state.report(ctx, set, &id, problems);
        if changed {
            state.pending.insert(id.clone(), (Instant::now(), records));
            self.queue_write(id.clone());
        }
        let mut dropped = false;
        for notification in send {
            let flight = (id.clone(), notification.key.clone());
            if state.in_flight.contains(&flight) {
                continue;
            }
            let Some(service) = config.services.get(&notification.key.service) else {
                continue;
            };
            let requests: Result<Vec<HttpRequest>, String> = notification
                .messages
                .iter()
                .map(|m| request::request(service, &notification.key.recipient, m))
                .collect();
            let requests = match requests {
                Ok(requests) => requests,
                Err(why) => {
                    warn!(set = %set.name(), trigger = %notification.key.trigger, service = %service.name, problem = %why, "notification cannot be sent");
                    continue;
                }
            };
            let delivery = Delivery {
                set: id.clone(),
                regarding: reference(set),
                key: notification.key.clone(),
                once: notification.once.clone(),
                previous: current
                    .iter()
                    .find(|r| records::key_of(r) == notification.key)
                    .cloned(),
                service: service.clone(),
                requests,
            };
            match self.deliveries.try_push(set.namespace(), delivery) {
                Ok(()) => {
                    state.in_flight.insert(flight);
                }
                Err(_) => {
                    count(ctx, &notification.key, "dropped");
                    debug!(set = %set.name(), "notification queue full; the set is observed again when it has room");
                    dropped = true;
                }
            }
        }
        if !dropped {
            // Everything it has to send is queued (or under way): nothing to try again.
            state.dropped.forget(&id);
        } else if !state.dropped.remember(&id, self.remembered_max) {
            ctx.metrics.notification_retries_forgotten.inc();
            debug!(set = %set.name(), "too many sets with dropped notifications; this one waits for its next reconcile");
        }
    }

    /// Observes again, as the store shows them now, the sets remembered longest for a dropped
    /// notification: as many as the queue has free slots, no more. A set deleted meanwhile is
    /// forgotten; one that drops a notification again is remembered again, behind the others. Called
    /// as each delivery finishes. How many sets it observed.
    fn retry_dropped(&self, ctx: &Context) -> usize {
        if self.closing.load(Ordering::SeqCst) {
            return 0;
        }
        let _one_at_a_time = self.retrying.lock().unwrap_or_else(|e| e.into_inner());
        let free = self.deliveries.free();
        // Only sets whose namespace has room in its share: the others would drop again.
        let mut room: HashMap<String, usize> = HashMap::new();
        let sets = self.state().dropped.take_fitting(free, |(_, key)| {
            let left = room
                .entry(key.namespace.clone())
                .or_insert_with(|| self.deliveries.room(&key.namespace));
            let fits = *left > 0;
            *left = left.saturating_sub(1);
            fits
        });
        for id in &sets {
            let Some(set) = ctx.stores.set(id) else {
                continue;
            };
            let set = set.as_set();
            if set.metadata().deletion_timestamp.is_none() {
                self.observe(ctx, set);
            }
        }
        sets.len()
    }

    /// Asks `wake_retries` to observe `set` again at `at` (`now` being the clock's time), unless an
    /// earlier wake is asked for already.
    fn wake_at(
        &self,
        state: &mut State,
        set: &SetId,
        now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
        at: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) {
        let wait = Duration::try_from(at.0.duration_since(now.0)).unwrap_or(Duration::ZERO);
        let when = tokio::time::Instant::now() + wait;
        if state.wakes.get(set).is_some_and(|asked| *asked <= when) {
            return;
        }
        state.wakes.insert(set.clone(), when);
        let _ = self.wakes.send((set.clone(), when));
    }

    /// Observes `set` again, as the store shows it, when a wake asked for it is due.
    fn woken(&self, ctx: &Context, set: &SetId) {
        {
            let mut state = self.state();
            match state.wakes.get(set) {
                Some(when) if *when <= tokio::time::Instant::now() => {
                    state.wakes.remove(set);
                }
                // A later wake replaced it, or the set was forgotten.
                _ => return,
            }
        }
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        if let Some(stored) = ctx.stores.set(set) {
            let stored = stored.as_set();
            if stored.metadata().deletion_timestamp.is_none() {
                self.observe(ctx, stored);
            }
        }
    }

    /// Forgets a deleted set.
    pub fn forget(&self, set: &SetId) {
        let mut state = self.state();
        state.wakes.remove(set);
        state.pending.remove(set);
        state.reported.remove(set);
        state.dropped.forget(set);
    }

    /// Records how a delivery ended, and queues the write.
    fn delivered(&self, delivery: &Delivery, record: NotificationStatus, stored: &[NotificationStatus]) {
        let mut state = self.state();
        state
            .in_flight
            .remove(&(delivery.set.clone(), delivery.key.clone()));
        let current = state.records(&delivery.set, stored);
        let list = records::with_record(&current, record);
        state.pending.insert(delivery.set.clone(), (Instant::now(), list));
        self.queue_write(delivery.set.clone());
    }

    /// A delivery ended with `record`: records it, and fills the queue's free slots with sets whose
    /// notifications were dropped. How many of those it observed again.
    fn finished(&self, ctx: &Context, delivery: &Delivery, record: NotificationStatus) -> usize {
        let stored = stored_records(ctx, &delivery.set);
        self.delivered(delivery, record, &stored);
        self.retry_dropped(ctx)
    }

    fn queue_write(&self, set: SetId) {
        self.writes_outstanding.fetch_add(1, Ordering::SeqCst);
        if self.writes.send(set).is_err() {
            self.writes_outstanding.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// At shutdown: queues nothing more, and waits at most `within` for the deliveries under way and
    /// their records, so that what was delivered is recorded before another replica leads (and does
    /// not send it again). Whether everything finished.
    pub async fn drain(&self, within: Duration) -> bool {
        self.closing.store(true, Ordering::SeqCst);
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let idle =
                self.state().in_flight.is_empty() && self.writes_outstanding.load(Ordering::SeqCst) == 0;
            if idle {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn to_write(&self, set: &SetId) -> Option<Vec<NotificationStatus>> {
        self.state().pending.get(set).map(|(_, list)| list.clone())
    }
}

fn reference(set: SetRef<'_>) -> ObjectReference {
    let (api_version, kind) = match set.kind() {
        SetKind::ConfigMapSet => ("cmset.dev/v1alpha1", "ConfigMapSet"),
        SetKind::SecretSet => ("cmset.dev/v1alpha1", "SecretSet"),
    };
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(set.name().into()),
        namespace: Some(set.namespace().into()),
        uid: set.metadata().uid.clone(),
        ..Default::default()
    }
}

fn count(ctx: &Context, key: &SubscriptionKey, result: &'static str) {
    ctx.metrics
        .notifications
        .get_or_create(&NotificationLabels {
            service: key.service.clone(),
            trigger: key.trigger.clone(),
            result,
        })
        .inc();
}

/// Runs the notifier's tasks until the queues close: [`WORKERS`] deliveries at once, and one writer
/// of records.
pub async fn run(notifier: Arc<Notifier>, queues: Queues, ctx: Arc<Context>) {
    let Queues {
        deliveries,
        writes,
        wakes,
    } = queues;

    let sender = Sender::new();
    let workers = (0..WORKERS).map(|_| {
        let (deliveries, notifier, ctx, sender) =
            (deliveries.clone(), notifier.clone(), ctx.clone(), sender.clone());
        async move {
            loop {
                let delivery = deliveries.pop().await;
                deliver(&notifier, &ctx, &sender, delivery).await;
            }
        }
    });
    let writer = write_records(notifier.clone(), writes, ctx.clone());
    let waker = wake_retries(notifier.clone(), wakes, ctx.clone());
    futures::future::join3(futures::future::join_all(workers), writer, waker).await;
}

/// Observes each set with a `Retrying` record again when it is due, earliest first.
async fn wake_retries(
    notifier: Arc<Notifier>,
    mut wakes: mpsc::UnboundedReceiver<(SetId, tokio::time::Instant)>,
    ctx: Arc<Context>,
) {
    let mut due: std::collections::BTreeSet<(tokio::time::Instant, SetId)> = Default::default();
    loop {
        let next = due.first().map(|(when, _)| *when);
        tokio::select! {
            asked = wakes.recv() => match asked {
                Some((set, when)) => {
                    due.insert((when, set));
                }
                None => break,
            },
            () = tokio::time::sleep_until(next.unwrap_or_else(tokio::time::Instant::now)), if next.is_some() => {
                while let Some((when, set)) = due.pop_first() {
                    if when > tokio::time::Instant::now() {
                        due.insert((when, set));
                        break;
                    }
                    notifier.woken(&ctx, &set);
                }
            }
        }
    }
}

async fn deliver(notifier: &Notifier, ctx: &Context, sender: &Sender, delivery: Delivery) {
    let mut attempt = records::Attempt {
        attempts: 0,
        failure: None,
    };
    for request in &delivery.requests {
        match sender.deliver(&delivery.service, request).await {
            Outcome::Delivered { attempts: n } => attempt.attempts += n,
            Outcome::Failed {
                attempts: n,
                reason,
                retryable,
            } => {
                attempt.attempts += n;
                attempt.failure = Some((reason, retryable));
                break;
            }
        }
    }
    let key = &delivery.key;
    let now = (ctx.clock)();
    let record = records::after_delivery(
        key,
        &delivery.once,
        delivery.previous.as_ref(),
        &attempt,
        &now,
        notifier.policy.max_age,
    );
    match record.result {
        NotificationResult::Retrying => {
            count(ctx, key, "retrying");
            let reason = record.message.as_deref().unwrap_or_default();
            debug!(set = ?delivery.regarding.name, trigger = %key.trigger, service = %key.service, %reason, attempts = record.attempts, "notification not delivered yet; tried again later");
            if let Some(at) = records::retry_at(&record) {
                notifier.wake_at(&mut notifier.state(), &delivery.set, &now, &at);
            }
        }
        NotificationResult::Failed => {
            let reason = record.message.as_deref().unwrap_or_default();
            let attempts = record.attempts;
            count(ctx, key, "failed");
            let target = match key.recipient.as_str() {
                "" => key.service.clone(),
                recipient => format!("{}:{recipient}", key.service),
            };
            let note = format!(
                "{} to {target} failed after {attempts} attempts: {reason}",
                key.trigger
            );
            warn!(set = ?delivery.regarding.name, trigger = %key.trigger, service = %key.service, %reason, attempts, "notification failed for good");
            ctx.publish_soon(
                Event {
                    type_: EventType::Warning,
                    reason: "NotificationFailed".into(),
                    note: Some(note),
                    action: "Notify".into(),
                    secondary: None,
                },
                delivery.regarding.clone(),
            );
        }
        _ => {
            count(ctx, key, "delivered");
            debug!(trigger = %key.trigger, service = %key.service, "notification delivered");
        }
    }
    notifier.finished(ctx, &delivery, record);
}

fn stored_records(ctx: &Context, set: &SetId) -> Vec<NotificationStatus> {
    ctx.stores
        .set(set)
        .and_then(|s| s.as_set().status().and_then(|st| st.notifications.clone()))
        .unwrap_or_default()
}

/// Writes each set's pending records, one set at a time.
async fn write_records(
    notifier: Arc<Notifier>,
    mut writes: mpsc::UnboundedReceiver<SetId>,
    ctx: Arc<Context>,
) {
    while let Some(set) = writes.recv().await {
        write_one(&notifier, &set, &ctx).await;
        notifier.writes_outstanding.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn write_one(notifier: &Arc<Notifier>, set: &SetId, ctx: &Context) {
    let Some(list) = notifier.to_write(set) else {
        return;
    };
    let (kind, key) = set;
    let body = json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": kind.as_str(),
        "status": { "notifications": list },
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let patch = Patch::Apply(&body);
    let result = match kind {
        SetKind::ConfigMapSet => {
            let api: Api<cmset_api::ConfigMapSet> = Api::namespaced(ctx.client.clone(), &key.namespace);
            let request = api.patch_status(&key.name, &params, &patch);
            ctx.write("write_notifications", request).await.map(drop)
        }
        SetKind::SecretSet => {
            let api: Api<cmset_api::SecretSet> = Api::namespaced(ctx.client.clone(), &key.namespace);
            let request = api.patch_status(&key.name, &params, &patch);
            ctx.write("write_notifications", request).await.map(drop)
        }
    };
    let Err(e) = result else { return };
    warn!(set = %key.name, error = %crate::platform::redact::api_error(&e), "notification records not written");
    // A set gone takes its records with it; anything else is written again in a moment (the list
    // stays pending, so no reconcile meanwhile sends twice).
    if matches!(&e, kube::Error::Api(s) if s.code == 404) {
        notifier.forget(set);
    } else {
        let (notifier, set) = (notifier.clone(), set.clone());
        tokio::spawn(async move {
            tokio::time::sleep(WRITE_RETRY).await;
            notifier.queue_write(set);
        });
    }
}

/// Observes every set again whenever the configuration changes: a subscription added by the admin
/// is recorded, and one removed goes, without waiting for each set's next reconcile.
pub async fn observe_on_change(notifier: Arc<Notifier>, ctx: Arc<Context>) {
    let mut loaded = notifier.loaded.clone();
    while loaded.changed().await.is_ok() {
        for set in ctx.stores.sets.state() {
            notifier.observe(&ctx, SetRef::ConfigMap(&set));
        }
        if let Some(store) = &ctx.stores.secret_sets {
            for set in store.state() {
                notifier.observe(&ctx, SetRef::Secret(&set));
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
                    .clone()
            })
            .collect();
        assert!(first.contains(&"quiet".to_string()), "{first:?}");
        assert_eq!(first, ["flood", "quiet", "flood"]);
        // Two of the flood's deliveries went: two of its dropped sets are looked at again, no more
        // (the others would only drop again).
        assert_eq!(notifier.retry_dropped(&ctx), 2);
        assert_eq!(notifier.state().dropped.len(), 500 - PER_NAMESPACE - 2);
    }
}
