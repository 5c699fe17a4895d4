//! Change windows on a real API server: a Deny window holds a change where it stands and lets it go
//! when it closes (an operator restart while held changes nothing); an Allow window that opens soon
//! holds, then lets it go; a rollout failing inside a Deny window is still rolled back; a cluster
//! ChangeWindow's Deny beats a set's Allow, and `kubectl cmset promote --override-window` lets one
//! set's rollout through and no other; a bad schedule is refused at apply, naming the field. And the
//! rotation story: a SecretSet with `strategy: Immediate` moves every reader at once through waves and
//! an open cluster Deny window that exempts `Immediate`, and a failing wave of another set those
//! readers read rolls back that set only.
//!
//! Windows are cron schedules with minute precision, so a window "open for the next 40 s" opens at the
//! start of the current minute and lasts until 40 s from now. Every ChangeWindow a test creates selects
//! its own namespace only: the suite's other tests run beside it.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::{ChangeWindow, ConfigMapSet, RolloutPhase, SecretSet};
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::k8s_openapi::api::core::v1::Node;
use cmset_e2e::k8s_openapi::jiff::{SignedDuration, Timestamp, ToSpan};
use cmset_e2e::kube::Api;
use cmset_e2e::kube::api::DeleteParams;
use cmset_e2e::rollout_wait::{only, reads, status, wait_phase, wait_reads};
use cmset_e2e::{
    Operator, TestNamespace, eventually, eventually_within, kustomize_name, kustomize_secret_name,
    plugin_bin, put_secret, stays,
};

const SET: &str = "app-config";
const FIRST: &str = "first";
const SECOND: &str = "second";
/// How long "nothing moves" is watched for.
const STILL: Duration = Duration::from_secs(5);
/// Long enough for a window to open or close and the rollout to go on.
const WAIT: Duration = Duration::from_secs(150);
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
const FAKE_NODE: &str = "cmset-fake-node";

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

/// A window, as YAML list item lines under `windows:` indented by `indent` spaces.
fn window_yaml(indent: usize, kind: &str, name: Option<&str>, schedule: &str, duration: &str) -> String {
    let pad = " ".repeat(indent);
    let name = name.map_or(String::new(), |n| format!("\n{pad}  name: {n}"));
    format!("\n{pad}- kind: {kind}{name}\n{pad}  schedule: \"{schedule}\"\n{pad}  duration: {duration}")
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

/// A UTC cron schedule of the next whole minute at least 20 s away, and that instant.
fn opening_soon() -> (String, Timestamp) {
    let now = Timestamp::now().as_second();
    let mut next = now - now.rem_euclid(60) + 60;
    if next - now < 20 {
        next += 60;
    }
    let at = Timestamp::from_second(next).unwrap();
    let civil = at.to_zoned(cmset_e2e::k8s_openapi::jiff::tz::TimeZone::UTC);
    (format!("{} {} * * *", civil.minute(), civil.hour()), at)
}

/// Set `name` with content `value`, and `rollout` (lines under `spec.rollout`); its revision's name.
fn write_set(ns: &TestNamespace, name: &str, value: &str, rollout: &str) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {name}
spec:
  rollout:
    stabilizationSeconds: 0{rollout}
  template:
    data:
      MODE: "{value}"
"#
    ));
    kustomize_name(name, &[("MODE", value)])
}

/// Two Deployments in waves 0 and 1 reading `set`, rolled out on `revision`.
async fn two_waves(ns: &TestNamespace, set: &str, revision: &str) {
    ns.apply(&wave_deployment_yaml(FIRST, 0, set));
    ns.apply(&wave_deployment_yaml(SECOND, 1, set));
    wait_reads(ns, SECOND, revision).await;
    wait_phase(ns, set, revision, RolloutPhase::Complete).await;
}

/// A ChangeWindow named after the namespace, selecting it only, with `windows` (YAML list items).
fn change_window(ns: &TestNamespace, windows: &str) -> String {
    let name = format!("{}-freeze", ns.name);
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ChangeWindow
metadata:
  name: {name}
spec:
  namespaces: ["{}"]
  windows:{windows}
"#,
        ns.name
    ));
    name
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

