//! What the scenarios share: the manifests they start from (a ConfigMapSet, an opted-in Deployment),
//! the ConfigMaps a pod spec names, and the waits that follow a change. Here once, so that a test shows
//! only what is particular to its scenario.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, PodSpec, ProjectedVolumeSource};

use crate::{TestNamespace, eventually, kustomize_name};

/// The set most scenarios use.
pub const APP_CONFIG: &str = "app-config";
/// The one key [`APP_CONFIG`] holds in those scenarios: a version, so each content is easy to tell apart.
pub const APP_VERSION: &str = "APP_VERSION";

// ------------------------------------------------------------------------------------------ sets --

/// What only some sets put on their revisions besides `data`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Template<'a> {
    pub labels: &'a [(&'a str, &'a str)],
    pub annotations: &'a [(&'a str, &'a str)],
    /// Base64 values, as the API takes them.
    pub binary_data: &'a [(&'a str, &'a str)],
}

/// A ConfigMapSet `name` whose revisions hold `data`; `limit` is its `revisionHistoryLimit` (left out,
/// so the CRD's default applies, when `None`).
pub fn set_yaml(name: &str, data: &[(&str, &str)], limit: Option<i32>) -> String {
    set_yaml_with(name, data, limit, Template::default())
}

/// [`set_yaml`] with labels, annotations or binary data on the template.
pub fn set_yaml_with(name: &str, data: &[(&str, &str)], limit: Option<i32>, template: Template) -> String {
    let limit = limit
        .map(|l| format!("\n  revisionHistoryLimit: {l}"))
        .unwrap_or_default();
    let mut metadata = String::new();
    for (field, entries) in [("labels", template.labels), ("annotations", template.annotations)] {
        if !entries.is_empty() {
            metadata += &format!("\n      {field}:{}", yaml_map(8, entries));
        }
    }
    if !metadata.is_empty() {
        metadata = format!("\n    metadata:{metadata}");
    }
    let binary = if template.binary_data.is_empty() {
        String::new()
    } else {
        format!("\n    binaryData:{}", yaml_map(6, template.binary_data))
    };
    let data = yaml_map(6, data);
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {name}
spec:{limit}
  template:{metadata}
    data:{data}{binary}
"#
    )
}

/// [`APP_CONFIG`] holding `APP_VERSION: <version>`.
pub fn app_config_yaml(version: &str, limit: Option<i32>) -> String {
    set_yaml(APP_CONFIG, &[(APP_VERSION, version)], limit)
}

/// The revision ConfigMap cmset makes of `APP_VERSION: <version>` in [`APP_CONFIG`] (kustomize's name).
pub fn app_config_revision(version: &str) -> String {
    kustomize_name(APP_CONFIG, &[(APP_VERSION, version)])
}

/// A block mapping, one entry a line at `indent`, or `{}` when empty. Values are always quoted (JSON
/// strings are YAML), so `"1"` stays a string and a value may hold anything, newlines included; keys
/// only when they are not plain words (`bad key`, `dir/file`).
fn yaml_map(indent: usize, entries: &[(&str, &str)]) -> String {
    if entries.is_empty() {
        return " {}".to_string();
    }
    let quote = |s: &str| serde_json::to_string(s).expect("a string serialises");
    let plain = |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    entries
        .iter()
        .map(|(k, v)| {
            let key = if plain(k) { k.to_string() } else { quote(k) };
            format!("\n{:indent$}{key}: {}", "", quote(v))
        })
        .collect()
}

// ---------------------------------------------------------------------------------- workloads --

