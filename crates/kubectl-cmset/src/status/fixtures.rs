//! Literal sets, revisions and workloads for the tests of the status modules: ConfigMapSet `app` on
//! revision 3 (and its SecretSet twin), and a rollout in waves from revision 3 to 4.

use std::collections::BTreeMap;

use cmset_api::{ConfigMapSet, RolloutPhase, SecretSet, WorkloadState, labels};
use cmset_core::set::SetRef;
use cmset_core::workloads::observe::WorkloadKind;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

use super::{StatusReport, Workload, status_report, status_report_at};
use crate::revisions::fixtures::*;
use crate::revisions::revisions_of;

pub(super) const T: &str = "2026-01-01T00:00:00Z";

/// The revisions of [`ready_set`]: the current one holds the set's content.
pub(super) fn cms() -> Vec<ConfigMap> {
    vec![
        revision("app-ffffffffff", Some(1), T, &[]),
        revision("app-bbbbbbbbbb", Some(2), T, &[]),
        holding_the_spec(revision("app-cccccccccc", Some(3), T, &[])),
    ]
}

pub(super) fn spec(names: &[&str]) -> PodSpec {
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

pub(super) fn deployment(name: &str, opted_in: Option<&str>, refs: &[&str]) -> Workload {
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

/// ConfigMapSet `app` on revision 3 (app-cccccccccc), after revisions 1 and 2, with the status
/// entries given.
pub(super) fn ready_set(workloads: Vec<cmset_api::WorkloadStatus>) -> ConfigMapSet {
    let mut s = set(Some("app-cccccccccc"), Some(3), workloads);
    let history = [
        ("app-cccccccccc", 3),
        ("app-bbbbbbbbbb", 2),
        ("app-ffffffffff", 1),
    ];
    s.status.as_mut().unwrap().history = history
        .into_iter()
        .map(|(name, revision)| cmset_api::RevisionStatus {
            name: name.into(),
            revision,
            in_use: true,
            failed: false,
        })
        .collect();
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

pub(super) fn full_report() -> StatusReport {
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

/// A pod spec naming `name` through one form of Secret reference.
pub(super) fn secret_spec(form: &str, name: &str) -> PodSpec {
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

pub(super) fn secret_deployment(name: &str, opted_in: bool, form: &str, secret: &str) -> Workload {
    Workload {
        pod_spec: Some(secret_spec(form, secret)),
        ..deployment(name, opted_in.then_some("true"), &[])
    }
}

/// SecretSet `app`, ready on revision 3, with `web` current, `old` pinned and `late` pending.
pub(super) fn ready_secret_set() -> SecretSet {
    let mut s = secret_set(
        Some("app-cccccccccc"),
        Some(3),
        vec![
            workload("Deployment", "web", "app-cccccccccc", WorkloadState::Current),
            workload("Deployment", "old", "app-ffffffffff", WorkloadState::Pinned),
            workload("Deployment", "late", "app-bbbbbbbbbb", WorkloadState::Pending),
        ],
    );
    let ready = ready_set(vec![]).status.unwrap();
    let status = s.status.as_mut().unwrap();
    status.conditions = ready.conditions;
    status.history = ready.history;
    s
}

/// Its revision Secrets, holding values no output may show.
pub(super) fn secrets() -> Vec<Secret> {
    vec![
        secret_revision("app-ffffffffff", Some(1), T, None, &[("password", SECRET_TEXT)]),
        secret_revision("app-bbbbbbbbbb", Some(2), T, None, &[("password", SECRET_BINARY)]),
        secret_revision("app-cccccccccc", Some(3), T, None, &[("password", SECRET_OTHER)]),
    ]
}

pub(super) fn secret_report(workloads: &[Workload]) -> StatusReport {
    let set = ready_secret_set();
    let secrets = secrets();
    let set = SetRef::from(&set);
    status_report(set, &revisions_of(set, &secrets), workloads)
}

// Rollouts in waves. The set moves from revision 3 (app-cccccccccc) to revision 4 (app-dddddddddd):
// `web` (no wave label, so wave 0), `api` (wave 1) and `db` (wave 2) take part; `legacy` is not
// opted in.

pub(super) const NOW: &str = "2026-01-01T00:10:00Z";
pub(super) const NEW: &str = "app-dddddddddd";
pub(super) const OLD: &str = "app-cccccccccc";

pub(super) fn now() -> Timestamp {
    NOW.parse().unwrap()
}

/// `seconds` before [`NOW`].
pub(super) fn ago(seconds: i64) -> Time {
    Time(now() - jiff::SignedDuration::from_secs(seconds))
}

/// The revisions once revision 4 holds the set's content.
pub(super) fn cms4() -> Vec<ConfigMap> {
    vec![
        revision("app-ffffffffff", Some(1), T, &[]),
        revision("app-bbbbbbbbbb", Some(2), T, &[]),
        revision(OLD, Some(3), T, &[]),
        holding_the_spec(revision(NEW, Some(4), T, &[])),
    ]
}

pub(super) fn waved(mut w: Workload, wave: &str) -> Workload {
    w.labels.insert(labels::WAVE.to_string(), wave.to_string());
    w
}

pub(super) fn entry(
    kind: &str,
    name: &str,
    revision: &str,
    state: WorkloadState,
    wave: i32,
    message: Option<&str>,
) -> cmset_api::WorkloadStatus {
    cmset_api::WorkloadStatus {
        wave,
        message: message.map(str::to_string),
        ..workload(kind, name, revision, state)
    }
}

pub(super) fn condition(status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        observed_generation: Some(3),
        last_transition_time: Time(T.parse().unwrap()),
    }
}

/// ConfigMapSet `app` on revision 4, with `spec.rollout` and the status given.
pub(super) fn rollout_set(
    rollout: cmset_api::RolloutStatus,
    ready: Condition,
    workloads: Vec<cmset_api::WorkloadStatus>,
) -> ConfigMapSet {
    let mut s = set(Some(NEW), Some(4), workloads);
    s.spec.rollout = Some(cmset_api::RolloutSpec {
        stabilization_seconds: 30,
        auto_rollback: true,
        ..Default::default()
    });
    let status = s.status.as_mut().unwrap();
    status.conditions = vec![ready];
    status.rollout = Some(rollout);
    status.history = vec![
        cmset_api::RevisionStatus {
            name: NEW.into(),
            revision: 4,
            in_use: true,
            failed: rollout_failed(status),
        },
        cmset_api::RevisionStatus {
            name: OLD.into(),
            revision: 3,
            in_use: true,
            failed: false,
        },
    ];
    s
}

pub(super) fn rollout_failed(status: &cmset_api::ConfigMapSetStatus) -> bool {
    status
        .rollout
        .as_ref()
        .is_some_and(|r| r.phase == RolloutPhase::Failed)
}

pub(super) fn rollout(
    phase: RolloutPhase,
    wave: i32,
    healthy_since: Option<Time>,
) -> cmset_api::RolloutStatus {
    cmset_api::RolloutStatus {
        revision: NEW.into(),
        phase,
        wave,
        waves: vec![0, 1, 2],
        wave_healthy_since: healthy_since,
        started_at: Some(ago(120)),
        message: None,
        held_since: None,
        analysis: Vec::new(),
        ..cmset_api::RolloutStatus::default()
    }
}

pub(super) fn sts(mut w: Workload) -> Workload {
    w.kind = WorkloadKind::StatefulSet;
    w
}

pub(super) fn rollout_workloads(web: &str, api: &str, db: &str) -> Vec<Workload> {
    let on = Some("true");
    vec![
        deployment("web", on, &[web]),
        waved(deployment("api", on, &[api]), "1"),
        waved(sts(deployment("db", on, &[db])), "2"),
        deployment("legacy", None, &["app"]),
    ]
}

pub(super) fn rollout_report_of(set: &ConfigMapSet, workloads: &[Workload]) -> StatusReport {
    let cms = cms4();
    let set = SetRef::from(set);
    status_report_at(set, &revisions_of(set, &cms), workloads, now())
}

/// Wave 0 is done and has been healthy for 12 of its 30 stabilization seconds; waves 1 and 2 wait.
pub(super) fn mid_rollout() -> ConfigMapSet {
    rollout_set(
        rollout(RolloutPhase::Progressing, 0, Some(ago(12))),
        condition("False", "RollingOut", "revision 4 is rolling out in wave 0"),
        vec![
            entry(
                "Deployment",
                "web",
                NEW,
                WorkloadState::Current,
                0,
                Some("healthy"),
            ),
            entry(
                "Deployment",
                "api",
                OLD,
                WorkloadState::Waiting,
                1,
                Some("waiting for wave 0 to complete"),
            ),
            entry(
                "StatefulSet",
                "db",
                OLD,
                WorkloadState::Waiting,
                2,
                Some("waiting for wave 0 to complete"),
            ),
        ],
    )
}

/// Wave 0 failed: `web` did not become healthy on revision 4 and cmset moved it back to revision 3;
/// `worker` (wave 0 too) is fine on revision 4; waves 1 and 2 never receive it.
pub(super) fn failed_rollout(web_refers_to: &str) -> (ConfigMapSet, Vec<Workload>) {
    let mut r = rollout(RolloutPhase::Failed, 0, None);
    r.message = Some(format!(
        "the rollout of {NEW} failed in wave 0: Deployment web reported ProgressDeadlineExceeded (its \
         Progressing condition)"
    ));
    let held = format!("held: the rollout of {NEW} failed in wave 0");
    let mut web = entry(
        "Deployment",
        "web",
        web_refers_to,
        WorkloadState::RolledBack,
        0,
        Some(&format!(
            "rolled back to {OLD}: it reported ProgressDeadlineExceeded (its Progressing condition)"
        )),
    );
    web.previous_revision = Some(OLD.into());
    web.moved_at = Some(ago(700));
    let set = rollout_set(
        r,
        condition(
            "False",
            "RolloutFailed",
            "the rollout of revision 4 failed in wave 0",
        ),
        vec![
            web,
            entry("Deployment", "worker", NEW, WorkloadState::Current, 0, None),
            entry("Deployment", "api", OLD, WorkloadState::Waiting, 1, Some(&held)),
            entry("StatefulSet", "db", OLD, WorkloadState::Waiting, 2, Some(&held)),
        ],
    );
    let mut workloads = rollout_workloads(web_refers_to, OLD, OLD);
    workloads.push(deployment("worker", Some("true"), &[NEW]));
    (set, workloads)
}

// Every built-in kind of the table: CronJobs and Rollouts are explained like Deployments; a Job keeps
// the revision it was created with.

pub(super) fn of_kind(kind: WorkloadKind, name: &str, opted_in: bool, refs: &[&str]) -> Workload {
    Workload {
        kind,
        ..deployment(name, opted_in.then_some("true"), refs)
    }
}

/// A report with one workload of every built-in kind, each named after its kind (`cronjob-x`).
pub(super) fn report_of_every_kind() -> StatusReport {
    let set = ready_set(vec![]);
    let workloads: Vec<Workload> = WorkloadKind::BUILT_IN
        .into_iter()
        .map(|k| {
            of_kind(
                k,
                &format!("{}-x", k.as_str().to_ascii_lowercase()),
                true,
                &["app-cccccccccc"],
            )
        })
        .collect();
    let cms = cms();
    let set = SetRef::from(&set);
    status_report(set, &revisions_of(set, &cms), &workloads)
}
