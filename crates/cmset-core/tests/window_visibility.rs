//! Windows fail closed (issue 36, item 6): while the operator does not know the cluster's
//! ChangeWindows (not listed yet, forbidden, or their list failed), every set's moves wait, whatever
//! its own windows or strategy, and its status says why; once they are known, nothing of it remains.

use std::collections::BTreeMap;

use cmset_api::{
    ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, RolloutPhase, RolloutSpec, RolloutWindow, Strategy,
    TemplateMetadata, WindowKind, WorkloadState,
};
use cmset_core::rollout::plan::{SetInput, SetPlan, plan_set};
use cmset_core::rollout::window_hold::{ClusterView, UNKNOWN_REASON, UnknownCause, WindowsUnknown, verdict};
use cmset_core::set::{SetRef, SourceState};
use cmset_core::status::conditions::WINDOWS_KNOWN;
use cmset_core::workloads::observe::{RevisionView, WorkloadKind, WorkloadView};
use k8s_openapi::api::core::v1::{ConfigMapEnvSource, Container, EnvFromSource, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use support::revision_of;

mod support;

const NOW: i64 = 1_800_000_000;
// kustomize's names of the set's two contents (as in plan_scenarios.rs).
const V1: &str = "nginx-config-d2c65kk9hm";
const V2: &str = "nginx-config-tc2kg4m444";

fn now() -> Timestamp {
    Timestamp::from_second(NOW).unwrap()
}

fn set(version: &str, rollout: Option<RolloutSpec>) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        "nginx-config",
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                metadata: TemplateMetadata::default(),
                data: Some(BTreeMap::from([("APP_VERSION".into(), version.into())])),
                binary_data: None,
            },
            revision_history_limit: 10,
            rollout,
            config_map_name: None,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some("team".into());
    set.metadata.uid = Some("set-uid".into());
    set.metadata.generation = Some(1);
    set
}

fn always_open_allow() -> RolloutSpec {
    RolloutSpec {
        windows: vec![RolloutWindow {
            name: None,
            kind: WindowKind::Allow,
            schedule: "* * * * *".into(),
            duration: "1h".into(),
            time_zone: None,
        }],
        ..RolloutSpec::default()
    }
}

fn immediate() -> RolloutSpec {
    RolloutSpec {
        strategy: Strategy::Immediate,
        ..RolloutSpec::default()
    }
}

fn unknown(cause: UnknownCause) -> ClusterView {
    ClusterView::Unknown(WindowsUnknown {
        cause,
        detail: "403 Forbidden".into(),
    })
}

#[test]
fn unknown_cluster_windows_hold_every_set_whatever_its_windows_or_strategy() {
    let sets = [
        ("no windows", set("1", None)),
        ("its own always-open Allow", set("1", Some(always_open_allow()))),
        ("strategy Immediate", set("1", Some(immediate()))),
    ];
    for (what, set) in &sets {
        let set: SetRef<'_> = set.into();
        for cause in UnknownCause::ALL {
            let state = verdict(set, &unknown(cause), now());
            let held = state
                .held
                .as_ref()
                .unwrap_or_else(|| panic!("{what}, {cause:?}: held"));
            assert_eq!(held.reason, UNKNOWN_REASON, "{what}");
            assert!(held.by.contains("403 Forbidden"), "{what}: {}", held.by);
            assert_eq!(held.opens_at, None, "{what}: no instant ends it, only a list");
            assert_eq!(state.changes_at, None, "{what}");
            assert!(!state.invalid, "{what}");
            assert_eq!(state.cluster_unknown.map(|u| u.cause), Some(cause), "{what}");
            assert!(
                verdict(set, &unknown(cause), now()).holds(set, None),
                "{what}, {cause:?}: a move waits"
            );
        }
        let known = verdict(set, &ClusterView::Known(Vec::new()), now());
        assert_eq!(known.held, None, "{what}: known and empty, nothing holds it");
        assert_eq!(known.cluster_unknown, None, "{what}");
    }
}

#[test]
fn each_cause_has_its_own_condition_reason_and_metric_label() {
    let reasons: Vec<&str> = UnknownCause::ALL.iter().map(|c| c.reason()).collect();
    assert_eq!(
        reasons,
        [
            "ChangeWindowsNotListed",
            "ChangeWindowsForbidden",
            "ChangeWindowsListFailed"
        ]
    );
    let labels: Vec<&str> = UnknownCause::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(labels, ["not_listed", "forbidden", "list_failed"]);
}

