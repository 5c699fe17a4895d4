//! Rewriting a workload at admission: the same decision the workload controller makes, applied to the
//! object while it is being created or updated, so the object stored is already the rewritten one.
//!
//! Why: a GitOps tool that re-applies its manifest (naming the bare set) with server-side apply would
//! otherwise undo cmset's edit on every sync and cmset would redo it, two rollouts per sync. Rewritten at
//! admission, the re-applied object equals the stored one and nothing rolls. It also spares a new
//! Deployment the ReplicaSet for the bare name that nothing can run.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::labels;

use json_patch::Patch;
use serde_json::Value;

use crate::revisions::naming;
use crate::rollout::decide::Undecided;
use crate::rollout::hold;
use crate::rollout::pinning::{SetTarget, WorkloadPlan, plan_workload};
use crate::workloads::observe::{WorkloadKind, WorkloadView};
use crate::workloads::refs::{self, NameChange, Referenced};

/// What the webhook knows about one admission request besides the object and the decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Circumstances {
    /// The object is being created (not updated).
    pub creating: bool,
    /// Names it references that no set claims (see [`unclaimed_names`]): perhaps a set applied right
    /// after it. Whether they exist is not asked at admission (the answer would tell any caller which
    /// objects exist); the workload controller releases the hold at once when they do.
    pub missing: BTreeSet<(Referenced, String)>,
    /// Now, RFC 3339: when a hold would begin.
    pub now: String,
    /// The object as stored, when it is being updated.
    pub stored: Option<Value>,
    /// A cluster-wide rollout budget is set (see [`crate::policy::budget`]): an update never moves a
    /// reference the stored object already points at a revision of the same set; the workload
    /// controller moves it when the budget lets it.
    pub budgeted: bool,
}

/// The opted-in workload being admitted, as the planner sees it; `None` when it is not opted in or has
/// no pod template.
pub fn admitted_workload(kind: WorkloadKind, object: &Value) -> Option<WorkloadView> {
    if !crate::workloads::observe::opted_in(object) {
        return None;
    }
    // Its health is the controller's business: an admitted object's status is the stored one's.
    Some(WorkloadView {
        health: Default::default(),
        ..WorkloadView::of(kind, object)?
    })
}

/// Whether the change windows decide this admission as they decide the move of a running workload:
/// an update, or the creation of a Job its CronJob starts. Such a Job runs the template the CronJob
/// holds, as under pause, else a freeze that holds the CronJob would let each of its Jobs through.
/// Any other workload's first start names the current revision whatever the windows say.
pub fn windows_apply(kind: WorkloadKind, object: &Value, creating: bool) -> bool {
    !creating || started_by_cron_job(kind, object)
}

/// Whether `object` is a Job whose controlling owner is a CronJob (the CronJob controller sets it).
pub fn started_by_cron_job(kind: WorkloadKind, object: &Value) -> bool {
    let owners = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array);
    kind == WorkloadKind::Job
        && owners.is_some_and(|owners| {
            owners.iter().any(|o| {
                o["kind"] == "CronJob"
                    && o["controller"] == true
                    && o["apiVersion"].as_str().is_some_and(|v| v.starts_with("batch/"))
            })
        })
}

/// The names of objects of the `kinds` given that `workload` references and that no set of the
/// namespace claims (by `claimed`: its bare name or a name of its revisions' form, among sets of the
/// matching kind), at most `limit` of them: admission holds a new workload that names one, and the
/// workload controller looks them up once it is stored.
pub fn unclaimed_names(
    workload: &WorkloadView,
    kinds: &[Referenced],
    limit: usize,
    claimed: impl Fn(Referenced, &str) -> bool,
) -> Vec<(Referenced, String)> {
    let names = workload.referenced();
    names
        .iter()
        .filter(|(of, name)| kinds.contains(of) && !claimed(*of, name))
        .map(|(of, name)| (of, name.to_string()))
        .take(limit)
        .collect()
}

