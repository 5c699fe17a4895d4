//! `kubectl cmset`, the plugin for people who inspect, run as a person would run it: the built binary,
//! the admin kubeconfig, output into a pipe. A set goes through three contents while an opted-in
//! Deployment follows it and a Deployment without the opt-in label merely references it; then the
//! opted-in one is rolled back. `history`, `diff` and `status` must tell that story. A second test reads
//! a SecretSet whose revisions and status it writes itself, and checks that no value is ever shown.
//!
//! A third runs the plugin once on a cluster without the Argo Rollouts CRD and once with it.
//!
//! The binary comes from `CMSET_PLUGIN_BIN`, else it sits next to this test's own target directory
//! (`target/debug/kubectl-cmset`): build it first with `cargo build -p kubectl-cmset`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cmset_e2e::cmset_api::labels;
use cmset_e2e::fault_proxy::{FaultProxy, Match, Rule, UNSERVED_BODY, UNSERVED_HEADERS};
use cmset_e2e::fixtures::{DeploymentYaml, Reads, Template, rollout_status, set_yaml_with, wait_names};
use cmset_e2e::kinds::install_crd;
use cmset_e2e::kube::config::{KubeConfigOptions, Kubeconfig};
use cmset_e2e::kube::{Client, Config, ResourceExt};
use cmset_e2e::{Operator, TestNamespace, eventually, plugin_bin};
use http_body_util::BodyExt;
use serde_json::Value;

const SET: &str = "app-config";

/// The set's content: a version, a multi-line properties file, and with `logo` a binary key.
fn set_yaml(version: &str, colour: &str, logo: bool) -> String {
    let properties = format!("greeting=hello\ncolour={colour}\nsize=1\n");
    let template = Template {
        binary_data: if logo {
            &[("logo.png", "iVBORw0KGgo=")]
        } else {
            &[]
        },
        ..Template::default()
    };
    set_yaml_with(
        SET,
        &[("APP_VERSION", version), ("app.properties", &properties)],
        None,
        template,
    )
}

/// A Deployment reading the set (optionally, so `legacy`, which is not opted in, starts too).
fn deployment_yaml(name: &str, opted_in: bool) -> String {
    DeploymentYaml::new(name, &[Reads::EnvFromOptional(SET)])
        .opted_in(opted_in)
        .yaml()
}

/// One run of the plugin.
#[derive(Debug)]
struct Run {
    stdout: String,
    stderr: String,
    code: i32,
}

/// Every standard output the plugin printed into a pipe, to check for escape sequences at the end.
#[derive(Default)]
struct Transcript {
    piped: Vec<String>,
    /// The kubeconfig the plugin is given (`--kubeconfig`); `$KUBECONFIG` when `None`.
    kubeconfig: Option<PathBuf>,
}

impl Transcript {
    /// `kubectl cmset -n <ns> <args>` with standard output into a pipe, as in a script.
    fn run(&mut self, ns: &TestNamespace, args: &[&str]) -> Run {
        let kubeconfig = self
            .kubeconfig
            .iter()
            .flat_map(|k| [Path::new("--kubeconfig"), k]);
        let out = Command::new(plugin_bin())
            .args(kubeconfig)
            .args(["-n", &ns.name])
            .args(args)
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .output()
            .expect("run the plugin");
        let run = Run {
            stdout: String::from_utf8(out.stdout).expect("UTF-8 output"),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            code: out.status.code().expect("exited, not killed"),
        };
        if !args.iter().any(|a| a.starts_with("--color")) {
            self.piped.push(run.stdout.clone());
        }
        run
    }

    /// Like [`Self::run`], and it must succeed with `code`.
    fn expect(&mut self, ns: &TestNamespace, args: &[&str], code: i32) -> String {
        let run = self.run(ns, args);
        assert_eq!(
            run.code,
            code,
            "kubectl cmset {}: stdout:\n{}\nstderr:\n{}",
            args.join(" "),
            run.stdout,
            run.stderr
        );
        run.stdout
    }

    fn json(&mut self, ns: &TestNamespace, args: &[&str], code: i32) -> Value {
        let out = self.expect(ns, args, code);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"))
    }
}

