//! `kubectl cmset history`: one row per revision (a ConfigMap of a ConfigMapSet, a Secret of a
//! SecretSet), newest first, with what still uses it.

use cmset_core::set::SetRef;
use cmset_core::workloads::observe::RefNames;
use cmset_core::workloads::refs::Referenced;
use jiff::Timestamp;
use serde::Serialize;

use crate::age::age;
use crate::revisions::{ObjectName, Revision, column, current_name};
use crate::style::{Palette, Role};
use crate::table::{Cell, render};

/// One revision, as printed and as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    /// The revision number (`cmset.dev/revision`), `null` if the annotation is missing or not a number.
    pub revision: Option<i64>,
    /// The revision's name, as `configMap` or `secret`.
    #[serde(flatten)]
    pub object: ObjectName,
    /// `creationTimestamp` of the revision, RFC 3339.
    pub created: Option<String>,
    /// Its age as `kubectl get` prints it.
    pub age: String,
    /// Whether it is the set's `status.currentRevision`.
    pub current: bool,
    /// A rollout of it failed (`failed` in the set's `status.history`): cmset does not try it again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// What references it: the set's workloads that run it (`Deployment/web`), then the ReplicaSets,
    /// ControllerRevisions and Jobs whose pod templates name it (`ReplicaSet/web-5d8f7`), and any other
    /// owner it has besides its set and the workloads that read it.
    pub used_by: Vec<String>,
}

/// The rows of `set`'s history, from its `revisions` (see [`crate::revisions::revisions_of`]) and the
/// namespace's `history` objects (`Kind/name` and the names their templates reference), at time `now`.
pub fn history_rows(
    set: SetRef<'_>,
    revisions: &[Revision<'_>],
    history: &[(String, RefNames)],
    now: Timestamp,
) -> Vec<HistoryRow> {
    let current = current_name(set);
    let set_uid = set.uid();
    let kind = set.kind().revision_kind();
    let workloads = set.status().into_iter().flat_map(|s| s.workloads.iter());
    let failed = |name: &str| {
        set.status()
            .is_some_and(|s| s.history.iter().any(|h| h.name == name && h.failed))
    };
    revisions
        .iter()
        .map(|r| {
            let mut used_by: Vec<String> = workloads
                .clone()
                .filter(|w| w.revision == r.name)
                .map(|w| format!("{}/{}", w.kind, w.name))
                .collect();
            // Readers counted instead of listed in a large fan-out (see `cmset_core::revisions::fit`).
            let settled = set
                .status()
                .and_then(|s| s.settled_workloads.as_ref())
                .filter(|s| s.revision == r.name && s.count > 0);
            used_by.extend(settled.map(|s| format!("{} settled workloads", s.count)));
            let mut owners: Vec<String> = r
                .meta
                .owner_references
                .iter()
                .flatten()
                .filter(|o| !(o.controller == Some(true) && o.uid == set_uid))
                // A reader owning a revision keeps it, but uses it only if it names it (above).
                .filter(|o| !cmset_core::revisions::revision::is_reader_owner(o))
                .map(|o| format!("{}/{}", o.kind, o.name))
                .chain(
                    history
                        .iter()
                        .filter(|(_, names)| names.contains(kind, &r.name))
                        .map(|(object, _)| object.clone()),
                )
                .collect();
            owners.sort();
            owners.dedup();
            used_by.extend(owners);
            let created = r.meta.creation_timestamp.as_ref().map(|t| t.0);
            HistoryRow {
                revision: r.number,
                current: current == Some(r.name.as_str()),
                failed: failed(&r.name),
                object: ObjectName::new(kind, &r.name),
                created: created.map(|t| t.to_string()),
                age: age(created, now),
                used_by,
            }
        })
        .collect()
}

/// The history as a kubectl-style table; the second column is named for the revisions' `kind`
/// (CONFIGMAP, SECRET). A ROLLOUT column appears only when a revision's rollout failed, so the table of
/// a set without one reads as it always did.
pub fn render_table(rows: &[HistoryRow], kind: Referenced, palette: Palette) -> String {
    let any_failed = rows.iter().any(|r| r.failed);
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|r| {
            let mut row = vec![
                Cell::new(r.revision.map_or("?".to_string(), |n| n.to_string())),
                Cell::styled(r.object.name(), r.current.then_some(Role::Good)),
                Cell::new(&r.age),
                Cell::styled(if r.current { "*" } else { "" }, Some(Role::Good)),
            ];
            if any_failed {
                row.push(Cell::styled(
                    if r.failed { "failed" } else { "" },
                    Some(Role::Bad),
                ));
            }
            row.push(if r.used_by.is_empty() {
                Cell::styled("-", Some(Role::Muted))
            } else {
                Cell::new(r.used_by.join(", "))
            });
            row
        })
        .collect();
    let mut headers = vec!["REVISION", column(kind), "AGE", "CURRENT"];
    if any_failed {
        headers.push("ROLLOUT");
    }
    headers.push("USED BY");
    render(&headers, &cells, palette)
}

