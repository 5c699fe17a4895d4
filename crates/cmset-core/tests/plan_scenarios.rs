//! The set planner and the workload planner, scenario by scenario: literal observations in, the exact
//! writes out, and no write at all when nothing changed.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{
    ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, ConfigMapTemplate, TemplateMetadata, WorkloadState,
    WorkloadStatus, labels,
};
use cmset_core::revisions::revision::{NewRevision, inline_identity, set_owner_reference};
use cmset_core::rollout::decide::{self, Identity, Observed, Undecided};
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::plan::{EVENT_MESSAGE_MAX_LEN, EventKind, PlannedEvent, SetPlan};
use cmset_core::set::SetRef;
use cmset_core::workloads::observe::{
    HistoryKind, HistoryObject, RefNames, RevisionView, WorkloadKind, WorkloadView,
};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapVolumeSource, Container, EnvFromSource, PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;
use support::{plan_seeing, revision_of};

mod support;

const SET_UID: &str = "set-uid";

fn set_with(name: &str, data: &[(&str, &str)], limit: i32) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        name,
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                metadata: TemplateMetadata::default(),
                data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                binary_data: None,
            },
            revision_history_limit: limit,
            rollout: None,
            config_map_name: None,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some("team".into());
    set.metadata.uid = Some(SET_UID.into());
    set.metadata.generation = Some(1);
    set
}

fn deployment(name: &str, configmaps: &[&str]) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: name.into(),
        uid: format!("uid-{name}"),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(
                    configmaps
                        .iter()
                        .map(|c| EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: c.to_string(),
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
        template_labels: BTreeMap::from([("app".to_string(), name.to_string())]),
        wave: Default::default(),
        health: Default::default(),
    }
}

fn replica_set(name: &str, owner: &str, names: &[&str]) -> HistoryObject {
    HistoryObject {
        kind: HistoryKind::ReplicaSet,
        name: name.into(),
        uid: format!("uid-{name}"),
        owner_uid: Some(format!("uid-{owner}")),
        referenced: RefNames {
            config_maps: names.iter().map(|n| n.to_string()).collect(),
            ..RefNames::default()
        },
    }
}

/// Plans before Pods were listed, as a first plan does.
fn plan(
    set: &ConfigMapSet,
    revisions: &[RevisionView],
    workloads: &[WorkloadView],
    history: &[HistoryObject],
) -> SetPlan {
    plan_seeing(set, revisions, workloads, history, None)
}

/// The set after its controller wrote the planned status.
fn settled(set: &ConfigMapSet, plan: &SetPlan) -> ConfigMapSet {
    let mut next = set.clone();
    next.status = Some(plan.status.clone());
    next
}

/// Status and reason of the planned Ready condition.
fn ready_of(plan: &SetPlan) -> (&str, &str) {
    let ready = plan
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    (ready.status.as_str(), ready.reason.as_str())
}

fn reasons(plan: &SetPlan) -> Vec<&'static str> {
    plan.events.iter().map(|e| e.reason).collect()
}

// kustomize names these (checked with `kubectl kustomize`): see prior-art notes.
const V1: &str = "nginx-config-d2c65kk9hm";
const V2: &str = "nginx-config-tc2kg4m444";

#[test]
fn a_new_set_gets_its_first_revision_with_the_kustomize_name() {
    let set = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let p = plan(&set, &[], &[], &[]);
    let cm = p
        .create
        .as_ref()
        .and_then(NewRevision::config_map)
        .expect("a revision ConfigMap to create");
    assert_eq!(cm.metadata.name.as_deref(), Some(V1));
    assert_eq!(cm.immutable, Some(true));
    assert_eq!(cm.data.as_ref().unwrap()["APP_VERSION"], "1");
    assert_eq!(cm.metadata.labels.as_ref().unwrap()[labels::SET], "nginx-config");
    assert_eq!(cm.metadata.annotations.as_ref().unwrap()[labels::REVISION], "1");
    assert_eq!(
        cm.metadata.owner_references.as_ref().unwrap(),
        &vec![set_owner_reference((&set).into())]
    );
    assert_eq!(p.status.current_revision.as_deref(), Some(V1));
    assert_eq!(p.status.revision, Some(1));
    assert_eq!(p.status.observed_generation, Some(1));
    assert_eq!(reasons(&p), vec!["RevisionCreated"]);
    assert_eq!(ready_of(&p), ("True", "RolledOut"));
}

