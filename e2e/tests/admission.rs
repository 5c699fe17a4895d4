//! cmset's admission webhook, as the default install runs it: nothing but cmset's revisions is ever
//! called a revision. A workload applied together with its set, in whatever order the tool sends them,
//! never gets a ReplicaSet (or ControllerRevision) naming the bare set, a ConfigMap that does not
//! exist; and the webhook's own certificate is issued, trusted and renewed without a gap.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, replica_set_names, rollout_status,
    set_ready, template_names, wait_names,
};
use cmset_e2e::k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use cmset_e2e::k8s_openapi::api::core::v1::Secret;
use cmset_e2e::kube::Api;
use cmset_e2e::{Operator, TestNamespace, eventually};

const HELD_SINCE: &str = "cmset.dev/held-since";

fn paused(d: &Deployment) -> bool {
    d.spec.as_ref().and_then(|s| s.paused) == Some(true)
}

/// Whether cmset's webhook holds it (see `cmset_core::rollout::hold`).
fn held(d: &Deployment) -> bool {
    d.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(HELD_SINCE))
}

/// Every ConfigMap name any ReplicaSet of the namespace's Deployments ever named.
async fn replica_set_names_ever(ns: &TestNamespace) -> Vec<BTreeSet<String>> {
    ns.replica_sets()
        .await
        .iter()
        .filter_map(replica_set_names)
        .collect()
}

/// After the apply: the Deployment names the revision, runs unpaused, carries no hold, and its only
/// ReplicaSet (its whole `rollout history`) names the revision, never the bare set.
async fn assert_born_on_the_revision(ns: &TestNamespace, deployment: &str, revision: &str) {
    wait_names(ns, deployment, &[revision]).await;
    rollout_status(ns, &format!("deployment/{deployment}")).await;
    let d: Deployment = ns.deployment(deployment).await;
    assert!(!paused(&d), "left paused");
    assert!(!held(&d), "the hold is lifted");
    let everything = replica_set_names_ever(ns).await;
    assert_eq!(
        everything,
        vec![BTreeSet::from([revision.to_string()])],
        "one ReplicaSet, naming the revision"
    );
}

#[tokio::test]
async fn a_deployment_applied_after_its_set_in_one_apply_is_born_on_the_revision() {
    let ns = TestNamespace::new("adm-setfirst").await;
    let _operator = Operator::start(&ns.name).await;
    let manifest = format!(
        "{}\n---\n{}",
        app_config_yaml("1", None),
        DeploymentYaml::new("web", &[Reads::EnvFrom("app-config")]).yaml()
    );
    ns.apply(&manifest);
    assert_born_on_the_revision(&ns, "web", &app_config_revision("1")).await;
}

#[tokio::test]
async fn a_deployment_applied_before_its_set_in_one_apply_is_born_on_the_revision() {
    let ns = TestNamespace::new("adm-deployfirst").await;
    let _operator = Operator::start(&ns.name).await;
    // The order kustomize, Argo CD and Flux use: built-in kinds before custom resources.
    let manifest = format!(
        "{}\n---\n{}",
        DeploymentYaml::new("web", &[Reads::Volume("app-config")]).yaml(),
        app_config_yaml("1", None)
    );
    ns.apply(&manifest);
    assert_born_on_the_revision(&ns, "web", &app_config_revision("1")).await;
}

#[tokio::test]
async fn a_kustomization_applied_with_kubectl_apply_k_is_born_on_the_revision() {
    let ns = TestNamespace::new("adm-kustomize").await;
    let _operator = Operator::start(&ns.name).await;
    let deployment = DeploymentYaml::new(
        "web",
        &[Reads::EnvKey {
            name: "app-config",
            key: "APP_VERSION",
        }],
    )
    .replicas(2)
    .yaml();
    ns.apply_kustomization(
        &[
            ("set.yaml", app_config_yaml("1", None)),
            ("deployment.yaml", deployment),
        ],
        "resources: [set.yaml, deployment.yaml]\n",
    );
    assert_born_on_the_revision(&ns, "web", &app_config_revision("1")).await;
}

