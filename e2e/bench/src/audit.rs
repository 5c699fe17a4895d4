//! Whose reads: the API server's audit log (on the local control plane, `e2e/cluster/cluster.sh`
//! writes the metadata of every LIST, and of every GET of cmset's own kinds, to
//! `<cluster>/logs/audit.log`) read over a measured window, each request counted by the user that sent
//! it, its user agent, the verb and the resource. `apiserver_request_total` counts requests by verb and
//! resource but not by client, which left one "LIST" of ConfigMapSets per change in issue 37's bursts
//! without an owner: the log shows it is kube-controller-manager's garbage collector reading the owner
//! of each new revision, a GET that API server 1.20 counts as a LIST for custom resources.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// An audit log the bench reads from where a window began.
#[derive(Clone, Debug)]
pub struct AuditLog {
    pub path: PathBuf,
}

/// LISTs (or GETs of cmset's kinds) in a window from one client, of one resource.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ListCount {
    /// `list` or `get`.
    pub verb: String,
    /// The authenticated user (`system:serviceaccount:kube-system:namespace-controller`, `admin`...).
    pub user: String,
    /// The user agent's program, without its version and platform (`kube-controller-manager`).
    pub agent: String,
    pub resource: String,
    /// The namespace listed, or `*` for a list across namespaces.
    pub namespace: String,
    pub count: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    stage: String,
    #[serde(default)]
    verb: String,
    #[serde(default)]
    user: User,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
}

#[derive(Default, Deserialize)]
struct User {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    api_group: String,
    #[serde(default)]
    namespace: Option<String>,
}

impl AuditLog {
    /// Where the log ends now: the start of a window.
    pub fn offset(&self) -> u64 {
        std::fs::metadata(&self.path).map_or(0, |m| m.len())
    }

    /// The LISTs (and GETs of cmset's kinds) written since `offset`, most first. A log rotated meanwhile (at 2 GB) reads from
    /// the start of the new file.
    pub fn lists_since(&self, offset: u64) -> std::io::Result<Vec<ListCount>> {
        let mut file = std::fs::File::open(&self.path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(if len >= offset { offset } else { 0 }))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        Ok(count_lists(&text))
    }
}

/// Every completed LIST, and GET of a cmset.dev kind, in `text` (JSON lines), counted by verb, user,
/// agent, resource and namespace. (A log of every request, `CMSET_CLUSTER_AUDIT=1`, holds other GETs
/// too; they are left out, so both logs give the same counts.)
pub fn count_lists(text: &str) -> Vec<ListCount> {
    let mut counts: BTreeMap<(String, String, String, String, String), u64> = BTreeMap::new();
    for line in text.lines() {
        // A line cut by a read racing the writer is skipped; the next window starts after it anyway.
        let Ok(entry) = serde_json::from_str::<Entry>(line) else {
            continue;
        };
        let cmset_kind = entry
            .object_ref
            .as_ref()
            .is_some_and(|o| o.api_group == "cmset.dev");
        let counted = entry.verb == "list" || (entry.verb == "get" && cmset_kind);
        if !counted || entry.stage != "ResponseComplete" {
            continue;
        }
        let (resource, namespace) = match entry.object_ref {
            Some(o) => (o.resource, o.namespace.unwrap_or_else(|| "*".into())),
            None => (String::new(), "*".into()),
        };
        let agent = entry
            .user_agent
            .split(['/', ' '])
            .next()
            .unwrap_or_default()
            .to_string();
        *counts
            .entry((entry.verb, entry.user.username, agent, resource, namespace))
            .or_default() += 1;
    }
    let mut out: Vec<ListCount> = counts
        .into_iter()
        .map(|((verb, user, agent, resource, namespace), count)| ListCount {
            verb,
            user,
            agent,
            resource,
            namespace,
            count,
        })
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.count));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(stage: &str, verb: &str, user: &str, agent: &str, resource: &str, ns: Option<&str>) -> String {
        let group = if resource == "configmapsets" {
            "cmset.dev"
        } else {
            "apps"
        };
        let mut object_ref = serde_json::json!({"resource": resource, "apiGroup": group});
        if let Some(ns) = ns {
            object_ref["namespace"] = ns.into();
        }
        serde_json::json!({
            "kind": "Event", "level": "Metadata", "stage": stage, "verb": verb,
            "user": {"username": user, "groups": ["system:authenticated"]},
            "userAgent": agent, "objectRef": object_ref,
        })
        .to_string()
    }

    #[test]
    fn counts_completed_lists_by_client_and_resource() {
        let nc = "system:serviceaccount:kube-system:namespace-controller";
        let kcm = "kube-controller-manager/v1.20.2 (linux/amd64) kubernetes/faecb19/system:serviceaccount:kube-system:namespace-controller";
        let text = [
            line("ResponseComplete", "list", nc, kcm, "configmapsets", Some("b-1")),
            line("ResponseComplete", "list", nc, kcm, "configmapsets", Some("b-1")),
            line("ResponseStarted", "list", nc, kcm, "configmapsets", Some("b-1")),
            line("ResponseComplete", "watch", nc, kcm, "configmapsets", Some("b-1")),
            line(
                "ResponseComplete",
                "list",
                "admin",
                "cmset-bench",
                "deployments",
                None,
            ),
            line(
                "ResponseComplete",
                "get",
                "admin",
                kcm,
                "configmapsets",
                Some("b-1"),
            ),
            "{cut".to_string(),
        ]
        .join("\n");
        let counts = count_lists(&text);
        assert_eq!(counts.len(), 3, "{counts:?}");
        assert_eq!(
            counts[0],
            ListCount {
                verb: "list".into(),
                user: nc.into(),
                agent: "kube-controller-manager".into(),
                resource: "configmapsets".into(),
                namespace: "b-1".into(),
                count: 2,
            }
        );
        let rest: Vec<(&str, &str, u64)> = counts[1..]
            .iter()
            .map(|c| (c.verb.as_str(), c.namespace.as_str(), c.count))
            .collect();
        assert_eq!(rest, [("get", "b-1", 1), ("list", "*", 1)]);
    }

    #[test]
    fn reads_only_what_was_written_since_the_offset() {
        let path = std::env::temp_dir().join(format!("cmset-bench-audit-{}.log", std::process::id()));
        let first = line("ResponseComplete", "list", "a", "x", "pods", Some("n"));
        std::fs::write(&path, format!("{first}\n")).unwrap();
        let log = AuditLog { path: path.clone() };
        let offset = log.offset();
        assert!(log.lists_since(offset).unwrap().is_empty());
        let second = line("ResponseComplete", "list", "b", "y", "configmapsets", Some("n"));
        std::fs::write(&path, format!("{first}\n{second}\n")).unwrap();
        let counts = log.lists_since(offset).unwrap();
        assert_eq!((counts.len(), counts[0].user.as_str()), (1, "b"));
        // Rotated: shorter than the offset, read from its start.
        std::fs::write(&path, format!("{second}\n")).unwrap();
        assert_eq!(log.lists_since(offset + 1000).unwrap().len(), 1);
        std::fs::remove_file(&path).unwrap();
    }
}
