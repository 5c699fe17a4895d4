//! `kubectl cmset diff`: which two revisions to compare, what differs between them, and the text of
//! the diff. This module diffs a ConfigMapSet's revisions; a SecretSet's are compared by
//! [`crate::secret_diff`], which shows keys only.
//!
//! The text is a unified diff of the revisions' content, one section per key that differs:
//!
//! ```text
//! --- app-config-7g5m2bdk4t (revision 2)
//! +++ app-config-9h2c4kfd8m (revision 3)
//! @@ APP_VERSION: changed @@
//! -2
//! +3
//! @@ LOG_LEVEL: added @@
//! +debug
//! @@ app.properties: changed @@
//!  greeting=hello
//! -colour=blue
//! +colour=red
//! @@ logo.png: changed (binary) @@
//! -binary, 8 bytes, sha256 2c26b46b…
//! +binary, 9 bytes, sha256 fcde2b2e…
//! ```
//!
//! Values are diffed line by line with three lines of context; when context leaves part of a value
//! out, each hunk gets its usual `@@ -12,7 +12,8 @@` line. Binary values are never printed: their size
//! and SHA-256 stand for them. Control characters in values are shown escaped (`\x1b`), never sent to
//! the terminal.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use cmset_core::set::SetKind;
use k8s_openapi::api::core::v1::ConfigMap;
use serde::Serialize;
use sha2::{Digest, Sha256};
use similar::{ChangeTag, TextDiff};

use crate::address::SetId;
use crate::revisions::{Revision, label, serialize_kind};
use crate::style::{Palette, Role, visible};

/// Why the two revisions to compare could not be chosen. The messages name the set, the user's
/// arguments and revision names and numbers: nothing of any revision's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    NoRevisions { set: SetId },
    NoCurrent { set: SetId },
    CurrentMissing { set: SetId, name: String },
    OnlyOne { set: SetId, only: String },
    NoPrevious { set: SetId, current: String },
    Unknown { set: SetId, arg: String, known: String },
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoRevisions { set } => {
                write!(f, "{set} has no revisions yet (is the cmset operator running?)")
            }
            Self::NoCurrent { set } => write!(
                f,
                "{set} has no current revision yet: its status names none \
                 (is the cmset operator running?); name two revisions to compare"
            ),
            Self::CurrentMissing { set, name } => write!(
                f,
                "the current revision of {set}, {name:?}, is not among its {}s; \
                 name two revisions to compare",
                set.kind.revision_kind()
            ),
            Self::OnlyOne { set, only } => write!(
                f,
                "{set} has only one revision, {only}: there is nothing to compare it with"
            ),
            Self::NoPrevious { set, current } => write!(
                f,
                "no revision of {set} is older than the current one, {current}; \
                 name two revisions to compare"
            ),
            Self::Unknown { set, arg, known } => {
                write!(f, "{set} has no revision {arg:?}; it has {known}")
            }
        }
    }
}

impl std::error::Error for ResolveError {}

/// `revision 3 (app-abc)`.
fn describe(r: &Revision<'_>) -> String {
    format!("{} ({})", label(r.number), r.name)
}

