//! `kubectl cmset plan`: plan, then apply, then observe that reality matches the plan.
//!
//! One test walks a set through the plan's verdicts against one operator (which validates sets at
//! admission): a plain change (the revision's name is `kustomize build`'s and the one created; the key
//! diff is `kubectl cmset diff`'s afterwards), a workload pinned by `kubectl rollout undo` and one not
//! opted in (both left alone, generations unchanged), a revert (no new ConfigMap), invalid JSON (exit 1,
//! the message `kubectl apply` refuses with), a SecretSet (no value in any format), files mode given the
//! live objects exported agreeing with cluster mode, and planning itself changing no object, Event or
//! metric. A second plans a change held by a cluster Deny window over two waves, and a third places a
//! change in the rollout budget's line; each then applies and compares.

use std::process::{Command, Stdio};
use std::time::Duration;

use cmset_e2e::cmset_api::WorkloadState;
use cmset_e2e::fixtures::{DeploymentYaml, Reads, wave_deployment_yaml};
use cmset_e2e::k8s_openapi::jiff::Timestamp;
use cmset_e2e::rollout_wait::{only, reads, status, wait_reads};
use cmset_e2e::{
    Operator, TestNamespace, base64_encode, eventually, eventually_within, kustomize_name, plugin_bin,
    put_secret,
};
use serde_json::Value;

const SET: &str = "app-config";

/// One run of the plugin: exit code, standard output, standard error.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `kubectl cmset -n <ns> <args>`, with `stdin` on standard input and `env` set.
fn cmset_with(ns: &TestNamespace, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(plugin_bin())
        .args(["-n", &ns.name])
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the plugin");
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `kubectl cmset plan -f - -o json` of `yaml`: the exit code and the set's plan.
fn plan_json(ns: &TestNamespace, yaml: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut args = vec!["plan", "-f", "-", "-o", "json"];
    args.extend(extra);
    let run = cmset_with(ns, &args, Some(yaml), env);
    let doc: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("plan -o json: {e}\n{}\n{}", run.stdout, run.stderr));
    (run.code, doc["plans"][0].clone())
}

fn set_yaml(value: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  template:
    data:
      MODE: "{value}"
      COLOUR: "colour-{value}"
"#
    )
}

fn revision_of(value: &str) -> String {
    kustomize_name(SET, &[("MODE", value), ("COLOUR", &format!("colour-{value}"))])
}

/// Waits until the operator has written nothing for two seconds: what it does after a rollout (the
/// history's owners on a revision) is not the plan's doing.
async fn quiet(operator: &Operator) {
    eventually("the operator is quiet", || async {
        let before = operator.writes();
        tokio::time::sleep(Duration::from_secs(2)).await;
        (operator.writes() == before).then_some(())
    })
    .await;
}

/// Every object of the namespace with its resourceVersion, the Events, and the operator's metrics
/// that a plan must not move.
async fn snapshot(ns: &TestNamespace, operator: &Operator) -> (String, String, Vec<f64>) {
    let objects = ns.kubectl(&[
        "get",
        "configmaps,secrets,deployments,replicasets,configmapsets,secretsets",
        "-o",
        "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
    ]);
    let events = ns.kubectl(&[
        "get",
        "events",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.count}{\"\\n\"}{end}",
    ]);
    let metrics = vec![
        operator.writes(),
        operator.metric("cmset_validation_failures_total"),
        operator.metric("cmset_admissions_total"),
    ];
    (objects, events, metrics)
}

fn generation(d: &cmset_e2e::k8s_openapi::api::apps::v1::Deployment) -> Option<i64> {
    d.metadata.generation
}

