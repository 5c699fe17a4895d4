//! Change windows, the set's and the cluster's: deny and allow, Immediate sets under a freeze, windows
//! over waves, stabilization, analysis, pause and promotion.

use super::*;

// START is 2027-01-15T08:00:00Z; `two_waves` leaves the world at 08:05.

pub(crate) fn window(kind: WindowKind, name: Option<&str>, schedule: &str, duration: &str) -> RolloutWindow {
    RolloutWindow {
        name: name.map(str::to_string),
        kind,
        schedule: schedule.into(),
        duration: duration.into(),
        time_zone: None,
    }
}

/// A window of the cluster's ChangeWindow `freeze`.
pub(crate) fn cluster_window(kind: WindowKind, schedule: &str, duration: &str) -> Window {
    let source = WindowSource::Cluster {
        name: "freeze".into(),
    };
    Window::parse(
        &window(kind, None, schedule, duration),
        source,
        0,
        "spec.windows[0]",
    )
    .unwrap()
}

impl World {
    pub(crate) fn set_windows(&mut self, windows: Vec<RolloutWindow>) {
        self.set
            .spec
            .rollout
            .get_or_insert_with(RolloutSpec::default)
            .windows = windows;
        self.set.metadata.generation = Some(self.set.metadata.generation.unwrap() + 1);
    }
}

// ---------------------------------------------------- the cluster's windows bind every set (issue 36) --

/// Two readers (waves 0 and 1) of an `Immediate` set on revision 1.
pub(crate) fn immediate(windows: Vec<RolloutWindow>) -> (World, String) {
    let spec = RolloutSpec {
        strategy: Strategy::Immediate,
        windows,
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
    world.heal_all();
    let first = world.current();
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (first.clone(), first.clone())
    );
    (world, first)
}

/// The ChangeWindow `freeze`, for every namespace, exempting `exempt`.
pub(crate) fn freeze(windows: Vec<RolloutWindow>, exempt: Vec<Strategy>) -> ChangeWindow {
    ChangeWindow::new(
        "freeze",
        ChangeWindowSpec {
            namespaces: Vec::new(),
            selector: None,
            windows,
            exempt_strategies: exempt,
        },
    )
}

#[test]
fn an_immediate_set_under_a_cluster_deny_keeps_its_readers_where_they_stand_until_it_closes() {
    let (mut world, old) = immediate(Vec::new());
    // 08:00 to 09:00: open now.
    let object = freeze(
        vec![window(WindowKind::Deny, None, "0 8 * * *", "1h")],
        Vec::new(),
    );
    world.cluster = cluster_windows_for((&world.set).into(), &[object]);
    assert_eq!(world.cluster.len(), 1, "a Deny binds an Immediate set");
    world.change_content("v2");
    world.now += 10;
    let plan = world.settle();
    let new = world.current();
    assert_ne!(new, old, "the revision is made whatever the windows say");
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (old.clone(), old.clone()),
        "every reader keeps the old revision"
    );
    let rollout = world.rollout();
    assert_eq!(
        (
            rollout.phase,
            rollout.reason.as_deref(),
            rollout.next_window.clone()
        ),
        (RolloutPhase::Waiting, Some("DenyWindow"), Some(at(3600)))
    );
    assert_eq!(world.entry("first").state, WorkloadState::Waiting);
    assert!(
        world
            .entry("second")
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("held by a change window"),
        "{:?}",
        world.entry("second")
    );
    assert_eq!(
        world.told("held by Deny window ChangeWindow freeze"),
        1,
        "{:?}",
        world.events
    );
    assert_eq!(plan.recheck_in.map(|d| d.as_secs()), Some(3600 - 10));

    // Later: still held, told once.
    world.now += 600;
    world.settle();
    assert_eq!(world.reads("first"), old);
    assert_eq!(world.told("held by Deny window"), 1, "told once");

    // The window closes: every reader at once, whatever its wave, and the record completes.
    world.now = 3600;
    world.settle();
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (new.clone(), new.clone())
    );
    assert_eq!(
        world.told("the change windows allow moves again"),
        1,
        "{:?}",
        world.events
    );
    world.heal_all();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);

    // The next rotation outside any window goes straight through.
    world.now = 7200;
    world.change_content("v3");
    world.settle();
    let third = world.current();
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (third.clone(), third)
    );
}

