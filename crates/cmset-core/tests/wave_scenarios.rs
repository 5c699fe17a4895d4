//! Rollouts in waves, scenario by scenario: the set planner and the workload planner driven together
//! over a small simulated world (revisions appear when planned, workloads move as the workload
//! controller would move them, health is set by the test, time moves when the test says). Every
//! decision is made from the set's status and `now` only, as after a restart of the operator.

use std::collections::BTreeMap;

use cmset_api::{
    AnalysisRef, AnalysisRunStatus, AnalysisTemplateSpec, AnalysisVerdict, ChangeWindow, ChangeWindowSpec,
    ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, RolloutPhase, RolloutSpec, RolloutWindow, Strategy,
    WindowKind, WorkloadState, WorkloadStatus, labels,
};
use cmset_core::analysis::{self, Analysis, QueryOutcome};
use cmset_core::policy::break_glass::{OverrideView, judge};
use cmset_core::policy::windows::{Window, WindowSource};
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::plan::{EventKind, SetInput, SetPlan, plan_set};
use cmset_core::rollout::waves::{Gate, WaveAnalysis, gate, transitions};
use cmset_core::rollout::window_hold::{cluster_windows_for, window_state};
use cmset_core::set::{SetRef, SourceState, rollout_id};
use cmset_core::workloads::health::{Health, Wave};
use cmset_core::workloads::observe::{RevisionView, WorkloadKind, WorkloadView};
use k8s_openapi::api::core::v1::{ConfigMapEnvSource, Container, EnvFromSource, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use support::revision_of;

mod support;

const START: i64 = 1_800_000_000;

fn at(second: i64) -> Time {
    Time(Timestamp::from_second(START + second).unwrap())
}

fn deployment(name: &str, wave: Option<i32>, reads: &str) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: name.into(),
        uid: format!("uid-{name}"),
        pod_spec: PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(vec![EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: reads.to_string(),
                        optional: None,
                    }),
                    ..EnvFromSource::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        },
        template_labels: BTreeMap::new(),
        wave: wave.map_or(Wave::Number(0), Wave::Number),
        health: Health::Healthy,
    }
}

fn reads(workload: &WorkloadView) -> String {
    workload.pod_spec.containers[0].env_from.as_ref().unwrap()[0]
        .config_map_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
}

/// A set, its revisions and the workloads that read it, at a time the test moves.
struct World {
    set: ConfigMapSet,
    revisions: Vec<RevisionView>,
    workloads: Vec<WorkloadView>,
    now: i64,
    /// Every event the set planner asked for, in order.
    events: Vec<(EventKind, &'static str, String)>,
    /// Every move a workload made: (workload, from, to).
    moves: Vec<(String, String, String)>,
    /// Workloads waiting for the cluster-wide rollout budget, by UID (the budget itself is tested in
    /// `budget_props`): the workload controller does not move them.
    budget_waiting: BTreeMap<String, String>,
    /// The set's analyses as the I/O layer resolves them; `None`: no analysis.
    analyses: Option<Result<Vec<Analysis>, String>>,
    /// Runs measured since the last plan (else the status's runs are planned from).
    measured: Option<Vec<AnalysisRunStatus>>,
    /// Every query sent to Prometheus, in order.
    sent: Vec<String>,
    /// The cluster's windows that apply to the set.
    cluster: Vec<Window>,
    /// The WindowOverrides of the set's namespace.
    overrides: Vec<OverrideView>,
}

impl World {
    fn new(rollout: Option<RolloutSpec>, workloads: Vec<WorkloadView>) -> Self {
        let mut set = ConfigMapSet::new(
            "app",
            ConfigMapSetSpec {
                template: ConfigMapTemplate {
                    data: Some(BTreeMap::from([("mode".to_string(), "v1".to_string())])),
                    ..ConfigMapTemplate::default()
                },
                revision_history_limit: 10,
                rollout,
                config_map_name: None,
                ..ConfigMapSetSpec::default()
            },
        );
        set.metadata.namespace = Some("team".into());
        set.metadata.uid = Some("set-uid".into());
        set.metadata.generation = Some(1);
        Self {
            set,
            revisions: Vec::new(),
            workloads,
            now: 0,
            events: Vec::new(),
            moves: Vec::new(),
            budget_waiting: BTreeMap::new(),
            analyses: None,
            measured: None,
            sent: Vec::new(),
            cluster: Vec::new(),
            overrides: Vec::new(),
        }
    }

