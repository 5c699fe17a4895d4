//! The reflector stores the controllers are keyed by, and the lookups they answer: a set of either
//! kind by [`SetId`], an opted-in workload's view by key. Written only by the stored watches that
//! `runtime` starts (kube's reflectors); everything else only reads them.

use std::sync::Arc;

use cmset_api::{ConfigMapSet, SecretSet};
use cmset_core::observe::{WorkloadKind, WorkloadView};
use cmset_core::set::{SetKind, SetRef};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::index::{Key, SetId};
use crate::views;

/// The reflector stores the controllers are keyed by: sets (whole, since revisions are stamped from
/// them) and opted-in workloads (slimmed to their references, see [`crate::index::Indexed::slim`]).
/// Everything else lives in the [`Index`](crate::index::Index).
#[derive(Clone)]
pub struct Stores {
    pub sets: Store<ConfigMapSet>,
    /// `None` when SecretSets are not served (`--secret-sets=false`).
    pub secret_sets: Option<Store<SecretSet>>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub daemonsets: Store<DaemonSet>,
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

    /// The view of one opted-in workload, looked up by key.
    pub fn workload(&self, kind: WorkloadKind, namespace: &str, name: &str) -> Option<WorkloadView> {
        fn view<K: views::Workload>(store: &Store<K>, namespace: &str, name: &str) -> Option<WorkloadView> {
            let obj = store.get(&ObjectRef::new(name).within(namespace))?;
            views::opted_in(obj.as_ref())
                .then(|| views::workload_view(obj.as_ref()))
                .flatten()
        }
        match kind {
            WorkloadKind::Deployment => view(&self.deployments, namespace, name),
            WorkloadKind::StatefulSet => view(&self.statefulsets, namespace, name),
            WorkloadKind::DaemonSet => view(&self.daemonsets, namespace, name),
        }
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
