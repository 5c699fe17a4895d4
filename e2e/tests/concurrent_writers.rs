//! Other writers edit a Deployment while cmset moves its references after set changes: `kubectl set
//! image`, a second server-side-apply field manager owning an annotation and the container's resources,
//! `kubectl scale`, a JSON patch inserting a volume at the front of the list (which shifts the index of
//! the volume cmset rewrites), and `kubectl label`. Every round changes the set and lets them all write
//! at once.
//!
//! Not among them: re-applying the original manifest (naming the bare set). `kubectl apply` sets every
//! field its manifest declares back to the manifest's value, the image and replicas as much as cmset's
//! references; living with that is the admission webhook's job (see `gitops.rs`).
//!
//! Afterwards none of their edits is lost, cmset's references name the current revision (and unrelated
//! ones are left alone), and nobody ping-pongs: once the last rollout has finished, the Deployment's
//! generation and resourceVersion, and the operator's write count, stay put.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cmset_e2e::fixtures::{
    APP_CONFIG, APP_VERSION, DeploymentYaml, Reads, app_config_revision, app_config_yaml, rollout_status,
    set_ready, template_names, wait_names,
};
use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::kube::ResourceExt;
use cmset_e2e::{CONVERGE, Operator, TestNamespace, eventually};

const ROUNDS: u32 = 4;
/// How long nothing must be written before the Deployment and cmset count as settled.
const QUIET: Duration = Duration::from_secs(3);
const VOLUMES_PER_ROUND: u32 = 4;

const READS: &[Reads] = &[
    Reads::EnvFrom(APP_CONFIG),
    Reads::EnvKey {
        name: APP_CONFIG,
        key: APP_VERSION,
    },
    Reads::Volume(APP_CONFIG),
];

/// What the second field manager owns: an annotation and the container's resources.
fn sidecar_team_apply(round: u32) -> String {
    format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  annotations:
    sidecar-team/round: "{round}"
spec:
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
        - name: app
          resources:
            requests: {{cpu: "{round}0m"}}
"#
    )
}

fn image(round: u32) -> String {
    format!("registry.k8s.io/pause:3.{round}")
}

/// Every round: the set changes while the others write, all at once.
async fn round(ns: &TestNamespace, round: u32) {
    let set = app_config_yaml(&round.to_string(), None);
    let image = format!("app={}", image(round));
    let replicas = round.to_string();
    let sidecar = sidecar_team_apply(round);
    let label = format!("round={round}");
    futures::join!(
        ns.kubectl_async(&["apply", "-f", "-"], Some(&set)),
        ns.kubectl_async(&["set", "image", "deployment/web", &image], None),
        ns.kubectl_async(
            &[
                "apply",
                "--server-side",
                "--field-manager=sidecar-team",
                "-f",
                "-"
            ],
            Some(&sidecar),
        ),
        ns.kubectl_async(&["scale", "deployment/web", "--replicas", &replicas], None),
        insert_volumes(ns, round),
        ns.kubectl_async(&["label", "--overwrite", "deployment/web", &label], None),
    );
}

/// Volumes `extra-<round>-<i>` inserted one by one at the front of the list, each shifting the index of
/// the volume cmset rewrites: a patch planned a moment earlier then fails its `test` guard and cmset
/// plans again from a fresh read. Each reads an unrelated ConfigMap, which cmset must leave alone.
async fn insert_volumes(ns: &TestNamespace, round: u32) {
    for i in 0..VOLUMES_PER_ROUND {
        let volume = format!(
            r#"[{{"op": "add", "path": "/spec/template/spec/volumes/0",
                 "value": {{"name": "extra-{round}-{i}", "configMap": {{"name": "other-{round}-{i}", "optional": true}}}}}}]"#
        );
        ns.kubectl_async(&["patch", "deployment/web", "--type=json", "-p", &volume], None)
            .await;
    }
}

/// The ConfigMap names of every reference to the set (envFrom, env, its volume), in that order.
fn set_references(d: &Deployment) -> Vec<String> {
    let pod = d.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    let env_from = container.env_from.iter().flatten();
    let env = container.env.iter().flatten();
    let volume = pod.volumes.iter().flatten().find(|v| v.name == APP_CONFIG);
    env_from
        .filter_map(|e| Some(e.config_map_ref.as_ref()?.name.clone()))
        .chain(env.filter_map(|e| Some(e.value_from.as_ref()?.config_map_key_ref.as_ref()?.name.clone())))
        .chain(volume.and_then(|v| Some(v.config_map.as_ref()?.name.clone())))
        .collect()
}

