//! An operator identity of one test's own: a ServiceAccount of the test namespace, a Role there with
//! the rules the test gives it, and a kubeconfig that authenticates as that ServiceAccount only. The
//! shared identity of the suite (`CMSET_OPERATOR_KUBECONFIG`) serves every test at once; a test that
//! takes rights away while its operator runs (a Role revoked, or replaced by a narrower one) does it
//! here, where no other test is touched.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use kube::api::PostParams;
use serde_json::{Value, json};

use crate::{TestNamespace, eventually};

/// The rules of the operator's ClusterRole `cmset-controller` as the kustomization in `config/<variant>`
/// ships them (`rbac`: the default install's).
pub fn shipped_rules(variant: &str) -> Vec<PolicyRule> {
    let dir = format!("{}/../config/{variant}", env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("kubectl")
        .args(["kustomize", &dir])
        .output()
        .expect("kubectl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let role = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "ClusterRole" && doc["metadata"]["name"] == "cmset-controller")
        .unwrap_or_else(|| panic!("config/{variant} has the operator's ClusterRole"));
    serde_json::from_value(role["rules"].clone()).unwrap()
}

/// `rules` without any right on `resource` (of any API group): what a Role that no longer grants it
/// holds.
pub fn without(rules: &[PolicyRule], resource: &str) -> Vec<PolicyRule> {
    rules
        .iter()
        .filter_map(|rule| {
            let mut rule = rule.clone();
            let resources = rule.resources.get_or_insert_with(Vec::new);
            resources.retain(|r| r != resource);
            (!resources.is_empty()).then_some(rule)
        })
        .collect()
}

/// A ServiceAccount of the test namespace bound to a Role of its own there.
pub struct Identity {
    pub name: String,
    namespace: String,
    roles: kube::Api<Role>,
    /// A kubeconfig for the API server of `KUBECONFIG` that authenticates as the ServiceAccount.
    pub kubeconfig: PathBuf,
}

impl Identity {
    /// Creates ServiceAccount, Role (with `rules`) and RoleBinding `name` in `ns`, and waits for the
    /// ServiceAccount's token.
    pub async fn create(ns: &TestNamespace, name: &str, rules: Vec<PolicyRule>) -> Self {
        let post = PostParams::default();
        let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        ns.api::<ServiceAccount>()
            .create(&post, &account)
            .await
            .expect("create the ServiceAccount");
        let roles = ns.api::<Role>();
        roles
            .create(&post, &role(name, rules))
            .await
            .expect("create the Role");
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns.name}],
        }))
        .unwrap();
        ns.api::<RoleBinding>()
            .create(&post, &binding)
            .await
            .expect("create the RoleBinding");
        // Kubernetes 1.20 mints the ServiceAccount's token as a Secret (read with the admin's rights).
        let token = eventually("the ServiceAccount's token", || async {
            let secrets = ns.api::<Secret>().list(&Default::default()).await.ok()?;
            secrets.items.into_iter().find_map(|s| {
                let annotations = s.metadata.annotations.as_ref()?;
                let for_us = annotations.get("kubernetes.io/service-account.name")? == name;
                let token = s.data.as_ref()?.get("token")?.0.clone();
                for_us.then(|| String::from_utf8(token).unwrap())
            })
        })
        .await;
        Self {
            name: name.to_string(),
            namespace: ns.name.clone(),
            roles,
            kubeconfig: kubeconfig_with_token(&format!("{}-{name}", ns.name), &token),
        }
    }

    /// Replaces the Role's rules, as an admin replacing the Role would.
    pub async fn set_rules(&self, rules: Vec<PolicyRule>) {
        let mut current = self.roles.get(&self.name).await.expect("read the Role");
        current.rules = Some(rules);
        self.roles
            .replace(&self.name, &PostParams::default(), &current)
            .await
            .expect("replace the Role");
    }

    /// Whether the API server lets this identity `verb` `resource` in its namespace now
    /// (`kubectl auth can-i`).
    pub fn can(&self, verb: &str, resource: &str) -> bool {
        let user = format!("system:serviceaccount:{}:{}", self.namespace, self.name);
        let answer = crate::try_kubectl_in(
            Some(&self.namespace),
            &["auth", "can-i", verb, resource, "--as", &user],
            None,
        )
        .unwrap_or_else(|e| e);
        answer.split_whitespace().last() == Some("yes")
    }
}

fn role(name: &str, rules: Vec<PolicyRule>) -> Role {
    Role {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        rules: Some(rules),
    }
}

/// A kubeconfig for the API server of `KUBECONFIG`, authenticating with `token` only.
fn kubeconfig_with_token(file: &str, token: &str) -> PathBuf {
    let out = std::process::Command::new("kubectl")
        .args(["config", "view", "--raw", "--minify", "-o", "json"])
        .output()
        .expect("kubectl runs");
    let admin: Value = serde_json::from_slice(&out.stdout).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": file, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": file}}],
        "current-context": "e2e",
    });
    let path = std::env::temp_dir().join(format!("cmset-{file}.kubeconfig"));
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}
