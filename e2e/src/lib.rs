//! The end-to-end harness: each test gets a throwaway namespace and its own cmset operator process,
//! watching only that namespace and running under the operator's own identity (the ClusterRole in
//! `config/`), so the tests prove the shipped RBAC as well as the behaviour.
//!
//! Environment (set by `e2e/run.sh`):
//! - `KUBECONFIG`: an admin kubeconfig, used by the tests themselves and by `kubectl`.
//! - `CMSET_OPERATOR_KUBECONFIG`: the operator's identity (defaults to `KUBECONFIG`).
//! - `CMSET_CONTROLLER_BIN`: the operator binary.
//! - `CMSET_E2E_LOGS`: where operator logs go (one file per test namespace).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cmset_api::ConfigMapSet;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

pub use cmset_api;
pub use k8s_openapi;
pub use kube;

pub mod argo;
pub mod balancer;
pub mod exporter;
pub mod fault_proxy;
pub mod fixtures;
pub mod identity;
pub mod invariants;
pub mod kinds;
pub mod prometheus;
pub mod proxy;
pub mod receiver;
pub mod rollout_wait;
pub mod tenant;
pub mod webhook;

/// How long the tests wait for the cluster to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(60);

fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key).map(PathBuf::from)
}

/// `kubectl-cmset`: `CMSET_PLUGIN_BIN`, else the one built beside the running test, else the
/// workspace's (`cargo build -p kubectl-cmset` first).
pub fn plugin_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("CMSET_PLUGIN_BIN") {
        return PathBuf::from(bin);
    }
    // A test runs from <target>/debug/deps/; the plugin is built into <target>/debug/.
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("kubectl-cmset")));
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/kubectl-cmset");
    let bin = beside.filter(|b| b.exists()).unwrap_or(workspace);
    assert!(
        bin.exists(),
        "{} does not exist: run `cargo build -p kubectl-cmset` first, or set CMSET_PLUGIN_BIN",
        bin.display()
    );
    bin
}

/// The kubeconfig an operator runs with: `CMSET_OPERATOR_KUBECONFIG`, else `KUBECONFIG`.
pub fn operator_kubeconfig() -> PathBuf {
    env_path("CMSET_OPERATOR_KUBECONFIG")
        .or_else(|| env_path("KUBECONFIG"))
        .expect("a kubeconfig for the operator")
}

/// A namespace of one test, deleted when dropped.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
}

impl TestNamespace {
    /// The Lease a pair of replicas of this test shares (granted by e2e/rbac.yaml): one per test, so
    /// that tests running at once do not contend for one.
    pub fn pair_lease(&self) -> String {
        format!("cmset-e2e-{}", self.name)
    }

