//! The validating admission webhook for change windows (`POST /validate-windows`; a set's windows are
//! judged at `POST /validate-set`, [`crate::serving::set_admission`], which calls [`problems`]): a
//! ConfigMapSet or SecretSet whose `spec.rollout.windows` has a bad cron or RRULE, duration or time
//! zone, and a ChangeWindow with any of those or a bad namespace pattern or selector, is refused when it is
//! created or changed, with a message naming the field ([`cmset_core::policy::windows`]). A Kubernetes 1.20
//! server has no CEL, and no CEL could parse a schedule anyway.
//!
//! Only the windows of a set are checked here: any other problem of a set is reported in its status,
//! as before, so an apply that worked keeps working. It fails open like the other webhooks: a set whose
//! windows slipped in is invalid, keeps its last good revision and says why; a ChangeWindow that slipped
//! in is left out, with a warning.

use cmset_api::{ChangeWindowSpec, RolloutSpec};
use cmset_core::content::validate::summary;
use cmset_core::policy::windows::{self, WindowSource};
use cmset_core::status::problem::Problem;
use serde_json::{Value, json};
use tracing::info;

pub async fn validate(axum::Json(review): axum::Json<Value>) -> axum::Json<Value> {
    axum::Json(review_windows(&review))
}

/// The AdmissionReview response to `review` of a set or a ChangeWindow: allowed, or refused with why.
pub fn review_windows(review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let object = &request["object"];
    let kind = request
        .pointer("/kind/kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .or_else(|| request.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    // A deletion carries no object: nothing to check.
    let problems = object
        .get("spec")
        .map(|spec| problems(kind, spec))
        .unwrap_or_default();
    let response = if problems.is_empty() {
        json!({"uid": uid, "allowed": true})
    } else {
        let message = format!("{kind} {name:?}: {}", summary(&problems));
        info!(%kind, %name, %message, "admission: refused change windows");
        json!({"uid": uid, "allowed": false,
               "status": {"code": 422, "reason": "Invalid", "message": message}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// What is wrong with the windows of `spec`, an object of `kind`.
pub(crate) fn problems(kind: &str, spec: &Value) -> Vec<Problem> {
    match kind {
        "ChangeWindow" => match serde_json::from_value::<ChangeWindowSpec>(spec.clone()) {
            Ok(spec) => windows::validate_change_window(&spec).err().unwrap_or_default(),
            // The schema refuses what does not decode; say so anyway for a server that skips it.
            Err(e) => vec![Problem {
                field: "spec".into(),
                message: e.to_string(),
            }],
        },
        _ => {
            // Only the windows are read: any other field is the schema's and the status's business.
            let Some(rollout) = spec.get("rollout").filter(|r| r.is_object()) else {
                return Vec::new();
            };
            let Some(listed) = rollout.get("windows") else {
                return Vec::new();
            };
            match serde_json::from_value::<RolloutSpec>(json!({ "windows": listed })) {
                Ok(rollout) => {
                    windows::parse_all(&rollout.windows, &WindowSource::Set, "spec.rollout.windows")
                        .err()
                        .unwrap_or_default()
                }
                Err(e) => vec![Problem {
                    field: "spec.rollout.windows".into(),
                    message: e.to_string(),
                }],
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(kind: &str, spec: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u-1", "operation": "CREATE", "name": "app",
                           "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": kind},
                           "object": {"apiVersion": "cmset.dev/v1alpha1", "kind": kind,
                                      "metadata": {"name": "app"}, "spec": spec}}})
    }

    fn message(response: &Value) -> &str {
        response
            .pointer("/response/status/message")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    #[test]
    fn a_set_with_good_windows_or_none_is_allowed() {
        for spec in [
            json!({"template": {"data": {"a": "1"}}}),
            json!({"rollout": {"autoRollback": true}}),
            json!({"rollout": {"windows": [{"kind": "Deny", "schedule": "0 18 * * 5", "duration": "62h",
                                            "timeZone": "Europe/Berlin"}]}}),
        ] {
            let response = review_windows(&review("ConfigMapSet", spec));
            assert_eq!(response["response"]["allowed"], true, "{response}");
        }
    }

    #[test]
    fn a_set_with_a_bad_window_is_refused_naming_the_field() {
        let cases = [
            (
                json!({"kind": "Deny", "schedule": "0 25 * * *", "duration": "1h"}),
                "spec.rollout.windows[0].schedule",
            ),
            (
                json!({"kind": "Deny", "schedule": "0 1 * * *", "duration": "an hour"}),
                "spec.rollout.windows[0].duration",
            ),
            (
                json!({"kind": "Allow", "schedule": "0 1 * * *", "duration": "1h", "timeZone": "Mars/Olympus"}),
                "spec.rollout.windows[0].timeZone",
            ),
            (
                json!({"kind": "Allow", "schedule": "FREQ=SOMETIMES", "duration": "1h"}),
                "spec.rollout.windows[0].schedule",
            ),
        ];
        for (window, field) in cases {
            let response = review_windows(&review("SecretSet", json!({"rollout": {"windows": [window]}})));
            assert_eq!(response["response"]["allowed"], false, "{response}");
            assert!(
                message(&response).contains(field),
                "{field}: {}",
                message(&response)
            );
        }
    }

    #[test]
    fn a_set_with_other_problems_only_is_not_refused_here() {
        // A bad data key is the status's business, as before this webhook existed.
        let spec = json!({"template": {"data": {"bad key!": "1"}}, "rollout": {}});
        let response = review_windows(&review("ConfigMapSet", spec));
        assert_eq!(response["response"]["allowed"], true, "{response}");
    }

    #[test]
    fn a_change_window_with_a_bad_window_is_refused_naming_the_field() {
        let spec = json!({"windows": [{"kind": "Deny", "schedule": "0 0 * * *", "duration": "1h"},
                                      {"kind": "Deny", "schedule": "0 0 * * *", "duration": "1h",
                                       "timeZone": "Nowhere/Land"}]});
        let response = review_windows(&review("ChangeWindow", spec));
        assert_eq!(response["response"]["allowed"], false, "{response}");
        assert!(
            message(&response).contains("spec.windows[1].timeZone"),
            "{}",
            message(&response)
        );
        let good = json!({"namespaces": ["*-prod"], "windows": [{"kind": "Deny", "schedule": "@daily", "duration": "1h"}]});
        let response = review_windows(&review("ChangeWindow", good));
        assert_eq!(response["response"]["allowed"], true, "{response}");
    }

    #[test]
    fn a_deletion_is_allowed() {
        let review =
            json!({"request": {"uid": "u-2", "operation": "DELETE", "kind": {"kind": "ChangeWindow"}}});
        assert_eq!(review_windows(&review)["response"]["allowed"], true);
    }
}
