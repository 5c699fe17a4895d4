//! The set controller, keyed by set (a ConfigMapSet or a SecretSet, one controller per kind): revisions,
//! their metadata and owners, history and status. It never touches workloads (the workload controller
//! does, once per workload).
//!
//! In source mode (a SecretSet, or a ConfigMapSet with `spec.configMapName`) it also reads the source:
//! only when the source's version moved since the last read (the watch sees versions, metadata only),
//! and keeps only the identity of its content. The content itself is read again only to create a
//! revision, and never leaves the reconcile that read it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmset_api::{ConfigMapSet, SecretSet, WorkloadState, labels};
use cmset_core::content::content_check::{self, SchemaText, SchemaTexts};
use cmset_core::revisions::naming;
use cmset_core::revisions::revision::{Existing, ExistingName, NewRevision, claim_patch, classify_existing};
use cmset_core::rollout::plan::{
    EventKind, PlannedEvent, SetInput, SetPlan, VALIDATION_FAILED, plan_collision, plan_set, plan_unobserved,
};
use cmset_core::rollout::waves;
use cmset_core::rollout::window_hold::{self, WindowState};
use cmset_core::set::{Content, SetKind, SetRef, SourceState};
use cmset_core::workloads::observe::{HistoryObject, RefNames, RevisionView, WorkloadView};
use cmset_core::workloads::refs::Referenced;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{Instrument, debug, debug_span, info, warn};

use crate::engine::context::Reconciled;
use crate::engine::index::{Echo, Key, SetId, SourceLookup};
use crate::engine::own_writes::{OwnStatusWrite, Sent};
use crate::engine::views;
use crate::engine::wire::WirePod;
use crate::platform::error::{Error, Result, api_code};
use crate::platform::metadata_answers;
use crate::platform::metrics::{RolloutGauges, SetLabels, ValidationLabels};
use crate::reconcile::analysis_io::{self, Prepared};
use crate::reconcile::checks_io;
use crate::reconcile::context::Context;
use cmset_core::content::checks::JobOutcome;
use cmset_core::rollout::waves::WaveAnalysis;

pub const NAME: &str = "set";

/// How often every set is reconciled again (`wiring::lead` queues them all, paced like any trigger):
/// watches already deliver every change, this only bounds how long a missed event could go
/// unnoticed. A resync of an unchanged world writes nothing. It is one timer for all sets, not one
/// requeue per set: those held an entry per set in kube-runtime's scheduler (its key's strings twice,
/// a slot of its delay queue), about a tenth of a settled set's heap (issue 51).
pub const RESYNC: Duration = Duration::from_secs(30 * 60);

/// How soon to look again while the caches fill, or after adopting a revision the cache had not seen.
const SOON: Duration = Duration::from_millis(250);

/// How soon a set held for unobserved readers looks again by itself (their next list triggers it).
const UNOBSERVED_RECHECK: Duration = Duration::from_secs(30);

/// A kind of set: its custom resource and its view for the core.
pub trait SetObject: views::Object {
    const KIND: SetKind;
    fn as_set(&self) -> SetRef<'_>;
}

impl SetObject for ConfigMapSet {
    const KIND: SetKind = SetKind::ConfigMapSet;
    fn as_set(&self) -> SetRef<'_> {
        SetRef::ConfigMap(self)
    }
}

impl SetObject for SecretSet {
    const KIND: SetKind = SetKind::SecretSet;
    fn as_set(&self) -> SetRef<'_> {
        SetRef::Secret(self)
    }
}

pub async fn reconcile<S: SetObject>(set: Arc<S>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    // At DEBUG: a span costs every reconcile, and the INFO lines name their object themselves.
    let span = debug_span!(
        "reconcile",
        controller = NAME,
        kind = S::KIND.as_str(),
        namespace = set.namespace().unwrap_or_default(),
        set = %set.name_any(),
    );
    if let Some(notifier) = &ctx.notifier
        && set.meta().deletion_timestamp.is_none()
    {
        let _entered = span.enter();
        notifier.observe(&ctx, set.as_set());
    }
    let result = reconcile_inner(&set, &ctx).instrument(span).await;
    ctx.metrics.reconciled(NAME, started.elapsed());
    if result.is_ok() {
        ctx.succeeded(&reconciled(set.as_ref()));
    }
    result
}

fn set_id<S: SetObject>(set: &S) -> SetId {
    (
        S::KIND,
        Key::new(&set.namespace().unwrap_or_default(), &set.name_any()),
    )
}

fn reconciled<S: SetObject>(set: &S) -> Reconciled {
    Reconciled::Set(set_id(set))
}

