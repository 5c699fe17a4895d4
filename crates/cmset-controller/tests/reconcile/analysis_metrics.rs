//! Analysis series dropped with the spec; change windows and break glass: an override lets the held
//! rollout through once, the old annotation moves nothing, windows that may not be listed hold every move.

use super::*;

/// The `cmset_analysis_` sample lines of `metrics`' scrape.
pub(crate) fn analysis_samples(metrics: &Metrics) -> Vec<String> {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text.lines()
        .filter(|l| l.starts_with("cmset_analysis_"))
        .map(str::to_string)
        .collect()
}

/// A set whose spec no longer names an analysis loses its series at its next reconcile, even one that
/// has nothing to write: they do not wait for the set's deletion.
#[tokio::test]
async fn the_series_of_an_analysis_the_spec_dropped_go_at_the_next_reconcile() {
    let mut world = World::new();
    world.add_deployment(&web(V1, true));
    let set = settle(&mut world, &nginx_set("1"));
    let held: Arc<std::sync::OnceLock<Arc<Metrics>>> = Arc::default();
    let keep = held.clone();
    let labels = set_controller::set_labels(SetKind::ConfigMapSet, NS, "nginx-config");
    let other = set_controller::set_labels(SetKind::ConfigMapSet, NS, "other");
    let owned = set.clone();
    let (result, seen) = scenario_after(
        &world,
        ok_responder(set.clone()),
        move |ctx| {
            // Measured while the spec named them: a per-wave and a per-workload query.
            ctx.metrics
                .analysis_measured(&labels, "error-rate", "", "passed", Some(0.01));
            ctx.metrics
                .analysis_measured(&labels, "restarts", "web", "passed", Some(0.0));
            ctx.metrics
                .analysis_measured(&other, "error-rate", "", "passed", Some(0.01));
            keep.set(ctx.metrics.clone()).ok();
        },
        |ctx| set_controller::reconcile(Arc::new(owned), ctx),
    )
    .await;
    result.unwrap();
    assert_no_requests(&seen);
    let metrics = held.get().unwrap();
    let left = analysis_samples(metrics);
    assert!(
        left.iter().all(|l| !l.contains(r#"set="nginx-config""#)),
        "{left:?}"
    );
    assert_eq!(left.len(), 2, "the other set's stay: {left:?}");
}

/// The status the set controller wrote in `seen`.
pub(crate) fn written_status(seen: &[Seen]) -> cmset_api::ConfigMapSetStatus {
    let patch = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .expect("a status write");
    serde_json::from_value(patch.body["status"].clone()).unwrap()
}

/// A set held by a Deny window open all day (the clock says 08:00 UTC), its Deployment `web` on the old
/// revision: the set as stored, with its status, and the Deployment.
pub(crate) async fn held_by_a_window(world: &mut World) -> (ConfigMapSet, Deployment) {
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let rollout: cmset_api::RolloutSpec = serde_json::from_value(
        json!({"windows": [{"kind": "Deny", "schedule": "0 0 * * *", "duration": "24h"}]}),
    )
    .unwrap();
    let mut set = nginx_set("1");
    set.spec.rollout = Some(rollout.clone());
    let settled = settle(world, &set);
    let mut changed = changed_with_revision(world, &settled, "2", V2);
    changed.spec.rollout = Some(rollout);
    world.add_set(&changed);
    let (result, seen) = reconcile_set(world, &changed).await;
    result.unwrap();
    let waiting = written_status(&seen);
    assert_eq!(
        waiting.rollout.as_ref().map(|r| r.phase),
        Some(cmset_api::RolloutPhase::Waiting)
    );
    changed.status = Some(waiting);
    world.add_set(&changed);
    (changed, deployment)
}

/// A WindowOverride of `set`'s rollout under way, for the set of uid `uid`, recorded for `by`.
pub(crate) fn window_override(
    name: &str,
    set: &ConfigMapSet,
    uid: &str,
    by: Option<&str>,
) -> cmset_api::WindowOverride {
    let rollout = set.status.as_ref().unwrap().rollout.clone().unwrap();
    let mut object = cmset_api::WindowOverride::new(
        name,
        cmset_api::WindowOverrideSpec {
            set: cmset_api::OverriddenSet {
                kind: cmset_api::OverriddenKind::ConfigMapSet,
                name: "nginx-config".into(),
                uid: uid.into(),
            },
            rollout: cmset_api::OverriddenRollout {
                revision: rollout.revision,
                started_at: rollout.started_at.unwrap(),
            },
            reason: None,
            requested_by: by.map(str::to_string),
        },
    );
    object.metadata.namespace = Some(NS.into());
    object
}

#[tokio::test]
async fn a_window_override_of_the_held_rollout_lets_it_through_once_naming_who() {
    let (mut world, mut receivers) = World::leading();
    let (held, deployment) = held_by_a_window(&mut world).await;
    while receivers.sets.try_recv().is_ok() {}

    // An override for a set of the same name deleted and created again (another uid) counts for
    // nothing: the Deployment stays.
    world
        .index
        .handle_override(&watcher::Event::Apply(window_override(
            "stale",
            &held,
            "an-earlier-set-uid",
            Some("bo"),
        )));
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
    while receivers.sets.try_recv().is_ok() {}

    // The WindowOverride appears (its watch's event): the set is woken at once.
    world
        .index
        .handle_override(&watcher::Event::Apply(window_override(
            "nginx-config-break",
            &held,
            "set-uid",
            Some("ana@example.com"),
        )));
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), receivers.sets.next())
        .await
        .expect("the set is woken")
        .unwrap();
    assert_eq!(woken.name, "nginx-config");

    // The Deployment moves: one guarded patch.
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec!["PATCH /apis/apps/v1/namespaces/team/deployments/web"]
    );
    // The set: its status, and the Warning that names the override and who created it.
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    let status = written_status(&seen);
    assert_eq!(
        status.rollout.as_ref().map(|r| r.phase),
        Some(cmset_api::RolloutPhase::Progressing)
    );
    let condition = status
        .conditions
        .iter()
        .find(|c| c.type_ == "WindowOverride")
        .expect("the WindowOverride condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("True", "Granted")
    );
    assert!(
        condition
            .message
            .starts_with("WindowOverride nginx-config-break lets the rollout "),
        "{}",
        condition.message
    );
    let overridden = seen
        .iter()
        .map(|s| &s.body)
        .find(|e| e["reason"] == "WindowOverridden")
        .expect("the WindowOverridden event");
    assert_eq!(overridden["type"], "Warning");
    let note = overridden["note"].as_str().unwrap();
    assert!(
        note.contains("WindowOverride nginx-config-break (requested by ana@example.com)"),
        "{note}"
    );
    assert!(!note.contains("bo)"), "{note}");

    // Once: the set changes again while its status still names the overridden rollout (the set
    // controller has not written the new one yet). The Deployment, on V2 now, does not move to V3.
    let mut moved = held.clone();
    moved.status = Some(status);
    world.add_set(&moved);
    let on_v2 = web(V2, true);
    world.add_deployment(&on_v2);
    let mut changed = nginx_set("3");
    changed.spec.rollout = held.spec.rollout.clone();
    changed.metadata.generation = Some(3);
    changed.status = moved.status.clone();
    let v3 = cmset_core::revisions::revision::next_revision_name(
        (&changed).into(),
        &Content::of_template(&changed.spec.template),
    );
    world.add_set(&changed);
    world.add_revision(&new_revision(&changed, &v3, 3));
    let (result, seen) = reconcile_deployment(&world, &changed, &on_v2).await;
    result.unwrap();
    assert_no_requests(&seen);
    // The set's next rollout is held as any other.
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    let next = written_status(&seen);
    let rollout = next.rollout.unwrap();
    assert_eq!(
        (rollout.revision.as_str(), rollout.phase),
        (v3.as_str(), cmset_api::RolloutPhase::Waiting)
    );
    assert!(
        !next.conditions.iter().any(|c| c.type_ == "WindowOverride"),
        "no override for this rollout: {:?}",
        next.conditions
    );
}

