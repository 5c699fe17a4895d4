//! The workload controller, keyed by workload: computes every set reference of one Deployment,
//! StatefulSet or DaemonSet at once and patches it once, so that sets changed together roll it once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cmset_api::{ConfigMapSet, labels};
use cmset_core::rollout::{SetTarget, plan_workload, waits_for_unsettled};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::views::{self, Workload};

pub const NAME: &str = "workload";

/// Waiting for a set whose controller has not caught up: its status change triggers this workload
/// anyway; the requeue only bounds the wait if that event were missed.
const WAIT_FOR_SETS: Duration = Duration::from_secs(30);

pub async fn reconcile<K: Workload>(workload: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_inner(workload.as_ref(), &ctx).await;
    ctx.metrics.reconciled(NAME, started.elapsed());
    result
}

async fn reconcile_inner<K: Workload>(workload: &K, ctx: &Context) -> Result<Action> {
    // Planning from half-filled caches could miss a set's record; wait for the first full lists.
    if !ctx.caches_ready() {
        return Ok(Action::requeue(Duration::from_millis(250)));
    }
    // Only opted-in workloads are watched; the check keeps that true even if a watch were widened.
    let (Some(namespace), Some(view)) = (workload.namespace(), views::workload_view(workload)) else {
        return Ok(Action::await_change());
    };
    if !views::opted_in(workload) || workload.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    // Sets of the workload's own namespace only: a cross-namespace reference cannot be expressed.
    let sets = ctx.stores.sets_in(&namespace);
    if waits_for_unsettled(&view, &sets) {
        debug!(workload = %view.name, "a referenced set is not settled yet");
        return Ok(Action::requeue(WAIT_FOR_SETS));
    }
    let targets: Vec<SetTarget> = sets
        .iter()
        .filter_map(|s| SetTarget::from_set(s, &view.uid))
        .collect();
    let plan = plan_workload(&view, &targets);
    if plan.is_empty() {
        return Ok(Action::await_change());
    }
    let what = format!("{} {namespace}/{}", K::KIND, view.name);
    let has_labels = workload
        .template()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
        .is_some();
    let patch = plan.json_patch(&view.uid, has_labels);
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = PatchParams {
        field_manager: Some(labels::FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    ctx.metrics.wrote("patch_workload");
    api.patch_metadata(&view.name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(|source| Error::PatchWorkload {
            workload: what.clone(),
            source,
        })?;
    ctx.metrics
        .workloads_updated
        .get_or_create(&crate::metrics::KindLabel {
            kind: K::KIND.as_str(),
        })
        .inc();
    let moves: Vec<String> = plan
        .changes
        .iter()
        .map(|c| format!("{} → {}", c.from, c.to))
        .collect();
    info!(workload = %what, changes = ?moves, "moved ConfigMap references");
    let event = Event {
        type_: EventType::Normal,
        reason: "ConfigUpdated".to_string(),
        note: Some(format!(
            "cmset moved ConfigMap references: {}",
            dedup(&moves).join(", ")
        )),
        action: "Rollout".to_string(),
        secondary: None,
    };
    ctx.publish(&event, &workload.object_ref(&())).await;
    Ok(Action::await_change())
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

pub fn error_policy<K: Workload>(workload: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(NAME, error.category());
    if error.is_conflict() {
        // A failed `test` guard (422) or a conflict: the workload changed underneath. Its new version
        // arrives through the watch; retry soon from that fresh read.
        debug!(workload = %workload.name_any(), %error, "workload moved on; retrying");
        return Action::requeue(Duration::from_millis(500));
    }
    warn!(workload = %workload.name_any(), %error, "reconcile failed");
    Action::requeue(Duration::from_secs(10))
}

/// Workloads to reconcile when a set changes: those of its namespace that name it or a revision of it.
pub fn workloads_referencing<K: Workload>(store: &Store<K>, set: &ConfigMapSet) -> Vec<ObjectRef<K>> {
    let Some(namespace) = set.namespace() else {
        return Vec::new();
    };
    let name = set.name_any();
    store
        .state()
        .iter()
        .filter(|w| w.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|w| {
            views::workload_view(w.as_ref()).is_some_and(|v| {
                v.referenced_names()
                    .iter()
                    .any(|n| *n == name || cmset_core::naming::is_revision_name_of(&name, n))
            })
        })
        .map(|w| ObjectRef::from_obj(w.as_ref()))
        .collect()
}