#[test]
fn an_unchanged_world_plans_no_write() {
    let set = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let revisions = vec![revision_of(&set, V1, 1)];
    let workloads = vec![deployment("web", &[V1])];
    let history = vec![replica_set("web-1", "web", &[V1])];
    let first = plan(&set, &revisions, &workloads, &history);
    // The history object becomes an extra owner of the revision it names.
    assert_eq!(first.patches.len(), 1);
    let mut revisions = revisions;
    revisions[0].owner_references.push(OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-1".into(),
        uid: "uid-web-1".into(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    });
    let set = settled(&set, &first);
    let again = plan(&set, &revisions, &workloads, &history);
    assert!(
        again.is_quiet((&set).into()),
        "second plan should be quiet: {again:?}"
    );
    assert!(again.events.is_empty());
}

#[test]
fn history_objects_become_owners_of_the_revisions_they_name() {
    let set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    let history = vec![
        replica_set("web-1", "web", &[V1]),
        replica_set("web-2", "web", &[V2, "unrelated"]),
    ];
    let p = plan(&set, &revisions, &[], &history);
    assert_eq!(
        p.patches,
        vec![
            (
                V1.to_string(),
                json!({"metadata": {"ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "uid-web-1",
                    "controller": false, "blockOwnerDeletion": false
                }]}})
            ),
            (
                V2.to_string(),
                json!({"metadata": {"ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-2", "uid": "uid-web-2",
                    "controller": false, "blockOwnerDeletion": false
                }]}})
            ),
        ]
    );
}

#[test]
fn a_readers_new_replica_sets_make_the_reader_an_owner_once_not_each_replica_set() {
    let set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    // V2 was made before `web` existed, so `web` does not own it yet.
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    let web = vec![deployment("web", &[V2])];
    let restarted = vec![
        replica_set("web-2a", "web", &[V2]),
        replica_set("web-2b", "web", &[V2]),
    ];
    let p = plan(&set, &revisions, &web, &restarted);
    assert_eq!(
        p.patches,
        vec![(
            V2.to_string(),
            json!({"metadata": {"ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web",
                "controller": false, "blockOwnerDeletion": false
            }]}})
        )],
        "one owner for both ReplicaSets: their Deployment"
    );
    // Once it owns V2, the next restart's ReplicaSet needs nothing.
    let mut owned = revisions.clone();
    owned[1]
        .owner_references
        .push(cmset_core::revisions::revision::reader_owner_reference(&web[0]).unwrap());
    let mut more = restarted.clone();
    more.push(replica_set("web-2c", "web", &[V2]));
    assert_eq!(plan(&set, &owned, &web, &more).patches, vec![]);
    // A history object whose controller reads no set (a Job of a CronJob, a ReplicaSet of a workload
    // the set does not see) is an owner itself.
    let orphaned = vec![replica_set("gone-1", "gone", &[V2])];
    let p = plan(&set, &owned, &web, &orphaned);
    assert_eq!(p.patches[0].1["metadata"]["ownerReferences"][0]["name"], "gone-1");
}

#[test]
fn new_content_makes_a_new_revision_and_marks_workloads_pending() {
    let set1 = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let revisions = vec![revision_of(&set1, V1, 1)];
    let workloads = vec![deployment("web", &[V1])];
    let set1 = settled(&set1, &plan(&set1, &revisions, &workloads, &[]));
    assert_eq!(
        set1.status.as_ref().unwrap().workloads[0].rolled_out.as_deref(),
        Some(V1)
    );

    let mut set2 = set1.clone();
    set2.spec.template.data = Some(BTreeMap::from([("APP_VERSION".into(), "2".into())]));
    set2.metadata.generation = Some(2);
    let p = plan(&set2, &revisions, &workloads, &[]);
    assert_eq!(p.create.as_ref().unwrap().metadata().name.as_deref(), Some(V2));
    assert_eq!(p.status.revision, Some(2));
    let w = &p.status.workloads[0];
    assert_eq!(
        (w.revision.as_str(), w.state, w.rolled_out.as_deref()),
        (V1, WorkloadState::Pending, Some(V1))
    );
    assert_eq!(ready_of(&p), ("False", "RolloutPending"));
}