#[test]
fn a_changewindow_that_exempts_immediate_lets_rotated_credentials_through() {
    let (mut world, old) = immediate(Vec::new());
    let deny = vec![window(WindowKind::Deny, None, "0 8 * * *", "1h")];
    let exempting = freeze(deny.clone(), vec![Strategy::Immediate]);
    world.cluster = cluster_windows_for((&world.set).into(), std::slice::from_ref(&exempting));
    assert!(world.cluster.is_empty(), "it exempts the set's strategy");
    world.change_content("v2");
    world.now += 10;
    world.settle();
    let new = world.current();
    assert_ne!(new, old);
    assert_eq!((world.reads("first"), world.reads("second")), (new.clone(), new));
    assert!(
        world.set.status.as_ref().unwrap().rollout.is_none(),
        "nothing held, nothing to track"
    );

    // The exemption names a strategy: a set of waves under the same ChangeWindow is held.
    let (mut waves, _) = two_waves(Some(rollout(0, 600, false)));
    waves.cluster = cluster_windows_for((&waves.set).into(), &[exempting]);
    assert_eq!(waves.cluster.len(), 1);
    // Exempting Waves leaves out the sets of waves, those without spec.rollout too, and binds Immediate.
    let exempting_waves = freeze(deny, vec![Strategy::Waves]);
    let plain = World::new(None, Vec::new());
    for (set, bound) in [(&waves.set, false), (&plain.set, false), (&world.set, true)] {
        let found = cluster_windows_for(set.into(), std::slice::from_ref(&exempting_waves));
        assert_eq!(!found.is_empty(), bound, "{:?}", set.spec.rollout);
    }
}

#[test]
fn an_immediate_sets_own_deny_window_binds_it_too() {
    let (mut world, old) = immediate(vec![window(WindowKind::Deny, Some("own"), "0 8 * * *", "1h")]);
    world.change_content("v2");
    world.now += 10;
    world.settle();
    assert_eq!((world.reads("first"), world.reads("second")), (old.clone(), old));
    assert_eq!(world.rollout().reason.as_deref(), Some("own"));
}

#[test]
fn an_override_lets_a_held_immediate_rotation_through() {
    let (mut world, old) = immediate(Vec::new());
    world.cluster = vec![cluster_window(WindowKind::Deny, "0 8 * * *", "4h")];
    world.change_content("v2");
    world.now += 10;
    world.settle();
    assert_eq!(world.reads("first"), old);
    world.break_glass("ana");
    world.now += 60;
    world.settle();
    let new = world.current();
    assert_eq!((world.reads("first"), world.reads("second")), (new.clone(), new));
    assert_eq!(
        world
            .reasons()
            .iter()
            .filter(|r| **r == "WindowOverridden")
            .count(),
        1
    );
}

#[test]
fn a_sets_always_open_allow_does_not_open_the_clusters_business_hours() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    // The cluster allows 10:00 to 18:00 only; it is 08:05. The set allows always.
    let business = window(WindowKind::Allow, None, "0 10 * * *", "8h");
    world.cluster = cluster_windows_for((&world.set).into(), &[freeze(vec![business], Vec::new())]);
    world.set_windows(vec![window(WindowKind::Allow, None, "* * * * *", "1h")]);
    world.change_content("v2");
    world.now += 10;
    world.settle();
    assert_eq!((world.reads("first"), world.reads("second")), (old.clone(), old));
    let rollout = world.rollout();
    assert_eq!(
        (
            rollout.phase,
            rollout.reason.as_deref(),
            rollout.next_window.clone()
        ),
        (RolloutPhase::Waiting, Some("OutsideWindow"), Some(at(2 * 3600)))
    );
    world.now = 2 * 3600;
    world.settle();
    assert_eq!(world.reads("first"), world.current(), "10:00: the cluster allows");
}

