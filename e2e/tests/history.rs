//! Revision history on a real cluster: reverting content reuses the old revision, every ReplicaSet the
//! Deployment retains can be returned to whatever the set's own limit, unused revisions are pruned to the
//! limit, a Pod whose owner is gone keeps the revision it runs, and deleting a set keeps exactly the
//! revisions something still uses.

use std::collections::BTreeSet;

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, replica_set_names, rollout_status,
    template_names, wait_names,
};
use cmset_e2e::k8s_openapi::api::core::v1::{ConfigMap, Pod};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually};

fn set_yaml(version: &str, limit: i32) -> String {
    app_config_yaml(version, Some(limit))
}

/// Web reads APP_VERSION through `env` `valueFrom` and keeps `history_limit` old ReplicaSets.
fn deployment_yaml(history_limit: i32) -> String {
    let reads = [Reads::EnvKey {
        name: "app-config",
        key: "APP_VERSION",
    }];
    DeploymentYaml::new("web", &reads)
        .revision_history_limit(history_limit)
        .yaml()
}

fn version_name(v: u32) -> String {
    app_config_revision(&v.to_string())
}

/// Applies version `v` of the set and waits until the Deployment has rolled out onto it.
async fn roll_to(ns: &TestNamespace, v: u32, limit: i32) {
    ns.apply(&set_yaml(&v.to_string(), limit));
    wait_names(ns, "web", &[&version_name(v)]).await;
    rollout_status(ns, "deployment/web").await;
}

#[tokio::test]
async fn reverting_content_reuses_the_old_revision_and_moves_workloads_back() {
    let ns = TestNamespace::new("revert").await;
    let _operator = Operator::start(&ns.name).await;
    ns.apply(&set_yaml("1", 10));
    ns.apply(&deployment_yaml(10));
    roll_to(&ns, 1, 10).await;
    roll_to(&ns, 2, 10).await;
    // `git revert`: the content goes back to version 1.
    roll_to(&ns, 1, 10).await;
    assert_eq!(ns.revision_names("app-config").await, {
        let mut v = vec![version_name(1), version_name(2)];
        v.sort();
        v
    });
    let v1: ConfigMap = ns.api::<ConfigMap>().get(&version_name(1)).await.unwrap();
    assert_eq!(
        v1.annotations()["cmset.dev/revision"],
        "3",
        "renumbered as the newest"
    );
    let status = ns.set("app-config").await.status.unwrap();
    assert_eq!(
        (status.revision, status.current_revision.as_deref()),
        (Some(3), Some(version_name(1).as_str()))
    );
}