#[tokio::test]
async fn a_deny_window_holds_a_change_until_it_closes_and_a_restart_changes_nothing() {
    let ns = TestNamespace::new("windeny").await;
    let mut operator = Operator::start(&ns.name).await;
    let v1 = write_set(&ns, SET, "one", "");
    two_waves(&ns, SET, &v1).await;

    let (schedule, duration, closes) = open_for(40);
    let windows = window_yaml(4, "Deny", Some("release-freeze"), &schedule, &duration);
    let v2 = write_set(&ns, SET, "two", &format!("\n    windows:{windows}"));
    let held = wait_phase(&ns, SET, &v2, RolloutPhase::Waiting).await;
    assert_eq!(held.reason.as_deref(), Some("release-freeze"), "{held:?}");
    let next = held.next_window.as_ref().expect("when it opens").0;
    assert!(
        (next.as_second() - closes.as_second()).abs() <= 1,
        "nextWindow {next} is when the Deny window closes ({closes})"
    );
    stays("nothing moves while the window is open", STILL, || async {
        reads(&ns, FIRST).await == only(&v1) && reads(&ns, SECOND).await == only(&v1)
    })
    .await;
    let (ok, out) = cmset(&ns, &["status", SET]);
    assert!(
        ok && out.contains("release-freeze"),
        "status names the window: {out}"
    );
    let (ok, out) = cmset(&ns, &["windows", SET]);
    assert!(ok && out.contains(&schedule), "windows lists it: {out}");

    operator.restart().await;
    stays("nothing moves after a restart either", STILL, || async {
        reads(&ns, FIRST).await == only(&v1)
    })
    .await;
    let after = wait_phase(&ns, SET, &v2, RolloutPhase::Waiting).await;
    assert_eq!(after.held_since, held.held_since, "held since the same time");

    wait_reads(&ns, SECOND, &v2).await;
    let done = wait_phase(&ns, SET, &v2, RolloutPhase::Complete).await;
    let moved = ns.deployment(FIRST).await;
    let moved_at = status(&ns, SET)
        .await
        .and_then(|s| s.workloads.into_iter().find(|w| w.name == FIRST))
        .and_then(|w| w.moved_at);
    assert!(
        moved_at
            .as_ref()
            .is_some_and(|t| t.0 >= closes.checked_sub(1.second()).unwrap()),
        "wave 0 moved only once the window closed ({closes}): {moved_at:?} {:?}",
        moved.metadata.name
    );
    assert_eq!((done.reason, done.next_window), (None, None));
    let reasons = event_reasons(&ns, SET);
    for reason in ["RolloutWaiting", "RolloutResumed"] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "an Event {reason}: {reasons:?}"
        );
    }
}

#[tokio::test]
async fn an_allow_window_that_opens_soon_holds_then_lets_the_rollout_go() {
    let ns = TestNamespace::new("winallow").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = write_set(&ns, SET, "one", "");
    two_waves(&ns, SET, &v1).await;

    let (schedule, opens) = opening_soon();
    let windows = window_yaml(4, "Allow", None, &schedule, "10m");
    let v2 = write_set(&ns, SET, "two", &format!("\n    windows:{windows}"));
    let held = wait_phase(&ns, SET, &v2, RolloutPhase::Waiting).await;
    assert_eq!(held.reason.as_deref(), Some("OutsideWindow"));
    assert_eq!(held.next_window.as_ref().map(|t| t.0), Some(opens));
    let before = opens.checked_sub(SignedDuration::from_secs(2)).unwrap();
    while Timestamp::now() < before {
        assert_eq!(reads(&ns, FIRST).await, only(&v1), "nothing moves before {opens}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    wait_reads(&ns, SECOND, &v2).await;
    wait_phase(&ns, SET, &v2, RolloutPhase::Complete).await;
}

#[tokio::test]
async fn a_rollout_failing_inside_a_deny_window_is_still_rolled_back() {
    let ns = TestNamespace::new("winfail").await;
    let node = Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await;
    if !matches!(node, Ok(Some(_))) {
        eprintln!("SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE}");
        return;
    }
    let _operator = Operator::start(&ns.name).await;
    let rollout = "\n    autoRollback: true";
    let v1 = write_set(&ns, SET, "one", rollout);
    // Its own progress deadline is short: a workload that reports failure fails a held rollout at once
    // (window_judgement.rs shows cmset's own deadline running in a window too).
    ns.apply(
        &wave_deployment_yaml(FIRST, 0, SET)
            .replace("progressDeadlineSeconds: 3600", "progressDeadlineSeconds: 10"),
    );
    ns.apply(&wave_deployment_yaml(SECOND, 1, SET));
    wait_reads(&ns, SECOND, &v1).await;
    wait_phase(&ns, SET, &v1, RolloutPhase::Complete).await;

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
      MODE: "two"
      {FAIL_KEY}: "true"
"#
    ));
    let bad = kustomize_name(SET, &[("MODE", "two"), (FAIL_KEY, "true")]);
    wait_reads(&ns, FIRST, &bad).await;
    let (schedule, duration, _) = open_for(600);
    let name = change_window(&ns, &window_yaml(4, "Deny", None, &schedule, &duration));
    let failed = wait_phase(&ns, SET, &bad, RolloutPhase::Failed).await;
    wait_reads(&ns, FIRST, &v1).await;
    assert_eq!(reads(&ns, SECOND).await, only(&v1), "wave 1 never sees it");
    assert!(failed.message.is_some(), "{failed:?}");
    delete_change_window(&ns, &name).await;
}

