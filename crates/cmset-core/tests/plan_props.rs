//! Properties of the set planner over random worlds:
//! - carrying out a plan and planning again plans nothing (no write, no event): the controller is quiet
//!   once it has converged, whatever it started from;
//! - the current revision and every revision in use survive pruning;
//! - a plan tells its change in one Normal event at most;
//! - revision numbers only grow.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, labels};
use cmset_core::content::validate;
use cmset_core::revisions::hash::content_hash;
use cmset_core::revisions::naming::revision_name;
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::plan::{EventKind, SetPlan};
use cmset_core::set::SetRef;
use cmset_core::workloads::observe::{
    HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind, WorkloadView,
};
use cmset_core::workloads::refs::apply_changes;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMapVolumeSource, Container, PodSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use proptest::prelude::*;
use serde_json::Value;
use support::{plan_seeing, revision_of};

mod support;

/// Pods listed and naming nothing, so that a plan carries out its pruning at once.
const NO_PODS: Option<&BTreeSet<String>> = Some(&BTreeSet::new());

const SET: &str = "app";

fn data(version: u8) -> BTreeMap<String, String> {
    BTreeMap::from([("VERSION".to_string(), version.to_string())])
}

fn name_of(version: u8) -> String {
    revision_name(SET, &content_hash(Some(&data(version)), None, 0))
}

fn the_set(version: u8, limit: i32, team: Option<&str>) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        SET,
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(data(version)),
                ..ConfigMapTemplate::default()
            },
            revision_history_limit: limit,
            rollout: None,
            config_map_name: None,
            ..ConfigMapSetSpec::default()
        },
    );
    if let Some(team) = team {
        set.spec
            .template
            .metadata
            .labels
            .insert("team".into(), team.into());
    }
    set.metadata.namespace = Some("ns".into());
    set.metadata.uid = Some("set-uid".into());
    set.metadata.generation = Some(1);
    set
}

/// A reference target: the bare set, a version's revision, or something unrelated.
fn target_name(choice: u8) -> String {
    match choice {
        0 => SET.to_string(),
        1..=4 => name_of(choice),
        _ => "unrelated".to_string(),
    }
}

fn workload(i: usize, choice: u8) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: format!("w{i}"),
        uid: format!("uid-w{i}"),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "c".into(),
                ..Container::default()
            }],
            volumes: Some(vec![Volume {
                name: "v".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: target_name(choice),
                    ..Default::default()
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        },
        template_labels: BTreeMap::new(),
        wave: Default::default(),
        health: Default::default(),
    }
}

/// Carries out the plan's writes on the observed world, as the API server would.
fn carry_out(set: &mut ConfigMapSet, revisions: &mut Vec<RevisionView>, plan: &SetPlan) {
    if let Some(cm) = &plan.create {
        revisions.push(RevisionView {
            name: cm.metadata().name.clone().unwrap(),
            uid: format!("uid-{}", cm.metadata().name.clone().unwrap()),
            labels: cm.metadata().labels.clone().unwrap_or_default(),
            annotations: cm.metadata().annotations.clone().unwrap_or_default(),
            owner_references: cm.metadata().owner_references.clone().unwrap_or_default(),
            being_deleted: false,
            created: None,
            resource_version: None,
        });
    }
    for (name, patch) in &plan.patches {
        let r = revisions
            .iter_mut()
            .find(|r| &r.name == name)
            .expect("patch of an existing revision");
        let meta = &patch["metadata"];
        merge(&mut r.labels, &meta["labels"]);
        merge(&mut r.annotations, &meta["annotations"]);
        if let Value::Array(owners) = &meta["ownerReferences"] {
            for o in owners {
                let o: OwnerReference = serde_json::from_value(o.clone()).unwrap();
                if !r.owner_references.iter().any(|x| x.uid == o.uid) {
                    r.owner_references.push(o);
                }
            }
        }
    }
    revisions.retain(|r| !plan.prune.iter().any(|p| p.name == r.name));
    set.status = Some(plan.status.clone());
}

fn merge(map: &mut BTreeMap<String, String>, patch: &Value) {
    if let Value::Object(fields) = patch {
        for (k, v) in fields {
            match v {
                Value::Null => {
                    map.remove(k);
                }
                Value::String(s) => {
                    map.insert(k.clone(), s.clone());
                }
                other => panic!("unexpected patch value {other}"),
            }
        }
    }
}

