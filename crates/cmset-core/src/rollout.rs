//! The rollout of a set's current revision and the set planner that drives it.
//!
//! - [`decide`]: which revision a workload should name now, asked by the workload controller,
//!   admission and the planner alike; [`pinning`] the references a rollback pinned.
//! - [`waves`]: which workloads may move now, when a wave is done or failed ("where does a change to
//!   how a wave opens go?" is here), gated by [`window_hold`] (the windows at an instant),
//!   [`check_gate`] (the application's checks) and the budget's mark ([`moved`]).
//! - [`hold`]: holding a new workload at admission until its sets have revisions.
//! - [`plan`]: every write a set's controller should make, from the set and what was observed.
//! - [`forecast`]: the planner and the one decision stepped on a scripted clock, for
//!   `kubectl cmset plan`: what a change will do, and when.
//!
//! The top of the decisions: uses every domain below it except [`crate::notify`] and
//! [`crate::admission`].

pub mod check_gate;
pub mod decide;
pub mod forecast;
pub mod hold;
pub mod moved;
pub mod pinning;
pub mod plan;
pub mod waves;
pub mod window_hold;
