//! `kubectl cmset status` (alias `why`): the set's own state, and for every workload of its namespace
//! that references it, which revision it runs and why. A ConfigMapSet is referenced through ConfigMap
//! references only, a SecretSet through Secret references only (`secretRef`, `secretKeyRef`, secret
//! volumes and projections): a `secretRef` to `app` says nothing about ConfigMapSet `app`.
//!
//! Opted-in workloads are explained from what they reference now and from the set's status, which
//! records cmset's view of each (current, pinned by a rollback, pending). When that record lags behind
//! the workload (it changed a moment ago), cmset's own decision ([`cmset_core::rollout::workload_status`])
//! is asked instead, so the plugin and the controller cannot disagree. What only the plugin sees stays
//! here: workloads without the opt-in label (the set's status never lists them, so their pod templates
//! are read) and sets whose controller has not yet made a current revision.

use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{WorkloadState, labels};
use cmset_core::naming::refers_to_set;
use cmset_core::observe::{WorkloadKind, WorkloadView};
use cmset_core::refs::{Referenced, find_refs_to};
use cmset_core::rollout::workload_status;
use cmset_core::set::{SetKind, SetRef};
use k8s_openapi::api::core::v1::PodSpec;
use serde::Serialize;

use crate::address::resource;
use crate::revisions::{ObjectName, Revision, column, current_name, serialize_kind};
use crate::style::{Palette, Role, visible};
use crate::table::{Cell, render};

/// A Deployment, StatefulSet or DaemonSet, reduced to what `status` reads.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub uid: String,
    /// The workload's own labels (where the opt-in label lives).
    pub labels: BTreeMap<String, String>,
    pub pod_spec: Option<PodSpec>,
}

/// Why a workload runs what it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum State {
    /// Runs the current revision.
    Current,
    /// Held on an older revision by a rollback until the content changes.
    Pinned,
    /// cmset is about to move it to the current revision.
    Pending,
    /// Lacks the opt-in label: cmset leaves it alone.
    NotOptedIn,
}

impl State {
    fn role(self) -> Role {
        match self {
            State::Current => Role::Good,
            State::Pinned | State::Pending => Role::Attention,
            State::NotOptedIn => Role::Muted,
        }
    }
}

/// One workload that references the set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReport {
    pub kind: String,
    pub name: String,
    pub opted_in: bool,
    /// The ConfigMap (of a ConfigMapSet) or Secret (of a SecretSet) its pod template names for this set:
    /// the revision it runs, or the bare set name. Serialized as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    /// That revision's number, `null` for the bare set name or an unknown revision.
    pub revision: Option<i64>,
    pub state: State,
    pub explanation: String,
}

/// A status condition, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// The current revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrentRevision {
    /// Serialized as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    pub revision: Option<i64>,
}

/// Everything `status` reports, as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// `ConfigMapSet` or `SecretSet`.
    #[serde(serialize_with = "serialize_kind")]
    pub kind: SetKind,
    pub set: String,
    pub namespace: String,
    pub generation: Option<i64>,
    pub observed_generation: Option<i64>,
    /// `observedGeneration` differs from `generation`: cmset has not yet acted on the latest spec.
    pub status_behind_spec: bool,
    pub current_revision: Option<CurrentRevision>,
    /// The `Ready` condition, if the set has one.
    pub ready: Option<ConditionReport>,
    /// Workloads referencing the set: opted-in ones and the others, by kind and name.
    pub workloads: Vec<WorkloadReport>,
}

/// What the plugin knows about the set's revision names and numbers.
struct Known {
    set: String,
    /// The kind of the set's revisions, so of the references that can be the set's.
    kind: Referenced,
    numbers: BTreeMap<String, Option<i64>>,
}

