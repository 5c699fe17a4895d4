//! What must hold once cmset has converged, whatever happened on the way (a crash, API faults, an API
//! server restart): shared by the scenarios that disturb it.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{ConfigMapSet, WorkloadState};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

use crate::fixtures::{configmap_names, live_pods, replica_set_names};
use crate::{TestNamespace, eventually};

/// One revision per content, distinct revision numbers, every revision immutable.
pub async fn one_revision_per_content(ns: &TestNamespace, set: &str) {
    let revisions = ns.revisions(set).await;
    let mut contents = BTreeMap::new();
    let mut numbers = BTreeSet::new();
    for cm in &revisions {
        let content = (cm.data.clone(), cm.binary_data.clone());
        if let Some(other) = contents.insert(content, cm.name_any()) {
            panic!("{} and {other} hold the same content", cm.name_any());
        }
        let number = cm.annotations().get(cmset_api::labels::REVISION).cloned();
        assert!(
            numbers.insert(number.clone()),
            "revision number {number:?} repeats ({})",
            cm.name_any()
        );
        assert_eq!(cm.immutable, Some(true), "{} is immutable", cm.name_any());
    }
}

/// The ConfigMaps (and sets) of the namespace, by name.
async fn existing_names(ns: &TestNamespace) -> (BTreeSet<String>, BTreeSet<String>) {
    let configmaps = ns.api::<ConfigMap>().list(&Default::default()).await.unwrap();
    let sets = ns.api::<ConfigMapSet>().list(&Default::default()).await.unwrap();
    (
        configmaps.items.iter().map(|c| c.name_any()).collect(),
        sets.items.iter().map(|s| s.name_any()).collect(),
    )
}

/// The ConfigMaps that Deployments, their ReplicaSets and their live Pods name: what must not be pruned.
pub async fn referenced_names(ns: &TestNamespace) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for d in ns
        .api::<Deployment>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
    {
        if let Some(spec) = d.spec.as_ref().and_then(|s| s.template.spec.as_ref()) {
            names.extend(configmap_names(spec));
        }
    }
    for rs in ns.replica_sets().await {
        names.extend(replica_set_names(&rs).unwrap_or_default());
    }
    for pod in live_pods(ns).await {
        names.extend(configmap_names(pod.spec.as_ref().unwrap()));
    }
    names
}

/// No Deployment, ReplicaSet or live Pod names a ConfigMap that does not exist. A name that is a set's
/// own is allowed: the very first ReplicaSet names the bare set (made before cmset rewrote the template).
pub async fn nothing_names_a_missing_configmap(ns: &TestNamespace) {
    let (existing, sets) = existing_names(ns).await;
    let missing: Vec<String> = referenced_names(ns)
        .await
        .into_iter()
        .filter(|n| !existing.contains(n) && !sets.contains(n))
        .collect();
    assert!(missing.is_empty(), "named but missing: {missing:?}");
}

/// Waits until the revisions of `set` that nothing references, the current one aside, number no more
/// than its `revisionHistoryLimit` (pruning follows a rollout, so it is part of converging).
pub async fn history_within_limit(ns: &TestNamespace, set: &str) {
    eventually(
        &format!("{set}'s unused history to be within its limit"),
        || async {
            let s = ns.set(set).await;
            let limit = usize::try_from(s.spec.revision_history_limit).unwrap_or(0);
            let current = s.status.as_ref()?.current_revision.clone()?;
            let mut referenced = referenced_names(ns).await;
            // A Pod still terminating runs its containers until it is gone: what it names is in use,
            // and cmset keeps it (after a control-plane restart the node may take a while to finish it).
            for pod in ns.pods().await {
                referenced.extend(pod.spec.as_ref().map(configmap_names).unwrap_or_default());
            }
            let unused = ns
                .revision_names(set)
                .await
                .into_iter()
                .filter(|n| *n != current && !referenced.contains(n))
                .count();
            (unused <= limit).then_some(())
        },
    )
    .await;
}

/// Whether `set` is Ready on `revision` with its status up to date with its spec.
pub fn ready_on(set: &ConfigMapSet, revision: &str) -> bool {
    let Some(status) = set.status.as_ref() else {
        return false;
    };
    status.current_revision.as_deref() == Some(revision)
        && status.observed_generation == set.metadata.generation
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The state and revision `set`'s status reports for Deployment `name`.
pub fn workload_state(set: &ConfigMapSet, name: &str) -> Option<(WorkloadState, String)> {
    let w = set
        .status
        .as_ref()?
        .workloads
        .iter()
        .find(|w| w.kind == "Deployment" && w.name == name)?;
    Some((w.state, w.revision.clone()))
}
