//! `kubectl cmset validate -f PATH`: the checks cmset makes of a set before it becomes a revision, run
//! offline (in CI, before a merge) with the same code and messages as the webhook and the controller.
//!
//! Every ConfigMapSet and SecretSet in the files is checked: its spec (what the status would report as
//! `InvalidSpec`) and its content against `spec.validation` (what the webhook would refuse). ConfigMaps
//! in the same files stand for the cluster's: a `schemaFrom` or `configMapName` that names one is read
//! from it; a SecretSet's Secret likewise, and judged without quoting it. Content whose source is not in
//! the files is not judged, and the report says so. Nothing is sent to a cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::content::content_check::{self, SchemaText, SchemaTexts};
use cmset_core::set::{Content, SetRef};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use serde::Serialize;
use serde_json::Value;

use crate::error::Error;

/// What was found of one set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetReport {
    /// `configmapset/NAME` or `secretset/NAME`.
    pub set: String,
    pub namespace: Option<String>,
    /// The file, and the document's place in it (1-based).
    pub file: String,
    pub document: usize,
    /// `valid`, `invalid`, or `unchecked` (its source is not in the files).
    pub result: &'static str,
    pub problems: Vec<String>,
    /// Why the content was not judged, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One YAML document of the files, where it came from.
struct Document {
    file: String,
    index: usize,
    value: Value,
}

/// The YAML and JSON files at `paths` (a directory: every `.yaml`, `.yml` and `.json` below it, in name
/// order; `-`: standard input, given as `stdin`), each split into documents.
pub fn read_documents(paths: &[PathBuf], stdin: Option<&str>) -> Result<Vec<(String, String)>, Error> {
    let mut files = Vec::new();
    for path in paths {
        if path == Path::new("-") {
            files.push(("-".to_string(), stdin.unwrap_or_default().to_string()));
        } else if path.is_dir() {
            let mut found = Vec::new();
            collect(path, &mut found)?;
            found.sort();
            for file in found {
                files.push((file.display().to_string(), read(&file)?));
            }
        } else {
            files.push((path.display().to_string(), read(path)?));
        }
    }
    Ok(files)
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::Usage(format!("reading {}: {e}", path.display())))
}

fn collect(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::Usage(format!("reading {}: {e}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(|e| Error::Usage(format!("reading {}: {e}", dir.display())))?
            .path();
        if path.is_dir() {
            collect(&path, found)?;
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            found.push(path);
        }
    }
    Ok(())
}

/// Checks every set in `files` (name and text): a report per set, in the order found. A file that is
/// not YAML is an error.
pub fn validate_files(files: &[(String, String)]) -> Result<Vec<SetReport>, Error> {
    let mut documents = Vec::new();
    for (file, text) in files {
        for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let value: Value = serde::Deserialize::deserialize(document)
                .map_err(|e| Error::Usage(format!("{file}: document {}: {e}", index + 1)))?;
            if value.is_null() {
                continue;
            }
            // A List (as `kubectl get -o yaml` writes) counts as its items.
            if value["kind"] == "List" {
                for item in value["items"].as_array().into_iter().flatten() {
                    documents.push(Document {
                        file: file.clone(),
                        index: index + 1,
                        value: item.clone(),
                    });
                }
            } else {
                documents.push(Document {
                    file: file.clone(),
                    index: index + 1,
                    value,
                });
            }
        }
    }
    let config_maps = objects::<ConfigMap>(&documents, "ConfigMap");
    // `stringData` is folded into `data` as the API server does on write.
    let secrets = objects::<Secret>(&documents, "Secret")
        .into_iter()
        .map(|(key, mut secret)| {
            if let Some(strings) = secret.string_data.take() {
                let data = secret.data.get_or_insert_with(BTreeMap::new);
                for (k, v) in strings {
                    data.insert(k, k8s_openapi::ByteString(v.into_bytes()));
                }
            }
            (key, secret)
        })
        .collect::<BTreeMap<_, _>>();
    let mut reports = Vec::new();
    for document in &documents {
        let is_cmset = document.value["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with(&format!("{}/", cmset_api::GROUP)));
        if !is_cmset {
            continue;
        }
        let report = match document.value["kind"].as_str() {
            Some("ConfigMapSet") => decode::<ConfigMapSet>(document)
                .map(|set| report(document, (&set).into(), &config_maps, &secrets)),
            Some("SecretSet") => decode::<SecretSet>(document)
                .map(|set| report(document, (&set).into(), &config_maps, &secrets)),
            _ => continue,
        };
        reports.push(report.unwrap_or_else(|report| *report));
    }
    Ok(reports)
}

/// The objects of `kind` in the documents, by namespace (`None`: none given) and name.
fn objects<K: serde::de::DeserializeOwned>(
    documents: &[Document],
    kind: &str,
) -> BTreeMap<(Option<String>, String), K> {
    documents
        .iter()
        .filter(|d| d.value["kind"] == kind && d.value["apiVersion"] == "v1")
        .filter_map(|d| {
            let name = d.value.pointer("/metadata/name")?.as_str()?.to_string();
            let namespace = d
                .value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string);
            Some(((namespace, name), serde_json::from_value(d.value.clone()).ok()?))
        })
        .collect()
}

