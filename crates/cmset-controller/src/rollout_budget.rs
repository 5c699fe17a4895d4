//! The cluster-wide rollout budget (`--max-moving-workloads`), shared by every scope's index: one
//! [`Budget`] behind a lock, keyed by workload kind and key.
//!
//! The index feeds it what the workload watches show (rolling out or not, gone) on every replica, so a
//! new leader starts from what is moving now; the workload controller asks it before each move, and
//! the set controller reads where a waiting workload stands for the set's status. Waking a workload
//! whose turn came is the index's job (it holds the trigger queues); a workload of another scope is
//! woken by its own periodic check instead (see `workload_controller`).

use std::sync::Mutex;

use cmset_core::budget::{Admit, Budget, Waiting};
use cmset_core::observe::WorkloadKind;

use crate::index::Key;

/// A workload, cluster-wide.
pub type WorkloadId = (WorkloadKind, Key);

/// A move's place in line: when the revision it moves to was created, in Unix seconds (see
/// `decisions::Gathered::turn`); ties go by workload.
pub type Turn = i64;

/// The budget's bookkeeping, shared (see the module's doc).
pub struct RolloutBudget {
    book: Mutex<Budget<WorkloadId, Turn>>,
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
