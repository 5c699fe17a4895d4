//! The Helm chart (config/helm/cmset) on a real API server: `helm install` of the chart as shipped, with the
//! README's command (on this 1.20 server it picks policy/v1beta1 and CRDs without CEL by itself), the operator reconciling a set as
//! the chart's ServiceAccount (so the chart's RBAC is enough), `helm upgrade` with changed values and a new CRD
//! field applied with Helm 4's server-side apply after the operator has written the webhooks' caBundle, and
//! `helm uninstall` running the pre-delete hook, which leaves no webhook configuration and keeps the CRDs.
//!
//! The chart installs cluster-scoped objects under fixed names (the CRDs, ClusterRoles `cmset-*`, the webhook
//! configurations `cmset`) that the shared suite cluster already has from `make install`, and a webhook that
//! would see every other test's workloads: so this test starts a control plane of its own
//! (e2e/cluster/cluster.sh with a state directory of its own) and stops it at the end.
//!
//! There is no kubelet, and the chart's pods do not run the operator's image: the operator runs as a local
//! process (`CMSET_CONTROLLER_BIN`) with the token of the chart's ServiceAccount, as the pod would. The
//! pre-delete hook's pod is run the same way: this test reads the Job's pod (its ServiceAccount and arguments),
//! runs the binary with them and that ServiceAccount's token, and reports the pod Succeeded, which the
//! simulated node never does by itself.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cmset_e2e::fixtures::{APP_CONFIG, Reads, app_config_revision, app_config_yaml, deployment_yaml};
use cmset_e2e::{eventually_within, free_port, http_get};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const RELEASE: &str = "cmset";
const NAMESPACE: &str = "cmset-system";
const WAIT: Duration = Duration::from_secs(120);
/// The chart's CRDs (`crds.install`), which `crds.keep` keeps after an uninstall.
const CRDS: [&str; 4] = [
    "configmapsets.cmset.dev",
    "secretsets.cmset.dev",
    "analysistemplates.cmset.dev",
    "changewindows.cmset.dev",
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A control plane of this test's own, stopped (and its state removed) when dropped.
struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
}

