//! Tables of the analysis rules: resolving, planning runs, pacing, measurements and verdicts.

use std::collections::BTreeMap;
use std::time::Duration;

use cmset_api::{AnalysisArg, AnalysisRef, AnalysisRunStatus, AnalysisTemplateSpec, AnalysisVerdict};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::workloads::kinds::WorkloadKind;

const ERRORS: &str =
    r#"sum(rate(http_errors_total{namespace="{{namespace}}",service="{{args.service}}"}[1m]))"#;
const PER_WORKLOAD: &str =
    r#"max(restarts{namespace="{{namespace}}",{{workload.kind}}="{{workload.name}}"})"#;

fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

fn template(query: &str, condition: &str, failure_limit: i32) -> AnalysisTemplateSpec {
    AnalysisTemplateSpec {
        args: vec![AnalysisArg {
            name: "service".into(),
            default: Some("web".into()),
            ..AnalysisArg::default()
        }],
        query: query.into(),
        success_condition: condition.into(),
        interval_seconds: 30,
        failure_limit,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    }
}

fn reference(name: &str) -> AnalysisRef {
    AnalysisRef {
        template: name.into(),
        args: BTreeMap::new(),
    }
}

fn analysis(failure_limit: i32) -> Analysis {
    Analysis::resolve(
        &reference("error-rate"),
        &template(ERRORS, "result < 0.05", failure_limit),
    )
    .unwrap()
}

const SUBJECT: WaveSubject<'static> = WaveSubject {
    namespace: "shop",
    revision: "app-5g7bm8k4f2",
    wave: 1,
};

fn fresh(analysis: &Analysis) -> AnalysisRunStatus {
    new_run(analysis, &SUBJECT, None)
}

fn value(v: f64) -> QueryOutcome {
    QueryOutcome::Samples(vec![v])
}

const RUNNING: WaveStage = WaveStage {
    window_over: false,
    deadline_passed: false,
};
const WINDOW_OVER: WaveStage = WaveStage {
    window_over: true,
    deadline_passed: false,
};
const DEADLINE: WaveStage = WaveStage {
    window_over: false,
    deadline_passed: true,
};

/// Measures `run` with each outcome in turn, 30 s apart, settling it at `stage` after each.
fn measure(analysis: &Analysis, outcomes: &[QueryOutcome], stage: WaveStage) -> AnalysisRunStatus {
    let mut run = fresh(analysis);
    for (i, outcome) in outcomes.iter().enumerate() {
        record(&mut run, analysis, outcome, &at(1_000 + 30 * i as i64));
        settle(&mut run, analysis, stage);
    }
    run
}

#[test]
fn resolving_renders_the_sets_namespace_and_the_arguments() {
    let mut with_args = reference("error-rate");
    with_args.args.insert("service".into(), "checkout".into());
    let analysis = Analysis::resolve(&with_args, &template(ERRORS, "result < 0.05", 0)).unwrap();
    assert!(!analysis.names_workload());
    assert_eq!(
        analysis.render(&SUBJECT, None).unwrap(),
        r#"sum(rate(http_errors_total{namespace="shop",service="checkout"}[1m]))"#
    );
    assert_eq!(analysis.interval(), Duration::from_secs(30));
    // Stored without the schema's bounds, the pace still keeps them.
    let mut unbounded = template(ERRORS, "result < 0.05", -3);
    unbounded.interval_seconds = 0;
    let analysis = Analysis::resolve(&with_args, &unbounded).unwrap();
    assert_eq!((analysis.interval_seconds, analysis.failure_limit), (5, 0));
}