impl Known {
    fn new(set: SetRef<'_>, revisions: &[Revision<'_>]) -> Self {
        let mut numbers: BTreeMap<String, Option<i64>> = BTreeMap::new();
        if let Some(status) = set.status() {
            for h in &status.history {
                numbers.insert(h.name.clone(), Some(h.revision));
            }
            if let Some(current) = &status.current_revision {
                numbers.insert(current.clone(), status.revision);
            }
        }
        // The revisions themselves are the most direct record of their numbers.
        for r in revisions {
            numbers.insert(r.name.clone(), r.number);
        }
        Self {
            set: set.name().to_string(),
            kind: set.kind().revision_kind(),
            numbers,
        }
    }

    /// Whether a reference (of the set's revision kind) to `name` is a reference to the set: its bare
    /// name or one of its revisions (including one that no longer exists), by cmset's one rule,
    /// [`refers_to_set`].
    fn claims(&self, name: &str) -> bool {
        refers_to_set(&self.set, name)
    }

    fn number(&self, name: &str) -> Option<i64> {
        self.numbers.get(name).copied().flatten()
    }
}

/// The names through which `spec` references the set, in [`find_refs_to`] order, without repeats: only
/// references of the set's revision kind count.
fn set_references(spec: Option<&PodSpec>, known: &Known) -> Vec<String> {
    let mut seen = BTreeSet::new();
    spec.map(|spec| find_refs_to(spec, known.kind))
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.name)
        .filter(|n| known.claims(n) && seen.insert(n.clone()))
        .collect()
}

fn revision_phrase(number: Option<i64>, name: &str) -> String {
    match number {
        Some(n) => format!("revision {n}"),
        None => name.to_string(),
    }
}

