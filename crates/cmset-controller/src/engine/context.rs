//! What every writer of state shares, the controllers and the notifier alike: the client, the index
//! and the reflector stores (see [`crate::engine::stores`]), the event recorder, metrics, the clock
//! (passed in, so tests can fix it), the one wrapper every write goes through, the set controller's
//! memory of its writes (written and read by [`crate::engine::own_writes`], and its deferrals) and the
//! backoff of failed reconciles.
//!
//! Only the engine's parts: what the controllers decide with beyond them (the measurer, the notifier)
//! is added by the reconcile room's own context, which wraps this one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cmset_core::workloads::observe::WorkloadKind;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::runtime::events::{Event, Recorder, Reporter};

use crate::engine::index::{Index, Key, SetId};
use crate::engine::memory::SetMemory;
use crate::engine::stores::Stores;
use crate::platform::backoff::{self, Failure, Failures};
use crate::platform::leader::{Term, TermEnded};
use crate::platform::metrics::Metrics;

pub type Clock = Arc<dyn Fn() -> Time + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| Time(jiff::Timestamp::now()))
}

pub struct Context {
    pub client: Client,
    pub index: Arc<Index>,
    pub stores: Stores,
    pub reporter: Reporter,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    /// How long a workload that reads several sets waits after the last change to any of them, so
    /// that sets changed by one apply land in one rollout (see `workload_controller`).
    pub multi_set_window: Duration,
    /// The set controller's memory of its own writes and deferrals (bounded; see [`SetMemory`]). Its
    /// status writes read and write it through [`Context::own_status`].
    memory: SetMemory,
    /// Consecutive reconcile failures per object, for the backoff of `error_policy`.
    pub failures: Failures<Reconciled>,
    /// This replica's term as leader (`None` without leader election: writes are always sent). No
    /// write is sent after it ends, and one in flight then is cut off (see [`Context::write`]).
    pub term: Option<Term>,
    /// Bounds the events published off the reconcile path (see [`Context::publish_soon`]).
    events: EventSlots,
}

/// How many events published off the reconcile path may be sent at once, and may wait to be sent.
const EVENTS_IN_FLIGHT: usize = 8;
const EVENTS_WAITING: usize = 1024;

#[derive(Clone)]
struct EventSlots {
    waiting: Arc<tokio::sync::Semaphore>,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl Default for EventSlots {
    fn default() -> Self {
        Self {
            waiting: Arc::new(tokio::sync::Semaphore::new(EVENTS_WAITING)),
            in_flight: Arc::new(tokio::sync::Semaphore::new(EVENTS_IN_FLIGHT)),
        }
    }
}

/// An object a controller reconciles: the key of its failure count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reconciled {
    Set(SetId),
    Workload(WorkloadKind, Key),
}

/// The longest a set's deferrable writes wait to be batched.
pub const BATCH_WINDOW: Duration = Duration::from_secs(1);

/// How long a reconcile waits for the caches to fill before it is requeued. Short: a replica shutting
/// down waits for the reconciles in flight.
pub const CACHES_WAIT: Duration = Duration::from_secs(1);

