//! What the watches of kinds cmset only indexes decode (and the set controller's list of Pods): the
//! fields the index reads, and nothing else.
//!
//! A Pod is mostly its status and its containers' images, probes and resources; a
//! ReplicaSet's or ControllerRevision's is a whole pod template; every object's metadata carries its
//! managedFields. Decoding those whole was most of a standby's CPU in issue 26's profile. The wire types
//! here skip them at the JSON reader (serde ignores fields a type does not name without allocating
//! them) and turn into the k8s-openapi type the index takes, with only the read fields set: the
//! references of the pod spec ([`ReferencesOnly`], the same value `slim::references_only` gives), and
//! the metadata without managedFields. ConfigMaps and Secrets are asked for as metadata only and
//! decoded the same way ([`WireMeta`]). Sets, which the stores keep whole, are decoded whole but for
//! their managedFields ([`WireConfigMapSet`], [`WireSecretSet`]).
//!
//! Every wire type also skips `kubectl.kubernetes.io/last-applied-configuration`: a client-side
//! `kubectl apply` (Argo CD's default sync) copies the whole object into it, so a set would otherwise
//! be decoded twice per event, and the index drops it anyway.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use cmset_api::{
    ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, SecretSet, SecretSetSpec, SecretSetStatus,
};
use cmset_core::workloads::slim::ReferencesOnly;
use futures::{StreamExt, TryStreamExt, stream::BoxStream};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{ControllerRevision, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

/// The watch of `W`'s objects in `namespace` (or every namespace), each turned into a `K`.
pub fn watch_as<W, K>(
    client: &Client,
    namespace: Option<&str>,
    config: watcher::Config,
) -> BoxStream<'static, watcher::Result<Event<K>>>
where
    W: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    W: Into<K>,
    K: Send + 'static,
{
    watcher::watcher(scoped::<W>(client, namespace), config)
        .map_ok(|event| convert(event, W::into))
        .boxed()
}

/// An API of `K` in `namespace`, or in every namespace.
pub fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn convert<W, K>(event: Event<W>, into: impl Fn(W) -> K) -> Event<K> {
    match event {
        Event::Apply(obj) => Event::Apply(into(obj)),
        Event::Delete(obj) => Event::Delete(into(obj)),
        Event::InitApply(obj) => Event::InitApply(into(obj)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// Object metadata without managedFields, which no decision reads and which is the largest part of
/// most objects' metadata. The resourceVersion is kept: the watch resumes from it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<Annotations>,
    owner_references: Option<Vec<OwnerReference>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
}

fn meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let meta = Meta::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        labels: meta.labels,
        annotations: meta.annotations.map(|a| a.0),
        owner_references: meta.owner_references,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        ..ObjectMeta::default()
    })
}

/// The annotation a client-side `kubectl apply` keeps a copy of the whole object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object's annotations but [`LAST_APPLIED`], whose value the reader passes over without allocating
/// it.
struct Annotations(BTreeMap<String, String>);

impl<'de> Deserialize<'de> for Annotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;

        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Annotations;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of annotations")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Annotations, A::Error> {
                let mut out = BTreeMap::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == LAST_APPLIED {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        out.insert(key.into_owned(), map.next_value()?);
                    }
                }
                Ok(Annotations(out))
            }
        }

        deserializer.deserialize_map(Entries)
    }
}

/// A pod template's spec, as far as its references go.
#[derive(Clone, Debug, Deserialize)]
struct Template {
    spec: Option<ReferencesOnly>,
}

impl Template {
    fn into_k8s(self) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: None,
            spec: self.spec.map(|s| s.0),
        }
    }
}

