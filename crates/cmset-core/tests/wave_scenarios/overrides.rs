//! Break glass and Immediate: an override lets the current rollout through once, the old annotation
//! nothing; an Immediate set moves every reader at once, and an undo is undone.

use super::*;

#[test]
fn the_override_lets_the_current_rollout_through_and_no_later_one() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.set_windows(vec![window(WindowKind::Deny, None, "0 8 * * *", "4h")]);
    world.change_content("v2");
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    world.break_glass("alice");
    world.now += 60;
    world.settle();
    let new = world.current();
    assert_eq!(world.reads("first"), new, "overridden: wave 0 moves");
    assert_eq!(
        world
            .reasons()
            .iter()
            .filter(|r| **r == "WindowOverridden")
            .count(),
        1
    );
    assert_eq!(world.told("(requested by alice)"), 1, "{:?}", world.events);
    world.heal_all();
    world.heal_all();
    assert_eq!(world.reads("second"), new);
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);

    // The next rollout is held again: the override named the one before.
    world.change_content("v3");
    world.now += 60;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    assert_eq!(world.reads("first"), new);
    let _ = old;
}

#[test]
fn the_old_annotation_lets_nothing_through_and_is_reported_once() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.set_windows(vec![window(WindowKind::Deny, None, "0 8 * * *", "4h")]);
    world.change_content("v2");
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    // What a tenant writes by hand, as earlier versions read it: the value is right, the record names
    // someone, and a proof is there. None of it counts any more.
    let value = cmset_core::policy::break_glass::override_value(&world.rollout()).unwrap();
    world.annotate(labels::WINDOW_OVERRIDE, Some(&value));
    world.annotate(
        labels::WINDOW_OVERRIDE_BY,
        Some("platform-admin 2027-01-15T08:06:00Z"),
    );
    world.annotate(labels::WINDOW_OVERRIDE_PROOF, Some("cHJvb2Y="));
    for _ in 0..3 {
        world.now += 60;
        world.settle();
    }
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    assert_eq!(world.reads("first"), old, "held as before");
    assert_eq!(
        world
            .reasons()
            .iter()
            .filter(|r| **r == "WindowOverridden")
            .count(),
        0
    );
    let ignored: Vec<_> = world
        .events
        .iter()
        .filter(|(_, reason, _)| *reason == "WindowOverrideIgnored")
        .collect();
    assert_eq!(ignored.len(), 1, "{:?}", world.events);
    assert_eq!(ignored[0].0, EventKind::Warning);
    assert!(ignored[0].2.contains("WindowOverride"), "{}", ignored[0].2);
    assert!(
        ignored[0].2.contains("kubectl cmset promote --override-window"),
        "{}",
        ignored[0].2
    );
    assert_eq!(
        world.told("platform-admin"),
        0,
        "no event repeats the claimed name"
    );
    let condition = |world: &World| {
        let status = world.set.status.clone().unwrap();
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == "WindowOverride")
    };
    let refused = condition(&world).unwrap();
    assert_eq!(
        (refused.status.as_str(), refused.reason.as_str()),
        ("False", "AnnotationIgnored")
    );
    assert!(!refused.message.contains("platform-admin"), "{}", refused.message);

    // An override for another set of the same name (deleted and created again) counts for nothing.
    let rollout = world.rollout();
    world.overrides.push(OverrideView {
        name: "stale".into(),
        set_kind: cmset_core::set::SetKind::ConfigMapSet,
        set_name: "app".into(),
        set_uid: "an-earlier-set-uid".into(),
        revision: rollout.revision.clone(),
        started_at: rollout.started_at.unwrap().0,
        requested_by: Some("bo".into()),
    });
    world.now += 60;
    world.settle();
    assert_eq!(world.reads("first"), old, "still held");

    // The right person breaks the glass with a WindowOverride.
    world.break_glass("ana");
    world.now += 60;
    world.settle();
    assert_eq!(world.reads("first"), world.current(), "overridden: wave 0 moves");
    let granted = condition(&world).unwrap();
    assert_eq!(
        (granted.status.as_str(), granted.reason.as_str()),
        ("True", "Granted")
    );
    assert!(
        granted.message.contains("WindowOverride app-1 ") && granted.message.contains("(requested by ana)"),
        "{}",
        granted.message
    );
    assert_eq!(world.told("(requested by ana)"), 1, "{:?}", world.events);
}

#[test]
fn an_override_not_recorded_still_lets_its_rollout_through_and_says_so() {
    let (mut world, _old) = two_waves(Some(rollout(0, 600, false)));
    world.set_windows(vec![window(WindowKind::Deny, None, "0 8 * * *", "4h")]);
    world.change_content("v2");
    world.settle();
    world.break_glass("nobody");
    world.overrides[0].requested_by = None;
    world.now += 60;
    world.settle();
    assert_eq!(world.reads("first"), world.current());
    assert_eq!(world.told("(requested by not recorded)"), 1, "{:?}", world.events);
}

#[test]
fn an_immediate_set_moves_every_reader_at_once_through_waves_and_pause_and_undo_is_undone() {
    let spec = RolloutSpec {
        strategy: Strategy::Immediate,
        paused: true,
        ..RolloutSpec::default()
    };
    let mut world = World::new(
        Some(spec),
        vec![
            deployment("first", None, "app"),
            deployment("second", Some(1), "app"),
        ],
    );
    world.settle();
    let first = world.current();
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (first.clone(), first.clone())
    );
    world.change_content("v2");
    world.now += 10;
    world.settle();
    let rotated = world.current();
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (rotated.clone(), rotated.clone()),
        "every reader, at once"
    );
    assert!(
        world.set.status.as_ref().unwrap().rollout.is_none(),
        "nothing to track, nothing held"
    );
    // `kubectl rollout undo` brings back the old copy: it may be revoked, so cmset moves it on.
    let reference = world.workload("first").pod_spec.containers[0]
        .env_from
        .as_mut()
        .unwrap()[0]
        .config_map_ref
        .as_mut()
        .unwrap();
    reference.name = first.clone();
    world.settle();
    assert_eq!(world.reads("first"), rotated, "never left on an older revision");
}
