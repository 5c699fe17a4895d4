//! The set planner: from one set (a ConfigMapSet or a SecretSet) and what was observed around it, every
//! write its controller should make. An unchanged world plans no write at all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cmset_api::{
    ConfigMapSetStatus, RevisionStatus, RolloutPhase, RolloutStatus, WorkloadState, WorkloadStatus, labels,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use serde_json::Value;

use crate::content::content_check::{self, Refusal, SchemaTexts};
use crate::content::validate;
use crate::revisions::fit;
use crate::revisions::history::{Usage, select_prunable};
use crate::revisions::naming::refers_to_set;
use crate::revisions::revision::{
    NewRevision, desired_annotations, desired_labels, history_owner_reference, metadata_patch, new_revision,
    next_revision_name,
};
use crate::rollout::check_gate;
use crate::rollout::decide::{self, Identity, Observed};
use crate::rollout::pinning::{previous_by_uid, workload_status};
use crate::rollout::waves::{Member, WaveEvent, WaveInput, WaveOutcome, plan_waves};
use crate::rollout::window_hold::WindowState;
use crate::set::{SetRef, SourceState};
use crate::status::conditions::{self, Desired, READY, STALLED, VALID, WINDOWS_KNOWN};
use crate::status::message::join_capped;
use crate::workloads::observe::{HistoryObject, RevisionView, WorkloadView};
use crate::workloads::refs::Referenced;

mod set_status;

pub use set_status::{UNOBSERVED, VALIDATION_FAILED, plan_collision, plan_unobserved};
use set_status::{content_valid, plan_invalid, plan_invalid_content, plan_source_problem, set_status};

/// What the set controller observed, as plain data.
#[derive(Clone, Debug)]
pub struct SetInput<'a> {
    pub set: SetRef<'a>,
    /// What is known of the set's content (see [`SourceState`]).
    pub source: SourceState<'a>,
    /// Objects of the revisions' kind labelled as revisions of this set (any owner: the planner checks
    /// ownership).
    pub revisions: &'a [RevisionView],
    /// Opted-in workloads of the set's namespace.
    pub workloads: &'a [WorkloadView],
    /// Retained ReplicaSets and ControllerRevisions of the set's namespace.
    pub history: &'a [HistoryObject],
    /// Names of the revisions' kind referenced by Pods, once listed: the I/O layer lists Pods only when a first plan
    /// wants to prune ([`SetPlan::needs_pods`]).
    pub pod_refs: Option<&'a BTreeSet<String>>,
    pub now: Time,
    /// The workloads waiting for the cluster-wide rollout budget, by UID, with where each stands
    /// (see [`crate::policy::budget`]): their state is `Waiting` rather than `Pending`.
    pub budget_waiting: &'a BTreeMap<String, String>,
    /// The set's metric analysis, when its spec asks for one (see [`crate::rollout::waves::WaveAnalysis`]).
    pub analysis: Option<crate::rollout::waves::WaveAnalysis<'a>>,
    /// What the change windows say of the set now (see [`crate::rollout::window_hold`]); the default holds
    /// nothing.
    pub windows: &'a WindowState,
    /// The schemas `spec.validation` reads from ConfigMaps (see [`content_check::schema_refs`]), as
    /// read for this plan; empty when it reads none.
    pub schemas: &'a SchemaTexts,
    /// The check Jobs of the current revision that exist, by check hash, and how each stands: the I/O
    /// layer reads them once a first plan names the revision being checked ([`SetPlan::checks`]).
    pub check_jobs: &'a BTreeMap<String, crate::content::checks::JobOutcome>,
    /// How long judging the content against `spec.validation` may take (see
    /// [`content_check::Budget`]): over it, no revision is made and the set says why.
    pub content_budget: content_check::Budget<'a>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// An event to publish on the set once the plan's writes succeeded. A plan has at most one Normal event:
/// one change of a set tells its story once (see `merge_normal_events`); each Warning stands alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub kind: EventKind,
    pub reason: &'static str,
    pub message: String,
}

/// Most bytes in an event's message: events.k8s.io/v1 refuses a `note` longer than 1 KiB.
pub const EVENT_MESSAGE_MAX_LEN: usize = 1024;