fn field_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(labels::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// What a set's plan reads, from the index.
struct Observation {
    revisions: Vec<RevisionView>,
    workloads: Vec<WorkloadView>,
    history: Vec<HistoryObject>,
    /// The names the namespace's Pods reference, once listed (see [`pod_refs`]).
    pod_refs: Option<BTreeSet<String>>,
    /// Whether the history kinds have listed (see [`Index::history_listed`]); until then `history`
    /// is empty rather than partial, and the plan neither prunes nor adds history's owners.
    ///
    /// [`Index::history_listed`]: crate::engine::index::Index::history_listed
    history_listed: bool,
    /// Where each of its workloads waiting for the rollout budget stands, by UID.
    budget_waiting: BTreeMap<String, String>,
    /// How the check Jobs of the revision being checked stand, by check hash, once read (see
    /// [`checks_io::jobs`]).
    check_jobs: BTreeMap<String, JobOutcome>,
}

/// What a set's plan reads, from the index: its revisions by label, and the workloads and history
/// objects that name it. Nothing else in the namespace is looked at (Pods only once a prune is due).
fn observe(ctx: &Context, id: &SetId) -> Observation {
    let (kind, key) = id;
    let revisions = ctx
        .index
        .revisions(*kind, &key.namespace, &naming::set_label_value(&key.name));
    // Asked before the readers are read: a list that ends in between only adds history.
    let history_listed = ctx.index.history_listed();
    let readers = ctx.index.readers(id);
    let workloads: Vec<WorkloadView> = readers
        .workloads
        .iter()
        .filter_map(|(kind, workload)| ctx.stores.workload(*kind, &key.namespace, workload))
        .collect();
    let budget_waiting = match ctx.index.budget() {
        Some(budget) => workloads
            .iter()
            .filter_map(|w| {
                let waiting = budget.position(&(w.kind, Key::new(&key.namespace, &w.name)))?;
                Some((w.uid.clone(), waiting.to_string()))
            })
            .collect(),
        None => BTreeMap::new(),
    };
    Observation {
        revisions,
        workloads,
        history: if history_listed {
            readers.history
        } else {
            Vec::new()
        },
        pod_refs: None,
        history_listed,
        budget_waiting,
        check_jobs: BTreeMap::new(),
    }
}

/// The names of objects of `kind` that the Pods of `namespace` made from templates cmset rewrote
/// reference. Read only when a prune is due: a Pod whose owner is indexed names nothing its owner does
/// not, but an orphaned Pod, or one still terminating after its ReplicaSet went, may run a revision
/// nothing indexed names. Any recent version will do (`resourceVersion=0`, answered from the API
/// server's cache, not from etcd); only the Pods' references are decoded. A failed list fails the
/// reconcile: nothing is pruned without it.
async fn pod_refs(ctx: &Context, namespace: &str, kind: Referenced) -> Result<BTreeSet<String>> {
    let api: Api<WirePod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}=true", labels::MANAGED_TEMPLATE);
    let params = ListParams::default().labels(&selector).at("0");
    let pods = api.list(&params).await.map_err(|source| Error::ListPods {
        namespace: namespace.to_string(),
        source,
    })?;
    Ok(pods
        .items
        .into_iter()
        .filter_map(|pod| Pod::from(pod).spec)
        .flat_map(|spec| RefNames::of(&spec).get(kind).clone())
        .collect())
}

/// A ConfigMap or Secret read whole: a source, or an object holding a revision's name. Its content stays
/// in this reconcile.
enum Fetched {
    ConfigMap(ConfigMap),
    Secret(Secret),
}

impl Fetched {
    fn content(&self) -> Content<'_> {
        match self {
            Self::ConfigMap(cm) => Content::of_config_map(cm),
            Self::Secret(secret) => Content::of_secret(secret),
        }
    }

    fn existing(&self) -> Existing<'_> {
        match self {
            Self::ConfigMap(cm) => Existing::config_map(cm),
            Self::Secret(secret) => Existing::secret(secret),
        }
    }

    fn resource_version(&self) -> Option<String> {
        match self {
            Self::ConfigMap(cm) => cm.resource_version(),
            Self::Secret(secret) => secret.resource_version(),
        }
    }
}

/// Reads a ConfigMap or Secret, `None` when it does not exist.
async fn fetch(
    ctx: &Context,
    kind: Referenced,
    namespace: &str,
    name: &str,
) -> kube::Result<Option<Fetched>> {
    Ok(match kind {
        Referenced::ConfigMap => Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(Fetched::ConfigMap),
        Referenced::Secret => Api::<Secret>::namespaced(ctx.client.clone(), namespace)
            .get_opt(name)
            .await?
            .map(Fetched::Secret),
    })
}

/// What the reconcile holds of the set's content.
enum Held {
    Inline,
    Known(String),
    Read(Box<Fetched>),
    Missing,
    Unreadable(String),
}

impl Held {
    fn state(&self) -> SourceState<'_> {
        match self {
            Self::Inline => SourceState::Inline,
            Self::Known(identity) => SourceState::Known(identity),
            Self::Read(fetched) => SourceState::Read(fetched.content()),
            Self::Missing => SourceState::Missing,
            Self::Unreadable(why) => SourceState::Unreadable(why),
        }
    }
}

