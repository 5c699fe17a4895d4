//! The cluster-wide rollout budget (`--max-moving-workloads`), shared by every scope's index: one
//! [`Budget`] behind a lock, keyed by workload kind and key.
//!
//! The index feeds it what the workload watches show (a move rolling out or not, gone) on every
//! replica, so a new leader starts from what is moving now; the workload controller asks it before each
//! move, and the set controller reads where a waiting workload stands for the set's status. A freed
//! slot wakes the workloads whose turn came through the scope that watches each ([`RolloutBudget::wake`]):
//! with one scope per watched namespace, a slot freed in one namespace wakes a workload of another at
//! once, without polling.
//!
//! Every change of the book is reported to the metrics at once ([`RolloutBudget::report_to`]), whoever
//! made it: a slot freed by a watch event moves the gauges as one freed by a reconcile does.
//!
//! It lives in the engine, beside the index that feeds it, rather than with the controllers that ask
//! it: its book is index-fed state every replica keeps, and the engine must not need the controllers'
//! room to compile.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use cmset_core::policy::budget::{Admit, Budget, Waiting};
use cmset_core::workloads::observe::WorkloadKind;

use crate::engine::index::{Index, Key};
use crate::platform::metrics::Metrics;

/// A workload, cluster-wide.
pub type WorkloadId = (WorkloadKind, Key);

/// A move's place in line: when the revision it moves to was created, in Unix seconds (the workload
/// controller's decisions compute it: `reconcile::decisions::Gathered::turn`); ties go by workload.
pub type Turn = i64;

/// The budget's bookkeeping, shared (see the module's doc).
pub struct RolloutBudget {
    book: Mutex<Budget<WorkloadId, Turn>>,
    /// Each scope's index, with the namespace it watches (`None`: all): the way to its trigger queues.
    routes: Mutex<Vec<(Option<String>, Weak<Index>)>>,
    /// Where each change of the book is reported, once the process has its metrics.
    metrics: OnceLock<Arc<Metrics>>,
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
            metrics: OnceLock::new(),
        }
    }

    /// Reports how full the budget is to `metrics` now and after every change from now on.
    pub fn report_to(&self, metrics: Arc<Metrics>) {
        if self.metrics.set(metrics).is_ok() {
            self.report(&self.book());
        }
    }

    /// Sets the gauges from `book`, while its lock is held: two changes cannot report out of order.
    fn report(&self, book: &Budget<WorkloadId, Turn>) {
        if let Some(metrics) = self.metrics.get() {
            let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
            metrics.observe_budget(
                Some(count(book.cap().unwrap_or(0))),
                count(book.in_use()),
                count(book.waiting()),
            );
        }
    }

    /// Applies `change` to the book and reports the result.
    fn change<T>(&self, change: impl FnOnce(&mut Budget<WorkloadId, Turn>) -> T) -> T {
        let mut book = self.book();
        let result = change(&mut book);
        self.report(&book);
        result
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
                .filter(|(_, key)| namespace.as_deref().is_none_or(|n| *n == *key.namespace))
                .cloned()
                .collect();
            index.wake(watched);
        }
    }

    fn book(&self) -> MutexGuard<'_, Budget<WorkloadId, Turn>> {
        // A panic while holding the lock leaves plain maps behind, still consistent per entry.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// See [`Budget::observe`].
    pub fn observe(&self, w: &WorkloadId, generation: i64, rolling: bool) -> Vec<WorkloadId> {
        self.change(|book| book.observe(w, generation, rolling))
    }

    /// See [`Budget::forget`].
    pub fn forget(&self, w: &WorkloadId) -> Vec<WorkloadId> {
        self.change(|book| book.forget(w))
    }

    /// See [`Budget::withdraw`].
    pub fn withdraw(&self, w: &WorkloadId) -> Vec<WorkloadId> {
        self.change(|book| book.withdraw(w))
    }

    /// See [`Budget::release`].
    pub fn release(&self, w: &WorkloadId) -> Vec<WorkloadId> {
        self.change(|book| book.release(w))
    }

    /// See [`Budget::request`]; also says whether `w` only now began to wait (its sets' status should
    /// say so).
    pub fn request(&self, w: &WorkloadId, turn: Turn, generation: i64) -> (Admit, bool) {
        self.change(|book| {
            let waited = book.position(w).is_some();
            let admit = book.request(w, turn, generation);
            let began = !waited && matches!(admit, Admit::Wait(_));
            (admit, began)
        })
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
    use crate::engine::index::{WorkloadQueue, trigger_channels};

    /// A leading scope's index watching `namespace`, and the queue of its Deployment controller.
    fn scope(
        namespace: &str,
        budget: &Arc<RolloutBudget>,
    ) -> (
        Arc<Index>,
        futures::channel::mpsc::UnboundedReceiver<
            kube::runtime::reflector::ObjectRef<crate::engine::stored_workload::StoredWorkload>,
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

    fn gauges(metrics: &Metrics) -> Vec<String> {
        let mut registry = prometheus_client::registry::Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("cmset_budget_"))
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    }

    fn expect(limit: u64, in_use: u64, waiting: u64) -> Vec<String> {
        vec![
            format!("cmset_budget_in_use {in_use}"),
            format!("cmset_budget_limit {limit}"),
            format!("cmset_budget_waiting {waiting}"),
        ]
    }

    /// The gauges follow the book whoever changes it: the workload controller asking, and the index
    /// feeding it what the watches show (a move done, a workload deleted), with no reconcile after.
    #[test]
    fn the_gauges_follow_every_change_of_the_book() {
        let budget = RolloutBudget::new(1);
        let metrics = Arc::new(Metrics::default());
        budget.report_to(metrics.clone());
        assert_eq!(gauges(&metrics), expect(1, 0, 0), "the cap, from the start");
        let web = (WorkloadKind::Deployment, Key::new("a", "web"));
        let api = (WorkloadKind::Deployment, Key::new("a", "api"));
        assert!(matches!(budget.request(&web, 1, 1).0, Admit::Go));
        assert!(matches!(budget.request(&api, 2, 1).0, Admit::Wait(_)));
        assert_eq!(gauges(&metrics), expect(1, 1, 1));
        // The index sees web's move done: its slot is free at once.
        budget.observe(&web, 2, false);
        assert_eq!(gauges(&metrics), expect(1, 0, 1));
        assert!(matches!(budget.request(&api, 2, 1).0, Admit::Go));
        assert_eq!(gauges(&metrics), expect(1, 1, 0));
        // The index sees api deleted.
        budget.forget(&api);
        assert_eq!(gauges(&metrics), expect(1, 0, 0));
    }
}
