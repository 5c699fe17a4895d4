//! Metric analysis on a real API server with a real Prometheus (Debian's package, started by the
//! harness): a small exporter serves `e2e_error_ratio{namespace, service}`, whose value the test sets,
//! Prometheus scrapes it every second, and the operator queries Prometheus through an AnalysisTemplate
//! (`result < 0.05`) named by a ConfigMapSet rolled out in two waves.
//!
//! - A good change passes analysis wave by wave; a change whose metric goes bad fails in wave 0, is
//!   rolled back, and wave 1 never receives it.
//! - Paused while its analysis is inconclusive and left paused past the progress deadline: nothing is
//!   measured, nothing fails; resumed, the rollout completes.
//! - Prometheus stopped mid-rollout: the wave holds and says so (inconclusive), then fails at the
//!   progress deadline.
//! - `kubectl apply` of a template whose argument stands outside a double-quoted string fails, naming
//!   the argument (cmset's validating webhook); typed, the same argument is accepted.
//! - A namespace admin rewrites the set's status during a rollout (workload names and kinds, analysis
//!   runs and their queries): Prometheus' own query log shows only the queries cmset derives.
//! - A Prometheus that never answers, and one reconcile at a time: the set whose analysis waits on it
//!   holds, while another set of the same operator rolls a good change out and a bad one back on time.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_e2e::cmset_api::{AnalysisRunStatus, AnalysisVerdict, ConfigMapSet, RolloutPhase, RolloutStatus};
use cmset_e2e::exporter::Exporter;
use cmset_e2e::fixtures::{template_names, wave_deployment_yaml};
use cmset_e2e::prometheus::Prometheus;
use cmset_e2e::{Operator, TestNamespace, eventually_within, kustomize_name, stays};

const SET: &str = "app-config";
const FIRST: &str = "first";
const SECOND: &str = "second";
const METRIC: &str = "e2e_error_ratio";

/// The cluster-scoped AnalysisTemplate of one test, deleted when dropped.
struct Template {
    name: String,
}

impl Template {
    fn install(ns: &TestNamespace) -> Self {
        let name = format!("{}-errors", ns.name);
        ns.apply(&format!(
            r#"
apiVersion: cmset.dev/v1alpha1
kind: AnalysisTemplate
metadata:
  name: {name}
spec:
  args:
    - name: service
  query: 'max({METRIC}{{namespace="{{{{namespace}}}}",service="{{{{args.service}}}}"}})'
  successCondition: result < 0.05
  intervalSeconds: 5
  failureLimit: 0
"#
        ));
        Self { name }
    }

    /// A template `<namespace>-<suffix>` with `query` and no arguments.
    fn install_as(ns: &TestNamespace, suffix: &str, query: &str) -> Self {
        let name = format!("{}-{suffix}", ns.name);
        let query = serde_json::to_string(query).unwrap();
        ns.apply(&format!(
            r#"
apiVersion: cmset.dev/v1alpha1
kind: AnalysisTemplate
metadata:
  name: {name}
spec:
  query: {query}
  successCondition: result < 0.05
  intervalSeconds: 5
"#
        ));
        Self { name }
    }
}

impl Drop for Template {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "analysistemplate",
                &self.name,
                "--ignore-not-found",
                "--wait=false",
            ])
            .output();
    }
}

fn write_set(ns: &TestNamespace, template: &Template, value: &str, deadline: u32) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 6
    progressDeadlineSeconds: {deadline}
    autoRollback: true
    analysis:
      - template: {}
        args: {{service: checkout}}
  template:
    data:
      MODE: "{value}"
"#,
        template.name
    ));
    kustomize_name(SET, &[("MODE", value)])
}

fn deployment(name: &str, wave: i32) -> String {
    wave_deployment_yaml(name, wave, SET)
}

async fn reads(ns: &TestNamespace, name: &str) -> BTreeSet<String> {
    template_names(&ns.deployment(name).await)
}

async fn rollout(ns: &TestNamespace) -> Option<RolloutStatus> {
    ns.api::<ConfigMapSet>().get(SET).await.ok()?.status?.rollout
}

const LONG: Duration = Duration::from_secs(120);