#[test]
fn a_rollback_pins_the_workload_and_says_so_once() {
    let set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    // cmset had rolled web out to V2 ...
    let on_v2 = plan(&set, &revisions, &[deployment("web", &[V2])], &[]);
    let set = settled(&set, &on_v2);
    // ... then `kubectl rollout undo` put V1 back.
    let rolled_back = vec![deployment("web", &[V1])];
    let p = plan(&set, &revisions, &rolled_back, &[]);
    let w = &p.status.workloads[0];
    assert_eq!(
        (w.revision.as_str(), w.state, w.rolled_out.as_deref()),
        (V1, WorkloadState::Pinned, Some(V2))
    );
    assert_eq!(reasons(&p), vec!["WorkloadPinned"]);
    let ready = p.status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.status, "True");
    // The workload planner leaves it alone.
    let set = settled(&set, &p);
    let target = SetTarget::from_set((&set).into(), "uid-web").unwrap();
    assert!(plan_workload(&rolled_back[0], &[target]).is_empty());
    // And the next plan is quiet.
    let again = plan(&set, &revisions, &rolled_back, &[]);
    assert!(
        again.is_quiet((&set).into()) && again.events.is_empty(),
        "{again:?}"
    );
}

#[test]
fn a_lost_status_is_rebuilt_from_history_without_fighting_the_rollback() {
    let set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    let rolled_back = vec![deployment("web", &[V1])];
    // The Deployment's retained ReplicaSet shows it ran V2: that was a rollback, not a missed update.
    let history = vec![
        replica_set("web-1", "web", &[V1]),
        replica_set("web-2", "web", &[V2]),
    ];
    let p = plan(&set, &revisions, &rolled_back, &history);
    assert_eq!(p.status.workloads[0].state, WorkloadState::Pinned);
    assert_eq!(p.status.workloads[0].rolled_out.as_deref(), Some(V2));
}

#[test]
fn a_workload_cmset_never_moved_is_moved_after_a_crash() {
    let set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    let mut set = set;
    set.status = Some(ConfigMapSetStatus {
        observed_generation: Some(1),
        current_revision: Some(V2.into()),
        revision: Some(2),
        workloads: vec![WorkloadStatus {
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            revision: V1.into(),
            state: WorkloadState::Current,
            rolled_out: Some(V1.into()),
            ..Default::default()
        }],
        ..ConfigMapSetStatus::default()
    });
    let on_v1 = vec![deployment("web", &[V1])];
    let p = plan(&set, &revisions, &on_v1, &[replica_set("web-1", "web", &[V1])]);
    assert_eq!(p.status.workloads[0].state, WorkloadState::Pending);
    let set = settled(&set, &p);
    let target = SetTarget::from_set((&set).into(), "uid-web").unwrap();
    let changes = plan_workload(&on_v1[0], &[target]).changes;
    assert_eq!(changes.len(), 1);
    assert_eq!((changes[0].from.as_str(), changes[0].to.as_str()), (V1, V2));
}

#[test]
fn returning_to_old_content_renumbers_the_existing_revision() {
    let set = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    let p = plan(&set, &revisions, &[], &[]);
    assert!(p.create.is_none(), "no new object for old content");
    assert_eq!(p.status.current_revision.as_deref(), Some(V1));
    assert_eq!(p.status.revision, Some(3));
    assert_eq!(
        p.patches,
        vec![(
            V1.to_string(),
            json!({"metadata": {"annotations": {labels::REVISION: "3"}}})
        )]
    );
    assert_eq!(reasons(&p), vec!["RevisionReused"]);
    assert_eq!(
        p.status
            .history
            .iter()
            .map(|h| (h.name.as_str(), h.revision))
            .collect::<Vec<_>>(),
        vec![(V1, 3), (V2, 2)]
    );
}

