//! The operator is SIGKILLed at random moments during a series of config changes and restarted: the
//! cluster converges with nothing lost, no duplicate revisions, and no workload left pointing at a
//! ConfigMap that does not exist.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, configmap_names, live_pods,
    replica_set_names, rollout_status, wait_names,
};
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, stays};

fn set_yaml(version: u32) -> String {
    app_config_yaml(&version.to_string(), None)
}

/// A cheap pseudo-random delay (the tests need variety, not cryptography).
fn random_delay(seed: &mut u64) -> Duration {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    Duration::from_millis(*seed % 900)
}

#[tokio::test]
async fn killed_at_random_moments_the_operator_converges_with_nothing_lost() {
    let ns = TestNamespace::new("crash").await;
    let mut seed = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("crash test seed {seed}");
    let mut operator = Operator::start(&ns.name).await;
    ns.apply(&set_yaml(1));
    ns.apply(
        &DeploymentYaml::new(
            "web",
            &[Reads::EnvFrom("app-config"), Reads::Volume("app-config")],
        )
        .replicas(2)
        .yaml(),
    );
    for version in 2..=7 {
        ns.apply(&set_yaml(version));
        tokio::time::sleep(random_delay(&mut seed)).await;
        operator.kill().await;
        tokio::time::sleep(random_delay(&mut seed)).await;
        operator.restart().await;
    }
    let last = app_config_revision("7");
    wait_names(&ns, "web", &[&last]).await;
    rollout_status(&ns, "deployment/web").await;
    eventually("the set to be ready on the last version", || async {
        let status = ns.set("app-config").await.status?;
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.current_revision.as_deref() == Some(last.as_str())).then_some(())
    })
    .await;

    // No duplicates: one revision per content, distinct numbers, every name kustomize's for its content.
    let revisions = ns.revisions("app-config").await;
    let mut contents = BTreeMap::new();
    let mut numbers = BTreeSet::new();
    for cm in &revisions {
        let version = cm.data.as_ref().unwrap()["APP_VERSION"].clone();
        assert_eq!(cm.name_any(), app_config_revision(&version));
        assert!(
            contents.insert(version, cm.name_any()).is_none(),
            "two revisions hold the same content"
        );
        assert!(
            numbers.insert(cm.annotations()["cmset.dev/revision"].clone()),
            "revision numbers repeat"
        );
        assert_eq!(cm.immutable, Some(true));
    }

    // Nothing points at a missing ConfigMap: the Deployment, its ReplicaSets, its Pods.
    let existing: BTreeSet<String> = ns
        .api::<ConfigMap>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    for rs in ns.replica_sets().await {
        let names = replica_set_names(&rs).expect("a pod template");
        // The very first ReplicaSet may name the bare set (made before cmset rewrote the template).
        for name in names.iter().filter(|n| *n != "app-config") {
            assert!(
                existing.contains(name),
                "ReplicaSet {} names missing {name}",
                rs.name_any()
            );
        }
    }
    for pod in live_pods(&ns).await {
        for name in configmap_names(pod.spec.as_ref().unwrap()) {
            assert!(
                existing.contains(&name),
                "pod {} names missing {name}",
                pod.name_any()
            );
        }
    }

    // Every revision a ReplicaSet names is owned by it or by its Deployment (which owns the revisions
    // made while it read the set), so `rollout undo` finds its config. The ReplicaSets' owner patches
    // are batched for up to a second after one appears, and are part of converging.
    eventually(
        "every ReplicaSet or its Deployment to own the revisions it names",
        || async {
            let owners: BTreeMap<String, BTreeSet<String>> = ns
                .revisions("app-config")
                .await
                .iter()
                .map(|cm| {
                    let uids = cm.owner_references().iter().map(|o| o.uid.clone()).collect();
                    (cm.name_any(), uids)
                })
                .collect();
            ns.replica_sets()
                .await
                .iter()
                .all(|rs| {
                    let uid = rs.uid().unwrap_or_default();
                    let deployment = rs.owner_references().first().map(|o| o.uid.clone());
                    replica_set_names(rs)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|name| owners.get(name))
                        .all(|uids| {
                            uids.contains(&uid) || deployment.as_ref().is_some_and(|d| uids.contains(d))
                        })
                })
                .then_some(())
        },
    )
    .await;

    // And once converged, the operator is quiet.
    let writes = operator.writes();
    stays(
        "no further writes once converged",
        Duration::from_secs(3),
        || async { operator.writes() == writes },
    )
    .await;
}
