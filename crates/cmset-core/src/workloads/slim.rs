//! What of a pod spec the operator keeps in memory: only what names ConfigMaps or Secrets.
//!
//! Informer caches hold every opted-in workload for as long as it exists, and a pod spec is mostly
//! images, commands, probes and resources that no cmset decision reads. [`references_only`] keeps each
//! list element (container, env var, envFrom source, volume, projected source) where it stands, emptied
//! of everything but its name and its references, so that:
//!
//! - [`crate::workloads::refs::find_refs`] finds exactly the same references, at exactly the same JSON pointers;
//! - a JSON patch planned from the slim spec addresses the same fields of the real object, and its
//!   `test` guards compare the same values.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::workloads::health;
use crate::workloads::kinds::WorkloadKind;
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, Container, EnvFromSource, EnvVar, EnvVarSource, EphemeralContainer, PodSpec,
    ProjectedVolumeSource, SecretKeySelector, Volume, VolumeProjection,
};

/// The body of a workload of `kind` (its JSON without `metadata`) reduced to what decisions read, so
/// that a store of thousands of workloads stays small:
///
/// - the template's metadata with only its labels, and its pod spec with only its references
///   ([`references_only`]): [`crate::workloads::observe::WorkloadView::of_parts`] and the patches planned from it
///   see what they would see in the whole object;
/// - the metadata the kind's entry also labels (a CronJob's job template), with only its labels;
/// - the fields the kind's health rule reads ([`health::fields`]), conditions cut to their type,
///   status and reason.
///
/// A metadata object is kept (emptied) when the object has one, so that a patch adding a label to it
/// adds to it rather than replacing it.
pub fn workload_body(kind: WorkloadKind, body: &Value) -> Value {
    let mut slim = Value::Object(Map::new());
    let template = kind.template().as_str();
    keep_labels(body, &mut slim, &kind.template_metadata());
    if let Some(spec) = body.pointer(kind.pod_spec().as_str())
        && let Ok(spec) = PodSpec::deserialize(spec)
        && let Ok(spec) = serde_json::to_value(references_only(&spec))
    {
        put(&mut slim, kind.pod_spec().as_str(), spec);
    } else if body.pointer(template).is_some() && slim.pointer(template).is_none() {
        // A template whose pod spec does not parse: keep that it is there, for what it is.
        put(&mut slim, template, Value::Object(Map::new()));
    }
    for metadata in kind.spec().managed_metadata {
        keep_labels(body, &mut slim, metadata);
    }
    for field in health::fields(kind.spec().health) {
        if let Some(value) = body.pointer(field) {
            put(&mut slim, field, value.clone());
        }
    }
    if let Some(conditions) = slim
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            condition.retain(|k, _| matches!(k.as_str(), "type" | "status" | "reason"));
        }
    }
    slim
}

/// Copies the object metadata at `pointer` of `from` into `to`, with its labels only.
fn keep_labels(from: &Value, to: &mut Value, pointer: &str) {
    let Some(Value::Object(metadata)) = from.pointer(pointer) else {
        return;
    };
    let mut kept = Map::new();
    if let Some(labels) = metadata.get("labels") {
        kept.insert("labels".into(), labels.clone());
    }
    put(to, pointer, Value::Object(kept));
}

/// Puts `value` at JSON pointer `pointer` of `to`, making the objects on the way (the pointers given
/// here are plain field names).
fn put(to: &mut Value, pointer: &str, value: Value) {
    let mut at = to;
    let mut tokens = pointer.trim_start_matches('/').split('/').peekable();
    while let Some(token) = tokens.next() {
        let token = token.replace("~1", "/").replace("~0", "~");
        let Value::Object(map) = at else {
            return;
        };
        if tokens.peek().is_none() {
            map.insert(token, value);
            return;
        }
        at = map.entry(token).or_insert_with(|| Value::Object(Map::new()));
    }
}

/// `spec` reduced to its ConfigMap and Secret references, every list element kept at its index.
pub fn references_only(spec: &PodSpec) -> PodSpec {
    PodSpec {
        containers: spec.containers.iter().map(container).collect(),
        init_containers: spec
            .init_containers
            .as_ref()
            .map(|cs| cs.iter().map(container).collect()),
        ephemeral_containers: spec
            .ephemeral_containers
            .as_ref()
            .map(|cs| cs.iter().map(ephemeral_container).collect()),
        volumes: spec.volumes.as_ref().map(|vs| vs.iter().map(volume).collect()),
        ..PodSpec::default()
    }
}

fn container(c: &Container) -> Container {
    Container {
        name: c.name.clone(),
        env: c.env.as_ref().map(|env| env.iter().map(env_var).collect()),
        env_from: c
            .env_from
            .as_ref()
            .map(|sources| sources.iter().map(env_from).collect()),
        ..Container::default()
    }
}

