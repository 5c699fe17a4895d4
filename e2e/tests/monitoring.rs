//! cmset's monitoring with a real Prometheus (Debian's, started and stopped by the harness: see
//! `cmset_e2e::prometheus`).
//!
//! Without a cluster (`cargo test -p cmset-e2e --test monitoring`, run by `make monitoring-check`): the
//! harness itself (Prometheus scrapes the test exporter and sees its values change, reports a bad
//! query, leaves nothing behind); the alert rules of `config/monitoring/rules.yaml` evaluated by
//! Prometheus on values the test sets, from two replicas at once; and every query of
//! `config/monitoring/dashboard.json` answered from cmset's own `/metrics` endpoint and registry.
//!
//! With a cluster (`make e2e`): every dashboard query returns data from a running cmset operator taking
//! a set through a rollout. Skipped, with a message, when `CMSET_CONTROLLER_BIN` is
//! not set (it is by `e2e/run.sh`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cmset_e2e::exporter::Exporter;
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::k8s_openapi::api::apps::v1::Deployment;
use cmset_e2e::prometheus::{Prometheus, Sample};
use cmset_e2e::{Operator, TestNamespace, kustomize_name};

/// How long a test waits for Prometheus to see a change: a few scrapes and rule evaluations (1 s each).
const SEEN: Duration = Duration::from_secs(30);

