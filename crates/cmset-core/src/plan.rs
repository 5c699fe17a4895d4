//! The set planner: from one ConfigMapSet and what was observed around it, every write its controller
//! should make. An unchanged world plans no write at all.

use std::collections::BTreeSet;

use cmset_api::{ConfigMapSet, ConfigMapSetStatus, RevisionStatus, WorkloadState, labels};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use crate::conditions::{self, Desired, READY, STALLED};
use crate::history::{Usage, select_prunable};
use crate::observe::{HistoryObject, RevisionView, WorkloadView};
use crate::revision::{
    collision_count, content_identity, desired_annotations, desired_labels, history_owner_reference,
    metadata_patch, new_revision, next_revision_name, set_name, set_uid,
};
use crate::rollout::{previous_by_uid, workload_status};
use crate::validate;

/// What the set controller observed, as plain data.
#[derive(Clone, Debug)]
pub struct SetInput<'a> {
    pub set: &'a ConfigMapSet,
    /// ConfigMaps labelled as revisions of this set (any owner: the planner checks ownership).
    pub revisions: &'a [RevisionView],
    /// Opted-in workloads of the set's namespace.
    pub workloads: &'a [WorkloadView],
    /// Retained ReplicaSets and ControllerRevisions of the set's namespace.
    pub history: &'a [HistoryObject],
    /// ConfigMap names referenced by Pods, once listed: the I/O layer lists Pods only when a first plan
    /// wants to prune ([`SetPlan::needs_pods`]).
    pub pod_refs: Option<&'a BTreeSet<String>>,
    pub now: Time,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    Normal,
    Warning,
}

/// An event to publish on the set once the plan's writes succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub kind: EventKind,
    pub reason: &'static str,
    pub message: String,
}

/// A revision to delete, with the UID to use as a precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prune {
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct SetPlan {
    /// A new revision ConfigMap to create.
    pub create: Option<ConfigMap>,
    /// Strategic-merge patches of existing revisions' metadata, by ConfigMap name.
    pub patches: Vec<(String, Value)>,
    pub prune: Vec<Prune>,
    /// Old revisions would be pruned, but Pods have not been consulted yet: list them and plan again.
    pub needs_pods: bool,
    pub status: ConfigMapSetStatus,
    pub events: Vec<PlannedEvent>,
}

impl SetPlan {
    /// Whether the planned status differs from the one the set has.
    pub fn status_changed(&self, set: &ConfigMapSet) -> bool {
        set.status.as_ref() != Some(&self.status)
    }

    /// Whether the plan makes no write at all.
    pub fn is_quiet(&self, set: &ConfigMapSet) -> bool {
        self.create.is_none() && self.patches.is_empty() && self.prune.is_empty() && !self.status_changed(set)
    }
}