#[tokio::test]
async fn the_old_override_annotation_moves_nothing_and_is_warned_about_once() {
    let (mut world, _receivers) = World::leading();
    let (mut held, deployment) = held_by_a_window(&mut world).await;
    let under_way = held.status.as_ref().unwrap().rollout.clone().unwrap();
    // What earlier versions honoured: the override of that very rollout, a record claiming an admin's
    // name, and a proof.
    held.metadata.annotations = Some(BTreeMap::from([
        (
            labels::WINDOW_OVERRIDE.to_string(),
            cmset_core::policy::break_glass::override_value(&under_way).unwrap(),
        ),
        (
            labels::WINDOW_OVERRIDE_BY.to_string(),
            "platform-admin 2027-01-15T07:59:00Z".to_string(),
        ),
        (labels::WINDOW_OVERRIDE_PROOF.to_string(), "cHJvb2Y=".to_string()),
    ]));
    world.add_set(&held);
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    assert_eq!(
        lines(&seen),
        vec![
            "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
            "POST /apis/events.k8s.io/v1/namespaces/team/events",
        ]
    );
    let ignored = written_status(&seen);
    assert_eq!(
        ignored.rollout.as_ref().map(|r| r.phase),
        Some(cmset_api::RolloutPhase::Waiting),
        "still held"
    );
    let condition = ignored
        .conditions
        .iter()
        .find(|c| c.type_ == "WindowOverride")
        .expect("the WindowOverride condition");
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "AnnotationIgnored")
    );
    let event = &seen[1].body;
    assert_eq!(
        (&event["type"], &event["reason"]),
        (&json!("Warning"), &json!("WindowOverrideIgnored"))
    );
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("WindowOverride") && note.contains("kubectl cmset promote --override-window"),
        "{note}"
    );
    assert!(!note.contains("platform-admin") && !condition.message.contains("platform-admin"));

    // The Deployment stays on the old revision.
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);

    // Once that is written, reconciling again says nothing twice.
    held.status = Some(ignored);
    world.add_set(&held);
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    assert_no_requests(&seen);
}

