//! One view of a set, whatever its kind: a ConfigMapSet (revisions are ConfigMaps, content from its
//! template or a source ConfigMap) or a SecretSet (revisions are Secrets, content from a source Secret).
//!
//! The planners take a [`SetRef`] and never look at the kind themselves except through it, so every
//! promise (naming, history, pinning, status) is made once for both kinds. The kind also decides which
//! references of a pod template a set moves: a ConfigMapSet named `app` never touches a `secretRef`
//! named `app`, and a SecretSet never touches a `configMapRef` ([`SetKind::revision_kind`]).

use std::collections::BTreeMap;
use std::fmt;

use cmset_api::{ConfigMapSet, ConfigMapSetStatus, ConfigMapTemplate, SecretSet, TemplateMetadata};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};

use crate::workloads::refs::Referenced;

/// The type the API server gives a Secret created without one.
pub const DEFAULT_SECRET_TYPE: &str = "Opaque";

/// The kinds of set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SetKind {
    ConfigMapSet,
    SecretSet,
}

impl SetKind {
    pub const ALL: [SetKind; 2] = [Self::ConfigMapSet, Self::SecretSet];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMapSet => "ConfigMapSet",
            Self::SecretSet => "SecretSet",
        }
    }

    /// The kind of its revisions, and so of the references it moves.
    pub fn revision_kind(self) -> Referenced {
        match self {
            Self::ConfigMapSet => Referenced::ConfigMap,
            Self::SecretSet => Referenced::Secret,
        }
    }

    /// The set kind whose revisions are objects of `kind`.
    pub fn of_revisions(kind: Referenced) -> Self {
        match kind {
            Referenced::ConfigMap => Self::ConfigMapSet,
            Referenced::Secret => Self::SecretSet,
        }
    }

    pub fn parse(kind: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

impl fmt::Display for SetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Referenced {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        }
    }
}

impl fmt::Display for Referenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of either kind, borrowed.
#[derive(Clone, Copy, Debug)]
pub enum SetRef<'a> {
    ConfigMap(&'a ConfigMapSet),
    Secret(&'a SecretSet),
}

impl<'a> From<&'a ConfigMapSet> for SetRef<'a> {
    fn from(set: &'a ConfigMapSet) -> Self {
        Self::ConfigMap(set)
    }
}

impl<'a> From<&'a SecretSet> for SetRef<'a> {
    fn from(set: &'a SecretSet) -> Self {
        Self::Secret(set)
    }
}