/// Chooses the two revisions to compare, as indexes into `revisions` (newest first, as
/// [`crate::revisions::revisions_of`] returns them): `(from, to)`.
///
/// - no argument: the revision before the current one (the highest number below it) to the current one;
/// - `A`: A to the current revision;
/// - `A B`: A to B.
///
/// An argument that is a whole number is a revision number; anything else is a revision's name (a
/// ConfigMap's or a Secret's).
pub fn resolve(
    set: &SetId,
    current: Option<&str>,
    revisions: &[Revision<'_>],
    a: Option<&str>,
    b: Option<&str>,
) -> Result<(usize, usize), ResolveError> {
    let set = set.clone();
    if revisions.is_empty() {
        return Err(ResolveError::NoRevisions { set });
    }
    let find = |arg: &str| {
        let found = match arg.trim().parse::<i64>() {
            Ok(n) => revisions.iter().position(|r| r.number == Some(n)),
            Err(_) => revisions.iter().position(|r| r.name == arg),
        };
        found.ok_or_else(|| ResolveError::Unknown {
            set: set.clone(),
            arg: arg.to_string(),
            known: revisions.iter().map(describe).collect::<Vec<_>>().join(", "),
        })
    };
    let current = || {
        let name = current.ok_or_else(|| ResolveError::NoCurrent { set: set.clone() })?;
        revisions
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| ResolveError::CurrentMissing {
                set: set.clone(),
                name: name.to_string(),
            })
    };
    match (a, b) {
        (Some(a), Some(b)) => Ok((find(a)?, find(b)?)),
        (Some(a), None) => Ok((find(a)?, current()?)),
        (None, _) => {
            let to = current()?;
            if revisions.len() == 1 {
                return Err(ResolveError::OnlyOne {
                    set,
                    only: describe(&revisions[0]),
                });
            }
            let no_previous = || ResolveError::NoPrevious {
                set: set.clone(),
                current: describe(&revisions[to]),
            };
            let number = revisions[to].number.ok_or_else(no_previous)?;
            let from = revisions
                .iter()
                .enumerate()
                .filter(|(_, r)| r.number.is_some_and(|n| n < number))
                .max_by_key(|(_, r)| r.number)
                .map(|(i, _)| i)
                .ok_or_else(no_previous)?;
            Ok((from, to))
        }
    }
}

/// A value of a ConfigMap: text from `data`, bytes from `binaryData`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Text(String),
    Binary(Vec<u8>),
}

fn contents(cm: &ConfigMap) -> BTreeMap<String, Value> {
    let text = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::Text(v.clone())));
    let binary = cm
        .binary_data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::Binary(v.0.clone())));
    text.chain(binary).collect()
}

/// A value as reported: text in full, binary data by size and digest only. (Only ever of a ConfigMap: a
/// digest of a Secret's value would give a short one away to a dictionary.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Shown {
    Text(String),
    Binary { size: usize, sha256: String },
}

impl From<&Value> for Shown {
    fn from(value: &Value) -> Self {
        match value {
            Value::Text(t) => Shown::Text(t.clone()),
            Value::Binary(b) => Shown::Binary {
                size: b.len(),
                sha256: Sha256::digest(b).iter().map(|b| format!("{b:02x}")).collect(),
            },
        }
    }
}

impl Shown {
    fn is_binary(&self) -> bool {
        matches!(self, Shown::Binary { .. })
    }

    /// The one line that stands for a binary value.
    fn binary_line(size: usize, sha256: &str) -> String {
        let unit = if size == 1 { "byte" } else { "bytes" };
        format!("binary, {size} {unit}, sha256 {sha256}")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

impl ChangeKind {
    pub(crate) fn word(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Changed => "changed",
        }
    }
}

/// One key that differs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyChange {
    pub key: String,
    pub change: ChangeKind,
    /// The value in the older side, absent when the key was added.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<Shown>,
    /// The value in the newer side, absent when the key was removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<Shown>,
}

/// One side of a comparison.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Side {
    pub config_map: String,
    pub revision: Option<i64>,
}

impl Side {
    fn of(r: &Revision<'_>) -> Self {
        Self {
            config_map: r.name.clone(),
            revision: r.number,
        }
    }
}

/// Everything `diff` reports, as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    /// Always `ConfigMapSet` (a SecretSet's diff is a [`crate::secret_diff::SecretDiffReport`]).
    #[serde(serialize_with = "serialize_kind")]
    pub kind: SetKind,
    pub set: String,
    pub from: Side,
    pub to: Side,
    pub identical: bool,
    /// Keys that differ, in key order.
    pub changes: Vec<KeyChange>,
}

