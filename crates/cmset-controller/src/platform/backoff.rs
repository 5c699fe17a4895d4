//! How long a failing object waits before its next reconcile: exponential per object, capped, with a
//! deterministic jitter, and never sooner than the API server asked (`retryAfterSeconds`).
//!
//! The delays are pure functions of the attempt number, so they are table-tested; the per-object
//! failure counts live in [`Failures`], kept in the controller context.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

/// The first retry of a failed reconcile, doubled on every further failure of the same object.
pub const ERROR_BASE: Duration = Duration::from_secs(1);
/// No failing object waits longer: a fault that clears is noticed within this.
pub const ERROR_CAP: Duration = Duration::from_secs(5 * 60);
/// Conflicts mean the object moved on underneath and a fresh read usually fixes them: retry quickly,
/// but a conflict that keeps coming back (a fighting writer) still backs off.
pub const CONFLICT_BASE: Duration = Duration::from_millis(500);
pub const CONFLICT_CAP: Duration = Duration::from_secs(30);
/// When the API server could not be reached at all, the failure says nothing about the object: retry
/// often enough to converge within seconds of the server coming back (a refused connection is cheap).
pub const UNREACHABLE_CAP: Duration = Duration::from_secs(10);

/// `base · 2^(failures-1)`, capped at `cap`; `failures` counts this one (0 is taken as 1).
pub fn exponential(failures: u32, base: Duration, cap: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    base.checked_mul(1u32 << doublings).unwrap_or(cap).min(cap)
}

/// Shortens `delay` by up to a fifth, by an amount `seed` decides: objects that failed together (an API
/// server outage) do not all come back in the same instant. Never longer than `delay`, so the cap holds.
pub fn jitter(delay: Duration, seed: u64) -> Duration {
    let fifth_thousandths = seed % 1000; // 0..1000 thousandths of a fifth
    delay - delay.mul_f64(fifth_thousandths as f64 / 5000.0)
}

/// What a failure of one object looks like to the delay computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Consecutive failures of this object, this one included.
    pub count: u32,
    pub conflict: bool,
    /// No answer from the API server (connection refused or cut, timeout).
    pub unreachable: bool,
    /// What the API server asked for (`Status.details.retryAfterSeconds`, as on a 429).
    pub retry_after: Option<Duration>,
}

/// The delay before the next reconcile of an object after `failure`, jittered by `seed`.
pub fn delay(failure: Failure, seed: u64) -> Duration {
    let (base, cap) = if failure.conflict {
        (CONFLICT_BASE, CONFLICT_CAP)
    } else if failure.unreachable {
        (ERROR_BASE, UNREACHABLE_CAP)
    } else {
        (ERROR_BASE, ERROR_CAP)
    };
    let backoff = jitter(exponential(failure.count, base, cap), seed);
    // The server's word wins when it asks for longer; it is not capped (it knows its own load).
    failure.retry_after.map_or(backoff, |after| backoff.max(after))
}

/// A seed for [`jitter`] that is stable for one object and attempt (reproducible in tests) and differs
/// between objects.
pub fn seed(key: &impl Hash, count: u32) -> u64 {
    // DefaultHasher::new() uses fixed keys: deterministic across runs, unlike RandomState.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut hasher);
    count.hash(&mut hasher);
    hasher.finish()
}

/// The first retry of a failed watch, and the longest wait between retries (see `runtime`).
pub const WATCH_BASE: Duration = Duration::from_millis(800);
pub const WATCH_CAP: Duration = Duration::from_secs(5);

