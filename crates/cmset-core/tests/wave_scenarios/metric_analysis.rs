//! Analysis: a good change passes wave by wave, a bad metric fails and rolls back, inconclusive and
//! unrunnable analyses hold, and what the status keeps of the runs.

use super::*;

/// Two waves with an analysis of `error-rate` (fails above 0.05, one failure tolerated, measured
/// every 10 s) and a 30 s stabilization window.
pub(crate) fn analysed(auto_rollback: bool) -> (World, String) {
    let mut spec = rollout(30, 300, auto_rollback);
    let reference = AnalysisRef {
        template: "error-rate".into(),
        args: BTreeMap::from([("service".to_string(), "checkout".to_string())]),
    };
    spec.analysis = vec![reference.clone()];
    let (mut world, old) = two_waves(Some(spec));
    let template = AnalysisTemplateSpec {
        args: vec![cmset_api::AnalysisArg {
            name: "service".into(),
            ..cmset_api::AnalysisArg::default()
        }],
        query: r#"errors{namespace="{{namespace}}",service="{{args.service}}",wave="{{wave}}"}"#.into(),
        success_condition: "result < 0.05".into(),
        interval_seconds: 10,
        failure_limit: 1,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    world.analyses = Some(Ok(vec![Analysis::resolve(&reference, &template).unwrap()]));
    (world, old)
}

/// How many workloads the per-workload runs of `template` in `wave` measure, in groups or on their own.
pub(crate) fn workloads_measured(world: &World, wave: i32, template: &str) -> usize {
    runs_of_wave(world, wave)
        .iter()
        .filter(|r| r.template == template)
        .map(|r| r.workloads.len().max(usize::from(r.workload.is_some())))
        .sum()
}

pub(crate) fn runs_of_wave(world: &World, wave: i32) -> Vec<AnalysisRunStatus> {
    world
        .rollout()
        .analysis
        .into_iter()
        .filter(|r| r.wave == wave)
        .collect()
}

/// Measures every 10 s with `value` until `seconds` have passed, settling the world after each.
pub(crate) fn measure_for(world: &mut World, seconds: i64, outcome: &QueryOutcome) {
    for _ in 0..seconds / 10 {
        world.now += 10;
        world.measure(outcome.clone());
        world.settle();
    }
}

#[test]
fn a_good_change_passes_analysis_wave_by_wave() {
    let (mut world, _) = analysed(true);
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!((world.reads("first"), world.rollout().wave), (new.clone(), 0));
    // The window has not begun: nothing is measured yet, and wave 1 waits.
    world.heal_all();
    let runs = runs_of_wave(&world, 0);
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].query,
        r#"errors{namespace="team",service="checkout",wave="0"}"#
    );
    assert_eq!(
        (runs[0].verdict, runs[0].measurements),
        (AnalysisVerdict::Running, 0)
    );
    assert_ne!(world.reads("second"), new);

    // Measured during the window: passing, and the window ends: wave 1 moves.
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.01]));
    assert_eq!(world.reads("second"), new, "wave 0 passed its analysis");
    let passed = &runs_of_wave(&world, 0)[0];
    assert_eq!(passed.verdict, AnalysisVerdict::Passed);
    assert_eq!(passed.last_value.as_deref(), Some("0.01"));
    assert_eq!(passed.condition, "result < 0.05");
    assert!(passed.measurements >= 3, "{passed:?}");

    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.02]));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(runs_of_wave(&world, 1)[0].verdict, AnalysisVerdict::Passed);
}

#[test]
fn a_metric_gone_bad_fails_wave_0_and_rolls_it_back() {
    let (mut world, old) = analysed(true);
    world.change_content("bad");
    world.settle();
    world.heal_all();
    let bad = world.current();
    // One failure is tolerated; the second fails the wave.
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.3]));
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_eq!(runs_of_wave(&world, 0)[0].failures, 1);
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.4]));
    world.settle();
    let rollout = world.rollout();
    assert_eq!((rollout.phase, rollout.wave), (RolloutPhase::Failed, 0));
    assert!(
        rollout.message.as_deref().unwrap().contains("error-rate"),
        "{rollout:?}"
    );
    assert_eq!(runs_of_wave(&world, 0)[0].verdict, AnalysisVerdict::Failed);
    assert_eq!(world.reads("first"), old, "rolled back");
    assert_eq!(world.entry("first").state, WorkloadState::RolledBack);
    assert!(
        world
            .moves
            .iter()
            .all(|(w, _, to)| !(w == "second" && *to == bad))
    );
    assert!(world.reasons().contains(&"AnalysisFailed"), "{:?}", world.events);
    assert_eq!(world.ready(), ("False".into(), "RolloutFailed".into()));
    let history = &world.set.status.as_ref().unwrap().history;
    assert!(history.iter().any(|h| h.name == bad && h.failed));
}

