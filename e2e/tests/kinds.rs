//! The workload kinds beyond Deployments, StatefulSets and DaemonSets, on a real (v1.20) API server: a
//! CronJob (served as `batch/v1beta1` there) and the Jobs it makes, a Job created naming a set, an Argo
//! Rollout (the real CRD, `e2e/fixtures/argo-rollouts-crd.yaml`, with the harness's simulated Argo
//! controller, `cmset_e2e::argo`), a kind the operator is told about (`--workload-kind`, a test CRD), and
//! a kind whose CRD is installed after the operator started and removed later.
//!
//! Every set here keeps no old revision for history (`revisionHistoryLimit: 0`): an old revision that
//! survives does so because something still runs or may run it (a Job, a ReplicaSet), and it goes once
//! that is gone.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cmset_e2e::argo::{self, ArgoRollouts, POD_TEMPLATE_HASH, REVISION};
use cmset_e2e::cmset_api::{ConfigMapSetStatus, RolloutPhase, WorkloadState, WorkloadStatus};
use cmset_e2e::fixtures::{APP_CONFIG, app_config_revision, app_config_yaml, set_ready, wait_names};
use cmset_e2e::k8s_openapi::api::apps::v1::ReplicaSet;
use cmset_e2e::k8s_openapi::api::batch::v1::Job;
use cmset_e2e::k8s_openapi::api::core::v1::{ConfigMap, Node};
use cmset_e2e::kinds::{
    CRONJOB_POD_SPEC, create, cronjob_resource, install_crd, job_from_cronjob, names_at, remove_crd, resource,
};
use cmset_e2e::kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use cmset_e2e::kube::{Api, ResourceExt};
use cmset_e2e::{Operator, TestNamespace, eventually, eventually_within, http_get, kustomize_name, stays};
use serde_json::{Value, json};

/// How long the slower waits last at most (rollouts on the local cluster, discovery).
const WAIT: Duration = Duration::from_secs(90);
const ROLLOUT_CRD: &str = "rollouts.argoproj.io";
const WIDGET_CRD: &str = "widgets.e2e.cmset.dev";
const GADGET_CRD: &str = "gadgets.e2e.cmset.dev";
/// The key that makes the simulated node never ready a pod that reads it (`e2e/cluster/fake-node.py`).
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
const FAKE_NODE: &str = "cmset-fake-node";
/// Where a pod template's pod spec is in a Job, a Rollout and the test CRDs (`spec.template`).
const POD_SPEC: &str = "/spec/template/spec";

fn widget() -> ApiResource {
    resource("e2e.cmset.dev", "v1", "Widget", "widgets")
}

fn gadget() -> ApiResource {
    resource("e2e.cmset.dev", "v1", "Gadget", "gadgets")
}

// ------------------------------------------------------------------------------------- helpers --

fn only(name: &str) -> BTreeSet<String> {
    BTreeSet::from([name.to_string()])
}

/// A pod spec whose one container reads `set` by its bare name, through `envFrom` and as a volume.
/// `restart` is the pod's `restartPolicy` (a Job's pods may not restart `Always`).
fn pod_spec(set: &str, restart: Option<&str>) -> Value {
    let mut spec = json!({
        "containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.9",
            "envFrom": [{"configMapRef": {"name": set}}],
            "volumeMounts": [{"name": "config", "mountPath": "/etc/config"}],
        }],
        "volumes": [{"name": "config", "configMap": {"name": set}}],
    });
    if let Some(restart) = restart {
        spec["restartPolicy"] = restart.into();
    }
    spec
}

/// The labels of an opted-in workload, in `wave` (no label when `None`).
fn opted_in(wave: Option<i32>) -> Value {
    let mut labels = json!({"cmset.dev/enabled": "true"});
    if let Some(wave) = wave {
        labels["cmset.dev/wave"] = wave.to_string().into();
    }
    labels
}

async fn set_status(ns: &TestNamespace) -> ConfigMapSetStatus {
    ns.set(APP_CONFIG).await.status.unwrap_or_default()
}

/// The set's entry for workload `kind`/`name`.
async fn entry(ns: &TestNamespace, kind: &str, name: &str) -> Option<WorkloadStatus> {
    set_status(ns)
        .await
        .workloads
        .into_iter()
        .find(|w| w.kind == kind && w.name == name)
}

/// Waits until the set reports workload `kind`/`name` in `state` on `revision`.
async fn wait_entry(ns: &TestNamespace, kind: &str, name: &str, state: WorkloadState, revision: &str) {
    let what = format!("the set to report {kind}/{name} {state:?} on {revision}");
    eventually_within(WAIT, &what, || async {
        let e = entry(ns, kind, name).await?;
        (e.state == state && e.revision == revision).then_some(())
    })
    .await;
}

