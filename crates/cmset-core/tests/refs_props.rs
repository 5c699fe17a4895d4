//! Properties of finding and rewriting ConfigMap references, over random pod specs.
//!
//! Names come from a small pool so that the same name appears in many places and in every form, next to
//! Secrets with the same names. The target used throughout maps the "sets" `app` and `db` to revisions,
//! the revisions to themselves (fixed points) and ignores everything else.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{
    ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, RevisionStatus, WorkloadState, WorkloadStatus,
};
use cmset_core::admission;
use cmset_core::rollout::decide::{self, Identity, Observed, Undecided};
use cmset_core::rollout::pinning::{SetTarget, WorkloadPlan, plan_workload};
use cmset_core::rollout::waves::Gate;
use cmset_core::set::SetRef;
use cmset_core::workloads::observe::{WorkloadKind, WorkloadView};
use cmset_core::workloads::refs::{
    NameChange, Referenced, TEMPLATE_POD_SPEC_POINTER, apply_changes, escape_pointer_token, find_refs,
    find_refs_to, json_patch, plan_rewrite, plan_rewrite_to,
};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, ConfigMapProjection, ConfigMapVolumeSource, Container,
    DownwardAPIProjection, EmptyDirVolumeSource, EnvFromSource, EnvVar, EnvVarSource, EphemeralContainer,
    PodSpec, ProjectedVolumeSource, SecretEnvSource, SecretKeySelector, SecretProjection, SecretVolumeSource,
    ServiceAccountTokenProjection, Volume, VolumeProjection,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------------------

/// Sets, their revisions, an unrelated ConfigMap, and the empty name (which names nothing).
const NAMES: &[&str] = &["app", "db", "app-5d7c9f", "db-68b4f2", "unrelated", ""];

fn target(name: &str) -> Option<String> {
    match name {
        "app" | "app-5d7c9f" => Some("app-5d7c9f".into()),
        "db" | "db-68b4f2" => Some("db-68b4f2".into()),
        _ => None,
    }
}

/// Where the generators draw ConfigMap (and Secret) names from.
type Names = BoxedStrategy<String>;

/// The pool above, and now and then any name at all (unicode, `/`, `~`, 253 characters), which the
/// target ignores and everything must leave alone.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(NAMES).prop_map(str::to_owned),
        1 => "\\PC{0,20}",
        1 => "[-~/.a-z0-9]{253}",
    ]
}

fn small_name() -> impl Strategy<Value = String> {
    prop::sample::select(&["a", "b", "c"][..]).prop_map(str::to_owned)
}

fn env_var(name: &Names) -> impl Strategy<Value = EnvVar> + use<> {
    let source = prop_oneof![
        Just(None),
        (name.clone(), option::of(any::<bool>())).prop_map(|(name, optional)| Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name,
                key: "k".into(),
                optional
            }),
            ..Default::default()
        })),
        name.clone().prop_map(|name| Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name,
                key: "k".into(),
                optional: None
            }),
            ..Default::default()
        })),
    ];
    (small_name(), source).prop_map(|(name, value_from)| EnvVar {
        value: value_from.is_none().then(|| "literal".into()),
        name,
        value_from,
    })
}

fn env_from(name: &Names) -> impl Strategy<Value = EnvFromSource> + use<> {
    let cm = (name.clone(), option::of(any::<bool>()))
        .prop_map(|(name, optional)| ConfigMapEnvSource { name, optional });
    let secret = name
        .clone()
        .prop_map(|name| SecretEnvSource { name, optional: None });
    (
        option::of(cm),
        option::of(secret),
        option::of(Just("P_".to_owned())),
    )
        .prop_map(|(config_map_ref, secret_ref, prefix)| EnvFromSource {
            config_map_ref,
            secret_ref,
            prefix,
        })
}