    fn plan(&self) -> SetPlan {
        let recorded = self
            .set
            .status
            .as_ref()
            .and_then(|s| s.rollout.as_ref())
            .map(|r| r.analysis.clone())
            .unwrap_or_default();
        let runs = self.measured.clone().unwrap_or(recorded);
        let windows = window_state((&self.set).into(), &self.cluster, at(self.now).0)
            .with_break_glass(judge((&self.set).into(), &self.overrides));
        plan_set(&SetInput {
            set: (&self.set).into(),
            source: SourceState::Inline,
            revisions: &self.revisions,
            workloads: &self.workloads,
            history: &[],
            pod_refs: Some(&Default::default()),
            now: at(self.now),
            budget_waiting: &self.budget_waiting,
            analysis: self.analyses.as_ref().map(|analyses| WaveAnalysis {
                analyses,
                runs: &runs,
            }),
            windows: &windows,
            schemas: &Default::default(),
            check_jobs: &Default::default(),
            content_budget: Default::default(),
        })
    }

    /// One reconcile of the set: what it plans is carried out.
    fn reconcile_set(&mut self) -> SetPlan {
        let plan = self.plan();
        self.measured = None;
        if let Some(new) = &plan.create {
            let number = plan.status.revision.unwrap();
            self.revisions.push(revision_of(&self.set, new.name(), number));
        } else if let (Some(current), Some(number)) = (&plan.status.current_revision, plan.status.revision) {
            // Back to an earlier content: the revision that holds it is numbered anew, as the I/O
            // layer renumbers it.
            for r in self.revisions.iter_mut().filter(|r| r.name == *current) {
                r.annotations
                    .insert(labels::REVISION.to_string(), number.to_string());
            }
        }
        for event in &plan.events {
            self.events
                .push((event.kind.clone(), event.reason, event.message.clone()));
        }
        self.set.status = Some(plan.status.clone());
        plan
    }

    /// One reconcile of every workload, as the workload controller makes it.
    fn reconcile_workloads(&mut self) {
        let set: SetRef<'_> = (&self.set).into();
        let identity = inline_identity(set);
        let lowest = self
            .workloads
            .iter()
            .filter_map(|w| w.wave.number())
            .min()
            .unwrap_or(0);
        let mut moved = Vec::new();
        for (i, workload) in self.workloads.iter().enumerate() {
            if self.budget_waiting.contains_key(&workload.uid) {
                continue;
            }
            let Some(target) = SetTarget::observed(set, identity.as_deref(), &self.revisions, &workload.uid)
            else {
                continue;
            };
            let windows = window_state(set, &self.cluster, at(self.now).0)
                .with_break_glass(judge(set, &self.overrides));
            let held = windows.holds(set, set.status().and_then(|s| s.rollout.as_ref()));
            let gate = gate(set, &target.current, workload, lowest, held);
            let plan = plan_workload(workload, &[target.gated(gate)]);
            for change in plan.changes {
                moved.push((i, change.from, change.to));
            }
        }
        for (i, from, to) in moved {
            let workload = &mut self.workloads[i];
            let reference = workload.pod_spec.containers[0].env_from.as_mut().unwrap()[0]
                .config_map_ref
                .as_mut()
                .unwrap();
            reference.name = to.clone();
            // A moved workload rolls out its new template first.
            workload.health = Health::Progressing;
            self.moves.push((workload.name.clone(), from, to));
        }
    }

