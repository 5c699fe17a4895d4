//! The set's status as the planner writes it: the Ready condition summing up the workloads, and the
//! plans made when there is nothing to roll out (an invalid spec or content, a missing source, an
//! unobserved world, a name collision). Split from the planner because it is the part that only says.

use super::*;

/// The set's status: the current revision, the Ready condition summing up the workloads, the history.
pub(super) fn set_status(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    current: &CurrentRevision,
    history: Vec<RevisionStatus>,
    workloads: Vec<WorkloadStatus>,
    rollout: Option<RolloutStatus>,
) -> ConfigMapSetStatus {
    let generation = input.set.generation();
    // A valid spec is no longer stalled.
    let conditions = conditions::remove(&previous.conditions, STALLED);
    let ready = ready_condition(current, &workloads, rollout.as_ref());
    // A failed rollout goes no further until the content changes: stalled, for kstatus and GitOps
    // health checks (Flux reports it failed, Argo CD degraded).
    let conditions = match ready.reason {
        "RolloutFailed" => conditions::set(
            &conditions,
            Desired {
                type_: STALLED,
                status: true,
                ..ready.clone()
            },
            generation,
            &input.now,
        ),
        _ => conditions,
    };
    let conditions = windows_known(conditions, input);
    ConfigMapSetStatus {
        observed_generation: generation,
        revision: Some(current.number),
        current_revision: Some(current.name.clone()),
        collision_count: previous.collision_count,
        conditions: conditions::set(&conditions, ready, generation, &input.now),
        workloads,
        history,
        rollout,
        // The notifier's, carried as it stands: the planned status compares equal on it, and the set
        // controller's status writes leave it out.
        notifications: previous.notifications.clone(),
        // The checks' records likewise: written by the checks alone (`cmset-checks`).
        checks: previous.checks.clone(),
        // Fitted once the plan is complete (see `crate::revisions::fit`).
        settled_workloads: None,
        omitted_workloads: 0,
    }
}

/// `conditions` with `ChangeWindowsKnown` saying why the cluster's windows are unknown (every move
/// waits for them), or without it while they are known: a set's status names a freeze nobody can read.
pub(super) fn windows_known(conditions: Vec<Condition>, input: &SetInput<'_>) -> Vec<Condition> {
    match &input.windows.cluster_unknown {
        Some(unknown) => conditions::set(
            &conditions,
            Desired {
                type_: WINDOWS_KNOWN,
                status: false,
                reason: unknown.cause.reason(),
                message: unknown.message(),
            },
            input.set.generation(),
            &input.now,
        ),
        None => conditions::remove(&conditions, WINDOWS_KNOWN),
    }
}

/// Ready once no workload waits to be moved and a rollout in waves, if any, is complete; pinned
/// workloads count as done.
pub(super) fn ready_condition(
    current: &CurrentRevision,
    workloads: &[WorkloadStatus],
    rollout: Option<&RolloutStatus>,
) -> Desired<'static> {
    let count = |state| workloads.iter().filter(|w| w.state == state).count();
    let (pending, pinned) = (count(WorkloadState::Pending), count(WorkloadState::Pinned));
    let (waiting, rolled_back) = (count(WorkloadState::Waiting), count(WorkloadState::RolledBack));
    let (number, name, total) = (current.number, &current.name, workloads.len());
    if let Some(failed) = rollout.filter(|r| r.phase == RolloutPhase::Failed) {
        let rolled_back = match rolled_back {
            0 => String::new(),
            n => format!("; {n} rolled back"),
        };
        let held = match waiting {
            0 => String::new(),
            n => format!("; {n} held on their revision"),
        };
        Desired {
            type_: READY,
            status: false,
            reason: "RolloutFailed",
            message: format!(
                "Revision {number} ({name}): {}{rolled_back}{held}",
                failed.message.as_deref().unwrap_or("the rollout failed")
            ),
        }
    } else if let Some(held) = rollout.filter(|r| r.phase == RolloutPhase::Waiting) {
        let opens = match &held.next_window {
            Some(at) => format!("moves resume at {}", at.0),
            None => "no window opens within the years cmset looks ahead".to_string(),
        };
        Desired {
            type_: READY,
            status: false,
            reason: "RolloutWaiting",
            message: format!(
                "Revision {number} ({name}) waits in wave {} of {:?}: {}; {opens}; {waiting} of {total} workloads wait",
                held.wave,
                held.waves,
                held.message.as_deref().unwrap_or("held by a change window"),
            ),
        }
    } else if let Some(held) =
        rollout.filter(|r| matches!(r.phase, RolloutPhase::Paused | RolloutPhase::AwaitingPromotion))
    {
        let (reason, what) = match held.phase {
            RolloutPhase::Paused => (
                "RolloutPaused",
                "paused (kubectl cmset resume, or spec.rollout.paused: false)",
            ),
            _ => (
                "AwaitingPromotion",
                "waiting for the next wave to be promoted (kubectl cmset promote)",
            ),
        };
        let since = held
            .held_since
            .as_ref()
            .map(|t| format!(" since {}", t.0))
            .unwrap_or_default();
        Desired {
            type_: READY,
            status: false,
            reason,
            message: format!(
                "Revision {number} ({name}) is {what}{since}, in wave {} of {:?}; {waiting} of {total} workloads wait",
                held.wave, held.waves
            ),
        }
    } else if pending > 0 {
        Desired {
            type_: READY,
            status: false,
            reason: "RolloutPending",
            message: format!("{pending} of {total} workloads are being moved to revision {number} ({name})"),
        }
    } else if let Some(rollout) = rollout.filter(|r| r.phase == RolloutPhase::Progressing) {
        // Not ready before the last wave has proven healthy: a failure there still rolls it back, and
        // a GitOps tool waiting on Ready must not report success first.
        let rest = match waiting {
            0 => " (the last); complete once it is healthy for stabilizationSeconds".to_string(),
            n => format!("; {n} of {total} workloads wait for a later wave"),
        };
        Desired {
            type_: READY,
            status: false,
            reason: "RolloutProgressing",
            message: format!(
                "Revision {number} ({name}) is rolling out in waves: wave {} of {:?} in progress{rest}",
                rollout.wave, rollout.waves
            ),
        }
    } else {
        Desired {
            type_: READY,
            status: true,
            reason: "RolledOut",
            message: format!(
                "Revision {number} ({name}) is current; {} of {total} workloads use it, {pinned} pinned to older revisions",
                total - pinned
            ),
        }
    }
}