fn projection(name: &Names) -> impl Strategy<Value = VolumeProjection> + use<> {
    prop_oneof![
        (name.clone(), option::of(any::<bool>())).prop_map(|(name, optional)| VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name,
                optional,
                items: None
            }),
            ..Default::default()
        }),
        name.clone().prop_map(|name| VolumeProjection {
            secret: Some(SecretProjection {
                name,
                ..Default::default()
            }),
            ..Default::default()
        }),
        Just(VolumeProjection {
            downward_api: Some(DownwardAPIProjection::default()),
            ..Default::default()
        }),
        Just(VolumeProjection {
            service_account_token: Some(ServiceAccountTokenProjection {
                path: "token".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    ]
}

fn volume(name: &Names) -> impl Strategy<Value = Volume> + use<> {
    let cm = (name.clone(), option::of(any::<bool>())).prop_map(|(name, optional)| Volume {
        config_map: Some(ConfigMapVolumeSource {
            name,
            optional,
            ..Default::default()
        }),
        ..Default::default()
    });
    let secret = name.clone().prop_map(|name| Volume {
        secret: Some(SecretVolumeSource {
            secret_name: Some(name),
            ..Default::default()
        }),
        ..Default::default()
    });
    let projected = option::of(vec(projection(name), 0..5)).prop_map(|sources| Volume {
        projected: Some(ProjectedVolumeSource {
            sources,
            default_mode: None,
        }),
        ..Default::default()
    });
    let empty = Just(Volume {
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    });
    (small_name(), prop_oneof![cm, secret, projected, empty])
        .prop_map(|(name, volume)| Volume { name, ..volume })
}

type EnvParts = (String, Option<Vec<EnvVar>>, Option<Vec<EnvFromSource>>);

fn env_parts(name: &Names) -> impl Strategy<Value = EnvParts> + use<> {
    (
        small_name(),
        option::of(vec(env_var(name), 0..5)),
        option::of(vec(env_from(name), 0..4)),
    )
}

fn container(name: &Names) -> impl Strategy<Value = Container> + use<> {
    env_parts(name).prop_map(|(name, env, env_from)| Container {
        name,
        env,
        env_from,
        ..Default::default()
    })
}

fn ephemeral_container(name: &Names) -> impl Strategy<Value = EphemeralContainer> + use<> {
    env_parts(name).prop_map(|(name, env, env_from)| EphemeralContainer {
        name,
        env,
        env_from,
        ..Default::default()
    })
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    pod_spec_naming(&name().boxed())
}

/// A pod spec naming ConfigMaps (and Secrets) drawn from `name`, in every form and place.
fn pod_spec_naming(name: &Names) -> impl Strategy<Value = PodSpec> + use<> {
    (
        vec(container(name), 0..4),
        option::of(vec(container(name), 0..3)),
        option::of(vec(ephemeral_container(name), 0..3)),
        option::of(vec(volume(name), 0..5)),
    )
        .prop_map(
            |(containers, init_containers, ephemeral_containers, volumes)| PodSpec {
                containers,
                init_containers,
                ephemeral_containers,
                volumes,
                ..Default::default()
            },
        )
}

// ---------------------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------------------

fn to_value(spec: &PodSpec) -> Value {
    serde_json::to_value(spec).expect("a pod spec serializes")
}

/// Pointers to every non-empty `name` under a `configMap`, `configMapRef` or `configMapKeyRef` object,
/// found by walking the JSON generically: an oracle independent of `find_refs`' typed walk.
fn config_map_name_pointers(value: &Value, pointer: &str, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_pointer = format!("{pointer}/{}", escape_pointer_token(key));
                if matches!(key.as_str(), "configMap" | "configMapRef" | "configMapKeyRef")
                    && matches!(child.get("name"), Some(Value::String(n)) if !n.is_empty())
                {
                    found.insert(format!("{child_pointer}/name"));
                }
                config_map_name_pointers(child, &child_pointer, found);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                config_map_name_pointers(child, &format!("{pointer}/{i}"), found);
            }
        }
        _ => {}
    }
}

/// Applies `patch` as the API server does (RFC 6902, atomic: on any failure the document is left as
/// it was).
fn apply_patch(doc: &mut Value, patch: &Patch) -> Result<(), String> {
    json_patch::patch(doc, patch).map_err(|e| e.to_string())
}

const UID: &str = "0b5c7a7e-2a41-4d7e-9f7e-1f2d3c4b5a69";

