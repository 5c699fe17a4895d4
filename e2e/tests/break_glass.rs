//! Break glass in a shared cluster: only a user the API server allows to `override`
//! `changewindows.cmset.dev` (ClusterRole cmset-break-glass) lets a rollout through the change windows,
//! and the record names that user as the API server authenticated them. A tenant (`edit` +
//! `cmset-edit` in one namespace) who writes the override annotation is refused by the webhook; with
//! the webhook down the annotation is stored but lets nothing through, and the set says so, without
//! repeating the name it claims. An admin whose kubeconfig entry has another name than their
//! authenticated user is recorded under the authenticated one.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, ConfigMapSetStatus, RolloutPhase, RolloutStatus};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::k8s_openapi::jiff::Timestamp;
use cmset_e2e::tenant::Tenant;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, plugin_bin, stays};
use serde_json::Value;

const SET: &str = "app";
const READER: &str = "reader";
/// A name a tenant claims in the record: no Event may repeat it.
const CLAIMED: &str = "platform-admin";
const STILL: Duration = Duration::from_secs(8);
const WAIT: Duration = Duration::from_secs(90);

/// The set, held all day by its own Deny window, with `value`; the name of that content's revision.
fn write_set(ns: &TestNamespace, value: &str) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    windows:
      - kind: Deny
        name: freeze
        schedule: "0 0 * * *"
        duration: 24h
  template:
    data:
      MODE: "{value}"
"#
    ));
    kustomize_name(SET, &[("MODE", value)])
}

async fn status(ns: &TestNamespace) -> Option<ConfigMapSetStatus> {
    ns.api::<ConfigMapSet>().get(SET).await.ok()?.status
}

async fn reads(ns: &TestNamespace) -> BTreeSet<String> {
    template_names(&ns.deployment(READER).await)
}

async fn wait_reads(ns: &TestNamespace, revision: &str) {
    eventually_within(WAIT, &format!("{READER} reads {revision}"), || async {
        (reads(ns).await == BTreeSet::from([revision.to_string()])).then_some(())
    })
    .await;
}

/// The set on `v1` with its reader, then changed to `v2`, which the Deny window holds.
async fn held_rollout(ns: &TestNamespace) -> (String, String, RolloutStatus) {
    let v1 = write_set(ns, "one");
    ns.apply(&wave_deployment_yaml(READER, 0, SET));
    wait_reads(ns, &v1).await;
    let v2 = write_set(ns, "two");
    let held = eventually_within(WAIT, "the rollout of two waits for the window", || async {
        status(ns)
            .await?
            .rollout
            .filter(|r| r.revision == v2 && r.phase == RolloutPhase::Waiting && r.started_at.is_some())
    })
    .await;
    (v1, v2, held)
}

/// `<revision>@<startedAt>`: what `kubectl cmset promote --override-window` writes for `rollout`.
fn override_value(rollout: &RolloutStatus) -> String {
    cmset_core::window_hold::override_value(rollout).expect("the rollout has started")
}

/// The set's Events: (type, reason, message).
fn events(ns: &TestNamespace) -> Vec<(String, String, String)> {
    let out = ns.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={SET}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let text = |key: &str| e[key].as_str().unwrap_or_default().to_string();
            (text("type"), text("reason"), text("message"))
        })
        .collect()
}

/// The set's condition `WindowOverride`: (status, reason, message).
async fn override_condition(ns: &TestNamespace) -> Option<(String, String, String)> {
    status(ns)
        .await?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "WindowOverride")
        .map(|c| (c.status, c.reason, c.message))
}

async fn annotations(ns: &TestNamespace) -> std::collections::BTreeMap<String, String> {
    let set = ns.api::<ConfigMapSet>().get(SET).await.unwrap();
    set.metadata.annotations.unwrap_or_default()
}

#[tokio::test]
async fn a_tenants_override_is_refused_by_the_webhook_and_lets_nothing_through() {
    let ns = TestNamespace::new("bgtenant").await;
    let operator = Operator::start(&ns.name).await;
    operator.webhook.as_ref().unwrap().wait_ready().await;
    let tenant = Tenant::bind(&ns, "alice");
    let (v1, _, held) = held_rollout(&ns).await;

    let value = override_value(&held);
    let claimed = format!("{CLAIMED} {}", Timestamp::now());
    let refused = tenant
        .try_kubectl(
            &[
                "annotate",
                "configmapset",
                SET,
                &format!("cmset.dev/window-override={value}"),
                &format!("cmset.dev/window-override-by={claimed}"),
            ],
            None,
        )
        .expect_err("the webhook refuses a tenant's override");
    assert!(refused.contains("ClusterRole cmset-break-glass"), "{refused}");
    assert!(
        refused.contains("\"alice\""),
        "names the authenticated user: {refused}"
    );
    // Nothing was stored, nothing moves.
    assert!(!annotations(&ns).await.contains_key("cmset.dev/window-override"));
    stays("the reader stays on the old revision", STILL, || async {
        reads(&ns).await == BTreeSet::from([v1.clone()])
    })
    .await;
    // The tenant may still edit the set in every other way.
    tenant
        .try_kubectl(
            &["annotate", "configmapset", SET, "team.example/owner=payments"],
            None,
        )
        .expect("an edit that leaves the override alone needs no right");
    assert!(
        events(&ns)
            .iter()
            .all(|(_, _, message)| !message.contains(CLAIMED)),
        "{:?}",
        events(&ns)
    );
}

