//! Calling the webhook as any pod could (issue 48): plain HTTPS to its port, no client certificate, a
//! hand-written AdmissionReview. The webhook cannot tell such a caller from the API server, so what
//! it answers must depend only on the body and on what cmset publishes anyway: a guess about another
//! namespace's Secret is answered the same whether right or wrong, no ConfigMap's text comes back, a
//! name that exists is answered like one that does not, and a review claiming to come from an admin
//! mints nothing.

use std::io::Write;
use std::process::{Command, Stdio};

use cmset_e2e::{Operator, TestNamespace, base64_encode, put_secret};
use serde_json::{Value, json};

/// What the webhook at `port` answers to `review` posted to `path`, as curl from a pod would send it.
fn post(port: u16, path: &str, review: &Value) -> String {
    let mut curl = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "10",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
            &format!("https://127.0.0.1:{port}{path}"),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    curl.stdin
        .take()
        .unwrap()
        .write_all(review.to_string().as_bytes())
        .unwrap();
    let out = curl.wait_with_output().unwrap();
    assert!(out.status.success(), "curl failed: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn review(kind: &str, group: &str, namespace: &str, object: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
           "request": {"uid": "forged", "operation": "CREATE", "namespace": namespace,
                       "name": object["metadata"]["name"],
                       "kind": {"group": group, "version": "v1", "kind": kind},
                       "userInfo": {"username": "mallory", "groups": ["system:masters"]},
                       "object": object}})
}

/// A SecretSet of `namespace` whose validation asks whether key `config.json` of Secret `db` has a
/// password starting with `guess`.
fn guess_about(namespace: &str, guess: &str) -> Value {
    review(
        "SecretSet",
        "cmset.dev",
        namespace,
        json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet",
               "metadata": {"name": "probe", "namespace": namespace},
               "spec": {"secretName": "db", "validation": {"keys": {"config.json": {"schema":
                   {"properties": {"password": {"pattern": format!("^{guess}")}}}}}}}}),
    )
}

#[tokio::test]
async fn a_forged_review_learns_nothing_of_another_namespaces_secrets_or_configmaps() {
    let attacker = TestNamespace::new("forge").await;
    let victim = TestNamespace::new("forge-victim").await;
    let operator = Operator::start(&attacker.name).await;
    let port = operator.webhook.as_ref().expect("the webhook is served").port;
    put_secret(
        &victim,
        "db",
        "Opaque",
        &[("config.json", r#"{"password": "hunter2-is-the-password"}"#)],
    )
    .await;
    victim.kubectl(&[
        "create",
        "configmap",
        "app",
        "--from-literal=app.json={\"token\": \"VICTIM-TEXT-4711\",",
    ]);

    // Right and wrong guesses about the Secret: the same answer.
    let right = post(port, "/validate-set", &guess_about(&victim.name, "hunter2"));
    let wrong = post(port, "/validate-set", &guess_about(&victim.name, "zzz"));
    assert_eq!(right, wrong, "a guess must not be told right from wrong");
    assert!(right.contains(r#""allowed":true"#), "{right}");

    // A ConfigMapSet in source mode naming the victim's ConfigMap: its text does not come back.
    let source = review(
        "ConfigMapSet",
        "cmset.dev",
        &victim.name,
        json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet",
               "metadata": {"name": "probe", "namespace": victim.name},
               "spec": {"configMapName": "app",
                        "validation": {"keys": {"app.json": {"schema": {"type": "object"}}}}}}),
    );
    let answer = post(port, "/validate-set", &source);
    assert!(!answer.contains("VICTIM-TEXT"), "{answer}");
    assert!(answer.contains(r#""allowed":true"#), "{answer}");

    // A workload naming a ConfigMap that exists is answered like one naming one that does not.
    attacker.kubectl(&["create", "configmap", "present", "--from-literal=a=b"]);
    let deployment = |configmap: &str| {
        review(
            "Deployment",
            "apps",
            &attacker.name,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "probe", "namespace": attacker.name,
                                "labels": {"cmset.dev/enabled": "true"}},
                   "spec": {"selector": {"matchLabels": {"app": "probe"}},
                            "template": {"metadata": {"labels": {"app": "probe"}},
                                         "spec": {"containers": [{"name": "app", "image": "x",
                                             "envFrom": [{"configMapRef": {"name": configmap}}]}]}}}}),
        )
    };
    let present = post(port, "/mutate", &deployment("present"));
    let absent = post(port, "/mutate", &deployment("absent"));
    assert_eq!(
        patch_of(&present),
        patch_of(&absent).replace("absent", "present"),
        "existence must not show"
    );

    // A review claiming an admin's groups gets no break-glass record or proof.
    let set_update = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "forged", "operation": "UPDATE", "namespace": attacker.name, "name": "app",
                    "kind": {"group": "cmset.dev", "version": "v1alpha1", "kind": "ConfigMapSet"},
                    "userInfo": {"username": "mallory-admin", "groups": ["system:masters"]},
                    "object": {"metadata": {"name": "app", "uid": "u",
                        "annotations": {"cmset.dev/window-override": "app-x@2026-01-01T00:00:00Z"}}},
                    "oldObject": {"metadata": {"name": "app", "uid": "u"}}}});
    let minted = post(port, "/override-window", &set_update);
    assert!(!minted.contains("patch"), "{minted}");
    assert!(!minted.contains("mallory"), "{minted}");

    // Nothing of the Secret or the ConfigMap reached the operator's log either.
    let log = std::fs::read_to_string(operator.log_path()).unwrap_or_default();
    for value in ["hunter2", "VICTIM-TEXT", &base64_encode(b"hunter2")] {
        assert!(!log.contains(value), "the log holds {value:?}");
    }
}

/// The JSON patch an AdmissionReview response carries, decoded, with its hold's time taken out (the
/// two answers are a second apart at most).
fn patch_of(answer: &str) -> String {
    use base64::Engine;
    let answer: Value = serde_json::from_str(answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let Some(patch) = answer.pointer("/response/patch").and_then(Value::as_str) else {
        return String::new();
    };
    let patch = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
    let mut ops: Vec<Value> = serde_json::from_slice(&patch).unwrap();
    for op in &mut ops {
        if op["path"].as_str().is_some_and(|p| p.ends_with("held-since")) {
            op["value"] = json!("<time>");
        } else if let Some(held) = op["value"].get_mut("cmset.dev/held-since") {
            *held = json!("<time>");
        }
    }
    Value::Array(ops).to_string()
}
