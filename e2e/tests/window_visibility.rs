//! Windows fail closed (issue 36, item 6), on a real API server: an operator that may not list
//! ChangeWindows (an identity of the test's own, whose Role in the test namespace cannot grant a
//! cluster-scoped kind) holds a change that a cluster Deny window covers, and the set says why
//! (condition `ChangeWindowsKnown`, reason `ChangeWindowsForbidden`); `kubectl cmset windows` says the
//! operator cannot see what it lists. The same operator run with `--change-windows=false` moves the
//! change: only an explicit choice runs without the cluster's windows.
//!
//! Every ChangeWindow a test creates selects its own namespace only: the suite's other tests run
//! beside it.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::{ChangeWindow, ConfigMapSet, ConfigMapSetStatus, RolloutPhase};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::identity::{Identity, shipped_rules, without};
use cmset_e2e::k8s_openapi::jiff::Timestamp;
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::DeleteParams;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, plugin_bin, stays};

const SET: &str = "app-config";
const READER: &str = "web";
/// How long "nothing moves" is watched for.
const STILL: Duration = Duration::from_secs(10);
/// Rollouts on the slow local cluster.
const WAIT: Duration = Duration::from_secs(120);

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

/// A cluster ChangeWindow selecting `ns` only, denying moves from the start of this minute for ten
/// minutes; its name.
fn freeze(ns: &TestNamespace) -> String {
    let now = Timestamp::now().as_second();
    let minute = now - now.rem_euclid(60);
    let start = Timestamp::from_second(minute)
        .unwrap()
        .to_zoned(cmset_e2e::k8s_openapi::jiff::tz::TimeZone::UTC);
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
      schedule: "{} {} * * *"
      duration: 600s
"#,
        ns.name,
        start.minute(),
        start.hour()
    ));
    name
}

async fn delete_freeze(ns: &TestNamespace, name: &str) {
    let api: Api<ChangeWindow> = Api::all(ns.client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

async fn reads(ns: &TestNamespace) -> BTreeSet<String> {
    template_names(&ns.deployment(READER).await)
}

async fn status(ns: &TestNamespace) -> ConfigMapSetStatus {
    ns.api::<ConfigMapSet>()
        .get(SET)
        .await
        .ok()
        .and_then(|s| s.status)
        .unwrap_or_default()
}

async fn wait_reads(ns: &TestNamespace, revision: &str) {
    eventually_within(WAIT, &format!("{READER} reads {revision}"), || async {
        (reads(ns).await == BTreeSet::from([revision.to_string()])).then_some(())
    })
    .await;
}

/// An operator of the test's own that holds the shipped rules in the test namespace and nothing on
/// ChangeWindows, started with `extra` flags.
async fn operator_without_windows(ns: &TestNamespace, extra: &[&str]) -> Operator {
    let rules = without(&shipped_rules("rbac"), "changewindows");
    let identity = Identity::create(ns, "cmset-operator", rules).await;
    assert!(
        !identity.can("list", "changewindows.cmset.dev"),
        "the identity may not list ChangeWindows"
    );
    Operator::start_via(&ns.name, extra, identity.kubeconfig.clone()).await
}

/// `kubectl cmset -n <ns> windows <SET>` (the admin's credentials): its output.
fn windows_report(ns: &TestNamespace) -> String {
    let out = Command::new(plugin_bin())
        .args(["-n", &ns.name, "windows", SET])
        .stdin(Stdio::null())
        .output()
        .expect("run the plugin");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn without_the_right_to_list_change_windows_a_change_inside_a_cluster_deny_stays_put_and_the_set_says_why()
 {
    let ns = TestNamespace::new("winunseen").await;
    let freeze = freeze(&ns);
    let _operator = operator_without_windows(&ns, &[]).await;
    let first = write_set(&ns, "one");
    ns.apply(&wave_deployment_yaml(READER, 0, SET));
    // A new reader's first start names the current revision, held or not.
    wait_reads(&ns, &first).await;

    let second = write_set(&ns, "two");
    let condition = eventually_within(WAIT, "the set saying the windows are unknown", || async {
        status(&ns)
            .await
            .condition("ChangeWindowsKnown")
            .filter(|c| c.status == "False")
            .cloned()
    })
    .await;
    eprintln!("ChangeWindowsKnown: {} {}", condition.reason, condition.message);
    assert_eq!(condition.reason, "ChangeWindowsForbidden");
    assert!(
        condition.message.contains("403") || condition.message.contains("orbidden"),
        "the message names the refusal: {}",
        condition.message
    );
    let rollout = eventually_within(WAIT, "the rollout waiting", || async {
        status(&ns)
            .await
            .rollout
            .filter(|r| r.revision == second && r.phase == RolloutPhase::Waiting)
    })
    .await;
    assert_eq!(rollout.reason.as_deref(), Some("ChangeWindowsUnknown"));
    stays("the reader stays on the first revision", STILL, || async {
        reads(&ns).await == BTreeSet::from([first.clone()])
    })
    .await;

    let report = windows_report(&ns);
    eprintln!("kubectl cmset windows:\n{report}");
    assert!(
        report.contains("cannot see") && report.contains("ChangeWindowsForbidden"),
        "the plugin says the operator cannot see the windows it lists:\n{report}"
    );
    delete_freeze(&ns, &freeze).await;
}

#[tokio::test]
async fn with_change_windows_off_a_change_inside_a_cluster_deny_moves() {
    let ns = TestNamespace::new("winoff").await;
    let freeze = freeze(&ns);
    let _operator = operator_without_windows(&ns, &["--change-windows=false"]).await;
    let first = write_set(&ns, "one");
    ns.apply(&wave_deployment_yaml(READER, 0, SET));
    wait_reads(&ns, &first).await;

    let second = write_set(&ns, "two");
    wait_reads(&ns, &second).await;
    let status = status(&ns).await;
    assert_eq!(
        status.condition("ChangeWindowsKnown"),
        None,
        "cluster windows are off by choice: nothing is unknown"
    );
    delete_freeze(&ns, &freeze).await;
}

/// Status is cmset's (issue 36, item 7): a tenant with the built-in `edit` and cmset's `cmset-edit` in
/// its namespace manages its sets, and may read their status, but never write it (a forged status
/// would steer rollouts and notifications).
#[tokio::test]
async fn a_tenant_with_edit_and_cmset_edit_manages_sets_but_cannot_write_their_status() {
    let ns = TestNamespace::new("tenantstatus").await;
    let tenant = cmset_e2e::tenant::Tenant::bind(&ns, "alice");
    for resource in ["configmapsets", "secretsets"] {
        assert!(tenant.can("patch", resource), "alice manages {resource}");
        assert!(
            tenant.can("get", &format!("{resource}/status")),
            "alice reads their status"
        );
        for verb in ["patch", "update", "create", "delete"] {
            assert!(
                !tenant.can(verb, &format!("{resource}/status")),
                "alice may {verb} {resource}/status"
            );
        }
    }
    write_set(&ns, "one");
    let refused = tenant
        .try_kubectl(
            &[
                "patch",
                "configmapset",
                SET,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"currentRevision":"forged"}}"#,
            ],
            None,
        )
        .expect_err("the API server refuses the tenant's status patch");
    assert!(refused.contains("forbidden"), "{refused}");
}
