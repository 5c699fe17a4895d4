//! The validating admission webhook for AnalysisTemplates (`POST /validate-analysistemplate` over the
//! webhook's HTTPS): a template whose query puts an argument where its value could leave its place
//! (outside a double-quoted string, unless the argument is a `duration` or a `number`), or whose query,
//! arguments or condition are otherwise wrong, is refused when it is created or changed, with a message
//! naming the argument ([`cmset_core::analysis::check_template`]). A Kubernetes 1.20 server has no CEL
//! to say this in the CRD.
//!
//! It fails open like the mutating webhook (cmset down, the template is stored): the controller runs
//! the same check whenever a set uses a template, so a template that slipped in holds the set's wave
//! with the same message and never reaches Prometheus.

use cmset_api::AnalysisTemplateSpec;
use cmset_core::analysis;
use serde_json::{Value, json};
use tracing::info;

pub async fn validate(axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    axum::Json(review_template(&review))
}

/// The AdmissionReview response to `review` of an AnalysisTemplate: allowed, or refused with why.
pub fn review_template(review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let object = &request["object"];
    let name = object
        .pointer("/metadata/name")
        .or_else(|| request.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    // A deletion carries no object: nothing to check.
    let refusal = object.get("spec").and_then(|spec| {
        match serde_json::from_value::<AnalysisTemplateSpec>(spec.clone()) {
            Ok(spec) => analysis::check_template(name, &spec).err().map(|e| e.to_string()),
            Err(e) => Some(format!("AnalysisTemplate {name:?}: spec: {e}")),
        }
    });
    let response = match refusal {
        None => json!({"uid": uid, "allowed": true}),
        Some(message) => {
            info!(template = %name, %message, "admission: refused an AnalysisTemplate");
            json!({"uid": uid, "allowed": false,
                   "status": {"code": 422, "reason": "Invalid", "message": message}})
        }
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(spec: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u-1", "operation": "CREATE", "name": "errors",
                           "object": {"apiVersion": "cmset.dev/v1alpha1", "kind": "AnalysisTemplate",
                                      "metadata": {"name": "errors"}, "spec": spec}}})
    }

    #[test]
    fn a_good_template_is_allowed() {
        let answer = review_template(&review(json!({
            "args": [{"name": "service"}, {"name": "window", "type": "duration", "default": "5m"}],
            "query": r#"sum(rate(errors{service="{{args.service}}"}[{{args.window}}]))"#,
            "successCondition": "result < 0.05",
        })));
        assert_eq!(
            answer,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u-1", "allowed": true}})
        );
    }

    #[test]
    fn a_template_with_an_argument_outside_quotes_is_refused_naming_it() {
        let answer = review_template(&review(json!({
            "args": [{"name": "threshold"}],
            "query": "sum(rate(errors[5m])) > {{args.threshold}}",
            "successCondition": "result < 0.05",
        })));
        let response = &answer["response"];
        assert_eq!(response["uid"], "u-1");
        assert_eq!(response["allowed"], false);
        assert_eq!(response["status"]["code"], 422);
        assert_eq!(
            response["status"]["message"],
            r#"AnalysisTemplate "errors": argument "threshold" (string) is used outside a double-quoted string: put {{args.threshold}} inside "...", or declare it with type: duration or type: number"#
        );
    }

    #[test]
    fn a_bad_default_and_a_deletion() {
        let answer = review_template(&review(json!({
            "args": [{"name": "window", "type": "duration", "default": "five minutes"}],
            "query": "rate(errors[{{args.window}}])",
            "successCondition": "result < 0.05",
        })));
        assert!(
            answer["response"]["status"]["message"]
                .as_str()
                .unwrap()
                .contains(r#"argument "window" is not a duration"#),
            "{answer}"
        );
        let deletion =
            json!({"request": {"uid": "u-2", "operation": "DELETE", "name": "errors", "object": null}});
        assert_eq!(review_template(&deletion)["response"]["allowed"], true);
    }
}
