//! What cmset writes, measured on a real API server: metadata-only template changes touch revisions in
//! place and roll nothing; one content change costs a small, fixed number of writes; a resync writes none.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_e2e::fixtures::{
    Reads, Template, app_config_revision, deployment_yaml, rollout_status, set_yaml_with, wait_names,
};
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, stays};

/// The set, its revisions labelled `team: <team>` and annotated `owner: <team>-oncall`.
fn set_yaml(version: &str, team: &str) -> String {
    let owner = format!("{team}-oncall");
    let template = Template {
        labels: &[("team", team)],
        annotations: &[("owner", &owner)],
        ..Template::default()
    };
    set_yaml_with("app-config", &[("APP_VERSION", version)], None, template)
}

fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v != 0.0)
        .collect()
}

async fn settled(ns: &TestNamespace, operator: &Operator) {
    rollout_status(ns, "deployment/web").await;
    let mut last = operator.writes();
    // Settled when three seconds pass without a write: cmset batches a set's deferrable status writes
    // for up to a second, so one quiet second can end just before a batched write lands.
    eventually("the operator to stop writing", || {
        let now = operator.writes();
        let quiet = now == last;
        last = now;
        async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            quiet.then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn metadata_changes_are_made_in_place_and_a_content_change_costs_few_writes() {
    let ns = TestNamespace::new("quiet").await;
    let operator = Operator::start(&ns.name).await;
    ns.apply(&set_yaml("1", "red"));
    ns.apply(&deployment_yaml("web", &[Reads::EnvFrom("app-config")]));
    let v1 = app_config_revision("1");
    let v2 = app_config_revision("2");
    wait_names(&ns, "web", &[&v1]).await;
    settled(&ns, &operator).await;

    // One content change.
    let before = operator.writes_by_operation();
    ns.apply(&set_yaml("2", "red"));
    wait_names(&ns, "web", &[&v2]).await;
    settled(&ns, &operator).await;
    let cost = delta(&operator.writes_by_operation(), &before);
    eprintln!("writes for one content change with one Deployment: {cost:?}");
    assert_eq!(cost.get("create_revision"), Some(&1.0), "{cost:?}");
    assert_eq!(cost.get("patch_workload"), Some(&1.0), "one rollout: {cost:?}");
    // Issue #8's budget: a change that moves N workloads costs at most N + 3 writes besides events
    // (create, patch, status, the new ReplicaSet as owner), and at most one event per set change and
    // one per workload move.
    let events = cost.get("publish_event").copied().unwrap_or(0.0);
    assert!(cost.values().sum::<f64>() - events <= 1.0 + 3.0, "{cost:?}");
    assert!(events <= 2.0, "{cost:?}");

    // Labels and annotations only: every revision is updated in place, nothing rolls.
    let generation = ns.deployment("web").await.metadata.generation;
    ns.apply(&set_yaml("2", "blue"));
    eventually("both revisions relabelled", || async {
        let revisions = ns.revisions("app-config").await;
        let all = revisions.len() == 2
            && revisions.iter().all(|c| {
                c.labels().get("team").map(String::as_str) == Some("blue")
                    && c.annotations().get("owner").map(String::as_str) == Some("blue-oncall")
            });
        all.then_some(())
    })
    .await;
    assert_eq!(
        ns.deployment("web").await.metadata.generation,
        generation,
        "no rollout"
    );
    let revision: ConfigMap = ns.api::<ConfigMap>().get(&v2).await.unwrap();
    assert_eq!(
        revision.labels()["cmset.dev/set"],
        "app-config",
        "cmset's own label stays"
    );

    // A resync of an unchanged world writes nothing.
    settled(&ns, &operator).await;
    let writes = operator.writes();
    stays(
        "no writes while nothing changes",
        Duration::from_secs(3),
        || async { operator.writes() == writes },
    )
    .await;
}
