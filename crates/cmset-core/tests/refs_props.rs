//! Properties of finding and rewriting ConfigMap references, over random pod specs.
//!
//! Names come from a small pool so that the same name appears in many places and in every form, next to
//! Secrets with the same names. The target used throughout maps the "sets" `app` and `db` to revisions,
//! the revisions to themselves (fixed points) and ignores everything else.

use std::collections::BTreeSet;

use cmset_core::refs::{
    NameChange, TEMPLATE_POD_SPEC_POINTER, apply_changes, escape_pointer_token, find_refs, json_patch,
    plan_rewrite,
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

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(NAMES).prop_map(str::to_owned)
}

fn small_name() -> impl Strategy<Value = String> {
    prop::sample::select(&["a", "b", "c"][..]).prop_map(str::to_owned)
}

fn env_var() -> impl Strategy<Value = EnvVar> {
    let source = prop_oneof![
        Just(None),
        (name(), option::of(any::<bool>())).prop_map(|(name, optional)| Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name,
                key: "k".into(),
                optional
            }),
            ..Default::default()
        })),
        name().prop_map(|name| Some(EnvVarSource {
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

fn env_from() -> impl Strategy<Value = EnvFromSource> {
    let cm = (name(), option::of(any::<bool>()))
        .prop_map(|(name, optional)| ConfigMapEnvSource { name, optional });
    let secret = name().prop_map(|name| SecretEnvSource { name, optional: None });
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

fn projection() -> impl Strategy<Value = VolumeProjection> {
    prop_oneof![
        (name(), option::of(any::<bool>())).prop_map(|(name, optional)| VolumeProjection {
            config_map: Some(ConfigMapProjection {
                name,
                optional,
                items: None
            }),
            ..Default::default()
        }),
        name().prop_map(|name| VolumeProjection {
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

fn volume() -> impl Strategy<Value = Volume> {
    let cm = (name(), option::of(any::<bool>())).prop_map(|(name, optional)| Volume {
        config_map: Some(ConfigMapVolumeSource {
            name,
            optional,
            ..Default::default()
        }),
        ..Default::default()
    });
    let secret = name().prop_map(|name| Volume {
        secret: Some(SecretVolumeSource {
            secret_name: Some(name),
            ..Default::default()
        }),
        ..Default::default()
    });
    let projected = option::of(vec(projection(), 0..5)).prop_map(|sources| Volume {
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

fn env_parts() -> impl Strategy<Value = EnvParts> {
    (
        small_name(),
        option::of(vec(env_var(), 0..5)),
        option::of(vec(env_from(), 0..4)),
    )
}

fn container() -> impl Strategy<Value = Container> {
    env_parts().prop_map(|(name, env, env_from)| Container {
        name,
        env,
        env_from,
        ..Default::default()
    })
}

fn ephemeral_container() -> impl Strategy<Value = EphemeralContainer> {
    env_parts().prop_map(|(name, env, env_from)| EphemeralContainer {
        name,
        env,
        env_from,
        ..Default::default()
    })
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        vec(container(), 0..4),
        option::of(vec(container(), 0..3)),
        option::of(vec(ephemeral_container(), 0..3)),
        option::of(vec(volume(), 0..5)),
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
        let slim = cmset_core::slim::references_only(&spec);
        prop_assert_eq!(find_refs(&slim), find_refs(&spec));
        prop_assert_eq!(plan_rewrite(&slim, target), plan_rewrite(&spec, target));
        prop_assert_eq!(cmset_core::slim::references_only(&slim), slim, "slimming twice changes nothing");
    }
}