impl Context {
    pub fn new(
        client: Client,
        index: Arc<Index>,
        stores: Stores,
        metrics: Arc<Metrics>,
        clock: Clock,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: cmset_api::labels::FIELD_MANAGER.to_string(),
            instance,
        };
        Self {
            client,
            index,
            stores,
            reporter,
            metrics,
            clock,
            multi_set_window: Duration::from_millis(500),
            memory: SetMemory::default(),
            failures: Failures::default(),
            term: None,
            events: EventSlots::default(),
        }
    }

    /// Records a failed reconcile of `object` and returns how long to wait before the next one:
    /// exponential per object (see [`backoff`]). Counts of objects no longer cached are dropped here.
    pub fn backoff(&self, object: &Reconciled, error: &crate::platform::error::Error) -> Duration {
        let count = self.failures.record(object, |o| self.still_cached(o));
        backoff::delay(
            Failure {
                count,
                conflict: error.is_conflict(),
                unreachable: error.is_unreachable(),
                retry_after: error.retry_after(),
            },
            backoff::seed(object, count),
        )
    }

    /// `object` reconciled: its next failure starts from the base delay again.
    pub fn succeeded(&self, object: &Reconciled) {
        self.failures.forget(object);
    }

    fn still_cached(&self, object: &Reconciled) -> bool {
        match object {
            Reconciled::Set(key) => self.stores.set(key).is_some(),
            Reconciled::Workload(kind, key) => (self.stores)
                .workload_object(*kind, &key.namespace, &key.name)
                .is_some(),
        }
    }

    /// Waits at most [`CACHES_WAIT`] until every watch has listed everything once; whether it has.
    /// Planning from a half-filled index would take objects not yet listed for absent ones (a
    /// revision to create again, a workload record to drop), so reconcilers wait for it.
    pub async fn wait_caches_ready(&self) -> bool {
        self.index.wait_until(CACHES_WAIT, Index::is_ready).await
    }

    /// As [`Context::wait_caches_ready`], and also until a watch started later (a workload kind
    /// installed after start-up) has listed once: a set's moves and status must see every workload,
    /// and that kind's may read it. The history kinds, watched from the takeover on, are not waited
    /// for: only pruning needs them, and it waits for them itself ([`Index::history_listed`]).
    pub async fn wait_caches_for_planning(&self) -> bool {
        self.index
            .wait_until(CACHES_WAIT, Index::is_complete_but_history)
            .await
    }

    /// Marks `set`'s pending writes as deferred (batched until [`BATCH_WINDOW`] has passed or an
    /// urgent write comes along): `Some(wait)` while the window since the first deferral is still open,
    /// `None` once it has passed (write now).
    pub fn defer(&self, set: &SetId) -> Option<Duration> {
        let now = Instant::now();
        let since = self
            .memory
            .deferred_since(set, now, |s| self.stores.set(s).is_some());
        BATCH_WINDOW
            .checked_sub(now.duration_since(since))
            .filter(|w| !w.is_zero())
    }

    /// Forgets a deferral: the writes were made, or are no longer wanted.
    pub fn forget_deferred(&self, set: &SetId) {
        self.memory.forget_deferred(set);
    }

    /// Forgets what the set controller remembers of its writes to a set being deleted.
    pub fn forget_memory(&self, set: &SetId) {
        self.memory.forget(set);
    }

    /// The set controller's memory of its writes ([`crate::engine::own_writes`] reads and writes it;
    /// tests prime it).
    pub fn memory(&self) -> &SetMemory {
        &self.memory
    }

    /// Sends one write of state to the API server: every write goes through here, counted by operation
    /// (and, in crash tests, the place the process aborts: see `crash_points`). Only while this replica's
    /// term as leader lasts: after it a write is not sent (nor counted), and one in flight when it ends
    /// is cut off; both return [`TermEnded`]. A write the API server refuses because the object moved
    /// on since it was read (409 Conflict) is counted as such too.
    pub async fn write<T>(
        &self,
        operation: &'static str,
        request: impl std::future::Future<Output = kube::Result<T>>,
    ) -> kube::Result<T> {
        let end = match &self.term {
            None => None,
            Some(term) => match term.ends_at() {
                Some(end) => Some(end),
                None => {
                    tracing::debug!(operation, "not sent: this replica's term as leader has ended");
                    return Err(TermEnded::error());
                }
            },
        };
        self.metrics.wrote(operation);
        let n = crate::platform::crash_points::before_write(operation);
        let result = match end {
            Some(end) => tokio::time::timeout_at(end, request).await.unwrap_or_else(|_| {
                tracing::debug!(
                    operation,
                    "cut off in flight: this replica's term as leader ended"
                );
                Err(TermEnded::error())
            }),
            None => request.await,
        };
        match &result {
            Ok(_) => crate::platform::crash_points::after_write(n, operation),
            Err(kube::Error::Api(status)) if status.code == 409 && status.reason == "Conflict" => {
                self.metrics.conflicted(operation);
            }
            Err(_) => {}
        }
        result
    }

    /// Publishes an event, best effort. A fresh recorder each time: kube's recorder folds a repeat of
    /// the same reason on the same object into a series that keeps the first message, while cmset
    /// publishes only when something changed, so every event must keep its own message.
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) {
        send_event(
            &self.client,
            &self.reporter,
            &self.metrics,
            self.term.as_ref(),
            event,
            regarding,
        )
        .await;
    }

    /// [`Context::publish`] from a task of its own, so that the reconcile does not wait for the
    /// answer: a workload's reconcile is then one request, and a rollout of many workloads moves at
    /// the pace of its patches. At most [`EVENTS_IN_FLIGHT`] are sent at once; should
    /// [`EVENTS_WAITING`] already wait, the event is dropped and logged (events are best effort).
    pub fn publish_soon(&self, event: Event, regarding: ObjectReference) {
        let Ok(waiting) = self.events.waiting.clone().try_acquire_owned() else {
            tracing::warn!(reason = %event.reason, "event dropped: {EVENTS_WAITING} events wait to be published already");
            return;
        };
        let (client, reporter, metrics) = (self.client.clone(), self.reporter.clone(), self.metrics.clone());
        let (term, in_flight) = (self.term.clone(), self.events.in_flight.clone());
        tokio::spawn(async move {
            let Ok(_sending) = in_flight.acquire_owned().await else {
                return;
            };
            drop(waiting);
            send_event(&client, &reporter, &metrics, term.as_ref(), &event, &regarding).await;
        });
    }
}

