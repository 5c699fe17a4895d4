//! Break glass in a shared cluster: a `WindowOverride` the API server authorizes. Only ClusterRole
//! cmset-break-glass grants creating one: a tenant (`edit` + `cmset-edit` in one namespace) may not, and
//! the override annotation of earlier versions, which a tenant can still write, moves nothing through a
//! cluster Deny window (the set gets a Warning saying what to do instead). An admin's
//! `kubectl cmset promote --override-window` lets the rollout through, and the record names the user as
//! the API server authenticated them, whatever the creator wrote or the kubeconfig entry is called. An
//! override created while the webhook does not answer still counts; its record says "not recorded".

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, ConfigMapSetStatus, RolloutPhase, RolloutStatus, WindowOverride};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::tenant::Tenant;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, plugin_bin, stays};
use serde_json::Value;

const SET: &str = "app";
const READER: &str = "reader";
/// A name a creator claims in the record: the webhook replaces it.
const CLAIMED: &str = "platform-admin";
const STILL: Duration = Duration::from_secs(8);
const WAIT: Duration = Duration::from_secs(90);

/// The set with `value`; the name of that content's revision.
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

/// A cluster ChangeWindow that denies moves all day, selecting this namespace only (the suite's other
/// tests run beside it). Deleted when dropped.
struct Freeze {
    name: String,
}

impl Freeze {
    fn new(ns: &TestNamespace) -> Self {
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
      name: freeze
      schedule: "0 0 * * *"
      duration: 24h
"#,
            ns.name
        ));
        Self { name }
    }
}

