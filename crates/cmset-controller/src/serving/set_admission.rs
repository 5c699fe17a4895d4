//! The validating admission webhook for ConfigMapSets and SecretSets (`POST /validate-set`): a set whose
//! change windows do not parse ([`crate::serving::window_admission`]), whose `spec.validation` is not
//! valid, or whose content fails it, is refused at `kubectl apply`, naming the key with the line and
//! column (a parse error) or the JSON pointer and rule (a schema error), every problem up to a bound
//! ([`cmset_core::content_check`]).
//!
//! The content is the set's inline `template.data` and `binaryData`, or the source it names (a
//! ConfigMap, or a SecretSet's Secret, read with one GET; a source that does not exist yet is not
//! judged). Schemas kept in ConfigMaps are read with one GET each; one that is missing lets the set in
//! with a warning, since it may come in the same apply (the controller reports it meanwhile). A set
//! without `spec.validation` costs no request. An update that changes neither the content, the source
//! nor `spec.validation` (an annotation, `kubectl cmset pause`) is not judged again, so a set whose
//! content slipped in while cmset was down can still be paused or fixed.
//!
//! It fails open like the other webhooks; the controller checks again before it makes any revision.

use cmset_api::ValidationSpec;
use cmset_core::content_check::{self, Refusal, SchemaText, SchemaTexts};
use cmset_core::set::Content;
use cmset_core::validate::summary;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::info;

use crate::platform::metrics::{Metrics, SetLabels, ValidationLabels};
use crate::serving::window_admission;

/// Where the content of the set under review is.
pub enum Source {
    /// In the set: its `template`.
    Inline,
    /// A source ConfigMap or Secret, as read now (`None`: it does not exist, or could not be read).
    ConfigMap(Option<ConfigMap>),
    Secret(Option<Secret>),
}

/// What admission reads for `review` before it can judge it: the source and the schemas. `None` when
/// nothing needs reading or judging (no validation, a deletion, an update that changes none of it).
pub async fn gather(client: &Client, metrics: &Metrics, review: &Value) -> Option<(Source, SchemaTexts)> {
    let request = &review["request"];
    let spec = request.pointer("/object/spec")?;
    let validation = validation_of(spec)?;
    if !content_may_change(request) {
        return None;
    }
    let namespace = request["namespace"].as_str().unwrap_or_default();
    let kind = request
        .pointer("/kind/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let requested = |resource: &'static str| {
        metrics
            .admission_requests
            .get_or_create(&crate::platform::metrics::RequestLabels {
                verb: "get",
                resource,
            })
            .inc();
    };
    let source = match (kind, source_name(kind, spec)) {
        ("SecretSet", Some(name)) => {
            requested("secrets");
            Source::Secret(
                Api::<Secret>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten(),
            )
        }
        (_, Some(name)) => {
            requested("configmaps");
            Source::ConfigMap(
                Api::<ConfigMap>::namespaced(client.clone(), namespace)
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten(),
            )
        }
        (_, None) => Source::Inline,
    };
    let mut schemas = SchemaTexts::new();
    for reference in content_check::schema_refs(&validation) {
        requested("configmaps");
        let found = Api::<ConfigMap>::namespaced(client.clone(), namespace)
            .get_opt(&reference.name)
            .await;
        let text = match found {
            Ok(Some(cm)) => match cm.data.as_ref().and_then(|d| d.get(&reference.key)) {
                Some(text) => SchemaText::Found(text.clone()),
                None => SchemaText::Missing(format!("the ConfigMap has no data key {:?}", reference.key)),
            },
            Ok(None) => SchemaText::Missing("the ConfigMap does not exist".into()),
            Err(e) => SchemaText::Missing(format!("could not be read: {e}")),
        };
        schemas.insert(reference.clone(), text);
    }
    Some((source, schemas))
}