fn deployment(spec: &PodSpec) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web", "namespace": "default", "uid": UID },
        "spec": {
            "replicas": 2,
            "template": { "metadata": { "labels": { "app": "web" } }, "spec": to_value(spec) },
        },
    })
}

fn managed_label_op() -> PatchOperation {
    let labels = ["spec", "template", "metadata", "labels"];
    PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(labels).with_trailing_token(cmset_api::labels::MANAGED_TEMPLATE),
        value: json!("true"),
    })
}

fn value_at<'a>(value: &'a Value, pointer: &str) -> &'a Value {
    value
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} resolves"))
}

// ---------------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// ConfigMaps and Secrets are separate name spaces: rewriting the references of one kind leaves every
    /// reference of the other as it was, and is idempotent.
    #[test]
    fn rewriting_one_kind_never_touches_the_other(spec in pod_spec()) {
        for (kind, other) in [
            (Referenced::ConfigMap, Referenced::Secret),
            (Referenced::Secret, Referenced::ConfigMap),
        ] {
            let changes = plan_rewrite_to(&spec, kind, target);
            let rewritten = apply_changes(&spec, &changes).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(find_refs_to(&rewritten, other), find_refs_to(&spec, other));
            prop_assert!(plan_rewrite_to(&rewritten, kind, target).is_empty());
        }
    }

    /// (1) Every reported pointer resolves to the reported name; pointers are distinct; and no reference
    /// is missed (the generic walk finds exactly the same pointers).
    #[test]
    fn pointers_resolve_to_names_and_none_is_missed(spec in pod_spec()) {
        let refs = find_refs(&spec);
        let value = to_value(&spec);
        for r in &refs {
            prop_assert!(!r.name.is_empty());
            prop_assert_eq!(value.pointer(r.pointer.as_str()), Some(&Value::String(r.name.clone())), "{}", r.pointer);
        }
        let pointers: BTreeSet<String> = refs.iter().map(|r| r.pointer.to_string()).collect();
        prop_assert_eq!(pointers.len(), refs.len(), "pointers are distinct");
        let mut expected = BTreeSet::new();
        config_map_name_pointers(&value, "", &mut expected);
        prop_assert_eq!(pointers, expected);
    }

    /// (2) With a target whose results are fixed points, rewriting is idempotent.
    #[test]
    fn rewriting_is_idempotent(spec in pod_spec()) {
        let once = apply_changes(&spec, &plan_rewrite(&spec, target)).expect("a fresh plan applies");
        prop_assert_eq!(plan_rewrite(&once, target), Vec::<NameChange>::new());
        // And every reference the target knows now names its fixed point.
        for r in find_refs(&once) {
            if let Some(to) = target(&r.name) {
                prop_assert_eq!(&r.name, &to);
            }
        }
    }

    /// (3) Applying the changes alters the changed pointers, to the new names, and nothing else.
    #[test]
    fn apply_changes_changes_nothing_else(spec in pod_spec()) {
        let changes = plan_rewrite(&spec, target);
        let before = to_value(&spec);
        let mut after = to_value(&apply_changes(&spec, &changes).expect("a fresh plan applies"));
        for change in &changes {
            prop_assert_ne!(&change.from, &change.to);
            let slot = after.pointer_mut(change.pointer.as_str()).expect("a changed pointer resolves");
            prop_assert_eq!(&*slot, &Value::String(change.to.clone()));
            *slot = Value::String(change.from.clone());
        }
        prop_assert_eq!(after, before);
    }

    /// (4) References to names the target ignores are untouched, and the references of the result are
    /// those of the input, place for place, with the targeted names replaced.
    #[test]
    fn ignored_names_are_untouched(spec in pod_spec()) {
        let changed = apply_changes(&spec, &plan_rewrite(&spec, target)).expect("a fresh plan applies");
        let before = find_refs(&spec);
        let after = find_refs(&changed);
        prop_assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            prop_assert_eq!((&b.pointer, b.form, b.optional, &b.holder), (&a.pointer, a.form, a.optional, &a.holder));
            match target(&b.name) {
                None => prop_assert_eq!(&a.name, &b.name),
                Some(to) => prop_assert_eq!(&a.name, &to),
            }
        }
    }

    /// (5) The JSON patch, applied to the serialized workload, gives what `apply_changes` predicts (plus
    /// the extra label), and fails without effect on another object or when a changed name moved on.
    #[test]
    fn json_patch_matches_apply_changes(spec in pod_spec(), tamper in any::<prop::sample::Index>()) {
        let changes = plan_rewrite(&spec, target);
        let patch = json_patch(UID, TEMPLATE_POD_SPEC_POINTER, &changes, vec![managed_label_op()]);

        let mut patched = deployment(&spec);
        apply_patch(&mut patched, &patch).map_err(TestCaseError::fail)?;
        let mut expected = deployment(&apply_changes(&spec, &changes).expect("a fresh plan applies"));
        expected["spec"]["template"]["metadata"]["labels"][cmset_api::labels::MANAGED_TEMPLATE] = json!("true");
        prop_assert_eq!(&patched, &expected);

        // The same object deleted and created again under its name: refused.
        let mut recreated = deployment(&spec);
        recreated["metadata"]["uid"] = json!("another-uid");
        let untouched = recreated.clone();
        prop_assert!(apply_patch(&mut recreated, &patch).is_err());
        prop_assert_eq!(recreated, untouched);

        // Someone else changed one of the names cmset is changing: refused, nothing written.
        if !changes.is_empty() {
            let change = tamper.get(&changes);
            let mut moved = deployment(&spec);
            let path = format!("{TEMPLATE_POD_SPEC_POINTER}{}", change.pointer);
            *moved.pointer_mut(&path).expect("a changed pointer resolves") = json!("edited-by-someone");
            let untouched = moved.clone();
            prop_assert!(apply_patch(&mut moved, &patch).is_err());
            prop_assert_eq!(moved, untouched);
        }
    }

    /// An unrelated concurrent edit elsewhere in the template does not make the patch fail, and survives it.
    #[test]
    fn json_patch_leaves_unrelated_edits_alone(spec in pod_spec()) {
        let changes = plan_rewrite(&spec, target);
        let patch = json_patch(UID, TEMPLATE_POD_SPEC_POINTER, &changes, vec![]);
        let mut edited = deployment(&spec);
        edited["spec"]["replicas"] = json!(5);
        edited["spec"]["template"]["spec"]["serviceAccountName"] = json!("edited");
        apply_patch(&mut edited, &patch).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&edited["spec"]["replicas"], &json!(5));
        prop_assert_eq!(&edited["spec"]["template"]["spec"]["serviceAccountName"], &json!("edited"));
        for change in &changes {
            let path = format!("{TEMPLATE_POD_SPEC_POINTER}{}", change.pointer);
            prop_assert_eq!(value_at(&edited, &path), &json!(change.to));
        }
    }
}

