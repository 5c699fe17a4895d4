//! The validating admission webhook for ConfigMapSets and SecretSets (`POST /validate-set`): a set whose
//! change windows do not parse ([`crate::serving::window_admission`]), whose `spec.validation` is not
//! valid, or whose inline content fails it, is refused at `kubectl apply`, naming the key with the line
//! and column (a parse error) or the JSON pointer and rule (a schema error), every problem up to a bound
//! ([`cmset_core::content::content_check`]).
//!
//! It judges only what it is sent. Anything that reaches its port can post a review, so it reads
//! nothing on the strength of one: a set in source mode (`configMapName`, `secretName`) and a schema
//! kept in a ConfigMap (`schemaFrom`) are judged by the controller, which reads them in the stored
//! set's own namespace and reports them (`Valid=False`, a Warning, `on-validation-failed`). Here a key
//! whose schema is in a ConfigMap is only parsed. The answer thus depends on the body alone: a forged
//! review learns nothing about another namespace's objects.
//!
//! The judging runs off the async runtime, a few at a time, within [`JUDGING_BUDGET`]: a costly schema
//! or document is refused saying so, and never holds up the watches or other admissions. A set
//! without `spec.validation` is not judged at all. An update that changes neither the content nor
//! `spec.validation` (an annotation, `kubectl cmset pause`) is not judged again, so a set whose content
//! slipped in while cmset was down can still be paused or fixed.
//!
//! Of a review it reads only what the decision needs ([`SetReview`]): the content (`spec.template`)
//! stays the JSON text it came as, and is decoded only when a declared validation judges it.
//!
//! It fails open like the other webhooks; the controller checks again before it makes any revision.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cmset_api::ValidationSpec;
use cmset_core::content::content_check::{self, Refusal, SchemaTexts};
use cmset_core::content::validate::summary;
use cmset_core::set::Content;
use k8s_openapi::ByteString;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::{info, warn};

use crate::platform::metrics::{Metrics, SetLabels, ValidationLabels};
use crate::serving::window_admission;

/// How long one admission may spend judging content, the wait for a judge included: well inside the
/// registration's 5 s timeout.
pub const JUDGING_BUDGET: Duration = Duration::from_secs(2);
/// Contents judged at once (each on a blocking thread); more wait, within their budget. One namespace
/// takes one of them at a time, so a namespace applying costly sets leaves the other to everyone else.
pub const JUDGES: usize = 2;

