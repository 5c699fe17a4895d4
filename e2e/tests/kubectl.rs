//! What a user sees through kubectl, on a real API server: `kubectl wait --for=condition=Ready`, the
//! printer columns of `kubectl get` (short name, full name, `-o wide`), and the events in `kubectl
//! describe`.

use std::collections::BTreeMap;

use cmset_e2e::fixtures::set_yaml;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name};

/// One table printed by `kubectl get`: its header and its rows, each as column → value.
#[derive(Debug)]
struct Table {
    header: Vec<String>,
    rows: Vec<BTreeMap<String, String>>,
}

/// Parses `kubectl get` output. Every value this test prints is a single word and none is empty, so
/// splitting on whitespace is exact; a row with another number of words fails the parse.
fn parse_table(out: &str) -> Table {
    let mut lines = out.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .unwrap_or_else(|| panic!("kubectl printed no header: {out:?}"))
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|line| {
            let values: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(
                values.len(),
                header.len(),
                "a row with one word per column {header:?}: {line:?}"
            );
            header
                .iter()
                .cloned()
                .zip(values.iter().map(|v| v.to_string()))
                .collect()
        })
        .collect();
    Table { header, rows }
}

/// The only row of `kubectl get <args>`, with the header checked against `columns`.
fn only_row(ns: &TestNamespace, args: &[&str], columns: &[&str]) -> BTreeMap<String, String> {
    let out = ns.kubectl(args);
    let table = parse_table(&out);
    assert_eq!(
        table.header,
        columns,
        "`kubectl {}` prints these columns:\n{out}",
        args.join(" ")
    );
    assert_eq!(table.rows.len(), 1, "one set, one row:\n{out}");
    table.rows.into_iter().next().unwrap()
}

/// `kubectl get` ages: `7s`, `2m3s`, `5h`, ...
fn is_age(age: &str) -> bool {
    age.starts_with(|c: char| c.is_ascii_digit())
        && age.chars().all(|c| c.is_ascii_digit() || "smhdy".contains(c))
        && age.ends_with(|c: char| "smhdy".contains(c))
}

const COLUMNS: [&str; 5] = ["NAME", "REVISION", "CONFIGMAP", "READY", "AGE"];
const WIDE_COLUMNS: [&str; 6] = ["NAME", "REVISION", "CONFIGMAP", "READY", "REASON", "AGE"];

fn assert_row(row: &BTreeMap<String, String>, revision: &str, configmap: &str, ready: &str) {
    assert_eq!(row["NAME"], "app-config", "NAME: {row:?}");
    assert_eq!(row["REVISION"], revision, "REVISION: {row:?}");
    assert_eq!(row["CONFIGMAP"], configmap, "CONFIGMAP: {row:?}");
    assert_eq!(row["READY"], ready, "READY: {row:?}");
    assert!(is_age(&row["AGE"]), "AGE looks like an age: {row:?}");
}

