//! The cmset operator's I/O layer: it observes the cluster through label-selected watches, asks
//! `cmset-core` what to do, and carries out exactly those writes.
//!
//! Five rooms, by role:
//! - [`engine`]: what the cluster looks like to cmset: the watches, the index they keep current, the
//!   stores the controllers are keyed by, and the views the core plans from.
//! - [`reconcile`]: the set and workload controllers, and what they decide with: analysis, the
//!   rollout budget, Prometheus.
//! - [`notify`]: notifications about rollouts: the configuration, the queue, the sending and the
//!   records of what was delivered.
//! - [`serving`]: what answers over HTTP: admission webhooks, their certificates, metrics and probes,
//!   and the drain on shutdown.
//! - [`platform`]: what any operator needs: flags, leader election, backoff, errors, redaction,
//!   metrics.

// Denied, not forbidden: `platform::heap` alone allows it, for two calls into glibc's allocator.
#![deny(unsafe_code)]

pub mod engine;
pub mod notify;
pub mod platform;
pub mod reconcile;
pub mod serving;
pub mod wiring;
