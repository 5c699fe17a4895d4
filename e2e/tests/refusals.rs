//! A refusal is not a removal (issue 25, item 5). The failure seen on a real cluster: the operator's
//! right to list Deployments was refused for 40 s (a Role replaced) and then restored, and wave 1 of a
//! rollout in waves received a revision that had never become healthy in wave 0: the refused kind had
//! been dropped from the index, the set planned its rollout without those workloads, and the rollout
//! went on.
//!
//! Here the operator runs under an identity of the test's own (a ServiceAccount of the test namespace
//! with a Role holding the shipped rules; see `cmset_e2e::identity`), through the fault proxy. While
//! wave 0 of a two-wave rollout is not healthy (its Deployment paused), the Role is replaced by one
//! without Deployments and the operator's watches are ended with 410 Gone, so that it must list
//! Deployments again and is refused (a watch open before the Role changed would go on streaming, and
//! only end by itself minutes later). For 30 s nothing moves and the set says why; the Role is
//! restored, and the rollout goes on only once wave 0 is healthy.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cmset_e2e::cmset_api::{ConfigMapSet, ConfigMapSetStatus, RolloutPhase, WorkloadState};
use cmset_e2e::fault_proxy::FaultProxy;
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::identity::{Identity, shipped_rules, without};
use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name};

const SET: &str = "app-config";
const FIRST: &str = "first";
const SECOND: &str = "second";
/// How long the right to list Deployments stays revoked.
const REVOKED_FOR: Duration = Duration::from_secs(30);
/// Rollouts on the slow local cluster.
const WAIT: Duration = Duration::from_secs(90);

fn set_yaml(version: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata: {{name: {SET}}}
spec:
  rollout: {{stabilizationSeconds: 2}}
  template:
    data: {{APP_VERSION: "{version}"}}
"#
    )
}

fn revision(version: &str) -> String {
    kustomize_name(SET, &[("APP_VERSION", version)])
}

/// An opted-in Deployment of one replica reading the set, in `wave` (none: wave 0): the suite's
/// shared fixture.
fn deployment_yaml(name: &str, wave: Option<i32>) -> String {
    wave_deployment_yaml(name, wave.unwrap_or(0), SET)
}

/// Whether the Deployment has rolled out its current template (as `kubectl rollout status` decides).
fn rolled_out(d: &Deployment) -> bool {
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = d.status.as_ref() else {
        return false;
    };
    status.observed_generation.is_some()
        && status.observed_generation >= d.metadata.generation
        && status.updated_replicas.unwrap_or(0) == want
        && status.replicas.unwrap_or(0) == want
        && status.available_replicas.unwrap_or(0) == want
}

fn only(name: &str) -> BTreeSet<String> {
    BTreeSet::from([name.to_string()])
}

async fn status(ns: &TestNamespace) -> ConfigMapSetStatus {
    ns.api::<ConfigMapSet>()
        .get(SET)
        .await
        .expect("get the set")
        .status
        .unwrap_or_default()
}