proptest! {
    /// The slim spec the operator caches finds the same references at the same pointers, so a patch
    /// planned from the cache addresses the real object exactly as one planned from the whole spec.
    #[test]
    fn the_cached_slim_spec_plans_exactly_what_the_whole_spec_plans(spec in pod_spec()) {
        let slim = cmset_core::workloads::slim::references_only(&spec);
        prop_assert_eq!(find_refs(&slim), find_refs(&spec));
        prop_assert_eq!(plan_rewrite(&slim, target), plan_rewrite(&spec, target));
        prop_assert_eq!(cmset_core::workloads::slim::references_only(&slim), slim, "slimming twice changes nothing");
    }
}

// ---------------------------------------------------------------------------------------------------------
// The workload planner and admission, over the same specs
// ---------------------------------------------------------------------------------------------------------

/// A hash of `n`, so that revision names have the real form (`<set>-<10 characters>`).
fn h(n: u8) -> String {
    cmset_core::revisions::hash::short_hash(&[n])
}

/// Sets `app` and `db`, and a set named exactly like one of `app`'s revisions (the case where one name
/// refers to two sets); their revisions, a name of a revision's form that no set knows, and the rest.
fn planner_names() -> Vec<String> {
    let app_h1 = format!("app-{}", h(1));
    vec![
        "app".into(),
        "db".into(),
        app_h1.clone(),
        format!("app-{}", h(2)),
        format!("app-{}", h(3)),
        format!("db-{}", h(4)),
        format!("db-{}", h(5)),
        format!("{app_h1}-{}", h(6)),
        format!("app-{}", h(7)),
        "unrelated".into(),
        String::new(),
    ]
}

