//! What the rest stands on: flags, leader election, per-object backoff, errors, redaction of what the
//! API server sends, metrics, giving freed heap back, log spans not worth their cost, and the crash switch of the tests.

pub mod backoff;
pub mod cli;
pub mod crash_points;
pub mod error;
pub mod heap;
pub mod leader;
pub mod metrics;
pub mod quiet_spans;
pub mod redact;