/// A revision to delete, with the UID to use as a precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prune {
    pub name: String,
    pub uid: String,
    /// The version of it the plan saw: deleted only if it is still that one (an owner added since,
    /// say by a ReplicaSet that names it, makes the delete fail and the next plan look again).
    pub resource_version: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetPlan {
    /// A new revision to create.
    pub create: Option<NewRevision>,
    /// Strategic-merge patches of existing revisions' metadata, by name.
    pub patches: Vec<(String, Value)>,
    pub prune: Vec<Prune>,
    /// Old revisions would be pruned, but Pods have not been consulted yet: list them and plan again.
    pub needs_pods: bool,
    /// A new revision must be made of the source's content, which was not read: read it and plan
    /// again. Nothing else is planned.
    pub needs_content: bool,
    pub status: ConfigMapSetStatus,
    pub events: Vec<PlannedEvent>,
    /// Plan again after this long even if nothing is observed to change: a rollout's deadline or
    /// stabilization window ends then.
    pub recheck_in: Option<Duration>,
    /// The analysis runs due to be measured now, as the planner computed them (see
    /// [`crate::rollout::waves::WaveOutcome::analysis_due`]): measure them and plan again with what they showed.
    pub analysis_due: Vec<cmset_api::AnalysisRunStatus>,
    /// The checks of the current revision while they gate its rollout: the Jobs to start and the
    /// verdicts to record (see [`crate::rollout::check_gate`]).
    pub checks: Option<crate::rollout::check_gate::CheckRun>,
}

impl SetPlan {
    /// Whether the planned status differs from the one the set has.
    pub fn status_changed(&self, set: SetRef<'_>) -> bool {
        set.status() != Some(&self.status)
    }

    /// Whether the plan makes no write at all.
    pub fn is_quiet(&self, set: SetRef<'_>) -> bool {
        !self.needs_content
            && self.create.is_none()
            && self.patches.is_empty()
            && self.prune.is_empty()
            && !self.status_changed(set)
    }
}

/// Plans everything for one set, stage by stage: which revision is current (`current_revision`), the
/// metadata of the existing ones (`metadata_patches`), what to prune (`plan_pruning`), the history that
/// remains (`revision_history`), where each workload stands (`workload_entries`) and the status that sums
/// it up (`set_status`). Each stage takes what it needs and returns what it decided.
pub fn plan_set(input: &SetInput<'_>) -> SetPlan {
    let mut plan = plan_set_without_reconciling(input);
    plan.status.conditions = conditions::with_reconciling(&plan.status.conditions, &input.now);
    plan
}

/// [`plan_set`] before `Reconciling` is derived from the other conditions.
fn plan_set_without_reconciling(input: &SetInput<'_>) -> SetPlan {
    let set = input.set;
    let previous = set.status().cloned().unwrap_or_default();
    if let Err(problems) = set.validate() {
        return plan_invalid(input, &previous, &problems);
    }
    let Some(identity) = input.source.identity(set) else {
        return plan_source_problem(input, &previous);
    };
    let uid = set.uid();
    // Revisions of this set; ones being deleted still count for numbering, so each stage filters them.
    let owned: Vec<RevisionView> = input
        .revisions
        .iter()
        .filter(|r| r.is_controlled_by(&uid))
        .cloned()
        .collect();
    let current = match current_revision(input, &owned, &previous, identity) {
        Ok(current) => current,
        Err(NoRevision::NameTaken(name)) => return plan_collision(input, &previous, &name),
        Err(NoRevision::Invalid { name, refusal }) => {
            return plan_invalid_content(input, &previous, &name, &refusal);
        }
        Err(NoRevision::ContentUnread) => {
            return SetPlan {
                needs_content: true,
                status: previous,
                ..SetPlan::default()
            };
        }
    };
    let patches = metadata_patches(set, &owned, &current, input.history, input.workloads);
    let usage = Usage::new(set.kind().revision_kind(), input.workloads, input.history);
    let pruning = plan_pruning(set, &owned, &current.name, &usage, input.pod_refs);
    let history = revision_history(&owned, &current, &pruning.prune, &usage, &uid);
    let entries = workload_entries(input, &current);
    let waves = plan_rollout(input, &previous, &current.name, &history, entries.members);
    // The checks read the current revision's verdicts (a revision about to be created has none).
    let records = previous.checks.as_deref().unwrap_or_default();
    let checks = match owned.iter().find(|r| r.name == current.name) {
        _ if set.checks().is_empty() => None,
        Some(revision) => check_gate::run(
            set.name(),
            set.checks(),
            &current.name,
            std::slice::from_ref(revision),
            records,
            previous.rollout.as_ref(),
            input.check_jobs,
        ),
        None => check_gate::run(
            set.name(),
            set.checks(),
            &current.name,
            &[],
            records,
            previous.rollout.as_ref(),
            input.check_jobs,
        ),
    };
    let waves = match &checks {
        Some(run) => check_gate::apply(waves, run, previous.rollout.as_ref(), &input.now),
        None => waves,
    };
    let history = mark_failed(history, &previous, waves.rollout.as_ref());
    let mut status = set_status(input, &previous, &current, history, waves.entries, waves.rollout);
    let ignored = break_glass_report(input, &previous, &mut status);
    // After the Ready condition has counted every workload.
    let status = fit::fit_workloads(status, fit::WORKLOADS_BUDGET);
    let status = ConfigMapSetStatus {
        conditions: content_valid(set, &status.conditions, &input.now),
        ..status
    };
    // Most important first: the first Normal event gives the merged event its reason.
    let events = current
        .event
        .into_iter()
        .chain(pruning.events)
        .chain(entries.pin_events)
        .chain(waves.events.into_iter().map(wave_event))
        .chain(ignored)
        .collect();
    SetPlan {
        create: current.create,
        patches,
        prune: pruning.prune,
        needs_pods: pruning.needs_pods,
        needs_content: false,
        status,
        events: merge_normal_events(events),
        recheck_in: waves.recheck_in,
        analysis_due: waves.analysis_due,
        checks,
    }
}

