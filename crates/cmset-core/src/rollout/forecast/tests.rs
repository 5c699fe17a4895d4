use std::collections::BTreeMap;

use cmset_api::{ConfigMapSetSpec, ConfigMapTemplate, RolloutSpec, RolloutWindow, WindowKind};
use k8s_openapi::api::core::v1::{ConfigMapEnvSource, Container, EnvFromSource, PodSpec};

use super::*;
use crate::revisions::revision::{inline_identity, set_owner_reference};
use crate::workloads::health::Wave;
use crate::workloads::observe::WorkloadKind;

const START: i64 = 1_800_000_000; // 2027-01-15T08:00:00Z, a Friday

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(START + second).unwrap()
}

fn deployment(name: &str, wave: i32, reads: &str) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: name.into(),
        uid: format!("uid-{name}"),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(vec![EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: reads.to_string(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        template_labels: BTreeMap::new(),
        wave: Wave::Number(wave),
        health: Health::Healthy,
    }
}

fn set_with(value: &str, rollout: Option<RolloutSpec>) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        "app",
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("mode".to_string(), value.to_string())])),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: 10,
            rollout,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some("team".into());
    set.metadata.uid = Some("set-uid".into());
    set.metadata.generation = Some(1);
    set
}

fn revision(set: &ConfigMapSet, number: i64) -> RevisionView {
    let content = inline_identity(set.into()).unwrap();
    RevisionView {
        name: crate::revisions::naming::revision_name("app", &content),
        uid: format!("uid-{number}"),
        labels: BTreeMap::from([(labels::SET.to_string(), "app".to_string())]),
        annotations: BTreeMap::from([
            (labels::REVISION.to_string(), number.to_string()),
            (labels::CONTENT_HASH.to_string(), content),
        ]),
        owner_references: vec![set_owner_reference(set.into())],
        being_deleted: false,
        created: Some(START - 1000 + number),
        resource_version: None,
    }
}

/// Set `app` rolled out on `values` in turn (the last current), its workloads on the last, then
/// changed to `next`.
fn changed(
    values: &[&str],
    next: &str,
    rollout: Option<RolloutSpec>,
    workloads: &[(&str, i32)],
) -> (ConfigMapSet, Vec<RevisionView>, Vec<WorkloadView>) {
    let mut revisions = Vec::new();
    for (i, value) in values.iter().enumerate() {
        revisions.push(revision(&set_with(value, rollout.clone()), i as i64 + 1));
    }
    let last = revisions.last().unwrap().name.clone();
    let workloads: Vec<WorkloadView> = workloads
        .iter()
        .map(|(name, wave)| deployment(name, *wave, &last))
        .collect();
    let mut live = set_with(values.last().unwrap(), rollout.clone());
    let settled = plan_set(&SetInput {
        set: (&live).into(),
        source: SourceState::Inline,
        revisions: &revisions,
        workloads: &workloads,
        history: &[],
        pod_refs: Some(&Default::default()),
        now: Time(at(-500)),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        schemas: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
    });
    live.status = Some(settled.status);
    let mut next_set = set_with(next, rollout);
    next_set.metadata.generation = Some(2);
    next_set.status = live.status;
    (next_set, revisions, workloads)
}

fn run(
    (set, revisions, workloads): (ConfigMapSet, Vec<RevisionView>, Vec<WorkloadView>),
    cluster: ClusterView,
    budget: Option<BudgetView>,
    ready_after: u64,
) -> Forecast {
    forecast(
        World {
            set: SetObject::ConfigMap(set),
            source: SourceState::Inline,
            revisions,
            workloads,
            history: &[],
            pod_refs: Some(&Default::default()),
            cluster,
            overrides: &[],
            budget,
            schemas: &Default::default(),
        },
        Clock {
            start: at(0),
            ready_after: Duration::from_secs(ready_after),
            horizon: Duration::from_secs(7 * 24 * 3600),
        },
    )
}

fn known() -> ClusterView {
    ClusterView::Known(Vec::new())
}

#[test]
fn a_plain_change_creates_a_revision_and_moves_every_reader_at_once() {
    let f = run(
        changed(&["v1"], "v2", None, &[("a", 0), ("b", 0)]),
        known(),
        None,
        0,
    );
    assert_eq!(f.verdict, Verdict::RollsOut);
    let created = f.first.create.as_ref().expect("a new revision");
    assert_eq!(f.first_status.revision, Some(2));
    assert!(f.moves.iter().all(|m| m.at == at(0) && m.to == created.name()));
    assert_eq!(f.moves.len(), 2);
    assert!(matches!(f.end, End::Settled { .. }));
}

