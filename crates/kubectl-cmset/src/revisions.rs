//! The revisions of one set, as every command needs them: the ConfigMaps of a ConfigMapSet or the
//! Secrets of a SecretSet. Only their metadata is read here, so a SecretSet's revisions are listed
//! without their content.

use cmset_api::labels;
use cmset_core::set::{SetKind, SetRef};
use cmset_core::workloads::refs::Referenced;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use serde::{Serialize, Serializer};

/// One revision of a set.
#[derive(Clone, Debug, PartialEq)]
pub struct Revision<'a> {
    pub name: String,
    /// The `cmset.dev/revision` annotation, when it holds a number.
    pub number: Option<i64>,
    pub meta: &'a ObjectMeta,
    /// Its position among the objects given to [`revisions_of`], to find the object again.
    pub index: usize,
}

/// The revisions of `set` among `objects` (typically those listed by the `cmset.dev/set` label, of the
/// set's revision kind): the ones the set controls by UID, not being deleted, newest first (highest
/// number first; those without a number last, by name).
///
/// Checking the controller reference, not only the label, keeps out an object that merely carries the
/// label, and the revisions of an earlier set of the same name that outlived it through a rollback
/// history (the garbage collector removed the old set's reference from them). It also keeps a
/// ConfigMapSet and a SecretSet of the same name apart: both label their revisions `cmset.dev/set=<name>`.
pub fn revisions_of<'a, K: kube::Resource>(set: SetRef<'_>, objects: &'a [K]) -> Vec<Revision<'a>> {
    let set_uid = set.uid();
    let mut revisions: Vec<Revision<'a>> = objects
        .iter()
        .enumerate()
        .filter(|(_, o)| o.meta().deletion_timestamp.is_none())
        .filter(|(_, o)| {
            o.owner_references()
                .iter()
                .any(|r| r.controller == Some(true) && r.uid == set_uid && !set_uid.is_empty())
        })
        .map(|(index, o)| Revision {
            name: o.name_any(),
            number: o
                .annotations()
                .get(labels::REVISION)
                .and_then(|n| n.trim().parse().ok()),
            meta: o.meta(),
            index,
        })
        .collect();
    revisions.sort_by(|a, b| {
        // `Some` sorts after `None`, so reversing puts the highest number first and `None` last.
        b.number.cmp(&a.number).then_with(|| a.name.cmp(&b.name))
    });
    revisions
}

/// The set's current revision as its status names it.
pub fn current_name(set: SetRef<'_>) -> Option<&str> {
    set.status()?.current_revision.as_deref()
}

/// "revision 3" or, without a number, "revision ?".
pub fn label(number: Option<i64>) -> String {
    match number {
        Some(n) => format!("revision {n}"),
        None => "revision ?".to_string(),
    }
}

/// The name of a ConfigMap or a Secret, serialized under its kind: `"configMap": "app-abc"` for a
/// ConfigMapSet's, `"secret": "db-abc"` for a SecretSet's (flattened into the object that holds it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ObjectName {
    ConfigMap(String),
    Secret(String),
}