    /// Set and workloads reconcile until neither has anything left to do.
    fn settle(&mut self) -> SetPlan {
        for _ in 0..10 {
            self.reconcile_workloads();
            let before = self.set.status.clone();
            let plan = self.reconcile_set();
            let moves = self.moves.len();
            self.reconcile_workloads();
            if before == self.set.status && moves == self.moves.len() {
                return plan;
            }
        }
        panic!("the world did not settle");
    }

    /// Every workload's rollout completes and is healthy; then everything settles.
    fn heal_all(&mut self) -> SetPlan {
        for w in &mut self.workloads {
            w.health = Health::Healthy;
        }
        self.settle()
    }

    fn change_content(&mut self, value: &str) {
        let data = self.set.spec.template.data.as_mut().unwrap();
        data.insert("mode".into(), value.into());
        self.set.metadata.generation = Some(self.set.metadata.generation.unwrap() + 1);
    }

    fn workload(&mut self, name: &str) -> &mut WorkloadView {
        self.workloads.iter_mut().find(|w| w.name == name).unwrap()
    }

    fn entry(&self, name: &str) -> WorkloadStatus {
        let status = self.set.status.as_ref().unwrap();
        status.workloads.iter().find(|w| w.name == name).unwrap().clone()
    }

    fn current(&self) -> String {
        self.set
            .status
            .as_ref()
            .unwrap()
            .current_revision
            .clone()
            .unwrap()
    }

    fn rollout(&self) -> cmset_api::RolloutStatus {
        self.set
            .status
            .as_ref()
            .unwrap()
            .rollout
            .clone()
            .expect("a rollout is recorded")
    }

    fn ready(&self) -> (String, String) {
        let ready = self.set.status.as_ref().unwrap().condition("Ready").unwrap();
        (ready.status.clone(), ready.reason.clone())
    }

    fn ready_message(&self) -> String {
        let ready = self.set.status.as_ref().unwrap().condition("Ready").unwrap();
        ready.message.clone()
    }

    fn reads(&self, name: &str) -> String {
        reads(self.workloads.iter().find(|w| w.name == name).unwrap())
    }

    fn reasons(&self) -> Vec<&'static str> {
        self.events.iter().map(|(_, reason, _)| *reason).collect()
    }
}

fn rollout(stabilization: i32, deadline: i32, auto_rollback: bool) -> RolloutSpec {
    RolloutSpec {
        stabilization_seconds: stabilization,
        progress_deadline_seconds: deadline,
        auto_rollback,
        ..RolloutSpec::default()
    }
}

impl World {
    /// Sets or removes annotation `key` on the set (what `kubectl cmset pause|resume|promote` write).
    fn annotate(&mut self, key: &str, value: Option<&str>) {
        let annotations = self.set.metadata.annotations.get_or_insert_with(Default::default);
        match value {
            Some(v) => annotations.insert(key.to_string(), v.to_string()),
            None => annotations.remove(key),
        };
    }

    /// `user` (allowed to) creates a WindowOverride for the rollout under way, and cmset's webhook
    /// records them.
    fn break_glass(&mut self, user: &str) {
        let rollout = self.rollout();
        self.overrides.push(OverrideView {
            name: format!("app-{}", self.overrides.len()),
            set_kind: cmset_core::set::SetKind::ConfigMapSet,
            set_name: "app".into(),
            set_uid: "set-uid".into(),
            revision: rollout.revision.clone(),
            started_at: rollout.started_at.unwrap().0,
            requested_by: Some(user.into()),
        });
    }

    /// Prometheus answers `outcome` to every run a plan lists as due now, as the I/O layer asks them
    /// between two plans: the queries the planner rendered, and no other.
    fn measure(&mut self, outcome: QueryOutcome) {
        let Some(Ok(analyses)) = self.analyses.clone() else {
            return;
        };
        let plan = self.plan();
        let mut runs = plan
            .status
            .rollout
            .as_ref()
            .map(|r| r.analysis.clone())
            .unwrap_or_default();
        let now = at(self.now);
        let planned = analysis::RunPlaces::of(&runs);
        for due in &plan.analysis_due {
            self.sent.push(due.query.clone());
            let analysis = analyses.iter().find(|a| a.template == due.template).unwrap();
            let mut run = due.clone();
            analysis::record(&mut run, analysis, &outcome, &now);
            // A run the status writes in a group is recorded on its own.
            match planned.of_run(due) {
                Some(at) => runs[at] = run,
                None => runs.push(run),
            }
        }
        self.measured = Some(runs);
    }

