//! Notifications on a real API server: a rollout that fails and is rolled back tells every subscribed
//! service exactly once per event (a generic webhook, a Slack bot through `chat.postMessage`, a Teams
//! incoming webhook, all played by one receiver in the test); a receiver that answers 500 twice gets
//! the message on the third try; a restart of the operator afterwards sends nothing again; and the
//! set's status and `kubectl cmset status` show each subscription's last delivery.
//!
//! The operator reads its notification configuration from the test's namespace
//! (`--notifications-namespace`), so tests running at once do not hear each other.

use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, NotificationResult, RolloutPhase, WorkloadState};
use cmset_e2e::fixtures::wave_deployment_yaml;
use cmset_e2e::k8s_openapi::api::core::v1::{Event, Node};
use cmset_e2e::kube::Api;
use cmset_e2e::receiver::{Heard, Receiver};
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, plugin_bin, stays};

const WAIT: Duration = Duration::from_secs(120);
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
const FAKE_NODE: &str = "cmset-fake-node";
const SET: &str = "app-config";
const WORKLOAD: &str = "web";
/// The one value of the Secret: it must reach Slack and nowhere else.
const SLACK_TOKEN: &str = "xoxb-e2e-secret-token";

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
  service.webhook.flaky: |
    url: http://127.0.0.1:{port}/flaky
    retries: 3
  service.slack: |
    token: $slack-token
    apiURL: http://127.0.0.1:{port}/slack/chat.postMessage
  service.teams: |
    recipientUrls:
      prod: http://127.0.0.1:{port}/teams/prod
"#
    )
}

