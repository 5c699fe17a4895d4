//! A tenant of a shared cluster: a user who holds the built-in `edit` role and cmset's `cmset-edit` in
//! one test namespace and nothing else, as an app team does. Tests of the admin/tenant boundary act as
//! this user (through impersonation by the admin kubeconfig) to show what a tenant can and cannot undo.

use crate::TestNamespace;

/// One tenant of `ns`: bound there to `edit` and `cmset-edit` by RoleBindings named after the user.
pub struct Tenant {
    pub user: String,
    namespace: String,
}

impl Tenant {
    /// Binds `user` to `edit` and `cmset-edit` in `ns` (idempotent).
    pub fn bind(ns: &TestNamespace, user: &str) -> Self {
        for role in ["edit", "cmset-edit"] {
            ns.apply(&format!(
                r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {user}-{role}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]
"#
            ));
        }
        Self {
            user: user.to_string(),
            namespace: ns.name.clone(),
        }
    }

    /// A client that acts as the tenant.
    pub async fn client(&self) -> kube::Client {
        let mut config = kube::Config::infer().await.expect("KUBECONFIG");
        config.auth_info.impersonate = Some(self.user.clone());
        kube::Client::try_from(config).expect("a client for the tenant")
    }

    /// `kubectl --as <tenant> -n <namespace> <args>`: its output, or the failure (what the tenant sees).
    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        let as_user = format!("--as={}", self.user);
        let mut all = vec![as_user.as_str()];
        all.extend_from_slice(args);
        crate::try_kubectl_in(Some(&self.namespace), &all, stdin)
    }

    /// Whether the API server lets the tenant do `verb` on `resource` in its namespace
    /// (`kubectl auth can-i`). `resource/subresource` asks about the subresource (`configmapsets/status`):
    /// kubectl itself would read it as the object named `status`, which edit may patch.
    pub fn can(&self, verb: &str, resource: &str) -> bool {
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, sub)) => (resource, Some(format!("--subresource={sub}"))),
            None => (resource, None),
        };
        let mut args = vec!["auth", "can-i", verb, resource];
        args.extend(subresource.as_deref());
        self.try_kubectl(&args, None).is_ok_and(|out| out.trim() == "yes")
    }
}