#[test]
fn the_same_content_is_no_change_and_earlier_content_a_revert() {
    let f = run(changed(&["v1"], "v1", None, &[("a", 0)]), known(), None, 0);
    assert_eq!(f.verdict, Verdict::NoChange);
    assert!(f.moves.is_empty() && f.first.create.is_none());

    let (set, revisions, workloads) = changed(&["v1", "v2"], "v1", None, &[("a", 0)]);
    let first = revisions[0].name.clone();
    let f = run((set, revisions, workloads), known(), None, 0);
    assert_eq!(
        f.verdict,
        Verdict::Revert {
            revision: first.clone(),
            number: Some(1)
        }
    );
    assert!(f.first.create.is_none(), "no new revision for a revert");
    assert_eq!(f.first_status.revision, Some(3), "renumbered");
    assert_eq!(f.moves[0].to, first);
}

#[test]
fn a_deny_window_holds_until_it_closes_and_the_next_wave_waits_for_stabilization() {
    let rollout = RolloutSpec {
        stabilization_seconds: 60,
        progress_deadline_seconds: 600,
        windows: vec![RolloutWindow {
            name: Some("freeze".into()),
            kind: WindowKind::Deny,
            // Opens at 08:00 UTC every day, for two hours: the change lands as it opens.
            schedule: "0 8 * * *".into(),
            duration: "2h".into(),
            time_zone: None,
        }],
        ..RolloutSpec::default()
    };
    let f = run(
        changed(&["v1"], "v2", Some(rollout), &[("canary", 0), ("web", 1)]),
        known(),
        None,
        30,
    );
    let opens = at(2 * 3600);
    match &f.verdict {
        Verdict::Held { until, by } => {
            assert_eq!(*until, Some(opens));
            assert!(by.contains("freeze"), "{by}");
        }
        other => panic!("{other:?}"),
    }
    let when = |name: &str| f.moves.iter().find(|m| m.name == name).unwrap().at;
    assert_eq!(when("canary"), opens);
    // Healthy 30 s after its move, then stable for 60 s.
    assert_eq!(when("web"), opens + SignedDuration::from_secs(90));
    let web = f.moves.iter().find(|m| m.name == "web").unwrap();
    assert!(web.waited_for.is_some(), "{web:?}");
    assert!(matches!(f.end, End::Settled { .. }), "{:?}", f.end);
}

#[test]
fn unknown_cluster_windows_hold_every_move() {
    let unknown = ClusterView::Unknown(crate::rollout::window_hold::WindowsUnknown {
        cause: crate::rollout::window_hold::UnknownCause::Forbidden,
        detail: "forbidden".into(),
    });
    let f = run(changed(&["v1"], "v2", None, &[("a", 0)]), unknown, None, 0);
    assert!(f.moves.is_empty());
    assert!(
        matches!(f.verdict, Verdict::Held { until: None, .. }),
        "{:?}",
        f.verdict
    );
}

#[test]
fn a_full_budget_keeps_a_reader_waiting_with_the_controller_s_message() {
    let budget = BudgetView {
        cap: 1,
        moving_elsewhere: 1,
        waiting_ahead: 0,
    };
    let f = run(
        changed(&["v1"], "v2", None, &[("a", 0)]),
        known(),
        Some(budget),
        0,
    );
    assert!(f.moves.is_empty());
    let entry = f.status.workloads.iter().find(|w| w.name == "a").unwrap();
    assert_eq!(entry.state, WorkloadState::Waiting);
    assert_eq!(
        entry.message.as_deref(),
        Some("waiting for the cluster-wide rollout budget: 1 of 1 workloads moving, number 1 in line")
    );
    assert!(matches!(f.end, End::Stuck { .. }), "{:?}", f.end);

    // With a free slot, the budget takes turns: one at a time, each once the last is healthy.
    let budget = BudgetView {
        cap: 1,
        moving_elsewhere: 0,
        waiting_ahead: 0,
    };
    let f = run(
        changed(&["v1"], "v2", None, &[("a", 0), ("b", 0)]),
        known(),
        Some(budget),
        20,
    );
    let times: Vec<Timestamp> = f.moves.iter().map(|m| m.at).collect();
    assert_eq!(times, vec![at(0), at(20)]);
}

#[test]
fn an_invalid_content_is_refused_with_the_status_message() {
    let (mut set, revisions, workloads) = changed(&["v1"], "{not json", None, &[("a", 0)]);
    set.spec.template.data = Some(BTreeMap::from([(
        "app.json".to_string(),
        "{not json".to_string(),
    )]));
    set.spec.validation = serde_json::from_value(serde_json::json!({"keys": {"app.json": {}}})).unwrap();
    let f = run((set, revisions, workloads), known(), None, 0);
    match &f.verdict {
        Verdict::Refused { messages } => assert!(!messages.is_empty()),
        other => panic!("{other:?}: {:?}", f.first_status.conditions),
    }
    assert!(f.moves.is_empty() && f.first.create.is_none());
}
