//! The webhook certificate keeper against a mocked API server: the exact requests of a first start, of
//! a replica that finds everything in place (reads only), of a lost race to create the Secret, of a
//! cluster without the webhook registration, and of replicas patching the caBundle at once; and the
//! ValidatingWebhookConfiguration of the same name, kept when it is there and never in the way.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use cmset_controller::serving::cert_keeper::{KeepError, SecretSource, keep_once};
use cmset_controller::serving::webhook::ServingCert;
use cmset_controller::serving::webhook_certs::{self, Pair, Policy};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

mod support;

use support::{Responder, Seen, mock_client, server_ends};

const SECRET: &str = "/api/v1/namespaces/cmset-system/secrets";
const CONFIGURATION: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/cmset";
const VALIDATION: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/cmset";

fn source() -> SecretSource {
    SecretSource {
        namespace: "cmset-system".into(),
        name: "cmset-webhook-tls".into(),
        configuration: "cmset".into(),
        policy: Policy {
            validity: Duration::from_secs(90 * 86_400),
            names: vec!["cmset-webhook.cmset-system.svc".into()],
        },
    }
}

fn not_found() -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
    )
}

fn secret_of(pair: &Pair) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "cmset-webhook-tls", "namespace": "cmset-system", "resourceVersion": "3"},
        "data": {"ca.crt": b64(&pair.ca), "tls.crt": b64(&pair.cert), "tls.key": b64(&pair.key)}})
}

fn configuration(bundle: Option<&[u8]>) -> Value {
    configuration_at("7", bundle)
}

fn configuration_at(version: &str, bundle: Option<&[u8]>) -> Value {
    let mut hook = json!({"name": "workloads.cmset.dev", "clientConfig": {"url": "https://127.0.0.1:9443/mutate"},
        "sideEffects": "None", "admissionReviewVersions": ["v1"]});
    if let Some(b) = bundle {
        hook["clientConfig"]["caBundle"] = json!(base64::engine::general_purpose::STANDARD.encode(b));
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "cmset", "resourceVersion": version}, "webhooks": [hook]})
}

/// [`run_with`] on an install without the validation of AnalysisTemplates (its configuration is not
/// found).
async fn run(respond: Responder) -> (Result<Timestamp, KeepError>, Vec<Seen>, Arc<ServingCert>) {
    let without_validation: Responder = Arc::new(move |s: &Seen| match s.path.as_str() {
        VALIDATION => not_found(),
        _ => respond(s),
    });
    run_with(without_validation).await
}

async fn run_with(respond: Responder) -> (Result<Timestamp, KeepError>, Vec<Seen>, Arc<ServingCert>) {
    let (client, server, seen) = mock_client(respond, "cmset-system");
    let cert = Arc::new(ServingCert::default());
    let mut serving = None;
    let result = keep_once(client, source(), cert.clone(), &mut serving).await;
    server_ends(server).await;
    let seen = seen.lock().unwrap().clone();
    (result, seen, cert)
}

/// An API server where the Secret read answers `secret`, writes of it succeed, and the registration
/// exists without a caBundle.
fn issuing(secret: (u16, Value)) -> Responder {
    Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", p) if p.starts_with(SECRET) => secret.clone(),
        ("POST", _) | ("PUT", _) => (200, s.body.clone()),
        ("GET", _) | ("PATCH", _) => (200, configuration(None)),
        _ => (500, json!({})),
    })
}

fn lines(seen: &[Seen]) -> Vec<String> {
    seen.iter().map(Seen::line).collect()
}

#[tokio::test]
async fn the_first_replica_issues_the_pair_trusts_its_ca_then_serves_it() {
    let (result, seen, cert) = run(issuing(not_found())).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("POST {SECRET}"),
            format!("GET {CONFIGURATION}"),
            format!("PATCH {CONFIGURATION}"),
            format!("GET {VALIDATION}"),
        ]
    );
    for write in [&seen[1], &seen[3]] {
        assert!(
            write.query.contains("fieldManager=cmset-controller"),
            "{}",
            write.query
        );
    }
    let created = &seen[1].body;
    assert_eq!(created["type"], "kubernetes.io/tls");
    let keys: Vec<&str> = created["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
    // Strategic merge of the one webhook, by name: only its caBundle, never a key.
    let patch = &seen[3].body;
    assert_eq!(patch["webhooks"][0]["name"], "workloads.cmset.dev");
    assert_eq!(patch["metadata"]["resourceVersion"], "7", "on the version read");
    assert!(patch["webhooks"][0]["clientConfig"]["caBundle"].is_string());
    assert!(!patch.to_string().contains("PRIVATE KEY"));
    assert!(cert.is_loaded(), "served once trusted");
}

