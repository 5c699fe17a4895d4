//! Finding and rewriting the ConfigMap (and Secret) references of a pod spec.
//!
//! # Where a pod spec names a ConfigMap or a Secret
//!
//! | [`RefForm`]                   | JSON pointer, relative to the pod spec, for a ConfigMap; for a Secret |
//! |-------------------------------|---------------------------------------------------------------------|
//! | [`RefForm::Volume`]           | `/volumes/{v}/configMap/name`; `/volumes/{v}/secret/secretName`     |
//! | [`RefForm::ProjectedVolume`]  | `/volumes/{v}/projected/sources/{s}/configMap/name`; `…/secret/name` |
//! | [`RefForm::EnvValueFrom`]     | `/{containers,initContainers,ephemeralContainers}/{c}/env/{e}/valueFrom/configMapKeyRef/name`; `…/secretKeyRef/name` |
//! | [`RefForm::EnvFrom`]          | `/{containers,initContainers,ephemeralContainers}/{c}/envFrom/{f}/configMapRef/name`; `…/secretRef/name` |
//!
//! These are all the forms of Kubernetes 1.33. ConfigMaps and Secrets are found separately
//! ([`find_refs`] and [`find_refs_to`]): their names are separate name spaces, so a `secretRef` to `app`
//! never concerns a ConfigMapSet `app`. `imagePullSecrets`, `downwardAPI`, `serviceAccountToken` and
//! `clusterTrustBundle` projections are not references. A reference whose name is empty (the field is "effectively required" but the API
//! allows it to be empty) names nothing and is skipped.
//!
//! References marked `optional: true` *are* references, reported with [`Reference::optional`] set: a
//! workload that marks a set reference optional still wants the set's content (the bare set name exists
//! as no ConfigMap, so leaving it alone would run the pod silently without its configuration), and an
//! optional reference in a retained ReplicaSet still needs its revision kept for a rollback.
//!
//! Ephemeral containers cannot appear in a pod template (the API server rejects them there), so for
//! workloads they never matter; they are searched because the same code reads the specs of Pods.
//!
//! # Why a JSON patch
//!
//! `envFrom` and `projected.sources` are atomic lists under strategic merge patch and server-side apply:
//! whoever writes them owns and writes the whole list, and a server-side apply by cmset would take the
//! list from the GitOps tool that applied it, and conflict with its next sync. [`json_patch`] instead
//! replaces exactly the `name` fields that change, each guarded by a `test` of its old value, after a
//! `test` of `metadata.uid`:
//!
//! - the uid test makes a patch planned for an object fail (HTTP 422) on an object deleted and created
//!   again under the same name;
//! - the value tests make it fail whenever someone else changed a name cmset is about to change;
//! - nothing else of the object is compared, so unrelated writes (status updates, scaling, other
//!   containers' images) never force a retry, as a `resourceVersion` precondition would.
//!
//! A list element that moved (someone inserted an env var before it) is not a hazard either: the patch
//! addresses elements by index, but `test` compares the value, and because [`plan_rewrite`] decides
//! the new name from the old name alone, any element that still holds the old name at that index is
//! correctly rewritten to the new one. A reference that moved to an index the patch does not touch is
//! left for the next reconcile, which re-plans from a fresh read.

use std::fmt;

use json_patch::jsonptr::{Pointer, PointerBuf, Token};
use json_patch::{Patch, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::{Container, EnvFromSource, EnvVar, EphemeralContainer, PodSpec};
use serde::Deserialize;
use serde_json::Value;

/// Where the pod spec of a template at `spec.template` lives in the object (most kinds; each kind's own
/// is in its entry of [`crate::workloads::kinds`]): the `pod_spec` to pass to [`json_patch`] for them.
pub const TEMPLATE_POD_SPEC_POINTER: &Pointer = Pointer::from_static("/spec/template/spec");

/// The JSON pointer made of these tokens (field names and list indices), escaped as RFC 6901 requires.
macro_rules! pointer {
    ($($token:expr),+ $(,)?) => {
        PointerBuf::from_tokens([$(Token::from($token)),+])
    };
}

/// The field of a pod spec through which a ConfigMap is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefForm {
    /// `volumes[v].configMap.name`
    Volume,
    /// `volumes[v].projected.sources[s].configMap.name`
    ProjectedVolume,
    /// `env[e].valueFrom.configMapKeyRef.name` of a container
    EnvValueFrom,
    /// `envFrom[f].configMapRef.name` of a container
    EnvFrom,
}

/// The three lists of containers of a pod spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ContainerKind {
    /// `containers`
    App,
    /// `initContainers`
    Init,
    /// `ephemeralContainers`
    Ephemeral,
}

impl ContainerKind {
    /// The pod spec field holding containers of this kind, as it appears in JSON (and in pointers).
    pub const fn field(self) -> &'static str {
        match self {
            Self::App => "containers",
            Self::Init => "initContainers",
            Self::Ephemeral => "ephemeralContainers",
        }
    }
}

