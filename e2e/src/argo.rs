//! A simulated Argo Rollouts controller, for the tests of cmset with the real `rollouts.argoproj.io` CRD
//! (`e2e/fixtures/argo-rollouts-crd.yaml`). Argo's own controller cannot run here (no images, no
//! network), so this one does, for the Rollouts of one namespace, the part of its work cmset depends on:
//!
//! - for each new pod template it creates a ReplicaSet `<rollout>-<hash>` whose labels, selector and
//!   template labels are the template's plus `rollouts-pod-template-hash=<hash>`, with a controller
//!   ownerReference to the Rollout and the `rollout.argoproj.io/revision` annotation, scaled to
//!   `spec.replicas`; a template that matches an older ReplicaSet (after an undo, or a rollback) brings
//!   that ReplicaSet back instead, under a new revision number, as Argo does;
//! - once the new ReplicaSet has every replica available it scales the older ones to 0 (a plain rolling
//!   replacement: no canary steps, no traffic routing);
//! - it writes `status`: `observedGeneration` (a string, as Argo writes it), `phase` (`Progressing` until
//!   the new ReplicaSet is available, then `Healthy`; `Degraded` with Argo's message when it is not
//!   available within `spec.progressDeadlineSeconds`, default 600; `Paused` while `spec.paused`),
//!   `currentPodHash`, `stableRS` and the replica counts.
//!
//! The pods are made by kube-controller-manager from the ReplicaSets, and made ready (or, for pods that
//! read a `CMSET_FAKE_NODE_FAIL` config, never ready) by the local cluster's simulated node.
//!
//! [`undo`] does what `kubectl argo rollouts undo` does.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value, json};

use crate::TestNamespace;

/// The label Argo adds to a Rollout's ReplicaSets and their pods: the hash of the pod template.
pub const POD_TEMPLATE_HASH: &str = "rollouts-pod-template-hash";
/// The annotation that numbers a Rollout's ReplicaSets, newest highest (what `undo` goes back along).
pub const REVISION: &str = "rollout.argoproj.io/revision";
/// Argo's default `spec.progressDeadlineSeconds`.
const DEFAULT_PROGRESS_DEADLINE_SECONDS: u64 = 600;

/// `argoproj.io/v1alpha1` `Rollout`.
pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Rollout"),
        "rollouts",
    )
}

/// The Rollouts of `namespace`.
pub fn rollouts(client: Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client, namespace, &resource())
}

/// The simulated controller, running in the background for one namespace until dropped.
pub struct ArgoRollouts {
    task: tokio::task::JoinHandle<()>,
}

impl ArgoRollouts {
    /// Starts it for the Rollouts of `namespace` (the CRD must be installed).
    pub fn start(client: Client, namespace: &str) -> Self {
        let mut controller = Controller {
            rollouts: rollouts(client.clone(), namespace),
            replica_sets: Api::namespaced(client, namespace),
            progress: HashMap::new(),
        };
        let task = tokio::spawn(async move { controller.run().await });
        Self { task }
    }
}

impl Drop for ArgoRollouts {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a Rollout's progress deadline counts from.
struct Progress {
    /// The pod template hash it is rolling out.
    hash: String,
    since: Instant,
    /// Whether that ReplicaSet was available when last seen: the clock starts again if it stops being.
    available: bool,
}

struct Controller {
    rollouts: Api<DynamicObject>,
    replica_sets: Api<ReplicaSet>,
    /// By Rollout uid.
    progress: HashMap<String, Progress>,
}

impl Controller {
    async fn run(&mut self) {
        let config = watcher::Config::default();
        let rollouts = watcher(self.rollouts.clone(), config.clone())
            .default_backoff()
            .map(|_| ());
        let replica_sets = watcher(self.replica_sets.clone(), config)
            .default_backoff()
            .map(|_| ());
        let mut changes = futures::stream::select(rollouts.boxed(), replica_sets.boxed());
        loop {
            if let Err(e) = self.reconcile_all().await {
                eprintln!("simulated Argo Rollouts controller: {e}");
            }
            // Woken by any change to a Rollout or a ReplicaSet, and every second besides, for the
            // progress deadlines.
            let _ = tokio::time::timeout(Duration::from_secs(1), changes.next()).await;
        }
    }

