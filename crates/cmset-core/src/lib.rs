//! cmset's pure core: everything the controller decides, as plain functions over plain data.
//!
//! No Kubernetes client, no async, no clock of its own (time is passed in). The I/O layer observes,
//! calls into this crate, and carries out the writes it plans.
//!
//! The crate is a ladder of domains. Each may use the ones listed before it and none after
//! (`tests/arrows.rs` holds the order):
//!
//! 1. [`status`]: the words cmset says (conditions, capped messages, a problem with a field).
//! 2. [`workloads`]: what a workload is, which ConfigMaps and Secrets it names, how healthy it is.
//! 3. [`set`]: one view of a set, whatever its kind.
//! 4. [`revisions`]: a revision's hash, name, shape and owners; which ones history keeps.
//! 5. [`policy`]: what may hold a rollout across sets (change windows, break glass, the budget).
//! 6. [`content`]: whether a set's spec and content are acceptable, and the application's checks.
//! 7. [`analysis`]: metric analysis of a wave.
//! 8. [`rollout`]: which revision each workload names, wave by wave, and the set planner.
//! 9. [`notify`]: notifications about rollouts.
//! 10. [`admission`]: the rollout's decision applied to an object being admitted.
//!
//! docs/architecture.md draws the rooms and follows one config change through them.
#![forbid(unsafe_code)]

pub mod admission;
pub mod analysis;
pub mod content;
pub mod notify;
pub mod policy;
pub mod revisions;
pub mod rollout;
pub mod set;
pub mod status;
pub mod workloads;
