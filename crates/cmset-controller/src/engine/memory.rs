//! What the set controller remembers between two reconciles of a set: a fingerprint of the status it
//! last wrote, with the versions of the set it was planned from and answered with (until its store
//! shows that write: a plan from a store behind it waits), and since when the set's deferrable writes
//! have waited. A fingerprint, not the status: a quiet set's entry may stay until the next sweep, and a
//! set with thousands of workloads has a status of hundreds of kilobytes. The status writes read and
//! write it through [`crate::engine::own_writes`] alone.
//!
//! Both are per set and bounded: an entry goes when it has served (the write is seen, the deferral
//! ends), and entries of sets that no longer exist are swept whenever a map has doubled since its last
//! sweep, so a cluster that creates and deletes sets all day (CI namespaces) does not grow the process.
//! The sweep costs O(entries) once per doubling: O(1) per insert, amortised.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Instant;

use cmset_api::ConfigMapSetStatus;
use sha2::{Digest, Sha256};

use crate::engine::index::SetId;
use crate::engine::sparse::ShrinkIfSparse;

/// Below this many entries a map is never swept.
const SWEEP_FLOOR: usize = 64;

/// A map whose entries for keys that no longer exist are dropped as it grows.
#[derive(Debug)]
pub struct Swept<K, V> {
    map: HashMap<K, V>,
    sweep_at: usize,
}

impl<K: Hash + Eq, V> Default for Swept<K, V> {
    fn default() -> Self {
        Self {
            map: HashMap::new(),
            sweep_at: SWEEP_FLOOR,
        }
    }
}

impl<K: Hash + Eq, V> Swept<K, V> {
    /// Inserts, then sweeps out every entry whose key `exists` denies if the map has reached the size
    /// for its next sweep.
    pub fn insert(&mut self, key: K, value: V, exists: impl Fn(&K) -> bool) {
        self.map.insert(key, value);
        if self.map.len() >= self.sweep_at {
            self.map.retain(|k, _| exists(k));
            self.sweep_at = (self.map.len() * 2).max(SWEEP_FLOOR);
            self.shrink_if_sparse();
        }
    }

