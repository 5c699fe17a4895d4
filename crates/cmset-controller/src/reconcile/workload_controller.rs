//! The workload controller, keyed by workload (one per served kind of the table, see
//! `cmset_core::workloads::kinds`): computes every set reference of one workload at once and patches it once, so
//! that sets changed together roll it once. A kind whose template cannot change after creation (a Job)
//! is never patched: admission names the revisions when it is created.
//!
//! When to act, so that one apply is one rollout without making every change wait:
//! - a workload that reads one set moves as soon as that set's current revision exists: nothing else
//!   it reads can change in the same apply, so waiting would only add latency;
//! - a workload that reads several sets also waits until none of them changed in the last
//!   `multi_set_window` (500 ms by default). An apply writes its objects one after another, a few
//!   milliseconds apart on a healthy API server (kubectl reads and patches each in turn; Argo CD and
//!   Flux do the same within a sync wave), so sets changed together land inside the window and the
//!   workload rolls once.
//!
//! A workload never waits on the set's status: its target comes from the set's spec (the content
//! identity the index computed once) and the revision ConfigMaps the index has seen, so it moves the
//! moment its revision exists, and the set's status is written once, after the move.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cmset_api::labels;
use cmset_core::policy::budget::Admit;
use cmset_core::rollout::decide::Undecided;
use cmset_core::rollout::hold;
use cmset_core::rollout::moved;
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::waves::Gate;
use cmset_core::workloads::observe::WorkloadKind;
use cmset_core::workloads::refs;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use tracing::{Instrument, debug, debug_span, warn};

use crate::engine::context::Reconciled;
use crate::engine::index::{Echo, Key};
use crate::engine::stored_workload::StoredWorkload;
use crate::engine::views;
use crate::platform::error::{Error, Result};
use crate::reconcile::context::Context;
use crate::reconcile::decisions::Gathered;

pub const NAME: &str = "workload";

/// Bounds a wait for a set whose revision does not exist yet: its creation triggers this workload
/// anyway, the requeue only covers a missed event.
const WAIT_FOR_SETS: Duration = Duration::from_secs(30);

/// How often a workload waiting for the rollout budget looks again by itself. Freed slots wake the
/// next in line at once (whatever scope watches it); this only bounds the wait should a wake be lost.
const BUDGET_RECHECK: Duration = Duration::from_secs(60);

/// One workload of `kind`, as its store holds it.
struct Workload<'a> {
    kind: WorkloadKind,
    object: &'a StoredWorkload,
}

pub async fn reconcile(
    kind: WorkloadKind,
    workload: Arc<StoredWorkload>,
    ctx: Arc<Context>,
) -> Result<Action> {
    let started = Instant::now();
    // At DEBUG: a span costs every reconcile, and the INFO lines name their object themselves.
    let span = debug_span!(
        "reconcile",
        controller = NAME,
        kind = kind.as_str(),
        namespace = workload.namespace().unwrap_or_default(),
        workload = %workload.name_any(),
    );
    let this = Workload {
        kind,
        object: workload.as_ref(),
    };
    let result = reconcile_inner(&this, &ctx).instrument(span).await;
    ctx.metrics.reconciled(NAME, started.elapsed());
    if result.is_ok() {
        ctx.succeeded(&reconciled(kind, workload.as_ref()));
    }
    result
}

fn reconciled(kind: WorkloadKind, workload: &StoredWorkload) -> Reconciled {
    let key = Key::new(&workload.namespace().unwrap_or_default(), &workload.name_any());
    Reconciled::Workload(kind, key)
}

/// The targets of the sets a workload reads, and the turn of a move to them in the budget's line.
struct Decided {
    targets: Vec<SetTarget>,
    turn: i64,
}

/// Why a workload does not move yet.
enum Wait {
    /// A set it reads has no revision for its spec yet (or the index has not caught up with it).
    ForSet(String),
    /// It reads several sets and one changed moments ago: more may follow in the same apply.
    Window(Duration),
}

/// The targets of every set `view` reads, or why it must wait: the decision admission makes too (see
/// [`crate::reconcile::decisions`]).
fn targets(
    ctx: &Context,
    namespace: &str,
    view: &cmset_core::workloads::observe::WorkloadView,
) -> Result<Decided, Wait> {
    let undecided = |u: Undecided| Wait::ForSet(u.to_string());
    let gathered = Gathered::of(&ctx.index, &ctx.stores, namespace, view, true).map_err(undecided)?;
    let targets = gathered.decide(view).map_err(undecided)?;
    match gathered.gathering_left(ctx.multi_set_window) {
        Some(left) => Err(Wait::Window(left)),
        None => {
            let now = (ctx.clock)().0.as_second();
            let turn = gathered.turn(&targets, now);
            Ok(Decided { targets, turn })
        }
    }
}