#[test]
fn template_metadata_changes_update_every_revision_in_place() {
    let mut set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    set.spec
        .template
        .metadata
        .labels
        .insert("team".into(), "payments".into());
    set.spec
        .template
        .metadata
        .annotations
        .insert("owner".into(), "alice".into());
    let p = plan(&set, &revisions, &[], &[]);
    assert!(p.create.is_none());
    let expected = json!({"metadata": {"labels": {"team": "payments"}, "annotations": {"owner": "alice"}}});
    assert_eq!(
        p.patches,
        vec![(V1.to_string(), expected.clone()), (V2.to_string(), expected)]
    );
}

/// Set `nginx-config` with V2's content and `limit`, after `count` revisions of other content, all still
/// there, numbered from 1 and named `nginx-config-0000000001` and so on.
fn with_old_revisions(limit: i32, count: i64) -> (ConfigMapSet, Vec<RevisionView>) {
    let mut set = set_with("nginx-config", &[("APP_VERSION", "2")], limit);
    let revisions = (1..=count)
        .map(|n| revision_of(&set, &format!("nginx-config-{n:0>10}"), n))
        .collect();
    set.status = Some(ConfigMapSetStatus {
        revision: Some(count),
        ..ConfigMapSetStatus::default()
    });
    (set, revisions)
}

#[test]
fn old_unused_revisions_beyond_the_limit_are_pruned_oldest_first_after_asking_pods() {
    let (set, mut revisions) = with_old_revisions(2, 5);
    revisions.push(revision_of(&set, V2, 6));
    let first = plan(&set, &revisions, &[], &[]);
    assert!(
        first.needs_pods && first.prune.is_empty(),
        "pods are consulted before any delete"
    );
    let p = plan_seeing(&set, &revisions, &[], &[], Some(&BTreeSet::new()));
    let pruned: Vec<&str> = p.prune.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(
        pruned,
        vec![
            "nginx-config-0000000001",
            "nginx-config-0000000002",
            "nginx-config-0000000003"
        ]
    );
    assert_eq!(p.prune[0].uid, "uid-nginx-config-0000000001");
    assert_eq!(p.status.history.len(), 3, "current plus the limit");
    // Three deletions, one event.
    assert_eq!(
        p.events,
        vec![PlannedEvent {
            kind: EventKind::Normal,
            reason: "RevisionPruned",
            message: "Deleted revision 1 (nginx-config-0000000001): unused, beyond revisionHistoryLimit 2; \
                      Deleted revision 2 (nginx-config-0000000002): unused, beyond revisionHistoryLimit 2; \
                      Deleted revision 3 (nginx-config-0000000003): unused, beyond revisionHistoryLimit 2"
                .to_string(),
        }]
    );
}

#[test]
fn a_change_that_creates_and_prunes_is_told_in_one_event() {
    let (set, revisions) = with_old_revisions(1, 3);
    let p = plan_seeing(&set, &revisions, &[], &[], Some(&BTreeSet::new()));
    assert_eq!(p.create.as_ref().unwrap().metadata().name.as_deref(), Some(V2));
    assert_eq!(p.prune.len(), 2);
    // The creation is what matters most: its reason; the deletions follow in its message.
    assert_eq!(
        p.events,
        vec![PlannedEvent {
            kind: EventKind::Normal,
            reason: "RevisionCreated",
            message: format!(
                "Created revision 4 as ConfigMap {V2}; \
                 Deleted revision 1 (nginx-config-0000000001): unused, beyond revisionHistoryLimit 1; \
                 Deleted revision 2 (nginx-config-0000000002): unused, beyond revisionHistoryLimit 1"
            ),
        }]
    );
}

