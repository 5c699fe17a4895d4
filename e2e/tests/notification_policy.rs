//! The admin's policy for notifications on a real API server (issue 36):
//! - a receiver that answers 503 for 75 s hears of a failed rollout exactly once when it is back,
//!   since a failure that may pass is retried (recorded `Retrying`) until it lands;
//! - an annotation naming 200 Slack channels through the admin's bot token sends at most 10 messages
//!   (in fact none: more than `--notifications-max-recipients` refuses the set's subscriptions), and
//!   a Warning Event on the set says why.
//!
//! The operator reads its notification configuration from the test's namespace
//! (`--notifications-namespace`), so tests running at once do not hear each other.

use std::time::{Duration, Instant};

use cmset_e2e::cmset_api::{ConfigMapSet, NotificationResult, RolloutPhase};
use cmset_e2e::fixtures::wave_deployment_yaml;
use cmset_e2e::k8s_openapi::api::core::v1::{Event, Node};
use cmset_e2e::kube::Api;
use cmset_e2e::receiver::{Heard, Receiver};
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, stays};

const WAIT: Duration = Duration::from_secs(120);
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
const FAKE_NODE: &str = "cmset-fake-node";
const SLACK_TOKEN: &str = "xoxb-e2e-policy-token";

fn configuration(port: u16) -> String {
    format!(
        r#"
apiVersion: v1
kind: Secret
metadata:
  name: cmset-notifications-secret
stringData:
  slack-token: {SLACK_TOKEN}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: cmset-notifications
data:
  service.webhook.hook: |
    url: http://127.0.0.1:{port}/hook
    retries: 1
    timeout: 2s
  service.slack: |
    token: $slack-token
    apiURL: http://127.0.0.1:{port}/slack/chat.postMessage
"#
    )
}

fn failing_set_yaml(name: &str, data: &[(&str, &str)]) -> String {
    let entries: String = data
        .iter()
        .map(|(k, v)| format!("\n      {k}: {}", serde_json::to_string(v).unwrap()))
        .collect();
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {name}
  annotations:
    notifications.cmset.dev/subscribe.on-rollout-failed.hook: ""
spec:
  rollout:
    stabilizationSeconds: 2
    progressDeadlineSeconds: 15
    autoRollback: true
  template:
    data:{entries}
"#
    )
}

/// The Warning Events `reason` on the set `name`.
async fn events_about(ns: &TestNamespace, name: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = ns.api();
    events
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name) && e.reason.as_deref() == Some(reason))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_for_75_seconds_hears_of_a_failed_rollout_exactly_once_afterwards() {
    let ns = TestNamespace::new("notifyretry").await;
    let node = Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await;
    if !matches!(node, Ok(Some(_))) {
        eprintln!("SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE}");
        return;
    }
    let receiver = Receiver::default();
    let port = receiver.start().await;
    ns.apply(&configuration(port));
    let notifications_namespace = format!("--notifications-namespace={}", ns.name);
    let _operator = Operator::start_with(&ns.name, &[&notifications_namespace]).await;

    const SET: &str = "app";
    let good_data = [("APP_VERSION", "1")];
    let good = kustomize_name(SET, &good_data);
    ns.apply(&failing_set_yaml(SET, &good_data));
    ns.apply(&wave_deployment_yaml("web", 0, SET));
    let sets: Api<ConfigMapSet> = ns.api();
    eventually_within(WAIT, "subscribed, on the first revision", || async {
        let status = sets.get(SET).await.ok()?.status?;
        let subscribed = status.notifications.is_some_and(|n| n.len() == 1);
        (subscribed && status.current_revision.as_deref() == Some(good.as_str())).then_some(())
    })
    .await;

    // The receiver goes down for 75 s; meanwhile the bad change fails its rollout.
    let down_for = Duration::from_secs(75);
    let back_at = Instant::now() + down_for;
    receiver.down_until("/hook", back_at);
    let bad_data = [("APP_VERSION", "1"), (FAIL_KEY, "true")];
    let bad = kustomize_name(SET, &bad_data);
    ns.apply(&failing_set_yaml(SET, &bad_data));
    eventually_within(WAIT, "the bad revision's rollout to fail", || async {
        let rollout = sets.get(SET).await.ok()?.status?.rollout?;
        (rollout.revision == bad && rollout.phase == RolloutPhase::Failed).then_some(())
    })
    .await;
    // While it is down, the failure is tried, refused, and recorded as owed, not as failed.
    eventually_within(down_for, "the notification recorded Retrying", || async {
        let records = sets.get(SET).await.ok()?.status?.notifications?;
        records
            .iter()
            .any(|r| r.result == NotificationResult::Retrying && r.once.starts_with(&bad))
            .then_some(())
    })
    .await;
    assert!(
        Instant::now() < back_at,
        "the rollout failed too late for the test to see the receiver down"
    );

    // Back: it hears of the failure once, after its last refusal.
    let delivered = |h: &Heard| h.path == "/hook" && h.status == 200;
    eventually_within(
        down_for + Duration::from_secs(90),
        "the receiver to hear of the failure once it is back",
        || async { receiver.heard().iter().any(delivered).then_some(()) },
    )
    .await;
    stays("told once, not again", Duration::from_secs(20), || async {
        receiver.heard().iter().filter(|h| delivered(h)).count() == 1
    })
    .await;
    let heard = receiver.heard();
    let refused = heard
        .iter()
        .filter(|h| h.path == "/hook" && h.status == 503)
        .count();
    assert!(refused >= 2, "it was tried while down: {heard:?}");
    let told = heard.iter().find(|h| delivered(h)).unwrap();
    assert_eq!(told.body["context"]["trigger"], "on-rollout-failed", "{told:?}");
    let status = sets.get(SET).await.unwrap().status.unwrap();
    let record = &status.notifications.unwrap()[0];
    assert_eq!(record.result, NotificationResult::Delivered, "{record:?}");
    assert!(record.once.starts_with(&bad), "{record:?}");
    assert!(record.attempts >= 3, "every attempt counted: {record:?}");
    assert!(
        events_about(&ns, SET, "NotificationFailed").await.is_empty(),
        "a receiver that came back within the maximum age is not told failed"
    );
}