impl Cluster {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("cmset-e2e-helm-{}", std::process::id()));
        let out = Command::new("bash")
            .arg(repo().join("e2e/cluster/cluster.sh"))
            .arg("up")
            .env("CMSET_CLUSTER_DIR", &dir)
            .output()
            .expect("cluster.sh runs");
        assert!(
            out.status.success(),
            "cluster.sh up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let kubeconfig = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        Self { dir, kubeconfig }
    }

    async fn client(&self) -> Client {
        let config = kube::config::Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    }

    /// A command (kubectl or helm) against this cluster; its stdout, or a panic with its output.
    fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> String {
        self.try_run(program, args, stdin)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `kubectl get <args> -o json`, parsed.
    fn get_json(&self, args: &[&str]) -> Value {
        let args: Vec<&str> = ["get"]
            .iter()
            .chain(args)
            .chain(&["-o", "json"])
            .copied()
            .collect();
        serde_json::from_str(&self.run("kubectl", &args, None)).unwrap()
    }

    fn try_run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        use std::io::Write;
        let mut child = Command::new(program)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if out.status.success() {
            Ok(text)
        } else {
            Err(format!(
                "{program} {}: {}{text}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// A kubeconfig for this cluster that authenticates as ServiceAccount `account` of `namespace` (its token
    /// Secret, which Kubernetes 1.20 mints).
    async fn service_account_kubeconfig(&self, client: &Client, namespace: &str, account: &str) -> PathBuf {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let token = eventually_within(
            WAIT,
            &format!("the token of ServiceAccount {account}"),
            || async {
                let list = secrets.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find_map(|s| {
                    let annotations = s.metadata.annotations.as_ref()?;
                    let ours = annotations.get("kubernetes.io/service-account.name")? == account;
                    let token = s.data.as_ref()?.get("token")?.0.clone();
                    ours.then(|| String::from_utf8(token).unwrap())
                })
            },
        )
        .await;
        let admin: Value = serde_json::from_str(&self.run(
            "kubectl",
            &["config", "view", "--raw", "--minify", "-o", "json"],
            None,
        ))
        .unwrap();
        let config = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "helm", "cluster": admin["clusters"][0]["cluster"]}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": "helm", "context": {"cluster": "helm", "user": account, "namespace": namespace}}],
            "current-context": "helm",
        });
        let path = self.dir.join(format!("{account}.kubeconfig"));
        std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
        path
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo().join("e2e/cluster/cluster.sh"))
            .arg("down")
            .env("CMSET_CLUSTER_DIR", &self.dir)
            .output();
        if std::env::var_os("CMSET_E2E_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn helm_bin() -> String {
    if let Ok(bin) = std::env::var("CMSET_HELM_BIN") {
        return bin;
    }
    let out = Command::new("bash")
        .arg(repo().join("config/helm/install-helm.sh"))
        .output()
        .expect("install-helm.sh runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The operator as the chart's Deployment runs it (its webhook on loopback), with `kubeconfig`'s identity.
fn start_operator(kubeconfig: &Path, log: &Path) -> (tokio::process::Child, u16) {
    let bin = std::env::var("CMSET_CONTROLLER_BIN").expect("CMSET_CONTROLLER_BIN names the operator binary");
    let metrics = free_port();
    let child = tokio::process::Command::new(bin)
        .env("KUBECONFIG", kubeconfig)
        .env("POD_NAME", "cmset-controller-local")
        .env("POD_NAMESPACE", NAMESPACE)
        .env("CMSET_LOG", "info,cmset_controller=debug")
        .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
        .args(["--webhook-address", &format!("127.0.0.1:{}", free_port())])
        .args([
            "--webhook-cert-secret=cmset-webhook-tls",
            "--shutdown-drain-seconds=1",
        ])
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(std::fs::File::options().append(true).open(log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("start the operator");
    (child, metrics)
}

fn ca_bundles(cluster: &Cluster) -> Vec<String> {
    ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"]
        .iter()
        .map(|kind| {
            let path = "jsonpath={.webhooks[*].clientConfig.caBundle}";
            cluster
                .try_run("kubectl", &["get", kind, "cmset", "-o", path], None)
                .unwrap_or_default()
        })
        .collect()
}

#[tokio::test]
async fn the_chart_installs_upgrades_and_uninstalls_cmset() {
    let started = Instant::now();
    let cluster = Cluster::start();
    let client = cluster.client().await;
    let helm = helm_bin();
    // The chart as shipped: on this 1.20 server it picks the PodDisruptionBudget's policy/v1beta1 and the
    // CRDs without their CEL rules by itself (`.Capabilities`).
    let chart = repo().join("config/helm/cmset");
    let chart = chart.to_str().unwrap();
    let logs = std::env::var_os("CMSET_E2E_LOGS")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    eprintln!("[helm] cluster up after {:?}", started.elapsed());

    // 1. helm install as the README writes it, waiting for the Deployment (the simulated node runs its
    // pods).
    let install =
        format!("install {RELEASE} {chart} --namespace {NAMESPACE} --create-namespace --wait --timeout 2m");
    cluster.run(&helm, &install.split_whitespace().collect::<Vec<_>>(), None);
    let deployment = cluster.get_json(&["deployment", "-n", NAMESPACE, "cmset-controller"]);
    assert_eq!(deployment["spec"]["replicas"], 2);
    for crd in CRDS {
        cluster.run("kubectl", &["get", "crd", crd], None);
    }
    assert_eq!(ca_bundles(&cluster), ["", ""], "the chart renders no caBundle");
    eprintln!("[helm] installed after {:?}", started.elapsed());

    // 2. The operator, as the chart's ServiceAccount, keeps its certificate and reconciles a set end to end.
    let operator_kubeconfig = cluster
        .service_account_kubeconfig(&client, NAMESPACE, "cmset-controller")
        .await;
    let (mut operator, metrics) = start_operator(&operator_kubeconfig, &logs.join("helm-operator.log"));
    eventually_within(WAIT, "the operator reports ready", || async {
        http_get(metrics, "/readyz")
            .is_some_and(|(code, _)| code == 200)
            .then_some(())
    })
    .await;
    let bundles = eventually_within(
        WAIT,
        "the operator writes the caBundle of both configurations",
        || async {
            let bundles = ca_bundles(&cluster);
            bundles.iter().all(|b| !b.is_empty()).then_some(bundles)
        },
    )
    .await;
    cluster.run("kubectl", &["create", "namespace", "helm-app"], None);
    cluster.run(
        "kubectl",
        &["apply", "-n", "helm-app", "-f", "-"],
        Some(&app_config_yaml("1", None)),
    );
    cluster.run(
        "kubectl",
        &["apply", "-n", "helm-app", "-f", "-"],
        Some(&deployment_yaml("web", &[Reads::EnvFrom(APP_CONFIG)])),
    );
    let revision = app_config_revision("1");
    eventually_within(
        WAIT,
        "the set's revision exists and the Deployment reads it",
        || async {
            let out = cluster
                .try_run(
                    "kubectl",
                    &["get", "deployment", "web", "-n", "helm-app", "-o", "json"],
                    None,
                )
                .ok()?;
            let web: Value = serde_json::from_str(&out).ok()?;
            let named =
                web["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"]
                    .clone();
            cluster
                .try_run(
                    "kubectl",
                    &["get", "configmap", &revision, "-n", "helm-app"],
                    None,
                )
                .ok()?;
            (named == revision.as_str()).then_some(())
        },
    )
    .await;
    eprintln!(
        "[helm] reconciled as the chart's ServiceAccount after {:?}",
        started.elapsed()
    );

    // 2b. helm --wait of an application chart that holds a set: Helm 4 waits by kstatus, which reads a
    // custom resource's `observedGeneration` and its `Reconciling` and `Stalled` conditions (never
    // `Ready`). A changed set holds `helm upgrade --wait` until it is Ready, which its rollout's
    // stabilization keeps from happening for 10 s, and fails it when the set is Stalled.
    let app_chart = repo().join("e2e/fixtures/helm-app");
    let app_chart = app_chart.to_str().unwrap();
    let ready_of = |release: &str| -> Value {
        let set = cluster.get_json(&["cmset", &format!("{release}-config"), "-n", "helm-wait"]);
        let conditions = set["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        conditions
            .iter()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or_default().to_string(),
                    c["status"].clone(),
                )
            })
            .collect::<serde_json::Map<String, Value>>()
            .into()
    };
    // A set just created has no status yet, and kstatus reads a custom resource without one as Current:
    // whether Helm's first look comes before cmset's first status write is a race no operator can win
    // every time. A change is another matter: its generation moves with it, and kstatus reads the status
    // as behind until cmset has observed it. So each release is installed, then changed with --wait.
    let helm_wait = |verb: &str, release: &str, key: &str, timeout: &str| {
        let (chart_arg, key_arg) = (app_chart.to_string(), format!("key={key}"));
        let mut args = vec![
            verb,
            release,
            &chart_arg,
            "-n",
            "helm-wait",
            "--create-namespace",
            "--set",
            &key_arg,
            "--wait",
            "--timeout",
            timeout,
        ];
        // The webhook is not reachable from this API server, so cmset rewrote the Deployment after it was
        // stored and owns its reference: an upgrade takes it back (and cmset moves it again).
        if verb == "upgrade" {
            args.push("--force-conflicts");
        }
        cluster.try_run(&helm, &args, None)
    };
    helm_wait("install", "app-ready", "LOG_LEVEL", "90s").expect("helm install --wait");
    eventually_within(WAIT, "the set's first status", || async {
        ready_of("app-ready").get("Ready").is_some().then_some(())
    })
    .await;
    let waited = Instant::now();
    helm_wait("upgrade", "app-ready", "LOG_FORMAT", "90s").expect("helm upgrade --wait");
    let took = waited.elapsed();
    let conditions = ready_of("app-ready");
    assert_eq!(
        conditions,
        json!({"Ready": "True"}),
        "helm returned once the changed set was Ready"
    );
    assert!(
        took >= Duration::from_secs(10),
        "helm waited for the stabilization ({took:?})"
    );
    helm_wait("install", "app-stalled", "LOG_LEVEL", "90s").expect("helm install --wait");
    eventually_within(WAIT, "the second set's first status", || async {
        ready_of("app-stalled").get("Ready").is_some().then_some(())
    })
    .await;
    let waited = Instant::now();
    let stalled = helm_wait("upgrade", "app-stalled", "not a key!", "30s");
    let error = stalled.expect_err("helm upgrade --wait fails on a Stalled set");
    eprintln!(
        "[helm] upgrade --wait to a stalled set failed after {:?}: {error}",
        waited.elapsed()
    );
    assert_eq!(
        ready_of("app-stalled"),
        json!({"Ready": "False", "Stalled": "True"}),
        "the set is Stalled, and not Reconciling"
    );
    eprintln!("[helm] --wait proven after {:?}", started.elapsed());

    // 3. helm upgrade with Helm 4's server-side apply: more replicas, an extra argument, and a chart whose
    // ConfigMapSet CRD has a new field. No conflict with the operator's caBundle, which stays.
    let changed = cluster.dir.join("chart");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(chart)
        .arg(&changed)
        .status()
        .unwrap();
    assert!(copied.success());
    // Both forms of the CRD (this server takes the one without CEL).
    for crd_file in [
        changed.join("files/crds/configmapsets.cmset.dev.yaml"),
        changed.join("files/crds/without-cel/configmapsets.cmset.dev.yaml"),
    ] {
        let mut crd: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&crd_file).unwrap()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["helmUpgradeField"] =
            json!({"type": "string", "description": "Added by e2e/tests/helm.rs"});
        std::fs::write(&crd_file, serde_yaml_ng::to_string(&crd).unwrap()).unwrap();
    }
    let changed = changed.to_str().unwrap();
    let upgrade = format!(
        "upgrade {RELEASE} {changed} -n {NAMESPACE} --server-side=true --reuse-values \
         --set replicaCount=3 --set extraArgs={{--concurrency=8}} --wait --timeout 2m"
    );
    let upgrade = cluster.run(&helm, &upgrade.split_whitespace().collect::<Vec<_>>(), None);
    eprintln!(
        "[helm] upgraded after {:?}: {}",
        started.elapsed(),
        upgrade.lines().next().unwrap_or_default()
    );
    let deployment = cluster.get_json(&[
        "deployment",
        "-n",
        NAMESPACE,
        "cmset-controller",
        "--show-managed-fields",
    ]);
    assert_eq!(deployment["spec"]["replicas"], 3);
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array().unwrap().contains(&json!("--concurrency=8")),
        "{args}"
    );
    let managers: Vec<(String, String)> = deployment["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap_or_default().into(),
                m["operation"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("helm".into(), "Apply".into())),
        "applied server-side by helm: {managers:?}"
    );
    let field = cluster.run(
        "kubectl",
        &[
            "get", "crd", "configmapsets.cmset.dev", "-o",
            "jsonpath={.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.helmUpgradeField.type}",
        ],
        None,
    );
    assert_eq!(field, "string", "the new CRD field is applied");
    assert_eq!(
        ca_bundles(&cluster),
        bundles,
        "the operator's caBundle survives the upgrade"
    );

    // 4. helm uninstall, hooks included: this test plays the kubelet for the hook's pod.
    let uninstall = {
        let (helm, kubeconfig, dir) = (helm.clone(), cluster.kubeconfig.clone(), cluster.dir.clone());
        tokio::task::spawn_blocking(move || {
            Command::new(helm)
                .args(["uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "2m"])
                .env("KUBECONFIG", kubeconfig)
                .env("HELM_CACHE_HOME", dir.join("helm/cache"))
                .env("HELM_CONFIG_HOME", dir.join("helm/config"))
                .env("HELM_DATA_HOME", dir.join("helm/data"))
                .output()
                .unwrap()
        })
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let hook_pod = eventually_within(WAIT, "the pre-delete hook's pod, running", || async {
        let lp = ListParams::default().labels("job-name=cmset-webhook-cleanup");
        let pod = pods.list(&lp).await.ok()?.items.into_iter().next()?;
        (pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(pod)
    })
    .await;
    let spec = hook_pod.spec.clone().unwrap();
    let account = spec.service_account_name.clone().unwrap();
    assert_eq!(account, "cmset-webhook-cleanup");
    let hook_args = spec.containers[0].args.clone().unwrap_or_default();
    assert_eq!(
        spec.containers[0].image.as_deref(),
        deployment["spec"]["template"]["spec"]["containers"][0]["image"].as_str()
    );
    let hook_kubeconfig = cluster
        .service_account_kubeconfig(&client, NAMESPACE, &account)
        .await;
    let ran = Command::new(std::env::var("CMSET_CONTROLLER_BIN").unwrap())
        .args(&hook_args)
        .env("KUBECONFIG", &hook_kubeconfig)
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "the hook ({hook_args:?}) as {account}: {}{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
        let left = cluster.run(
            "kubectl",
            &["get", kind, "--ignore-not-found", "-o", "name"],
            None,
        );
        assert_eq!(left.trim(), "", "the hook deleted the {kind}");
    }
    let now = now_rfc3339();
    let container = &spec.containers[0].name;
    let succeeded = json!({"status": {
        "phase": "Succeeded",
        "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"},
                       {"type": "ContainersReady", "status": "False", "reason": "PodCompleted"}],
        "containerStatuses": [{
            "name": container, "image": spec.containers[0].image, "imageID": "", "ready": false,
            "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
        }],
    }});
    let name = hook_pod.metadata.name.clone().unwrap();
    pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(&succeeded))
        .await
        .expect("report the hook's pod Succeeded");
    let out = uninstall.await.unwrap();
    assert!(
        out.status.success(),
        "helm uninstall: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("[helm] uninstalled after {:?}", started.elapsed());
    let _ = operator.kill().await;

    // No webhook configuration left, the hook's rights gone with it, the CRDs (and the set) kept.
    for kind in ["mutatingwebhookconfiguration", "validatingwebhookconfiguration"] {
        assert_eq!(
            cluster.run("kubectl", &["get", kind, "-o", "name"], None).trim(),
            ""
        );
    }
    let left = cluster.run(
        "kubectl",
        &["get", "clusterrole,clusterrolebinding", "-o", "name"],
        None,
    );
    assert!(
        !left.contains("cmset"),
        "the release's cluster roles are gone: {left}"
    );
    for crd in CRDS {
        cluster.run("kubectl", &["get", "crd", crd], None);
    }
    cluster.run(
        "kubectl",
        &["get", "configmapset", APP_CONFIG, "-n", "helm-app"],
        None,
    );
    let deployments = cluster.run(
        "kubectl",
        &["get", "deployments", "-n", NAMESPACE, "-o", "name"],
        None,
    );
    assert_eq!(deployments.trim(), "", "the operator's Deployment is gone");
    eprintln!("[helm] done in {:?}", started.elapsed());
}

/// The current time, RFC 3339 (UTC), for the hook pod's terminated state.
fn now_rfc3339() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
