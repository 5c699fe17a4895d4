//! Rewriting a workload at admission: the same decision the workload controller makes, applied to the
//! object while it is being created or updated, so the object stored is already the rewritten one.
//!
//! Why: a GitOps tool that re-applies its manifest (naming the bare set) with server-side apply would
//! otherwise undo cmset's edit on every sync and cmset would redo it, two rollouts per sync. Rewritten at
//! admission, the re-applied object equals the stored one and nothing rolls. It also spares a new
//! Deployment the ReplicaSet for the bare name that nothing can run.

use cmset_api::{ConfigMapSet, labels};
use json_patch::Patch;
use k8s_openapi::api::core::v1::PodSpec;
use serde::Deserialize;
use serde_json::Value;

use crate::observe::{WorkloadKind, WorkloadView};
use crate::rollout::{SetTarget, TemplateLabels, plan_workload};

/// The JSON patch (RFC 6902) for an opted-in Deployment, StatefulSet or DaemonSet being admitted, or
/// `None` when nothing changes (not opted in, no reference to a set, or everything already current or
/// pinned by a rollback).
pub fn mutate(kind: WorkloadKind, object: &Value, sets: &[ConfigMapSet]) -> Option<Patch> {
    let enabled = object.pointer(&format!(
        "/metadata/labels/{}",
        crate::refs::escape_pointer_token(labels::ENABLED)
    ));
    if enabled.and_then(Value::as_str) != Some(labels::ENABLED_VALUE) {
        return None;
    }
    let pod_spec = PodSpec::deserialize(object.pointer("/spec/template/spec")?).ok()?;
    let template_labels = object
        .pointer("/spec/template/metadata/labels")
        .and_then(|l| serde_json::from_value(l.clone()).ok());
    let workload = WorkloadView {
        kind,
        name: object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        uid: object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        pod_spec,
        template_labels: template_labels.clone().unwrap_or_default(),
    };
    let targets: Vec<SetTarget> = sets
        .iter()
        .filter_map(|s| SetTarget::as_recorded(s, &workload.uid))
        .collect();
    let plan = plan_workload(&workload, &targets);
    // Objects from the API server always have template metadata; any other input still gets a patch
    // that applies to it.
    let template = match object.pointer("/spec/template/metadata") {
        Some(Value::Object(metadata)) => {
            TemplateLabels::from(matches!(metadata.get("labels"), Some(Value::Object(_))))
        }
        _ => TemplateLabels::NoMetadata,
    };
    (!plan.is_empty()).then(|| plan.admission_patch(template))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cmset_api::{ConfigMapSetSpec, ConfigMapSetStatus, RevisionStatus, WorkloadState, WorkloadStatus};
    use serde_json::json;

    fn set(generation: i64, observed: i64, workloads: Vec<WorkloadStatus>) -> ConfigMapSet {
        let mut set = ConfigMapSet::new("app", ConfigMapSetSpec::default());
        set.metadata.generation = Some(generation);
        set.status = Some(ConfigMapSetStatus {
            observed_generation: Some(observed),
            current_revision: Some("app-2222222222".into()),
            history: vec![
                RevisionStatus {
                    name: "app-2222222222".into(),
                    revision: 2,
                    in_use: true,
                },
                RevisionStatus {
                    name: "app-hhhhhhhhhh".into(),
                    revision: 1,
                    in_use: true,
                },
            ],
            workloads,
            ..ConfigMapSetStatus::default()
        });
        set
    }

    fn deployment(configmap: &str, uid: Option<&str>, opted_in: bool) -> Value {
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {}},
            "spec": {"template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "envFrom": [{"configMapRef": {"name": configmap}}]}]}
            }}
        });
        if opted_in {
            d["metadata"]["labels"]["cmset.dev/enabled"] = json!("true");
        }
        if let Some(uid) = uid {
            d["metadata"]["uid"] = json!(uid);
        }
        d
    }

    const PATH: &str = "/spec/template/spec/containers/0/envFrom/0/configMapRef/name";

    /// The patch of an admitted Deployment as the API server receives it, if there is one.
    fn mutated(object: &Value, sets: &[ConfigMapSet]) -> Option<Value> {
        mutate(WorkloadKind::Deployment, object, sets).map(|p| serde_json::to_value(p).unwrap())
    }

    #[test]
    fn a_new_workload_naming_the_set_is_stored_already_rewritten() {
        let patch = mutated(&deployment("app", None, true), &[set(1, 1, vec![])]).unwrap();
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": PATH, "value": "app"},
                {"op": "replace", "path": PATH, "value": "app-2222222222"},
                {"op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true"}
            ])
        );
    }

    /// Found by `admission_copes_with_any_object`: a template without labels, or without metadata at all,
    /// gets the label added with its parent, so that the patch applies to the object it was made for.
    #[test]
    fn the_label_is_added_with_its_parent_when_the_template_lacks_it() {
        let sets = [set(1, 1, vec![])];
        let label = |patch: Value| patch[2].clone();
        let mut no_labels = deployment("app", None, true);
        no_labels["spec"]["template"]["metadata"] = json!({});
        assert_eq!(
            label(mutated(&no_labels, &sets).unwrap()),
            json!({"op": "add", "path": "/spec/template/metadata/labels", "value": {"cmset.dev/managed": "true"}})
        );
        for metadata in [None, Some(Value::Null)] {
            let mut no_metadata = deployment("app", None, true);
            let template = no_metadata["spec"]["template"].as_object_mut().unwrap();
            match metadata {
                None => template.remove("metadata"),
                Some(value) => template.insert("metadata".into(), value),
            };
            let patch = mutate(WorkloadKind::Deployment, &no_metadata, &sets).unwrap();
            assert_eq!(
                label(serde_json::to_value(&patch).unwrap()),
                json!({"op": "add", "path": "/spec/template/metadata", "value": {"labels": {"cmset.dev/managed": "true"}}})
            );
            json_patch::patch(&mut no_metadata, &patch).expect("the patch applies");
        }
    }

    #[test]
    fn a_set_whose_controller_lags_still_yields_its_recorded_current_revision() {
        let patch = mutated(&deployment("app", None, true), &[set(2, 1, vec![])]).unwrap();
        assert_eq!(patch[1]["value"], "app-2222222222");
    }

    #[test]
    fn nothing_changes_for_current_pinned_unrelated_or_opted_out_workloads() {
        let sets = [set(
            1,
            1,
            vec![WorkloadStatus {
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "u1".into(),
                revision: "app-hhhhhhhhhh".into(),
                state: WorkloadState::Pinned,
                rolled_out: Some("app-2222222222".into()),
            }],
        )];
        let kind = WorkloadKind::Deployment;
        assert_eq!(
            mutate(kind, &deployment("app-2222222222", Some("u1"), true), &sets),
            None,
            "current"
        );
        assert_eq!(
            mutate(kind, &deployment("app-hhhhhhhhhh", Some("u1"), true), &sets),
            None,
            "pinned by undo"
        );
        assert_eq!(
            mutate(kind, &deployment("other", Some("u1"), true), &sets),
            None,
            "unrelated"
        );
        assert_eq!(
            mutate(kind, &deployment("app", Some("u1"), false), &sets),
            None,
            "not opted in"
        );
        // The same old revision on a workload cmset never moved is a missed update: it moves.
        assert!(mutate(kind, &deployment("app-hhhhhhhhhh", Some("u2"), true), &sets).is_some());
    }
}
