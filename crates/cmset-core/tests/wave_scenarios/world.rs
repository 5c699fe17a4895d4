//! The simulated world: a set, its readers and their health, the set planner and the workload planner
//! run as the controllers would, on a clock the test moves.

use super::*;

pub(crate) const START: i64 = 1_800_000_000;

pub(crate) fn at(second: i64) -> Time {
    Time(Timestamp::from_second(START + second).unwrap())
}

pub(crate) fn deployment(name: &str, wave: Option<i32>, reads: &str) -> WorkloadView {
    support::deployment_reading(name, Wave::Number(wave.unwrap_or(0)), reads)
}

pub(crate) fn reads(workload: &WorkloadView) -> String {
    workload.pod_spec.containers[0].env_from.as_ref().unwrap()[0]
        .config_map_ref
        .as_ref()
        .unwrap()
        .name
        .clone()
}

/// A set, its revisions and the workloads that read it, at a time the test moves.
pub(crate) struct World {
    pub(crate) set: ConfigMapSet,
    pub(crate) revisions: Vec<RevisionView>,
    pub(crate) workloads: Vec<WorkloadView>,
    pub(crate) now: i64,
    /// Every event the set planner asked for, in order.
    pub(crate) events: Vec<(EventKind, &'static str, String)>,
    /// Every move a workload made: (workload, from, to).
    pub(crate) moves: Vec<(String, String, String)>,
    /// Workloads waiting for the cluster-wide rollout budget, by UID (the budget itself is tested in
    /// `budget_props`): the workload controller does not move them.
    pub(crate) budget_waiting: BTreeMap<String, String>,
    /// The set's analyses as the I/O layer resolves them; `None`: no analysis.
    pub(crate) analyses: Option<Result<Vec<Analysis>, String>>,
    /// Runs measured since the last plan (else the status's runs are planned from).
    pub(crate) measured: Option<Vec<AnalysisRunStatus>>,
    /// Every query sent to Prometheus, in order.
    pub(crate) sent: Vec<String>,
    /// The cluster's windows that apply to the set.
    pub(crate) cluster: Vec<Window>,
    /// The WindowOverrides of the set's namespace.
    pub(crate) overrides: Vec<OverrideView>,
}

impl World {
    pub(crate) fn new(rollout: Option<RolloutSpec>, workloads: Vec<WorkloadView>) -> Self {
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

    pub(crate) fn plan(&self) -> SetPlan {
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
    pub(crate) fn reconcile_set(&mut self) -> SetPlan {
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
    pub(crate) fn reconcile_workloads(&mut self) {
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
    pub(crate) fn settle(&mut self) -> SetPlan {
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
    pub(crate) fn heal_all(&mut self) -> SetPlan {
        for w in &mut self.workloads {
            w.health = Health::Healthy;
        }
        self.settle()
    }

    pub(crate) fn change_content(&mut self, value: &str) {
        let data = self.set.spec.template.data.as_mut().unwrap();
        data.insert("mode".into(), value.into());
        self.set.metadata.generation = Some(self.set.metadata.generation.unwrap() + 1);
    }

    pub(crate) fn workload(&mut self, name: &str) -> &mut WorkloadView {
        self.workloads.iter_mut().find(|w| w.name == name).unwrap()
    }

    pub(crate) fn entry(&self, name: &str) -> WorkloadStatus {
        let status = self.set.status.as_ref().unwrap();
        status.workloads.iter().find(|w| w.name == name).unwrap().clone()
    }

    pub(crate) fn current(&self) -> String {
        self.set
            .status
            .as_ref()
            .unwrap()
            .current_revision
            .clone()
            .unwrap()
    }

    pub(crate) fn rollout(&self) -> cmset_api::RolloutStatus {
        self.set
            .status
            .as_ref()
            .unwrap()
            .rollout
            .clone()
            .expect("a rollout is recorded")
    }

    pub(crate) fn ready(&self) -> (String, String) {
        let ready = self.set.status.as_ref().unwrap().condition("Ready").unwrap();
        (ready.status.clone(), ready.reason.clone())
    }

    pub(crate) fn ready_message(&self) -> String {
        let ready = self.set.status.as_ref().unwrap().condition("Ready").unwrap();
        ready.message.clone()
    }

    pub(crate) fn reads(&self, name: &str) -> String {
        reads(self.workloads.iter().find(|w| w.name == name).unwrap())
    }

    pub(crate) fn reasons(&self) -> Vec<&'static str> {
        self.events.iter().map(|(_, reason, _)| *reason).collect()
    }
}

pub(crate) fn rollout(stabilization: i32, deadline: i32, auto_rollback: bool) -> RolloutSpec {
    RolloutSpec {
        stabilization_seconds: stabilization,
        progress_deadline_seconds: deadline,
        auto_rollback,
        ..RolloutSpec::default()
    }
}

impl World {
    /// Sets or removes annotation `key` on the set (what `kubectl cmset pause|resume|promote` write).
    pub(crate) fn annotate(&mut self, key: &str, value: Option<&str>) {
        let annotations = self.set.metadata.annotations.get_or_insert_with(Default::default);
        match value {
            Some(v) => annotations.insert(key.to_string(), v.to_string()),
            None => annotations.remove(key),
        };
    }

    /// `user` (allowed to) creates a WindowOverride for the rollout under way, and cmset's webhook
    /// records them.
    pub(crate) fn break_glass(&mut self, user: &str) {
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
    pub(crate) fn measure(&mut self, outcome: QueryOutcome) {
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
    pub(crate) fn told(&self, text: &str) -> usize {
        self.events.iter().filter(|(_, _, m)| m.contains(text)).count()
    }
}

/// [`two_waves`], rolled out, whose each next wave then waits for a promotion (`promotion: Manual`).
pub(crate) fn two_waves_promoted_by_hand(spec: RolloutSpec) -> (World, String) {
    let (mut world, first) = two_waves(Some(spec));
    world.set.spec.rollout.as_mut().unwrap().promotion = cmset_api::Promotion::Manual;
    (world, first)
}

/// Two waves on revision 1 of `app`, rolled out and healthy.
pub(crate) fn two_waves(spec: Option<RolloutSpec>) -> (World, String) {
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