/// What `/validate-set` reads of an AdmissionReview: who asks about which set, and of the set's spec
/// only the fields it judges. The content and the validation are kept as the JSON text they came as
/// (compared as text between the old and the new object: the API server writes both with one
/// encoder), and decoded only to be judged.
#[derive(Debug, Default, Deserialize)]
pub struct SetReview {
    #[serde(default)]
    request: Request,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Request {
    uid: String,
    namespace: String,
    name: String,
    kind: RequestKind,
    dry_run: Option<bool>,
    object: Option<SetObject>,
    old_object: Option<SetObject>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RequestKind {
    kind: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SetObject {
    metadata: ObjectName,
    spec: Option<SetSpecText>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ObjectName {
    name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct SetSpecText {
    template: Option<Box<RawValue>>,
    validation: Option<Box<RawValue>>,
    /// Small (windows, waves, analysis): decoded, for the windows' check.
    rollout: Option<Value>,
    config_map_name: Option<Box<RawValue>>,
    secret_name: Option<Box<RawValue>>,
}

impl SetSpecText {
    /// The fields whose change may change the verdict on the content.
    fn judged_fields(&self) -> [Option<&str>; 4] {
        fn text(field: &Option<Box<RawValue>>) -> Option<&str> {
            field.as_deref().map(RawValue::get)
        }
        [
            text(&self.template),
            text(&self.config_map_name),
            text(&self.secret_name),
            text(&self.validation),
        ]
    }
}

/// Judges sets' content off the async runtime, [`JUDGES`] at a time and one per namespace.
#[derive(Clone)]
pub struct Judges {
    permits: Arc<Semaphore>,
    /// A turn per namespace being judged or waiting; gone when nobody holds or waits for it (the
    /// namespace of a review is whatever its sender wrote, so nothing stays behind).
    turns: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
}

impl Default for Judges {
    fn default() -> Self {
        Self {
            permits: Arc::new(Semaphore::new(JUDGES)),
            turns: Arc::default(),
        }
    }
}

/// A namespace's turn at judging, given back (and forgotten when nobody waits) when dropped.
struct Turn {
    turns: Arc<Mutex<HashMap<String, Arc<Semaphore>>>>,
    namespace: String,
    permit: Option<OwnedSemaphorePermit>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.permit.take();
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        if turns
            .get(&self.namespace)
            .is_some_and(|turn| Arc::strong_count(turn) == 1)
        {
            turns.remove(&self.namespace);
        }
    }
}

impl Judges {
    /// The response to `review`, judged on a blocking thread within [`JUDGING_BUDGET`].
    pub async fn review(&self, review: SetReview, metrics: Arc<Metrics>) -> Value {
        if !needs_judging(&review) {
            return review_set(&review, &metrics, &|| false);
        }
        let deadline = Instant::now() + JUDGING_BUDGET;
        let namespace = review.request.namespace.clone();
        let semaphore = {
            let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
            turns
                .entry(namespace.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(1)))
                .clone()
        };
        let mut turn = Turn {
            turns: self.turns.clone(),
            namespace,
            permit: None,
        };
        let waited = tokio::time::timeout_at(deadline.into(), async {
            turn.permit = Some(semaphore.acquire_owned().await?);
            self.permits.clone().acquire_owned().await
        })
        .await;
        let Ok(Ok(permit)) = waited else {
            return over_budget(&review, "waiting for a turn");
        };
        let uid = review.request.uid.clone();
        let (review, answer) = match tokio::task::spawn_blocking(move || {
            // The permits go with the work: a judge that runs past its budget still counts until it
            // ends, so no more than JUDGES threads ever judge at once.
            let _permits = (permit, turn);
            let answer = review_set(&review, &metrics, &|| Instant::now() >= deadline);
            (review, answer)
        })
        .await
        {
            Ok(done) => done,
            Err(e) => {
                warn!(error = %e, "admission: judging a set's content failed");
                // Fails open, as the webhook does: the controller judges the set again.
                return json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": uid, "allowed": true}});
            }
        };
        if Instant::now() > deadline && answer.pointer("/response/allowed") == Some(&Value::Bool(true)) {
            // Judged, but late: the API server has given up on this answer already.
            return over_budget(&review, "judging");
        }
        answer
    }
}

/// The refusal of a review whose judging ran out of [`JUDGING_BUDGET`] (`while`: what it was doing).
fn over_budget(review: &SetReview, while_: &str) -> Value {
    let request = &review.request;
    let uid = request.uid.as_str();
    let (kind, name) = kind_and_name(request);
    let message = format!(
        "{kind} {name:?}: spec.validation could not be judged within {}s ({while_}); make the schema or \
         the content smaller, or try again",
        JUDGING_BUDGET.as_secs()
    );
    info!(%kind, %name, "admission: refused a set over its judging budget");
    answer(uid, Some(message), Vec::new())
}

fn kind_and_name(request: &Request) -> (&str, &str) {
    let name = request
        .object
        .as_ref()
        .and_then(|o| o.metadata.name.as_deref())
        .unwrap_or(&request.name);
    (&request.kind.kind, name)
}

/// Whether `review` has inline content to judge against a validation it declares: a creation, or an
/// update that changes the content or the validation.
fn needs_judging(review: &SetReview) -> bool {
    let request = &review.request;
    let spec = request.object.as_ref().and_then(|o| o.spec.as_ref());
    spec.and_then(validation_of).is_some() && content_may_change(request)
}

/// The AdmissionReview response to `review` of a set. `out_of_time` says when the judging of content
/// must stop (it is then refused, saying so).
pub fn review_set(review: &SetReview, metrics: &Metrics, out_of_time: &dyn Fn() -> bool) -> Value {
    let request = &review.request;
    let uid = request.uid.as_str();
    let (kind, name) = kind_and_name(request);
    let Some(spec) = request.object.as_ref().and_then(|o| o.spec.as_ref()) else {
        // A deletion carries no object: nothing to check.
        return answer(uid, None, Vec::new());
    };
    let mut problems = match &spec.rollout {
        Some(rollout) => window_admission::problems(kind, &json!({ "rollout": rollout })),
        None => Vec::new(),
    };
    let validation = validation_of(spec);
    if let Some(validation) = &validation {
        problems.extend(content_check::spec_problems(validation));
    }
    if !problems.is_empty() {
        let message = format!("{kind} {name:?}: {}", summary(&problems));
        info!(%kind, %name, %message, "admission: refused a set");
        return answer(uid, Some(message), Vec::new());
    }
    let Some(validation) = validation.filter(|_| content_may_change(request)) else {
        return answer(uid, None, Vec::new());
    };
    if source_name(kind, spec).is_some() {
        // Its content is in an object this webhook does not read: the controller judges it.
        return answer(uid, None, Vec::new());
    }
    let refusal = match judge(kind, spec, &inline_only(&validation), out_of_time) {
        Ok(()) => return answer(uid, None, Vec::new()),
        Err(refusal) => refusal,
    };
    let namespace = request.namespace.as_str();
    // A dry run (`kubectl apply --dry-run=server`, `kubectl cmset plan`) is answered the same and
    // counts nowhere: nothing was refused that anyone tried to store.
    let dry_run = request.dry_run == Some(true);
    if !dry_run {
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
    }
    let message = format!(
        "{kind} {name:?}: content fails spec.validation: {}",
        refusal.summary()
    );
    // The message quotes no value of a SecretSet's (see `content_check`), so it may be logged.
    info!(%kind, %name, %message, "admission: refused a set's content");
    answer(uid, Some(message), Vec::new())
}

/// `validation` with the schemas kept in ConfigMaps left out: those keys are parsed here, and matched
/// against their schema by the controller.
fn inline_only(validation: &ValidationSpec) -> ValidationSpec {
    let mut inline = validation.clone();
    for rule in inline.keys.values_mut() {
        rule.schema_from = None;
    }
    inline
}

/// Whether the set's inline content passes.
fn judge(
    kind: &str,
    spec: &SetSpecText,
    validation: &ValidationSpec,
    out_of_time: &dyn Fn() -> bool,
) -> Result<(), Refusal> {
    /// The template's content, each map still text: one that does not decode is judged absent, as
    /// the schema refuses it anyway.
    #[derive(Default, Deserialize)]
    #[serde(default, rename_all = "camelCase")]
    struct TemplateText {
        data: Option<Box<RawValue>>,
        binary_data: Option<Box<RawValue>>,
    }
    let template: TemplateText = spec
        .template
        .as_deref()
        .and_then(|t| serde_json::from_str(t.get()).ok())
        .unwrap_or_default();
    let data: Option<std::collections::BTreeMap<String, String>> = template
        .data
        .as_deref()
        .and_then(|d| serde_json::from_str(d.get()).ok());
    let binary_data: Option<std::collections::BTreeMap<String, ByteString>> = template
        .binary_data
        .as_deref()
        .and_then(|d| serde_json::from_str(d.get()).ok());
    let content = Content::ConfigMap {
        data: data.as_ref(),
        binary_data: binary_data.as_ref(),
    };
    content_check::check_within(
        validation,
        &content,
        &SchemaTexts::new(),
        kind == "SecretSet",
        out_of_time,
    )
}

/// The set's `spec.validation`, when it says anything (one that does not decode is the schema's to refuse).
fn validation_of(spec: &SetSpecText) -> Option<ValidationSpec> {
    let validation: ValidationSpec = serde_json::from_str(spec.validation.as_deref()?.get()).ok()?;
    (!validation.is_empty()).then_some(validation)
}

/// The source a set names: a SecretSet's `secretName`, a ConfigMapSet's `configMapName`.
fn source_name(kind: &str, spec: &SetSpecText) -> Option<String> {
    let field = if kind == "SecretSet" {
        &spec.secret_name
    } else {
        &spec.config_map_name
    };
    serde_json::from_str(field.as_deref()?.get()).ok()
}

/// Whether the request may change what is judged: a creation, or an update of the content, the source
/// or the validation.
fn content_may_change(request: &Request) -> bool {
    let Some(old) = request.old_object.as_ref().and_then(|o| o.spec.as_ref()) else {
        return true;
    };
    let new = request.object.as_ref().and_then(|o| o.spec.as_ref());
    new.map(SetSpecText::judged_fields).unwrap_or_default() != old.judged_fields()
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

    /// `review` as the webhook reads it: from the bytes the API server sends.
    fn typed(review: &Value) -> SetReview {
        serde_json::from_slice(&serde_json::to_vec(review).unwrap()).unwrap()
    }

    fn judged(review: &Value, metrics: &Metrics) -> Value {
        review_set(&typed(review), metrics, &|| false)
    }

    #[test]
    fn content_that_fails_is_refused_naming_key_line_and_column_and_counted() {
        let metrics = Metrics::default();
        let review = review(
            "ConfigMapSet",
            validated(json!({"app.json": "{\n\"port\": 80,\n}"})),
            None,
        );
        let response = judged(&review, &metrics);
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

        // A dry run gets the same answer, and counts nowhere.
        let mut dry = review.clone();
        dry["request"]["dryRun"] = json!(true);
        let answered = judged(&dry, &metrics);
        assert_eq!(answered["response"], response["response"]);
        assert_eq!(metrics.validation_failures.get_or_create(&labels).get(), 1);

        let schema_error = judged(
            &review_of(validated(json!({"app.json": r#"{"port": "x"}"#}))),
            &metrics,
        );
        assert!(
            message(&schema_error).ends_with(r#"at /port: "x" is not of type "integer" (rule "type")"#),
            "{schema_error}"
        );
        let good = judged(
            &review_of(validated(json!({"app.json": r#"{"port": 1}"#}))),
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
        let response = judged(&review_of(spec), &Metrics::default());
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
    fn a_source_is_not_read_here_so_any_source_gets_the_same_answer() {
        // Source mode: the content is in another object, which this webhook never reads. Whatever
        // the review names (another namespace, a Secret that exists or not), the answer is the same.
        let metrics = Metrics::default();
        let answers: Vec<Value> = ["db", "kube-system-token", "cmset-webhook-tls"]
            .into_iter()
            .flat_map(|source| {
                let spec = json!({"secretName": source,
                    "validation": {"keys": {"tls.key": {"format": "properties",
                        "schema": {"properties": {"k": {"pattern": "^a"}}}}}}});
                let configmap = json!({"configMapName": source,
                    "validation": {"keys": {"a.json": {"schema": {"type": "object"}}}}});
                [
                    judged(&review("SecretSet", spec, None), &metrics),
                    judged(&review("ConfigMapSet", configmap, None), &metrics),
                ]
            })
            .collect();
        for answer in &answers {
            assert_eq!(
                answer["response"],
                json!({"uid": "u-1", "allowed": true}),
                "{answer}"
            );
        }
    }

    #[test]
    fn a_key_whose_schema_is_in_a_configmap_is_parsed_here_and_matched_by_the_controller() {
        let spec = |text: &str| {
            json!({"template": {"data": {"app.json": text}},
                   "validation": {"keys": {"app.json": {"schemaFrom": {"configMapKeyRef": {"name": "schemas", "key": "app"}}}}}})
        };
        let good = judged(&review_of(spec(r#"{"port": "any"}"#)), &Metrics::default());
        assert_eq!(
            good["response"],
            json!({"uid": "u-1", "allowed": true}),
            "no warning either"
        );
        let bad = judged(&review_of(spec("{")), &Metrics::default());
        assert_eq!(bad["response"]["allowed"], false);
        assert!(
            message(&bad).contains(r#"key "app.json": is not valid JSON"#),
            "{bad}"
        );
    }

    #[test]
    fn content_judged_past_its_budget_is_refused_saying_so() {
        let review = review_of(validated(json!({"a.json": "{}", "b.json": "{}"})));
        let response = review_set(&typed(&review), &Metrics::default(), &|| true);
        assert_eq!(response["response"]["allowed"], false);
        assert_eq!(
            message(&response),
            r#"ConfigMapSet "app": content fails spec.validation: key "a.json": was not judged: over the time budget"#
        );
    }

    #[tokio::test]
    async fn judges_answer_off_the_runtime_and_sets_without_validation_cost_nothing() {
        let judges = Judges::default();
        let metrics = Arc::new(Metrics::default());
        let plain = review_of(json!({"template": {"data": {"a": "1"}}}));
        assert!(!needs_judging(&typed(&plain)));
        assert_eq!(
            judges.review(typed(&plain), metrics.clone()).await["response"]["allowed"],
            true
        );
        let bad = review_of(validated(json!({"app.json": "{"})));
        assert!(needs_judging(&typed(&bad)));
        assert_eq!(
            judges.review(typed(&bad), metrics).await["response"]["allowed"],
            false
        );
        assert_eq!(judges.permits.available_permits(), JUDGES, "every judge is back");
        assert!(
            judges.turns.lock().unwrap().is_empty(),
            "no namespace's turn stays behind"
        );
    }

    #[test]
    fn only_a_change_of_content_source_or_validation_is_judged_again() {
        let spec = validated(json!({"app.json": "{"}));
        assert!(content_may_change(&typed(&review_of(spec.clone())).request));
        assert!(!content_may_change(
            &typed(&review("ConfigMapSet", spec.clone(), Some(spec.clone()))).request
        ));
        let mut paused = spec.clone();
        paused["rollout"] = json!({"paused": true});
        assert!(!content_may_change(
            &typed(&review("ConfigMapSet", paused, Some(spec.clone()))).request
        ));
        let changed = validated(json!({"app.json": "{}"}));
        assert!(content_may_change(
            &typed(&review("ConfigMapSet", changed, Some(spec))).request
        ));
    }

    #[test]
    fn windows_are_still_checked_and_a_set_without_validation_needs_nothing_read() {
        let spec =
            json!({"rollout": {"windows": [{"kind": "Deny", "schedule": "0 25 * * *", "duration": "1h"}]}});
        let response = judged(&review_of(spec), &Metrics::default());
        assert!(
            message(&response).contains("spec.rollout.windows[0].schedule"),
            "{response}"
        );
        let spec =
            |v: Value| -> SetSpecText { serde_json::from_slice(&serde_json::to_vec(&v).unwrap()).unwrap() };
        assert!(validation_of(&spec(json!({"template": {"data": {"a": "1"}}}))).is_none());
        assert!(validation_of(&spec(json!({"validation": {"keys": {}}}))).is_none());
    }
}
