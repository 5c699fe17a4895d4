//! Waves: a good change moves wave by wave, a bad one fails in wave 0 and is rolled back; pinned,
//! mislabelled and late opted-in workloads; replanning after a restart gives the same status.

use super::*;

#[test]
fn without_waves_or_a_rollout_spec_nothing_is_tracked_and_everything_moves_at_once() {
    let mut world = World::new(
        None,
        vec![deployment("a", None, "app"), deployment("b", None, "app")],
    );
    world.settle();
    world.change_content("v2");
    world.settle();
    let current = world.current();
    assert_eq!((world.reads("a"), world.reads("b")), (current.clone(), current));
    let status = world.set.status.as_ref().unwrap();
    assert_eq!(status.rollout, None);
    assert!(
        status
            .workloads
            .iter()
            .all(|w| w.moved_at.is_none() && w.message.is_none())
    );
    assert_eq!(world.ready(), ("True".into(), "RolledOut".into()));
}

#[test]
fn a_good_change_moves_wave_0_then_after_the_stabilization_window_wave_1() {
    let (mut world, old) = two_waves(Some(rollout(30, 600, false)));
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!(world.reads("first"), new, "wave 0 moves at once");
    assert_eq!(world.reads("second"), old, "wave 1 waits");
    assert_eq!(world.entry("second").state, WorkloadState::Waiting);
    assert_eq!(
        world.entry("second").message.as_deref(),
        Some("waiting for wave 0 to complete")
    );
    assert_eq!(
        world.entry("first").previous_revision.as_deref(),
        Some(old.as_str())
    );
    assert_eq!(world.entry("first").moved_at, Some(at(300)));
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave, rollout.waves.clone()),
        (RolloutPhase::Progressing, 0, vec![0, 1])
    );
    assert_eq!(world.ready(), ("False".into(), "RolloutProgressing".into()));

    // Healthy: the window starts, and the planner asks to look again when it ends.
    world.now += 5;
    world.workload("first").health = Health::Healthy;
    let plan = world.settle();
    assert_eq!(world.rollout().wave_healthy_since, Some(at(305)));
    assert_eq!(plan.recheck_in, Some(std::time::Duration::from_secs(30)));
    assert_eq!(world.reads("second"), old);

    // A blip restarts the window.
    world.now += 10;
    world.workload("first").health = Health::Progressing;
    world.settle();
    assert_eq!(world.rollout().wave_healthy_since, None);
    world.now += 1;
    world.workload("first").health = Health::Healthy;
    world.settle();
    assert_eq!(world.rollout().wave_healthy_since, Some(at(316)));

    world.now += 29;
    world.settle();
    assert_eq!(world.reads("second"), old, "one second short of the window");
    world.now += 1;
    world.settle();
    assert_eq!(world.reads("second"), new, "the window is over: wave 1 moves");
    assert_eq!(world.rollout().wave, 1);
    assert!(world.reasons().contains(&"WaveStarted"));
    assert_eq!(
        world.told(&format!("Rollout of {new} started: wave 0 moves (waves 0, 1)")),
        1,
        "{:?}",
        world.events
    );

    // Every workload is on the new revision, but the last wave has not proven itself: not Ready yet.
    assert_eq!(world.ready(), ("False".into(), "RolloutProgressing".into()));
    world.workload("second").health = Health::Healthy;
    world.settle();
    world.now += 29;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_eq!(world.ready(), ("False".into(), "RolloutProgressing".into()));
    assert!(
        world
            .ready_message()
            .contains("wave 1 of [0, 1] in progress (the last)"),
        "{}",
        world.ready_message()
    );
    world.now += 1;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(world.ready(), ("True".into(), "RolledOut".into()));
    assert_eq!(world.reasons().last(), Some(&"RolloutComplete"));
}