fn repo_path(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn values(samples: &[Sample]) -> Vec<f64> {
    samples.iter().map(|s| s.value).collect()
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

// ------------------------------------------------------------------------------ the harness itself --

#[tokio::test]
async fn prometheus_scrapes_the_exporter_and_sees_a_change() {
    let exporter = Exporter::start();
    exporter.set("cmset_test_value", &[("case", "scraped")], 1.5);
    let prometheus = Prometheus::builder("scrapes")
        .scrape("exporter", exporter.address())
        .start()
        .await;

    let query = r#"cmset_test_value{case="scraped"}"#;
    let seen = prometheus.wait_for(SEEN, query, |s| values(s) == [1.5]).await;
    assert_eq!(seen[0].labels.get("job").map(String::as_str), Some("exporter"));
    assert_eq!(
        prometheus.query(r#"up{job="exporter"}"#).map(|s| values(&s)),
        Ok(vec![1.0])
    );

    exporter.set("cmset_test_value", &[("case", "scraped")], 2.5);
    prometheus.wait_for(SEEN, query, |s| values(s) == [2.5]).await;
    // A series the exporter drops goes stale at the next scrape.
    exporter.remove("cmset_test_value", &[("case", "scraped")]);
    prometheus.wait_for(SEEN, query, <[Sample]>::is_empty).await;
}

#[tokio::test]
async fn a_query_that_does_not_parse_is_reported() {
    let prometheus = Prometheus::builder("bad-query").start().await;
    let error = prometheus.query("sum by (").unwrap_err();
    assert!(
        error.contains("bad_data") || error.contains("parse error"),
        "{error}"
    );
    assert_eq!(prometheus.query("1 + 1").map(|s| values(&s)), Ok(vec![2.0]));
}

#[tokio::test]
async fn a_stopped_prometheus_leaves_no_process_and_no_data_behind() {
    let prometheus = Prometheus::builder("stops").start().await;
    let (pid, dir, port) = (
        prometheus.pid().unwrap(),
        prometheus.dir().to_path_buf(),
        prometheus.port(),
    );
    assert!(PathBuf::from(format!("/proc/{pid}")).exists());
    drop(prometheus);
    // Killed and reaped: not even a zombie holds the pid.
    assert!(
        !PathBuf::from(format!("/proc/{pid}")).exists(),
        "process {pid} is left"
    );
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(
        cmset_e2e::http_get(port, "/-/ready").is_none(),
        "still serving on {port}"
    );
}

// ------------------------------------------------------------------------------------ alert rules --

/// The series one replica of cmset exposes for the alerts below.
fn replica(leader: bool) -> Exporter {
    let exporter = Exporter::start();
    let web = [
        ("namespace", "team-a"),
        ("set_kind", "ConfigMapSet"),
        ("set", "web"),
    ];
    let with = |labels: &[(&'static str, &'static str)], extra: (&'static str, &'static str)| {
        let mut all = labels.to_vec();
        all.push(extra);
        all
    };
    // A wave open for 1000 s with a deadline of 600 s, still Progressing: stuck.
    exporter.set("cmset_rollout_phase", &with(&web, ("phase", "Progressing")), 1.0);
    exporter.set(
        "cmset_rollout_wave_opened_timestamp_seconds",
        &web,
        (now_seconds() - 1000.0).floor(),
    );
    exporter.set("cmset_rollout_progress_deadline_seconds", &web, 600.0);
    exporter.set("cmset_rollout_wave", &web, 1.0);
    // A failed rollout.
    let db = [("namespace", "team-b"), ("set_kind", "SecretSet"), ("set", "db")];
    exporter.set("cmset_rollout_phase", &with(&db, ("phase", "Failed")), 1.0);
    exporter.set("cmset_leader", &[], if leader { 1.0 } else { 0.0 });
    // The cluster's ChangeWindows may not be listed: every move waits.
    exporter.set("cmset_change_windows_unknown", &[("cause", "forbidden")], 1.0);
    exporter
}

/// The alerts Prometheus holds now, as (name, state, set) (set empty when the alert has none).
fn alerts(prometheus: &Prometheus) -> BTreeSet<(String, String, String)> {
    let samples = prometheus.query("ALERTS").expect("ALERTS");
    samples
        .iter()
        .map(|s| {
            let label = |k: &str| s.labels.get(k).cloned().unwrap_or_default();
            (label("alertname"), label("alertstate"), label("set"))
        })
        .collect()
}

#[tokio::test]
async fn the_alert_rules_evaluate_in_prometheus_on_series_from_two_replicas() {
    // Both replicas report the same sets (as a standby briefly can): the rules must aggregate rather
    // than fail on many-to-many matches.
    let (a, b) = (replica(false), replica(false));
    let prometheus = Prometheus::builder("alerts")
        .scrape("cmset", a.address())
        .scrape("cmset", b.address())
        .rule_file(repo_path("config/monitoring/rules.yaml"))
        .start()
        .await;

    let expected = |leader: bool| {
        let mut alerts: BTreeSet<(String, String, String)> = [
            ("CmsetRolloutFailed", "firing", "db"),
            ("CmsetRolloutStuck", "pending", "web"),
            ("CmsetChangeWindowsUnknown", "pending", ""),
        ]
        .iter()
        .map(|(a, s, set)| (a.to_string(), s.to_string(), set.to_string()))
        .collect();
        if !leader {
            alerts.insert(("CmsetNoLeader".into(), "pending".into(), String::new()));
        }
        alerts
    };
    let deadline = Instant::now() + SEEN;
    while alerts(&prometheus) != expected(false) {
        assert!(Instant::now() < deadline, "alerts: {:?}", alerts(&prometheus));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // One alert per set, whatever the number of replicas reporting it.
    let stuck = prometheus
        .query(r#"ALERTS{alertname="CmsetRolloutStuck"}"#)
        .unwrap();
    assert_eq!(stuck.len(), 1, "{stuck:?}");

    // Every rule evaluated without an error.
    let groups = prometheus.api("/api/v1/rules").expect("rules");
    let rules: Vec<&serde_json::Value> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert_eq!(rules.len(), 7, "{groups}");
    for rule in rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }

    // A replica takes the lease: no more CmsetNoLeader.
    a.set("cmset_leader", &[], 1.0);
    let deadline = Instant::now() + SEEN;
    while alerts(&prometheus) != expected(true) {
        assert!(Instant::now() < deadline, "alerts: {:?}", alerts(&prometheus));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ------------------------------------------------------------------------- the dashboard on cmset --

/// cmset's own metrics and `/metrics` endpoint, as a leader in the middle of a rollout with analysis
/// would report them: every kind of series the dashboard reads has a sample.
async fn serve_cmset_metrics() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use cmset_controller::platform::metrics::{
        KindLabel, Metrics, RequestLabels, ResultLabel, RolloutGauges, RolloutLabel, SetLabels,
    };
    let metrics = Metrics::default();
    let set = SetLabels {
        namespace: "team-a".into(),
        kind: "ConfigMapSet",
        name: "web".into(),
    };
    metrics.observe_rollout(
        &set,
        Some(&RolloutGauges {
            phase: "Progressing",
            wave: 1,
            wave_opened_at: Some(now_seconds() as i64 - 30),
            progress_deadline_seconds: 600,
        }),
    );
    metrics.analysis_measured(&set, "error-rate", "frontend", "passed", Some(0.02));
    metrics.analysis_measured(&set, "smoke", "", "failed", Some(0.0));
    metrics.observe_budget(Some(4), 2, 0);
    metrics
        .rollouts
        .get_or_create(&RolloutLabel { event: "started" })
        .inc();
    metrics.reconciled("set", Duration::from_millis(4));
    metrics.reconciled("workload", Duration::from_millis(2));
    metrics.wrote("create_revision");
    metrics.wrote("patch_workload");
    metrics
        .workloads_updated
        .get_or_create(&KindLabel { kind: "Deployment" })
        .inc();
    metrics
        .admissions
        .get_or_create(&ResultLabel { result: "patched" })
        .inc();
    metrics.admission_duration.observe(0.0004);
    metrics
        .admission_requests
        .get_or_create(&RequestLabels {
            verb: "get",
            resource: "configmaps",
        })
        .inc();
    metrics.leader.set(1);

    // The registry's type is the operator's (prometheus-client), named by `register`'s signature.
    let mut registry = Default::default();
    metrics.register(&mut registry);
    let ready = cmset_controller::serving::drain::Readiness::default();
    ready.set_synced();
    let health = cmset_controller::serving::server::Health {
        ready: std::sync::Arc::new(ready),
        registry: std::sync::Arc::new(registry),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let server = tokio::spawn(cmset_controller::serving::server::serve(
        listener,
        health,
        futures::future::pending(),
    ));
    (address, server)
}

/// Every dashboard query answers from cmset's real `/metrics` (served by the operator's own endpoint
/// code, with the operator's registry), and the alert rules evaluate on it without an error. The
/// cluster test below proves the same on a running operator; this one needs no cluster and covers the
/// analysis panels too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_query_returns_data_from_cmsets_metrics() {
    let (address, server) = serve_cmset_metrics().await;
    let prometheus = Prometheus::builder("dashboard-metrics")
        .scrape("cmset", address)
        .rule_file(repo_path("config/monitoring/rules.yaml"))
        .start()
        .await;
    let queries = dashboard_queries();
    assert!(queries.len() > 20, "{queries:?}");
    // (A query that stays empty fails with its expression.)
    for (_, expr) in &queries {
        prometheus
            .wait_for(SEEN, expr, |samples| !samples.is_empty())
            .await;
    }
    let groups = prometheus.api("/api/v1/rules").expect("rules");
    for group in groups["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule}");
        }
    }
    server.abort();
}

/// Grafana's interval variables as Prometheus would see them here (scraped every second).
fn as_prometheus_sees_it(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("${__rate_interval}", "1m")
        .replace("$__interval", "15s")
        .replace("$__range", "5m")
}

/// Every query of the dashboard: (panel title and refId, expression).
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_path("config/monitoring/dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| std::iter::once(p).chain(p["panels"].as_array().into_iter().flatten()));
    let mut queries = Vec::new();
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push((
                format!(
                    "{} ({})",
                    panel["title"].as_str().unwrap(),
                    target["refId"].as_str().unwrap()
                ),
                as_prometheus_sees_it(target["expr"].as_str().unwrap()),
            ));
        }
    }
    queries
}

const SET: &str = "dashboard-config";

/// The set, with an analysis by template `template` in each wave.
fn set_yaml(value: &str, template: &str) -> String {
    format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 10
    analysis:
      - template: {template}
  template:
    data:
      MODE: "{value}"
"#
    )
}