/// Reasons of the events that tell a rollout's phase changes: each stands alone, so that whoever
/// watches a set's rollout (a person, an alert, a notification) can select it by reason.
pub const ROLLOUT_REASONS: [&str; 9] = [
    "RolloutStarted",
    "RolloutChecking",
    "WaveStarted",
    "RolloutPaused",
    "RolloutResumed",
    "AwaitingPromotion",
    "RolloutWaiting",
    "WindowOverridden",
    "RolloutComplete",
];

/// The other Normal events merged into one, in the place of the first: its reason, and every message in
/// order. Warnings and the rollout's phase changes are left as they are, each its own news.
fn merge_normal_events(events: Vec<PlannedEvent>) -> Vec<PlannedEvent> {
    let alone = |e: &PlannedEvent| e.kind == EventKind::Warning || ROLLOUT_REASONS.contains(&e.reason);
    let messages: Vec<String> = events
        .iter()
        .filter(|e| !alone(e))
        .map(|e| e.message.clone())
        .collect();
    let mut merged_in = false;
    events
        .into_iter()
        .filter_map(|event| match event.kind {
            _ if alone(&event) => Some(event),
            EventKind::Warning => Some(event),
            EventKind::Normal if merged_in => None,
            EventKind::Normal => {
                merged_in = true;
                Some(PlannedEvent {
                    message: join_capped(&messages, EVENT_MESSAGE_MAX_LEN),
                    ..event
                })
            }
        })
        .collect()
}

// ------------------------------------------------------------------------------------ revision --

/// The revision that holds the set's content once the plan is carried out.
#[derive(Clone, Debug)]
struct CurrentRevision {
    name: String,
    number: i64,
    /// The content identity it is marked with (see [`content_identity`]).
    content: String,
    /// The object to create, when no revision holds this content yet.
    create: Option<NewRevision>,
    /// Created, or an existing revision reused under a new number.
    event: Option<PlannedEvent>,
}

impl CurrentRevision {
    /// The number `revision` carries once the plan is carried out: the current revision's, or the one
    /// it has (an unreadable number counts as 0).
    fn number_of(&self, revision: &RevisionView) -> i64 {
        if revision.name == self.name {
            self.number
        } else {
            revision.number().unwrap_or(0)
        }
    }

    /// The content mark `revision` should carry: the current content for the current revision; for the
    /// others the mark they have, if any (their content is not read, so a lost mark stays lost).
    fn content_of(&self, revision: &RevisionView) -> Option<String> {
        if revision.name == self.name {
            Some(self.content.clone())
        } else {
            revision.annotations.get(labels::CONTENT_HASH).cloned()
        }
    }
}

/// Why no current revision can be planned.
enum NoRevision {
    /// A new revision's name is held by an object that is not the revision of this content.
    NameTaken(String),
    /// A new revision is needed and the source's content has not been read.
    ContentUnread,
    /// The content fails `spec.validation`: no revision `name` is made of it.
    Invalid { name: String, refusal: Refusal },
}

