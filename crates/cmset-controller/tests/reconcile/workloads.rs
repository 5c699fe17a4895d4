//! Workloads and the status: moved as soon as their revision exists; waits that keep one change one
//! rollout; a status that would only say "about to move" deferred, and one already written not written
//! again; owners batched; Deployments that cannot be listed.

use super::*;

#[tokio::test]
async fn a_set_whose_deployments_cannot_be_listed_writes_only_why_and_plans_once_they_list_again() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let settled = settle(&mut world, &nginx_set("1"));
    let mut changed = nginx_set("2");
    changed.spec.revision_history_limit = 0;
    changed.metadata.generation = Some(2);
    changed.status = settled.status.clone();
    world.add_set(&changed);
    // cmset's right to list Deployments is revoked: the index keeps web, and the set must not plan
    // from it (a new revision would start a rollout whose health it cannot see).
    let why = "403 Forbidden: cmset's service account may not list or watch it";
    world
        .index
        .unavailable(WorkloadKind::Deployment, why.to_string())
        .expect("news");
    let (result, seen) = reconcile_set(&world, &changed).await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"],
        "no revision created, none pruned, no event: only the status says why"
    );
    let status = &seen[0].body["status"];
    assert_eq!(
        (
            &status["revision"],
            &status["currentRevision"],
            &status["observedGeneration"]
        ),
        (&json!(1), &json!(V1), &json!(1)),
        "the status still describes what was planned last"
    );
    let ready = &status["conditions"][0];
    assert_eq!(
        (&ready["type"], &ready["status"], &ready["reason"]),
        (&json!("Ready"), &json!("Unknown"), &json!("WorkloadsUnobserved"))
    );
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains(&format!("Deployment ({why})")),
        "{ready}"
    );

    // Deployments list again: the set plans from that list (its status, which now only says that web
    // is about to move, waits for the move).
    world
        .index
        .handle_workload(WorkloadKind::Deployment, &watcher::Event::Init);
    world.index.handle_workload(
        WorkloadKind::Deployment,
        &watcher::Event::InitApply(dynamic(&web(V1, true))),
    );
    world
        .index
        .handle_workload(WorkloadKind::Deployment, &watcher::Event::InitDone);
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec![
            "POST /api/v1/namespaces/team/configmaps",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    assert_eq!(seen[0].body["metadata"]["name"], V2);
}

/// `set` changed to new content whose revision the set controller has just created; its status still
/// describes the previous generation.
/// `set` changed to content `version` (generation 2), its status still the last one written.
pub(crate) fn changed_without_revision(world: &mut World, set: &ConfigMapSet, version: &str) -> ConfigMapSet {
    let mut changed = nginx_set(version);
    changed.metadata.generation = Some(2);
    changed.status = set.status.clone();
    world.add_set(&changed);
    changed
}

/// [`changed_without_revision`], and the revision `revision` of the new content made already.
pub(crate) fn changed_with_revision(
    world: &mut World,
    set: &ConfigMapSet,
    version: &str,
    revision: &str,
) -> ConfigMapSet {
    let changed = changed_without_revision(world, set, version);
    world.add_revision(&new_revision(&changed, revision, 2));
    changed
}

#[tokio::test]
async fn a_workload_moves_as_soon_as_its_revision_exists_without_waiting_for_status() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    assert_eq!(
        changed.status.as_ref().unwrap().observed_generation,
        Some(1),
        "status is behind"
    );
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(lines, vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]);
    assert_eq!(
        seen[0].body[2],
        json!({"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V2})
    );
}

#[tokio::test]
async fn a_workload_whose_revision_does_not_exist_yet_waits_and_sends_no_request() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_without_revision(&mut world, &set, "2");
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    assert!(
        matches!(result, Ok(action) if action != Action::await_change()),
        "it looks again later"
    );
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_workload_reading_two_sets_waits_while_one_changed_moments_ago() {
    let mut world = World::new();
    let mut deployment = web(V1, true);
    let other = {
        let mut s = nginx_set("1");
        s.metadata.name = Some("feature-flags".into());
        s.metadata.uid = Some("flags-uid".into());
        s
    };
    let pod = deployment.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    pod.containers[0].env_from.as_mut().unwrap().push(EnvFromSource {
        config_map_ref: Some(ConfigMapEnvSource {
            name: "feature-flags".into(),
            optional: None,
        }),
        ..EnvFromSource::default()
    });
    world.add_deployment(&deployment);
    let flags_revision = "feature-flags-d2c65kk9hm";
    world.add_revision(&new_revision(&other, flags_revision, 1));
    world.add_set(&other);
    let set = settle(&mut world, &nginx_set("1"));
    // Both sets were just seen (a fresh index): the window since the last change is open.
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    let action = result.unwrap();
    assert_no_requests(&seen);
    assert!(
        action != Action::await_change(),
        "it comes back when the window closes"
    );
}

#[tokio::test]
async fn a_status_that_only_says_workloads_are_about_to_move_is_deferred() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let set = settle(&mut world, &nginx_set("1"));
    // The revision for the new content exists; the workload has not moved yet.
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    let (result, seen) = reconcile_set(&world, &changed).await;
    assert!(matches!(result, Ok(action) if action != Action::await_change()));
    assert_no_requests(&seen);
}

