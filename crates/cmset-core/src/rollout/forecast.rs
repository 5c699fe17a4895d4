//! What a change of a set will do, and when: the set planner ([`crate::rollout::plan::plan_set`]) and the one
//! decision of where each workload points ([`crate::rollout::decide`]) stepped together on a scripted clock,
//! as the set and workload controllers would step them, through window boundaries, stabilization,
//! promotion and the rollout budget.
//!
//! Nothing here decides anything of its own: every step asks the same functions the controllers ask,
//! and carries out what they planned on a simulated world (revisions appear when planned, moved
//! workloads become healthy [`Clock::ready_after`] after their move, time jumps to the next instant a
//! plan said it would look again, a window opens or closes, or a workload becomes healthy). What the
//! forecast cannot know (a person's promotion or resume, other sets' moves finishing, analysis
//! results) stops it there, and it says where it stopped and why.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cmset_api::{ConfigMapSet, ConfigMapSetStatus, RolloutPhase, SecretSet, WorkloadState, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::content::content_check::SchemaTexts;
use crate::policy::break_glass::{OverrideView, judge};
use crate::policy::budget::{Admit, Budget};
use crate::revisions::naming::refers_to_set;
use crate::revisions::revision::NewRevision;
use crate::rollout::decide::{self, Identity, Observed};
use crate::rollout::pinning::plan_workload;
use crate::rollout::plan::{PlannedEvent, SetInput, SetPlan, plan_set};
use crate::rollout::window_hold::{ClusterView, verdict};
use crate::set::{SetRef, SourceState};
use crate::status::conditions::VALID;
use crate::workloads::health::Health;
use crate::workloads::observe::{HistoryObject, RevisionView, WorkloadView};
use crate::workloads::refs::apply_changes;

/// A set of either kind, owned: the forecast writes the status each plan gives it.
#[derive(Clone, Debug)]
pub enum SetObject {
    ConfigMap(ConfigMapSet),
    Secret(SecretSet),
}

impl SetObject {
    pub fn as_set(&self) -> SetRef<'_> {
        match self {
            Self::ConfigMap(s) => s.into(),
            Self::Secret(s) => s.into(),
        }
    }

    fn status_mut(&mut self) -> &mut Option<ConfigMapSetStatus> {
        match self {
            Self::ConfigMap(s) => &mut s.status,
            Self::Secret(s) => &mut s.status,
        }
    }
}

/// The cluster-wide rollout budget as far as it is known: its cap, the moves under way elsewhere
/// (which the forecast cannot see end) and the workloads already waiting ahead of this change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetView {
    pub cap: usize,
    pub moving_elsewhere: usize,
    pub waiting_ahead: usize,
}

/// The world the change lands in, as read (from the cluster, or from files).
#[derive(Clone, Debug)]
pub struct World<'a> {
    /// The set as it is stored once applied: the live object's metadata and status (if it exists)
    /// with the new spec, its generation moved on when the spec changed.
    pub set: SetObject,
    /// What is known of its content (see [`SourceState`]); `Inline` for a set holding its content.
    pub source: SourceState<'a>,
    pub revisions: Vec<RevisionView>,
    /// Opted-in workloads of the set's namespace.
    pub workloads: Vec<WorkloadView>,
    pub history: &'a [HistoryObject],
    /// Names the namespace's Pods reference; `None`: not known (nothing is pruned that a Pod may run,
    /// the forecast plans as though none did and the caller says so).
    pub pod_refs: Option<&'a BTreeSet<String>>,
    /// The cluster's windows that select the set, or why they are unknown.
    pub cluster: ClusterView,
    pub overrides: &'a [OverrideView],
    pub budget: Option<BudgetView>,
    pub schemas: &'a SchemaTexts,
}

/// The scripted clock: where it starts, how long a moved workload takes to become healthy, and how far
/// ahead the forecast looks.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub start: Timestamp,
    pub ready_after: Duration,
    pub horizon: Duration,
}

/// One move of a workload's references, as the workload controller would make it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Move {
    pub kind: String,
    pub name: String,
    pub uid: String,
    pub wave: Option<i32>,
    pub from: String,
    pub to: String,
    pub at: Timestamp,
    /// What it waited for before it could move (its status entry's message, else the rollout's), if
    /// it waited at all.
    pub waited_for: Option<String>,
}