#[test]
fn inconclusive_analysis_holds_the_wave_then_fails_at_the_deadline() {
    let (mut world, old) = analysed(true);
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let new = world.current();
    // No data for longer than the window: the wave holds, never promotes.
    measure_for(&mut world, 100, &QueryOutcome::NoData);
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_ne!(world.reads("second"), new);
    let held = &runs_of_wave(&world, 0)[0];
    assert_eq!(held.verdict, AnalysisVerdict::Inconclusive);
    // Prometheus unreachable: still inconclusive, and at the deadline (300 s after the move) it fails.
    measure_for(&mut world, 200, &QueryOutcome::Error("connection refused".into()));
    let rollout = world.rollout();
    assert_eq!(rollout.phase, RolloutPhase::Failed, "{rollout:?}");
    assert_eq!(world.reads("first"), old);
    assert_ne!(world.reads("second"), new);
}

#[test]
fn an_analysis_that_cannot_run_holds_and_says_why() {
    let (mut world, _) = analysed(false);
    world.analyses = Some(Err("AnalysisTemplate \"error-rate\" not found".into()));
    world.change_content("v2");
    world.settle();
    world.heal_all();
    world.now += 100;
    world.settle();
    let new = world.current();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_ne!(world.reads("second"), new);
    let run = &runs_of_wave(&world, 0)[0];
    assert_eq!(run.verdict, AnalysisVerdict::Inconclusive);
    assert!(run.message.as_deref().unwrap().contains("not found"), "{run:?}");
    world.now += 300;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
}

/// A namespace admin can write the set's status. Whatever it says of the workloads, their kinds and
/// waves, or of the analysis runs and their queries, the queries sent are the ones cmset renders from
/// its templates, the current revision, the wave and the members it observes; the runs it made up are
/// dropped from the status.
#[test]
fn a_status_rewritten_by_the_namespace_changes_no_query_that_is_sent() {
    let (mut world, _) = analysed(false);
    let per_workload = AnalysisTemplateSpec {
        args: Vec::new(),
        query: r#"restarts{namespace="{{namespace}}",{{workload.kind}}=~"{{workload.name}}-.*"}"#.into(),
        success_condition: "result == 0".into(),
        interval_seconds: 10,
        failure_limit: 0,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    let reference = AnalysisRef {
        template: "restarts".into(),
        args: BTreeMap::new(),
    };
    if let Some(Ok(analyses)) = &mut world.analyses {
        analyses.push(Analysis::resolve(&reference, &per_workload).unwrap());
    }
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let derived = [
        r#"errors{namespace="team",service="checkout",wave="0"}"#,
        r#"restarts{namespace="team",Deployment=~"first-.*"}"#,
    ];
    let injected = r#"x"} or count(kube_secret_info) or {a=""#;
    for _ in 0..3 {
        let status = world.set.status.as_mut().unwrap();
        for entry in &mut status.workloads {
            entry.name = injected.into();
            entry.kind = "Secret".into();
            entry.wave = 0;
        }
        let rollout = status.rollout.as_mut().unwrap();
        for run in &mut rollout.analysis {
            run.query = "count(kube_secret_info)".into();
        }
        let forged = AnalysisRunStatus {
            template: "restarts".into(),
            workload_kind: Some("Secret".into()),
            workload: Some(injected.into()),
            wave: rollout.wave,
            query: format!(r#"restarts{{namespace="team",Secret=~"{injected}-.*"}}"#),
            condition: "result == 0".into(),
            ..AnalysisRunStatus::default()
        };
        rollout.analysis.push(forged);
        rollout.analysis.push(AnalysisRunStatus {
            template: "error-rate".into(),
            wave: 1,
            query: "kube_secret_info".into(),
            condition: "result < 0.05".into(),
            ..AnalysisRunStatus::default()
        });
        world.now += 10;
        world.measure(QueryOutcome::Samples(vec![0.0]));
        world.settle();
    }
    assert_eq!(world.sent.len(), 6, "{:?}", world.sent);
    for query in &world.sent {
        assert!(derived.contains(&query.as_str()), "sent {query:?}");
    }
    // Each rewrite dropped the runs it forged, and with them what was measured: left alone, the wave
    // takes its two measurements an interval apart and passes.
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    for query in &world.sent {
        assert!(derived.contains(&query.as_str()), "sent {query:?}");
    }
    // Wave 0 passed and wave 1 moves: of wave 0, its per-wave run is kept (its per-workload run, passed,
    // is not: see `the_status_of_a_set_with_5000_analysed_readers_stays_small`).
    assert_eq!(world.rollout().wave, 1);
    let queries: Vec<String> = world.rollout().analysis.into_iter().map(|r| r.query).collect();
    assert_eq!(queries, [derived[0]], "only cmset's runs are recorded");
}

/// Once no wave is analysed (the rollout completed), runs written into the status by the namespace are
/// dropped at the next plan; the runs cmset measured stay.
#[test]
fn runs_made_up_after_the_rollout_are_dropped() {
    let (mut world, _) = analysed(false);
    world.change_content("v2");
    world.settle();
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.01]));
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.01]));
    let done = world.rollout();
    assert_eq!(done.phase, RolloutPhase::Complete);
    let measured = done.analysis.clone();
    assert_eq!(measured.len(), 2, "{measured:?}");

    let rollout = world.set.status.as_mut().unwrap().rollout.as_mut().unwrap();
    rollout.analysis.push(AnalysisRunStatus {
        template: "error-rate".into(),
        wave: 1,
        query: "count(kube_secret_info)".into(),
        condition: "result < 0.05".into(),
        ..AnalysisRunStatus::default()
    });
    rollout.analysis[0].query = "up".into();
    world.now += 10;
    world.settle();
    assert_eq!(world.rollout().analysis, measured[1..].to_vec());
}