/// The rows of a table printed by the plugin, as column → value. Columns are cut at the positions of
/// the header's words (values may be empty or hold single spaces, as "USED BY" does).
fn parse_table(out: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = out.lines();
    let header = lines.next().expect("a header line");
    // A column starts at the beginning and after every run of two or more spaces (the plugin puts three
    // between columns; a header like "USED BY" holds one).
    let starts: Vec<usize> = header
        .char_indices()
        .filter(|&(i, c)| i == 0 || (c != ' ' && header[..i].ends_with("  ")))
        .map(|(i, _)| i)
        .collect();
    let names: Vec<String> = starts
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let end = starts.get(k + 1).copied().unwrap_or(header.len());
            header[s..end].trim().to_string()
        })
        .collect();
    lines
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(k, &s)| {
                    let end = starts.get(k + 1).copied().unwrap_or(line.len()).min(line.len());
                    let cell = line.get(s.min(line.len())..end).unwrap_or_default();
                    (names[k].clone(), cell.trim().to_string())
                })
                .collect()
        })
        .collect()
}

/// The revision ConfigMaps of the set by number.
async fn revisions_by_number(ns: &TestNamespace) -> BTreeMap<i64, String> {
    ns.revisions(SET)
        .await
        .iter()
        .filter_map(|cm| {
            Some((
                cm.annotations().get(labels::REVISION)?.parse().ok()?,
                cm.name_any(),
            ))
        })
        .collect()
}

/// Applies content `n` and waits until it is revision `n`, `web` runs it and its rollout is done.
async fn roll_to(ns: &TestNamespace, n: i64, yaml: &str) -> String {
    ns.apply(yaml);
    let name = eventually(&format!("revision {n} to be current"), || async {
        let status = ns.set(SET).await.status?;
        (status.revision == Some(n)).then_some(status.current_revision?)
    })
    .await;
    wait_names(ns, "web", &[&name]).await;
    rollout_status(ns, "deployment/web").await;
    name
}

