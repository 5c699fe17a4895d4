//! SecretSets on a real API server: a source Secret, written by whatever produces it, is versioned into
//! immutable, content-hashed Secrets named as kustomize's secretGenerator names them; opted-in workloads
//! follow its changes one rollout at a time, `kubectl rollout undo` pins them, old content is reused,
//! history is pruned only where nothing needs it, a missing source stops nothing that runs, and no
//! secret value ever leaves a Secret: not in the operator's log, an Event, the set's status or a metric.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::cmset_api::{SecretSet, WorkloadState};
use cmset_e2e::fixtures::{
    DeploymentYaml, app_config_revision, app_config_yaml, configmap_names, rollout_status,
};
use cmset_e2e::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use cmset_e2e::k8s_openapi::api::core::v1::{ConfigMap, PodSpec, Secret};
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::kube::api::ListParams;
use cmset_e2e::{
    Operator, TestNamespace, base64_encode, eventually, http_get, kustomize_name, kustomize_secret_name,
    put_secret, secret_names, stays, warning_event,
};

/// The SecretSet most scenarios use, and the source Secret it versions.
const SET: &str = "db";
const SOURCE: &str = "db-credentials";
const OPAQUE: &str = "Opaque";
const TLS: &str = "kubernetes.io/tls";

/// The content of the issue's example, and the name kustomize's secretGenerator gives it.
const EXAMPLE: [(&str, &str); 2] = [("password", "s3cret"), ("user", "app")];
const EXAMPLE_NAME: &str = "db-9k5ddchd8d";

// ----------------------------------------------------------------------------------- objects --

fn secret_set_yaml(name: &str, source: &str, limit: Option<i32>) -> String {
    let limit = limit
        .map(|l| format!("\n  revisionHistoryLimit: {l}"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: SecretSet
metadata:
  name: {name}
spec:
  secretName: {source}{limit}
"#
    )
}

fn data_of(secret: &Secret) -> Vec<(String, String)> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).to_string()))
        .collect()
}

fn owned(data: &[(&str, &str)]) -> Vec<(String, String)> {
    data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// An opted-in Deployment whose pod template's spec is `pod_spec`.
fn deployment_yaml(name: &str, pod_spec: &str, history: Option<i32>) -> String {
    let d = DeploymentYaml::with_pod_spec(name, pod_spec);
    history.map_or(d, |h| d.revision_history_limit(h)).yaml()
}

/// Reads every key of Secret `set` as environment variables, and the ConfigMap of the same name too.
fn env_reader_spec(set: &str) -> String {
    format!(
        r#"
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - secretRef: {{name: {set}}}
            - configMapRef: {{name: {set}}}
"#
    )
}

/// Mounts Secret `set` as a volume and reads its key `key` into an environment variable.
fn file_reader_spec(set: &str, key: &str) -> String {
    format!(
        r#"
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          env:
            - name: FROM_SECRET
              valueFrom:
                secretKeyRef: {{name: {set}, key: {key}}}
          volumeMounts:
            - {{name: secret, mountPath: /etc/secret}}
      volumes:
        - name: secret
          secret: {{secretName: {set}}}
"#
    )
}

fn pod_spec(d: &Deployment) -> &PodSpec {
    d.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("a Deployment has a pod spec")
}

fn replica_set_secrets(rs: &ReplicaSet) -> BTreeSet<String> {
    rs.spec
        .as_ref()
        .and_then(|s| s.template.as_ref()?.spec.as_ref())
        .map(secret_names)
        .unwrap_or_default()
}

/// Waits until Deployment `name`'s pod template names exactly the Secrets `expected`.
async fn wait_secrets(ns: &TestNamespace, name: &str, expected: &[&str]) {
    let want: BTreeSet<String> = expected.iter().map(|n| n.to_string()).collect();
    eventually(&format!("Deployment {name} to name Secrets {want:?}"), || async {
        (secret_names(pod_spec(&ns.deployment(name).await)) == want).then_some(())
    })
    .await;
}

/// How often a Deployment has rolled: the writes of its spec and the ReplicaSets it owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rolls {
    generation: i64,
    replica_sets: usize,
}

impl Rolls {
    fn next(self) -> Self {
        Self {
            generation: self.generation + 1,
            replica_sets: self.replica_sets + 1,
        }
    }
}

async fn rolls(ns: &TestNamespace, name: &str) -> Rolls {
    let d = ns.deployment(name).await;
    let uid = d.uid().expect("uid");
    let replica_sets = owned_replica_sets(ns, &uid).await.len();
    Rolls {
        generation: d.metadata.generation.expect("generation"),
        replica_sets,
    }
}