/// Which revision is current: the existing one with the set's content, renumbered if need be, or a new
/// one to create.
fn current_revision(
    input: &SetInput<'_>,
    owned: &[RevisionView],
    previous: &ConfigMapSetStatus,
    identity: String,
) -> Result<CurrentRevision, NoRevision> {
    let set = input.set;
    let reused = crate::revisions::revision::revision_with_content(set, owned, &identity);
    let number = current_number(reused, owned, previous);
    if let Some(r) = reused {
        let event = (r.number() != Some(number)).then(|| PlannedEvent {
            kind: EventKind::Normal,
            reason: "RevisionReused",
            message: format!(
                "Content matches existing revision {}; it is now revision {number}",
                r.name
            ),
        });
        return Ok(CurrentRevision {
            name: r.name.clone(),
            number,
            content: identity,
            create: None,
            event,
        });
    }
    let Some(content) = input.source.content(set) else {
        return Err(NoRevision::ContentUnread);
    };
    let name = next_revision_name(set, &content);
    let validation = set.validation();
    if content_check::schema_refs(validation)
        .iter()
        .any(|r| !input.schemas.contains_key(*r))
    {
        // The schemas the content must pass are read with it.
        return Err(NoRevision::ContentUnread);
    }
    let judged = content_check::check_within(
        validation,
        &content,
        input.schemas,
        set.is_secret(),
        input.content_budget.0,
    );
    if let Err(refusal) = judged {
        return Err(NoRevision::Invalid { name, refusal });
    }
    if input.revisions.iter().any(|r| r.name == name) {
        // Taken by an object of ours with other content, or by one we do not control.
        return Err(NoRevision::NameTaken(name));
    }
    let mut revision = new_revision(set, &content, &name, number);
    // Owned from the start by what keeps it after the set is gone: the workloads that will run it
    // (their new ReplicaSets then need no patch), and any history naming it already (it was deleted by
    // hand and is being made again). Creating it is then the only write.
    let kind = set.kind().revision_kind();
    let owners = revision
        .metadata_mut()
        .owner_references
        .get_or_insert_with(Vec::new);
    owners.extend(reader_owners(input.workloads));
    let history = history_owners(input.history, kind, &name, owners, input.workloads);
    owners.extend(history);
    Ok(CurrentRevision {
        event: Some(PlannedEvent {
            kind: EventKind::Normal,
            reason: "RevisionCreated",
            message: format!("Created revision {number} as {kind} {name}"),
        }),
        name,
        number,
        content: identity,
        create: Some(revision),
    })
}

/// The revision the plan creates, as the workload controller will observe it once it is made.
fn created_view(new: &NewRevision) -> RevisionView {
    let metadata = new.metadata();
    RevisionView {
        name: new.name().to_string(),
        uid: metadata.uid.clone().unwrap_or_default(),
        labels: metadata.labels.clone().unwrap_or_default(),
        annotations: metadata.annotations.clone().unwrap_or_default(),
        owner_references: metadata.owner_references.clone().unwrap_or_default(),
        being_deleted: false,
        // Not made yet: the API server stamps both.
        created: None,
        resource_version: None,
    }
}

/// The current revision's number. Numbers only grow and the current revision is the newest: it keeps
/// its number only when it alone holds the highest one; otherwise (a new revision, or content reverted
/// to an older one) it gets the highest plus one. The previous status counts, so that a number is never
/// given twice, even after its revision was pruned.
fn current_number(
    reused: Option<&RevisionView>,
    owned: &[RevisionView],
    previous: &ConfigMapSetStatus,
) -> i64 {
    let highest = owned
        .iter()
        .filter_map(RevisionView::number)
        .chain(previous.revision)
        .max()
        .unwrap_or(0);
    let holds_the_highest_alone = reused.is_some_and(|r| r.number() == Some(highest))
        && owned.iter().filter(|o| o.number() == Some(highest)).count() == 1;
    if holds_the_highest_alone {
        highest
    } else {
        highest + 1
    }
}