async fn reconcile_inner(this: &Workload<'_>, ctx: &Context) -> Result<Action> {
    // Planning from half-filled caches could miss a set's record; wait for the first full lists.
    if !ctx.wait_caches_ready().await {
        return Ok(Action::requeue(Duration::from_millis(250)));
    }
    let (kind, workload) = (this.kind, this.object);
    // A Job's template cannot change: admission named the revisions when it was created.
    if !kind.is_mutable() {
        return Ok(Action::await_change());
    }
    // Only opted-in workloads are watched; the check keeps that true even if a watch were widened.
    let (Some(namespace), Some(view)) = (workload.namespace(), views::workload_view(kind, workload)) else {
        return Ok(Action::await_change());
    };
    if workload.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let held = Hold::of(workload);
    // Sets of the workload's own namespace only: a cross-namespace reference cannot be expressed.
    let Decided { targets, turn } = match targets(ctx, &namespace, &view) {
        Ok(decided) => decided,
        Err(wait) => {
            let wait = match wait {
                Wait::ForSet(set) => {
                    debug!(%set, "waiting for the set's current revision");
                    WAIT_FOR_SETS
                }
                Wait::Window(wait) => {
                    debug!(
                        ?wait,
                        "a set it reads changed moments ago; gathering changes into one rollout"
                    );
                    wait
                }
            };
            return match held.as_ref().map(|h| h.left(ctx)) {
                Some(None) => {
                    release(this, &namespace, &view.uid, held.as_ref(), ctx, Release::TimedOut).await
                }
                Some(Some(left)) => Ok(Action::requeue(wait.min(left))),
                None => Ok(Action::requeue(wait)),
            };
        }
    };
    let plan = plan_workload(&view, &targets);
    let id = (kind, Key::new(&namespace, &view.name));
    let budget = ctx.index.budget();
    let generation = workload.meta().generation.unwrap_or(0);
    if plan.is_empty() {
        if let Some(budget) = &budget {
            budget.wake(budget.withdraw(&id));
            // The move it marked is healthy (or the mark is stale): a later scale-up is no move.
            let mark = workload.labels().get(moved::MOVED);
            if let Some(mark) = mark.filter(|m| moved::mark_done(Some(m.as_str()), generation, &view.health))
            {
                let what = format!("{kind} {namespace}/{}", view.name);
                let cap = workload.labels().get(moved::BUDGET_CAP).map(String::as_str);
                let patch = json_patch::Patch(moved::unmark_operations(mark, cap));
                patch_workload(this, ctx, &namespace, &view.name, patch, &what).await?;
                debug!(workload = %what, "removed its move mark");
            }
        }
        return match held.as_ref().map(|h| h.left(ctx)) {
            // Held for a name no set ever took: let it go once the hold is over, or at once when
            // every such name is an object that exists (admission holds without asking; see
            // `serving::webhook`).
            Some(None) => release(this, &namespace, &view.uid, held.as_ref(), ctx, Release::TimedOut).await,
            Some(Some(_)) if unclaimed_names_exist(ctx, &namespace, &view).await => {
                release(
                    this,
                    &namespace,
                    &view.uid,
                    held.as_ref(),
                    ctx,
                    Release::NamesExist,
                )
                .await
            }
            Some(Some(left)) => Ok(Action::requeue(left)),
            None => Ok(Action::await_change()),
        };
    }
    let rolled_back = rollbacks(&targets, &plan.changes);
    // The budget holds moves to a new revision; a rollback, or the first start of a workload cmset
    // created paused, never waits.
    // Nor does a move to a revision of a set whose strategy is Immediate (rotated credentials).
    let urgent = plan
        .changes
        .iter()
        .any(|c| targets.iter().any(|t| t.immediate && t.current == c.to));
    let budgeted = budget
        .as_ref()
        .filter(|_| held.is_none() && rolled_back.is_empty() && !urgent);
    if let Some(budget) = budgeted
        && let (Admit::Wait(waiting), began) = budget.request(&id, turn, generation)
    {
        debug!(%waiting, "waiting for the rollout budget");
        if began {
            ctx.index.remind_sets(kind, &id.1);
        }
        // Woken when its turn comes (see `RolloutBudget::wake`); the requeue is a safety net.
        return Ok(Action::requeue(BUDGET_RECHECK));
    }
    let what = format!("{kind} {namespace}/{}", view.name);
    let mut patch = plan.json_patch(kind, &view.uid, &workload.body());
    // A move the budget granted marks the generation it gives: that is what holds the slot, on this
    // replica and on any that leads later.
    if let Some(budget) = budgeted {
        patch
            .0
            .extend(moved::mark_operations(generation, budget.usage().cap));
    }
    // A held workload is released by the same patch: its first ReplicaSet (or Job) names the revisions.
    if let Some(hold) = &held {
        patch.0.extend(hold::release_operations(kind, &hold.since));
    }
    let patched = patch_workload(this, ctx, &namespace, &view.name, patch, &what).await;
    if patched.is_err()
        && let Some(budget) = &budget
    {
        budget.wake(budget.release(&id));
    }
    patched?;
    ctx.metrics
        .workloads_updated
        .get_or_create(&crate::platform::metrics::KindLabel { kind: kind.as_str() })
        .inc();
    let moves: Vec<String> = plan
        .changes
        .iter()
        .map(|c| format!("{} → {}", c.from, c.to))
        .collect();
    // A move is one step of a change the set's Event (RevisionCreated, a wave) and status already tell
    // of: no Event and no INFO line of its own, so that a change costs one of each however many
    // workloads read the set. A rollback is news of its own.
    if rolled_back.is_empty() {
        debug!(workload = %what, changes = ?moves, "moved references");
        return Ok(Action::await_change());
    }
    let event = {
        ctx.metrics
            .workloads_rolled_back
            .get_or_create(&crate::platform::metrics::KindLabel { kind: kind.as_str() })
            .inc();
        warn!(workload = %what, changes = ?moves, "rolled back after a failed rollout");
        Event {
            type_: EventType::Warning,
            reason: "RolledBack".to_string(),
            note: Some(format!(
                "cmset rolled back {}: the rollout of {} failed",
                dedup(&moves).join(", "),
                rolled_back.join(", ")
            )),
            action: "Rollback".to_string(),
            secondary: None,
        }
    };
    ctx.publish_soon(event, object_ref(this, ctx));
    Ok(Action::await_change())
}