async fn owned_replica_sets(ns: &TestNamespace, uid: &str) -> Vec<ReplicaSet> {
    let mut all = ns.replica_sets().await;
    all.retain(|rs| rs.owner_references().iter().any(|o| o.uid == uid));
    all
}

/// Rolls out `deployment` and waits for its rollout to finish: after that its ReplicaSets are a fair count.
async fn rolled_out(ns: &TestNamespace, deployment: &str) -> Rolls {
    rollout_status(ns, &format!("deployment/{deployment}")).await;
    rolls(ns, deployment).await
}

/// The Ready condition of SecretSet `name`: status, reason and message.
async fn ready(ns: &TestNamespace, name: &str) -> Option<(String, String, String)> {
    let set = ns.secret_set(name).await;
    let c = set.condition("Ready")?;
    let current = set.status.as_ref()?.observed_generation == set.metadata.generation;
    current.then(|| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until SecretSet `name` is Ready with `revision` current.
async fn wait_ready_on(ns: &TestNamespace, name: &str, revision: &str) {
    eventually(&format!("SecretSet {name} to be Ready on {revision}"), || async {
        let (status, ..) = ready(ns, name).await?;
        let current = ns.secret_set(name).await.status?.current_revision;
        (status == "True" && current.as_deref() == Some(revision)).then_some(())
    })
    .await;
}

fn controlled_by_set(secret: &Secret, set: &SecretSet) -> bool {
    secret.owner_references().iter().any(|o| {
        o.kind == "SecretSet"
            && o.api_version == "cmset.dev/v1alpha1"
            && o.name == set.name_any()
            && Some(&o.uid) == set.metadata.uid.as_ref()
            && o.controller == Some(true)
    })
}

/// A ConfigMap that has a SecretSet's name: a ConfigMap reference to it is not the set's.
const SAME_NAME_CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: db
data:
  PLAIN: "not a secret"
"#;

// ------------------------------------------------------------------------------------- story --

#[tokio::test]
async fn secret_revisions_roll_out_and_roll_back_with_their_workloads() {
    let ns = TestNamespace::new("secstory").await;
    let mut operator = Operator::start(&ns.name).await;
    let v1 = kustomize_secret_name(SET, OPAQUE, &EXAMPLE);
    assert_eq!(v1, EXAMPLE_NAME, "kustomize's name for the issue's example");
    let v2_data = [("password", "s3cret-2"), ("user", "app")];
    let v2 = kustomize_secret_name(SET, OPAQUE, &v2_data);

    ns.apply(SAME_NAME_CONFIGMAP);
    put_secret(&ns, SOURCE, OPAQUE, &EXAMPLE).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, None));
    let set = ns.secret_set(SET).await;
    let revision = eventually("revision 1", || async {
        ns.api::<Secret>().get_opt(&v1).await.ok()?
    })
    .await;
    assert_eq!(revision.type_.as_deref(), Some(OPAQUE), "the source's type");
    assert_eq!(revision.immutable, Some(true), "revisions are immutable");
    assert_eq!(data_of(&revision), owned(&EXAMPLE), "the source's data");
    assert_eq!(
        revision.labels().get("cmset.dev/set").map(String::as_str),
        Some(SET)
    );
    assert_eq!(
        revision
            .annotations()
            .get("cmset.dev/revision")
            .map(String::as_str),
        Some("1")
    );
    assert!(
        revision.annotations().keys().all(|k| k.starts_with("cmset.dev/")),
        "no annotation but cmset's (the template has none): {:?}",
        revision.annotations()
    );
    assert!(
        controlled_by_set(&revision, &set),
        "owner: {:?}",
        revision.owner_references()
    );

    // Two workloads name the set as if it were a plain Secret, each in other forms.
    ns.apply(&deployment_yaml("env-reader", &env_reader_spec(SET), None));
    ns.apply(&deployment_yaml(
        "file-reader",
        &file_reader_spec(SET, "password"),
        None,
    ));
    wait_secrets(&ns, "env-reader", &[&v1]).await;
    wait_secrets(&ns, "file-reader", &[&v1]).await;
    let env_before = rolled_out(&ns, "env-reader").await;
    let file_before = rolled_out(&ns, "file-reader").await;
    // The webhook stored them already on the revision: their first and only ReplicaSet names it.
    for name in ["env-reader", "file-reader"] {
        let uid = ns.deployment(name).await.uid().unwrap();
        let sets = owned_replica_sets(&ns, &uid).await;
        let names: Vec<_> = sets.iter().map(replica_set_secrets).collect();
        assert_eq!(names, vec![BTreeSet::from([v1.clone()])], "{name}'s ReplicaSets");
    }
    assert_eq!(
        configmap_names(pod_spec(&ns.deployment("env-reader").await)),
        BTreeSet::from([SET.to_string()]),
        "a ConfigMap reference with the set's name is left alone"
    );
    wait_ready_on(&ns, SET, &v1).await;

    // The source changes: revision 2, and one rollout of each workload.
    put_secret(&ns, SOURCE, OPAQUE, &v2_data).await;
    wait_secrets(&ns, "env-reader", &[&v2]).await;
    wait_secrets(&ns, "file-reader", &[&v2]).await;
    assert_eq!(rolled_out(&ns, "env-reader").await, env_before.next());
    assert_eq!(rolled_out(&ns, "file-reader").await, file_before.next());
    stays(
        "each workload rolled exactly once",
        Duration::from_secs(2),
        || async {
            rolls(&ns, "env-reader").await == env_before.next()
                && rolls(&ns, "file-reader").await == file_before.next()
        },
    )
    .await;
    wait_ready_on(&ns, SET, &v2).await;
    let status = ns.secret_set(SET).await.status.unwrap();
    assert_eq!(status.revision, Some(2));
    let second = ns.api::<Secret>().get(&v2).await.unwrap();
    assert_eq!(
        (second.type_.as_deref(), second.immutable, data_of(&second)),
        (Some(OPAQUE), Some(true), owned(&v2_data))
    );
    assert_eq!(
        configmap_names(pod_spec(&ns.deployment("env-reader").await)),
        BTreeSet::from([SET.to_string()]),
        "the ConfigMap reference still names the ConfigMap"
    );
    let plain: ConfigMap = ns.api::<ConfigMap>().get(SET).await.unwrap();
    assert!(plain.owner_references().is_empty() && !plain.labels().contains_key("cmset.dev/set"));
    let source = ns.api::<Secret>().get(SOURCE).await.unwrap();
    assert!(
        source.owner_references().is_empty() && !source.labels().contains_key("cmset.dev/set"),
        "cmset never writes the source: {:?}",
        source.metadata
    );
    assert_eq!(source.immutable, None, "the source stays mutable");

    // `kubectl rollout undo` brings env-reader back to the old Secret, and cmset lets it be.
    ns.kubectl(&["rollout", "undo", "deployment/env-reader"]);
    rollout_status(&ns, "deployment/env-reader").await;
    wait_secrets(&ns, "env-reader", &[&v1]).await;
    eventually("env-reader to be reported pinned to revision 1", || async {
        let status = ns.secret_set(SET).await.status?;
        let state = |name: &str| {
            let w = status.workloads.iter().find(|w| w.name == name)?;
            Some((w.state, w.revision.clone()))
        };
        (state("env-reader")? == (WorkloadState::Pinned, v1.clone())
            && state("file-reader")? == (WorkloadState::Current, v2.clone()))
            .then_some(())
    })
    .await;
    let pinned = || async {
        secret_names(pod_spec(&ns.deployment("env-reader").await)) == BTreeSet::from([v1.clone()])
            && secret_names(pod_spec(&ns.deployment("file-reader").await)) == BTreeSet::from([v2.clone()])
    };
    stays("env-reader stays on revision 1", Duration::from_secs(3), pinned).await;

    // ... also after a restart, which writes nothing at all.
    operator.restart().await;
    stays(
        "env-reader stays on revision 1 after a restart",
        Duration::from_secs(5),
        pinned,
    )
    .await;
    let writes = operator.writes_by_operation();
    assert!(
        writes.values().all(|n| *n == 0.0),
        "a restart with everything in place writes nothing: {writes:?}"
    );
    let state = ns.secret_set(SET).await.status.unwrap();
    let env = state.workloads.iter().find(|w| w.name == "env-reader").unwrap();
    assert_eq!(
        (env.state, env.revision.as_str()),
        (WorkloadState::Pinned, v1.as_str())
    );
}