/// Windows fail closed (issue 36, item 6): an operator that may not list ChangeWindows holds every
/// move, and each set says why, until a list succeeds; then the sets it held are woken and move.
#[tokio::test]
async fn change_windows_that_may_not_be_listed_hold_every_move_and_the_set_says_why_until_they_list() {
    use cmset_core::rollout::window_hold::{UnknownCause, WindowsUnknown};
    let (mut world, mut receivers) = World::leading();
    let deployment = web(V1, true);
    world.add_deployment(&deployment);
    let set = settle(&mut world, &nginx_set("1"));
    world.index.watch_windows();
    world
        .index
        .windows_unavailable(WindowsUnknown {
            cause: UnknownCause::Forbidden,
            detail: "403 Forbidden".to_string(),
        })
        .expect("news");
    let changed = changed_with_revision(&mut world, &set, "2", V2);
    while receivers.sets.try_recv().is_ok() {}

    let (result, seen) = reconcile_deployment(&world, &changed, &deployment).await;
    result.unwrap();
    assert_no_requests(&seen);
    let (result, seen) = reconcile_set(&world, &changed).await;
    result.unwrap();
    let sent = lines(&seen);
    assert_eq!(
        sent[0], "PATCH /apis/cmset.dev/v1alpha1/namespaces/team/configmapsets/nginx-config/status",
        "{sent:?}"
    );
    assert!(
        sent[1..].iter().all(|l| l.ends_with("/events")),
        "no revision, no workload is touched: {sent:?}"
    );
    let status = &seen[0].body["status"];
    let condition = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ChangeWindowsKnown")
        .expect("the set says why");
    assert_eq!(
        (&condition["status"], &condition["reason"]),
        (&json!("False"), &json!("ChangeWindowsForbidden"))
    );
    assert!(
        condition["message"].as_str().unwrap().contains("403 Forbidden"),
        "{condition}"
    );
    assert_eq!(
        (&status["rollout"]["phase"], &status["rollout"]["reason"]),
        (&json!("Waiting"), &json!("ChangeWindowsUnknown"))
    );
    let mut held = changed.clone();
    held.status = Some(serde_json::from_value(status.clone()).unwrap());
    world.add_set(&held);

    // The list succeeds (no window at all): the set is woken, and the workload moves.
    world.index.handle_change_window(&watcher::Event::Init, &[]);
    world.index.handle_change_window(&watcher::Event::InitDone, &[]);
    let woken = tokio::time::timeout(std::time::Duration::from_secs(5), receivers.sets.next())
        .await
        .expect("the held set is woken")
        .unwrap();
    assert_eq!(woken.name, "nginx-config");
    let (result, seen) = reconcile_deployment(&world, &held, &deployment).await;
    result.unwrap();
    assert_eq!(
        lines(&seen)[0],
        "PATCH /apis/apps/v1/namespaces/team/deployments/web"
    );
    let (result, seen) = reconcile_set(&world, &held).await;
    result.unwrap();
    let status = &seen[0].body["status"];
    assert!(
        !status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "ChangeWindowsKnown"),
        "known again, the condition is gone: {status}"
    );
}