async fn wait_reads(ns: &TestNamespace, name: &str, revision: &str) {
    eventually_within(LONG, &format!("{name} reads {revision}"), || async {
        (reads(ns, name).await == BTreeSet::from([revision.to_string()])).then_some(())
    })
    .await;
}

async fn wait_phase(ns: &TestNamespace, revision: &str, phase: RolloutPhase) -> RolloutStatus {
    eventually_within(
        LONG,
        &format!("the rollout of {revision} is {phase:?}"),
        || async {
            rollout(ns)
                .await
                .filter(|r| r.revision == revision && r.phase == phase)
        },
    )
    .await
}

fn runs_of(rollout: &RolloutStatus, wave: i32) -> Vec<&AnalysisRunStatus> {
    rollout.analysis.iter().filter(|r| r.wave == wave).collect()
}

/// The exporter, a Prometheus scraping it, the template and an operator querying that Prometheus, with
/// both Deployments on the set's first revision.
async fn setup(
    name: &str,
    deadline: u32,
) -> (TestNamespace, Exporter, Prometheus, Template, Operator, String) {
    let ns = TestNamespace::new(name).await;
    let exporter = Exporter::start();
    let labels = [("namespace", ns.name.as_str()), ("service", "checkout")];
    exporter.set(METRIC, &labels, 0.01);
    let prometheus = Prometheus::builder(&ns.name)
        .scrape("app", exporter.address())
        .start()
        .await;
    let url = format!("http://127.0.0.1:{}", prometheus.port());
    let operator = Operator::start_with(&ns.name, &["--prometheus-url", &url]).await;
    let template = Template::install(&ns);
    let v1 = write_set(&ns, &template, "one", deadline);
    ns.apply(&deployment(FIRST, 0));
    ns.apply(&deployment(SECOND, 1));
    wait_reads(&ns, SECOND, &v1).await;
    wait_phase(&ns, &v1, RolloutPhase::Complete).await;
    (ns, exporter, prometheus, template, operator, v1)
}

#[tokio::test]
async fn a_good_change_passes_analysis_wave_by_wave_and_a_bad_metric_fails_wave_0_and_rolls_it_back() {
    let (ns, exporter, _prometheus, template, _operator, _v1) = setup("analysis", 120).await;

    let v2 = write_set(&ns, &template, "two", 120);
    wait_reads(&ns, FIRST, &v2).await;
    let done = wait_phase(&ns, &v2, RolloutPhase::Complete).await;
    assert_eq!(reads(&ns, SECOND).await, BTreeSet::from([v2.clone()]));
    for wave in [0, 1] {
        let runs = runs_of(&done, wave);
        assert_eq!(runs.len(), 1, "{done:?}");
        let run = runs[0];
        assert_eq!(run.verdict, AnalysisVerdict::Passed, "{run:?}");
        assert_eq!(run.last_value.as_deref(), Some("0.01"));
        assert_eq!(run.condition, "result < 0.05");
        assert!(
            run.query.contains(&format!("namespace=\"{}\"", ns.name)),
            "the set's own namespace: {}",
            run.query
        );
        assert!(run.measurements >= 1);
    }

    // The metric goes bad: the next change fails in wave 0 and is rolled back.
    let labels = [("namespace", ns.name.as_str()), ("service", "checkout")];
    exporter.set(METRIC, &labels, 0.5);
    let v3 = write_set(&ns, &template, "three", 120);
    let failed = wait_phase(&ns, &v3, RolloutPhase::Failed).await;
    assert_eq!(failed.wave, 0);
    let run = runs_of(&failed, 0)[0].clone();
    assert_eq!(run.verdict, AnalysisVerdict::Failed, "{run:?}");
    assert_eq!(run.last_value.as_deref(), Some("0.5"));
    assert!(
        failed
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(&template.name)
    );
    wait_reads(&ns, FIRST, &v2).await;
    assert_eq!(
        reads(&ns, SECOND).await,
        BTreeSet::from([v2.clone()]),
        "wave 1 never received it"
    );
    let events = ns.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=AnalysisFailed",
        "-o",
        "name",
    ]);
    assert!(!events.trim().is_empty(), "an AnalysisFailed event");
}