/// Owners that a revision named `name`, owned by `owners` now, still needs so that the history naming
/// it keeps it once its set is gone. For each ReplicaSet, ControllerRevision or Job naming it whose
/// controller does not own it yet: that controller, when it is a reader that can own a revision (see
/// [`crate::revisions::revision::reader_owner_reference`]), so a Deployment is added once however many ReplicaSets
/// its restarts make; otherwise (no controller, one of another kind, or
/// [`crate::revisions::revision::MAX_READER_OWNERS`] readers own it already) the history object itself.
fn history_owners(
    history: &[HistoryObject],
    kind: Referenced,
    name: &str,
    owners: &[OwnerReference],
    workloads: &[WorkloadView],
) -> Vec<OwnerReference> {
    let mut owning: BTreeSet<String> = owners.iter().map(|o| o.uid.clone()).collect();
    let mut readers_owning = owners
        .iter()
        .filter(|o| crate::revisions::revision::is_reader_owner(o))
        .count();
    let mut added = vec![];
    for h in history.iter().filter(|h| h.referenced.contains(kind, name)) {
        let controller = h.owner_uid.as_deref();
        if owning.contains(h.uid.as_str()) || controller.is_some_and(|uid| owning.contains(uid)) {
            continue;
        }
        let reader = controller
            .filter(|_| readers_owning < crate::revisions::revision::MAX_READER_OWNERS)
            .and_then(|uid| workloads.iter().find(|w| w.uid == uid))
            .and_then(crate::revisions::revision::reader_owner_reference);
        let owner = match reader {
            Some(reader) => {
                readers_owning += 1;
                reader
            }
            None => history_owner_reference(h),
        };
        owning.insert(owner.uid.clone());
        added.push(owner);
    }
    added
}

/// The workloads that read a set, as owners of its new revision (see
/// [`crate::revisions::revision::reader_owner_reference`]), up to [`crate::revisions::revision::MAX_READER_OWNERS`].
fn reader_owners(workloads: &[WorkloadView]) -> Vec<OwnerReference> {
    workloads
        .iter()
        .filter_map(crate::revisions::revision::reader_owner_reference)
        .take(crate::revisions::revision::MAX_READER_OWNERS)
        .collect()
}

// ------------------------------------------------------------------------------------ metadata --

/// Patches bringing every live revision's metadata to what is desired: labels and annotations from the
/// template, its number and content mark, and the extra owners the history naming it needs
/// ([`history_owners`]).
fn metadata_patches(
    set: SetRef<'_>,
    owned: &[RevisionView],
    current: &CurrentRevision,
    history: &[HistoryObject],
    workloads: &[WorkloadView],
) -> Vec<(String, Value)> {
    let labels_wanted = desired_labels(set);
    owned
        .iter()
        .filter(|r| !r.being_deleted)
        .filter_map(|r| {
            let content = current.content_of(r);
            let mut annotations =
                desired_annotations(set, current.number_of(r), content.as_deref().unwrap_or(""));
            if content.is_none() {
                annotations.remove(labels::CONTENT_HASH);
            }
            // Where verdicts of its checks were once recorded: no longer read, left as it is.
            if let Some(verdicts) = r.annotations.get(crate::content::checks::RESULTS_ANNOTATION) {
                annotations.insert(
                    crate::content::checks::RESULTS_ANNOTATION.to_string(),
                    verdicts.clone(),
                );
            }
            let owners = history_owners(
                history,
                set.kind().revision_kind(),
                &r.name,
                &r.owner_references,
                workloads,
            );
            let patch = metadata_patch(r, &labels_wanted, &annotations, &owners)?;
            Some((r.name.clone(), patch))
        })
        .collect()
}

// --------------------------------------------------------------------------------------- prune --

/// What the prune stage decided.
#[derive(Clone, Debug, Default)]
struct Pruning {
    prune: Vec<Prune>,
    needs_pods: bool,
    events: Vec<PlannedEvent>,
}

/// Old revisions that nothing uses, beyond the limit. Pods are consulted only when something would be
/// pruned without them: the first plan asks for them, the second prunes.
fn plan_pruning(
    set: SetRef<'_>,
    owned: &[RevisionView],
    current: &str,
    usage: &Usage,
    pod_refs: Option<&BTreeSet<String>>,
) -> Pruning {
    let uid = set.uid();
    let limit = set.revision_history_limit();
    if select_prunable(owned, current, limit, usage, &uid).is_empty() {
        return Pruning::default();
    }
    let Some(pods) = pod_refs else {
        return Pruning {
            needs_pods: true,
            ..Pruning::default()
        };
    };
    let with_pods = usage.clone().with_pods(pods);
    let prunable = select_prunable(owned, current, limit, &with_pods, &uid);
    Pruning {
        prune: prunable
            .iter()
            .map(|r| Prune {
                name: r.name.clone(),
                uid: r.uid.clone(),
                resource_version: r.resource_version.clone(),
            })
            .collect(),
        needs_pods: false,
        events: prunable
            .iter()
            .map(|r| PlannedEvent {
                kind: EventKind::Normal,
                reason: "RevisionPruned",
                message: format!(
                    "Deleted revision {} ({}): unused, beyond revisionHistoryLimit {limit}",
                    r.number().unwrap_or(0),
                    r.name
                ),
            })
            .collect(),
    }
}