#[test]
fn a_deny_window_holds_a_new_rollout_and_it_completes_once_the_window_closes() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.set_windows(vec![window(
        WindowKind::Deny,
        Some("morning-freeze"),
        "0 8 * * *",
        "1h",
    )]);
    world.change_content("v2");
    world.now += 10;
    let plan = world.settle();
    let new = world.current();
    assert_ne!(new, old, "the revision is made whatever the windows say");
    assert_eq!(
        (world.reads("first"), world.reads("second")),
        (old.clone(), old.clone()),
        "nothing moves"
    );
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave, rollout.reason.as_deref()),
        (RolloutPhase::Waiting, 0, Some("morning-freeze"))
    );
    assert_eq!(
        rollout.next_window,
        Some(at(3600)),
        "09:00, when the Deny window closes"
    );
    assert_eq!(world.ready(), ("False".into(), "RolloutWaiting".into()));
    assert!(
        world
            .ready_message()
            .contains("moves resume at 2027-01-15T09:00:00Z"),
        "{}",
        world.ready_message()
    );
    assert_eq!(world.entry("first").state, WorkloadState::Waiting);
    assert_eq!(world.told("waits in wave 0"), 1, "{:?}", world.events);
    let left = plan.recheck_in.expect("looks again when the window closes");
    assert_eq!(left.as_secs(), 3600 - 310);

    // Later, and after a restart: still held, told once.
    world.now += 1000;
    world.settle();
    assert_eq!(world.reads("first"), old);
    assert_eq!(world.told("waits in wave 0"), 1);

    world.now = 3600;
    world.settle();
    assert_eq!(world.reads("first"), new, "the window closed: wave 0 moves");
    assert_eq!(world.reads("second"), old);
    assert_eq!(
        world.told("the change windows allow moves again"),
        1,
        "{:?}",
        world.events
    );
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.reason, rollout.next_window),
        (RolloutPhase::Progressing, None, None)
    );
    world.heal_all();
    world.heal_all();
    assert_eq!(world.reads("second"), new);
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
}

#[test]
fn a_canary_that_never_becomes_healthy_fails_and_rolls_back_inside_a_deny_window_at_its_deadline() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, true)));
    // 08:06 to 08:36, of the cluster's ChangeWindow.
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    world.change_content("bad");
    world.settle();
    let bad = world.current();
    assert_eq!(
        world.reads("first"),
        bad,
        "08:05: wave 0 moves before the window opens"
    );
    assert_eq!(world.entry("first").moved_at, Some(at(300)));
    world.now = 360;
    let plan = world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (
            rollout.phase,
            rollout.reason.as_deref(),
            rollout.held_since.clone()
        ),
        (RolloutPhase::Waiting, Some("DenyWindow"), Some(at(360))),
        "held by the window since it began"
    );
    assert_eq!(world.reads("first"), bad, "what moved stays");
    assert_eq!(
        plan.recheck_in.map(|d| d.as_secs()),
        Some(540),
        "looks again at the canary's deadline (08:15), before the window opens (08:36)"
    );
    // Its deadline runs while the window holds.
    world.now = 899;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    world.now = 900;
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave),
        (RolloutPhase::Failed, 0),
        "{rollout:?}"
    );
    assert!(
        rollout
            .message
            .as_deref()
            .unwrap()
            .contains("progressDeadlineSeconds (600s)"),
        "{rollout:?}"
    );
    assert_eq!(world.reads("first"), old, "rolled back inside the window");
    assert_eq!(world.entry("first").state, WorkloadState::RolledBack);
    assert_eq!(world.reads("second"), old, "wave 1 never receives it");
    assert!(world.reasons().contains(&"RolloutFailed"), "{:?}", world.events);
    assert_eq!(
        world.told("allow moves again"),
        0,
        "a failed rollout does not resume"
    );
    let history = &world.set.status.as_ref().unwrap().history;
    assert!(history.iter().any(|h| h.name == bad && h.failed));
    // The window closes: nothing more happens to a failed rollout.
    world.now = 2160;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
    assert_eq!((world.reads("first"), world.reads("second")), (old.clone(), old));
}

#[test]
fn a_wave_healthy_under_a_window_stabilizes_and_the_next_opens_the_instant_the_window_does() {
    let (mut world, old) = two_waves(Some(rollout(30, 600, false)));
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!(world.reads("first"), new);
    world.now = 360;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    // Healthy at 08:06:40: the stabilization window counts on the real clock.
    world.now = 400;
    world.workload("first").health = Health::Healthy;
    let plan = world.settle();
    assert_eq!(world.rollout().wave_healthy_since, Some(at(400)));
    assert_eq!(
        plan.recheck_in.map(|d| d.as_secs()),
        Some(30),
        "looks again when it is stable"
    );
    world.now = 430;
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave, rollout.held_since.clone()),
        (RolloutPhase::Waiting, 0, Some(at(360))),
        "stable and ready, and the next wave does not open while held"
    );
    assert_eq!(world.reads("second"), old);
    assert_eq!(world.entry("second").state, WorkloadState::Waiting);
    let plan = world.settle();
    assert_eq!(
        plan.recheck_in.map(|d| d.as_secs()),
        Some(2160 - 430),
        "looks again when the window opens"
    );
    world.now = 2159;
    world.settle();
    assert_eq!(world.reads("second"), old);
    world.now = 2160;
    world.settle();
    assert_eq!(
        world.reads("second"),
        new,
        "08:36: the window opens and wave 1 moves at once"
    );
    assert_eq!(
        world.told(&format!("Wave 0 of {new} is healthy; wave 1 moves now")),
        1,
        "{:?}",
        world.events
    );
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.wave, rollout.held_since),
        (RolloutPhase::Progressing, 1, None)
    );
    world.heal_all();
    world.now += 30;
    world.heal_all();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
}

