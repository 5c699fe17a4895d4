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