/// Compares the content (`data` and `binaryData`) of two revisions of a ConfigMapSet, found among
/// `config_maps` (the ConfigMaps [`crate::revisions::revisions_of`] chose them from).
pub fn compare(set: &str, from: &Revision<'_>, to: &Revision<'_>, config_maps: &[ConfigMap]) -> DiffReport {
    let old = contents(&config_maps[from.index]);
    let new = contents(&config_maps[to.index]);
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    let changes: Vec<KeyChange> = keys
        .into_iter()
        .filter_map(|key| {
            let (o, n) = (old.get(key), new.get(key));
            let change = match (o, n) {
                (None, Some(_)) => ChangeKind::Added,
                (Some(_), None) => ChangeKind::Removed,
                (Some(o), Some(n)) if o != n => ChangeKind::Changed,
                _ => return None,
            };
            Some(KeyChange {
                key: key.clone(),
                change,
                from: o.map(Shown::from),
                to: n.map(Shown::from),
            })
        })
        .collect();
    DiffReport {
        kind: SetKind::ConfigMapSet,
        set: set.to_string(),
        from: Side::of(from),
        to: Side::of(to),
        identical: changes.is_empty(),
        changes,
    }
}

/// The diff as text; empty when the revisions are identical.
pub fn render_text(report: &DiffReport, palette: Palette) -> String {
    if report.identical {
        return String::new();
    }
    let mut out = Lines {
        text: String::new(),
        palette,
    };
    let side = |s: &Side| format!("{} ({})", s.config_map, label(s.revision));
    out.line(Some(Role::Heading), &format!("--- {}", side(&report.from)));
    out.line(Some(Role::Heading), &format!("+++ {}", side(&report.to)));
    for change in &report.changes {
        render_key(&mut out, change);
    }
    out.text
}

struct Lines {
    text: String,
    palette: Palette,
}

impl Lines {
    fn line(&mut self, role: Option<Role>, line: &str) {
        self.text.push_str(&self.palette.paint(role, line));
        self.text.push('\n');
    }

    /// A line of a value, after its one-character marker; control characters made visible.
    fn value_line(&mut self, tag: ChangeTag, content: &str) {
        let (marker, role) = match tag {
            ChangeTag::Delete => ('-', Some(Role::Removed)),
            ChangeTag::Insert => ('+', Some(Role::Added)),
            ChangeTag::Equal => (' ', None),
        };
        let content = content.strip_suffix('\n').unwrap_or(content);
        self.line(role, &format!("{marker}{}", visible(content)));
    }

    /// Every line of a value that exists on one side only.
    fn whole(&mut self, tag: ChangeTag, value: &Shown) {
        match value {
            Shown::Text(text) => {
                for l in text.lines() {
                    self.value_line(tag, l);
                }
            }
            Shown::Binary { size, sha256 } => self.value_line(tag, &Shown::binary_line(*size, sha256)),
        }
    }
}

const NO_NEWLINE: &str = "\\ No newline at end of value";

fn render_key(out: &mut Lines, change: &KeyChange) {
    let binary = [&change.from, &change.to]
        .into_iter()
        .flatten()
        .any(Shown::is_binary);
    let empty = |v: &Option<Shown>| matches!(v, Some(Shown::Text(t)) if t.is_empty());
    let mut what = change.change.word().to_string();
    if binary {
        what.push_str(" (binary)");
    } else if change.change != ChangeKind::Changed && (empty(&change.from) || empty(&change.to)) {
        what.push_str(" (empty value)");
    }
    out.line(
        Some(Role::Hunk),
        &format!("@@ {}: {what} @@", visible(&change.key)),
    );

    match (&change.from, &change.to) {
        (Some(Shown::Text(old)), Some(Shown::Text(new))) => text_hunks(out, old, new),
        (from, to) => {
            if let Some(from) = from {
                out.whole(ChangeTag::Delete, from);
            }
            if let Some(to) = to {
                out.whole(ChangeTag::Insert, to);
            }
        }
    }
}