/// The set's content as far as planning needs it: the identity the index remembers for the source's
/// current version, or the source read now when it moved (or when `force`d: a revision must be made).
async fn hold_source(ctx: &Context, set: SetRef<'_>, namespace: &str, force: bool) -> Result<Held> {
    let Some(source) = set.source_name() else {
        return Ok(Held::Inline);
    };
    let kind = set.kind();
    if !force {
        match ctx.index.source(kind, namespace, source) {
            SourceLookup::Fresh(Some(identity)) => return Ok(Held::Known(identity)),
            SourceLookup::Fresh(None) => return Ok(Held::Missing),
            SourceLookup::Stale => {}
        }
    }
    let request = fetch(ctx, kind.revision_kind(), namespace, source);
    match request.await {
        Ok(Some(fetched)) => {
            let identity = fetched.content().identity();
            debug!(%source, %identity, "read the source");
            ctx.index.record_source(
                kind,
                namespace,
                source,
                fetched.resource_version(),
                Some(identity),
            );
            Ok(Held::Read(Box::new(fetched)))
        }
        Ok(None) => {
            ctx.index.record_source(kind, namespace, source, None, None);
            Ok(Held::Missing)
        }
        // Refused (cmset may not read it): a state to report, not a failure to retry.
        Err(e) if api_code(&e) == Some(403) => Ok(Held::Unreadable(
            "forbidden: cmset's service account may not read it".to_string(),
        )),
        Err(e) => Err(Error::ReadSource {
            name: source.to_string(),
            source: e,
        }),
    }
}

