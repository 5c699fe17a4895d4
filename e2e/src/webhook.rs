//! cmset's admission webhook in the suite: every operator the harness starts serves it (as every
//! replica does in the default install), registered for its test's namespace only, at a loopback URL.
//! The registration carries no caBundle: the operator keeps the shared Secret `cmset-webhook-tls` in
//! cmset-system and adds its CA, exactly as in a cluster.

use std::time::Duration;

/// The label on every test namespace that its webhook registration selects.
pub const NAMESPACE_LABEL: &str = "cmset-e2e";

/// One MutatingWebhookConfiguration (workloads, and the break-glass record of the namespace's WindowOverrides)
/// and, for a test that asks, the ValidatingWebhookConfiguration of the same name that sends
/// AnalysisTemplates to the operator, deleted when dropped.
pub struct Registration {
    pub name: String,
    pub port: u16,
    /// A ValidatingWebhookConfiguration of the same name is registered (AnalysisTemplates, or change
    /// windows). Cluster-scoped kinds are sent to this operator only in a test about their validation,
    /// so that other tests' objects are not.
    pub validates_templates: bool,
}

impl Registration {
    /// Registers a webhook at `https://127.0.0.1:<port>/mutate` for `namespace`, and the break-glass one
    /// at `/override-window`.
    pub fn new(namespace: &str, port: u16) -> Self {
        let name = format!("cmset-e2e-{namespace}-{port}");
        let yaml = format!(
            r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: {name}
webhooks:
  - name: workloads.cmset.dev
    clientConfig:
      url: https://127.0.0.1:{port}/mutate
    rules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["deployments", "statefulsets", "daemonsets"]
      - apiGroups: ["batch"]
        apiVersions: ["v1", "v1beta1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["cronjobs"]
      - apiGroups: ["batch"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["jobs"]
      - apiGroups: ["argoproj.io"]
        apiVersions: ["v1alpha1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["rollouts"]
      # The kind e2e/tests/kinds.rs declares (`--workload-kind`): the rule a user adds for theirs.
      - apiGroups: ["e2e.cmset.dev"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["widgets"]
    namespaceSelector:
      matchLabels: {{{NAMESPACE_LABEL}: {namespace}}}
    objectSelector:
      matchLabels: {{cmset.dev/enabled: "true"}}
    sideEffects: None
    admissionReviewVersions: ["v1"]
    failurePolicy: Ignore
    reinvocationPolicy: IfNeeded
    timeoutSeconds: 5
  # Break glass, as the default install registers it: this namespace's WindowOverrides get the record of
  # who created them.
  - name: window-overrides.cmset.dev
    clientConfig:
      url: https://127.0.0.1:{port}/override-window
    rules:
      - apiGroups: ["cmset.dev"]
        apiVersions: ["v1alpha1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["windowoverrides"]
        scope: Namespaced
    namespaceSelector:
      matchLabels: {{{NAMESPACE_LABEL}: {namespace}}}
    sideEffects: None
    admissionReviewVersions: ["v1"]
    failurePolicy: Ignore
    timeoutSeconds: 5
"#
        );
        crate::try_kubectl_in(None, &["apply", "-f", "-"], Some(&yaml))
            .unwrap_or_else(|e| panic!("register the webhook {name}: {e}"));
        Self {
            name,
            port,
            validates_templates: false,
        }
    }

    /// [`Registration::new`], and AnalysisTemplates sent to
    /// `https://127.0.0.1:<port>/validate-analysistemplate` (registered before the operator starts, so
    /// that it trusts its CA in both at once).
    pub fn with_template_validation(namespace: &str, port: u16) -> Self {
        let hook = validating_webhook(
            "analysistemplates.cmset.dev",
            port,
            "/validate-analysistemplate",
            &rule("analysistemplates", "Cluster"),
            None,
        );
        Self::with_validating(namespace, port, &[hook])
    }

    /// [`Registration::new`], and this namespace's ConfigMapSets and SecretSets, sent to
    /// `https://127.0.0.1:<port>/validate-set`, and every ChangeWindow, sent to `/validate-windows`
    /// (ChangeWindows are cluster-scoped: only a test about their validation registers it).
    pub fn with_window_validation(namespace: &str, port: u16) -> Self {
        let sets = validating_webhook(
            "sets.cmset.dev",
            port,
            "/validate-set",
            &rule(r#"configmapsets", "secretsets"#, "Namespaced"),
            Some(namespace),
        );
        let windows = validating_webhook(
            "changewindows.cmset.dev",
            port,
            "/validate-windows",
            &rule("changewindows", "Cluster"),
            None,
        );
        Self::with_validating(namespace, port, &[sets, windows])
    }

    /// [`Registration::new`], and a ValidatingWebhookConfiguration of the same name with `hooks`.
    fn with_validating(namespace: &str, port: u16, hooks: &[String]) -> Self {
        let mut registration = Self::new(namespace, port);
        let name = &registration.name;
        let yaml = format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata:\n  name: {name}\nwebhooks:\n{}",
            hooks.concat()
        );
        crate::try_kubectl_in(None, &["apply", "-f", "-"], Some(&yaml))
            .unwrap_or_else(|e| panic!("register the validating webhook {name}: {e}"));
        registration.validates_templates = true;
        registration
    }

    /// The operator's flags that serve this registration.
    pub fn operator_args(&self) -> Vec<String> {
        vec![
            "--webhook-address".into(),
            format!("127.0.0.1:{}", self.port),
            "--webhook-cert-secret".into(),
            "cmset-webhook-tls".into(),
            "--webhook-configuration".into(),
            self.name.clone(),
        ]
    }

    /// The caBundle the operator put in the registration (empty until it has).
    pub fn ca_bundle(&self) -> String {
        self.ca_bundle_of("mutatingwebhookconfiguration")
    }

    fn ca_bundle_of(&self, kind: &str) -> String {
        crate::try_kubectl_in(
            None,
            &[
                "get",
                kind,
                &self.name,
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
            ],
            None,
        )
        .unwrap_or_default()
    }

    /// Whether the webhook answers HTTPS (any HTTP status: the TLS handshake succeeded).
    fn serves(&self) -> bool {
        std::process::Command::new("curl")
            .args([
                "-sk",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-m",
                "2",
                "-X",
                "POST",
            ])
            .arg(format!("https://127.0.0.1:{}/mutate", self.port))
            .output()
            .is_ok_and(|o| o.status.success() && o.stdout != b"000")
    }

    /// Waits until the API server can call the webhook: its CA is trusted and it serves.
    pub async fn wait_ready(&self) {
        let deadline = std::time::Instant::now() + crate::CONVERGE;
        let trusted = || {
            !self.ca_bundle().is_empty()
                && (!self.validates_templates
                    || !self.ca_bundle_of("validatingwebhookconfiguration").is_empty())
        };
        while !self.serves() || !trusted() {
            assert!(
                std::time::Instant::now() < deadline,
                "the webhook {} did not become callable",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let kinds: &[&str] = if self.validates_templates {
            &["mutatingwebhookconfiguration", "validatingwebhookconfiguration"]
        } else {
            &["mutatingwebhookconfiguration"]
        };
        for kind in kinds {
            let _ = std::process::Command::new("kubectl")
                .args(["delete", kind, &self.name, "--ignore-not-found"])
                .output();
        }
    }
}

/// One rule of a validating webhook: cmset.dev objects of `resources` (a quoted list's inside) at
/// `scope`, created or changed.
fn rule(resources: &str, scope: &str) -> String {
    format!(
        r#"      - apiGroups: ["cmset.dev"]
        apiVersions: ["v1alpha1"]
        operations: ["CREATE", "UPDATE"]
        resources: ["{resources}"]
        scope: {scope}
"#
    )
}

/// One entry of a ValidatingWebhookConfiguration calling the operator at `path` on loopback `port`,
/// failing open as the shipped ones do; sent objects of `namespace` only, when given.
fn validating_webhook(name: &str, port: u16, path: &str, rules: &str, namespace: Option<&str>) -> String {
    let selector = namespace.map_or(String::new(), |ns| {
        format!("    namespaceSelector:\n      matchLabels: {{{NAMESPACE_LABEL}: {ns}}}\n")
    });
    format!(
        r#"  - name: {name}
    clientConfig:
      url: https://127.0.0.1:{port}{path}
    rules:
{rules}{selector}    sideEffects: None
    admissionReviewVersions: ["v1"]
    failurePolicy: Ignore
    timeoutSeconds: 5
"#
    )
}
