//! The words cmset says: status conditions, messages capped to the length Kubernetes allows, and a
//! [`Problem`](problem::Problem) with one field of a spec.
//!
//! Used by every other domain; uses none of them.

pub mod conditions;
pub mod message;
pub mod problem;
