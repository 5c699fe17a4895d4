//! Which references of a workload move to a set's current revision, and which are left alone because a
//! rollback pinned them.
//!
//! The record that tells the two apart is [`WorkloadStatus::rolled_out`] in the set's status: the last
//! revision cmset saw the workload run while that revision was current. It cannot live on the workload:
//! `kubectl rollout undo` restores a Deployment's annotations from the ReplicaSet it returns to, so a
//! record there would be rolled back too and cmset would fight every rollback.
//!
//! - A reference to the bare set name always moves (that is how a workload opts in).
//! - A reference to an older revision moves when the record is not the current revision: cmset never got
//!   the workload onto it (a crash between creating the revision and patching the workload, or a workload
//!   that appeared later).
//! - It stays when the record is the current revision: the workload ran the current revision and someone
//!   chose to go back. It stays until the set's content changes, which makes a new current revision.
//!
//! If the status is lost (restored from a backup without status, say), the record is derived again from
//! the workload's retained ReplicaSets/ControllerRevisions: one naming the current revision means the
//! workload ran it. That can only err towards leaving a workload pinned, never towards fighting a rollback.
//! [`rollout_record`] is that rule, for every target ([`SetTarget::observed`]) and so for every caller of
//! [`crate::rollout::decide`].

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{WorkloadState, WorkloadStatus, labels};
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use serde_json::{Value, json};

use crate::revisions::naming::refers_to_set;
use crate::rollout::waves::Gate;
use crate::set::SetRef;
use crate::workloads::observe::{HistoryObject, RevisionView, WorkloadKind, WorkloadView};
use crate::workloads::refs::{self, NameChange, Referenced};

/// What a workload needs to know about one set to decide its references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetTarget {
    /// The kind of its revisions: only references to that kind are its to move.
    pub kind: Referenced,
    pub name: String,
    /// The current revision's name.
    pub current: String,
    /// Names of every known revision of the set, current included.
    pub revisions: BTreeSet<String>,
    /// The rollout record for the workload being planned.
    pub rolled_out: Option<String>,
    /// Whether the rollout of the current revision lets the workload move (see [`crate::rollout::waves`]).
    pub gate: Gate,
    /// The set's strategy is `Immediate`: a reference to an older revision always moves to the
    /// current one, even after a rollback (its old copy may be revoked).
    pub immediate: bool,
}

impl SetTarget {
    /// The target for `workload_uid`, or `None` while the set's status does not yet describe its spec
    /// (its controller has not caught up). Acting on a half-updated set could roll a workload twice.
    pub fn from_set(set: SetRef<'_>, workload_uid: &str) -> Option<Self> {
        Self::settled(set, workload_uid, &[])
    }

    /// [`Self::from_set`], with the workload's retained history for a lost rollout record.
    fn settled(set: SetRef<'_>, workload_uid: &str, history: &[HistoryObject]) -> Option<Self> {
        let status = set.status()?;
        if status.observed_generation != set.generation() {
            return None;
        }
        let current = status.current_revision.clone()?;
        let revisions = status.history.iter().map(|h| h.name.clone()).collect();
        Some(Self::new(set, current, revisions, workload_uid, history))
    }

    /// The target for `workload_uid` from what was observed directly: the set's spec (through
    /// `identity`, its [content identity](crate::set::Content::identity), `None` when the spec is
    /// invalid or its identity is not known to the observer) and the revision objects labelled for it.
    /// The current revision is the one holding the spec's content, found exactly as the set planner
    /// finds it; until it exists there is no target (`None`), so a workload never names a revision that
    /// is not there yet. Without an identity, the target is the one the status records once it
    /// describes the spec ([`Self::from_set`]).
    ///
    /// This needs no status round trip: a workload moves as soon as its revision exists, and the set's
    /// status is written once, when the move is done. The status still supplies the rollout record, and,
    /// for an invalid spec, the last good revision.
    pub fn observed(
        set: SetRef<'_>,
        identity: Option<&str>,
        revisions: &[RevisionView],
        workload_uid: &str,
    ) -> Option<Self> {
        Self::observed_seeing(set, identity, revisions, workload_uid, &[])
    }

