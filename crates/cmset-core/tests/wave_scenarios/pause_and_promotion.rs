//! Pause and promotion: nothing moves while paused, clocks stop, each promotion names its rollout; the
//! budget's queue.

use super::*;

#[test]
fn a_paused_rollout_moves_nothing_until_resumed_and_survives_a_restart() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.annotate(cmset_api::labels::PAUSED, Some("true"));
    world.change_content("v2");
    world.now += 10;
    world.settle();
    let new = world.current();
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (old.clone(), old.clone()),
        "nothing moves"
    );
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave, rollout.held_since.clone()),
        (RolloutPhase::Paused, 0, Some(at(310)))
    );
    assert_eq!(world.ready(), ("False".into(), "RolloutPaused".into()));
    assert!(
        world.ready_message().contains("since"),
        "{}",
        world.ready_message()
    );
    assert_eq!(world.entry("first").state, WorkloadState::Waiting);
    assert_eq!(
        world.entry("first").message.as_deref(),
        Some("held: the rollout is paused")
    );
    assert_eq!(world.told("is paused in wave 0"), 1, "{:?}", world.events);

    // Later, and after a restart (the planner reads only the status): still paused, since the same time.
    world.now += 100;
    world.settle();
    assert_eq!(world.rollout().held_since, Some(at(310)));
    assert_eq!(world.told("is paused in wave 0"), 1, "told once");

    world.annotate(cmset_api::labels::PAUSED, None);
    world.settle();
    assert_eq!(world.reads("first"), new, "resumed: wave 0 moves");
    assert_eq!(world.reads("second"), old);
    assert_eq!(world.told("is resumed in wave 0"), 1, "{:?}", world.events);
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_eq!(world.rollout().held_since, None);
    world.heal_all();
    world.heal_all();
    assert_eq!(world.reads("second"), new);
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
}

#[test]
fn paused_in_the_spec_mid_rollout_keeps_what_moved_and_opens_no_wave() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!(world.reads("first"), new);
    world.set.spec.rollout.as_mut().unwrap().paused = true;
    world.heal_all();
    assert_eq!(world.reads("first"), new, "what moved stays");
    assert_eq!(world.reads("second"), old, "the next wave does not open");
    assert_eq!(
        (world.rollout().phase, world.rollout().wave),
        (RolloutPhase::Paused, 0)
    );
    assert_eq!(world.entry("second").state, WorkloadState::Waiting);

    // A moved workload that fails still fails the rollout: a pause does not hide a failure.
    world.workload("first").health = Health::Failed("crashed".into());
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
}

#[test]
fn manual_promotion_holds_each_next_wave_until_that_wave_is_promoted() {
    let (mut world, old) = two_waves_promoted_by_hand(rollout(0, 600, false));
    world.change_content("v2");
    world.settle();
    let new = world.current();
    world.heal_all();
    assert_eq!(world.reads("second"), old, "wave 1 waits for a promotion");
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave),
        (RolloutPhase::AwaitingPromotion, 0)
    );
    assert!(rollout.held_since.is_some());
    assert_eq!(world.ready(), ("False".into(), "AwaitingPromotion".into()));
    assert_eq!(
        world.entry("second").message.as_deref(),
        Some("waiting for wave 0 to be promoted (kubectl cmset promote)")
    );
    assert_eq!(world.told("waits for `kubectl cmset promote`"), 1);

    // A promotion of another revision, or of another wave, does not count.
    world.annotate(cmset_api::labels::PROMOTED, Some(&format!("{old}/0")));
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::AwaitingPromotion);
    world.annotate(cmset_api::labels::PROMOTED, Some(&format!("{new}/1")));
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::AwaitingPromotion);

    world.annotate(cmset_api::labels::PROMOTED, Some(&format!("{new}/0")));
    world.settle();
    assert_eq!(world.reads("second"), new, "promoted: wave 1 moves");
    assert_eq!(world.rollout().held_since, None);
    // After the last wave nothing is left to promote.
    world.heal_all();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(world.ready().0, "True");
}