#[tokio::test]
async fn every_retained_replica_set_can_be_returned_to_whatever_the_set_limit() {
    let ns = TestNamespace::new("undo-to").await;
    let _operator = Operator::start(&ns.name).await;
    // The set keeps no unused revision at all; the Deployment keeps 10 ReplicaSets.
    ns.apply(&set_yaml("1", 0));
    ns.apply(&deployment_yaml(10));
    for v in 1..=4 {
        roll_to(&ns, v, 0).await;
    }
    // Every version is still there: each is named by a retained ReplicaSet, which owns it.
    let all: BTreeSet<String> = (1..=4).map(version_name).collect();
    assert_eq!(
        ns.revision_names("app-config")
            .await
            .into_iter()
            .collect::<BTreeSet<_>>(),
        all
    );
    // Each is owned by what keeps it after the set: the Deployment, which owns every revision made
    // while it read the set and (the first, made before the Deployment existed) is added as an owner
    // once its first ReplicaSet names it, within a moment (owner patches are batched for up to a
    // second). A ReplicaSet owns a revision only when its Deployment cannot (gone, or not a reader).
    eventually(
        "every revision owned by the Deployment or the ReplicaSet that names it",
        || async {
            let revisions = ns.revisions("app-config").await;
            revisions
                .iter()
                .all(|cm| {
                    cm.owner_references()
                        .iter()
                        .any(|o| o.kind == "ReplicaSet" || (o.kind == "Deployment" && o.name == "web"))
                })
                .then_some(())
        },
    )
    .await;
    // Return to each Deployment revision that names a cmset revision, and check the config comes back.
    let mut by_revision: Vec<(String, String)> = ns
        .replica_sets()
        .await
        .iter()
        .filter_map(|rs| {
            let number = rs.annotations().get("deployment.kubernetes.io/revision")?.clone();
            let name = replica_set_names(rs)?.into_iter().next()?;
            all.contains(&name).then_some((number, name))
        })
        .collect();
    by_revision.sort();
    assert!(
        by_revision.len() >= 4,
        "a ReplicaSet per version: {by_revision:?}"
    );
    for (number, name) in by_revision.iter().take(3) {
        // Undo renumbers the target as the newest Deployment revision; find it again by its name.
        let target = ns
            .replica_sets()
            .await
            .iter()
            .find(|rs| replica_set_names(rs) == Some(BTreeSet::from([name.clone()])))
            .and_then(|rs| rs.annotations().get("deployment.kubernetes.io/revision").cloned())
            .unwrap_or_else(|| number.clone());
        ns.kubectl(&[
            "rollout",
            "undo",
            "deployment/web",
            &format!("--to-revision={target}"),
        ]);
        rollout_status(&ns, "deployment/web").await;
        assert_eq!(
            template_names(&ns.deployment("web").await),
            BTreeSet::from([name.clone()])
        );
        let cm: ConfigMap = ns
            .api::<ConfigMap>()
            .get(name)
            .await
            .expect("the revision still exists");
        assert!(cm.data.unwrap().contains_key("APP_VERSION"));
    }
}

#[tokio::test]
async fn unused_revisions_are_pruned_to_the_limit_oldest_first() {
    let ns = TestNamespace::new("prune").await;
    let _operator = Operator::start(&ns.name).await;
    // The Deployment keeps one old ReplicaSet; the set keeps one unused revision.
    ns.apply(&set_yaml("1", 1));
    ns.apply(&deployment_yaml(1));
    for v in 1..=5 {
        roll_to(&ns, v, 1).await;
    }
    // In use: 5 (current, its ReplicaSet) and 4 (the retained old ReplicaSet). Unused: 1, 2, 3; keep 3.
    let want: BTreeSet<String> = [3, 4, 5].into_iter().map(version_name).collect();
    eventually("revisions pruned to current + retained + limit", || async {
        let have: BTreeSet<String> = ns.revision_names("app-config").await.into_iter().collect();
        (have == want).then_some(())
    })
    .await;
    let history = ns.set("app-config").await.status.unwrap().history;
    assert_eq!(
        history.iter().map(|h| h.revision).collect::<Vec<_>>(),
        vec![5, 4, 3],
        "{history:?}"
    );
}