#[tokio::test]
async fn edits_by_others_survive_cmset_moving_references_and_nobody_ping_pongs() {
    let ns = TestNamespace::new("concurrent-writers").await;
    let operator = Operator::start(&ns.name).await;
    ns.apply(&app_config_yaml("1", None));
    // Created by server-side apply: were it created by a client-side `kubectl apply`, the second
    // manager's first `kubectl apply --server-side` would migrate the client-side fields to it, and its
    // next apply would drop them (the opt-in label and the references among them).
    let manifest = DeploymentYaml::new("web", READS).yaml();
    ns.kubectl_async(
        &["apply", "--server-side", "--field-manager=gitops", "-f", "-"],
        Some(&manifest),
    )
    .await;
    wait_names(&ns, "web", &[&app_config_revision("1")]).await;

    for n in 2..2 + ROUNDS {
        round(&ns, n).await;
    }
    let last = 1 + ROUNDS;
    let current = app_config_revision(&last.to_string());

    // cmset's references are current; the unrelated ones others added are left alone.
    let extra = |prefix: &str| -> BTreeSet<String> {
        let each = |n| (0..VOLUMES_PER_ROUND).map(move |i| format!("{prefix}-{n}-{i}"));
        (2..=last).flat_map(each).collect()
    };
    let mut want = extra("other");
    want.insert(current.clone());
    eventually("the Deployment to name the current revision", || async {
        (template_names(&ns.deployment("web").await) == want).then_some(())
    })
    .await;
    set_ready(&ns, APP_CONFIG).await;
    let d = ns.deployment("web").await;
    assert_eq!(set_references(&d), vec![current.clone(); 3]);

    // Nobody's edit is lost.
    let spec = d.spec.as_ref().unwrap();
    let pod = spec.template.spec.as_ref().unwrap();
    let container = &pod.containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some(image(last).as_str()),
        "kubectl set image"
    );
    assert_eq!(spec.replicas, Some(last as i32), "kubectl scale");
    assert_eq!(
        d.annotations().get("sidecar-team/round").map(String::as_str),
        Some(last.to_string().as_str()),
        "the second field manager's annotation"
    );
    let cpu = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref()?.get("cpu"));
    assert_eq!(
        cpu.map(|q| q.0.as_str()),
        Some(format!("{last}0m").as_str()),
        "the second field manager's resources"
    );
    assert_eq!(
        d.labels().get("round").map(String::as_str),
        Some(last.to_string().as_str()),
        "kubectl label"
    );
    let volumes: BTreeSet<String> = pod.volumes.iter().flatten().map(|v| v.name.clone()).collect();
    let mut want_volumes = extra("extra");
    want_volumes.insert(APP_CONFIG.to_string());
    assert_eq!(volumes, want_volumes, "the inserted volumes");
    let managers: BTreeSet<String> = d
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(managers.contains("sidecar-team"), "{managers:?}");

    // Nobody ping-pongs. First the last rollout finishes: until it does, the Deployment controller
    // writes the Deployment's status as pods come and go, and cmset records the workload's progress in
    // the set's status. Then settled once the old pods are gone and three seconds pass without any
    // write to the object or by cmset: cmset batches a set's deferrable status writes for up to a
    // second (`BATCH_WINDOW`), so a quiet second can end just before a batched write lands.
    rollout_status(&ns, "deployment/web").await;
    // The old ReplicaSets' pods go a moment later; the revisions they named are in use until they
    // have, and cmset records it in the set's history. Settled means they are gone too.
    eventually("only pods of the current ReplicaSet are left", || async {
        let pods = ns.pods().await;
        let hashes: BTreeSet<String> = pods
            .iter()
            .filter_map(|p| p.labels().get("pod-template-hash").cloned())
            .collect();
        let leaving = pods.iter().any(|p| p.metadata.deletion_timestamp.is_some());
        (hashes.len() == 1 && !leaving).then_some(())
    })
    .await;
    let deadline = Instant::now() + CONVERGE;
    let written = || async {
        let version = ns.deployment("web").await.resource_version();
        (version, operator.writes_by_operation())
    };
    let mut seen = written().await;
    loop {
        tokio::time::sleep(QUIET).await;
        let now = written().await;
        if now == seen {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Deployment or cmset is still writing"
        );
        seen = now;
    }
    // How often a guard caught a stale plan depends on timing: told, not asserted.
    eprintln!(
        "cmset moved references {} times; {} guarded patches were refused and planned again",
        operator.metric("cmset_workloads_updated_total"),
        operator.metric("cmset_reconcile_errors_total"),
    );
    // Each check names what moved, so that a failure says who wrote.
    let settled = ns.deployment("web").await;
    let settled_status = ns.set(APP_CONFIG).await.status;
    let writes = operator.writes_by_operation();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let now = ns.deployment("web").await;
        assert_eq!(
            now.metadata.generation,
            settled.metadata.generation,
            "the Deployment's spec changed again; managers: {:?}",
            now.managed_fields()
        );
        assert_eq!(
            now.resource_version(),
            settled.resource_version(),
            "the Deployment was written again; status {:?} became {:?}; managers: {:?}",
            settled.status,
            now.status,
            now.managed_fields()
        );
        assert_eq!(
            operator.writes_by_operation(),
            writes,
            "cmset wrote again; the set's status was {:#?} and became {:#?}",
            settled_status,
            ns.set(APP_CONFIG).await.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
