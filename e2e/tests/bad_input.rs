//! Invalid specs, on a real (v1.20) API server. What the CRD schema can express is refused at admission
//! with the API server's message; what it cannot (ConfigMap key syntax, a key in both maps: the CEL rule
//! is dropped by this server, total size) is accepted and reported by cmset on the set's status and as a
//! Warning event, while nothing else changes: no revision is stamped, opted-in workloads stay where they
//! are. Fixing the spec recovers.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::fixtures::{
    Reads, Template, deployment_yaml, set_ready, set_yaml, set_yaml_with, template_names, wait_names,
};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, stays};
use serde_json::Value;

/// A valid spec: `A: <version>`.
fn valid(version: &str) -> String {
    set_yaml("app-config", &[("A", version)], Some(10))
}

/// A set with a value that is not a string: the one spec [`set_yaml`] cannot write.
const INTEGER_VALUE: &str = r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: app-config
spec:
  revisionHistoryLimit: 10
  template:
    data: {A: "1", count: 1}
"#;

/// The first revision is stamped and the opted-in Deployment runs it. Returns its name.
async fn start(ns: &TestNamespace) -> String {
    let v1 = kustomize_name("app-config", &[("A", "1")]);
    ns.apply(&valid("1"));
    ns.apply(&deployment_yaml("web", &[Reads::EnvFrom("app-config")]));
    wait_names(ns, "web", &[&v1]).await;
    set_ready(ns, "app-config").await;
    v1
}

/// The Warning events `reason` on the set (events.k8s.io/v1), as (note, times published).
fn warnings(ns: &TestNamespace, reason: &str) -> Vec<(String, i64)> {
    let out = ns.kubectl(&["get", "events.events.k8s.io", "-o", "json"]);
    let events: Value = serde_json::from_str(&out).expect("events as JSON");
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["type"] == "Warning"
                && e["reason"] == reason
                && e["regarding"]["kind"] == "ConfigMapSet"
                && e["regarding"]["name"] == "app-config"
        })
        .map(|e| {
            let note = e["note"].as_str().unwrap_or_default().to_string();
            (note, e["series"]["count"].as_i64().unwrap_or(1))
        })
        .collect()
}

/// Nothing moved: the only revision is still `v1`, the set still reports it current, and the opted-in
/// Deployment stays on it.
async fn nothing_changes(ns: &TestNamespace, v1: &str) {
    let only_v1 = vec![v1.to_string()];
    let names_v1 = BTreeSet::from([v1.to_string()]);
    stays(
        "no new revision and the Deployment stays on the first revision",
        Duration::from_secs(3),
        || async {
            ns.revision_names("app-config").await == only_v1
                && template_names(&ns.deployment("web").await) == names_v1
        },
    )
    .await;
    let status = ns.set("app-config").await.status.expect("a status");
    assert_eq!(
        status.current_revision.as_deref(),
        Some(v1),
        "the current revision is kept"
    );
    assert_eq!(status.revision, Some(1), "the revision number is kept");
}

/// The set, accepted with an invalid spec, says so on its status: Ready=False and Stalled=True, both
/// InvalidSpec, naming `field` with `problem`. Returns the message.
async fn reported(ns: &TestNamespace, field: &str, problem: &str) -> String {
    let what = format!("the set to report InvalidSpec naming {field}");
    eventually(&what, || async {
        let set = ns.set("app-config").await;
        let status = set.status.as_ref()?;
        if status.observed_generation != set.metadata.generation {
            return None;
        }
        let ready = set.condition("Ready")?;
        let stalled = set.condition("Stalled")?;
        let named = |m: &str| m.contains(field) && m.contains(problem);
        (ready.status == "False"
            && ready.reason == "InvalidSpec"
            && named(&ready.message)
            && stalled.status == "True"
            && stalled.reason == "InvalidSpec"
            && named(&stalled.message))
        .then(|| ready.message.clone())
    })
    .await
}