fn set_yaml(data: &[(&str, &str)]) -> String {
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
  annotations:
    notifications.cmset.dev/subscribe.on-rollout-failed.hook: ""
    notifications.cmset.dev/subscribe.on-rolled-back.hook: ""
    notifications.cmset.dev/subscribe.on-rollout-failed.slack: ops
    notifications.cmset.dev/subscribe.on-rolled-back.slack: ops
    notifications.cmset.dev/subscribe.on-rollout-failed.teams: prod
    notifications.cmset.dev/subscribe.on-rolled-back.teams: prod
    notifications.cmset.dev/subscribe.on-rollout-failed.flaky: ""
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_rollout_is_told_once_to_each_service_and_a_restart_tells_it_again_to_none() {
    let ns = TestNamespace::new("notify").await;
    let node = Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await;
    if !matches!(node, Ok(Some(_))) {
        eprintln!("SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE}");
        return;
    }
    let receiver = Receiver::default();
    receiver.fail_next("/flaky", 2);
    let port = receiver.start().await;
    ns.apply(&configuration(port));
    let notifications_namespace = format!("--notifications-namespace={}", ns.name);
    let mut operator = Operator::start_with(&ns.name, &[&notifications_namespace]).await;

    let good_data = [("APP_VERSION", "1")];
    let good = kustomize_name(SET, &good_data);
    ns.apply(&set_yaml(&good_data));
    ns.apply(&wave_deployment_yaml(WORKLOAD, 0, SET));
    let sets: Api<ConfigMapSet> = ns.api();
    // Every subscription is recorded before anything happens to it.
    eventually_within(
        WAIT,
        "the subscriptions recorded, the set ready on its first revision",
        || async {
            let set = sets.get(SET).await.ok()?;
            let status = set.status?;
            let records = status.notifications.clone().unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (records.len() == 7 && ready && status.current_revision.as_deref() == Some(good.as_str()))
                .then_some(())
        },
    )
    .await;
    assert!(
        receiver.heard().is_empty(),
        "nothing sent for what stood before: {:?}",
        receiver.heard()
    );

    // The bad change: the new pod never becomes ready, the rollout fails and web is rolled back.
    let bad_data = [("APP_VERSION", "1"), (FAIL_KEY, "true")];
    let bad = kustomize_name(SET, &bad_data);
    ns.apply(&set_yaml(&bad_data));
    eventually_within(
        WAIT,
        "the rollout of the bad revision to fail and web to be rolled back",
        || async {
            let status = sets.get(SET).await.ok()?.status?;
            let rollout = status.rollout.as_ref()?;
            let back = status
                .workloads
                .iter()
                .any(|w| w.name == WORKLOAD && w.state == WorkloadState::RolledBack && w.revision == good);
            (rollout.revision == bad && rollout.phase == RolloutPhase::Failed && back).then_some(())
        },
    )
    .await;
    eventually_within(
        WAIT,
        "every service to hear of the failure and the rollback",
        || async {
            let heard = receiver.heard();
            let slack = heard.iter().filter(|h| h.path.starts_with("/slack")).count();
            let teams = heard.iter().filter(|h| h.path.starts_with("/teams")).count();
            let hook = heard.iter().filter(|h| h.path == "/hook").count();
            let flaky = heard.iter().filter(|h| h.path == "/flaky").count();
            (slack == 2 && teams == 2 && hook == 2 && flaky == 3).then_some(())
        },
    )
    .await;
    let heard = receiver.heard();
    let hook: Vec<&Heard> = heard.iter().filter(|h| h.path == "/hook").collect();
    let about = |trigger: &str| {
        hook.iter()
            .filter(|h| h.body["context"]["trigger"] == trigger)
            .count()
    };
    assert_eq!(
        (about("on-rollout-failed"), about("on-rolled-back")),
        (1, 1),
        "the webhook heard each event once: {hook:?}"
    );
    let slack: Vec<&Heard> = heard.iter().filter(|h| h.path.starts_with("/slack")).collect();
    assert!(
        slack.iter().all(
            |h| h.authorization.as_deref() == Some(format!("Bearer {SLACK_TOKEN}").as_str())
                && h.body["channel"] == "ops"
        ),
        "Slack's requests carry the bot token and the channel: {slack:?}"
    );
    // The rollback names where web went back to, not the revision that failed.
    let rolled_back = hook
        .iter()
        .find(|h| h.body["context"]["trigger"] == "on-rolled-back")
        .unwrap();
    let text = rolled_back.body["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("Deployment web to {good}")), "{text}");
    // The flaky receiver answered 500 twice, then took the third try. A record is written after its
    // delivery's last answer, which the receiver may have counted a moment before: wait for it.
    let records = eventually_within(WAIT, "every record written as delivered", || async {
        let records = sets.get(SET).await.ok()?.status?.notifications?;
        records
            .iter()
            .all(|r| r.result == NotificationResult::Delivered)
            .then_some(records)
    })
    .await;
    let flaky = records.iter().find(|r| r.service == "flaky").unwrap();
    assert_eq!(
        (flaky.result, flaky.attempts),
        (NotificationResult::Delivered, 3),
        "{flaky:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.result == NotificationResult::Delivered && r.once.starts_with(&bad)),
        "every subscription heard of the bad revision's rollout: {records:?}"
    );
    let before = receiver.heard().len();

    // A restart reads the records and sends nothing again.
    operator.restart().await;
    stays(
        "nothing sent again after a restart",
        Duration::from_secs(10),
        || async { receiver.heard().len() == before },
    )
    .await;

    // kubectl cmset status lists each subscription with its last delivery.
    let out = std::process::Command::new(plugin_bin())
        .args(["-n", &ns.name, "status", SET])
        .output()
        .expect("kubectl-cmset runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("on-rollout-failed to flaky: delivered") && text.contains("(3 attempts)"),
        "{text}"
    );
    assert!(!text.contains(SLACK_TOKEN), "{text}");

    // No Event carries the credential, in its reason, message or anywhere else: those of the test's
    // namespace (the set's and the ConfigMap's) and of the operator's own (cmset-system: the harness
    // sets no POD_NAMESPACE).
    for namespace in [ns.name.as_str(), "cmset-system"] {
        let events: Api<Event> = Api::namespaced(ns.client.clone(), namespace);
        let events = events.list(&Default::default()).await.unwrap().items;
        if namespace == ns.name {
            assert!(!events.is_empty(), "the rollout's Events are there to check");
        }
        for event in events {
            let text = serde_json::to_string(&event).unwrap();
            assert!(
                !text.contains(SLACK_TOKEN),
                "an Event in {namespace} carries the token: {text}"
            );
        }
    }
}

/// A ConfigMapSet `name` with content `data`, subscribed to `on-rollout-completed` through `service`,
/// and one opted-in Deployment of the same name that reads it.
fn completed_set_yaml(name: &str, service: &str, data: &str) -> String {
    let set = format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {name}
  annotations:
    notifications.cmset.dev/subscribe.on-rollout-completed.{service}: ""
spec:
  template:
    data:
      APP_VERSION: "{data}"
"#
    );
    format!("{set}---{}", wave_deployment_yaml(name, 0, name))
}

fn templates_yaml(port: u16, stuck_port: u16, greeting: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: cmset-notifications
data:
  service.webhook.hook: |
    url: http://127.0.0.1:{port}/hook
  service.webhook.stuck: |
    url: http://127.0.0.1:{stuck_port}/stuck
    timeout: 60s
    retries: 0
  template.rollout-completed: |
    message: "{greeting} {{{{ set.name }}}} on {{{{ revision }}}}"
"#
    )
}

