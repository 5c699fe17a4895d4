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
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use super::config_watch::Loaded;
use super::fair_queue::FairQueue;
use super::sender::{Outcome, Sender};
use crate::engine::context::Context;
use crate::engine::index::{Key, SetId};
use crate::platform::metadata_answers;
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
                .entry(key.namespace.to_string())
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
            let request = metadata_answers::patch_status::<cmset_api::ConfigMapSet, _>(
                &ctx.client,
                &key.namespace,
                &key.name,
                &params,
                &patch,
            );
            ctx.write("write_notifications", request).await.map(drop)
        }
        SetKind::SecretSet => {
            let request = metadata_answers::patch_status::<cmset_api::SecretSet, _>(
                &ctx.client,
                &key.namespace,
                &key.name,
                &params,
                &patch,
            );
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
mod tests;