/// An invalid spec: report it (`Ready=False` and `Stalled=True`), keep everything else as it is.
pub(super) fn plan_invalid(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    problems: &[crate::status::problem::Problem],
) -> SetPlan {
    let message = validate::summary(problems);
    plan_problem(input, previous, "InvalidSpec", message, Stalled::Yes)
}

/// The set's content fails `spec.validation`: no revision is made of it, every workload stays where it
/// is, and `Valid` and `Ready` say why (a Warning event once). Stalled unless all that is missing is a
/// schema's ConfigMap, which may yet appear (looked for again in a minute).
pub(super) fn plan_invalid_content(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    name: &str,
    refusal: &Refusal,
) -> SetPlan {
    let keeping = match (&previous.current_revision, previous.revision) {
        (Some(current), Some(number)) => format!("workloads stay on revision {number} ({current})"),
        _ => "no revision exists yet".to_string(),
    };
    let message = join_capped(
        &[format!(
            "content not made into revision {name} ({keeping}): {}",
            refusal.summary()
        )],
        EVENT_MESSAGE_MAX_LEN,
    );
    let schemas_missing = refusal.only_unavailable_schemas();
    let stalled = if schemas_missing {
        Stalled::No
    } else {
        Stalled::Yes
    };
    let mut plan = plan_problem(input, previous, VALIDATION_FAILED, message.clone(), stalled);
    plan.status.conditions = conditions::set(
        &plan.status.conditions,
        Desired {
            type_: VALID,
            status: false,
            reason: VALIDATION_FAILED,
            message,
        },
        input.set.generation(),
        &input.now,
    );
    if schemas_missing {
        plan.recheck_in = Some(SCHEMA_RECHECK);
    }
    plan
}

/// Reason of `Valid=False` and `Ready=False` for content that fails `spec.validation`.
pub const VALIDATION_FAILED: &str = "ValidationFailed";

/// How soon a set whose schema's ConfigMap is missing looks for it again (its creation wakes no set).
const SCHEMA_RECHECK: Duration = Duration::from_secs(60);

/// `Valid=True` once the current revision holds the set's content and `spec.validation` says anything;
/// no `Valid` condition when it says nothing.
pub(super) fn content_valid(set: SetRef<'_>, conditions: &[Condition], now: &Time) -> Vec<Condition> {
    if set.validation().is_empty() {
        return conditions::remove(conditions, VALID);
    }
    conditions::set(
        conditions,
        Desired {
            type_: VALID,
            status: true,
            reason: "ContentValid",
            message: "the current revision's content passes spec.validation".into(),
        },
        set.generation(),
        now,
    )
}