/// The password of version `v`.
fn password(v: u32) -> String {
    format!("pw-{v}")
}

fn version_name(v: u32) -> String {
    kustomize_secret_name(SET, OPAQUE, &[("password", &password(v))])
}

/// Writes version `v` into the source and waits until file-reader has rolled out onto it.
async fn roll_to(ns: &TestNamespace, v: u32) {
    put_secret(ns, SOURCE, OPAQUE, &[("password", &password(v))]).await;
    wait_secrets(ns, "file-reader", &[&version_name(v)]).await;
    rollout_status(ns, "deployment/file-reader").await;
}

#[tokio::test]
async fn reverted_content_reuses_its_revision_and_pruning_spares_what_a_replica_set_names() {
    let ns = TestNamespace::new("sechist").await;
    let _operator = Operator::start(&ns.name).await;
    // The set keeps one unused revision, the Deployment one old ReplicaSet.
    put_secret(&ns, SOURCE, OPAQUE, &[("password", &password(1))]).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, Some(1)));
    ns.apply(&deployment_yaml(
        "file-reader",
        &file_reader_spec(SET, "password"),
        Some(1),
    ));
    roll_to(&ns, 1).await;
    roll_to(&ns, 2).await;

    // The source goes back to version 1: its revision is reused, renumbered as the newest.
    roll_to(&ns, 1).await;
    wait_ready_on(&ns, SET, &version_name(1)).await;
    let mut both = vec![version_name(1), version_name(2)];
    both.sort();
    assert_eq!(ns.secret_revision_names(SET).await, both, "no new Secret");
    let reused = ns.api::<Secret>().get(&version_name(1)).await.unwrap();
    assert_eq!(reused.annotations()["cmset.dev/revision"], "3", "renumbered");
    assert_eq!(ns.secret_set(SET).await.status.unwrap().revision, Some(3));

    // Numbers now: v2 = 2, v1 = 3, v3 = 4, v4 = 5, v5 = 6.
    for v in 3..=5 {
        roll_to(&ns, v).await;
    }
    // In use: v5 (current) and v4 (the ReplicaSet the Deployment keeps). Unused: v2, v1, v3; the limit
    // keeps the newest of them, v3.
    let want: BTreeSet<String> = [3, 4, 5].into_iter().map(version_name).collect();
    eventually("revisions pruned to what is used plus the limit", || async {
        let have: BTreeSet<String> = ns.secret_revision_names(SET).await.into_iter().collect();
        (have == want).then_some(())
    })
    .await;
    let kept = ns.api::<Secret>().get(&version_name(4)).await.unwrap();
    assert!(
        kept.owner_references()
            .iter()
            .any(|o| o.kind == "ReplicaSet" || (o.kind == "Deployment" && o.controller == Some(false))),
        "the revision a ReplicaSet names is owned by it or by its Deployment: {:?}",
        kept.owner_references()
    );
    eventually(
        "the status to list revisions 6 and 5 in use, 4 kept unused",
        || async {
            let history = ns.secret_set(SET).await.status?.history;
            let listed: Vec<_> = history.iter().map(|h| (h.revision, h.in_use)).collect();
            (listed == [(6, true), (5, true), (4, false)]).then_some(())
        },
    )
    .await;
    assert!(
        ns.api::<Secret>().get_opt(SOURCE).await.unwrap().is_some(),
        "pruning never touches the source"
    );
}