    /// How many events told `text` (the planner merges one reconcile's events into one).
    fn told(&self, text: &str) -> usize {
        self.events.iter().filter(|(_, _, m)| m.contains(text)).count()
    }
}

/// [`two_waves`], rolled out, whose each next wave then waits for a promotion (`promotion: Manual`).
fn two_waves_promoted_by_hand(spec: RolloutSpec) -> (World, String) {
    let (mut world, first) = two_waves(Some(spec));
    world.set.spec.rollout.as_mut().unwrap().promotion = cmset_api::Promotion::Manual;
    (world, first)
}

/// Two waves on revision 1 of `app`, rolled out and healthy.
fn two_waves(spec: Option<RolloutSpec>) -> (World, String) {
    let mut world = World::new(
        spec,
        vec![
            deployment("first", None, "app"),
            deployment("second", Some(1), "app"),
        ],
    );
    for _ in 0..3 {
        world.settle();
        world.heal_all();
        world.now += 100;
    }
    world.settle();
    let first = world.current();
    assert_eq!(world.reads("first"), first);
    assert_eq!(world.reads("second"), first);
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    (world, first)
}

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

// ------------------------------------------------------------------------- pause and promotion --

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
fn promote_current(world: &mut World) {
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

/// Two waves with an analysis of `error-rate` (fails above 0.05, one failure tolerated, measured
/// every 10 s) and a 30 s stabilization window.
fn analysed(auto_rollback: bool) -> (World, String) {
    let mut spec = rollout(30, 300, auto_rollback);
    let reference = AnalysisRef {
        template: "error-rate".into(),
        args: BTreeMap::from([("service".to_string(), "checkout".to_string())]),
    };
    spec.analysis = vec![reference.clone()];
    let (mut world, old) = two_waves(Some(spec));
    let template = AnalysisTemplateSpec {
        args: vec![cmset_api::AnalysisArg {
            name: "service".into(),
            ..cmset_api::AnalysisArg::default()
        }],
        query: r#"errors{namespace="{{namespace}}",service="{{args.service}}",wave="{{wave}}"}"#.into(),
        success_condition: "result < 0.05".into(),
        interval_seconds: 10,
        failure_limit: 1,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    world.analyses = Some(Ok(vec![Analysis::resolve(&reference, &template).unwrap()]));
    (world, old)
}

/// How many workloads the per-workload runs of `template` in `wave` measure, in groups or on their own.
fn workloads_measured(world: &World, wave: i32, template: &str) -> usize {
    runs_of_wave(world, wave)
        .iter()
        .filter(|r| r.template == template)
        .map(|r| r.workloads.len().max(usize::from(r.workload.is_some())))
        .sum()
}

fn runs_of_wave(world: &World, wave: i32) -> Vec<AnalysisRunStatus> {
    world
        .rollout()
        .analysis
        .into_iter()
        .filter(|r| r.wave == wave)
        .collect()
}

/// Measures every 10 s with `value` until `seconds` have passed, settling the world after each.
fn measure_for(world: &mut World, seconds: i64, outcome: &QueryOutcome) {
    for _ in 0..seconds / 10 {
        world.now += 10;
        world.measure(outcome.clone());
        world.settle();
    }
}

#[test]
fn a_good_change_passes_analysis_wave_by_wave() {
    let (mut world, _) = analysed(true);
    world.change_content("v2");
    world.settle();
    let new = world.current();
    assert_eq!((world.reads("first"), world.rollout().wave), (new.clone(), 0));
    // The window has not begun: nothing is measured yet, and wave 1 waits.
    world.heal_all();
    let runs = runs_of_wave(&world, 0);
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].query,
        r#"errors{namespace="team",service="checkout",wave="0"}"#
    );
    assert_eq!(
        (runs[0].verdict, runs[0].measurements),
        (AnalysisVerdict::Running, 0)
    );
    assert_ne!(world.reads("second"), new);

    // Measured during the window: passing, and the window ends: wave 1 moves.
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.01]));
    assert_eq!(world.reads("second"), new, "wave 0 passed its analysis");
    let passed = &runs_of_wave(&world, 0)[0];
    assert_eq!(passed.verdict, AnalysisVerdict::Passed);
    assert_eq!(passed.last_value.as_deref(), Some("0.01"));
    assert_eq!(passed.condition, "result < 0.05");
    assert!(passed.measurements >= 3, "{passed:?}");

    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.02]));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(runs_of_wave(&world, 1)[0].verdict, AnalysisVerdict::Passed);
}