/// Waits until the set's current revision is `revision`.
async fn wait_current(ns: &TestNamespace, revision: &str) {
    eventually(
        &format!("the set's current revision to be {revision}"),
        || async { (set_status(ns).await.current_revision.as_deref() == Some(revision)).then_some(()) },
    )
    .await;
}

async fn revision_exists(ns: &TestNamespace, name: &str) -> bool {
    ns.api::<ConfigMap>()
        .get_opt(name)
        .await
        .expect("read a ConfigMap")
        .is_some_and(|c| c.metadata.deletion_timestamp.is_none())
}

/// Asserts that revision `name` is kept (for a few seconds, pruning having had every chance) and that
/// the set's history lists it in use, because of `why`.
async fn kept_in_use(ns: &TestNamespace, name: &str, why: &str) {
    let what = format!("the set's history to list {name} in use ({why})");
    eventually(&what, || async {
        let history = set_status(ns).await.history;
        history.iter().any(|h| h.name == name && h.in_use).then_some(())
    })
    .await;
    stays(
        &format!("revision {name} is kept while {why}"),
        Duration::from_secs(3),
        || async { revision_exists(ns, name).await },
    )
    .await;
}

/// Waits until revision `name` has been pruned.
async fn wait_pruned(ns: &TestNamespace, name: &str, why: &str) {
    eventually(&format!("revision {name} to be pruned ({why})"), || async {
        (!revision_exists(ns, name).await).then_some(())
    })
    .await;
}

