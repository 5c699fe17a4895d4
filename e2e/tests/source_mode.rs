//! ConfigMapSets in source mode (`spec.configMapName`), on a real API server: an existing ConfigMap,
//! written by another tool, is versioned exactly as inline content is (configMapGenerator names,
//! immutable revisions, one rollout per edit); a missing source stops nothing that runs; and a spec that
//! names a source and holds data too is refused.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::fixtures::{
    APP_CONFIG, APP_VERSION, DeploymentYaml, Reads, app_config_revision, rollout_status, template_names,
    wait_names,
};
use cmset_e2e::invariants::ready_on;
use cmset_e2e::k8s_openapi::api::core::v1::ConfigMap;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{Operator, TestNamespace, eventually, kustomize_name, stays, warning_event};

/// The ConfigMap another tool writes, which [`APP_CONFIG`] versions.
const SOURCE: &str = "app-settings";

fn source_yaml(version: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: {SOURCE}
data:
  {APP_VERSION}: "{version}"
"#
    )
}

/// [`APP_CONFIG`] versioning [`SOURCE`]; with `inline`, a `template.data` too, which is not allowed.
fn source_set_yaml(inline: Option<&str>) -> String {
    let template = inline
        .map(|v| format!("\n  template:\n    data:\n      {APP_VERSION}: \"{v}\""))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {APP_CONFIG}
spec:
  configMapName: {SOURCE}{template}
"#
    )
}

/// Web reads the set through `envFrom` and as a volume.
fn web_yaml() -> String {
    DeploymentYaml::new("web", &[Reads::EnvFrom(APP_CONFIG), Reads::Volume(APP_CONFIG)]).yaml()
}

/// Web's spec writes and ReplicaSets: how often it has rolled.
async fn rolls(ns: &TestNamespace) -> (i64, usize) {
    let d = ns.deployment("web").await;
    let uid = d.uid().unwrap();
    let replica_sets = ns
        .replica_sets()
        .await
        .iter()
        .filter(|rs| rs.owner_references().iter().any(|o| o.uid == uid))
        .count();
    (d.metadata.generation.unwrap(), replica_sets)
}

async fn rolled_out(ns: &TestNamespace) -> (i64, usize) {
    rollout_status(ns, "deployment/web").await;
    rolls(ns).await
}