/// The line diff of two text values. Range lines (`@@ -12,7 +12,8 @@`) appear only when context leaves
/// part of a value out; the missing-newline hint only when the two values end differently.
fn text_hunks(out: &mut Lines, old: &str, new: &str) {
    let diff = TextDiff::from_lines(old, new);
    let ends_differ = old.ends_with('\n') != new.ends_with('\n');
    let mut unified = diff.unified_diff();
    unified.context_radius(3);
    let hunks: Vec<_> = unified.iter_hunks().collect();
    let whole = hunks.len() == 1 && {
        let ops = hunks[0].ops();
        let (first, last) = (ops[0], ops[ops.len() - 1]);
        first.old_range().start == 0
            && first.new_range().start == 0
            && last.old_range().end == diff.old_len()
            && last.new_range().end == diff.new_len()
    };
    for hunk in &hunks {
        if !whole {
            out.line(Some(Role::Hunk), &hunk.header().to_string());
        }
        for change in hunk.iter_changes() {
            out.value_line(change.tag(), &change.to_string_lossy());
            if ends_differ && change.missing_newline() {
                out.line(Some(Role::Muted), NO_NEWLINE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;
    use cmset_core::set::SetRef;

    fn app() -> SetId {
        SetId::new(SetKind::ConfigMapSet, "app")
    }

    const T: &str = "2026-01-01T00:00:00Z";

    fn three() -> Vec<ConfigMap> {
        vec![
            revision("app-a", Some(1), T, &[("V", "1")]),
            revision("app-b", Some(2), T, &[("V", "2")]),
            revision("app-c", Some(3), T, &[("V", "3")]),
        ]
    }

    #[test]
    fn resolving_revision_arguments() {
        let set = set(Some("app-c"), Some(3), vec![]);
        let cms = three();
        let revs = revisions_of(SetRef::from(&set), &cms);
        let names = |(from, to): (usize, usize)| (revs[from].name.as_str(), revs[to].name.as_str());
        let ok =
            |a: Option<&str>, b: Option<&str>| names(resolve(&app(), Some("app-c"), &revs, a, b).unwrap());

        // (A, B, from, to)
        let table = [
            (None, None, "app-b", "app-c"),
            (Some("1"), None, "app-a", "app-c"),
            (Some("app-a"), None, "app-a", "app-c"),
            (Some("1"), Some("3"), "app-a", "app-c"),
            (Some("3"), Some("1"), "app-c", "app-a"),
            (Some("app-b"), Some("2"), "app-b", "app-b"),
            (Some(" 2 "), Some("app-c"), "app-b", "app-c"),
        ];
        for (a, b, from, to) in table {
            assert_eq!(ok(a, b), (from, to), "{a:?} {b:?}");
        }

        let err = resolve(&app(), Some("app-c"), &revs, Some("7"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmapset \"app\" has no revision \"7\"; it has revision 3 (app-c), revision 2 (app-b), \
             revision 1 (app-a)"
        );
        assert!(matches!(
            resolve(&app(), Some("app-c"), &revs, Some("1"), Some("app-zzz")),
            Err(ResolveError::Unknown { arg, .. }) if arg == "app-zzz"
        ));
    }

    #[test]
    fn previous_is_by_number_not_by_position() {
        // A revert made revision 5 current again; revision 4 exists, 3 was pruned.
        let set = set(Some("app-e"), Some(5), vec![]);
        let cms = vec![
            revision("app-a", Some(1), T, &[]),
            revision("app-d", Some(4), T, &[]),
            revision("app-e", Some(5), T, &[]),
        ];
        let revs = revisions_of(SetRef::from(&set), &cms);
        let (from, to) = resolve(&app(), Some("app-e"), &revs, None, None).unwrap();
        assert_eq!(
            (revs[from].name.as_str(), revs[to].name.as_str()),
            ("app-d", "app-e")
        );
        // The current revision is not the newest when it lost its number; then nothing is "before" it.
        let (from, _) = resolve(&app(), Some("app-d"), &revs, None, None).unwrap();
        assert_eq!(revs[from].name, "app-a");
        let (_, to) = resolve(&app(), Some("app-a"), &revs, Some("4"), None).unwrap();
        assert_eq!(revs[to].name, "app-a");
    }

    #[test]
    fn resolution_errors() {
        let set = set(Some("app-a"), Some(1), vec![]);
        let one = vec![revision("app-a", Some(1), T, &[])];
        let revs = revisions_of(SetRef::from(&set), &one);
        let err = resolve(&app(), Some("app-a"), &revs, None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configmapset \"app\" has only one revision, revision 1 (app-a): there is nothing to compare it with"
        );
        // Comparing it with itself is allowed, and identical.
        assert_eq!(resolve(&app(), Some("app-a"), &revs, Some("1"), None), Ok((0, 0)));

        assert_eq!(
            resolve(&app(), None, &[], None, None),
            Err(ResolveError::NoRevisions { set: app() })
        );
        let cms = three();
        let revs = revisions_of(SetRef::from(&set), &cms);
        assert_eq!(
            resolve(&app(), None, &revs, None, None),
            Err(ResolveError::NoCurrent { set: app() })
        );
        // Two explicit revisions need no status at all.
        assert_eq!(resolve(&app(), None, &revs, Some("1"), Some("2")), Ok((2, 1)));
        assert_eq!(
            resolve(&app(), Some("app-gone"), &revs, None, None),
            Err(ResolveError::CurrentMissing {
                set: app(),
                name: "app-gone".into()
            })
        );
        assert!(matches!(
            resolve(&app(), Some("app-a"), &revs, None, None),
            Err(ResolveError::NoPrevious { .. })
        ));
    }

    fn report(old: ConfigMap, new: ConfigMap) -> DiffReport {
        let set = set(None, None, vec![]);
        let cms = [old, new];
        let revs = revisions_of(SetRef::from(&set), &cms);
        let old = revs
            .iter()
            .find(|r| r.name == cms[0].metadata.name.clone().unwrap())
            .unwrap();
        let new = revs
            .iter()
            .find(|r| r.name == cms[1].metadata.name.clone().unwrap())
            .unwrap();
        compare("app", old, new, &cms)
    }

    /// Revision 2 (`app-b`) holding `old` against revision 3 (`app-c`) holding `new`: the comparison most
    /// tests make.
    fn two_to_three(old: &[(&str, &str)], new: &[(&str, &str)]) -> DiffReport {
        report(
            revision("app-b", Some(2), T, old),
            revision("app-c", Some(3), T, new),
        )
    }

    #[test]
    fn single_line_values_added_removed_changed() {
        let rep = two_to_three(
            &[("GONE", "x"), ("SAME", "s"), ("V", "2")],
            &[("NEW", "debug"), ("SAME", "s"), ("V", "3")],
        );
        let text = render_text(&rep, Palette::PLAIN);
        assert_eq!(
            text,
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ GONE: removed @@
-x
@@ NEW: added @@
+debug
@@ V: changed @@
-2
+3
"
        );
    }

    #[test]
    fn multi_line_values_line_by_line() {
        let rep = two_to_three(
            &[("app.properties", "greeting=hello\ncolour=blue\nsize=1\n")],
            &[("app.properties", "greeting=hello\ncolour=red\nsize=1\n")],
        );
        assert_eq!(
            render_text(&rep, Palette::PLAIN),
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ app.properties: changed @@
 greeting=hello
-colour=blue
+colour=red
 size=1
"
        );
    }

    #[test]
    fn long_values_get_line_numbers_for_each_hunk() {
        let old: String = (1..=20).map(|i| format!("line{i}\n")).collect();
        let new = old
            .replace("line3\n", "LINE3\n")
            .replace("line18\n", "line18\nextra\n");
        let text = render_text(&two_to_three(&[("f", &old)], &[("f", &new)]), Palette::PLAIN);
        assert_eq!(
            text,
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ f: changed @@
@@ -1,6 +1,6 @@
 line1
 line2
-line3
+LINE3
 line4
 line5
 line6
@@ -16,5 +16,6 @@
 line16
 line17
 line18
+extra
 line19
 line20
"
        );
    }

    #[test]
    fn newline_at_end_is_shown_only_when_it_differs() {
        let text = render_text(
            &two_to_three(&[("f", "a\nb\n")], &[("f", "a\nb")]),
            Palette::PLAIN,
        );
        assert_eq!(
            text,
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ f: changed @@
 a
-b
+b
\\ No newline at end of value
"
        );
    }

    #[test]
    fn binary_values_are_summarised_never_printed() {
        let old = with_binary(
            revision("app-b", Some(2), T, &[("t", "x")]),
            "logo.png",
            b"\x89PNG\x00\x1b",
        );
        let new = with_binary(revision("app-c", Some(3), T, &[]), "logo.png", b"a");
        let new = with_binary(new, "t", b"\x00");
        let rep = report(old, new);
        let text = render_text(&rep, Palette::PLAIN);
        assert_eq!(
            text,
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ logo.png: changed (binary) @@
-binary, 6 bytes, sha256 74473dd80d681739812e2b9059ef4a38d7f9f3327c71c4fc7605450f91782f1f
+binary, 1 byte, sha256 ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb
@@ t: changed (binary) @@
-x
+binary, 1 byte, sha256 6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d
"
        );
        assert!(!text.contains("PNG"));
        assert_eq!(
            serde_json::to_value(&rep.changes[0]).unwrap(),
            json!({
                "key": "logo.png",
                "change": "changed",
                "from": {"binary": {"size": 6, "sha256": "74473dd80d681739812e2b9059ef4a38d7f9f3327c71c4fc7605450f91782f1f"}},
                "to": {"binary": {"size": 1, "sha256": "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"}},
            })
        );
    }

    #[test]
    fn added_multi_line_and_empty_values() {
        let rep = two_to_three(&[("e", "")], &[("m", "one\ntwo\n")]);
        assert_eq!(
            render_text(&rep, Palette::PLAIN),
            "\
--- app-b (revision 2)
+++ app-c (revision 3)
@@ e: removed (empty value) @@
@@ m: added @@
+one
+two
"
        );
    }

    #[test]
    fn control_characters_in_values_are_escaped() {
        let rep = two_to_three(&[("k", "\u{1b}[2Jboom")], &[("k", "fine")]);
        let text = render_text(&rep, Palette::PLAIN);
        assert!(text.contains("-\\x1b[2Jboom\n"), "{text}");
        assert!(!crate::style::has_escapes(&text));
    }

    #[test]
    fn identical_revisions_render_nothing() {
        let rep = two_to_three(&[("V", "1")], &[("V", "1")]);
        assert!(rep.identical);
        assert_eq!(render_text(&rep, Palette::COLOR), "");
    }

    #[test]
    fn colour_on_a_terminal_plain_in_a_pipe() {
        let rep = two_to_three(&[("V", "2"), ("W", "w")], &[("V", "3"), ("W", "w")]);
        let coloured = render_text(&rep, Palette::COLOR);
        assert!(coloured.contains("\u{1b}[31m-2\u{1b}[0m\n"), "{coloured:?}");
        assert!(coloured.contains("\u{1b}[32m+3\u{1b}[0m\n"), "{coloured:?}");
        assert!(
            coloured.contains("\u{1b}[36m@@ V: changed @@\u{1b}[0m\n"),
            "{coloured:?}"
        );
        let plain = render_text(&rep, Palette::PLAIN);
        assert!(!crate::style::has_escapes(&plain));
        assert_eq!(anstream::adapter::strip_str(&coloured).to_string(), plain);
    }

    #[test]
    fn json_shape() {
        let rep = two_to_three(&[("V", "2")], &[("N", "n"), ("V", "3")]);
        assert_eq!(
            serde_json::to_value(rep).unwrap(),
            json!({
                "kind": "ConfigMapSet",
                "set": "app",
                "from": {"configMap": "app-b", "revision": 2},
                "to": {"configMap": "app-c", "revision": 3},
                "identical": false,
                "changes": [
                    {"key": "N", "change": "added", "to": {"text": "n"}},
                    {"key": "V", "change": "changed", "from": {"text": "2"}, "to": {"text": "3"}},
                ],
            })
        );
    }
}
