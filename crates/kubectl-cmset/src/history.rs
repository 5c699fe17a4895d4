//! `kubectl cmset history`: one row per revision ConfigMap, newest first, with what still uses it.

use cmset_api::ConfigMapSet;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use serde::Serialize;

use crate::age::age;
use crate::revisions::{current_name, revisions_of};
use crate::style::{Palette, Role};
use crate::table::{Cell, render};

/// One revision, as printed and as serialized for `-o json|yaml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    /// The revision number (`cmset.dev/revision`), `null` if the annotation is missing or not a number.
    pub revision: Option<i64>,
    /// The revision ConfigMap's name.
    pub config_map: String,
    /// `creationTimestamp` of the ConfigMap, RFC 3339.
    pub created: Option<String>,
    /// Its age as `kubectl get` prints it.
    pub age: String,
    /// Whether it is the set's `status.currentRevision`.
    pub current: bool,
    /// What references it: the set's workloads that run it (`Deployment/web`), then the ReplicaSets and
    /// ControllerRevisions that own it because their pod templates name it (`ReplicaSet/web-5d8f7`).
    pub used_by: Vec<String>,
}

/// The rows of `set`'s history, given the ConfigMaps listed by its label, at time `now`.
pub fn history_rows(set: &ConfigMapSet, config_maps: &[ConfigMap], now: Timestamp) -> Vec<HistoryRow> {
    let current = current_name(set);
    let set_uid = set.metadata.uid.as_deref().unwrap_or_default();
    let workloads = set.status.iter().flat_map(|s| s.workloads.iter());
    revisions_of(set, config_maps)
        .into_iter()
        .map(|r| {
            let mut used_by: Vec<String> = workloads
                .clone()
                .filter(|w| w.revision == r.name)
                .map(|w| format!("{}/{}", w.kind, w.name))
                .collect();
            let mut owners: Vec<String> = r
                .config_map
                .owner_references()
                .iter()
                .filter(|o| !(o.controller == Some(true) && o.uid == set_uid))
                .map(|o| format!("{}/{}", o.kind, o.name))
                .collect();
            owners.sort();
            used_by.extend(owners);
            let created = r.config_map.metadata.creation_timestamp.as_ref().map(|t| t.0);
            HistoryRow {
                revision: r.number,
                current: current == Some(r.name.as_str()),
                config_map: r.name,
                created: created.map(|t| t.to_string()),
                age: age(created, now),
                used_by,
            }
        })
        .collect()
}

/// The history as a kubectl-style table.
pub fn render_table(rows: &[HistoryRow], palette: Palette) -> String {
    let cells: Vec<Vec<Cell>> = rows
        .iter()
        .map(|r| {
            vec![
                Cell::new(r.revision.map_or("?".to_string(), |n| n.to_string())),
                Cell::styled(&r.config_map, r.current.then_some(Role::Good)),
                Cell::new(&r.age),
                Cell::styled(if r.current { "*" } else { "" }, Some(Role::Good)),
                if r.used_by.is_empty() {
                    Cell::styled("-", Some(Role::Muted))
                } else {
                    Cell::new(r.used_by.join(", "))
                },
            ]
        })
        .collect();
    render(
        &["REVISION", "CONFIGMAP", "AGE", "CURRENT", "USED BY"],
        &cells,
        palette,
    )
}

#[cfg(test)]
mod tests {
    use cmset_api::WorkloadState;
    use serde_json::json;

    use super::*;
    use crate::revisions::fixtures::*;

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
    fn rows_newest_first_with_users() {
        let (set, cms) = example();
        let row =
            |revision, config_map: &str, created: &str, age: &str, current, used_by: &[&str]| HistoryRow {
                revision: Some(revision),
                config_map: config_map.into(),
                created: Some(created.into()),
                age: age.into(),
                current,
                used_by: used_by.iter().map(|u| u.to_string()).collect(),
            };
        assert_eq!(
            history_rows(&set, &cms, now()),
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
        let out = render_table(&history_rows(&set, &cms, now()), Palette::PLAIN);
        let want = "\
REVISION   CONFIGMAP   AGE   CURRENT   USED BY
3          app-ccc     5m    *         Deployment/web, ReplicaSet/web-7b9c
2          app-bbb     24h             -
1          app-aaa     2d              StatefulSet/db, ControllerRevision/db-6c4f9, ReplicaSet/web-5d8f7
";
        assert_eq!(out, want);
        let coloured = render_table(&history_rows(&set, &cms, now()), Palette::COLOR);
        assert!(coloured.contains("\u{1b}[32m*\u{1b}[0m"), "{coloured}");
    }

    #[test]
    fn json_shape() {
        let (set, cms) = example();
        let value = serde_json::to_value(history_rows(&set, &cms, now())).unwrap();
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
        let rows = history_rows(&set, &cms, now());
        assert!(rows.iter().all(|r| !r.current));
        assert_eq!(rows[0].used_by, ["ReplicaSet/web-7b9c"], "owners still count");
        assert_eq!(rows.len(), 3);
    }
}