prop_compose! {
    fn world()(
        version in 1u8..=4,
        limit in 0i32..=3,
        existing in proptest::collection::btree_set(1u8..=4, 0..=4),
        workload_choices in proptest::collection::vec(0u8..=5, 0..=3),
        history_choices in proptest::collection::vec((0usize..3, 1u8..=4), 0..=4),
        team in proptest::option::of("[a-z]{1,5}"),
    ) -> (ConfigMapSet, Vec<RevisionView>, Vec<WorkloadView>, Vec<HistoryObject>) {
        let set = the_set(version, limit, team.as_deref());
        let revisions = existing.iter().enumerate().map(|(i, v)| revision_of(&set, &name_of(*v), i as i64 + 1)).collect();
        let workloads: Vec<WorkloadView> = workload_choices.iter().enumerate().map(|(i, c)| workload(i, *c)).collect();
        let history = history_choices
            .iter()
            .enumerate()
            .map(|(i, (owner, v))| HistoryObject {
                kind: HistoryKind::ReplicaSet,
                name: format!("rs{i}"),
                uid: format!("uid-rs{i}"),
                owner_uid: Some(format!("uid-w{owner}")),
                referenced: RefNames {
                    config_maps: [name_of(*v)].into(),
                    ..RefNames::default()
                },
            })
            .collect();
        (set, revisions, workloads, history)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_carried_out_plan_leaves_nothing_to_do((set, revisions, workloads, history) in world()) {
        let (mut set, mut revisions) = (set, revisions);
        let first = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
        carry_out(&mut set, &mut revisions, &first);
        let second = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
        prop_assert!(second.is_quiet((&set).into()), "second plan writes: {:?}", second);
        prop_assert!(second.events.is_empty(), "second plan tells: {:?}", second.events);
    }

    #[test]
    fn current_and_used_revisions_survive(( set, revisions, workloads, history) in world()) {
        let p = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
        let current = p.status.current_revision.clone().unwrap();
        let used: BTreeSet<String> = workloads
            .iter()
            .flat_map(|w| w.referenced_names())
            .chain(history.iter().flat_map(|h| h.referenced.config_maps.iter().cloned()))
            .collect();
        for pruned in &p.prune {
            prop_assert_ne!(&pruned.name, &current);
            prop_assert!(!used.contains(&pruned.name), "pruned {} in use", pruned.name);
        }
        let kept_unused = p.status.history.iter().filter(|h| h.name != current && !used.contains(&h.name)).count();
        prop_assert!(kept_unused <= set.spec.revision_history_limit as usize);
    }

    /// One change of a set is told in one Normal event at most, however much it changed.
    #[test]
    fn a_plan_has_one_normal_event_at_most((set, revisions, workloads, history) in world()) {
        let p = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
        let normal = p.events.iter().filter(|e| e.kind == EventKind::Normal).count();
        prop_assert!(normal <= 1, "{:?}", p.events);
    }

    #[test]
    fn revision_numbers_only_grow((set, revisions, workloads, history) in world()) {
        let highest = revisions.iter().filter_map(|r| r.number()).max().unwrap_or(0);
        let p = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
        let number = p.status.revision.unwrap();
        prop_assert!(number >= highest);
        let current = p.status.current_revision.clone().unwrap();
        let current_existing_number = revisions.iter().find(|r| r.name == current).and_then(|r| r.number());
        if current_existing_number != Some(highest) {
            prop_assert_eq!(number, highest + 1, "a new or reused revision becomes the newest");
        }
    }
}

// ------------------------------------------------------------------------------------------------------
// A wilder world, and the whole loop: the set's plan carried out, then every workload's, until quiet.
// ------------------------------------------------------------------------------------------------------

/// What may be odd about an existing revision.
#[derive(Clone, Copy, Debug)]
enum Oddity {
    None,
    /// Someone removed its content mark.
    LostMark,
    /// Its number does not parse.
    BadNumber,
    /// It is being deleted.
    BeingDeleted,
    /// Someone removed its label (cmset's own metadata, to be restored).
    LostLabel,
}

fn oddity() -> impl Strategy<Value = Oddity> {
    prop_oneof![
        4 => Just(Oddity::None),
        1 => Just(Oddity::LostMark),
        1 => Just(Oddity::BadNumber),
        1 => Just(Oddity::BeingDeleted),
        1 => Just(Oddity::LostLabel),
    ]
}

fn odd_revision(set: &ConfigMapSet, version: u8, number: i64, oddity: Oddity) -> RevisionView {
    let mut r = revision_of(set, &name_of(version), number);
    match oddity {
        Oddity::None => {}
        Oddity::LostMark => {
            r.annotations.remove(labels::CONTENT_HASH);
        }
        Oddity::BadNumber => {
            r.annotations.insert(labels::REVISION.into(), "seven".into());
        }
        Oddity::BeingDeleted => r.being_deleted = true,
        Oddity::LostLabel => {
            r.labels.remove(labels::SET);
        }
    }
    r
}

/// A ConfigMap someone else made under the name the set's content would get: a collision.
fn squatter(version: u8) -> RevisionView {
    RevisionView {
        name: name_of(version),
        uid: "uid-squatter".into(),
        labels: BTreeMap::from([(labels::SET.to_string(), SET.to_string())]),
        ..RevisionView::default()
    }
}

/// Template metadata, sometimes invalid (a reserved prefix, a bad label value): the invalid-spec path.
fn template_metadata() -> impl Strategy<Value = Vec<(bool, String, String)>> {
    let key = prop_oneof![
        3 => "[a-z]{1,6}",
        1 => Just("cmset.dev/x".to_string()),
        1 => "[a-z]{1,3}/[A-Za-z]{1,3}",
    ];
    let value = prop_oneof![3 => "[a-z0-9]{0,6}", 1 => Just("bad value!".to_string())];
    prop::collection::vec((any::<bool>(), key, value), 0..3)
}

prop_compose! {
    fn wild_world()(
        (set, revisions, workloads, history) in world(),
        oddities in proptest::collection::vec(oddity(), 4),
        squat in proptest::option::of(1u8..=4),
        metadata in template_metadata(),
        binary in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..8)),
    ) -> (ConfigMapSet, Vec<RevisionView>, Vec<WorkloadView>, Vec<HistoryObject>) {
        let mut set = set;
        for (is_label, key, value) in metadata {
            let meta = &mut set.spec.template.metadata;
            if is_label { meta.labels.insert(key, value) } else { meta.annotations.insert(key, value) };
        }
        if let Some(bytes) = binary {
            set.spec.template.binary_data = Some(BTreeMap::from([("bin".to_string(), ByteString(bytes))]));
        }
        let mut revisions: Vec<RevisionView> = revisions
            .into_iter()
            .zip(oddities)
            .map(|(r, oddity)| {
                let version = (1..=4).find(|v| name_of(*v) == r.name).unwrap();
                odd_revision(&set, version, r.number().unwrap_or(0), oddity)
            })
            .collect();
        if let Some(version) = squat.filter(|v| !revisions.iter().any(|r| r.name == name_of(*v))) {
            revisions.push(squatter(version));
        }
        (set, revisions, workloads, history)
    }
}