impl Drop for Freeze {
    fn drop(&mut self) {
        let _ = Command::new("kubectl")
            .args([
                "delete",
                "changewindow",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdin(Stdio::null())
            .output();
    }
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

/// The set on `one` with its reader, then a cluster Deny window, then the set changed to `two`, which
/// the window holds.
async fn held_rollout(ns: &TestNamespace) -> (Freeze, String, String, RolloutStatus) {
    let v1 = write_set(ns, "one");
    ns.apply(&wave_deployment_yaml(READER, 0, SET));
    wait_reads(ns, &v1).await;
    let freeze = Freeze::new(ns);
    let v2 = write_set(ns, "two");
    let held = eventually_within(WAIT, "the rollout of two waits for the window", || async {
        status(ns)
            .await?
            .rollout
            .filter(|r| r.revision == v2 && r.phase == RolloutPhase::Waiting && r.started_at.is_some())
    })
    .await;
    assert_eq!(
        held.reason.as_deref(),
        Some("freeze"),
        "the cluster's window holds it"
    );
    (freeze, v1, v2, held)
}

/// A WindowOverride of `rollout` of the set (uid `uid`), as YAML, claiming `requested_by`.
fn override_yaml(name: &str, uid: &str, rollout: &RolloutStatus, requested_by: Option<&str>) -> String {
    let started = rollout.started_at.as_ref().unwrap().0;
    let by = requested_by.map_or(String::new(), |b| format!("\n  requestedBy: {b}"));
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: WindowOverride
metadata:
  name: {name}
spec:
  set: {{kind: ConfigMapSet, name: {SET}, uid: "{uid}"}}
  rollout: {{revision: {}, startedAt: "{started}"}}{by}
"#,
        rollout.revision
    )
}

async fn set_uid(ns: &TestNamespace) -> String {
    let set = ns.api::<ConfigMapSet>().get(SET).await.unwrap();
    set.metadata.uid.unwrap()
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

async fn wait_event(ns: &TestNamespace, reason: &str) -> (String, String, String) {
    eventually_within(WAIT, &format!("a {reason} Event"), || async {
        events(ns).into_iter().find(|(_, r, _)| r == reason)
    })
    .await
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

/// Runs the plugin with `kubeconfig` in the test's namespace: (success, stdout and stderr).
fn plugin(ns: &TestNamespace, kubeconfig: Option<&std::path::Path>, args: &[&str]) -> (bool, String) {
    let mut command = Command::new(plugin_bin());
    if let Some(path) = kubeconfig {
        command.env("KUBECONFIG", path);
    }
    let out = command
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

/// The admin kubeconfig, copied with its user entry and context renamed to `entry` (and, with `as_user`,
/// impersonating that user); and the user the API server authenticates the admin as (from the local
/// control plane's token file).
fn admin_kubeconfig(
    dir: &std::path::Path,
    entry: &str,
    as_user: Option<&str>,
) -> (std::path::PathBuf, String) {
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
    if let Some(as_user) = as_user {
        user["user"]["as"] = Value::from(as_user);
    }
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
    std::fs::create_dir_all(dir).unwrap();
    let copy = dir.join(format!("{entry}.kubeconfig"));
    std::fs::write(&copy, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    (copy, authenticated)
}

#[tokio::test]
async fn a_tenant_cannot_break_the_glass_and_the_old_annotation_moves_nothing() {
    let ns = TestNamespace::new("bgtenant").await;
    let operator = Operator::start(&ns.name).await;
    operator.webhook.as_ref().unwrap().wait_ready().await;
    let tenant = Tenant::bind(&ns, "alice");
    let (_freeze, v1, _, held) = held_rollout(&ns).await;

    // The API server refuses a tenant the right, whatever the webhook would say.
    assert!(
        tenant.can("patch", "configmapsets.cmset.dev"),
        "a tenant edits sets"
    );
    assert!(!tenant.can("create", "windowoverrides.cmset.dev"));
    let uid = set_uid(&ns).await;
    let refused = tenant
        .try_kubectl(
            &["create", "-f", "-"],
            Some(&override_yaml("alice-break", &uid, &held, Some(CLAIMED))),
        )
        .expect_err("a tenant may not create a WindowOverride");
    assert!(
        refused.contains("Forbidden") || refused.contains("forbidden"),
        "{refused}"
    );
    // The plugin, run as the tenant, says which role is missing.
    let dir = std::env::temp_dir().join(format!("cmset-e2e-{}", ns.name));
    let (as_alice, _) = admin_kubeconfig(&dir, "as-alice", Some("alice"));
    let (ok, out) = plugin(&ns, Some(&as_alice), &["promote", "--override-window", SET]);
    assert!(!ok, "{out}");
    assert!(out.contains("ClusterRole cmset-break-glass"), "{out}");

    // The annotation of earlier versions, with a record and a proof: stored (a tenant may annotate
    // a set), and it moves nothing.
    let value = cmset_core::policy::break_glass::override_value(&held).unwrap();
    tenant
        .try_kubectl(
            &[
                "annotate",
                "configmapset",
                SET,
                &format!("cmset.dev/window-override={value}"),
                &format!("cmset.dev/window-override-by={CLAIMED} 2026-11-27T17:21:00Z"),
                "cmset.dev/window-override-proof=cHJvb2Y=",
            ],
            None,
        )
        .expect("a tenant may annotate the set");
    let condition = eventually_within(WAIT, "the set says the annotation is ignored", || async {
        override_condition(&ns).await.filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(condition.1, "AnnotationIgnored");
    let warning = wait_event(&ns, "WindowOverrideIgnored").await;
    assert_eq!(warning.0, "Warning");
    assert!(
        warning.2.contains("kubectl cmset promote --override-window"),
        "{warning:?}"
    );
    stays("the reader stays on the old revision", STILL, || async {
        reads(&ns).await == BTreeSet::from([v1.clone()])
    })
    .await;
    let events = events(&ns);
    assert!(
        events.iter().all(|(_, _, message)| !message.contains(CLAIMED)),
        "no Event repeats the claimed name: {events:?}"
    );
    assert!(
        !events.iter().any(|(_, reason, _)| reason == "WindowOverridden"),
        "{events:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_admins_promote_override_window_moves_it_and_the_record_names_the_authenticated_user() {
    let ns = TestNamespace::new("bgadmin").await;
    let operator = Operator::start(&ns.name).await;
    operator.webhook.as_ref().unwrap().wait_ready().await;
    let (_freeze, v1, v2, held) = held_rollout(&ns).await;

    // A hand-made override claiming someone else: the webhook records the creator instead.
    let dir = std::env::temp_dir().join(format!("cmset-e2e-{}", ns.name));
    const ENTRY: &str = "on-call-laptop";
    let (kubeconfig, admin) = admin_kubeconfig(&dir, ENTRY, None);
    // For another set of the same name (an earlier uid): it counts for nothing.
    ns.apply(&override_yaml(
        "stale",
        "an-earlier-set-uid",
        &held,
        Some(CLAIMED),
    ));
    let stale = ns.api::<WindowOverride>().get("stale").await.unwrap();
    assert_eq!(
        stale.spec.requested_by.as_deref(),
        Some(admin.as_str()),
        "the record is the authenticated user, not the claimed one"
    );
    stays("the reader stays on the old revision", STILL, || async {
        reads(&ns).await == BTreeSet::from([v1.clone()])
    })
    .await;

    let (ok, text) = plugin(&ns, Some(&kubeconfig), &["promote", "--override-window", SET]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("recorded by cmset for {admin})")),
        "{text}"
    );
    assert!(!text.contains(ENTRY), "{text}");
    wait_reads(&ns, &v2).await;

    let listed = ns
        .api::<WindowOverride>()
        .list(&Default::default())
        .await
        .unwrap();
    let used: Vec<&WindowOverride> = listed
        .items
        .iter()
        .filter(|o| o.metadata.name.as_deref() != Some("stale"))
        .collect();
    assert_eq!(used.len(), 1, "{listed:?}");
    assert_eq!(used[0].spec.requested_by.as_deref(), Some(admin.as_str()));
    let name = used[0].metadata.name.clone().unwrap();
    let condition = eventually_within(WAIT, "the set says the override let it through", || async {
        override_condition(&ns).await.filter(|c| c.0 == "True")
    })
    .await;
    assert!(
        condition.2.contains(&format!("WindowOverride {name} "))
            && condition.2.contains(&format!("(requested by {admin})")),
        "{condition:?}"
    );
    let overridden = wait_event(&ns, "WindowOverridden").await;
    assert_eq!(overridden.0, "Warning");
    assert!(
        overridden
            .2
            .contains(&format!("WindowOverride {name} (requested by {admin})")),
        "{overridden:?}"
    );
    let events = events(&ns);
    assert!(
        events
            .iter()
            .all(|(_, _, m)| !m.contains(ENTRY) && !m.contains(CLAIMED)),
        "{events:?}"
    );

    // Who may read the set sees the override, who created it and that it was used.
    let (ok, windows) = plugin(&ns, None, &["windows", SET]);
    assert!(ok, "{windows}");
    assert!(
        windows
            .lines()
            .any(|l| l.starts_with(&name) && l.contains(&admin) && l.trim_end().ends_with("used")),
        "{windows}"
    );
    assert!(
        windows
            .lines()
            .any(|l| l.starts_with("stale ") && l.trim_end().ends_with("void")),
        "{windows}"
    );
    // The record cannot be rewritten afterwards.
    let _ = ns.try_kubectl(
        &[
            "patch",
            "windowoverride",
            &name,
            "--type=merge",
            "-p",
            r#"{"spec":{"requestedBy":"someone-else"}}"#,
        ],
        None,
    );
    let kept = ns.api::<WindowOverride>().get(&name).await.unwrap();
    assert_eq!(kept.spec.requested_by.as_deref(), Some(admin.as_str()));

    // Once: the next rollout is held again.
    let v3 = write_set(&ns, "three");
    eventually_within(WAIT, "the rollout of three waits for the window", || async {
        status(&ns)
            .await?
            .rollout
            .filter(|r| r.revision == v3 && r.phase == RolloutPhase::Waiting)
    })
    .await;
    stays("the reader stays on two", STILL, || async {
        reads(&ns).await == BTreeSet::from([v2.clone()])
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_override_created_while_admission_does_not_answer_still_counts_not_recorded() {
    let ns = TestNamespace::new("bgdown").await;
    // No webhook registered for this namespace: admission is down (the webhooks fail open).
    let _operator = Operator::start_without_webhook(&ns.name, &[]).await;
    let (_freeze, _, v2, _) = held_rollout(&ns).await;

    let (ok, text) = plugin(&ns, None, &["promote", "--override-window", SET]);
    assert!(ok, "{text}");
    assert!(text.contains("is not recorded"), "{text}");
    wait_reads(&ns, &v2).await;
    let overridden = wait_event(&ns, "WindowOverridden").await;
    assert!(
        overridden.2.contains("(requested by not recorded)"),
        "{overridden:?}"
    );
    let (ok, status) = plugin(&ns, None, &["status", SET]);
    assert!(ok, "{status}");
    let (ok, windows) = plugin(&ns, None, &["windows", SET]);
    assert!(ok, "{windows}");
    assert!(windows.contains("not recorded"), "{windows}");
    let _ = status;
}
