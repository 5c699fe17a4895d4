//! The keys a change touches, against the live revision (or `--base`): for a ConfigMapSet each key's
//! diff exactly as `kubectl cmset diff` prints it ([`crate::diff`]); for a SecretSet only which keys
//! were added, removed or changed ([`crate::secret_diff`]), never a value.

use cmset_core::set::{Content, SetRef};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use super::forecast::secret_of;
use super::objects::Objects;
use super::report::Key;
use crate::diff::{self, DiffReport};
use crate::revisions::Revision;
use crate::secret_diff;
use crate::style::Palette;

/// The content `set` had before: its live revision's object in `world`, or the same set's content in
/// `base` (its inline template, or its live revision there). Returns it as a ConfigMap or a Secret,
/// with what it is called.
enum Old {
    ConfigMap(Box<ConfigMap>, String),
    Secret(Box<Secret>, String),
}

fn old_content(
    set: SetRef<'_>,
    live_revision: Option<&str>,
    world: &Objects,
    base: Option<&Objects>,
    namespace: &str,
) -> Option<Old> {
    let revision_kind = if set.is_secret() { "Secret" } else { "ConfigMap" };
    let (objects, from_base) = match base {
        Some(base) => (base, true),
        None => (world, false),
    };
    if from_base && let Some(based) = objects.get(set.kind().as_str(), namespace, set.name()) {
        // The set as `--base` has it: its live revision, when the base holds one, else its template.
        let current = based
            .value
            .pointer("/status/currentRevision")
            .and_then(Value::as_str);
        if let Some(object) = current.and_then(|c| objects.get(revision_kind, namespace, c)) {
            return as_old(set, &object.value, format!("{} (--base)", object.name()));
        }
        if !set.is_secret() {
            let template = based
                .value
                .pointer("/spec/template")
                .cloned()
                .unwrap_or(Value::Null);
            let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                "data": template.get("data"),
                "binaryData": template.get("binaryData"),
            }))
            .ok()?;
            return Some(Old::ConfigMap(Box::new(cm), format!("{} (--base)", set.name())));
        }
        let source = based.value.pointer("/spec/secretName").and_then(Value::as_str)?;
        let secret = objects.get("Secret", namespace, source)?;
        return as_old(set, &secret.value, format!("{source} (--base)"));
    }
    let current = live_revision?;
    let object = objects.get(revision_kind, namespace, current)?;
    as_old(set, &object.value, current.to_string())
}

fn as_old(set: SetRef<'_>, value: &Value, label: String) -> Option<Old> {
    if set.is_secret() {
        Some(Old::Secret(Box::new(secret_of(value)?), label))
    } else {
        Some(Old::ConfigMap(
            Box::new(serde_json::from_value(value.clone()).ok()?),
            label,
        ))
    }
}

fn revision<'a>(name: &str, meta: &'a ObjectMeta, index: usize) -> Revision<'a> {
    Revision {
        name: name.to_string(),
        number: None,
        meta,
        index,
    }
}

/// The keys that differ between what `set` had and `content`, and what they were compared with
/// (`None` when there is nothing to compare with: a new set, or a revision that cannot be read).
pub fn compare(
    set: SetRef<'_>,
    content: Option<&Content<'_>>,
    live_revision: Option<&str>,
    world: &Objects,
    base: Option<&Objects>,
    namespace: &str,
) -> (Vec<Key>, Option<String>) {
    let Some(content) = content else {
        return (Vec::new(), None);
    };
    let old = old_content(set, live_revision, world, base, namespace);
    let meta = ObjectMeta::default();
    match (content, old) {
        (Content::ConfigMap { data, binary_data }, old) => {
            let new = ConfigMap {
                data: data.cloned(),
                binary_data: binary_data.cloned(),
                ..ConfigMap::default()
            };
            let (old, against) = match old {
                Some(Old::ConfigMap(cm, label)) => (*cm, Some(label)),
                _ => (ConfigMap::default(), None),
            };
            let config_maps = [old, new];
            let report = diff::compare(
                set.name(),
                &revision("old", &meta, 0),
                &revision("new", &meta, 1),
                &config_maps,
            );
            (config_map_keys(&report), against)
        }
        (Content::Secret { type_, data }, old) => {
            let new = Secret {
                type_: type_.map(str::to_string),
                data: data.cloned(),
                ..Secret::default()
            };
            let (old, against) = match old {
                Some(Old::Secret(secret, label)) => (*secret, Some(label)),
                _ => (Secret::default(), None),
            };
            let report = secret_diff::compare(
                set.name(),
                &revision("old", &meta, 0),
                &old,
                &revision("new", &meta, 1),
                &new,
            );
            let keys = report
                .changes
                .iter()
                .map(|c| Key {
                    key: c.key.clone(),
                    change: c.change.word().to_string(),
                    diff: None,
                })
                .collect();
            (keys, against)
        }
    }
}

/// Each changed key with its own diff, as `kubectl cmset diff` prints that key (without the two
/// header lines naming the revisions).
fn config_map_keys(report: &DiffReport) -> Vec<Key> {
    report
        .changes
        .iter()
        .map(|change| {
            let one = DiffReport {
                changes: vec![change.clone()],
                identical: false,
                ..report.clone()
            };
            let text = diff::render_text(&one, Palette::PLAIN);
            let body: String = text.lines().skip(2).map(|l| format!("{l}\n")).collect();
            Key {
                key: change.key.clone(),
                change: change.change.word().to_string(),
                diff: Some(body),
            }
        })
        .collect()
}