/// The set's condition `type_`: status, reason, message (only once its status describes its spec).
async fn condition(ns: &TestNamespace, type_: &str) -> Option<(String, String, String)> {
    let set = ns.set(APP_CONFIG).await;
    let status = set.status.as_ref()?;
    if status.observed_generation != set.metadata.generation {
        return None;
    }
    let c = status.conditions.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

async fn wait_ready_on(ns: &TestNamespace, revision: &str) {
    eventually(&format!("the set to be Ready on {revision}"), || async {
        ready_on(&ns.set(APP_CONFIG).await, revision).then_some(())
    })
    .await;
}

/// Applies the source and the set, then web, and waits until web runs revision 1.
async fn start(ns: &TestNamespace) -> (String, (i64, usize)) {
    let v1 = app_config_revision("1");
    ns.apply(&source_yaml("1"));
    ns.apply(&source_set_yaml(None));
    ns.apply(&web_yaml());
    wait_names(ns, "web", &[&v1]).await;
    let rolls = rolled_out(ns).await;
    wait_ready_on(ns, &v1).await;
    (v1, rolls)
}

#[tokio::test]
async fn a_source_config_map_is_versioned_under_the_generator_name_and_rolls_out() {
    let ns = TestNamespace::new("srcmode").await;
    let _operator = Operator::start(&ns.name).await;
    let (v1, before) = start(&ns).await;
    // The name kustomize's configMapGenerator gives the source's data, under the set's name.
    assert_eq!(v1, kustomize_name(APP_CONFIG, &[(APP_VERSION, "1")]));
    assert_eq!(
        before.1, 1,
        "the webhook stored web on the revision: one ReplicaSet"
    );

    let set = ns.set(APP_CONFIG).await;
    let revision: ConfigMap = ns.api::<ConfigMap>().get(&v1).await.unwrap();
    assert_eq!(revision.immutable, Some(true), "revisions are immutable");
    assert_eq!(
        revision.data.clone().unwrap_or_default(),
        [(APP_VERSION.to_string(), "1".to_string())].into(),
        "the source's data"
    );
    assert_eq!(
        revision.labels().get("cmset.dev/set").map(String::as_str),
        Some(APP_CONFIG)
    );
    assert_eq!(
        revision
            .annotations()
            .get("cmset.dev/revision")
            .map(String::as_str),
        Some("1")
    );
    assert!(
        !revision
            .annotations()
            .contains_key("kubectl.kubernetes.io/last-applied-configuration"),
        "nothing of the source's metadata is copied"
    );
    assert!(
        revision.owner_references().iter().any(|o| {
            o.kind == "ConfigMapSet"
                && o.controller == Some(true)
                && Some(&o.uid) == set.metadata.uid.as_ref()
        }),
        "{:?}",
        revision.owner_references()
    );

    // The other tool edits the source: a new revision, and one rollout.
    ns.apply(&source_yaml("2"));
    let v2 = app_config_revision("2");
    wait_names(&ns, "web", &[&v2]).await;
    assert_eq!(rolled_out(&ns).await, (before.0 + 1, before.1 + 1), "one rollout");
    stays("web rolled exactly once", Duration::from_secs(2), || async {
        rolls(&ns).await == (before.0 + 1, before.1 + 1)
    })
    .await;
    wait_ready_on(&ns, &v2).await;
    assert_eq!(ns.set(APP_CONFIG).await.status.unwrap().revision, Some(2));
    let mut both = vec![v1.clone(), v2.clone()];
    both.sort();
    assert_eq!(ns.revision_names(APP_CONFIG).await, both);

    // cmset never writes the source.
    let source: ConfigMap = ns.api::<ConfigMap>().get(SOURCE).await.unwrap();
    assert!(
        source.owner_references().is_empty() && !source.labels().contains_key("cmset.dev/set"),
        "{:?}",
        source.metadata
    );
    assert_eq!(source.immutable, None, "the source stays mutable");
}

#[tokio::test]
async fn a_missing_source_keeps_workloads_on_the_last_good_revision() {
    let ns = TestNamespace::new("srcmissing").await;
    let _operator = Operator::start(&ns.name).await;
    let (v1, before) = start(&ns).await;

    ns.kubectl(&["delete", "configmap", SOURCE]);
    let message = eventually("Ready=False SourceNotFound", || async {
        let (status, reason, message) = condition(&ns, "Ready").await?;
        (status == "False" && reason == "SourceNotFound").then_some(message)
    })
    .await;
    assert!(
        message.contains(SOURCE) && message.contains(&v1),
        "the message names the source and the revision kept: {message}"
    );
    assert_eq!(
        condition(&ns, "Stalled").await,
        None,
        "not stalled: it recovers by itself"
    );
    assert_eq!(
        ns.set(APP_CONFIG).await.status.unwrap().current_revision,
        Some(v1.clone())
    );
    stays("web stays on revision 1", Duration::from_secs(3), || async {
        rolls(&ns).await == before
            && template_names(&ns.deployment("web").await) == BTreeSet::from([v1.clone()])
    })
    .await;
    assert_eq!(
        ns.revision_names(APP_CONFIG).await,
        vec![v1.clone()],
        "its revision is kept"
    );

    // The source comes back with other content: the set follows it.
    ns.apply(&source_yaml("2"));
    let v2 = app_config_revision("2");
    wait_names(&ns, "web", &[&v2]).await;
    assert_eq!(rolled_out(&ns).await, (before.0 + 1, before.1 + 1));
    wait_ready_on(&ns, &v2).await;
}

#[tokio::test]
async fn a_source_and_inline_data_together_are_refused() {
    let ns = TestNamespace::new("srcinvalid").await;
    let _operator = Operator::start(&ns.name).await;
    let (v1, before) = start(&ns).await;

    // Servers that enforce the CRD's CEL rules (1.25+) refuse the spec; older ones store it, and cmset
    // refuses it itself.
    if let Err(refused) = ns.try_kubectl(&["apply", "-f", "-"], Some(&source_set_yaml(Some("inline")))) {
        assert!(refused.contains("spec.configMapName"), "{refused}");
        return;
    }
    let ready = eventually("Ready=False InvalidSpec", || async {
        let ready = condition(&ns, "Ready").await?;
        (ready.0 == "False" && ready.1 == "InvalidSpec").then_some(ready)
    })
    .await;
    assert!(ready.2.contains("spec.configMapName"), "{ready:?}");
    let stalled = condition(&ns, "Stalled").await.expect("a Stalled condition");
    assert_eq!((stalled.0.as_str(), stalled.1.as_str()), ("True", "InvalidSpec"));
    let event = warning_event(&ns, "InvalidSpec", "ConfigMapSet/app-config").await;
    assert_eq!(
        event.note.as_deref(),
        Some(ready.2.as_str()),
        "the event says what the condition says"
    );

    // Nothing moves: neither the source nor the inline data becomes a revision.
    let inline = kustomize_name(APP_CONFIG, &[(APP_VERSION, "inline")]);
    stays(
        "everything stays on revision 1",
        Duration::from_secs(3),
        || async {
            rolls(&ns).await == before
                && template_names(&ns.deployment("web").await) == BTreeSet::from([v1.clone()])
                && ns.revision_names(APP_CONFIG).await == [v1.clone()]
        },
    )
    .await;
    assert!(ns.api::<ConfigMap>().get_opt(&inline).await.unwrap().is_none());
    assert_eq!(
        ns.set(APP_CONFIG).await.status.unwrap().current_revision,
        Some(v1.clone())
    );

    // Fixed: Ready again on the same revision, not stalled, and still no rollout.
    ns.apply(&source_set_yaml(None));
    wait_ready_on(&ns, &v1).await;
    assert_eq!(condition(&ns, "Stalled").await, None);
    assert_eq!(rolls(&ns).await, before, "no rollout");
}
