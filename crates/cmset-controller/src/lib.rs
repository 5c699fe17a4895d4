//! The cmset operator's I/O layer: it observes the cluster through label-selected watches, asks
//! `cmset-core` what to do, and carries out exactly those writes.
//!
//! Five rooms, by role, and one above them that puts them together. Each room imports only rooms
//! listed after it (`platform` none), so none needs a room above it to compile:
//! - [`wiring`]: the flags, and the leading of a scope: the context the controllers share is assembled
//!   here, and the controllers and the notifier are started.
//! - [`serving`]: what answers over HTTP: admission webhooks, their certificates, metrics and probes,
//!   and the drain on shutdown.
//! - [`reconcile`]: the set and workload controllers, their context, and what they decide with:
//!   analysis and its measurer, Prometheus, the per-workload decisions.
//! - [`notify`]: notifications about rollouts: the configuration, the queue, the sending and the
//!   records of what was delivered.
//! - [`engine`]: what the cluster looks like to cmset: the watches, the index they keep current, the
//!   stores the controllers are keyed by, the views the core plans from, the state the watches feed
//!   (the rollout budget's book), the context every writer shares, and a set's status written by this
//!   process as one conversation ([`engine::own_writes`]: unless written already, remembered as its
//!   own, its echo told to the index).
//! - [`platform`]: what any operator needs: leader election, backoff, errors, redaction, metrics.
//!
//! Where a change goes: a watch, to `engine`; a decision's I/O, to `reconcile` (the decision itself
//! to `cmset-core`); serving, to `serving`; notifications, to `notify`; leader election, to
//! `platform::leader` (and when a replica leads, to `main` and [`wiring::lead`]); a flag, to
//! [`wiring::cli`].

// Denied, not forbidden: `platform::heap` alone allows it, for two calls into glibc's allocator.
#![deny(unsafe_code)]

pub mod engine;
pub mod notify;
pub mod platform;
pub mod reconcile;
pub mod serving;
pub mod wiring;