#[tokio::test]
async fn a_cluster_deny_beats_a_set_allow_and_the_override_moves_one_set_only() {
    let ns = TestNamespace::new("winoverride").await;
    let _operator = Operator::start(&ns.name).await;
    // Each set allows moves at any time; the cluster denies them for ten minutes.
    let allow = format!(
        "\n    windows:{}",
        window_yaml(4, "Allow", None, "0 * * * *", "1h")
    );
    let a1 = write_set(&ns, "alpha", "one", &allow);
    let b1 = write_set(&ns, "beta", "one", &allow);
    ns.apply(&wave_deployment_yaml("reads-alpha", 0, "alpha"));
    ns.apply(&wave_deployment_yaml("reads-beta", 0, "beta"));
    wait_reads(&ns, "reads-alpha", &a1).await;
    wait_reads(&ns, "reads-beta", &b1).await;
    let (schedule, duration, _) = open_for(600);
    let freeze = change_window(
        &ns,
        &window_yaml(4, "Deny", Some("holidays"), &schedule, &duration),
    );

    let a2 = write_set(&ns, "alpha", "two", &allow);
    let b2 = write_set(&ns, "beta", "two", &allow);
    let held = wait_phase(&ns, "alpha", &a2, RolloutPhase::Waiting).await;
    assert_eq!(
        held.reason.as_deref(),
        Some("holidays"),
        "the cluster's Deny wins: {held:?}"
    );
    wait_phase(&ns, "beta", &b2, RolloutPhase::Waiting).await;
    stays("neither moves", STILL, || async {
        reads(&ns, "reads-alpha").await == only(&a1) && reads(&ns, "reads-beta").await == only(&b1)
    })
    .await;

    let (ok, out) = cmset(&ns, &["promote", "--override-window", "alpha"]);
    assert!(ok, "{out}");
    wait_reads(&ns, "reads-alpha", &a2).await;
    wait_phase(&ns, "alpha", &a2, RolloutPhase::Complete).await;
    // The WindowOverride the plugin created, with who created it (the webhook's record).
    let overrides = ns
        .api::<cmset_e2e::cmset_api::WindowOverride>()
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(overrides.items.len(), 1, "{overrides:?}");
    assert!(
        overrides.items[0].spec.requested_by.is_some(),
        "who: {overrides:?}"
    );
    assert!(
        event_reasons(&ns, "alpha")
            .iter()
            .any(|r| r == "WindowOverridden")
    );
    stays("the other set stays held", STILL, || async {
        reads(&ns, "reads-beta").await == only(&b1)
    })
    .await;
    assert_eq!(
        status(&ns, "beta").await.and_then(|s| s.rollout).map(|r| r.phase),
        Some(RolloutPhase::Waiting)
    );

    delete_change_window(&ns, &freeze).await;
    wait_reads(&ns, "reads-beta", &b2).await;
}

#[tokio::test]
async fn a_bad_schedule_is_refused_at_apply_naming_the_field() {
    let ns = TestNamespace::new("winbad").await;
    let _operator = Operator::start_validating_windows(&ns.name, &[]).await;
    let cases = [
        (
            window_yaml(4, "Deny", None, "61 * * * *", "1h"),
            "spec.rollout.windows[0].schedule",
        ),
        (
            window_yaml(4, "Deny", None, "0 * * * *", "an hour"),
            "spec.rollout.windows[0].duration",
        ),
        (
            format!(
                "{}\n      timeZone: Mars/Olympus",
                window_yaml(4, "Deny", None, "0 * * * *", "1h")
            ),
            "spec.rollout.windows[0].timeZone",
        ),
    ];
    for (windows, field) in cases {
        let yaml = format!(
            r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    windows:{windows}
  template:
    data:
      MODE: "one"
"#
        );
        let refused = eventually(&format!("apply refused naming {field}"), || async {
            let out = ns.try_kubectl(&["apply", "-f", "-"], Some(&yaml));
            match out {
                Err(e) if e.contains(field) => Some(e),
                _ => None,
            }
        })
        .await;
        assert!(refused.contains(field), "{refused}");
    }
    assert!(
        ns.api::<ConfigMapSet>().get_opt(SET).await.unwrap().is_none(),
        "nothing was stored"
    );
}