/// The AdmissionReview response to `review` of a set, given what [`gather`] read (`None`: judge only
/// the spec).
pub fn review_set(review: &Value, gathered: Option<&(Source, SchemaTexts)>, metrics: &Metrics) -> Value {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let kind = request
        .pointer("/kind/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = request
        .pointer("/object/metadata/name")
        .or_else(|| request.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(spec) = request.pointer("/object/spec") else {
        // A deletion carries no object: nothing to check.
        return answer(uid, None, Vec::new());
    };
    let mut problems = window_admission::problems(kind, spec);
    let validation = validation_of(spec);
    if let Some(validation) = &validation {
        problems.extend(content_check::spec_problems(validation));
    }
    if !problems.is_empty() {
        let message = format!("{kind} {name:?}: {}", summary(&problems));
        info!(%kind, %name, %message, "admission: refused a set");
        return answer(uid, Some(message), Vec::new());
    }
    let (Some(validation), Some((source, schemas))) = (validation, gathered) else {
        return answer(uid, None, Vec::new());
    };
    let refusal = match judge(kind, spec, &validation, source, schemas) {
        Ok(()) => return answer(uid, None, Vec::new()),
        Err(refusal) => refusal,
    };
    if refusal.only_unavailable_schemas() {
        // The ConfigMap may come in the same apply: admitted, and said.
        let warnings = refusal.problems.iter().map(|p| p.to_string()).collect();
        return answer(uid, None, warnings);
    }
    let namespace = request["namespace"].as_str().unwrap_or_default();
    metrics
        .validation_failures
        .get_or_create(&ValidationLabels {
            set: SetLabels {
                namespace: namespace.to_string(),
                kind: if kind == "SecretSet" {
                    "SecretSet"
                } else {
                    "ConfigMapSet"
                },
                name: name.to_string(),
            },
            stage: "admission",
        })
        .inc();
    let message = format!(
        "{kind} {name:?}: content fails spec.validation: {}",
        refusal.summary()
    );
    // The message quotes no value of a SecretSet's (see `content_check`), so it may be logged.
    info!(%kind, %name, %message, "admission: refused a set's content");
    answer(uid, Some(message), Vec::new())
}

/// Whether the set's content passes, read from where it is.
fn judge(
    kind: &str,
    spec: &Value,
    validation: &ValidationSpec,
    source: &Source,
    schemas: &SchemaTexts,
) -> Result<(), Refusal> {
    match source {
        Source::Inline => {
            let data = serde_json::from_value(spec.pointer("/template/data").cloned().unwrap_or(Value::Null))
                .unwrap_or(None);
            let binary_data: Option<std::collections::BTreeMap<String, ByteString>> = serde_json::from_value(
                spec.pointer("/template/binaryData")
                    .cloned()
                    .unwrap_or(Value::Null),
            )
            .unwrap_or(None);
            let content = Content::ConfigMap {
                data: data.as_ref(),
                binary_data: binary_data.as_ref(),
            };
            content_check::check(validation, &content, schemas, kind == "SecretSet")
        }
        Source::ConfigMap(Some(cm)) => {
            content_check::check(validation, &Content::of_config_map(cm), schemas, false)
        }
        Source::Secret(Some(secret)) => {
            content_check::check(validation, &Content::of_secret(secret), schemas, true)
        }
        // Not there yet: the controller waits for it, and judges it then.
        Source::ConfigMap(None) | Source::Secret(None) => Ok(()),
    }
}

/// The set's `spec.validation`, when it says anything (one that does not decode is the schema's to refuse).
fn validation_of(spec: &Value) -> Option<ValidationSpec> {
    let validation: ValidationSpec = serde_json::from_value(spec.get("validation")?.clone()).ok()?;
    (!validation.is_empty()).then_some(validation)
}

/// The source a set names: a SecretSet's `secretName`, a ConfigMapSet's `configMapName`.
fn source_name<'a>(kind: &str, spec: &'a Value) -> Option<&'a str> {
    let field = if kind == "SecretSet" {
        "secretName"
    } else {
        "configMapName"
    };
    spec.get(field).and_then(Value::as_str)
}

/// Whether the request may change what is judged: a creation, or an update of the content, the source
/// or the validation.
fn content_may_change(request: &Value) -> bool {
    let Some(old) = request.pointer("/oldObject/spec") else {
        return true;
    };
    let new = &request["object"]["spec"];
    ["template", "configMapName", "secretName", "validation"]
        .iter()
        .any(|field| old.get(field) != new.get(field))
}