/// The volume or container in which a reference is written, for messages and events.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    Volume { name: String },
    Container { kind: ContainerKind, name: String },
}

impl fmt::Display for Holder {
    /// `volume "config"`, `container "app"`, `init container "migrate"`, `ephemeral container "debug"`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Volume { name } => write!(f, "volume {name:?}"),
            Self::Container { kind, name } => {
                let kind = match kind {
                    ContainerKind::App => "container",
                    ContainerKind::Init => "init container",
                    ContainerKind::Ephemeral => "ephemeral container",
                };
                write!(f, "{kind} {name:?}")
            }
        }
    }
}

impl Holder {
    /// The reference at `pointer`, unless its name is empty: an empty name names nothing.
    fn reference(
        &self,
        form: RefForm,
        pointer: PointerBuf,
        name: &str,
        optional: Option<bool>,
    ) -> Option<Reference> {
        (!name.is_empty()).then(|| Reference {
            form,
            pointer,
            name: name.to_owned(),
            optional: optional.unwrap_or(false),
            holder: self.clone(),
        })
    }
}

/// The kind of object a reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Referenced {
    ConfigMap,
    Secret,
}

/// One place where a pod spec names a ConfigMap (or, with [`find_refs_to`], a Secret).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference {
    pub form: RefForm,
    /// RFC 6901 JSON pointer to the `name` field, relative to the pod spec, e.g.
    /// `/containers/0/envFrom/1/configMapRef/name`.
    pub pointer: PointerBuf,
    /// The ConfigMap (or Secret) named; never empty.
    pub name: String,
    /// Whether the reference is marked `optional: true` (the pod starts without the ConfigMap).
    pub optional: bool,
    /// The volume or container the reference is written in.
    pub holder: Holder,
}

/// Every ConfigMap reference of `spec`, in this order:
///
/// 1. `volumes`, by index; within a projected volume, its `sources` by index;
/// 2. then `containers`, `initContainers` and `ephemeralContainers`, each by index; within a container,
///    `env` by index, then `envFrom` by index.
///
/// The order depends only on the spec, so plans and patches built from it are reproducible. The same
/// ConfigMap may be named several times; each place is its own reference.
pub fn find_refs(spec: &PodSpec) -> Vec<Reference> {
    find_refs_to(spec, Referenced::ConfigMap)
}

/// Every reference of `spec` to an object of `kind`, in the order [`find_refs`] describes.
pub fn find_refs_to(spec: &PodSpec, kind: Referenced) -> Vec<Reference> {
    let mut refs = Vec::new();

    for (v, volume) in spec.volumes.iter().flatten().enumerate() {
        let holder = Holder::Volume {
            name: volume.name.clone(),
        };
        match kind {
            Referenced::ConfigMap => {
                if let Some(cm) = &volume.config_map {
                    let pointer = pointer!["volumes", v, "configMap", "name"];
                    refs.extend(holder.reference(RefForm::Volume, pointer, &cm.name, cm.optional));
                }
            }
            Referenced::Secret => {
                if let Some(secret) = &volume.secret {
                    let pointer = pointer!["volumes", v, "secret", "secretName"];
                    let name = secret.secret_name.as_deref().unwrap_or_default();
                    refs.extend(holder.reference(RefForm::Volume, pointer, name, secret.optional));
                }
            }
        }
        let sources = volume.projected.iter().flat_map(|p| p.sources.iter().flatten());
        for (s, source) in sources.enumerate() {
            let (field, named) = match kind {
                Referenced::ConfigMap => (
                    "configMap",
                    source.config_map.as_ref().map(|c| (&c.name, c.optional)),
                ),
                Referenced::Secret => ("secret", source.secret.as_ref().map(|c| (&c.name, c.optional))),
            };
            if let Some((name, optional)) = named {
                let pointer = pointer!["volumes", v, "projected", "sources", s, field, "name"];
                refs.extend(holder.reference(RefForm::ProjectedVolume, pointer, name, optional));
            }
        }
    }

    let app = spec.containers.iter().map(ContainerEnv::from);
    container_refs(&mut refs, kind, ContainerKind::App, app);
    let init = spec.init_containers.iter().flatten().map(ContainerEnv::from);
    container_refs(&mut refs, kind, ContainerKind::Init, init);
    let ephemeral = spec.ephemeral_containers.iter().flatten().map(ContainerEnv::from);
    container_refs(&mut refs, kind, ContainerKind::Ephemeral, ephemeral);

    refs
}

/// The fields of a container that can name a ConfigMap. (`Container` and `EphemeralContainer` are distinct
/// types with the same fields.)
struct ContainerEnv<'a> {
    name: &'a str,
    env: &'a [EnvVar],
    env_from: &'a [EnvFromSource],
}

impl<'a> From<&'a Container> for ContainerEnv<'a> {
    fn from(c: &'a Container) -> Self {
        Self {
            name: &c.name,
            env: c.env.as_deref().unwrap_or_default(),
            env_from: c.env_from.as_deref().unwrap_or_default(),
        }
    }
}

