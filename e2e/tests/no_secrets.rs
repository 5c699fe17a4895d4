//! The install that gives cmset no access to Secrets at all (`config/no-secrets`): its operator, run under
//! an identity that holds exactly that variant's rules and nothing else, serves ConfigMapSets.

use std::time::Duration;

use cmset_e2e::{Operator, TestNamespace, eventually};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use kube::api::PostParams;
use serde_json::{Value, json};

/// The rules of the operator's ClusterRole in `config/no-secrets`, as the manifests ship them.
fn shipped_rules() -> Vec<PolicyRule> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/no-secrets");
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", dir])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let role = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == "cmset-controller")
        .expect("config/no-secrets has the operator's ClusterRole");
    serde_json::from_value(role["rules"].clone()).unwrap()
}

/// A kubeconfig for the API server of `KUBECONFIG`, authenticating with `token` only.
fn kubeconfig_with_token(token: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("kubectl")
        .args(["config", "view", "--raw", "--minify", "-o", "json"])
        .output()
        .expect("kubectl runs");
    let admin: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": "no-secrets", "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "no-secrets"}}],
        "current-context": "e2e",
    });
    let path = std::env::temp_dir().join(format!("cmset-no-secrets-{}.kubeconfig", std::process::id()));
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn config_map_sets_work_for_an_operator_without_any_access_to_secrets() {
    let ns = TestNamespace::new("no-secrets").await;
    let rules = shipped_rules();
    assert!(
        !rules.iter().any(|r| {
            let resources = r.resources.clone().unwrap_or_default();
            resources
                .iter()
                .any(|res| res == "secrets" || res == "*" || res.starts_with("secretsets"))
        }),
        "the variant grants nothing on Secrets: {rules:?}"
    );
    // Its identity: a ServiceAccount of the test namespace with exactly those rules there.
    let name = "cmset-no-secrets";
    let post = PostParams::default();
    ns.api::<ServiceAccount>()
        .create(
            &post,
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap();
    ns.api::<Role>().create(&post, &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns.name}],
    }))
    .unwrap();
    ns.api::<RoleBinding>().create(&post, &binding).await.unwrap();
    let user = format!("system:serviceaccount:{}:{name}", ns.name);
    // `can-i` answers "yes" (exit 0) or "no" (exit 1, reported with the command line before it).
    let can = |verb: &str, resource: &str| {
        let answer = ns
            .try_kubectl(&["auth", "can-i", verb, resource, "--as", &user], None)
            .unwrap_or_else(|e| e);
        answer.split_whitespace().last().unwrap_or_default().to_string()
    };
    for verb in ["get", "list", "watch"] {
        assert_eq!(can(verb, "secrets"), "no", "{verb} secrets");
    }
    assert_eq!(can("create", "configmaps"), "yes");
    // Kubernetes 1.20 mints the ServiceAccount's token as a Secret (read here with the admin's rights).
    let token = eventually("the ServiceAccount's token", || async {
        let secrets = ns.api::<Secret>().list(&Default::default()).await.ok()?;
        secrets.items.into_iter().find_map(|s| {
            let for_us = s
                .metadata
                .annotations
                .as_ref()?
                .get("kubernetes.io/service-account.name")?
                == name;
            let token = s.data.as_ref()?.get("token")?.0.clone();
            for_us.then(|| String::from_utf8(token).unwrap())
        })
    })
    .await;
    // A Role in one namespace cannot grant the cluster-scoped ChangeWindows, and windows fail closed:
    // this install does without them, explicitly.
    let mut operator = Operator::start_via(
        &ns.name,
        &["--secret-sets=false", "--change-windows=false"],
        kubeconfig_with_token(&token),
    )
    .await;

    ns.apply(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata: {name: app}
spec:
  template:
    data: {GREETING: hello}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {cmset.dev/enabled: "true"}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: app
          image: example/web:1
          envFrom: [{configMapRef: {name: app}}, {secretRef: {name: app}}]
"#,
    );
    let first = eventually("the Deployment on the set's first revision", || async {
        let d = ns.deployment("web").await;
        let env = &d.spec?.template.spec?.containers[0].env_from.clone()?;
        let name = env[0].config_map_ref.as_ref()?.name.clone();
        // The Secret reference of the same name is not a ConfigMapSet's to move.
        assert_eq!(env[1].secret_ref.as_ref().unwrap().name, "app");
        (name != "app").then_some(name)
    })
    .await;
    assert_eq!(first, cmset_e2e::kustomize_name("app", &[("GREETING", "hello")]));
    ns.kubectl(&[
        "patch",
        "cmset",
        "app",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"data":{"GREETING":"hi"}}}}"#,
    ]);
    let second = cmset_e2e::kustomize_name("app", &[("GREETING", "hi")]);
    eventually(
        "the Deployment on the second revision, and the set Ready",
        || async {
            let d = ns.deployment("web").await;
            let name = d.spec?.template.spec?.containers[0].env_from.clone()?[0]
                .config_map_ref
                .clone()?
                .name;
            let set = ns.set("app").await;
            let ready = set.condition("Ready")?.status == "True";
            (name == second && ready && set.status?.current_revision? == second).then_some(())
        },
    )
    .await;
    // Nothing it did was refused: it never asked for what it may not have.
    let log = std::fs::read_to_string(operator.log_path()).unwrap();
    assert!(
        !log.contains("forbidden"),
        "the operator was refused something:\n{log}"
    );
    assert!(operator.exited().is_none(), "the operator is still running");
    tokio::time::sleep(Duration::from_millis(100)).await;
}