// ------------------------------------------------------------------------------------- history --

/// The revisions that remain once the plan is carried out, newest first, each with whether it is in use.
fn revision_history(
    owned: &[RevisionView],
    current: &CurrentRevision,
    pruned: &[Prune],
    usage: &Usage,
    set_uid: &str,
) -> Vec<RevisionStatus> {
    let mut history: Vec<RevisionStatus> = owned
        .iter()
        .filter(|r| !r.being_deleted && !pruned.iter().any(|p| p.name == r.name))
        .map(|r| RevisionStatus {
            name: r.name.clone(),
            revision: current.number_of(r),
            in_use: usage.in_use(r, set_uid),
            failed: false,
        })
        .collect();
    if current.create.is_some() {
        history.push(RevisionStatus {
            name: current.name.clone(),
            revision: current.number,
            in_use: usage.is_named(&current.name),
            failed: false,
        });
    }
    history.sort_by(|a, b| b.revision.cmp(&a.revision).then(a.name.cmp(&b.name)));
    history
}

// ----------------------------------------------------------------------------------- workloads --

/// The workloads that reference the set, each with the entry the reference rules give it, and a
/// WorkloadPinned event for each one newly pinned by a rollback.
struct Entries<'a> {
    members: Vec<Member<'a>>,
    pin_events: Vec<PlannedEvent>,
}

/// Each workload's entry, from the one decision the workload controller makes ([`decide`]): with the
/// set's content identity and its revisions as they stand once this plan is carried out (the new one
/// included), and the status as it is, which the controller reads until the planned one is written. So
/// a workload is `Pending` exactly when the controller's next plan for it moves a reference, `Pinned` when
/// it moves none; waves are laid over that afterwards (see [`plan_rollout`]).
fn workload_entries<'a>(input: &SetInput<'a>, current: &CurrentRevision) -> Entries<'a> {
    let set = input.set;
    let kind = set.kind().revision_kind();
    let revisions: Vec<RevisionView> = input
        .revisions
        .iter()
        .cloned()
        .chain(current.create.as_ref().map(created_view))
        .collect();
    let reads_set = |w: &WorkloadView| {
        w.referenced_names_of(kind)
            .iter()
            .any(|n| refers_to_set(set.name(), n))
    };
    let (window_held, window_override) = input
        .windows
        .gate_inputs(set.status().and_then(|s| s.rollout.as_ref()));
    let observed = Observed {
        set,
        identity_generation: set.generation(),
        identity: Identity::Known(&current.content),
        revisions: &revisions,
        lowest_wave: input
            .workloads
            .iter()
            .filter(|w| reads_set(w))
            .filter_map(|w| w.wave.number())
            .min()
            .unwrap_or(0),
        window_held,
        window_override: window_override.as_deref(),
    };
    let previous = previous_by_uid(set);
    let mut members: Vec<Member<'a>> = input
        .workloads
        .iter()
        .filter_map(|w| {
            let decided = decide::target_seeing(&observed, w, input.history);
            // Cannot fail: the identity is the spec's, and the revision holding it is among them.
            debug_assert!(decided.is_ok(), "{decided:?}");
            let entry = workload_status(w, &decided.ok()?)?;
            Some(Member::new(entry, w, kind, set.name()))
        })
        .collect();
    members.sort_by(|a, b| {
        (a.entry.kind.as_str(), a.entry.name.as_str()).cmp(&(b.entry.kind.as_str(), b.entry.name.as_str()))
    });
    let pin_events = members
        .iter()
        .map(|m| &m.entry)
        .filter(|w| w.state == WorkloadState::Pinned)
        .filter(|w| {
            !previous.get(&w.uid).is_some_and(|p| {
                matches!(p.state, WorkloadState::Pinned | WorkloadState::RolledBack)
                    && p.revision == w.revision
            })
        })
        .map(|w| PlannedEvent {
            kind: EventKind::Normal,
            reason: "WorkloadPinned",
            message: format!(
                "{} {} runs older revision {} (rolled back); it stays there until the set's content changes",
                w.kind, w.name, w.revision
            ),
        })
        .collect();
    Entries { members, pin_events }
}

