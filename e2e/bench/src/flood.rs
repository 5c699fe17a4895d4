//! The flood stage: one namespace keeps applying costly sets while another's changes are timed. The
//! flood's sets are large (a JSON array of thousands of strings) with a schema built to hurt a
//! backtracking engine (a nested quantifier), and, one in four, a pattern that needs backtracking (a
//! backreference: refused at once). A bystander in the main namespace, whose sets are validated too,
//! is changed one set at a time, first with no flood and then during it: how long its admission (the
//! set PATCH, the webhook's judging included) and its change (PATCH to its Deployment naming the
//! revision) take, quiet and flooded. The goal: the bystander's admission p99 under 1 s, and its
//! changes as fast as without the flood.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cmset_api::ConfigMapSet;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cluster::{self, NAMESPACE_LABEL, Result, Tracker, deployment_name, revision_name, set_name};
use crate::install::Install;
use crate::report::{Latency, latency};
use crate::stages::{Ctx, ms};

/// Writers applying the flood's sets at once, each as fast as the API server answers.
const WRITERS: usize = 3;
/// Strings in a costly set's JSON array (about 250 KiB).
const STRINGS: usize = 12_000;
/// How long the flood runs before the bystander's first change under it.
const RAMP: Duration = Duration::from_secs(3);

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Flood {
    /// Bystander changes measured, quiet and flooded each.
    pub changes: usize,
    /// The bystander's set PATCH (its admission included), without and with the flood.
    pub quiet_admission: Option<Latency>,
    pub flooded_admission: Option<Latency>,
    /// From the PATCH to its Deployment naming the revision, without and with the flood.
    pub quiet_change: Option<Latency>,
    pub flooded_change: Option<Latency>,
    /// Flooded ÷ quiet, of the change's p50.
    pub change_p50_ratio: Option<f64>,
    /// The bare API's share of that: a ConfigMap created by the bench itself (no webhook, no
    /// operator), quiet and flooded, and flooded ÷ quiet of its p50.
    pub quiet_bare: Option<Latency>,
    pub flooded_bare: Option<Latency>,
    pub bare_p50_ratio: Option<f64>,
    /// The flood's applies meanwhile, by how the webhook answered: judged in full (each costly set
    /// fails at its last string), refused for a backtracking pattern, refused over the judging
    /// budget, or failed otherwise.
    pub flood_judged: usize,
    pub flood_backtracking: usize,
    pub flood_over_budget: usize,
    pub flood_other: usize,
    /// Bystander changes that did not reach their Deployment in time.
    pub late: usize,
}

/// The validating registration of sets to `/validate-set` for the main and the flood namespace, as
/// the default install registers it for every namespace.
fn registration(
    name: &str,
    namespaces: &[&str],
    port: u16,
    ca_bundle: &Value,
) -> Result<ValidatingWebhookConfiguration> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "cmset-bench"}},
        "webhooks": [{
            "name": "sets.cmset.dev",
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/validate-set"), "caBundle": ca_bundle},
            "rules": [{
                "apiGroups": ["cmset.dev"],
                "apiVersions": ["v1alpha1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["configmapsets", "secretsets"],
                "scope": "Namespaced",
            }],
            "namespaceSelector": {"matchExpressions": [
                {"key": NAMESPACE_LABEL, "operator": "In", "values": namespaces},
            ]},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }],
    }))?)
}

/// A costly set of the flood: `STRINGS` strings, one failing at its very end, against a nested
/// quantifier; or (`backtracking`) a pattern only a backtracking engine runs.
fn flood_set(name: &str, round: usize, backtracking: bool) -> Value {
    let (json, pattern) = if backtracking {
        ("\"aa\"".to_string(), "^(a+)\\1$")
    } else {
        let mut items: Vec<String> = (0..STRINGS).map(|i| format!("\"abcdefghij{i}\"")).collect();
        items.push(format!("\"{}!{round}\"", "a".repeat(40)));
        (format!("[{}]", items.join(",")), "^([a-z]+[0-9]*)+$")
    };
    json!({
        "apiVersion": "cmset.dev/v1alpha1",
        "kind": "ConfigMapSet",
        "metadata": {"name": name},
        "spec": {
            "validation": {"keys": {"big.json": {"schema": {"items": {"type": "string", "pattern": pattern}}}}},
            "template": {"data": {"big.json": json}},
        },
    })
}