fn planner_name() -> Names {
    prop_oneof![
        8 => prop::sample::select(planner_names()),
        1 => "\\PC{0,20}",
    ]
    .boxed()
}

/// The revisions each set may know: `(set, [its revisions])`.
fn set_revisions() -> Vec<(String, Vec<String>)> {
    let app_h1 = format!("app-{}", h(1));
    vec![
        (
            "app".into(),
            vec![app_h1.clone(), format!("app-{}", h(2)), format!("app-{}", h(3))],
        ),
        ("db".into(), vec![format!("db-{}", h(4)), format!("db-{}", h(5))]),
        (app_h1.clone(), vec![format!("{app_h1}-{}", h(6))]),
    ]
}

/// Some of the sets, each with a current revision, the revisions it knows, and a rollout record that
/// is absent, the current revision (so older references are pinned) or another revision.
fn targets() -> impl Strategy<Value = Vec<SetTarget>> {
    let one = |(name, revisions): (String, Vec<String>)| {
        let n = revisions.len();
        (
            0..n,
            prop::collection::vec(any::<bool>(), n),
            prop_oneof![Just(None), Just(Some(usize::MAX)), (0..n).prop_map(Some)],
        )
            .prop_map(move |(current, known, record)| {
                let current_name = revisions[current].clone();
                let mut known: BTreeSet<String> = revisions
                    .iter()
                    .zip(known)
                    .filter(|(_, k)| *k)
                    .map(|(r, _)| r.clone())
                    .collect();
                known.insert(current_name.clone());
                let rolled_out = record.map(|i| match i {
                    usize::MAX => current_name.clone(),
                    i => revisions[i].clone(),
                });
                SetTarget {
                    kind: Referenced::ConfigMap,
                    name: name.clone(),
                    current: current_name,
                    revisions: known,
                    rolled_out,
                    gate: cmset_core::rollout::waves::Gate::Open,
                    immediate: false,
                }
            })
    };
    let sets: Vec<_> = set_revisions().into_iter().map(|s| option::of(one(s))).collect();
    sets.prop_map(|sets| sets.into_iter().flatten().collect())
}

fn workload(spec: PodSpec, managed: bool) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::Deployment,
        name: "web".into(),
        uid: UID.into(),
        pod_spec: spec,
        template_labels: BTreeMap::from_iter(managed.then(|| {
            (
                cmset_api::labels::MANAGED_TEMPLATE.to_string(),
                "true".to_string(),
            )
        })),
        wave: Default::default(),
        health: Default::default(),
    }
}

/// The set whose status records `target` (settled), as admission reads it.
fn recorded_set(target: &SetTarget) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(&target.name, ConfigMapSetSpec::default());
    set.metadata.generation = Some(1);
    set.status = Some(ConfigMapSetStatus {
        observed_generation: Some(1),
        current_revision: Some(target.current.clone()),
        history: target
            .revisions
            .iter()
            .map(|r| RevisionStatus {
                name: r.clone(),
                revision: 1,
                in_use: true,
                ..Default::default()
            })
            .collect(),
        workloads: vec![WorkloadStatus {
            kind: "Deployment".into(),
            name: "web".into(),
            uid: UID.into(),
            revision: target.current.clone(),
            state: WorkloadState::Current,
            rolled_out: target.rolled_out.clone(),
            ..Default::default()
        }],
        ..ConfigMapSetStatus::default()
    });
    set
}