fn ephemeral_container(c: &EphemeralContainer) -> EphemeralContainer {
    EphemeralContainer {
        name: c.name.clone(),
        env: c.env.as_ref().map(|env| env.iter().map(env_var).collect()),
        env_from: c
            .env_from
            .as_ref()
            .map(|sources| sources.iter().map(env_from).collect()),
        ..EphemeralContainer::default()
    }
}

/// An env var keeps its name and, if it reads a ConfigMap or Secret key, that selector: never a
/// literal `value`, which may hold anything.
fn env_var(var: &EnvVar) -> EnvVar {
    let from = var.value_from.as_ref();
    let config_map_key_ref: Option<ConfigMapKeySelector> = from.and_then(|f| f.config_map_key_ref.clone());
    let secret_key_ref: Option<SecretKeySelector> = from.and_then(|f| f.secret_key_ref.clone());
    let value_from = (config_map_key_ref.is_some() || secret_key_ref.is_some()).then(|| EnvVarSource {
        config_map_key_ref,
        secret_key_ref,
        ..EnvVarSource::default()
    });
    EnvVar {
        name: var.name.clone(),
        value: None,
        value_from,
    }
}

fn env_from(source: &EnvFromSource) -> EnvFromSource {
    EnvFromSource {
        config_map_ref: source.config_map_ref.clone(),
        secret_ref: source.secret_ref.clone(),
        prefix: None,
    }
}

fn volume(v: &Volume) -> Volume {
    Volume {
        name: v.name.clone(),
        config_map: v.config_map.clone(),
        secret: v.secret.clone(),
        projected: v.projected.as_ref().map(|p| ProjectedVolumeSource {
            default_mode: None,
            sources: p
                .sources
                .as_ref()
                .map(|sources| sources.iter().map(projection).collect()),
        }),
        ..Volume::default()
    }
}

fn projection(p: &VolumeProjection) -> VolumeProjection {
    VolumeProjection {
        config_map: p.config_map.clone(),
        secret: p.secret.clone(),
        ..VolumeProjection::default()
    }
}

/// A pod spec decoded straight into [`references_only`]'s form: the same value, without building the
/// whole spec first. Everything else (images, commands, probes, resources, and every field a later
/// Kubernetes adds) is skipped by the JSON reader, never allocated. For watches of objects cmset only
/// indexes by what they reference (Pods, ReplicaSets, ControllerRevisions, Jobs), whose decoding is
/// most of a standby's CPU.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReferencesOnly(pub PodSpec);

impl<'de> Deserialize<'de> for ReferencesOnly {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spec = wire::Spec::deserialize(deserializer)?;
        Ok(Self(spec.into()))
    }
}

/// The parts of a pod spec that can name a ConfigMap or a Secret, as they are written in JSON.
mod wire {
    use k8s_openapi::api::core::v1::{
        ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapProjection, ConfigMapVolumeSource, Container,
        EnvFromSource, EnvVar, EnvVarSource, EphemeralContainer, PodSpec, ProjectedVolumeSource,
        SecretEnvSource, SecretKeySelector, SecretProjection, SecretVolumeSource, Volume, VolumeProjection,
    };
    use serde::Deserialize;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Spec {
        containers: Option<Vec<Named>>,
        init_containers: Option<Vec<Named>>,
        ephemeral_containers: Option<Vec<Named>>,
        volumes: Option<Vec<VolumeRefs>>,
    }

