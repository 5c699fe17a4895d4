//! Reading the world a plan lands in from the cluster: GET and LIST only (the live set, its
//! revisions and source, the namespace's workloads, Pods' references, WindowOverrides, the cluster's
//! ChangeWindows, the workloads the rollout budget counts as moving), and the webhook's answer through
//! a server-side dry run of the set (`dryRun=All`), which stores nothing. Everything read becomes an
//! [`Object`], as files give them, so both modes plan from the same thing.

use std::collections::BTreeSet;
use std::time::Duration;

use cmset_api::labels;
use cmset_core::revisions::naming::set_label_value;
use cmset_core::rollout::forecast::BudgetView;
use cmset_core::rollout::moved;
use cmset_core::workloads::observe::{RefNames, WorkloadKind};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::Value;

use super::forecast::{BudgetKnown, Known, WindowsKnown};
use super::objects::{Object, Objects};

const ORIGIN: &str = "the cluster";

fn object(value: Value) -> Object {
    Object {
        value,
        origin: ORIGIN.to_string(),
    }
}

/// `DynamicObject`s as the API server's JSON, with their apiVersion and kind (a list's items lack
/// them).
fn values(items: Vec<DynamicObject>, resource: &ApiResource) -> Vec<Value> {
    items
        .into_iter()
        .filter_map(|item| {
            let mut value = serde_json::to_value(item).ok()?;
            value["apiVersion"] = Value::from(resource.api_version.clone());
            value["kind"] = Value::from(resource.kind.clone());
            Some(value)
        })
        .collect()
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

fn set_resource(kind: &str) -> ApiResource {
    let plural = if kind == "SecretSet" {
        "secretsets"
    } else {
        "configmapsets"
    };
    resource(cmset_api::GROUP, "v1alpha1", kind, plural)
}

/// Lists `resource` in `namespace` (`None`: every namespace, or cluster-scoped) with `params`.
async fn list(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<Vec<Value>, kube::Error> {
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    Ok(values(api.list(params).await?.items, resource))
}

fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The first of `kind`'s versions the server serves, listed in `namespace` (`None`: all) with
/// `params`; none when it serves none.
async fn list_workloads(
    client: &Client,
    kind: WorkloadKind,
    namespace: Option<&str>,
    params: &ListParams,
) -> Result<Vec<Value>, kube::Error> {
    let spec = kind.spec();
    let Some(plural) = spec.plural else {
        return Ok(Vec::new());
    };
    for &version in spec.versions {
        let r = resource(spec.group, version, spec.kind, plural);
        match list(client, &r, namespace, params).await {
            Ok(items) => return Ok(items),
            Err(e) if status_code(&e) == Some(404) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(Vec::new())
}

/// What a plan of sets `sets` (kind and name, of `namespace`) reads from the cluster.
pub struct Gathered {
    pub world: Objects,
    pub known: Known,
}

/// Reads everything the plans of `sets` in `namespace` need. Errors reading what a plan cannot do
/// without (the set, its revisions, the workloads) are errors; what is optional becomes "unknown".
pub async fn gather(
    client: &Client,
    namespace: &str,
    sets: &[&Object],
) -> Result<Gathered, crate::error::Error> {
    let fail = |doing: &str| {
        let doing = doing.to_string();
        move |e| crate::error::Error::kube(doing, e)
    };
    let mut world = Objects::default();
    let mut unknown = Vec::new();
    let mut source_secrets = BTreeSet::new();
    let mut revision_secrets = BTreeSet::new();
    let mut secrets_unreadable = None;
    for set in sets {
        let r = set_resource(set.kind());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &r);
        let live = match api.get_opt(set.name()).await {
            Ok(found) => found,
            Err(e) if status_code(&e) == Some(404) => None,
            Err(e) => return Err(fail(&format!("reading {} {}", set.kind(), set.name()))(e)),
        };
        if let Some(live) = live {
            let value = values(vec![live], &r).remove(0);
            let current = value.pointer("/status/currentRevision").and_then(Value::as_str);
            if let Some(current) = current.filter(|_| set.kind() == "SecretSet") {
                revision_secrets.insert(current.to_string());
            }
            world.insert(object(value), namespace);
        }
        let selector =
            ListParams::default().labels(&format!("{}={}", labels::SET, set_label_value(set.name())));
        if set.kind() == "SecretSet" {
            // Revisions by their metadata only; the source and the live revision are read whole for
            // their keys (see `super::keys`), and no value leaves this process.
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            let listed = match api.list_metadata(&selector).await {
                Ok(listed) => listed.items,
                // `view` reads no Secret: the plan says what it cannot know instead.
                Err(e) if matches!(status_code(&e), Some(401 | 403)) => {
                    secrets_unreadable = Some("you may not read Secrets in this namespace".to_string());
                    Vec::new()
                }
                Err(e) => return Err(crate::cluster::secret_error("listing the revision Secrets", e)),
            };
            for meta in listed {
                let mut value = serde_json::json!({"apiVersion": "v1", "kind": "Secret"});
                value["metadata"] = serde_json::to_value(&meta.metadata).unwrap_or_default();
                world.insert(object(value), namespace);
            }
            if let Some(source) = set.value.pointer("/spec/secretName").and_then(Value::as_str) {
                source_secrets.insert(source.to_string());
            }
        } else {
            let cms = resource("", "v1", "ConfigMap", "configmaps");
            for value in list(client, &cms, Some(namespace), &selector)
                .await
                .map_err(fail("listing the revision ConfigMaps"))?
            {
                world.insert(object(value), namespace);
            }
            let mut wanted: Vec<String> = set
                .value
                .pointer("/spec/configMapName")
                .and_then(Value::as_str)
                .map(str::to_string)
                .into_iter()
                .collect();
            let schemas = set
                .value
                .pointer("/spec/validation/keys")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|keys| keys.values())
                .filter_map(|k| {
                    k.pointer("/schemaFrom/configMapKeyRef/name")
                        .and_then(Value::as_str)
                });
            wanted.extend(schemas.map(str::to_string));
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &cms);
            for name in wanted {
                if let Ok(Some(found)) = api.get_opt(&name).await {
                    world.insert(object(values(vec![found], &cms).remove(0)), namespace);
                }
            }
        }
    }
    for name in source_secrets.iter().chain(&revision_secrets) {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        match api.get_opt(name).await {
            Ok(Some(secret)) => {
                let mut value = serde_json::to_value(&secret).unwrap_or_default();
                value["apiVersion"] = Value::from("v1");
                value["kind"] = Value::from("Secret");
                world.insert(object(value), namespace);
            }
            Ok(None) => {}
            Err(e) if matches!(status_code(&e), Some(401 | 403)) => {
                secrets_unreadable = Some("you may not read Secrets in this namespace".to_string());
            }
            Err(e) => return Err(crate::cluster::secret_error("reading a SecretSet's Secret", e)),
        }
    }
    for kind in WorkloadKind::BUILT_IN {
        for value in list_workloads(client, kind, Some(namespace), &ListParams::default())
            .await
            .map_err(fail(&format!("listing {kind}s")))?
        {
            world.insert(object(value), namespace);
        }
    }
    // The cluster's windows fail closed: one may not list them is "may be held".
    let windows_resource = resource(cmset_api::GROUP, "v1alpha1", "ChangeWindow", "changewindows");
    let windows = match list(client, &windows_resource, None, &ListParams::default()).await {
        Ok(items) => {
            for value in items {
                world.insert(object(value), "");
            }
            WindowsKnown::Listed
        }
        Err(e) if status_code(&e) == Some(404) => WindowsKnown::Listed,
        Err(e) if status_code(&e) == Some(403) => WindowsKnown::Unknown {
            why: "you may not list them (changewindows.cmset.dev)".into(),
            forbidden: true,
        },
        Err(e) => WindowsKnown::Unknown {
            why: format!("listing them failed: {e}"),
            forbidden: true,
        },
    };
    let overrides = resource(cmset_api::GROUP, "v1alpha1", "WindowOverride", "windowoverrides");
    match list(client, &overrides, Some(namespace), &ListParams::default()).await {
        Ok(items) => items.into_iter().for_each(|v| world.insert(object(v), namespace)),
        Err(e) if status_code(&e) == Some(404) => {}
        Err(_) => unknown.push("WindowOverrides of the namespace (break glass): not readable".into()),
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pods = match pods.list(&ListParams::default()).await {
        Ok(list) => {
            let mut names = BTreeSet::new();
            for pod in list.items {
                if let Some(spec) = &pod.spec {
                    let refs = RefNames::of(spec);
                    names.extend(refs.iter().map(|(_, n)| n.to_string()));
                }
            }
            Some(names)
        }
        Err(_) => None,
    };
    let budget = budget(client, namespace).await;
    Ok(Gathered {
        world,
        known: Known {
            windows,
            budget,
            pods,
            webhook: None,
            unknown,
            content_unreadable: secrets_unreadable,
        },
    })
}

/// The rollout budget as the cluster shows it: the workloads it counts as moving carry its mark
/// (label `cmset.dev/moved`) and, beside it, the cap the move was granted under (label
/// `cmset.dev/budget-cap`). `CMSET_MAX_MOVING_WORKLOADS` (the operator's own variable), when set, says
/// the cap instead. With nothing moving the cluster shows no cap: the plan says so, and plans as if
/// there were none. Only a cap marked in the set's own `namespace` is taken for its operator's: one
/// marked elsewhere may be another operator's (a namespaced install), so it is told, not assumed.
async fn budget(client: &Client, namespace: &str) -> BudgetKnown {
    let marked = ListParams::default().labels(labels::MOVED);
    let mut moving = 0;
    let (mut caps, mut caps_here) = (BTreeSet::new(), BTreeSet::new());
    for kind in WorkloadKind::BUILT_IN {
        match list_workloads(client, kind, None, &marked).await {
            Ok(items) => {
                moving += items.len();
                for w in &items {
                    let meta = &w["metadata"];
                    let Some(cap) = moved::marked_cap(meta["labels"][labels::BUDGET_CAP].as_str()) else {
                        continue;
                    };
                    caps.insert(cap);
                    if meta["namespace"] == namespace {
                        caps_here.insert(cap);
                    }
                }
            }
            Err(_) => {
                return BudgetKnown::Unknown(
                    "the cluster-wide rollout budget: you may not list workloads in every namespace".into(),
                );
            }
        }
    }
    let said = std::env::var("CMSET_MAX_MOVING_WORKLOADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok());
    budget_known(said, moving, &caps_here, &caps)
}

/// The budget from what was read: `moving` workloads marked, carrying the caps `here` in the set's
/// namespace and `anywhere` in the cluster, and the cap `said` by the environment.
fn budget_known(
    said: Option<usize>,
    moving: usize,
    here: &BTreeSet<usize>,
    anywhere: &BTreeSet<usize>,
) -> BudgetKnown {
    let known = |cap| {
        BudgetKnown::Known(BudgetView {
            cap,
            moving_elsewhere: moving,
            waiting_ahead: 0,
        })
    };
    if let Some(cap) = said {
        return known(cap);
    }
    let list = |caps: &BTreeSet<usize>| caps.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    match (moving, here.len()) {
        (0, _) => BudgetKnown::Unknown(
            "the cluster-wide rollout budget's cap: no workload moves under a budget now, so the cluster \
             shows none (planned as if there were none; CMSET_MAX_MOVING_WORKLOADS says it)"
                .into(),
        ),
        (_, 1) => known(*here.first().expect("one cap")),
        (_, 0) if !anywhere.is_empty() => BudgetKnown::Unknown(format!(
            "the cluster-wide rollout budget's cap: {moving} workload(s) move under a budget of {} in other \
             namespaces, which may be another operator's (planned as if there were none; \
             CMSET_MAX_MOVING_WORKLOADS says it)",
            list(anywhere)
        )),
        (_, 0) => BudgetKnown::Unknown(format!(
            "the cluster-wide rollout budget's cap: {moving} workload(s) move under it now, marked by an \
             operator that does not record its cap (planned as if there were none; \
             CMSET_MAX_MOVING_WORKLOADS says it)"
        )),
        _ => BudgetKnown::Unknown(format!(
            "the cluster-wide rollout budget's cap: workloads of this namespace move under budgets of \
             different caps ({}) (planned as if there were none; CMSET_MAX_MOVING_WORKLOADS says it)",
            list(here)
        )),
    }
}

/// The webhook's answer to `set` (already given its namespace), by a server-side dry run: an apply
/// over the live object, or a create when there is none. `None` when the user may not (403).
pub async fn dry_run(
    client: &Client,
    namespace: &str,
    set: &Value,
    exists: bool,
) -> Option<Result<(), String>> {
    let r = set_resource(set["kind"].as_str().unwrap_or_default());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &r);
    let name = set
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut body = set.clone();
    if let Some(m) = body["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        m.remove("uid");
        m.remove("managedFields");
    }
    if let Some(o) = body.as_object_mut() {
        o.remove("status");
    }
    let answer = if exists {
        let params = PatchParams::apply("kubectl-cmset-plan").force().dry_run();
        api.patch(name, &params, &Patch::Apply(&body)).await.map(|_| ())
    } else {
        let object: DynamicObject = match serde_json::from_value(body) {
            Ok(object) => object,
            Err(e) => return Some(Err(e.to_string())),
        };
        let params = PostParams {
            dry_run: true,
            field_manager: Some("kubectl-cmset-plan".into()),
        };
        api.create(&params, &object).await.map(|_| ())
    };
    match answer {
        Ok(()) => Some(Ok(())),
        Err(kube::Error::Api(status)) if status.code == 403 || status.code == 401 => None,
        Err(kube::Error::Api(status)) if (400..500).contains(&status.code) => {
            Some(Err(status.message.clone()))
        }
        Err(_) => None,
    }
}

/// Whether the cluster answers at all, within `timeout`.
pub async fn reachable(client: &Client, timeout: Duration) -> Result<(), String> {
    match tokio::time::timeout(timeout, client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {}s", timeout.as_secs())),
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    fn caps(of: &[usize]) -> BTreeSet<usize> {
        of.iter().copied().collect()
    }

    #[test]
    fn the_cap_is_read_from_the_moving_workloads_marks_or_said() {
        let BudgetKnown::Known(view) = budget_known(None, 2, &caps(&[1]), &caps(&[1, 3])) else {
            panic!("one cap marked in the namespace: known")
        };
        assert_eq!(
            (view.cap, view.moving_elsewhere),
            (1, 2),
            "moving counts the cluster"
        );
        let BudgetKnown::Known(view) = budget_known(Some(4), 2, &caps(&[1]), &caps(&[1])) else {
            panic!("said: known")
        };
        assert_eq!(view.cap, 4, "what the environment says wins");
        for (moving, here, anywhere, why) in [
            (0, caps(&[]), caps(&[]), "nothing moves: no cap shows"),
            (
                2,
                caps(&[]),
                caps(&[]),
                "marks of an operator that records no cap",
            ),
            (
                1,
                caps(&[]),
                caps(&[1]),
                "a cap marked elsewhere may be another operator's",
            ),
            (2, caps(&[1, 3]), caps(&[1, 3]), "two caps in the namespace"),
        ] {
            let BudgetKnown::Unknown(message) = budget_known(None, moving, &here, &anywhere) else {
                panic!("{why}: unknown")
            };
            assert!(message.contains("cap"), "{why}: {message}");
        }
    }
}