/// A state the rollout went through, from the instant the planner recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moment {
    pub at: Timestamp,
    pub phase: RolloutPhase,
    pub wave: i32,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub next_window: Option<Timestamp>,
}

/// Where the forecast stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Nothing is left to move: every reader runs the current revision or is left where it is.
    Settled { at: Timestamp },
    /// The rollout waits for what the forecast cannot script (a person, another set's moves, an
    /// analysis): `phase` and `message` as the set's status says.
    Stuck {
        at: Timestamp,
        phase: Option<RolloutPhase>,
        message: String,
    },
    /// The horizon was reached with moves still to come.
    Horizon { at: Timestamp },
}

/// The verdict on a set's change, first thing a plan says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The change is refused: no revision is made (the messages are the status's and the webhook's).
    Refused { messages: Vec<String> },
    /// The content is the current revision's and no reader moves.
    NoChange,
    /// The content is an earlier revision's: it becomes current again under a new number.
    Revert { revision: String, number: Option<i64> },
    /// Workloads move; the first move cannot happen before `until` (`None`: not within the
    /// forecast), held by `by`.
    Held { until: Option<Timestamp>, by: String },
    /// Workloads move from the start.
    RollsOut,
}

/// What the forecast found.
#[derive(Clone, Debug)]
pub struct Forecast {
    /// The first plan the set controller makes once the change is stored: the revision it creates or
    /// reuses, what it prunes.
    pub first: SetPlan,
    /// The status as the set controller writes it after its first plan.
    pub first_status: ConfigMapSetStatus,
    /// The status at the end of the forecast.
    pub status: ConfigMapSetStatus,
    pub moves: Vec<Move>,
    pub timeline: Vec<Moment>,
    /// The events the set controller would publish, in order, with when.
    pub events: Vec<(Timestamp, PlannedEvent)>,
    pub end: End,
    /// The revision the set's status named before the change.
    pub live_revision: Option<String>,
    pub verdict: Verdict,
}

/// How many reconciles of the set and its workloads one instant may take before it is settled.
const ROUNDS_PER_INSTANT: usize = 16;
/// At most this many instants: a forecast is a short story.
const MAX_INSTANTS: usize = 2_000;

/// A simulated world, stepped as the controllers step the real one.
struct Sim<'a> {
    world: World<'a>,
    now: Timestamp,
    clock: Clock,
    /// When each moved workload becomes healthy, by UID.
    ready_at: BTreeMap<String, Timestamp>,
    budget: Option<Budget<String, (i64, String)>>,
    budget_waiting: BTreeMap<String, String>,
    generations: BTreeMap<String, i64>,
    moves: Vec<Move>,
    events: Vec<(Timestamp, PlannedEvent)>,
    /// What each reader that waits to move last waited for, by UID, as its status entry said.
    waiting_for: BTreeMap<String, String>,
}

impl<'a> Sim<'a> {
    fn new(world: World<'a>, clock: Clock) -> Self {
        let budget = world.budget.map(|view| {
            let mut budget = Budget::new(Some(view.cap));
            for i in 0..view.moving_elsewhere {
                budget.observe(&format!("~elsewhere-{i}"), 1, true);
            }
            for i in 0..view.waiting_ahead {
                budget.request(&format!("~ahead-{i}"), (i64::MIN, String::new()), 1);
            }
            budget
        });
        Self {
            world,
            now: clock.start,
            clock,
            ready_at: BTreeMap::new(),
            budget,
            budget_waiting: BTreeMap::new(),
            generations: BTreeMap::new(),
            moves: Vec::new(),
            events: Vec::new(),
            waiting_for: BTreeMap::new(),
        }
    }