/// The JSON patch (RFC 6902) for an opted-in workload being admitted, or `None` when nothing changes.
///
/// `decided` is [`crate::rollout::decide::targets`] for the sets it reads, as the workload controller would
/// decide them now: the object is stored exactly as the controller would rewrite it (waves, pins and
/// rollbacks included). While a set it reads is undecided (it has no revision yet), nothing is
/// rewritten: the controller moves every reference at once when it is, so the workload rolls once. A
/// new Deployment in that case, or naming a name nothing has yet, is also held: created paused (see
/// [`crate::rollout::hold`]), unless it is paused already.
pub fn mutate(
    kind: WorkloadKind,
    object: &Value,
    workload: &WorkloadView,
    decided: &Result<Vec<SetTarget>, Undecided>,
    circumstances: &Circumstances,
) -> Option<Patch> {
    let plan = match decided {
        Ok(targets) => plan_workload(workload, targets),
        Err(_) => WorkloadPlan::default(),
    };
    let plan = match (
        circumstances.budgeted && !circumstances.creating,
        &circumstances.stored,
    ) {
        (false, _) => plan,
        (true, Some(stored)) => within_budget(kind, plan, stored),
        (true, None) => WorkloadPlan::default(),
    };
    // A kind whose template cannot change after creation is rewritten only when created; an update
    // keeps the revisions it was created with.
    if !kind.is_mutable() && !circumstances.creating {
        return keep_stored(kind, object, workload, circumstances.stored.as_ref()?);
    }
    let hold = circumstances.creating
        && hold::can_hold(kind)
        && !hold::is_paused(kind, object)
        && (!circumstances.missing.is_empty() || decided.is_err());
    let mut patch = (!plan.is_empty()).then(|| plan.admission_patch(kind, object));
    if hold {
        patch
            .get_or_insert_with(|| Patch(Vec::new()))
            .0
            .extend(hold::hold_operations(kind, object, &circumstances.now));
    }
    patch
}

/// Whether `name` (the bare set name, or a revision name) names the set whose revision `revision` is.
fn same_set(name: &str, revision: &str) -> bool {
    naming::set_candidates(revision)
        .filter(|set| *set != revision)
        .any(|set| naming::refers_to_set(set, name))
}

/// `plan` for an update under the rollout budget: a reference the stored object holds as a revision of
/// the same set stays as stored (a manifest naming the bare set, sent again, does not roll the
/// workload); a reference the stored object does not have (added by this update) moves as planned.
fn within_budget(kind: WorkloadKind, plan: WorkloadPlan, stored: &Value) -> WorkloadPlan {
    let Some(stored) = WorkloadView::of(kind, stored) else {
        return WorkloadPlan::default();
    };
    let kept: BTreeMap<_, _> = [Referenced::ConfigMap, Referenced::Secret]
        .into_iter()
        .flat_map(|of| refs::find_refs_to(&stored.pod_spec, of))
        .map(|r| (r.pointer, r.name))
        .collect();
    let changes: Vec<NameChange> = plan
        .changes
        .into_iter()
        .filter_map(|change| match kept.get(&change.pointer) {
            Some(name) if same_set(&change.from, name) || same_set(&change.to, name) => {
                (*name != change.from).then(|| NameChange {
                    to: name.clone(),
                    ..change
                })
            }
            _ => Some(change),
        })
        .collect();
    WorkloadPlan {
        add_managed_label: plan.add_managed_label && !changes.is_empty(),
        changes,
    }
}