/// Plans everything for one set.
pub fn plan_set(input: &SetInput<'_>) -> SetPlan {
    let set = input.set;
    let previous = set.status.clone().unwrap_or_default();
    if let Err(problems) = validate::validate(&set_name(set), &set.spec) {
        return plan_invalid(input, &previous, &problems);
    }
    let uid = set_uid(set);
    let owned: Vec<&RevisionView> = input
        .revisions
        .iter()
        .filter(|r| r.is_controlled_by(&uid))
        .collect();
    let identity = content_identity(set);
    let highest = owned
        .iter()
        .filter_map(|r| r.number())
        .chain(previous.revision)
        .max()
        .unwrap_or(0);
    let mut plan = SetPlan::default();

    // A revision is found by its content identity; failing that (someone removed the annotation), by
    // the collision-free name, which only this content can have. The metadata patch restores the mark.
    let plain_name = crate::naming::revision_name(&set_name(set), &identity);
    let existing = owned
        .iter()
        .filter(|r| !r.being_deleted)
        .find(|r| r.annotations.get(labels::CONTENT_HASH).map(String::as_str) == Some(identity.as_str()))
        .or_else(|| {
            owned.iter().find(|r| {
                !r.being_deleted && r.name == plain_name && !r.annotations.contains_key(labels::CONTENT_HASH)
            })
        });
    let (current, number) = match existing {
        Some(r) => {
            let unique_highest = r.number() == Some(highest)
                && owned.iter().filter(|o| o.number() == Some(highest)).count() == 1;
            let number = if unique_highest { highest } else { highest + 1 };
            if number != highest || r.number() != Some(highest) {
                plan.events.push(PlannedEvent {
                    kind: EventKind::Normal,
                    reason: "RevisionReused",
                    message: format!(
                        "Content matches existing revision {}; it is now revision {number}",
                        r.name
                    ),
                });
            }
            (r.name.clone(), number)
        }
        None => {
            let name = next_revision_name(set);
            if input.revisions.iter().any(|r| r.name == name) {
                // The name is taken by a ConfigMap of ours with other content (or one we do not control).
                return plan_collision(input, &previous, &name);
            }
            let number = highest + 1;
            let mut revision = new_revision(set, &name, number);
            // History may already name it (it was deleted by hand and is being made again): owners from
            // the start, so that creating it is the only write.
            let owners = revision.metadata.owner_references.get_or_insert_with(Vec::new);
            owners.extend(
                input
                    .history
                    .iter()
                    .filter(|h| h.referenced.contains(&name))
                    .map(history_owner_reference),
            );
            plan.create = Some(revision);
            plan.events.push(PlannedEvent {
                kind: EventKind::Normal,
                reason: "RevisionCreated",
                message: format!("Created revision {number} as ConfigMap {name}"),
            });
            (name, number)
        }
    };

    // Metadata of every existing revision: labels and annotations from the template, its number, and
    // the history objects that name it as extra owners.
    let labels_wanted = desired_labels(set);
    for r in owned.iter().filter(|r| !r.being_deleted) {
        let own_number = if r.name == current {
            number
        } else {
            r.number().unwrap_or(0)
        };
        let content = if r.name == current {
            Some(identity.clone())
        } else {
            r.annotations.get(labels::CONTENT_HASH).cloned()
        };
        let mut annotations = desired_annotations(set, own_number, content.as_deref().unwrap_or(""));
        if content.is_none() {
            annotations.remove(labels::CONTENT_HASH);
        }
        let owners: Vec<_> = input
            .history
            .iter()
            .filter(|h| h.referenced.contains(&r.name))
            .map(history_owner_reference)
            .collect();
        if let Some(patch) = metadata_patch(r, &labels_wanted, &annotations, &owners) {
            plan.patches.push((r.name.clone(), patch));
        }
    }

    // History: prune what nothing uses beyond the limit. Pods are consulted only when needed.
    let usage = Usage::new(input.workloads, input.history);
    let owned_values: Vec<RevisionView> = owned.iter().map(|r| (*r).clone()).collect();
    let candidates = select_prunable(
        &owned_values,
        &current,
        set.spec.revision_history_limit,
        &usage,
        &uid,
    );
    if !candidates.is_empty() {
        match input.pod_refs {
            None => plan.needs_pods = true,
            Some(pods) => {
                let with_pods = usage.clone().with_pods(pods);
                let prunable = select_prunable(
                    &owned_values,
                    &current,
                    set.spec.revision_history_limit,
                    &with_pods,
                    &uid,
                );
                for r in prunable {
                    plan.prune.push(Prune {
                        name: r.name.clone(),
                        uid: r.uid.clone(),
                    });
                    plan.events.push(PlannedEvent {
                        kind: EventKind::Normal,
                        reason: "RevisionPruned",
                        message: format!(
                            "Deleted revision {} ({}): unused, beyond revisionHistoryLimit {}",
                            r.number().unwrap_or(0),
                            r.name,
                            set.spec.revision_history_limit
                        ),
                    });
                }
            }
        }
    }

    // Status.
    let pruned: BTreeSet<&str> = plan.prune.iter().map(|p| p.name.as_str()).collect();
    let mut history: Vec<RevisionStatus> = owned
        .iter()
        .filter(|r| !r.being_deleted && !pruned.contains(r.name.as_str()))
        .map(|r| RevisionStatus {
            name: r.name.clone(),
            revision: if r.name == current {
                number
            } else {
                r.number().unwrap_or(0)
            },
            in_use: usage.in_use(r, &uid),
        })
        .collect();
    if plan.create.is_some() {
        history.push(RevisionStatus {
            name: current.clone(),
            revision: number,
            in_use: usage_names(&usage, &current),
        });
    }
    history.sort_by(|a, b| b.revision.cmp(&a.revision).then(a.name.cmp(&b.name)));
    let revision_names: BTreeSet<String> = history.iter().map(|h| h.name.clone()).collect();

    let previous_workloads = previous_by_uid(set);
    let mut workloads: Vec<_> = input
        .workloads
        .iter()
        .filter_map(|w| {
            workload_status(
                w,
                &set_name(set),
                &current,
                &revision_names,
                previous_workloads.get(&w.uid),
                input.history,
            )
        })
        .collect();
    workloads.sort_by(|a, b| (a.kind.as_str(), a.name.as_str()).cmp(&(b.kind.as_str(), b.name.as_str())));
    for w in &workloads {
        let was_pinned = previous_workloads
            .get(&w.uid)
            .is_some_and(|p| p.state == WorkloadState::Pinned && p.revision == w.revision);
        if w.state == WorkloadState::Pinned && !was_pinned {
            plan.events.push(PlannedEvent {
                kind: EventKind::Normal,
                reason: "WorkloadPinned",
                message: format!(
                    "{} {} runs older revision {} (rolled back); it stays there until the set's content changes",
                    w.kind, w.name, w.revision
                ),
            });
        }
    }

    let pending = workloads
        .iter()
        .filter(|w| w.state == WorkloadState::Pending)
        .count();
    let pinned = workloads
        .iter()
        .filter(|w| w.state == WorkloadState::Pinned)
        .count();
    let ready = if pending > 0 {
        Desired {
            type_: READY,
            status: false,
            reason: "RolloutPending",
            message: format!(
                "{pending} of {} workloads are being moved to revision {number} ({current})",
                workloads.len()
            ),
        }
    } else {
        Desired {
            type_: READY,
            status: true,
            reason: "RolledOut",
            message: format!(
                "Revision {number} ({current}) is current; {} of {} workloads use it, {pinned} pinned to older revisions",
                workloads.len() - pinned,
                workloads.len()
            ),
        }
    };
    let conditions = conditions::remove(&previous.conditions, STALLED);
    plan.status = ConfigMapSetStatus {
        observed_generation: set.metadata.generation,
        revision: Some(number),
        current_revision: Some(current),
        collision_count: previous.collision_count,
        conditions: conditions::set(&conditions, ready, set.metadata.generation, &input.now),
        workloads,
        history,
    };
    plan
}

