//! A change window holds moves, not judgement, and makes no rollout by itself (issue 36), on a real API
//! server:
//! - a canary already on a bad revision when a cluster Deny window opens fails at the set's progress
//!   deadline and is rolled back while the window is still open (its Deployment's own deadline is an
//!   hour away, so only cmset's clock can fail it);
//! - a set without `spec.rollout` whose reader runs its current revision gets no `status.rollout`, no
//!   rollout Event and no notification when a window starts and when it ends.
//!
//! Windows are cron schedules with minute precision, so a window "open for the next 40 s" opens at the
//! start of the current minute and lasts until 40 s from now. Every ChangeWindow a test creates selects
//! its own namespace only (the suite's other tests run beside it), and is deleted at the end.

use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::{ChangeWindow, RolloutPhase};
use cmset_e2e::fixtures::wave_deployment_yaml;
use cmset_e2e::k8s_openapi::api::core::v1::Node;
use cmset_e2e::k8s_openapi::jiff::Timestamp;
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::DeleteParams;
use cmset_e2e::receiver::Receiver;
use cmset_e2e::rollout_wait::{only, reads, status, wait_phase, wait_reads};
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, plugin_bin, stays};

const SET: &str = "app-config";
const FIRST: &str = "first";
const SECOND: &str = "second";
const WAIT: Duration = Duration::from_secs(150);
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
const FAKE_NODE: &str = "cmset-fake-node";
/// The set's progress deadline in the failing-canary test: long enough to see the window hold the
/// rollout first, far shorter than the window.
const DEADLINE: i64 = 40;

/// `kubectl cmset -n <ns> <args>`: its exit success and output.
fn cmset(ns: &TestNamespace, args: &[&str]) -> (bool, String) {
    let out = Command::new(plugin_bin())
        .args(["-n", &ns.name])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the plugin");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A UTC cron schedule and duration for a window open from the start of this minute until `seconds`
/// from now; and when it closes.
fn open_for(seconds: i64) -> (String, String, Timestamp) {
    let now = Timestamp::now();
    let minute = now.as_second() - now.as_second().rem_euclid(60);
    let start = Timestamp::from_second(minute).unwrap();
    let end = Timestamp::from_second(now.as_second() + seconds).unwrap();
    let civil = start.to_zoned(cmset_e2e::k8s_openapi::jiff::tz::TimeZone::UTC);
    let schedule = format!("{} {} * * *", civil.minute(), civil.hour());
    let duration = format!("{}s", end.as_second() - minute);
    (schedule, duration, end)
}

/// A cluster ChangeWindow named after the namespace, selecting it only, with one Deny window open for
/// the next `seconds`; its name and when the window closes.
fn deny_for(ns: &TestNamespace, seconds: i64) -> (String, Timestamp) {
    let (schedule, duration, closes) = open_for(seconds);
    let name = format!("{}-freeze", ns.name);
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ChangeWindow
metadata:
  name: {name}
spec:
  namespaces: ["{}"]
  windows:
    - kind: Deny
      name: holidays
      schedule: "{schedule}"
      duration: {duration}
"#,
        ns.name
    ));
    (name, closes)
}