/// A listener that takes connections and never answers.
async fn silent_listener() -> (u16, tokio::net::TcpListener) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    (listener.local_addr().unwrap().port(), listener)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_template_is_the_next_message_and_a_silent_receiver_holds_up_no_other_set() {
    let ns = TestNamespace::new("notifyedit").await;
    let receiver = Receiver::default();
    let port = receiver.start().await;
    let (stuck_port, _silent) = silent_listener().await;
    ns.apply(&templates_yaml(port, stuck_port, "first"));
    let notifications_namespace = format!("--notifications-namespace={}", ns.name);
    let _operator = Operator::start_with(&ns.name, &[&notifications_namespace]).await;
    let sets: Api<ConfigMapSet> = ns.api();
    let recorded = |name: &'static str| {
        let sets = sets.clone();
        async move {
            let status = sets.get(name).await.ok()?.status?;
            let complete = status
                .rollout
                .as_ref()
                .is_none_or(|r| r.phase == RolloutPhase::Complete);
            (status.notifications.is_some_and(|n| !n.is_empty()) && complete).then_some(())
        }
    };
    ns.apply(&completed_set_yaml("quiet", "stuck", "1"));
    ns.apply(&completed_set_yaml("web", "hook", "1"));
    eventually_within(WAIT, "both sets subscribed", || async {
        recorded("quiet").await?;
        recorded("web").await
    })
    .await;

    // quiet's receiver never answers; web's rollout and its message go through meanwhile.
    ns.apply(&completed_set_yaml("quiet", "stuck", "2"));
    ns.apply(&completed_set_yaml("web", "hook", "2"));
    let web_2 = kustomize_name("web", &[("APP_VERSION", "2")]);
    let first = format!("first web on {web_2}");
    eventually_within(
        Duration::from_secs(45),
        "web's completion told with the first template",
        || async {
            receiver
                .heard()
                .iter()
                .any(|h| h.path == "/hook" && h.body["text"] == first.as_str())
                .then_some(())
        },
    )
    .await;

    // The template edited in the ConfigMap is the one the next message uses, with no restart.
    ns.apply(&templates_yaml(port, stuck_port, "second"));
    // The operator reads the edit from its watch: give it a moment before the change it applies to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ns.apply(&completed_set_yaml("web", "hook", "3"));
    let web_3 = kustomize_name("web", &[("APP_VERSION", "3")]);
    let second = format!("second web on {web_3}");
    eventually_within(
        WAIT,
        "web's next completion told with the edited template",
        || async {
            receiver
                .heard()
                .iter()
                .any(|h| h.path == "/hook" && h.body["text"] == second.as_str())
                .then_some(())
        },
    )
    .await;
    // One message per completed rollout of web: its first revision (the set was created subscribed),
    // then each change, each with the template of its time.
    let web_1 = kustomize_name("web", &[("APP_VERSION", "1")]);
    let texts: Vec<String> = receiver
        .heard()
        .into_iter()
        .filter(|h| h.path == "/hook")
        .map(|h| h.body["text"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(texts, [format!("first web on {web_1}"), first, second]);
}

/// A set rolled out in two waves (`first` in wave 0, `second` in wave 1), subscribed through `hook` to
/// the rollout's start, each later wave, and its completion.
fn waves_set_yaml(version: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
  annotations:
    notifications.cmset.dev/subscribe.on-rollout-started.hook: ""
    notifications.cmset.dev/subscribe.on-wave-started.hook: ""
    notifications.cmset.dev/subscribe.on-rollout-completed.hook: ""
spec:
  rollout:
    stabilizationSeconds: 8
  template:
    data:
      APP_VERSION: "{version}"
"#
    )
}

