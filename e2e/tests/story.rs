//! The story that motivated cmset, on a real API server: a config change rolls the Deployment, and
//! `kubectl rollout undo` brings back the old pods *with the old config*, and cmset does not fight it,
//! neither while running nor after a restart.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, configmap_names, live_pods,
    replica_set_names, rollout_status, template_names, wait_names,
};
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, stays};

fn set_yaml(version: &str) -> String {
    app_config_yaml(version, Some(5))
}

/// APP_VERSION as each live pod would see it, following the pod's own reference to its ConfigMap.
async fn versions_pods_see(ns: &TestNamespace) -> Vec<String> {
    let mut seen = Vec::new();
    for pod in live_pods(ns).await {
        for name in configmap_names(pod.spec.as_ref().unwrap()) {
            let cm: ConfigMap = ns
                .api::<ConfigMap>()
                .get(&name)
                .await
                .expect("the pod's ConfigMap exists");
            seen.push(
                cm.data
                    .unwrap_or_default()
                    .get("APP_VERSION")
                    .cloned()
                    .unwrap_or_default(),
            );
        }
    }
    seen.sort();
    seen
}

#[tokio::test]
async fn config_rolls_out_and_rolls_back_with_its_workload() {
    let ns = TestNamespace::new("story").await;
    let mut operator = Operator::start(&ns.name).await;
    let v1 = app_config_revision("1");
    let v2 = app_config_revision("2");

    // The team writes its Deployment as if the ConfigMap were simply called `app-config`.
    ns.apply(&set_yaml("1"));
    ns.apply(
        &DeploymentYaml::new("web", &[Reads::EnvFrom("app-config")])
            .replicas(2)
            .yaml(),
    );
    wait_names(&ns, "web", &[&v1]).await;
    rollout_status(&ns, "deployment/web").await;
    let revision: ConfigMap = ns.api::<ConfigMap>().get(&v1).await.unwrap();
    assert_eq!(revision.immutable, Some(true), "revisions are immutable");
    assert_eq!(
        ns.set("app-config").await.status.unwrap().current_revision,
        Some(v1.clone())
    );
    eventually("pods to see APP_VERSION=1", || async {
        (versions_pods_see(&ns).await == ["1", "1"]).then_some(())
    })
    .await;

    // A config change rolls the pods.
    ns.apply(&set_yaml("2"));
    wait_names(&ns, "web", &[&v2]).await;
    rollout_status(&ns, "deployment/web").await;
    eventually("pods to see APP_VERSION=2", || async {
        (versions_pods_see(&ns).await == ["2", "2"]).then_some(())
    })
    .await;

    // `kubectl rollout undo` brings back the old pod template, and with it the old config.
    ns.kubectl(&["rollout", "undo", "deployment/web"]);
    rollout_status(&ns, "deployment/web").await;
    assert_eq!(
        template_names(&ns.deployment("web").await),
        BTreeSet::from([v1.clone()])
    );
    eventually("pods to see APP_VERSION=1 again", || async {
        (versions_pods_see(&ns).await == ["1", "1"]).then_some(())
    })
    .await;
    let active: Vec<_> = ns
        .replica_sets()
        .await
        .into_iter()
        .filter(|rs| rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0) > 0)
        .collect();
    assert_eq!(active.len(), 1, "one active ReplicaSet");
    let active_names = replica_set_names(&active[0]).expect("a pod template");
    assert_eq!(
        active_names,
        BTreeSet::from([v1.clone()]),
        "the active ReplicaSet reads the old config"
    );

    // cmset respects the rollback: it reports the pin and does not push the workload forward.
    eventually("the set to report the workload pinned", || async {
        let status = ns.set("app-config").await.status?;
        let w = status.workloads.iter().find(|w| w.name == "web")?;
        (w.state == cmset_e2e::cmset_api::WorkloadState::Pinned && w.revision == v1).then_some(())
    })
    .await;
    let still_v1 = || async { template_names(&ns.deployment("web").await) == BTreeSet::from([v1.clone()]) };
    stays(
        "the Deployment stays on the first revision",
        Duration::from_secs(3),
        still_v1,
    )
    .await;

    // ... and after a restart, which writes nothing at all.
    operator.restart().await;
    stays(
        "the Deployment stays on the first revision after a restart",
        Duration::from_secs(5),
        still_v1,
    )
    .await;
    assert_eq!(
        operator.writes(),
        0.0,
        "a restart with everything in place writes nothing"
    );
    assert!(
        ns.api::<ConfigMap>().get(&v2).await.is_ok(),
        "the newer revision is kept for rolling forward"
    );
    let _ = ns.deployment("web").await.name_any();
}