fn opted_in(spec: &PodSpec) -> Value {
    let mut d = deployment(spec);
    d["metadata"]["labels"] = json!({ cmset_api::labels::ENABLED: cmset_api::labels::ENABLED_VALUE });
    d
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The workload planner with real set targets: carrying out its plan and planning again plans
    /// nothing; every change moves a name a set decides to that set's current revision; no bare set name
    /// is left; and names no set claims are never touched.
    #[test]
    fn planning_a_workload_is_idempotent(
        spec in pod_spec_naming(&planner_name()),
        targets in targets(),
        managed in any::<bool>(),
    ) {
        let plan = plan_workload(&workload(spec.clone(), managed), &targets);
        prop_assert_eq!(plan.add_managed_label, !plan.is_empty() && !managed);
        let currents: BTreeSet<&String> = targets.iter().map(|t| &t.current).collect();
        for change in &plan.changes {
            prop_assert!(targets.iter().any(|t| t.claims(&change.from)), "{:?}", change);
            prop_assert!(currents.contains(&change.to), "{:?}", change);
        }
        let moved = apply_changes(&spec, &plan.changes).expect("a fresh plan applies");
        let again = plan_workload(&workload(moved.clone(), true), &targets);
        prop_assert_eq!(again, WorkloadPlan::default());
        // A bare set name stays only where it is also a revision another set knows (and so decides).
        for r in find_refs(&moved) {
            let revision_of_another = targets.iter().any(|t| t.name != r.name && t.claims(&r.name) && t.revisions.contains(&r.name));
            let bare = targets.iter().any(|t| t.name == r.name);
            prop_assert!(!bare || revision_of_another, "bare set name {} left", r.name);
        }
    }

    /// For a set whose spec cannot be decided from (invalid), the one decision every caller asks gives
    /// back what the set's status records: its current revision, its revisions and the rollout record.
    #[test]
    fn the_decision_for_an_invalid_spec_is_what_the_status_records(
        target in targets().prop_filter("a set", |t| !t.is_empty()).prop_map(|t| t[0].clone())
    ) {
        let set = recorded_set(&target);
        let view = workload(PodSpec::default(), false);
        let observed = Observed {
            set: SetRef::from(&set),
            identity_generation: set.metadata.generation,
            identity: Identity::Invalid,
            revisions: &[],
            lowest_wave: 0,
            window_held: false,
            window_override: None,
        };
        let decided = decide::target(&observed, &view).expect("a settled status decides");
        prop_assert_eq!(&decided.current, &target.current);
        prop_assert_eq!(&decided.revisions, &target.revisions);
        prop_assert_eq!(&decided.rolled_out, &target.rolled_out);
        prop_assert_eq!(decided.gate, Gate::Open);
        // The same set seen before its spec's identity caught up: undecided, never a guess.
        let behind = Observed { identity_generation: Some(0), ..observed };
        prop_assert!(decide::target(&behind, &view).is_err());
    }

    /// Given the controller's decision, admission makes the same move, its patch applies to the object
    /// being admitted, and admitting the result again changes nothing: a re-applied manifest and the
    /// stored object agree.
    #[test]
    fn admission_moves_what_the_controller_moves_and_then_nothing(
        spec in pod_spec_naming(&planner_name()),
        targets in targets(),
    ) {
        let object = opted_in(&spec);
        let plan = plan_workload(&workload(spec.clone(), false), &targets);
        let updating = admission::Circumstances::default();
        let decided = Ok(targets.clone());
        let admit = |object: &Value| {
            let view = admission::admitted_workload(WorkloadKind::Deployment, object).expect("opted in");
            admission::mutate(WorkloadKind::Deployment, object, &view, &decided, &updating)
        };
        let patch = admit(&object);
        prop_assert_eq!(patch.is_some(), !plan.is_empty());
        let Some(patch) = patch else { return Ok(()) };
        let mut admitted = object.clone();
        apply_patch(&mut admitted, &patch).map_err(TestCaseError::fail)?;
        let expected = to_value(&apply_changes(&spec, &plan.changes).expect("a fresh plan applies"));
        prop_assert_eq!(&admitted["spec"]["template"]["spec"], &expected);
        prop_assert_eq!(
            &admitted["spec"]["template"]["metadata"]["labels"][cmset_api::labels::MANAGED_TEMPLATE],
            &json!("true")
        );
        prop_assert!(admit(&admitted).is_none());
    }

    /// Admission never panics, whatever object it is sent: any JSON at all, or a workload with parts
    /// replaced by values of the wrong type.
    #[test]
    fn admission_copes_with_any_object(object in any_object(), targets in targets(), creating: bool) {
        // Created with a name nothing has yet: held, when it is a Deployment.
        let circumstances = admission::Circumstances {
            creating,
            missing: [(Referenced::ConfigMap, "later".to_string())].into(),
            now: "2026-11-23T10:00:00Z".into(),
            stored: None,
            budgeted: false,
        };
        let decisions = [Ok(targets), Err(Undecided::Set("ConfigMapSet later".into()))];
        for (kind, decided) in WorkloadKind::BUILT_IN.into_iter().flat_map(|k| decisions.iter().map(move |d| (k, d))) {
            let Some(view) = admission::admitted_workload(kind, &object) else { continue };
            if let Some(patch) = admission::mutate(kind, &object, &view, decided, &circumstances) {
                // What it does return applies to the object.
                let mut patched = object.clone();
                apply_patch(&mut patched, &patch).map_err(TestCaseError::fail)?;
            }
        }
    }
}