    /// [`Self::observed`], knowing the retained ReplicaSets and ControllerRevisions of the namespace
    /// (`history`, of any owner): when the status has no rollout record for the workload, they tell
    /// whether it ran the current revision (see [`rollout_record`]).
    pub(crate) fn observed_seeing(
        set: SetRef<'_>,
        identity: Option<&str>,
        revisions: &[RevisionView],
        workload_uid: &str,
        history: &[HistoryObject],
    ) -> Option<Self> {
        let Some(identity) = identity else {
            return Self::settled(set, workload_uid, history);
        };
        let uid = set.uid();
        // Borrowed, never cloned: the set planner asks this once per workload that reads the set, and
        // a revision carries an owner reference per history object that runs it.
        let owned = revisions
            .iter()
            .filter(|r| r.is_controlled_by(&uid) && !r.being_deleted);
        // Found exactly as the set planner finds it, so both agree on which revision is current.
        let current = crate::revisions::revision::revision_with_content(set, owned.clone(), identity)?
            .name
            .clone();
        let mut names: BTreeSet<String> = owned.map(|r| r.name.clone()).collect();
        names.extend(
            set.status()
                .iter()
                .flat_map(|s| s.history.iter().map(|h| h.name.clone())),
        );
        Some(Self::new(set, current, names, workload_uid, history))
    }

    /// The target of `set` with `current` among `revisions`, its gate open.
    fn new(
        set: SetRef<'_>,
        current: String,
        mut revisions: BTreeSet<String>,
        workload_uid: &str,
        history: &[HistoryObject],
    ) -> Self {
        revisions.insert(current.clone());
        let rolled_out = rollout_record(set, &current, workload_uid, history);
        Self {
            kind: set.kind().revision_kind(),
            name: set.name().to_string(),
            current,
            revisions,
            rolled_out,
            gate: Gate::Open,
            immediate: set.immediate(),
        }
    }

    /// Whether `name` refers to this set at all: its bare name or a name of its revisions' form, by
    /// [`refers_to_set`], the rule every part of cmset asks.
    pub fn claims(&self, name: &str) -> bool {
        refers_to_set(&self.name, name)
    }

    /// Whether this set decides where a reference to `name` points: a name it claims that is its bare
    /// name or a revision it knows. A name merely of a revision's form is left alone: nothing says it
    /// ever was one of this set's revisions.
    pub fn decides(&self, name: &str) -> bool {
        self.claims(name) && (name == self.name || self.revisions.contains(name))
    }

    /// The target with the gate the rollout of its current revision sets for this workload.
    pub fn gated(self, gate: Gate) -> Self {
        Self { gate, ..self }
    }

    /// Where a reference to `name` should point, if it should change.
    pub fn retarget(&self, name: &str) -> Option<String> {
        match &self.gate {
            Gate::Open => {}
            Gate::Held { keep } => {
                // Only a bare name moves, and to what the workload ran, if known.
                return (name == self.name).then(|| keep.clone().unwrap_or_else(|| self.current.clone()));
            }
            Gate::RollBack { to } => {
                return (name == self.current || name == self.name).then(|| to.clone());
            }
        }
        if name == self.name {
            return Some(self.current.clone());
        }
        if name == self.current || !self.revisions.contains(name) {
            return None;
        }
        let pinned = !self.immediate && self.rolled_out.as_deref() == Some(self.current.as_str());
        (!pinned).then(|| self.current.clone())
    }
}