/// The Ready condition: status, reason, message.
fn ready(status: &ConfigMapSetStatus) -> Option<(String, String, String)> {
    let c = status.condition("Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Whether both Deployments run `revision`, rolled out, and the set says its rollout is Complete.
async fn settled(ns: &TestNamespace, revision: &str) -> bool {
    let status = status(ns).await;
    let complete = status
        .rollout
        .as_ref()
        .is_some_and(|r| r.revision == revision && r.phase == RolloutPhase::Complete);
    let mut on_it = complete;
    for name in [FIRST, SECOND] {
        let d = ns.deployment(name).await;
        on_it &= template_names(&d) == only(revision) && rolled_out(&d);
    }
    on_it
}

/// What the test looks at, for failure messages.
async fn describe(ns: &TestNamespace) -> String {
    let mut out = String::new();
    for name in [FIRST, SECOND] {
        let d = ns.deployment(name).await;
        out += &format!(
            "\n  {name}: reads {:?}, rolled out: {}",
            template_names(&d),
            rolled_out(&d)
        );
    }
    out + &format!("\n  set status: {:?}", status(ns).await)
}

#[tokio::test]
async fn revoking_and_restoring_the_right_to_list_deployments_mid_rollout_opens_no_wave() {
    let ns = TestNamespace::new("refusal").await;
    let rules = shipped_rules("rbac");
    let identity = Identity::create(&ns, "cmset-operator", rules.clone()).await;
    assert!(identity.can("list", "deployments"));
    let proxy = FaultProxy::start(&identity.kubeconfig).await;
    // A Role in the test namespace cannot grant the cluster-scoped ChangeWindows, and windows fail
    // closed: this operator does without them, explicitly.
    let _operator =
        Operator::start_via(&ns.name, &["--change-windows=false"], proxy.kubeconfig(&ns.name)).await;

    let (v1, v2) = (revision("1"), revision("2"));
    ns.apply(&set_yaml("1"));
    ns.apply(&deployment_yaml(FIRST, None));
    ns.apply(&deployment_yaml(SECOND, Some(1)));
    eventually_within(WAIT, "both waves on the first revision", || async {
        settled(&ns, &v1).await.then_some(())
    })
    .await;

    // Wave 0 will not become healthy on the new revision until the test lets it.
    ns.kubectl(&["rollout", "pause", &format!("deployment/{FIRST}")]);
    ns.apply(&set_yaml("2"));
    eventually_within(WAIT, "wave 0 moved, wave 1 waiting", || async {
        let status = status(&ns).await;
        let in_wave_0 = status
            .rollout
            .as_ref()
            .is_some_and(|r| r.revision == v2 && r.phase == RolloutPhase::Progressing && r.wave == 0);
        let waiting = status
            .workloads
            .iter()
            .any(|w| w.name == SECOND && w.state == WorkloadState::Waiting);
        let first = template_names(&ns.deployment(FIRST).await);
        (in_wave_0 && waiting && first == only(&v2)).then_some(())
    })
    .await;

    // The Role is replaced by one without Deployments; the watches end, and Deployments must be listed
    // again.
    identity.set_rules(without(&rules, "deployments")).await;
    eventually_within(WAIT, "the right to list Deployments revoked", || async {
        (!identity.can("list", "deployments")).then_some(())
    })
    .await;
    let revoked = Instant::now();
    assert!(proxy.expire_watches() > 0, "the operator's watches were open");

    // The set holds, and says why.
    let (_, _, message) = eventually_within(WAIT, "the set saying why it holds", || async {
        ready(&status(&ns).await)
            .filter(|(status, reason, _)| status == "Unknown" && reason == "WorkloadsUnobserved")
    })
    .await;
    eprintln!("while refused, Ready is Unknown: {message}");
    assert!(
        message.contains("Deployment") && message.contains("403"),
        "the message names the kind and the refusal: {message}"
    );
    // Nothing moves while the right is revoked: wave 1 keeps the old revision, the rollout stays in
    // wave 0 and the status still lists both Deployments.
    while revoked.elapsed() < REVOKED_FOR {
        let second = template_names(&ns.deployment(SECOND).await);
        assert_eq!(
            second,
            only(&v1),
            "wave 1 moved while refused:{}",
            describe(&ns).await
        );
        let status = status(&ns).await;
        let rollout = status.rollout.as_ref().expect("the rollout is recorded");
        assert_eq!(
            (rollout.revision.as_str(), rollout.phase, rollout.wave),
            (v2.as_str(), RolloutPhase::Progressing, 0),
            "the rollout moved on while refused:{}",
            describe(&ns).await
        );
        let listed: BTreeSet<&str> = status.workloads.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(
            listed,
            BTreeSet::from([FIRST, SECOND]),
            "a workload left the status"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Restored: the set plans again from a fresh list, and wave 0 is still not healthy.
    identity.set_rules(rules.clone()).await;
    eventually_within(WAIT, "the set planning again", || async {
        ready(&status(&ns).await).filter(|(status, ..)| status != "Unknown")
    })
    .await;
    let restored = Instant::now();
    while restored.elapsed() < Duration::from_secs(5) {
        let second = template_names(&ns.deployment(SECOND).await);
        assert_eq!(
            second,
            only(&v1),
            "wave 1 moved once restored, before wave 0 was healthy"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Wave 0 rolls out; only then does wave 1 move, and the rollout completes.
    ns.kubectl(&["rollout", "resume", &format!("deployment/{FIRST}")]);
    let mut first_rolled_out = false;
    let deadline = Instant::now() + WAIT;
    while !settled(&ns, &v2).await {
        // The first before the second: the second never moves before the first is seen rolled out.
        first_rolled_out |= {
            let first = ns.deployment(FIRST).await;
            template_names(&first) == only(&v2) && rolled_out(&first)
        };
        let second = template_names(&ns.deployment(SECOND).await);
        assert!(
            second == only(&v1) || first_rolled_out,
            "wave 1 moved before wave 0 had rolled out:{}",
            describe(&ns).await
        );
        assert!(
            Instant::now() < deadline,
            "timed out waiting for the rollout to complete:{}",
            describe(&ns).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready = ready(&status(&ns).await).expect("a Ready condition");
    assert_eq!(ready.0, "True", "the set is Ready at the end: {ready:?}");
}