#[cfg(test)]
mod tests {
    use cmset_api::{ConfigMapSet, SecretSet, WorkloadState};
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;
    use crate::revisions::revisions_of;

    fn rows<K: kube::Resource>(set: SetRef<'_>, objects: &[K]) -> Vec<HistoryRow> {
        history_rows(set, &revisions_of(set, objects), &[], now())
    }

    fn example() -> (ConfigMapSet, Vec<ConfigMap>) {
        let set = set(
            Some("app-ccc"),
            Some(3),
            vec![
                workload("Deployment", "web", "app-ccc", WorkloadState::Current),
                workload("StatefulSet", "db", "app-aaa", WorkloadState::Pinned),
            ],
        );
        let mut r1 = revision("app-aaa", Some(1), "2026-03-01T10:00:00Z", &[("V", "1")]);
        r1.metadata.owner_references.as_mut().unwrap().extend([
            owner("ReplicaSet", "web-5d8f7", "rs1", false),
            owner("ControllerRevision", "db-6c4f9", "cr1", false),
        ]);
        let r2 = revision("app-bbb", Some(2), "2026-03-02T10:00:00Z", &[("V", "2")]);
        let mut r3 = revision("app-ccc", Some(3), "2026-03-03T09:55:00Z", &[("V", "3")]);
        r3.metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(owner("ReplicaSet", "web-7b9c", "rs3", false));
        (set, vec![r1, r3, r2])
    }

    fn now() -> Timestamp {
        "2026-03-03T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_revision_is_used_by_the_history_naming_it_not_by_the_reader_owning_it() {
        let (set, mut objects) = example();
        // The newest revision is owned by the Deployment that read the set when it was made (that owner
        // keeps it, but says nothing of use), and named by a ReplicaSet that is not among its owners.
        let mut reader = owner("Deployment", "web", "uid-web", false);
        reader.api_version = "apps/v1".into();
        objects[1]
            .metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(reader);
        let names = |name: &str| RefNames {
            config_maps: [name.to_string()].into(),
            ..RefNames::default()
        };
        let history = [
            ("ReplicaSet/web-9f1a".to_string(), names("app-ccc")),
            // Named and owning: listed once.
            ("ReplicaSet/web-7b9c".to_string(), names("app-ccc")),
            ("Job/other".to_string(), names("unrelated")),
        ];
        let view = SetRef::from(&set);
        let rows = history_rows(view, &revisions_of(view, &objects), &history, now());
        assert_eq!(
            rows[0].used_by,
            ["Deployment/web", "ReplicaSet/web-7b9c", "ReplicaSet/web-9f1a"]
        );
    }