/// Where a set's content comes from.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// The set holds it (a ConfigMapSet's `template.data` and `binaryData`).
    Inline(Content<'a>),
    /// An object of the revisions' kind in the set's namespace, by name (`spec.configMapName`,
    /// `spec.secretName`).
    Named(&'a str),
}

impl<'a> SetRef<'a> {
    pub fn kind(self) -> SetKind {
        match self {
            Self::ConfigMap(_) => SetKind::ConfigMapSet,
            Self::Secret(_) => SetKind::SecretSet,
        }
    }

    pub fn metadata(self) -> &'a ObjectMeta {
        match self {
            Self::ConfigMap(s) => &s.metadata,
            Self::Secret(s) => &s.metadata,
        }
    }

    pub fn name(self) -> &'a str {
        self.metadata().name.as_deref().unwrap_or_default()
    }

    pub fn namespace(self) -> &'a str {
        self.metadata().namespace.as_deref().unwrap_or_default()
    }

    pub fn uid(self) -> String {
        self.metadata().uid.clone().unwrap_or_default()
    }

    pub fn generation(self) -> Option<i64> {
        self.metadata().generation
    }

    pub fn status(self) -> Option<&'a ConfigMapSetStatus> {
        match self {
            Self::ConfigMap(s) => s.status.as_ref(),
            Self::Secret(s) => s.status.as_ref(),
        }
    }

    pub fn condition(self, type_: &str) -> Option<&'a Condition> {
        self.status()?.conditions.iter().find(|c| c.type_ == type_)
    }

    pub fn template_metadata(self) -> &'a TemplateMetadata {
        match self {
            Self::ConfigMap(s) => &s.spec.template.metadata,
            Self::Secret(s) => &s.spec.template.metadata,
        }
    }

    /// How new revisions roll out, when the set says.
    pub fn rollout(self) -> Option<&'a cmset_api::RolloutSpec> {
        match self {
            Self::ConfigMap(s) => s.spec.rollout.as_ref(),
            Self::Secret(s) => s.spec.rollout.as_ref(),
        }
    }

    /// Whether its rollout is held: `spec.rollout.paused`, or annotation `cmset.dev/paused: "true"`.
    pub fn paused(self) -> bool {
        let annotated = self
            .metadata()
            .annotations
            .as_ref()
            .and_then(|a| a.get(cmset_api::labels::PAUSED))
            .is_some_and(|v| v == "true");
        annotated || self.rollout().is_some_and(|r| r.paused)
    }

    /// Whether every new revision reaches every reader at once, held by nothing and never rolled back
    /// from (`spec.rollout.strategy: Immediate`): for credentials a secret manager rotates.
    pub fn immediate(self) -> bool {
        self.rollout()
            .is_some_and(|r| r.strategy == cmset_api::Strategy::Immediate)
    }

    /// The rollout the change windows may not hold (annotation `cmset.dev/window-override`,
    /// `<revision>@<startedAt>`), if any.
    pub fn window_override(self) -> Option<&'a str> {
        self.metadata()
            .annotations
            .as_ref()?
            .get(cmset_api::labels::WINDOW_OVERRIDE)
            .map(String::as_str)
    }

    /// Whether each next wave waits to be promoted (`spec.rollout.promotion: Manual`).
    pub fn manual_promotion(self) -> bool {
        self.rollout()
            .is_some_and(|r| r.promotion == cmset_api::Promotion::Manual)
    }

    /// The promotion recorded on it (annotation `cmset.dev/promoted`), if it reads as one.
    pub fn promoted(self) -> Option<Promoted<'a>> {
        let value = self
            .metadata()
            .annotations
            .as_ref()?
            .get(cmset_api::labels::PROMOTED)?;
        Promoted::parse(value)
    }

    pub fn revision_history_limit(self) -> i32 {
        match self {
            Self::ConfigMap(s) => s.spec.revision_history_limit,
            Self::Secret(s) => s.spec.revision_history_limit,
        }
    }

    pub fn source(self) -> Source<'a> {
        match self {
            Self::ConfigMap(s) => match &s.spec.config_map_name {
                Some(name) => Source::Named(name),
                None => Source::Inline(Content::of_template(&s.spec.template)),
            },
            Self::Secret(s) => Source::Named(&s.spec.secret_name),
        }
    }

    /// The source's name, in source mode.
    pub fn source_name(self) -> Option<&'a str> {
        match self.source() {
            Source::Named(name) => Some(name),
            Source::Inline(_) => None,
        }
    }

    /// The application's own checks, run against each new revision before wave 0 (`spec.checks`).
    pub fn checks(self) -> &'a [cmset_api::Check] {
        match self {
            Self::ConfigMap(s) => &s.spec.checks,
            Self::Secret(s) => &s.spec.checks,
        }
    }

    /// What its keys' values must be (`spec.validation`).
    pub fn validation(self) -> &'a cmset_api::ValidationSpec {
        match self {
            Self::ConfigMap(s) => &s.spec.validation,
            Self::Secret(s) => &s.spec.validation,
        }
    }

    /// Whether its revisions are Secrets, whose values no message may quote.
    pub fn is_secret(self) -> bool {
        matches!(self, Self::Secret(_))
    }

    pub fn collision_count(self) -> i32 {
        self.status().and_then(|s| s.collision_count).unwrap_or(0)
    }
}