async fn reconcile_inner<S: SetObject>(shared: &Arc<S>, ctx: &Context) -> Result<Action> {
    if !ctx.wait_caches_for_planning().await {
        return Ok(Action::requeue(SOON));
    }
    let object = shared.as_ref();
    let set = object.as_set();
    let name = object.name_any();
    let namespace = object
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let id = set_id(object);
    if object.meta().deletion_timestamp.is_some() {
        // The garbage collector deletes the revisions only the set owns; the ones a ReplicaSet or
        // ControllerRevision also owns stay until those go. Nothing to do here.
        ctx.forget_set(&id);
        return Ok(Action::await_change());
    }
    let unobserved = ctx.index.unobserved_readers(&id);
    if !unobserved.is_empty() {
        return hold_unobserved(ctx, object, &id, &unobserved).await;
    }
    let seen = observe(ctx, &id);
    // The change windows' verdict, at the instant the plan is made for.
    let windows = window_hold::verdict(set, &ctx.index.cluster_windows_for(set), (ctx.clock)().0)
        .with_break_glass(ctx.index.window_override(set));
    let prepared = analysis_io::prepare(ctx, set);
    let held = hold_source(ctx, set, &namespace, false).await?;
    let mut readings = Readings {
        object: shared.clone(),
        held,
        schemas: SchemaTexts::new(),
        seen,
        windows,
        prepared,
    };
    // The set planned with everything read so far.
    macro_rules! replan {
        () => {{
            let planned;
            (readings, planned) = make_plan(ctx, readings).await;
            planned
        }};
    }
    // Planned first from what is known.
    let mut plan = replan!();
    if plan.needs_content {
        // A new revision is to be made of the source: read its content now, and the schemas it must
        // pass.
        readings.held = hold_source(ctx, set, &namespace, true).await?;
        readings.schemas = read_schemas(ctx, set, &namespace).await?;
        plan = replan!();
    }
    if plan.needs_pods && readings.seen.history_listed {
        // Old revisions would be pruned: the Pods say whether one still runs any of them.
        readings.seen.pod_refs = Some(pod_refs(ctx, &namespace, S::KIND.revision_kind()).await?);
        plan = replan!();
    }
    // A revision being checked: its check Jobs are read by name and the set is planned again with how
    // they stand. A revision still to be created has none.
    let mut check_jobs = BTreeMap::new();
    if let Some(run) = plan.checks.clone().filter(|_| plan.create.is_none()) {
        check_jobs = told(ctx, object, checks_io::jobs(ctx, set, &namespace, &run).await)?;
        readings.seen.check_jobs = checks_io::outcomes(&check_jobs, &run);
        plan = replan!();
    }
    // The measurements taken since of the analysis runs the plan finds due are recorded, and the set
    // is planned again with what they showed; the runs still due are handed to the measurer (the
    // planner rendered their queries), whose answers reconcile the set again. Nothing here waits
    // for Prometheus.
    let measured = match &readings.prepared {
        Some(prepared) => analysis_io::measured(ctx, set, prepared, &plan),
        None => None,
    };
    if measured.is_some() {
        readings.prepared = measured;
        plan = replan!();
    }
    if let Some(prepared) = &readings.prepared {
        analysis_io::request(ctx, set, prepared, &mut plan);
    }
    observe_rollout(ctx, set, &plan.status);
    retain_analysis(ctx, set, &plan.status);
    // Checks start once their revision exists (the next reconcile, when this plan creates it), and each
    // started Job's uid and finished one's verdict is recorded in the set's status, whose watch event
    // plans the set again. After
    // the plan's own writes, so that a check that cannot start (no RBAC in the namespace) keeps none
    // of them back.
    let checks = plan
        .checks
        .clone()
        .filter(|_| plan.create.is_none() && !plan.needs_content);
    if plan.is_quiet(set) {
        if let Some(run) = &checks {
            told(
                ctx,
                object,
                checks_io::carry_out(ctx, object, &namespace, run, &check_jobs).await,
            )?;
        }
        debug!("nothing to do");
        ctx.forget_deferred(&id);
        return Ok(look_again_in(plan.recheck_in));
    }
    if plan.needs_content {
        // The source changed between two reads; its watch event brings us back.
        return Ok(Action::requeue(SOON));
    }
    let status_can_wait = status_can_wait(&plan, set);
    let only_deferrable = plan.create.is_none()
        && plan.prune.is_empty()
        && plan.patches.iter().all(|(_, patch)| adds_only_owners(patch))
        && status_can_wait;
    if let Some(wait) = only_deferrable.then(|| ctx.defer(&id)).flatten() {
        debug!(?wait, "batching deferrable writes");
        return Ok(Action::requeue(wait));
    }
    ctx.forget_deferred(&id);

    let kind = S::KIND.revision_kind();
    if let Some(revision) = plan.create.clone() {
        match create_revision(ctx, &namespace, set, &revision).await? {
            Created::New => {}
            // The plan was made from a cache that had not seen it yet: plan again once it has.
            Created::Adopted => return Ok(Action::requeue(SOON)),
            Created::Collision(taken) => {
                // Record the bumped collision count first: the next reconcile picks the next name.
                let previous = set.status().cloned().unwrap_or_default();
                // Judges nothing: the content was judged by the plan that named the revision.
                let now = (ctx.clock)();
                plan = plan_collision(
                    &readings.input(now, content_check::Budget::UNLIMITED),
                    &previous,
                    &taken,
                );
                let own = ctx.own_status(&id, set, &plan.status);
                if write_status(ctx, object, own).await? == StatusWrite::StoreBehind {
                    return Ok(Action::requeue(OWN_WRITE_RECHECK));
                }
                publish(ctx, object, &plan.events);
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
        }
    }
    for (revision, patch) in &plan.patches {
        let request = patch_revision_metadata(ctx, kind, &namespace, revision, patch);
        match ctx.write("patch_revision", request).await {
            Ok(()) => {}
            // Deleted meanwhile: its watch event reconciles again.
            Err(e) if api_code(&e) == Some(404) => {}
            Err(source) => {
                return Err(Error::PatchRevision {
                    name: revision.clone(),
                    source,
                });
            }
        }
    }
    for prune in &plan.prune {
        let params = DeleteParams {
            // Of the object the plan saw, as the plan saw it: a store behind its own (or anyone's) last
            // write cannot delete a revision that changed since.
            preconditions: Some(Preconditions {
                uid: Some(prune.uid.clone()),
                resource_version: prune.resource_version.clone(),
            }),
            ..DeleteParams::background()
        };
        let request = delete_revision(ctx, kind, &namespace, &prune.name, params);
        match ctx.write("delete_revision", request).await {
            Ok(()) => {
                ctx.metrics.revisions_pruned.inc();
            }
            // Gone already, replaced by another object of that name, or changed since the plan saw
            // it (its watch event plans again): nothing to delete now.
            Err(e) if matches!(api_code(&e), Some(404) | Some(409)) => {}
            Err(source) => {
                return Err(Error::DeleteRevision {
                    name: prune.name.clone(),
                    source,
                });
            }
        };
    }
    // The revision exists now; a status that would only say "about to move" waits for the move.
    let wait = (plan.status_changed(set) && status_can_wait)
        .then(|| ctx.defer(&id))
        .flatten();
    let own = ctx.own_status(&id, set, &plan.status);
    if plan.status_changed(set) && wait.is_none() && !own.written_already() {
        debug!(fields = ?changed_fields(set, &plan), "writing status");
        match write_status(ctx, object, own).await? {
            StatusWrite::Written => count_rollout(ctx, set, &plan),
            // The plan started from older state than the API server holds: its events and the
            // rest are planned again from the newer state.
            StatusWrite::StoreBehind => return Ok(Action::requeue(OWN_WRITE_RECHECK)),
        }
    }
    publish(ctx, object, &plan.events);
    if let Some(run) = &checks {
        told(
            ctx,
            object,
            checks_io::carry_out(ctx, object, &namespace, run, &check_jobs).await,
        )?;
    }
    // A revision just made with checks to run: its Jobs start at the next reconcile, soon.
    let checks_to_start = plan.create.is_some() && plan.checks.is_some();
    let again = wait.or(plan.recheck_in);
    Ok(look_again_in(if checks_to_start {
        Some(again.map_or(SOON, |again| again.min(SOON)))
    } else {
        again
    }))
}

/// When a reconcile that did what it had to comes back by itself: when something it waits for is
/// due, or else only when the set or what it reads changes (or the resync of every set comes).
fn look_again_in(due: Option<Duration>) -> Action {
    match due {
        Some(due) => Action::requeue(due.min(RESYNC)),
        None => Action::await_change(),
    }
}

/// `result` of reading or starting the set's checks, a failure also told in a Warning on the set, where
/// whoever applied it looks: a check that cannot be read or started (most often, the ClusterRole
/// `cmset-checks` is not bound in the namespace) fails the reconcile, which retries with backoff.
fn told<S: SetObject, T>(ctx: &Context, object: &S, result: Result<T>) -> Result<T> {
    if let Err(error @ Error::Check { .. }) = &result {
        let warning = PlannedEvent {
            kind: EventKind::Warning,
            reason: "CheckNotStarted",
            message: cmset_core::status::message::join_capped(
                &[error.to_string()],
                cmset_core::rollout::plan::EVENT_MESSAGE_MAX_LEN,
            ),
        };
        publish(ctx, object, &[warning]);
    }
    result
}

/// The labels of `set`'s series.
pub fn set_labels(kind: SetKind, namespace: &str, name: &str) -> SetLabels {
    SetLabels {
        namespace: namespace.to_string(),
        kind: kind.as_str(),
        name: name.to_string(),
    }
}

/// Reports where the rollout `status` plans stands, on every reconcile: a replica that takes the lease
/// reports every set at once, written or not.
fn observe_rollout(ctx: &Context, set: SetRef<'_>, status: &cmset_api::ConfigMapSetStatus) {
    let labels = set_labels(set.kind(), set.namespace(), set.name());
    let Some(rollout) = &status.rollout else {
        ctx.metrics.observe_rollout(&labels, None);
        return;
    };
    // The wave in progress opened when its first workload moved (or the rollout began).
    let wave_opened_at = status
        .workloads
        .iter()
        .filter(|w| w.wave == rollout.wave)
        .filter_map(|w| w.moved_at.as_ref())
        .map(|t| t.0.as_second())
        .min()
        .or_else(|| rollout.started_at.as_ref().map(|t| t.0.as_second()));
    let deadline = set.rollout().map(|r| r.progress_deadline_seconds).unwrap_or(600);
    let gauges = RolloutGauges {
        phase: rollout.phase.as_str(),
        wave: i64::from(rollout.wave),
        wave_opened_at,
        progress_deadline_seconds: i64::from(deadline),
    };
    ctx.metrics.observe_rollout(&labels, Some(&gauges));
}

/// Drops the analysis series of templates the set no longer names and of workloads no longer its
/// own, on every reconcile: a metric outlives neither.
fn retain_analysis(ctx: &Context, set: SetRef<'_>, status: &cmset_api::ConfigMapSetStatus) {
    let labels = set_labels(set.kind(), set.namespace(), set.name());
    let named = set.rollout().map(|r| r.analysis.as_slice()).unwrap_or_default();
    ctx.metrics.retain_analysis(
        &labels,
        |template| named.iter().any(|a| a.template == template),
        |workload| status.workloads.iter().any(|w| w.name == workload),
    );
}

/// Counts what the status just written tells of the rollout.
fn count_rollout(ctx: &Context, set: SetRef<'_>, plan: &SetPlan) {
    let old = set.status().cloned().unwrap_or_default();
    let happened = waves::transitions(&old, &plan.status);
    let events = [
        ("started", happened.started),
        ("completed", happened.completed),
        ("failed", happened.failed),
        ("rolled_back", happened.rolled_back),
    ];
    for (event, _) in events.into_iter().filter(|(_, happened)| *happened) {
        ctx.metrics
            .rollouts
            .get_or_create(&crate::platform::metrics::RolloutLabel { event })
            .inc();
    }
}

/// What a set's plan reads, owned: the plan of a set with `spec.validation` rules is made off the
/// engine's thread (see [`make_plan`]), and these go with it and come back.
struct Readings<S> {
    object: Arc<S>,
    held: Held,
    schemas: SchemaTexts,
    seen: Observation,
    windows: WindowState,
    prepared: Option<Prepared>,
}

impl<S: SetObject> Readings<S> {
    /// The planner's input, made for `now`, judging the content within `content_budget`.
    fn input<'a>(&'a self, now: Time, content_budget: content_check::Budget<'a>) -> SetInput<'a> {
        SetInput {
            set: self.object.as_set(),
            source: self.held.state(),
            revisions: &self.seen.revisions,
            workloads: &self.seen.workloads,
            history: &self.seen.history,
            pod_refs: self.seen.pod_refs.as_ref(),
            now,
            budget_waiting: &self.seen.budget_waiting,
            analysis: self.prepared.as_ref().map(|a| WaveAnalysis {
                analyses: &a.analyses,
                runs: &a.runs,
            }),
            windows: &self.windows,
            schemas: &self.schemas,
            check_jobs: &self.seen.check_jobs,
            content_budget,
        }
    }

    /// Plans the set for `now`. Until the history kinds have listed, the plan cannot tell a revision
    /// that only history names from an unused one: none is pruned (no Pods are listed, so none can
    /// be), and a revision the status says is in use stays so, rather than flapping while the lists
    /// come in.
    fn plan(&self, now: Time, content_budget: content_check::Budget<'_>) -> SetPlan {
        let input = self.input(now, content_budget);
        let mut plan = plan_set(&input);
        if !self.seen.history_listed {
            let was_in_use = |name: &str| {
                (input.set.status().into_iter())
                    .flat_map(|s| &s.history)
                    .any(|h| h.name == name && h.in_use)
            };
            for revision in &mut plan.status.history {
                revision.in_use |= was_in_use(&revision.name);
            }
        }
        plan
    }
}

/// Plans the set from `readings`: on this thread, which polls every watch and reconcile of a
/// current-thread engine, unless the set has `spec.validation` rules. Such a plan compiles the
/// rules' schemas (checking the spec) and may judge the content against them, which can take up to
/// [`CONTENT_BUDGET`] (a 900 KiB JSON key against a JSON schema): it is made on the runtime's
/// blocking pool, and this thread moves on meanwhile.
async fn make_plan<S: SetObject>(ctx: &Context, readings: Readings<S>) -> (Readings<S>, SetPlan) {
    let now = (ctx.clock)();
    if readings.object.as_set().validation().is_empty() {
        let plan = readings.plan(now, content_check::Budget::UNLIMITED);
        return (readings, plan);
    }
    let judged = tokio::task::spawn_blocking(move || {
        // The content's budget starts when its judging can.
        let started = Instant::now();
        let out_of_time = move || started.elapsed() > CONTENT_BUDGET;
        let plan = readings.plan(now, content_check::Budget(&out_of_time));
        (readings, plan)
    });
    match judged.await {
        Ok(planned) => planned,
        // The planner's panic is the reconcile's, as when it was planned here.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Cancelled only when the runtime shuts down, which drops this reconcile too.
        Err(_) => std::future::pending().await,
    }
}

/// How long one plan may spend judging a set's content against `spec.validation`: a costly schema
/// or document makes the set `Valid=False` saying so, instead of holding a blocking thread.
const CONTENT_BUDGET: Duration = Duration::from_secs(5);

/// The schemas `spec.validation` keeps in ConfigMaps of the set's namespace, each found or missing.
async fn read_schemas(ctx: &Context, set: SetRef<'_>, namespace: &str) -> Result<SchemaTexts> {
    let mut schemas = SchemaTexts::new();
    for reference in content_check::schema_refs(set.validation()) {
        let text = match fetch(ctx, Referenced::ConfigMap, namespace, &reference.name).await {
            Ok(Some(Fetched::ConfigMap(cm))) => match cm.data.as_ref().and_then(|d| d.get(&reference.key)) {
                Some(text) => SchemaText::Found(text.clone()),
                None => SchemaText::Missing(format!("the ConfigMap has no data key {:?}", reference.key)),
            },
            Ok(_) => SchemaText::Missing("the ConfigMap does not exist".into()),
            Err(e) if api_code(&e) == Some(403) => {
                SchemaText::Missing("forbidden: cmset's service account may not read it".into())
            }
            Err(source) => {
                return Err(Error::ReadSource {
                    name: reference.name.clone(),
                    source,
                });
            }
        };
        schemas.insert(reference.clone(), text);
    }
    Ok(schemas)
}

/// Patches a revision's metadata. Its echo is no news to the set, which planned with the patch.
async fn patch_revision_metadata(
    ctx: &Context,
    kind: Referenced,
    namespace: &str,
    name: &str,
    patch: &Value,
) -> kube::Result<()> {
    let (params, patch) = (field_manager(), Patch::Strategic(patch));
    let writing = ctx.index.writing(kind.as_str(), Key::new(namespace, name));
    let answer = match kind {
        Referenced::ConfigMap => {
            {
                Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
                    .patch_metadata(name, &params, &patch)
                    .await?
            }
            .metadata
            .resource_version
        }
        Referenced::Secret => {
            {
                Api::<Secret>::namespaced(ctx.client.clone(), namespace)
                    .patch_metadata(name, &params, &patch)
                    .await?
            }
            .metadata
            .resource_version
        }
    };
    let echo = Echo {
        writer: false,
        readers: true,
    };
    writing.answered(answer, echo);
    Ok(())
}

async fn delete_revision(
    ctx: &Context,
    kind: Referenced,
    namespace: &str,
    name: &str,
    params: DeleteParams,
) -> kube::Result<()> {
    match kind {
        Referenced::ConfigMap => Api::<ConfigMap>::namespaced(ctx.client.clone(), namespace)
            .delete(name, &params)
            .await
            .map(drop),
        Referenced::Secret => Api::<Secret>::namespaced(ctx.client.clone(), namespace)
            .delete(name, &params)
            .await
            .map(drop),
    }
}

/// What creating a revision came to.
enum Created {
    New,
    /// The name already held this revision (same content, this set as controller).
    Adopted,
    /// The name is taken by an object that is not this revision.
    Collision(String),
}

/// Creates the revision. An existing object of that name is adopted when it is this revision, taken
/// over when it is a generator's copy of it, and is a collision otherwise: never overwritten, never
/// deleted.
async fn create_revision(
    ctx: &Context,
    namespace: &str,
    set: SetRef<'_>,
    revision: &NewRevision,
) -> Result<Created> {
    let name = revision.name().to_string();
    let kind = set.kind().revision_kind();
    let params = PostParams {
        field_manager: Some(labels::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    // Only the version is kept: the answer leaves the content on the server.
    let request = async {
        match revision {
            NewRevision::ConfigMap(cm) => metadata_answers::create(&ctx.client, namespace, &params, cm)
                .await
                .map(|created| created.resource_version()),
            NewRevision::Secret(secret) => metadata_answers::create(&ctx.client, namespace, &params, secret)
                .await
                .map(|created| created.resource_version()),
        }
    };
    let writing = ctx.index.writing(kind.as_str(), Key::new(namespace, &name));
    let error = match ctx.write("create_revision", request).await {
        Ok(version) => {
            // Its echo wakes the readers, who move to it, and not this set, which planned with it.
            let echo = Echo {
                writer: false,
                readers: true,
            };
            writing.answered(version, echo);
            info!(namespace, set = %set.name(), %kind, revision = %name, "created revision");
            ctx.metrics.revisions_created.inc();
            return Ok(Created::New);
        }
        Err(e) if api_code(&e) == Some(409) => e,
        Err(source) => return Err(Error::CreateRevision { name, source }),
    };
    drop(writing);
    debug!(revision = %name, error = %crate::platform::redact::api_error(&error), "revision name exists");
    let read_existing = |source| Error::ReadExisting {
        name: name.clone(),
        source,
    };
    let Some(existing) = fetch(ctx, kind, namespace, &name).await.map_err(read_existing)? else {
        // Deleted since: the next attempt creates it.
        return Ok(Created::Adopted);
    };
    let ours = revision.metadata();
    let content = match revision {
        NewRevision::ConfigMap(cm) => Content::of_config_map(cm),
        NewRevision::Secret(secret) => Content::of_secret(secret),
    };
    let existing = existing.existing();
    let label = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        meta.labels.as_ref().and_then(|l| l.get(labels::SET)).cloned()
    };
    let patch = match classify_existing(existing, set, &content) {
        ExistingName::Collision => {
            warn!(set = %set.name(), %kind, name = %name, "revision name collides with an existing object");
            return Ok(Created::Collision(name));
        }
        // A generator's object of this very name and content: it becomes the revision, so the
        // workloads that name it already stay where they are. A conflict means it changed since it
        // was read; the next attempt judges it again.
        ExistingName::Claim => {
            info!(set = %set.name(), %kind, revision = %name, "taking over an unowned object of the same name and content as the revision");
            Some(claim_patch(existing.metadata, set))
        }
        // Without our label the cache never sees it: add that and nothing else (its number and
        // metadata are planned again from the cache).
        ExistingName::Adopt => {
            info!(set = %set.name(), %kind, revision = %name, "revision exists already; adopting it");
            (label(existing.metadata) != label(ours))
                .then(|| json!({ "metadata": { "labels": { labels::SET: label(ours) } } }))
        }
    };
    if let Some(patch) = patch {
        // The metadata of the answer is all that is read back (a claim's body sets `immutable` too).
        ctx.write(
            "patch_revision",
            patch_revision_metadata(ctx, kind, namespace, &name, &patch),
        )
        .await
        .map_err(|source| Error::PatchRevision {
            name: name.clone(),
            source,
        })?;
    }
    Ok(Created::Adopted)
}

/// Plans nothing while workload kinds that may read the set cannot be listed or watched (see
/// [`Index::unobserved_readers`](crate::engine::index::Index::unobserved_readers)): what the index holds of
/// them may be stale, so no wave opens and nothing is pruned; only the Ready condition says why
/// ([`plan_unobserved`]). Their next full list triggers every set; the requeue covers a missed one.
async fn hold_unobserved<S: SetObject>(
    ctx: &Context,
    object: &S,
    id: &SetId,
    unobserved: &[(String, String)],
) -> Result<Action> {
    let set = object.as_set();
    let previous = set.status().cloned().unwrap_or_default();
    let status = plan_unobserved(&previous, unobserved, &(ctx.clock)());
    let own = ctx.own_status(id, set, &status);
    if status != previous && !own.written_already() {
        info!(
            ?unobserved,
            "holding: workload kinds that may read the set cannot be listed or watched"
        );
        if write_status(ctx, object, own).await? == StatusWrite::StoreBehind {
            return Ok(Action::requeue(OWN_WRITE_RECHECK));
        }
    }
    Ok(Action::requeue(UNOBSERVED_RECHECK))
}

/// What came of a status write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StatusWrite {
    Written,
    /// Not sent: the store has not yet seen the last status this process wrote, so the plan started
    /// from older state than the API server holds. The store's watch event of that write plans again.
    StoreBehind,
}

/// How soon a set whose store is behind this process's own last status write looks again by itself.
const OWN_WRITE_RECHECK: Duration = Duration::from_secs(1);

/// Writes the status of `own` with a server-side apply of the whole status, forcing ownership: cmset
/// is its only writer, and a field the plan leaves out is removed because this manager owned it, so no
/// hand-kept list of fields can go stale. The conversation around the request (not sent while the store
/// is behind this process's own last status write, the echo announced, the write remembered) is
/// [`OwnStatusWrite::send`]'s.
///
/// Writes cannot go back in time: the apply carries the resourceVersion of the set the plan started
/// from, so the API server refuses it (409 Conflict) when the set changed since (another replica that
/// took over wrote it, or this write arrives late); and it is not sent at all while the store has not
/// seen this process's own last status write. A conflict is returned as the error it is: the set's
/// watch event plans again from the newer version at once, and [`error_policy`] backs off quietly
/// should the conflicts go on (a writer fighting cmset).
async fn write_status<S: SetObject>(
    ctx: &Context,
    object: &S,
    own: OwnStatusWrite<'_>,
) -> Result<StatusWrite> {
    let set = object.as_set();
    let status = own.status();
    let name = object.name_any();
    // Made only when the write is sent.
    let request = || {
        if status.omitted_workloads > 0 && set.status().is_none_or(|s| s.omitted_workloads == 0) {
            warn!(
                omitted = status.omitted_workloads,
                "the status lists fewer workloads than read the set: the list would outgrow what the API server stores (status.omittedWorkloads)"
            );
        }
        let mut body = json!({
            "apiVersion": S::api_version(&()),
            "kind": S::kind(&()),
            "status": status,
        });
        // The notifier's records are its own to write (another field manager): a write of the set
        // controller never carries them, so it can neither own nor turn back a record.
        // The checks' records likewise (`cmset-checks`): a plan made from a store behind the last record
        // would otherwise drop it.
        if let Some(status) = body["status"].as_object_mut() {
            status.remove("notifications");
            status.remove("checks");
        }
        if let Some(version) = &object.meta().resource_version {
            body["metadata"] = json!({ "resourceVersion": version });
        }
        let api: Api<S> = Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
        let params = PatchParams::apply(labels::FIELD_MANAGER).force();
        let name = name.clone();
        async move { api.patch_status(&name, &params, &Patch::Apply(&body)).await }
    };
    match own.send(request).await {
        Ok(Sent::Written(answer)) => {
            // The notifier hears what was written from the answer, which is the echo to come: that
            // echo reconciles no one.
            if let Some(notifier) = &ctx.notifier {
                notifier.observe(ctx, answer.as_set());
            }
            Ok(StatusWrite::Written)
        }
        Ok(Sent::StoreBehind) => Ok(StatusWrite::StoreBehind),
        Err(source) => Err(Error::WriteStatus { name, source }),
    }
}

/// Whether the status `plan` wants may wait a moment, to be written once with what follows: its only
/// news is that workloads are about to move, and the workload controllers move them within
/// milliseconds. (`kubectl wait` and kstatus tools read the old status as still in progress, since its
/// `observedGeneration` is behind.) Anything else (a new revision number, a pin, a collision, an invalid
/// spec) is written at once.
///
/// Owner references for new history objects wait likewise: a rollout of N workloads makes N
/// ReplicaSets within moments, and one patch per revision can carry them all.
fn status_can_wait(plan: &SetPlan, set: SetRef<'_>) -> bool {
    // A rollout's news (a wave opens, a rollback) is what the workloads wait for: never held back.
    let rollout_moved = set.status().and_then(|s| s.rollout.as_ref()) != plan.status.rollout.as_ref();
    !plan.status_changed(set)
        || (!rollout_moved
            && plan
                .status
                .workloads
                .iter()
                .any(|w| w.state == WorkloadState::Pending))
}

/// The top-level status fields a write changes, for the debug log.
fn changed_fields(set: SetRef<'_>, plan: &SetPlan) -> Vec<String> {
    let old = serde_json::to_value(set.status().cloned().unwrap_or_default()).unwrap_or_default();
    let new = serde_json::to_value(&plan.status).unwrap_or_default();
    new.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| old.get(k.as_str()) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect()
}

fn adds_only_owners(patch: &Value) -> bool {
    patch
        .get("metadata")
        .and_then(Value::as_object)
        .is_some_and(|m| m.keys().all(|k| k == "ownerReferences"))
}

/// Publishes the plan's events off the reconcile's path, best effort: losing one must not fail, hold
/// up or repeat the reconcile.
fn publish<S: SetObject>(ctx: &Context, set: &S, events: &[PlannedEvent]) {
    let reference = set.object_ref(&());
    for planned in events {
        if planned.reason == VALIDATION_FAILED {
            let labels = set_labels(S::KIND, &set.namespace().unwrap_or_default(), &set.name_any());
            ctx.metrics
                .validation_failures
                .get_or_create(&ValidationLabels {
                    set: labels,
                    stage: "controller",
                })
                .inc();
        }
        let event = Event {
            type_: match planned.kind {
                EventKind::Normal => EventType::Normal,
                EventKind::Warning => EventType::Warning,
            },
            reason: planned.reason.to_string(),
            note: Some(planned.message.clone()),
            action: "Reconcile".to_string(),
            secondary: None,
        };
        ctx.publish_soon(event, reference.clone());
    }
}

/// A failed reconcile retries after a delay that doubles with each consecutive failure of the same set
/// (see [`crate::platform::backoff`]): a set that keeps failing costs a few requests an hour, not one every few
/// seconds. A watch event (the set edited, say) still reconciles it at once.
///
/// A conflict (the set moved on since the plan's version) is no failure: it is counted among the
/// write conflicts (`cmset_api_write_conflicts_total`), not the reconcile errors, and logged at debug.
pub fn error_policy<S: SetObject>(set: Arc<S>, error: &Error, ctx: Arc<Context>) -> Action {
    let conflict = error.is_conflict();
    if !conflict {
        ctx.metrics.failed(NAME, error.category());
    }
    let retry_in = ctx.backoff(&reconciled(set.as_ref()), error);
    if error.is_term_ended() {
        debug!(set = %set.name_any(), %error, "this replica's term as leader ended; the next leader carries on");
    } else if conflict {
        debug!(set = %set.name_any(), %error, ?retry_in, "conflict; retrying from a fresh read");
    } else {
        warn!(set = %set.name_any(), %error, ?retry_in, "reconcile failed");
    }
    Action::requeue(retry_in)
}