fn deployment(name: &str, configmap: &str) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: name.into(),
        uid: format!("uid-{name}"),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(vec![EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: configmap.into(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        template_labels: BTreeMap::from([("app".to_string(), name.to_string())]),
        wave: Default::default(),
        health: Default::default(),
    }
}

fn plan(
    set: &ConfigMapSet,
    revisions: &[RevisionView],
    workloads: &[WorkloadView],
    cluster: &ClusterView,
) -> SetPlan {
    let windows = verdict(set.into(), cluster, now());
    plan_set(&SetInput {
        set: set.into(),
        source: SourceState::Inline,
        revisions,
        workloads,
        history: &[],
        pod_refs: None,
        now: Time(now()),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &windows,
        schemas: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
    })
}

#[test]
fn a_change_waits_while_the_cluster_windows_are_unknown_and_the_set_says_why() {
    let workloads = vec![deployment("web", V1)];
    let first = set("1", None);
    let revisions = vec![revision_of(&first, V1, 1)];
    let mut settled = first.clone();
    settled.status = Some(plan(&first, &revisions, &workloads, &ClusterView::Known(Vec::new())).status);

    let mut changed = settled.clone();
    changed.spec.template.data = Some(BTreeMap::from([("APP_VERSION".into(), "2".into())]));
    changed.metadata.generation = Some(2);
    let held = plan(
        &changed,
        &revisions,
        &workloads,
        &unknown(UnknownCause::Forbidden),
    );
    assert_eq!(
        held.status.current_revision.as_deref(),
        Some(V2),
        "the revision is made"
    );
    let web = &held.status.workloads[0];
    assert_eq!((web.revision.as_str(), web.state), (V1, WorkloadState::Waiting));
    let rollout = held.status.rollout.as_ref().expect("a held rollout is recorded");
    assert_eq!(rollout.phase, RolloutPhase::Waiting);
    assert_eq!(rollout.reason.as_deref(), Some(UNKNOWN_REASON));
    let condition = held.status.condition(WINDOWS_KNOWN).expect("the set says why");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "ChangeWindowsForbidden")
    );
    assert!(
        condition.message.contains("may not list"),
        "{}",
        condition.message
    );

    // Listed again: the workload moves, and the condition is gone.
    let mut waiting = changed.clone();
    waiting.status = Some(held.status.clone());
    let revisions = vec![revision_of(&first, V1, 1), revision_of(&changed, V2, 2)];
    let released = plan(&waiting, &revisions, &workloads, &ClusterView::Known(Vec::new()));
    assert_eq!(released.status.workloads[0].state, WorkloadState::Pending);
    assert_eq!(released.status.condition(WINDOWS_KNOWN), None);
}

#[test]
fn a_set_with_nothing_to_move_still_says_the_windows_are_unknown() {
    let first = set("1", None);
    let revisions = vec![revision_of(&first, V1, 1)];
    let workloads = vec![deployment("web", V1)];
    let plan = plan(&first, &revisions, &workloads, &unknown(UnknownCause::ListFailed));
    let condition = plan.status.condition(WINDOWS_KNOWN).expect("the set says why");
    assert_eq!(condition.reason, "ChangeWindowsListFailed");
}

#[test]
fn a_rollback_is_not_held_while_the_cluster_windows_are_unknown() {
    let spec = RolloutSpec {
        progress_deadline_seconds: 60,
        auto_rollback: true,
        ..RolloutSpec::default()
    };
    let first = set("1", Some(spec.clone()));
    let revisions = vec![revision_of(&first, V1, 1)];
    let mut web = deployment("web", V1);
    web.health = cmset_core::workloads::health::Health::Healthy;
    let known = ClusterView::Known(Vec::new());
    let mut settled = first.clone();
    settled.status = Some(plan(&first, &revisions, &[web.clone()], &known).status);

    // A change moves web, while the windows are known.
    let mut changed = set("2", Some(spec));
    changed.metadata.generation = Some(2);
    changed.status = settled.status.clone();
    let moving = plan(&changed, &revisions, &[web.clone()], &known);
    changed.status = Some(moving.status);
    let revisions = vec![revision_of(&first, V1, 1), revision_of(&changed, V2, 2)];

    // web runs the new revision and fails; now the windows are unknown: the rollback is not held.
    let mut failing = deployment("web", V2);
    failing.health = cmset_core::workloads::health::Health::Failed("crashed".into());
    let failed = plan(
        &changed,
        &revisions,
        &[failing],
        &unknown(UnknownCause::ListFailed),
    );
    let rollout = failed.status.rollout.as_ref().expect("a rollout");
    assert_eq!(rollout.phase, RolloutPhase::Failed, "{rollout:?}");
    let web = &failed.status.workloads[0];
    assert_eq!(web.state, WorkloadState::RolledBack, "{web:?}");
    assert_eq!(web.previous_revision.as_deref(), Some(V1), "{web:?}");
    assert!(
        web.message
            .as_deref()
            .is_some_and(|m| m.starts_with(&format!("rolled back to {V1}"))),
        "{web:?}"
    );
}