/// After cmset has published its `nth` InvalidSpec warning on the set (counting repeats of a series),
/// whether one of those events says `message`; `Err` describes what the events say instead.
async fn warned(ns: &TestNamespace, message: &str, nth: i64) -> Result<(), String> {
    let events = eventually(
        &format!("cmset to publish InvalidSpec warning number {nth} on the set"),
        || async {
            let events = warnings(ns, "InvalidSpec");
            (events.iter().map(|(_, n)| n).sum::<i64>() >= nth).then_some(events)
        },
    )
    .await;
    if events.iter().any(|(note, _)| note == message) {
        Ok(())
    } else {
        Err(format!(
            "the set reports {message:?} but no Warning event InvalidSpec says so; its InvalidSpec events \
             (note, times published) are {events:?}"
        ))
    }
}

/// A valid spec with new content after an invalid one: Ready again, Stalled gone, a second revision,
/// the Deployment moved to it.
async fn recovers(ns: &TestNamespace, apply: impl Fn(&str)) {
    let v2 = kustomize_name("app-config", &[("A", "2")]);
    apply(&valid("2"));
    wait_names(ns, "web", &[&v2]).await;
    let set = eventually("the set to be Ready on the second revision", || async {
        let set = ns.set("app-config").await;
        let status = set.status.as_ref()?;
        let ready = set.condition("Ready")?;
        (status.observed_generation == set.metadata.generation
            && ready.status == "True"
            && status.current_revision.as_deref() == Some(v2.as_str()))
        .then_some(set)
    })
    .await;
    assert!(
        set.condition("Stalled").is_none_or(|c| c.status != "True"),
        "no longer Stalled: {:?}",
        set.condition("Stalled")
    );
    assert_eq!(
        set.status.as_ref().unwrap().revision,
        Some(2),
        "the fix is revision 2"
    );
    assert!(
        ns.revision_names("app-config").await.contains(&v2),
        "the second revision's ConfigMap exists"
    );
}

#[tokio::test]
async fn schema_violations_are_refused_by_the_api_server() {
    let ns = TestNamespace::new("badschema").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = start(&ns).await;
    let generation = ns.set("app-config").await.metadata.generation;

    let cases = [
        (
            "a negative revisionHistoryLimit",
            set_yaml("app-config", &[("A", "1")], Some(-1)),
            "spec.revisionHistoryLimit: Invalid value: -1: spec.revisionHistoryLimit in body should be \
             greater than or equal to 0",
        ),
        (
            "an integer data value",
            INTEGER_VALUE.to_string(),
            "spec.template.data.count: Invalid value: \"integer\": spec.template.data.count in body must be of \
             type string: \"integer\"",
        ),
    ];
    for (what, yaml, expected) in cases {
        let refused = ns
            .try_kubectl(&["apply", "-f", "-"], Some(&yaml))
            .expect_err(&format!("the API server refuses {what}"));
        assert!(
            refused.contains("The ConfigMapSet \"app-config\" is invalid") && refused.contains(expected),
            "the API server refuses {what} saying {expected:?}; kubectl said: {refused}"
        );
    }
    assert_eq!(
        ns.set("app-config").await.metadata.generation,
        generation,
        "a refused spec never reaches the set"
    );
    nothing_changes(&ns, &v1).await;
    assert!(
        warnings(&ns, "InvalidSpec").is_empty(),
        "nothing for cmset to report about specs it never saw"
    );
    recovers(&ns, |yaml| {
        ns.apply(yaml);
    })
    .await;
}