#[tokio::test]
async fn a_missing_source_stops_nothing_that_runs() {
    let ns = TestNamespace::new("secmissing").await;
    let _operator = Operator::start(&ns.name).await;
    let v1 = kustomize_secret_name(SET, OPAQUE, &EXAMPLE);
    put_secret(&ns, SOURCE, OPAQUE, &EXAMPLE).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, None));
    ns.apply(&deployment_yaml(
        "file-reader",
        &file_reader_spec(SET, "user"),
        None,
    ));
    wait_secrets(&ns, "file-reader", &[&v1]).await;
    let before = rolled_out(&ns, "file-reader").await;
    wait_ready_on(&ns, SET, &v1).await;

    ns.kubectl(&["delete", "secret", SOURCE]);
    let message = eventually("Ready=False SourceNotFound", || async {
        let (status, reason, message) = ready(&ns, SET).await?;
        (status == "False" && reason == "SourceNotFound").then_some(message)
    })
    .await;
    assert!(
        message.contains(SOURCE) && message.contains(&v1),
        "the message names the source and the revision kept: {message}"
    );
    assert_eq!(
        ns.secret_set(SET).await.status.unwrap().current_revision,
        Some(v1.clone()),
        "the last good revision stays current"
    );
    let event = warning_event(&ns, "SourceNotFound", "SecretSet/db").await;
    assert_eq!(
        event.note.as_deref(),
        Some(message.as_str()),
        "the event says what the condition says"
    );
    stays("the workload stays as it is", Duration::from_secs(3), || async {
        rolls(&ns, "file-reader").await == before
            && secret_names(pod_spec(&ns.deployment("file-reader").await)) == BTreeSet::from([v1.clone()])
    })
    .await;
    assert_eq!(
        ns.secret_revision_names(SET).await,
        vec![v1.clone()],
        "its revision is kept"
    );

    // The source comes back with the same content: Ready again, nothing rolls.
    put_secret(&ns, SOURCE, OPAQUE, &EXAMPLE).await;
    wait_ready_on(&ns, SET, &v1).await;
    assert_eq!(rolls(&ns, "file-reader").await, before, "no rollout");
    assert_eq!(ns.secret_set(SET).await.status.unwrap().revision, Some(1));

    // ... and the set follows it again.
    let v2_data = [("password", "s3cret-2"), ("user", "app")];
    let v2 = kustomize_secret_name(SET, OPAQUE, &v2_data);
    put_secret(&ns, SOURCE, OPAQUE, &v2_data).await;
    wait_secrets(&ns, "file-reader", &[&v2]).await;
    assert_eq!(rolled_out(&ns, "file-reader").await, before.next());
    wait_ready_on(&ns, SET, &v2).await;
}

