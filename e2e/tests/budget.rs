//! The cluster-wide rollout budget on a real API server: 50 Deployments read one ConfigMapSet and the
//! operator runs with `--max-moving-workloads 5`. A change of the set rolls all 50 out, and a watch
//! of the Deployments (the API's view, not cmset's own count) never sees more than 5 of them on the new
//! revision and not yet rolled out; the others show `Waiting` with the budget's reason meanwhile, and
//! every one of them arrives.
//!
//! The budget counts moves, not sickness: four opted-in Deployments that were broken from the start
//! (cmset never moved them) take no slot, so a budgeted rollout of sixteen others goes through.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, WorkloadState};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::watcher;

const SET: &str = "app-config";
const WORKLOADS: usize = 50;
const CAP: usize = 5;

fn write_set(ns: &TestNamespace, value: &str) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  template:
    data:
      MODE: "{value}"
"#
    ));
    kustomize_name(SET, &[("MODE", value)])
}

fn deployments() -> String {
    (0..WORKLOADS)
        .map(|i| {
            format!(
                r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i:02}
  labels:
    cmset.dev/enabled: "true"
spec:
  replicas: 1
  selector:
    matchLabels: {{app: app-{i:02}}}
  template:
    metadata:
      labels: {{app: app-{i:02}}}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef: {{name: {SET}}}
"#
            )
        })
        .collect::<Vec<_>>()
        .join("---")
}

/// Whether `d`'s rollout is complete by `kubectl rollout status`'s rules: its controller saw its
/// template, every replica is updated and available, and no old one is left.
fn rolled_out(d: &Deployment) -> bool {
    let wanted = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = &d.status else {
        return false;
    };
    status.observed_generation >= d.metadata.generation
        && status.updated_replicas.unwrap_or(0) >= wanted
        && status.replicas.unwrap_or(0) <= status.updated_replicas.unwrap_or(0)
        && status.available_replicas.unwrap_or(0) >= status.updated_replicas.unwrap_or(0)
}

#[tokio::test]
async fn fifty_workloads_under_a_budget_of_five_never_have_more_than_five_moving() {
    let ns = TestNamespace::new("budget").await;
    let cap = CAP.to_string();
    let _operator = Operator::start_with(&ns.name, &["--max-moving-workloads", &cap]).await;
    let v1 = write_set(&ns, "one");
    ns.apply(&deployments());
    eventually_within(
        Duration::from_secs(180),
        "every Deployment runs v1, rolled out",
        || async {
            let list = ns.api::<Deployment>().list(&Default::default()).await.ok()?;
            let done = list
                .items
                .iter()
                .filter(|d| template_names(d).contains(&v1) && rolled_out(d))
                .count();
            (done == WORKLOADS).then_some(())
        },
    )
    .await;

    // Watch the Deployments from before the change: every event updates the count of those on the new
    // revision and not rolled out yet.
    let v2 = kustomize_name(SET, &[("MODE", "two")]);
    let mut events = watcher(ns.api::<Deployment>(), watcher::Config::default()).boxed();
    let mut seen: BTreeMap<String, Deployment> = BTreeMap::new();
    let observe = |seen: &mut BTreeMap<String, Deployment>, event: watcher::Event<Deployment>| match event {
        watcher::Event::Apply(d) | watcher::Event::InitApply(d) => {
            seen.insert(d.metadata.name.clone().unwrap_or_default(), d);
        }
        watcher::Event::Delete(d) => {
            seen.remove(&d.metadata.name.clone().unwrap_or_default());
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    };
    while seen.len() < WORKLOADS {
        if let Ok(event) = events.next().await.expect("the watch runs") {
            observe(&mut seen, event);
        }
    }
    assert_eq!(write_set(&ns, "two"), v2);

    let (mut most, mut saw_waiting) = (0, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let moving = seen
            .values()
            .filter(|d| template_names(d).contains(&v2) && !rolled_out(d))
            .count();
        most = most.max(moving);
        assert!(
            moving <= CAP,
            "{moving} Deployments moving at once, with a budget of {CAP}"
        );
        let arrived = seen
            .values()
            .filter(|d| template_names(d).contains(&v2) && rolled_out(d))
            .count();
        if arrived == WORKLOADS {
            break;
        }
        if !saw_waiting && let Ok(set) = ns.api::<ConfigMapSet>().get(SET).await {
            saw_waiting = set.status.iter().flat_map(|s| s.workloads.iter()).any(|w| {
                w.state == WorkloadState::Waiting
                    && w.message.as_deref().is_some_and(|m| m.contains("rollout budget"))
            });
        }
        let next = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("only {arrived} of {WORKLOADS} Deployments arrived on {v2} in 300 s"));
        if let Ok(event) = next.expect("the watch runs") {
            observe(&mut seen, event);
        }
    }
    assert!(
        most >= 2,
        "the budget was never used: at most {most} moving at once"
    );
    assert!(
        saw_waiting,
        "no workload was ever reported Waiting for the budget"
    );
}

/// An opted-in Deployment of wave 0 reading `reads`, and with `broken` a ConfigMap whose key the fake
/// node answers with pods that never become ready.
fn reader(name: &str, reads: &str, broken: bool) -> String {
    let yaml = wave_deployment_yaml(name, 0, reads);
    if !broken {
        return yaml;
    }
    let reference = format!("- configMapRef: {{name: {reads}}}");
    let failing = format!("{reference}\n            - configMapRef: {{name: broken-config}}");
    assert!(yaml.contains(&reference), "the fixture reads {reads} by envFrom");
    yaml.replace(&reference, &failing)
}

/// `Some` once the sixteen healthy readers run `revision`, rolled out.
async fn sixteen_on(ns: &TestNamespace, revision: &str) -> Option<()> {
    let list = ns.api::<Deployment>().list(&Default::default()).await.ok()?;
    let done = list
        .items
        .iter()
        .filter(|d| d.metadata.name.as_deref().is_some_and(|n| n.starts_with("app-")))
        .filter(|d| template_names(d).contains(revision) && rolled_out(d))
        .count();
    (done == 16).then_some(())
}

#[tokio::test]
async fn four_broken_deployments_cmset_never_moved_do_not_stop_a_budgeted_rollout_of_sixteen_others() {
    let ns = TestNamespace::new("budget-sick").await;
    let _operator = Operator::start_with(&ns.name, &["--max-moving-workloads", "4"]).await;
    let v1 = write_set(&ns, "one");
    // Another set that never changes, read by the broken ones: they are readers cmset tracks.
    ns.apply(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: other-config
spec:
  template:
    data:
      KEEP: "same"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: broken-config
data:
  CMSET_FAKE_NODE_FAIL: "never ready"
"#,
    );
    let broken: Vec<String> = (0..4)
        .map(|i| reader(&format!("broken-{i}"), "other-config", true))
        .collect();
    ns.apply(&broken.join("---"));
    let healthy: Vec<String> = (0..16)
        .map(|i| reader(&format!("app-{i:02}"), SET, false))
        .collect();
    ns.apply(&healthy.join("---"));
    eventually_within(Duration::from_secs(180), "the sixteen run v1", || {
        sixteen_on(&ns, &v1)
    })
    .await;
    let broken_rolling = ns
        .api::<Deployment>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|d| {
            d.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("broken-"))
        })
        .filter(|d| !rolled_out(d))
        .count();
    assert_eq!(broken_rolling, 4, "the four never become ready");

    let v2 = write_set(&ns, "two");
    eventually_within(
        Duration::from_secs(120),
        "the sixteen arrive on v2, past the four broken ones",
        || sixteen_on(&ns, &v2),
    )
    .await;
}