impl<'a> From<&'a EphemeralContainer> for ContainerEnv<'a> {
    fn from(c: &'a EphemeralContainer) -> Self {
        Self {
            name: &c.name,
            env: c.env.as_deref().unwrap_or_default(),
            env_from: c.env_from.as_deref().unwrap_or_default(),
        }
    }
}

/// The name and `optional` of an `env[].valueFrom` key reference to an object of `kind`, with the
/// field it is under.
fn key_ref(var: &EnvVar, kind: Referenced) -> Option<(&'static str, &str, Option<bool>)> {
    let from = var.value_from.as_ref()?;
    match kind {
        Referenced::ConfigMap => from
            .config_map_key_ref
            .as_ref()
            .map(|k| ("configMapKeyRef", k.name.as_str(), k.optional)),
        Referenced::Secret => from
            .secret_key_ref
            .as_ref()
            .map(|k| ("secretKeyRef", k.name.as_str(), k.optional)),
    }
}

/// The same for an `envFrom[]` source.
fn env_from_ref(source: &EnvFromSource, kind: Referenced) -> Option<(&'static str, &str, Option<bool>)> {
    match kind {
        Referenced::ConfigMap => source
            .config_map_ref
            .as_ref()
            .map(|r| ("configMapRef", r.name.as_str(), r.optional)),
        Referenced::Secret => source
            .secret_ref
            .as_ref()
            .map(|r| ("secretRef", r.name.as_str(), r.optional)),
    }
}

/// The references to objects of `kind` in the `env` and `envFrom` of one list of containers.
fn container_refs<'a>(
    refs: &mut Vec<Reference>,
    kind: Referenced,
    containers_kind: ContainerKind,
    containers: impl Iterator<Item = ContainerEnv<'a>>,
) {
    let field = containers_kind.field();
    for (c, container) in containers.enumerate() {
        let holder = Holder::Container {
            kind: containers_kind,
            name: container.name.to_owned(),
        };
        for (e, var) in container.env.iter().enumerate() {
            if let Some((selector, name, optional)) = key_ref(var, kind) {
                let pointer = pointer![field, c, "env", e, "valueFrom", selector, "name"];
                refs.extend(holder.reference(RefForm::EnvValueFrom, pointer, name, optional));
            }
        }
        for (f, source) in container.env_from.iter().enumerate() {
            if let Some((selector, name, optional)) = env_from_ref(source, kind) {
                let pointer = pointer![field, c, "envFrom", f, selector, "name"];
                refs.extend(holder.reference(RefForm::EnvFrom, pointer, name, optional));
            }
        }
    }
}

/// Set the string at `pointer` (relative to the pod spec) from `from` to `to`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NameChange {
    pub pointer: PointerBuf,
    pub from: String,
    pub to: String,
}

/// The changes that point every reference of `spec` where `target` wants it: one change, in
/// [`find_refs`] order, for every reference whose name `target` maps to a different, non-empty name.
/// References `target` returns `None` for are left alone.
///
/// `target` sees only the name, on purpose: the same name is rewritten the same way wherever it appears,
/// which is what makes the index-addressed [`json_patch`] safe when list elements move (see the module
/// documentation). If `target` maps every name it returns to itself, rewriting is idempotent: a
/// second plan on the result is empty.
pub fn plan_rewrite(spec: &PodSpec, target: impl FnMut(&str) -> Option<String>) -> Vec<NameChange> {
    plan_rewrite_to(spec, Referenced::ConfigMap, target)
}

/// [`plan_rewrite`] for the references to objects of `kind`.
pub fn plan_rewrite_to(
    spec: &PodSpec,
    kind: Referenced,
    mut target: impl FnMut(&str) -> Option<String>,
) -> Vec<NameChange> {
    find_refs_to(spec, kind)
        .into_iter()
        .filter_map(|r| {
            let to = target(&r.name).filter(|to| !to.is_empty() && *to != r.name)?;
            Some(NameChange {
                pointer: r.pointer,
                from: r.name,
                to,
            })
        })
        .collect()
}

/// Why [`apply_changes`] could not apply a change: the same cases in which the API server would reject
/// the [`json_patch`] of these changes.
#[derive(Debug)]
pub enum ApplyError {
    /// The pointer names no field of the pod spec.
    Unresolved { pointer: PointerBuf },
    /// The field holds something other than the change's `from`: the plan was made from another spec.
    Stale {
        pointer: PointerBuf,
        expected: String,
        found: Value,
    },
    /// The pod spec did not convert to or from JSON (not expected: only strings are replaced by strings).
    Json(serde_json::Error),
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unresolved { pointer } => write!(f, "no field at {pointer} in the pod spec"),
            Self::Stale {
                pointer,
                expected,
                found,
            } => {
                write!(
                    f,
                    "expected {expected:?} at {pointer} in the pod spec, found {found}"
                )
            }
            Self::Json(e) => write!(f, "pod spec does not round-trip through JSON: {e}"),
        }
    }
}