/// The content of a revision, borrowed from where it was read: a set's template, a source ConfigMap or
/// a source Secret. Its `Debug` shows keys, never values.
#[derive(Clone, Copy)]
pub enum Content<'a> {
    ConfigMap {
        data: Option<&'a BTreeMap<String, String>>,
        binary_data: Option<&'a BTreeMap<String, ByteString>>,
    },
    Secret {
        type_: Option<&'a str>,
        data: Option<&'a BTreeMap<String, ByteString>>,
    },
}

impl<'a> Content<'a> {
    pub fn of_template(template: &'a ConfigMapTemplate) -> Self {
        Self::ConfigMap {
            data: template.data.as_ref(),
            binary_data: template.binary_data.as_ref(),
        }
    }

    pub fn of_config_map(cm: &'a ConfigMap) -> Self {
        Self::ConfigMap {
            data: cm.data.as_ref(),
            binary_data: cm.binary_data.as_ref(),
        }
    }

    pub fn of_secret(secret: &'a Secret) -> Self {
        Self::Secret {
            type_: secret.type_.as_deref(),
            data: secret.data.as_ref(),
        }
    }

    /// Whether both hold the same content, as the API server stores it: an empty map is no map, and a
    /// Secret without a type is `Opaque`.
    pub fn same(&self, other: &Content<'_>) -> bool {
        match (*self, *other) {
            (
                Self::ConfigMap { data, binary_data },
                Content::ConfigMap {
                    data: other_data,
                    binary_data: other_binary,
                },
            ) => {
                non_empty(data) == non_empty(other_data) && non_empty(binary_data) == non_empty(other_binary)
            }
            (
                Self::Secret { type_, data },
                Content::Secret {
                    type_: other_type,
                    data: other_data,
                },
            ) => secret_type(type_) == secret_type(other_type) && non_empty(data) == non_empty(other_data),
            _ => false,
        }
    }

    /// The keys it holds (text and binary alike), for messages.
    pub fn keys(&self) -> Vec<&'a str> {
        fn keys<V>(map: Option<&BTreeMap<String, V>>) -> impl Iterator<Item = &str> {
            map.into_iter().flat_map(|m| m.keys().map(String::as_str))
        }
        match *self {
            Self::ConfigMap { data, binary_data } => keys(data).chain(keys(binary_data)).collect(),
            Self::Secret { data, .. } => keys(data).collect(),
        }
    }
}

impl fmt::Debug for Content<'_> {
    /// Keys only: a Secret's values must never reach a log line by way of a `{:?}`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Self::ConfigMap { .. } => "ConfigMap",
            Self::Secret { .. } => "Secret",
        };
        f.debug_struct("Content")
            .field("kind", &kind)
            .field("keys", &self.keys())
            .finish_non_exhaustive()
    }
}

impl PartialEq for Content<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.same(other)
    }
}

fn non_empty<V>(map: Option<&BTreeMap<String, V>>) -> Option<&BTreeMap<String, V>> {
    map.filter(|m| !m.is_empty())
}

fn secret_type(type_: Option<&str>) -> &str {
    type_.filter(|t| !t.is_empty()).unwrap_or(DEFAULT_SECRET_TYPE)
}