/// The explanation of one workload, or `None` when it does not reference the set.
pub fn explain(
    set: SetRef<'_>,
    known_revisions: &[Revision<'_>],
    workload: &Workload,
) -> Option<WorkloadReport> {
    let known = Known::new(set, known_revisions);
    explain_with(set, &known, workload)
}

fn explain_with(set: SetRef<'_>, known: &Known, workload: &Workload) -> Option<WorkloadReport> {
    let refs = set_references(workload.pod_spec.as_ref(), known);
    let current = current_name(set);
    // The interesting reference: one that is not the current revision, if any.
    let shown = refs
        .iter()
        .find(|n| Some(n.as_str()) != current)
        .or(refs.first())?
        .clone();
    let report = |state: State, explanation: String| WorkloadReport {
        kind: workload.kind.to_string(),
        name: workload.name.clone(),
        opted_in: state != State::NotOptedIn,
        revision: known.number(&shown),
        object: ObjectName::new(known.kind, &shown),
        state,
        explanation,
    };

    let opt_in = workload.labels.get(labels::ENABLED).map(String::as_str);
    if opt_in != Some(labels::ENABLED_VALUE) {
        let why = match opt_in {
            None => format!(
                "not opted in: label {}={} is missing; cmset does not manage it",
                labels::ENABLED,
                labels::ENABLED_VALUE
            ),
            Some(other) => format!(
                "not opted in: label {} is {other:?}, not {:?}; cmset does not manage it",
                labels::ENABLED,
                labels::ENABLED_VALUE
            ),
        };
        return Some(report(State::NotOptedIn, why));
    }

    let current_number = current.and_then(|c| known.number(c));
    let pending = || {
        let why = match current {
            Some(c) => format!(
                "pending: cmset is moving it to {}",
                revision_phrase(current_number, c)
            ),
            None => "pending: the set has no current revision yet".to_string(),
        };
        report(State::Pending, why)
    };
    let pinned = || {
        let why = format!(
            "pinned to {} by a rollback; moves again when the set's content changes",
            revision_phrase(known.number(&shown), &shown)
        );
        report(State::Pinned, why)
    };

    let Some(current) = current else {
        // The set's controller has not made a revision yet: cmset has nothing to decide with.
        return Some(match recorded_state(set, workload, &refs) {
            Some(WorkloadState::Pinned) => pinned(),
            _ => pending(),
        });
    };
    match decided_state(set, known, workload, current, &refs)? {
        WorkloadState::Current => Some(report(State::Current, "current (updated by cmset)".to_string())),
        WorkloadState::Pinned => Some(pinned()),
        WorkloadState::Pending => Some(pending()),
        // Until the plugin shows waves, a held workload reads as pending and a rolled-back one as pinned.
        WorkloadState::Waiting => Some(pending()),
        WorkloadState::RolledBack => Some(pinned()),
    }
}

/// The state the set's status records for this workload, when the record describes what the workload
/// references now (an older record was about another template).
fn recorded_state(set: SetRef<'_>, workload: &Workload, refs: &[String]) -> Option<WorkloadState> {
    set.status()
        .into_iter()
        .flat_map(|s| s.workloads.iter())
        .find(|w| {
            (w.uid == workload.uid || (w.kind == workload.kind.as_str() && w.name == workload.name))
                && refs.contains(&w.revision)
        })
        .map(|w| w.state)
}

/// cmset's decision for an opted-in workload. On the current revision it is current. Otherwise the set's
/// record, when it describes what the workload references now, is the decision (the controller made it
/// knowing the workload's ReplicaSets, which the plugin does not read); failing that, cmset's rule
/// decides from the rollout record the status keeps.
fn decided_state(
    set: SetRef<'_>,
    known: &Known,
    workload: &Workload,
    current: &str,
    refs: &[String],
) -> Option<WorkloadState> {
    let view = WorkloadView {
        kind: workload.kind,
        name: workload.name.clone(),
        uid: workload.uid.clone(),
        pod_spec: workload.pod_spec.clone()?,
        template_labels: BTreeMap::new(),
        wave: Default::default(),
        health: Default::default(),
    };
    // Every revision the plugin knows of, and every reference of a revision's form: one that no status
    // or ConfigMap lists any more (pruned, or written by hand) still reads as a revision here.
    let revisions: BTreeSet<String> = known
        .numbers
        .keys()
        .chain(refs.iter().filter(|n| **n != known.set))
        .cloned()
        .collect();
    let previous = set
        .status()
        .into_iter()
        .flat_map(|s| s.workloads.iter())
        .find(|w| w.uid == workload.uid);
    let decided = workload_status(&view, known.kind, &known.set, current, &revisions, previous, &[])?.state;
    Some(match (decided, recorded_state(set, workload, refs)) {
        (WorkloadState::Current, _) => WorkloadState::Current,
        (_, Some(recorded @ (WorkloadState::Pinned | WorkloadState::Pending))) => recorded,
        (decided, _) => decided,
    })
}

/// The whole report: the set, and every workload among `workloads` that references it, by kind and
/// name.
pub fn status_report(set: SetRef<'_>, revisions: &[Revision<'_>], workloads: &[Workload]) -> StatusReport {
    let known = Known::new(set, revisions);
    let mut reports: Vec<(WorkloadKind, WorkloadReport)> = workloads
        .iter()
        .filter_map(|w| explain_with(set, &known, w).map(|r| (w.kind, r)))
        .collect();
    reports.sort_by(|(ka, a), (kb, b)| ka.cmp(kb).then_with(|| a.name.cmp(&b.name)));
    let generation = set.generation();
    let observed_generation = set.status().and_then(|s| s.observed_generation);
    StatusReport {
        kind: set.kind(),
        set: set.name().to_string(),
        namespace: set.metadata().namespace.clone().unwrap_or_default(),
        generation,
        observed_generation,
        status_behind_spec: observed_generation != generation,
        current_revision: current_name(set).map(|c| CurrentRevision {
            object: ObjectName::new(known.kind, c),
            revision: known.number(c),
        }),
        ready: set.condition("Ready").map(|c| ConditionReport {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        }),
        workloads: reports.into_iter().map(|(_, r)| r).collect(),
    }
}