impl std::error::Error for ApplyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Json(e) => Some(e),
            Self::Unresolved { .. } | Self::Stale { .. } => None,
        }
    }
}

/// `spec` with `changes` made, in order, exactly as the `test` and `replace` operations of
/// [`json_patch`] make them: each change requires its field to hold `from`. Nothing else changes.
pub fn apply_changes(spec: &PodSpec, changes: &[NameChange]) -> Result<PodSpec, ApplyError> {
    let mut value = serde_json::to_value(spec).map_err(ApplyError::Json)?;
    for change in changes {
        let unresolved = || ApplyError::Unresolved {
            pointer: change.pointer.clone(),
        };
        let slot = value
            .pointer_mut(change.pointer.as_str())
            .ok_or_else(unresolved)?;
        if slot.as_str() != Some(change.from.as_str()) {
            return Err(ApplyError::Stale {
                pointer: change.pointer.clone(),
                expected: change.from.clone(),
                found: slot.take(),
            });
        }
        *slot = Value::String(change.to.clone());
    }
    PodSpec::deserialize(&value).map_err(ApplyError::Json)
}

/// The RFC 6902 JSON patch that makes `changes` on a workload whose pod spec lives at `pod_spec`
/// (such as [`TEMPLATE_POD_SPEC_POINTER`]), for a merge-free, ownership-free update:
///
/// 1. `test` that `/metadata/uid` is `uid`;
/// 2. the [`change_operations`];
/// 3. `extra`, as given (e.g. an `add` of a pod template label).
///
/// A JSON patch is atomic: if any `test` fails, the API server answers 422 and changes nothing; re-read
/// the object and plan again. See the module documentation for why this shape.
pub fn json_patch(
    uid: &str,
    pod_spec: &Pointer,
    changes: &[NameChange],
    extra: Vec<PatchOperation>,
) -> Patch {
    let uid_guard = PatchOperation::Test(TestOperation {
        path: pointer!["metadata", "uid"],
        value: Value::from(uid),
    });
    let mut operations = vec![uid_guard];
    operations.extend(change_operations(pod_spec, changes));
    operations.extend(extra);
    Patch(operations)
}

/// For every change, in order, a `test` that its field (under `pod_spec`) holds `from`, then a `replace`
/// of it with `to`.
pub fn change_operations(pod_spec: &Pointer, changes: &[NameChange]) -> Vec<PatchOperation> {
    changes
        .iter()
        .flat_map(|change| {
            let path = pod_spec.concat(&change.pointer);
            [
                PatchOperation::Test(TestOperation {
                    path: path.clone(),
                    value: Value::from(change.from.as_str()),
                }),
                PatchOperation::Replace(ReplaceOperation {
                    path,
                    value: Value::from(change.to.as_str()),
                }),
            ]
        })
        .collect()
}

/// Escape one reference token of a JSON pointer (RFC 6901): `~` becomes `~0` and `/` becomes `~1`, so
/// a label key like `cmset.dev/managed` is addressed as `/metadata/labels/cmset.dev~1managed`.
pub fn escape_pointer_token(token: &str) -> String {
    // `~` first: escaping `/` first would turn its `~1` into `~01`.
    token.replace('~', "~0").replace('/', "~1")
}

