//! The notifier's queue of deliveries, fair between namespaces: one queue per namespace, taken from in
//! turn (round robin), so a namespace that floods delays its own messages, not the others'. It is
//! bounded in all (`capacity`) and per namespace (`per_namespace`): a flood fills its namespace's share,
//! and the rest of the queue stays open to the other namespaces. What does not fit is handed back, for
//! the caller to count and try again later.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

pub struct FairQueue<T> {
    inner: Mutex<Inner<T>>,
    /// Wakes a worker waiting in [`FairQueue::pop`].
    ready: Notify,
    capacity: usize,
    per_namespace: usize,
}

struct Inner<T> {
    /// Each namespace's items, oldest first; a namespace with none is not here.
    queues: BTreeMap<String, VecDeque<T>>,
    /// The namespaces with items, in the order they take their turn.
    turns: VecDeque<String>,
    len: usize,
}

/// Nothing to take now.
#[derive(Debug, PartialEq, Eq)]
pub struct Empty;

impl<T> FairQueue<T> {
    pub fn new(capacity: usize, per_namespace: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                queues: BTreeMap::new(),
                turns: VecDeque::new(),
                len: 0,
            }),
            ready: Notify::new(),
            capacity,
            per_namespace,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        // Plain pushes and pops: a panic elsewhere leaves it whole.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item` behind `namespace`'s others, or hands it back when the queue or the namespace's
    /// share is full.
    pub fn try_push(&self, namespace: &str, item: T) -> Result<(), T> {
        {
            let mut inner = self.lock();
            if inner.len >= self.capacity {
                return Err(item);
            }
            let queued = inner.queues.get(namespace).map_or(0, VecDeque::len);
            if queued >= self.per_namespace {
                return Err(item);
            }
            if queued == 0 {
                inner.turns.push_back(namespace.to_string());
            }
            inner
                .queues
                .entry(namespace.to_string())
                .or_default()
                .push_back(item);
            inner.len += 1;
        }
        self.ready.notify_one();
        Ok(())
    }

    /// The oldest item of the namespace whose turn it is; that namespace goes to the back of the turns.
    pub fn try_recv(&self) -> Result<T, Empty> {
        let mut inner = self.lock();
        let namespace = inner.turns.pop_front().ok_or(Empty)?;
        let queue = inner.queues.get_mut(&namespace).ok_or(Empty)?;
        let item = queue.pop_front().ok_or(Empty)?;
        if queue.is_empty() {
            inner.queues.remove(&namespace);
        } else {
            inner.turns.push_back(namespace);
        }
        inner.len -= 1;
        Ok(item)
    }

    /// Waits for an item, as [`FairQueue::try_recv`] takes it.
    pub async fn pop(&self) -> T {
        loop {
            let ready = self.ready.notified();
            if let Ok(item) = self.try_recv() {
                return item;
            }
            ready.await;
        }
    }

    /// Items of `namespace` that still fit.
    pub fn room(&self, namespace: &str) -> usize {
        let inner = self.lock();
        let queued = inner.queues.get(namespace).map_or(0, VecDeque::len);
        self.capacity
            .saturating_sub(inner.len)
            .min(self.per_namespace.saturating_sub(queued))
    }

    /// Items that still fit in all (a namespace's share may be smaller).
    pub fn free(&self) -> usize {
        self.capacity.saturating_sub(self.lock().len)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_take_turns_and_a_flood_fills_only_its_share() {
        let queue = FairQueue::new(10, 4);
        for i in 0..6 {
            let pushed = queue.try_push("flood", format!("flood-{i}"));
            assert_eq!(pushed.is_ok(), i < 4, "{i}");
        }
        queue.try_push("quiet", "quiet-0".to_string()).unwrap();
        queue.try_push("other", "other-0".to_string()).unwrap();
        queue.try_push("other", "other-1".to_string()).unwrap();
        assert_eq!(queue.free(), 3);
        assert_eq!(
            (queue.room("flood"), queue.room("other"), queue.room("new")),
            (0, 2, 3)
        );
        let order: Vec<String> = std::iter::from_fn(|| queue.try_recv().ok()).collect();
        assert_eq!(
            order,
            [
                "flood-0", "quiet-0", "other-0", "flood-1", "other-1", "flood-2", "flood-3"
            ]
        );
        assert_eq!(queue.try_recv(), Err(Empty));
        assert_eq!((queue.len(), queue.free()), (0, 10));
    }

    #[test]
    fn the_whole_queue_is_bounded_too() {
        let queue = FairQueue::new(3, 2);
        for (namespace, fits) in [("a", true), ("a", true), ("b", true), ("c", false)] {
            assert_eq!(queue.try_push(namespace, ()).is_ok(), fits, "{namespace}");
        }
    }

    #[tokio::test]
    async fn a_waiting_worker_wakes_for_an_item() {
        let queue = std::sync::Arc::new(FairQueue::new(4, 4));
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.pop().await }
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        queue.try_push("a", 7).unwrap();
        let got = tokio::time::timeout(std::time::Duration::from_secs(2), worker)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got, 7);
    }
}