    /// A container of any of the three lists.
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Named {
        name: Option<String>,
        env: Option<Vec<Env>>,
        env_from: Option<Vec<EnvFrom>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Env {
        name: Option<String>,
        value_from: Option<EnvFromKey>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct EnvFromKey {
        config_map_key_ref: Option<ConfigMapKeySelector>,
        secret_key_ref: Option<SecretKeySelector>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct EnvFrom {
        config_map_ref: Option<ConfigMapEnvSource>,
        secret_ref: Option<SecretEnvSource>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct VolumeRefs {
        name: Option<String>,
        config_map: Option<ConfigMapVolumeSource>,
        secret: Option<SecretVolumeSource>,
        projected: Option<Projected>,
    }

    #[derive(Deserialize)]
    struct Projected {
        sources: Option<Vec<Projection>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Projection {
        config_map: Option<ConfigMapProjection>,
        secret: Option<SecretProjection>,
    }

    impl From<Spec> for PodSpec {
        fn from(spec: Spec) -> Self {
            let containers =
                |list: Option<Vec<Named>>| list.map(|cs| cs.into_iter().map(Container::from).collect());
            PodSpec {
                containers: containers(spec.containers).unwrap_or_default(),
                init_containers: containers(spec.init_containers),
                ephemeral_containers: spec
                    .ephemeral_containers
                    .map(|cs| cs.into_iter().map(EphemeralContainer::from).collect()),
                volumes: spec.volumes.map(|vs| vs.into_iter().map(Volume::from).collect()),
                ..PodSpec::default()
            }
        }
    }

    impl Named {
        fn parts(self) -> (String, Option<Vec<EnvVar>>, Option<Vec<EnvFromSource>>) {
            (
                self.name.unwrap_or_default(),
                self.env.map(|env| env.into_iter().map(EnvVar::from).collect()),
                self.env_from
                    .map(|from| from.into_iter().map(EnvFromSource::from).collect()),
            )
        }
    }

    impl From<Named> for Container {
        fn from(named: Named) -> Self {
            let (name, env, env_from) = named.parts();
            Container {
                name,
                env,
                env_from,
                ..Container::default()
            }
        }
    }

    impl From<Named> for EphemeralContainer {
        fn from(named: Named) -> Self {
            let (name, env, env_from) = named.parts();
            EphemeralContainer {
                name,
                env,
                env_from,
                ..EphemeralContainer::default()
            }
        }
    }

    impl From<Env> for EnvVar {
        fn from(var: Env) -> Self {
            let from = var
                .value_from
                .filter(|f| f.config_map_key_ref.is_some() || f.secret_key_ref.is_some());
            EnvVar {
                name: var.name.unwrap_or_default(),
                value: None,
                value_from: from.map(|f| EnvVarSource {
                    config_map_key_ref: f.config_map_key_ref,
                    secret_key_ref: f.secret_key_ref,
                    ..EnvVarSource::default()
                }),
            }
        }
    }

    impl From<EnvFrom> for EnvFromSource {
        fn from(source: EnvFrom) -> Self {
            EnvFromSource {
                config_map_ref: source.config_map_ref,
                secret_ref: source.secret_ref,
                prefix: None,
            }
        }
    }

    impl From<VolumeRefs> for Volume {
        fn from(volume: VolumeRefs) -> Self {
            Volume {
                name: volume.name.unwrap_or_default(),
                config_map: volume.config_map,
                secret: volume.secret,
                projected: volume.projected.map(|p| ProjectedVolumeSource {
                    default_mode: None,
                    sources: p.sources.map(|sources| {
                        sources
                            .into_iter()
                            .map(|s| VolumeProjection {
                                config_map: s.config_map,
                                secret: s.secret,
                                ..VolumeProjection::default()
                            })
                            .collect()
                    }),
                }),
                ..Volume::default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn template_metadata_is_kept_as_an_object_only_where_there_is_one() {
        let kind = crate::workloads::kinds::WorkloadKind::Deployment;
        let with = |template: serde_json::Value| json!({"spec": {"replicas": 2, "template": template}});
        let slim = workload_body(
            kind,
            &with(json!({"metadata": {"annotations": {"a": "b"}}, "spec": {"containers": []}})),
        );
        assert_eq!(
            slim["spec"]["template"]["metadata"],
            json!({}),
            "an add of labels adds to it"
        );
        let slim = workload_body(kind, &with(json!({"spec": {"containers": []}})));
        assert_eq!(
            slim["spec"]["template"].get("metadata"),
            None,
            "an add of metadata adds it"
        );
        let slim = workload_body(
            kind,
            &with(json!({"metadata": {"labels": {"app": "w"}, "name": "x"}})),
        );
        assert_eq!(
            slim["spec"]["template"]["metadata"],
            json!({"labels": {"app": "w"}})
        );
        assert_eq!(slim["spec"]["replicas"], 2, "health reads it");
    }

    use super::*;
    use crate::workloads::refs::find_refs;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).expect("test pod spec parses")
    }

    #[test]
    fn keeps_every_reference_at_its_pointer_and_drops_the_rest() {
        let full = spec(json!({
            "containers": [{
                "name": "app", "image": "example/app:1", "command": ["run"],
                "env": [
                    {"name": "PLAIN", "value": "hunter2"},
                    {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm-env", "key": "k"}}},
                    {"name": "FIELD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "envFrom": [{"secretRef": {"name": "s"}}, {"prefix": "P_", "configMapRef": {"name": "cm-from"}}],
            }],
            "initContainers": [{"name": "init", "image": "x", "envFrom": [{"configMapRef": {"name": "cm-init"}}]}],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "cm-vol"}},
                {"name": "all", "projected": {"sources": [
                    {"downwardAPI": {"items": []}},
                    {"configMap": {"name": "cm-proj"}},
                ]}},
            ],
            "nodeSelector": {"disk": "ssd"},
        }));
        let slim = references_only(&full);
        assert_eq!(find_refs(&slim), find_refs(&full));
        let value = serde_json::to_value(&slim).unwrap();
        assert_eq!(value["containers"][0]["env"][0], json!({"name": "PLAIN"}));
        assert_eq!(value["containers"][0].get("image"), None);
        assert_eq!(value["volumes"][0], json!({"name": "scratch"}));
        assert_eq!(value["volumes"][2]["projected"]["sources"][0], json!({}));
        assert_eq!(value.get("nodeSelector"), None);
        assert!(
            !value.to_string().contains("hunter2"),
            "literal values are never kept"
        );
    }

    #[test]
    fn an_empty_spec_stays_empty() {
        assert_eq!(references_only(&PodSpec::default()), PodSpec::default());
    }
}