#[test]
fn a_long_story_is_cut_to_what_an_event_holds() {
    let (set, mut revisions) = with_old_revisions(0, 40);
    revisions.push(revision_of(&set, V2, 41));
    let p = plan_seeing(&set, &revisions, &[], &[], Some(&BTreeSet::new()));
    assert_eq!(p.prune.len(), 40);
    assert_eq!(reasons(&p), vec!["RevisionPruned"]);
    let message = &p.events[0].message;
    assert!(message.len() <= EVENT_MESSAGE_MAX_LEN, "{} bytes", message.len());
    let told = message.matches("Deleted revision").count();
    assert!(told > 5, "{message}");
    assert!(
        message.ends_with(&format!("; and {} more", 40 - told)),
        "{message}"
    );
}

#[test]
fn revisions_in_use_are_never_pruned_whatever_the_limit() {
    let (set, mut revisions) = with_old_revisions(0, 5);
    revisions.push(revision_of(&set, V2, 6));
    // 1: named by a retained ReplicaSet; 2: has another owner; 3: named by a Pod; 4: by a workload.
    revisions[1].owner_references.push(OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ControllerRevision".into(),
        name: "db-1".into(),
        uid: "uid-db-1".into(),
        controller: Some(false),
        block_owner_deletion: Some(false),
    });
    let history = vec![replica_set("web-1", "web", &["nginx-config-0000000001"])];
    let workloads = vec![deployment("web", &["nginx-config-0000000004"])];
    let pods = BTreeSet::from(["nginx-config-0000000003".to_string()]);
    let p = plan_seeing(&set, &revisions, &workloads, &history, Some(&pods));
    let pruned: Vec<&str> = p.prune.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(pruned, vec!["nginx-config-0000000005"]);
}

#[test]
fn an_invalid_spec_is_reported_and_nothing_else_is_written() {
    let mut set = set_with("nginx-config", &[("bad key!", "1"), ("also/bad", "2")], 10);
    set.status = Some(ConfigMapSetStatus {
        observed_generation: Some(0),
        current_revision: Some(V1.into()),
        revision: Some(1),
        ..ConfigMapSetStatus::default()
    });
    let revisions = vec![revision_of(&set, V1, 1)];
    let p = plan(&set, &revisions, &[], &[]);
    assert!(p.create.is_none() && p.patches.is_empty() && p.prune.is_empty());
    assert_eq!(
        p.status.current_revision.as_deref(),
        Some(V1),
        "the last good revision stays current"
    );
    assert_eq!(ready_of(&p), ("False", "InvalidSpec"));
    let ready = p.status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert!(
        ready.message.contains("bad key!") && ready.message.contains("also/bad"),
        "{}",
        ready.message
    );
    assert!(
        p.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == "True")
    );
    assert_eq!(reasons(&p), vec!["InvalidSpec"]);
    let set = settled(&set, &p);
    let again = plan(&set, &revisions, &[], &[]);
    assert!(again.is_quiet((&set).into()) && again.events.is_empty());
}

#[test]
fn a_name_taken_by_someone_else_bumps_the_collision_count() {
    let set = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let foreign = RevisionView {
        name: V1.into(),
        uid: "other".into(),
        labels: BTreeMap::from([(labels::SET.to_string(), "nginx-config".to_string())]),
        ..RevisionView::default()
    };
    let p = plan(&set, &[foreign], &[], &[]);
    assert!(p.create.is_none());
    assert_eq!(p.status.collision_count, Some(1));
    assert_eq!(reasons(&p), vec!["RevisionCollision"]);
    // With the count recorded, the next plan creates a differently named revision.
    let set = settled(&set, &p);
    let next = plan(&set, &[], &[], &[]);
    let name = next.create.unwrap().metadata().name.clone().unwrap();
    assert_ne!(name, V1);
    assert!(name.starts_with("nginx-config-"));
    // Its content identity is still the collision-free hash, so it is found again later.
    assert_eq!(
        inline_identity(SetRef::from(&set)).unwrap(),
        V1.rsplit('-').next().unwrap()
    );
}