    fn set(&self) -> SetRef<'_> {
        self.world.set.as_set()
    }

    /// One reconcile of the set: plan, and carry out what it planned.
    fn reconcile_set(&mut self) -> SetPlan {
        let set = self.world.set.as_set();
        let windows =
            verdict(set, &self.world.cluster, self.now).with_break_glass(judge(set, self.world.overrides));
        let plan_with = |pod_refs| {
            plan_set(&SetInput {
                set,
                source: self.world.source,
                revisions: &self.world.revisions,
                workloads: &self.world.workloads,
                history: self.world.history,
                pod_refs,
                now: Time(self.now),
                budget_waiting: &self.budget_waiting,
                analysis: None,
                windows: &windows,
                schemas: self.world.schemas,
                check_jobs: &Default::default(),
                content_budget: Default::default(),
            })
        };
        let mut plan = plan_with(self.world.pod_refs);
        if plan.needs_pods {
            // Pods unknown: planned as though none ran an old revision (the caller says so).
            let none = BTreeSet::new();
            plan = plan_with(Some(&none));
        }
        if let Some(new) = &plan.create {
            let number = plan.status.revision.unwrap_or(0);
            self.world
                .revisions
                .push(created(new, number, self.now.as_second()));
        } else if let (Some(current), Some(number)) = (&plan.status.current_revision, plan.status.revision) {
            for r in self.world.revisions.iter_mut().filter(|r| r.name == *current) {
                r.annotations
                    .insert(labels::REVISION.to_string(), number.to_string());
            }
        }
        self.world
            .revisions
            .retain(|r| !plan.prune.iter().any(|p| p.name == r.name));
        for event in &plan.events {
            self.events.push((self.now, event.clone()));
        }
        let rollout = plan.status.rollout.as_ref().and_then(|r| r.message.clone());
        for entry in plan
            .status
            .workloads
            .iter()
            .filter(|e| e.state == WorkloadState::Waiting)
        {
            if let Some(message) = entry.message.clone().or_else(|| rollout.clone()) {
                self.waiting_for.insert(entry.uid.clone(), message);
            }
        }
        *self.world.set.status_mut() = Some(plan.status.clone());
        plan
    }

    /// One reconcile of every workload that reads the set, as the workload controller makes it: the
    /// one decision, the plan of its references, the budget's answer. Returns whether any moved.
    fn reconcile_workloads(&mut self) -> bool {
        let set = self.world.set.as_set();
        let kind = set.kind().revision_kind();
        let Some(identity) = self.world.source.identity(set) else {
            return false;
        };
        let windows =
            verdict(set, &self.world.cluster, self.now).with_break_glass(judge(set, self.world.overrides));
        let (window_held, window_override) =
            windows.gate_inputs(set.status().and_then(|s| s.rollout.as_ref()));
        let reads = |w: &WorkloadView| {
            w.referenced_names_of(kind)
                .iter()
                .any(|n| refers_to_set(set.name(), n))
        };
        let observed = Observed {
            set,
            identity_generation: set.generation(),
            identity: Identity::Known(&identity),
            revisions: &self.world.revisions,
            lowest_wave: self
                .world
                .workloads
                .iter()
                .filter(|w| reads(w))
                .filter_map(|w| w.wave.number())
                .min()
                .unwrap_or(0),
            window_held,
            window_override: window_override.as_deref(),
        };
        let mut moved = Vec::new();
        for (i, workload) in self.world.workloads.iter().enumerate() {
            let Ok(target) = decide::target_seeing(&observed, workload, self.world.history) else {
                continue;
            };
            let immediate = target.immediate;
            let plan = plan_workload(workload, std::slice::from_ref(&target));
            if plan.is_empty() {
                if let Some(budget) = &mut self.budget {
                    budget.withdraw(&workload.uid);
                }
                self.budget_waiting.remove(&workload.uid);
                continue;
            }
            let rollback = plan
                .changes
                .iter()
                .any(|c| c.from == target.current && c.to != target.current);
            let generation = *self.generations.get(&workload.uid).unwrap_or(&1);
            if let Some(budget) = self.budget.as_mut().filter(|_| !rollback && !immediate) {
                // The turn is the revision's creation, then the workload's own order.
                let created = self
                    .world
                    .revisions
                    .iter()
                    .find(|r| r.name == target.current)
                    .and_then(|r| r.created)
                    .unwrap_or(i64::MAX);
                let turn = (created, format!("{}/{}", workload.kind, workload.name));
                if let Admit::Wait(waiting) = budget.request(&workload.uid, turn, generation) {
                    self.budget_waiting
                        .insert(workload.uid.clone(), waiting.to_string());
                    continue;
                }
            }
            self.budget_waiting.remove(&workload.uid);
            let waited_for = self.waiting_for.get(&workload.uid).cloned();
            moved.push((i, plan.changes, waited_for));
        }
        let any = !moved.is_empty();
        for (i, changes, waited_for) in moved {
            let workload = &mut self.world.workloads[i];
            let Ok(spec) = apply_changes(&workload.pod_spec, &changes) else {
                continue;
            };
            workload.pod_spec = spec;
            let generation = self.generations.entry(workload.uid.clone()).or_insert(1);
            *generation += 1;
            let moves = workload.kind.rolls_out() && workload.kind.is_mutable();
            if moves {
                workload.health = Health::Progressing;
                let at = self.now + signed(self.clock.ready_after);
                self.ready_at.insert(workload.uid.clone(), at);
                if let Some(budget) = &mut self.budget {
                    budget.observe(&workload.uid, *generation, true);
                }
            } else if let Some(budget) = &mut self.budget {
                budget.observe(&workload.uid, *generation, false);
            }
            for change in changes {
                self.moves.push(Move {
                    kind: workload.kind.to_string(),
                    name: workload.name.clone(),
                    uid: workload.uid.clone(),
                    wave: workload.wave.number(),
                    from: change.from,
                    to: change.to,
                    at: self.now,
                    waited_for: waited_for.clone(),
                });
            }
        }
        any
    }

    /// The workloads whose rollout completes by now become healthy (and free their budget slot).
    fn heal(&mut self) {
        let now = self.now;
        let done: Vec<String> = self
            .ready_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in done {
            self.ready_at.remove(&uid);
            if let Some(w) = self.world.workloads.iter_mut().find(|w| w.uid == uid) {
                w.health = Health::Healthy;
            }
            if let Some(budget) = &mut self.budget {
                let generation = *self.generations.get(&uid).unwrap_or(&1);
                budget.observe(&uid, generation, false);
            }
        }
    }

    /// Set and workloads reconcile at this instant until neither changes anything.
    fn settle(&mut self) -> SetPlan {
        let mut plan = self.reconcile_set();
        for _ in 0..ROUNDS_PER_INSTANT {
            self.heal();
            let moved = self.reconcile_workloads();
            let before = self.set().status().cloned();
            plan = self.reconcile_set();
            if !moved && before.as_ref() == self.set().status() {
                break;
            }
        }
        plan
    }

    /// The next instant anything can change by itself: a plan's recheck, a window boundary, a moved
    /// workload becoming healthy.
    fn next_instant(&self, plan: &SetPlan) -> Option<Timestamp> {
        let set = self.set();
        let windows = verdict(set, &self.world.cluster, self.now);
        let recheck = plan.recheck_in.map(|d| self.now + signed(d));
        let healthy = self.ready_at.values().min().copied();
        [recheck, windows.changes_at, healthy]
            .into_iter()
            .flatten()
            .filter(|t| *t > self.now)
            .min()
    }

    /// Whether any reader still waits to move (or moves).
    fn under_way(&self) -> bool {
        let status = self.set().status();
        let waiting = status.is_some_and(|s| {
            s.workloads
                .iter()
                .any(|w| matches!(w.state, WorkloadState::Pending | WorkloadState::Waiting))
        });
        let rollout = status
            .and_then(|s| s.rollout.as_ref())
            .is_some_and(|r| r.phase.is_under_way() || r.phase == RolloutPhase::Waiting);
        waiting || rollout || !self.ready_at.is_empty()
    }
}

