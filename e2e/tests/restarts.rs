//! The API server, then etcd, stopped and started again while changes are in flight (issue #11): the
//! operator survives without a restart and converges within 30 s of the API coming back, with nothing
//! lost. It restarts components of the local control plane (`e2e/cluster/cluster.sh`), so it runs alone
//! in its own file, and skips when the tests run against a cluster the harness did not start.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cmset_e2e::fixtures::{
    DeploymentYaml, Reads, app_config_revision, app_config_yaml, rollout_status, template_names, wait_names,
};
use cmset_e2e::invariants::{
    history_within_limit, nothing_names_a_missing_configmap, one_revision_per_content, ready_on,
};
use cmset_e2e::{Operator, TestNamespace};

const LIMIT: i32 = 2;
/// How soon after the API is back the operator must have converged.
const AFTER_RECOVERY: Duration = Duration::from_secs(30);
/// How long a component stays down: longer than a few watch and reconcile retries.
const DOWN_FOR: Duration = Duration::from_secs(10);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The local control plane's state dir, when the tests run against it; `None` (with the reason) when
/// KUBECONFIG names another cluster, which the harness cannot restart.
fn local_cluster() -> Result<PathBuf, String> {
    let dir = std::env::var_os("CMSET_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cluster"));
    let kubeconfig = std::env::var_os("KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_default();
    let ours = dir.join("kubeconfig");
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if !same(&kubeconfig, &ours) {
        return Err(format!(
            "KUBECONFIG ({}) is not the local control plane's ({})",
            kubeconfig.display(),
            ours.display()
        ));
    }
    cluster(&dir, &["status"]).map_err(|e| format!("the local control plane is not healthy: {e}"))?;
    Ok(dir)
}

/// `cluster.sh <args>` on the state dir `dir`, off the test's runtime threads' way.
fn cluster(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new("bash")
        .arg(repo_root().join("e2e/cluster/cluster.sh"))
        .args(args)
        .env("CMSET_CLUSTER_DIR", dir)
        .output()
        .map_err(|e| e.to_string())?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() { Ok(text) } else { Err(text) }
}

async fn cluster_async(dir: &Path, args: &[&str]) {
    let (dir, args): (PathBuf, Vec<String>) =
        (dir.to_path_buf(), args.iter().map(|a| a.to_string()).collect());
    let what = args.join(" ");
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster(&dir, &args)
    })
    .await
    .unwrap()
    .unwrap_or_else(|e| panic!("cluster.sh {what} failed: {e}"));
}

/// Starts the component again if the test fails while it is down, so the cluster outlives the test.
struct Restore<'a> {
    dir: &'a Path,
    component: &'a str,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if let Err(e) = cluster(self.dir, &["start", self.component]) {
            eprintln!("could not start {} again: {e}", self.component);
        }
    }
}

async fn converged(ns: &TestNamespace, want: &str) -> bool {
    // The API may still be half back: an error is "not yet".
    let (Ok(web), Ok(set)) = (
        ns.api::<cmset_e2e::k8s_openapi::api::apps::v1::Deployment>()
            .get("web")
            .await,
        ns.api::<cmset_e2e::cmset_api::ConfigMapSet>()
            .get("app-config")
            .await,
    ) else {
        return false;
    };
    template_names(&web) == [want.to_string()].into() && ready_on(&set, want)
}

/// Waits until the cluster converges on `want` and returns the time since `since`.
async fn time_to_converge(ns: &TestNamespace, want: &str, since: Instant, what: &str) -> Duration {
    let limit = AFTER_RECOVERY * 3;
    while !converged(ns, want).await {
        assert!(since.elapsed() < limit, "not converged {limit:?} after {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    since.elapsed()
}

/// Applies a change, stops `component` while the operator acts on it, keeps it down for [`DOWN_FOR`],
/// starts it again and measures how long the operator takes to converge from there.
async fn outage(
    dir: &Path,
    ns: &TestNamespace,
    operator: &mut Operator,
    component: &str,
    version: u32,
) -> Duration {
    let want = app_config_revision(&version.to_string());
    ns.apply(&app_config_yaml(&version.to_string(), Some(LIMIT)));
    // Mid-flight: the operator has seen the change and is writing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let restore = Restore { dir, component };
    cluster_async(dir, &["stop", component]).await;
    tokio::time::sleep(DOWN_FOR).await;
    cluster_async(dir, &["start", component]).await;
    std::mem::forget(restore);
    let back = Instant::now();
    let took = time_to_converge(ns, &want, back, &format!("{component} came back")).await;
    eprintln!("{component} stopped for {DOWN_FOR:?}: converged {took:.1?} after it came back");
    assert!(
        took < AFTER_RECOVERY,
        "converged within {AFTER_RECOVERY:?} of {component} coming back: took {took:?}"
    );
    assert!(
        operator.exited().is_none(),
        "the operator survived the {component} outage"
    );

    // And it still follows changes (its watches are back).
    let next = app_config_revision(&(version + 1).to_string());
    let applied = Instant::now();
    ns.apply(&app_config_yaml(&(version + 1).to_string(), Some(LIMIT)));
    let took = time_to_converge(ns, &next, applied, "the next change").await;
    eprintln!("{component} back: the next change converged in {took:.1?}");
    took
}

#[tokio::test]
async fn the_operator_rides_out_api_server_and_etcd_restarts() {
    let dir = match local_cluster() {
        Ok(dir) => dir,
        Err(reason) => {
            eprintln!("SKIPPED: restarts need the local control plane the harness can restart: {reason}");
            return;
        }
    };
    let ns = TestNamespace::new("restarts").await;
    let mut operator = Operator::start(&ns.name).await;
    ns.apply(&app_config_yaml("1", Some(LIMIT)));
    let reads = [Reads::EnvFrom("app-config")];
    ns.apply(
        &DeploymentYaml::new("web", &reads)
            .revision_history_limit(1)
            .yaml(),
    );
    wait_names(&ns, "web", &[&app_config_revision("1")]).await;

    outage(&dir, &ns, &mut operator, "kube-apiserver", 2).await;
    outage(&dir, &ns, &mut operator, "etcd", 4).await;

    rollout_status(&ns, "deployment/web").await;
    one_revision_per_content(&ns, "app-config").await;
    nothing_names_a_missing_configmap(&ns).await;
    history_within_limit(&ns, "app-config").await;
    assert!(operator.exited().is_none(), "the operator never restarted");
}
