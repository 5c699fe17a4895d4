//! The reflector stores the controllers are keyed by, and the lookups they answer: a set of either
//! kind by [`SetId`], an opted-in workload's view by kind and key, an AnalysisTemplate by name. Written only by the stored watches
//! that `runtime` and `served` start (kube's reflectors); everything else only reads them.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use cmset_api::{AnalysisTemplate, ConfigMapSet, SecretSet};
use cmset_core::set::{SetKind, SetRef};
use cmset_core::workloads::observe::{WorkloadKind, WorkloadView};
use kube::api::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::engine::index::{Key, SetId};
use crate::engine::stored_workload::StoredWorkload;
use crate::engine::views;

/// The reflector stores the controllers are keyed by: sets (whole, since revisions are stamped from
/// them) and opted-in workloads (slimmed to their references, see [`crate::engine::stored_workload`]).
/// Everything else lives in the [`Index`](crate::engine::index::Index).
#[derive(Clone)]
pub struct Stores {
    pub sets: Store<ConfigMapSet>,
    /// `None` when SecretSets are not served (`--secret-sets=false`).
    pub secret_sets: Option<Store<SecretSet>>,
    /// The stores of the workload kinds served now: kinds come and go with the CRDs installed.
    pub workloads: Arc<RwLock<HashMap<WorkloadKind, WorkloadStore>>>,
    /// AnalysisTemplates (cluster-scoped, kept whole: sets' analyses are resolved against them);
    /// `None` when the operator has no Prometheus to measure with.
    pub templates: Option<Store<AnalysisTemplate>>,
}

/// The store of one served workload kind, with the resource its object references carry.
#[derive(Clone)]
pub struct WorkloadStore {
    pub resource: ApiResource,
    pub store: Store<StoredWorkload>,
}

impl Stores {
    pub fn set(&self, (kind, key): &SetId) -> Option<AnySet> {
        fn get<K: kube::Resource<DynamicType = ()> + Clone>(store: &Store<K>, key: &Key) -> Option<Arc<K>> {
            store.get(&ObjectRef::new(&key.name).within(&key.namespace))
        }
        match kind {
            SetKind::ConfigMapSet => get(&self.sets, key).map(AnySet::ConfigMap),
            SetKind::SecretSet => get(self.secret_sets.as_ref()?, key).map(AnySet::Secret),
        }
    }

    /// The store of workload kind `kind`, if it is served.
    pub fn workload_store(&self, kind: WorkloadKind) -> Option<WorkloadStore> {
        let stores = self.workloads.read().unwrap_or_else(|e| e.into_inner());
        stores.get(&kind).cloned()
    }

    /// One workload as its store holds it (slim), looked up by key.
    pub fn workload_object(
        &self,
        kind: WorkloadKind,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<StoredWorkload>> {
        let stores = self.workloads.read().unwrap_or_else(|e| e.into_inner());
        let served = stores.get(&kind)?;
        served
            .store
            .get(&ObjectRef::new_with(name, served.resource.clone()).within(namespace))
    }

    /// The view of one opted-in workload, looked up by key.
    pub fn workload(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Option<WorkloadView> {
        let obj = self.workload_object(kind, namespace, name)?;
        views::workload_view(kind, &obj)
    }
}

/// A set of either kind, as its store holds it.
#[derive(Clone, Debug)]
pub enum AnySet {
    ConfigMap(Arc<ConfigMapSet>),
    Secret(Arc<SecretSet>),
}

impl AnySet {
    pub fn as_set(&self) -> SetRef<'_> {
        match self {
            Self::ConfigMap(set) => SetRef::ConfigMap(set),
            Self::Secret(set) => SetRef::Secret(set),
        }
    }
}