#[tokio::test]
async fn the_plugin_tells_the_story_of_a_set() {
    let ns = TestNamespace::new("plugin").await;
    let _operator = Operator::start(&ns.name).await;
    let mut t = Transcript::default();

    ns.apply(&deployment_yaml("web", true));
    ns.apply(&deployment_yaml("legacy", false));
    let v1 = roll_to(&ns, 1, &set_yaml("1", "blue", false)).await;
    let alone = t.run(&ns, &["diff", SET]);
    assert_eq!(alone.code, 2, "{alone:?}");
    assert!(
        alone.stderr.contains(&format!(
            "configmapset \"{SET}\" has only one revision, revision 1 ({v1}): there is nothing to compare it with"
        )),
        "{alone:?}"
    );
    let v2 = roll_to(&ns, 2, &set_yaml("2", "red", false)).await;
    let v3 = roll_to(&ns, 3, &set_yaml("3", "red", true)).await;
    assert_eq!(
        revisions_by_number(&ns).await,
        BTreeMap::from([(1, v1.clone()), (2, v2.clone()), (3, v3.clone())])
    );

    // history: three rows, newest first, the current one marked, and what uses each. The ReplicaSets
    // become owners of the revisions they name shortly after they appear.
    let rows = eventually("history to show the ReplicaSets using each revision", || {
        let out = t.expect(&ns, &["history", SET], 0);
        async move {
            let rows = parse_table(&out);
            let uses_rs = |r: &BTreeMap<String, String>| r["USED BY"].contains("ReplicaSet/web-");
            (rows.len() == 3 && rows.iter().all(uses_rs)).then_some(rows)
        }
    })
    .await;
    let column = |name: &str| rows.iter().map(|r| r[name].clone()).collect::<Vec<_>>();
    assert_eq!(column("REVISION"), ["3", "2", "1"]);
    assert_eq!(column("CONFIGMAP"), [v3.clone(), v2.clone(), v1.clone()]);
    assert_eq!(column("CURRENT"), ["*", "", ""]);
    assert!(
        rows[0]["USED BY"].starts_with("Deployment/web, ReplicaSet/web-"),
        "{rows:?}"
    );
    assert!(!rows[1]["USED BY"].contains("Deployment/"), "{rows:?}");
    assert!(rows.iter().all(|r| !r["AGE"].is_empty()), "{rows:?}");

    let history = t.json(&ns, &["history", SET, "-o", "json"], 0);
    let history = history.as_array().expect("a list");
    assert_eq!(history.len(), 3);
    for field in ["revision", "configMap", "created", "age", "current", "usedBy"] {
        assert!(
            history.iter().all(|r| r.get(field).is_some()),
            "{field} in {history:?}"
        );
    }
    assert_eq!(history[0]["revision"], 3);
    assert_eq!(history[0]["configMap"], v3.as_str());
    assert_eq!(history[0]["current"], true);
    assert_eq!(history[1]["current"], false);
    let used_by = history[0]["usedBy"].as_array().unwrap();
    assert_eq!(used_by[0], "Deployment/web");
    assert!(
        used_by
            .iter()
            .any(|u| u.as_str().unwrap().starts_with("ReplicaSet/web-"))
    );
    let yaml = t.expect(&ns, &["history", SET, "-o", "yaml"], 0);
    assert!(yaml.starts_with("- revision: 3\n"), "{yaml}");

    // diff, by default the previous revision against the current one: the changed key and the added
    // binary key (summarised, never printed); exit status 1 because they differ.
    let diff = t.expect(&ns, &["diff", SET], 1);
    assert!(
        diff.starts_with(&format!("--- {v2} (revision 2)\n+++ {v3} (revision 3)\n")),
        "{diff}"
    );
    assert!(diff.contains("@@ APP_VERSION: changed @@\n-2\n+3\n"), "{diff}");
    assert!(
        diff.contains("@@ logo.png: added (binary) @@\n+binary, 8 bytes, sha256 "),
        "{diff}"
    );
    assert!(
        !diff.contains("app.properties"),
        "unchanged keys are not shown: {diff}"
    );

    let diff = t.expect(&ns, &["diff", SET, "1", "3"], 1);
    assert!(
        diff.starts_with(&format!("--- {v1} (revision 1)\n+++ {v3} (revision 3)\n")),
        "{diff}"
    );
    assert!(diff.contains("@@ APP_VERSION: changed @@\n-1\n+3\n"), "{diff}");
    assert!(
        diff.contains("@@ app.properties: changed @@\n greeting=hello\n-colour=blue\n+colour=red\n size=1\n"),
        "multi-line values are diffed line by line: {diff}"
    );
    // By ConfigMap name, and a revision against itself: identical, exit status 0, nothing printed.
    assert_eq!(t.expect(&ns, &["diff", SET, &v1, "3"], 1), diff);
    assert_eq!(t.expect(&ns, &["diff", SET, "2", &v2], 0), "");

    let report = t.json(&ns, &["diff", SET, "-o", "json"], 1);
    assert_eq!(report["from"]["revision"], 2);
    assert_eq!(report["to"]["configMap"], v3.as_str());
    assert_eq!(report["identical"], false);
    let keys: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["APP_VERSION", "logo.png"]);
    assert_eq!(report["changes"][1]["to"]["binary"]["size"], 8);

    // Mistakes get a clear message and exit status 2.
    let unknown = t.run(&ns, &["diff", SET, "9"]);
    assert_eq!(unknown.code, 2);
    assert!(
        unknown.stderr.contains(&format!(
            "configmapset \"{SET}\" has no revision \"9\"; it has revision 3 ({v3})"
        )),
        "{unknown:?}"
    );
    let missing = t.run(&ns, &["history", "no-such-set"]);
    assert_eq!(missing.code, 2);
    assert!(
        missing.stderr.contains(&format!(
            "configmapset \"no-such-set\" not found in namespace \"{}\"",
            ns.name
        )),
        "{missing:?}"
    );

    // status: the set, and each workload with the reason it runs what it runs.
    let status = t.expect(&ns, &["status", SET], 0);
    assert!(
        status.contains(&format!("Current:      revision 3, ConfigMap {v3}\n")),
        "{status}"
    );
    assert!(status.contains("Ready:        True ("), "{status}");
    assert!(!status.contains("status is behind the spec"), "{status}");
    let table = status
        .split("\n\n")
        .nth(1)
        .expect("a table after the set's fields");
    let by_workload: BTreeMap<String, BTreeMap<String, String>> = parse_table(table)
        .into_iter()
        .map(|r| (r["WORKLOAD"].clone(), r))
        .collect();
    assert_eq!(
        by_workload.keys().collect::<Vec<_>>(),
        ["Deployment/legacy", "Deployment/web"]
    );
    assert_eq!(by_workload["Deployment/web"]["WHY"], "current (updated by cmset)");
    assert_eq!(by_workload["Deployment/web"]["REVISION"], "3");
    assert_eq!(
        by_workload["Deployment/legacy"]["WHY"],
        "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it"
    );
    assert_eq!(by_workload["Deployment/legacy"]["CONFIGMAP"], SET);

    let report = t.json(&ns, &["status", SET, "-o", "json"], 0);
    assert_eq!(report["set"], SET);
    assert_eq!(report["namespace"], ns.name.as_str());
    assert_eq!(report["statusBehindSpec"], false);
    assert_eq!(report["currentRevision"]["revision"], 3);
    assert_eq!(report["ready"]["status"], "True");
    let states: Vec<(&str, &str, bool)> = report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap(),
                w["state"].as_str().unwrap(),
                w["optedIn"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [("legacy", "notOptedIn", false), ("web", "current", true)]
    );

    // A rollback pins `web` to revision 2, and `why` says so.
    ns.kubectl(&["rollout", "undo", "deployment/web"]);
    rollout_status(&ns, "deployment/web").await;
    let why = eventually("status to explain the rollback", || {
        let out = t.expect(&ns, &["why", SET, "deploy/web"], 0);
        async move { out.contains("pinned to revision 2").then_some(out) }
    })
    .await;
    let rows = parse_table(why.split("\n\n").nth(1).unwrap());
    assert_eq!(rows.len(), 1, "only the workload asked about: {why}");
    assert_eq!(
        rows[0]["WHY"],
        "pinned to revision 2 by a rollback; moves again when the set's content changes"
    );
    assert_eq!(rows[0]["CONFIGMAP"], v2);
    let web = t.json(&ns, &["why", SET, "deployment/web", "-o", "json"], 0);
    assert_eq!(web["workloads"][0]["state"], "pinned");
    assert_eq!(web["workloads"][0]["revision"], 2);
    let history = t.expect(&ns, &["history", SET], 0);
    let rows = parse_table(&history);
    assert!(rows[1]["USED BY"].starts_with("Deployment/web"), "{history}");
    assert!(!rows[0]["USED BY"].contains("Deployment/"), "{history}");

    // Into a pipe, nothing is coloured; asked to, it is.
    assert!(t.piped.len() > 10);
    for out in &t.piped {
        assert!(
            !out.contains('\u{1b}'),
            "an escape sequence in piped output:\n{out}"
        );
    }
    let coloured = t.expect(&ns, &["diff", SET, "1", "3", "--color=always"], 1);
    assert!(
        coloured.contains("\u{1b}[31m-colour=blue\u{1b}[0m"),
        "{coloured:?}"
    );
}