#[tokio::test]
async fn an_override_stored_while_admission_is_down_is_reported_and_lets_nothing_through() {
    let ns = TestNamespace::new("bgdown").await;
    // No webhook called at all: admission is down (the webhooks fail open).
    let _operator = Operator::start_without_webhook(&ns.name, &[]).await;
    let tenant = Tenant::bind(&ns, "alice");
    let (v1, v2, held) = held_rollout(&ns).await;

    let value = override_value(&held);
    let claimed = format!("{CLAIMED} {}", Timestamp::now());
    tenant
        .try_kubectl(
            &[
                "annotate",
                "configmapset",
                SET,
                &format!("cmset.dev/window-override={value}"),
                &format!("cmset.dev/window-override-by={claimed}"),
            ],
            None,
        )
        .expect("with admission down the annotation is stored");
    let condition = eventually_within(WAIT, "the set says the override is not verified", || async {
        override_condition(&ns).await.filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(condition.1, "NotVerified");
    assert!(!condition.2.contains(CLAIMED), "{condition:?}");
    stays("the reader stays on the old revision", STILL, || async {
        reads(&ns).await == BTreeSet::from([v1.clone()])
    })
    .await;
    let rollout = status(&ns).await.and_then(|s| s.rollout).unwrap();
    assert_eq!(
        (rollout.revision.as_str(), rollout.phase),
        (v2.as_str(), RolloutPhase::Waiting)
    );

    let events = events(&ns);
    let refusals: Vec<_> = events
        .iter()
        .filter(|(_, reason, _)| reason == "WindowOverrideRefused")
        .collect();
    assert_eq!(refusals.len(), 1, "reported once: {events:?}");
    assert_eq!(refusals[0].0, "Warning");
    assert!(refusals[0].2.contains("cmset-break-glass"), "{refusals:?}");
    assert!(
        events.iter().all(|(_, _, message)| !message.contains(CLAIMED)),
        "no Event repeats the claimed name: {events:?}"
    );
    assert!(
        !events.iter().any(|(_, reason, _)| reason == "WindowOverridden"),
        "{events:?}"
    );
}

/// The admin kubeconfig, copied with its user entry and context renamed to `entry`; and the user the
/// API server authenticates it as (from the local control plane's token file).
fn renamed_admin_kubeconfig(dir: &std::path::Path, entry: &str) -> (std::path::PathBuf, String) {
    let path = std::env::var("KUBECONFIG").expect("KUBECONFIG");
    let mut config: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let current = config["current-context"].as_str().unwrap().to_string();
    let context = config["contexts"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|c| c["name"] == current.as_str())
        .unwrap();
    let user_entry = context["context"]["user"].as_str().unwrap().to_string();
    context["name"] = Value::from(entry);
    context["context"]["user"] = Value::from(entry);
    let user = config["users"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|u| u["name"] == user_entry.as_str())
        .unwrap();
    user["name"] = Value::from(entry);
    let token = user["user"]["token"].as_str().expect("a token user").to_string();
    config["current-context"] = Value::from(entry);
    // The local control plane authenticates tokens from this file: token,user,uid,"groups".
    let tokens = std::path::Path::new(&path).with_file_name("tokens.csv");
    let tokens = std::fs::read_to_string(&tokens).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (this test runs on the local control plane)",
            tokens.display()
        )
    });
    let authenticated = tokens
        .lines()
        .find_map(|line| {
            let mut fields = line.split(',');
            (fields.next() == Some(token.as_str())).then(|| fields.next().unwrap().to_string())
        })
        .expect("the admin's token in tokens.csv");
    assert_ne!(authenticated, entry);
    let copy = dir.join("renamed.kubeconfig");
    std::fs::write(&copy, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    (copy, authenticated)
}

#[tokio::test]
async fn promote_override_window_records_the_authenticated_user_not_the_kubeconfig_entry() {
    let ns = TestNamespace::new("bgadmin").await;
    let operator = Operator::start(&ns.name).await;
    operator.webhook.as_ref().unwrap().wait_ready().await;
    let (_, v2, _) = held_rollout(&ns).await;

    let dir = std::env::temp_dir().join(format!("cmset-e2e-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    const ENTRY: &str = "on-call-laptop";
    let (kubeconfig, admin) = renamed_admin_kubeconfig(&dir, ENTRY);
    let out = Command::new(plugin_bin())
        .env("KUBECONFIG", &kubeconfig)
        .args(["-n", &ns.name, "promote", "--override-window", SET])
        .stdin(Stdio::null())
        .output()
        .expect("run the plugin");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("recorded by cmset for {admin} ")),
        "{text}"
    );
    assert!(!text.contains(ENTRY), "{text}");

    wait_reads(&ns, &v2).await;
    let record = annotations(&ns).await["cmset.dev/window-override-by"].clone();
    assert!(record.starts_with(&format!("{admin} ")), "{record}");
    assert!(
        annotations(&ns)
            .await
            .contains_key("cmset.dev/window-override-proof")
    );
    let condition = eventually_within(WAIT, "the set says the override is verified", || async {
        override_condition(&ns).await.filter(|c| c.0 == "True")
    })
    .await;
    assert!(condition.2.contains(&format!("for {admin} at ")), "{condition:?}");
    let events = eventually_within(WAIT, "a WindowOverridden Event", || async {
        let events = events(&ns);
        events
            .iter()
            .any(|(_, reason, _)| reason == "WindowOverridden")
            .then_some(events)
    })
    .await;
    let overridden = events
        .iter()
        .find(|(_, reason, _)| reason == "WindowOverridden")
        .unwrap();
    assert!(overridden.2.contains(&format!("(by {admin})")), "{overridden:?}");
    assert!(events.iter().all(|(_, _, m)| !m.contains(ENTRY)), "{events:?}");
    assert!(
        !events
            .iter()
            .any(|(_, reason, _)| reason == "WindowOverrideRefused"),
        "{events:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