/// The retry delays of one watch: [`WATCH_BASE`] doubling to [`WATCH_CAP`], jittered differently per
/// watch, so that the watches cut by one outage do not all come back in the same instant.
#[derive(Debug)]
pub struct WatchBackoff {
    failures: u32,
    instance: u64,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Self {
            failures: 0,
            instance: INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        let seed = seed(&self.instance, self.failures);
        Some(jitter(exponential(self.failures, WATCH_BASE, WATCH_CAP), seed))
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// When a watch whose resource version expired (410 Gone: it must list again) may relist at once instead
/// of after the backoff: kube reports the expiry as an error, and after an API server restart every
/// resumed watch gets one, which cost a whole backoff step before anything was seen again. At most one
/// expiry per [`EXPIRY_GRACE`] is passed over, so a server that keeps answering 410 still meets the
/// backoff.
#[derive(Debug, Default)]
pub struct ExpiryGate {
    last: Option<std::time::Instant>,
}

pub const EXPIRY_GRACE: Duration = Duration::from_secs(30);

impl ExpiryGate {
    /// Whether the expiry seen at `now` may skip the backoff.
    pub fn pass_over(&mut self, now: std::time::Instant) -> bool {
        let allowed = self
            .last
            .is_none_or(|last| now.duration_since(last) >= EXPIRY_GRACE);
        if allowed {
            self.last = Some(now);
        }
        allowed
    }
}

/// Consecutive failures per object. An entry is removed on the object's first success, and entries of
/// objects that no longer exist are swept whenever a failure is recorded, so memory stays bounded by
/// the objects that exist and are failing.
#[derive(Debug)]
pub struct Failures<K> {
    counts: Mutex<HashMap<K, u32>>,
}

impl<K: Hash + Eq + Clone> Default for Failures<K> {
    fn default() -> Self {
        Self {
            counts: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone> Failures<K> {
    /// Counts one more failure of `key` and returns the count; first drops every entry `exists` denies.
    pub fn record(&self, key: &K, exists: impl Fn(&K) -> bool) -> u32 {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.retain(|k, _| k == key || exists(k));
        let count = counts.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// The object succeeded (or is gone): its next failure starts from the base again.
    pub fn forget(&self, key: &K) {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    pub fn count(&self, key: &K) -> u32 {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.get(key).copied().unwrap_or(0)
    }

    pub fn len(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn exponential_doubles_from_the_base_up_to_the_cap() {
        let table = [
            (0, S(1)),
            (1, S(1)),
            (2, S(2)),
            (3, S(4)),
            (4, S(8)),
            (8, S(128)),
            (9, S(256)),
            (10, S(300)),
            (11, S(300)),
            (32, S(300)),
            (u32::MAX, S(300)),
        ];
        for (failures, want) in table {
            assert_eq!(
                exponential(failures, ERROR_BASE, ERROR_CAP),
                want,
                "failures {failures}"
            );
        }
    }

    #[test]
    fn conflicts_start_quicker_and_cap_lower() {
        let table = [
            (1, MS(500)),
            (2, S(1)),
            (3, S(2)),
            (6, S(16)),
            (7, S(30)),
            (100, S(30)),
        ];
        for (count, want) in table {
            let failure = Failure {
                count,
                conflict: true,
                unreachable: false,
                retry_after: None,
            };
            assert_eq!(delay(failure, 0), want, "conflict {count}");
        }
    }

    #[test]
    fn an_unreachable_server_is_retried_at_least_every_ten_seconds() {
        let table = [(1, S(1)), (4, S(8)), (5, S(10)), (40, S(10))];
        for (count, want) in table {
            let failure = Failure {
                count,
                conflict: false,
                unreachable: true,
                retry_after: None,
            };
            assert_eq!(delay(failure, 0), want, "unreachable {count}");
        }
    }

    #[test]
    fn one_expiry_per_grace_period_skips_the_backoff() {
        let start = std::time::Instant::now();
        let mut gate = ExpiryGate::default();
        assert!(gate.pass_over(start), "the first relists at once");
        assert!(!gate.pass_over(start + S(1)), "the next one soon after waits");
        assert!(!gate.pass_over(start + EXPIRY_GRACE - MS(1)));
        assert!(
            gate.pass_over(start + EXPIRY_GRACE),
            "a grace period later, at once again"
        );
        assert!(!gate.pass_over(start + EXPIRY_GRACE + S(1)));
    }

    #[test]
    fn watch_retries_double_to_five_seconds_and_reset() {
        use kube::runtime::utils::Backoff;
        let mut watch = WatchBackoff::default();
        let delays: Vec<Duration> = watch.by_ref().take(6).collect();
        let full = [MS(800), MS(1600), MS(3200), S(5), S(5), S(5)];
        for (d, f) in delays.iter().zip(full) {
            assert!(*d <= f && *d >= f.mul_f64(0.8), "{d:?} vs {f:?}");
        }
        watch.reset();
        assert!(watch.next().unwrap() <= MS(800));
    }

    #[test]
    fn jitter_shortens_by_at_most_a_fifth() {
        let table = [
            (S(10), 0, S(10)),
            (S(10), 500, S(9)),
            (S(10), 999, MS(8002)),
            (S(10), 1000, S(10)),
            (S(300), 250, S(285)),
            (Duration::ZERO, 7, Duration::ZERO),
        ];
        for (d, seed, want) in table {
            assert_eq!(jitter(d, seed), want, "{d:?} seed {seed}");
        }
        for seed in 0..5000u64 {
            let j = jitter(ERROR_CAP, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            assert!(j <= ERROR_CAP && j >= ERROR_CAP.mul_f64(0.8), "{j:?}");
        }
    }

    #[test]
    fn the_server_asking_for_longer_wins_and_shorter_does_not() {
        let table = [
            (1, Some(S(5)), S(5)),
            (1, Some(MS(100)), S(1)),
            (4, Some(S(3)), S(8)),
            // Longer than the cap: the server knows its load better than the cap does.
            (20, Some(S(600)), S(600)),
            (3, None, S(4)),
        ];
        for (count, retry_after, want) in table {
            let failure = Failure {
                count,
                conflict: false,
                unreachable: false,
                retry_after,
            };
            assert_eq!(delay(failure, 0), want, "{count} {retry_after:?}");
        }
    }

    #[test]
    fn seeds_are_stable_per_object_and_attempt() {
        assert_eq!(seed(&("ns", "a"), 3), seed(&("ns", "a"), 3));
        assert_ne!(seed(&("ns", "a"), 3), seed(&("ns", "a"), 4));
        assert_ne!(seed(&("ns", "a"), 3), seed(&("ns", "b"), 3));
    }

    #[test]
    fn failures_count_per_object_reset_on_success_and_forget_the_gone() {
        let failures = Failures::<&str>::default();
        assert_eq!(failures.record(&"a", |_| true), 1);
        assert_eq!(failures.record(&"a", |_| true), 2);
        assert_eq!(failures.record(&"b", |_| true), 1);
        assert_eq!(failures.count(&"a"), 2);
        failures.forget(&"a");
        assert_eq!(failures.count(&"a"), 0);
        assert_eq!(failures.record(&"a", |_| true), 1);
        // "b" was deleted: the next recorded failure sweeps it out.
        assert_eq!(failures.record(&"c", |k| *k != "b"), 1);
        assert_eq!(failures.count(&"b"), 0);
        assert_eq!(failures.len(), 2);
    }
}
