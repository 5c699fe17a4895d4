//! Notifications about rollouts, the I/O half: the configuration watched in the operator's namespace
//! ([`config_watch`]), the queue fair between namespaces ([`fair_queue`]), the records
//! ([`notifier`]), and the sending ([`sender`]). What to
//! send, to whom and when is decided by `cmset_core::notify`.

pub mod config_watch;
pub mod fair_queue;
pub mod notifier;
pub mod sender;
