//! The break-glass admission webhook (`POST /override-window`, mutating): an update of a ConfigMapSet
//! or SecretSet that adds or changes `cmset.dev/window-override` (or touches its record) is let through
//! only for a user the API server authorizes to `override` `changewindows.cmset.dev` (ClusterRole
//! `cmset-break-glass`, bound cluster-wide or in the set's namespace), asked with a SubjectAccessReview
//! built from the request's `userInfo`. Allowed, the webhook writes the record itself: the user as the
//! API server authenticated them, the time, and the proof the controller checks
//! (`cmset_core::break_glass`). Refused, the update is denied, naming the ClusterRole.
//!
//! An update that leaves the three annotations as they were asks nothing (a tenant editing the spec of a
//! set under an override needs no right), and removing the override asks nothing either (it lets less
//! through): its record goes with it. An override stored without a record (while the webhook was down)
//! is recorded by the next update of someone allowed, and left unrecorded by anyone else's. A set being created is not sent here: it has no rollout to let
//! through, and no uid yet to sign; an override it carries is refused by the controller.
//!
//! It fails open like the other webhooks; an override stored while it is down has no proof, so it
//! lets nothing through and the controller reports it.

use std::time::Duration;

use cmset_api::labels::{WINDOW_OVERRIDE, WINDOW_OVERRIDE_BY, WINDOW_OVERRIDE_PROOF};
use cmset_core::break_glass::{Claim, prove};
use cmset_core::set::SetKind;
use jiff::Timestamp;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::{Value, json};
use tracing::{info, warn};

use crate::platform::proof_keys::ProofKeys;

/// The right that breaks the glass: verb `override` on `changewindows` in group `cmset.dev`.
pub const GROUP: &str = "cmset.dev";
pub const RESOURCE: &str = "changewindows";
pub const VERB: &str = "override";
/// The ClusterRole config/rbac ships with that right.
pub const CLUSTER_ROLE: &str = "cmset-break-glass";

/// How long the SubjectAccessReview may take: well inside the webhook's 5 s timeout.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(2);

const RECORD: [&str; 3] = [WINDOW_OVERRIDE, WINDOW_OVERRIDE_BY, WINDOW_OVERRIDE_PROOF];

/// The AdmissionReview response to `review`, an update of a set, at `now`.
pub async fn review_override(client: &Client, keys: &ProofKeys, review: &Value, now: Timestamp) -> Value {
    let request = &review["request"];
    let uid = request["uid"].as_str().unwrap_or_default();
    let response = match decide(client, keys, request, now).await {
        Answer::Allow => json!({"uid": uid, "allowed": true}),
        Answer::Patch(ops) => {
            use base64::Engine;
            let patch = base64::engine::general_purpose::STANDARD.encode(Value::Array(ops).to_string());
            json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch})
        }
        Answer::Deny {
            code,
            reason,
            message,
        } => json!({"uid": uid, "allowed": false,
            "status": {"code": code, "reason": reason, "message": message}}),
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

enum Answer {
    Allow,
    Patch(Vec<Value>),
    Deny {
        code: u16,
        reason: &'static str,
        message: String,
    },
}

