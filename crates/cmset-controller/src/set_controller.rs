//! The set controller, keyed by ConfigMapSet: revisions, their metadata and owners, history and status.
//! It never touches workloads (the workload controller does, once per workload).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cmset_api::{ConfigMapSet, WorkloadState, labels};
use cmset_core::naming;
use cmset_core::observe::{HistoryObject, RevisionView, WorkloadView};
use cmset_core::plan::{EventKind, PlannedEvent, SetInput, SetPlan, plan_collision, plan_set};
use cmset_core::revision::{ExistingName, claim_patch, classify_existing};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::context::{Context, Reconciled};
use crate::error::{Error, Result, api_code};
use crate::index::Key;
use crate::views;

pub const NAME: &str = "configmapset";

/// A resync interval: watches already deliver every change, this only bounds how long a missed event
/// could go unnoticed. A resync of an unchanged world writes nothing.
const RESYNC: Duration = Duration::from_secs(30 * 60);

/// How soon to look again while the caches fill, or after adopting a revision the cache had not seen.
const SOON: Duration = Duration::from_millis(250);

pub async fn reconcile(set: Arc<ConfigMapSet>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let span = info_span!(
        "reconcile",
        controller = NAME,
        namespace = set.namespace().unwrap_or_default(),
        set = %set.name_any(),
    );
    let result = reconcile_inner(&set, &ctx).instrument(span).await;
    ctx.metrics.reconciled(NAME, started.elapsed());
    if result.is_ok() {
        ctx.succeeded(&reconciled(&set));
    }
    result
}

fn reconciled(set: &ConfigMapSet) -> Reconciled {
    Reconciled::Set(Key::new(&set.namespace().unwrap_or_default(), &set.name_any()))
}