#[tokio::test]
async fn statefulsets_and_daemonsets_applied_after_their_set_start_on_the_revision() {
    let ns = TestNamespace::new("adm-sts").await;
    let _operator = Operator::start(&ns.name).await;
    let pod = "\n      containers:\n        - name: app\n          image: registry.k8s.io/pause:3.9\n          envFrom: [{configMapRef: {name: app-config}}]";
    let workload = |kind: &str| {
        format!(
            "apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: w-{lower}\n  labels: {{cmset.dev/enabled: \"true\"}}\nspec:\n  {extra}selector:\n    matchLabels: {{app: w-{lower}}}\n  template:\n    metadata:\n      labels: {{app: w-{lower}}}\n    spec:{pod}",
            lower = kind.to_lowercase(),
            extra = if kind == "StatefulSet" {
                "serviceName: w\n  "
            } else {
                ""
            },
        )
    };
    let manifest = format!(
        "{}\n---\n{}\n---\n{}",
        app_config_yaml("1", None),
        workload("StatefulSet"),
        workload("DaemonSet")
    );
    ns.apply(&manifest);
    let v1 = app_config_revision("1");
    eventually("both workloads to name the revision", || async {
        let sts = ns.statefulset("w-statefulset").await;
        let ds = ns.daemonset("w-daemonset").await;
        let named = |spec: Option<&cmset_e2e::k8s_openapi::api::core::v1::PodSpec>| {
            spec.map(cmset_e2e::fixtures::configmap_names)
        };
        let want = Some(BTreeSet::from([v1.clone()]));
        (named(sts.spec.as_ref().and_then(|s| s.template.spec.as_ref())) == want
            && named(ds.spec.as_ref().and_then(|s| s.template.spec.as_ref())) == want)
            .then_some(())
    })
    .await;
    // Their history: every ControllerRevision names the revision, none the bare set.
    let revisions = ns
        .api::<ControllerRevision>()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(revisions.len(), 2, "one ControllerRevision each: {revisions:?}");
    for r in &revisions {
        let data = serde_json::to_string(&r.data).unwrap();
        assert!(data.contains(&v1), "{data}");
        assert!(
            !data.contains("\"name\":\"app-config\""),
            "names the bare set: {data}"
        );
    }
}

#[tokio::test]
async fn a_held_deployment_whose_name_no_set_takes_runs_as_written_after_the_hold() {
    let ns = TestNamespace::new("adm-hold").await;
    let mut operator = Operator::start(&ns.name).await;
    // Opted in, but `later` is neither a set nor a ConfigMap yet: held, in case its set is on the way.
    ns.apply(&DeploymentYaml::new("web", &[Reads::EnvFromOptional("later")]).yaml());
    let held_now = ns.deployment("web").await;
    assert!(paused(&held_now), "created paused");
    assert!(held(&held_now));
    assert!(ns.replica_sets().await.is_empty(), "no ReplicaSet while held");
    // A crash in the middle of the hold loses nothing: the hold lives on the object.
    operator.restart().await;
    // No set turns up: after the hold's 30 s it runs as written.
    eventually("the hold to end", || async {
        let d = ns.deployment("web").await;
        (!paused(&d)).then_some(d)
    })
    .await;
    rollout_status(&ns, "deployment/web").await;
    let d = ns.deployment("web").await;
    assert!(!held(&d));
    assert_eq!(
        template_names(&d),
        BTreeSet::from(["later".to_string()]),
        "as written"
    );
}

#[tokio::test]
async fn ones_whose_configmaps_exist_run_at_once_and_running_deployments_are_never_held() {
    let ns = TestNamespace::new("adm-nohold").await;
    let _operator = Operator::start(&ns.name).await;
    // A plain ConfigMap that exists: nothing to wait for. Admission does not ask (anything can call
    // it, and the answer would say which objects exist), so it may hold the Deployment; the
    // controller, which may ask, lets it go at once.
    ns.kubectl(&["create", "configmap", "plain", "--from-literal=a=b"]);
    let started = std::time::Instant::now();
    ns.apply(&DeploymentYaml::new("web", &[Reads::EnvFrom("plain")]).yaml());
    eventually("the Deployment to run", || async {
        let d = ns.deployment("web").await;
        (!paused(&d) && !held(&d)).then_some(())
    })
    .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "released at once, not after the hold's 30 s: {:?}",
        started.elapsed()
    );
    rollout_status(&ns, "deployment/web").await;
    assert_eq!(
        replica_set_names_ever(&ns).await,
        vec![BTreeSet::from(["plain".to_string()])],
        "one ReplicaSet, as written"
    );
    // An update of a running Deployment is never paused, whatever it names.
    ns.apply(&DeploymentYaml::new("web", &[Reads::EnvFromOptional("missing")]).yaml());
    let updated = ns.deployment("web").await;
    assert!(!paused(&updated) && !held(&updated));
    assert_eq!(template_names(&updated), BTreeSet::from(["missing".to_string()]));
}