#[test]
fn resolving_errors_name_the_template_and_the_problem() {
    let templates = BTreeMap::from([
        ("error-rate".to_string(), template(ERRORS, "result < 0.05", 0)),
        ("bad-condition".to_string(), template(ERRORS, "result ~ 1", 0)),
        ("bad-variable".to_string(), template("{{pod}}", "result < 1", 0)),
    ]);
    let resolve = |r: AnalysisRef| {
        resolve_all(&[r], |name| templates.get(name))
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        resolve(reference("missing")),
        r#"AnalysisTemplate "missing" not found"#
    );
    assert_eq!(
        resolve(reference("bad-condition")),
        r#"AnalysisTemplate "bad-condition": successCondition "result ~ 1" is not `result`, one of <, <=, >, >=, ==, != and a number (e.g. `result < 0.05`)"#
    );
    assert!(
        resolve(reference("bad-variable"))
            .starts_with(r#"AnalysisTemplate "bad-variable": the query uses {{pod}}"#)
    );
    let mut namespace = reference("error-rate");
    namespace.args.insert("namespace".into(), "kube-system".into());
    assert_eq!(
        resolve(namespace),
        r#"AnalysisTemplate "error-rate": the template declares no argument "namespace""#
    );
    let mut quote = reference("error-rate");
    quote
        .args
        .insert("service".into(), r#"x"} or vector(1) or {a=""#.into());
    assert_eq!(
        resolve(quote),
        r#"AnalysisTemplate "error-rate": the value of argument "service" contains '"', which a value may not contain"#
    );
    let all = resolve_all(&[reference("error-rate"), reference("error-rate")], |n| {
        templates.get(n)
    })
    .unwrap();
    assert_eq!(all.len(), 2);
}

#[test]
fn a_wave_has_one_run_per_analysis_or_per_workload() {
    let per_wave = analysis(0);
    let per_workload =
        Analysis::resolve(&reference("restarts"), &template(PER_WORKLOAD, "result == 0", 0)).unwrap();
    assert!(per_workload.names_workload());
    let workloads = BTreeMap::from([(
        1,
        vec![
            Workload {
                kind: WorkloadKind::StatefulSet,
                name: "db",
            },
            Workload {
                kind: WorkloadKind::Deployment,
                name: "web",
            },
            Workload {
                kind: WorkloadKind::Deployment,
                name: "web",
            },
        ],
    )]);
    let earlier = AnalysisRunStatus {
        wave: 0,
        verdict: AnalysisVerdict::Passed,
        ..fresh(&per_wave)
    };
    let runs = plan_runs(
        &[per_wave.clone(), per_workload.clone()],
        &SUBJECT,
        &workloads,
        std::slice::from_ref(&earlier),
    );
    let shown: Vec<(i32, &str, Option<&str>, &str)> = runs
        .iter()
        .map(|r| {
            (
                r.wave,
                r.template.as_str(),
                r.workload.as_deref(),
                r.query.as_str(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (0, "error-rate", None, earlier.query.as_str()),
            (1, "error-rate", None, earlier.query.as_str()),
            (
                1,
                "restarts",
                Some("web"),
                r#"max(restarts{namespace="shop",Deployment="web"})"#
            ),
            (
                1,
                "restarts",
                Some("db"),
                r#"max(restarts{namespace="shop",StatefulSet="db"})"#
            ),
        ]
    );
    assert_eq!(runs[2].workload_kind.as_deref(), Some("Deployment"));
    assert_eq!(runs[1].condition, "result < 0.05");
    assert_eq!(runs[1].verdict, AnalysisVerdict::Running);

    // Planned again, a run keeps what it measured; a run whose query changed starts afresh.
    let mut measured = runs.clone();
    record(&mut measured[1], &per_wave, &value(0.01), &at(1_000));
    record(&mut measured[2], &per_workload, &value(0.0), &at(1_000));
    let edited_query = format!("{PER_WORKLOAD} > 0");
    let edited =
        Analysis::resolve(&reference("restarts"), &template(&edited_query, "result == 0", 0)).unwrap();
    let again = plan_runs(&[per_wave, edited], &SUBJECT, &workloads, &measured);
    assert_eq!(again[1], measured[1]);
    assert_eq!(again[2].measurements, 0);
    assert_eq!(again.len(), 4);
}

/// Planned from a status its namespace rewrote: every run is the one cmset computes from the analyses,
/// the subject and the members; a recorded run lends only its measurements, to the run of the same
/// identity, and any other is dropped.
#[test]
fn runs_take_nothing_from_the_status_but_the_measurements_of_the_same_run() {
    let per_workload =
        Analysis::resolve(&reference("restarts"), &template(PER_WORKLOAD, "result == 0", 0)).unwrap();
    let analyses = [analysis(0), per_workload.clone()];
    let web = Workload {
        kind: WorkloadKind::Deployment,
        name: "web",
    };
    let members = BTreeMap::from([(0, vec![web]), (1, vec![web])]);
    let computed = plan_runs(&analyses, &SUBJECT, &members, &[]);
    let mut measured = computed.clone();
    for run in &mut measured {
        record(run, &per_workload, &value(0.0), &at(1_000));
    }
    let forged = |change: &dyn Fn(&mut AnalysisRunStatus)| {
        let mut run = measured[1].clone();
        change(&mut run);
        run
    };
    let recorded = vec![
        // The same runs with their measurements,
        measured[0].clone(),
        measured[1].clone(),
        // and runs of this wave and the one before that cmset never computed.
        forged(&|r| r.query = r#"count({__name__=~".+"})"#.into()),
        forged(&|r| r.workload = Some("db".into())),
        forged(&|r| r.workload_kind = Some("StatefulSet".into())),
        forged(&|r| r.template = "error-rate".into()),
        forged(&|r| {
            r.wave = 0;
            r.query = "secrets_total".into();
        }),
        forged(&|r| r.wave = 7),
        AnalysisRunStatus {
            wave: 0,
            ..measured[1].clone()
        },
    ];
    let planned = plan_runs(&analyses, &SUBJECT, &members, &recorded);
    let identity = |r: &AnalysisRunStatus| (r.wave, r.template.clone(), r.workload.clone(), r.query.clone());
    let shown: Vec<_> = planned.iter().map(identity).collect();
    // A recorded run of wave 0 is kept only when it is a run cmset computes for wave 0: the copy of
    // the per-workload run is (its query names no wave, and web is in wave 0), the forged one is not.
    let mut expected = vec![(
        0,
        "restarts".to_string(),
        Some("web".to_string()),
        computed[1].query.clone(),
    )];
    expected.extend(computed.iter().map(identity));
    assert_eq!(shown, expected);
    assert!(planned.iter().all(|r| r.measurements == 1), "{planned:?}");
    assert_eq!(planned[1].last_value.as_deref(), Some("0"));

    // Only what was measured is carried, onto the run cmset computes; the condition is cmset's too.
    let lying = AnalysisRunStatus {
        condition: "result > -1".into(),
        ..measured[0].clone()
    };
    let planned = plan_runs(&analyses, &SUBJECT, &members, &[lying]);
    assert_eq!(planned, computed);
}

/// A subject whose names are not DNS-1123 names renders no query: the run is never due and holds the
/// wave, saying why, and fails at the deadline.
#[test]
fn a_subject_that_fails_its_check_sends_nothing() {
    let per_workload =
        Analysis::resolve(&reference("restarts"), &template(PER_WORKLOAD, "result == 0", 0)).unwrap();
    let bad_name = Workload {
        kind: WorkloadKind::Deployment,
        name: r#"web"} or vector(1) #"#,
    };
    let bad_revision = WaveSubject {
        revision: "App_5",
        ..SUBJECT
    };
    let bad_namespace = WaveSubject {
        namespace: "a.b",
        ..SUBJECT
    };
    let cases = [
        (new_run(&per_workload, &SUBJECT, Some(&bad_name)), "workload name"),
        (new_run(&per_workload, &bad_revision, Some(&bad_name)), "revision"),
        (new_run(&analysis(0), &bad_revision, None), "revision"),
        (new_run(&analysis(0), &bad_namespace, None), "namespace"),
    ];
    for (run, what) in cases {
        assert_eq!(run.query, "", "{run:?}");
        let message = run.message.clone().unwrap();
        assert!(message.starts_with(&format!("the {what} ")), "{message}");
        assert_eq!(due_in(&run, &per_workload, &at(1_000), None), None);
        let mut held = run.clone();
        settle(&mut held, &per_workload, RUNNING);
        assert_eq!(held.verdict, AnalysisVerdict::Inconclusive);
        assert_eq!(held.message, run.message);
        settle(&mut held, &per_workload, DEADLINE);
        assert_eq!(held.verdict, AnalysisVerdict::Failed);
    }
    assert_eq!(
        Analysis::render(&per_workload, &SUBJECT, Some(&bad_name))
            .unwrap_err()
            .to_string(),
        r#"the workload name "web\"} or vector(1) #" is not a DNS-1123 name; the query is not sent"#
    );
}

#[test]
fn a_template_is_checked_whatever_a_set_passes() {
    let mut unquoted = template("sum(rate(errors[5m])) > {{args.service}}", "result < 1", 0);
    assert_eq!(
        check_template("errors", &unquoted).unwrap_err().to_string(),
        r#"AnalysisTemplate "errors": argument "service" (string) is used outside a double-quoted string: put {{args.service}} inside "...", or declare it with type: duration or type: number"#
    );
    unquoted.args[0].value_type = cmset_api::AnalysisArgType::Number;
    assert_eq!(
        check_template("errors", &unquoted).unwrap_err().to_string(),
        r#"AnalysisTemplate "errors": the value "web" of argument "service" is not a decimal number such as 0.05 or -3"#
    );
    unquoted.args[0].default = Some("0.5".into());
    assert_eq!(check_template("errors", &unquoted), Ok(()));
    // The controller refuses it too: a set cannot use a template that slipped past admission.
    unquoted.args[0].value_type = cmset_api::AnalysisArgType::String;
    let error = Analysis::resolve(&reference("errors"), &unquoted).unwrap_err();
    assert!(
        error
            .to_string()
            .contains(r#"argument "service" (string) is used outside"#),
        "{error}"
    );
    assert_eq!(
        check_template("errors", &template(ERRORS, "result < 1", 0)),
        Ok(())
    );
    assert!(check_template("errors", &template(ERRORS, "result ~ 1", 0)).is_err());
}

#[test]
fn a_run_is_due_at_once_then_every_interval_until_it_fails() {
    let analysis = analysis(0);
    let mut run = fresh(&analysis);
    assert!(due(&run, &analysis, &at(1_000), None));
    // Measured at 1000.7 it counts from 1000, as the API keeps it.
    let now = Time(Timestamp::from_second(1_000).unwrap() + Duration::from_millis(700));
    record(&mut run, &analysis, &value(0.01), &now);
    assert_eq!(run.last_measured_at, Some(at(1_000)));
    assert_eq!(
        due_in(&run, &analysis, &at(1_010), None),
        Some(Duration::from_secs(20))
    );
    assert!(!due(&run, &analysis, &at(1_029), None));
    assert!(due(&run, &analysis, &at(1_030), None));
    assert!(due(&run, &analysis, &at(5_000), None));
    record(&mut run, &analysis, &value(1.0), &at(1_030));
    settle(&mut run, &analysis, RUNNING);
    assert_eq!(run.verdict, AnalysisVerdict::Failed);
    assert_eq!(due_in(&run, &analysis, &at(9_000), None), None);
    // A failed run records nothing more.
    let before = run.clone();
    record(&mut run, &analysis, &value(2.0), &at(9_000));
    assert_eq!(run, before);
}

#[test]
fn measurements_are_judged_sample_by_sample() {
    let condition = Condition::parse("result < 0.05").unwrap();
    let judge = |outcome: QueryOutcome| {
        let m = Measurement::judge(&outcome, &condition);
        (m.value().map(format_value), m.describe(&condition))
    };
    let s = |v: &[f64]| QueryOutcome::Samples(v.to_vec());
    let some = |t: &str, d: &str| (Some(t.to_string()), d.to_string());
    assert_eq!(judge(s(&[0.0123])), some("0.0123", "0.0123 meets result < 0.05"));
    assert_eq!(
        judge(s(&[0.01, 0.04, 0.02])),
        some("0.04", "all 3 series meet result < 0.05 (closest 0.04)")
    );
    assert_eq!(judge(s(&[0.2])), some("0.2", "0.2 fails result < 0.05"));
    assert_eq!(
        judge(s(&[0.01, 0.3, 0.06, f64::NAN])),
        some("0.3", "2 of 4 series fail result < 0.05 (worst 0.3)")
    );
    assert_eq!(judge(s(&[0.01, f64::NAN])), some("NaN", "the result is NaN"));
    assert_eq!(
        judge(QueryOutcome::NoData),
        (None, "the query returned no data".into())
    );
    assert_eq!(judge(s(&[])), (None, "the query returned no data".into()));
    assert_eq!(
        judge(QueryOutcome::Error("HTTP 503".into())),
        (None, "the query failed: HTTP 503".into())
    );
}

#[test]
fn run_verdicts() {
    let nan = value(f64::NAN);
    let none = QueryOutcome::NoData;
    let down = QueryOutcome::Error("connection refused".into());
    let table: [(&str, i32, Vec<QueryOutcome>, WaveStage, AnalysisVerdict); 17] = [
        ("not measured yet", 0, vec![], RUNNING, AnalysisVerdict::Running),
        (
            "passing, window running",
            0,
            vec![value(0.01)],
            RUNNING,
            AnalysisVerdict::Running,
        ),
        (
            "passing once, window over: one sample decides nothing, the window stretches",
            0,
            vec![value(0.01)],
            WINDOW_OVER,
            AnalysisVerdict::Running,
        ),
        (
            "passing twice, window over",
            0,
            vec![value(0.01), value(0.02)],
            WINDOW_OVER,
            AnalysisVerdict::Passed,
        ),
        (
            "one failure, limit 0",
            0,
            vec![value(0.1)],
            RUNNING,
            AnalysisVerdict::Failed,
        ),
        (
            "one failure, limit 1",
            1,
            vec![value(0.1)],
            WINDOW_OVER,
            AnalysisVerdict::Running,
        ),
        (
            "failed then passed, limit 1",
            1,
            vec![value(0.1), value(0.01)],
            WINDOW_OVER,
            AnalysisVerdict::Passed,
        ),
        (
            "two failures, limit 1",
            1,
            vec![value(0.1), value(0.01), value(0.1)],
            RUNNING,
            AnalysisVerdict::Failed,
        ),
        (
            "no data",
            0,
            vec![none.clone()],
            WINDOW_OVER,
            AnalysisVerdict::Inconclusive,
        ),
        (
            "NaN",
            0,
            vec![nan.clone()],
            WINDOW_OVER,
            AnalysisVerdict::Inconclusive,
        ),
        (
            "unreachable",
            0,
            vec![down.clone()],
            RUNNING,
            AnalysisVerdict::Inconclusive,
        ),
        (
            "passed, then unreachable",
            0,
            vec![value(0.01), down.clone()],
            WINDOW_OVER,
            AnalysisVerdict::Inconclusive,
        ),
        (
            "unreachable, then passed",
            0,
            vec![down.clone(), value(0.01)],
            WINDOW_OVER,
            AnalysisVerdict::Passed,
        ),
        (
            "inconclusive at the deadline",
            0,
            vec![value(0.01), none.clone()],
            DEADLINE,
            AnalysisVerdict::Failed,
        ),
        (
            "never measured at the deadline",
            0,
            vec![],
            DEADLINE,
            AnalysisVerdict::Failed,
        ),
        (
            "passing at the deadline, window running",
            0,
            vec![value(0.01)],
            DEADLINE,
            AnalysisVerdict::Running,
        ),
        (
            "failed within limit at the deadline",
            1,
            vec![value(0.1)],
            DEADLINE,
            AnalysisVerdict::Running,
        ),
    ];
    for (case, limit, outcomes, stage, expected) in table {
        let analysis = analysis(limit);
        let mut run = measure(&analysis, &outcomes, RUNNING);
        settle(&mut run, &analysis, stage);
        assert_eq!(run.verdict, expected, "{case}: {run:?}");
    }
}

#[test]
fn failure_messages_say_why() {
    let analysis = analysis(1);
    let run = measure(&analysis, &[value(0.1), value(0.2)], RUNNING);
    assert_eq!(
        run.message.as_deref(),
        Some("2 of 2 measurements failed, more than failureLimit 1; last: 0.2 fails result < 0.05")
    );
    assert_eq!((run.measurements, run.failures), (2, 2));
    assert_eq!(run.last_value.as_deref(), Some("0.2"));

    let analysis = super::tests::analysis(0);
    let down = QueryOutcome::Error("HTTP 503".into());
    let mut run = measure(&analysis, &[down], RUNNING);
    assert_eq!(run.message.as_deref(), Some("the query failed: HTTP 503"));
    settle(&mut run, &analysis, DEADLINE);
    assert_eq!(
        run.message.as_deref(),
        Some("nothing conclusive by the progress deadline; last: the query failed: HTTP 503")
    );
    // The verdict and its message stay, whatever comes after.
    let failed = run.clone();
    settle(&mut run, &analysis, WINDOW_OVER);
    assert_eq!(run, failed);
    let mut never = fresh(&analysis);
    settle(&mut never, &analysis, DEADLINE);
    assert_eq!(
        never.message.as_deref(),
        Some("not measured by the progress deadline")
    );
    assert_eq!(
        clauses(std::slice::from_ref(&never), 1, AnalysisVerdict::Failed),
        ["analysis error-rate: not measured by the progress deadline"]
    );
}

#[test]
fn a_restarted_operator_continues_from_the_status() {
    let analysis = analysis(1);
    let run = measure(&analysis, &[value(0.1), value(0.01)], RUNNING);
    let stored: AnalysisRunStatus = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
    assert_eq!(stored, run);
    for stage in [RUNNING, WINDOW_OVER, DEADLINE] {
        assert_eq!(
            verdict(&stored, &analysis, stage),
            verdict(&run, &analysis, stage)
        );
    }
    assert_eq!(
        verdict(&stored, &analysis, WINDOW_OVER).verdict,
        AnalysisVerdict::Passed
    );
    assert_eq!(
        due_in(&stored, &analysis, &at(1_040), None),
        Some(Duration::from_secs(20))
    );
}

#[test]
fn wave_verdicts() {
    use AnalysisVerdict::*;
    let runs = |wave_verdicts: &[AnalysisVerdict]| -> Vec<AnalysisRunStatus> {
        let mut runs: Vec<AnalysisRunStatus> = wave_verdicts
            .iter()
            .map(|v| AnalysisRunStatus {
                wave: 1,
                verdict: *v,
                ..AnalysisRunStatus::default()
            })
            .collect();
        // Another wave's runs never count.
        runs.push(AnalysisRunStatus {
            wave: 0,
            verdict: Failed,
            ..AnalysisRunStatus::default()
        });
        runs
    };
    let table = [
        (vec![], Passed),
        (vec![Passed, Passed], Passed),
        (vec![Passed, Running], Running),
        (vec![Passed, Inconclusive, Running], Inconclusive),
        (vec![Inconclusive, Failed, Passed], Failed),
        (vec![Running, Running], Running),
    ];
    for (verdicts, expected) in table {
        assert_eq!(wave_verdict(&runs(&verdicts), 1), expected, "{verdicts:?}");
    }
}

#[test]
fn only_measurements_since_the_wave_became_healthy_count_towards_passing_it() {
    let analysis = analysis(0);
    let mut run = fresh(&analysis);
    record(&mut run, &analysis, &value(0.01), &at(1_000));
    record(&mut run, &analysis, &value(0.01), &at(1_030));
    assert_eq!((run.streak, run.streak_since.clone()), (2, Some(at(1_000))));
    // The wave was unhealthy in between and healthy again since 1040: those two count for nothing.
    restart_streak(&mut run, &at(1_040));
    assert_eq!((run.streak, run.streak_since.clone()), (0, None));
    settle(&mut run, &analysis, WINDOW_OVER);
    assert_eq!(run.verdict, AnalysisVerdict::Running, "the window stretches");
    assert_eq!(run.measurements, 2, "the counts stay");
    record(&mut run, &analysis, &value(0.01), &at(1_060));
    settle(&mut run, &analysis, WINDOW_OVER);
    assert_eq!(run.verdict, AnalysisVerdict::Running);
    record(&mut run, &analysis, &value(0.01), &at(1_090));
    settle(&mut run, &analysis, WINDOW_OVER);
    assert_eq!(run.verdict, AnalysisVerdict::Passed);
    // A streak begun after the wave became healthy is kept.
    let kept = run.clone();
    restart_streak(&mut run, &at(1_040));
    assert_eq!(run, kept);
}

#[test]
fn the_first_measurement_waits_the_initial_delay_and_count_asks_for_more() {
    let mut spec = template(ERRORS, "result < 0.05", 0);
    spec.initial_delay_seconds = 60;
    spec.count = Some(3);
    let analysis = Analysis::resolve(&reference("errors"), &spec).unwrap();
    let run = fresh(&analysis);
    let healthy = at(1_000);
    assert_eq!(
        due_in(&run, &analysis, &at(1_000), Some(&healthy)),
        Some(Duration::from_secs(60))
    );
    assert!(!due(&run, &analysis, &at(1_059), Some(&healthy)));
    assert!(due(&run, &analysis, &at(1_060), Some(&healthy)));
    let mut run = run;
    for second in [1_060, 1_090] {
        record(&mut run, &analysis, &value(0.01), &at(second));
    }
    settle(&mut run, &analysis, WINDOW_OVER);
    assert_eq!(run.verdict, AnalysisVerdict::Running, "count 3 asks for a third");
    // Once measuring, the interval rules, not the delay.
    assert_eq!(
        due_in(&run, &analysis, &at(1_100), Some(&healthy)),
        Some(Duration::from_secs(20))
    );
    record(&mut run, &analysis, &value(0.01), &at(1_120));
    settle(&mut run, &analysis, WINDOW_OVER);
    assert_eq!(run.verdict, AnalysisVerdict::Passed);
    // Fewer than two is read as two.
    spec.count = Some(1);
    assert_eq!(Analysis::resolve(&reference("errors"), &spec).unwrap().count, 2);
}

#[test]
fn more_inconclusive_measurements_than_the_limit_fail_the_run() {
    let mut spec = template(ERRORS, "result < 0.05", 0);
    spec.inconclusive_limit = Some(1);
    let analysis = Analysis::resolve(&reference("errors"), &spec).unwrap();
    let mut run = fresh(&analysis);
    record(&mut run, &analysis, &QueryOutcome::NoData, &at(1_000));
    settle(&mut run, &analysis, RUNNING);
    assert_eq!(run.verdict, AnalysisVerdict::Inconclusive);
    record(&mut run, &analysis, &QueryOutcome::NoData, &at(1_030));
    settle(&mut run, &analysis, RUNNING);
    assert_eq!(run.verdict, AnalysisVerdict::Failed);
    assert_eq!(
        run.message.as_deref(),
        Some(
            "2 of 2 measurements were inconclusive, more than inconclusiveLimit 1; last: the query returned no data"
        )
    );
    assert_eq!(
        due_in(&run, &analysis, &at(9_000), None),
        None,
        "never measured again"
    );
    // Without a limit, inconclusive measurements wait for the deadline, as before.
    let analysis = super::tests::analysis(0);
    let mut run = fresh(&analysis);
    for second in [1_000, 1_030, 1_060] {
        record(&mut run, &analysis, &QueryOutcome::NoData, &at(second));
    }
    settle(&mut run, &analysis, RUNNING);
    assert_eq!(
        (run.verdict, run.inconclusive),
        (AnalysisVerdict::Inconclusive, 3)
    );
}

/// A wave of `n` Deployments `w-000`..., for a per-workload analysis.
fn many(n: usize) -> (Vec<String>, Analysis) {
    let names = (0..n).map(|i| format!("w-{i:03}")).collect();
    let per_workload =
        Analysis::resolve(&reference("restarts"), &template(PER_WORKLOAD, "result == 0", 2)).unwrap();
    (names, per_workload)
}

fn wave_of(names: &[String]) -> BTreeMap<i32, Vec<Workload<'_>>> {
    let members = names
        .iter()
        .map(|name| Workload {
            kind: WorkloadKind::Deployment,
            name,
        })
        .collect();
    BTreeMap::from([(SUBJECT.wave, members)])
}

/// The per-workload runs of `names`, each measured once at second 1,000 with `outcome_of` its index.
fn measured_runs(
    names: &[String],
    analysis: &Analysis,
    outcome_of: impl Fn(usize) -> QueryOutcome,
) -> Vec<AnalysisRunStatus> {
    let mut runs = plan_runs(std::slice::from_ref(analysis), &SUBJECT, &wave_of(names), &[]);
    for (i, run) in runs.iter_mut().enumerate() {
        record(run, analysis, &outcome_of(i), &at(1_000));
        settle(run, analysis, RUNNING);
    }
    runs
}

#[test]
fn up_to_twenty_runs_of_a_template_are_written_as_they_are() {
    let (names, restarts) = many(LISTED_RUNS_PER_TEMPLATE);
    let runs = measured_runs(&names, &restarts, |_| value(0.0));
    assert_eq!(compact(runs.clone()), runs);
}

/// Past twenty, the runs measured alike become one entry in the place of the first; a run that failed
/// or was inconclusive, or was measured at another instant, stays apart, and a group of one is a run.
#[test]
fn runs_measured_alike_are_written_as_one_group() {
    let (names, restarts) = many(30);
    let mut runs = measured_runs(&names, &restarts, |i| match i {
        3 => value(2.0),
        4 => QueryOutcome::NoData,
        _ => value(0.0),
    });
    // w-029 was measured a second later.
    let late = runs.pop().unwrap();
    let mut late = AnalysisRunStatus {
        measurements: 0,
        streak: 0,
        streak_since: None,
        last_measured_at: None,
        ..late
    };
    record(&mut late, &restarts, &value(0.0), &at(1_001));
    runs.push(late.clone());
    let written = compact(runs.clone());
    let shown: Vec<(Option<&str>, usize, AnalysisVerdict)> = written
        .iter()
        .map(|r| (r.workload.as_deref(), r.workloads.len(), r.verdict))
        .collect();
    assert_eq!(
        shown,
        [
            (None, 27, AnalysisVerdict::Running),
            (Some("w-003"), 0, AnalysisVerdict::Running),
            (Some("w-004"), 0, AnalysisVerdict::Inconclusive),
            (Some("w-029"), 0, AnalysisVerdict::Running),
        ]
    );
    let group = &written[0];
    assert_eq!(group.workloads[..4], ["w-000", "w-001", "w-002", "w-005"]);
    assert_eq!(group.query, runs[0].query, "the query of its first");
    assert_eq!(group.workload_kind.as_deref(), Some("Deployment"));
    assert_eq!((group.measurements, group.streak), (1, 1));
    assert_eq!(written[1].failures, 1);
    assert_eq!(written[3], late);
}

/// What the status writes in groups plans exactly as what it wrote run by run: each member gets the
/// group's measurements; a run recorded on its own after its group was written wins over the group.
#[test]
fn a_group_lends_its_measurements_to_each_member() {
    let (names, restarts) = many(40);
    let analyses = std::slice::from_ref(&restarts);
    let members = wave_of(&names);
    let runs = measured_runs(
        &names,
        &restarts,
        |i| if i == 7 { value(1.0) } else { value(0.0) },
    );
    let written = compact(runs.clone());
    assert_eq!(written.len(), 2);
    assert_eq!(plan_runs(analyses, &SUBJECT, &members, &written), runs);
    assert_eq!(known_runs(analyses, &SUBJECT, &members, &written), written);

    // w-010 measured again: recorded on its own next to its group (as the I/O layer does), it wins.
    let mut again = runs[10].clone();
    record(&mut again, &restarts, &value(0.0), &at(1_030));
    let mut recorded = written.clone();
    recorded.push(again.clone());
    let planned = plan_runs(analyses, &SUBJECT, &members, &recorded);
    assert_eq!(planned[10], again);
    assert_eq!(planned[11], runs[11]);
    let kept = known_runs(analyses, &SUBJECT, &members, &recorded);
    assert!(
        !kept[0].workloads.contains(&"w-010".to_string()),
        "not in its group any more"
    );
    assert_eq!(kept.last(), Some(&again));
}

/// A group lends nothing once its recorded query is not what cmset renders for its first workload
/// (the template was edited, or the namespace forged it), nor to a workload of another kind or a
/// member it does not name.
#[test]
fn a_group_lends_only_what_cmset_would_have_written() {
    let (names, restarts) = many(30);
    let members = wave_of(&names);
    let runs = measured_runs(&names, &restarts, |_| value(0.0));
    let group = compact(runs).remove(0);
    assert_eq!(group.workloads.len(), 30);
    let lends = |analysis: &Analysis, group: AnalysisRunStatus| {
        let planned = plan_runs(std::slice::from_ref(analysis), &SUBJECT, &members, &[group]);
        planned.iter().filter(|r| r.measurements > 0).count()
    };
    assert_eq!(lends(&restarts, group.clone()), 30);
    let edited = Analysis::resolve(
        &reference("restarts"),
        &template(&format!("{PER_WORKLOAD} > 0"), "result == 0", 2),
    )
    .unwrap();
    assert_eq!(lends(&edited, group.clone()), 0, "the template was edited");
    let forged = |change: &dyn Fn(&mut AnalysisRunStatus)| {
        let mut g = group.clone();
        change(&mut g);
        g
    };
    assert_eq!(lends(&restarts, forged(&|g| g.query = "up".into())), 0);
    assert_eq!(
        lends(&restarts, forged(&|g| g.condition = "result > -1".into())),
        0
    );
    assert_eq!(
        lends(
            &restarts,
            forged(&|g| g.workload_kind = Some("StatefulSet".into()))
        ),
        0
    );
    assert_eq!(lends(&restarts, forged(&|g| g.workloads.truncate(5))), 5);
    // A name that is not a member lends to nobody; the members named still borrow.
    assert_eq!(
        lends(&restarts, forged(&|g| g.workloads.push("intruder".into()))),
        30
    );
}