#[tokio::test]
async fn a_replica_that_finds_everything_in_place_only_reads() {
    let pair = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    let bundle = webhook_certs::merged_bundle(&pair.ca, b"", Timestamp::now()).unwrap();
    let (secret, config) = (secret_of(&pair), configuration(Some(&bundle)));
    let respond: Responder = Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", p) if p.starts_with(SECRET) => (200, secret.clone()),
        ("GET", _) => (200, config.clone()),
        _ => (500, json!({})),
    });
    let (result, seen, cert) = run(respond).await;
    let renew_at = result.unwrap();
    assert!(renew_at > Timestamp::now(), "renews later: {renew_at}");
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("GET {CONFIGURATION}"),
            format!("GET {VALIDATION}"),
        ],
        "no write"
    );
    assert!(cert.is_loaded());
}

#[tokio::test]
async fn losing_the_race_to_create_the_secret_reads_it_again_and_serves_nothing_meanwhile() {
    let respond: Responder = Arc::new(|s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", _) => not_found(),
        ("POST", _) => (
            409,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}),
        ),
        _ => (500, json!({})),
    });
    let (result, seen, cert) = run(respond).await;
    assert!(matches!(result, Err(KeepError::Raced)), "{result:?}");
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("POST {SECRET}")
        ]
    );
    assert!(
        !cert.is_loaded(),
        "its own pair was not stored: it serves the winner's after a re-read"
    );
}

#[tokio::test]
async fn without_a_webhook_registration_the_pair_is_still_kept_and_served() {
    let pair = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    let secret = secret_of(&pair);
    let respond: Responder = Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        ("GET", p) if p.starts_with(SECRET) => (200, secret.clone()),
        ("GET", _) => not_found(),
        _ => (500, json!({})),
    });
    let (result, seen, cert) = run(respond).await;
    result.unwrap();
    assert_eq!(seen.len(), 3, "{:?}", lines(&seen));
    assert!(cert.is_loaded());
}

#[tokio::test]
async fn an_unusable_secret_is_replaced_on_the_version_read() {
    // Someone edited the Secret by hand: its certificate does not parse.
    let pair = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    let broken = secret_of(&Pair {
        cert: "not a certificate".into(),
        ..pair
    });
    let (result, seen, cert) = run(issuing((200, broken))).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("PUT {SECRET}/cmset-webhook-tls"),
            format!("GET {CONFIGURATION}"),
            format!("PATCH {CONFIGURATION}"),
            format!("GET {VALIDATION}"),
        ]
    );
    let replaced = &seen[1].body;
    assert_eq!(
        replaced["metadata"]["resourceVersion"], "3",
        "a conflict if it moved since"
    );
    assert!(replaced["data"]["tls.crt"].is_string());
    assert!(cert.is_loaded());
}

fn conflict() -> (u16, Value) {
    (
        409,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409}),
    )
}

/// An API server whose Secret holds `pair` and whose webhook configuration is `first`, then changed
/// by another writer right after each of our reads, to each of `then` in turn. A patch on any version
/// but the current one is refused, as the API server does with a resourceVersion precondition.
fn contended(pair: &Pair, first: Value, then: Vec<Value>) -> Responder {
    let secret = secret_of(pair);
    let state = Mutex::new((first, VecDeque::from(then)));
    Arc::new(move |s: &Seen| {
        let mut state = state.lock().unwrap();
        let (current, changes) = &mut *state;
        match (s.method.as_str(), s.path.as_str()) {
            ("GET", p) if p.starts_with(SECRET) => (200, secret.clone()),
            ("GET", _) => {
                let read = current.clone();
                if let Some(next) = changes.pop_front() {
                    *current = next;
                }
                (200, read)
            }
            ("PATCH", _)
                if s.body["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"] =>
            {
                (200, current.clone())
            }
            ("PATCH", _) => conflict(),
            _ => (500, json!({})),
        }
    })
}

/// Whether the caBundle of a patch's first webhook trusts `ca` (merging it would add nothing).
fn trusts(patch: &Value, ca: &str) -> bool {
    let encoded = patch["webhooks"][0]["clientConfig"]["caBundle"].as_str().unwrap();
    let bundle = base64::engine::general_purpose::STANDARD.decode(encoded).unwrap();
    webhook_certs::merged_bundle(ca, &bundle, Timestamp::now()).is_none()
}

