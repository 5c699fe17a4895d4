//! Notifications about rollouts, the I/O half: the configuration watched in the operator's namespace,
//! the sending, and the records of what was delivered. What to send is decided by
//! `cmset_core::notify`.

pub mod sender;