    /// The arguments that make an operator replica `replica` of this test's pair: leader election on
    /// [`Self::pair_lease`], with a 6 s lease.
    pub fn pair_replica_args(&self, replica: &str) -> Vec<String> {
        let (lease, identity) = (self.pair_lease(), format!("{}-{replica}", self.name));
        [
            "--leader-election=true",
            "--lease-duration-seconds",
            "6",
            "--lease-name",
            &lease,
            "--identity",
            &identity,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Deletes the pair's Lease once its test is over (it lives in cmset-system, not in the namespace).
    pub async fn drop_pair_lease(&self) {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(self.client.clone(), "cmset-system");
        let _ = leases.delete(&self.pair_lease(), &Default::default()).await;
    }

    pub async fn new(test: &str) -> Self {
        let client = Client::try_default()
            .await
            .expect("KUBECONFIG points at a cluster (run `make e2e`)");
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("e2e-{test}-{:05x}", (nanos ^ std::process::id()) & 0xfffff);
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                // Selected by this test's webhook registration (see `webhook`).
                labels: Some([(webhook::NAMESPACE_LABEL.to_string(), name.clone())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        Self { name, client }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// `kubectl <args> -n <namespace>` as admin; panics with its output when it fails.
    pub fn kubectl(&self, args: &[&str]) -> String {
        kubectl_in(Some(&self.name), args, None)
    }

    /// `kubectl apply -f -` of a YAML document.
    pub fn apply(&self, yaml: &str) -> String {
        kubectl_in(Some(&self.name), &["apply", "-f", "-"], Some(yaml))
    }

    /// Like [`Self::kubectl`] but returns the failure instead of panicking.
    /// `kubectl apply -k` of a kustomization in this namespace made of `files` (name, content) and the
    /// `kustomization` text after its `namespace:` line (e.g. `resources:` and generators).
    pub fn apply_kustomization(&self, files: &[(&str, String)], kustomization: &str) -> String {
        let dir = std::env::temp_dir().join(format!("cmset-e2e-kustomize-{}", self.name));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, content) in files {
            std::fs::write(dir.join(name), content).unwrap();
        }
        let text = format!("namespace: {}\n{kustomization}", self.name);
        std::fs::write(dir.join("kustomization.yaml"), text).unwrap();
        let out = self.kubectl(&["apply", "-k", dir.to_str().unwrap()]);
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    pub fn try_kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        try_kubectl_in(Some(&self.name), args, stdin)
    }

    /// [`Self::kubectl`] (with `stdin`, if any) on a blocking thread, so that the test's runtime stays
    /// free: for commands that wait, and for several actors writing at once.
    /// The arguments are copied at once, so the future borrows nothing.
    pub fn kubectl_async(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> impl std::future::Future<Output = String> + use<> {
        let namespace = self.name.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let stdin = stdin.map(str::to_owned);
        let run = move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl_in(Some(&namespace), &args, stdin.as_deref())
        };
        async move {
            match tokio::task::spawn_blocking(run).await {
                Ok(out) => out,
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
    }

    pub async fn set(&self, name: &str) -> ConfigMapSet {
        self.api::<ConfigMapSet>()
            .get(name)
            .await
            .expect("get ConfigMapSet")
    }

    pub async fn deployment(&self, name: &str) -> Deployment {
        self.api::<Deployment>().get(name).await.expect("get Deployment")
    }

    pub async fn statefulset(&self, name: &str) -> StatefulSet {
        self.api::<StatefulSet>()
            .get(name)
            .await
            .expect("get StatefulSet")
    }

    pub async fn daemonset(&self, name: &str) -> DaemonSet {
        self.api::<DaemonSet>().get(name).await.expect("get DaemonSet")
    }

    /// ConfigMaps that are revisions of `set`, by name.
    pub async fn revisions(&self, set: &str) -> Vec<ConfigMap> {
        self.labelled_revisions(set).await
    }

    /// Objects of kind `K` labelled as revisions of a set named `set` (not being deleted), by name.
    async fn labelled_revisions<K>(&self, set: &str) -> Vec<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let lp = ListParams::default().labels(&format!("{}={set}", cmset_api::labels::SET));
        let mut items = self.api::<K>().list(&lp).await.expect("list revisions").items;
        items.retain(|c| c.meta().deletion_timestamp.is_none());
        items.sort_by_key(|c| c.name_any());
        items
    }

    pub async fn revision_names(&self, set: &str) -> Vec<String> {
        self.revisions(set).await.iter().map(|c| c.name_any()).collect()
    }

    pub async fn replica_sets(&self) -> Vec<ReplicaSet> {
        self.api::<ReplicaSet>()
            .list(&ListParams::default())
            .await
            .expect("list ReplicaSets")
            .items
    }

    pub async fn pods(&self) -> Vec<Pod> {
        self.api::<Pod>()
            .list(&ListParams::default())
            .await
            .expect("list pods")
            .items
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if std::env::var_os("CMSET_E2E_KEEP").is_some() {
            eprintln!("keeping namespace {}", self.name);
            return;
        }
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub(crate) fn try_kubectl_in(
    namespace: Option<&str>,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, String> {
    use std::io::Write;
    let mut cmd = std::process::Command::new("kubectl");
    if let Some(ns) = namespace {
        cmd.args(["-n", ns]);
    }
    cmd.args(args).stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("kubectl: {e}"))?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains("version difference") && !l.contains("skew"))
        .collect::<Vec<_>>()
        .join("\n");
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("kubectl {}: {stderr}{stdout}", args.join(" ")))
    }
}

fn kubectl_in(namespace: Option<&str>, args: &[&str], stdin: Option<&str>) -> String {
    try_kubectl_in(namespace, args, stdin).unwrap_or_else(|e| panic!("{e}"))
}

/// Polls `check` until it returns `Some`, or panics with `what` after [`CONVERGE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(CONVERGE, what, check).await
}

/// Polls `check` until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually_within<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Asserts that `check` holds for the whole of `duration` (for "stays so" claims).
pub async fn stays<F, Fut>(what: &str, duration: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        assert!(check().await, "no longer true: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One cmset operator process, watching one namespace.
pub struct Operator {
    child: Option<tokio::process::Child>,
    namespace: String,
    pub metrics_port: u16,
    log: PathBuf,
    extra: Vec<String>,
    /// The kubeconfig it runs with, when not the operator's usual one (e.g. one through a proxy).
    kubeconfig: Option<PathBuf>,
    /// Its admission webhook's registration, when it serves one.
    pub webhook: Option<webhook::Registration>,
    /// Extra environment (e.g. the crash-test switch).
    env: Vec<(String, String)>,
}

/// Tests run many operators at once, each on its own namespace: no leader election unless a test asks;
/// and a drain of one second on SIGTERM (not the default ten, which would only slow down every test that
/// stops an operator) unless a test asks for another.
fn defaults(extra: &[String]) -> Vec<&'static str> {
    let mut defaults = Vec::new();
    if !extra.iter().any(|a| a.starts_with("--leader-election")) {
        defaults.push("--leader-election=false");
    }
    if !extra.iter().any(|a| a.starts_with("--shutdown-drain-seconds")) {
        defaults.push("--shutdown-drain-seconds=1");
    }
    defaults
}

/// A loopback port nothing listens on, for an operator to bind a moment later. Taken from a counter below
/// the kernel's ephemeral range (32768 and up), so that neither another test of this process nor the
/// kernel (for a `bind(0)` or an outgoing connection) is handed the same port in that moment.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    const COUNT: u32 = 22_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // Test binaries run one after another; each starts elsewhere in the range.
    let start = std::process::id().wrapping_mul(7919) % COUNT;
    loop {
        let port = (FIRST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Operator {
    /// An operator for `namespace`, serving the admission webhook as the default install does.
    pub async fn start(namespace: &str) -> Self {
        Self::start_with(namespace, &[]).await
    }

    pub async fn start_with(namespace: &str, extra: &[&str]) -> Self {
        Self::launch(namespace, extra, None, true).await
    }

    /// [`Operator::start_with`], with AnalysisTemplates sent to its webhook for validation (see
    /// [`webhook::Registration::with_template_validation`]).
    pub async fn start_validating_templates(namespace: &str, extra: &[&str]) -> Self {
        let registration = webhook::Registration::with_template_validation(namespace, free_port());
        Self::launch_registered(namespace, extra, None, Some(registration)).await
    }

    /// [`Operator::start_with`], with this namespace's sets and every ChangeWindow sent to its
    /// webhook for validation (see [`webhook::Registration::with_window_validation`]).
    pub async fn start_validating_windows(namespace: &str, extra: &[&str]) -> Self {
        let registration = webhook::Registration::with_window_validation(namespace, free_port());
        Self::launch_registered(namespace, extra, None, Some(registration)).await
    }

    /// An operator without the webhook: what cmset does when the webhook is not called (it fails open
    /// when cmset is down), rewriting workloads after they are stored.
    pub async fn start_without_webhook(namespace: &str, extra: &[&str]) -> Self {
        Self::launch(namespace, extra, None, false).await
    }

    /// Like [`Operator::start_with`], reaching the API server through `kubeconfig`; without the webhook,
    /// which would share the proxied connection's faults and slow every admission down with them.
    pub async fn start_via(namespace: &str, extra: &[&str], kubeconfig: PathBuf) -> Self {
        Self::launch(namespace, extra, Some(kubeconfig), false).await
    }

    async fn launch(namespace: &str, extra: &[&str], kubeconfig: Option<PathBuf>, webhook: bool) -> Self {
        let registration = webhook.then(|| webhook::Registration::new(namespace, free_port()));
        Self::launch_registered(namespace, extra, kubeconfig, registration).await
    }

    async fn launch_registered(
        namespace: &str,
        extra: &[&str],
        kubeconfig: Option<PathBuf>,
        webhook: Option<webhook::Registration>,
    ) -> Self {
        let logs = env_path("CMSET_E2E_LOGS").unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&logs).unwrap();
        let suffix = if kubeconfig.is_some() { "-via-proxy" } else { "" };
        let mut op = Self {
            child: None,
            namespace: namespace.to_string(),
            metrics_port: free_port(),
            log: logs.join(format!("{namespace}{suffix}.log")),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            kubeconfig,
            webhook,
            env: Vec::new(),
        };
        op.spawn().await;
        op
    }

    /// An operator (without the webhook) that aborts just before (`<n>:before`) or just after
    /// (`<n>:after`) its n-th write of state (see the controller's `crash_points`). Not waited for: it
    /// may be gone before it would report ready; see [`Operator::wait_exit`].
    pub async fn start_crashing(namespace: &str, at: &str) -> Self {
        let logs = env_path("CMSET_E2E_LOGS").unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&logs).unwrap();
        let mut op = Self {
            child: None,
            namespace: namespace.to_string(),
            metrics_port: free_port(),
            log: logs.join(format!("{namespace}-crash.log")),
            extra: Vec::new(),
            kubeconfig: None,
            webhook: None,
            env: vec![("CMSET_TEST_CRASH_AT".to_string(), at.to_string())],
        };
        op.spawn_process();
        op
    }

    /// Waits up to `timeout` for the process to exit by itself; its status, or `None` if it still runs.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let status = tokio::time::timeout(timeout, child.wait()).await.ok()?.ok()?;
        self.child = None;
        Some(status)
    }

    async fn spawn(&mut self) {
        self.spawn_process();
        // Ready once its caches are synced; an operator that exits first is reported with its log at once.
        let deadline = Instant::now() + CONVERGE;
        loop {
            if http_get(self.metrics_port, "/readyz").is_some_and(|(code, _)| code == 200) {
                break;
            }
            if let Some(status) = self.exited() {
                panic!(
                    "the operator exited ({status}) before it reported ready; its log ends:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {CONVERGE:?} waiting for the operator to report ready; its log ends:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if let Some(webhook) = &self.webhook {
            webhook.wait_ready().await;
        }
    }

    /// The last lines of its log, for a failure message.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn spawn_process(&mut self) {
        let bin = env_path("CMSET_CONTROLLER_BIN").expect("CMSET_CONTROLLER_BIN names the operator binary");
        let kubeconfig = self.kubeconfig.clone().unwrap_or_else(operator_kubeconfig);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = tokio::process::Command::new(bin)
            .env("KUBECONFIG", kubeconfig)
            .env("CMSET_LOG", "info,cmset_controller=debug")
            .args(["--namespace", &self.namespace])
            .args(defaults(&self.extra))
            .args(["--metrics-address", &format!("127.0.0.1:{}", self.metrics_port)])
            .args(["--workload-debounce-ms", "300"])
            .args(self.webhook.iter().flat_map(webhook::Registration::operator_args))
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("start the operator");
        self.child = Some(child);
    }

    /// The exit status, once the process has exited by itself.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok()?
    }

    /// SIGKILL: no cleanup, no lease release, as a crash or an OOM kill.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub async fn stop(&mut self) -> Option<std::process::ExitStatus> {
        self.terminate();
        let mut c = self.child.take()?;
        tokio::time::timeout(Duration::from_secs(20), c.wait())
            .await
            .ok()?
            .ok()
    }

    /// SIGTERM, without waiting (see [`Operator::wait_exit`]).
    pub fn terminate(&self) {
        if let Some(pid) = self.child.as_ref().and_then(|c| c.id()) {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
    }

    pub async fn restart(&mut self) {
        self.kill().await;
        self.metrics_port = free_port();
        self.spawn().await;
    }

    /// The value of a metric summed over its label sets, from /metrics.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = http_get(self.metrics_port, "/metrics").expect("metrics endpoint answers");
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split(['{', ' ']).next() == Some(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            // Not `sum()`: an empty f64 sum is -0, which prints as "-0".
            .fold(0.0, |total, v| total + v)
    }

    /// Write requests sent so far, by operation (`create_revision`, `patch_workload`, ...).
    pub fn writes_by_operation(&self) -> std::collections::BTreeMap<String, f64> {
        let (_, body) = http_get(self.metrics_port, "/metrics").expect("metrics endpoint answers");
        body.lines()
            .filter(|l| l.starts_with("cmset_api_writes_total{"))
            .filter_map(|l| {
                let op = l.split("operation=\"").nth(1)?.split('"').next()?.to_string();
                Some((op, l.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    /// Total write requests the operator has sent (every operation).
    pub fn writes(&self) -> f64 {
        self.metric("cmset_api_writes_total")
    }

    pub fn log_path(&self) -> &std::path::Path {
        &self.log
    }
}

/// A minimal HTTP/1.0 GET on loopback: status code and body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// The name `kubectl kustomize` gives a configMapGenerator with these literals: the proof that cmset's
/// revision names match kustomize's.
pub fn kustomize_name(name: &str, literals: &[(&str, &str)]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "cmset-kustomize-{}-{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let literals: Vec<String> = literals.iter().map(|(k, v)| format!("      - {k}={v}")).collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "configMapGenerator:\n  - name: {name}\n    literals:\n{}\n",
            literals.join("\n")
        ),
    )
    .unwrap();
    let out = kubectl_in(None, &["kustomize", dir.to_str().unwrap()], None);
    let _ = std::fs::remove_dir_all(&dir);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("name: "))
        .map(str::to_string)
        .expect("kustomize printed a name")
}

/// Deletes an object, ignoring NotFound.
pub async fn delete<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// Standard base64 (for a webhook's `caBundle`), without pulling a crate into the test harness.
pub fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The name `kubectl kustomize` gives a secretGenerator of `type_` (e.g. `Opaque`,
/// `kubernetes.io/tls`) with these literals: the proof that a SecretSet's revision names match
/// kustomize's.
pub fn kustomize_secret_name(name: &str, type_: &str, literals: &[(&str, &str)]) -> String {
    let literals: Vec<String> = literals.iter().map(|(k, v)| format!("      - {k}={v}")).collect();
    generated_name(&format!(
        "secretGenerator:\n  - name: {name}\n    type: {type_}\n    literals:\n{}\n",
        literals.join("\n")
    ))
}

/// The `name` of the one object `kubectl kustomize` prints for `kustomization`.
fn generated_name(kustomization: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "cmset-kustomize-{}-{}",
        std::process::id(),
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kustomization.yaml"), kustomization).unwrap();
    let out = kubectl_in(None, &["kustomize", dir.to_str().unwrap()], None);
    let _ = std::fs::remove_dir_all(&dir);
    out.lines()
        .find_map(|l| l.trim().strip_prefix("name: "))
        .map(str::to_string)
        .expect("kustomize printed a name")
}

/// SecretSets and their revision Secrets.
impl TestNamespace {
    pub async fn secret_set(&self, name: &str) -> cmset_api::SecretSet {
        self.api::<cmset_api::SecretSet>()
            .get(name)
            .await
            .expect("get SecretSet")
    }

    /// Secrets that are revisions of SecretSet `set` (not being deleted), by name.
    pub async fn secret_revisions(&self, set: &str) -> Vec<k8s_openapi::api::core::v1::Secret> {
        self.labelled_revisions(set).await
    }

    pub async fn secret_revision_names(&self, set: &str) -> Vec<String> {
        self.secret_revisions(set)
            .await
            .iter()
            .map(|s| s.name_any())
            .collect()
    }
}

/// Waits for a Warning event (events.k8s.io) in the namespace with `reason`, about object `regarding`
/// (`Kind/name`), and returns it.
pub async fn warning_event(
    ns: &TestNamespace,
    reason: &str,
    regarding: &str,
) -> k8s_openapi::api::events::v1::Event {
    let api = ns.api::<k8s_openapi::api::events::v1::Event>();
    eventually(&format!("a Warning event {reason} about {regarding}"), || async {
        let events = api.list(&ListParams::default()).await.ok()?.items;
        events.into_iter().find(|e| {
            let about = e.regarding.as_ref().map(|r| {
                format!(
                    "{}/{}",
                    r.kind.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or("")
                )
            });
            e.type_.as_deref() == Some("Warning")
                && e.reason.as_deref() == Some(reason)
                && about.as_deref() == Some(regarding)
        })
    })
    .await
}

/// Every Secret a pod spec names: `envFrom`, `env` `valueFrom`, `secret` volumes and projected sources.
pub fn secret_names(spec: &k8s_openapi::api::core::v1::PodSpec) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        names.extend(
            c.env_from
                .iter()
                .flatten()
                .filter_map(|e| Some(e.secret_ref.as_ref()?.name.clone())),
        );
        names.extend(
            c.env
                .iter()
                .flatten()
                .filter_map(|e| Some(e.value_from.as_ref()?.secret_key_ref.as_ref()?.name.clone())),
        );
    }
    for v in spec.volumes.iter().flatten() {
        names.extend(v.secret.iter().filter_map(|s| s.secret_name.clone()));
        names.extend(
            v.projected
                .iter()
                .flat_map(|p| p.sources.iter().flatten())
                .filter_map(|s| Some(s.secret.as_ref()?.name.clone())),
        );
    }
    names
}

/// Creates or replaces Secret `name` through the API, as a secrets manager would (and without the
/// `last-applied-configuration` annotation `kubectl apply` adds, which holds the values in plain text).
pub async fn put_secret(ns: &TestNamespace, name: &str, type_: &str, data: &[(&str, &str)]) {
    let api = ns.api::<k8s_openapi::api::core::v1::Secret>();
    let existing = api.get_opt(name).await.expect("read the source");
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_string()),
            resource_version: existing
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone()),
            ..Default::default()
        },
        type_: Some(type_.to_string()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    let params = PostParams::default();
    match existing {
        Some(_) => api.replace(name, &params, &secret).await,
        None => api.create(&params, &secret).await,
    }
    .expect("write the source Secret");
}

/// A request body a stand-in receiver was sent, as JSON (`Null` when it is none or not JSON).
pub async fn json_body(body: hyper::body::Incoming) -> serde_json::Value {
    use http_body_util::BodyExt;
    let bytes = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)
}

/// Serves plain HTTP on a free loopback port, each request answered by `answer` (a test's stand-in
/// receiver: a webhook, Slack, Teams); returns the port. Runs until the test's runtime ends.
pub async fn serve_http<F, Fut>(answer: F) -> u16
where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<
            Output = Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible>,
        > + Send
        + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}
