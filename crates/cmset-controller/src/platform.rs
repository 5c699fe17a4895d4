//! What the rest stands on, importing none of the other rooms: the API client, leader election,
//! per-object backoff, errors, redaction of what the API server sends, metadata-only answers to writes,
//! metrics, giving freed heap back,
//! log spans not worth their cost, and the crash switch of the tests.

pub mod api_client;
pub mod backoff;
pub mod crash_points;
pub mod error;
pub mod heap;
pub mod leader;
pub mod metadata_answers;
pub mod metrics;
pub mod quiet_spans;
pub mod redact;
