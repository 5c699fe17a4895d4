//! The set planner and the workload controller ask one decision ([`decide`]), so they cannot disagree:
//! over random sets, statuses, revisions, workloads and retained history (waves left out), the state the
//! planner records for a workload is `Pending` exactly when the workload controller's plan for it moves a
//! reference, and `Current` or `Pinned` when it moves none; a workload the planner does not list is one
//! the controller leaves alone.
//!
//! The controller is asked as it will observe the world once the set's plan is carried out (the new
//! revision made, old ones pruned) and before the planned status is written: the status it reads is the
//! one the planner started from.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{
    ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, ConfigMapTemplate, RevisionStatus, WorkloadState,
    WorkloadStatus, labels,
};
use cmset_core::revisions::hash::content_hash;
use cmset_core::revisions::naming::revision_name;
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::decide::{self, Identity, Observed};
use cmset_core::rollout::pinning::plan_workload;
use cmset_core::rollout::plan::SetPlan;
use cmset_core::rollout::waves::Gate;
use cmset_core::set::SetRef;
use cmset_core::workloads::observe::{
    HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind, WorkloadView,
};
use k8s_openapi::api::core::v1::{ConfigMapEnvSource, Container, EnvFromSource, PodSpec};
use proptest::prelude::*;
use support::{plan_seeing, revision_of};

mod support;

const SET: &str = "app";
const WORKLOADS: usize = 4;

fn data(version: u8) -> BTreeMap<String, String> {
    BTreeMap::from([("VERSION".to_string(), version.to_string())])
}

fn name_of(version: u8) -> String {
    revision_name(SET, &content_hash(Some(&data(version)), None, 0))
}

/// A name a reference or a record may hold: the bare set, a version's revision, a name of a revision's
/// form that no revision ever had, or something unrelated.
fn name(choice: u8) -> String {
    match choice {
        0 => SET.to_string(),
        1..=4 => name_of(choice),
        5 => "app-zzzzzzzzzz".to_string(),
        _ => "unrelated".to_string(),
    }
}

fn any_name() -> impl Strategy<Value = String> {
    (0u8..=6).prop_map(name)
}

fn revision_name_choice() -> impl Strategy<Value = String> {
    (1u8..=5).prop_map(name)
}

fn uid(i: usize) -> String {
    format!("uid-w{i}")
}

fn workload(i: usize, names: &[String]) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: format!("w{i}"),
        uid: uid(i),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "c".into(),
                env_from: Some(
                    names
                        .iter()
                        .map(|n| EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: n.clone(),
                                optional: None,
                            }),
                            ..EnvFromSource::default()
                        })
                        .collect(),
                ),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        template_labels: BTreeMap::new(),
        wave: Default::default(),
        health: Default::default(),
    }
}

fn state() -> impl Strategy<Value = WorkloadState> {
    prop_oneof![
        Just(WorkloadState::Current),
        Just(WorkloadState::Pending),
        Just(WorkloadState::Pinned),
        Just(WorkloadState::Waiting),
        Just(WorkloadState::RolledBack),
    ]
}

/// A status entry the set's status may hold for workload `i`: any revision, any state, any record.
fn entry() -> impl Strategy<Value = (usize, String, WorkloadState, Option<String>)> {
    (
        0..WORKLOADS,
        any_name(),
        state(),
        proptest::option::of(revision_name_choice()),
    )
}

prop_compose! {
    /// What the set's status says, from any earlier moment: no rollout is recorded (waves are left out).
    fn status()(
        observed_generation in proptest::option::of(1i64..=3),
        current in proptest::option::of(revision_name_choice()),
        history in proptest::collection::btree_set(1u8..=5, 0..=5),
        entries in proptest::collection::vec(entry(), 0..=WORKLOADS),
    ) -> ConfigMapSetStatus {
        ConfigMapSetStatus {
            observed_generation,
            current_revision: current,
            history: history
                .into_iter()
                .map(|v| RevisionStatus { name: name(v), revision: i64::from(v), ..RevisionStatus::default() })
                .collect(),
            workloads: entries
                .into_iter()
                .map(|(i, revision, state, rolled_out)| WorkloadStatus {
                    kind: "Deployment".into(),
                    name: format!("w{i}"),
                    uid: uid(i),
                    revision,
                    state,
                    rolled_out,
                    ..WorkloadStatus::default()
                })
                .collect(),
            ..ConfigMapSetStatus::default()
        }
    }
}

/// An existing revision of a version, as found: fine, without its content mark, or being deleted.
fn existing() -> impl Strategy<Value = (u8, u8)> {
    (1u8..=4, 0u8..=5)
}