/// The reference events are published on, at the version the kind is served at.
fn object_ref(this: &Workload<'_>, ctx: &Context) -> k8s_openapi::api::core::v1::ObjectReference {
    let resource = ctx
        .stores
        .workload_store(this.kind)
        .map(|s| s.resource)
        .unwrap_or_else(|| {
            let spec = this.kind.spec();
            let version = spec.versions.first().copied().unwrap_or_default();
            kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                spec.group, version, spec.kind,
            ))
        });
    this.object.object_ref(&resource)
}

/// The revisions whose failed rollout `changes` move away from.
fn rollbacks(targets: &[SetTarget], changes: &[refs::NameChange]) -> Vec<String> {
    let failed: Vec<String> = targets
        .iter()
        .filter(|t| matches!(t.gate, Gate::RollBack { .. }))
        .filter(|t| changes.iter().any(|c| c.from == t.current))
        .map(|t| t.current.clone())
        .collect();
    dedup(&failed)
}

/// A hold cmset's webhook put on a new workload (see `cmset_core::rollout::hold`).
struct Hold {
    since: String,
    since_second: Option<i64>,
}

impl Hold {
    fn of(workload: &StoredWorkload) -> Option<Self> {
        let since = workload.annotations().get(hold::HELD_SINCE)?.clone();
        let since_second = since.parse::<jiff::Timestamp>().ok().map(|t| t.as_second());
        Some(Self { since, since_second })
    }

    /// Time left before it ends whatever happens; `None` when over (or unreadable: lift it).
    fn left(&self, ctx: &Context) -> Option<Duration> {
        let now = (ctx.clock)().0.as_second();
        let left = hold::hold_left(self.since_second?, now)?;
        Some(Duration::from_secs(u64::try_from(left).unwrap_or(0)))
    }
}

/// Why a held workload is released as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    /// No set took the names it reads within the hold's time.
    TimedOut,
    /// The names no set claims are plain ConfigMaps or Secrets that exist: nothing to wait for.
    NamesExist,
}

