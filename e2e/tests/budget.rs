//! The cluster-wide rollout budget on a real API server: 50 Deployments read one ConfigMapSet and the
//! operator runs with `--max-moving-workloads 5`. A change of the set rolls all 50 out, and a watch
//! of the Deployments (the API's view, not cmset's own count) never sees more than 5 of them on the new
//! revision and not yet rolled out; the others show `Waiting` with the budget's reason meanwhile, and
//! every one of them arrives.
//!
//! The budget holds across a leader frozen mid-rollout: two replicas, twelve Deployments, a budget of
//! three; the leader is cut off from the API server (a proxy that stops passing bytes) after the first
//! ones arrived, the standby takes over, and still no more than three are ever seen moving at once,
//! every one arrives, and the frozen leader's requests held in the proxy change nothing once it thaws.
//!
//! The budget counts moves, not sickness: four opted-in Deployments that were broken from the start
//! (cmset never moved them) take no slot, so a budgeted rollout of sixteen others goes through.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, WorkloadState};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::proxy::{Proxy, kubeconfig_via, upstream_of};
use cmset_e2e::{Operator, TestNamespace, eventually, eventually_within, kustomize_name, stays};
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

fn deployments(count: usize) -> String {
    (0..count)
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

/// Waits until each of the `count` Deployments runs `revision`, rolled out.
async fn all_rolled_out_on(ns: &TestNamespace, revision: &str, count: usize) {
    eventually_within(
        Duration::from_secs(180),
        &format!("every Deployment runs {revision}, rolled out"),
        || async {
            let list = ns.api::<Deployment>().list(&Default::default()).await.ok()?;
            let done = list
                .items
                .iter()
                .filter(|d| template_names(d).contains(revision) && rolled_out(d))
                .count();
            (done == count).then_some(())
        },
    )
    .await;
}

/// The API's view of the namespace's Deployments, kept by a watch of the test's own: what a budget is
/// judged by, never cmset's own count.
struct ApiView {
    events: futures::stream::BoxStream<'static, Result<watcher::Event<Deployment>, watcher::Error>>,
    seen: BTreeMap<String, Deployment>,
}

impl ApiView {
    /// Watches `ns`'s Deployments, returning once `count` of them have been seen.
    async fn of(ns: &TestNamespace, count: usize) -> Self {
        let mut view = Self {
            events: watcher(ns.api::<Deployment>(), watcher::Config::default()).boxed(),
            seen: BTreeMap::new(),
        };
        while view.seen.len() < count {
            if let Ok(event) = view.events.next().await.expect("the watch runs") {
                view.observe(event);
            }
        }
        view
    }

    fn observe(&mut self, event: watcher::Event<Deployment>) {
        match event {
            watcher::Event::Apply(d) | watcher::Event::InitApply(d) => {
                self.seen.insert(d.metadata.name.clone().unwrap_or_default(), d);
            }
            watcher::Event::Delete(d) => {
                self.seen.remove(&d.metadata.name.clone().unwrap_or_default());
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }

    /// Of the Deployments on `revision`: how many are still moving (not rolled out), how many arrived.
    fn on(&self, revision: &str) -> (usize, usize) {
        let on: Vec<&Deployment> = self
            .seen
            .values()
            .filter(|d| template_names(d).contains(revision))
            .collect();
        let arrived = on.iter().filter(|d| rolled_out(d)).count();
        (on.len() - arrived, arrived)
    }

    /// Takes in the next event; past `deadline` the test fails, saying how many of `count` arrived.
    async fn next(&mut self, deadline: tokio::time::Instant, revision: &str, count: usize) {
        let next = tokio::time::timeout_at(deadline, self.events.next())
            .await
            .unwrap_or_else(|_| {
                let (_, arrived) = self.on(revision);
                panic!("only {arrived} of {count} Deployments arrived on {revision} in time")
            });
        if let Ok(event) = next.expect("the watch runs") {
            self.observe(event);
        }
    }
}

#[tokio::test]
async fn fifty_workloads_under_a_budget_of_five_never_have_more_than_five_moving() {
    let ns = TestNamespace::new("budget").await;
    let cap = CAP.to_string();
    let _operator = Operator::start_with(&ns.name, &["--max-moving-workloads", &cap]).await;
    let v1 = write_set(&ns, "one");
    ns.apply(&deployments(WORKLOADS));
    all_rolled_out_on(&ns, &v1, WORKLOADS).await;

    // Watch the Deployments from before the change: every event updates the count of those on the new
    // revision and not rolled out yet.
    let v2 = kustomize_name(SET, &[("MODE", "two")]);
    let mut view = ApiView::of(&ns, WORKLOADS).await;
    assert_eq!(write_set(&ns, "two"), v2);

    let (mut most, mut saw_waiting) = (0, false);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let (moving, arrived) = view.on(&v2);
        most = most.max(moving);
        assert!(
            moving <= CAP,
            "{moving} Deployments moving at once, with a budget of {CAP}"
        );
        if arrived == WORKLOADS {
            break;
        }
        if !saw_waiting && let Ok(set) = ns.api::<ConfigMapSet>().get(SET).await {
            saw_waiting = set.status.iter().flat_map(|s| s.workloads.iter()).any(|w| {
                w.state == WorkloadState::Waiting
                    && w.message.as_deref().is_some_and(|m| m.contains("rollout budget"))
            });
        }
        view.next(deadline, &v2, WORKLOADS).await;
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

/// A replica of the test's pair (see `TestNamespace::pair_replica_args`) with a budget of `cap`.
fn budgeted_replica(ns: &TestNamespace, replica: &str, cap: usize) -> Vec<String> {
    let mut args = vec!["--max-moving-workloads".to_string(), cap.to_string()];
    args.extend(ns.pair_replica_args(replica));
    args
}

#[tokio::test]
async fn the_budget_holds_across_a_leader_frozen_mid_rollout() {
    const COUNT: usize = 12;
    const CAP: usize = 3;
    let ns = TestNamespace::new("budget-failover").await;
    let kubeconfig = cmset_e2e::operator_kubeconfig();
    let proxy = Proxy::start(upstream_of(&kubeconfig)).await;
    let a_args = budgeted_replica(&ns, "a", CAP);
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start_via(&ns.name, &a_args, kubeconfig_via(&kubeconfig, &proxy, &ns.name)).await;
    eventually("replica a to lead", || async {
        (a.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
    let b_args = budgeted_replica(&ns, "b", CAP);
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let b = Operator::start_without_webhook(&ns.name, &b_args).await;
    let v1 = write_set(&ns, "one");
    ns.apply(&deployments(COUNT));
    all_rolled_out_on(&ns, &v1, COUNT).await;

    // The API's view of the Deployments, from before the change on.
    let v2 = kustomize_name(SET, &[("MODE", "two")]);
    let mut view = ApiView::of(&ns, COUNT).await;
    assert_eq!(write_set(&ns, "two"), v2);

    // Every event: no more than CAP moving. Once the first CAP have arrived, a is frozen mid-rollout.
    let (mut most, mut frozen_at) = (0, None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let (moving, arrived) = view.on(&v2);
        most = most.max(moving);
        assert!(
            moving <= CAP,
            "{moving} Deployments moving at once, with a budget of {CAP} (frozen with {frozen_at:?} arrived)"
        );
        if arrived == COUNT {
            break;
        }
        if frozen_at.is_none() && arrived >= CAP {
            proxy.freeze();
            frozen_at = Some(arrived);
        }
        view.next(deadline, &v2, COUNT).await;
    }
    let frozen_at = frozen_at.expect("the leader was frozen");
    assert!(
        frozen_at < COUNT,
        "frozen mid-rollout: {frozen_at} of {COUNT} had arrived"
    );
    assert!(
        a.wait_exit(Duration::from_secs(30)).await.is_some(),
        "the frozen leader stepped down and exited"
    );
    assert_eq!(b.metric("cmset_leader"), 1.0, "the standby took over");
    eprintln!(
        "frozen with {frozen_at} of {COUNT} arrived; at most {most} moving at once; the new leader sent {} writes",
        b.writes()
    );

    // Thawed, whatever the frozen leader had sent and the proxy held reaches the API server now: it
    // changes no Deployment's spec and not the set's status. Taken once the new leader is done (old
    // pods gone, its last status written: three quiet seconds, longer than its batch window).
    let snapshot = || async {
        let generations: BTreeMap<String, Option<i64>> = ns
            .api::<Deployment>()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|d| (d.metadata.name.clone().unwrap_or_default(), d.metadata.generation))
            .collect();
        (generations, ns.set(SET).await.status)
    };
    let mut settled = snapshot().await;
    let settle_by = tokio::time::Instant::now() + cmset_e2e::CONVERGE;
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = snapshot().await;
        if now == settled {
            break;
        }
        assert!(
            tokio::time::Instant::now() < settle_by,
            "the new leader keeps writing"
        );
        settled = now;
    }
    proxy.thaw();
    stays(
        "no Deployment moves and the set's status stays",
        Duration::from_secs(5),
        || async { snapshot().await == settled },
    )
    .await;
    ns.drop_pair_lease().await;
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
