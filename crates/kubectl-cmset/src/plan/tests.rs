//! Plans from literal objects, in files mode (the same function cluster mode ends in): goldens for
//! the table, Markdown and JSON (`CMSET_UPDATE_GOLDEN=1` rewrites them), the JSON against the shipped
//! schema, a SecretSet's values in no format, exit codes and bad input.

use std::path::PathBuf;
use std::time::Duration;

use cmset_api::ConfigMapSet;
use cmset_core::revisions::revision::inline_identity;
use serde_json::{Value, json};

use super::objects::{Object, documents};
use super::report::PlanDocument;
use super::*;

const NS: &str = "team";
const AT: &str = "2026-11-27T18:00:00Z";

fn set_value(value: &str, extra: Value) -> Value {
    let mut set = json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": "ConfigMapSet",
        "metadata": {"name": "app-config", "namespace": NS},
        "spec": {
            "rollout": {"stabilizationSeconds": 60},
            "template": {"data": {"MODE": value, "app.properties": format!("colour={value}\nsize=1\n")}},
        },
    });
    merge(&mut set, extra);
    set
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn revision_name(set: &Value) -> String {
    let set: ConfigMapSet = serde_json::from_value(set.clone()).unwrap();
    let identity = inline_identity((&set).into()).unwrap();
    cmset_core::revisions::naming::revision_name("app-config", &identity)
}

fn deployment(name: &str, wave: Option<i32>, reads: &str, opted_in: bool) -> Value {
    let mut labels = json!({});
    if opted_in {
        labels["cmset.dev/enabled"] = json!("true");
    }
    if let Some(w) = wave {
        labels["cmset.dev/wave"] = json!(w.to_string());
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "generation": 3,
                     "resourceVersion": "77", "labels": labels},
        "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": name}},
                 "spec": {"containers": [{"name": "app", "image": "x",
                          "envFrom": [{"configMapRef": {"name": reads}}]}]}}},
        "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
                   "availableReplicas": 1},
    })
}

/// The live world: `app-config` rolled out on "one" to `web` (wave 0) and `api` (wave 1); `legacy`
/// reads it without opting in; a cluster Deny window is open at [`AT`] until Monday 09:00.
fn base() -> Vec<Object> {
    let live = set_value("one", json!({}));
    let v1 = revision_name(&live);
    let live = set_value(
        "one",
        json!({
            "metadata": {"uid": "set-uid", "generation": 1, "resourceVersion": "100"},
            "status": {
                "observedGeneration": 1, "revision": 1, "currentRevision": v1,
                "history": [{"name": v1, "revision": 1, "inUse": true}],
                "workloads": [
                    {"kind": "Deployment", "name": "api", "uid": "uid-api", "revision": v1, "state": "Current", "rolledOut": v1},
                    {"kind": "Deployment", "name": "web", "uid": "uid-web", "revision": v1, "state": "Current", "rolledOut": v1},
                ],
                "rollout": {"revision": v1, "phase": "Complete", "wave": 1, "waves": [0, 1]},
            },
        }),
    );
    let revision = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": v1, "namespace": NS, "uid": "rev-1", "resourceVersion": "101",
                     "creationTimestamp": "2026-11-01T00:00:00Z",
                     "labels": {"cmset.dev/set": "app-config"},
                     "annotations": {"cmset.dev/revision": "1", "cmset.dev/content-hash": v1.rsplit('-').next().unwrap()},
                     "ownerReferences": [{"apiVersion": "cmset.dev/v1alpha1", "kind": "ConfigMapSet",
                                          "name": "app-config", "uid": "set-uid", "controller": true}]},
        "data": {"MODE": "one", "app.properties": "colour=one\nsize=1\n"},
    });
    let window = json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "ChangeWindow",
        "metadata": {"name": "weekend-freeze", "resourceVersion": "5"},
        "spec": {"windows": [{"kind": "Deny", "name": "weekend", "schedule": "0 17 * * 5", "duration": "64h"}]},
    });
    [
        live,
        revision,
        window,
        deployment("web", None, &v1, true),
        deployment("api", Some(1), &v1, true),
        deployment("legacy", None, "app-config", false),
    ]
    .into_iter()
    .map(|value| Object {
        value,
        origin: "base.yaml".into(),
    })
    .collect()
}

fn options(ready_after: u64) -> Options {
    Options {
        at: AT.parse().unwrap(),
        ready_after: Duration::from_secs(ready_after),
        horizon: Duration::from_secs(30 * 24 * 3600),
    }
}

fn desired(values: &[Value]) -> Vec<Object> {
    let text: Vec<String> = values
        .iter()
        .map(|v| serde_yaml_ng::to_string(v).unwrap())
        .collect();
    documents(&[("change.yaml".into(), text.join("---\n"))]).unwrap()
}