/// Validation for the bystander's sets, so that each admission is judged: `v` (`0`, then `c<n>`), read
/// as YAML, is a number or a short word.
fn bystander_validation() -> Value {
    json!({"spec": {"validation": {"keys": {"v": {"format": "yaml",
        "schema": {"type": ["string", "integer"], "pattern": "^[a-z0-9]{1,20}$"}}}}}})
}

/// Changes `changes` sets of `ns` one after the other (set i mod n): each PATCH's duration, and the
/// latencies of the changes that arrived, and how many did not.
async fn bystander_changes(
    ctx: &Ctx,
    ns: &str,
    n: usize,
    first: usize,
    changes: usize,
    tracker: &Tracker,
) -> Result<(Vec<f64>, Vec<f64>, usize)> {
    let sets = ctx.sets(ns);
    let (mut admitted, mut late) = (Vec::new(), 0);
    tracker.take_arrivals();
    for k in 0..changes {
        let i = (first + k) % n;
        let (set, value) = (set_name(i), ctx.next_value());
        let started = Instant::now();
        cluster::patch_set(&sets, &set, &value).await?;
        admitted.push(ms(started.elapsed()));
        tracker.expect(&deployment_name(i), &revision_name(&set, &value), started);
        late += tracker.drain(Instant::now() + ctx.timeout_base).await.len();
    }
    let arrived = tracker.take_arrivals().iter().map(|a| ms(a.latency)).collect();
    Ok((admitted, arrived, late))
}

const JUDGED: usize = 0;
const BACKTRACKING: usize = 1;
const OVER_BUDGET: usize = 2;
const OTHER: usize = 3;

/// How the webhook answered a flood apply (`error`: the apply's error, if it failed).
fn answer_kind(error: Option<&str>) -> usize {
    match error {
        None => JUDGED,
        Some(e) if e.contains("needs a backtracking engine") => BACKTRACKING,
        Some(e) if e.contains("over the time budget") || e.contains("could not be judged within") => {
            OVER_BUDGET
        }
        Some(e) if e.contains("content fails spec.validation") => JUDGED,
        Some(_) => OTHER,
    }
}

/// `count` ConfigMaps created one after the other in `ns` by the bench itself: what the API server
/// alone takes, quiet or flooded.
pub(crate) async fn bare_changes(ctx: &Ctx, ns: &str, tag: &str, count: usize) -> Result<Vec<f64>> {
    use k8s_openapi::api::core::v1::ConfigMap;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    let mut took = Vec::new();
    for i in 0..count {
        let cm: ConfigMap = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("flood-bare-{tag}-{i}")},
            "data": {"v": ctx.next_value()},
        }))?;
        let started = Instant::now();
        api.create(&Default::default(), &cm).await?;
        took.push(ms(started.elapsed()));
    }
    Ok(took)
}

/// Flooded ÷ quiet of two latencies' p50.
fn p50_ratio(quiet: &Option<Latency>, flooded: &Option<Latency>) -> Option<f64> {
    match (quiet, flooded) {
        (Some(q), Some(f)) if q.p50_ms > 0.0 => Some(f.p50_ms / q.p50_ms),
        _ => None,
    }
}