async fn decide(client: &Client, keys: &ProofKeys, request: &Value, now: Timestamp) -> Answer {
    if request["operation"].as_str() != Some("UPDATE") {
        return Answer::Allow;
    }
    let annotation = |object: &str, key: &str| {
        request
            .pointer(&format!("/{object}/metadata/annotations"))
            .and_then(|a| a.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let touched = RECORD
        .iter()
        .any(|key| annotation("object", key) != annotation("oldObject", key));
    // An override without a record (written while this webhook was down) is recorded when someone
    // allowed to updates the set (`kubectl cmset promote --override-window` again); anyone else's
    // update leaves it as it is, unrecorded.
    let unrecorded = annotation("object", WINDOW_OVERRIDE).is_some()
        && [WINDOW_OVERRIDE_BY, WINDOW_OVERRIDE_PROOF]
            .iter()
            .any(|key| annotation("object", key).is_none());
    if !touched && !unrecorded {
        return Answer::Allow;
    }
    let Some(value) = annotation("object", WINDOW_OVERRIDE) else {
        // The override is gone: so is its record.
        let stale: Vec<Value> = [WINDOW_OVERRIDE_BY, WINDOW_OVERRIDE_PROOF]
            .into_iter()
            .filter(|key| annotation("object", key).is_some())
            .map(|key| json!({"op": "remove", "path": annotation_path(key)}))
            .collect();
        return if stale.is_empty() {
            Answer::Allow
        } else {
            Answer::Patch(stale)
        };
    };
    let kind = match request.pointer("/kind/kind").and_then(Value::as_str) {
        Some("ConfigMapSet") => SetKind::ConfigMapSet,
        Some("SecretSet") => SetKind::SecretSet,
        _ => return Answer::Allow,
    };
    let text = |pointer: &str| {
        request
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let (namespace, name) = (text("/namespace"), text("/name"));
    let (user, set_uid) = (text("/userInfo/username"), text("/object/metadata/uid"));
    let what = format!("{kind:?} {namespace}/{name}");
    match authorized(client, &request["userInfo"], namespace).await {
        Ok(true) => {}
        Err(_) | Ok(false) if !touched => return Answer::Allow,
        Ok(false) => {
            info!(set = %what, %user, "admission: refused a change window override (not authorized)");
            return Answer::Deny {
                code: 403,
                reason: "Forbidden",
                message: format!(
                    "{what}: letting a rollout through the change windows (annotation {WINDOW_OVERRIDE}) \
                     needs the right to {VERB} {RESOURCE}.{GROUP}, which ClusterRole {CLUSTER_ROLE} grants \
                     (bound in namespace {namespace} or cluster-wide); user {user:?} does not have it"
                ),
            };
        }
        Err(why) => {
            warn!(set = %what, error = %why, "admission: could not ask whether an override is allowed");
            return Answer::Deny {
                code: 503,
                reason: "ServiceUnavailable",
                message: format!(
                    "{what}: could not ask the API server whether {user:?} may {VERB} {RESOURCE}.{GROUP} \
                     ({why}); try again"
                ),
            };
        }
    }
    let Some(key) = keys.current() else {
        return Answer::Deny {
            code: 503,
            reason: "ServiceUnavailable",
            message: format!("{what}: cmset has no serving key loaded yet to record the override; try again"),
        };
    };
    let at = Timestamp::from_second(now.as_second()).unwrap_or(now).to_string();
    let claim = Claim {
        kind,
        uid: set_uid,
        namespace,
        name,
        value: &value,
        user,
        at: &at,
    };
    info!(set = %what, %user, override = %value, "admission: recorded a change window override");
    Answer::Patch(vec![
        json!({"op": "add", "path": annotation_path(WINDOW_OVERRIDE_BY), "value": claim.record()}),
        json!({"op": "add", "path": annotation_path(WINDOW_OVERRIDE_PROOF), "value": prove(&key, &claim)}),
    ])
}

/// The JSON pointer of annotation `key` (`/` escaped as `~1`).
fn annotation_path(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

/// Whether the API server says the user of `user_info` may `override` `changewindows.cmset.dev` in
/// `namespace` (a RoleBinding there, or a ClusterRoleBinding).
async fn authorized(client: &Client, user_info: &Value, namespace: &str) -> Result<bool, String> {
    let review = access_review(user_info, namespace);
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    match tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review)).await {
        Ok(Ok(answer)) => Ok(answer
            .status
            .is_some_and(|s| s.allowed && !s.denied.unwrap_or(false))),
        Ok(Err(e)) => Err(crate::platform::redact::api_error(&e).to_string()),
        Err(_) => Err("the SubjectAccessReview timed out".into()),
    }
}

/// The SubjectAccessReview of the user of an admission request (`userInfo`: username, uid, groups,
/// extra), as the API server authenticated them.
pub fn access_review(user_info: &Value, namespace: &str) -> SubjectAccessReview {
    let text = |key: &str| user_info[key].as_str().map(str::to_string);
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: text("username"),
            uid: text("uid"),
            groups: serde_json::from_value(user_info["groups"].clone()).ok(),
            extra: serde_json::from_value(user_info["extra"].clone()).ok(),
            resource_attributes: Some(ResourceAttributes {
                group: Some(GROUP.into()),
                resource: Some(RESOURCE.into()),
                verb: Some(VERB.into()),
                namespace: Some(namespace.into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}
