//! One decision, any replica: a standby decides a source-mode set as the leader will; a CronJob's Job
//! under a freeze; the budget's turn; a moved workload's mark removed.

use super::*;

/// A Deployment `name` reading Secret `secret` (the bare SecretSet name, say) through `envFrom`.
pub(crate) fn reading_secret(name: &str, secret: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"),
                     "labels": {"cmset.dev/enabled": "true"}},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "app", "envFrom": [{"secretRef": {"name": secret}}]}
        ]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_standby_decides_a_source_mode_set_by_its_status_and_the_leader_waits_for_its_read() {
    let mut world = World::new();
    let mut set = db_set();
    set.status = Some(cmset_api::ConfigMapSetStatus {
        observed_generation: Some(1),
        revision: Some(1),
        current_revision: Some(DB_V1.into()),
        history: vec![cmset_api::RevisionStatus {
            name: DB_V1.into(),
            revision: 1,
            ..Default::default()
        }],
        ..Default::default()
    });
    world.add_secret_set(&set);
    // The watch saw the source's version; nobody on this replica read its content.
    world.see_secret(&db_source("7"));
    let view = cmset_controller::engine::views::workload_view(
        WorkloadKind::Deployment,
        &dynamic(&reading_secret("web", "db")),
    )
    .unwrap();
    let decide = |world: &World| {
        cmset_controller::reconcile::decisions::Gathered::of(&world.index, &world.stores, NS, &view, true)
            .and_then(|g| g.decide(&view))
    };
    // A standby (every replica serves admission) decides by what the leader recorded.
    let targets = decide(&world).expect("decided from the status");
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0].current, DB_V1);
    // The leader itself waits for its own read of the source's current version.
    world.index.lead();
    assert!(
        decide(&world).is_err(),
        "undecided until the leader reads the source"
    );
}

/// A Job being created that reads ConfigMap `reads`, started by the CronJob `nightly` or by hand.
pub(crate) fn new_job(reads: &str, by_cron_job: bool) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "nightly-29000000", "namespace": NS, "labels": {"cmset.dev/enabled": "true"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "envFrom": [{"configMapRef": {"name": reads}}]}
        ]}}}
    });
    if by_cron_job {
        job["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "uid-nightly",
            "controller": true, "blockOwnerDeletion": true
        }]);
    }
    job
}

/// The admission of `job` being created: the patch the webhook would answer with, decided from the
/// index as the webhook decides it.
pub(crate) fn admit_new_job(world: &World, job: &Value) -> Option<json_patch::Patch> {
    let kind = WorkloadKind::Job;
    let view = cmset_core::admission::admitted_workload(kind, job).expect("opted in");
    let windows = cmset_core::admission::windows_apply(kind, job, true);
    let decided =
        cmset_controller::reconcile::decisions::Gathered::of(&world.index, &world.stores, NS, &view, windows)
            .and_then(|g| g.decide(&view));
    let circumstances = cmset_core::admission::Circumstances {
        creating: true,
        ..Default::default()
    };
    cmset_core::admission::mutate(kind, job, &view, &decided, &circumstances)
}

#[tokio::test]
async fn a_job_its_cron_job_starts_under_a_freeze_runs_what_the_cron_job_runs() {
    let mut world = World::new();
    let set = settle(&mut world, &nginx_set("1"));
    changed_with_revision(&mut world, &set, "2", V2);
    // Without a window, a new Job names the current revision, whoever starts it.
    let moved = admit_new_job(&world, &new_job(V1, true)).expect("moved to the current revision");
    assert!(serde_json::to_string(&moved).unwrap().contains(V2), "{moved:?}");

    // A freeze of the cluster's, open now.
    let freeze: cmset_api::ChangeWindow = serde_json::from_value(json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "ChangeWindow", "metadata": {"name": "freeze"},
        "spec": {"windows": [{"kind": "Deny", "schedule": "* * * * *", "duration": "1h"}]}
    }))
    .unwrap();
    world
        .index
        .handle_change_window(&watcher::Event::Apply(freeze.clone()), &[Arc::new(freeze)]);
    // The CronJob is held on V1: the Job it starts runs V1 too.
    assert_eq!(
        admit_new_job(&world, &new_job(V1, true)),
        None,
        "kept on the CronJob's revision"
    );
    // A Job started by hand is a new workload: its first start names the current revision.
    let by_hand = admit_new_job(&world, &new_job(V1, false)).expect("moved");
    assert!(
        serde_json::to_string(&by_hand).unwrap().contains(V2),
        "{by_hand:?}"
    );
}

