//! Reconciling: the set controller (revisions, history, status, waves) and the workload controller
//! (moving references), with what they decide by: metric analysis and its measurer, and the
//! per-workload decisions. The rollout budget they ask is kept by the engine
//! ([`crate::engine::rollout_budget`]): the index feeds it on every replica.

pub mod analysis_io;
pub mod checks_io;
pub mod context;
pub mod decisions;
pub mod measurer;
pub mod prometheus;
pub mod set_controller;
pub mod workload_controller;