    #[test]
    fn rows_newest_first_with_users() {
        let (set, cms) = example();
        let row =
            |revision, config_map: &str, created: &str, age: &str, current, used_by: &[&str]| HistoryRow {
                revision: Some(revision),
                object: ObjectName::ConfigMap(config_map.into()),
                created: Some(created.into()),
                age: age.into(),
                current,
                failed: false,
                used_by: used_by.iter().map(|u| u.to_string()).collect(),
            };
        assert_eq!(
            rows(SetRef::from(&set), &cms),
            [
                row(
                    3,
                    "app-ccc",
                    "2026-03-03T09:55:00Z",
                    "5m",
                    true,
                    &["Deployment/web", "ReplicaSet/web-7b9c"]
                ),
                row(2, "app-bbb", "2026-03-02T10:00:00Z", "24h", false, &[]),
                row(
                    1,
                    "app-aaa",
                    "2026-03-01T10:00:00Z",
                    "2d",
                    false,
                    &[
                        "StatefulSet/db",
                        "ControllerRevision/db-6c4f9",
                        "ReplicaSet/web-5d8f7"
                    ]
                ),
            ]
        );
    }

    #[test]
    fn table() {
        let (set, cms) = example();
        let out = render_table(
            &rows(SetRef::from(&set), &cms),
            Referenced::ConfigMap,
            Palette::PLAIN,
        );
        let want = "\
REVISION   CONFIGMAP   AGE   CURRENT   USED BY
3          app-ccc     5m    *         Deployment/web, ReplicaSet/web-7b9c
2          app-bbb     24h             -
1          app-aaa     2d              StatefulSet/db, ControllerRevision/db-6c4f9, ReplicaSet/web-5d8f7
";
        assert_eq!(out, want);
        let coloured = render_table(
            &rows(SetRef::from(&set), &cms),
            Referenced::ConfigMap,
            Palette::COLOR,
        );
        assert!(coloured.contains("\u{1b}[32m*\u{1b}[0m"), "{coloured}");
    }

    #[test]
    fn a_revision_whose_rollout_failed_is_marked() {
        let (mut set, cms) = example();
        let status = set.status.as_mut().unwrap();
        status.history = vec![cmset_api::RevisionStatus {
            name: "app-bbb".into(),
            revision: 2,
            in_use: false,
            failed: true,
        }];
        let rows = rows(SetRef::from(&set), &cms);
        let out = render_table(&rows, Referenced::ConfigMap, Palette::PLAIN);
        let want = "\
REVISION   CONFIGMAP   AGE   CURRENT   ROLLOUT   USED BY
3          app-ccc     5m    *                   Deployment/web, ReplicaSet/web-7b9c
2          app-bbb     24h             failed    -
1          app-aaa     2d                        StatefulSet/db, ControllerRevision/db-6c4f9, ReplicaSet/web-5d8f7
";
        assert_eq!(out, want);
        let value = serde_json::to_value(&rows).unwrap();
        assert_eq!(value[1]["failed"], json!(true));
        assert_eq!(value[0].get("failed"), None, "only a failed revision says so");
    }

    #[test]
    fn json_shape() {
        let (set, cms) = example();
        let value = serde_json::to_value(rows(SetRef::from(&set), &cms)).unwrap();
        assert_eq!(
            value[0],
            json!({
                "revision": 3,
                "configMap": "app-ccc",
                "created": "2026-03-03T09:55:00Z",
                "age": "5m",
                "current": true,
                "usedBy": ["Deployment/web", "ReplicaSet/web-7b9c"],
            })
        );
        assert_eq!(value[1]["usedBy"], json!([]));
        assert_eq!(value.as_array().unwrap().len(), 3);
    }

    #[test]
    fn a_set_without_status_has_no_current_revision() {
        let (mut set, cms) = example();
        set.status = None;
        let rows = rows(SetRef::from(&set), &cms);
        assert!(rows.iter().all(|r| !r.current));
        assert_eq!(rows[0].used_by, ["ReplicaSet/web-7b9c"], "owners still count");
        assert_eq!(rows.len(), 3);
    }

