//! `kubectl cmset status` (alias `why`): the set's own state, and for every workload of its namespace
//! that references it, which revision it runs and why. A ConfigMapSet is referenced through ConfigMap
//! references only, a SecretSet through Secret references only (`secretRef`, `secretKeyRef`, secret
//! volumes and projections): a `secretRef` to `app` says nothing about ConfigMapSet `app`.
//!
//! Opted-in workloads are explained by cmset's one decision ([`cmset_core::rollout::decide::target`]), asked
//! from what the plugin lists (the set, its revisions, the workload's pod template and wave) exactly as
//! the workload controller, the admission webhook and the set planner ask it, so that none of them can
//! disagree: current, pending, pinned by a rollback, waiting for its wave or held by a failed rollout,
//! rolled back. A set that holds its content is decided from that content's identity, as the
//! controller decides it, so the plugin is not behind when the set's status is; in source mode (the
//! plugin does not read the source) and for an invalid spec, from what the status records. The set's
//! status entry for a workload supplies the messages (why it waits, why it was rolled back). What only
//! the plugin sees stays here: workloads without the opt-in label (the set's status never lists them,
//! so their pod templates are read) and sets whose controller has not yet made a revision for the spec.
//!
//! A set rolled out in waves (`status.rollout`, workloads labelled `cmset.dev/wave`) also gets a
//! rollout line (the wave in progress, its stabilization window, or why the rollout failed) and a WAVE
//! column. `Waiting` and `RolledBack` are decided by the controller from the workloads' health, which
//! the plugin does not read: the rollout the status records gates the decision
//! ([`cmset_core::rollout::waves::gate`]), and the gate says who waits and who is rolled back. A set without
//! waves prints exactly as it did before waves existed.
//!
//! The folder splits what the command shows: `workloads` explains each workload (the decision and its
//! words), `rollout` the rollout in waves with its change windows, override and analysis,
//! `notifications` who hears of the set's rollouts, and `render` lays the report out as text; `known`
//! is what they all read of the set. This module assembles the report (`-o json|yaml` is its
//! serialization) and picks one workload out of it.

mod known;
mod notifications;
mod render;
mod rollout;
mod workloads;

#[cfg(test)]
mod fixtures;

use cmset_core::set::{SetKind, SetRef};
use cmset_core::workloads::observe::WorkloadKind;
use jiff::Timestamp;
use serde::Serialize;

use crate::address::resource;
use crate::revisions::{ObjectName, Revision, current_name, serialize_kind};

use self::known::Known;
use self::rollout::rollout_report;
use self::workloads::{explain_with, uses_waves};

pub use self::render::render_text;
pub use self::rollout::{Phase, RolloutReport};
pub use self::workloads::{State, WaveLabel, Workload, WorkloadReport, explain};

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
    /// The `Valid` condition: whether the set's content passes its `spec.validation`; left out for a
    /// set that declares none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ConditionReport>,
    /// The rollout of the current revision, when the set's status records one; left out otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutReport>,
    /// Workloads referencing the set: opted-in ones and the others, by kind and name.
    pub workloads: Vec<WorkloadReport>,
    /// Who hears about the set's rollouts, and the last delivery to each (`status.notifications`);
    /// left out when nobody subscribed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notifications: Vec<cmset_api::NotificationStatus>,
}

/// The whole report as of the current time: see [`status_report_at`].
pub fn status_report(set: SetRef<'_>, revisions: &[Revision<'_>], workloads: &[Workload]) -> StatusReport {
    status_report_at(set, revisions, workloads, Timestamp::now())
}

/// The whole report: the set, and every workload among `workloads` that references it, by kind and
/// name. `now` is when the rollout's stabilization window is measured.
pub fn status_report_at(
    set: SetRef<'_>,
    revisions: &[Revision<'_>],
    workloads: &[Workload],
    now: Timestamp,
) -> StatusReport {
    let known = Known::new(set, revisions).reading(workloads);
    let mut reports: Vec<(WorkloadKind, WorkloadReport)> = workloads
        .iter()
        .filter_map(|w| explain_with(set, &known, w).map(|r| (w.kind, r)))
        .collect();
    reports.sort_by(|(ka, a), (kb, b)| ka.cmp(kb).then_with(|| a.name.cmp(&b.name)));
    let mut reports: Vec<WorkloadReport> = reports.into_iter().map(|(_, r)| r).collect();
    if !uses_waves(set, &reports) {
        for r in &mut reports {
            r.wave = None;
        }
    }
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
        validation: set.condition("Valid").map(|c| ConditionReport {
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        }),
        rollout: rollout_report(set, &known, now),
        workloads: reports,
        notifications: set
            .status()
            .and_then(|s| s.notifications.clone())
            .unwrap_or_default(),
    }
}