/// Deletes a Job and its pods, and waits until it is gone.
async fn delete_job(ns: &TestNamespace, name: &str) {
    let api = ns.api::<Job>();
    api.delete(name, &DeleteParams::foreground())
        .await
        .expect("delete the Job");
    eventually(&format!("Job {name} to be gone"), || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Whether the local cluster's simulated node (which knows [`FAIL_KEY`]) is there.
async fn has_fake_node(ns: &TestNamespace) -> bool {
    let node = Api::<Node>::all(ns.client.clone()).get_opt(FAKE_NODE).await;
    matches!(node, Ok(Some(_)))
}

// ------------------------------------------------------------------------------------ CronJob --

#[tokio::test]
async fn a_cronjob_moves_and_its_jobs_keep_their_revision() {
    const CRONJOB: &str = "report";
    let ns = TestNamespace::new("cronjob").await;
    let _operator = Operator::start(&ns.name).await;
    let cronjobs = cronjob_resource(&ns.client).await;
    let api = ns.dynamic(&cronjobs);
    let (v1, v2) = (app_config_revision("1"), app_config_revision("2"));

    ns.apply(&app_config_yaml("1", Some(0)));
    set_ready(&ns, APP_CONFIG).await;
    // Scheduled once a year: the test starts its Jobs itself, as the CronJob controller would.
    let cronjob = json!({
        "apiVersion": cronjobs.api_version,
        "kind": "CronJob",
        "metadata": {"name": CRONJOB, "labels": opted_in(None)},
        "spec": {
            "schedule": "0 0 1 1 *",
            "jobTemplate": {
                "metadata": {"labels": {"app": CRONJOB}},
                "spec": {"template": {
                    "metadata": {"labels": {"app": CRONJOB}},
                    "spec": pod_spec(APP_CONFIG, Some("Never")),
                }},
            },
        },
    });
    ns.apply(&cronjob.to_string());
    let names = || async {
        names_at(
            &api.get(CRONJOB).await.expect("get the CronJob").data,
            CRONJOB_POD_SPEC,
        )
    };
    eventually("the CronJob to name the first revision", || async {
        (names().await == only(&v1)).then_some(())
    })
    .await;
    // Its Jobs and their pods carry cmset's label, so that the operator finds them.
    let stored = api.get(CRONJOB).await.unwrap();
    for labels in [
        "/spec/jobTemplate/metadata/labels",
        "/spec/jobTemplate/spec/template/metadata/labels",
    ] {
        assert_eq!(
            stored.data.pointer(&format!("{labels}/cmset.dev~1managed")),
            Some(&json!("true")),
            "the CronJob's {labels} carry cmset.dev/managed: {:?}",
            stored.data.pointer(labels)
        );
    }
    let first = job_from_cronjob(&ns, &stored, &format!("{CRONJOB}-1")).await;
    assert_eq!(
        names_at(&serde_json::to_value(&first).unwrap(), POD_SPEC),
        only(&v1),
        "a Job made now runs the first revision"
    );

    // A change moves the CronJob: its next Job takes the new revision.
    ns.apply(&app_config_yaml("2", Some(0)));
    eventually("the CronJob to name the second revision", || async {
        (names().await == only(&v2)).then_some(())
    })
    .await;
    wait_entry(&ns, "CronJob", CRONJOB, WorkloadState::Current, &v2).await;
    let second = job_from_cronjob(&ns, &api.get(CRONJOB).await.unwrap(), &format!("{CRONJOB}-2")).await;
    assert_eq!(
        names_at(&serde_json::to_value(&second).unwrap(), POD_SPEC),
        only(&v2),
        "the CronJob's next Job runs the second revision"
    );

    // The first Job still runs the first revision: kept, with no history allowed, until it is deleted.
    kept_in_use(&ns, &v1, "a Job of the CronJob names it").await;
    delete_job(&ns, &first.name_any()).await;
    wait_pruned(&ns, &v1, "the Job that named it is gone").await;
    assert!(revision_exists(&ns, &v2).await, "the current revision stays");
}

// ---------------------------------------------------------------------------------------- Job --

#[tokio::test]
async fn a_job_created_naming_the_set_runs_the_current_revision_and_keeps_it() {
    const JOB: &str = "migrate";
    let ns = TestNamespace::new("job").await;
    let _operator = Operator::start(&ns.name).await;
    let (v1, v2) = (app_config_revision("1"), app_config_revision("2"));
    ns.apply(&app_config_yaml("1", Some(0)));
    set_ready(&ns, APP_CONFIG).await;

    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB, "labels": opted_in(None)},
        "spec": {"template": {
            "metadata": {"labels": {"app": JOB}},
            "spec": pod_spec(APP_CONFIG, Some("Never")),
        }},
    });
    let job: Job = serde_json::from_value(job).unwrap();
    let stored = ns
        .api::<Job>()
        .create(&PostParams::default(), &job)
        .await
        .expect("create the Job");
    assert_eq!(
        names_at(&serde_json::to_value(&stored).unwrap(), POD_SPEC),
        only(&v1),
        "the Job is stored naming the current revision (its template cannot change later)"
    );
    let generation = stored.metadata.generation;

    // The content changes: the Job keeps running what it was created with, and keeps it.
    ns.apply(&app_config_yaml("2", Some(0)));
    wait_current(&ns, &v2).await;
    kept_in_use(&ns, &v1, "the Job names it").await;
    let now = ns.api::<Job>().get(JOB).await.unwrap();
    assert_eq!(
        (
            names_at(&serde_json::to_value(&now).unwrap(), POD_SPEC),
            now.metadata.generation
        ),
        (only(&v1), generation),
        "cmset never patches a Job"
    );

    // A GitOps tool applies the manifest again (naming the set): the API server would refuse a change
    // of the template; admission keeps the revision the Job was created with, so it is no change.
    let reapplied = ns
        .api::<Job>()
        .patch(JOB, &PatchParams::apply("gitops").force(), &Patch::Apply(&job))
        .await
        .expect("re-applying the manifest is not refused as a change to an immutable field");
    assert_eq!(
        (
            names_at(&serde_json::to_value(&reapplied).unwrap(), POD_SPEC),
            reapplied.metadata.generation
        ),
        (only(&v1), generation),
        "the re-applied Job still runs the revision it was created with"
    );
    delete_job(&ns, JOB).await;
    wait_pruned(&ns, &v1, "the Job that named it is gone").await;
}

// ------------------------------------------------------------------------------ Argo Rollouts --

/// An opted-in Rollout of one replica (pods `app: <name>`) reading `set`, in `wave`, with a
/// `progressDeadlineSeconds` of its own when given.
fn rollout_json(name: &str, set: &str, wave: Option<i32>, progress_deadline: Option<i32>) -> Value {
    let mut rollout = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": name, "labels": opted_in(wave)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"canary": {}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": pod_spec(set, None),
            },
        },
    });
    if let Some(seconds) = progress_deadline {
        rollout["spec"]["progressDeadlineSeconds"] = seconds.into();
    }
    rollout
}

async fn get_rollout(ns: &TestNamespace, name: &str) -> DynamicObject {
    argo::rollouts(ns.client.clone(), &ns.name)
        .get(name)
        .await
        .expect("get the Rollout")
}

/// The ConfigMaps a Rollout's template names.
async fn rollout_names(ns: &TestNamespace, name: &str) -> BTreeSet<String> {
    names_at(&get_rollout(ns, name).await.data, POD_SPEC)
}

/// The Rollout's `status.phase`, once its controller saw its latest spec.
fn phase(rollout: &DynamicObject) -> Option<&str> {
    let status = &rollout.data["status"];
    let generation = rollout.metadata.generation?.to_string();
    (status["observedGeneration"].as_str() == Some(generation.as_str()))
        .then(|| status["phase"].as_str())
        .flatten()
}

