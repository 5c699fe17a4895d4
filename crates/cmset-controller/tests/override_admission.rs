//! The break-glass webhook against a mocked API server: which updates of a set it asks the API server
//! about (the exact SubjectAccessReview), and what it answers: the record written for an allowed user,
//! a denial naming the ClusterRole for anyone else, nothing asked when the override is left as it was.

use base64::Engine;
use cmset_api::labels::{WINDOW_OVERRIDE, WINDOW_OVERRIDE_BY, WINDOW_OVERRIDE_PROOF};
use cmset_controller::platform::proof_keys::ProofKeys;
use cmset_controller::serving::override_admission::review_override;
use cmset_core::break_glass::{Claim, ProofKey, verifies};
use cmset_core::set::SetKind;
use jiff::Timestamp;
use serde_json::{Value, json};

mod support;

use support::{Responder, Seen, mock_client, server_ends};

const VALUE: &str = "app-7c9f5d6b8d@20261127T172000Z";
const SET_UID: &str = "0b6e4a52-1111-2222-3333-444455556666";

fn keys() -> ProofKeys {
    let keys = ProofKeys::default();
    keys.install(b"the serving key");
    keys
}

fn now() -> Timestamp {
    "2026-11-27T17:21:00.734Z".parse().unwrap()
}

/// An AdmissionReview of an update of ConfigMapSet team/app by `user`, from `old` annotations to `new`.
fn update(user: &str, old: Value, new: Value) -> Value {
    let object = |annotations: Value| {
        json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet",
               "metadata": {"name": "app", "namespace": "team", "uid": SET_UID, "annotations": annotations},
               "spec": {"template": {"data": {"a": "1"}}}})
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "req-1", "operation": "UPDATE", "namespace": "team", "name": "app",
                       "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": "ConfigMapSet"},
                       "resource": {"group": "cmset.dev", "version": "v1alpha1", "resource": "configmapsets"},
                       "userInfo": {"username": user, "uid": "u-42",
                                    "groups": ["ops", "system:authenticated"],
                                    "extra": {"scopes": ["openid"]}},
                       "object": object(new), "oldObject": object(old)}})
}

/// The API server answers every SubjectAccessReview with `allowed`.
fn access(allowed: bool) -> Responder {
    std::sync::Arc::new(move |s: &Seen| {
        let mut answer = s.body.clone();
        answer["status"] = json!({"allowed": allowed});
        (201, answer)
    })
}

/// What the webhook answers to `review`, with every request it sent.
async fn ask(respond: Responder, review: &Value) -> (Value, Vec<Seen>) {
    let (client, server, seen) = mock_client(respond, "default");
    let answer = review_override(&client, &keys(), review, now()).await;
    drop(client);
    server_ends(server).await;
    let seen = seen.lock().unwrap().clone();
    (answer, seen)
}

fn patch_of(answer: &Value) -> Value {
    let encoded = answer["response"]["patch"].as_str().expect("a patch");
    serde_json::from_slice(&base64::engine::general_purpose::STANDARD.decode(encoded).unwrap()).unwrap()
}

/// The one SubjectAccessReview expected of user `ana`, as the API server authenticated her.
fn expected_review() -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
           "spec": {"user": "ana", "uid": "u-42", "groups": ["ops", "system:authenticated"],
                    "extra": {"scopes": ["openid"]},
                    "resourceAttributes": {"group": "cmset.dev", "resource": "changewindows",
                                           "verb": "override", "namespace": "team"}}})
}

#[tokio::test]
async fn an_allowed_user_gets_the_record_written_by_the_webhook_with_a_proof() {
    // The client claims to be someone else: the record names the authenticated user.
    let review = update(
        "ana",
        json!({}),
        json!({WINDOW_OVERRIDE: VALUE, WINDOW_OVERRIDE_BY: "kind-admin 2026-11-27T17:20:59Z"}),
    );
    let (answer, seen) = ask(access(true), &review).await;
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, ["POST /apis/authorization.k8s.io/v1/subjectaccessreviews"]);
    assert_eq!((seen[0].query.as_str(), &seen[0].body), ("", &expected_review()));
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    assert_eq!(answer["response"]["uid"], "req-1");
    let patch = patch_of(&answer);
    assert_eq!(
        patch[0],
        json!({"op": "add", "path": "/metadata/annotations/cmset.dev~1window-override-by",
                                "value": "ana 2026-11-27T17:21:00Z"})
    );
    assert_eq!(
        patch[1]["path"],
        "/metadata/annotations/cmset.dev~1window-override-proof"
    );
    let proof = patch[1]["value"].as_str().unwrap();
    let claim = Claim {
        kind: SetKind::ConfigMapSet,
        uid: SET_UID,
        namespace: "team",
        name: "app",
        value: VALUE,
        user: "ana",
        at: "2026-11-27T17:21:00Z",
    };
    assert!(verifies(&keys().all(), &claim, proof));
    assert!(!verifies(
        &keys().all(),
        &Claim {
            user: "kind-admin",
            ..claim
        },
        proof
    ));
    assert!(!verifies(&[ProofKey::derive(b"a tenant's guess")], &claim, proof));
}