fn field_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(labels::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// What a set's plan reads, from the index: its revisions by label, and the workloads and history
/// objects that name it. Nothing else in the namespace is looked at.
fn observe(ctx: &Context, key: &Key) -> (Vec<RevisionView>, Vec<WorkloadView>, Vec<HistoryObject>) {
    let revisions = ctx
        .index
        .revisions(&key.namespace, &naming::set_label_value(&key.name));
    let readers = ctx.index.readers(key);
    let workloads = readers
        .workloads
        .iter()
        .filter_map(|(kind, workload)| ctx.stores.workload(*kind, &key.namespace, workload))
        .collect();
    (revisions, workloads, readers.history)
}

async fn reconcile_inner(set: &ConfigMapSet, ctx: &Context) -> Result<Action> {
    if !ctx.caches_ready() {
        return Ok(Action::requeue(SOON));
    }
    let name = set.name_any();
    let namespace = set
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(name.clone()))?;
    let key = Key::new(&namespace, &name);
    if set.meta().deletion_timestamp.is_some() {
        // The garbage collector deletes the revisions only the set owns; the ones a ReplicaSet or
        // ControllerRevision also owns stay until those go. Nothing to do here.
        ctx.forget_deferred(&key);
        return Ok(Action::await_change());
    }
    let (revisions, workloads, history) = observe(ctx, &key);
    let mut input = SetInput {
        set,
        revisions: &revisions,
        workloads: &workloads,
        history: &history,
        pod_refs: None,
        now: (ctx.clock)(),
    };
    let mut plan = plan_set(&input);
    let pod_refs;
    if plan.needs_pods {
        pod_refs = list_pod_refs(ctx, &namespace).await?;
        input.pod_refs = Some(&pod_refs);
        plan = plan_set(&input);
    }
    if plan.is_quiet(set) {
        debug!("nothing to do");
        ctx.forget_deferred(&key);
        return Ok(Action::requeue(RESYNC));
    }
    let status_can_wait = status_can_wait(&plan, set);
    let only_deferrable = plan.create.is_none()
        && plan.prune.is_empty()
        && plan.patches.iter().all(|(_, patch)| adds_only_owners(patch))
        && status_can_wait;
    if let Some(wait) = only_deferrable.then(|| ctx.defer(&key)).flatten() {
        debug!(?wait, "batching deferrable writes");
        return Ok(Action::requeue(wait));
    }
    ctx.forget_deferred(&key);

    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    if let Some(revision) = plan.create.clone() {
        match create_revision(ctx, &configmaps, set, &revision).await? {
            Created::New => {}
            // The plan was made from a cache that had not seen it yet: plan again once it has.
            Created::Adopted => return Ok(Action::requeue(SOON)),
            Created::Collision(taken) => {
                // Record the bumped collision count first: the next reconcile picks the next name.
                let previous = set.status.clone().unwrap_or_default();
                plan = plan_collision(&input, &previous, &taken);
                write_status(ctx, set, &plan).await?;
                publish(ctx, set, &plan.events).await;
                return Ok(Action::requeue(Duration::from_millis(100)));
            }
        }
    }
    for (revision, patch) in &plan.patches {
        let (params, patch) = (field_manager(), Patch::Strategic(patch));
        let request = configmaps.patch_metadata(revision, &params, &patch);
        match ctx.write("patch_revision", request).await {
            Ok(_) => {}
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
            preconditions: Some(Preconditions {
                uid: Some(prune.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match ctx
            .write("delete_revision", configmaps.delete(&prune.name, &params))
            .await
        {
            Ok(_) => {
                ctx.metrics.revisions_pruned.inc();
            }
            // Gone already, or replaced by another object of that name: nothing of ours to delete.
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
        .then(|| ctx.defer(&key))
        .flatten();
    if plan.status_changed(set) && wait.is_none() && !ctx.wrote_already(&key, set, &plan.status) {
        debug!(fields = ?changed_fields(set, &plan), "writing status");
        write_status(ctx, set, &plan).await?;
        ctx.remember_written(&key, set, &plan.status);
    }
    publish(ctx, set, &plan.events).await;
    Ok(Action::requeue(wait.unwrap_or(RESYNC)))
}

/// What creating a revision came to.
enum Created {
    New,
    /// The name already held this revision (same content, this set as controller).
    Adopted,
    /// The name is taken by a ConfigMap that is not this revision.
    Collision(String),
}

/// Creates the revision. An existing ConfigMap of that name is adopted when it is this revision, and is
/// a collision otherwise: never overwritten, never deleted.
async fn create_revision(
    ctx: &Context,
    configmaps: &Api<ConfigMap>,
    set: &ConfigMapSet,
    revision: &ConfigMap,
) -> Result<Created> {
    let name = revision.name_any();
    let params = PostParams {
        field_manager: Some(labels::FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    let error = match ctx
        .write("create_revision", configmaps.create(&params, revision))
        .await
    {
        Ok(_) => {
            info!(set = %set.name_any(), revision = %name, "created revision");
            ctx.metrics.revisions_created.inc();
            return Ok(Created::New);
        }
        Err(e) if api_code(&e) == Some(409) => e,
        Err(source) => return Err(Error::CreateRevision { name, source }),
    };
    debug!(revision = %name, error = %error, "revision name exists");
    let existing = configmaps
        .get(&name)
        .await
        .map_err(|source| Error::ReadExisting {
            name: name.clone(),
            source,
        })?;
    let label = |cm: &ConfigMap| cm.labels().get(labels::SET).cloned();
    let patch = match classify_existing(&existing, set) {
        ExistingName::Collision => {
            warn!(set = %set.name_any(), configmap = %name, "revision name collides with an existing ConfigMap");
            return Ok(Created::Collision(name));
        }
        // A generator's ConfigMap of this very name and content: it becomes the revision, so the
        // workloads that name it already stay where they are. A conflict means it changed since it
        // was read; the next attempt judges it again.
        ExistingName::Claim => {
            info!(set = %set.name_any(), revision = %name, "taking over an unowned ConfigMap of the same name and content as the revision");
            Some(claim_patch(&existing, set))
        }
        // Without our label the cache never sees it: add that and nothing else (its number and
        // metadata are planned again from the cache).
        ExistingName::Adopt => {
            info!(set = %set.name_any(), revision = %name, "revision exists already; adopting it");
            (label(&existing) != label(revision))
                .then(|| json!({ "metadata": { "labels": { labels::SET: label(revision) } } }))
        }
    };
    if let Some(patch) = patch {
        // The metadata of the answer is all that is read back (a claim's body sets `immutable` too).
        ctx.write(
            "patch_revision",
            configmaps.patch_metadata(&name, &field_manager(), &Patch::Strategic(&patch)),
        )
        .await
        .map_err(|source| Error::PatchRevision {
            name: name.clone(),
            source,
        })?;
    }
    Ok(Created::Adopted)
}

/// ConfigMap names referenced by the Pods cmset's rewritten templates made: listed only when something
/// is about to be pruned, so Pods are never watched or cached.
async fn list_pod_refs(ctx: &Context, namespace: &str) -> Result<BTreeSet<String>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}=true", labels::MANAGED_TEMPLATE);
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListPods {
            namespace: namespace.to_string(),
            source,
        })?;
    Ok(views::pod_refs(&list.items))
}

/// Writes the planned status with a server-side apply of the whole status, forcing ownership: cmset
/// is its only writer, and a field the plan leaves out is removed because this manager owned it, so
/// no hand-kept list of fields can go stale.
async fn write_status(ctx: &Context, set: &ConfigMapSet, plan: &SetPlan) -> Result<()> {
    let body = json!({
        "apiVersion": ConfigMapSet::api_version(&()),
        "kind": ConfigMapSet::kind(&()),
        "status": plan.status,
    });
    let api: Api<ConfigMapSet> = Api::namespaced(ctx.client.clone(), &set.namespace().unwrap_or_default());
    let params = PatchParams::apply(labels::FIELD_MANAGER).force();
    ctx.write(
        "write_status",
        api.patch_status(&set.name_any(), &params, &Patch::Apply(&body)),
    )
    .await
    .map_err(|source| Error::WriteStatus {
        name: set.name_any(),
        source,
    })?;
    Ok(())
}

/// Whether the status `plan` wants may wait a moment, to be written once with what follows: its only
/// news is that workloads are about to move, and the workload controllers move them within
/// milliseconds. (`kubectl wait` and kstatus tools read the old status as still in progress, since its
/// `observedGeneration` is behind.) Anything else (a new revision number, a pin, a collision, an invalid
/// spec) is written at once.
///
/// Owner references for new history objects wait likewise: a rollout of N workloads makes N
/// ReplicaSets within moments, and one patch per revision can carry them all.
fn status_can_wait(plan: &SetPlan, set: &ConfigMapSet) -> bool {
    !plan.status_changed(set)
        || plan
            .status
            .workloads
            .iter()
            .any(|w| w.state == WorkloadState::Pending)
}

/// The top-level status fields a write changes, for the debug log.
fn changed_fields(set: &ConfigMapSet, plan: &SetPlan) -> Vec<String> {
    let old = serde_json::to_value(set.status.clone().unwrap_or_default()).unwrap_or_default();
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

/// Publishes the plan's events, best effort: losing one must not fail or repeat the reconcile.
async fn publish(ctx: &Context, set: &ConfigMapSet, events: &[PlannedEvent]) {
    let reference = set.object_ref(&());
    for planned in events {
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
        ctx.publish(&event, &reference).await;
    }
}

/// A failed reconcile retries after a delay that doubles with each consecutive failure of the same set
/// (see [`crate::backoff`]): a set that keeps failing costs a few requests an hour, not one every few
/// seconds. A watch event (the set edited, say) still reconciles it at once.
pub fn error_policy(set: Arc<ConfigMapSet>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(NAME, error.category());
    let conflict = error.is_conflict();
    let retry_in = ctx.backoff(&reconciled(&set), error);
    if conflict {
        debug!(set = %set.name_any(), %error, ?retry_in, "conflict; retrying from a fresh read");
    } else {
        warn!(set = %set.name_any(), %error, ?retry_in, "reconcile failed");
    }
    Action::requeue(retry_in)
}