/// `d` at generation 1, its rollout complete and every replica available.
pub(crate) fn healthy(mut d: Deployment) -> Deployment {
    d.metadata.generation = Some(1);
    d.status = Some(serde_json::from_value(json!({
        "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]
    })).unwrap());
    d
}

#[tokio::test]
async fn under_a_full_rollout_budget_a_workload_waits_its_turn_sending_nothing_then_moves() {
    let budget = Arc::new(RolloutBudget::new(1));
    let mut world = World::with_budget(Some(budget.clone()));
    let deployment = healthy(web(V1, true));
    world.add_deployment(&deployment);
    // Another workload is rolling out at the generation cmset's move gave it (its mark): it holds the
    // only slot.
    let mut api = web(V1, true);
    api.metadata.name = Some("api".into());
    api.metadata.uid = Some("uid-api".into());
    api.metadata.generation = Some(1);
    let mut broken = api.clone();
    api.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(cmset_api::labels::MOVED.into(), "1".into());
    world.add_deployment(&api);
    assert_eq!(budget.usage().moving, 1);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_with_revision(&mut world, &set, "2", V2);

    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    assert!(
        matches!(result, Ok(action) if action != Action::await_change()),
        "it looks again later"
    );
    assert_no_requests(&seen);
    let web = (WorkloadKind::Deployment, Key::new(NS, "web"));
    let waiting = budget.position(&web).expect("in line");
    assert_eq!((waiting.position, waiting.moving, waiting.cap), (1, 1, 1));

    // "api" is seen healthy: the slot is free, and "web" moves with one patch that marks its move.
    world.add_deployment(&healthy(api));
    assert_eq!(budget.usage().moving, 0);
    // A workload rolling out that cmset never moved (created broken) takes no slot.
    broken.metadata.name = Some("broken".into());
    broken.metadata.uid = Some("uid-broken".into());
    world.add_deployment(&broken);
    assert_eq!(budget.usage().moving, 0, "sickness is not a move");
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    let patch = &seen[0].body;
    let ops = patch.as_array().expect("a JSON patch");
    assert!(
        ops.contains(&json!({"op": "test", "path": "/metadata/generation", "value": 1})),
        "{patch}"
    );
    assert!(
        ops.contains(&json!({"op": "add", "path": "/metadata/labels/cmset.dev~1moved", "value": "2"})),
        "{patch}"
    );
    // The cap beside it, for `kubectl cmset plan` to read.
    assert!(
        ops.contains(&json!({"op": "add", "path": "/metadata/labels/cmset.dev~1budget-cap", "value": "1"})),
        "{patch}"
    );
    assert_eq!(budget.position(&web), None);
    assert_eq!(
        budget.usage().moving,
        1,
        "its move holds the slot until the watch shows it"
    );
}

#[tokio::test]
async fn a_moved_workload_healthy_at_its_generation_loses_its_mark_in_one_guarded_patch() {
    let budget = Arc::new(RolloutBudget::new(1));
    let mut world = World::with_budget(Some(budget.clone()));
    let set = settle(&mut world, &nginx_set("1"));
    let mut deployment = healthy(web(V1, true));
    deployment
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(cmset_api::labels::MOVED.into(), "1".into());
    world.add_deployment(&deployment);
    assert_eq!(budget.usage().moving, 0, "healthy: its move is done");
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    assert_eq!(
        seen[0].body,
        json!([
            {"op": "test", "path": "/metadata/labels/cmset.dev~1moved", "value": "1"},
            {"op": "remove", "path": "/metadata/labels/cmset.dev~1moved"}
        ])
    );

    // A mark with its cap beside it: both go, each guarded.
    deployment
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert(cmset_api::labels::BUDGET_CAP.into(), "1".into());
    world.add_deployment(&deployment);
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    assert_eq!(
        seen[0].body,
        json!([
            {"op": "test", "path": "/metadata/labels/cmset.dev~1moved", "value": "1"},
            {"op": "remove", "path": "/metadata/labels/cmset.dev~1moved"},
            {"op": "test", "path": "/metadata/labels/cmset.dev~1budget-cap", "value": "1"},
            {"op": "remove", "path": "/metadata/labels/cmset.dev~1budget-cap"}
        ])
    );
    deployment
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(cmset_api::labels::BUDGET_CAP);

    // Without the mark, nothing is sent.
    deployment
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(cmset_api::labels::MOVED);
    world.add_deployment(&deployment);
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
}