/// Keeps the workloads `selector` names: `NAME`, or `KIND/NAME` where KIND is a kind or its kubectl short
/// name, any case (`deployment/web`, `deploy/web`, `sts/db`, `ds/agent`).
pub fn select(report: &mut StatusReport, selector: &str) -> Result<(), String> {
    let (kind, name) = match selector.split_once('/') {
        Some((kind, name)) => {
            let kind = match kind.to_ascii_lowercase().as_str() {
                "deployment" | "deployments" | "deploy" => WorkloadKind::Deployment,
                "statefulset" | "statefulsets" | "sts" => WorkloadKind::StatefulSet,
                "daemonset" | "daemonsets" | "ds" => WorkloadKind::DaemonSet,
                other => {
                    return Err(format!(
                        "unknown workload kind {other:?}: use deployment, statefulset or daemonset"
                    ));
                }
            };
            (Some(kind), name)
        }
        None => (None, selector),
    };
    report
        .workloads
        .retain(|w| w.name == name && kind.is_none_or(|k| k.as_str() == w.kind));
    if report.workloads.is_empty() {
        return Err(format!(
            "no Deployment, StatefulSet or DaemonSet {selector:?} in namespace {:?} references {} {:?}",
            report.namespace,
            resource(report.kind),
            report.set
        ));
    }
    Ok(())
}

