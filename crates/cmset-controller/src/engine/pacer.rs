//! A controller's triggers, let through a few at a time. kube-runtime's scheduler takes every request
//! its input holds at once, and its tables keep the room a burst needed for as long as the process
//! lives: after a leader's first 1,000 sets, 1.9 KiB per set of empty tables in the set and workload
//! controllers, a fifth of a settled set's heap (issue 51). Paced, a trigger waits in cmset's queue
//! until fewer than `limit` of those let through have not started; a reconcile starting, or the
//! object found gone, frees a place. Throughput is unchanged as long as `limit` exceeds the
//! controller's concurrency: the scheduler always has the next ones ready.
//!
//! The queue merges what the scheduler would have merged had it been handed everything: a trigger for
//! an object already queued, or let through and not started, goes with that one; and a reconcile
//! that starts by another way (a requeue it asked for, which goes to the scheduler directly) takes the
//! object's queued trigger with it, since it reads the store as the trigger left it. Without that, a
//! burst larger than the limit took 2.75 set reconciles per change instead of 2.00 (1,000 sets): a
//! requeue ran the set, then its trigger queued behind the limit ran it again.

use std::collections::{HashMap, HashSet, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use kube::runtime::reflector::ObjectRef;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How long a trigger let through may go without starting before its place is given back anyway: a
/// safety net, so that a start this process failed to see costs a little room, never a stall.
/// Reconciles that run long (16 at once, each waiting on a slow API) can hold the next ones that long
/// too; then more are let through, as before pacing.
pub const STALE: Duration = Duration::from_secs(60);

/// Triggers taken from the input at most before one is let through: a flood of them cannot hold the
/// controller's task for long.
const TAKEN_AT_ONCE: usize = 1024;

/// A queue emptied after a burst gives back its room past this many entries.
const KEPT_ROOM: usize = 64;

/// An object as the controllers' stores key it: namespace (empty when cluster-scoped) and name.
type Key = (String, String);

fn key_of<K: kube::Resource>(obj: &ObjectRef<K>) -> Key {
    (obj.namespace.clone().unwrap_or_default(), obj.name.clone())
}

/// The places of one controller.
pub struct Pacer {
    places: Arc<Semaphore>,
    objects: Mutex<Objects>,
}

/// The objects a pacer knows of.
#[derive(Default)]
struct Objects {
    /// Those let through that have not started, each holding its place, and since when.
    waiting: HashMap<Key, (OwnedSemaphorePermit, Instant)>,
    /// Those queued for a place.
    queued: HashSet<Key>,
}

impl Pacer {
    /// A pacer that lets through at most `limit` triggers that have not started.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            places: Arc::new(Semaphore::new(limit.max(1))),
            objects: Mutex::new(Objects {
                waiting: HashMap::with_capacity(limit),
                queued: HashSet::new(),
            }),
        })
    }

    /// The object's reconcile has started, or it was not found in the store: its place is free, and
    /// a trigger of it still queued is satisfied.
    pub fn started(&self, namespace: Option<&str>, name: &str) {
        let mut objects = self.lock();
        if objects.waiting.is_empty() && objects.queued.is_empty() {
            return;
        }
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        objects.waiting.remove(&key);
        objects.queued.remove(&key);
    }

    /// How many let through have not started.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Queues `key` unless it is queued already, or let through and not started (the scheduler has
    /// it, and will read the store as it is when it starts). Whether it was queued.
    fn queue(&self, key: Key) -> bool {
        let mut objects = self.lock();
        if objects.waiting.contains_key(&key) {
            return false;
        }
        objects.queued.insert(key)
    }

    /// Takes `key` out of the queue, unless a start took it already. Whether it was there.
    fn dequeue(&self, key: &Key) -> bool {
        self.lock().queued.remove(key)
    }

    /// A free place, taken at once if there is one.
    fn free_place(&self) -> Option<OwnedSemaphorePermit> {
        self.places.clone().try_acquire_owned().ok()
    }

    /// A free place, once one frees. None only if the places were closed, which they never are.
    async fn next_place(&self) -> Option<OwnedSemaphorePermit> {
        self.places.clone().acquire_owned().await.ok()
    }

    fn hold(&self, key: Key, place: OwnedSemaphorePermit) {
        self.lock().waiting.insert(key, (place, Instant::now()));
    }

    /// Gives back the places of those let through more than [`STALE`] ago and never seen starting.
    fn forget_stale(&self) {
        self.lock()
            .waiting
            .retain(|_, (_, since)| since.elapsed() < STALE);
    }

    /// After a burst: the queue's room goes with it.
    fn shrink_queue(&self) {
        let mut objects = self.lock();
        if objects.queued.is_empty() && objects.queued.capacity() > KEPT_ROOM {
            objects.queued = HashSet::new();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The triggers waiting for a place, in the order of their first trigger. The pacer knows which are
/// queued; an entry whose object a start took meanwhile is passed over.
struct Queue<K: kube::Resource> {
    order: VecDeque<ObjectRef<K>>,
}

impl<K: kube::Resource> Queue<K> {
    fn new() -> Self {
        Self {
            order: VecDeque::new(),
        }
    }

    fn push(&mut self, obj: ObjectRef<K>, pacer: &Pacer) {
        if pacer.queue(key_of(&obj)) {
            self.order.push_back(obj);
        }
    }

    /// The first queued object still waiting for its turn.
    fn pop(&mut self, pacer: &Pacer) -> Option<(ObjectRef<K>, Key)> {
        let next = loop {
            let Some(obj) = self.order.pop_front() else {
                break None;
            };
            let key = key_of(&obj);
            if pacer.dequeue(&key) {
                break Some((obj, key));
            }
        };
        if self.order.is_empty() && self.order.capacity() > KEPT_ROOM {
            self.order = VecDeque::new();
            pacer.shrink_queue();
        }
        next
    }

    /// Drops the entries a start took, at the front: whether any is left.
    fn is_empty(&mut self, pacer: &Pacer) -> bool {
        while let Some(obj) = self.order.front() {
            if pacer.lock().queued.contains(&key_of(obj)) {
                return false;
            }
            self.order.pop_front();
        }
        true
    }
}

/// What a paced stream waits for next.
enum Next<K: kube::Resource> {
    Trigger(Option<ObjectRef<K>>),
    Place(Option<OwnedSemaphorePermit>),
    Stale,
}

/// A controller's input: `triggers`, merged and let through by `pacer`.
struct Paced<K: kube::Resource, S> {
    triggers: Pin<Box<futures::stream::Fuse<S>>>,
    queue: Queue<K>,
    pacer: Arc<Pacer>,
    ended: bool,
    /// Since when the first in the queue has waited for a place.
    blocked_since: Option<Instant>,
}

impl<K, S> Paced<K, S>
where
    K: kube::Resource,
    S: Stream<Item = ObjectRef<K>>,
{
    /// Takes in the triggers already there, so that their repeats merge before any is let through.
    fn take_ready(&mut self) {
        for _ in 0..TAKEN_AT_ONCE {
            match self.triggers.next().now_or_never() {
                Some(Some(obj)) => self.queue.push(obj, &self.pacer),
                Some(None) => {
                    self.ended = true;
                    return;
                }
                None => return,
            }
        }
    }

    /// The first queued object, holding `place`; None when starts took every queued one meanwhile
    /// (the place goes back).
    fn let_through(&mut self, place: OwnedSemaphorePermit) -> Option<ObjectRef<K>> {
        self.blocked_since = None;
        let (obj, key) = self.queue.pop(&self.pacer)?;
        self.pacer.hold(key, place);
        Some(obj)
    }

    async fn next(&mut self) -> Option<ObjectRef<K>> {
        loop {
            if !self.ended {
                self.take_ready();
            }
            if self.queue.is_empty(&self.pacer) {
                if self.ended {
                    return None;
                }
                match self.triggers.next().await {
                    Some(obj) => self.queue.push(obj, &self.pacer),
                    None => self.ended = true,
                }
                continue;
            }
            if let Some(place) = self.pacer.free_place() {
                match self.let_through(place) {
                    Some(obj) => return Some(obj),
                    None => continue,
                }
            }
            let since = *self.blocked_since.get_or_insert_with(Instant::now);
            let pacer = self.pacer.clone();
            let next = tokio::select! {
                biased;
                place = pacer.next_place() => Next::Place(place),
                () = tokio::time::sleep_until(since + STALE) => Next::Stale,
                obj = self.triggers.next(), if !self.ended => Next::Trigger(obj),
            };
            match next {
                Next::Place(Some(place)) => {
                    if let Some(obj) = self.let_through(place) {
                        return Some(obj);
                    }
                }
                // Never closed; if they were, pacing would be over.
                Next::Place(None) => {
                    if let Some((obj, _)) = self.queue.pop(&self.pacer) {
                        return Some(obj);
                    }
                }
                Next::Stale => {
                    self.pacer.forget_stale();
                    self.blocked_since = Some(Instant::now());
                }
                Next::Trigger(Some(obj)) => self.queue.push(obj, &self.pacer),
                Next::Trigger(None) => self.ended = true,
            }
        }
    }
}

/// `triggers`, each object let through by `pacer`, in the order of its first trigger, repeats merged.
pub fn paced<K, S>(triggers: S, pacer: Arc<Pacer>) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource + Send + 'static,
    K::DynamicType: Send + Sync,
    S: Stream<Item = ObjectRef<K>> + Send + 'static,
{
    let paced = Paced {
        triggers: Box::pin(triggers.fuse()),
        queue: Queue::new(),
        pacer,
        ended: false,
        blocked_since: None,
    };
    futures::stream::unfold(paced, |mut paced| async move {
        let obj = paced.next().await?;
        Some((obj, paced))
    })
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    type Input = mpsc::UnboundedSender<ObjectRef<ConfigMap>>;
    type Output = Pin<Box<dyn Stream<Item = ObjectRef<ConfigMap>> + Send>>;

    fn paced_input(limit: usize) -> (Input, Output, Arc<Pacer>) {
        let (tx, rx) = mpsc::unbounded();
        let pacer = Pacer::new(limit);
        (tx, Box::pin(paced(rx, pacer.clone())), pacer)
    }

    fn send(tx: &Input, namespace: &str, name: &str) {
        tx.unbounded_send(ObjectRef::new(name).within(namespace)).unwrap();
    }

    /// A pacer of `limit` whose input already holds a trigger for each of `names`, in namespace team.
    fn paced_after(limit: usize, names: &[&str]) -> (Input, Output, Arc<Pacer>) {
        let (tx, out, pacer) = paced_input(limit);
        for name in names {
            send(&tx, "team", name);
        }
        (tx, out, pacer)
    }

    /// The next one let through now, if any.
    fn next_now(out: &mut Output) -> Option<String> {
        out.next().now_or_never().flatten().map(|obj| obj.name)
    }

    #[tokio::test(start_paused = true)]
    async fn lets_through_up_to_the_limit_then_one_per_start() {
        let (_tx, mut out, pacer) = paced_after(2, &["a", "b", "c"]);
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        assert_eq!(next_now(&mut out).as_deref(), Some("b"));
        assert_eq!(next_now(&mut out), None, "no place left");
        pacer.started(Some("team"), "a");
        assert_eq!(next_now(&mut out).as_deref(), Some("c"));
        assert_eq!(pacer.waiting(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn repeats_of_a_queued_object_merge_into_its_first() {
        let (_tx, mut out, pacer) = paced_after(1, &["a", "b", "b", "c", "b"]);
        let mut names = Vec::new();
        while let Some(name) = next_now(&mut out) {
            pacer.started(Some("team"), &name);
            names.push(name);
        }
        assert_eq!(names, ["a", "b", "c"], "b once, where it first came");
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeat_of_one_let_through_and_not_started_merges_with_it() {
        let (tx, mut out, pacer) = paced_input(2);
        send(&tx, "team", "a");
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        send(&tx, "team", "a");
        assert_eq!(next_now(&mut out), None, "the scheduler has it already");
        assert_eq!(pacer.waiting(), 1);
        // Once started, a new change of it goes again (it runs after the first).
        pacer.started(Some("team"), "a");
        send(&tx, "team", "a");
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_by_another_way_takes_the_objects_queued_trigger() {
        let (tx, mut out, pacer) = paced_after(1, &["a", "b", "c"]);
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        assert_eq!(next_now(&mut out), None, "b and c wait for a place");
        // b runs by a requeue it asked for, which goes to the scheduler directly: it reads the store
        // as its trigger left it, so the trigger is spent.
        pacer.started(Some("team"), "b");
        pacer.started(Some("team"), "a");
        assert_eq!(next_now(&mut out).as_deref(), Some("c"), "b passed over");
        pacer.started(Some("team"), "c");
        assert_eq!(next_now(&mut out), None);
        // A later change of b queues it again.
        send(&tx, "team", "b");
        assert_eq!(next_now(&mut out).as_deref(), Some("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_name_in_another_namespace_is_another_object() {
        let (tx, mut out, pacer) = paced_input(2);
        send(&tx, "team", "a");
        send(&tx, "other", "a");
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        pacer.started(Some("other"), "a");
        assert_eq!(pacer.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_trigger_goes_as_soon_as_a_place_frees() {
        let (_tx, mut out, pacer) = paced_after(1, &["a", "b"]);
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        let next = tokio::spawn(async move { out.next().await.map(|obj| obj.name) });
        tokio::task::yield_now().await;
        assert!(!next.is_finished());
        pacer.started(Some("team"), "a");
        assert_eq!(next.await.unwrap().as_deref(), Some("b"));
        assert_eq!(pacer.waiting(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_start_never_seen_costs_a_place_for_a_while_never_a_stall() {
        let (tx, mut out, pacer) = paced_after(1, &["a", "b"]);
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        let begun = Instant::now();
        // Triggers that keep coming meanwhile do not put the safety net off.
        let trickle = tokio::spawn({
            let tx = tx.clone();
            async move {
                for i in 0..10 {
                    tokio::time::sleep(STALE / 10).await;
                    send(&tx, "team", &format!("later-{i}"));
                }
            }
        });
        assert_eq!(out.next().await.map(|obj| obj.name).as_deref(), Some("b"));
        assert_eq!(begun.elapsed(), STALE, "a's place given back after STALE");
        assert_eq!(pacer.waiting(), 1);
        trickle.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_the_triggers_ends_the_stream_once_the_queue_is_empty() {
        let (tx, mut out, pacer) = paced_after(1, &["a", "b"]);
        drop(tx);
        assert_eq!(next_now(&mut out).as_deref(), Some("a"));
        pacer.started(Some("team"), "a");
        assert_eq!(next_now(&mut out).as_deref(), Some("b"));
        pacer.started(Some("team"), "b");
        assert!(out.next().await.is_none());
    }

    #[test]
    fn an_emptied_queue_gives_back_the_room_of_a_burst() {
        let pacer = Pacer::new(1);
        let mut queue = Queue::<ConfigMap>::new();
        for i in 0..1000 {
            queue.push(ObjectRef::new(&format!("cm-{i}")).within("team"), &pacer);
        }
        assert!(queue.order.capacity() >= 1000);
        while queue.pop(&pacer).is_some() {}
        assert!(queue.order.capacity() <= KEPT_ROOM);
        assert!(pacer.lock().queued.capacity() <= KEPT_ROOM);
    }
}