/// What the I/O layer knows about a set's content when it plans.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SourceState<'a> {
    /// The set holds its content itself.
    Inline,
    /// The source was read just now.
    Read(Content<'a>),
    /// The identity of the source's current version, from an earlier read: enough to find an existing
    /// revision. The content itself is read only when a new revision must be made of it.
    Known(&'a str),
    /// The source does not exist.
    Missing,
    /// The source could not be read; the reason is the API server's, which never quotes content.
    Unreadable(&'a str),
}

impl<'a> SourceState<'a> {
    /// The content to stamp a new revision from, when it is at hand.
    pub fn content(&self, set: SetRef<'a>) -> Option<Content<'a>> {
        match (self, set.source()) {
            (Self::Inline, Source::Inline(content)) => Some(content),
            (Self::Read(content), _) => Some(*content),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSetSpec, SecretSetSpec};
    use serde_json::json;

    use super::*;

    fn secret(value: serde_json::Value) -> Secret {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_set_s_kind_decides_its_revisions_and_references() {
        let cm = ConfigMapSet::new("app", ConfigMapSetSpec::default());
        let sec = SecretSet::new(
            "app",
            SecretSetSpec {
                secret_name: "app-src".into(),
                ..SecretSetSpec::default()
            },
        );
        assert_eq!(SetRef::from(&cm).kind().revision_kind(), Referenced::ConfigMap);
        assert_eq!(SetRef::from(&sec).kind().revision_kind(), Referenced::Secret);
        assert_eq!(SetRef::from(&sec).source_name(), Some("app-src"));
        assert_eq!(SetRef::from(&cm).source_name(), None);
        for kind in SetKind::ALL {
            assert_eq!(SetKind::of_revisions(kind.revision_kind()), kind);
            assert_eq!(SetKind::parse(kind.as_str()), Some(kind));
        }
    }

    #[test]
    fn secret_content_is_named_like_kustomize_and_never_debug_printed() {
        let s = secret(json!({"type": "Opaque", "data": {"password": "czNjcmV0", "user": "YXBw"}}));
        let content = Content::of_secret(&s);
        assert_eq!(content.identity(), "9k5ddchd8d");
        let shown = format!("{content:?}");
        assert!(shown.contains("password") && !shown.contains("czNjcmV0") && !shown.contains("s3cret"));
    }

    #[test]
    fn sameness_follows_what_the_api_server_stores() {
        let untyped = secret(json!({"data": {"k": "dg=="}}));
        let opaque = secret(json!({"type": "Opaque", "data": {"k": "dg=="}}));
        let tls = secret(json!({"type": "kubernetes.io/tls", "data": {"k": "dg=="}}));
        assert!(Content::of_secret(&untyped).same(&Content::of_secret(&opaque)));
        assert!(!Content::of_secret(&opaque).same(&Content::of_secret(&tls)));
        let empty = secret(json!({"data": {}}));
        let none = secret(json!({}));
        assert!(Content::of_secret(&empty).same(&Content::of_secret(&none)));
        let cm: ConfigMap = serde_json::from_value(json!({"data": {"k": "v"}})).unwrap();
        assert!(!Content::of_config_map(&cm).same(&Content::of_secret(&opaque)));
    }
}

/// A promotion as annotation `cmset.dev/promoted` records it: `<revision>/<wave>@<rollout>` lets the
/// wave after `wave` open in the rollout of `revision` that started at `rollout` (its `startedAt`, see
/// [`rollout_id`]). The form without `@<rollout>`, written by hand or by an older plugin, names no
/// rollout: it promotes the rollout under way unless it was already there when that rollout began.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Promoted<'a> {
    pub revision: &'a str,
    pub wave: i32,
    pub rollout: Option<&'a str>,
    /// The annotation's whole value.
    pub value: &'a str,
}

impl<'a> Promoted<'a> {
    pub fn parse(value: &'a str) -> Option<Self> {
        let (promotion, rollout) = match value.split_once('@') {
            Some((promotion, rollout)) => (promotion, Some(rollout)),
            None => (value, None),
        };
        let (revision, wave) = promotion.rsplit_once('/')?;
        Some(Self {
            revision,
            wave: wave.parse().ok()?,
            rollout,
            value,
        })
    }
}

/// How a promotion names one rollout: the instant it started, as RFC 3339 text. Two rollouts of the
/// same revision (a revert, then the change applied again) start at different seconds.
pub fn rollout_id(started_at: &Time) -> String {
    started_at.0.to_string()
}
