//! Rollouts in waves: a window over a set with nothing to move, a later wave waiting for its turn, a
//! failed rollout moved back.

use super::*;

/// Deployment `name` reading `configmap`, in `wave` (no label for `None`).
pub(crate) fn waved(name: &str, configmap: &str, wave: Option<&str>) -> Deployment {
    let mut deployment = web(configmap, true);
    deployment.metadata.name = Some(name.into());
    deployment.metadata.uid = Some(format!("uid-{name}"));
    if let Some(wave) = wave {
        deployment
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(labels::WAVE.to_string(), wave.to_string());
    }
    deployment
}

/// A ChangeWindow `freeze` of the set's namespace denying moves from 07:00 to 09:00 UTC every day: the
/// fixed clock (08:00) is inside it.
pub(crate) fn freeze() -> cmset_api::ChangeWindow {
    serde_json::from_value(json!({
        "apiVersion": "cmset.dev/v1alpha1", "kind": "ChangeWindow",
        "metadata": {"name": "freeze"},
        "spec": {
            "namespaces": [NS],
            "windows": [{"kind": "Deny", "schedule": "0 7 * * *", "duration": "2h"}]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn a_window_starting_or_ending_over_a_set_with_nothing_to_move_sends_no_request() {
    // A set without spec.rollout whose reader runs its current revision (and is not healthy yet: it
    // has no status), settled without windows.
    let mut world = World::new();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    assert_eq!(set.status.as_ref().unwrap().rollout, None);

    // The freeze begins: the set is held, and has nothing to move. No status write, no Event.
    let freeze = Arc::new(freeze());
    world
        .index
        .handle_change_window(&watcher::Event::InitDone, std::slice::from_ref(&freeze));
    let held = cmset_core::rollout::window_hold::verdict(
        (&set).into(),
        &world.index.cluster_windows_for((&set).into()),
        fixed_clock()().0,
    );
    assert!(held.held.is_some(), "the freeze holds the set: {held:?}");
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_no_requests(&seen);
    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);

    // The freeze ends (the ChangeWindow is deleted): still nothing to say.
    world
        .index
        .handle_change_window(&watcher::Event::Delete((*freeze).clone()), &[]);
    let (result, seen) = reconcile_set(&world, &set).await;
    result.unwrap();
    assert_no_requests(&seen);
}

#[tokio::test]
async fn a_workload_of_a_later_wave_sends_no_request_until_its_wave_opens() {
    let mut world = World::new();
    let first = waved("first", V1, None);
    let second = waved("second", V1, Some("1"));
    world.add_deployment(&first);
    world.add_deployment(&second);
    let set = settle(&mut world, &nginx_set("1"));
    let changed = changed_with_revision(&mut world, &set, "2", V2);

    let (result, seen) = reconcile_deployment(&world, &changed, &second).await;
    assert!(
        matches!(result, Ok(action) if action == Action::await_change()),
        "the set's status wakes it when its wave opens"
    );
    assert_no_requests(&seen);

    let (result, seen) = reconcile_deployment(&world, &changed, &first).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec!["PATCH /apis/apps/v1/namespaces/team/deployments/first"]
    );
    assert_eq!(seen[0].body[2]["value"], V2);

    // Once the status records wave 1 as open, it moves in one patch.
    let mut open = changed.clone();
    let status = open.status.get_or_insert_with(Default::default);
    status.rollout = Some(cmset_api::RolloutStatus {
        revision: V2.into(),
        phase: cmset_api::RolloutPhase::Progressing,
        wave: 1,
        waves: vec![0, 1],
        ..Default::default()
    });
    world.add_set(&open);
    let (result, seen) = reconcile_deployment(&world, &open, &second).await;
    result.unwrap();
    assert_eq!(
        seen[0].line(),
        "PATCH /apis/apps/v1/namespaces/team/deployments/second"
    );
    assert_eq!(seen[0].body[2]["value"], V2);
}

#[tokio::test]
async fn a_workload_whose_rollout_failed_is_moved_back_in_one_guarded_patch_with_a_warning() {
    let mut world = World::new();
    let v1 = nginx_set("1");
    world.add_revision(&new_revision(&v1, V1, 1));
    let deployment = waved("first", V2, None);
    world.add_deployment(&deployment);
    let mut set = settle(&mut world, &nginx_set("2"));
    let status = set.status.as_mut().unwrap();
    assert_eq!(status.current_revision.as_deref(), Some(V2));
    status.rollout = Some(cmset_api::RolloutStatus {
        revision: V2.into(),
        phase: cmset_api::RolloutPhase::Failed,
        wave: 0,
        waves: vec![0],
        message: Some("the rollout failed".into()),
        ..Default::default()
    });
    let entry = &mut status.workloads[0];
    entry.state = cmset_api::WorkloadState::RolledBack;
    entry.previous_revision = Some(V1.into());
    world.add_set(&set);

    let (result, seen) = reconcile_deployment(&world, &set, &deployment).await;
    result.unwrap();
    let lines: Vec<String> = seen.iter().map(Seen::line).collect();
    assert_eq!(
        lines,
        vec![
            "PATCH /apis/apps/v1/namespaces/team/deployments/first",
            "POST /apis/events.k8s.io/v1/namespaces/team/events"
        ]
    );
    assert_eq!(
        seen[0].body,
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-first"},
            {"op": "test", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V2},
            {"op": "replace", "path": "/spec/template/spec/containers/0/envFrom/0/configMapRef/name", "value": V1},
            {"op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true"}
        ])
    );
    assert_eq!(seen[1].body["type"], "Warning");
    assert_eq!(seen[1].body["reason"], "RolledBack");

    // Back on V1, the record keeps it there: no request.
    let rolled_back = waved("first", V1, None);
    world.add_deployment(&rolled_back);
    let (result, seen) = reconcile_deployment(&world, &set, &rolled_back).await;
    result.unwrap();
    assert_no_requests(&seen);
}