#[test]
fn a_paused_rollout_never_fails_by_time_and_resumes_with_the_time_it_had_left() {
    let (mut world, _) = two_waves(Some(rollout(0, 300, true)));
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!(world.reads("first"), new);
    let moved_at = world.entry("first").moved_at.unwrap();
    // 100 s into its 300 s deadline, still rolling out, the rollout is paused for far longer.
    world.now += 100;
    world.annotate(labels::PAUSED, Some("true"));
    let plan = world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Paused);
    let held_since = world.rollout().held_since.unwrap();
    assert_eq!(plan.recheck_in, None, "held, nothing runs out: no timer");
    world.now += 1_000;
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.held_since),
        (RolloutPhase::Paused, Some(held_since.clone()))
    );
    assert_eq!(world.reads("first"), new, "not rolled back while paused");
    assert_eq!(world.entry("first").moved_at, Some(moved_at.clone()));

    // Resumed: its clock moved later by the pause, so it has the ~200 s it had left, not 0.
    world.annotate(labels::PAUSED, None);
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.held_since),
        (RolloutPhase::Progressing, None)
    );
    let shifted = world.entry("first").moved_at.unwrap();
    let held = shifted.0.duration_since(moved_at.0).as_secs();
    assert!(
        (1_000..=1_001).contains(&held),
        "moved later by the pause: {held} s"
    );
    world.now += 190;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    world.now += 20;
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        rollout.phase,
        RolloutPhase::Failed,
        "its deadline still counts: {rollout:?}"
    );
}

#[test]
fn a_workload_that_reports_failure_fails_a_paused_rollout() {
    let (mut world, _) = two_waves(Some(rollout(0, 300, false)));
    world.change_content("v2");
    world.settle();
    world.annotate(labels::PAUSED, Some("true"));
    world.settle();
    world.now += 10;
    world.workload("first").health = Health::Failed("ProgressDeadlineExceeded".into());
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
}

#[test]
fn pausing_an_inconclusive_analysis_stops_its_deadline_and_it_resumes_where_it_stood() {
    let (mut world, old) = analysed(true);
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let new = world.current();
    measure_for(&mut world, 50, &QueryOutcome::NoData);
    let before = runs_of_wave(&world, 0)[0].clone();
    assert_eq!(before.verdict, AnalysisVerdict::Inconclusive);

    world.annotate(labels::PAUSED, Some("true"));
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Paused);
    // Far past the 300 s deadline, while paused: nothing is measured and nothing fails.
    for _ in 0..10 {
        world.now += 100;
        world.measure(QueryOutcome::NoData);
        world.settle();
    }
    let rollout = world.rollout();
    assert_eq!(rollout.phase, RolloutPhase::Paused, "{rollout:?}");
    assert_eq!(runs_of_wave(&world, 0)[0].measurements, before.measurements);
    assert_eq!(world.reads("first"), new);
    assert_ne!(world.reads("second"), new);

    // Resumed with good data: the analysis goes on, the window ends, wave 1 moves; no failure.
    world.annotate(labels::PAUSED, None);
    world.settle();
    measure_for(&mut world, 40, &QueryOutcome::Samples(vec![0.01]));
    assert_eq!(world.reads("second"), new, "{:?}", world.rollout());
    world.heal_all();
    measure_for(&mut world, 40, &QueryOutcome::Samples(vec![0.01]));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert!(!world.reasons().contains(&"RolloutFailed"), "{:?}", world.events);
    assert_ne!(world.reads("first"), old);
}

#[test]
fn awaiting_promotion_stops_the_clocks_too() {
    let (mut world, _) = two_waves_promoted_by_hand(rollout(30, 300, true));
    world.change_content("v2");
    world.settle();
    world.heal_all();
    world.now += 40;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::AwaitingPromotion);
    // A day waiting for a promotion; then a pod of wave 0 restarts: it has its deadline's time left.
    world.now += 86_400;
    world.workload("first").health = Health::Progressing;
    world.settle();
    let rollout = world.rollout();
    assert_eq!(rollout.phase, RolloutPhase::Progressing, "{rollout:?}");
    world.now += 100;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
}