#[tokio::test]
async fn plan_tells_what_a_change_will_do_and_reading_it_changes_nothing() {
    let ns = TestNamespace::new("plan").await;
    let operator = Operator::start_validating_windows(&ns.name, &[]).await;
    let v1 = revision_of("one");
    ns.apply(&set_yaml("one"));
    ns.apply(&DeploymentYaml::new("web", &[Reads::EnvFrom(SET)]).yaml());
    ns.apply(
        &DeploymentYaml::new("legacy", &[Reads::EnvFromOptional(SET)])
            .opted_in(false)
            .yaml(),
    );
    wait_reads(&ns, "web", &v1).await;

    // A plain change: its revision is kustomize's name, and the one the apply creates.
    let v2 = revision_of("two");
    quiet(&operator).await;
    let before = snapshot(&ns, &operator).await;
    // One instant for the cluster's plan and the files' one.
    let at = Timestamp::from_second(Timestamp::now().as_second())
        .unwrap()
        .to_string();
    let (code, plan) = plan_json(&ns, &set_yaml("two"), &["--at", &at], &[]);
    assert_eq!(code, 0, "{plan:#}");
    assert_eq!(plan["verdict"]["result"], "rollsOut", "{plan:#}");
    assert_eq!(plan["revision"]["name"], v2.as_str(), "{plan:#}");
    assert_eq!(plan["revision"]["new"], true);
    assert_eq!(plan["revision"]["number"], 2);
    assert_eq!(plan["validation"]["webhook"], "admitted", "{plan:#}");
    let rows = plan["workloads"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap().clone();
    assert_eq!(row("web")["action"], "restart");
    assert_eq!(row("web")["to"], v2.as_str());
    assert!(
        row("legacy")["action"]
            .as_str()
            .unwrap()
            .starts_with("not opted in")
    );
    let markdown = cmset_with(
        &ns,
        &["plan", "-f", "-", "-o", "markdown"],
        Some(&set_yaml("two")),
        &[],
    );
    assert!(
        markdown
            .stdout
            .contains(&format!("<!-- cmset-plan {}/{SET} -->", ns.name))
    );
    let table = cmset_with(&ns, &["plan", "-f", "-"], Some(&set_yaml("two")), &[]);
    assert!(
        table.stdout.starts_with("plan against the cluster"),
        "{}",
        table.stdout
    );
    let detailed = cmset_with(
        &ns,
        &["plan", "-f", "-", "--detailed-exitcode"],
        Some(&set_yaml("two")),
        &[],
    );
    assert_eq!(detailed.code, 4, "would change: {}", detailed.stderr);

    // Files mode, given the live objects exported, agrees with the cluster.
    let exported = ns.kubectl(&["get", "configmapsets,configmaps,deployments", "-o", "yaml"]);
    let dir = std::env::temp_dir().join(format!("cmset-plan-base-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("live.yaml"), exported).unwrap();
    let base = dir.to_str().unwrap();
    let (_, files) = plan_json(
        &ns,
        &set_yaml("two"),
        &["--against", "files", "--base", base, "--at", &at],
        &[],
    );
    for field in ["verdict", "revision", "keys", "workloads", "rollback"] {
        assert_eq!(
            files[field], plan[field],
            "{field}: files {files:#} cluster {plan:#}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(snapshot(&ns, &operator).await, before, "planning wrote nothing");

    let legacy = ns.deployment("legacy").await;
    ns.apply(&set_yaml("two"));
    wait_reads(&ns, "web", &v2).await;
    assert!(ns.revision_names(SET).await.contains(&v2));
    // The key diff is `kubectl cmset diff`'s of the revision made.
    let diff = cmset_with(&ns, &["diff", SET], None, &[]);
    let planned: String = plan["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["diff"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        diff.stdout
            .lines()
            .skip(2)
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
        planned
    );
    assert_eq!(generation(&ns.deployment("legacy").await), generation(&legacy));

    // Pinned by a rollback: the plan leaves it alone, and so does the apply.
    ns.kubectl(&["rollout", "undo", "deployment/web"]);
    eventually("web pinned on the first revision", || async {
        let s = status(&ns, SET).await?;
        s.workloads
            .iter()
            .any(|w| w.name == "web" && w.state == WorkloadState::Pinned)
            .then_some(())
    })
    .await;
    let relabelled = set_yaml("two").replace("spec:\n", "spec:\n  revisionHistoryLimit: 9\n");
    let (_, plan) = plan_json(&ns, &relabelled, &[], &[]);
    assert_eq!(plan["verdict"]["result"], "noChange", "{plan:#}");
    let rows = plan["workloads"].as_array().unwrap();
    let web = rows.iter().find(|r| r["name"] == "web").unwrap();
    assert_eq!(web["action"], "pinned by a rollback", "{plan:#}");
    let (pinned, legacy) = (ns.deployment("web").await, ns.deployment("legacy").await);
    ns.apply(&relabelled);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(generation(&ns.deployment("web").await), generation(&pinned));
    assert_eq!(generation(&ns.deployment("legacy").await), generation(&legacy));

    // A revert: the earlier content's revision is reused; no new ConfigMap.
    let (_, plan) = plan_json(&ns, &set_yaml("one"), &[], &[]);
    assert_eq!(plan["verdict"]["result"], "revert", "{plan:#}");
    assert_eq!(plan["verdict"]["revision"], 1);
    assert_eq!(plan["revision"]["name"], v1.as_str());
    assert_eq!(plan["revision"]["new"], false);
    let count = ns.revision_names(SET).await.len();
    ns.apply(&set_yaml("one"));
    eventually("the revert is current", || async {
        (status(&ns, SET).await?.current_revision? == v1).then_some(())
    })
    .await;
    assert_eq!(ns.revision_names(SET).await.len(), count, "no new ConfigMap");

    // Invalid JSON: exit 1, with the message the apply is refused with.
    quiet(&operator).await;
    let before = snapshot(&ns, &operator).await;
    let broken = format!(
        "{}  validation:\n    keys:\n      app.json: {{}}\n",
        set_yaml("three").replace(
            "      MODE: \"three\"\n",
            "      MODE: \"three\"\n      app.json: \"{\\\"port\\\": 80,}\"\n"
        )
    );
    let (code, plan) = plan_json(&ns, &broken, &[], &[]);
    assert_eq!(code, 1, "{plan:#}");
    assert_eq!(plan["verdict"]["result"], "refused");
    let message = plan["validation"]["messages"][0].as_str().unwrap().to_string();
    let webhook = plan["validation"]["webhook"].as_str().unwrap_or_default();
    assert!(
        webhook.starts_with("refused") && webhook.contains(&message),
        "the webhook refused the dry run with the same message: {plan:#}"
    );
    assert_eq!(
        snapshot(&ns, &operator).await,
        before,
        "a refused plan (its dry run refused by the webhook) wrote and counted nothing either"
    );
    let refused = ns.try_kubectl(&["apply", "-f", "-"], Some(&broken)).unwrap_err();
    assert!(refused.contains(&message), "apply: {refused}\nplan: {message}");

    // A SecretSet: key names only, in every format.
    const VALUE: &str = "hunter2-pl4n-s3cr3t";
    put_secret(&ns, "db-source", "Opaque", &[("password", VALUE)]).await;
    let secret_set = r#"
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata:
  name: db
spec:
  secretName: db-source
"#;
    for format in ["table", "json", "yaml", "markdown"] {
        let run = cmset_with(&ns, &["plan", "-f", "-", "-o", format], Some(secret_set), &[]);
        assert_eq!(run.code, 0, "{format}: {}{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("password"), "{format}: the key is named");
        for shown in [VALUE.to_string(), base64_encode(VALUE.as_bytes())] {
            assert!(
                !run.stdout.contains(&shown) && !run.stderr.contains(&shown),
                "{format} shows a value"
            );
        }
    }
}

/// A ChangeWindow Deny window selecting only `ns`, open from this minute's start until `seconds`
/// from now; when it closes.
fn deny_window(ns: &TestNamespace, seconds: i64) -> Timestamp {
    let now = Timestamp::now().as_second();
    let minute = now - now.rem_euclid(60);
    let end = now + seconds;
    let start = Timestamp::from_second(minute).unwrap();
    let civil = start.to_zoned(cmset_e2e::k8s_openapi::jiff::tz::TimeZone::UTC);
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ChangeWindow
metadata:
  name: {}-freeze
spec:
  namespaces: ["{}"]
  windows:
    - kind: Deny
      name: plan-freeze
      schedule: "{} {} * * *"
      duration: {}s
"#,
        ns.name,
        ns.name,
        civil.minute(),
        civil.hour(),
        end - minute
    ));
    Timestamp::from_second(end).unwrap()
}

fn waves_set(value: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 3
  template:
    data:
      MODE: "{value}"
"#
    )
}

fn parse(t: &Value) -> Timestamp {
    t.as_str()
        .unwrap_or_else(|| panic!("a time: {t}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn plan_says_when_a_cluster_window_and_waves_let_a_change_through() {
    let ns = TestNamespace::new("planwin").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = kustomize_name(SET, &[("MODE", "one")]);
    ns.apply(&waves_set("one"));
    ns.apply(&wave_deployment_yaml("first", 0, SET));
    ns.apply(&wave_deployment_yaml("second", 1, SET));
    wait_reads(&ns, "second", &v1).await;

    let closes = deny_window(&ns, 20);
    let v2 = kustomize_name(SET, &[("MODE", "two")]);
    let (code, plan) = plan_json(&ns, &waves_set("two"), &["--fail-on-hold"], &[]);
    assert_eq!(code, 3, "held, with --fail-on-hold: {plan:#}");
    assert_eq!(plan["verdict"]["result"], "held", "{plan:#}");
    let until = parse(&plan["verdict"]["until"]);
    assert!(
        (until.as_second() - closes.as_second()).abs() <= 1,
        "held until {until}, closes {closes}"
    );
    let rows = plan["workloads"].as_array().unwrap();
    let earliest = |name: &str| parse(&rows.iter().find(|r| r["name"] == name).unwrap()["earliest"]);
    assert!(
        earliest("second").as_second() >= until.as_second() + 3,
        "{plan:#}"
    );

    ns.apply(&waves_set("two"));
    wait_reads(&ns, "first", &v2).await;
    let moved = Timestamp::now();
    assert!(
        (moved.as_second() - earliest("first").as_second()).abs() <= 5,
        "wave 0 moved at {moved}, planned {}",
        earliest("first")
    );
    eventually_within(Duration::from_secs(90), "wave 1 moves", || async {
        (reads(&ns, "second").await == only(&v2)).then_some(())
    })
    .await;
    let moved = Timestamp::now().as_second();
    let planned = earliest("second").as_second();
    assert!(
        moved >= planned - 1 && moved - planned <= 5,
        "wave 1 moved at {moved}, planned no earlier than {planned} (within 5 s)"
    );
}

/// The key that makes the local cluster's fake node never make a pod reading it ready.
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";

fn plain_set(name: &str, value: &str) -> String {
    plain_set_with(name, value, "")
}

fn plain_set_with(name: &str, value: &str, more: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {name}
spec:
  template:
    data:
      MODE: "{value}"{more}
"#
    )
}

#[tokio::test]
async fn plan_places_a_change_in_the_rollout_budget_line() {
    let ns = TestNamespace::new("planbudget").await;
    let _operator = Operator::start_with(&ns.name, &["--max-moving-workloads", "1"]).await;
    ns.apply(&plain_set("slow", "one"));
    ns.apply(&wave_deployment_yaml("stuck", 0, "slow"));
    ns.apply(&plain_set(SET, "one"));
    ns.apply(&wave_deployment_yaml("next", 0, SET));
    wait_reads(&ns, "next", &kustomize_name(SET, &[("MODE", "one")])).await;
    wait_reads(&ns, "stuck", &kustomize_name("slow", &[("MODE", "one")])).await;
    // `stuck` moves to a revision its pods never get ready on, and holds the only slot.
    let slow2 = kustomize_name("slow", &[("MODE", "two"), (FAIL_KEY, "true")]);
    ns.apply(&plain_set_with(
        "slow",
        "two",
        &format!("\n      {FAIL_KEY}: \"true\""),
    ));
    wait_reads(&ns, "stuck", &slow2).await;

    // The cap is read from the cluster: `stuck` carries it beside its move mark.
    let (_, plan) = plan_json(&ns, &plain_set(SET, "two"), &[], &[]);
    let rows = plan["workloads"].as_array().unwrap();
    let next = rows.iter().find(|r| r["name"] == "next").unwrap().clone();
    let planned = next["gate"]
        .as_str()
        .unwrap_or_else(|| panic!("{plan:#}"))
        .to_string();
    assert!(planned.contains("number 1 in line"), "{plan:#}");
    // What the environment says wins over what the cluster shows: no budget of 1 in the plan.
    let said = plan_json(
        &ns,
        &plain_set(SET, "two"),
        &[],
        &[("CMSET_MAX_MOVING_WORKLOADS", "2")],
    )
    .1;
    assert!(!said.to_string().contains(" of 1 workloads moving"), "{said:#}");

    ns.apply(&plain_set(SET, "two"));
    let waiting = eventually("next waits for the budget", || async {
        let s = status(&ns, SET).await?;
        s.workloads
            .iter()
            .find(|w| w.name == "next" && w.state == WorkloadState::Waiting)
            .and_then(|w| w.message.clone())
    })
    .await;
    // The place in line and the cap, as the Waiting message says them. (The count moving is the
    // cluster's: other tests' operators may move workloads of their own meanwhile, which this one's
    // budget does not count.)
    let place = |m: &str| m.split(", ").nth(1).map(str::to_string);
    let cap = |m: &str| {
        m.split(" of ")
            .nth(1)
            .map(|r| r.split(' ').next().unwrap_or_default().to_string())
    };
    assert_eq!(place(&waiting), place(&planned), "{waiting} / {planned}");
    assert_eq!(cap(&waiting), cap(&planned), "{waiting} / {planned}");
    assert_eq!(place(&waiting).as_deref(), Some("number 1 in line"));
}