#[tokio::test]
async fn paused_mid_analysis_past_the_deadline_then_resumed_the_rollout_completes() {
    let deadline = 40;
    let (ns, exporter, _prometheus, template, _operator, v1) = setup("pausing", deadline).await;
    // The change's metric has no data yet: its first measurements are inconclusive.
    let labels = [("namespace", ns.name.as_str()), ("service", "checkout")];
    exporter.remove(METRIC, &labels);
    let v2 = write_set(&ns, &template, "two", deadline);
    wait_reads(&ns, FIRST, &v2).await;
    eventually_within(LONG, "the analysis of wave 0 is inconclusive", || async {
        rollout(&ns).await.filter(|r| {
            r.revision == v2
                && runs_of(r, 0)
                    .iter()
                    .any(|run| run.verdict == AnalysisVerdict::Inconclusive)
        })
    })
    .await;

    ns.kubectl(&["annotate", "configmapset", SET, "cmset.dev/paused=true"]);
    let paused = wait_phase(&ns, &v2, RolloutPhase::Paused).await;
    let measured = runs_of(&paused, 0)[0].measurements;
    // Well past the progress deadline: a paused rollout neither measures, fails nor rolls back.
    stays(
        "paused past its deadline, the rollout holds where it stood",
        Duration::from_secs(u64::from(deadline) + 5),
        || async {
            let Some(r) = rollout(&ns).await else { return false };
            r.phase == RolloutPhase::Paused
                && runs_of(&r, 0)[0].measurements == measured
                && reads(&ns, FIRST).await == BTreeSet::from([v2.clone()])
                && reads(&ns, SECOND).await == BTreeSet::from([v1.clone()])
        },
    )
    .await;

    // Resumed with good data: the analysis goes on where it stood and the rollout completes.
    exporter.set(METRIC, &labels, 0.01);
    ns.kubectl(&["annotate", "configmapset", SET, "cmset.dev/paused-"]);
    let done = wait_phase(&ns, &v2, RolloutPhase::Complete).await;
    assert_eq!(reads(&ns, FIRST).await, BTreeSet::from([v2.clone()]));
    assert_eq!(reads(&ns, SECOND).await, BTreeSet::from([v2.clone()]));
    assert_eq!(runs_of(&done, 0)[0].verdict, AnalysisVerdict::Passed, "{done:?}");
    let failed = ns.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=RolloutFailed",
        "-o",
        "name",
    ]);
    assert!(failed.trim().is_empty(), "no failure: {failed}");
    let resumed = ns.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "reason=RolloutResumed",
        "-o",
        "name",
    ]);
    assert!(!resumed.trim().is_empty(), "a RolloutResumed event");
}

#[tokio::test]
async fn prometheus_stopped_mid_rollout_holds_the_wave_and_reports_then_fails_at_the_deadline() {
    let deadline = 45;
    let (ns, _exporter, mut prometheus, template, _operator, v1) = setup("unreachable", deadline).await;
    prometheus.stop();

    let v2 = write_set(&ns, &template, "two", deadline);
    wait_reads(&ns, FIRST, &v2).await;
    let held = eventually_within(LONG, "the analysis of wave 0 is inconclusive", || async {
        rollout(&ns).await.filter(|r| {
            r.revision == v2
                && runs_of(r, 0)
                    .iter()
                    .any(|run| run.verdict == AnalysisVerdict::Inconclusive)
        })
    })
    .await;
    let run = runs_of(&held, 0)[0];
    assert!(run.message.is_some(), "it says why: {run:?}");
    assert_eq!(held.phase, RolloutPhase::Progressing);
    stays(
        "wave 1 waits while the analysis is inconclusive",
        Duration::from_secs(10),
        || async { reads(&ns, SECOND).await == BTreeSet::from([v1.clone()]) },
    )
    .await;

    let failed = wait_phase(&ns, &v2, RolloutPhase::Failed).await;
    assert_eq!(failed.wave, 0);
    wait_reads(&ns, FIRST, &v1).await;
    assert_eq!(reads(&ns, SECOND).await, BTreeSet::from([v1.clone()]));
}