async fn delete_change_window(ns: &TestNamespace, name: &str) {
    let api: Api<ChangeWindow> = Api::all(ns.client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// The reasons of the Events about set `set`.
fn event_reasons(ns: &TestNamespace, set: &str) -> Vec<String> {
    let out = ns.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={set}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    out.lines().map(str::to_string).collect()
}

/// The set `SET` with `data`, and `rollout` (lines under `spec.rollout`).
fn set_yaml(data: &[(&str, &str)], rollout: &str) -> String {
    let entries: String = data
        .iter()
        .map(|(k, v)| format!("\n      {k}: {}", serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:{rollout}
  template:
    data:{entries}
"#
    )
}

#[tokio::test]
async fn a_failing_canary_is_rolled_back_inside_a_deny_window_at_its_deadline() {
    let ns = TestNamespace::new("winjudge").await;
    let node = Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await;
    if !matches!(node, Ok(Some(_))) {
        eprintln!("SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE}");
        return;
    }
    let _operator = Operator::start(&ns.name).await;
    let rollout = format!(
        "\n    stabilizationSeconds: 0\n    progressDeadlineSeconds: {DEADLINE}\n    autoRollback: true"
    );
    let good_data = [("MODE", "one")];
    let good = kustomize_name(SET, &good_data);
    ns.apply(&set_yaml(&good_data, &rollout));
    // Their own progress deadline is an hour: only cmset's deadline can fail the canary in time.
    ns.apply(&wave_deployment_yaml(FIRST, 0, SET));
    ns.apply(&wave_deployment_yaml(SECOND, 1, SET));
    wait_reads(&ns, SECOND, &good).await;
    wait_phase(&ns, SET, &good, RolloutPhase::Complete).await;

    // A bad revision: the canary moves to it, and never becomes ready.
    let bad_data = [("MODE", "two"), (FAIL_KEY, "true")];
    let bad = kustomize_name(SET, &bad_data);
    ns.apply(&set_yaml(&bad_data, &rollout));
    wait_reads(&ns, FIRST, &bad).await;
    // Then the freeze begins, for ten minutes.
    let (freeze, closes) = deny_for(&ns, 600);
    let held = wait_phase(&ns, SET, &bad, RolloutPhase::Waiting).await;
    assert_eq!(held.reason.as_deref(), Some("holidays"), "{held:?}");
    assert!(held.held_since.is_some(), "since when it is held: {held:?}");
    let moved_at = status(&ns, SET)
        .await
        .and_then(|s| s.workloads.into_iter().find(|w| w.name == FIRST))
        .and_then(|w| w.moved_at)
        .expect("when the canary moved")
        .0;

    let failed = wait_phase(&ns, SET, &bad, RolloutPhase::Failed).await;
    let failed_at = Timestamp::now();
    assert!(
        failed_at < closes,
        "failed while the window is still open (until {closes}), at {failed_at}"
    );
    assert!(
        failed_at.as_second() >= moved_at.as_second() + DEADLINE,
        "not before its deadline: moved at {moved_at}, failed at {failed_at}"
    );
    let message = failed.message.clone().unwrap_or_default();
    assert!(
        message.contains("progressDeadlineSeconds"),
        "failed by cmset's deadline: {failed:?}"
    );
    wait_reads(&ns, FIRST, &good).await;
    assert!(
        Timestamp::now() < closes,
        "rolled back while the window is still open (until {closes})"
    );
    assert_eq!(reads(&ns, SECOND).await, only(&good), "wave 1 never sees it");
    let status = status(&ns, SET).await.expect("a status");
    assert!(
        status.history.iter().any(|h| h.name == bad && h.failed),
        "the bad revision is marked failed: {:?}",
        status.history
    );
    let reasons = event_reasons(&ns, SET);
    assert!(
        reasons.iter().any(|r| r == "RolloutFailed"),
        "a RolloutFailed Event: {reasons:?}"
    );
    delete_change_window(&ns, &freeze).await;
}

/// Set `SET` without `spec.rollout`, subscribed to every rollout trigger a set without it can hear (and
/// to failure and rollback, which a phantom rollout could fake), through webhook `hook`.
fn plain_set_yaml(value: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
  annotations:
    notifications.cmset.dev/subscribe.on-rollout-started.hook: ""
    notifications.cmset.dev/subscribe.on-rollout-completed.hook: ""
    notifications.cmset.dev/subscribe.on-rollout-failed.hook: ""
    notifications.cmset.dev/subscribe.on-rolled-back.hook: ""
spec:
  template:
    data:
      MODE: "{value}"
"#
    )
}

/// The reasons of the rollout's Events (see `cmset_core::rollout::plan::ROLLOUT_REASONS`, and failure).
const ROLLOUT_REASONS: [&str; 5] = [
    "RolloutStarted",
    "RolloutWaiting",
    "RolloutResumed",
    "RolloutComplete",
    "RolloutFailed",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_starting_and_ending_over_a_set_without_a_rollout_spec_sends_nothing_and_records_no_rollout()
{
    let ns = TestNamespace::new("winphantom").await;
    let receiver = Receiver::default();
    let port = receiver.start().await;
    ns.apply(&format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: cmset-notifications
data:
  service.webhook.hook: |
    url: http://127.0.0.1:{port}/hook
"#
    ));
    let notifications_namespace = format!("--notifications-namespace={}", ns.name);
    let _operator = Operator::start_with(&ns.name, &[&notifications_namespace]).await;
    ns.apply(&plain_set_yaml("one"));
    ns.apply(&wave_deployment_yaml(FIRST, 0, SET));
    let current = kustomize_name(SET, &[("MODE", "one")]);
    wait_reads(&ns, FIRST, &current).await;
    eventually_within(
        WAIT,
        "the set ready, its subscriptions recorded, and what it announces heard",
        || async {
            let status = status(&ns, SET).await?;
            let recorded = status.notifications.as_ref().map_or(0, Vec::len);
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (ready && recorded > 0 && status.rollout.is_none()).then_some(())
        },
    )
    .await;
    // Whatever the revision's arrival announced is sent by now: from here on nothing may be.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let heard_before = receiver.heard();
    let rollout_events = || {
        event_reasons(&ns, SET)
            .into_iter()
            .filter(|r| ROLLOUT_REASONS.contains(&r.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(rollout_events(), Vec::<String>::new(), "nothing moved in waves");

    // The freeze starts: the set is held, and has nothing to move.
    let (freeze, closes) = deny_for(&ns, 40);
    let (ok, out) = cmset(&ns, &["windows", SET]);
    assert!(ok && out.contains("held by"), "the window holds the set: {out}");
    stays(
        "no rollout record while the window holds",
        Duration::from_secs(10),
        || async { status(&ns, SET).await.is_some_and(|s| s.rollout.is_none()) },
    )
    .await;

    // The freeze ends, and the set is looked at again.
    while Timestamp::now() < closes {
        assert!(
            status(&ns, SET).await.is_some_and(|s| s.rollout.is_none()),
            "no rollout record while the window holds"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (ok, out) = cmset(&ns, &["windows", SET]);
    assert!(ok && !out.contains("held by"), "the window is over: {out}");
    stays(
        "no rollout record after the window either",
        Duration::from_secs(10),
        || async { status(&ns, SET).await.is_some_and(|s| s.rollout.is_none()) },
    )
    .await;
    delete_change_window(&ns, &freeze).await;

    let heard = receiver.heard();
    assert_eq!(
        heard.len(),
        heard_before.len(),
        "no notification for a window over a set with nothing to move: {:?}",
        &heard[heard_before.len()..]
    );
    assert_eq!(rollout_events(), Vec::<String>::new(), "no rollout Event");
    assert_eq!(reads(&ns, FIRST).await, only(&current));
}