#[test]
fn a_workload_reading_two_sets_is_patched_once_with_both_changes() {
    let a = settled_set("a", &[("K", "1")]);
    let b = settled_set("b", &[("K", "2")]);
    let web = deployment("web", &["a", "b", "unrelated"]);
    let targets: Vec<SetTarget> = [&a, &b]
        .iter()
        .filter_map(|s| SetTarget::from_set(SetRef::from(*s), "uid-web"))
        .collect();
    let p = plan_workload(&web, &targets);
    let moves: Vec<(&str, &str)> = p
        .changes
        .iter()
        .map(|c| (c.from.as_str(), c.to.as_str()))
        .collect();
    let a_rev = a.status.as_ref().unwrap().current_revision.clone().unwrap();
    let b_rev = b.status.as_ref().unwrap().current_revision.clone().unwrap();
    assert_eq!(moves, vec![("a", a_rev.as_str()), ("b", b_rev.as_str())]);
    assert!(p.add_managed_label);
    let patch = serde_json::to_value(p.json_patch(
        WorkloadKind::Deployment,
        "uid-web",
        &json!({"spec": {"template": {"metadata": {"labels": {"app": "web"}}}}}),
    ))
    .unwrap();
    let ops = patch.as_array().unwrap();
    assert_eq!(
        ops[0],
        json!({"op": "test", "path": "/metadata/uid", "value": "uid-web"})
    );
    assert_eq!(
        ops.last().unwrap(),
        &json!({"op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true"})
    );
}

/// Set `set` as the workload controller observes it: its spec's content identity, and its current
/// revision (as the status records it) among its revisions.
fn observed<'a>(set: &'a ConfigMapSet, identity: &'a str, revisions: &'a [RevisionView]) -> Observed<'a> {
    Observed {
        set: set.into(),
        identity_generation: set.metadata.generation,
        identity: Identity::Known(identity),
        revisions,
        lowest_wave: 0,
        window_held: false,
        window_override: None,
    }
}

#[test]
fn a_workload_waits_while_a_set_it_reads_is_not_decided() {
    // A change to several sets in one apply becomes one rollout: no set moves the workload while
    // another it reads has no revision for its spec yet.
    let a = settled_set("a", &[("K", "1")]);
    let mut b = settled_set("b", &[("K", "2")]);
    let revision_of_status = |set: &ConfigMapSet| {
        let current = set.status.as_ref().unwrap().current_revision.clone().unwrap();
        vec![revision_of(set, &current, 1)]
    };
    let (a_revisions, b_revisions) = (revision_of_status(&a), revision_of_status(&b));
    let a_identity = inline_identity((&a).into()).unwrap();
    // b's content changed; its controller has not made the revision yet.
    b.spec.template.data = Some(BTreeMap::from([("K".to_string(), "3".to_string())]));
    b.metadata.generation = Some(2);
    let b_identity = inline_identity((&b).into()).unwrap();
    let sets = [
        observed(&a, &a_identity, &a_revisions),
        observed(&b, &b_identity, &b_revisions),
    ];
    let web = deployment("web", &["a", "b"]);
    assert_eq!(
        decide::targets(&sets, &web),
        Err(Undecided::Set("ConfigMapSet b".into()))
    );
    let other = deployment("other", &["a"]);
    assert!(decide::targets(&sets[..1], &other).is_ok());
    // An observer that goes by the status (an invalid spec, or the plugin in source mode) waits for the
    // status to describe the spec.
    let by_status = Observed {
        identity: Identity::Recorded,
        ..observed(&b, &b_identity, &b_revisions)
    };
    assert!(decide::target(&by_status, &web).is_err());
}

fn settled_set(name: &str, data: &[(&str, &str)]) -> ConfigMapSet {
    let set = set_with(name, data, 10);
    let p = plan(&set, &[], &[], &[]);
    settled(&set, &p)
}

#[test]
fn unrelated_and_unknown_names_are_left_alone() {
    let a = settled_set("app", &[("K", "1")]);
    // `app-config-…` belongs to another set; `app-zzzzzzzzzz` is no known revision of `app`.
    let web = deployment("web", &["app-config-hf678c7m2b", "app-zzzzzzzzzz", "other"]);
    let target = SetTarget::from_set((&a).into(), "uid-web").unwrap();
    assert!(plan_workload(&web, &[target]).is_empty());
}

