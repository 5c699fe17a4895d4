//! Notifications about rollouts (Slack, Microsoft Teams, any webhook), as plain functions: reading the
//! configuration, deciding which events stand and which subscriptions they fire, rendering messages and
//! building the HTTP requests. Nothing here sends, sleeps or reads a clock; the I/O layer does that and
//! records what it delivered.
//!
//! The flow, one set at a time:
//!
//! 1. [`config::parse`] reads the ConfigMap [`CONFIGMAP_NAME`] and the Secret [`SECRET_NAME`] of the
//!    operator's namespace into a [`Config`], reporting each bad key as a [`Problem`] and keeping the rest.
//! 2. [`subscriptions::of_set`] gathers who wants to hear about the set: its annotations and the
//!    ConfigMap's `subscriptions` whose selector matches its labels.
//! 3. [`triggers::fired`] derives from the set's status alone which events stand
//!    ([`triggers::events`]), keeps the subscriptions whose once-per key differs from the one last
//!    delivered, and renders their messages ([`render`]).
//! 4. [`request::request`] turns each message into an [`request::HttpRequest`]; the I/O layer sends it,
//!    retrying as [`request::Transport::retry_after`] says, and records the once-per key on success.
//!
//! Because the events come from the status and the records, a restart sends nothing twice and misses
//! nothing that still stands. See `docs/notifications.md` for the format.

use std::collections::BTreeMap;
use std::fmt;

use cmset_api::ConfigMapSetStatus;

use crate::set::SetKind;

pub mod config;
pub mod records;
pub mod render;
pub mod request;
pub mod selector;
pub mod subscriptions;
pub mod triggers;
mod yaml;

#[cfg(test)]
mod fixtures;

pub use config::Config;
pub use subscriptions::Subscription;
pub use triggers::{Event, Notification, SubscriptionKey};

/// The ConfigMap, in the operator's namespace, that holds the notification configuration.
pub const CONFIGMAP_NAME: &str = "cmset-notifications";
/// The Secret, in the operator's namespace, whose keys services refer to as `$key`.
pub const SECRET_NAME: &str = "cmset-notifications-secret";
/// Prefix of the subscription annotations on a set.
pub const SUBSCRIBE_PREFIX: &str = "notifications.cmset.dev/subscribe.";

/// Something wrong with one entry: a key of the ConfigMap, an annotation of a set, or a template or
/// trigger met while sending. The entry is skipped (or, for a template, replaced by the built-in one);
/// the others still work. The message never quotes a credential.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Problem {
    /// The ConfigMap key (`service.slack`, `trigger.on-rollout-failed`), or the annotation.
    pub key: String,
    pub message: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// A value that may grant access: a token, a password, a webhook URL, a header value, a proxy URL.
/// `Debug` and `Display` print `<redacted>`; only [`Credential::expose`] gives the text, for the request
/// that is about to be sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(String);

impl Credential {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: for building the request, never for a message.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What the notifications need to know of one set.
#[derive(Clone, Copy, Debug)]
pub struct SetView<'a> {
    pub kind: SetKind,
    pub name: &'a str,
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub annotations: &'a BTreeMap<String, String>,
    pub status: &'a ConfigMapSetStatus,
}