#[tokio::test]
async fn keys_with_a_space_or_a_slash_are_reported() {
    let ns = TestNamespace::new("badkey").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = start(&ns).await;
    const KEY_FORM: &str = "key must consist of alphanumeric characters, '-', '_' or '.'";

    ns.apply(&set_yaml("app-config", &[("A", "1"), ("bad key", "x")], Some(10)));
    let message = reported(&ns, r#"spec.template.data["bad key"]"#, KEY_FORM).await;
    let space_event = warned(&ns, &message, 1).await;
    nothing_changes(&ns, &v1).await;

    // Another bad key: another problem, so another warning, naming it.
    ns.apply(&set_yaml(
        "app-config",
        &[("A", "1"), ("dir/file", "x")],
        Some(10),
    ));
    let message = reported(&ns, r#"spec.template.data["dir/file"]"#, KEY_FORM).await;
    let slash_event = warned(&ns, &message, 2).await;
    nothing_changes(&ns, &v1).await;

    recovers(&ns, |yaml| {
        ns.apply(yaml);
    })
    .await;

    // Checked last, so that the recovery above is still exercised when they fail.
    space_event.expect("a Warning event InvalidSpec names the key with a space");
    // Each event keeps its own message (kube's recorder would fold a second InvalidSpec into a series
    // carrying the first one's note; cmset publishes each with a fresh recorder).
    slash_event.expect("a Warning event InvalidSpec names the key with a slash");
}

#[tokio::test]
async fn a_key_in_both_data_and_binary_data_is_reported() {
    let ns = TestNamespace::new("badboth").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = start(&ns).await;

    // The CRD's CEL rule would refuse this on a newer server; v1.20 drops it, so cmset reports it.
    let binary_data = Template {
        binary_data: &[("A", "aGVsbG8=")],
        ..Template::default()
    };
    ns.apply(&set_yaml_with("app-config", &[("A", "1")], Some(10), binary_data));
    let message = reported(
        &ns,
        r#"spec.template.data["A"]"#,
        "key also appears in binaryData",
    )
    .await;
    warned(&ns, &message, 1)
        .await
        .expect("a Warning event InvalidSpec names the key in both maps");
    nothing_changes(&ns, &v1).await;

    recovers(&ns, |yaml| {
        ns.apply(yaml);
    })
    .await;
}

#[tokio::test]
async fn content_over_one_mebibyte_is_refused_or_reported() {
    let ns = TestNamespace::new("badsize").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = start(&ns).await;
    let big = "x".repeat(1_100_000);
    let yaml = set_yaml("app-config", &[("A", "1"), ("big", &big)], Some(10));

    // `kubectl apply` (client-side) copies the whole object into the last-applied-configuration
    // annotation, and the API server refuses annotations over 256 KiB before anything else.
    let refused = ns
        .try_kubectl(&["apply", "-f", "-"], Some(&yaml))
        .expect_err("the API server refuses a 1.1 MB client-side apply");
    assert!(
        refused.contains("metadata.annotations: Too long: must have at most 262144 bytes"),
        "refused for the size of the last-applied annotation; kubectl said: {refused}"
    );
    nothing_changes(&ns, &v1).await;

    // Written without that annotation, 1.1 MB is well under the API server's request limit (etcd's
    // 1.5 MiB), and the schema has no size limit: the server accepts it and cmset reports it.
    ns.try_kubectl(&["replace", "-f", "-"], Some(&yaml))
        .expect("the API server accepts a 1.1 MB set written with `kubectl replace`");
    let message = reported(
        &ns,
        "spec.template",
        "total size 1100001 bytes exceeds the 1048576 bytes a ConfigMap can hold",
    )
    .await;
    warned(&ns, &message, 1)
        .await
        .expect("a Warning event InvalidSpec reports the size");
    nothing_changes(&ns, &v1).await;

    // `replace` again: a client-side apply now would not remove `big`, having no record of applying it.
    recovers(&ns, |yaml| {
        ns.try_kubectl(&["replace", "-f", "-"], Some(yaml))
            .expect("replace with the fixed spec");
    })
    .await;
    let set = ns.set("app-config").await;
    assert!(
        set.annotations()
            .get("kubectl.kubernetes.io/last-applied-configuration")
            .is_none(),
        "sanity: the set was written with replace"
    );
}