/// The set in `document`, or a report that it does not decode.
fn decode<K: serde::de::DeserializeOwned>(document: &Document) -> Result<K, Box<SetReport>> {
    serde_json::from_value(document.value.clone()).map_err(|e| {
        let kind = document.value["kind"]
            .as_str()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let name = document
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("?");
        Box::new(SetReport {
            set: format!("{kind}/{name}"),
            namespace: document
                .value
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string),
            file: document.file.clone(),
            document: document.index,
            result: "invalid",
            problems: vec![format!("does not decode: {e}")],
            note: None,
        })
    })
}

fn report(
    document: &Document,
    set: SetRef<'_>,
    config_maps: &BTreeMap<(Option<String>, String), ConfigMap>,
    secrets: &BTreeMap<(Option<String>, String), Secret>,
) -> SetReport {
    let namespace = set.metadata().namespace.clone();
    let kind = if set.is_secret() {
        "secretset"
    } else {
        "configmapset"
    };
    let mut report = SetReport {
        set: format!("{kind}/{}", set.name()),
        namespace: namespace.clone(),
        file: document.file.clone(),
        document: document.index,
        result: "valid",
        problems: Vec::new(),
        note: None,
    };
    if let Err(problems) = set.validate() {
        report.problems.extend(problems.iter().map(ToString::to_string));
    }
    let lookup = |name: &str| (namespace.clone(), name.to_string());
    let mut schemas = SchemaTexts::new();
    for reference in content_check::schema_refs(set.validation()) {
        let text = match config_maps.get(&lookup(&reference.name)) {
            Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&reference.key)) {
                Some(text) => SchemaText::Found(text.clone()),
                None => SchemaText::Missing(format!("the ConfigMap has no data key {:?}", reference.key)),
            },
            None => SchemaText::Missing("the ConfigMap is not in the files".into()),
        };
        schemas.insert(reference.clone(), text);
    }
    let judged = match set.source_name() {
        None => Some(set_content(set)),
        Some(source) if set.is_secret() => secrets.get(&lookup(source)).map(Content::of_secret),
        Some(source) => config_maps.get(&lookup(source)).map(Content::of_config_map),
    };
    match judged {
        Some(content) => {
            if let Err(refusal) = content_check::check(set.validation(), &content, &schemas, set.is_secret())
            {
                report
                    .problems
                    .extend(refusal.problems.iter().map(ToString::to_string));
                if refusal.more > 0 {
                    report.problems.push(format!("and {} more", refusal.more));
                }
            }
        }
        None if !set.validation().is_empty() => {
            let source = set.source_name().unwrap_or_default();
            let what = if set.is_secret() { "Secret" } else { "ConfigMap" };
            report.note = Some(format!(
                "content not checked: its source {what} {source:?} is not in the files"
            ));
        }
        None => {}
    }
    report.result = if !report.problems.is_empty() {
        "invalid"
    } else if report.note.is_some() {
        "unchecked"
    } else {
        "valid"
    };
    report
}