#[test]
fn a_metric_gone_bad_fails_wave_0_and_rolls_it_back() {
    let (mut world, old) = analysed(true);
    world.change_content("bad");
    world.settle();
    world.heal_all();
    let bad = world.current();
    // One failure is tolerated; the second fails the wave.
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.3]));
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_eq!(runs_of_wave(&world, 0)[0].failures, 1);
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.4]));
    world.settle();
    let rollout = world.rollout();
    assert_eq!((rollout.phase, rollout.wave), (RolloutPhase::Failed, 0));
    assert!(
        rollout.message.as_deref().unwrap().contains("error-rate"),
        "{rollout:?}"
    );
    assert_eq!(runs_of_wave(&world, 0)[0].verdict, AnalysisVerdict::Failed);
    assert_eq!(world.reads("first"), old, "rolled back");
    assert_eq!(world.entry("first").state, WorkloadState::RolledBack);
    assert!(
        world
            .moves
            .iter()
            .all(|(w, _, to)| !(w == "second" && *to == bad))
    );
    assert!(world.reasons().contains(&"AnalysisFailed"), "{:?}", world.events);
    assert_eq!(world.ready(), ("False".into(), "RolloutFailed".into()));
    let history = &world.set.status.as_ref().unwrap().history;
    assert!(history.iter().any(|h| h.name == bad && h.failed));
}

#[test]
fn inconclusive_analysis_holds_the_wave_then_fails_at_the_deadline() {
    let (mut world, old) = analysed(true);
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let new = world.current();
    // No data for longer than the window: the wave holds, never promotes.
    measure_for(&mut world, 100, &QueryOutcome::NoData);
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_ne!(world.reads("second"), new);
    let held = &runs_of_wave(&world, 0)[0];
    assert_eq!(held.verdict, AnalysisVerdict::Inconclusive);
    // Prometheus unreachable: still inconclusive, and at the deadline (300 s after the move) it fails.
    measure_for(&mut world, 200, &QueryOutcome::Error("connection refused".into()));
    let rollout = world.rollout();
    assert_eq!(rollout.phase, RolloutPhase::Failed, "{rollout:?}");
    assert_eq!(world.reads("first"), old);
    assert_ne!(world.reads("second"), new);
}

#[test]
fn an_analysis_that_cannot_run_holds_and_says_why() {
    let (mut world, _) = analysed(false);
    world.analyses = Some(Err("AnalysisTemplate \"error-rate\" not found".into()));
    world.change_content("v2");
    world.settle();
    world.heal_all();
    world.now += 100;
    world.settle();
    let new = world.current();
    assert_eq!(world.rollout().phase, RolloutPhase::Progressing);
    assert_ne!(world.reads("second"), new);
    let run = &runs_of_wave(&world, 0)[0];
    assert_eq!(run.verdict, AnalysisVerdict::Inconclusive);
    assert!(run.message.as_deref().unwrap().contains("not found"), "{run:?}");
    world.now += 300;
    world.settle();
    assert_eq!(world.rollout().phase, RolloutPhase::Failed);
}

