//! Properties over the table of workload kinds: for every kind (the built-in ones and a declared one
//! whose template sits deeper), a workload's references are found where its entry says its template
//! is, a rewrite moves them there and nowhere else, and admitting the rewritten object again changes
//! nothing.

use std::collections::BTreeSet;

use cmset_core::admission::{self, Circumstances};
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::waves::Gate;
use cmset_core::workloads::kinds::{Declaration, Kinds};
use cmset_core::workloads::observe::{WorkloadKind, WorkloadView};
use cmset_core::workloads::refs::{Referenced, apply_changes};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapVolumeSource, Container, EnvFromSource, PodSpec, Volume,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// Every kind of the table, and a declared kind whose template lies at `spec.deep.template`.
fn all_kinds() -> Vec<WorkloadKind> {
    let declared = Declaration::parse("e2e.cmset.dev/v1/Deep=spec.deep.template").expect("valid");
    Kinds::with_declared(&[declared])
        .expect("no clash")
        .iter()
        .collect()
}

const NAMES: &[&str] = &["app", "app-5d7c9f", "app-zzzzzz", "db", "unrelated"];

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    let name = prop::sample::select(NAMES).prop_map(str::to_string);
    (
        prop::collection::vec(name.clone(), 0..4),
        prop::collection::vec(name, 0..3),
    )
        .prop_map(|(env_from, volumes)| PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(
                    env_from
                        .into_iter()
                        .map(|n| EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: n,
                                optional: None,
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            volumes: Some(
                volumes
                    .into_iter()
                    .enumerate()
                    .map(|(i, n)| Volume {
                        name: format!("v{i}"),
                        config_map: Some(ConfigMapVolumeSource {
                            name: n,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        })
}

/// Set `app` at revision `app-5d7c9f`, with an older one, `app-zzzzzz`.
fn app_target() -> SetTarget {
    SetTarget {
        kind: Referenced::ConfigMap,
        name: "app".into(),
        current: "app-5d7c9f".into(),
        revisions: BTreeSet::from(["app-5d7c9f".to_string(), "app-zzzzzz".to_string()]),
        rolled_out: None,
        gate: Gate::Open,
        immediate: false,
    }
}

/// Puts `value` at JSON pointer `pointer` of `object`, making the objects on the way.
fn put(object: &mut Value, pointer: &str, value: Value) {
    let mut at = object;
    for token in pointer.trim_start_matches('/').split('/') {
        at = at
            .as_object_mut()
            .expect("objects all the way")
            .entry(token.to_string())
            .or_insert_with(|| json!({}));
    }
    *at = value;
}

/// An opted-in object of `kind` with `spec` as its template's pod spec, and `decoy` as the pod spec at
/// every other kind's template path that does not contain this kind's.
fn object(kind: WorkloadKind, spec: &PodSpec, decoy: &PodSpec, kinds: &[WorkloadKind]) -> Value {
    let mut object = json!({
        "metadata": {"name": "w", "uid": "uid-w", "labels": {"cmset.dev/enabled": "true"}},
    });
    for other in kinds {
        let path = other.template().as_str();
        let own = kind.template().as_str();
        if own.starts_with(path) || path.starts_with(own) {
            continue;
        }
        put(&mut object, path, json!({"spec": decoy}));
    }
    put(
        &mut object,
        kind.template().as_str(),
        json!({"metadata": {"labels": {"app": "w"}}, "spec": spec}),
    );
    object
}

/// A status and the spec fields health rules read, with values of every shape they may have.
fn rollout_fields() -> impl Strategy<Value = (Value, Value)> {
    let int = || prop_oneof![Just(Value::Null), (0i64..4).prop_map(Value::from)];
    let generation = prop_oneof![int(), (0i64..4).prop_map(|n| Value::from(n.to_string()))];
    let condition = (
        prop::sample::select(vec!["Ready", "Available", "Progressing", "Other"]),
        prop::sample::select(vec!["True", "False", "Unknown"]),
        prop::sample::select(vec!["ProgressDeadlineExceeded", "NewReplicaSetAvailable", ""]),
    )
        .prop_map(
            |(t, s, r)| json!({"type": t, "status": s, "reason": r, "message": "m", "lastUpdateTime": "t"}),
        );
    (
        (int(), prop::sample::select(vec!["RollingUpdate", "OnDelete"]), int()),
        (generation, int(), int(), int(), int(), int()),
        prop::collection::vec(condition, 0..3),
        prop::sample::select(vec!["Healthy", "Progressing", "Paused", "Degraded"]),
    )
        .prop_map(|((replicas, strategy, partition), (observed, total, updated, available, ready, desired), conditions, phase)| {
            let spec = json!({"replicas": replicas, "paused": false, "selector": {"matchLabels": {"a": "b"}},
                              "updateStrategy": {"type": strategy, "rollingUpdate": {"partition": partition}}});
            let status = json!({
                "observedGeneration": observed, "replicas": total, "updatedReplicas": updated,
                "availableReplicas": available, "readyReplicas": ready, "desiredNumberScheduled": desired,
                "updatedNumberScheduled": updated, "numberAvailable": available,
                "currentRevision": "r-1", "updateRevision": "r-2", "conditions": conditions,
                "phase": phase, "message": "why", "somethingElse": {"big": [1, 2, 3]},
            });
            (spec, status)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// What the operator keeps of a workload decides exactly as the whole object would: the same view
    /// (references, labels, wave, health) and the same guarded patch.
    #[test]
    fn a_slim_workload_decides_as_the_whole_one(
        spec in pod_spec(),
        decoy in pod_spec(),
        (extra_spec, status) in rollout_fields(),
        generation in 1i64..4,
    ) {
        let kinds = all_kinds();
        let target = app_target();
        for kind in kinds.iter().copied() {
            let mut full = object(kind, &spec, &decoy, &kinds);
            for (key, value) in extra_spec.as_object().unwrap() {
                full["spec"][key] = value.clone();
            }
            full["status"] = status.clone();
            full["metadata"]["generation"] = json!(generation);
            let mut slim = cmset_core::workloads::slim::workload_body(kind, &full);
            slim["metadata"] = full["metadata"].clone();
            let (whole, kept) = (WorkloadView::of(kind, &full), WorkloadView::of(kind, &slim));
            prop_assert_eq!(&whole, &kept, "{}", kind);
            let view = whole.expect("a template");
            let plan = plan_workload(&view, std::slice::from_ref(&target));
            prop_assert_eq!(
                plan.json_patch(kind, "uid-w", &full),
                plan.json_patch(kind, "uid-w", &slim),
                "{}", kind
            );
            prop_assert!(
                serde_json::to_string(&slim).unwrap().len() <= serde_json::to_string(&full).unwrap().len()
            );
        }
    }

    #[test]
    fn every_kind_finds_rewrites_and_admits_at_its_own_template_only(
        spec in pod_spec(),
        decoy in pod_spec(),
    ) {
        let kinds = all_kinds();
        let target = app_target();
        for kind in kinds.iter().copied() {
            let object = object(kind, &spec, &decoy, &kinds);
            let view = WorkloadView::of(kind, &object).expect("a template where the kind keeps it");
            prop_assert_eq!(&view.pod_spec, &spec, "{} finds its own template", kind);

            let plan = plan_workload(&view, std::slice::from_ref(&target));
            let creating = Circumstances { creating: true, ..Circumstances::default() };
            let decided = Ok(vec![target.clone()]);
            let admitted = admission::admitted_workload(kind, &object).expect("opted in");
            let patch = admission::mutate(kind, &object, &admitted, &decided, &creating);
            prop_assert_eq!(patch.is_some(), !plan.is_empty(), "{}", kind);
            let Some(patch) = patch else { continue };

            let mut rewritten = object.clone();
            json_patch::patch(&mut rewritten, &patch).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let expected = apply_changes(&spec, &plan.changes).expect("a fresh plan applies");
            let moved = WorkloadView::of(kind, &rewritten).expect("still there");
            prop_assert_eq!(&moved.pod_spec, &expected, "{}", kind);
            prop_assert_eq!(
                moved.template_labels.get("cmset.dev/managed").map(String::as_str),
                Some("true")
            );
            // Nothing but this kind's template (and the metadata its entry names) changed.
            let mut others = rewritten.clone();
            let mut before = object.clone();
            for doc in [&mut others, &mut before] {
                put(doc, kind.template().as_str(), Value::Null);
                for metadata in kind.spec().managed_metadata {
                    put(doc, &format!("{metadata}/labels"), Value::Null);
                }
            }
            prop_assert_eq!(others, before, "{} touched another kind's fields", kind);
            for metadata in kind.spec().managed_metadata {
                prop_assert_eq!(
                    rewritten.pointer(&format!("{metadata}/labels/cmset.dev~1managed")),
                    Some(&json!("true")),
                    "what {} makes from its template carries the label", kind
                );
            }

            // Admitted again (a GitOps re-apply of the stored object), nothing moves.
            let again = admission::admitted_workload(kind, &rewritten).expect("opted in");
            prop_assert!(admission::mutate(kind, &rewritten, &again, &decided, &creating).is_none());

            // The controller's guarded patch makes the same change to the stored object.
            let guarded = plan.json_patch(kind, "uid-w", &object);
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &guarded).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(patched, rewritten, "{}", kind);
        }
    }
}

#[test]
fn a_job_is_rewritten_when_created_and_never_after() {
    let spec = PodSpec {
        containers: vec![Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "app".into(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }],
        ..Default::default()
    };
    let kind = WorkloadKind::Job;
    let object = object(kind, &spec, &spec, &[kind]);
    let view = admission::admitted_workload(kind, &object).unwrap();
    let decided = Ok(vec![app_target()]);
    let create = Circumstances {
        creating: true,
        ..Circumstances::default()
    };
    assert!(admission::mutate(kind, &object, &view, &decided, &create).is_some());
    let update = Circumstances::default();
    assert!(
        admission::mutate(kind, &object, &view, &decided, &update).is_none(),
        "a Job's template cannot change after creation"
    );
}