/// A Deployment of wave `wave` reading ConfigMapSet `config` (envFrom) and SecretSet `secret` (a
/// volume).
fn reader_yaml(name: &str, wave: i32, config: &str, secret: &str) -> String {
    let mounts =
        "          volumeMounts:\n            - {name: creds, mountPath: /etc/creds}\n          envFrom:";
    wave_deployment_yaml(name, wave, config).replace("          envFrom:", mounts)
        + &format!("      volumes:\n        - name: creds\n          secret: {{secretName: {secret}}}\n")
}

fn secret_names(d: &Deployment) -> BTreeSet<String> {
    cmset_e2e::secret_names(d.spec.as_ref().unwrap().template.spec.as_ref().unwrap())
}

#[tokio::test]
async fn a_rotated_secret_reaches_every_reader_at_once_and_another_sets_failure_rolls_back_that_set_only() {
    const CREDS: &str = "db-creds";
    const SOURCE: &str = "db-creds-source";
    const OPAQUE: &str = "Opaque";
    let ns = TestNamespace::new("winrotate").await;
    let fake_node = matches!(
        Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await,
        Ok(Some(_))
    );
    let _operator = Operator::start(&ns.name).await;
    let v1_data = [("password", "first")];
    put_secret(&ns, SOURCE, OPAQUE, &v1_data).await;
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata:
  name: {CREDS}
spec:
  secretName: {SOURCE}
  rollout:
    strategy: Immediate
"#
    ));
    let s1 = kustomize_secret_name(CREDS, OPAQUE, &v1_data);
    let c1 = write_set(
        &ns,
        SET,
        "one",
        "\n    autoRollback: true\n    progressDeadlineSeconds: 20",
    );
    ns.apply(&reader_yaml(FIRST, 0, SET, CREDS));
    ns.apply(&reader_yaml(SECOND, 1, SET, CREDS));
    for name in [FIRST, SECOND] {
        eventually_within(WAIT, &format!("{name} reads {s1} and {c1}"), || async {
            let d = ns.deployment(name).await;
            (secret_names(&d) == only(&s1) && template_names(&d).contains(&c1)).then_some(())
        })
        .await;
    }
    wait_phase(&ns, SET, &c1, RolloutPhase::Complete).await;

    // The admin's freeze lets rotated credentials through (`exemptStrategies: [Immediate]`).
    let (schedule, duration, _) = open_for(900);
    let freeze = change_window(&ns, &window_yaml(4, "Deny", None, &schedule, &duration));
    ns.kubectl(&[
        "patch",
        "changewindow",
        &freeze,
        "--type=merge",
        "-p",
        r#"{"spec":{"exemptStrategies":["Immediate"]}}"#,
    ]);
    // The secret manager rotates the password: both readers move at once, through waves and the
    // open Deny window.
    let v2_data = [("password", "second")];
    put_secret(&ns, SOURCE, OPAQUE, &v2_data).await;
    let s2 = kustomize_secret_name(CREDS, OPAQUE, &v2_data);
    eventually_within(WAIT, "both readers run the rotated Secret", || async {
        let first = secret_names(&ns.deployment(FIRST).await);
        let second = secret_names(&ns.deployment(SECOND).await);
        (first == only(&s2) && second == only(&s2)).then_some(())
    })
    .await;
    let creds = ns.api::<SecretSet>().get(CREDS).await.unwrap();
    let phase = creds.status.and_then(|s| s.rollout).map(|r| r.phase);
    assert_ne!(phase, Some(RolloutPhase::Waiting), "nothing holds a rotation");
    // The freeze binds the ConfigMapSet (strategy Waves): gone before it fails a wave below.
    delete_change_window(&ns, &freeze).await;

    if !fake_node {
        eprintln!("SKIPPED the failing wave: it needs the local cluster's simulated node {FAKE_NODE}");
        return;
    }
    // Another set those readers read fails in wave 0: its reference goes back, the Secret's stays.
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 0
    autoRollback: true
    progressDeadlineSeconds: 20
  template:
    data:
      MODE: "two"
      {FAIL_KEY}: "true"
"#
    ));
    let bad = kustomize_name(SET, &[("MODE", "two"), (FAIL_KEY, "true")]);
    wait_phase(&ns, SET, &bad, RolloutPhase::Failed).await;
    eventually_within(WAIT, "first is back on the good ConfigMap", || async {
        let d = ns.deployment(FIRST).await;
        template_names(&d).contains(&c1).then_some(())
    })
    .await;
    let first = ns.deployment(FIRST).await;
    assert_eq!(secret_names(&first), only(&s2), "the rotated Secret stays");
    assert!(!template_names(&ns.deployment(SECOND).await).contains(&bad));
}