/// One way a pod template names a ConfigMap.
#[derive(Clone, Copy, Debug)]
pub enum Reads<'a> {
    /// `envFrom: [{configMapRef: {name}}]`: every key as an environment variable.
    EnvFrom(&'a str),
    /// The same with `optional: true`: the pods start even though no ConfigMap has the name (as for a
    /// workload that did not opt in and names the bare set).
    EnvFromOptional(&'a str),
    /// `env: [{valueFrom: {configMapKeyRef: {name, key}}}]`, into a variable named after the key.
    EnvKey { name: &'a str, key: &'a str },
    /// A `configMap` volume named after the ConfigMap, mounted at `/etc/<name>`.
    Volume(&'a str),
}

/// The `spec` of a pod template (to follow `spec:` at the template's indentation): one pause container
/// reading `reads`, in that order within each form.
pub fn pod_spec_yaml(reads: &[Reads]) -> String {
    let (mut env_from, mut env, mut mounts, mut volumes) = (vec![], vec![], vec![], vec![]);
    for read in reads {
        match *read {
            Reads::EnvFrom(name) => env_from.push(format!("            - configMapRef: {{name: {name}}}")),
            Reads::EnvFromOptional(name) => env_from.push(format!(
                "            - configMapRef: {{name: {name}, optional: true}}"
            )),
            Reads::EnvKey { name, key } => env.push(format!(
                "            - name: {key}\n              valueFrom:\n                \
                 configMapKeyRef: {{name: {name}, key: {key}}}"
            )),
            Reads::Volume(name) => {
                mounts.push(format!("            - {{name: {name}, mountPath: /etc/{name}}}"));
                volumes.push(format!(
                    "        - name: {name}\n          configMap: {{name: {name}}}"
                ));
            }
        }
    }
    let block = |field: &str, indent: &str, items: Vec<String>| {
        if items.is_empty() {
            String::new()
        } else {
            format!("\n{indent}{field}:\n{}", items.join("\n"))
        }
    };
    format!(
        r#"
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9{env_from}{env}{mounts}{volumes}
"#,
        env_from = block("envFrom", "          ", env_from),
        env = block("env", "          ", env),
        mounts = block("volumeMounts", "          ", mounts),
        volumes = block("volumes", "      ", volumes),
    )
}

/// What the pod template of a [`DeploymentYaml`] holds.
#[derive(Clone, Copy, Debug)]
enum PodTemplate<'a> {
    /// The pod spec [`pod_spec_yaml`] writes for these reads.
    Reads(&'a [Reads<'a>]),
    /// A pod spec written out, to follow `spec:` at the template's indentation.
    Spec(&'a str),
}

/// An apps/v1 Deployment whose pods, labelled `app: <name>`, read ConfigMaps as `reads` says (or run a
/// pod spec of their own). By default it carries cmset's opt-in label and runs one replica.
#[derive(Clone, Copy, Debug)]
pub struct DeploymentYaml<'a> {
    name: &'a str,
    pod: PodTemplate<'a>,
    replicas: i32,
    revision_history_limit: Option<i32>,
    opted_in: bool,
}

impl<'a> DeploymentYaml<'a> {
    pub fn new(name: &'a str, reads: &'a [Reads<'a>]) -> Self {
        Self::with_pod(name, PodTemplate::Reads(reads))
    }

    /// A Deployment whose pod template's `spec` is `pod_spec`, YAML to follow `spec:` at the template's
    /// indentation (as [`pod_spec_yaml`] writes it), for pods that [`Reads`] cannot describe.
    pub fn with_pod_spec(name: &'a str, pod_spec: &'a str) -> Self {
        Self::with_pod(name, PodTemplate::Spec(pod_spec))
    }

    fn with_pod(name: &'a str, pod: PodTemplate<'a>) -> Self {
        Self {
            name,
            pod,
            replicas: 1,
            revision_history_limit: None,
            opted_in: true,
        }
    }

    pub fn replicas(self, replicas: i32) -> Self {
        Self { replicas, ..self }
    }

    /// How many old ReplicaSets the Deployment keeps (Kubernetes' default when not set).
    pub fn revision_history_limit(self, limit: i32) -> Self {
        Self {
            revision_history_limit: Some(limit),
            ..self
        }
    }

    /// Whether it carries `cmset.dev/enabled: "true"`; without it cmset must leave it alone.
    pub fn opted_in(self, opted_in: bool) -> Self {
        Self { opted_in, ..self }
    }

    pub fn yaml(&self) -> String {
        let Self { name, replicas, .. } = *self;
        let labels = if self.opted_in {
            "\n  labels:\n    cmset.dev/enabled: \"true\""
        } else {
            ""
        };
        let history = self
            .revision_history_limit
            .map(|l| format!("\n  revisionHistoryLimit: {l}"))
            .unwrap_or_default();
        let pod = match self.pod {
            PodTemplate::Reads(reads) => pod_spec_yaml(reads),
            PodTemplate::Spec(spec) => spec.to_string(),
        };
        format!(
            r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}{labels}
spec:
  replicas: {replicas}{history}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:{pod}"#
        )
    }
}

/// The everyday shape: an opted-in Deployment of one replica reading `reads`.
pub fn deployment_yaml(name: &str, reads: &[Reads]) -> String {
    DeploymentYaml::new(name, reads).yaml()
}