/// Where the set's workloads point once its plan is carried out: each workload's own plan, applied.
fn move_workloads(set: &ConfigMapSet, revisions: &[RevisionView], workloads: &mut [WorkloadView]) -> usize {
    let valid = validate::validate(SET, &set.spec).is_ok();
    let identity = valid.then(|| inline_identity(SetRef::from(set)).unwrap());
    let mut moved = 0;
    for w in workloads.iter_mut() {
        let targets: Vec<SetTarget> = SetTarget::observed(set.into(), identity.as_deref(), revisions, &w.uid)
            .into_iter()
            .collect();
        let plan = plan_workload(w, &targets);
        if !plan.is_empty() {
            w.pod_spec = apply_changes(&w.pod_spec, &plan.changes).expect("a fresh plan applies");
            moved += 1;
        }
    }
    moved
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the world (lost marks, unreadable numbers, revisions being deleted, a name taken by
    /// someone else, invalid template metadata, binary data), carrying out the set's plan and then every
    /// workload's, again and again, reaches a world where nothing plans a write or an event within a few
    /// rounds, and stays there. Then a valid set is Ready and no workload still names the bare set.
    #[test]
    fn the_whole_loop_converges_and_then_is_quiet((set, revisions, workloads, history) in wild_world()) {
        let (mut set, mut revisions, mut workloads) = (set, revisions, workloads);
        let mut rounds = 0;
        loop {
            let plan = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
            let set_quiet = plan.is_quiet((&set).into()) && plan.events.is_empty();
            carry_out(&mut set, &mut revisions, &plan);
            let moved = move_workloads(&set, &revisions, &mut workloads);
            if set_quiet && moved == 0 {
                break;
            }
            rounds += 1;
            // A collision costs one round, the new revision one, moving the workloads one, the status
            // that records them one.
            prop_assert!(rounds <= 5, "no convergence after {} rounds: {:?}", rounds, plan);
        }
        let again = plan_seeing(&set, &revisions, &workloads, &history, NO_PODS);
        prop_assert!(again.is_quiet((&set).into()) && again.events.is_empty(), "{:?}", again);
        prop_assert_eq!(move_workloads(&set, &revisions, &mut workloads), 0);
        if validate::validate(SET, &set.spec).is_ok() {
            let ready = set.condition("Ready").expect("a Ready condition");
            prop_assert_eq!(ready.status.as_str(), "True", "{:?}", ready);
            for w in &workloads {
                prop_assert!(!w.referenced_names().contains(SET), "{} still names the bare set", w.name);
            }
        }
    }
}