/// The built-in kinds, in the table's order, joined as a phrase: `Deployment, ..., Job or Rollout`.
pub(super) fn kinds_phrase(name: impl Fn(WorkloadKind) -> String) -> String {
    let names: Vec<String> = WorkloadKind::BUILT_IN.into_iter().map(name).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Keeps the workloads `selector` names: `NAME`, or `KIND/NAME` where KIND is what the table of kinds
/// calls a kind ([`WorkloadKind::is_called`]: its kind, plural or short name, any case: `deployment/web`,
/// `deploy/web`, `sts/db`, `ds/agent`, `cj/report`, `job/migrate`, `ro/web`).
pub fn select(report: &mut StatusReport, selector: &str) -> Result<(), String> {
    let (kind, name) = match selector.split_once('/') {
        Some((called, name)) => {
            let kind = WorkloadKind::BUILT_IN
                .into_iter()
                .find(|k| k.is_called(called))
                .ok_or_else(|| {
                    format!(
                        "unknown workload kind {:?}: use {}",
                        called.to_ascii_lowercase(),
                        kinds_phrase(|k| k.as_str().to_ascii_lowercase())
                    )
                })?;
            (Some(kind), name)
        }
        None => (None, selector),
    };
    report
        .workloads
        .retain(|w| w.name == name && kind.is_none_or(|k| k.as_str() == w.kind));
    if report.workloads.is_empty() {
        return Err(format!(
            "no {} {selector:?} in namespace {:?} references {} {:?}",
            kinds_phrase(|k| k.to_string()),
            report.namespace,
            resource(report.kind),
            report.set
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::revisions::revisions_of;
    use crate::status::fixtures::*;
    use crate::style::Palette;

    #[test]
    fn a_set_without_status() {
        let mut set = ready_set(vec![]);
        set.status = None;
        let w = deployment("web", Some("true"), &["app"]);
        // Its controller has made nothing yet.
        let set = SetRef::from(&set);
        let r = explain(set, &[], &w).unwrap();
        assert_eq!(r.state, State::Pending);
        assert_eq!(r.explanation, "pending: the set has no current revision yet");
        // Once the revision holding its content exists, cmset moves the workload there, status or not.
        let cms = cms();
        let revs = revisions_of(set, &cms);
        let r = explain(set, &revs, &w).unwrap();
        assert_eq!(
            (r.state, r.explanation.as_str()),
            (State::Pending, "pending: cmset is moving it to revision 3")
        );
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

    #[test]
    fn selecting_a_workload_of_a_secret_set() {
        let mut report = secret_report(&[secret_deployment("web", true, "envFrom", "app-cccccccccc")]);
        let err = select(&mut report, "deploy/api").unwrap_err();
        assert_eq!(
            err,
            "no Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout \"deploy/api\" in namespace \
             \"demo\" references secretset \"app\""
        );
        let mut report = secret_report(&[secret_deployment("web", true, "envFrom", "app-cccccccccc")]);
        select(&mut report, "deploy/web").unwrap();
        assert_eq!(report.workloads.len(), 1);
    }

    #[test]
    fn every_kind_is_selected_by_each_name_the_table_gives_it() {
        for kind in WorkloadKind::BUILT_IN {
            let name = format!("{}-x", kind.as_str().to_ascii_lowercase());
            let calls = std::iter::once(kind.as_str().to_string())
                .chain(std::iter::once(kind.as_str().to_ascii_uppercase()))
                .chain(kind.spec().aliases.iter().map(|a| a.to_string()));
            for called in calls {
                let mut report = report_of_every_kind();
                select(&mut report, &format!("{called}/{name}")).unwrap();
                let picked: Vec<&str> = report.workloads.iter().map(|w| w.kind.as_str()).collect();
                assert_eq!(picked, [kind.as_str()], "{called}/{name}");
            }
        }
        // The names kubectl users type, spelled out.
        for (selector, kind) in [
            ("cronjob/cronjob-x", "CronJob"),
            ("cj/cronjob-x", "CronJob"),
            ("cronjobs/cronjob-x", "CronJob"),
            ("job/job-x", "Job"),
            ("jobs/job-x", "Job"),
            ("rollout/rollout-x", "Rollout"),
            ("ro/rollout-x", "Rollout"),
            ("rollouts/rollout-x", "Rollout"),
            ("deploy/deployment-x", "Deployment"),
            ("sts/statefulset-x", "StatefulSet"),
            ("ds/daemonset-x", "DaemonSet"),
        ] {
            let mut report = report_of_every_kind();
            select(&mut report, selector).unwrap();
            assert_eq!(report.workloads[0].kind, kind, "{selector}");
        }
        // A kind that exists but names another workload, and a kind that is no workload kind.
        let mut report = report_of_every_kind();
        assert_eq!(
            select(&mut report, "cj/job-x").unwrap_err(),
            "no Deployment, StatefulSet, DaemonSet, CronJob, Job or Rollout \"cj/job-x\" in namespace \
             \"demo\" references configmapset \"app\""
        );
        let mut report = report_of_every_kind();
        assert_eq!(
            select(&mut report, "Pod/web").unwrap_err(),
            "unknown workload kind \"pod\": use deployment, statefulset, daemonset, cronjob, job or rollout"
        );
    }
}
