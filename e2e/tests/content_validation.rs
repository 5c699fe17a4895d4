//! `spec.validation` on a real API server (issue 39): a set whose content does not parse or does not
//! match its schema is refused at `kubectl apply`, naming the key with line and column (or pointer and
//! rule), and nothing is stored; content that slipped in with the webhook down makes no revision, keeps
//! every workload on the last good one and says why; a source Secret rotated to a value that breaks its
//! schema is not rolled out, even by an `Immediate` set, and its value appears nowhere; and
//! `kubectl cmset validate` checks a folder of sets offline, with the same messages.

use std::time::Duration;

use cmset_e2e::cmset_api::{ConfigMapSet, SecretSet};
use cmset_e2e::fixtures::{Reads, deployment_yaml, template_names};
use cmset_e2e::{
    Operator, TestNamespace, eventually, plugin_bin, put_secret, secret_names, stays, warning_event,
};

const SET: &str = "app";
/// How long "nothing moves" is watched for.
const STILL: Duration = Duration::from_secs(5);

/// ConfigMapSet `SET` with `app.json` = `json` (written as a YAML block), checked against a schema that
/// wants an integer `port`.
fn set_yaml(json: &str) -> String {
    let block: String = json.lines().map(|l| format!("        {l}\n")).collect();
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  template:
    data:
      app.json: |
{block}  validation:
    keys:
      "*.json":
        schema:
          type: object
          required: [port]
          properties:
            port: {{type: integer}}
"#
    )
}