/// The pod spec stored in a StatefulSet's or DaemonSet's ControllerRevision.
///
/// Their `data` is the strategic merge patch that restores the template,
/// `{"spec":{"template":{"$patch":"replace","metadata":{..},"spec":{..}}}}`; directives such as
/// `$patch` and any other unknown keys are ignored. `None` if `data` holds no pod spec that parses: a
/// caller deciding what is in use must then treat the revision as naming anything, not nothing.
pub fn pod_spec_from_controller_revision_data(data: &Value) -> Option<PodSpec> {
    let spec = data.pointer("/spec/template/spec")?;
    PodSpec::deserialize(spec).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn ptr(pointer: &str) -> PointerBuf {
        PointerBuf::parse(pointer).expect("a test pointer parses")
    }

    fn spec(value: Value) -> PodSpec {
        serde_json::from_value(value).expect("test pod spec parses")
    }

    /// `(form, pointer, name)` of every reference, the part most tables compare.
    fn summary(spec: &PodSpec) -> Vec<(RefForm, String, String)> {
        find_refs(spec)
            .into_iter()
            .map(|r| (r.form, r.pointer.to_string(), r.name))
            .collect()
    }

    fn s(form: RefForm, pointer: &str, name: &str) -> (RefForm, String, String) {
        (form, pointer.to_owned(), name.to_owned())
    }

    /// One container holding every kind of env source, only two of which name ConfigMaps.
    fn busy_container(name: &str) -> Value {
        json!({
            "name": name,
            "env": [
                { "name": "PLAIN", "value": "x" },
                { "name": "SECRET", "valueFrom": { "secretKeyRef": { "name": "s1", "key": "k" } } },
                { "name": "FIELD", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                { "name": "RES", "valueFrom": { "resourceFieldRef": { "resource": "limits.cpu" } } },
                { "name": "CM", "valueFrom": { "configMapKeyRef": { "name": "cm-env", "key": "k" } } },
            ],
            "envFrom": [
                { "secretRef": { "name": "s2" } },
                { "prefix": "P_", "configMapRef": { "name": "cm-envfrom" } },
            ],
        })
    }

    #[test]
    fn each_env_form_in_each_container_kind() {
        for kind in [ContainerKind::App, ContainerKind::Init, ContainerKind::Ephemeral] {
            let field = kind.field();
            // A second container, so the index in the pointer is not trivially 0.
            let mut value = json!({ "containers": [] });
            value[field] = json!([{ "name": "other" }, busy_container("c")]);
            let refs = find_refs(&spec(value));

            let expected = vec![
                Reference {
                    form: RefForm::EnvValueFrom,
                    pointer: ptr(&format!("/{field}/1/env/4/valueFrom/configMapKeyRef/name")),
                    name: "cm-env".into(),
                    optional: false,
                    holder: Holder::Container {
                        kind,
                        name: "c".into(),
                    },
                },
                Reference {
                    form: RefForm::EnvFrom,
                    pointer: ptr(&format!("/{field}/1/envFrom/1/configMapRef/name")),
                    name: "cm-envfrom".into(),
                    optional: false,
                    holder: Holder::Container {
                        kind,
                        name: "c".into(),
                    },
                },
            ];
            assert_eq!(refs, expected, "{field}");
        }
    }

    #[test]
    fn volume_forms() {
        let spec = spec(json!({
            "containers": [],
            "volumes": [
                { "name": "secret", "secret": { "secretName": "s1" } },
                { "name": "empty", "emptyDir": {} },
                { "name": "plain", "configMap": { "name": "cm-vol", "items": [{ "key": "a", "path": "a" }] } },
                { "name": "proj", "projected": { "sources": [
                    { "secret": { "name": "s2" } },
                    { "downwardAPI": { "items": [{ "path": "l", "fieldRef": { "fieldPath": "metadata.labels" } }] } },
                    { "serviceAccountToken": { "path": "token", "audience": "vault" } },
                    { "configMap": { "name": "cm-proj" } },
                    { "clusterTrustBundle": { "name": "bundle", "path": "ca.pem" } },
                ] } },
                { "name": "proj-empty", "projected": {} },
            ],
        }));
        let refs = find_refs(&spec);
        assert_eq!(
            refs,
            vec![
                Reference {
                    form: RefForm::Volume,
                    pointer: ptr("/volumes/2/configMap/name"),
                    name: "cm-vol".into(),
                    optional: false,
                    holder: Holder::Volume { name: "plain".into() },
                },
                Reference {
                    form: RefForm::ProjectedVolume,
                    pointer: ptr("/volumes/3/projected/sources/3/configMap/name"),
                    name: "cm-proj".into(),
                    optional: false,
                    holder: Holder::Volume { name: "proj".into() },
                },
            ]
        );
    }

    #[test]
    fn documented_order_volumes_then_containers_init_ephemeral_env_before_env_from() {
        let c = |n: &str| {
            json!({
                "name": n,
                "envFrom": [{ "configMapRef": { "name": format!("{n}-from") } }],
                "env": [{ "name": "E", "valueFrom": { "configMapKeyRef": { "name": format!("{n}-env"), "key": "k" } } }],
            })
        };
        let spec = spec(json!({
            "ephemeralContainers": [c("eph")],
            "initContainers": [c("init")],
            "containers": [c("app0"), c("app1")],
            "volumes": [
                { "name": "v0", "projected": { "sources": [{ "configMap": { "name": "p0" } }, { "configMap": { "name": "p1" } }] } },
                { "name": "v1", "configMap": { "name": "v1" } },
            ],
        }));
        use RefForm::*;
        assert_eq!(
            summary(&spec),
            vec![
                s(
                    ProjectedVolume,
                    "/volumes/0/projected/sources/0/configMap/name",
                    "p0"
                ),
                s(
                    ProjectedVolume,
                    "/volumes/0/projected/sources/1/configMap/name",
                    "p1"
                ),
                s(Volume, "/volumes/1/configMap/name", "v1"),
                s(
                    EnvValueFrom,
                    "/containers/0/env/0/valueFrom/configMapKeyRef/name",
                    "app0-env"
                ),
                s(EnvFrom, "/containers/0/envFrom/0/configMapRef/name", "app0-from"),
                s(
                    EnvValueFrom,
                    "/containers/1/env/0/valueFrom/configMapKeyRef/name",
                    "app1-env"
                ),
                s(EnvFrom, "/containers/1/envFrom/0/configMapRef/name", "app1-from"),
                s(
                    EnvValueFrom,
                    "/initContainers/0/env/0/valueFrom/configMapKeyRef/name",
                    "init-env"
                ),
                s(
                    EnvFrom,
                    "/initContainers/0/envFrom/0/configMapRef/name",
                    "init-from"
                ),
                s(
                    EnvValueFrom,
                    "/ephemeralContainers/0/env/0/valueFrom/configMapKeyRef/name",
                    "eph-env"
                ),
                s(
                    EnvFrom,
                    "/ephemeralContainers/0/envFrom/0/configMapRef/name",
                    "eph-from"
                ),
            ]
        );
    }

    #[test]
    fn optional_refs_are_found_and_flagged() {
        let spec = spec(json!({
            "containers": [{
                "name": "app",
                "env": [
                    { "name": "A", "valueFrom": { "configMapKeyRef": { "name": "a", "key": "k", "optional": true } } },
                    { "name": "B", "valueFrom": { "configMapKeyRef": { "name": "b", "key": "k", "optional": false } } },
                ],
                "envFrom": [{ "configMapRef": { "name": "c", "optional": true } }],
            }],
            "volumes": [
                { "name": "d", "configMap": { "name": "d", "optional": true } },
                { "name": "e", "projected": { "sources": [{ "configMap": { "name": "e", "optional": true } }] } },
            ],
        }));
        let flags: Vec<_> = find_refs(&spec)
            .into_iter()
            .map(|r| (r.name, r.optional))
            .collect();
        let expected = [("d", true), ("e", true), ("a", true), ("b", false), ("c", true)];
        assert_eq!(flags, expected.map(|(n, o)| (n.to_owned(), o)));
    }

    #[test]
    fn refs_without_a_name_are_skipped() {
        let spec = spec(json!({
            "containers": [{
                "name": "app",
                "env": [
                    { "name": "A", "valueFrom": { "configMapKeyRef": { "key": "k" } } },
                    { "name": "B", "valueFrom": { "configMapKeyRef": { "name": "", "key": "k" } } },
                ],
                "envFrom": [{ "configMapRef": {} }, { "configMapRef": { "name": "" } }],
            }],
            "volumes": [
                { "name": "v", "configMap": {} },
                { "name": "p", "projected": { "sources": [{ "configMap": { "name": "" } }] } },
            ],
        }));
        assert_eq!(find_refs(&spec), vec![]);
    }

    #[test]
    fn secrets_name_no_configmap() {
        let spec = spec(json!({
            "containers": [{
                "name": "app",
                "env": [{ "name": "S", "valueFrom": { "secretKeyRef": { "name": "cm-lookalike", "key": "k" } } }],
                "envFrom": [{ "secretRef": { "name": "cm-lookalike" } }],
            }],
            "initContainers": [{ "name": "i", "envFrom": [{ "secretRef": { "name": "x" } }] }],
            "volumes": [
                { "name": "s", "secret": { "secretName": "cm-lookalike" } },
                { "name": "p", "projected": { "sources": [
                    { "secret": { "name": "cm-lookalike" } },
                    { "serviceAccountToken": { "path": "t" } },
                    { "downwardAPI": {} },
                ] } },
            ],
            "imagePullSecrets": [{ "name": "cm-lookalike" }],
        }));
        assert_eq!(find_refs(&spec), vec![]);
        assert_eq!(find_refs(&PodSpec::default()), vec![]);
    }

    #[test]
    fn every_secret_form_in_volumes_and_each_container_kind_and_no_configmap_among_them() {
        let spec = spec(json!({
            "volumes": [
                { "name": "cm", "configMap": { "name": "app" } },
                { "name": "s", "secret": { "secretName": "creds", "optional": true } },
                { "name": "unnamed", "secret": {} },
                { "name": "p", "projected": { "sources": [
                    { "configMap": { "name": "app" } },
                    { "secret": { "name": "tls" } },
                ] } },
            ],
            "containers": [busy_container("app")],
            "initContainers": [busy_container("init")],
            "imagePullSecrets": [{ "name": "pull" }],
        }));
        let secrets: Vec<(RefForm, String, String, bool)> = find_refs_to(&spec, Referenced::Secret)
            .into_iter()
            .map(|r| (r.form, r.pointer.to_string(), r.name, r.optional))
            .collect();
        let row =
            |form, pointer: &str, name: &str, optional| (form, pointer.to_owned(), name.to_owned(), optional);
        assert_eq!(
            secrets,
            vec![
                row(RefForm::Volume, "/volumes/1/secret/secretName", "creds", true),
                row(
                    RefForm::ProjectedVolume,
                    "/volumes/3/projected/sources/1/secret/name",
                    "tls",
                    false
                ),
                row(
                    RefForm::EnvValueFrom,
                    "/containers/0/env/1/valueFrom/secretKeyRef/name",
                    "s1",
                    false
                ),
                row(
                    RefForm::EnvFrom,
                    "/containers/0/envFrom/0/secretRef/name",
                    "s2",
                    false
                ),
                row(
                    RefForm::EnvValueFrom,
                    "/initContainers/0/env/1/valueFrom/secretKeyRef/name",
                    "s1",
                    false
                ),
                row(
                    RefForm::EnvFrom,
                    "/initContainers/0/envFrom/0/secretRef/name",
                    "s2",
                    false
                ),
            ],
            "imagePullSecrets are not references; a secret volume without a name names nothing"
        );
        // And the ConfigMap references are exactly the ConfigMap ones.
        assert!(
            find_refs(&spec)
                .iter()
                .all(|r| !r.pointer.as_str().contains("ecret"))
        );
        assert_eq!(find_refs(&spec).len(), 6);
    }

    #[test]
    fn rewriting_secrets_leaves_configmaps_of_the_same_name_alone_and_is_idempotent() {
        let spec = spec(json!({
            "volumes": [
                { "name": "cm", "configMap": { "name": "app" } },
                { "name": "s", "secret": { "secretName": "app" } },
            ],
            "containers": [{
                "name": "c",
                "envFrom": [{ "configMapRef": { "name": "app" } }, { "secretRef": { "name": "app" } }],
            }],
        }));
        let target = |name: &str| (name == "app").then(|| "app-9k5ddchd8d".to_string());
        let changes = plan_rewrite_to(&spec, Referenced::Secret, target);
        let pointers: Vec<String> = changes.iter().map(|c| c.pointer.to_string()).collect();
        assert_eq!(
            pointers,
            [
                "/volumes/1/secret/secretName",
                "/containers/0/envFrom/1/secretRef/name"
            ]
        );
        let rewritten = apply_changes(&spec, &changes).unwrap();
        assert_eq!(
            summary(&rewritten),
            summary(&spec),
            "ConfigMap references untouched"
        );
        assert!(
            plan_rewrite_to(&rewritten, Referenced::Secret, target).is_empty(),
            "idempotent"
        );
        assert_eq!(
            plan_rewrite(&spec, target).len(),
            2,
            "and the ConfigMap rewrite touches only ConfigMaps"
        );
    }

    #[test]
    fn holder_reads_well() {
        let cases = [
            (Holder::Volume { name: "cfg".into() }, r#"volume "cfg""#),
            (
                Holder::Container {
                    kind: ContainerKind::App,
                    name: "app".into(),
                },
                r#"container "app""#,
            ),
            (
                Holder::Container {
                    kind: ContainerKind::Init,
                    name: "m".into(),
                },
                r#"init container "m""#,
            ),
            (
                Holder::Container {
                    kind: ContainerKind::Ephemeral,
                    name: "d".into(),
                },
                r#"ephemeral container "d""#,
            ),
        ];
        for (holder, text) in cases {
            assert_eq!(holder.to_string(), text);
        }
    }

    /// A spec naming the set `app` three ways, its revision `app-1` once, and an unrelated ConfigMap.
    fn mixed_spec() -> PodSpec {
        spec(json!({
            "containers": [{
                "name": "app",
                "envFrom": [{ "configMapRef": { "name": "app" } }, { "configMapRef": { "name": "unrelated" } }],
                "env": [{ "name": "K", "valueFrom": { "configMapKeyRef": { "name": "app-1", "key": "k" } } }],
            }],
            "volumes": [
                { "name": "cfg", "configMap": { "name": "app" } },
                { "name": "p", "projected": { "sources": [{ "configMap": { "name": "app" } }] } },
            ],
        }))
    }

    fn revision_target(name: &str) -> Option<String> {
        let map = BTreeMap::from([("app", "app-2"), ("app-1", "app-1"), ("app-2", "app-2")]);
        map.get(name).map(|to| (*to).to_owned())
    }

    fn change(pointer: &str, from: &str, to: &str) -> NameChange {
        NameChange {
            pointer: ptr(pointer),
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn plan_rewrite_changes_only_mapped_names_that_differ() {
        let changes = plan_rewrite(&mixed_spec(), revision_target);
        assert_eq!(
            changes,
            vec![
                change("/volumes/0/configMap/name", "app", "app-2"),
                change("/volumes/1/projected/sources/0/configMap/name", "app", "app-2"),
                change("/containers/0/envFrom/0/configMapRef/name", "app", "app-2"),
            ]
        );
    }

    #[test]
    fn plan_rewrite_never_blanks_a_name() {
        assert_eq!(plan_rewrite(&mixed_spec(), |_| Some(String::new())), vec![]);
        assert_eq!(plan_rewrite(&mixed_spec(), |_| None), vec![]);
    }

    #[test]
    fn apply_then_plan_again_is_empty() {
        let spec = mixed_spec();
        let changed = apply_changes(&spec, &plan_rewrite(&spec, revision_target)).unwrap();
        let names: Vec<_> = find_refs(&changed).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["app-2", "app-2", "app-1", "app-2", "unrelated"]);
        assert_eq!(plan_rewrite(&changed, revision_target), vec![]);
    }

    #[test]
    fn apply_changes_refuses_stale_and_unresolved_changes() {
        let spec = mixed_spec();
        let stale = apply_changes(&spec, &[change("/volumes/0/configMap/name", "other", "x")]);
        assert!(
            matches!(&stale, Err(ApplyError::Stale { pointer, expected, found })
                if pointer == "/volumes/0/configMap/name" && expected == "other" && found == "app"),
            "{stale:?}"
        );
        let unresolved = apply_changes(&spec, &[change("/volumes/9/configMap/name", "app", "x")]);
        assert!(
            matches!(&unresolved, Err(ApplyError::Unresolved { pointer }) if pointer == "/volumes/9/configMap/name"),
            "{unresolved:?}"
        );
        // Changes apply in order, as a patch does: the second sees the first's result.
        let chained = [
            change("/volumes/0/configMap/name", "app", "b"),
            change("/volumes/0/configMap/name", "b", "c"),
        ];
        let result = apply_changes(&spec, &chained).unwrap();
        assert_eq!(result.volumes.unwrap()[0].config_map.as_ref().unwrap().name, "c");
    }

    #[test]
    fn json_patch_for_two_changes() {
        let changes = [
            change("/volumes/0/configMap/name", "app", "app-5d7c9f"),
            change("/containers/1/envFrom/0/configMapRef/name", "db", "db-68b4f2"),
        ];
        let label = PatchOperation::Add(json_patch::AddOperation {
            path: pointer![
                "spec",
                "template",
                "metadata",
                "labels",
                cmset_api::labels::MANAGED_TEMPLATE
            ],
            value: json!("true"),
        });
        let patch = json_patch("3f0e1b2a-uid", TEMPLATE_POD_SPEC_POINTER, &changes, vec![label]);
        // As the API server receives it.
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                { "op": "test", "path": "/metadata/uid", "value": "3f0e1b2a-uid" },
                { "op": "test", "path": "/spec/template/spec/volumes/0/configMap/name", "value": "app" },
                { "op": "replace", "path": "/spec/template/spec/volumes/0/configMap/name", "value": "app-5d7c9f" },
                { "op": "test", "path": "/spec/template/spec/containers/1/envFrom/0/configMapRef/name", "value": "db" },
                { "op": "replace", "path": "/spec/template/spec/containers/1/envFrom/0/configMapRef/name", "value": "db-68b4f2" },
                { "op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true" },
            ])
        );
    }

    #[test]
    fn json_patch_without_changes_only_tests_the_uid() {
        let patch = json_patch("u", Pointer::from_static("/spec"), &[], vec![]);
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([{ "op": "test", "path": "/metadata/uid", "value": "u" }])
        );
    }

    #[test]
    fn escape_pointer_token_table() {
        let cases = [
            ("", ""),
            ("plain", "plain"),
            ("cmset.dev/managed", "cmset.dev~1managed"),
            ("a~b", "a~0b"),
            ("~/", "~0~1"),
            ("~1", "~01"),
            ("/~", "~1~0"),
        ];
        for (token, escaped) in cases {
            assert_eq!(escape_pointer_token(token), escaped, "{token:?}");
        }
        // serde_json's own pointer resolution agrees.
        let doc = json!({ "labels": { "cmset.dev/managed": "true", "a~/b": "x" } });
        for key in ["cmset.dev/managed", "a~/b"] {
            let pointer = format!("/labels/{}", escape_pointer_token(key));
            assert_eq!(doc.pointer(&pointer), Some(&doc["labels"][key]), "{pointer}");
        }
    }

    #[test]
    fn pod_spec_from_statefulset_controller_revision() {
        // As the StatefulSet controller stores it (getPatch): the template, marked `$patch: replace`.
        let data = json!({
            "spec": { "template": {
                "$patch": "replace",
                "metadata": { "creationTimestamp": null, "labels": { "app": "web" } },
                "spec": {
                    "containers": [{
                        "name": "web",
                        "image": "nginx",
                        "envFrom": [{ "configMapRef": { "name": "web-7c9d" } }],
                        "resources": {},
                    }],
                    "restartPolicy": "Always",
                    "volumes": [{ "name": "conf", "configMap": { "name": "web-7c9d", "defaultMode": 420 } }],
                },
            } },
        });
        let spec = pod_spec_from_controller_revision_data(&data).expect("pod spec");
        assert_eq!(spec.containers[0].image.as_deref(), Some("nginx"));
        let names: Vec<_> = find_refs(&spec).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["web-7c9d", "web-7c9d"]);
    }

    #[test]
    fn pod_spec_from_controller_revision_data_without_a_pod_spec() {
        for data in [
            json!(null),
            json!({}),
            json!({ "spec": { "template": { "$patch": "replace" } } }),
            json!({ "spec": { "template": { "spec": "not an object" } } }),
            json!({ "spec": { "template": { "spec": { "containers": [{ "name": 7 }] } } } }),
        ] {
            assert_eq!(pod_spec_from_controller_revision_data(&data), None, "{data}");
        }
    }
}
