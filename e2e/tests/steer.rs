//! Steering a rollout on a real API server, through `kubectl cmset`: a paused set moves nothing until
//! it is resumed (an operator restart while paused changes nothing), and with manual promotion each
//! next wave waits for `kubectl cmset promote`. Both are annotations on the set, so its spec (what a
//! GitOps tool owns) never changes.
//!
//! Two Deployments read ConfigMapSet `app-config` by its bare name: `first` in wave 0, `second` in
//! wave 1. The plugin binary is `target/debug/kubectl-cmset` (or `CMSET_PLUGIN_BIN`).

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, ConfigMapSetStatus, RolloutPhase, RolloutStatus};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, plugin_bin, stays};

const SET: &str = "app-config";
const FIRST: &str = "first";
const SECOND: &str = "second";
/// How long "nothing moves" is watched for.
const STILL: Duration = Duration::from_secs(5);

/// `kubectl cmset -n <ns> <args>`, which must succeed; its standard output.
fn cmset(ns: &TestNamespace, args: &[&str]) -> String {
    let out = Command::new(plugin_bin())
        .args(["-n", &ns.name])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the plugin");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "kubectl cmset {}: {stdout}{stderr}",
        args.join(" ")
    );
    stdout
}

/// The set with content `value` and `rollout` (the lines under `spec.rollout`); the revision's name.
fn write_set(ns: &TestNamespace, value: &str, rollout: &str) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 0{rollout}
  template:
    data:
      MODE: "{value}"
"#
    ));
    kustomize_name(SET, &[("MODE", value)])
}

fn deployment(name: &str, wave: i32) -> String {
    wave_deployment_yaml(name, wave, SET)
}

async fn reads(ns: &TestNamespace, name: &str) -> BTreeSet<String> {
    template_names(&ns.deployment(name).await)
}

fn only(name: &str) -> BTreeSet<String> {
    BTreeSet::from([name.to_string()])
}

async fn status(ns: &TestNamespace) -> Option<ConfigMapSetStatus> {
    ns.api::<ConfigMapSet>().get(SET).await.ok()?.status
}

/// Waits until the status records the rollout of `revision` in `phase`; returns it.
async fn wait_phase(ns: &TestNamespace, revision: &str, phase: RolloutPhase) -> RolloutStatus {
    eventually(&format!("the rollout of {revision} is {phase:?}"), || async {
        status(ns)
            .await?
            .rollout
            .filter(|r| r.revision == revision && r.phase == phase)
    })
    .await
}

async fn wait_reads(ns: &TestNamespace, name: &str, revision: &str) {
    eventually(&format!("{name} reads {revision}"), || async {
        (reads(ns, name).await == only(revision)).then_some(())
    })
    .await;
}

async fn ready_reason(ns: &TestNamespace) -> Option<String> {
    Some(status(ns).await?.condition("Ready")?.reason.clone())
}

#[tokio::test]
async fn a_paused_rollout_moves_nothing_until_resumed_even_across_a_restart() {
    let ns = TestNamespace::new("pause").await;
    let mut operator = Operator::start(&ns.name).await;
    let v1 = write_set(&ns, "one", "");
    ns.apply(&deployment(FIRST, 0));
    ns.apply(&deployment(SECOND, 1));
    wait_reads(&ns, SECOND, &v1).await;
    wait_phase(&ns, &v1, RolloutPhase::Complete).await;

    let out = cmset(&ns, &["pause", SET]);
    assert!(out.contains("paused"), "{out}");
    let v2 = write_set(&ns, "two", "");
    let held = wait_phase(&ns, &v2, RolloutPhase::Paused).await;
    assert!(held.held_since.is_some(), "since when: {held:?}");
    assert_eq!(ready_reason(&ns).await.as_deref(), Some("RolloutPaused"));
    let set = ns.api::<ConfigMapSet>().get(SET).await.unwrap();
    assert_eq!(
        set.spec.rollout.as_ref().map(|r| r.paused),
        Some(false),
        "the spec is not touched"
    );
    stays("nothing moves while paused", STILL, || async {
        reads(&ns, FIRST).await == only(&v1) && reads(&ns, SECOND).await == only(&v1)
    })
    .await;

    // A restart reads the pause from the API: still paused, since the same time.
    operator.restart().await;
    stays("nothing moves after a restart either", STILL, || async {
        reads(&ns, FIRST).await == only(&v1)
    })
    .await;
    let after = wait_phase(&ns, &v2, RolloutPhase::Paused).await;
    assert_eq!(after.held_since, held.held_since);
    let why = cmset(&ns, &["why", SET, "deploy/first"]);
    assert!(why.contains("paused"), "{why}");

    let out = cmset(&ns, &["resume", SET]);
    assert!(out.contains("resumed"), "{out}");
    wait_reads(&ns, FIRST, &v2).await;
    wait_reads(&ns, SECOND, &v2).await;
    wait_phase(&ns, &v2, RolloutPhase::Complete).await;
}

#[tokio::test]
async fn manual_promotion_opens_each_next_wave_only_when_promoted() {
    let ns = TestNamespace::new("promote").await;
    let mut operator = Operator::start(&ns.name).await;
    let manual = "\n    promotion: Manual";
    let v1 = write_set(&ns, "one", manual);
    ns.apply(&deployment(FIRST, 0));
    ns.apply(&deployment(SECOND, 1));
    // The first revision's rollout was complete before any workload read it: they opt in at once.
    wait_reads(&ns, SECOND, &v1).await;
    wait_phase(&ns, &v1, RolloutPhase::Complete).await;

    // A new revision: wave 0 moves, wave 1 waits for a promotion, across a restart.
    let v2 = write_set(&ns, "two", manual);
    wait_reads(&ns, FIRST, &v2).await;
    let awaiting = wait_phase(&ns, &v2, RolloutPhase::AwaitingPromotion).await;
    assert_eq!(awaiting.wave, 0);
    assert!(awaiting.held_since.is_some());
    assert_eq!(ready_reason(&ns).await.as_deref(), Some("AwaitingPromotion"));
    operator.restart().await;
    stays("wave 1 waits for a promotion of this revision", STILL, || async {
        reads(&ns, SECOND).await == only(&v1)
    })
    .await;
    let status = cmset(&ns, &["status", SET]);
    assert!(status.contains("awaits promotion"), "{status}");
    let out = cmset(&ns, &["promote", SET]);
    assert!(out.contains("wave 1 opens now"), "{out}");
    wait_reads(&ns, SECOND, &v2).await;
    wait_phase(&ns, &v2, RolloutPhase::Complete).await;
    let set = ns.api::<ConfigMapSet>().get(SET).await.unwrap();
    // It names the rollout it promotes, by its start: a later rollout of v2 needs its own.
    let started = set
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| r.started_at.as_ref())
        .map(|t| t.0.to_string())
        .expect("the rollout's start is recorded");
    assert_eq!(
        set.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("cmset.dev/promoted"))
            .map(String::as_str),
        Some(format!("{v2}/0@{started}").as_str()),
        "the promotion is recorded on the set, outside its spec"
    );
}