#[tokio::test]
async fn deleting_a_secret_set_keeps_the_revisions_still_in_use() {
    let ns = TestNamespace::new("secdelete").await;
    let _operator = Operator::start(&ns.name).await;
    // Revision 1 is never used by any workload; revision 2 is rolled out.
    let v1 = version_name(1);
    let v2 = version_name(2);
    put_secret(&ns, SOURCE, OPAQUE, &[("password", &password(1))]).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, None));
    wait_ready_on(&ns, SET, &v1).await;
    put_secret(&ns, SOURCE, OPAQUE, &[("password", &password(2))]).await;
    wait_ready_on(&ns, SET, &v2).await;
    ns.apply(&deployment_yaml(
        "file-reader",
        &file_reader_spec(SET, "password"),
        None,
    ));
    wait_secrets(&ns, "file-reader", &[&v2]).await;
    rollout_status(&ns, "deployment/file-reader").await;
    eventually("revision 2 owned by the Deployment that runs it too", || async {
        let s = ns.api::<Secret>().get(&v2).await.ok()?;
        s.owner_references()
            .iter()
            .any(|o| o.kind == "Deployment" && o.name == "file-reader")
            .then_some(())
    })
    .await;

    ns.kubectl(&["delete", "secset", SET]);
    eventually("the unused revision to be collected", || async {
        ns.api::<Secret>()
            .get_opt(&v1)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // The garbage collector drops the deleted owner from the revision that has another one.
    eventually("the used revision to stay, without its set as owner", || async {
        let kept = ns
            .api::<Secret>()
            .get(&v2)
            .await
            .expect("the used revision stays");
        let owners = kept.owner_references();
        (owners.iter().all(|o| o.kind != "SecretSet") && owners.iter().any(|o| o.kind == "Deployment"))
            .then_some(())
    })
    .await;
    let source = ns.api::<Secret>().get(SOURCE).await.expect("the source stays");
    assert_eq!(data_of(&source), owned(&[("password", &password(2))]));

    // Once nothing uses it any more, the garbage collector removes it too.
    ns.kubectl(&["delete", "deployment", "file-reader"]);
    eventually(
        "the last revision to be collected with its ReplicaSets",
        || async {
            ns.api::<Secret>()
                .get_opt(&v2)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(ns.api::<Secret>().get_opt(SOURCE).await.unwrap().is_some());
}

// ------------------------------------------------------------------------- with ConfigMapSets --

/// ConfigMapSet `app` holding `A`, and the source of SecretSet `app` holding `TOKEN`, in one document
/// (the source written with `stringData`, as a person would).
fn config_and_secret_yaml(a: &str, token: &str) -> String {
    format!(
        r#"{}---
apiVersion: v1
kind: Secret
metadata:
  name: app-source
stringData:
  TOKEN: "{token}"
"#,
        cmset_e2e::fixtures::set_yaml("app", &[("A", a)], None)
    )
}

/// Names of the ConfigMap and the Secret that Deployment `both` reads.
async fn both_names(ns: &TestNamespace) -> (BTreeSet<String>, BTreeSet<String>) {
    let d = ns.deployment("both").await;
    (configmap_names(pod_spec(&d)), secret_names(pod_spec(&d)))
}

#[tokio::test]
async fn a_config_map_set_and_a_secret_set_changed_in_one_apply_roll_once() {
    let ns = TestNamespace::new("secboth").await;
    let _operator = Operator::start(&ns.name).await;
    // Both sets are called `app`: each kind of reference follows only its own kind of set.
    ns.apply(&config_and_secret_yaml("1", "t1"));
    ns.apply(&secret_set_yaml("app", "app-source", None));
    let expect = |a: &str, token: &str| {
        (
            BTreeSet::from([kustomize_name("app", &[("A", a)])]),
            BTreeSet::from([kustomize_secret_name("app", OPAQUE, &[("TOKEN", token)])]),
        )
    };
    let spec = r#"
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef: {name: app}
            - secretRef: {name: app}
"#;
    ns.apply(&deployment_yaml("both", spec, None));
    let first = expect("1", "t1");
    eventually("both to name both first revisions", || async {
        (both_names(&ns).await == first).then_some(())
    })
    .await;
    let before = rolled_out(&ns, "both").await;

    // One `kubectl apply` changes the ConfigMapSet and the SecretSet's source.
    ns.apply(&config_and_secret_yaml("2", "t2"));
    let second = expect("2", "t2");
    eventually("both to name both second revisions", || async {
        (both_names(&ns).await == second).then_some(())
    })
    .await;
    assert_eq!(
        rolled_out(&ns, "both").await,
        before.next(),
        "one apply changing both sets rolls the Deployment once"
    );
    stays("it rolled exactly once", Duration::from_secs(2), || async {
        rolls(&ns, "both").await == before.next()
    })
    .await;
}

#[tokio::test]
async fn a_tls_source_keeps_its_type_on_every_revision() {
    let ns = TestNamespace::new("sectls").await;
    let _operator = Operator::start(&ns.name).await;
    let one = [("tls.crt", "cert-1"), ("tls.key", "key-1")];
    let two = [("tls.crt", "cert-2"), ("tls.key", "key-2")];
    let v1 = kustomize_secret_name("tls", TLS, &one);
    let v2 = kustomize_secret_name("tls", TLS, &two);
    assert_ne!(
        v1,
        kustomize_secret_name("tls", OPAQUE, &one),
        "the type enters the hash"
    );
    put_secret(&ns, "tls-source", TLS, &one).await;
    ns.apply(&secret_set_yaml("tls", "tls-source", None));
    // Read through a projected volume.
    let spec = r#"
      containers:
        - name: proxy
          image: registry.k8s.io/pause:3.9
          volumeMounts:
            - {name: tls, mountPath: /etc/tls}
      volumes:
        - name: tls
          projected:
            sources:
              - secret: {name: tls}
"#;
    ns.apply(&deployment_yaml("proxy", spec, None));
    wait_secrets(&ns, "proxy", &[&v1]).await;
    let first = ns.api::<Secret>().get(&v1).await.unwrap();
    assert_eq!(
        (first.type_.as_deref(), first.immutable, data_of(&first)),
        (Some(TLS), Some(true), owned(&one))
    );
    let before = rolled_out(&ns, "proxy").await;

    put_secret(&ns, "tls-source", TLS, &two).await;
    wait_secrets(&ns, "proxy", &[&v2]).await;
    let second = ns.api::<Secret>().get(&v2).await.unwrap();
    assert_eq!(
        (second.type_.as_deref(), second.immutable, data_of(&second)),
        (Some(TLS), Some(true), owned(&two))
    );
    assert_eq!(rolled_out(&ns, "proxy").await, before.next());
}

// ---------------------------------------------------------------------------------- security --

/// Distinctive values, so that a leak cannot be a coincidence.
const PASSWORD_1: &str = "hunter2-CMSET-E2E-SECRET";
const PASSWORD_2: &str = "hunter3-CMSET-E2E-SECRET-rotated";
const COLLIDING: &str = "hunter4-CMSET-E2E-SECRET-colliding";

/// What must never show outside a Secret: each value, its base64, and the common part of them all.
fn needles() -> Vec<String> {
    let mut needles = vec!["CMSET-E2E-SECRET".to_string()];
    for value in [PASSWORD_1, PASSWORD_2, COLLIDING] {
        needles.push(base64_encode(value.as_bytes()));
    }
    needles
}

/// The first needle found in `text`, with up to 200 characters of context each side.
fn find_secret(text: &str) -> Option<String> {
    needles().into_iter().find_map(|needle| {
        let at = text.find(&needle)?;
        let from = text[..at].char_indices().rev().nth(200).map_or(0, |(i, _)| i);
        let to = (at + needle.len() + 200).min(text.len());
        Some(format!("{needle} in …{}…", text.get(from..to).unwrap_or("")))
    })
}

fn assert_no_secret_in(what: &str, text: &str) {
    if let Some(found) = find_secret(text) {
        panic!("a secret value appears in {what}: {found}");
    }
}

#[tokio::test]
async fn no_secret_value_reaches_the_log_events_status_or_metrics() {
    let ns = TestNamespace::new("secleak").await;
    let mut operator = Operator::start_with(&ns.name, &["--log-level=debug"]).await;
    let one = [("password", PASSWORD_1), ("user", "app")];
    let two = [("password", PASSWORD_2), ("user", "app")];
    let v1 = kustomize_secret_name(SET, OPAQUE, &one);
    let taken = kustomize_secret_name(SET, OPAQUE, &two);

    put_secret(&ns, SOURCE, OPAQUE, &one).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, None));
    ns.apply(&deployment_yaml(
        "file-reader",
        &file_reader_spec(SET, "password"),
        None,
    ));
    wait_secrets(&ns, "file-reader", &[&v1]).await;
    rollout_status(&ns, "deployment/file-reader").await;

    // The next revision's name is taken by a Secret with other content: cmset reads it to compare, and
    // reports a collision.
    put_secret(&ns, &taken, OPAQUE, &[("password", COLLIDING)]).await;
    put_secret(&ns, SOURCE, OPAQUE, &two).await;
    let v2 = eventually("a revision under another name after the collision", || async {
        let status = ns.secret_set(SET).await.status?;
        let current = status.current_revision?;
        (status.collision_count == Some(1) && current != v1 && current != taken).then_some(current)
    })
    .await;
    wait_secrets(&ns, "file-reader", &[&v2]).await;
    rollout_status(&ns, "deployment/file-reader").await;
    let rotated = ns.api::<Secret>().get(&v2).await.unwrap();
    assert_eq!(
        data_of(&rotated),
        owned(&two),
        "the revision holds the rotated value"
    );
    // The check below would see it there: the needles match what the API serves.
    assert!(
        find_secret(&serde_json::to_string(&rotated).unwrap()).is_some(),
        "the needles find a value where it belongs"
    );
    let untouched = ns.api::<Secret>().get(&taken).await.unwrap();
    assert!(
        untouched.owner_references().is_empty(),
        "the colliding Secret is left alone"
    );

    // The source disappears and comes back.
    ns.kubectl(&["delete", "secret", SOURCE]);
    eventually("Ready=False SourceNotFound", || async {
        let (status, reason, _) = ready(&ns, SET).await?;
        (status == "False" && reason == "SourceNotFound").then_some(())
    })
    .await;
    put_secret(&ns, SOURCE, OPAQUE, &two).await;
    wait_ready_on(&ns, SET, &v2).await;

    // Everything cmset publishes, gathered before and after a restart (which reads it all again).
    let metrics = |op: &Operator| http_get(op.metrics_port, "/metrics").expect("metrics answer").1;
    let mut published = vec![("the metrics", metrics(&operator))];
    operator.restart().await;
    wait_ready_on(&ns, SET, &v2).await;
    published.push(("the metrics after a restart", metrics(&operator)));
    let log = std::fs::read_to_string(operator.log_path()).expect("the operator's log");
    assert!(log.contains("DEBUG"), "the log holds debug lines");
    assert!(log.contains(&v2), "the log speaks of the revisions");
    published.push(("the operator's log", log));

    let core_events = ns
        .api::<cmset_e2e::k8s_openapi::api::core::v1::Event>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let events = ns
        .api::<cmset_e2e::k8s_openapi::api::events::v1::Event>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let reasons: BTreeSet<String> = events.items.iter().filter_map(|e| e.reason.clone()).collect();
    assert!(
        reasons.contains("SourceNotFound") && reasons.contains("RevisionCollision"),
        "cmset reported the missing source and the collision: {reasons:?}"
    );
    published.push(("the Events", serde_json::to_string(&core_events).unwrap()));
    published.push((
        "the events.k8s.io Events",
        serde_json::to_string(&events).unwrap(),
    ));
    let set = ns.secret_set(SET).await;
    assert!(set.status.is_some());
    published.push(("the SecretSet", serde_json::to_string(&set).unwrap()));
    for revision in ns.secret_revisions(SET).await {
        published.push((
            "a revision's metadata",
            serde_json::to_string(&revision.metadata).unwrap(),
        ));
    }
    let deployments = ns.api::<Deployment>().list(&ListParams::default()).await.unwrap();
    published.push(("the Deployments", serde_json::to_string(&deployments).unwrap()));

    for (what, text) in &published {
        assert!(!text.is_empty(), "{what} is empty");
        assert_no_secret_in(what, text);
    }
}

// ------------------------------------------------------------------------ adoption and flags --

#[tokio::test]
async fn replacing_a_secret_generator_by_a_secret_set_rolls_no_pod() {
    let ns = TestNamespace::new("secmigrate").await;
    let _operator = Operator::start(&ns.name).await;

    // Before: kustomize's secretGenerator, and a Deployment reading it (kustomize renames the references).
    ns.apply_kustomization(
        &[("deployment.yaml", deployment_yaml("file-reader", &file_reader_spec(SET, "user"), None))],
        "resources: [deployment.yaml]\nsecretGenerator:\n  - name: db\n    literals: [password=s3cret, user=app]\n",
    );
    wait_secrets(&ns, "file-reader", &[EXAMPLE_NAME]).await;
    let before = rolled_out(&ns, "file-reader").await;
    assert_eq!(before.replica_sets, 1);
    let generated = ns.api::<Secret>().get(EXAMPLE_NAME).await.unwrap();
    assert!(
        generated.owner_references().is_empty(),
        "the generator's Secret has no owner"
    );

    // The SecretSet replaces the generator; its source has the same content.
    put_secret(&ns, SOURCE, OPAQUE, &EXAMPLE).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, None));
    wait_ready_on(&ns, SET, EXAMPLE_NAME).await;
    let set = ns.secret_set(SET).await;
    let taken = ns.api::<Secret>().get(EXAMPLE_NAME).await.unwrap();
    assert!(
        controlled_by_set(&taken, &set),
        "taken over: {:?}",
        taken.metadata
    );
    assert_eq!(taken.labels().get("cmset.dev/set").map(String::as_str), Some(SET));
    assert_eq!(taken.immutable, Some(true), "made immutable as every revision");
    assert_eq!(data_of(&taken), owned(&EXAMPLE));
    assert_eq!(
        ns.secret_revision_names(SET).await,
        vec![EXAMPLE_NAME.to_string()],
        "no second revision"
    );
    assert_eq!(ns.secret_set(SET).await.status.unwrap().collision_count, None);
    stays("no rollout", Duration::from_secs(5), || async {
        rolls(&ns, "file-reader").await == before
    })
    .await;
}