fn condition(set: &ConfigMapSet, type_: &str) -> Option<(String, String, String)> {
    set.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn a_bad_json_key_is_refused_at_apply_naming_key_line_and_column_and_nothing_is_stored() {
    let ns = TestNamespace::new("valapply").await;
    let operator = Operator::start_validating_windows(&ns.name, &[]).await;
    let broken = set_yaml("{\"port\": 80,\n}");
    let refused = eventually("the apply refused by the webhook", || async {
        match ns.try_kubectl(&["apply", "-f", "-"], Some(&broken)) {
            Err(e) if e.contains("spec.validation") => Some(e),
            _ => None,
        }
    })
    .await;
    assert!(
        refused.contains(r#"ConfigMapSet "app": content fails spec.validation: key "app.json": is not valid JSON at line 2 column 1: trailing comma"#),
        "{refused}"
    );
    assert!(
        ns.try_kubectl(&["get", "configmapset", SET], None).is_err(),
        "nothing is stored"
    );

    let mismatched = set_yaml(r#"{"port": "eighty"}"#);
    let refused = ns
        .try_kubectl(&["apply", "-f", "-"], Some(&mismatched))
        .unwrap_err();
    assert!(
        refused.contains(r#"key "app.json": at /port: "eighty" is not of type "integer" (rule "type")"#),
        "{refused}"
    );
    assert!(
        ns.try_kubectl(&["get", "configmapset", SET], None).is_err(),
        "nothing is stored"
    );
    assert_eq!(operator.metric("cmset_validation_failures_total"), 2.0);

    // Good content goes in, and becomes a revision.
    ns.apply(&set_yaml(r#"{"port": 80}"#));
    let set = eventually("a current revision", || async {
        let set = ns.set(SET).await;
        set.status.as_ref()?.current_revision.as_ref()?;
        Some(set)
    })
    .await;
    assert_eq!(condition(&set, "Valid").map(|c| c.0), Some("True".to_string()));
    // A bad spec.validation is refused too, naming the field.
    let bad_rule = set_yaml(r#"{"port": 80}"#).replace(r#""*.json":"#, "config:");
    let refused = ns
        .try_kubectl(&["apply", "-f", "-"], Some(&bad_rule))
        .unwrap_err();
    assert!(
        refused.contains(r#"spec.validation.keys["config"].format: is required"#),
        "{refused}"
    );
}

#[tokio::test]
async fn with_the_webhook_down_the_controller_refuses_the_same_content_and_keeps_the_workloads() {
    let ns = TestNamespace::new("valctl").await;
    let operator = Operator::start_without_webhook(&ns.name, &[]).await;
    ns.apply(&set_yaml(r#"{"port": 80}"#));
    ns.apply(&deployment_yaml("web", &[Reads::Volume(SET)]));
    let good = eventually("web on the first revision", || async {
        let current = ns.set(SET).await.status?.current_revision?;
        let names = template_names(&ns.deployment("web").await);
        names.contains(&current).then_some(current)
    })
    .await;

    // Stored as written (no webhook): the controller makes no revision of it.
    ns.apply(&set_yaml("{\"port\": 80,\n}"));
    let (status, reason, message) = eventually("Valid=False", || async {
        condition(&ns.set(SET).await, "Valid").filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(reason, "ValidationFailed");
    assert!(
        message.ends_with(&format!(
            "(workloads stay on revision 1 ({good})): key \"app.json\": is not valid JSON at line 2 column 1: trailing comma"
        )),
        "{status}: {message}"
    );
    let set = ns.set(SET).await;
    assert_eq!(
        condition(&set, "Ready").map(|c| (c.0, c.1)),
        Some(("False".into(), "ValidationFailed".into()))
    );
    assert_eq!(condition(&set, "Stalled").map(|c| c.0), Some("True".into()));
    assert_eq!(
        set.status.as_ref().unwrap().current_revision.as_deref(),
        Some(good.as_str())
    );
    let event = warning_event(&ns, "ValidationFailed", &format!("ConfigMapSet/{SET}")).await;
    assert_eq!(event.note.as_deref(), Some(message.as_str()));
    stays(
        "web on the last good revision, one revision only",
        STILL,
        || async {
            template_names(&ns.deployment("web").await).contains(&good)
                && ns.revision_names(SET).await == [good.clone()]
        },
    )
    .await;
    assert_eq!(operator.metric("cmset_validation_failures_total"), 1.0);

    // `kubectl cmset status` says so.
    let out = std::process::Command::new(plugin_bin())
        .args(["status", SET, "-n", &ns.name])
        .env("KUBECONFIG", std::env::var("KUBECONFIG").unwrap_or_default())
        .output()
        .expect("run kubectl-cmset");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Validation:   failed: content not made into revision"),
        "{text}"
    );

    // Fixed: a revision again, and web moves to it.
    ns.apply(&set_yaml(r#"{"port": 8080}"#));
    eventually("web on the fixed revision", || async {
        let set = ns.set(SET).await;
        let current = set.status.as_ref()?.current_revision.clone()?;
        let valid = condition(&set, "Valid")?.0 == "True";
        (valid && current != good && template_names(&ns.deployment("web").await).contains(&current))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_source_secret_edited_to_break_its_schema_is_not_rolled_out_even_immediately() {
    const SOURCE: &str = "db-credentials";
    const BAD: &str = "tooShortVALUE";
    let ns = TestNamespace::new("valsecret").await;
    let operator = Operator::start_with(&ns.name, &[]).await;
    put_secret(
        &ns,
        SOURCE,
        "Opaque",
        &[("config.json", r#"{"password": "long-enough-password"}"#)],
    )
    .await;
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata:
  name: db
spec:
  secretName: {SOURCE}
  rollout:
    strategy: Immediate
  validation:
    keys:
      config.json:
        schema:
          properties:
            password: {{type: string, minLength: 16}}
"#
    ));
    ns.apply(&cmset_e2e::fixtures::DeploymentYaml::with_pod_spec(
        "api",
        "\n      containers:\n        - name: app\n          image: registry.k8s.io/pause:3.9\n          envFrom:\n            - secretRef: {name: db}\n",
    )
    .yaml());
    let first = eventually("api on the first Secret revision", || async {
        let set: SecretSet = ns.secret_set("db").await;
        let current = set.status?.current_revision?;
        let d = ns.deployment("api").await;
        let spec = d.spec?.template.spec?;
        secret_names(&spec).contains(&current).then_some(current)
    })
    .await;

    // Rotated by whatever writes it, to a value the schema refuses: no admission sees this.
    put_secret(
        &ns,
        SOURCE,
        "Opaque",
        &[("config.json", &format!(r#"{{"password": "{BAD}"}}"#))],
    )
    .await;
    let message = eventually("Valid=False on the SecretSet", || async {
        let set: SecretSet = ns.secret_set("db").await;
        let valid = set.status?.conditions.into_iter().find(|c| c.type_ == "Valid")?;
        (valid.status == "False").then_some(valid.message)
    })
    .await;
    assert!(
        message.ends_with(r#"key "config.json": at /password: fails rule "minLength""#),
        "{message}"
    );
    warning_event(&ns, "ValidationFailed", "SecretSet/db").await;
    stays("api on the first revision, no second revision", STILL, || async {
        let d = ns.deployment("api").await;
        let on_first = d
            .spec
            .and_then(|s| s.template.spec)
            .is_some_and(|spec| secret_names(&spec).contains(&first));
        on_first && ns.secret_revision_names("db").await == [first.clone()]
    })
    .await;
    // The value is nowhere: not in the status, the events or the operator's log.
    let everything = format!(
        "{}{}{}",
        ns.kubectl(&["get", "secretset", "db", "-o", "yaml"]),
        ns.kubectl(&["get", "events.events.k8s.io", "-o", "yaml"]),
        std::fs::read_to_string(operator.log_path()).unwrap_or_default()
    );
    assert!(!everything.contains(BAD), "the rotated value leaked");
}

#[test]
fn kubectl_cmset_validate_checks_a_folder_of_sets_offline() {
    let dir = std::env::temp_dir().join(format!("cmset-e2e-validate-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("prod")).unwrap();
    std::fs::write(dir.join("good.yaml"), set_yaml(r#"{"port": 80}"#)).unwrap();
    let run = |path: &std::path::Path| {
        let out = std::process::Command::new(plugin_bin())
            .args(["validate", "-f"])
            .arg(path)
            .env_remove("KUBECONFIG")
            .output()
            .expect("run kubectl-cmset");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stdout, _) = run(&dir);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.ends_with("1 set checked, 0 invalid\n"), "{stdout}");

    std::fs::write(
        dir.join("prod/broken.yaml"),
        set_yaml("{\"port\": 80,\n}").replace("name: app", "name: broken"),
    )
    .unwrap();
    let (code, stdout, _) = run(&dir);
    assert_eq!(code, Some(1), "{stdout}");
    let file = dir.join("prod/broken.yaml").display().to_string();
    assert!(
        stdout.contains(&format!(
            "configmapset/broken ({file}, document 1): invalid\n  key \"app.json\": is not valid JSON at line 2 column 1: trailing comma\n"
        )),
        "{stdout}"
    );
    assert!(stdout.ends_with("2 sets checked, 1 invalid\n"), "{stdout}");

    std::fs::write(dir.join("prod/not-yaml.yaml"), "a: [\n").unwrap();
    let (code, _, stderr) = run(&dir);
    assert_eq!(code, Some(2));
    assert!(
        stderr.starts_with("error: ") && stderr.contains("not-yaml.yaml: document 1:"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