/// The source cannot be read (missing, or refused): report it on `Ready`, keep everything else. The
/// workloads stay on the last good revision, which the status still names. Not stalled: it resolves
/// itself once the source is back.
pub(super) fn plan_source_problem(input: &SetInput<'_>, previous: &ConfigMapSetStatus) -> SetPlan {
    let set = input.set;
    let kind = set.kind().revision_kind();
    let source = set.source_name().unwrap_or_default();
    let namespace = set.metadata().namespace.as_deref().unwrap_or_default();
    let (reason, what) = match input.source {
        SourceState::Unreadable(why) => ("SourceUnreadable", format!("cannot be read: {why}")),
        _ => ("SourceNotFound", "does not exist".to_string()),
    };
    let keeping = match (&previous.current_revision, previous.revision) {
        (Some(name), Some(number)) => {
            format!("workloads stay on revision {number} ({name}) until it can be read")
        }
        _ => "no revision exists yet, so workloads that read the set are left as they are".to_string(),
    };
    let message = format!("{kind} {namespace}/{source} {what}; {keeping}");
    plan_problem(input, previous, reason, message, Stalled::No)
}

/// Whether a problem stalls the set (only a change of its spec can solve it).
pub(super) enum Stalled {
    Yes,
    No,
}

/// A problem that stops the set from moving on: `Ready=False` with `reason`, and `Stalled` as given;
/// nothing but the status is written, and the Warning event is published only when the problem is new.
pub(super) fn plan_problem(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    reason: &'static str,
    message: String,
    stalled: Stalled,
) -> SetPlan {
    let set = input.set;
    let already_reported = set
        .condition(READY)
        .is_some_and(|c| c.reason == reason && c.message == message);
    let generation = set.generation();
    let desired = |type_, status| Desired {
        type_,
        status,
        reason,
        message: message.clone(),
    };
    let conditions = conditions::set(
        &previous.conditions,
        desired(READY, false),
        generation,
        &input.now,
    );
    let conditions = match stalled {
        Stalled::Yes => conditions::set(&conditions, desired(STALLED, true), generation, &input.now),
        Stalled::No => conditions::remove(&conditions, STALLED),
    };
    let events = (!already_reported)
        .then_some(PlannedEvent {
            kind: EventKind::Warning,
            reason,
            message,
        })
        .into_iter()
        .collect();
    SetPlan {
        status: ConfigMapSetStatus {
            observed_generation: generation,
            conditions,
            ..previous.clone()
        },
        events,
        ..SetPlan::default()
    }
}

/// The reason of the Ready condition while workload kinds that may read a set cannot be observed.
pub const UNOBSERVED: &str = "WorkloadsUnobserved";

/// The status of a set that plans nothing now: the workload kinds in `unobserved` (kind, why) may read
/// it, and cmset cannot list or watch them. What it last saw of them may be stale (a workload healthy
/// since, or gone), so nothing is decided from it: the status keeps the rollout, the workloads and the
/// history as recorded (no wave opens, nothing is pruned) and only its Ready condition turns `Unknown`,
/// saying why. The next plan, once they are observed again, replaces it.
pub fn plan_unobserved(
    previous: &ConfigMapSetStatus,
    unobserved: &[(String, String)],
    now: &Time,
) -> ConfigMapSetStatus {
    let what: Vec<String> = unobserved
        .iter()
        .map(|(kind, why)| format!("{kind} ({why})"))
        .collect();
    let message = format!(
        "cmset cannot list or watch {}: what it last saw of them may be stale, so the rollout holds (no \
         wave opens) and no revision is pruned until it can again",
        join_capped(&what, 512)
    );
    let desired = Desired {
        type_: READY,
        status: false,
        reason: UNOBSERVED,
        message,
    };
    let conditions =
        conditions::set_unknown(&previous.conditions, desired, previous.observed_generation, now);
    ConfigMapSetStatus {
        conditions: conditions::with_reconciling(&conditions, now),
        ..previous.clone()
    }
}

/// The next revision's name is taken: bump the collision count so the next plan picks another name.
pub fn plan_collision(input: &SetInput<'_>, previous: &ConfigMapSetStatus, name: &str) -> SetPlan {
    let count = input.set.collision_count() + 1;
    let kind = input.set.kind().revision_kind();
    let message = format!(
        "{kind} {name} already exists with other content or another owner; it is left alone and the next revision gets another name (collisionCount {count})"
    );
    let conditions = conditions::set(
        &previous.conditions,
        Desired {
            type_: READY,
            status: false,
            reason: "RevisionCollision",
            message: message.clone(),
        },
        input.set.generation(),
        &input.now,
    );
    SetPlan {
        status: ConfigMapSetStatus {
            collision_count: Some(count),
            conditions,
            ..previous.clone()
        },
        events: vec![PlannedEvent {
            kind: EventKind::Warning,
            reason: "RevisionCollision",
            message,
        }],
        ..SetPlan::default()
    }
}
