//! A configuration and set statuses the tests of every notification module share.

use std::collections::BTreeMap;

use cmset_api::{
    AnalysisRunStatus, AnalysisVerdict, ConfigMapSetStatus, RevisionStatus, RolloutPhase, RolloutStatus,
    WorkloadState, WorkloadStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::config::{self, Config};
use super::{Problem, SetView};
use crate::set::SetKind;

/// A value only the Secret holds: it must never show in a problem or a `Debug`.
pub(super) const TOKEN: &str = "xoxb-very-secret-token";
pub(super) const HOOK: &str = "https://hooks.example.com/services/T0/B0/sekrit";

pub(super) fn secret() -> BTreeMap<String, Vec<u8>> {
    BTreeMap::from([
        ("slack-token".to_string(), TOKEN.as_bytes().to_vec()),
        ("ops-hook".to_string(), HOOK.as_bytes().to_vec()),
        ("hook-password".to_string(), b"pa55word-secret".to_vec()),
    ])
}

pub(super) fn data(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One service of each kind and delivery.
pub(super) const SERVICES: &[(&str, &str)] = &[
    (
        "service.slack",
        "token: $slack-token\nusername: cmset\nicon: \":rocket:\"\n",
    ),
    (
        "service.slack.hooks",
        "webhooks:\n  ops: $ops-hook\n  dev: https://hooks.example.com/dev\n",
    ),
    (
        "service.teams",
        "recipientUrls:\n  prod: https://teams.example.com/webhook/prod\n",
    ),
    (
        "service.webhook.audit",
        "url: https://audit.example.com/api\nheaders:\n- name: X-Token\n  value: $slack-token\n\
         basicAuth:\n  username: cmset\n  password: $hook-password\ntimeout: 2s\nretries: 5\n",
    ),
];

pub(super) fn config_with(extra: &[(&str, &str)]) -> Config {
    let mut entries = SERVICES.to_vec();
    entries.extend_from_slice(extra);
    let (config, problems) = config::parse(&data(&entries), &secret());
    assert_eq!(problems, Vec::<Problem>::new());
    config
}

pub(super) fn time(rfc3339: &str) -> Time {
    Time(rfc3339.parse().unwrap())
}

/// A rollout of `app-2` (after `app-1`) in waves 0, 1, 2, standing in `wave` with `phase`.
pub(super) fn status(phase: RolloutPhase, wave: i32) -> ConfigMapSetStatus {
    ConfigMapSetStatus {
        revision: Some(2),
        current_revision: Some("app-2".into()),
        history: vec![
            RevisionStatus {
                name: "app-2".into(),
                revision: 2,
                in_use: true,
                failed: false,
            },
            RevisionStatus {
                name: "app-1".into(),
                revision: 1,
                in_use: true,
                failed: false,
            },
        ],
        workloads: vec![
            WorkloadStatus {
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "u1".into(),
                revision: "app-2".into(),
                state: WorkloadState::Current,
                wave: 0,
                previous_revision: Some("app-1".into()),
                ..WorkloadStatus::default()
            },
            WorkloadStatus {
                kind: "StatefulSet".into(),
                name: "db".into(),
                uid: "u2".into(),
                revision: "app-1".into(),
                state: WorkloadState::Waiting,
                wave: 2,
                message: Some("waits for wave 2".into()),
                ..WorkloadStatus::default()
            },
        ],
        rollout: Some(RolloutStatus {
            revision: "app-2".into(),
            phase,
            wave,
            waves: vec![0, 1, 2],
            started_at: Some(time("2025-01-02T03:04:05Z")),
            ..RolloutStatus::default()
        }),
        ..ConfigMapSetStatus::default()
    }
}

/// The status with a failed analysis run in wave 1 and `web` rolled back.
pub(super) fn failed_status() -> ConfigMapSetStatus {
    let mut status = status(RolloutPhase::Failed, 1);
    let rollout = status.rollout.as_mut().unwrap();
    rollout.message = Some("Deployment web is not healthy".into());
    rollout.analysis = vec![AnalysisRunStatus {
        template: "error-rate".into(),
        workload_kind: Some("Deployment".into()),
        workload: Some("web".into()),
        wave: 1,
        query: "rate(errors[5m])".into(),
        condition: "result < 0.05".into(),
        last_value: Some("0.2".into()),
        verdict: AnalysisVerdict::Failed,
        measurements: 3,
        failures: 2,
        message: Some("0.2 is not < 0.05".into()),
        ..AnalysisRunStatus::default()
    }];
    status.workloads[0].state = WorkloadState::RolledBack;
    status.workloads[0].revision = "app-1".into();
    status
}

pub(super) struct Set {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub status: ConfigMapSetStatus,
}

impl Set {
    pub(super) fn new(status: ConfigMapSetStatus) -> Self {
        Self {
            labels: data(&[("team", "payments")]),
            annotations: BTreeMap::new(),
            status,
        }
    }

    pub(super) fn view(&self) -> SetView<'_> {
        SetView {
            kind: SetKind::ConfigMapSet,
            name: "app",
            namespace: "shop",
            labels: &self.labels,
            annotations: &self.annotations,
            status: &self.status,
        }
    }
}