/// The values of the SecretSet test's revisions: every one holds `SECRET-`, which no key does, so any
/// output holding `SECRET-` (or a value's base64) leaked a value.
const PASSWORD_1: &str = "hunter2-SECRET-VALUE";
const PASSWORD_2: &[u8] = b"\x00\xff\xfeSECRET-BYTES\x1b[31m";
const TOKEN: &str = "tok-SECRET-VALUE-1";
const LEGACY: &str = "legacy-SECRET-VALUE-3";
const USERNAME: &str = "admin-SECRET-VALUE-2";

fn assert_no_values(run: &Run) {
    use base64::Engine;
    let base64 = |v: &[u8]| base64::engine::general_purpose::STANDARD.encode(v);
    let values: [&[u8]; 5] = [
        PASSWORD_1.as_bytes(),
        PASSWORD_2,
        TOKEN.as_bytes(),
        LEGACY.as_bytes(),
        USERNAME.as_bytes(),
    ];
    for out in [&run.stdout, &run.stderr] {
        assert!(!out.contains("SECRET-"), "a value leaked: {run:?}");
        for value in values {
            assert!(!out.contains(&base64(value)), "a value leaked in base64: {run:?}");
        }
    }
}

/// A revision Secret of SecretSet `db` as cmset makes one: immutable, named `db-<hash>`, labelled with
/// its set, numbered, and controlled by the set. Created, not applied, so no annotation repeats it.
fn revision_secret(ns: &TestNamespace, name: &str, number: i64, set_uid: &str, data: &[(&str, &[u8])]) {
    use base64::Engine;
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            let encoded = base64::engine::general_purpose::STANDARD.encode(v);
            (k.to_string(), Value::String(encoded))
        })
        .collect();
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "labels": {labels::SET: "db"},
            "annotations": {
                labels::REVISION: number.to_string(),
                labels::CONTENT_HASH: name.trim_start_matches("db-"),
            },
            "ownerReferences": [{
                "apiVersion": "cmset.dev/v1alpha1",
                "kind": "SecretSet",
                "name": "db",
                "uid": set_uid,
                "controller": true,
            }],
        },
        "type": "Opaque",
        "immutable": true,
        "data": data,
    });
    ns.try_kubectl(&["create", "-f", "-"], Some(&secret.to_string()))
        .expect("create a revision Secret");
}

