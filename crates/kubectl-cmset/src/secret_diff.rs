//! `kubectl cmset diff` on a SecretSet: which keys of two revision Secrets differ, never what they hold.
//!
//! # The contract
//!
//! A SecretSet's diff names keys and nothing of their values, in the text, in `-o json` and `-o yaml`,
//! and in every error: not a value, not a line of one, not its length, not a digest (a SHA-256 of a
//! short password gives it away to anyone with a dictionary, so the size-and-digest summary the
//! ConfigMap diff prints for binary values is not used here). Besides keys it tells each side's `type`,
//! which is not secret: `kubectl get secrets` lists it to anyone who may list Secrets.
//!
//! The two Secrets are read with `get` ([`crate::cluster::Cluster::secret`]; listing revisions reads
//! their metadata only) and compared here, in memory, key by key, as bytes. [`compare`] is the only
//! function that looks at a value, and what it returns holds none; nothing formats a Secret with
//! `Debug`.
//!
//! ```text
//! --- db-7g5m2bdk4t (revision 2)
//! +++ db-9h2c4kfd8m (revision 3)
//! @@ password: changed @@
//! @@ token: removed @@
//! @@ username: added @@
//! ```
//!
//! When the type changed, each header names its side's: `--- db-7g5m2bdk4t (revision 2, type Opaque)`.

use std::collections::{BTreeMap, BTreeSet};

use cmset_core::set::DEFAULT_SECRET_TYPE;
use cmset_core::set::SetKind;
use k8s_openapi::api::core::v1::Secret;
use serde::Serialize;

use crate::diff::ChangeKind;
use crate::revisions::{Revision, label, serialize_kind};
use crate::style::{Palette, Role, visible};

/// One side of the comparison: which Secret, and its type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretSide {
    pub secret: String,
    pub revision: Option<i64>,
    /// The Secret's `type`; `Opaque` when it has none, as the API server defaults it.
    #[serde(rename = "type")]
    pub type_: String,
}

/// One key that differs, and how; never its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyChange {
    pub key: String,
    pub change: ChangeKind,
}

/// Everything `diff` reports on a SecretSet, as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecretDiffReport {
    /// Always `SecretSet`.
    #[serde(serialize_with = "serialize_kind")]
    pub kind: SetKind,
    pub set: String,
    pub from: SecretSide,
    pub to: SecretSide,
    /// Same type, same keys, and the same bytes under each key.
    pub identical: bool,
    pub type_changed: bool,
    /// Keys that were added, removed or changed, in key order.
    pub changes: Vec<KeyChange>,
}

fn side(r: &Revision<'_>, secret: &Secret) -> SecretSide {
    SecretSide {
        secret: r.name.clone(),
        revision: r.number,
        type_: secret
            .type_
            .as_deref()
            .filter(|t| !t.is_empty())
            .unwrap_or(DEFAULT_SECRET_TYPE)
            .to_string(),
    }
}

/// Compares revision `from`, whose Secret is `old`, with revision `to`, whose Secret is `new`: their
/// types, and the bytes of their `data`, key by key. The report holds keys and types only.
pub fn compare(
    set: &str,
    from: &Revision<'_>,
    old: &Secret,
    to: &Revision<'_>,
    new: &Secret,
) -> SecretDiffReport {
    let none = BTreeMap::new();
    let old_data = old.data.as_ref().unwrap_or(&none);
    let new_data = new.data.as_ref().unwrap_or(&none);
    let keys: BTreeSet<&String> = old_data.keys().chain(new_data.keys()).collect();
    let changes: Vec<KeyChange> = keys
        .into_iter()
        .filter_map(|key| {
            let change = match (old_data.get(key), new_data.get(key)) {
                (None, Some(_)) => ChangeKind::Added,
                (Some(_), None) => ChangeKind::Removed,
                (Some(o), Some(n)) if o.0 != n.0 => ChangeKind::Changed,
                _ => return None,
            };
            Some(KeyChange {
                key: key.clone(),
                change,
            })
        })
        .collect();
    let (from, to) = (side(from, old), side(to, new));
    let type_changed = from.type_ != to.type_;
    SecretDiffReport {
        kind: SetKind::SecretSet,
        set: set.to_string(),
        identical: changes.is_empty() && !type_changed,
        type_changed,
        from,
        to,
        changes,
    }
}