/// The rollout record of the workload with `workload_uid` for `set`, whose current revision is
/// `current`: the one the set's status keeps (see the [module](self) documentation). When the status
/// keeps none (it was lost, or the workload is new to it), one of the workload's retained ReplicaSets or
/// ControllerRevisions (among `history`, of any owner) naming `current` shows that it ran it: the record
/// is `current`, and a reference to an older revision is a rollback to leave alone. An observer that
/// passes no history goes by the status alone: after a loss of status it learns of such a rollback once
/// the set planner (which reads history) has recorded it.
pub fn rollout_record(
    set: SetRef<'_>,
    current: &str,
    workload_uid: &str,
    history: &[HistoryObject],
) -> Option<String> {
    let status = set.status();
    let recorded = status
        .and_then(|s| s.workloads.iter().find(|w| w.uid == workload_uid))
        .and_then(|w| w.rolled_out.clone())
        .or_else(|| {
            // A settled workload's record is kept as its UID alone (see `crate::revisions::fit`).
            status
                .filter(|s| crate::revisions::fit::is_settled_on(s, current, workload_uid))
                .map(|_| current.to_string())
        });
    let kind = set.kind().revision_kind();
    let ran_current = || {
        history
            .iter()
            .any(|h| h.owner_uid.as_deref() == Some(workload_uid) && h.referenced.contains(kind, current))
    };
    recorded.or_else(|| ran_current().then(|| current.to_string()))
}

/// The changes to make to one workload, across every set it references, so that it rolls once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadPlan {
    pub changes: Vec<NameChange>,
    /// The template lacks cmset's label; it is added in the same patch (never on its own: any template
    /// change rolls the pods).
    pub add_managed_label: bool,
}

impl WorkloadPlan {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The guarded JSON patch for a workload of `kind` as `object` shows it (its stored form).
    pub fn json_patch(&self, kind: WorkloadKind, uid: &str, object: &Value) -> Patch {
        let extra = self.managed_label_operations(kind, object);
        refs::json_patch(uid, kind.pod_spec(), &self.changes, extra)
    }

    /// The patch a mutating admission webhook returns: the same changes, guarded by `test` ops on the
    /// object being admitted, without the UID guard (an object being created has no UID yet).
    pub fn admission_patch(&self, kind: WorkloadKind, object: &Value) -> Patch {
        let mut operations = refs::change_operations(kind.pod_spec(), &self.changes);
        operations.extend(self.managed_label_operations(kind, object));
        Patch(operations)
    }

    /// The `add`s of cmset's label to the pod template when it lacks it, and to the metadata of what
    /// the kind makes from it (a CronJob's job template), so that those objects can be watched by it.
    fn managed_label_operations(&self, kind: WorkloadKind, object: &Value) -> Vec<PatchOperation> {
        if !self.add_managed_label {
            return Vec::new();
        }
        std::iter::once(kind.template_metadata())
            .chain(kind.spec().managed_metadata.iter().map(|m| m.to_string()))
            .filter_map(|metadata| managed_label_operation(&metadata, object))
            .collect()
    }
}

/// The `add` of cmset's label to the object metadata at `metadata` in `object`, unless it is there: of
/// the label alone, of the whole map when the metadata has no labels, or of the whole metadata when
/// there is none (an `add` needs its parent to exist).
fn managed_label_operation(metadata: &str, object: &Value) -> Option<PatchOperation> {
    let label = json!({ labels::MANAGED_TEMPLATE: "true" });
    let labels_path = format!("{metadata}/labels");
    let (path, value) = match object.pointer(metadata) {
        Some(Value::Object(meta)) => match meta.get("labels") {
            Some(Value::Object(present)) => {
                if present.get(labels::MANAGED_TEMPLATE).and_then(Value::as_str) == Some("true") {
                    return None;
                }
                (
                    format!(
                        "{labels_path}/{}",
                        refs::escape_pointer_token(labels::MANAGED_TEMPLATE)
                    ),
                    Value::from("true"),
                )
            }
            _ => (labels_path, label),
        },
        _ => (metadata.to_string(), json!({ "labels": label })),
    };
    let path = PointerBuf::parse(path).ok()?;
    Some(PatchOperation::Add(AddOperation { path, value }))
}