/// A Deployment whose pod reads Secret `secret` through `reads` (a YAML block for the container, or
/// for the pod when it starts with `volumes:`).
fn secret_deployment_yaml(name: &str, opted_in: bool, reads: &str) -> String {
    let (container, pod) = if reads.starts_with("volumes:") {
        (String::new(), format!("\n      {reads}"))
    } else {
        (format!("\n          {reads}"), String::new())
    };
    let spec = format!(
        "\n      containers:\n        - name: app\n          image: registry.k8s.io/pause:3.9{container}{pod}\n"
    );
    DeploymentYaml::with_pod_spec(name, &spec)
        .opted_in(opted_in)
        .yaml()
}

/// The plugin on a SecretSet. No operator runs (this branch's has no SecretSet support yet): the test
/// writes what cmset would (the set, its revision Secrets, its status), so it proves the plugin alone:
/// addressing by kind, history and status through Secret references only, and a diff that names keys
/// and never shows a value.
#[tokio::test]
async fn the_plugin_reads_a_secret_set_and_never_shows_a_value() {
    let ns = TestNamespace::new("plugin-secrets").await;
    let mut t = Transcript::default();
    let (v1, v2) = ("db-5k2m7f9c4b", "db-8t6h4g2d9k");

    ns.apply(
        "apiVersion: cmset.dev/v1alpha1\nkind: SecretSet\nmetadata: {name: db}\nspec: {secretName: db-source}\n",
    );
    let set_uid = ns.kubectl(&["get", "secretset", "db", "-o", "jsonpath={.metadata.uid}"]);
    let set_uid = set_uid.trim();
    revision_secret(
        &ns,
        v1,
        1,
        set_uid,
        &[
            ("password", PASSWORD_1.as_bytes()),
            ("token", TOKEN.as_bytes()),
            ("legacy", LEGACY.as_bytes()),
        ],
    );
    revision_secret(
        &ns,
        v2,
        2,
        set_uid,
        &[
            ("password", PASSWORD_2),
            ("token", TOKEN.as_bytes()),
            ("username", USERNAME.as_bytes()),
        ],
    );
    // `api` runs the current revision, `old` was rolled back to revision 1, `legacy` names the bare set
    // without opting in; `configmaps` names a ConfigMap of a revision's name, which is no reference to a
    // SecretSet.
    let env_from =
        |name: &str| format!("envFrom:\n            - secretRef: {{name: {name}, optional: true}}");
    ns.apply(&secret_deployment_yaml("api", true, &env_from(v2)));
    ns.apply(&secret_deployment_yaml(
        "old",
        true,
        &format!("volumes:\n        - name: creds\n          secret: {{secretName: {v1}, optional: true}}"),
    ));
    ns.apply(&secret_deployment_yaml("legacy", false, &env_from("db")));
    ns.apply(
        &DeploymentYaml::new("configmaps", &[Reads::EnvFromOptional(v2)])
            .opted_in(true)
            .yaml(),
    );
    let uid = |name: &str| {
        let uid = ns.kubectl(&["get", "deployment", name, "-o", "jsonpath={.metadata.uid}"]);
        uid.trim().to_string()
    };
    // As cmset records it: both ran revision 2 (`old` was rolled back from it), and the history lists
    // both revisions.
    let workload = |name: &str, revision: &str, state: &str| serde_json::json!({"kind": "Deployment", "name": name, "uid": uid(name), "revision": revision, "state": state, "rolledOut": v2});
    let status = serde_json::json!({"status": {
        "observedGeneration": 1,
        "revision": 2,
        "currentRevision": v2,
        "history": [
            {"name": v2, "revision": 2, "inUse": true},
            {"name": v1, "revision": 1, "inUse": true},
        ],
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "RolledOut",
            "message": "every opted-in workload runs revision 2 or is pinned",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
        "workloads": [workload("api", v2, "Current"), workload("old", v1, "Pinned")],
    }});
    ns.kubectl(&[
        "patch",
        "secretset",
        "db",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);

    // history, by every way of naming the set; a bare name finds the SecretSet, the only set called so.
    // (Rows without their age, which may tick between two runs.)
    let history = |t: &mut Transcript, address: &str| {
        let mut rows = parse_table(&t.expect(&ns, &["history", address], 0));
        rows.iter_mut().for_each(|r| assert!(r.remove("AGE").is_some()));
        rows
    };
    let rows = history(&mut t, "secretset/db");
    for address in ["secretsets/db", "secset/db", "db"] {
        assert_eq!(history(&mut t, address), rows, "{address}");
    }
    let column = |name: &str| rows.iter().map(|r| r[name].clone()).collect::<Vec<_>>();
    assert_eq!(column("REVISION"), ["2", "1"]);
    assert_eq!(column("SECRET"), [v2, v1]);
    assert_eq!(column("CURRENT"), ["*", ""]);
    assert_eq!(column("USED BY"), ["Deployment/api", "Deployment/old"]);
    let json = t.json(&ns, &["history", "secset/db", "-o", "json"], 0);
    assert_eq!(json[0]["secret"], v2);
    assert!(json[0].get("configMap").is_none(), "{json}");

    // diff: keys only, in every format, with the exit status of diff(1).
    let diff = t.run(&ns, &["diff", "secretset/db"]);
    assert_eq!(diff.code, 1, "{diff:?}");
    assert_eq!(
        diff.stdout,
        format!(
            "--- {v1} (revision 1)\n+++ {v2} (revision 2)\n@@ legacy: removed @@\n@@ password: changed @@\n\
             @@ username: added @@\n"
        )
    );
    assert_no_values(&diff);
    for format in ["json", "yaml"] {
        let run = t.run(&ns, &["diff", "secretset/db", "1", "2", "-o", format]);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(
            run.stdout.contains("password") && run.stdout.contains("changed"),
            "{run:?}"
        );
        assert_no_values(&run);
    }
    let coloured = t.run(&ns, &["diff", "db", "--color=always"]);
    assert_eq!(coloured.code, 1, "{coloured:?}");
    assert_no_values(&coloured);
    let same = t.run(&ns, &["diff", "db", "2", v2]);
    assert_eq!((same.code, same.stdout.as_str()), (0, ""), "{same:?}");
    assert_no_values(&same);
    let unknown = t.run(&ns, &["diff", "db", "9"]);
    assert_eq!(unknown.code, 2, "{unknown:?}");
    assert!(
        unknown.stderr.contains("secretset \"db\" has no revision \"9\""),
        "{unknown:?}"
    );

    // status: through Secret references only.
    let status = t.expect(&ns, &["status", "secretset/db"], 0);
    assert!(status.starts_with("SecretSet:    db (namespace "), "{status}");
    assert!(
        status.contains(&format!("Current:      revision 2, Secret {v2}\n")),
        "{status}"
    );
    let table = status.split("\n\n").nth(1).expect("a table of workloads");
    let by_workload: BTreeMap<String, BTreeMap<String, String>> = parse_table(table)
        .into_iter()
        .map(|r| (r["WORKLOAD"].clone(), r))
        .collect();
    assert_eq!(
        by_workload.keys().collect::<Vec<_>>(),
        ["Deployment/api", "Deployment/legacy", "Deployment/old"]
    );
    assert_eq!(by_workload["Deployment/api"]["WHY"], "current (updated by cmset)");
    assert_eq!(
        by_workload["Deployment/old"]["WHY"],
        "pinned to revision 1 by a rollback; moves again when the set's content changes"
    );
    assert_eq!(by_workload["Deployment/legacy"]["SECRET"], "db");
    let why = t.json(&ns, &["why", "secset/db", "deploy/old", "-o", "json"], 0);
    assert_eq!(why["kind"], "SecretSet");
    assert_eq!(why["workloads"][0]["secret"], v1);

    // A ConfigMapSet of the same name: a bare name is now ambiguous, and each kind is its own set.
    ns.apply(&set_yaml_with("db", &[("K", "v")], None, Template::default()));
    let both = t.run(&ns, &["history", "db"]);
    assert_eq!(both.code, 2, "{both:?}");
    assert!(
        both.stderr.contains(&format!(
            "both a configmapset and a secretset are named \"db\" in namespace \"{}\": write \
             configmapset/db or secretset/db",
            ns.name
        )),
        "{both:?}"
    );
    let cm = t.run(&ns, &["history", "configmapset/db"]);
    assert_eq!((cm.code, cm.stdout.as_str()), (0, ""), "{cm:?}");
    assert!(cm.stderr.contains("configmapset \"db\" in namespace"), "{cm:?}");
    assert_eq!(history(&mut t, "secretset/db"), rows);
    let missing = t.run(&ns, &["history", "secretset/nope"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(
        missing.stderr.contains(&format!(
            "secretset \"nope\" not found in namespace \"{}\"",
            ns.name
        )),
        "{missing:?}"
    );

    for out in &t.piped {
        assert!(
            !out.contains('\u{1b}'),
            "an escape sequence in piped output:\n{out}"
        );
    }
}

/// A Rollout reading the set, without the opt-in label: cmset leaves it alone, the plugin lists it
/// wherever Rollouts are served. No Argo controller runs, and it asks for no pod.
fn rollout_yaml(name: &str) -> String {
    format!(
        r#"
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: {name}
spec:
  replicas: 0
  selector:
    matchLabels: {{app: {name}}}
  strategy:
    canary: {{}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef: {{name: {SET}, optional: true}}
"#
    )
}

fn admin_kubeconfig() -> PathBuf {
    std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .expect("KUBECONFIG names the cluster (run e2e/run.sh)")
}

/// A file removed when this is dropped, even by a failing test: the proxied kubeconfig holds the admin
/// credentials.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An answer of the API server: status, the headers that say what the body is, and the body.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

/// A GET of `path` with the client of `kubeconfig`, whatever it answers.
async fn raw_get(kubeconfig: &Path, path: &str) -> Answer {
    let file = Kubeconfig::read_from(kubeconfig).expect("read the kubeconfig");
    let config = Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .expect("a usable kubeconfig");
    let client = Client::try_from(config).expect("a client");
    let request = http::Request::get(path)
        .body(Vec::new().into())
        .expect("a request");
    let response = client.send(request).await.expect("an answer");
    let headers = UNSERVED_HEADERS
        .iter()
        .filter_map(|(name, _)| {
            let value = response.headers().get(*name)?.to_str().ok()?;
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    let code = response.status().as_u16();
    let body = response.into_body().collect().await.expect("the body").to_bytes();
    Answer {
        code,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// The plugin on a cluster that does not serve Argo Rollouts, and on one that does (issue 25). The CRD
/// stays installed, since tests running at the same time use it: for the first run the plugin reaches
/// the API server through a proxy that answers every request under `argoproj.io` as a server without
/// the CRD does (checked against the server's own answer for a group it does not serve); the second
/// reaches it directly. Every command works in both; both show the set's Deployments, and only the
/// second the Rollout that references the set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_works_with_and_without_argo_rollouts() {
    install_crd("argo-rollouts-crd.yaml", "rollouts.argoproj.io").await;
    let ns = TestNamespace::new("plugin-rollouts").await;
    let _operator = Operator::start(&ns.name).await;
    ns.apply(&deployment_yaml("web", true));
    ns.apply(&deployment_yaml("legacy", false));
    roll_to(&ns, 1, &set_yaml("1", "blue", false)).await;
    let v2 = roll_to(&ns, 2, &set_yaml("2", "red", false)).await;
    ns.apply(&rollout_yaml("canary"));

    let proxy = FaultProxy::start(&admin_kubeconfig()).await;
    proxy.inject(Rule::unserved_group("argoproj.io"));
    let without = proxy.kubeconfig(&format!("{}-without-rollouts", ns.name));
    let _remove = Removed(without.clone());
    // The server's own answer for a group it does not serve is what the proxy and the plugin's stand-in
    // server (crates/kubectl-cmset/src/stand_in.rs) were told it is.
    let not_served = raw_get(
        &admin_kubeconfig(),
        "/apis/not-served.cmset.dev/v1/namespaces/x/things",
    )
    .await;
    let recorded = Answer {
        code: 404,
        headers: UNSERVED_HEADERS
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: UNSERVED_BODY.to_string(),
    };
    assert_eq!(
        not_served, recorded,
        "the API server's answer for a group it does not serve"
    );
    let rollouts = format!("/apis/argoproj.io/v1alpha1/namespaces/{}/rollouts", ns.name);
    assert_eq!(
        raw_get(&without, &rollouts).await,
        not_served,
        "through the proxy"
    );
    assert_eq!(
        raw_get(&admin_kubeconfig(), &rollouts).await.code,
        200,
        "directly"
    );

    let not_opted_in = "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it";
    for (served, kubeconfig) in [(false, Some(without)), (true, None)] {
        let mut t = Transcript {
            kubeconfig,
            ..Transcript::default()
        };
        let context = if served {
            "Rollouts served"
        } else {
            "Rollouts not served"
        };
        let status = t.expect(&ns, &["status", SET], 0);
        let table = status
            .split("\n\n")
            .nth(1)
            .expect("a table after the set's fields");
        let by_workload: BTreeMap<String, BTreeMap<String, String>> = parse_table(table)
            .into_iter()
            .map(|r| (r["WORKLOAD"].clone(), r))
            .collect();
        let mut expected = vec!["Deployment/legacy", "Deployment/web"];
        if served {
            expected.push("Rollout/canary");
            assert_eq!(by_workload["Rollout/canary"]["WHY"], not_opted_in, "{status}");
        }
        assert_eq!(
            by_workload.keys().collect::<Vec<_>>(),
            expected,
            "{context}: {status}"
        );
        // (After the first round's pause and resume, the set shows its rollout, and "; healthy" follows.)
        assert!(
            by_workload["Deployment/web"]["WHY"].starts_with("current (updated by cmset)"),
            "{context}: {status}"
        );
        assert_eq!(by_workload["Deployment/web"]["CONFIGMAP"], v2, "{context}");
        assert_eq!(by_workload["Deployment/legacy"]["WHY"], not_opted_in, "{context}");

        let why = t.json(&ns, &["why", SET, "deploy/web", "-o", "json"], 0);
        assert_eq!(why["workloads"][0]["state"], "current", "{context}: {why}");
        let rollout = t.run(&ns, &["why", SET, "rollout/canary", "-o", "json"]);
        assert_eq!(rollout.code, if served { 0 } else { 2 }, "{context}: {rollout:?}");
        let history = parse_table(&t.expect(&ns, &["history", SET], 0));
        assert_eq!(history.len(), 2, "{context}: {history:?}");
        let diff = t.expect(&ns, &["diff", SET], 1);
        assert!(
            diff.contains("@@ APP_VERSION: changed @@\n-1\n+2\n"),
            "{context}: {diff}"
        );
        let paused = t.expect(&ns, &["pause", SET], 0);
        assert!(paused.contains(" paused: "), "{context}: {paused}");
        let resumed = t.expect(&ns, &["resume", SET], 0);
        assert!(resumed.contains(" resumed: "), "{context}: {resumed}");
    }
    let asked = proxy.count(&Match::path("/apis/argoproj.io/"));
    assert!(
        asked >= 2,
        "the plugin asked for Rollouts through the proxy ({asked} requests) and was told they are not served"
    );
}