    fn secret_example() -> (SecretSet, Vec<Secret>) {
        let set = secret_set(
            Some("app-ccc"),
            Some(3),
            vec![
                workload("Deployment", "web", "app-ccc", WorkloadState::Current),
                workload("StatefulSet", "db", "app-aaa", WorkloadState::Pinned),
            ],
        );
        let mut r1 = secret_revision(
            "app-aaa",
            Some(1),
            "2026-03-01T10:00:00Z",
            Some("Opaque"),
            &[("password", SECRET_TEXT)],
        );
        r1.metadata
            .owner_references
            .as_mut()
            .unwrap()
            .push(owner("ReplicaSet", "web-5d8f7", "rs1", false));
        let r3 = secret_revision(
            "app-ccc",
            Some(3),
            "2026-03-03T09:55:00Z",
            None,
            &[("password", SECRET_BINARY)],
        );
        (set, vec![r3, r1])
    }

    #[test]
    fn a_secret_set_s_history_lists_its_secrets() {
        let (set, secrets) = secret_example();
        let rows = rows(SetRef::from(&set), &secrets);
        let table = render_table(&rows, Referenced::Secret, Palette::PLAIN);
        assert_eq!(
            table,
            "\
REVISION   SECRET    AGE   CURRENT   USED BY
3          app-ccc   5m    *         Deployment/web
1          app-aaa   2d              StatefulSet/db, ReplicaSet/web-5d8f7
"
        );
        let value = serde_json::to_value(&rows).unwrap();
        assert_eq!(
            value[1],
            json!({
                "revision": 1,
                "secret": "app-aaa",
                "created": "2026-03-01T10:00:00Z",
                "age": "2d",
                "current": false,
                "usedBy": ["StatefulSet/db", "ReplicaSet/web-5d8f7"],
            })
        );
        let yaml = crate::output::structured(&rows, crate::cli::Output::Yaml)
            .unwrap()
            .unwrap();
        assert!(yaml.starts_with("- revision: 3\n  secret: app-ccc\n"), "{yaml}");
        for out in [table, value.to_string(), yaml] {
            assert_no_secret_values(&out);
        }
    }

    #[test]
    fn a_secret_set_and_a_config_map_set_of_one_name_keep_their_own_histories() {
        let (cm_set, cms) = example();
        let (secret_set, secrets) = secret_example();
        assert!(rows(SetRef::from(&secret_set), &cms).is_empty());
        assert!(rows(SetRef::from(&cm_set), &secrets).is_empty());
    }

    #[test]
    fn every_kind_of_workload_is_shown_as_kind_and_name() {
        // CronJobs, Jobs and Rollouts are listed in the set's status like the other kinds; a CronJob's
        // Jobs and a Rollout's ReplicaSets are owners like a Deployment's ReplicaSets.
        let set = set(
            Some("app-ccc"),
            Some(3),
            vec![
                workload("CronJob", "report", "app-ccc", WorkloadState::Current),
                workload("Rollout", "canary", "app-ccc", WorkloadState::Current),
                workload("Job", "migrate", "app-aaa", WorkloadState::Current),
            ],
        );
        let mut r1 = revision("app-aaa", Some(1), "2026-03-01T10:00:00Z", &[("V", "1")]);
        r1.metadata.owner_references.as_mut().unwrap().extend([
            owner("Job", "report-29000000", "job1", false),
            owner("ReplicaSet", "canary-6f5d4", "rs1", false),
        ]);
        let r3 = revision("app-ccc", Some(3), "2026-03-03T09:55:00Z", &[("V", "3")]);
        let rows = rows(SetRef::from(&set), &[r3, r1]);
        assert_eq!(
            render_table(&rows, Referenced::ConfigMap, Palette::PLAIN),
            "\
REVISION   CONFIGMAP   AGE   CURRENT   USED BY
3          app-ccc     5m    *         CronJob/report, Rollout/canary
1          app-aaa     2d              Job/migrate, Job/report-29000000, ReplicaSet/canary-6f5d4
"
        );
    }
}
