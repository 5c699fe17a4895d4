//! Revision history on a real cluster: reverting content reuses the old revision, every ReplicaSet the
//! Deployment retains can be returned to whatever the set's own limit, unused revisions are pruned to the
//! limit, and deleting a set keeps exactly the revisions something still uses.

use std::collections::BTreeSet;

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, replica_set_names, rollout_status,
    template_names, wait_names,
};
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
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
    // The newest ReplicaSet becomes an owner within a moment: owner patches are batched for up to a
    // second after the rollout, which may already be complete.
    eventually("every revision owned by the ReplicaSet that names it", || async {
        let revisions = ns.revisions("app-config").await;
        revisions
            .iter()
            .all(|cm| cm.owner_references().iter().any(|o| o.kind == "ReplicaSet"))
            .then_some(())
    })
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
    eventually("revision 2 owned by its ReplicaSet", || async {
        let cm: ConfigMap = ns.api::<ConfigMap>().get(&version_name(2)).await.ok()?;
        cm.owner_references()
            .iter()
            .any(|o| o.kind == "ReplicaSet")
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