pub(crate) async fn send_event(
    client: &Client,
    reporter: &Reporter,
    metrics: &Metrics,
    term: Option<&Term>,
    event: &Event,
    regarding: &ObjectReference,
) {
    if term.is_some_and(|term| term.ends_at().is_none()) {
        tracing::debug!(reason = %event.reason, "event not published: this replica's term as leader has ended");
        return;
    }
    metrics.wrote("publish_event");
    let recorder = Recorder::new(client.clone(), reporter.clone());
    if let Err(e) = recorder.publish(event, regarding).await {
        tracing::warn!(reason = %event.reason, error = %crate::platform::redact::api_error(&e), "could not publish event");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::RwLock;

    use kube::runtime::events::EventType;
    use kube::runtime::reflector;

    use super::*;
    use crate::platform::metrics::WriteLabel;

    fn context(client: Client, metrics: Arc<Metrics>) -> Context {
        let stores = Stores {
            sets: reflector::store::<cmset_api::ConfigMapSet>().0,
            secret_sets: None,
            workloads: Arc::new(RwLock::new(HashMap::new())),
            templates: None,
        };
        Context::new(
            client,
            Arc::new(Index::new(None)),
            stores,
            metrics,
            system_clock(),
            None,
        )
    }

    fn event(i: usize) -> (Event, ObjectReference) {
        let event = Event {
            type_: EventType::Normal,
            reason: "ConfigUpdated".to_string(),
            note: Some(format!("move {i}")),
            action: "Rollout".to_string(),
            secondary: None,
        };
        let regarding = ObjectReference {
            kind: Some("Deployment".into()),
            namespace: Some("team".into()),
            name: Some(format!("web-{i}")),
            ..ObjectReference::default()
        };
        (event, regarding)
    }

    type Handle =
        tower_test::mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>;
    type Pending = (
        http::Request<kube::client::Body>,
        tower_test::mock::SendResponse<http::Response<kube::client::Body>>,
    );

    /// The next request the mocked server takes within `wait`.
    async fn next(handle: &mut Handle, wait: Duration) -> Option<Pending> {
        tokio::time::timeout(wait, handle.next_request())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test]
    async fn events_off_the_reconcile_path_are_sent_a_few_at_a_time_and_a_flood_beyond_the_queue_is_dropped()
    {
        // An API server that takes every request and never answers.
        let (service, mut handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let metrics = Arc::new(Metrics::default());
        let ctx = context(Client::new(service, "team"), metrics.clone());
        let flood = EVENTS_IN_FLIGHT + EVENTS_WAITING + 10;
        for i in 0..flood {
            let (event, regarding) = event(i);
            ctx.publish_soon(event, regarding);
        }
        // Kept unanswered: each request holds its slot until answered.
        let mut unanswered = Vec::new();
        for _ in 0..EVENTS_IN_FLIGHT {
            unanswered.push(
                next(&mut handle, Duration::from_secs(10))
                    .await
                    .expect("an event"),
            );
        }
        assert!(
            next(&mut handle, Duration::from_millis(300)).await.is_none(),
            "only {EVENTS_IN_FLIGHT} wait for an answer at once"
        );
        let sent = metrics
            .writes
            .get_or_create(&WriteLabel {
                operation: "publish_event",
            })
            .get();
        assert_eq!(sent, EVENTS_IN_FLIGHT as u64);
        // All were offered before any task ran: the queue took EVENTS_WAITING, and those now in
        // flight have left it.
        assert_eq!(ctx.events.waiting.available_permits(), EVENTS_IN_FLIGHT);
        assert_eq!(ctx.events.in_flight.available_permits(), 0);
        // Answered (here: cut off), the waiting ones go out; those beyond the queue never do.
        drop(unanswered);
        for _ in EVENTS_IN_FLIGHT..EVENTS_WAITING {
            next(&mut handle, Duration::from_secs(10))
                .await
                .expect("a waiting event");
        }
        assert!(
            next(&mut handle, Duration::from_millis(300)).await.is_none(),
            "the {} beyond the queue were dropped",
            flood - EVENTS_WAITING
        );
    }
}