#[tokio::test]
async fn owners_for_new_replica_sets_are_batched() {
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some("web-abc".into()),
            namespace: Some(NS.into()),
            uid: Some("uid-web-abc".into()),
            // Controlled by a Deployment that does not own the revision (one made before revisions
            // were owned by their readers): the ReplicaSet itself must keep it.
            owner_references: Some(vec![OwnerReference {
                uid: "uid-web-before".into(),
                ..deployment.controller_owner_ref(&()).unwrap()
            }]),
            ..ObjectMeta::default()
        },
        ..ReplicaSet::default()
    };
    rs.spec = Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
        template: Some(deployment.spec.as_ref().unwrap().template.clone()),
        ..Default::default()
    });
    world.add_replica_set(&rs);
    // The only write due is the revision's new owner: it waits for more to come along.
    let (result, seen) = reconcile_set(&world, &set).await;
    assert!(matches!(result, Ok(action) if action != Action::await_change()));
    assert_no_requests(&seen);
    // Once the batch window has passed since the first deferral, one patch carries the owner.
    let deferred_long_ago = |ctx: &EngineContext| {
        let since = std::time::Instant::now() - cmset_controller::engine::context::BATCH_WINDOW * 2;
        let id = (SetKind::ConfigMapSet, Key::new(NS, "nginx-config"));
        ctx.memory().deferred_since(&id, since, |_| true);
    };
    let (result, seen) = scenario_after(&world, ok_responder(set.clone()), deferred_long_ago, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![format!("PATCH /api/v1/namespaces/team/configmaps/{V1}")]
    );
    assert_eq!(
        seen[0].body,
        json!({"metadata": {"ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-abc", "uid": "uid-web-abc",
            "controller": false, "blockOwnerDeletion": false
        }]}})
    );
}

#[tokio::test]
async fn a_status_already_written_is_not_written_again_while_the_store_lags() {
    let mut world = World::new();
    let set = nginx_set("1");
    world.add_set(&set);
    world.add_revision(&new_revision(&set, V1, 1));
    // This process wrote the status the plan wants; the store still shows the set without it.
    let pods = Default::default();
    let revisions = world.revisions();
    let input = SetInput {
        set: (&set).into(),
        source: SourceState::Inline,
        revisions: &revisions,
        workloads: &[],
        history: &[],
        pod_refs: Some(&pods),
        now: fixed_clock()(),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        check_jobs: &Default::default(),
        content_budget: Default::default(),
        schemas: &Default::default(),
    };
    let status = plan_set(&input).status;
    let wrote_it = |ctx: &EngineContext| {
        ctx.remember_written(
            &(SetKind::ConfigMapSet, Key::new(NS, "nginx-config")),
            (&set).into(),
            &status,
            Some("2".into()),
        )
    };
    let (result, seen) = scenario_after(&world, ok_responder(set.clone()), wrote_it, |ctx| {
        set_controller::reconcile(Arc::new(set.clone()), ctx)
    })
    .await;
    result.unwrap();
    assert_no_requests(&seen);
    // Without that memory, the same reconcile writes it.
    let (_, seen) = reconcile_set(&world, &set).await;
    assert_eq!(
        seen.iter().map(Seen::line).collect::<Vec<_>>(),
        vec!["PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status"]
    );
}