/// JSON whose keys are mostly the ones admission looks for, so that random objects get deep into it.
fn any_json() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "metadata",
            "labels",
            "name",
            "uid",
            "spec",
            "template",
            "containers",
            "initContainers",
            "volumes",
            "configMap",
            "envFrom",
            "configMapRef",
            "env",
            "valueFrom",
            "configMapKeyRef",
            "projected",
            "sources",
            "cmset.dev/enabled",
        ])
        .prop_map(str::to_owned),
        "\\PC{0,6}",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(planner_names()).prop_map(Value::from),
        Just(json!("true")),
    ];
    leaf.prop_recursive(5, 48, 6, move |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Any JSON, or an opted-in workload with one of its parts replaced by any JSON.
fn any_object() -> impl Strategy<Value = Value> {
    let pointers = prop::sample::select(vec![
        "/spec",
        "/spec/template",
        "/spec/template/spec",
        "/spec/template/spec/containers",
        "/spec/template/spec/volumes",
        "/spec/template/metadata",
        "/spec/template/metadata/labels",
        "/metadata/uid",
        "/metadata/name",
    ]);
    let broken = (pod_spec_naming(&planner_name()), pointers, any_json()).prop_map(|(spec, at, value)| {
        let mut object = opted_in(&spec);
        if let Some(slot) = object.pointer_mut(at) {
            *slot = value;
        }
        object
    });
    prop_oneof![any_json(), broken]
}

/// `value` with fields cmset never reads added at every level a reference lives in (what a real Pod
/// carries: images, probes, resources), so decoding must skip them.
fn with_noise(mut value: Value) -> Value {
    let noise =
        json!({"image": "registry.k8s.io/pause:3.9", "resources": {"limits": {"cpu": "1"}}, "args": ["-v"]});
    let add = |object: &mut Value, extra: &Value| {
        if let (Some(map), Some(extra)) = (object.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                map.insert(k.clone(), v.clone());
            }
        }
    };
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for container in value[list].as_array_mut().into_iter().flatten() {
            add(container, &noise);
            for var in container["env"].as_array_mut().into_iter().flatten() {
                add(var, &json!({"value": "literal"}));
            }
            for source in container["envFrom"].as_array_mut().into_iter().flatten() {
                add(source, &json!({"prefix": "P_"}));
            }
        }
    }
    for volume in value["volumes"].as_array_mut().into_iter().flatten() {
        add(volume, &json!({"emptyDir": {}}));
    }
    add(
        &mut value,
        &json!({"nodeName": "node-1", "restartPolicy": "Always", "aFieldOfTomorrow": {"x": [1]}}),
    );
    value
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Decoding a pod spec's references straight from JSON gives what slimming the whole decoded spec
    /// gives: the same references at the same pointers, whatever else the spec carries.
    #[test]
    fn references_decoded_from_json_are_the_slimmed_spec(spec in pod_spec()) {
        let json = with_noise(serde_json::to_value(&spec).unwrap());
        let whole: PodSpec = serde_json::from_value(json.clone()).unwrap();
        let decoded: cmset_core::workloads::slim::ReferencesOnly = serde_json::from_value(json).unwrap();
        prop_assert_eq!(&decoded.0, &cmset_core::workloads::slim::references_only(&whole));
        prop_assert_eq!(find_refs(&decoded.0), find_refs(&whole));
    }
}