#[test]
fn an_analysis_runs_under_a_window_and_a_bad_metric_fails_and_rolls_back_the_canary() {
    let (mut world, old) = analysed(true);
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    world.change_content("bad");
    world.settle();
    world.heal_all();
    let bad = world.current();
    assert_eq!(world.reads("first"), bad);
    world.now = 360;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    let sent = world.sent.len();
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.3]));
    world.settle();
    assert!(world.sent.len() > sent, "measured while the window holds");
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    assert_eq!(runs_of_wave(&world, 0)[0].failures, 1);
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.4]));
    world.settle();
    let rollout = world.rollout();
    assert_eq!((rollout.phase, rollout.wave), (RolloutPhase::Failed, 0));
    assert_eq!(world.reads("first"), old, "rolled back inside the window");
    assert_eq!(world.entry("first").state, WorkloadState::RolledBack);
    assert!(world.reasons().contains(&"AnalysisFailed"), "{:?}", world.events);
}

#[test]
fn a_pause_inside_a_window_stops_the_clocks_until_it_ends_then_they_run_in_the_window() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, true)));
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    world.change_content("bad");
    world.settle();
    let bad = world.current();
    world.now = 360;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    // A person pauses at 08:06:40, 500 s before the canary's deadline: paused and window-held, the
    // person's hold wins, and its clocks stand still from then on.
    world.now = 400;
    world.annotate(labels::PAUSED, Some("true"));
    let plan = world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.held_since.clone()),
        (RolloutPhase::Paused, Some(at(400)))
    );
    assert_eq!(plan.recheck_in, None, "paused, nothing runs out");
    world.now = 1400;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Paused);
    assert_eq!(world.reads("first"), bad, "not failed while paused");
    // Resumed at 08:23:20, inside the window: held by it again, and the clocks run with the 500 s
    // they had left.
    world.annotate(labels::PAUSED, None);
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.held_since.clone()),
        (RolloutPhase::Waiting, Some(at(1400)))
    );
    assert_eq!(world.entry("first").moved_at, Some(at(1300)));
    world.now = 1899;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    world.now = 1900;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
    assert_eq!(world.reads("first"), old, "rolled back inside the window");
}

#[test]
fn a_wave_stable_under_a_window_awaits_its_promotion_on_a_stopped_clock() {
    let (mut world, _) = two_waves_promoted_by_hand(rollout(30, 300, true));
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    world.change_content("v2");
    world.settle();
    let new = world.current();
    world.now = 360;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    world.now = 400;
    world.heal_all();
    world.now = 430;
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.held_since.clone()),
        (RolloutPhase::AwaitingPromotion, Some(at(430))),
        "stable inside the window: a person is asked to promote"
    );
    // Hours later, after the window: a pod of wave 0 restarts. The wait for the promotion stopped
    // its clocks, so it has its deadline's time left.
    world.now = 430 + 3 * 3600;
    world.workload("first").health = Health::Progressing;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    world.now += 100;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_eq!(world.reads("first"), new);
}

#[test]
fn a_rollout_failing_inside_a_deny_window_is_still_rolled_back() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, true)));
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!(world.reads("first"), new);
    world.now = 400;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    world.workload("first").health = Health::Failed("crashed".into());
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
    assert_eq!(world.reads("first"), old, "rolled back inside the window");
    assert_eq!(world.entry("first").state, WorkloadState::RolledBack);
}

#[test]
fn an_allow_window_holds_until_it_opens() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.set_windows(vec![window(WindowKind::Allow, None, "30 8 * * *", "1h")]);
    world.change_content("v2");
    world.settle();
    let rollout = world.rollout();
    assert_eq!(
        (
            rollout.phase,
            rollout.reason.as_deref(),
            rollout.next_window.clone()
        ),
        (RolloutPhase::Waiting, Some("OutsideWindow"), Some(at(1800)))
    );
    assert_eq!(world.reads("first"), old);
    world.now = 1800;
    world.settle();
    assert_eq!(
        world.reads("first"),
        world.current(),
        "08:30: the Allow window opened"
    );
}