fn deployment_yaml(name: &str, wave: i32) -> String {
    wave_deployment_yaml(name, wave, SET)
}

/// The queries are polled all through a rollout of two waves, each stabilizing for 10 s (so a wave is
/// open for a while): each must return data at some point of it. The alert rules are loaded too, and
/// must evaluate without an error on the operator's series.
#[tokio::test]
async fn every_dashboard_query_returns_data_from_a_running_cmset() {
    if std::env::var_os("CMSET_CONTROLLER_BIN").is_none() {
        eprintln!("SKIPPED: needs a cluster and the operator (make e2e sets CMSET_CONTROLLER_BIN)");
        return;
    }
    let ns = TestNamespace::new("dashboard").await;
    // The rollout runs an analysis (against a second Prometheus scraping an exporter) under a budget,
    // so that the analysis and budget panels have data too.
    let exporter = Exporter::start();
    exporter.set("e2e_error_ratio", &[("namespace", ns.name.as_str())], 0.01);
    let analysed = Prometheus::builder(&format!("{}-analysis", ns.name))
        .scrape("app", exporter.address())
        .start()
        .await;
    let url = format!("http://127.0.0.1:{}", analysed.port());
    let operator = Operator::start_with(
        &ns.name,
        &["--prometheus-url", &url, "--max-moving-workloads", "5"],
    )
    .await;
    let template = format!("{}-errors", ns.name);
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: AnalysisTemplate
metadata:
  name: {template}
spec:
  query: 'max(e2e_error_ratio{{namespace="{{{{namespace}}}}"}})'
  successCondition: result < 0.05
  intervalSeconds: 5
"#
    ));
    let prometheus = Prometheus::builder(&ns.name)
        .scrape("cmset", format!("127.0.0.1:{}", operator.metrics_port))
        .rule_file(repo_path("config/monitoring/rules.yaml"))
        .start()
        .await;

    ns.apply(&set_yaml("one", &template));
    ns.apply(&deployment_yaml("first", 0));
    ns.apply(&deployment_yaml("second", 1));
    // Wait for the first revision to settle, then roll out a second one while the queries are polled.
    let v1 = kustomize_name(SET, &[("MODE", "one")]);
    cmset_e2e::eventually("both Deployments read the first revision", || async {
        let reads = |d: &Deployment| template_names(d).contains(&v1);
        (reads(&ns.deployment("first").await) && reads(&ns.deployment("second").await)).then_some(())
    })
    .await;
    ns.apply(&set_yaml("two", &template));

    let queries = dashboard_queries();
    let mut answered = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        for (panel, expr) in &queries {
            match prometheus.query(expr) {
                Ok(samples) if !samples.is_empty() => {
                    answered.insert(panel.clone());
                }
                Ok(_) => {}
                Err(e) => panic!("{panel}: `{expr}`: {e}"),
            }
        }
        let missing: Vec<&(String, String)> = queries
            .iter()
            .filter(|(panel, _)| !answered.contains(panel))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "dashboard queries that returned no data during the rollout:\n{}",
            missing
                .iter()
                .map(|(panel, expr)| format!("  {panel}: {expr}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The alert rules evaluate on the operator's real series without an error.
    let groups = prometheus.api("/api/v1/rules").expect("rules");
    for group in groups["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule}");
        }
    }
    let _ = std::process::Command::new("kubectl")
        .args([
            "delete",
            "analysistemplate",
            &template,
            "--ignore-not-found",
            "--wait=false",
        ])
        .output();
}