prop_compose! {
    fn world()(
        version in 1u8..=4,
        generation in 1i64..=3,
        limit in 0i32..=3,
        existing in proptest::collection::vec(existing(), 0..=4),
        status in proptest::option::of(status()),
        references in proptest::collection::vec(proptest::collection::vec(any_name(), 1..=2), 0..=WORKLOADS),
        history in proptest::collection::vec((0..WORKLOADS, 1u8..=4), 0..=4),
    ) -> (ConfigMapSet, Vec<RevisionView>, Vec<WorkloadView>, Vec<HistoryObject>) {
        let mut set = ConfigMapSet::new(
            SET,
            ConfigMapSetSpec {
                template: ConfigMapTemplate { data: Some(data(version)), ..ConfigMapTemplate::default() },
                revision_history_limit: limit,
                rollout: None,
                config_map_name: None,
                ..ConfigMapSetSpec::default()
            },
        );
        set.metadata.namespace = Some("ns".into());
        set.metadata.uid = Some("set-uid".into());
        set.metadata.generation = Some(generation);
        set.status = status;
        let mut revisions: Vec<RevisionView> = Vec::new();
        for (number, (v, oddity)) in (1..).zip(existing) {
            if revisions.iter().any(|r| r.name == name_of(v)) {
                continue;
            }
            let mut r = revision_of(&set, &name_of(v), number);
            match oddity {
                0 => { r.annotations.remove(labels::CONTENT_HASH); }
                1 => r.being_deleted = true,
                _ => {}
            }
            revisions.push(r);
        }
        let workloads = references.iter().enumerate().map(|(i, names)| workload(i, names)).collect();
        let history = history
            .into_iter()
            .enumerate()
            .map(|(i, (owner, v))| HistoryObject {
                kind: HistoryKind::ReplicaSet,
                name: format!("rs{i}"),
                uid: format!("uid-rs{i}"),
                owner_uid: Some(uid(owner)),
                referenced: RefNames {
                    config_maps: [name_of(v)].into(),
                    ..RefNames::default()
                },
            })
            .collect();
        (set, revisions, workloads, history)
    }
}

/// The revisions the workload controller observes once `plan`'s writes are made.
fn revisions_after(revisions: &[RevisionView], plan: &SetPlan) -> Vec<RevisionView> {
    let created = plan.create.as_ref().map(|new| {
        let metadata = new.metadata();
        RevisionView {
            name: new.name().to_string(),
            uid: format!("uid-{}", new.name()),
            labels: metadata.labels.clone().unwrap_or_default(),
            annotations: metadata.annotations.clone().unwrap_or_default(),
            owner_references: metadata.owner_references.clone().unwrap_or_default(),
            being_deleted: false,
            created: None,
            resource_version: None,
        }
    });
    revisions
        .iter()
        .filter(|r| !plan.prune.iter().any(|p| p.name == r.name))
        .cloned()
        .chain(created)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn the_planner_records_pending_exactly_when_the_controller_moves_a_reference(
        (set, revisions, workloads, history) in world()
    ) {
        let plan = plan_seeing(&set, &revisions, &workloads, &history, Some(&BTreeSet::new()));
        // A name taken by a revision being deleted is a collision: nothing is planned but the count.
        if plan.events.iter().any(|e| e.reason == "RevisionCollision") {
            return Ok(());
        }
        let identity = inline_identity(SetRef::from(&set)).unwrap();
        let after = revisions_after(&revisions, &plan);
        let observed = Observed {
            set: (&set).into(),
            identity_generation: set.metadata.generation,
            identity: Identity::Known(&identity),
            revisions: &after,
            lowest_wave: 0,
            window_held: false,
            window_override: None,
        };
        for w in &workloads {
            let target = decide::target_seeing(&observed, w, &history);
            prop_assert!(target.is_ok(), "{} undecided: {:?}", w.name, target);
            let target = target.unwrap();
            prop_assert_eq!(&target.gate, &Gate::Open);
            prop_assert_eq!(Some(&target.current), plan.status.current_revision.as_ref());
            if history.iter().all(|h| h.owner_uid.as_deref() != Some(w.uid.as_str())) {
                // Without history of its own, an observer that reads none decides the same.
                prop_assert_eq!(decide::target(&observed, w), Ok(target.clone()));
            }
            let moves = !plan_workload(w, std::slice::from_ref(&target)).is_empty();
            match plan.status.workloads.iter().find(|e| e.uid == w.uid) {
                None => prop_assert!(!moves, "{} is not listed, yet the controller moves it", w.name),
                Some(entry) => {
                    prop_assert!(
                        matches!(entry.state, WorkloadState::Current | WorkloadState::Pending | WorkloadState::Pinned),
                        "{:?}", entry
                    );
                    prop_assert_eq!(
                        entry.state == WorkloadState::Pending,
                        moves,
                        "{} is {:?}; the controller's plan: {:?}",
                        w.name,
                        entry.state,
                        plan_workload(w, std::slice::from_ref(&target))
                    );
                }
            }
        }
    }
}