#[tokio::test]
async fn a_user_without_the_right_is_denied_naming_the_cluster_role() {
    let review = update("alice", json!({}), json!({WINDOW_OVERRIDE: VALUE}));
    let (answer, seen) = ask(access(false), &review).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["spec"]["user"], "alice");
    let response = &answer["response"];
    assert_eq!(response["allowed"], false, "{answer}");
    assert_eq!(response["status"]["code"], 403);
    assert_eq!(
        response["status"]["message"],
        "ConfigMapSet team/app: letting a rollout through the change windows (annotation \
         cmset.dev/window-override) needs the right to override changewindows.cmset.dev, which ClusterRole \
         cmset-break-glass grants (bound in namespace team or cluster-wide); user \"alice\" does not have it"
    );
    assert!(response.get("patch").is_none());

    // Touching only the record of an override in force asks the same right.
    let record = json!({WINDOW_OVERRIDE: VALUE, WINDOW_OVERRIDE_BY: "ana 2026-11-27T17:21:00Z",
                        WINDOW_OVERRIDE_PROOF: "c2lnbmVk"});
    let mut forged = record.clone();
    forged[WINDOW_OVERRIDE_BY] = json!("root 2026-11-27T17:21:00Z");
    let (answer, seen) = ask(access(false), &update("alice", record, forged)).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
}

#[tokio::test]
async fn an_update_that_leaves_the_override_as_it_was_asks_nothing() {
    let record = json!({WINDOW_OVERRIDE: VALUE, WINDOW_OVERRIDE_BY: "ana 2026-11-27T17:21:00Z",
                        WINDOW_OVERRIDE_PROOF: "c2lnbmVk", "team.example/owner": "payments"});
    let mut other = record.clone();
    other["team.example/owner"] = json!("billing");
    for new in [record.clone(), other] {
        let (answer, seen) = ask(access(false), &update("alice", record.clone(), new)).await;
        assert!(seen.is_empty(), "{seen:?}");
        assert_eq!(
            answer,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "req-1", "allowed": true}})
        );
    }
}

#[tokio::test]
async fn removing_the_override_asks_nothing_and_takes_its_record_along() {
    let record = json!({WINDOW_OVERRIDE: VALUE, WINDOW_OVERRIDE_BY: "ana 2026-11-27T17:21:00Z",
                        WINDOW_OVERRIDE_PROOF: "c2lnbmVk"});
    let left = json!({WINDOW_OVERRIDE_BY: "ana 2026-11-27T17:21:00Z", WINDOW_OVERRIDE_PROOF: "c2lnbmVk"});
    let (answer, seen) = ask(access(false), &update("alice", record, left)).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(
        patch_of(&answer),
        json!([{"op": "remove", "path": "/metadata/annotations/cmset.dev~1window-override-by"},
               {"op": "remove", "path": "/metadata/annotations/cmset.dev~1window-override-proof"}])
    );
}

#[tokio::test]
async fn an_unanswered_review_denies_the_override() {
    let failing: Responder = std::sync::Arc::new(|_: &Seen| {
        (
            500,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500}),
        )
    });
    let review = update("ana", json!({}), json!({WINDOW_OVERRIDE: VALUE}));
    let (answer, seen) = ask(failing, &review).await;
    assert!(!seen.is_empty());
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(answer["response"]["status"]["code"], 503);
}

#[tokio::test]
async fn an_override_stored_without_a_record_is_recorded_only_for_someone_allowed() {
    // Stored while the webhook was down: no record. A tenant's later edit leaves it so, unrefused.
    let unrecorded = json!({WINDOW_OVERRIDE: VALUE, WINDOW_OVERRIDE_BY: "root 2026-11-27T17:00:00Z"});
    let (answer, seen) = ask(
        access(false),
        &update("alice", unrecorded.clone(), unrecorded.clone()),
    )
    .await;
    assert_eq!(seen.len(), 1);
    assert_eq!(
        answer,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "response": {"uid": "req-1", "allowed": true}})
    );
    // `kubectl cmset promote --override-window` again, by someone allowed: recorded now.
    let (answer, seen) = ask(access(true), &update("ana", unrecorded.clone(), unrecorded)).await;
    assert_eq!(seen[0].body, expected_review());
    let patch = patch_of(&answer);
    assert_eq!(patch[0]["value"], "ana 2026-11-27T17:21:00Z");
    assert_eq!(
        patch[1]["path"],
        "/metadata/annotations/cmset.dev~1window-override-proof"
    );
}