#[test]
fn a_bad_change_fails_in_wave_0_is_rolled_back_and_wave_1_never_receives_it() {
    let (mut world, old) = two_waves(Some(rollout(0, 60, true)));
    world.change_content("bad");
    world.settle();
    let bad = world.current();
    assert_eq!(world.reads("first"), bad);

    world.now += 59;
    world.settle();
    assert_eq!(
        world.rollout().phase,
        RolloutPhase::Progressing,
        "still within the deadline"
    );
    world.now += 1;
    world.settle();
    assert_eq!(
        world.reads("first"),
        old,
        "moved back to the revision it ran before"
    );
    assert_eq!(world.reads("second"), old);
    assert!(
        world
            .moves
            .iter()
            .all(|(w, _, to)| !(w == "second" && *to == bad)),
        "wave 1 never saw it"
    );

    let rollout = world.rollout();
    assert_eq!((rollout.phase, rollout.wave), (RolloutPhase::Failed, 0));
    let first = world.entry("first");
    assert_eq!(first.state, WorkloadState::RolledBack);
    assert_eq!(first.revision, old, "the entry shows the revision it runs again");
    assert!(
        first
            .message
            .as_deref()
            .unwrap()
            .contains(&format!("rolled back to {old}"))
    );
    assert_eq!(world.entry("second").state, WorkloadState::Waiting);
    assert!(
        world
            .entry("second")
            .message
            .unwrap()
            .starts_with("held: the rollout of")
    );
    let (status, reason) = world.ready();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "RolloutFailed"));
    let message = world
        .set
        .status
        .as_ref()
        .unwrap()
        .condition("Ready")
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("Deployment first was not healthy within progressDeadlineSeconds (60s)"),
        "{message}"
    );
    let stalled = world.set.status.as_ref().unwrap().condition("Stalled").unwrap();
    assert_eq!(
        (stalled.status.as_str(), stalled.reason.as_str()),
        ("True", "RolloutFailed")
    );
    let history = &world.set.status.as_ref().unwrap().history;
    assert!(history.iter().find(|h| h.name == bad).unwrap().failed);
    assert!(!history.iter().find(|h| h.name == old).unwrap().failed);
    let warnings: Vec<_> = world
        .events
        .iter()
        .filter(|e| e.0 == EventKind::Warning)
        .collect();
    assert_eq!(warnings.len(), 1, "one RolloutFailed warning: {warnings:?}");
    assert_eq!(warnings[0].1, "RolloutFailed");

    // Time passes, a restart replans from the status: nothing moves again, nothing is reported again.
    world.now += 3600;
    world.workload("first").health = Health::Healthy;
    let moves = world.moves.len();
    let plan = world.settle();
    assert_eq!(world.moves.len(), moves);
    assert!(plan.events.is_empty());
    assert_eq!(world.entry("first").state, WorkloadState::RolledBack);

    // A new change is a fresh rollout; the failed mark stays on the bad revision.
    world.change_content("v3");
    world.settle();
    let good = world.current();
    assert_eq!(world.reads("first"), good);
    assert_eq!(world.entry("second").state, WorkloadState::Waiting);
    world.workload("first").health = Health::Healthy;
    world.settle();
    world.workload("second").health = Health::Healthy;
    world.settle();
    assert_eq!(world.reads("second"), good);
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert!(
        world.set.status.as_ref().unwrap().condition("Stalled").is_none(),
        "no longer stalled"
    );
    let history = &world.set.status.as_ref().unwrap().history;
    assert!(history.iter().find(|h| h.name == bad).unwrap().failed);
}

#[test]
fn a_deployment_that_reports_its_own_deadline_fails_at_once() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, true)));
    world.change_content("bad");
    world.settle();
    world.now += 1;
    world.workload("first").health =
        Health::Failed("reported ProgressDeadlineExceeded (its Progressing condition)".into());
    world.settle();
    assert_eq!(world.reads("first"), old);
    assert!(
        world
            .rollout()
            .message
            .unwrap()
            .contains("Deployment first reported ProgressDeadlineExceeded")
    );
}