/// The rollout of the current revision (see [`crate::rollout::waves`]).
fn plan_rollout(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    current: &str,
    history: &[RevisionStatus],
    members: Vec<Member<'_>>,
) -> WaveOutcome {
    let previous_entries = previous_by_uid(input.set);
    let revisions: BTreeSet<String> = history.iter().map(|h| h.name.clone()).collect();
    let wave_input = WaveInput {
        spec: input.set.rollout(),
        current,
        previous: previous.rollout.as_ref(),
        previous_entries: &previous_entries,
        revisions: &revisions,
        now: &input.now,
        paused: input.set.paused(),
        manual_promotion: input.set.manual_promotion(),
        promoted: input.set.promoted(),
        budget_waiting: input.budget_waiting,
        namespace: input.set.namespace(),
        analysis: input.analysis,
        immediate: input.set.immediate(),
        windows: input.windows,
    };
    plan_waves(&wave_input, members)
}

/// The history with each revision whose rollout failed marked: the marks recorded before, and the
/// current revision's once its rollout failed. A fresh rollout of a revision clears its mark.
fn mark_failed(
    mut history: Vec<RevisionStatus>,
    previous: &ConfigMapSetStatus,
    rollout: Option<&RolloutStatus>,
) -> Vec<RevisionStatus> {
    let was_failed = |name: &str| previous.history.iter().any(|h| h.name == name && h.failed);
    for entry in &mut history {
        entry.failed = match rollout.filter(|r| r.revision == entry.name) {
            Some(r) => r.phase == RolloutPhase::Failed,
            None => was_failed(&entry.name),
        };
    }
    history
}

fn wave_event(event: WaveEvent) -> PlannedEvent {
    match event {
        WaveEvent::Started(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "RolloutStarted",
            message,
        },
        WaveEvent::WaveStarted(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "WaveStarted",
            message,
        },
        WaveEvent::AnalysisFailed(message) => PlannedEvent {
            kind: EventKind::Warning,
            reason: "AnalysisFailed",
            message,
        },
        WaveEvent::Resumed(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "RolloutResumed",
            message,
        },
        WaveEvent::Complete(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "RolloutComplete",
            message,
        },
        WaveEvent::Failed(message) => PlannedEvent {
            kind: EventKind::Warning,
            reason: "RolloutFailed",
            message: capitalized(&message),
        },
        WaveEvent::Paused(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "RolloutPaused",
            message,
        },
        WaveEvent::AwaitingPromotion(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "AwaitingPromotion",
            message,
        },
        WaveEvent::Waiting(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "RolloutWaiting",
            message,
        },
        WaveEvent::WindowOverridden(message) => PlannedEvent {
            kind: EventKind::Warning,
            reason: "WindowOverridden",
            message,
        },
        WaveEvent::Checking(message) => PlannedEvent {
            kind: EventKind::Normal,
            reason: "RolloutChecking",
            message,
        },
        WaveEvent::CheckFailed(message) => PlannedEvent {
            kind: EventKind::Warning,
            reason: "CheckFailed",
            message,
        },
    }
}

/// Condition type saying what the set's break glass does (see [`crate::policy::break_glass`]).
pub const WINDOW_OVERRIDE: &str = crate::policy::break_glass::CONDITION;