/// The set of `write_set`, analysed by `template` and by the per-workload template `restarts`.
fn write_set_with(ns: &TestNamespace, template: &Template, restarts: &str, value: &str) -> String {
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 6
    progressDeadlineSeconds: 120
    analysis:
      - template: {}
        args: {{service: checkout}}
      - template: {restarts}
  template:
    data:
      MODE: "{value}"
"#,
        template.name
    ));
    kustomize_name(SET, &[("MODE", value)])
}

/// A client that acts as user `tenant`, whom a Role of `ns` lets read sets and write their status,
/// as a namespace admin can.
async fn tenant(ns: &TestNamespace) -> kube::Client {
    ns.apply(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant}
rules:
  - apiGroups: ["cmset.dev"]
    resources: ["configmapsets", "configmapsets/status"]
    verbs: ["get", "list", "watch", "update", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant}]
"#,
    );
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info.impersonate = Some("tenant".to_string());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn a_namespace_admin_rewriting_the_status_changes_no_query_that_reaches_prometheus() {
    let (ns, _exporter, prometheus, template, _operator, _v1) = setup("tamper", 120).await;
    let restarts = Template::install_as(
        &ns,
        "restarts",
        &format!(r#"max({METRIC}{{namespace="{{{{namespace}}}}",workload!~"{{{{workload.name}}}}"}})"#),
    );
    let v2 = write_set_with(&ns, &template, &restarts.name, "two");
    let sets = kube::Api::<ConfigMapSet>::namespaced(tenant(&ns).await, &ns.name);
    let injected = r#"x"} or count(kube_secret_info) or {a=""#;

    // While wave 0 of v2 is analysed, the tenant rewrites what the status says of the workloads and of
    // the analysis, again and again (eight times). (A rewrite of the status alone wakes no reconcile: one made after
    // the rollout completed would stand until the next one. Stopping at wave 1 lets cmset write last.)
    let mut rewrites = 0;
    let mut polls = 0;
    while rollout(&ns)
        .await
        .is_none_or(|r| r.revision != v2 || r.phase != RolloutPhase::Complete)
    {
        polls += 1;
        assert!(
            polls < 600,
            "the rollout of {v2} did not complete: {:?}",
            rollout(&ns).await
        );
        let set = sets.get(SET).await.unwrap();
        let in_wave_0 = |s: &cmset_e2e::cmset_api::ConfigMapSetStatus| {
            s.rollout
                .as_ref()
                .is_some_and(|r| r.revision == v2 && r.wave == 0 && r.phase == RolloutPhase::Progressing)
        };
        // A bounded number of rewrites: each one drops the runs it forged and with them what was
        // measured, and a wave passes only on two measurements an interval apart (a tenant who keeps
        // rewriting holds its own rollout, nobody else's).
        let Some(status) = set.status.filter(in_wave_0).filter(|_| rewrites < 8) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut workloads = serde_json::to_value(&status.workloads).unwrap();
        for entry in workloads.as_array_mut().unwrap() {
            entry["name"] = injected.into();
            entry["kind"] = "Secret".into();
        }
        let wave = status.rollout.as_ref().map_or(0, |r| r.wave);
        let forged = serde_json::json!([
            {"template": template.name, "wave": wave, "query": "count(kube_secret_info)",
             "condition": "result < 0.05", "verdict": "Running"},
            {"template": restarts.name, "workloadKind": "Secret", "workload": injected, "wave": wave,
             "query": format!(r#"max({METRIC}{{workload!~"{injected}"}})"#),
             "condition": "result < 0.05", "verdict": "Running"},
        ]);
        let patch = serde_json::json!({"status": {"workloads": workloads, "rollout": {"analysis": forged}}});
        sets.patch_status(
            SET,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("the tenant may write the status");
        rewrites += 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        rewrites >= 3,
        "the status was rewritten during the rollout ({rewrites} times)"
    );

    let derived = BTreeSet::from([
        format!(r#"max({METRIC}{{namespace="{}",service="checkout"}})"#, ns.name),
        format!(r#"max({METRIC}{{namespace="{}",workload!~"first"}})"#, ns.name),
        format!(r#"max({METRIC}{{namespace="{}",workload!~"second"}})"#, ns.name),
    ]);
    let logged = prometheus.logged_queries();
    let sent: BTreeSet<String> = logged.iter().cloned().collect();
    assert_eq!(sent, derived, "Prometheus' query log: {logged:#?}");
    // The tenant's last rewrite may have come after the rollout completed: the next plan drops its
    // runs too. Of wave 0, which passed, the status keeps the per-wave run, not the per-workload one.
    let kept: BTreeSet<String> = derived
        .iter()
        .filter(|q| !q.contains(r#"workload!~"first""#))
        .cloned()
        .collect();
    eventually_within(LONG, "the status records only the runs cmset derives", || async {
        let done = rollout(&ns).await?;
        let recorded: BTreeSet<String> = done.analysis.iter().map(|r| r.query.clone()).collect();
        (recorded == kept).then_some(())
    })
    .await;
    assert_eq!(
        prometheus.logged_queries().into_iter().collect::<BTreeSet<_>>(),
        derived,
        "nothing else reached Prometheus since"
    );
}

/// Wave 0 of 25 Deployments with a query per workload: while it is analysed the status writes the
/// runs measured alike as groups (fewer entries than workloads, every workload in one), Prometheus
/// receives each workload's own query, and the rollout completes.
#[tokio::test]
async fn a_query_per_workload_of_two_dozen_workloads_is_written_in_groups() {
    let (ns, _exporter, prometheus, template, _operator, v1) = setup("groups", 120).await;
    let restarts = Template::install_as(
        &ns,
        "restarts",
        &format!(r#"max({METRIC}{{namespace="{{{{namespace}}}}",workload!~"{{{{workload.name}}}}"}})"#),
    );
    let fleet: Vec<String> = (0..24).map(|n| format!("fleet-{n:02}")).collect();
    for name in &fleet {
        ns.apply(&deployment(name, 0));
    }
    for name in &fleet {
        wait_reads(&ns, name, &v1).await;
    }
    let v2 = write_set_with(&ns, &template, &restarts.name, "two");

    let mut wave_0 = fleet.clone();
    wave_0.push(FIRST.to_string());
    wave_0.sort();
    let mut grouped: Option<Vec<AnalysisRunStatus>> = None;
    let deadline = std::time::Instant::now() + LONG;
    let done = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the rollout of {v2} did not complete: {:?}",
            rollout(&ns).await
        );
        let Some(now) = rollout(&ns).await.filter(|r| r.revision == v2) else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let runs: Vec<AnalysisRunStatus> = runs_of(&now, 0)
            .into_iter()
            .filter(|r| r.template == restarts.name)
            .cloned()
            .collect();
        let mut covered: Vec<String> = runs
            .iter()
            .flat_map(|r| r.workload.iter().chain(&r.workloads).cloned())
            .collect();
        covered.sort();
        if now.wave == 0 && covered == wave_0 && runs.len() < wave_0.len() {
            grouped.get_or_insert(runs);
        }
        if now.phase == RolloutPhase::Complete {
            break now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let grouped = grouped.expect("while wave 0 was analysed, its 25 runs were written in groups");
    let group = grouped.iter().find(|r| r.workloads.len() > 1).unwrap();
    assert_eq!(group.workload_kind.as_deref(), Some("Deployment"));
    assert!(group.workload.is_none());
    assert!(
        group
            .query
            .contains(&format!(r#"workload!~"{}""#, group.workloads[0])),
        "the query of its first: {}",
        group.query
    );
    for name in fleet.iter().chain([&FIRST.to_string(), &SECOND.to_string()]) {
        wait_reads(&ns, name, &v2).await;
    }
    // Each workload's own query reached Prometheus.
    let sent: BTreeSet<String> = prometheus.logged_queries().into_iter().collect();
    for name in &wave_0 {
        let query = format!(r#"max({METRIC}{{namespace="{}",workload!~"{name}"}})"#, ns.name);
        assert!(sent.contains(&query), "{query} was not sent: {sent:#?}");
    }
    // Wave 0 passed: its per-workload runs, grouped or not, left the status; wave 1's one is there.
    assert!(
        runs_of(&done, 0).iter().all(|r| r.template == template.name),
        "{:?}",
        runs_of(&done, 0)
    );
    assert!(
        runs_of(&done, 1)
            .iter()
            .any(|r| r.workload.as_deref() == Some(SECOND) && r.verdict == AnalysisVerdict::Passed)
    );
}

#[tokio::test]
async fn kubectl_apply_of_a_template_with_an_unquoted_argument_fails_naming_it() {
    let ns = TestNamespace::new("template-check").await;
    let _operator = Operator::start_validating_templates(&ns.name, &[]).await;
    let name = format!("{}-threshold", ns.name);
    let template = |arg: &str| {
        format!(
            r#"
apiVersion: cmset.dev/v1alpha1
kind: AnalysisTemplate
metadata:
  name: {name}
spec:
  args:
    - {arg}
  query: 'sum(rate({METRIC}{{namespace="{{{{namespace}}}}"}}[5m])) > {{{{args.threshold}}}}'
  successCondition: result < 1
"#
        )
    };
    let refused = ns
        .try_kubectl(&["apply", "-f", "-"], Some(&template("{name: threshold}")))
        .expect_err("the template is refused");
    assert!(
        refused.contains(r#"argument "threshold" (string) is used outside a double-quoted string"#),
        "{refused}"
    );
    assert!(refused.contains("denied the request"), "{refused}");
    let stored = std::process::Command::new("kubectl")
        .args([
            "get",
            "analysistemplate",
            &name,
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .output()
        .unwrap();
    assert!(stored.stdout.is_empty(), "nothing was stored");

    // Declared a number, the same query is accepted; a value that is not one is refused at apply.
    let _typed = Template { name: name.clone() };
    ns.try_kubectl(
        &["apply", "-f", "-"],
        Some(&template("{name: threshold, type: number, default: \"0.5\"}")),
    )
    .expect("a typed argument may stand outside quotes");
    let refused = ns
        .try_kubectl(
            &["apply", "-f", "-"],
            Some(&template(
                "{name: threshold, type: number, default: \"1 or vector(1)\"}",
            )),
        )
        .expect_err("a default that is not a number is refused");
    assert!(
        refused.contains(r#"argument "threshold" is not a decimal number"#),
        "{refused}"
    );
}

// ------------------------------------------------------------------- an unreachable Prometheus --

/// The key that makes the simulated node never ready a pod that reads it (`e2e/cluster/fake-node.py`).
const FAIL_KEY: &str = "CMSET_FAKE_NODE_FAIL";
const FAKE_NODE: &str = "cmset-fake-node";

/// A "Prometheus" that accepts every connection and never answers: unreachable, as far as a client
/// can tell, until its timeout. Counts the queries it was sent.
async fn hanging_prometheus() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(stream);
        }
    });
    (port, accepted)
}

/// The plain set (no analysis) of the story, with `data`; returns its revision's name.
fn write_plain(ns: &TestNamespace, data: &[(&str, &str)]) -> String {
    let entries: String = data
        .iter()
        .map(|(k, v)| format!("\n      {k}: {}", serde_json::to_string(v).unwrap()))
        .collect();
    ns.apply(&format!(
        r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {PLAIN}
spec:
  rollout:
    stabilizationSeconds: 2
    progressDeadlineSeconds: {PLAIN_DEADLINE}
    autoRollback: true
  template:
    data:{entries}
"#
    ));
    kustomize_name(PLAIN, data)
}

const PLAIN: &str = "plain-config";
const PLAIN_DEADLINE: u64 = 15;

async fn plain_rollout(ns: &TestNamespace) -> Option<RolloutStatus> {
    ns.api::<ConfigMapSet>().get(PLAIN).await.ok()?.status?.rollout
}

/// Waits until the plain set's rollout of `revision` is `phase` and its Deployment reads `reads`;
/// returns how long that took.
async fn plain_reaches(ns: &TestNamespace, revision: &str, phase: RolloutPhase, reads_now: &str) -> Duration {
    let started = std::time::Instant::now();
    eventually_within(
        LONG,
        &format!("the plain rollout of {revision} is {phase:?} and plain reads {reads_now}"),
        || async {
            let rollout = plain_rollout(ns).await?;
            let done = rollout.revision == revision
                && rollout.phase == phase
                && reads(ns, "plain").await == BTreeSet::from([reads_now.to_string()]);
            done.then_some(())
        },
    )
    .await;
    started.elapsed()
}

/// One operator, one Prometheus that never answers, and `--concurrency 1`: the set whose analysis
/// waits on that Prometheus holds its own rollout (inconclusive), but another set in the same
/// operator still rolls out a good change at once, and rolls back a bad one at its deadline.
#[tokio::test]
async fn an_unreachable_prometheus_holds_no_other_set_s_rollout_or_rollback() {
    let ns = TestNamespace::new("hanging").await;
    let node = ns.client.clone();
    let node = cmset_e2e::kube::Api::<cmset_e2e::k8s_openapi::api::core::v1::Node>::all(node)
        .get_opt(FAKE_NODE)
        .await;
    if !matches!(node, Ok(Some(_))) {
        eprintln!(
            "SKIPPED: a bad revision needs the local cluster's simulated node {FAKE_NODE} ({FAIL_KEY})"
        );
        return;
    }
    let (port, asked) = hanging_prometheus().await;
    let url = format!("http://127.0.0.1:{port}");
    let _operator = Operator::start_with(&ns.name, &["--prometheus-url", &url, "--concurrency", "1"]).await;

    // The analysed set: three Deployments in wave 0, one query per workload, all hanging.
    let restarts = Template::install_as(
        &ns,
        "restarts",
        r#"max(kube_pod_container_status_restarts_total{namespace="{{namespace}}",pod=~"{{workload.name}}-.*"})"#,
    );
    let analysed = |value: &str| {
        ns.apply(&format!(
            r#"
apiVersion: cmset.dev/v1alpha1
kind: ConfigMapSet
metadata:
  name: {SET}
spec:
  rollout:
    stabilizationSeconds: 2
    progressDeadlineSeconds: 600
    analysis:
      - template: {}
  template:
    data:
      MODE: "{value}"
"#,
            restarts.name
        ));
        kustomize_name(SET, &[("MODE", value)])
    };
    let a1 = analysed("one");
    for name in ["a", "b", "c"] {
        ns.apply(&wave_deployment_yaml(name, 0, SET));
    }
    for name in ["a", "b", "c"] {
        wait_reads(&ns, name, &a1).await;
    }
    let a2 = analysed("two");
    wait_reads(&ns, "a", &a2).await;
    eventually_within(
        LONG,
        "the analysed set's queries reach the hanging Prometheus",
        || async { (asked.load(std::sync::atomic::Ordering::SeqCst) >= 1).then_some(()) },
    )
    .await;

    // The plain set: created, changed, then changed for the worse, while those queries hang.
    let p1 = write_plain(&ns, &[("APP_VERSION", "1")]);
    ns.apply(&wave_deployment_yaml("plain", 0, PLAIN));
    let first = plain_reaches(&ns, &p1, RolloutPhase::Complete, &p1).await;
    let p2 = write_plain(&ns, &[("APP_VERSION", "2")]);
    let good = plain_reaches(&ns, &p2, RolloutPhase::Complete, &p2).await;
    let p3 = write_plain(&ns, &[("APP_VERSION", "3"), (FAIL_KEY, "true")]);
    let bad = plain_reaches(&ns, &p3, RolloutPhase::Failed, &p2).await;
    eprintln!(
        "Prometheus hanging ({} queries sent): plain set's first rollout {first:?}, good change {good:?}, \
         bad change failed and rolled back {bad:?} (its deadline {PLAIN_DEADLINE} s)",
        asked.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert!(good < Duration::from_secs(20), "the good change took {good:?}");
    assert!(
        bad < Duration::from_secs(PLAIN_DEADLINE + 20),
        "the rollback took {bad:?}"
    );

    // Meanwhile the analysed set holds where it stood: its analysis has no answer.
    let held = rollout(&ns).await.expect("the analysed set's rollout");
    assert_eq!(
        (held.revision.as_str(), held.phase),
        (a2.as_str(), RolloutPhase::Progressing),
        "{held:?}"
    );
    assert!(
        runs_of(&held, 0)
            .iter()
            .all(|r| r.verdict != AnalysisVerdict::Passed),
        "{held:?}"
    );
}
