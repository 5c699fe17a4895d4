//! cmset's pure core: everything the controller decides, as plain functions over plain data.
//!
//! No Kubernetes client, no async, no clock of its own (time is passed in). The I/O layer observes,
//! calls into this crate, and carries out the writes it plans.
#![forbid(unsafe_code)]

pub mod admission;
pub mod analysis;
pub mod break_glass;
pub mod budget;
pub mod check_gate;
pub mod checks;
pub mod conditions;
pub mod content_check;
pub mod decide;
pub mod fit;
pub mod forecast;
pub mod hash;
pub mod health;
pub mod history;
pub mod hold;
pub mod kinds;
pub mod message;
pub mod moved;
pub mod naming;
pub mod notify;
pub mod observe;
pub mod plan;
pub mod refs;
pub mod revision;
pub mod rollout;
pub mod set;
pub mod slim;
pub mod validate;
pub mod waves;
pub mod window_hold;
pub mod windows;
