//! The engine: watches feed the index (looked up by key, never scanned) and the reflector stores the
//! controllers are keyed by; views turn API objects into what `cmset-core` plans from. The state the
//! watches feed on every replica lives here too, whoever reads it: the rollout budget's book. The
//! context every writer of state shares ([`context`]) holds only these parts, and a set's status
//! written by this process is one conversation with them ([`own_writes`]).
//!
//! The engine knows only what it indexes and stores: it imports `platform` alone, never the
//! controllers, the notifier or serving, which all read it.

pub mod context;
pub mod index;
pub mod memory;
pub mod own_writes;
pub mod pacer;
pub mod rollout_budget;
pub mod runtime;
pub mod served;
pub mod sparse;
pub mod stored_workload;
pub mod stores;
pub mod tasks;
pub mod views;
pub mod wire;
