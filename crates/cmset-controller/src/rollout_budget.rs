//! The cluster-wide rollout budget (`--max-moving-workloads`), shared by every scope's index: one
//! [`Budget`] behind a lock, keyed by workload kind and key.
//!
//! The index feeds it what the workload watches show (a move rolling out or not, gone) on every
//! replica, so a new leader starts from what is moving now; the workload controller asks it before each
//! move, and the set controller reads where a waiting workload stands for the set's status. A freed
//! slot wakes the workloads whose turn came through the scope that watches each ([`RolloutBudget::wake`]):
//! with one scope per watched namespace, a slot freed in one namespace wakes a workload of another at
//! once, without polling.

use std::sync::{Arc, Mutex, Weak};

use cmset_core::budget::{Admit, Budget, Waiting};
use cmset_core::observe::WorkloadKind;

use crate::index::{Index, Key};

/// A workload, cluster-wide.
pub type WorkloadId = (WorkloadKind, Key);

/// A move's place in line: when the revision it moves to was created, in Unix seconds (see
/// `decisions::Gathered::turn`); ties go by workload.
pub type Turn = i64;

/// The budget's bookkeeping, shared (see the module's doc).
pub struct RolloutBudget {
    book: Mutex<Budget<WorkloadId, Turn>>,
    /// Each scope's index, with the namespace it watches (`None`: all): the way to its trigger queues.
    routes: Mutex<Vec<(Option<String>, Weak<Index>)>>,
}

/// How full the budget is: its cap, the workloads moving, and those waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub cap: usize,
    pub moving: usize,
    pub waiting: usize,
}

impl RolloutBudget {
    pub fn new(cap: usize) -> Self {
        Self {
            book: Mutex::new(Budget::new(Some(cap))),
            routes: Mutex::new(Vec::new()),
        }
    }

    /// Scope `index`, watching `namespace` (or every namespace), wakes the workloads it watches.
    pub fn route(&self, namespace: Option<String>, index: &Arc<Index>) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.retain(|(_, i)| i.strong_count() > 0);
        routes.push((namespace, Arc::downgrade(index)));
    }

    /// Wakes `workloads` (whose turn came) through the scope that watches each.
    pub fn wake(&self, workloads: Vec<WorkloadId>) {
        if workloads.is_empty() {
            return;
        }
        let routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        for (namespace, index) in routes.iter() {
            let Some(index) = index.upgrade() else {
                continue;
            };
            let watched: Vec<WorkloadId> = workloads
                .iter()
                .filter(|(_, key)| namespace.as_deref().is_none_or(|n| n == key.namespace))
                .cloned()
                .collect();
            index.wake(watched);
        }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Budget<WorkloadId, Turn>> {
        // A panic while holding the lock leaves plain maps behind, still consistent per entry.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// See [`Budget::observe`].
    pub fn observe(&self, w: &WorkloadId, generation: i64, rolling: bool) -> Vec<WorkloadId> {
        self.book().observe(w, generation, rolling)
    }

    /// See [`Budget::forget`].
    pub fn forget(&self, w: &WorkloadId) -> Vec<WorkloadId> {
        self.book().forget(w)
    }

    /// See [`Budget::withdraw`].
    pub fn withdraw(&self, w: &WorkloadId) -> Vec<WorkloadId> {
        self.book().withdraw(w)
    }

    /// See [`Budget::release`].
    pub fn release(&self, w: &WorkloadId) -> Vec<WorkloadId> {
        self.book().release(w)
    }

    /// See [`Budget::request`]; also says whether `w` only now began to wait (its sets' status should
    /// say so).
    pub fn request(&self, w: &WorkloadId, turn: Turn, generation: i64) -> (Admit, bool) {
        let mut book = self.book();
        let waited = book.position(w).is_some();
        let admit = book.request(w, turn, generation);
        let began = !waited && matches!(admit, Admit::Wait(_));
        (admit, began)
    }

    /// Where `w` stands, if it waits.
    pub fn position(&self, w: &WorkloadId) -> Option<Waiting> {
        self.book().position(w)
    }

    pub fn usage(&self) -> Usage {
        let book = self.book();
        Usage {
            cap: book.cap().unwrap_or(0),
            moving: book.in_use(),
            waiting: book.waiting(),
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use kube::api::ApiResource;

    use super::*;
    use crate::index::{WorkloadQueue, trigger_channels};

    /// A leading scope's index watching `namespace`, and the queue of its Deployment controller.
    fn scope(
        namespace: &str,
        budget: &Arc<RolloutBudget>,
    ) -> (
        Arc<Index>,
        futures::channel::mpsc::UnboundedReceiver<
            kube::runtime::reflector::ObjectRef<crate::stored_workload::StoredWorkload>,
        >,
    ) {
        let (senders, _receivers) = trigger_channels();
        let (sender, receiver) = futures::channel::mpsc::unbounded();
        let resource = ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        senders
            .workloads
            .write()
            .unwrap()
            .insert(WorkloadKind::Deployment, WorkloadQueue { resource, sender });
        let index = Arc::new(Index::new(Some(senders)).with_budget(Some(budget.clone())));
        index.lead();
        budget.route(Some(namespace.to_string()), &index);
        (index, receiver)
    }

    #[tokio::test]
    async fn a_slot_freed_in_one_namespace_wakes_the_next_in_line_in_another_at_once() {
        let budget = Arc::new(RolloutBudget::new(1));
        let (_a, mut a_queue) = scope("a", &budget);
        let (_b, mut b_queue) = scope("b", &budget);
        let moving = (WorkloadKind::Deployment, Key::new("a", "web"));
        let waiting = (WorkloadKind::Deployment, Key::new("b", "api"));
        assert!(matches!(budget.request(&moving, 1, 1).0, Admit::Go));
        assert!(matches!(budget.request(&waiting, 2, 1).0, Admit::Wait(_)));

        // "web"'s move is seen done: the woken "api" is sent to b's queue, and to no other.
        budget.wake(budget.observe(&moving, 2, false));
        let woken = b_queue.next().await.expect("b's controller is told");
        assert_eq!(
            (woken.name.as_str(), woken.namespace.as_deref()),
            ("api", Some("b"))
        );
        assert!(a_queue.try_recv().is_err(), "nothing for a's scope");
        assert!(matches!(budget.request(&waiting, 2, 1).0, Admit::Go));
    }
}
