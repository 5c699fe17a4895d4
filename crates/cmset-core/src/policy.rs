//! What may hold a rollout from outside one set's own progress: change windows (a set's own and the
//! cluster's `ChangeWindow`s), the `WindowOverride` that breaks glass through them, and the
//! cluster-wide budget of workloads moving at once.
//!
//! Answers "may it move at this instant, and until when", never "which workload moves"
//! ([`crate::rollout::pinning`] asks). Uses [`crate::status`], [`crate::set`] and [`crate::revisions`] (name rules).

pub mod break_glass;
pub mod budget;
pub mod windows;