/// The set's break glass, said in its status (condition [`WINDOW_OVERRIDE`]): `True` naming the
/// WindowOverride that lets the current rollout through, and who created it as the webhook recorded
/// it; `False` when the set carries only the old annotation, with a Warning the first time. Neither
/// repeats a name the set's writer wrote.
fn break_glass_report(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    status: &mut ConfigMapSetStatus,
) -> Option<PlannedEvent> {
    use crate::policy::break_glass::{
        ANNOTATION_IGNORED, ANNOTATION_IGNORED_MESSAGE, GRANTED, IGNORED_EVENT,
    };
    let generation = input.set.generation();
    let grant = status
        .rollout
        .as_ref()
        .and_then(|rollout| input.windows.override_for(rollout));
    let desired = match grant {
        Some(grant) => Desired {
            type_: WINDOW_OVERRIDE,
            status: true,
            reason: GRANTED,
            message: crate::policy::break_glass::granted_message(grant),
        },
        None if input.windows.break_glass.legacy_annotation => Desired {
            type_: WINDOW_OVERRIDE,
            status: false,
            reason: ANNOTATION_IGNORED,
            message: ANNOTATION_IGNORED_MESSAGE.to_string(),
        },
        None => {
            status.conditions = conditions::remove(&status.conditions, WINDOW_OVERRIDE);
            return None;
        }
    };
    let ignored = !desired.status;
    let was_ignored = previous
        .conditions
        .iter()
        .any(|c| c.type_ == WINDOW_OVERRIDE && c.status == "False");
    status.conditions = conditions::set(&status.conditions, desired, generation, &input.now);
    (ignored && !was_ignored).then(|| PlannedEvent {
        kind: EventKind::Warning,
        reason: IGNORED_EVENT,
        message: format!("{ANNOTATION_IGNORED_MESSAGE} (set {})", input.set.name()),
    })
}

fn capitalized(message: &str) -> String {
    let mut chars = message.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, reason: &'static str, message: &str) -> PlannedEvent {
        PlannedEvent {
            kind,
            reason,
            message: message.to_string(),
        }
    }

    #[test]
    fn normal_events_merge_into_the_first_and_warnings_stay_apart() {
        let events = vec![
            event(EventKind::Warning, "Odd", "first warning"),
            event(EventKind::Normal, "RevisionCreated", "Created revision 3"),
            event(EventKind::Normal, "RevisionPruned", "Deleted revision 1"),
            event(EventKind::Warning, "Odder", "second warning"),
            event(
                EventKind::Normal,
                "WorkloadPinned",
                "Deployment web runs older revision 2",
            ),
        ];
        assert_eq!(
            merge_normal_events(events),
            vec![
                event(EventKind::Warning, "Odd", "first warning"),
                event(
                    EventKind::Normal,
                    "RevisionCreated",
                    "Created revision 3; Deleted revision 1; Deployment web runs older revision 2"
                ),
                event(EventKind::Warning, "Odder", "second warning"),
            ]
        );
        assert_eq!(merge_normal_events(vec![]), vec![]);
    }
}

#[cfg(test)]
mod unobserved_tests {
    use cmset_api::{RolloutPhase, RolloutStatus, WorkloadState, WorkloadStatus};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn a_set_whose_readers_are_unobserved_keeps_its_rollout_and_says_why() {
        // Wave 0 of two moved and not healthy yet; wave 1 waits.
        let previous = ConfigMapSetStatus {
            observed_generation: Some(2),
            current_revision: Some("app-v2".to_string()),
            conditions: conditions::set(
                &[],
                Desired {
                    type_: READY,
                    status: false,
                    reason: "RolloutProgressing",
                    message: "wave 0".to_string(),
                },
                Some(2),
                &at(100),
            ),
            workloads: vec![WorkloadStatus {
                kind: "Deployment".to_string(),
                name: "second".to_string(),
                state: WorkloadState::Waiting,
                wave: 1,
                ..WorkloadStatus::default()
            }],
            rollout: Some(RolloutStatus {
                revision: "app-v2".to_string(),
                phase: RolloutPhase::Progressing,
                wave: 0,
                waves: vec![0, 1],
                ..RolloutStatus::default()
            }),
            ..ConfigMapSetStatus::default()
        };
        let why = [(
            "Deployment".to_string(),
            "403 Forbidden: cmset may not list or watch it".to_string(),
        )];
        let held = plan_unobserved(&previous, &why, &at(200));
        assert_eq!(
            ConfigMapSetStatus {
                conditions: previous.conditions.clone(),
                ..held.clone()
            },
            previous,
            "nothing but the condition changes: no wave opens, no entry or revision goes"
        );
        let ready = held.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.observed_generation
            ),
            ("Unknown", UNOBSERVED, Some(2))
        );
        assert_eq!(ready.last_transition_time, at(200));
        assert!(
            ready.message.starts_with(
                "cmset cannot list or watch Deployment (403 Forbidden: cmset may not list or watch it)"
            ),
            "{}",
            ready.message
        );
        // Held again later: the same status, so nothing is written.
        assert_eq!(plan_unobserved(&held, &why, &at(300)), held);
    }
}