#[tokio::test]
async fn an_orphaned_pod_keeps_the_revision_it_runs_until_it_is_gone() {
    let ns = TestNamespace::new("orphan").await;
    let _operator = Operator::start(&ns.name).await;
    // The set keeps no unused revision.
    ns.apply(&set_yaml("1", 0));
    ns.apply(&deployment_yaml(0));
    roll_to(&ns, 1, 0).await;
    // `kubectl delete --cascade=orphan`, twice: the Deployment, then its ReplicaSet. Its Pods run on,
    // owned by nothing that could make them again or adopt them, and nothing indexed names version 1.
    ns.kubectl(&["delete", "deployment", "web", "--cascade=orphan"]);
    let replica_sets: Vec<String> = ns.replica_sets().await.iter().map(|rs| rs.name_any()).collect();
    assert_eq!(replica_sets.len(), 1, "{replica_sets:?}");
    ns.kubectl(&["delete", "replicaset", &replica_sets[0], "--cascade=orphan"]);
    let orphans = eventually("the Pods orphaned, still running version 1", || async {
        let pods: Vec<Pod> = ns.pods().await;
        let orphaned = |pod: &Pod| {
            pod.owner_references().is_empty()
                && pod.labels().get("cmset.dev/managed").map(String::as_str) == Some("true")
                && format!("{:?}", pod.spec).contains(&version_name(1))
        };
        (!pods.is_empty() && pods.iter().all(orphaned))
            .then(|| pods.iter().map(|p| p.name_any()).collect::<Vec<_>>())
    })
    .await;
    // The garbage collector drops the deleted ReplicaSet's owner reference from the revision: only
    // the Pods keep it in use now.
    eventually("version 1 owned by its set alone", || async {
        let cm: ConfigMap = ns.api::<ConfigMap>().get(&version_name(1)).await.ok()?;
        cm.owner_references()
            .iter()
            .all(|o| o.kind == "ConfigMapSet")
            .then_some(())
    })
    .await;

    // Two changes: version 2, which nothing ever ran, is pruned once version 3 is current.
    ns.apply(&set_yaml("2", 0));
    eventually("revision 2", || async {
        ns.revision_names("app-config")
            .await
            .contains(&version_name(2))
            .then_some(())
    })
    .await;
    ns.apply(&set_yaml("3", 0));
    let kept: BTreeSet<String> = [1, 3].into_iter().map(version_name).collect();
    eventually("version 2 pruned, version 1 kept for its Pods", || async {
        let have: BTreeSet<String> = ns.revision_names("app-config").await.into_iter().collect();
        (have == kept).then_some(())
    })
    .await;

    // The Pods go: the next change prunes version 1 too.
    for pod in &orphans {
        ns.kubectl(&["delete", "pod", pod, "--grace-period=0", "--force"]);
    }
    eventually("the orphaned Pods gone", || async {
        ns.pods().await.is_empty().then_some(())
    })
    .await;
    ns.apply(&set_yaml("4", 0));
    let last = BTreeSet::from([version_name(4)]);
    eventually("every revision but the current one pruned", || async {
        let have: BTreeSet<String> = ns.revision_names("app-config").await.into_iter().collect();
        (have == last).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_set_keeps_only_the_revisions_still_in_use_until_nothing_uses_them() {
    let ns = TestNamespace::new("delete").await;
    let _operator = Operator::start(&ns.name).await;
    // Version 1 is never used by any workload; version 2 is rolled out.
    ns.apply(&set_yaml("1", 10));
    eventually("revision 1", || async {
        ns.revision_names("app-config")
            .await
            .contains(&version_name(1))
            .then_some(())
    })
    .await;
    ns.apply(&set_yaml("2", 10));
    ns.apply(&deployment_yaml(10));
    roll_to(&ns, 2, 10).await;
    // Revision 2 was made before the Deployment existed: its first ReplicaSet makes the Deployment an
    // owner (once, however many ReplicaSets follow), not the ReplicaSet itself.
    eventually("revision 2 owned by the Deployment that runs it", || async {
        let cm: ConfigMap = ns.api::<ConfigMap>().get(&version_name(2)).await.ok()?;
        let owners = cm.owner_references();
        (owners.iter().any(|o| o.kind == "Deployment" && o.name == "web")
            && owners.iter().all(|o| o.kind != "ReplicaSet"))
        .then_some(())
    })
    .await;

    ns.kubectl(&["delete", "cmset", "app-config"]);
    eventually("the unused revision to be collected", || async {
        ns.api::<ConfigMap>()
            .get_opt(&version_name(1))
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let v2 = ns
        .api::<ConfigMap>()
        .get(&version_name(2))
        .await
        .expect("the used revision stays");
    assert!(
        v2.owner_references().iter().all(|o| o.kind != "ConfigMapSet"),
        "no dangling owner left"
    );
    ns.kubectl(&["rollout", "status", "deployment/web", "--timeout=30s"]);

    // Once nothing uses it any more, the garbage collector removes it too.
    ns.kubectl(&["delete", "deployment", "web"]);
    eventually(
        "the last revision to be collected with its ReplicaSets",
        || async {
            ns.api::<ConfigMap>()
                .get_opt(&version_name(2))
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
}