#[tokio::test]
async fn the_webhook_certificate_is_issued_trusted_and_renewed_without_a_gap() {
    let ns = TestNamespace::new("adm-cert").await;
    let secrets: Api<Secret> = Api::namespaced(ns.client.clone(), "cmset-system");
    let cert_of = |s: Secret| {
        s.data
            .and_then(|d| d.get("tls.crt").cloned())
            .map(|b| b.0)
            .unwrap_or_default()
    };
    // Certificates of one minute: renewed every 40 s. The Secret is shared with the suite's other
    // operators; they keep serving what they loaded, trusted until it expires.
    let operator = Operator::start_with(&ns.name, &["--webhook-cert-validity-seconds", "60"]).await;
    ns.apply(&app_config_yaml("1", None));
    let v1 = app_config_revision("1");
    set_ready(&ns, "app-config").await;
    let mut seen = Vec::new();
    for round in 0..3 {
        let current = cert_of(secrets.get("cmset-webhook-tls").await.unwrap());
        // Created through the webhook: stored already naming the revision.
        let name = format!("web-{round}");
        ns.apply(&DeploymentYaml::new(&name, &[Reads::EnvFrom("app-config")]).yaml());
        let d = ns.deployment(&name).await;
        assert_eq!(
            template_names(&d),
            BTreeSet::from([v1.clone()]),
            "round {round}: rewritten at admission"
        );
        assert_eq!(d.metadata.generation, Some(1), "round {round}");
        seen.push(current.clone());
        if round < 2 {
            eventually("the certificate to be renewed", || {
                let secrets = secrets.clone();
                let current = current.clone();
                async move {
                    let now = cert_of(secrets.get("cmset-webhook-tls").await.ok()?);
                    (now != current).then_some(())
                }
            })
            .await;
            // Give the renewing replica the moment between writing the Secret and serving it.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    assert_eq!(
        seen.iter().collect::<BTreeSet<_>>().len(),
        3,
        "three certificates served in turn"
    );
    // The private keys it issued never reach its log (nor does any PEM it handled).
    let log = std::fs::read_to_string(operator.log_path()).unwrap();
    let key = secrets.get("cmset-webhook-tls").await.unwrap().data.unwrap()["tls.key"]
        .0
        .clone();
    let key_line = String::from_utf8(key)
        .unwrap()
        .lines()
        .nth(1)
        .unwrap()
        .to_string();
    assert!(!log.contains(&key_line) && !log.contains("PRIVATE KEY") && !log.contains("BEGIN CERTIFICATE"));
}

#[tokio::test]
async fn without_the_webhook_cmset_rewrites_the_stored_workload_afterwards() {
    // The webhook fails open (cmset down, or not installed): the workload is stored as written and
    // the workload controller moves it once it runs.
    let ns = TestNamespace::new("adm-fallback").await;
    let _operator = Operator::start_without_webhook(&ns.name, &[]).await;
    ns.apply(&app_config_yaml("1", None));
    let v1 = app_config_revision("1");
    set_ready(&ns, "app-config").await;
    ns.apply(&DeploymentYaml::new("web", &[Reads::EnvFrom("app-config")]).yaml());
    wait_names(&ns, "web", &[&v1]).await;
    let d = ns.deployment("web").await;
    assert_eq!(
        d.metadata.generation,
        Some(2),
        "stored as written, then moved by the controller"
    );
    assert!(!paused(&d));
    rollout_status(&ns, "deployment/web").await;
}