async fn leading(op: &Operator, what: &str) {
    eventually_within(WAIT, what, || async {
        (op.metric("cmset_leader") == 1.0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_in_the_middle_of_a_rollout_tells_each_event_once() {
    let ns = TestNamespace::new("notifyleader").await;
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
    let args = |replica: &str| {
        let mut args = ns.pair_replica_args(replica);
        args.push(notifications_namespace.clone());
        args
    };
    let a_args = args("a");
    let mut a =
        Operator::start_without_webhook(&ns.name, &a_args.iter().map(String::as_str).collect::<Vec<_>>())
            .await;
    leading(&a, "replica a to lead").await;
    let b_args = args("b");
    let b = Operator::start_without_webhook(&ns.name, &b_args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    ns.apply(&waves_set_yaml("1"));
    ns.apply(&wave_deployment_yaml("first", 0, SET));
    ns.apply(&wave_deployment_yaml("second", 1, SET));
    let sets: Api<ConfigMapSet> = ns.api();
    eventually_within(WAIT, "the first revision rolled out", || async {
        let status = sets.get(SET).await.ok()?.status?;
        let done = status
            .rollout
            .as_ref()
            .is_some_and(|r| r.phase == RolloutPhase::Complete);
        (done && status.workloads.len() == 2).then_some(())
    })
    .await;

    // The change starts a rollout; once its start is told and recorded, the leader dies.
    ns.apply(&waves_set_yaml("2"));
    let v2 = kustomize_name(SET, &[("APP_VERSION", "2")]);
    eventually_within(WAIT, "the rollout's start told and recorded", || async {
        let status = sets.get(SET).await.ok()?.status?;
        let records = status.notifications?;
        records
            .iter()
            .any(|r| {
                r.trigger == "on-rollout-started"
                    && r.once.starts_with(&v2)
                    && r.result == NotificationResult::Delivered
            })
            .then_some(())
    })
    .await;
    a.kill().await;
    leading(&b, "replica b to take over").await;
    eventually_within(WAIT, "the rollout to complete under the new leader", || async {
        let status = sets.get(SET).await.ok()?.status?;
        let rollout = status.rollout?;
        (rollout.revision == v2 && rollout.phase == RolloutPhase::Complete).then_some(())
    })
    .await;
    let told = |trigger: &str| {
        receiver
            .heard()
            .iter()
            .filter(|h| {
                h.path == "/hook"
                    && h.body["context"]["trigger"] == trigger
                    && h.body["context"]["revision"] == v2.as_str()
            })
            .count()
    };
    eventually_within(WAIT, "the completion told", || async {
        (told("on-rollout-completed") >= 1).then_some(())
    })
    .await;
    stays("nothing told twice", Duration::from_secs(5), || async {
        (
            told("on-rollout-started"),
            told("on-wave-started"),
            told("on-rollout-completed"),
        ) == (1, 1, 1)
    })
    .await;
    ns.drop_pair_lease().await;
}