fn plan(values: &[Value], ready_after: u64) -> PlanDocument {
    plan_against_files(
        &desired(values),
        Some(&base()),
        NS,
        &options(ready_after),
        "--against files",
    )
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("CMSET_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CMSET_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs (CMSET_UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

#[test]
fn a_change_held_by_a_freeze_over_two_waves_matches_the_goldens_and_the_schema() {
    let doc = plan(&[set_value("two", json!({}))], 30);
    let set = &doc.plans[0];
    assert_eq!(set.verdict.result, "held", "{:#?}", set.verdict);
    // The freeze ends Monday 09:00 UTC; wave 1 moves once wave 0 is ready (30 s) and stable (60 s).
    assert_eq!(set.verdict.until.as_deref(), Some("2026-11-30T09:00:00Z"));
    let row = |name: &str| set.workloads.iter().find(|w| w.name == name).unwrap();
    assert_eq!(row("web").earliest.as_deref(), Some("2026-11-30T09:00:00Z"));
    assert_eq!(row("api").earliest.as_deref(), Some("2026-11-30T09:01:30Z"));
    assert_eq!(row("legacy").action, "not opted in (left alone)");
    assert_eq!(set.revision.as_ref().unwrap().number, Some(2));
    assert!(set.revision.as_ref().unwrap().new);
    assert_eq!(
        set.basis.current_revision.as_deref(),
        Some(revision_name(&set_value("one", json!({}))).as_str())
    );
    assert_eq!(
        set.basis
            .resource_versions
            .get("ConfigMapSet/app-config")
            .map(String::as_str),
        Some("100")
    );

    let table = render_doc(&doc, Output::Table).unwrap();
    golden("plan.txt", &table);
    assert!(
        include_str!("../../../../docs/plan.md").contains(&table),
        "docs/plan.md shows this plan as it is printed"
    );
    golden("plan.md", &render_doc(&doc, Output::Markdown).unwrap());
    let json_text = render_doc(&doc, Output::Json).unwrap();
    golden("plan.json", &json_text);

    let schema: Value = serde_json::from_str(include_str!("../../../../docs/plan.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let instance: Value = serde_json::from_str(&json_text).unwrap();
    let errors: Vec<String> = validator.iter_errors(&instance).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let yaml: Value = serde_yaml_ng::from_str(&render_doc(&doc, Output::Yaml).unwrap()).unwrap();
    assert_eq!(yaml, instance, "YAML carries the same document");
    assert_eq!(instance["apiVersion"], "cmset.dev/v1alpha1");
    assert_eq!(instance["kind"], "Plan");
}

#[test]
fn the_same_content_is_no_change_and_the_earlier_one_a_revert_without_a_new_revision() {
    let doc = plan(&[set_value("one", json!({}))], 0);
    assert_eq!(doc.plans[0].verdict.result, "noChange", "{:#?}", doc.plans[0]);
    assert_eq!(exit_code(&doc, true, true), 0);
    let doc = plan(&[set_value("two", json!({}))], 0);
    assert_eq!(exit_code(&doc, false, false), 0);
    assert_eq!(exit_code(&doc, true, true), 3, "held before would change");
    assert_eq!(exit_code(&doc, false, true), 4);
}

#[test]
fn invalid_content_is_refused_with_the_webhook_s_message_and_exit_1() {
    let broken = set_value(
        "two",
        json!({"spec": {"template": {"data": {"app.json": "{\"port\": 80,\n}"}},
                        "validation": {"keys": {"*.json": {}}}}}),
    );
    let doc = plan(
        &[broken, set_value("one", json!({"metadata": {"name": "other"}}))],
        0,
    );
    assert_eq!(doc.plans[0].verdict.result, "refused");
    assert_eq!(
        doc.plans[0].validation.messages,
        vec![
            r#"ConfigMapSet "app-config": content fails spec.validation: key "app.json": is not valid JSON at line 2 column 1: trailing comma"#
        ]
    );
    assert_eq!(exit_code(&doc, true, true), 1, "refused comes first");
}

#[test]
fn a_secret_set_shows_key_names_and_never_a_value_in_any_format() {
    const VALUE: &str = "hunter2-pl4n-s3cr3t";
    let source = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-source", "namespace": NS},
                        "stringData": {"password": VALUE, "user": "app"}});
    let set = json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet",
                     "metadata": {"name": "db", "namespace": NS}, "spec": {"secretName": "db-source"}});
    let doc = plan(&[set, source], 0);
    let keys: Vec<&str> = doc.plans[0].keys.iter().map(|k| k.key.as_str()).collect();
    assert_eq!(keys, ["password", "user"]);
    assert!(doc.plans[0].keys.iter().all(|k| k.diff.is_none()));
    let encoded = k8s_openapi::ByteString(VALUE.as_bytes().to_vec());
    let encoded = serde_json::to_string(&encoded).unwrap();
    for format in [Output::Table, Output::Json, Output::Yaml, Output::Markdown] {
        let out = render_doc(&doc, format).unwrap();
        assert!(out.contains("password"), "{format:?}");
        assert!(
            !out.contains(VALUE) && !out.contains(encoded.trim_matches('"')),
            "{format:?}: {out}"
        );
    }
}

