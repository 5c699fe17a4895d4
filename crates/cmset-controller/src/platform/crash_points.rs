//! A switch for crash tests: with `CMSET_TEST_CRASH_AT=<n>:before` (or `:after`) in its environment the
//! operator aborts just before sending its n-th write to the API server (or just after the answer to it),
//! with no cleanup at all, as a SIGKILL or an OOM kill would leave things. The end-to-end suite aborts it
//! at every write of a change in turn and checks that a restarted operator converges.
//!
//! Counted: every write of state (revisions, workloads, status); not events, which change nothing cmset
//! reads. Unset (always, outside tests), it costs one relaxed atomic increment per write.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

pub const ENV: &str = "CMSET_TEST_CRASH_AT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    Before,
    After,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashAt {
    pub write: u64,
    pub when: When,
}

/// Parses `<n>:before` or `<n>:after` (n from 1).
pub fn parse(value: &str) -> Result<CrashAt, String> {
    let (n, when) = value
        .split_once(':')
        .ok_or_else(|| format!("{ENV}={value}: expected <n>:before or <n>:after"))?;
    let write = n
        .parse::<u64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("{ENV}={value}: the write number counts from 1"))?;
    let when = match when {
        "before" => When::Before,
        "after" => When::After,
        other => return Err(format!("{ENV}={value}: `{other}` is neither before nor after")),
    };
    Ok(CrashAt { write, when })
}

fn configured() -> Option<CrashAt> {
    static AT: OnceLock<Option<CrashAt>> = OnceLock::new();
    *AT.get_or_init(|| {
        let value = std::env::var(ENV).ok()?;
        match parse(&value) {
            Ok(at) => Some(at),
            Err(e) => {
                // A test that asked for a crash and gets none must not pass by accident.
                eprintln!("{e}");
                std::process::abort();
            }
        }
    })
}

static WRITES: AtomicU64 = AtomicU64::new(0);

/// Called just before a write is sent; returns its number, for [`after_write`].
pub fn before_write(operation: &str) -> u64 {
    let n = WRITES.fetch_add(1, Ordering::Relaxed) + 1;
    crash_if(n, When::Before, operation);
    n
}

/// Called once write `n` has been answered successfully.
pub fn after_write(n: u64, operation: &str) {
    crash_if(n, When::After, operation);
}

fn crash_if(n: u64, when: When, operation: &str) {
    if configured() == Some(CrashAt { write: n, when }) {
        eprintln!("{ENV}: aborting {when:?} write {n} ({operation})");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_reads_a_write_number_and_a_side() {
        assert_eq!(
            parse("3:before"),
            Ok(CrashAt {
                write: 3,
                when: When::Before
            })
        );
        assert_eq!(
            parse("12:after"),
            Ok(CrashAt {
                write: 12,
                when: When::After
            })
        );
        for bad in ["", "3", "0:before", "x:after", "3:during", "-1:after"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