/// A revision the plan creates, as the set controller's watch will see it once it is made.
fn created(new: &NewRevision, number: i64, now: i64) -> RevisionView {
    let metadata = new.metadata();
    let mut annotations = metadata.annotations.clone().unwrap_or_default();
    annotations.insert(labels::REVISION.to_string(), number.to_string());
    RevisionView {
        name: new.name().to_string(),
        uid: format!("forecast-{}", new.name()),
        labels: metadata.labels.clone().unwrap_or_default(),
        annotations,
        owner_references: metadata.owner_references.clone().unwrap_or_default(),
        being_deleted: false,
        created: Some(now),
        resource_version: None,
    }
}

fn signed(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

/// Steps the set and workload controllers' decisions over `world` from `clock.start`, until nothing is
/// left to move, the rollout waits for what cannot be scripted, or the horizon.
pub fn forecast(world: World<'_>, clock: Clock) -> Forecast {
    let live_revision = world
        .set
        .as_set()
        .status()
        .and_then(|s| s.current_revision.clone());
    let live_numbers: BTreeMap<String, Option<i64>> = world
        .revisions
        .iter()
        .map(|r| (r.name.clone(), r.number()))
        .collect();
    let mut sim = Sim::new(world, clock);
    let first = sim.reconcile_set();
    let first_status = first.status.clone();
    let mut plan = sim.settle();
    let mut timeline: Vec<Moment> = Vec::new();
    let end_of_horizon = clock.start + signed(clock.horizon);
    let mut instants = 0;
    let end = loop {
        record(&mut timeline, sim.set().status(), sim.now);
        if !sim.under_way() {
            break End::Settled { at: sim.now };
        }
        let Some(next) = sim.next_instant(&plan) else {
            let status = sim.set().status();
            let rollout = status.and_then(|s| s.rollout.as_ref());
            let entry = status.and_then(|s| {
                s.workloads
                    .iter()
                    .find(|w| w.state == WorkloadState::Waiting)
                    .and_then(|w| w.message.clone())
            });
            break End::Stuck {
                at: sim.now,
                phase: rollout.map(|r| r.phase),
                message: rollout
                    .and_then(|r| r.message.clone())
                    .or(entry)
                    .unwrap_or_else(|| "waits for what the forecast cannot script".to_string()),
            };
        };
        instants += 1;
        if next > end_of_horizon || instants > MAX_INSTANTS {
            break End::Horizon { at: sim.now };
        }
        sim.now = next;
        plan = sim.settle();
    };
    let status = sim.set().status().cloned().unwrap_or_default();
    let verdict = verdict_of(
        &first,
        &first_status,
        live_revision.as_deref(),
        &live_numbers,
        &sim.moves,
        &timeline,
        &end,
        clock.start,
    );
    Forecast {
        first,
        first_status,
        status,
        moves: sim.moves,
        timeline,
        events: sim.events,
        end,
        live_revision,
        verdict,
    }
}

/// Adds the rollout's state at `at` to `timeline` when it differs from the last one recorded.
fn record(timeline: &mut Vec<Moment>, status: Option<&ConfigMapSetStatus>, at: Timestamp) {
    let Some(rollout) = status.and_then(|s| s.rollout.as_ref()) else {
        return;
    };
    let moment = Moment {
        at,
        phase: rollout.phase,
        wave: rollout.wave,
        reason: rollout.reason.clone(),
        message: rollout.message.clone(),
        next_window: rollout.next_window.as_ref().map(|t| t.0),
    };
    let same = timeline.last().is_some_and(|last| {
        (last.phase, last.wave, &last.reason, &last.message)
            == (moment.phase, moment.wave, &moment.reason, &moment.message)
    });
    if !same {
        timeline.push(moment);
    }
}

// The verdict reads every part of the forecast.
#[allow(clippy::too_many_arguments)]
fn verdict_of(
    first: &SetPlan,
    first_status: &ConfigMapSetStatus,
    live_revision: Option<&str>,
    live_numbers: &BTreeMap<String, Option<i64>>,
    moves: &[Move],
    timeline: &[Moment],
    end: &End,
    start: Timestamp,
) -> Verdict {
    let invalid = first_status
        .conditions
        .iter()
        .find(|c| c.type_ == VALID && c.status == "False");
    if let Some(invalid) = invalid {
        let messages = invalid
            .message
            .split("; ")
            .map(str::to_string)
            .filter(|m| !m.is_empty())
            .collect();
        return Verdict::Refused { messages };
    }
    let current = first_status.current_revision.as_deref();
    if first.create.is_none() && current.is_some() && current != live_revision {
        let name = current.unwrap_or_default().to_string();
        if live_numbers.contains_key(&name) && live_revision.is_some() {
            return Verdict::Revert {
                number: live_numbers.get(&name).copied().flatten(),
                revision: name,
            };
        }
    }
    if moves.is_empty() && first.create.is_none() && current == live_revision {
        return match end {
            End::Stuck { message, .. } => Verdict::Held {
                until: None,
                by: message.clone(),
            },
            _ => Verdict::NoChange,
        };
    }
    let first_move = moves.iter().map(|m| m.at).min();
    let held_by = timeline
        .iter()
        .find(|m| m.at == start && m.phase != RolloutPhase::Progressing && m.phase != RolloutPhase::Complete)
        .map(|m| m.message.clone().or(m.reason.clone()).unwrap_or_default());
    match (first_move, held_by) {
        (Some(at), Some(by)) if at > start => Verdict::Held { until: Some(at), by },
        (None, Some(by)) => Verdict::Held { until: None, by },
        (None, None) => match end {
            End::Stuck { message, .. } => Verdict::Held {
                until: None,
                by: message.clone(),
            },
            _ => Verdict::RollsOut,
        },
        _ => Verdict::RollsOut,
    }
}

#[cfg(test)]
mod tests;