#[test]
fn bad_input_names_the_file_and_the_document() {
    let err = documents(&[("a.yaml".into(), "apiVersion: v1\nkind: X\n---\n[1, 2]\n".into())]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "a.yaml, document 2: not a Kubernetes object (a mapping with apiVersion and kind)"
    );
    let err = parse_ready_after(Some("soon")).unwrap_err();
    assert!(err.to_string().contains("--assume-ready-after"), "{err}");
    assert!(parse_at(Some("yesterday"), AT.parse().unwrap()).is_err());
}

#[test]
fn the_markdown_is_cut_below_the_limit_with_a_pointer_to_the_json() {
    let big: String = (0..4000).map(|i| format!("line {i} of a long value\n")).collect();
    let set = set_value("two", json!({"spec": {"template": {"data": {"big.txt": big}}}}));
    let doc = plan(&[set], 0);
    let md = render_doc(&doc, Output::Markdown).unwrap();
    assert!(md.chars().count() < render::MARKDOWN_MAX, "{}", md.len());
    assert!(md.contains("-o json"));
    assert!(md.starts_with("## kubectl cmset plan"));
    assert!(md.contains("<!-- cmset-plan team/app-config -->"));
    assert_eq!(md.matches("<details>").count(), md.matches("</details>").count());
}

#[tokio::test]
async fn against_a_cluster_it_only_reads_and_asks_the_webhook_by_a_dry_run() {
    use crate::stand_in::{self, collection, empty_list, kubernetes_1_20, object_not_found, with};
    let set_path = format!("{}/app-config", collection("cmset.dev/v1alpha1", "configmapsets"));
    let mut set = set_value("two", json!({}));
    set["metadata"]["namespace"] = json!(stand_in::NAMESPACE);
    let answers = vec![
        (
            set_path,
            object_not_found("configmapsets", "cmset.dev", "app-config"),
        ),
        (
            collection("cmset.dev/v1alpha1", "configmapsets"),
            stand_in::json(201, &set),
        ),
        (collection("v1", "configmaps"), empty_list("v1", "ConfigMap")),
        (collection("v1", "pods"), empty_list("v1", "Pod")),
        (
            collection("cmset.dev/v1alpha1", "windowoverrides"),
            empty_list("cmset.dev/v1alpha1", "WindowOverride"),
        ),
        (
            "/apis/cmset.dev/v1alpha1/changewindows".to_string(),
            empty_list("cmset.dev/v1alpha1", "ChangeWindow"),
        ),
    ];
    let (cluster, asked) = stand_in::start(with(kubernetes_1_20(), answers));
    let doc = plan_against_cluster(&cluster, &desired(&[set]), None, &options(0))
        .await
        .unwrap();
    assert_eq!(doc.against, "cluster");
    let plan = &doc.plans[0];
    assert_eq!(plan.verdict.result, "rollsOut", "{plan:#?}");
    assert_eq!(plan.validation.webhook.as_deref(), Some("admitted"));
    assert!(plan.revision.as_ref().unwrap().new);
    let asked = asked.lock().unwrap();
    let writes: Vec<&String> = asked.iter().filter(|r| !r.starts_with("GET ")).collect();
    assert_eq!(
        writes,
        [&format!(
            "POST {} (dryRun)",
            collection("cmset.dev/v1alpha1", "configmapsets")
        )],
        "{asked:#?}"
    );
}