#[test]
fn a_promotion_names_its_rollout_and_a_later_rollout_of_the_same_revision_needs_its_own() {
    let (mut world, _) = two_waves_promoted_by_hand(rollout(0, 600, false));
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let v2 = world.current();
    assert_eq!(world.rollout().phase, RolloutPhase::AwaitingPromotion);
    let first_rollout = rollout_id(world.rollout().started_at.as_ref().unwrap());
    let promotion = format!("{v2}/0@{first_rollout}");
    world.annotate(labels::PROMOTED, Some(&promotion));
    world.settle();
    assert_eq!(world.reads("second"), v2, "promoted");
    world.heal_all();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);

    // Another change, promoted, then a revert to v2: a new rollout of the same revision.
    world.now += 100;
    world.change_content("v3");
    world.settle();
    world.heal_all();
    promote_current(&mut world);
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    world.now += 100;
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.revision.as_str(), rollout.phase),
        (v2.as_str(), RolloutPhase::AwaitingPromotion)
    );
    assert_ne!(rollout_id(rollout.started_at.as_ref().unwrap()), first_rollout);
    // The first rollout's promotion does not promote this one.
    world.annotate(labels::PROMOTED, Some(&promotion));
    world.settle();
    world.now += 100;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::AwaitingPromotion);
    assert_ne!(world.reads("second"), v2);
    // Its own does.
    let own = format!("{v2}/0@{}", rollout_id(rollout.started_at.as_ref().unwrap()));
    world.annotate(labels::PROMOTED, Some(&own));
    world.settle();
    assert_eq!(world.reads("second"), v2);
}

/// What `kubectl cmset promote` writes for the wave under way, then everything healthy.
pub(crate) fn promote_current(world: &mut World) {
    let rollout = world.rollout();
    let id = rollout_id(rollout.started_at.as_ref().unwrap());
    let value = format!("{}/{}@{id}", rollout.revision, rollout.wave);
    world.annotate(labels::PROMOTED, Some(&value));
    world.settle();
    world.heal_all();
}

#[test]
fn a_promotion_that_names_no_rollout_counts_only_if_given_after_the_rollout_began() {
    let (mut world, _) = two_waves_promoted_by_hand(rollout(0, 600, false));
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let v2 = world.current();
    let legacy = format!("{v2}/0");
    world.annotate(labels::PROMOTED, Some(&legacy));
    world.settle();
    assert_eq!(world.reads("second"), v2, "given during the rollout: it promotes");
    world.heal_all();
    world.now += 100;
    world.change_content("v3");
    world.settle();
    world.heal_all();
    promote_current(&mut world);
    // Reverted, while a GitOps sync has put the old promotion back on the set: it is stale for the new
    // rollout of v2.
    world.annotate(labels::PROMOTED, Some(&legacy));
    world.now += 100;
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let rollout = world.rollout();
    assert_eq!(rollout.phase, RolloutPhase::AwaitingPromotion);
    assert_eq!(rollout.stale_promotion.as_deref(), Some(legacy.as_str()));
    assert_ne!(world.reads("second"), v2);
}

#[test]
fn a_paused_set_that_nothing_reads_has_nothing_to_hold() {
    let mut world = World::new(Some(rollout(0, 600, false)), vec![]);
    world.annotate(cmset_api::labels::PAUSED, Some("true"));
    world.settle();
    world.change_content("v2");
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(world.ready().0, "True");
    assert_eq!(world.told("is paused"), 0, "no hold to report");
}

#[test]
fn a_workload_waiting_for_the_rollout_budget_is_waiting_says_where_it_stands_then_moves() {
    let line = "waiting for the cluster-wide rollout budget: 5 of 5 workloads moving, number 2 in line";
    for spec in [None, Some(rollout(0, 600, true))] {
        let mut world = World::new(
            spec.clone(),
            vec![deployment("a", None, "app"), deployment("b", None, "app")],
        );
        world.heal_all();
        world.change_content("v2");
        let b = world.workload("b").uid.clone();
        world.budget_waiting.insert(b.clone(), line.to_string());
        world.settle();
        let current = world.current();
        assert_eq!(world.reads("a"), current, "{spec:?}");
        assert_ne!(world.reads("b"), current, "{spec:?}");
        let entry = world.entry("b");
        assert_eq!(entry.state, WorkloadState::Waiting, "{spec:?}");
        assert_eq!(entry.message.as_deref(), Some(line));
        // Its turn comes: it moves, and is no longer waiting.
        world.budget_waiting.clear();
        world.heal_all();
        assert_eq!(world.reads("b"), current);
        assert_eq!(world.entry("b").state, WorkloadState::Current);
    }
}