#[test]
fn a_cluster_deny_beats_a_set_allow() {
    let (mut world, old) = two_waves(Some(rollout(0, 600, false)));
    world.set_windows(vec![window(WindowKind::Allow, None, "0 8 * * *", "2h")]);
    world.cluster = vec![cluster_window(WindowKind::Deny, "0 8 * * *", "1h")];
    world.change_content("v2");
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    assert_eq!(world.rollout().next_window, Some(at(3600)));
    assert_eq!(world.reads("first"), old);
    world.now = 3600;
    world.settle();
    assert_eq!(world.reads("first"), world.current());
}

#[test]
fn without_a_rollout_spec_a_cluster_deny_still_holds_a_change() {
    let (mut world, old) = two_waves(None);
    world.cluster = vec![cluster_window(WindowKind::Deny, "0 8 * * *", "1h")];
    world.change_content("v2");
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Waiting);
    assert_eq!((world.reads("first"), world.reads("second")), (old.clone(), old));
    world.now = 3600;
    world.heal_all();
    world.heal_all();
    world.heal_all();
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(world.reads("second"), world.current());
}

#[test]
fn a_window_starting_and_ending_changes_nothing_for_a_set_without_a_rollout_spec_and_nothing_to_move() {
    let mut world = World::new(
        None,
        vec![deployment("a", None, "app"), deployment("b", None, "app")],
    );
    world.heal_all();
    let current = world.current();
    // A reader crashes just as the freeze begins: nothing of the set was moved, nothing is judged.
    world.workload("b").health = Health::Failed("crashed".into());
    let status = world.set.status.clone();
    let events = world.events.len();
    world.cluster = vec![cluster_window(WindowKind::Deny, "6 8 * * *", "30m")];
    for now in [360, 1000, 2159, 2160, 5000] {
        world.now = now;
        let plan = world.settle();
        assert_eq!(world.set.status, status, "at {now}: the status is untouched");
        assert_eq!(plan.recheck_in, None, "no timer");
    }
    assert_eq!(
        world.set.status.as_ref().unwrap().rollout,
        None,
        "no rollout record"
    );
    assert_eq!(world.events.len(), events, "no event: {:?}", world.events);
    assert!(
        world
            .set
            .status
            .as_ref()
            .unwrap()
            .history
            .iter()
            .all(|h| !h.failed),
        "no revision is marked failed"
    );
    assert_eq!((world.reads("a"), world.reads("b")), (current.clone(), current));
}

#[test]
fn a_set_without_a_rollout_spec_has_a_rollout_record_while_a_reader_waits_for_a_window() {
    let mut world = World::new(
        None,
        vec![deployment("a", None, "app"), deployment("b", None, "app")],
    );
    world.heal_all();
    let old = world.current();
    // 08:00 to 09:00.
    world.cluster = vec![cluster_window(WindowKind::Deny, "0 8 * * *", "1h")];
    world.now = 60;
    world.settle();
    assert_eq!(world.set.status.as_ref().unwrap().rollout, None);
    world.change_content("v2");
    world.now = 120;
    world.settle();
    let new = world.current();
    assert_eq!((world.reads("a"), world.reads("b")), (old.clone(), old));
    let rollout = world.rollout();
    assert_eq!(
        (rollout.revision.as_str(), rollout.phase),
        (new.as_str(), RolloutPhase::Waiting),
        "its readers wait: a rollout is recorded"
    );
    assert_eq!(world.entry("a").state, WorkloadState::Waiting);
    let started_at = rollout.started_at.clone();
    world.now = 3600;
    world.settle();
    assert_eq!((world.reads("a"), world.reads("b")), (new.clone(), new.clone()));
    world.heal_all();
    let rollout = world.rollout();
    assert_eq!(
        (rollout.phase, rollout.started_at.clone()),
        (RolloutPhase::Complete, started_at.clone())
    );
    // The record of the finished rollout stays until the revision changes, the same whatever the
    // windows do next: its notifications' once-per keys stay as they were.
    for now in [3700, 86_400 + 60, 86_400 + 3_600] {
        world.now = now;
        world.settle();
        let rollout = world.rollout();
        assert_eq!(
            (rollout.phase, rollout.started_at.clone()),
            (RolloutPhase::Complete, started_at.clone()),
            "at {now}"
        );
    }
    assert_eq!(
        world.told("Rollout of"),
        2,
        "started and complete, once: {:?}",
        world.events
    );
}