    /// Gives back the room of a map that emptied to a quarter of its capacity ([`ShrinkIfSparse`]).
    fn shrink_if_sparse(&mut self) {
        self.map.shrink_if_sparse();
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let removed = self.map.remove(key);
        self.shrink_if_sparse();
        removed
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// The set controller's memory of its own writes (see the module's doc).
#[derive(Default)]
pub struct SetMemory {
    /// The last status written for each set.
    written: Mutex<Swept<SetId, Written>>,
    /// Since when each set has had only deferrable writes planned.
    deferred: Mutex<Swept<SetId, Instant>>,
}

/// A status this process wrote.
#[derive(Debug)]
struct Written {
    /// The resourceVersion of the set it was planned from.
    from: Option<String>,
    /// The resourceVersion the API server answered it with (the same as `from` when it changed
    /// nothing).
    to: Option<String>,
    fingerprint: Fingerprint,
}

/// SHA-256 of a status's JSON: equal statuses serialize alike (every map in it is ordered).
type Fingerprint = [u8; 32];

fn fingerprint(status: &ConfigMapSetStatus) -> Fingerprint {
    let mut hasher = Sha256::new();
    // Writing into a hasher cannot fail, and a status always serializes.
    serde_json::to_writer(HashWriter(&mut hasher), status).expect("a status always serializes");
    hasher.finalize().into()
}

/// Streams the JSON into the hasher: no copy of a large status is made.
struct HashWriter<'h>(&'h mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl SetMemory {
    /// Whether `status` is what was written for `set` planned from `version`, the version the store
    /// still shows. An entry for another version has served (the store moved on) and is dropped.
    pub fn wrote_already(&self, set: &SetId, version: &Option<String>, status: &ConfigMapSetStatus) -> bool {
        let mut written = lock(&self.written);
        match written.get(set) {
            Some(wrote) if wrote.from == *version => wrote.fingerprint == fingerprint(status),
            Some(_) => {
                written.remove(set);
                false
            }
            None => false,
        }
    }

    /// Whether the store, showing `set` at `version`, has not yet seen the last status this process
    /// wrote for it: the write was planned from `version` and made a new one. A plan from that store
    /// starts from older state than the API server holds.
    pub fn behind_own_write(&self, set: &SetId, version: &Option<String>) -> bool {
        lock(&self.written)
            .get(set)
            .is_some_and(|wrote| wrote.from == *version && wrote.to != *version)
    }

    /// Remembers that `status` was written for `set`, planned from `from` and answered with `to`.
    pub fn remember_written(
        &self,
        set: &SetId,
        from: Option<String>,
        to: Option<String>,
        status: &ConfigMapSetStatus,
        exists: impl Fn(&SetId) -> bool,
    ) {
        let written = Written {
            from,
            to,
            fingerprint: fingerprint(status),
        };
        lock(&self.written).insert(set.clone(), written, exists);
    }

    /// Since when `set`'s writes have been deferred, starting now if they were not.
    pub fn deferred_since(&self, set: &SetId, now: Instant, exists: impl Fn(&SetId) -> bool) -> Instant {
        let mut deferred = lock(&self.deferred);
        if let Some(since) = deferred.get(set) {
            return *since;
        }
        deferred.insert(set.clone(), now, exists);
        now
    }

    pub fn forget_deferred(&self, set: &SetId) {
        lock(&self.deferred).remove(set);
    }

    /// Forgets everything about `set` (it is being deleted).
    pub fn forget(&self, set: &SetId) {
        lock(&self.written).remove(set);
        lock(&self.deferred).remove(set);
    }

    /// Room held, for tests: (written, deferred).
    #[cfg(test)]
    fn capacities(&self) -> (usize, usize) {
        (
            lock(&self.written).map.capacity(),
            lock(&self.deferred).map.capacity(),
        )
    }

    /// Entries held, for tests and the debug log: (written, deferred).
    pub fn sizes(&self) -> (usize, usize) {
        (lock(&self.written).len(), lock(&self.deferred).len())
    }
}

#[cfg(test)]
mod tests {
    use cmset_core::set::SetKind;

    use super::*;
    use crate::engine::index::Key;

    fn id(n: usize) -> SetId {
        (SetKind::ConfigMapSet, Key::new("ci", &format!("set-{n}")))
    }

    #[test]
    fn sets_created_and_deleted_all_day_leave_no_trace_beyond_a_bound() {
        let memory = SetMemory::default();
        let live = |set: &SetId| &*set.1.name == "set-0";
        let start = Instant::now();
        for n in 0..100_000 {
            memory.remember_written(
                &id(n),
                Some("1".into()),
                Some("2".into()),
                &ConfigMapSetStatus::default(),
                live,
            );
            memory.deferred_since(&id(n), start, live);
        }
        let (written, deferred) = memory.sizes();
        assert!(
            written <= SWEEP_FLOOR && deferred <= SWEEP_FLOOR,
            "{written} {deferred}"
        );
        // The live set survives every sweep.
        assert!(memory.wrote_already(&id(0), &Some("1".into()), &ConfigMapSetStatus::default()));
    }

    #[test]
    fn sets_forgotten_after_a_burst_leave_no_table_of_the_bursts_size() {
        let memory = SetMemory::default();
        let start = Instant::now();
        for n in 0..5_000 {
            let status = ConfigMapSetStatus::default();
            memory.remember_written(&id(n), None, Some("1".into()), &status, |_| true);
            memory.deferred_since(&id(n), start, |_| true);
        }
        let (written, deferred) = memory.capacities();
        assert!(written >= 5_000 && deferred >= 5_000, "{written} {deferred}");
        for n in 0..5_000 {
            memory.forget(&id(n));
        }
        assert_eq!(memory.sizes(), (0, 0));
        let (written, deferred) = memory.capacities();
        assert!(
            written <= SWEEP_FLOOR * 2 && deferred <= SWEEP_FLOOR * 2,
            "{written} {deferred}"
        );
    }

    #[test]
    fn a_write_is_remembered_until_the_store_shows_another_version() {
        let memory = SetMemory::default();
        let status = ConfigMapSetStatus {
            revision: Some(2),
            ..Default::default()
        };
        memory.remember_written(&id(1), Some("5".into()), Some("6".into()), &status, |_| true);
        assert!(memory.wrote_already(&id(1), &Some("5".into()), &status));
        assert!(!memory.wrote_already(&id(1), &Some("5".into()), &ConfigMapSetStatus::default()));
        assert!(
            !memory.wrote_already(&id(1), &Some("6".into()), &status),
            "moved on"
        );
        assert_eq!(memory.sizes().0, 0, "an entry that served is dropped");
    }

    #[test]
    fn the_store_is_behind_its_own_write_until_it_shows_another_version() {
        let memory = SetMemory::default();
        let v = |n: &str| Some(n.to_string());
        assert!(!memory.behind_own_write(&id(1), &v("5")), "nothing written");
        memory.remember_written(&id(1), v("5"), v("6"), &ConfigMapSetStatus::default(), |_| true);
        assert!(memory.behind_own_write(&id(1), &v("5")));
        assert!(
            !memory.behind_own_write(&id(1), &v("6")),
            "the store shows the write"
        );
        assert!(!memory.behind_own_write(&id(1), &v("7")), "or later");
        assert!(!memory.behind_own_write(&id(2), &v("5")), "another set");
        // A write that changed nothing made no new version: the store is not behind it.
        memory.remember_written(&id(3), v("5"), v("5"), &ConfigMapSetStatus::default(), |_| true);
        assert!(!memory.behind_own_write(&id(3), &v("5")));
    }

    #[test]
    fn a_large_status_is_told_apart_by_its_fingerprint_alone() {
        let workload = |n: usize| cmset_api::WorkloadStatus {
            kind: "Deployment".into(),
            name: format!("reader-{n}"),
            uid: format!("uid-{n}"),
            revision: "app-abc".into(),
            ..Default::default()
        };
        let status = ConfigMapSetStatus {
            workloads: (0..5_000).map(workload).collect(),
            ..Default::default()
        };
        let memory = SetMemory::default();
        memory.remember_written(&id(1), Some("5".into()), Some("6".into()), &status, |_| true);
        assert!(memory.wrote_already(&id(1), &Some("5".into()), &status.clone()));
        // One field of one entry of thousands differs: not what was written.
        let mut other = status.clone();
        other.workloads[4_321].message = Some("waits for wave 1".into());
        assert!(!memory.wrote_already(&id(1), &Some("5".into()), &other));
        // Order matters as the API server keeps it.
        let mut reordered = status.clone();
        reordered.workloads.swap(0, 1);
        assert!(!memory.wrote_already(&id(1), &Some("5".into()), &reordered));
    }

    #[test]
    fn a_deferral_keeps_its_start_until_forgotten() {
        let memory = SetMemory::default();
        let t0 = Instant::now();
        let t1 = t0 + std::time::Duration::from_millis(300);
        assert_eq!(memory.deferred_since(&id(1), t0, |_| true), t0);
        assert_eq!(memory.deferred_since(&id(1), t1, |_| true), t0);
        memory.forget_deferred(&id(1));
        assert_eq!(memory.deferred_since(&id(1), t1, |_| true), t1);
        memory.forget(&id(1));
        assert_eq!(memory.sizes(), (0, 0));
    }
}
