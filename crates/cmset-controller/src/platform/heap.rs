//! Gives free heap memory back to the kernel after the program has freed a lot of it.
//!
//! glibc's allocator keeps what the program frees for its next allocations. After thousands of sets
//! are deleted, the freed chunks lie between allocations that live on, so the heap's top never
//! shrinks and the process's RSS stays at its peak for good (the bench's leak stage measured 149%
//! of before). `malloc_trim` hands every whole free page of every arena back to the kernel.
//!
//! It runs when the free memory held has grown by [`TRIM_AT`] since it was last at its lowest, not on
//! a schedule of its own: a steady heap, whose free memory comes and goes with each reconcile, is
//! never trimmed only to be faulted in again.

use std::time::Duration;

/// How often the free memory is looked at (`mallinfo2` walks the arenas' bins: cheap, not free).
pub const CHECK_EVERY: Duration = Duration::from_secs(2);

/// Growth of the free memory held that is worth giving back.
pub const TRIM_AT: usize = 4 << 20;

/// The free memory held, as the trimmer remembers it between checks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trimmer {
    /// The least free memory seen since the last trim (or since the start).
    lowest_free: Option<usize>,
}

impl Trimmer {
    /// Whether to trim now that `free` bytes are free in the heap; remembers what it saw.
    pub fn should_trim(&mut self, free: usize) -> bool {
        let lowest = self.lowest_free.map_or(free, |l| l.min(free));
        let trim = free - lowest >= TRIM_AT;
        // After a trim the free chunks are still free (their pages are merely given back), so the
        // count starts again from what is free now.
        self.lowest_free = Some(if trim { free } else { lowest });
        trim
    }
}

/// Checks every [`CHECK_EVERY`] and trims when [`Trimmer::should_trim`] says so, for as long as the
/// process runs. Does nothing where the allocator is not glibc's.
pub async fn keep_trimmed() {
    let mut trimmer = Trimmer::default();
    let mut every = tokio::time::interval(CHECK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(free) = glibc::free_bytes() else {
            return;
        };
        if trimmer.should_trim(free) {
            // Walks and advises every arena, a few milliseconds at most: off the runtime's workers.
            let released = tokio::task::spawn_blocking(glibc::trim).await.unwrap_or(false);
            tracing::debug!(
                free_mib = free >> 20,
                released,
                "gave free heap memory back to the kernel"
            );
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod glibc {
    /// Bytes free in the heap: in free chunks and in fast bins, of every arena.
    pub fn free_bytes() -> Option<usize> {
        // SAFETY: mallinfo2 only reads the allocator's own bookkeeping, under its locks.
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks + info.fsmblks)
    }

    /// Whether any memory was given back.
    pub fn trim() -> bool {
        // SAFETY: malloc_trim takes the allocator's locks itself; 0 keeps no padding at the top.
        unsafe { libc::malloc_trim(0) == 1 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod glibc {
    pub fn free_bytes() -> Option<usize> {
        None
    }

    pub fn trim() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn trims_when_the_free_memory_grew_by_the_threshold_since_its_lowest() {
        // (free bytes at each check, whether to trim then)
        let cases: &[(&str, &[(usize, bool)])] = &[
            (
                "a steady heap",
                &[
                    (2 * MIB, false),
                    (3 * MIB, false),
                    (2 * MIB, false),
                    (5 * MIB, false),
                ],
            ),
            (
                "sets deleted",
                &[
                    (2 * MIB, false),
                    (30 * MIB, true),
                    (30 * MIB, false),
                    (31 * MIB, false),
                ],
            ),
            (
                "reused, then freed again",
                &[
                    (20 * MIB, false),
                    (MIB, false),
                    (4 * MIB, false),
                    (5 * MIB, true),
                    (6 * MIB, false),
                ],
            ),
            (
                "just below, then at",
                &[(0, false), (TRIM_AT - 1, false), (TRIM_AT, true)],
            ),
        ];
        for (case, checks) in cases {
            let mut trimmer = Trimmer::default();
            for (i, (free, want)) in checks.iter().enumerate() {
                assert_eq!(
                    trimmer.should_trim(*free),
                    *want,
                    "{case}: check {i} ({free} bytes free)"
                );
            }
        }
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibcs_free_memory_can_be_read() {
        assert!(glibc::free_bytes().is_some());
    }
}