#[test]
fn without_auto_rollback_a_failure_stops_the_waves_and_only_reports() {
    let (mut world, old) = two_waves(Some(rollout(0, 60, false)));
    world.change_content("bad");
    world.settle();
    let bad = world.current();
    world.now += 61;
    world.settle();
    assert_eq!(world.reads("first"), bad, "left where it is");
    assert_eq!(world.reads("second"), old);
    assert_eq!(world.entry("first").state, WorkloadState::Current);
    assert!(
        world
            .entry("first")
            .message
            .unwrap()
            .starts_with("failed: it was not healthy")
    );
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
    assert_eq!(world.ready().1, "RolloutFailed");
}

#[test]
fn a_workload_pinned_by_hand_takes_no_part_and_holds_no_wave() {
    let (mut world, old) = two_waves(Some(rollout(0, 60, true)));
    world.change_content("v2");
    world.settle();
    let new = world.current();
    // `kubectl rollout undo` on the wave-0 workload.
    let reference = world.workload("first").pod_spec.containers[0]
        .env_from
        .as_mut()
        .unwrap()[0]
        .config_map_ref
        .as_mut()
        .unwrap();
    reference.name = old.clone();
    world.workload("first").health = Health::Healthy;
    world.settle();
    assert_eq!(world.entry("first").state, WorkloadState::Pinned);
    assert_eq!(
        world.reads("second"),
        new,
        "the only wave-0 workload is out, so wave 1 moves"
    );
    assert_eq!(world.reads("first"), old, "and the pin stays");
    world.now += 600;
    world.workload("second").health = Health::Healthy;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
}

#[test]
fn an_invalid_wave_label_holds_the_workload_and_says_why() {
    let mut world = World::new(
        None,
        vec![deployment("a", None, "app"), deployment("b", None, "app")],
    );
    world.settle();
    let old = world.current();
    world.workload("b").wave = Wave::parse(Some("later"));
    world.change_content("v2");
    world.settle();
    assert_eq!(world.reads("a"), world.current());
    assert_eq!(world.reads("b"), old);
    let b = world.entry("b");
    assert_eq!(b.state, WorkloadState::Waiting);
    assert!(b.message.unwrap().contains(labels::WAVE));
}

#[test]
fn every_phase_replans_to_the_same_status_as_after_a_restart() {
    // Mid-wave, in the window, complete, failed: planning again from what the status records, at the
    // same time, changes nothing and publishes nothing.
    let (mut world, _) = two_waves(Some(rollout(30, 60, true)));
    world.change_content("v2");
    let mut checks = 0;
    let mut check = |world: &mut World| {
        world.settle();
        let again = world.plan();
        assert_eq!(Some(&again.status), world.set.status.as_ref());
        assert!(again.events.is_empty(), "{:?}", again.events);
        checks += 1;
    };
    check(&mut world); // wave 0 rolling out
    world.workload("first").health = Health::Healthy;
    check(&mut world); // in the stabilization window
    world.now += 30;
    check(&mut world); // wave 1 rolling out
    world.workload("second").health = Health::Healthy;
    check(&mut world); // complete
    world.change_content("bad");
    check(&mut world);
    world.now += 61;
    check(&mut world); // failed and rolled back
    assert_eq!(checks, 6);
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
}

#[test]
fn a_workload_that_opts_in_mid_rollout_gets_the_last_good_revision_until_its_wave_moves() {
    let (mut world, old) = two_waves(Some(rollout(0, 60, true)));
    world.change_content("v2");
    world.settle();
    let new = world.current();
    // A workload of wave 1 appears while wave 0 is on trial: it starts on what the others run.
    world.workloads.push(deployment("late", Some(1), "app"));
    world.settle();
    assert_eq!(world.reads("late"), old, "not the revision still on trial");
    assert_eq!(world.entry("late").state, WorkloadState::Waiting);
    world.workload("first").health = Health::Healthy;
    world.settle();
    world.workload("late").health = Health::Healthy;
    world.workload("second").health = Health::Healthy;
    world.settle();
    assert_eq!(world.reads("late"), new, "its wave moves it");
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
}