/// The diff as text: one `@@ KEY: added|removed|changed @@` line per key, and no value; empty when the
/// revisions are identical.
pub fn render_text(report: &SecretDiffReport, palette: Palette) -> String {
    if report.identical {
        return String::new();
    }
    let header = |marker: &str, s: &SecretSide| {
        let mut text = format!("{marker} {} ({}", s.secret, label(s.revision));
        if report.type_changed {
            text.push_str(&format!(", type {}", s.type_));
        }
        text.push(')');
        palette.paint(Some(Role::Heading), &visible(&text)) + "\n"
    };
    let mut out = header("---", &report.from) + &header("+++", &report.to);
    for change in &report.changes {
        let line = format!("@@ {}: {} @@", visible(&change.key), change.change.word());
        out.push_str(&palette.paint(Some(Role::Hunk), &line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use cmset_api::SecretSet;
    use cmset_core::set::SetRef;
    use serde_json::json;

    use super::*;
    use crate::cli::Output;
    use crate::output::structured;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;

    const T: &str = "2026-01-01T00:00:00Z";

    /// Revision 2 (`app-b`, of type `old_type`, holding `old`) against revision 3 (`app-c`).
    fn two_to_three(
        old_type: Option<&str>,
        old: &[(&str, &[u8])],
        new_type: Option<&str>,
        new: &[(&str, &[u8])],
    ) -> SecretDiffReport {
        let set: SecretSet = secret_set(Some("app-c"), Some(3), vec![]);
        let secrets = [
            secret_revision("app-b", Some(2), T, old_type, old),
            secret_revision("app-c", Some(3), T, new_type, new),
        ];
        let revisions = revisions_of(SetRef::from(&set), &secrets);
        let (from, to) = (&revisions[1], &revisions[0]);
        compare("app", from, &secrets[from.index], to, &secrets[to.index])
    }

    /// Every kind of change, with values that must never be shown: text, binary, and the same bytes
    /// moved from one key to another.
    fn every_change() -> SecretDiffReport {
        two_to_three(
            None,
            &[
                ("password", SECRET_TEXT),
                ("token", SECRET_BINARY),
                ("same", SECRET_OTHER),
                ("empty", b""),
            ],
            Some("Opaque"),
            &[
                ("password", SECRET_BINARY),
                ("username", SECRET_TEXT),
                ("same", SECRET_OTHER),
                ("tls.key", SECRET_OTHER),
            ],
        )
    }

    #[test]
    fn keys_only() {
        let report = every_change();
        assert!(!report.identical);
        assert!(!report.type_changed, "no type is Opaque");
        assert_eq!(
            render_text(&report, Palette::PLAIN),
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ empty: removed @@
@@ password: changed @@
@@ tls.key: added @@
@@ token: removed @@
@@ username: added @@
"
        );
    }

    #[test]
    fn no_value_in_any_output_format() {
        let report = every_change();
        let outputs = [
            render_text(&report, Palette::PLAIN),
            render_text(&report, Palette::COLOR),
            structured(&report, Output::Json).unwrap().unwrap(),
            structured(&report, Output::Yaml).unwrap().unwrap(),
            format!("{report:?}"),
        ];
        for out in &outputs {
            assert_no_secret_values(out);
            assert!(out.contains("password"), "keys are shown: {out}");
        }
        // Not even the emptiness or the length of a value.
        assert!(!outputs[0].contains("empty value"));
        assert!(!outputs[2].contains("size") && !outputs[2].contains("sha256"));
    }

    #[test]
    fn json_shape() {
        let report = two_to_three(
            Some("Opaque"),
            &[("password", SECRET_TEXT)],
            Some("kubernetes.io/basic-auth"),
            &[("password", SECRET_TEXT), ("username", SECRET_OTHER)],
        );
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            json!({
                "kind": "SecretSet",
                "set": "app",
                "from": {"secret": "app-b", "revision": 2, "type": "Opaque"},
                "to": {"secret": "app-c", "revision": 3, "type": "kubernetes.io/basic-auth"},
                "identical": false,
                "typeChanged": true,
                "changes": [{"key": "username", "change": "added"}],
            })
        );
        assert_eq!(
            structured(&report, Output::Yaml).unwrap().unwrap(),
            "\
kind: SecretSet
set: app
from:
  secret: app-b
  revision: 2
  type: Opaque
to:
  secret: app-c
  revision: 3
  type: kubernetes.io/basic-auth
identical: false
typeChanged: true
changes:
- key: username
  change: added
"
        );
    }

    #[test]
    fn a_changed_type_is_told_in_the_headers() {
        let report = two_to_three(
            Some("Opaque"),
            &[("k", SECRET_TEXT)],
            Some("kubernetes.io/tls"),
            &[("k", SECRET_TEXT)],
        );
        assert!(report.type_changed && !report.identical);
        assert_eq!(
            render_text(&report, Palette::PLAIN),
            "\
--- app-b (revision 2, type Opaque)
+++ app-c (revision 3, type kubernetes.io/tls)
"
        );
    }

    #[test]
    fn identical_revisions_render_nothing() {
        // No type is Opaque, and no data is no keys.
        let report = two_to_three(
            None,
            &[("k", SECRET_BINARY)],
            Some("Opaque"),
            &[("k", SECRET_BINARY)],
        );
        assert!(report.identical);
        assert_eq!(render_text(&report, Palette::COLOR), "");
        let empty = two_to_three(None, &[], None, &[]);
        assert!(empty.identical);
    }

    #[test]
    fn bytes_decide_not_lengths() {
        // Same length, one byte apart; and an empty value against none at all.
        let report = two_to_three(
            None,
            &[("a", b"\x00\x01"), ("b", b"")],
            None,
            &[("a", b"\x00\x02"), ("b", b"")],
        );
        let changed: Vec<(&str, ChangeKind)> = report
            .changes
            .iter()
            .map(|c| (c.key.as_str(), c.change))
            .collect();
        assert_eq!(changed, [("a", ChangeKind::Changed)]);
    }

    #[test]
    fn keys_and_types_cannot_drive_the_terminal() {
        let report = two_to_three(
            Some("Opaque"),
            &[("k\u{1b}[2J", b"x")],
            Some("evil\u{1b}[31m"),
            &[],
        );
        let text = render_text(&report, Palette::PLAIN);
        assert!(text.contains("@@ k\\x1b[2J: removed @@"), "{text}");
        assert!(text.contains("type evil\\x1b[31m)"), "{text}");
        assert!(!crate::style::has_escapes(&text));
    }
}