impl ObjectName {
    pub fn new(kind: Referenced, name: impl Into<String>) -> Self {
        match kind {
            Referenced::ConfigMap => Self::ConfigMap(name.into()),
            Referenced::Secret => Self::Secret(name.into()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Self::ConfigMap(name) | Self::Secret(name) => name,
        }
    }
}

/// A set's kind as JSON and YAML show it: `"ConfigMapSet"`, `"SecretSet"`.
pub fn serialize_kind<S: Serializer>(kind: &SetKind, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(kind.as_str())
}

/// Table headers and text name the revisions' kind: `CONFIGMAP`, `SECRET`.
pub fn column(kind: Referenced) -> &'static str {
    match kind {
        Referenced::ConfigMap => "CONFIGMAP",
        Referenced::Secret => "SECRET",
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Literal sets, ConfigMaps and Secrets for the tests of every module.

    use std::collections::BTreeMap;

    use cmset_api::{
        ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, SecretSet, SecretSetSpec, WorkloadState,
        WorkloadStatus,
    };
    use cmset_core::set::SetRef;
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    pub const SET_UID: &str = "set-uid";

    /// ConfigMapSet `app` (its spec holds no data), with the status given. A workload recorded as pinned
    /// ran the current revision, as cmset records it.
    pub fn set(current: Option<&str>, revision: Option<i64>, workloads: Vec<WorkloadStatus>) -> ConfigMapSet {
        let mut set = ConfigMapSet::new("app", ConfigMapSetSpec::default());
        set.metadata.namespace = Some("demo".into());
        set.metadata.uid = Some(SET_UID.into());
        set.metadata.generation = Some(3);
        let workloads = workloads
            .into_iter()
            .map(|mut w| {
                if w.state == WorkloadState::Pinned && w.rolled_out.is_none() {
                    w.rolled_out = current.map(str::to_string);
                }
                w
            })
            .collect();
        set.status = Some(ConfigMapSetStatus {
            observed_generation: Some(3),
            revision,
            current_revision: current.map(str::to_string),
            workloads,
            ..Default::default()
        });
        set
    }

    pub const SECRET_SET_UID: &str = "secret-set-uid";

    /// SecretSet `app`, with the status [`set`] gives ConfigMapSet `app`: a set of each kind may have the
    /// same name, and they are independent.
    pub fn secret_set(
        current: Option<&str>,
        revision: Option<i64>,
        workloads: Vec<WorkloadStatus>,
    ) -> SecretSet {
        let mut secret_set = SecretSet::new(
            "app",
            SecretSetSpec {
                secret_name: "app-source".into(),
                ..SecretSetSpec::default()
            },
        );
        let cm_set = set(current, revision, workloads);
        secret_set.metadata = ObjectMeta {
            uid: Some(SECRET_SET_UID.into()),
            ..cm_set.metadata
        };
        secret_set.status = cm_set.status;
        secret_set
    }

    /// A revision Secret of SecretSet `app` with number `n`, created at `created` (RFC 3339), of type
    /// `type_`, holding `data`.
    pub fn secret_revision(
        name: &str,
        n: Option<i64>,
        created: &str,
        type_: Option<&str>,
        data: &[(&str, &[u8])],
    ) -> Secret {
        let cm = revision(name, n, created, &[]);
        Secret {
            metadata: ObjectMeta {
                owner_references: Some(vec![owner("SecretSet", "app", SECRET_SET_UID, true)]),
                ..cm.metadata
            },
            type_: type_.map(str::to_string),
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), ByteString(v.to_vec())))
                    .collect(),
            ),
            immutable: Some(true),
            ..Default::default()
        }
    }

    /// A Secret value as text, distinctive enough that finding it in any output proves a leak.
    pub const SECRET_TEXT: &[u8] = b"hunter2-SECRET-VALUE";
    /// A binary Secret value: not UTF-8, with an escape sequence in it.
    pub const SECRET_BINARY: &[u8] = b"\x00\xff\xfeSECRET-BYTES\x1b[31m\x01";
    /// Another binary value, for keys present on both sides.
    pub const SECRET_OTHER: &[u8] = b"correct-horse-battery-staple";

    /// Fails if `out` holds any of the values above in any form that could have been printed: as text,
    /// as the API and `kubectl get -o yaml` show Secret data (base64), as hex or a list of bytes, or
    /// as a digest (a SHA-256 of a short password gives it away to a dictionary).
    pub fn assert_no_secret_values(out: &str) {
        use sha2::{Digest, Sha256};
        for value in [SECRET_TEXT, SECRET_BINARY, SECRET_OTHER] {
            let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
            let base64 = serde_json::to_value(ByteString(value.to_vec())).unwrap();
            let forms = [
                String::from_utf8_lossy(value).into_owned(),
                base64.as_str().unwrap().to_string(),
                hex(value),
                hex(&Sha256::digest(value)),
                format!("{:?}", &value[..4]).trim_end_matches(']').to_string(),
            ];
            for form in forms {
                assert!(!out.contains(&form), "{form:?} leaked into:\n{out}");
            }
        }
        for piece in ["hunter2", "SECRET-VALUE", "SECRET-BYTES", "correct-horse"] {
            assert!(!out.contains(piece), "{piece:?} leaked into:\n{out}");
        }
    }

    pub fn workload(kind: &str, name: &str, revision: &str, state: WorkloadState) -> WorkloadStatus {
        WorkloadStatus {
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            revision: revision.into(),
            state,
            rolled_out: None,
            ..Default::default()
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

    /// `cm` marked as the revision holding the content of [`set`]'s spec: the revision cmset decides
    /// workloads should name.
    pub fn holding_the_spec(mut cm: ConfigMap) -> ConfigMap {
        let identity =
            cmset_core::revisions::revision::inline_identity(SetRef::from(&set(None, None, vec![])))
                .expect("the set holds its content");
        cm.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(cmset_api::labels::CONTENT_HASH.to_string(), identity);
        cm
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
        let set = SetRef::from(&set);
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
        let got: Vec<(String, Option<i64>)> = revisions_of(set, &cms)
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
    fn a_secret_set_s_revisions_are_its_own_secrets() {
        // A ConfigMapSet and a SecretSet both named `app`: each has only the revisions it controls.
        let cm_set = set(None, None, vec![]);
        let secret_set = secret_set(None, None, vec![]);
        let secrets = vec![
            secret_revision("app-2", Some(2), "2026-01-01T00:00:00Z", None, &[]),
            secret_revision("app-1", Some(1), "2026-01-01T00:00:00Z", None, &[]),
        ];
        let revisions = revisions_of(SetRef::from(&secret_set), &secrets);
        let got: Vec<(&str, Option<i64>, usize)> = revisions
            .iter()
            .map(|r| (r.name.as_str(), r.number, r.index))
            .collect();
        assert_eq!(got, [("app-2", Some(2), 0), ("app-1", Some(1), 1)]);
        assert!(revisions_of(SetRef::from(&cm_set), &secrets).is_empty());
        let cms = vec![revision("app-1", Some(1), "2026-01-01T00:00:00Z", &[])];
        assert!(revisions_of(SetRef::from(&secret_set), &cms).is_empty());
    }

    #[test]
    fn object_names_serialize_under_their_kind() {
        #[derive(Serialize)]
        struct Row {
            #[serde(flatten)]
            object: ObjectName,
        }
        let row = |kind, name| {
            serde_json::to_value(Row {
                object: ObjectName::new(kind, name),
            })
            .unwrap()
        };
        assert_eq!(
            row(Referenced::ConfigMap, "app-a"),
            serde_json::json!({"configMap": "app-a"})
        );
        assert_eq!(
            row(Referenced::Secret, "db-a"),
            serde_json::json!({"secret": "db-a"})
        );
        assert_eq!(ObjectName::Secret("db-a".into()).name(), "db-a");
    }

    #[test]
    fn the_leak_check_catches_every_form() {
        let leaks = [
            "hunter2".to_string(),
            "aHVudGVyMi1TRUNSRVQtVkFMVUU=".to_string(),
            SECRET_OTHER.iter().map(|b| format!("{b:02x}")).collect(),
            format!("{:?}", SECRET_TEXT),
            String::from_utf8_lossy(SECRET_BINARY).into_owned(),
            serde_json::to_string(&k8s_openapi::ByteString(SECRET_BINARY.to_vec())).unwrap(),
        ];
        for leak in leaks {
            let caught = std::panic::catch_unwind(|| assert_no_secret_values(&format!("x {leak} y")));
            assert!(caught.is_err(), "{leak:?} passed the check");
        }
        assert_no_secret_values("@@ password: changed @@");
    }

    #[test]
    fn labels() {
        assert_eq!(label(Some(4)), "revision 4");
        assert_eq!(label(None), "revision ?");
    }
}