    /// Reconciles every Rollout from fresh lists (the namespace holds a handful).
    async fn reconcile_all(&mut self) -> Result<(), kube::Error> {
        let rollouts = self.rollouts.list(&ListParams::default()).await?.items;
        let replica_sets = self.replica_sets.list(&ListParams::default()).await?.items;
        for rollout in rollouts {
            if rollout.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Err(e) = self.reconcile(&rollout, &replica_sets).await {
                eprintln!(
                    "simulated Argo Rollouts controller: rollout {}: {e}",
                    rollout.name_any()
                );
            }
        }
        Ok(())
    }

    async fn reconcile(&mut self, rollout: &DynamicObject, all: &[ReplicaSet]) -> Result<(), kube::Error> {
        let uid = rollout.uid().unwrap_or_default();
        let spec = &rollout.data["spec"];
        let replicas = spec["replicas"].as_i64().unwrap_or(1) as i32;
        let deadline = Duration::from_secs(
            spec["progressDeadlineSeconds"]
                .as_u64()
                .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS),
        );
        let owned: Vec<&ReplicaSet> = all
            .iter()
            .filter(|rs| rs.metadata.deletion_timestamp.is_none() && controlled_by(rs, &uid))
            .collect();
        let old = &rollout.data["status"];

        if spec["paused"].as_bool() == Some(true) {
            // A paused Rollout does not progress (cmset holds a new one so until its sets have revisions).
            let mut status = counts(&owned, None, spec);
            status.insert("observedGeneration".into(), generation(rollout).into());
            status.insert("phase".into(), "Paused".into());
            status.insert("message".into(), "manually paused".into());
            return self.write_status(rollout, status).await;
        }

        let mut template = spec["template"].clone();
        without_hash_label(&mut template);
        let hash = pod_template_hash(&template);
        // Argo finds the new ReplicaSet by its hash label, else by a template equal to the Rollout's once
        // defaulted (an undo copies a ReplicaSet's defaulted template back): here, one that holds every
        // field the Rollout's template sets, with the same values.
        let found = owned
            .iter()
            .find(|rs| rs.labels().get(POD_TEMPLATE_HASH) == Some(&hash))
            .or_else(|| {
                owned
                    .iter()
                    .find(|rs| rs_template(rs).is_some_and(|live| covers(&live, &template)))
            })
            .copied();
        let newest = owned.iter().filter_map(|rs| revision(rs)).max().unwrap_or(0);
        let new_rs = match found {
            Some(rs) => self.adopt(rs, replicas, newest).await?,
            None => {
                let rs = new_replica_set(rollout, &template, &hash, replicas, newest + 1);
                self.replica_sets.create(&PostParams::default(), &rs).await?
            }
        };
        let current_hash = new_rs.labels().get(POD_TEMPLATE_HASH).cloned().unwrap_or(hash);

        let rs_status = new_rs.status.clone().unwrap_or_default();
        let available = new_rs.spec.as_ref().and_then(|s| s.replicas) == Some(replicas)
            && rs_status.observed_generation >= new_rs.metadata.generation
            && rs_status.available_replicas.unwrap_or(0) >= replicas;
        let progress = self.progress.entry(uid).or_insert_with(|| Progress {
            hash: current_hash.clone(),
            since: Instant::now(),
            available,
        });
        if progress.hash != current_hash || (progress.available && !available) {
            progress.hash = current_hash.clone();
            progress.since = Instant::now();
        }
        progress.available = available;
        let timed_out = !available && progress.since.elapsed() >= deadline;

        if available {
            for rs in &owned {
                let scaled = rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                if rs.name_any() != new_rs.name_any() && scaled != 0 {
                    let patch = json!({"spec": {"replicas": 0}});
                    self.replica_sets
                        .patch(&rs.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                        .await?;
                }
            }
        }

        let (phase, message) = if available {
            ("Healthy", Value::Null)
        } else if timed_out {
            let message = format!(
                "ProgressDeadlineExceeded: ReplicaSet \"{}\" has timed out progress.",
                new_rs.name_any()
            );
            ("Degraded", message.into())
        } else {
            (
                "Progressing",
                "more replicas need to be updated or become available".into(),
            )
        };
        let mut status = counts(&owned, Some(&new_rs), spec);
        status.insert("observedGeneration".into(), generation(rollout).into());
        status.insert("phase".into(), phase.into());
        status.insert("message".into(), message);
        status.insert("currentPodHash".into(), current_hash.clone().into());
        let stable = if available {
            current_hash.into()
        } else {
            old["stableRS"].clone()
        };
        status.insert("stableRS".into(), stable);
        self.write_status(rollout, status).await
    }