#[tokio::test]
async fn with_secret_sets_off_a_secret_set_is_left_alone() {
    let ns = TestNamespace::new("secoff").await;
    let _operator = Operator::start_with(&ns.name, &["--secret-sets=false"]).await;
    put_secret(&ns, SOURCE, OPAQUE, &EXAMPLE).await;
    ns.apply(&secret_set_yaml(SET, SOURCE, None));
    ns.apply(&app_config_yaml("1", None));
    let spec = r#"
      containers:
        - name: app
          image: registry.k8s.io/pause:3.9
          envFrom:
            - configMapRef: {name: app-config}
            - secretRef: {name: db, optional: true}
"#;
    ns.apply(&deployment_yaml("web", spec, None));
    let v1 = app_config_revision("1");
    eventually("the ConfigMapSet to move web", || async {
        (configmap_names(pod_spec(&ns.deployment("web").await)) == BTreeSet::from([v1.clone()])).then_some(())
    })
    .await;
    cmset_e2e::fixtures::set_ready(&ns, "app-config").await;

    stays("the SecretSet is left alone", Duration::from_secs(5), || async {
        let set = ns.secret_set(SET).await;
        let revisions = ns.secret_revision_names(SET).await;
        let names = secret_names(pod_spec(&ns.deployment("web").await));
        set.status.is_none() && revisions.is_empty() && names == BTreeSet::from([SET.to_string()])
    })
    .await;
    let source = ns.api::<Secret>().get(SOURCE).await.unwrap();
    assert!(source.owner_references().is_empty() && source.labels().is_empty());

    // The ConfigMapSet still follows its changes.
    ns.apply(&app_config_yaml("2", None));
    let v2 = app_config_revision("2");
    eventually("the ConfigMapSet to move web again", || async {
        (configmap_names(pod_spec(&ns.deployment("web").await)) == BTreeSet::from([v2.clone()])).then_some(())
    })
    .await;
    assert!(ns.secret_set(SET).await.status.is_none(), "still no status");
}