fn answer(uid: &str, refusal: Option<String>, warnings: Vec<String>) -> Value {
    let mut response = match refusal {
        None => json!({"uid": uid, "allowed": true}),
        Some(message) => json!({"uid": uid, "allowed": false,
                                "status": {"code": 422, "reason": "Invalid", "message": message}}),
    };
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn review(kind: &str, spec: Value, old: Option<Value>) -> Value {
        let mut review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u-1", "operation": "CREATE", "name": "app", "namespace": "team",
                           "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": kind},
                           "object": {"apiVersion": "cmset.dev/v1alpha1", "kind": kind,
                                      "metadata": {"name": "app"}, "spec": spec}}});
        if let Some(old) = old {
            review["request"]["operation"] = json!("UPDATE");
            review["request"]["oldObject"] = json!({"spec": old});
        }
        review
    }

    fn validated(data: Value) -> Value {
        json!({"template": {"data": data},
               "validation": {"keys": {"*.json": {"schema": {"properties": {"port": {"type": "integer"}}}}}}})
    }

    fn message(response: &Value) -> &str {
        response
            .pointer("/response/status/message")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn inline() -> (Source, SchemaTexts) {
        (Source::Inline, SchemaTexts::new())
    }

    #[test]
    fn content_that_fails_is_refused_naming_key_line_and_column_and_counted() {
        let metrics = Metrics::default();
        let review = review(
            "ConfigMapSet",
            validated(json!({"app.json": "{\n\"port\": 80,\n}"})),
            None,
        );
        let response = review_set(&review, Some(&inline()), &metrics);
        assert_eq!(response["response"]["allowed"], false);
        assert_eq!(response["response"]["status"]["code"], 422);
        assert_eq!(
            message(&response),
            r#"ConfigMapSet "app": content fails spec.validation: key "app.json": is not valid JSON at line 3 column 1: trailing comma"#
        );
        let labels = ValidationLabels {
            set: SetLabels {
                namespace: "team".into(),
                kind: "ConfigMapSet",
                name: "app".into(),
            },
            stage: "admission",
        };
        assert_eq!(metrics.validation_failures.get_or_create(&labels).get(), 1);

        let schema_error = review_set(
            &review_of(validated(json!({"app.json": r#"{"port": "x"}"#}))),
            Some(&inline()),
            &metrics,
        );
        assert!(
            message(&schema_error).ends_with(r#"at /port: "x" is not of type "integer" (rule "type")"#),
            "{schema_error}"
        );
        let good = review_set(
            &review_of(validated(json!({"app.json": r#"{"port": 1}"#}))),
            Some(&inline()),
            &metrics,
        );
        assert_eq!(good["response"], json!({"uid": "u-1", "allowed": true}));
    }

    fn review_of(spec: Value) -> Value {
        review("ConfigMapSet", spec, None)
    }

    #[test]
    fn a_bad_validation_spec_is_refused_naming_the_field() {
        let spec = json!({"validation": {"keys": {"config": {"schema": {"type": 5}}}}});
        let response = review_set(&review_of(spec), None, &Metrics::default());
        assert_eq!(response["response"]["allowed"], false);
        let message = message(&response);
        assert!(
            message.contains(r#"spec.validation.keys["config"].format: is required"#),
            "{message}"
        );
        assert!(
            message.contains(r#"spec.validation.keys["config"].schema: is not a valid JSON Schema"#),
            "{message}"
        );
    }

    #[test]
    fn a_secret_source_is_judged_without_quoting_it() {
        let spec = json!({"secretName": "db",
                          "validation": {"keys": {"config.json": {"schema": {"properties": {"password": {"minLength": 20}}}}}}});
        let secret = Secret {
            data: Some(BTreeMap::from([(
                "config.json".to_string(),
                ByteString(br#"{"password": "tooShortSecret"}"#.to_vec()),
            )])),
            ..Secret::default()
        };
        let gathered = (Source::Secret(Some(secret)), SchemaTexts::new());
        let response = review_set(
            &review("SecretSet", spec.clone(), None),
            Some(&gathered),
            &Metrics::default(),
        );
        assert_eq!(response["response"]["allowed"], false);
        assert!(message(&response).ends_with(r#"key "config.json": at /password: fails rule "minLength""#));
        assert!(!response.to_string().contains("tooShortSecret"));
        // Not there yet: admitted, the controller waits for it.
        let missing = (Source::Secret(None), SchemaTexts::new());
        let response = review_set(
            &review("SecretSet", spec, None),
            Some(&missing),
            &Metrics::default(),
        );
        assert_eq!(response["response"]["allowed"], true);
    }

    #[test]
    fn a_missing_schema_configmap_admits_with_a_warning() {
        let reference = cmset_api::ConfigMapKeyRef {
            name: "schemas".into(),
            key: "app".into(),
        };
        let spec = json!({"template": {"data": {"app.json": "{}"}},
                          "validation": {"keys": {"app.json": {"schemaFrom": {"configMapKeyRef": {"name": "schemas", "key": "app"}}}}}});
        let gathered = (
            Source::Inline,
            SchemaTexts::from([(
                reference,
                SchemaText::Missing("the ConfigMap does not exist".into()),
            )]),
        );
        let response = review_set(&review_of(spec), Some(&gathered), &Metrics::default());
        assert_eq!(response["response"]["allowed"], true);
        assert_eq!(
            response["response"]["warnings"],
            json!([
                r#"key "app.json": schema from ConfigMap "schemas" key "app": the ConfigMap does not exist"#
            ])
        );
    }

    #[test]
    fn only_a_change_of_content_source_or_validation_is_judged_again() {
        let spec = validated(json!({"app.json": "{"}));
        assert!(content_may_change(&review_of(spec.clone())["request"]));
        assert!(!content_may_change(
            &review("ConfigMapSet", spec.clone(), Some(spec.clone()))["request"]
        ));
        let mut paused = spec.clone();
        paused["rollout"] = json!({"paused": true});
        assert!(!content_may_change(
            &review("ConfigMapSet", paused, Some(spec.clone()))["request"]
        ));
        let changed = validated(json!({"app.json": "{}"}));
        assert!(content_may_change(
            &review("ConfigMapSet", changed, Some(spec))["request"]
        ));
    }

    #[test]
    fn windows_are_still_checked_and_a_set_without_validation_needs_nothing_read() {
        let spec =
            json!({"rollout": {"windows": [{"kind": "Deny", "schedule": "0 25 * * *", "duration": "1h"}]}});
        let response = review_set(&review_of(spec), None, &Metrics::default());
        assert!(
            message(&response).contains("spec.rollout.windows[0].schedule"),
            "{response}"
        );
        assert!(validation_of(&json!({"template": {"data": {"a": "1"}}})).is_none());
        assert!(validation_of(&json!({"validation": {"keys": {}}})).is_none());
    }
}