#[tokio::test]
async fn a_conflict_on_the_ca_bundle_reads_again_and_keeps_both_cas() {
    let ours = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    let theirs = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    // Between our read and our patch, another replica adds its CA.
    let their_bundle = webhook_certs::merged_bundle(&theirs.ca, b"", Timestamp::now()).unwrap();
    let respond = contended(
        &ours,
        configuration_at("10", None),
        vec![configuration_at("11", Some(&their_bundle))],
    );
    let (result, seen, cert) = run(respond).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("GET {CONFIGURATION}"),
            format!("PATCH {CONFIGURATION}"),
            format!("GET {CONFIGURATION}"),
            format!("PATCH {CONFIGURATION}"),
            format!("GET {VALIDATION}"),
        ]
    );
    let (stale, fresh) = (&seen[2].body, &seen[4].body);
    assert_eq!(stale["metadata"]["resourceVersion"], "10");
    assert_eq!(fresh["metadata"]["resourceVersion"], "11");
    assert!(
        trusts(stale, &ours.ca) && !trusts(stale, &theirs.ca),
        "what the refused patch would have written"
    );
    assert!(trusts(fresh, &ours.ca), "ours added");
    assert!(trusts(fresh, &theirs.ca), "theirs kept");
    assert!(cert.is_loaded());
}

#[tokio::test]
async fn a_conflict_after_which_the_ca_is_trusted_already_writes_nothing_more() {
    let ours = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    // Another replica serving the same pair added its CA first.
    let bundle = webhook_certs::merged_bundle(&ours.ca, b"", Timestamp::now()).unwrap();
    let respond = contended(
        &ours,
        configuration_at("10", None),
        vec![configuration_at("11", Some(&bundle))],
    );
    let (result, seen, cert) = run(respond).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("GET {CONFIGURATION}"),
            format!("PATCH {CONFIGURATION}"),
            format!("GET {CONFIGURATION}"),
            format!("GET {VALIDATION}"),
        ],
        "no second patch"
    );
    assert!(cert.is_loaded());
}

#[tokio::test]
async fn a_configuration_that_changes_under_every_patch_is_given_up_on_after_a_few_attempts() {
    let ours = webhook_certs::issue(&source().policy, Timestamp::now(), None).unwrap();
    let versions = (11..30).map(|v| configuration_at(&v.to_string(), None)).collect();
    let respond = contended(&ours, configuration_at("10", None), versions);
    let (result, seen, cert) = run(respond).await;
    assert!(
        matches!(result, Err(KeepError::Contended { attempts: 5, .. })),
        "an error the keeper backs off on, not Raced (retried at once): {result:?}"
    );
    let patches = seen.iter().filter(|s| s.method == "PATCH").count();
    assert_eq!((seen.len(), patches), (11, 5), "{:?}", lines(&seen));
    assert!(!cert.is_loaded(), "nothing served before its CA is trusted");
}

/// The ValidatingWebhookConfiguration of the same name (the validation of AnalysisTemplates), without
/// a caBundle.
fn validation() -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "cmset", "resourceVersion": "9"},
        "webhooks": [{"name": "analysistemplates.cmset.dev", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                      "clientConfig": {"url": "https://127.0.0.1:9443/validate-analysistemplate"}}]})
}

#[tokio::test]
async fn the_validating_configuration_of_the_same_name_is_made_to_trust_the_ca_too() {
    let issuing = issuing(not_found());
    let respond: Responder = Arc::new(move |s: &Seen| match (s.method.as_str(), s.path.as_str()) {
        (_, VALIDATION) => (200, validation()),
        _ => issuing(s),
    });
    let (result, seen, cert) = run_with(respond).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        [
            format!("GET {SECRET}/cmset-webhook-tls"),
            format!("POST {SECRET}"),
            format!("GET {CONFIGURATION}"),
            format!("PATCH {CONFIGURATION}"),
            format!("GET {VALIDATION}"),
            format!("PATCH {VALIDATION}"),
        ]
    );
    let patch = &seen[5].body;
    assert_eq!(patch["webhooks"][0]["name"], "analysistemplates.cmset.dev");
    assert_eq!(patch["metadata"]["resourceVersion"], "9", "on the version read");
    let ca = base64::engine::general_purpose::STANDARD
        .decode(seen[1].body["data"]["ca.crt"].as_str().unwrap())
        .unwrap();
    assert!(trusts(patch, std::str::from_utf8(&ca).unwrap()));
    assert!(cert.is_loaded());
}

#[tokio::test]
async fn a_validating_configuration_cmset_may_not_read_does_not_stop_the_webhook_being_served() {
    // RBAC from before the validation existed: reading it is forbidden.
    let issuing = issuing(not_found());
    let respond: Responder = Arc::new(move |s: &Seen| match s.path.as_str() {
        VALIDATION => (
            403,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403}),
        ),
        _ => issuing(s),
    });
    let (result, seen, cert) = run_with(respond).await;
    result.unwrap();
    assert_eq!(seen.last().unwrap().line(), format!("GET {VALIDATION}"));
    assert!(cert.is_loaded());
}