#[test]
fn a_workload_that_opts_in_after_a_failure_never_receives_the_failed_revision() {
    let (mut world, old) = two_waves(Some(rollout(0, 60, true)));
    world.change_content("bad");
    world.settle();
    let bad = world.current();
    world.now += 60;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
    // Of wave 0, where the failure was, and of wave 1: both start on the last good revision.
    world.workloads.push(deployment("late0", None, "app"));
    world.workloads.push(deployment("late1", Some(1), "app"));
    world.settle();
    assert_eq!(
        (world.reads("late0"), world.reads("late1")),
        (old.clone(), old.clone())
    );
    assert!(
        world
            .moves
            .iter()
            .all(|(w, _, to)| !(w.starts_with("late") && *to == bad))
    );
    assert_eq!(world.entry("late0").state, WorkloadState::Waiting);
    assert_eq!(world.ready(), ("False".into(), "RolloutFailed".into()));

    // The next content rolls out to them like to everyone else.
    world.change_content("v3");
    world.settle();
    let good = world.current();
    world.heal_all(); // wave 0
    world.heal_all(); // wave 1
    assert_eq!((world.reads("late0"), world.reads("late1")), (good.clone(), good));
}

#[test]
fn gates_by_what_the_status_records() {
    let (mut world, old) = two_waves(Some(rollout(0, 60, true)));
    world.change_content("v2");
    // Nothing recorded for the new revision yet: only the lowest wave may move.
    let plan = world.reconcile_set();
    let new = plan.status.current_revision.clone().unwrap();
    world.set.status.as_mut().unwrap().rollout = None;
    let set: SetRef<'_> = (&world.set).into();
    let first = world.workloads[0].clone();
    let second = world.workloads[1].clone();
    assert_eq!(gate(set, &new, &first, 0, false), Gate::Open);
    assert_eq!(
        gate(set, &new, &second, 0, false),
        Gate::Held {
            keep: Some(old.clone())
        }
    );
    assert_eq!(gate(set, &new, &second, 1, false), Gate::Open, "the lowest wave");
    let recorded = world.reconcile_set();
    let set: SetRef<'_> = (&world.set).into();
    assert_eq!(recorded.status.rollout.as_ref().unwrap().wave, 0);
    assert_eq!(gate(set, &new, &first, 0, false), Gate::Open);
    assert_eq!(
        gate(set, &new, &second, 0, false),
        Gate::Held {
            keep: Some(old.clone())
        }
    );
}

#[test]
fn transitions_count_each_rollout_event_once() {
    let (mut world, _) = two_waves(Some(rollout(0, 60, true)));
    let mut counted = (0, 0, 0, 0);
    let mut count = |world: &mut World| {
        let before = world.set.status.clone().unwrap();
        world.settle();
        let t = transitions(&before, world.set.status.as_ref().unwrap());
        counted.0 += usize::from(t.started);
        counted.1 += usize::from(t.completed);
        counted.2 += usize::from(t.failed);
        counted.3 += usize::from(t.rolled_back);
    };
    world.change_content("bad");
    count(&mut world);
    world.now += 61;
    count(&mut world);
    count(&mut world);
    assert_eq!(counted, (1, 0, 1, 1));
}

#[test]
fn a_set_that_no_workload_reads_completes_its_rollout_at_once() {
    let mut world = World::new(Some(rollout(30, 60, true)), Vec::new());
    world.settle();
    let rollout = world.rollout();
    assert_eq!((rollout.phase, rollout.waves), (RolloutPhase::Complete, vec![]));
    assert_eq!(world.ready(), ("True".into(), "RolledOut".into()));
    world.change_content("v2");
    let plan = world.settle();
    assert_eq!(world.rollout().revision, world.current());
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(plan.recheck_in, None, "nothing to look at again");
}