#[test]
fn a_name_that_refers_to_two_sets_is_decided_by_the_set_that_knows_it_as_a_revision() {
    // Set `app`'s current revision is `app-<hash>`, and a second set is named exactly that.
    let app = settled_set("app", &[("K", "1")]);
    let revision = app.status.as_ref().unwrap().current_revision.clone().unwrap();
    let twin = settled_set(&revision, &[("K", "2")]);
    // A set named like a revision `app` does not know: its bare name moves to its own revision.
    let stranger = settled_set("app-bbbbbbbbbb", &[("K", "3")]);
    let stranger_revision = stranger
        .status
        .as_ref()
        .unwrap()
        .current_revision
        .clone()
        .unwrap();
    let web = deployment("web", &[&revision, "app-bbbbbbbbbb"]);
    let targets = |sets: [&ConfigMapSet; 3]| -> Vec<SetTarget> {
        sets.iter()
            .filter_map(|s| SetTarget::from_set(SetRef::from(*s), "uid-web"))
            .collect()
    };
    for order in [[&app, &twin, &stranger], [&stranger, &twin, &app]] {
        let moves: Vec<(String, String)> = plan_workload(&web, &targets(order))
            .changes
            .into_iter()
            .map(|c| (c.from, c.to))
            .collect();
        // The ConfigMap named `app-<hash>` is app's current revision: nothing to move there.
        assert_eq!(
            moves,
            vec![("app-bbbbbbbbbb".to_string(), stranger_revision.clone())]
        );
    }
}

