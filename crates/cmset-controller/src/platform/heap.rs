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

/// `cmset_heap_in_use_bytes` and `cmset_heap_free_bytes`, read from the allocator at each scrape: what
/// the program holds, and the free memory the allocator keeps (part of RSS until it is trimmed). A
/// growing RSS with a flat first figure is the allocator, not kept objects. Left out of the scrape
/// where the allocator is not glibc's.
#[derive(Debug, Default)]
pub struct HeapCollector;

impl prometheus_client::collector::Collector for HeapCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let Some((in_use, free)) = glibc::usage() else {
            return Ok(());
        };
        for (name, help, value) in [
            (
                "cmset_heap_in_use_bytes",
                "Heap memory the program holds (glibc's mallinfo2: allocated chunks and mmapped blocks)",
                in_use,
            ),
            (
                "cmset_heap_free_bytes",
                "Free heap memory the allocator keeps for later allocations, until it is trimmed",
                free,
            ),
        ] {
            let gauge = prometheus_client::metrics::gauge::ConstGauge::new(value as f64);
            let m = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
            gauge.encode(m)?;
        }
        Ok(())
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc")))]
#[allow(unsafe_code)]
mod glibc {
    /// Bytes free in the heap, of every arena (`fordblks` counts the fast bins' chunks too).
    pub fn free_bytes() -> Option<usize> {
        usage().map(|(_, free)| free)
    }

    /// Bytes in use (allocated chunks of every arena, and blocks mmapped on their own) and bytes free.
    pub fn usage() -> Option<(usize, usize)> {
        // SAFETY: mallinfo2 only reads the allocator's own bookkeeping, under its locks.
        let info = unsafe { libc::mallinfo2() };
        Some((info.uordblks + info.hblkhd, info.fordblks))
    }

    /// Whether any memory was given back.
    pub fn trim() -> bool {
        // SAFETY: malloc_trim takes the allocator's locks itself; 0 keeps no padding at the top.
        unsafe { libc::malloc_trim(0) == 1 }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc"))))]
mod glibc {
    pub fn free_bytes() -> Option<usize> {
        None
    }

    pub fn usage() -> Option<(usize, usize)> {
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

    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc")))]
    #[test]
    fn glibcs_free_memory_can_be_read() {
        assert!(glibc::free_bytes().is_some());
    }

    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "mimalloc")))]
    #[test]
    fn memory_in_use_counts_what_the_program_holds() {
        let (before, _) = glibc::usage().expect("glibc reports its heap");
        let held = vec![1u8; 16 * MIB];
        let (with, _) = glibc::usage().expect("glibc reports its heap");
        // Other tests' threads allocate too; 16 MiB stands out of their noise.
        assert!(
            with >= before + 15 * MIB,
            "{before} -> {with} bytes with 16 MiB held"
        );
        drop(held);
        let (after, _) = glibc::usage().expect("glibc reports its heap");
        assert!(
            after + 15 * MIB <= with,
            "{with} -> {after} bytes once it is freed"
        );
    }
}
