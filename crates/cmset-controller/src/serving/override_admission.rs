//! The break-glass record (`POST /override-window`, mutating): when the API server admits the creation
//! of a `WindowOverride`, the webhook writes `spec.requestedBy`, the user as the API server
//! authenticated them (`request.userInfo.username`), replacing whatever the creator wrote there; on an
//! update it puts back the record the object had, so nobody rewrites it afterwards.
//!
//! It grants nothing and asks nothing: RBAC has already decided the create (only ClusterRole
//! `cmset-break-glass` grants `create` on `windowoverrides.cmset.dev`), and the controller honours an
//! override because it exists, not because of anything this webhook wrote. So a review sent by someone
//! other than the API server (any pod can reach the webhook) gets only a patch back, which writes
//! nothing anywhere. Any other object sent here (a set update, as earlier versions registered this
//! path for) is allowed unchanged: no proof is issued any more.
//!
//! It fails open like the other webhooks: an override created while it is down counts all the same
//! (RBAC admitted it), with no record ("not recorded").

use serde_json::{Value, json};
use tracing::info;

/// The AdmissionReview response to `review`.
pub fn review_override(review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let response = match record_patch(request) {
        None => json!({"uid": uid, "allowed": true}),
        Some(ops) => {
            use base64::Engine;
            let patch = base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string());
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
        }
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

const RECORD: &str = "/spec/requestedBy";

/// The JSON patch that makes the record what it must be, or `None` when it is already (or the request
/// is not about a WindowOverride).
fn record_patch(request: &Value) -> Option<Vec<Value>> {
    let is_override = request.pointer("/kind/group").and_then(Value::as_str) == Some(cmset_api::GROUP)
        && request.pointer("/kind/kind").and_then(Value::as_str) == Some("WindowOverride");
    if !is_override || !request.pointer("/object/spec").is_some_and(Value::is_object) {
        return None;
    }
    let written = request
        .pointer("/object/spec/requestedBy")
        .and_then(Value::as_str);
    let wanted = match request["operation"].as_str()? {
        "CREATE" => {
            let user = request.pointer("/userInfo/username").and_then(Value::as_str)?;
            let namespace = request["namespace"].as_str().unwrap_or_default();
            let name = (request.pointer("/object/metadata/name").and_then(Value::as_str)).unwrap_or_default();
            info!(%namespace, windowoverride = %name, %user, "admission: recorded who created a WindowOverride");
            Some(user)
        }
        // The record is written once: an update keeps the one the object had (none, if it had none).
        "UPDATE" => request
            .pointer("/oldObject/spec/requestedBy")
            .and_then(Value::as_str),
        _ => return None,
    };
    match (written, wanted) {
        (w, x) if w == x => None,
        (_, Some(user)) => Some(vec![json!({"op": "add", "path": RECORD, "value": user})]),
        (Some(_), None) => Some(vec![json!({"op": "remove", "path": RECORD})]),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    use super::*;

    fn review(operation: &str, user: &str, object: Value, old: Option<Value>) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "req-1", "operation": operation, "namespace": "team", "name": "app-break",
                           "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": "WindowOverride"},
                           "resource": {"group": "cmset.dev", "version": "v1alpha1", "resource": "windowoverrides"},
                           "userInfo": {"username": user, "groups": ["ops", "system:authenticated"]},
                           "object": object, "oldObject": old.unwrap_or(Value::Null)}})
    }

    fn wo(requested_by: Option<&str>) -> Value {
        let mut spec = json!({"set": {"kind": "ConfigMapSet", "name": "app", "uid": "0b6e4a52"},
                              "rollout": {"revision": "app-7c9f5d6b8d", "startedAt": "2026-11-27T17:20:00Z"}});
        if let Some(by) = requested_by {
            spec["requestedBy"] = json!(by);
        }
        json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "WindowOverride",
               "metadata": {"name": "app-break", "namespace": "team"}, "spec": spec})
    }

    /// The response, and its patch decoded (`Null` when none).
    fn answer(review: &Value) -> (Value, Value) {
        let response = review_override(review)["response"].clone();
        assert_eq!(response["uid"], "req-1");
        assert_eq!(
            response["allowed"], true,
            "the record webhook never refuses: {response}"
        );
        let patch = response["patch"]
            .as_str()
            .map(|p| {
                let bytes = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
                serde_json::from_slice(&bytes).unwrap()
            })
            .unwrap_or(Value::Null);
        (response, patch)
    }

    #[test]
    fn a_create_is_recorded_under_the_authenticated_user_whatever_the_body_claims() {
        let (response, patch) = answer(&review(
            "CREATE",
            "ana@example.com",
            wo(Some("system:admin")),
            None,
        ));
        assert_eq!(response["patchType"], "JSONPatch");
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/requestedBy", "value": "ana@example.com"}])
        );
        let (_, patch) = answer(&review("CREATE", "ana@example.com", wo(None), None));
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/requestedBy", "value": "ana@example.com"}])
        );
        // Already right: nothing to change.
        let (response, patch) = answer(&review(
            "CREATE",
            "ana@example.com",
            wo(Some("ana@example.com")),
            None,
        ));
        assert_eq!((response.get("patch"), patch), (None, Value::Null));
    }

    #[test]
    fn an_update_keeps_the_record_the_override_was_created_with() {
        let (_, patch) = answer(&review(
            "UPDATE",
            "mallory",
            wo(Some("mallory")),
            Some(wo(Some("ana@example.com"))),
        ));
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/requestedBy", "value": "ana@example.com"}])
        );
        // Not recorded at creation (the webhook was down): it stays not recorded.
        let (_, patch) = answer(&review(
            "UPDATE",
            "mallory",
            wo(Some("ana@example.com")),
            Some(wo(None)),
        ));
        assert_eq!(patch, json!([{"op": "remove", "path": "/spec/requestedBy"}]));
        let (response, patch) = answer(&review("UPDATE", "bo", wo(Some("ana")), Some(wo(Some("ana")))));
        assert_eq!((response.get("patch"), patch), (None, Value::Null));
    }

    #[test]
    fn a_forged_set_update_naming_system_masters_gets_nothing_signed() {
        // What earlier versions answered with a record and an HMAC proof: now allowed as it is.
        let forged = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "req-1", "operation": "UPDATE", "namespace": "team", "name": "app",
                        "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": "ConfigMapSet"},
                        "userInfo": {"username": "mallory", "groups": ["system:masters"]},
                        "object": {"metadata": {"name": "app", "uid": "x", "annotations": {
                            "cmset.dev/window-override": "app-7c9f5d6b8d@2026-11-27T17:20:00Z"}},
                            "spec": {}},
                        "oldObject": {"metadata": {"name": "app", "uid": "x"}, "spec": {}}}});
        let (response, patch) = answer(&forged);
        assert_eq!(response, json!({"uid": "req-1", "allowed": true}));
        assert_eq!(patch, Value::Null);
        let text = review_override(&forged).to_string();
        assert!(!text.contains("window-override-proof") && !text.contains("window-override-by"));
    }

    #[test]
    fn deletes_other_groups_and_malformed_requests_pass_unchanged() {
        let mut other_group = review("CREATE", "ana", wo(Some("x")), None);
        other_group["request"]["kind"]["group"] = json!("example.com");
        let cases = [
            review("DELETE", "ana", wo(Some("x")), None),
            other_group,
            review("CREATE", "ana", json!({"metadata": {}}), None),
            json!({"request": {"uid": "req-1"}}),
        ];
        for case in cases {
            let (response, patch) = answer(&case);
            assert_eq!((response.get("patch"), patch), (None, Value::Null), "{case}");
        }
    }
}