/// For an object whose template cannot change (a Job) being updated with a manifest that names its
/// sets as written (a GitOps tool applying it again, or its dry run): every reference the stored object
/// holds as a revision of the same set is kept as stored, and so is cmset's template label, so the
/// template the update sends is the stored one and the API server does not refuse it as a change to an
/// immutable field. Nothing else is touched: a real change of the template is still refused.
fn keep_stored(kind: WorkloadKind, object: &Value, workload: &WorkloadView, stored: &Value) -> Option<Patch> {
    let stored = WorkloadView::of(kind, stored)?;
    let changes: Vec<NameChange> = [Referenced::ConfigMap, Referenced::Secret]
        .into_iter()
        .flat_map(|of| {
            let kept: BTreeMap<_, _> = refs::find_refs_to(&stored.pod_spec, of)
                .into_iter()
                .map(|r| (r.pointer, r.name))
                .collect();
            refs::find_refs_to(&workload.pod_spec, of)
                .into_iter()
                .filter_map(move |r| {
                    let stored_name = kept.get(&r.pointer)?;
                    (r.name != *stored_name && same_set(&r.name, stored_name)).then(|| NameChange {
                        pointer: r.pointer,
                        from: r.name,
                        to: stored_name.clone(),
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let managed = |labels: &BTreeMap<String, String>| {
        labels.get(labels::MANAGED_TEMPLATE).map(String::as_str) == Some("true")
    };
    let plan = WorkloadPlan {
        add_managed_label: managed(&stored.template_labels) && !managed(&workload.template_labels),
        changes,
    };
    (!plan.is_empty() || plan.add_managed_label).then(|| plan.admission_patch(kind, object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::decide::{Identity, Observed, targets};
    use crate::set::SetRef;
    use cmset_api::{
        ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, RevisionStatus, WorkloadState, WorkloadStatus,
    };
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
                    ..Default::default()
                },
                RevisionStatus {
                    name: "app-hhhhhhhhhh".into(),
                    revision: 1,
                    in_use: true,
                    ..Default::default()
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
    fn names(found: Vec<(Referenced, String)>) -> Vec<String> {
        found.into_iter().map(|(_, name)| name).collect()
    }

    /// The patch for `object` against `sets` decided as the controller decides (from each set's
    /// status, as for a set whose spec is invalid: the decision itself is tested in `decide`).
    fn mutate_with(
        kind: WorkloadKind,
        object: &Value,
        sets: &[ConfigMapSet],
        circumstances: &Circumstances,
    ) -> Option<Patch> {
        let workload = admitted_workload(kind, object)?;
        let observed: Vec<Observed<'_>> = sets
            .iter()
            .filter(|set| {
                workload.referenced().iter().any(|(_, n)| {
                    crate::revisions::naming::refers_to_set(&set.metadata.name.clone().unwrap_or_default(), n)
                })
            })
            .map(|set| Observed {
                set: SetRef::from(set),
                identity_generation: set.metadata.generation,
                identity: Identity::Invalid,
                revisions: &[],
                lowest_wave: workload.wave.number().unwrap_or(0),
                window_held: false,
                window_override: None,
            })
            .collect();
        let decided = targets(&observed, &workload);
        mutate(kind, object, &workload, &decided, circumstances)
    }

    fn mutated(object: &Value, sets: &[ConfigMapSet]) -> Option<Value> {
        mutate_with(WorkloadKind::Deployment, object, sets, &Circumstances::default())
            .map(|p| serde_json::to_value(p).unwrap())
    }

    fn unclaimed(object: &Value, sets: &[ConfigMapSet], limit: usize) -> Vec<String> {
        let Some(workload) = admitted_workload(WorkloadKind::Deployment, object) else {
            return Vec::new();
        };
        let claimed = |_: Referenced, name: &str| {
            sets.iter().any(|s| {
                crate::revisions::naming::refers_to_set(&s.metadata.name.clone().unwrap_or_default(), name)
            })
        };
        names(unclaimed_names(
            &workload,
            &[Referenced::ConfigMap],
            limit,
            claimed,
        ))
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

    #[test]
    fn a_re_applied_workload_of_a_later_wave_keeps_the_revision_it_runs() {
        // GitOps re-applies `second` (wave 1) naming the bare set while wave 0 rolls out revision 2.
        let entry = WorkloadStatus {
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            revision: "app-hhhhhhhhhh".into(),
            state: WorkloadState::Waiting,
            wave: 1,
            ..Default::default()
        };
        let mut rolling = set(1, 1, vec![entry]);
        rolling.status.as_mut().unwrap().rollout = Some(cmset_api::RolloutStatus {
            revision: "app-2222222222".into(),
            wave: 0,
            waves: vec![0, 1],
            ..Default::default()
        });
        let mut object = deployment("app", Some("uid-web"), true);
        object["metadata"]["labels"]["cmset.dev/wave"] = json!("1");
        let patch = mutated(&object, std::slice::from_ref(&rolling)).unwrap();
        assert_eq!(
            patch[1],
            json!({"op": "replace", "path": PATH, "value": "app-hhhhhhhhhh"})
        );
        // Its wave open, the same apply goes to the new revision.
        rolling.status.as_mut().unwrap().rollout.as_mut().unwrap().wave = 1;
        let patch = mutated(&object, &[rolling]).unwrap();
        assert_eq!(
            patch[1],
            json!({"op": "replace", "path": PATH, "value": "app-2222222222"})
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
            let patch = mutate_with(
                WorkloadKind::Deployment,
                &no_metadata,
                &sets,
                &Circumstances::default(),
            )
            .unwrap();
            assert_eq!(
                label(serde_json::to_value(&patch).unwrap()),
                json!({"op": "add", "path": "/spec/template/metadata", "value": {"labels": {"cmset.dev/managed": "true"}}})
            );
            json_patch::patch(&mut no_metadata, &patch).expect("the patch applies");
        }
    }

    #[test]
    fn a_set_not_yet_decided_rewrites_nothing_and_holds_a_new_deployment() {
        // The set's spec moved on and nothing says where it is yet: the controller would wait, so
        // admission rewrites nothing (the controller moves every reference at once, one rollout).
        let lagging = [set(2, 1, vec![])];
        let kind = WorkloadKind::Deployment;
        let object = deployment("app", None, true);
        assert_eq!(
            mutate_with(kind, &object, &lagging, &Circumstances::default()),
            None
        );
        assert_eq!(paths(&mutate_with(kind, &object, &lagging, &creating(&[]))), HOLD);
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
                ..Default::default()
            }],
        )];
        let kind = WorkloadKind::Deployment;
        assert_eq!(
            mutate_with(
                kind,
                &deployment("app-2222222222", Some("u1"), true),
                &sets,
                &Circumstances::default()
            ),
            None,
            "current"
        );
        assert_eq!(
            mutate_with(
                kind,
                &deployment("app-hhhhhhhhhh", Some("u1"), true),
                &sets,
                &Circumstances::default()
            ),
            None,
            "pinned by undo"
        );
        assert_eq!(
            mutate_with(
                kind,
                &deployment("other", Some("u1"), true),
                &sets,
                &Circumstances::default()
            ),
            None,
            "unrelated"
        );
        assert_eq!(
            mutate_with(
                kind,
                &deployment("app", Some("u1"), false),
                &sets,
                &Circumstances::default()
            ),
            None,
            "not opted in"
        );
        // The same old revision on a workload cmset never moved is a missed update: it moves.
        assert!(
            mutate_with(
                kind,
                &deployment("app-hhhhhhhhhh", Some("u2"), true),
                &sets,
                &Circumstances::default()
            )
            .is_some()
        );
    }

    fn creating(missing: &[&str]) -> Circumstances {
        Circumstances {
            creating: true,
            missing: missing
                .iter()
                .map(|m| (Referenced::ConfigMap, m.to_string()))
                .collect(),
            now: "2026-11-23T10:00:00Z".into(),
            stored: None,
            budgeted: false,
        }
    }

    #[test]
    fn windows_decide_updates_and_the_jobs_a_cron_job_starts() {
        let owned_by = |kind: &str, controller: bool| {
            json!({"metadata": {"ownerReferences": [
                {"apiVersion": "batch/v1", "kind": kind, "name": "nightly", "uid": "u", "controller": controller}
            ]}})
        };
        let cron_job = owned_by("CronJob", true);
        assert!(windows_apply(WorkloadKind::Job, &cron_job, true));
        // The first start of anything else names the current revision.
        assert!(!windows_apply(WorkloadKind::Job, &json!({"metadata": {}}), true));
        assert!(!windows_apply(
            WorkloadKind::Job,
            &owned_by("CronJob", false),
            true
        ));
        assert!(!windows_apply(
            WorkloadKind::Job,
            &owned_by("Workflow", true),
            true
        ));
        assert!(!windows_apply(WorkloadKind::Deployment, &cron_job, true));
        // An update is a move.
        assert!(windows_apply(WorkloadKind::Deployment, &json!({}), false));
    }

    #[test]
    fn a_job_applied_again_keeps_the_revisions_it_was_created_with_and_nothing_else() {
        let job = |configmap: &str, managed: bool| {
            let mut j = json!({
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "migrate", "labels": {"cmset.dev/enabled": "true"}},
                "spec": {"template": {
                    "metadata": {"labels": {"app": "migrate"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": configmap}}]}]}
                }}
            });
            if managed {
                j["spec"]["template"]["metadata"]["labels"]["cmset.dev/managed"] = json!("true");
            }
            j
        };
        let kind = WorkloadKind::Job;
        let stored = job("app-hhhhhhhhhh", true);
        let update = |incoming: &Value| {
            let view = admitted_workload(kind, incoming).unwrap();
            let circumstances = Circumstances {
                stored: Some(stored.clone()),
                ..Circumstances::default()
            };
            mutate(kind, incoming, &view, &Ok(vec![]), &circumstances)
        };
        // The manifest names the bare set: the update sends the stored template back.
        let manifest = job("app", false);
        let patch = update(&manifest).expect("kept as stored");
        let mut sent = manifest.clone();
        json_patch::patch(&mut sent, &patch).unwrap();
        assert_eq!(sent["spec"]["template"], stored["spec"]["template"]);
        // Another revision of the set, too.
        assert!(update(&job("app-2222222222", true)).is_some());
        // The stored object itself: nothing to do.
        assert!(update(&stored).is_none());
        // Another ConfigMap altogether is a real change: left for the API server to refuse.
        assert!(update(&job("other", true)).is_none());
        // Without the stored object (no oldObject), nothing is rewritten on update.
        let view = admitted_workload(kind, &manifest).unwrap();
        assert!(mutate(kind, &manifest, &view, &Ok(vec![]), &Circumstances::default()).is_none());
    }

    #[test]
    fn under_the_rollout_budget_an_update_moves_no_reference_the_stored_object_holds() {
        let sets = [set(1, 1, vec![])];
        let update = |incoming: &Value, stored: &Value| {
            let circumstances = Circumstances {
                stored: Some(stored.clone()),
                budgeted: true,
                ..Circumstances::default()
            };
            mutate_with(WorkloadKind::Deployment, incoming, &sets, &circumstances)
                .map(|p| serde_json::to_value(p).unwrap())
        };
        let running_old = deployment("app-hhhhhhhhhh", None, true);
        // Re-applied as it is stored: without the budget it would move to app-2222222222 now.
        assert!(mutated(&running_old, &sets).is_some());
        assert_eq!(
            update(&running_old, &running_old),
            None,
            "the controller moves it in turn"
        );
        // A manifest naming the bare set keeps the revision it runs.
        assert_eq!(
            update(&deployment("app", None, true), &running_old),
            Some(json!([
                {"op": "test", "path": PATH, "value": "app"},
                {"op": "replace", "path": PATH, "value": "app-hhhhhhhhhh"},
                {"op": "add", "path": "/spec/template/metadata/labels/cmset.dev~1managed", "value": "true"}
            ]))
        );
        // A reference the update adds is rewritten as planned: it rolls the workload anyway.
        let unrelated = deployment("other", None, true);
        assert!(update(&deployment("app", None, true), &unrelated).is_some());
        // A new workload is not a move: created as planned.
        let creating = Circumstances {
            budgeted: true,
            ..Circumstances::default()
        };
        let created = mutate_with(
            WorkloadKind::Deployment,
            &deployment("app", None, true),
            &sets,
            &creating,
        );
        assert!(created.is_none(), "no oldObject on an update: left alone");
        let creating = Circumstances {
            creating: true,
            ..creating
        };
        let created = mutate_with(
            WorkloadKind::Deployment,
            &deployment("app", None, true),
            &sets,
            &creating,
        );
        assert_eq!(paths(&created).len(), 3);
    }

    fn new_set() -> ConfigMapSet {
        let mut s = set(1, 1, vec![]);
        s.status = None;
        s
    }

    const HOLD: [&str; 2] = ["/spec/paused", "/metadata/annotations"];

    fn paths(patch: &Option<Patch>) -> Vec<String> {
        serde_json::to_value(patch)
            .unwrap()
            .as_array()
            .map(|ops| {
                ops.iter()
                    .map(|o| o["path"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn a_new_deployment_whose_set_has_no_revision_yet_or_does_not_exist_yet_is_held() {
        let kind = WorkloadKind::Deployment;
        let object = deployment("app", None, true);
        assert_eq!(
            paths(&mutate_with(kind, &object, &[new_set()], &creating(&[]))),
            HOLD
        );
        // The set arrives after the Deployment: the name is missing altogether.
        assert_eq!(unclaimed(&object, &[], 8), ["app"]);
        assert_eq!(paths(&mutate_with(kind, &object, &[], &creating(&["app"]))), HOLD);
    }

    #[test]
    fn nothing_is_held_that_can_be_rewritten_is_updated_is_paused_or_cannot_pause() {
        let kind = WorkloadKind::Deployment;
        let object = deployment("app", None, true);
        let rewritten = mutate_with(kind, &object, &[set(1, 1, vec![])], &creating(&[]));
        assert_eq!(paths(&rewritten).len(), 3, "rewritten, not held: {rewritten:?}");
        let updating = Circumstances {
            creating: false,
            ..creating(&["app"])
        };
        assert_eq!(
            mutate_with(kind, &object, &[], &updating),
            None,
            "a running Deployment is never paused"
        );
        let mut paused = object.clone();
        paused["spec"]["paused"] = json!(true);
        assert_eq!(
            mutate_with(kind, &paused, &[], &creating(&["app"])),
            None,
            "its own pause"
        );
        for kind in [WorkloadKind::StatefulSet, WorkloadKind::DaemonSet] {
            assert_eq!(
                mutate_with(kind, &object, &[], &creating(&["app"])),
                None,
                "{kind} has no pause"
            );
        }
        assert_eq!(
            mutate_with(kind, &deployment("app", None, false), &[], &creating(&["app"])),
            None,
            "not opted in"
        );
    }

    #[test]
    fn only_names_no_set_claims_are_looked_up() {
        let sets = [set(1, 1, vec![])];
        for claimed in ["app", "app-2222222222", "app-hhhhhhhhhh"] {
            assert!(
                unclaimed(&deployment(claimed, None, true), &sets, 8).is_empty(),
                "{claimed}"
            );
        }
        assert_eq!(unclaimed(&deployment("plain", None, true), &sets, 8), ["plain"]);
        assert!(
            unclaimed(&deployment("plain", None, true), &sets, 0).is_empty(),
            "bounded"
        );
        assert!(
            unclaimed(&deployment("plain", None, false), &sets, 8).is_empty(),
            "not opted in"
        );
    }
}