/// Whether every name `view` reads that no set claims is an object that exists in `namespace` (its
/// metadata only: a Secret's values are never read). A lookup that fails counts as present: a hold
/// never outlasts its reason on a guess.
async fn unclaimed_names_exist(
    ctx: &Context,
    namespace: &str,
    view: &cmset_core::workloads::observe::WorkloadView,
) -> bool {
    use cmset_core::workloads::refs::Referenced;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    let kinds: &[Referenced] = if ctx.stores.secret_sets.is_some() {
        &[Referenced::ConfigMap, Referenced::Secret]
    } else {
        &[Referenced::ConfigMap]
    };
    let claimed = |of: Referenced, name: &str| ctx.index.claims(namespace, of, name);
    for (of, name) in cmset_core::admission::unclaimed_names(view, kinds, UNCLAIMED_LOOKUPS, claimed) {
        let found = match of {
            Referenced::ConfigMap => Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
                .get_metadata_opt(&name)
                .await
                .map(|o| o.is_some()),
            Referenced::Secret => Api::<Secret>::namespaced(ctx.client.clone(), namespace)
                .get_metadata_opt(&name)
                .await
                .map(|o| o.is_some()),
        };
        match found {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                warn!(%namespace, %of, error = %crate::platform::redact::api_error(&e), "could not look a held workload's name up; taking it as present");
            }
        }
    }
    true
}

/// Names looked up per held workload, at most (admission holds for the first it meets).
const UNCLAIMED_LOOKUPS: usize = 8;

/// Releases a held workload so that it runs as written: its sets did not turn up in time, or the
/// names it was held for exist.
async fn release(
    this: &Workload<'_>,
    namespace: &str,
    uid: &str,
    hold: Option<&Hold>,
    ctx: &Context,
    why: Release,
) -> Result<Action> {
    let Some(hold) = hold else {
        return Ok(Action::await_change());
    };
    let kind = this.kind;
    let name = this.object.name_any();
    let what = format!("{kind} {namespace}/{name}");
    let patch = refs::json_patch(
        uid,
        kind.pod_spec(),
        &[],
        hold::release_operations(kind, &hold.since),
    );
    patch_workload(this, ctx, namespace, &name, patch, &what).await?;
    if why == Release::NamesExist {
        // The usual case for a workload that also reads plain ConfigMaps: no news.
        debug!(workload = %what, "the names it was held for exist; unpaused it as written");
        return Ok(Action::await_change());
    }
    warn!(workload = %what, "no revision for the sets it reads appeared in time; unpaused it as written");
    let event = Event {
        type_: EventType::Warning,
        reason: "HoldReleased".to_string(),
        note: Some(format!(
            "cmset created it paused to wait for the ConfigMapSets it reads; none had a revision after {}s, so it runs as written",
            hold::HOLD_LIMIT_SECONDS
        )),
        action: "Release".to_string(),
        secondary: None,
    };
    ctx.publish_soon(event, object_ref(this, ctx));
    Ok(Action::await_change())
}

async fn patch_workload(
    this: &Workload<'_>,
    ctx: &Context,
    namespace: &str,
    name: &str,
    patch: json_patch::Patch,
    what: &str,
) -> Result<()> {
    let resource = ctx
        .stores
        .workload_store(this.kind)
        .map(|s| s.resource)
        .ok_or_else(|| Error::KindNotServed(this.kind.to_string()))?;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), namespace, &resource);
    let params = PatchParams {
        field_manager: Some(labels::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let writing = ctx.index.writing_workload(this.kind, Key::new(namespace, name));
    let answer = ctx
        .write(
            "patch_workload",
            api.patch_metadata(name, &params, &Patch::<()>::Json(patch)),
        )
        .await
        .map_err(|source| Error::PatchWorkload {
            workload: what.to_string(),
            source,
        })?;
    // The patch's echo is no news to this controller; the sets it reads hear of the move from it.
    let echo = Echo {
        writer: false,
        readers: true,
    };
    writing.answered(answer.resource_version(), echo);
    Ok(())
}

fn dedup(items: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(i) {
            out.push(i.clone());
        }
    }
    out
}

/// Retries back off per workload, as the set controller's do (see [`crate::platform::backoff`]).
pub fn error_policy(
    kind: WorkloadKind,
    workload: Arc<StoredWorkload>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics.failed(NAME, error.category());
    let conflict = error.is_conflict();
    let retry_in = ctx.backoff(&reconciled(kind, workload.as_ref()), error);
    if error.is_term_ended() {
        debug!(workload = %workload.name_any(), %error, "this replica's term as leader ended; the next leader carries on");
    } else if conflict {
        // A failed `test` guard (422) or a conflict: the workload changed underneath. Its new version
        // arrives through the watch; retry soon from that fresh read.
        debug!(workload = %workload.name_any(), %error, ?retry_in, "workload moved on; retrying");
    } else {
        warn!(workload = %workload.name_any(), %error, ?retry_in, "reconcile failed");
    }
    Action::requeue(retry_in)
}
