//! Revisions: the content hash (kustomize's), the names derived from it and the Kubernetes name rules
//! they obey, what a revision object looks like and who owns it, which revisions are still in use and
//! which history prunes, and the status record that fits any fan-out.
//!
//! "Where is a revision's history decided?" is [`history`]. Uses [`crate::status`],
//! [`crate::workloads`] and [`crate::set`].

pub mod fit;
pub mod hash;
pub mod history;
pub mod naming;
pub mod revision;
