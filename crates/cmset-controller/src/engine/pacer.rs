//! A controller's triggers, let through a few at a time. kube-runtime's scheduler takes every request
//! its input holds at once, and its tables keep the room a burst needed for as long as the process
//! lives: after a leader's first 1,000 sets, 1.9 KiB per set of empty tables in the set and workload
//! controllers, a fifth of a settled set's heap (issue 51). Paced, a trigger waits in cmset's queue
//! (a list that frees each entry as it is taken) until fewer than `limit` of those let through have
//! not started; a reconcile starting, or the object found gone, frees a place. Throughput is
//! unchanged as long as `limit` exceeds the controller's concurrency: the scheduler always has the
//! next ones ready.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How long a trigger let through may go without starting before its place is given back anyway: a
/// safety net, so that a start this process failed to see costs a little room, never a stall.
/// Reconciles that run long (16 at once, each waiting on a slow API) can hold the next ones that long
/// too; then more are let through, as before pacing.
pub const STALE: Duration = Duration::from_secs(60);

/// An object as the controllers' stores key it: namespace (empty when cluster-scoped) and name.
type Key = (String, String);

/// The places of one controller.
pub struct Pacer {
    places: Arc<Semaphore>,
    /// Those let through that have not started, each holding its place, and since when.
    waiting: Mutex<HashMap<Key, (OwnedSemaphorePermit, Instant)>>,
}

impl Pacer {
    /// A pacer that lets through at most `limit` triggers that have not started.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            places: Arc::new(Semaphore::new(limit.max(1))),
            waiting: Mutex::new(HashMap::with_capacity(limit)),
        })
    }

    /// Returns once the object may go to the controller: at once when it was let through already and
    /// has not started (the scheduler merges the two requests), else when a place is free.
    pub async fn admit(&self, namespace: Option<&str>, name: &str) {
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        loop {
            if self.lock().contains_key(&key) {
                return;
            }
            match tokio::time::timeout(STALE, self.places.clone().acquire_owned()).await {
                Ok(Ok(place)) => {
                    self.lock().insert(key, (place, Instant::now()));
                    return;
                }
                // Never closed; if it were, pacing would be over.
                Ok(Err(_)) => return,
                Err(_) => self.forget_stale(),
            }
        }
    }

    /// The object's reconcile has started, or it was not found in the store: its place is free.
    pub fn started(&self, namespace: Option<&str>, name: &str) {
        let mut waiting = self.lock();
        if waiting.is_empty() {
            return;
        }
        waiting.remove(&(namespace.unwrap_or_default().to_owned(), name.to_owned()));
    }

    /// How many let through have not started.
    pub fn waiting(&self) -> usize {
        self.lock().len()
    }

    fn forget_stale(&self) {
        self.lock().retain(|_, (_, since)| since.elapsed() < STALE);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (OwnedSemaphorePermit, Instant)>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `triggers`, each let through by `pacer`, in order.
pub fn paced<K, S>(triggers: S, pacer: Arc<Pacer>) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource + 'static,
    K::DynamicType: Send + Sync,
    S: Stream<Item = ObjectRef<K>> + Send + 'static,
{
    triggers.then(move |obj| {
        let pacer = pacer.clone();
        async move {
            pacer.admit(obj.namespace.as_deref(), &obj.name).await;
            obj
        }
    })
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn admitted_now(pacer: &Pacer, name: &str) -> bool {
        pacer.admit(Some("team"), name).now_or_never().is_some()
    }

    #[tokio::test(start_paused = true)]
    async fn lets_through_up_to_the_limit_then_one_per_start() {
        let pacer = Pacer::new(2);
        assert!(admitted_now(&pacer, "a"));
        assert!(admitted_now(&pacer, "b"));
        assert!(!admitted_now(&pacer, "c"), "no place left");
        pacer.started(Some("team"), "a");
        assert!(admitted_now(&pacer, "c"));
        assert_eq!(pacer.waiting(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_let_through_and_not_started_goes_again_without_a_place() {
        let pacer = Pacer::new(1);
        assert!(admitted_now(&pacer, "a"));
        assert!(
            admitted_now(&pacer, "a"),
            "merged by the scheduler with the first"
        );
        assert!(!admitted_now(&pacer, "b"));
        // Once started, a new change of it needs a place again (it runs after the first).
        pacer.started(Some("team"), "a");
        assert!(admitted_now(&pacer, "a"));
        assert!(!admitted_now(&pacer, "b"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_name_in_another_namespace_is_another_object() {
        let pacer = Pacer::new(2);
        assert!(pacer.admit(Some("team"), "a").now_or_never().is_some());
        assert!(pacer.admit(Some("other"), "a").now_or_never().is_some());
        pacer.started(Some("other"), "a");
        assert_eq!(pacer.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_trigger_goes_as_soon_as_a_place_frees() {
        let pacer = Pacer::new(1);
        assert!(admitted_now(&pacer, "a"));
        let next = tokio::spawn({
            let pacer = pacer.clone();
            async move { pacer.admit(Some("team"), "b").await }
        });
        tokio::task::yield_now().await;
        assert!(!next.is_finished());
        pacer.started(Some("team"), "a");
        next.await.unwrap();
        assert_eq!(pacer.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_never_seen_costs_a_place_for_a_while_never_a_stall() {
        let pacer = Pacer::new(1);
        assert!(admitted_now(&pacer, "a"));
        let begun = Instant::now();
        pacer.admit(Some("team"), "b").await;
        assert_eq!(begun.elapsed(), STALE, "a's place given back after STALE");
        assert_eq!(pacer.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn paced_triggers_keep_their_order() {
        let pacer = Pacer::new(2);
        let triggers = futures::stream::iter(
            ["a", "b", "a", "c"].map(|n| ObjectRef::<ConfigMap>::new(n).within("team")),
        );
        let out = paced(triggers, pacer.clone());
        futures::pin_mut!(out);
        let mut names = Vec::new();
        while let Some(Some(obj)) = out.next().now_or_never() {
            names.push(obj.name.clone());
            // The controller starts each as it comes.
            pacer.started(Some("team"), &obj.name);
        }
        assert_eq!(names, ["a", "b", "a", "c"]);
    }
}