/// A ConfigMapSet without workloads or `spec.rollout`, subscribed to `on-rollout-started` through
/// the Slack bot for `channels`.
fn announced_set_yaml(name: &str, channels: &[String], version: &str) -> String {
    let channels = channels.join(";");
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {name}
  annotations:
    notifications.cmset.dev/subscribe.on-rollout-started.slack: "{channels}"
spec:
  template:
    data:
      APP_VERSION: "{version}"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotation_naming_200_channels_sends_at_most_10_messages_and_is_told_why() {
    let ns = TestNamespace::new("notifyaim").await;
    let receiver = Receiver::default();
    let port = receiver.start().await;
    ns.apply(&configuration(port));
    let notifications_namespace = format!("--notifications-namespace={}", ns.name);
    let _operator = Operator::start_with(&ns.name, &[&notifications_namespace]).await;

    let many: Vec<String> = (0..200).map(|i| format!("#team-{i}")).collect();
    let one = vec!["#ops".to_string()];
    ns.apply(&announced_set_yaml("spam", &many, "1"));
    ns.apply(&announced_set_yaml("control", &one, "1"));
    let sets: Api<ConfigMapSet> = ns.api();
    eventually_within(WAIT, "control subscribed", || async {
        let status = sets.get("control").await.ok()?.status?;
        status.notifications.is_some_and(|n| !n.is_empty()).then_some(())
    })
    .await;
    let refused = eventually_within(WAIT, "an Event on spam saying why", || async {
        let events = events_about(&ns, "spam", "InvalidNotificationSubscription").await;
        events.into_iter().next()
    })
    .await;
    let note = refused.message.unwrap_or_default();
    assert!(
        note.contains("names 200 recipients") && note.contains("more than the 10"),
        "{note}"
    );
    assert!(!note.contains("#team-"), "the Event quotes no channel: {note}");

    // A new revision of each: control's one channel hears it, spam's 200 hear nothing.
    ns.apply(&announced_set_yaml("spam", &many, "2"));
    ns.apply(&announced_set_yaml("control", &one, "2"));
    let slack = |h: &Heard| h.path.starts_with("/slack");
    eventually_within(WAIT, "control's channel to hear of its rollout", || async {
        receiver
            .heard()
            .iter()
            .any(|h| slack(h) && h.body["channel"] == "#ops")
            .then_some(())
    })
    .await;
    eventually_within(WAIT, "spam's new revision current", || async {
        let status = sets.get("spam").await.ok()?.status?;
        (status.current_revision? == kustomize_name("spam", &[("APP_VERSION", "2")])).then_some(())
    })
    .await;
    stays(
        "spam's channels hear at most 10 messages",
        Duration::from_secs(10),
        || async {
            let to_spam = receiver
                .heard()
                .iter()
                .filter(|h| {
                    slack(h)
                        && h.body["channel"]
                            .as_str()
                            .is_some_and(|c| c.starts_with("#team-"))
                })
                .count();
            to_spam <= 10
        },
    )
    .await;
    let to_spam = receiver
        .heard()
        .iter()
        .filter(|h| slack(h) && h.body["channel"] != "#ops")
        .count();
    assert_eq!(to_spam, 0, "refused: none at all");
    let status = sets.get("spam").await.unwrap().status.unwrap();
    assert!(
        status.notifications.unwrap_or_default().is_empty(),
        "no subscription recorded for spam"
    );
    // No Event or status carries the token.
    let events: Api<Event> = ns.api();
    for event in events.list(&Default::default()).await.unwrap().items {
        let text = serde_json::to_string(&event).unwrap();
        assert!(!text.contains(SLACK_TOKEN), "{text}");
    }
}