#[tokio::test]
async fn kubectl_wait_get_and_describe() {
    let ns = TestNamespace::new("kubectl").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = kustomize_name("app-config", &[("A", "1")]);
    let v2 = kustomize_name("app-config", &[("A", "2")]);

    // `kubectl wait` right after the apply: the set has no status yet, and the wait sees it become Ready.
    ns.apply(&set_yaml("app-config", &[("A", "1")], None));
    let waited = ns
        .try_kubectl(
            &[
                "wait",
                "--for=condition=Ready",
                "cmset/app-config",
                "--timeout=60s",
            ],
            None,
        )
        .expect("kubectl wait --for=condition=Ready succeeds");
    assert!(
        waited.contains("condition met"),
        "kubectl wait reports the condition met: {waited}"
    );

    // The printer columns, by short name and by full name.
    let row = only_row(&ns, &["get", "cmset"], &COLUMNS);
    assert_row(&row, "1", &v1, "True");
    let full = only_row(&ns, &["get", "configmapsets.cmset.dev"], &COLUMNS);
    assert_row(&full, "1", &v1, "True");
    let wide = only_row(&ns, &["get", "cmset", "-o", "wide"], &WIDE_COLUMNS);
    assert_row(&wide, "1", &v1, "True");
    assert_eq!(
        wide["REASON"], "RolledOut",
        "-o wide shows the Ready reason: {wide:?}"
    );

    let described = ns.kubectl(&["describe", "cmset", "app-config"]);
    let events = described
        .split_once("Events:")
        .map(|(_, e)| e.to_string())
        .unwrap_or_else(|| panic!("kubectl describe shows events:\n{described}"));
    let created_v1 = format!("Created revision 1 as ConfigMap {v1}");
    assert!(
        events
            .lines()
            .any(|l| l.contains("Normal") && l.contains("RevisionCreated") && l.contains(&created_v1)),
        "kubectl describe shows the event RevisionCreated {created_v1:?}:\n{events}"
    );

    // A new revision shows in the columns.
    ns.apply(&set_yaml("app-config", &[("A", "2")], None));
    let row = eventually("kubectl get cmset to show revision 2", || async {
        let row = only_row(&ns, &["get", "cmset"], &COLUMNS);
        (row["REVISION"] == "2" && row["READY"] == "True").then_some(row)
    })
    .await;
    assert_row(&row, "2", &v2, "True");

    // An invalid spec: READY False, REASON InvalidSpec, the current revision unchanged.
    ns.apply(&set_yaml("app-config", &[("A", "2"), ("bad key", "x")], None));
    let wide = eventually("kubectl get cmset -o wide to show InvalidSpec", || async {
        let row = only_row(&ns, &["get", "cmset", "-o", "wide"], &WIDE_COLUMNS);
        (row["REASON"] == "InvalidSpec").then_some(row)
    })
    .await;
    assert_row(&wide, "2", &v2, "False");
    let failed_wait = ns
        .try_kubectl(
            &[
                "wait",
                "--for=condition=Ready",
                "cmset/app-config",
                "--timeout=2s",
            ],
            None,
        )
        .expect_err("kubectl wait for Ready times out while the spec is invalid");
    assert!(
        failed_wait.contains("timed out"),
        "kubectl wait says it timed out: {failed_wait}"
    );

    // `kubectl describe` tells the whole story: the invalid key, and the second revision.
    let described = eventually("kubectl describe to show the InvalidSpec warning", || async {
        let d = ns.kubectl(&["describe", "cmset", "app-config"]);
        d.lines()
            .any(|l| l.contains("Warning") && l.contains("InvalidSpec"))
            .then_some(d)
    })
    .await;
    let events = described
        .split_once("Events:")
        .map(|(_, e)| e)
        .unwrap_or_default();
    assert!(
        events
            .lines()
            .any(|l| l.contains("InvalidSpec") && l.contains(r#"spec.template.data["bad key"]"#)),
        "kubectl describe shows the warning naming the bad key:\n{events}"
    );
    let created_v2 = format!("Created revision 2 as ConfigMap {v2}");
    assert!(
        events.contains(&created_v2),
        "kubectl describe shows the event RevisionCreated {created_v2:?}, each event with its own message:\n{events}"
    );
}

/// `kubectl explain` descends into optional fields: the published OpenAPI of a 1.20 server drops the
/// type of a `nullable` field, which the CRDs therefore no longer carry (`rollout <>` before).
#[tokio::test]
async fn kubectl_explain_descends_into_optional_fields() {
    let ns = TestNamespace::new("explain").await;
    for (path, field) in [
        ("configmapset.spec.rollout", "stabilizationSeconds"),
        ("configmapset.spec.rollout.analysis", "args"),
        ("configmapset.status", "settledWorkloads"),
        ("secretset.spec.rollout", "progressDeadlineSeconds"),
    ] {
        let out = eventually(&format!("kubectl explain {path} lists {field}"), || async {
            let out = ns.try_kubectl(&["explain", path], None).ok()?;
            out.contains("FIELDS:").then_some(out)
        })
        .await;
        assert!(
            out.contains(field),
            "kubectl explain {path} lists {field}:\n{out}"
        );
    }
}