/// A namespace admin can write the set's status. Whatever it says of the workloads, their kinds and
/// waves, or of the analysis runs and their queries, the queries sent are the ones cmset renders from
/// its templates, the current revision, the wave and the members it observes; the runs it made up are
/// dropped from the status.
#[test]
fn a_status_rewritten_by_the_namespace_changes_no_query_that_is_sent() {
    let (mut world, _) = analysed(false);
    let per_workload = AnalysisTemplateSpec {
        args: Vec::new(),
        query: r#"restarts{namespace="{{namespace}}",{{workload.kind}}=~"{{workload.name}}-.*"}"#.into(),
        success_condition: "result == 0".into(),
        interval_seconds: 10,
        failure_limit: 0,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    let reference = AnalysisRef {
        template: "restarts".into(),
        args: BTreeMap::new(),
    };
    if let Some(Ok(analyses)) = &mut world.analyses {
        analyses.push(Analysis::resolve(&reference, &per_workload).unwrap());
    }
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let derived = [
        r#"errors{namespace="team",service="checkout",wave="0"}"#,
        r#"restarts{namespace="team",Deployment=~"first-.*"}"#,
    ];
    let injected = r#"x"} or count(kube_secret_info) or {a=""#;
    for _ in 0..3 {
        let status = world.set.status.as_mut().unwrap();
        for entry in &mut status.workloads {
            entry.name = injected.into();
            entry.kind = "Secret".into();
            entry.wave = 0;
        }
        let rollout = status.rollout.as_mut().unwrap();
        for run in &mut rollout.analysis {
            run.query = "count(kube_secret_info)".into();
        }
        let forged = AnalysisRunStatus {
            template: "restarts".into(),
            workload_kind: Some("Secret".into()),
            workload: Some(injected.into()),
            wave: rollout.wave,
            query: format!(r#"restarts{{namespace="team",Secret=~"{injected}-.*"}}"#),
            condition: "result == 0".into(),
            ..AnalysisRunStatus::default()
        };
        rollout.analysis.push(forged);
        rollout.analysis.push(AnalysisRunStatus {
            template: "error-rate".into(),
            wave: 1,
            query: "kube_secret_info".into(),
            condition: "result < 0.05".into(),
            ..AnalysisRunStatus::default()
        });
        world.now += 10;
        world.measure(QueryOutcome::Samples(vec![0.0]));
        world.settle();
    }
    assert_eq!(world.sent.len(), 6, "{:?}", world.sent);
    for query in &world.sent {
        assert!(derived.contains(&query.as_str()), "sent {query:?}");
    }
    // Each rewrite dropped the runs it forged, and with them what was measured: left alone, the wave
    // takes its two measurements an interval apart and passes.
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    for query in &world.sent {
        assert!(derived.contains(&query.as_str()), "sent {query:?}");
    }
    // Wave 0 passed and wave 1 moves: of wave 0, its per-wave run is kept (its per-workload run, passed,
    // is not: see `the_status_of_a_set_with_5000_analysed_readers_stays_small`).
    assert_eq!(world.rollout().wave, 1);
    let queries: Vec<String> = world.rollout().analysis.into_iter().map(|r| r.query).collect();
    assert_eq!(queries, [derived[0]], "only cmset's runs are recorded");
}

/// Once no wave is analysed (the rollout completed), runs written into the status by the namespace are
/// dropped at the next plan; the runs cmset measured stay.
#[test]
fn runs_made_up_after_the_rollout_are_dropped() {
    let (mut world, _) = analysed(false);
    world.change_content("v2");
    world.settle();
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.01]));
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.01]));
    let done = world.rollout();
    assert_eq!(done.phase, RolloutPhase::Complete);
    let measured = done.analysis.clone();
    assert_eq!(measured.len(), 2, "{measured:?}");

    let rollout = world.set.status.as_mut().unwrap().rollout.as_mut().unwrap();
    rollout.analysis.push(AnalysisRunStatus {
        template: "error-rate".into(),
        wave: 1,
        query: "count(kube_secret_info)".into(),
        condition: "result < 0.05".into(),
        ..AnalysisRunStatus::default()
    });
    rollout.analysis[0].query = "up".into();
    world.now += 10;
    world.settle();
    assert_eq!(world.rollout().analysis, measured[1..].to_vec());
}