/// The flood stage (see the module documentation), against the install's webhook: its sets are sent
/// to `/validate-set` for the stage (a registration of the install's name, with the CA the operator
/// keeps in its mutating one).
pub async fn flood(
    ctx: &mut Ctx,
    ns: &str,
    n: usize,
    changes: usize,
    install: &Install,
    tracker: &Tracker,
) -> Result<Flood> {
    let Some(webhook) = &install.webhook else {
        return Err("the flood stage needs the webhook".into());
    };
    let (name, port) = (webhook.registration.clone(), webhook.service.port);
    let mutating = Api::<MutatingWebhookConfiguration>::all(ctx.client.clone())
        .get(&name)
        .await?;
    let ca_bundle = mutating
        .webhooks
        .and_then(|w| w.into_iter().next())
        .and_then(|w| w.client_config.ca_bundle)
        .map(serde_json::to_value)
        .transpose()?
        .ok_or("the install's registration has no caBundle yet")?;
    let flood_ns = format!("{ns}-flood");
    ctx.create_namespace(&flood_ns).await?;
    let registrations = Api::<ValidatingWebhookConfiguration>::all(ctx.client.clone());
    cluster::create(
        &registrations,
        &registration(&name, &[ns, &flood_ns], port, &ca_bundle)?,
    )
    .await?;
    // The API server reads registrations from its own watch: give it a moment to see this one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sets = ctx.sets(ns);
    for k in 0..changes.min(n) {
        let patch = Patch::Merge(bystander_validation());
        sets.patch(&set_name(k), &PatchParams::default(), &patch).await?;
    }

    let (quiet_admitted, quiet_arrived, quiet_late) =
        bystander_changes(ctx, ns, n, 0, changes, tracker).await?;
    let quiet_bare = bare_changes(ctx, &flood_ns, "quiet", changes).await?;

    let flooding = Arc::new(AtomicBool::new(true));
    let answers: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        let api: Api<ConfigMapSet> = Api::namespaced(ctx.client.clone(), &flood_ns);
        let (flooding, answers) = (flooding.clone(), answers.clone());
        writers.spawn(async move {
            let params = PatchParams::apply("cmset-bench-flood").force();
            let mut round = 0;
            while flooding.load(Ordering::SeqCst) {
                let name = format!("flood-{writer}");
                let set = flood_set(&name, round, round % 4 == 3);
                let answer = api.patch(&name, &params, &Patch::Apply(&set)).await;
                answers[answer_kind(answer.err().map(|e| e.to_string()).as_deref())]
                    .fetch_add(1, Ordering::Relaxed);
                round += 1;
            }
        });
    }
    tokio::time::sleep(RAMP).await;
    let flooded = bystander_changes(ctx, ns, n, 0, changes, tracker).await;
    let flooded_bare = bare_changes(ctx, &flood_ns, "flooded", changes).await;
    flooding.store(false, Ordering::SeqCst);
    while writers.join_next().await.is_some() {}
    let _ = registrations.delete(&name, &DeleteParams::default()).await;
    ctx.delete_namespace(&flood_ns).await;
    let (flooded_admitted, flooded_arrived, flooded_late) = flooded?;
    let flooded_bare = flooded_bare?;

    let floor = ctx.floor.clone();
    let quiet_change = latency(&quiet_arrived, floor.as_ref());
    let flooded_change = latency(&flooded_arrived, floor.as_ref());
    let change_p50_ratio = p50_ratio(&quiet_change, &flooded_change);
    let quiet_bare = latency(&quiet_bare, floor.as_ref());
    let flooded_bare = latency(&flooded_bare, floor.as_ref());
    let bare_p50_ratio = p50_ratio(&quiet_bare, &flooded_bare);
    Ok(Flood {
        changes,
        quiet_admission: latency(&quiet_admitted, floor.as_ref()),
        flooded_admission: latency(&flooded_admitted, floor.as_ref()),
        quiet_change,
        flooded_change,
        change_p50_ratio,
        quiet_bare,
        flooded_bare,
        bare_p50_ratio,
        flood_judged: answers[JUDGED].load(Ordering::Relaxed),
        flood_backtracking: answers[BACKTRACKING].load(Ordering::Relaxed),
        flood_over_budget: answers[OVER_BUDGET].load(Ordering::Relaxed),
        flood_other: answers[OTHER].load(Ordering::Relaxed),
        late: quiet_late + flooded_late,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_costly_set_fails_at_its_last_string_and_a_backtracking_one_names_a_backreference() {
        let costly = flood_set("flood-0", 7, false);
        let text = costly["spec"]["template"]["data"]["big.json"].as_str().unwrap();
        let items: Vec<String> = serde_json::from_str(text).unwrap();
        assert_eq!(items.len(), STRINGS + 1);
        assert!(
            items[..STRINGS]
                .iter()
                .all(|s| s.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
        assert_eq!(items[STRINGS], format!("{}!7", "a".repeat(40)));
        let backtracking = flood_set("flood-0", 3, true);
        assert_eq!(
            backtracking["spec"]["validation"]["keys"]["big.json"]["schema"]["items"]["pattern"],
            "^(a+)\\1$"
        );
    }

    #[test]
    fn the_webhooks_answers_are_told_apart_by_their_messages() {
        assert_eq!(answer_kind(None), JUDGED);
        assert_eq!(
            answer_kind(Some(
                r#"ConfigMapSet "flood-0": content fails spec.validation: key "big.json": at /12000: ..."#
            )),
            JUDGED
        );
        assert_eq!(
            answer_kind(Some(
                "pattern at /items/pattern uses a backreference (\\1 to \\9), which needs a backtracking engine"
            )),
            BACKTRACKING
        );
        assert_eq!(
            answer_kind(Some(
                r#"content fails spec.validation: key "big.json": was not judged: over the time budget"#
            )),
            OVER_BUDGET
        );
        assert_eq!(
            answer_kind(Some(
                "spec.validation could not be judged within 2s (waiting for a turn)"
            )),
            OVER_BUDGET
        );
        assert_eq!(answer_kind(Some("connection reset")), OTHER);
    }
}