#[test]
fn jobs_cron_jobs_and_on_delete_workloads_say_what_moving_means_for_them() {
    let v1 = revision_name(&set_value("one", json!({})));
    let pod =
        json!({"containers": [{"name": "c", "image": "x", "envFrom": [{"configMapRef": {"name": v1}}]}]});
    let labels = json!({"cmset.dev/enabled": "true"});
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
                     "metadata": {"name": "migrate", "namespace": NS, "uid": "uid-job", "labels": labels},
                     "spec": {"template": {"spec": pod}}});
    let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob",
                      "metadata": {"name": "nightly", "namespace": NS, "uid": "uid-cron", "labels": labels},
                      "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": {"spec": pod}}}}});
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                     "metadata": {"name": "db", "namespace": NS, "uid": "uid-db", "labels": labels, "generation": 1},
                     "spec": {"updateStrategy": {"type": "OnDelete"}, "template": {"spec": pod}},
                     "status": {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1}});
    let mut world = base();
    for value in [job, cron, sts] {
        world.push(Object {
            value,
            origin: "base.yaml".into(),
        });
    }
    // No window this time: the freeze would hold them all.
    world.retain(|o| o.kind() != "ChangeWindow");
    let doc = plan_against_files(
        &desired(&[set_value("two", json!({}))]),
        Some(&world),
        NS,
        &options(0),
        "--against files",
    );
    let action = |name: &str| {
        let rows = &doc.plans[0].workloads;
        rows.iter()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("{rows:#?}"))
            .action
            .clone()
    };
    assert!(action("migrate").starts_with("a Job"), "{}", action("migrate"));
    assert_eq!(action("nightly"), "a CronJob's next run");
    assert!(action("db").starts_with("OnDelete"), "{}", action("db"));
    assert_eq!(action("web"), "restart");
}

#[test]
fn a_user_who_may_not_list_change_windows_is_told_it_may_be_held() {
    let world = objects::Objects::new(base().into_iter().filter(|o| o.kind() != "ChangeWindow"), NS);
    let known = Known {
        windows: WindowsKnown::Unknown {
            why: "you may not list them (changewindows.cmset.dev)".into(),
            forbidden: true,
        },
        budget: BudgetKnown::None,
        pods: Some(Default::default()),
        webhook: None,
        unknown: Vec::new(),
        content_unreadable: None,
    };
    let set = &desired(&[set_value("two", json!({}))])[0];
    let plan = forecast::plan_one(set, NS, &world, None, &known, &options(0));
    assert_eq!(plan.verdict.result, "held");
    assert!(
        plan.verdict.summary.starts_with("may be held: "),
        "{}",
        plan.verdict.summary
    );
    assert!(
        plan.workloads.iter().all(|w| w.earliest.is_none()),
        "{:#?}",
        plan.workloads
    );
    assert!(plan.unknown.iter().any(|u| u.contains("ChangeWindows")));
}

#[test]
fn keys_compare_with_base_when_given() {
    let world = objects::Objects::new(base(), NS);
    let old = set_value("zero", json!({}));
    let based = objects::Objects::new(
        [Object {
            value: old,
            origin: "old/set.yaml".into(),
        }],
        NS,
    );
    let known = Known {
        windows: WindowsKnown::Listed,
        budget: BudgetKnown::None,
        pods: Some(Default::default()),
        webhook: None,
        unknown: Vec::new(),
        content_unreadable: None,
    };
    let set = &desired(&[set_value("two", json!({}))])[0];
    let plan = forecast::plan_one(set, NS, &world, Some(&based), &known, &options(0));
    assert_eq!(plan.keys_against.as_deref(), Some("app-config (--base)"));
    let mode = plan.keys.iter().find(|k| k.key == "MODE").unwrap();
    assert_eq!(mode.diff.as_deref(), Some("@@ MODE: changed @@\n-zero\n+two\n"));
    // Without it, against the live revision.
    let plan = forecast::plan_one(set, NS, &world, None, &known, &options(0));
    let live = revision_name(&set_value("one", json!({})));
    assert_eq!(plan.keys_against.as_deref(), Some(live.as_str()));
}

#[test]
fn a_secret_set_whose_secret_cannot_be_read_says_so_and_guesses_nothing() {
    let set = json!({"apiVersion": "cmset.dev/v1alpha1", "kind": "SecretSet",
                     "metadata": {"name": "db", "namespace": NS}, "spec": {"secretName": "db-source"}});
    let doc = plan(std::slice::from_ref(&set), 0);
    let plan = &doc.plans[0];
    assert_eq!(plan.verdict.result, "held");
    assert!(
        plan.verdict.summary.contains("\"db-source\" was not found"),
        "{}",
        plan.verdict.summary
    );
    assert!(plan.workloads.is_empty() && plan.keys.is_empty());

    let known = Known {
        windows: WindowsKnown::Listed,
        budget: BudgetKnown::None,
        pods: None,
        webhook: None,
        unknown: Vec::new(),
        content_unreadable: Some("you may not read Secrets in this namespace".into()),
    };
    let world = objects::Objects::new(base(), NS);
    let plan = forecast::plan_one(&desired(&[set])[0], NS, &world, None, &known, &options(0));
    assert!(
        plan.verdict
            .summary
            .contains("cannot be read (you may not read Secrets"),
        "{}",
        plan.verdict.summary
    );
}