/// Makes a wire type a resource of the same API path as `$k8s`, with its metadata.
macro_rules! same_resource_as {
    ($wire:ty, $k8s:ty) => {
        impl k8s_openapi::Resource for $wire {
            const API_VERSION: &'static str = <$k8s as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$k8s as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$k8s as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$k8s as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str = <$k8s as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = NamespaceResourceScope;
        }

        impl k8s_openapi::Metadata for $wire {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A Pod: its metadata and its spec's references; never its status. (Listed, not watched: see the set
/// controller's `pod_refs`.)
#[derive(Clone, Debug, Deserialize)]
pub struct WirePod {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<ReferencesOnly>,
}
same_resource_as!(WirePod, Pod);

impl From<WirePod> for Pod {
    fn from(pod: WirePod) -> Self {
        Pod {
            metadata: pod.metadata,
            spec: pod.spec.map(|s| s.0),
            status: None,
        }
    }
}

/// A ReplicaSet: its metadata and its template's references.
#[derive(Clone, Debug, Deserialize)]
pub struct WireReplicaSet {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<TemplateHolder>,
}
same_resource_as!(WireReplicaSet, ReplicaSet);

#[derive(Clone, Debug, Deserialize)]
struct TemplateHolder {
    template: Option<Template>,
}

impl From<WireReplicaSet> for ReplicaSet {
    fn from(rs: WireReplicaSet) -> Self {
        ReplicaSet {
            metadata: rs.metadata,
            spec: rs.spec.map(|spec| ReplicaSetSpec {
                template: spec.template.map(Template::into_k8s),
                ..ReplicaSetSpec::default()
            }),
            status: None,
        }
    }
}

/// A Job: its metadata and its template's references.
#[derive(Clone, Debug, Deserialize)]
pub struct WireJob {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<TemplateHolder>,
}
same_resource_as!(WireJob, Job);

impl From<WireJob> for Job {
    fn from(job: WireJob) -> Self {
        Job {
            metadata: job.metadata,
            spec: job.spec.map(|spec| JobSpec {
                template: spec.template.map(Template::into_k8s).unwrap_or_default(),
                ..JobSpec::default()
            }),
            status: None,
        }
    }
}

/// A ControllerRevision: its metadata, its number, and the references of the template its data
/// records (`{"spec": {"template": {...}}}`, as StatefulSets and DaemonSets write it).
#[derive(Clone, Debug, Deserialize)]
pub struct WireControllerRevision {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    data: Option<RevisionData>,
    #[serde(default)]
    revision: i64,
}
same_resource_as!(WireControllerRevision, ControllerRevision);

#[derive(Clone, Debug, Deserialize)]
struct RevisionData {
    spec: Option<TemplateHolder>,
}

impl From<WireControllerRevision> for ControllerRevision {
    fn from(cr: WireControllerRevision) -> Self {
        let spec = cr
            .data
            .and_then(|d| d.spec)
            .and_then(|s| s.template)
            .and_then(|t| t.spec);
        ControllerRevision {
            metadata: cr.metadata,
            data: spec.map(|spec| RawExtension(serde_json::json!({"spec": {"template": {"spec": spec.0}}}))),
            revision: cr.revision,
        }
    }
}

/// An opted-in workload of any kind of the table (a Deployment, a Rollout, a declared custom resource),
/// as its watch sends it: the metadata without managedFields, and every other top-level field (`spec`,
/// `status`, or wherever a declared kind keeps its template) as JSON; `apiVersion` and `kind` are
/// skipped. Unlike `DynamicObject`, whose flattened `data` makes serde buffer the whole object before
/// decoding it a second time, the object is read once, and its managedFields never become values.
#[derive(Clone, Debug, Default)]
pub struct WireWorkload {
    pub metadata: ObjectMeta,
    /// Every top-level field but `apiVersion`, `kind` and `metadata`, as an object.
    pub data: serde_json::Value,
}

impl<'de> Deserialize<'de> for WireWorkload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;

        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = WireWorkload;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<WireWorkload, A::Error> {
                let mut metadata = ObjectMeta::default();
                let mut data = serde_json::Map::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match key.as_ref() {
                        "metadata" => metadata = map.next_value_seed(MetaSeed)?,
                        "apiVersion" | "kind" => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                        _ => {
                            data.insert(key.into_owned(), map.next_value()?);
                        }
                    }
                }
                Ok(WireWorkload {
                    metadata,
                    data: serde_json::Value::Object(data),
                })
            }
        }

        deserializer.deserialize_map(Fields)
    }
}

/// [`meta`] as a seed, for a visitor that reads `metadata` among other fields.
struct MetaSeed;

impl<'de> serde::de::DeserializeSeed<'de> for MetaSeed {
    type Value = ObjectMeta;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<ObjectMeta, D::Error> {
        meta(deserializer)
    }
}

impl Resource for WireWorkload {
    type DynamicType = kube::api::ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &kube::api::ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &kube::api::ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &kube::api::ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &kube::api::ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &kube::api::ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A set as its watch sends it, turned into the set for the store: everything but the managedFields.
/// Once a GitOps tool applies a set and cmset applies its status, the managedFields name every key of
/// the template and every field of the status, so they are often the larger part of the object.
macro_rules! wire_set {
    ($(#[$doc:meta])* $wire:ident, $set:ty, $spec:ty, $status:ty) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Deserialize)]
        pub struct $wire {
            #[serde(deserialize_with = "meta")]
            metadata: ObjectMeta,
            spec: $spec,
            status: Option<$status>,
        }

        impl Resource for $wire {
            type DynamicType = ();
            type Scope = NamespaceResourceScope;

            fn kind(dt: &()) -> Cow<'_, str> {
                <$set>::kind(dt)
            }

            fn group(dt: &()) -> Cow<'_, str> {
                <$set>::group(dt)
            }

            fn version(dt: &()) -> Cow<'_, str> {
                <$set>::version(dt)
            }

            fn plural(dt: &()) -> Cow<'_, str> {
                <$set>::plural(dt)
            }

            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }

        impl From<$wire> for $set {
            fn from(wire: $wire) -> Self {
                let mut set = <$set>::new("", wire.spec);
                set.metadata = wire.metadata;
                set.status = wire.status;
                set
            }
        }
    };
}

wire_set!(
    /// A ConfigMapSet without its managedFields.
    WireConfigMapSet,
    ConfigMapSet,
    ConfigMapSetSpec,
    ConfigMapSetStatus
);
wire_set!(
    /// A SecretSet without its managedFields.
    WireSecretSet,
    SecretSet,
    SecretSetSpec,
    SecretSetStatus
);

/// A ConfigMap's or Secret's metadata, asked for as metadata only (the API server sends no data) and
/// decoded without managedFields. ConfigMaps and Secrets are watched without a selector (a set's
/// source is another tool's object), so every one in scope passes through here, however unrelated.
#[derive(Clone, Debug, Deserialize)]
#[serde(bound = "")]
pub struct WireMeta<K> {
    #[serde(deserialize_with = "meta")]
    metadata: ObjectMeta,
    #[serde(skip)]
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()>> Resource for WireMeta<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }

    fn metadata_api() -> bool {
        true
    }
}

impl<K> From<WireMeta<K>> for PartialObjectMeta<K> {
    fn from(wire: WireMeta<K>) -> Self {
        wire.metadata.into_response_partial()
    }
}

#[cfg(test)]
mod tests;