/// The report as text: a few lines about the set, then a table of workloads.
pub fn render_text(report: &StatusReport, palette: Palette) -> String {
    let mut out = String::new();
    let mut field = |name: &str, value: String, role: Option<Role>| {
        out.push_str(&format!(
            "{:<14}{}\n",
            format!("{name}:"),
            palette.paint(role, &visible(&value))
        ));
    };
    let revision_kind = report.kind.revision_kind();
    field(
        report.kind.as_str(),
        format!("{} (namespace {})", report.set, report.namespace),
        None,
    );
    match &report.current_revision {
        Some(c) => field(
            "Current",
            format!(
                "{}, {revision_kind} {}",
                revision_phrase(c.revision, "revision ?"),
                c.object.name()
            ),
            None,
        ),
        None => field("Current", "none yet".to_string(), Some(Role::Attention)),
    }
    match &report.ready {
        Some(c) => {
            let role = match c.status.as_str() {
                "True" => Role::Good,
                "False" => Role::Bad,
                _ => Role::Attention,
            };
            let mut text = format!("{} ({})", c.status, c.reason);
            if !c.message.is_empty() {
                text.push_str(&format!(": {}", c.message));
            }
            field("Ready", text, Some(role));
        }
        None => field(
            "Ready",
            "unknown: no Ready condition yet".to_string(),
            Some(Role::Attention),
        ),
    }
    let number = |g: Option<i64>| g.map_or("none".to_string(), |g| g.to_string());
    if report.status_behind_spec {
        field(
            "Generation",
            format!(
                "{}, observed {}: status is behind the spec",
                number(report.generation),
                number(report.observed_generation)
            ),
            Some(Role::Bad),
        );
    } else {
        field(
            "Generation",
            format!(
                "{}, observed {}",
                number(report.generation),
                number(report.observed_generation)
            ),
            None,
        );
    }
    out.push('\n');

    if report.workloads.is_empty() {
        out.push_str(&format!(
            "No Deployment, StatefulSet or DaemonSet in namespace {} references {}.\n",
            visible(&report.namespace),
            visible(&report.set)
        ));
        return out;
    }
    let rows: Vec<Vec<Cell>> = report
        .workloads
        .iter()
        .map(|w| {
            vec![
                Cell::new(format!("{}/{}", w.kind, w.name)),
                Cell::new(w.revision.map_or("-".to_string(), |n| n.to_string())),
                Cell::new(w.object.name()),
                Cell::styled(&w.explanation, Some(w.state.role())),
            ]
        })
        .collect();
    out.push_str(&render(
        &["WORKLOAD", "REVISION", column(revision_kind), "WHY"],
        &rows,
        palette,
    ));
    out
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSet, SecretSet};
    use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;

    const T: &str = "2026-01-01T00:00:00Z";

    fn cms() -> Vec<ConfigMap> {
        vec![
            revision("app-ffffffffff", Some(1), T, &[]),
            revision("app-bbbbbbbbbb", Some(2), T, &[]),
            revision("app-cccccccccc", Some(3), T, &[]),
        ]
    }

    fn spec(names: &[&str]) -> PodSpec {
        PodSpec {
            containers: vec![Container {
                name: "app".into(),
                env_from: Some(
                    names
                        .iter()
                        .map(|n| EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: n.to_string(),
                                optional: None,
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn deployment(name: &str, opted_in: Option<&str>, refs: &[&str]) -> Workload {
        Workload {
            kind: WorkloadKind::Deployment,
            name: name.into(),
            uid: format!("{name}-uid"),
            labels: opted_in
                .map(|v| BTreeMap::from([(labels::ENABLED.to_string(), v.to_string())]))
                .unwrap_or_default(),
            pod_spec: Some(spec(refs)),
        }
    }

    fn ready_set(workloads: Vec<cmset_api::WorkloadStatus>) -> ConfigMapSet {
        let mut s = set(Some("app-cccccccccc"), Some(3), workloads);
        s.status.as_mut().unwrap().conditions = vec![Condition {
            type_: "Ready".into(),
            status: "True".into(),
            reason: "RolledOut".into(),
            message: "every opted-in workload runs revision 3 or is pinned".into(),
            observed_generation: Some(3),
            last_transition_time: Time(T.parse().unwrap()),
        }];
        s
    }

    fn why(set: &ConfigMapSet, w: &Workload) -> Option<(State, String, Option<i64>, String)> {
        let cms = cms();
        let revs = revisions_of(SetRef::from(set), &cms);
        explain(SetRef::from(set), &revs, w)
            .map(|r| (r.state, r.object.name().to_string(), r.revision, r.explanation))
    }

    #[test]
    fn explanations_for_each_state() {
        let set = ready_set(vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("Deployment", "old", "app-ffffffffff", WorkloadState::Pinned),
            workload("Deployment", "late", "app-bbbbbbbbbb", WorkloadState::Pending),
        ]);
        let on = Some("true");
        let cases = [
            (
                deployment("web", on, &["app-cccccccccc"]),
                Some((
                    State::Current,
                    "app-cccccccccc",
                    Some(3),
                    "current (updated by cmset)",
                )),
            ),
            (
                deployment("old", on, &["app-ffffffffff"]),
                Some((
                    State::Pinned,
                    "app-ffffffffff",
                    Some(1),
                    "pinned to revision 1 by a rollback; moves again when the set's content changes",
                )),
            ),
            (
                deployment("late", on, &["app-bbbbbbbbbb"]),
                Some((
                    State::Pending,
                    "app-bbbbbbbbbb",
                    Some(2),
                    "pending: cmset is moving it to revision 3",
                )),
            ),
            (
                deployment("legacy", None, &["app"]),
                Some((
                    State::NotOptedIn,
                    "app",
                    None,
                    "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
                )),
            ),
            (
                deployment("off", Some("false"), &["app-cccccccccc"]),
                Some((
                    State::NotOptedIn,
                    "app-cccccccccc",
                    Some(3),
                    "not opted in: label cmset.dev/enabled is \"false\", not \"true\"; cmset does not manage it",
                )),
            ),
            // A new opted-in workload naming the bare set: cmset is about to point it at a revision.
            (
                deployment("new", on, &["app"]),
                Some((
                    State::Pending,
                    "app",
                    None,
                    "pending: cmset is moving it to revision 3",
                )),
            ),
            // Other ConfigMaps, and sets whose names merely start the same, are not references.
            (
                deployment("other", on, &["app-config-dddddddddd", "unrelated"]),
                None,
            ),
        ];
        for (w, want) in cases {
            let got = why(&set, &w);
            let want = want.map(|(s, c, n, e)| (s, c.to_string(), n, e.to_string()));
            assert_eq!(got, want, "{}", w.name);
        }
    }

    #[test]
    fn a_lagging_record_is_replaced_by_cmsets_rule() {
        // The status still says `web` is current, but a rollback just named revision 1; the record of the
        // rollout (rolledOut = current) shows it is a rollback: pinned.
        let mut entry = workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current);
        entry.rolled_out = Some("app-cccccccccc".into());
        let set = ready_set(vec![entry]);
        let w = deployment("web", Some("true"), &["app-ffffffffff"]);
        assert_eq!(why(&set, &w).unwrap().0, State::Pinned);
        // Without that record, cmset would move it: pending.
        let set = ready_set(vec![]);
        assert_eq!(why(&set, &w).unwrap().0, State::Pending);
        // A reference to a pruned revision (no ConfigMap, not in history) is still recognised.
        let w = deployment("web", Some("true"), &["app-dddddddddd"]);
        let (state, cm, number, _) = why(&set, &w).unwrap();
        assert_eq!(
            (state, cm.as_str(), number),
            (State::Pending, "app-dddddddddd", None)
        );
    }

    #[test]
    fn a_set_without_status() {
        let mut set = ready_set(vec![]);
        set.status = None;
        let w = deployment("web", Some("true"), &["app"]);
        let cms = cms();
        let set = SetRef::from(&set);
        let revs = revisions_of(set, &cms);
        let r = explain(set, &revs, &w).unwrap();
        assert_eq!(r.state, State::Pending);
        assert_eq!(r.explanation, "pending: the set has no current revision yet");
        let report = status_report(set, &revs, &[w]);
        assert!(report.status_behind_spec);
        let text = render_text(&report, Palette::PLAIN);
        assert!(text.contains("Current:      none yet\n"), "{text}");
        assert!(
            text.contains("Ready:        unknown: no Ready condition yet\n"),
            "{text}"
        );
        assert!(
            text.contains("Generation:   3, observed none: status is behind the spec\n"),
            "{text}"
        );
    }

    fn full_report() -> StatusReport {
        let set = ready_set(vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("StatefulSet", "db", "app-ffffffffff", WorkloadState::Pinned),
        ]);
        let mut db = deployment("db", Some("true"), &["app-ffffffffff"]);
        db.kind = WorkloadKind::StatefulSet;
        db.uid = "db-uid".into();
        let workloads = [
            db,
            deployment("web", Some("true"), &["app-cccccccccc"]),
            deployment("legacy", None, &["app"]),
            deployment("unrelated", Some("true"), &["other"]),
        ];
        let cms = cms();
        let set = SetRef::from(&set);
        status_report(set, &revisions_of(set, &cms), &workloads)
    }

    #[test]
    fn text() {
        let text = render_text(&full_report(), Palette::PLAIN);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "ConfigMapSet: app (namespace demo)");
        assert_eq!(lines[1], "Current:      revision 3, ConfigMap app-cccccccccc");
        assert_eq!(
            lines[2],
            "Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned"
        );
        assert_eq!(lines[3], "Generation:   3, observed 3");
        assert_eq!(lines[4], "");
        assert_eq!(
            lines[5..].join("\n"),
            "\
WORKLOAD            REVISION   CONFIGMAP        WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
StatefulSet/db      1          app-ffffffffff   pinned to revision 1 by a rollback; moves again when the set's content changes"
        );
        let coloured = render_text(&full_report(), Palette::COLOR);
        assert!(coloured.contains("\u{1b}[32mcurrent (updated by cmset)\u{1b}[0m"));
        assert!(coloured.contains("\u{1b}[32mTrue (RolledOut)"));
        assert!(!crate::style::has_escapes(&text));
    }

    #[test]
    fn status_behind_spec_is_said() {
        let mut set = ready_set(vec![]);
        set.metadata.generation = Some(4);
        let report = status_report(SetRef::from(&set), &[], &[]);
        assert!(report.status_behind_spec);
        let text = render_text(&report, Palette::PLAIN);
        assert!(
            text.contains("Generation:   4, observed 3: status is behind the spec\n"),
            "{text}"
        );
        assert!(
            text.ends_with("No Deployment, StatefulSet or DaemonSet in namespace demo references app.\n")
        );
    }

    #[test]
    fn json_shape() {
        let value = serde_json::to_value(full_report()).unwrap();
        assert_eq!(value["kind"], "ConfigMapSet");
        assert_eq!(value["set"], "app");
        assert_eq!(value["namespace"], "demo");
        assert_eq!(value["generation"], 3);
        assert_eq!(value["observedGeneration"], 3);
        assert_eq!(value["statusBehindSpec"], false);
        assert_eq!(
            value["currentRevision"],
            json!({"configMap": "app-cccccccccc", "revision": 3})
        );
        assert_eq!(value["ready"]["status"], "True");
        assert_eq!(value["ready"]["reason"], "RolledOut");
        assert_eq!(
            value["workloads"][0],
            json!({
                "kind": "Deployment",
                "name": "legacy",
                "optedIn": false,
                "configMap": "app",
                "revision": null,
                "state": "notOptedIn",
                "explanation": "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
            })
        );
        let states: Vec<&str> = value["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["state"].as_str().unwrap())
            .collect();
        assert_eq!(states, ["notOptedIn", "current", "pinned"]);
    }

    #[test]
    fn selecting_one_workload() {
        let mut r = full_report();
        select(&mut r, "web").unwrap();
        assert_eq!(r.workloads.len(), 1);
        let mut r = full_report();
        select(&mut r, "sts/db").unwrap();
        assert_eq!(r.workloads[0].kind, "StatefulSet");
        let mut r = full_report();
        assert!(
            select(&mut r, "Deployment/db")
                .unwrap_err()
                .contains("no Deployment, StatefulSet")
        );
        let mut r = full_report();
        assert!(
            select(&mut r, "pod/web")
                .unwrap_err()
                .contains("unknown workload kind")
        );
    }

    /// A pod spec naming `name` through one form of Secret reference.
    fn secret_spec(form: &str, name: &str) -> PodSpec {
        let app = json!({"name": "app"});
        let value = match form {
            "volume" => json!({
                "volumes": [{"name": "v", "secret": {"secretName": name}}],
                "containers": [app],
            }),
            "projected" => json!({
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": name}}]}}],
                "containers": [app],
            }),
            "envFrom" => json!({
                "containers": [{"name": "app", "envFrom": [{"secretRef": {"name": name}}]}],
            }),
            "secretKeyRef" => json!({
                "containers": [{"name": "app", "env": [{
                    "name": "PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": name, "key": "password"}},
                }]}],
            }),
            other => panic!("no form {other}"),
        };
        serde_json::from_value(value).unwrap()
    }

    fn secret_deployment(name: &str, opted_in: bool, form: &str, secret: &str) -> Workload {
        Workload {
            pod_spec: Some(secret_spec(form, secret)),
            ..deployment(name, opted_in.then_some("true"), &[])
        }
    }

    /// SecretSet `app`, ready on revision 3, with `web` current, `old` pinned and `late` pending.
    fn ready_secret_set() -> SecretSet {
        let mut s = secret_set(
            Some("app-cccccccccc"),
            Some(3),
            vec![
                workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
                workload("Deployment", "old", "app-ffffffffff", WorkloadState::Pinned),
                workload("Deployment", "late", "app-bbbbbbbbbb", WorkloadState::Pending),
            ],
        );
        s.status.as_mut().unwrap().conditions = ready_set(vec![]).status.unwrap().conditions;
        s
    }

    /// Its revision Secrets, holding values no output may show.
    fn secrets() -> Vec<Secret> {
        vec![
            secret_revision("app-ffffffffff", Some(1), T, None, &[("password", SECRET_TEXT)]),
            secret_revision("app-bbbbbbbbbb", Some(2), T, None, &[("password", SECRET_BINARY)]),
            secret_revision("app-cccccccccc", Some(3), T, None, &[("password", SECRET_OTHER)]),
        ]
    }

    fn secret_report(workloads: &[Workload]) -> StatusReport {
        let set = ready_secret_set();
        let secrets = secrets();
        let set = SetRef::from(&set);
        status_report(set, &revisions_of(set, &secrets), workloads)
    }

    #[test]
    fn a_secret_set_is_explained_through_secret_references_only() {
        let set = ready_secret_set();
        let secrets = secrets();
        let set = SetRef::from(&set);
        let revs = revisions_of(set, &secrets);
        let why =
            |w: &Workload| explain(set, &revs, w).map(|r| (r.state, r.object, r.revision, r.explanation));
        let secret = |name: &str| ObjectName::Secret(name.into());
        let cases = [
            (
                secret_deployment("web", true, "volume", "app-cccccccccc"),
                Some((
                    State::Current,
                    secret("app-cccccccccc"),
                    Some(3),
                    "current (updated by cmset)",
                )),
            ),
            (
                secret_deployment("old", true, "projected", "app-ffffffffff"),
                Some((
                    State::Pinned,
                    secret("app-ffffffffff"),
                    Some(1),
                    "pinned to revision 1 by a rollback; moves again when the set's content changes",
                )),
            ),
            (
                secret_deployment("late", true, "secretKeyRef", "app-bbbbbbbbbb"),
                Some((
                    State::Pending,
                    secret("app-bbbbbbbbbb"),
                    Some(2),
                    "pending: cmset is moving it to revision 3",
                )),
            ),
            (
                secret_deployment("legacy", false, "envFrom", "app"),
                Some((
                    State::NotOptedIn,
                    secret("app"),
                    None,
                    "not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it",
                )),
            ),
            // A ConfigMap reference names no Secret, even with the set's revision's name.
            (deployment("configmaps", Some("true"), &["app-cccccccccc"]), None),
            // Another SecretSet's revisions, and plain Secrets, are not references to this one.
            (
                secret_deployment("other", true, "envFrom", "app-config-dddddddddd"),
                None,
            ),
        ];
        for (w, want) in cases {
            let want = want.map(|(s, o, n, e)| (s, o, n, e.to_string()));
            assert_eq!(why(&w), want, "{}", w.name);
        }
    }

    #[test]
    fn a_config_map_set_ignores_secret_references_of_its_name() {
        let set = ready_set(vec![]);
        let cms = cms();
        let set = SetRef::from(&set);
        let revs = revisions_of(set, &cms);
        for form in ["volume", "projected", "envFrom", "secretKeyRef"] {
            for name in ["app", "app-cccccccccc"] {
                let w = secret_deployment("web", true, form, name);
                assert_eq!(explain(set, &revs, &w), None, "{form} {name}");
            }
        }
    }

    #[test]
    fn a_secret_set_s_status_text_and_json() {
        let report = secret_report(&[
            secret_deployment("web", true, "envFrom", "app-cccccccccc"),
            secret_deployment("legacy", false, "volume", "app"),
            deployment("configmaps", Some("true"), &["app-cccccccccc"]),
        ]);
        let text = render_text(&report, Palette::PLAIN);
        assert_eq!(
            text,
            "\
SecretSet:    app (namespace demo)
Current:      revision 3, Secret app-cccccccccc
Ready:        True (RolledOut): every opted-in workload runs revision 3 or is pinned
Generation:   3, observed 3

WORKLOAD            REVISION   SECRET           WHY
Deployment/legacy   -          app              not opted in: label cmset.dev/enabled=true is missing; cmset does not manage it
Deployment/web      3          app-cccccccccc   current (updated by cmset)
"
        );
        let value = serde_json::to_value(&report).unwrap();
        assert_eq!(value["kind"], "SecretSet");
        assert_eq!(
            value["currentRevision"],
            json!({"secret": "app-cccccccccc", "revision": 3})
        );
        assert_eq!(
            value["workloads"][1],
            json!({
                "kind": "Deployment",
                "name": "web",
                "optedIn": true,
                "secret": "app-cccccccccc",
                "revision": 3,
                "state": "current",
                "explanation": "current (updated by cmset)",
            })
        );
        let yaml = crate::output::structured(&report, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        assert!(yaml.starts_with("kind: SecretSet\nset: app\n"), "{yaml}");
        for out in [text, value.to_string(), yaml] {
            assert!(!out.contains("configMap") && !out.contains("ConfigMap "), "{out}");
            assert_no_secret_values(&out);
        }
    }

    #[test]
    fn selecting_a_workload_of_a_secret_set() {
        let mut report = secret_report(&[secret_deployment("web", true, "envFrom", "app-cccccccccc")]);
        let err = select(&mut report, "deploy/api").unwrap_err();
        assert_eq!(
            err,
            "no Deployment, StatefulSet or DaemonSet \"deploy/api\" in namespace \"demo\" references \
             secretset \"app\""
        );
        let mut report = secret_report(&[secret_deployment("web", true, "envFrom", "app-cccccccccc")]);
        select(&mut report, "deploy/web").unwrap();
        assert_eq!(report.workloads.len(), 1);
    }
}
