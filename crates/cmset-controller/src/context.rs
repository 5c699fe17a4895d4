//! What every reconciliation shares: the client, the informer caches, the event recorder, metrics and
//! the clock (passed in, so tests can fix it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cmset_api::ConfigMapSet;
use cmset_core::observe::{HistoryObject, RevisionView, WorkloadView};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::metrics::Metrics;
use crate::views;

/// Informer caches, each filled by one label-selected watch (see `runtime`).
#[derive(Clone)]
pub struct Stores {
    pub sets: Store<ConfigMapSet>,
    /// Revision ConfigMaps, metadata only: their content is never needed once created.
    pub revisions: Store<PartialObjectMeta<ConfigMap>>,
    pub deployments: Store<Deployment>,
    pub statefulsets: Store<StatefulSet>,
    pub daemonsets: Store<DaemonSet>,
    pub replica_sets: Store<ReplicaSet>,
    pub controller_revisions: Store<ControllerRevision>,
}

fn in_namespace<K: ResourceExt>(obj: &K, namespace: &str) -> bool {
    obj.namespace().as_deref() == Some(namespace)
}

impl Stores {
    pub fn sets_in(&self, namespace: &str) -> Vec<ConfigMapSet> {
        self.sets
            .state()
            .iter()
            .filter(|s| in_namespace(s.as_ref(), namespace))
            .map(|s| (**s).clone())
            .collect()
    }

    pub fn revisions_in(&self, namespace: &str, set_label: &str) -> Vec<RevisionView> {
        self.revisions
            .state()
            .iter()
            .filter(|c| in_namespace(c.as_ref(), namespace))
            .filter(|c| c.labels().get(cmset_api::labels::SET).map(String::as_str) == Some(set_label))
            .map(|c| views::revision_view(c))
            .collect()
    }

    /// Opted-in workloads of every kind in the namespace.
    pub fn workloads_in(&self, namespace: &str) -> Vec<WorkloadView> {
        fn of<K: views::Workload>(store: &Store<K>, namespace: &str) -> Vec<WorkloadView> {
            store
                .state()
                .iter()
                .filter(|w| in_namespace(w.as_ref(), namespace) && views::opted_in(w.as_ref()))
                .filter_map(|w| views::workload_view(w.as_ref()))
                .collect()
        }
        let mut all = of(&self.deployments, namespace);
        all.extend(of(&self.statefulsets, namespace));
        all.extend(of(&self.daemonsets, namespace));
        all
    }

    pub fn history_in(&self, namespace: &str) -> Vec<HistoryObject> {
        let mut all: Vec<HistoryObject> = self
            .replica_sets
            .state()
            .iter()
            .filter(|r| in_namespace(r.as_ref(), namespace))
            .filter_map(|r| views::replica_set_view(r))
            .collect();
        all.extend(
            self.controller_revisions
                .state()
                .iter()
                .filter(|r| in_namespace(r.as_ref(), namespace))
                .filter_map(|r| views::controller_revision_view(r)),
        );
        all
    }
}

pub type Clock = Arc<dyn Fn() -> Time + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| Time(jiff::Timestamp::now()))
}

#[derive(Clone)]
pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub reporter: Reporter,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    /// False until every cache has its first full list. Planning from a half-filled cache would take
    /// objects not yet listed for absent ones (a revision to create again, a workload record to drop),
    /// so reconcilers wait for it.
    pub caches_ready: Arc<AtomicBool>,
}

impl Context {
    /// A context whose caches count as ready (tests fill them by hand; `runtime` clears the flag until
    /// its watches have listed everything).
    pub fn new(
        client: Client,
        stores: Stores,
        metrics: Arc<Metrics>,
        clock: Clock,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: cmset_api::labels::FIELD_MANAGER.to_string(),
            instance,
        };
        Self {
            client,
            stores,
            reporter,
            metrics,
            clock,
            caches_ready: Arc::new(AtomicBool::new(true)),
        }
    }

    pub fn caches_ready(&self) -> bool {
        self.caches_ready.load(Ordering::Acquire)
    }

    /// Publishes an event, best effort. A fresh recorder each time: kube's recorder folds a repeat of
    /// the same reason on the same object into a series that keeps the first message, while cmset
    /// publishes only when something changed, so every event must keep its own message.
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) {
        self.metrics.wrote("publish_event");
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(event, regarding).await {
            tracing::warn!(reason = %event.reason, error = %e, "could not publish event");
        }
    }
}