#[test]
fn volumes_and_env_from_move_together_in_one_plan() {
    let a = settled_set("app", &[("K", "1")]);
    let mut web = deployment("web", &["app"]);
    web.pod_spec.volumes = Some(vec![Volume {
        name: "config".into(),
        config_map: Some(ConfigMapVolumeSource {
            name: "app".into(),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    }]);
    let target = SetTarget::from_set((&a).into(), "uid-web").unwrap();
    let p = plan_workload(&web, std::slice::from_ref(&target));
    assert_eq!(p.changes.len(), 2);
    assert!(p.changes.iter().all(|c| c.to == target.current));
}

#[test]
fn a_revision_that_lost_its_content_mark_is_recognised_by_name_and_repaired() {
    let set = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let mut revision = revision_of(&set, V1, 1);
    revision.annotations.remove(labels::CONTENT_HASH);
    let p = plan(&set, &[revision], &[], &[]);
    assert!(p.create.is_none(), "no duplicate revision");
    assert_eq!(p.status.collision_count, None, "no collision either");
    assert_eq!(p.status.current_revision.as_deref(), Some(V1));
    assert_eq!(
        p.patches,
        vec![(
            V1.to_string(),
            json!({"metadata": {"annotations": {labels::CONTENT_HASH: "d2c65kk9hm"}}})
        )]
    );
}

#[test]
fn revisions_never_inherit_the_sets_own_gitops_tracking_metadata() {
    // Argo CD prunes objects carrying its tracking label or annotation that are not in Git: a revision
    // copying them from the set would be deleted on the next sync. Only template metadata is copied.
    let mut set = set_with("nginx-config", &[("APP_VERSION", "1")], 10);
    let tracking = [
        ("app.kubernetes.io/instance", "my-app"),
        ("argocd.argoproj.io/instance", "my-app"),
        ("kustomize.toolkit.fluxcd.io/name", "my-app"),
    ];
    set.metadata.labels = Some(
        tracking
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    set.metadata.annotations = Some(BTreeMap::from([(
        "argocd.argoproj.io/tracking-id".to_string(),
        "my-app:cmset.dev/ConfigMapSet:team/nginx-config".to_string(),
    )]));
    set.spec
        .template
        .metadata
        .labels
        .insert("team".into(), "payments".into());
    let cm = plan(&set, &[], &[], &[]).create.unwrap();
    let labels = cm.metadata().labels.clone().unwrap();
    assert_eq!(
        labels,
        BTreeMap::from([
            ("team".to_string(), "payments".to_string()),
            (labels::SET.to_string(), "nginx-config".to_string())
        ])
    );
    let annotations = cm.metadata().annotations.clone().unwrap();
    assert!(
        annotations.keys().all(|k| k.starts_with("cmset.dev/")),
        "{annotations:?}"
    );
}

#[test]
fn an_empty_set_gets_an_empty_revision_with_the_kustomize_name() {
    // kustomize names a generator with no data `<name>-6ct58987ht` (checked with `kubectl kustomize`).
    let mut set = set_with("nginx-config", &[], 10);
    set.spec.template.data = None;
    let p = plan(&set, &[], &[], &[]);
    assert_eq!(ready_of(&p), ("True", "RolledOut"));
    let created = p.create.expect("an empty set still gets its revision");
    let cm = created.config_map().expect("a ConfigMap").clone();
    assert_eq!(cm.metadata.name.as_deref(), Some("nginx-config-6ct58987ht"));
    assert_eq!((cm.data, cm.binary_data), (None, None));
    // An empty map is the same content as no map at all: same revision, no second one.
    let mut empty_map = set.clone();
    empty_map.spec.template.data = Some(BTreeMap::new());
    let again = plan(
        &empty_map,
        &[revision_of(&set, "nginx-config-6ct58987ht", 1)],
        &[],
        &[],
    );
    assert!(again.create.is_none());
}

/// `count` Deployments named `reader-N` with real-looking UIDs (a settled workload is kept by the
/// first 12 digits of its UID), each reading `configmap`.
fn readers(count: usize, configmap: &str) -> Vec<WorkloadView> {
    (0..count)
        .map(|i| WorkloadView {
            uid: format!(
                "{:08x}-{:04x}-4{:03x}-8000-{:012x}",
                i.wrapping_mul(2_654_435_761) as u32,
                i % 65_536,
                i % 4_096,
                i
            ),
            ..deployment(&format!("reader-{i:05}"), &[configmap])
        })
        .collect()
}

#[test]
fn a_set_read_by_twenty_thousand_workloads_writes_a_status_that_fits_and_still_knows_each_rollback() {
    let set = set_with("nginx-config", &[("APP_VERSION", "2")], 10);
    let revisions = vec![revision_of(&set, V1, 1), revision_of(&set, V2, 2)];
    let on_v2 = readers(20_000, V2);
    let p = plan(&set, &revisions, &on_v2, &[]);
    let bytes = serde_json::to_vec(&p.status).unwrap().len();
    eprintln!("a status of 20,000 readers: {bytes} bytes");
    assert!(bytes < 1 << 20, "the status takes {bytes} bytes");
    assert_eq!((p.status.workloads.len(), p.status.omitted_workloads), (0, 0));
    assert_eq!(p.status.settled_workloads.as_ref().unwrap().count, 20_000);
    assert_eq!(ready_of(&p), ("True", "RolledOut"));
    let set = settled(&set, &p);
    // Planning again over what was written writes nothing.
    assert!(plan(&set, &revisions, &on_v2, &[]).is_quiet((&set).into()));

    // `kubectl rollout undo` of one reader: it is pinned, not moved forward again, by both planners.
    let mut rolled_back = on_v2.clone();
    rolled_back[12_345] = WorkloadView {
        pod_spec: deployment("x", &[V1]).pod_spec,
        ..rolled_back[12_345].clone()
    };
    let p = plan(&set, &revisions, &rolled_back, &[]);
    let listed: Vec<(&str, WorkloadState)> = p
        .status
        .workloads
        .iter()
        .map(|w| (w.name.as_str(), w.state))
        .collect();
    assert_eq!(listed, [("reader-12345", WorkloadState::Pinned)]);
    assert_eq!(p.status.settled_workloads.as_ref().unwrap().count, 19_999);
    let target = SetTarget::from_set((&set).into(), &rolled_back[12_345].uid).unwrap();
    assert!(plan_workload(&rolled_back[12_345], &[target]).is_empty());
}