#[test]
fn one_sample_never_passes_a_wave_the_window_stretches_for_a_second() {
    let (mut world, _) = analysed(true);
    world.set.spec.rollout.as_mut().unwrap().stabilization_seconds = 0;
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let new = world.current();
    world.now += 1;
    world.measure(QueryOutcome::Samples(vec![0.01]));
    world.settle();
    assert_ne!(world.reads("second"), new, "no window, one sample: not enough");
    assert_eq!(runs_of_wave(&world, 0)[0].verdict, AnalysisVerdict::Running);
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.01]));
    world.settle();
    assert_eq!(
        world.reads("second"),
        new,
        "two samples an interval apart pass it"
    );
    assert_eq!(runs_of_wave(&world, 0)[0].streak, 2);
}

/// Bytes of the set's status as JSON, as the API server stores it (etcd refuses objects over 1.5 MiB).
pub(crate) fn status_bytes(world: &World) -> usize {
    json_len(world.set.status.as_ref().unwrap())
}

pub(crate) fn json_len(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).unwrap().len()
}

/// 5,000 readers in two waves, with a per-wave analysis and one per workload. The wave in progress
/// writes its 2,500 per-workload runs measured alike as a few groups; once a wave passed, they leave
/// the status (its per-wave run stays). It still shows every workload, and stays under 1.3 MB (etcd
/// refuses 1.5 MiB): the workloads take nearly all of it.
#[test]
fn the_status_of_a_set_with_5000_analysed_readers_stays_small() {
    let names: Vec<String> = (0..5_000).map(|n| format!("reader-{n:04}")).collect();
    let workloads = names
        .iter()
        .enumerate()
        .map(|(n, name)| WorkloadView {
            // As long as the API server's: the status holds every workload's uid.
            uid: format!("0c1b7e6a-1f2d-4e5b-9a3c-{n:012x}"),
            ..deployment(name, Some(i32::from(n >= 2_500)), "app")
        })
        .collect();
    let mut world = World::new(Some(rollout(30, 300, false)), workloads);
    world.set.spec.rollout.as_mut().unwrap().analysis = vec![
        AnalysisRef {
            template: "error-rate".into(),
            args: BTreeMap::new(),
        },
        AnalysisRef {
            template: "restarts".into(),
            args: BTreeMap::new(),
        },
    ];
    let per_wave = AnalysisTemplateSpec {
        query: r#"sum(rate(http_errors_total{namespace="{{namespace}}",revision="{{revision}}"}[5m]))"#
            .into(),
        success_condition: "result < 0.05".into(),
        interval_seconds: 10,
        args: Vec::new(),
        failure_limit: 0,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    let per_workload = AnalysisTemplateSpec {
        query: r#"sum(increase(kube_pod_container_status_restarts_total{namespace="{{namespace}}",pod=~"{{workload.name}}-.*"}[5m]))"#.into(),
        success_condition: "result == 0".into(),
        interval_seconds: 10,
        args: Vec::new(),
        failure_limit: 0,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    world.analyses = Some(Ok(vec![
        Analysis::resolve(&world.set.spec.rollout.as_ref().unwrap().analysis[0], &per_wave).unwrap(),
        Analysis::resolve(
            &world.set.spec.rollout.as_ref().unwrap().analysis[1],
            &per_workload,
        )
        .unwrap(),
    ]));
    world.settle();
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);

    world.change_content("v2");
    world.settle();
    let mut largest = status_bytes(&world);
    world.heal_all();
    // Wave 0 is analysed: its 2,500 per-workload runs and its per-wave run are shown.
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.0]));
    world.settle();
    largest = largest.max(status_bytes(&world));
    assert_eq!(workloads_measured(&world, 0, "restarts"), 2_500);
    let grouped = runs_of_wave(&world, 0).len();
    assert!(
        grouped <= 4,
        "{grouped} entries: the 2,500 measured alike are grouped"
    );
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    largest = largest.max(status_bytes(&world));
    // Wave 1 moves; wave 0 passed. Its per-workload runs are no longer kept: its per-wave run is.
    assert_eq!(world.rollout().wave, 1);
    let earlier = runs_of_wave(&world, 0);
    assert_eq!(earlier.len(), 1, "{:?}", &earlier[..earlier.len().min(2)]);
    assert_eq!(
        (earlier[0].template.as_str(), earlier[0].verdict),
        ("error-rate", AnalysisVerdict::Passed)
    );
    // Between the waves the status holds every workload and next to no analysis: under etcd's limit.
    let between = status_bytes(&world);
    let analysis_between = json_len(&world.rollout().analysis);
    assert!(analysis_between < 1_024, "{analysis_between} bytes of analysis");
    assert!(between < 1_536 * 1_024, "{between} bytes between the waves");
    world.heal_all();
    largest = largest.max(status_bytes(&world));
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    largest = largest.max(status_bytes(&world));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(workloads_measured(&world, 1, "restarts"), 2_500);
    assert!(
        runs_of_wave(&world, 1)
            .iter()
            .all(|r| r.verdict == AnalysisVerdict::Passed)
    );
    assert_eq!(
        runs_of_wave(&world, 0).len(),
        1,
        "wave 0's record is its per-wave run"
    );
    let status = world.set.status.as_ref().unwrap();
    // Every workload is accounted for: the settled ones by their UIDs (see `cmset_core::revisions::fit`).
    assert_eq!(cmset_core::revisions::fit::workload_count(status), 5_000);
    assert_eq!(status.settled_workloads.as_ref().map(|s| s.count), Some(5_000));
    // Measured: 2,893,666 bytes at the end while every wave's runs were kept; 2,106,262 at the largest
    // while the wave in progress listed a run per workload (about 400 bytes each).
    let end = status_bytes(&world);
    let analysis_end = json_len(&world.rollout().analysis);
    eprintln!(
        "largest status: {largest} bytes; between the waves {between}; at the end {end} (workloads {}, \
         analysis {analysis_end})",
        json_len(&status.workloads),
    );
    assert!(
        analysis_end < 64 * 1_024,
        "{analysis_end} bytes of analysis at the end"
    );
    // Measured: 1,268,993 at the largest while every workload was listed (236 bytes each); 493,197
    // once the list keeps what is not settled (cmset_core::revisions::fit), 111,734 at the end.
    assert!(largest < 1 << 20, "{largest} bytes at the largest");
}