/// Waits until Rollout `name` names exactly `revision` and its controller reports it `Healthy`.
async fn wait_healthy_on(ns: &TestNamespace, name: &str, revision: &str) -> DynamicObject {
    let what = format!("Rollout {name} to name {revision} and be Healthy");
    eventually_within(WAIT, &what, || async {
        let rollout = get_rollout(ns, name).await;
        (names_at(&rollout.data, POD_SPEC) == only(revision) && phase(&rollout) == Some("Healthy"))
            .then_some(rollout)
    })
    .await
}

/// The ReplicaSets of a Rollout that name `revision`.
fn naming<'a>(sets: &'a [ReplicaSet], revision: &str) -> Vec<&'a ReplicaSet> {
    sets.iter()
        .filter(|rs| {
            let template = serde_json::to_value(rs.spec.as_ref().and_then(|s| s.template.as_ref())).unwrap();
            names_at(&template, "/spec") == only(revision)
        })
        .collect()
}

fn replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

/// The harness's own check: the simulated Argo controller makes ReplicaSets and writes status the way
/// Argo's does (no operator involved), so that what the Rollout tests prove holds for Argo.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulated_argo_controller_rolls_out_like_argo() {
    const NAME: &str = "web";
    install_crd("argo-rollouts-crd.yaml", ROLLOUT_CRD).await;
    let ns = TestNamespace::new("argosim").await;
    let _argo = ArgoRollouts::start(ns.client.clone(), &ns.name);
    for (config, key) in [
        ("one", "APP_VERSION"),
        ("two", "APP_VERSION"),
        ("broken", FAIL_KEY),
    ] {
        ns.kubectl(&["create", "configmap", config, &format!("--from-literal={key}=1")]);
    }
    let api = argo::rollouts(ns.client.clone(), &ns.name);
    create(&api, rollout_json(NAME, "one", None, Some(10))).await;

    // The first template: one ReplicaSet, made as Argo makes it.
    let rollout = wait_healthy_on(&ns, NAME, "one").await;
    let uid = rollout.uid().unwrap();
    let hash = rollout.data["status"]["currentPodHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rollout.data["status"]["stableRS"], json!(hash));
    let sets = argo::replica_sets_of(&ns, NAME).await;
    assert_eq!(sets.len(), 1, "one ReplicaSet");
    let rs = &sets[0];
    assert_eq!(rs.name_any(), format!("{NAME}-{hash}"));
    assert_eq!(rs.labels().get(POD_TEMPLATE_HASH), Some(&hash));
    assert_eq!(rs.labels().get("app").map(String::as_str), Some(NAME));
    assert_eq!(rs.annotations().get(REVISION).map(String::as_str), Some("1"));
    let owner = &rs.owner_references()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        ("Rollout", NAME, uid.as_str(), Some(true))
    );
    let spec = rs.spec.as_ref().unwrap();
    assert_eq!(
        spec.selector
            .match_labels
            .as_ref()
            .unwrap()
            .get(POD_TEMPLATE_HASH),
        Some(&hash)
    );
    let template_labels = spec
        .template
        .as_ref()
        .unwrap()
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref();
    assert_eq!(template_labels.unwrap().get(POD_TEMPLATE_HASH), Some(&hash));

    // A new template: a new ReplicaSet; the old one is scaled to 0 once the new one is available.
    let patch = json!({"spec": {"template": {"spec": pod_spec("two", None)}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let rollout = wait_healthy_on(&ns, NAME, "two").await;
    let second_hash = rollout.data["status"]["currentPodHash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(second_hash, hash);
    let sets = eventually_within(WAIT, "the first ReplicaSet to be scaled to 0", || async {
        let sets = argo::replica_sets_of(&ns, NAME).await;
        (sets.len() == 2 && replicas(&sets[0]) == 0).then_some(sets)
    })
    .await;
    assert_eq!(sets[1].labels().get(POD_TEMPLATE_HASH), Some(&second_hash));
    assert_eq!(replicas(&sets[1]), 1);

    // `kubectl argo rollouts undo`: the first ReplicaSet comes back, as the newest revision.
    let back_to = argo::undo(&ns, NAME).await;
    assert_eq!(back_to, format!("{NAME}-{hash}"));
    let rollout = wait_healthy_on(&ns, NAME, "one").await;
    assert_eq!(rollout.data["status"]["currentPodHash"], json!(hash));
    let sets = eventually_within(WAIT, "the second ReplicaSet to be scaled to 0", || async {
        let sets = argo::replica_sets_of(&ns, NAME).await;
        (sets.len() == 2 && replicas(&sets[0]) == 0).then_some(sets)
    })
    .await;
    assert_eq!(
        sets[1].name_any(),
        back_to,
        "the undo reused the first ReplicaSet"
    );
    assert_eq!(sets[1].annotations().get(REVISION).map(String::as_str), Some("3"));

    // A template whose pods never become ready: Degraded after the Rollout's progress deadline, the
    // stable ReplicaSet still running.
    if !has_fake_node(&ns).await {
        eprintln!("SKIPPED the Degraded part: it needs the local cluster's simulated node {FAKE_NODE}");
        return;
    }
    let patch = json!({"spec": {"template": {"spec": pod_spec("broken", None)}}});
    api.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let degraded = eventually_within(WAIT, "the Rollout to be Degraded", || async {
        let rollout = get_rollout(&ns, NAME).await;
        (phase(&rollout) == Some("Degraded")).then_some(rollout)
    })
    .await;
    let message = degraded.data["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("ProgressDeadlineExceeded"), "{message}");
    assert_eq!(
        degraded.data["status"]["stableRS"],
        json!(hash),
        "the stable ReplicaSet stays"
    );
    let sets = argo::replica_sets_of(&ns, NAME).await;
    let stable = sets.iter().find(|rs| rs.name_any() == back_to).unwrap();
    assert_eq!(replicas(stable), 1, "the stable ReplicaSet is not scaled down");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_moves_keeps_what_its_replica_sets_name_and_an_undo_is_a_pin() {
    const NAME: &str = "web";
    install_crd("argo-rollouts-crd.yaml", ROLLOUT_CRD).await;
    let ns = TestNamespace::new("rollout").await;
    let _argo = ArgoRollouts::start(ns.client.clone(), &ns.name);
    let _operator = Operator::start(&ns.name).await;
    let (v1, v2, v3) = (
        app_config_revision("1"),
        app_config_revision("2"),
        app_config_revision("3"),
    );
    ns.apply(&app_config_yaml("1", Some(0)));
    set_ready(&ns, APP_CONFIG).await;

    let rollouts = argo::rollouts(ns.client.clone(), &ns.name);
    create(&rollouts, rollout_json(NAME, APP_CONFIG, None, None)).await;
    wait_healthy_on(&ns, NAME, &v1).await;
    wait_entry(&ns, "Rollout", NAME, WorkloadState::Current, &v1).await;
    // The template's labels (cmset's included) are on the ReplicaSet Argo made of it.
    let sets = argo::replica_sets_of(&ns, NAME).await;
    assert_eq!(
        sets[0].labels().get("cmset.dev/managed").map(String::as_str),
        Some("true"),
        "Argo's ReplicaSet carries the template's labels: {:?}",
        sets[0].labels()
    );

    // A content change rewrites the Rollout; Argo rolls it.
    ns.apply(&app_config_yaml("2", Some(0)));
    wait_healthy_on(&ns, NAME, &v2).await;
    wait_entry(&ns, "Rollout", NAME, WorkloadState::Current, &v2).await;
    // The first revision is kept, with no history allowed: a ReplicaSet of the Rollout names it.
    kept_in_use(&ns, &v1, "a ReplicaSet of the Rollout names it").await;

    // Argo's undo brings the first revision back: a pin, which cmset leaves alone.
    argo::undo(&ns, NAME).await;
    wait_healthy_on(&ns, NAME, &v1).await;
    wait_entry(&ns, "Rollout", NAME, WorkloadState::Pinned, &v1).await;
    stays(
        "the rolled-back Rollout stays on the first revision",
        Duration::from_secs(4),
        || async { rollout_names(&ns, NAME).await == only(&v1) },
    )
    .await;
    let set = ns.set(APP_CONFIG).await;
    let ready = set.condition("Ready").expect("a Ready condition");
    assert_eq!(
        ready.status, "True",
        "a pinned Rollout does not make the set unready: {ready:?}"
    );
    assert_eq!(
        argo::replica_sets_of(&ns, NAME).await.len(),
        2,
        "the undo reused the first ReplicaSet"
    );
    for revision in [&v1, &v2] {
        assert!(
            revision_exists(&ns, revision).await,
            "revision {revision} is kept while a ReplicaSet of the Rollout names it"
        );
    }

    // The pin lasts until the content changes.
    ns.apply(&app_config_yaml("3", Some(0)));
    wait_healthy_on(&ns, NAME, &v3).await;
    wait_entry(&ns, "Rollout", NAME, WorkloadState::Current, &v3).await;

    // Once the ReplicaSet that names the first revision is gone, nothing keeps it.
    let sets = argo::replica_sets_of(&ns, NAME).await;
    let of_v1 = naming(&sets, &v1);
    assert_eq!(of_v1.len(), 1, "one ReplicaSet names {v1}");
    cmset_e2e::delete(&ns.api::<ReplicaSet>(), &of_v1[0].name_any()).await;
    wait_pruned(&ns, &v1, "no ReplicaSet names it any more").await;
    assert!(
        revision_exists(&ns, &v2).await,
        "{v2} is still named by a ReplicaSet"
    );
}

/// A set with `spec.rollout` (waves, automatic rollback) holding `data`: returns its revision's name.
fn write_set(ns: &TestNamespace, data: &[(&str, &str)], progress_deadline: i32) -> String {
    let entries: String = data
        .iter()
        .map(|(k, v)| format!("\n      {k}: {}", serde_json::to_string(v).unwrap()))
        .collect();
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {APP_CONFIG}
spec:
  rollout:
    stabilizationSeconds: 2
    progressDeadlineSeconds: {progress_deadline}
    autoRollback: true
  template:
    data:{entries}
"#
    ));
    kustomize_name(APP_CONFIG, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollouts_in_waves_a_degraded_rollout_is_rolled_back_and_the_next_wave_never_sees_it() {
    // The set would wait 300 s; each Rollout's own deadline is 10 s: the rollback within WAIT proves
    // cmset read Argo's `Degraded`.
    const SET_DEADLINE: i32 = 300;
    const ROLLOUT_DEADLINE: i32 = 10;
    const FIRST: &str = "first";
    const SECOND: &str = "second";
    install_crd("argo-rollouts-crd.yaml", ROLLOUT_CRD).await;
    let ns = TestNamespace::new("rolloutwaves").await;
    if !has_fake_node(&ns).await {
        eprintln!(
            "SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE} ({FAIL_KEY})"
        );
        return;
    }
    let _argo = ArgoRollouts::start(ns.client.clone(), &ns.name);
    let _operator = Operator::start(&ns.name).await;
    let good = write_set(&ns, &[("APP_VERSION", "1")], SET_DEADLINE);
    set_ready(&ns, APP_CONFIG).await;
    let rollouts = argo::rollouts(ns.client.clone(), &ns.name);
    create(
        &rollouts,
        rollout_json(FIRST, APP_CONFIG, None, Some(ROLLOUT_DEADLINE)),
    )
    .await;
    create(
        &rollouts,
        rollout_json(SECOND, APP_CONFIG, Some(1), Some(ROLLOUT_DEADLINE)),
    )
    .await;
    wait_healthy_on(&ns, FIRST, &good).await;
    wait_healthy_on(&ns, SECOND, &good).await;
    set_ready(&ns, APP_CONFIG).await;

    // The change adds the key that keeps the new pods from ever becoming ready.
    let bad = write_set(&ns, &[("APP_VERSION", "1"), (FAIL_KEY, "true")], SET_DEADLINE);
    let moved = eventually_within(WAIT, "first to be moved to the bad revision", || async {
        (rollout_names(&ns, FIRST).await == only(&bad)).then(Instant::now)
    })
    .await;

    // Argo reports it Degraded; cmset fails the rollout in wave 0 and moves first back.
    let deadline = Instant::now() + WAIT;
    let (status, back) = loop {
        assert_eq!(
            rollout_names(&ns, SECOND).await,
            only(&good),
            "second (wave 1) never names the bad revision"
        );
        let status = set_status(&ns).await;
        let failed = status
            .rollout
            .as_ref()
            .is_some_and(|r| r.revision == bad && r.phase == RolloutPhase::Failed);
        let is_back = rollout_names(&ns, FIRST).await == only(&good);
        let rolled_back = status.workloads.iter().any(|w| {
            w.kind == "Rollout"
                && w.name == FIRST
                && w.state == WorkloadState::RolledBack
                && w.revision == good
        });
        if failed && is_back && rolled_back {
            break (status, Instant::now());
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for the rollout of {bad} to fail and first to be rolled back: \
             {status:?}\nfirst: {:?}",
            get_rollout(&ns, FIRST).await.data["status"]
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let waited = back.duration_since(moved);
    eprintln!("first was moved back {waited:?} after it moved");
    assert!(
        waited >= Duration::from_secs(ROLLOUT_DEADLINE as u64) - Duration::from_millis(1500),
        "first was moved back after {waited:?}, before Argo could report it Degraded"
    );
    let r = status.rollout.as_ref().unwrap();
    assert_eq!(r.wave, 0, "failed in wave 0: {r:?}");
    assert!(
        r.message
            .as_deref()
            .is_some_and(|m| m.contains(FIRST) && m.contains("Degraded")),
        "the rollout's message names the Rollout and Argo's verdict: {r:?}"
    );
    eprintln!("the failed rollout's message: {:?}", r.message);
    assert!(
        status.history.iter().any(|h| h.name == bad && h.failed),
        "the bad revision is marked failed: {:?}",
        status.history
    );
    let second = status
        .workloads
        .iter()
        .find(|w| w.kind == "Rollout" && w.name == SECOND)
        .expect("the set lists second");
    assert_eq!(
        (second.state, second.revision.as_str()),
        (WorkloadState::Waiting, good.as_str()),
        "{second:?}"
    );

    // Argo brings the stable ReplicaSet back: first is Healthy on the good revision again, and second
    // never had a ReplicaSet of the bad one.
    wait_healthy_on(&ns, FIRST, &good).await;
    let second_sets = argo::replica_sets_of(&ns, SECOND).await;
    assert!(
        naming(&second_sets, &bad).is_empty(),
        "no ReplicaSet of second names {bad}"
    );
    assert_eq!(second_sets.len(), 1, "second did not roll at all");
    assert_eq!(
        naming(&argo::replica_sets_of(&ns, FIRST).await, &bad).len(),
        1,
        "first really was moved to {bad}"
    );

    // A good change starts a fresh rollout, which reaches both waves.
    let fixed = write_set(&ns, &[("APP_VERSION", "3")], SET_DEADLINE);
    wait_healthy_on(&ns, FIRST, &fixed).await;
    wait_healthy_on(&ns, SECOND, &fixed).await;
    eventually_within(WAIT, "the rollout of the fixed revision to complete", || async {
        let status = set_status(&ns).await;
        status
            .rollout
            .is_some_and(|r| r.revision == fixed && r.phase == RolloutPhase::Complete)
            .then_some(())
    })
    .await;
    for name in [FIRST, SECOND] {
        wait_entry(&ns, "Rollout", name, WorkloadState::Current, &fixed).await;
    }
}

// ------------------------------------------------------------------------------- declared kind --

/// An opted-in Widget (the test CRD) of pods `app: <name>` reading the set, in `wave`.
fn widget_json(name: &str, wave: Option<i32>) -> Value {
    json!({
        "apiVersion": "e2e.cmset.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "labels": opted_in(wave)},
        "spec": {"template": {
            "metadata": {"labels": {"app": name}},
            "spec": pod_spec(APP_CONFIG, None),
        }},
    })
}

/// What a Widget's controller would write: it saw generation `generation` and is (not) `Ready`.
/// Writes the Widget's status as its controller would: its current generation observed, Ready or not.
async fn report(widgets: &Api<DynamicObject>, name: &str, ready: bool) {
    let generation = widgets
        .get(name)
        .await
        .expect("read the Widget")
        .metadata
        .generation
        .expect("a stored object has a generation");
    let status = json!({"status": {
        "observedGeneration": generation,
        "conditions": [{
            "type": "Ready",
            "status": if ready { "True" } else { "False" },
            "reason": if ready { "Ready" } else { "Starting" },
            "lastTransitionTime": "2024-01-01T00:00:00Z",
        }],
    }});
    widgets
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("write the Widget's status");
}

#[tokio::test]
async fn a_declared_kind_moves_and_its_conditions_hold_the_next_wave() {
    install_crd("widget-crd.yaml", WIDGET_CRD).await;
    let ns = TestNamespace::new("declared").await;
    let _operator = Operator::start_with(
        &ns.name,
        &["--workload-kind", "e2e.cmset.dev/v1/Widget=spec.template"],
    )
    .await;
    let widgets = ns.dynamic(&widget());
    let names = |name: &'static str| {
        let widgets = widgets.clone();
        async move { names_at(&widgets.get(name).await.expect("get the Widget").data, POD_SPEC) }
    };
    let (v1, v2) = (app_config_revision("1"), app_config_revision("2"));
    ns.apply(&app_config_yaml("1", Some(0)));
    set_ready(&ns, APP_CONFIG).await;

    // `plain` reports nothing (moved counts as done), `reporting` reports observedGeneration and Ready,
    // both in wave 0; `later` is in wave 1.
    for (name, wave) in [("plain", None), ("reporting", None), ("later", Some(1))] {
        create(&widgets, widget_json(name, wave)).await;
    }
    for name in ["plain", "reporting", "later"] {
        eventually(&format!("Widget {name} to name the first revision"), || async {
            (names(name).await == only(&v1)).then_some(())
        })
        .await;
        wait_entry(&ns, "Widget", name, WorkloadState::Current, &v1).await;
    }
    report(&widgets, "reporting", true).await;
    set_ready(&ns, APP_CONFIG).await;

    // A change moves wave 0; `reporting` has not seen its new generation, so wave 1 waits.
    ns.apply(&app_config_yaml("2", Some(0)));
    for name in ["plain", "reporting"] {
        eventually(&format!("Widget {name} to name the second revision"), || async {
            (names(name).await == only(&v2)).then_some(())
        })
        .await;
    }
    wait_entry(&ns, "Widget", "later", WorkloadState::Waiting, &v1).await;
    stays(
        "later waits while reporting has not seen its new generation",
        Duration::from_secs(3),
        || async { names("later").await == only(&v1) },
    )
    .await;
    // It has now, and is not Ready yet: still waiting.
    report(&widgets, "reporting", false).await;
    stays(
        "later waits while reporting is not Ready",
        Duration::from_secs(3),
        || async { names("later").await == only(&v1) },
    )
    .await;
    // Ready: wave 1 moves, and the rollout completes.
    report(&widgets, "reporting", true).await;
    eventually("Widget later to name the second revision", || async {
        (names("later").await == only(&v2)).then_some(())
    })
    .await;
    for name in ["plain", "reporting", "later"] {
        wait_entry(&ns, "Widget", name, WorkloadState::Current, &v2).await;
    }
    set_ready(&ns, APP_CONFIG).await;
}

// ---------------------------------------------------------------------- kinds that come and go --

#[tokio::test]
async fn a_kind_installed_after_start_is_served_and_its_removal_stops_nothing_else() {
    const DEPLOYMENT: &str = "web";
    const GADGET: &str = "tool";
    // Nothing of an earlier run may be left: the CRD must arrive after the operator started.
    remove_crd(GADGET_CRD).await;
    let ns = TestNamespace::new("kindlater").await;
    // Ready without the CRD: a kind not installed never blocks readiness.
    let mut operator = Operator::start_with(
        &ns.name,
        &["--workload-kind", "e2e.cmset.dev/v1/Gadget=spec.template"],
    )
    .await;
    let (v1, v2, v3) = (
        app_config_revision("1"),
        app_config_revision("2"),
        app_config_revision("3"),
    );
    ns.apply(&app_config_yaml("1", Some(0)));
    set_ready(&ns, APP_CONFIG).await;
    ns.apply(&cmset_e2e::fixtures::deployment_yaml(
        DEPLOYMENT,
        &[cmset_e2e::fixtures::Reads::EnvFrom(APP_CONFIG)],
    ));
    wait_names(&ns, DEPLOYMENT, &[&v1]).await;

    // The CRD arrives; a Gadget naming the bare set is stored so (no webhook rule covers it), and the
    // operator, finding the kind, moves it.
    install_crd("gadget-crd.yaml", GADGET_CRD).await;
    let installed = Instant::now();
    let gadgets = ns.dynamic(&gadget());
    let stored = create(
        &gadgets,
        json!({
            "apiVersion": "e2e.cmset.dev/v1",
            "kind": "Gadget",
            "metadata": {"name": GADGET, "labels": opted_in(None)},
            "spec": {"template": {
                "metadata": {"labels": {"app": GADGET}},
                "spec": pod_spec(APP_CONFIG, None),
            }},
        }),
    )
    .await;
    assert_eq!(names_at(&stored.data, POD_SPEC), only(APP_CONFIG));
    let names = || async { names_at(&gadgets.get(GADGET).await.expect("get the Gadget").data, POD_SPEC) };
    eventually(
        "the Gadget to be moved to the current revision (within a minute)",
        || async { (names().await == only(&v1)).then_some(()) },
    )
    .await;
    eprintln!("the Gadget was served {:?} after its CRD", installed.elapsed());
    ns.apply(&app_config_yaml("2", Some(0)));
    eventually("the Gadget to follow a change", || async {
        (names().await == only(&v2)).then_some(())
    })
    .await;
    wait_names(&ns, DEPLOYMENT, &[&v2]).await;

    // The CRD goes (and its objects with it): the operator stays up and ready, past its next look at
    // discovery, and keeps serving the other kinds.
    remove_crd(GADGET_CRD).await;
    stays(
        "the operator stays up and ready without the kind",
        Duration::from_secs(25),
        || async { http_get(operator.metrics_port, "/readyz").is_some_and(|(code, _)| code == 200) },
    )
    .await;
    assert!(operator.exited().is_none(), "the operator is still running");
    ns.apply(&app_config_yaml("3", Some(0)));
    wait_names(&ns, DEPLOYMENT, &[&v3]).await;
    set_ready(&ns, APP_CONFIG).await;
    let log = std::fs::read_to_string(operator.log_path()).unwrap_or_default();
    assert!(!log.contains("panicked"), "the operator's log shows a panic");
}
