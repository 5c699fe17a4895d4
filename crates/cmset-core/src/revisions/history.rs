//! Which revisions are still in use, and which old ones to prune.
//!
//! "In use" means named by an opted-in workload's pod template, by a retained ReplicaSet or
//! ControllerRevision (what `kubectl rollout undo --to-revision` returns to), or by a Pod. Retained history
//! objects also become extra owners of the revisions they name (see [`crate::revisions::revision::history_owner_reference`]),
//! so a revision with any owner besides its set is in use even when the informer cache has not caught up,
//! and the garbage collector keeps it for exactly as long as the history object exists. A DELETE ignores
//! owners, so pruning checks them itself.

use std::collections::BTreeSet;

use crate::workloads::observe::{HistoryObject, RevisionView, WorkloadView};
use crate::workloads::refs::Referenced;

/// Everything known to name objects of one kind (the kind of a set's revisions) right now.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    names: BTreeSet<String>,
}

impl Usage {
    pub fn new(kind: Referenced, workloads: &[WorkloadView], history: &[HistoryObject]) -> Self {
        let mut names = BTreeSet::new();
        for w in workloads {
            names.extend(w.referenced_names_of(kind));
        }
        for h in history {
            names.extend(h.referenced.get(kind).iter().cloned());
        }
        Self { names }
    }

    /// Adds the names Pods reference (listed only when something is about to be pruned).
    pub fn with_pods(mut self, pod_refs: &BTreeSet<String>) -> Self {
        self.names.extend(pod_refs.iter().cloned());
        self
    }

    /// Whether anything known names the object `name`.
    pub fn is_named(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Whether `revision` is in use: named by something known, or owned by anything but its set and
    /// the workloads that read it (a history object cmset added, another tool's owner).
    pub fn in_use(&self, revision: &RevisionView, set_uid: &str) -> bool {
        self.is_named(&revision.name)
            || revision
                .owner_references
                .iter()
                .any(|o| o.uid != set_uid && !crate::revisions::revision::is_reader_owner(o))
    }
}

/// The old revisions to delete: beyond the current one, keep the newest `limit` revisions that nothing
/// uses; delete the rest, oldest first. Never the current one, never one in use, never one already
/// being deleted.
pub fn select_prunable<'a>(
    revisions: &'a [RevisionView],
    current: &str,
    limit: i32,
    usage: &Usage,
    set_uid: &str,
) -> Vec<&'a RevisionView> {
    let mut unused: Vec<&RevisionView> = revisions
        .iter()
        .filter(|r| r.name != current && !r.being_deleted && !usage.in_use(r, set_uid))
        .collect();
    // Newest first; a revision without a readable number counts as oldest.
    unused.sort_by(|a, b| {
        b.number()
            .unwrap_or(0)
            .cmp(&a.number().unwrap_or(0))
            .then(b.name.cmp(&a.name))
    });
    let keep = usize::try_from(limit.max(0)).unwrap_or(0);
    let mut doomed: Vec<&RevisionView> = unused.into_iter().skip(keep).collect();
    doomed.reverse();
    doomed
}
