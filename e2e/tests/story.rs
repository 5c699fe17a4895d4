//! The story that motivated cmset, on a real API server: a config change rolls the Deployment, and
//! `kubectl rollout undo` brings back the old pods *with the old config*, and cmset does not fight it,
//! neither while running nor after a restart.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, stays};

fn set_yaml(version: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: app-config
spec:
  revisionHistoryLimit: 5
  template:
    data:
      APP_VERSION: "{version}"
"#
    )
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    cmset.dev/enabled: "true"
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef:
                name: app-config
"#;

/// The ConfigMap names a pod spec reads through envFrom.
fn env_from_names(spec: &PodSpec) -> BTreeSet<String> {
    spec.containers
        .iter()
        .flat_map(|c| c.env_from.iter().flatten())
        .filter_map(|e| e.config_map_ref.as_ref().map(|r| r.name.clone()))
        .collect()
}

fn template_names(d: &Deployment) -> BTreeSet<String> {
    env_from_names(d.spec.as_ref().unwrap().template.spec.as_ref().unwrap())
}

/// APP_VERSION as each live pod would see it, following the pod's own reference to its ConfigMap.
async fn versions_pods_see(ns: &TestNamespace) -> Vec<String> {
    let mut seen = Vec::new();
    for pod in ns
        .pods()
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        for name in env_from_names(pod.spec.as_ref().unwrap()) {
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

async fn rolled_out(ns: &TestNamespace) {
    ns.kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"]);
}

#[tokio::test]
async fn config_rolls_out_and_rolls_back_with_its_workload() {
    let ns = TestNamespace::new("story").await;
    let mut operator = Operator::start(&ns.name).await;
    let v1 = kustomize_name("app-config", &[("APP_VERSION", "1")]);
    let v2 = kustomize_name("app-config", &[("APP_VERSION", "2")]);

    // The team writes its Deployment as if the ConfigMap were simply called `app-config`.
    ns.apply(&set_yaml("1"));
    ns.apply(DEPLOYMENT);
    eventually("the Deployment to name the first revision", || async {
        (template_names(&ns.deployment("web").await) == BTreeSet::from([v1.clone()])).then_some(())
    })
    .await;
    rolled_out(&ns).await;
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
    eventually("the Deployment to roll to the second revision", || async {
        (template_names(&ns.deployment("web").await) == BTreeSet::from([v2.clone()])).then_some(())
    })
    .await;
    rolled_out(&ns).await;
    eventually("pods to see APP_VERSION=2", || async {
        (versions_pods_see(&ns).await == ["2", "2"]).then_some(())
    })
    .await;

    // `kubectl rollout undo` brings back the old pod template, and with it the old config.
    ns.kubectl(&["rollout", "undo", "deployment/web"]);
    rolled_out(&ns).await;
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
    let active_names = env_from_names(
        active[0]
            .spec
            .as_ref()
            .unwrap()
            .template
            .as_ref()
            .unwrap()
            .spec
            .as_ref()
            .unwrap(),
    );
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