#[test]
fn one_sample_never_passes_a_wave_the_window_stretches_for_a_second() {
    let (mut world, _) = analysed(true);
    world.set.spec.rollout.as_mut().unwrap().stabilization_seconds = 0;
    world.change_content("v2");
    world.settle();
    world.heal_all();
    let new = world.current();
    world.now += 1;
    world.measure(QueryOutcome::Samples(vec![0.01]));
    world.settle();
    assert_ne!(world.reads("second"), new, "no window, one sample: not enough");
    assert_eq!(runs_of_wave(&world, 0)[0].verdict, AnalysisVerdict::Running);
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.01]));
    world.settle();
    assert_eq!(
        world.reads("second"),
        new,
        "two samples an interval apart pass it"
    );
    assert_eq!(runs_of_wave(&world, 0)[0].streak, 2);
}

/// Bytes of the set's status as JSON, as the API server stores it (etcd refuses objects over 1.5 MiB).
fn status_bytes(world: &World) -> usize {
    json_len(world.set.status.as_ref().unwrap())
}

fn json_len(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).unwrap().len()
}

/// 5,000 readers in two waves, with a per-wave analysis and one per workload. The wave in progress
/// writes its 2,500 per-workload runs measured alike as a few groups; once a wave passed, they leave
/// the status (its per-wave run stays). It still shows every workload, and stays under 1.3 MB (etcd
/// refuses 1.5 MiB): the workloads take nearly all of it.
#[test]
fn the_status_of_a_set_with_5000_analysed_readers_stays_small() {
    let names: Vec<String> = (0..5_000).map(|n| format!("reader-{n:04}")).collect();
    let workloads = names
        .iter()
        .enumerate()
        .map(|(n, name)| WorkloadView {
            // As long as the API server's: the status holds every workload's uid.
            uid: format!("0c1b7e6a-1f2d-4e5b-9a3c-{n:012x}"),
            ..deployment(name, Some(i32::from(n >= 2_500)), "app")
        })
        .collect();
    let mut world = World::new(Some(rollout(30, 300, false)), workloads);
    world.set.spec.rollout.as_mut().unwrap().analysis = vec![
        AnalysisRef {
            template: "error-rate".into(),
            args: BTreeMap::new(),
        },
        AnalysisRef {
            template: "restarts".into(),
            args: BTreeMap::new(),
        },
    ];
    let per_wave = AnalysisTemplateSpec {
        query: r#"sum(rate(http_errors_total{namespace="{{namespace}}",revision="{{revision}}"}[5m]))"#
            .into(),
        success_condition: "result < 0.05".into(),
        interval_seconds: 10,
        args: Vec::new(),
        failure_limit: 0,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    let per_workload = AnalysisTemplateSpec {
        query: r#"sum(increase(kube_pod_container_status_restarts_total{namespace="{{namespace}}",pod=~"{{workload.name}}-.*"}[5m]))"#.into(),
        success_condition: "result == 0".into(),
        interval_seconds: 10,
        args: Vec::new(),
        failure_limit: 0,
        initial_delay_seconds: 0,
        count: None,
        inconclusive_limit: None,
    };
    world.analyses = Some(Ok(vec![
        Analysis::resolve(&world.set.spec.rollout.as_ref().unwrap().analysis[0], &per_wave).unwrap(),
        Analysis::resolve(
            &world.set.spec.rollout.as_ref().unwrap().analysis[1],
            &per_workload,
        )
        .unwrap(),
    ]));
    world.settle();
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    world.heal_all();
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);

    world.change_content("v2");
    world.settle();
    let mut largest = status_bytes(&world);
    world.heal_all();
    // Wave 0 is analysed: its 2,500 per-workload runs and its per-wave run are shown.
    world.now += 10;
    world.measure(QueryOutcome::Samples(vec![0.0]));
    world.settle();
    largest = largest.max(status_bytes(&world));
    assert_eq!(workloads_measured(&world, 0, "restarts"), 2_500);
    let grouped = runs_of_wave(&world, 0).len();
    assert!(
        grouped <= 4,
        "{grouped} entries: the 2,500 measured alike are grouped"
    );
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    largest = largest.max(status_bytes(&world));
    // Wave 1 moves; wave 0 passed. Its per-workload runs are no longer kept: its per-wave run is.
    assert_eq!(world.rollout().wave, 1);
    let earlier = runs_of_wave(&world, 0);
    assert_eq!(earlier.len(), 1, "{:?}", &earlier[..earlier.len().min(2)]);
    assert_eq!(
        (earlier[0].template.as_str(), earlier[0].verdict),
        ("error-rate", AnalysisVerdict::Passed)
    );
    // Between the waves the status holds every workload and next to no analysis: under etcd's limit.
    let between = status_bytes(&world);
    let analysis_between = json_len(&world.rollout().analysis);
    assert!(analysis_between < 1_024, "{analysis_between} bytes of analysis");
    assert!(between < 1_536 * 1_024, "{between} bytes between the waves");
    world.heal_all();
    largest = largest.max(status_bytes(&world));
    measure_for(&mut world, 30, &QueryOutcome::Samples(vec![0.0]));
    largest = largest.max(status_bytes(&world));
    assert_eq!(world.rollout().phase, RolloutPhase::Complete);
    assert_eq!(workloads_measured(&world, 1, "restarts"), 2_500);
    assert!(
        runs_of_wave(&world, 1)
            .iter()
            .all(|r| r.verdict == AnalysisVerdict::Passed)
    );
    assert_eq!(
        runs_of_wave(&world, 0).len(),
        1,
        "wave 0's record is its per-wave run"
    );
    let status = world.set.status.as_ref().unwrap();
    // Every workload is accounted for: the settled ones by their UIDs (see `cmset_core::revisions::fit`).
    assert_eq!(cmset_core::revisions::fit::workload_count(status), 5_000);
    assert_eq!(status.settled_workloads.as_ref().map(|s| s.count), Some(5_000));
    // Measured: 2,893,666 bytes at the end while every wave's runs were kept; 2,106,262 at the largest
    // while the wave in progress listed a run per workload (about 400 bytes each).
    let end = status_bytes(&world);
    let analysis_end = json_len(&world.rollout().analysis);
    eprintln!(
        "largest status: {largest} bytes; between the waves {between}; at the end {end} (workloads {}, \
         analysis {analysis_end})",
        json_len(&status.workloads),
    );
    assert!(
        analysis_end < 64 * 1_024,
        "{analysis_end} bytes of analysis at the end"
    );
    // Measured: 1,268,993 at the largest while every workload was listed (236 bytes each); 493,197
    // once the list keeps what is not settled (cmset_core::revisions::fit), 111,734 at the end.
    assert!(largest < 1 << 20, "{largest} bytes at the largest");
}

// ------------------------------------------------------------------------------ change windows --
// START is 2027-01-15T08:00:00Z; `two_waves` leaves the world at 08:05.

fn window(kind: WindowKind, name: Option<&str>, schedule: &str, duration: &str) -> RolloutWindow {
    RolloutWindow {
        name: name.map(str::to_string),
        kind,
        schedule: schedule.into(),
        duration: duration.into(),
        time_zone: None,
    }
}

/// A window of the cluster's ChangeWindow `freeze`.
fn cluster_window(kind: WindowKind, schedule: &str, duration: &str) -> Window {
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
    fn set_windows(&mut self, windows: Vec<RolloutWindow>) {
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
fn immediate(windows: Vec<RolloutWindow>) -> (World, String) {
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
fn freeze(windows: Vec<RolloutWindow>, exempt: Vec<Strategy>) -> ChangeWindow {
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