fn usage_names(usage: &Usage, name: &str) -> bool {
    usage.in_use(
        &RevisionView {
            name: name.to_string(),
            ..RevisionView::default()
        },
        "",
    )
}

/// An invalid spec: report it, keep everything else as it is.
fn plan_invalid(
    input: &SetInput<'_>,
    previous: &ConfigMapSetStatus,
    problems: &[validate::Problem],
) -> SetPlan {
    let set = input.set;
    let message = validate::summary(problems);
    let was = input.set.condition(READY);
    let already_reported = was.is_some_and(|c| c.reason == "InvalidSpec" && c.message == message);
    let generation = set.metadata.generation;
    let conditions = conditions::set(
        &previous.conditions,
        Desired {
            type_: READY,
            status: false,
            reason: "InvalidSpec",
            message: message.clone(),
        },
        generation,
        &input.now,
    );
    let conditions = conditions::set(
        &conditions,
        Desired {
            type_: STALLED,
            status: true,
            reason: "InvalidSpec",
            message: message.clone(),
        },
        generation,
        &input.now,
    );
    let mut plan = SetPlan {
        status: ConfigMapSetStatus {
            observed_generation: generation,
            conditions,
            ..previous.clone()
        },
        ..SetPlan::default()
    };
    if !already_reported {
        plan.events.push(PlannedEvent {
            kind: EventKind::Warning,
            reason: "InvalidSpec",
            message,
        });
    }
    plan
}

/// The next revision's name is taken: bump the collision count so the next plan picks another name.
pub fn plan_collision(input: &SetInput<'_>, previous: &ConfigMapSetStatus, name: &str) -> SetPlan {
    let count = collision_count(input.set) + 1;
    let message = format!(
        "ConfigMap {name} already exists with other content or another owner; it is left alone and the next revision gets another name (collisionCount {count})"
    );
    let conditions = conditions::set(
        &previous.conditions,
        Desired {
            type_: READY,
            status: false,
            reason: "RevisionCollision",
            message: message.clone(),
        },
        input.set.metadata.generation,
        &input.now,
    );
    SetPlan {
        status: ConfigMapSetStatus {
            collision_count: Some(count),
            conditions,
            ..previous.clone()
        },
        events: vec![PlannedEvent {
            kind: EventKind::Warning,
            reason: "RevisionCollision",
            message,
        }],
        ..SetPlan::default()
    }
}