/// A ConfigMapSet's inline content.
fn set_content(set: SetRef<'_>) -> Content<'_> {
    match set {
        SetRef::ConfigMap(s) => Content::of_template(&s.spec.template),
        // A SecretSet always names its source.
        SetRef::Secret(_) => Content::Secret {
            type_: None,
            data: None,
        },
    }
}

/// The report for people: one line per set, its problems indented below it, and a last line counting.
pub fn render_text(reports: &[SetReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let namespace = r
            .namespace
            .as_deref()
            .map(|n| format!(" -n {n}"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{}{namespace} ({}, document {}): {}\n",
            r.set, r.file, r.document, r.result
        ));
        for problem in &r.problems {
            out.push_str(&format!("  {problem}\n"));
        }
        if let Some(note) = &r.note {
            out.push_str(&format!("  {note}\n"));
        }
    }
    let invalid = reports.iter().filter(|r| r.result == "invalid").count();
    let sets = if reports.len() == 1 { "set" } else { "sets" };
    out.push_str(&format!("{} {sets} checked, {invalid} invalid\n", reports.len()));
    out
}

/// Exit status: 0 when every set is valid (or unchecked), 1 when any is invalid.
pub fn exit_code(reports: &[SetReport]) -> u8 {
    u8::from(reports.iter().any(|r| r.result == "invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETS: &str = r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata: {name: good, namespace: team}
spec:
  template:
    data:
      app.json: '{"port": 80}'
  validation:
    keys:
      "*.json":
        schemaFrom: {configMapKeyRef: {name: schemas, key: app}}
---
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata: {name: bad, namespace: team}
spec:
  template:
    data:
      app.json: |
        {"port": 80,
        }
  validation:
    keys:
      "*.json": {}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: schemas, namespace: team}
data:
  app: |
    properties:
      port: {type: integer}
---
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata: {name: db, namespace: team}
spec:
  secretName: db
  validation:
    keys:
      config.json: {schema: {properties: {password: {minLength: 20}}}}
---
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata: {name: elsewhere, namespace: team}
spec:
  secretName: not-here
  validation:
    keys:
      config.json: {}
---
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: team}
stringData:
  config.json: '{"password": "shortSecret"}'
data:
  other: c2hvcnRTZWNyZXQ=
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
"#;

    #[test]
    fn every_set_in_the_files_is_checked_with_the_controllers_messages() {
        let reports = validate_files(&[("sets.yaml".into(), SETS.into())]).unwrap();
        let results: Vec<(&str, &str)> = reports.iter().map(|r| (r.set.as_str(), r.result)).collect();
        assert_eq!(
            results,
            [
                ("configmapset/good", "valid"),
                ("configmapset/bad", "invalid"),
                ("secretset/db", "invalid"),
                ("secretset/elsewhere", "unchecked"),
            ]
        );
        assert_eq!(
            reports[1].problems,
            [r#"key "app.json": is not valid JSON at line 2 column 1: trailing comma"#]
        );
        assert_eq!(reports[1].document, 2);
        assert_eq!(
            reports[2].problems,
            [r#"key "config.json": at /password: fails rule "minLength""#]
        );
        let text = render_text(&reports);
        assert!(!text.contains("shortSecret"), "{text}");
        assert!(text.ends_with("4 sets checked, 2 invalid\n"), "{text}");
        assert!(
            text.contains("secretset/elsewhere -n team (sets.yaml, document 5): unchecked\n  content not checked: its source Secret \"not-here\" is not in the files\n"),
            "{text}"
        );
        assert_eq!(exit_code(&reports), 1);
        assert_eq!(exit_code(&reports[..1]), 0);
    }

    #[test]
    fn spec_problems_are_reported_too_and_a_file_that_is_not_yaml_is_an_error() {
        let bad_spec = "apiVersion: cmset.dev/v1alpha1\nkind: ConfigMapSet\nmetadata: {name: x}\nspec:\n  validation:\n    keys:\n      config: {}\n";
        let reports = validate_files(&[("x.yaml".into(), bad_spec.into())]).unwrap();
        assert_eq!(reports[0].result, "invalid");
        assert!(
            reports[0].problems[0].starts_with(r#"spec.validation.keys["config"].format: is required"#),
            "{reports:?}"
        );
        let not_yaml = validate_files(&[("broken.yaml".into(), "a: [\n".into())]);
        assert!(matches!(not_yaml, Err(Error::Usage(m)) if m.starts_with("broken.yaml: document 1:")));
        let undecodable = "apiVersion: cmset.dev/v1alpha1\nkind: ConfigMapSet\nmetadata: {name: y}\nspec: {revisionHistoryLimit: many}\n";
        let reports = validate_files(&[("y.yaml".into(), undecodable.into())]).unwrap();
        assert_eq!(
            (reports[0].set.as_str(), reports[0].result),
            ("configmapset/y", "invalid")
        );
    }

    #[test]
    fn a_directory_is_read_file_by_file_in_name_order() {
        let dir = std::env::temp_dir().join(format!("cmset-validate-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("nested")).unwrap();
        std::fs::write(dir.join("b.yaml"), SETS).unwrap();
        std::fs::write(dir.join("nested/a.yml"), "kind: Nothing\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "not a manifest").unwrap();
        let files = read_documents(std::slice::from_ref(&dir), None).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|(f, _)| f.strip_prefix(&dir.display().to_string()).unwrap().to_string())
            .collect();
        assert_eq!(names, ["/b.yaml", "/nested/a.yml"]);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_documents(&[PathBuf::from("/no/such/file.yaml")], None).is_err());
    }
}