// -------------------------------------------------------------------- names in a pod spec --

/// Every ConfigMap a pod spec names, whatever the form: `envFrom` and `env` `valueFrom` of containers and
/// init containers, `configMap` volumes and projected sources. Left out: the service-account volume the
/// API server adds to pods (from v1.21 it projects `kube-root-ca.crt`, which no workload asked for).
pub fn configmap_names(spec: &PodSpec) -> BTreeSet<String> {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    let mut names = BTreeSet::new();
    for c in containers {
        names.extend(
            c.env_from
                .iter()
                .flatten()
                .filter_map(|e| Some(e.config_map_ref.as_ref()?.name.clone())),
        );
        names.extend(
            c.env
                .iter()
                .flatten()
                .filter_map(|e| Some(e.value_from.as_ref()?.config_map_key_ref.as_ref()?.name.clone())),
        );
    }
    for v in spec.volumes.iter().flatten() {
        names.extend(v.config_map.iter().map(|c| c.name.clone()));
        let projected = v.projected.iter().filter(|p| !is_service_account_volume(p));
        names.extend(
            projected
                .flat_map(|p| p.sources.iter().flatten())
                .filter_map(|s| Some(s.config_map.as_ref()?.name.clone())),
        );
    }
    names
}

fn is_service_account_volume(p: &ProjectedVolumeSource) -> bool {
    p.sources
        .iter()
        .flatten()
        .any(|s| s.service_account_token.is_some())
}

/// The ConfigMaps a Deployment's pod template names.
pub fn template_names(d: &Deployment) -> BTreeSet<String> {
    let spec = d.spec.as_ref().expect("a Deployment has a spec");
    configmap_names(spec.template.spec.as_ref().expect("a pod template has a spec"))
}

/// The ConfigMaps a ReplicaSet's pod template names; `None` if it has no pod spec.
pub fn replica_set_names(rs: &ReplicaSet) -> Option<BTreeSet<String>> {
    Some(configmap_names(
        rs.spec.as_ref()?.template.as_ref()?.spec.as_ref()?,
    ))
}

/// The pods not being deleted: what a workload runs now (a terminating pod still names what it ran).
pub async fn live_pods(ns: &TestNamespace) -> Vec<Pod> {
    let mut pods = ns.pods().await;
    pods.retain(|p| p.metadata.deletion_timestamp.is_none());
    pods
}

// ------------------------------------------------------------------------------------- waits --

/// Waits until Deployment `deployment`'s pod template names exactly the ConfigMaps `expected`: cmset has
/// moved it. Its rollout may still be under way (see [`rollout_status`]).
pub async fn wait_names(ns: &TestNamespace, deployment: &str, expected: &[&str]) {
    let want: BTreeSet<String> = expected.iter().map(|n| n.to_string()).collect();
    eventually(&format!("Deployment {deployment} to name {want:?}"), || async {
        (template_names(&ns.deployment(deployment).await) == want).then_some(())
    })
    .await;
}

/// `kubectl rollout status <kind/name> --timeout=90s`: returns once the workload's pods all run its
/// current template, panics with kubectl's output if they do not in time.
pub async fn rollout_status(ns: &TestNamespace, kind_name: &str) {
    ns.kubectl_async(&["rollout", "status", kind_name, "--timeout=90s"], None)
        .await;
}

/// `kubectl wait --for=condition=Ready cmset/<set> --timeout=60s`: the set's current revision exists and
/// every opted-in workload uses it (or is pinned to an older one by a rollback).
pub async fn set_ready(ns: &TestNamespace, set: &str) {
    ns.kubectl_async(
        &[
            "wait",
            "--for=condition=Ready",
            &format!("cmset/{set}"),
            "--timeout=60s",
        ],
        None,
    )
    .await;
}

/// An opted-in Deployment `name` with one replica, in rollout wave `wave` (label `cmset.dev/wave`),
/// reading ConfigMap `reads` through `envFrom`; its own progress deadline is an hour, so that only
/// cmset's decides a test.
pub fn wave_deployment_yaml(name: &str, wave: i32, reads: &str) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  labels:
    cmset.dev/enabled: "true"
    cmset.dev/wave: "{wave}"
spec:
  replicas: 1
  progressDeadlineSeconds: 3600
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef: {{name: {reads}}}
"#
    )
}
