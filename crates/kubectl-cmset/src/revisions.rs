//! The revision ConfigMaps of one set, as every command needs them.

use cmset_api::{ConfigMapSet, labels};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;

/// One revision ConfigMap of a set.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision<'a> {
    pub name: String,
    /// The `cmset.dev/revision` annotation, when it holds a number.
    pub number: Option<i64>,
    pub config_map: &'a ConfigMap,
}

/// The revisions of `set` among `config_maps` (typically those listed by the `cmset.dev/set` label):
/// the ones the set controls by UID, not being deleted, newest first (highest number first; ConfigMaps
/// without a number last, by name).
///
/// Checking the controller reference, not only the label, keeps out a ConfigMap that merely carries the
/// label, and the revisions of an earlier set of the same name that outlived it through a rollback
/// history (the garbage collector removed the old set's reference from them).
pub fn revisions_of<'a>(set: &ConfigMapSet, config_maps: &'a [ConfigMap]) -> Vec<Revision<'a>> {
    let set_uid = set.metadata.uid.as_deref().unwrap_or_default();
    let mut revisions: Vec<Revision<'a>> = config_maps
        .iter()
        .filter(|cm| cm.metadata.deletion_timestamp.is_none())
        .filter(|cm| {
            cm.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == set_uid && !set_uid.is_empty())
        })
        .map(|cm| Revision {
            name: cm.name_any(),
            number: cm
                .annotations()
                .get(labels::REVISION)
                .and_then(|n| n.trim().parse().ok()),
            config_map: cm,
        })
        .collect();
    revisions.sort_by(|a, b| {
        // `Some` sorts after `None`, so reversing puts the highest number first and `None` last.
        b.number.cmp(&a.number).then_with(|| a.name.cmp(&b.name))
    });
    revisions
}

/// The set's current revision as its status names it.
pub fn current_name(set: &ConfigMapSet) -> Option<&str> {
    set.status.as_ref()?.current_revision.as_deref()
}

/// "revision 3" or, without a number, "revision ?".
pub fn label(number: Option<i64>) -> String {
    match number {
        Some(n) => format!("revision {n}"),
        None => "revision ?".to_string(),
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Literal sets and ConfigMaps for the tests of every module.

    use std::collections::BTreeMap;

    use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, WorkloadState, WorkloadStatus};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    pub const SET_UID: &str = "set-uid";

    pub fn set(current: Option<&str>, revision: Option<i64>, workloads: Vec<WorkloadStatus>) -> ConfigMapSet {
        let mut set = ConfigMapSet::new("app", ConfigMapSetSpec::default());
        set.metadata.namespace = Some("demo".into());
        set.metadata.uid = Some(SET_UID.into());
        set.metadata.generation = Some(3);
        set.status = Some(ConfigMapSetStatus {
            observed_generation: Some(3),
            revision,
            current_revision: current.map(str::to_string),
            workloads,
            ..Default::default()
        });
        set
    }

    pub fn workload(kind: &str, name: &str, revision: &str, state: WorkloadState) -> WorkloadStatus {
        WorkloadStatus {
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            revision: revision.into(),
            state,
            rolled_out: None,
        }
    }

    pub fn owner(kind: &str, name: &str, uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    /// A revision of set `app` with number `n`, created at `created` (RFC 3339), holding `data`.
    pub fn revision(name: &str, n: Option<i64>, created: &str, data: &[(&str, &str)]) -> ConfigMap {
        let mut annotations = BTreeMap::new();
        if let Some(n) = n {
            annotations.insert(cmset_api::labels::REVISION.to_string(), n.to_string());
        }
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("demo".into()),
                creation_timestamp: Some(Time(created.parse().unwrap())),
                annotations: Some(annotations),
                labels: Some(BTreeMap::from([(
                    cmset_api::labels::SET.to_string(),
                    "app".to_string(),
                )])),
                owner_references: Some(vec![owner("ConfigMapSet", "app", SET_UID, true)]),
                ..Default::default()
            },
            data: Some(data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            immutable: Some(true),
            ..Default::default()
        }
    }

    pub fn with_binary(mut cm: ConfigMap, key: &str, bytes: &[u8]) -> ConfigMap {
        cm.binary_data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), ByteString(bytes.to_vec()));
        cm
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn only_the_sets_own_live_revisions_newest_first() {
        let set = set(Some("app-3"), Some(3), vec![]);
        let mut foreign = revision("app-x", Some(9), "2026-01-01T00:00:00Z", &[]);
        foreign.metadata.owner_references = Some(vec![owner("ConfigMapSet", "app", "old-uid", true)]);
        let mut not_controller = revision("app-y", Some(8), "2026-01-01T00:00:00Z", &[]);
        not_controller.metadata.owner_references = Some(vec![owner("ConfigMapSet", "app", SET_UID, false)]);
        let mut deleting = revision("app-z", Some(7), "2026-01-01T00:00:00Z", &[]);
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let cms = vec![
            revision("app-1", Some(1), "2026-01-01T00:00:00Z", &[]),
            foreign,
            revision("app-3", Some(3), "2026-01-01T00:00:00Z", &[]),
            revision("app-n", None, "2026-01-01T00:00:00Z", &[]),
            not_controller,
            deleting,
            revision("app-2", Some(2), "2026-01-01T00:00:00Z", &[]),
        ];
        let got: Vec<(String, Option<i64>)> = revisions_of(&set, &cms)
            .into_iter()
            .map(|r| (r.name, r.number))
            .collect();
        assert_eq!(
            got,
            [
                ("app-3".to_string(), Some(3)),
                ("app-2".to_string(), Some(2)),
                ("app-1".to_string(), Some(1)),
                ("app-n".to_string(), None),
            ]
        );
    }

    #[test]
    fn labels() {
        assert_eq!(label(Some(4)), "revision 4");
        assert_eq!(label(None), "revision ?");
    }
}