/// Plans every reference change of `workload` against `targets` (the settled sets of its namespace):
/// ConfigMap references against ConfigMapSets, Secret references against SecretSets, in one plan so
/// that the workload rolls once.
pub fn plan_workload(workload: &WorkloadView, targets: &[SetTarget]) -> WorkloadPlan {
    let changes: Vec<NameChange> = [Referenced::ConfigMap, Referenced::Secret]
        .into_iter()
        .flat_map(|kind| {
            let of_kind: Vec<&SetTarget> = targets.iter().filter(|t| t.kind == kind).collect();
            refs::plan_rewrite_to(&workload.pod_spec, kind, |name| retarget_among(&of_kind, name))
        })
        .collect();
    let add_managed_label = !changes.is_empty()
        && workload
            .template_labels
            .get(labels::MANAGED_TEMPLATE)
            .map(String::as_str)
            != Some("true");
    WorkloadPlan {
        changes,
        add_managed_label,
    }
}

/// Where a reference to `name` should point, among all the sets of the namespace. A name can refer to
/// two sets (see [`crate::revisions::naming::set_candidates`]): set `app`'s revision `app-<hash>`, and a set named
/// exactly `app-<hash>`. The ConfigMap of that name is the revision, so the set that knows it as one
/// decides; failing that, the set of that bare name.
fn retarget_among(targets: &[&SetTarget], name: &str) -> Option<String> {
    let deciding = || targets.iter().filter(|t| t.decides(name));
    deciding()
        .find(|t| t.name != name)
        .or_else(|| deciding().next())
        .and_then(|t| t.retarget(name))
}

/// The status entry of `workload` for the set `target` was decided for (by [`crate::rollout::decide`]), or
/// `None` when none of its references are the set's to decide (see [`SetTarget::decides`]).
///
/// Its state is the controller's plan with the rollout's gate open: `Current` when every reference
/// names the current revision, `Pending` when [`plan_workload`] would move one, `Pinned` when it moves
/// none (a rollback left it on an older revision). Waves, which hold workloads back or roll them back,
/// are laid over it by [`crate::rollout::waves::plan_waves`]. The rollout record moves on to the current revision
/// once the workload runs it, and is otherwise the one the target carries.
pub fn workload_status(workload: &WorkloadView, target: &SetTarget) -> Option<WorkloadStatus> {
    let current = &target.current;
    let names: Vec<String> = refs::find_refs_to(&workload.pod_spec, target.kind)
        .into_iter()
        .map(|r| r.name)
        .filter(|n| target.decides(n))
        .collect();
    let first = names.first()?.clone();
    let on_current = names.iter().all(|n| n == current);
    let open = SetTarget {
        gate: Gate::Open,
        ..target.clone()
    };
    let state = if on_current {
        WorkloadState::Current
    } else if !workload.kind.is_mutable() {
        // A Job runs the template it was created with; the next one names the current revision.
        WorkloadState::Pinned
    } else if !plan_workload(workload, &[open]).is_empty() {
        WorkloadState::Pending
    } else {
        WorkloadState::Pinned
    };
    let rolled_out = if on_current {
        Some(current.clone())
    } else {
        target.rolled_out.clone()
    };
    // Show the reference that is not current, if any: that is the interesting one.
    let revision = names.iter().find(|n| *n != current).cloned().unwrap_or(first);
    Some(WorkloadStatus {
        kind: workload.kind.to_string(),
        name: workload.name.clone(),
        uid: workload.uid.clone(),
        revision,
        state,
        rolled_out,
        ..WorkloadStatus::default()
    })
}

/// Index of previous status entries by workload UID.
pub fn previous_by_uid(set: SetRef<'_>) -> BTreeMap<String, WorkloadStatus> {
    set.status()
        .into_iter()
        .flat_map(|s| s.workloads.iter())
        .map(|w| (w.uid.clone(), w.clone()))
        .collect()
}
