//! Reconciling: the set controller (revisions, history, status, waves) and the workload controller
//! (moving references), with what they decide by: metric analysis and its measurer, the rollout
//! budget, and the per-workload decisions.

pub mod analysis_io;
pub mod decisions;
pub mod measurer;
pub mod prometheus;
pub mod rollout_budget;
pub mod set_controller;
pub mod workload_controller;