    /// Makes an existing ReplicaSet the new one: scaled to `replicas`, numbered after `newest` unless it
    /// is the newest already.
    async fn adopt(&self, rs: &ReplicaSet, replicas: i32, newest: i64) -> Result<ReplicaSet, kube::Error> {
        let mut patch = Map::new();
        if rs.spec.as_ref().and_then(|s| s.replicas) != Some(replicas) {
            patch.insert("spec".into(), json!({"replicas": replicas}));
        }
        if revision(rs).unwrap_or(0) < newest {
            let annotations = json!({REVISION: (newest + 1).to_string()});
            patch.insert("metadata".into(), json!({"annotations": annotations}));
        }
        if patch.is_empty() {
            return Ok(rs.clone());
        }
        self.replica_sets
            .patch(
                &rs.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&Value::Object(patch)),
            )
            .await
    }

    /// Writes the fields of `status` that changed (a merge patch of the status subresource).
    async fn write_status(
        &self,
        rollout: &DynamicObject,
        status: Map<String, Value>,
    ) -> Result<(), kube::Error> {
        let old = &rollout.data["status"];
        let changed = status
            .iter()
            .any(|(k, v)| old.get(k).unwrap_or(&Value::Null) != v);
        if changed {
            let patch = json!({"status": status});
            self.rollouts
                .patch_status(
                    &rollout.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
        }
        Ok(())
    }
}

/// `metadata.generation` as the string Argo writes into `status.observedGeneration`.
fn generation(rollout: &DynamicObject) -> String {
    rollout.metadata.generation.unwrap_or(0).to_string()
}

/// The replica counts of the status, from the ReplicaSets as last seen, and the selector (for the scale
/// subresource) as Argo writes it.
fn counts(owned: &[&ReplicaSet], new_rs: Option<&ReplicaSet>, spec: &Value) -> Map<String, Value> {
    let sum = |field: fn(&k8s_openapi::api::apps::v1::ReplicaSetStatus) -> Option<i32>| -> i32 {
        owned
            .iter()
            .filter_map(|rs| rs.status.as_ref().and_then(field))
            .sum()
    };
    let updated = new_rs
        .and_then(|rs| rs.status.as_ref())
        .map(|s| s.replicas)
        .unwrap_or(0);
    let mut status = Map::new();
    status.insert("replicas".into(), sum(|s| Some(s.replicas)).into());
    status.insert("updatedReplicas".into(), updated.into());
    status.insert("readyReplicas".into(), sum(|s| s.ready_replicas).into());
    status.insert("availableReplicas".into(), sum(|s| s.available_replicas).into());
    if let Some(labels) = spec["selector"]["matchLabels"].as_object() {
        let selector: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        status.insert("selector".into(), selector.join(",").into());
    }
    status
}

fn controlled_by(rs: &ReplicaSet, uid: &str) -> bool {
    rs.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// A ReplicaSet's `rollout.argoproj.io/revision`.
pub fn revision(rs: &ReplicaSet) -> Option<i64> {
    rs.annotations().get(REVISION)?.parse().ok()
}

/// A ReplicaSet's pod template as JSON, without the hash label.
fn rs_template(rs: &ReplicaSet) -> Option<Value> {
    let mut template = serde_json::to_value(rs.spec.as_ref()?.template.as_ref()?).ok()?;
    without_hash_label(&mut template);
    Some(template)
}

fn without_hash_label(template: &mut Value) {
    if let Some(labels) = template
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
}

/// Whether `live` holds every field `desired` sets, with the same value (lists item by item): `live`
/// may have more, as a template the API server defaulted does.
fn covers(live: &Value, desired: &Value) -> bool {
    match (live, desired) {
        (Value::Object(live), Value::Object(desired)) => desired.iter().all(|(k, v)| match live.get(k) {
            Some(l) => covers(l, v),
            None => v.is_null(),
        }),
        (Value::Array(live), Value::Array(desired)) => {
            live.len() == desired.len() && live.iter().zip(desired).all(|(l, d)| covers(l, d))
        }
        _ => live == desired,
    }
}

/// The new ReplicaSet of a pod template, as Argo makes it.
fn new_replica_set(
    rollout: &DynamicObject,
    template: &Value,
    hash: &str,
    replicas: i32,
    revision: i64,
) -> ReplicaSet {
    let name = rollout.name_any();
    let spec = &rollout.data["spec"];
    let mut template = template.clone();
    template["metadata"]["labels"][POD_TEMPLATE_HASH] = hash.into();
    let labels = template["metadata"]["labels"].clone();
    let mut selector = spec["selector"].clone();
    selector["matchLabels"][POD_TEMPLATE_HASH] = hash.into();
    let rs = json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": format!("{name}-{hash}"),
            "labels": labels,
            "annotations": {REVISION: revision.to_string()},
            "ownerReferences": [{
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Rollout",
                "name": name,
                "uid": rollout.uid().unwrap_or_default(),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "replicas": replicas,
            "minReadySeconds": spec["minReadySeconds"].as_i64().unwrap_or(0),
            "selector": selector,
            "template": template,
        },
    });
    serde_json::from_value(rs).expect("a ReplicaSet made of a Rollout's pod template")
}

/// The pod template hash: FNV-1a (32 bits) of the template's canonical JSON (keys sorted), its decimal
/// digits encoded with Kubernetes' `SafeEncodeString` alphabet, as Argo and the Deployment controller
/// encode theirs. (Argo hashes the Go struct; only stability matters here.)
pub fn pod_template_hash(template: &Value) -> String {
    let mut text = String::new();
    canonical(template, &mut text);
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The ReplicaSets the Rollout `name` controls, oldest revision first.
pub async fn replica_sets_of(ns: &TestNamespace, name: &str) -> Vec<ReplicaSet> {
    let rollout = rollouts(ns.client.clone(), &ns.name)
        .get(name)
        .await
        .expect("get the Rollout");
    let uid = rollout.uid().unwrap_or_default();
    let mut sets = ns.replica_sets().await;
    sets.retain(|rs| rs.metadata.deletion_timestamp.is_none() && controlled_by(rs, &uid));
    sets.sort_by_key(revision);
    sets
}

/// `kubectl argo rollouts undo NAME`: the pod template of the Rollout's second newest ReplicaSet (by
/// `rollout.argoproj.io/revision`), without the hash label, replaces `spec.template` in one JSON patch.
/// Returns that ReplicaSet's name.
pub async fn undo(ns: &TestNamespace, name: &str) -> String {
    let sets = replica_sets_of(ns, name).await;
    let previous = sets
        .iter()
        .rev()
        .nth(1)
        .unwrap_or_else(|| panic!("no revision of rollout {name} to go back to"));
    let template = rs_template(previous).expect("a ReplicaSet has a pod template");
    let patch = json!([{"op": "replace", "path": "/spec/template", "value": template}]);
    ns.kubectl_async(
        &[
            "patch",
            "rollouts.argoproj.io",
            name,
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ],
        None,
    )
    .await;
    previous.name_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_ignores_key_order_and_uses_the_safe_alphabet() {
        let a = json!({"metadata": {"labels": {"app": "web", "tier": "x"}}, "spec": {"containers": []}});
        let b = json!({"spec": {"containers": []}, "metadata": {"labels": {"tier": "x", "app": "web"}}});
        assert_eq!(pod_template_hash(&a), pod_template_hash(&b));
        assert_ne!(pod_template_hash(&a), pod_template_hash(&json!({})));
        assert!(
            pod_template_hash(&a)
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }

    #[test]
    fn a_defaulted_template_covers_the_one_it_came_from() {
        let desired = json!({"spec": {"containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": "a-1"}}]}]}});
        let live = json!({"metadata": {"creationTimestamp": null}, "spec": {"dnsPolicy": "ClusterFirst",
            "containers": [{"name": "app", "imagePullPolicy": "IfNotPresent", "envFrom": [{"configMapRef": {"name": "a-1"}}]}]}});
        assert!(covers(&live, &desired));
        let other = json!({"spec": {"containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": "a-2"}}]}]}});
        assert!(!covers(&live, &other));
    }
}
