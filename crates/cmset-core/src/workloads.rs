//! Workloads as cmset sees them: the table of kinds that carry a pod template, the ConfigMap and
//! Secret references in a pod spec (found and rewritten), what of a pod spec is kept in memory, how
//! healthy a rollout is, and the plain views of what the I/O layer observed.
//!
//! Knows nothing of sets; uses only [`crate::status`].

pub mod health;
pub mod kinds;
pub mod observe;
pub mod refs;
pub mod slim;
