//! The operator's own API requests, by verb and resource, told apart from everyone else's.
//!
//! `apiserver_request_total` has no client label, and on a shared cluster other cmset processes run
//! under the install's ServiceAccount too (e2e tests, another bench). So the bench gives its replicas
//! an identity of their own: a ServiceAccount `cmset-controller` in a namespace of the run, bound to
//! every role the install's ServiceAccount (`cmset-system/cmset-controller`) is bound to (copies of
//! its bindings, so the rights are the same), and a copy of the operator's kubeconfig with that
//! account's token. Then it gives the API server's priority and fairness filter a way to count that
//! identity's requests: one FlowSchema per (verb, resource) the operator may use, each matching only
//! that account, all sending it to the priority level a ServiceAccount gets anyway (`workload-low`, as
//! the built-in `service-accounts` schema does), and one schema after them for anything else it sends.
//! `apiserver_flowcontrol_dispatched_requests_total` counts requests by schema, so a window's
//! difference is the operator's requests by verb and resource. Long-running requests (watches) bypass
//! priority and fairness on older API servers and are not counted there. Everything is labelled with
//! the run and deleted at its end.

use std::collections::BTreeMap;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding, Subject};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::cluster::{self, Result};

/// The install's ServiceAccount (config/rbac binds its rights to it).
pub const SERVICE_ACCOUNT: (&str, &str) = ("cmset-system", "cmset-controller");
const PRIORITY_LEVEL: &str = "workload-low";
/// After `exempt` and the built-in leader-election and kube-system schemas (which cannot match the
/// operator), before `service-accounts` (9000).
const PRECEDENCE: i64 = 1000;
const RUN_LABEL: &str = "bench.cmset.dev/run";

const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

/// (API group, resource[/subresource]) the operator reads or writes.
const RESOURCES: [(&str, &str); 18] = [
    ("", "configmaps"),
    ("", "secrets"),
    ("", "events"),
    ("", "pods"),
    ("", "namespaces"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("apps", "replicasets"),
    ("apps", "controllerrevisions"),
    ("cmset.dev", "configmapsets"),
    ("cmset.dev", "configmapsets/status"),
    ("cmset.dev", "secretsets"),
    ("cmset.dev", "secretsets/status"),
    ("cmset.dev", "analysistemplates"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"),
];

/// What anything else the operator sends is counted as.
pub const OTHER: &str = "other";

/// The run's FlowSchemas: name → `VERB resource` (as the API server's counters write it, e.g.
/// `PATCH configmapsets.cmset.dev/status`), or [`OTHER`].
#[derive(Clone, Debug, Default)]
pub struct Schemas {
    pub run: String,
    pub names: BTreeMap<String, String>,
    api: Option<ApiResource>,
}

/// `configmapsets.cmset.dev/status` from ("cmset.dev", "configmapsets/status").
fn kubectl_resource(group: &str, resource: &str) -> String {
    let (plural, sub) = match resource.split_once('/') {
        Some((p, s)) => (p, Some(s)),
        None => (resource, None),
    };
    let mut out = plural.to_string();
    if !group.is_empty() {
        out = format!("{out}.{group}");
    }
    if let Some(sub) = sub {
        out = format!("{out}/{sub}");
    }
    out
}

/// Every schema the run makes: (name, `VERB resource` or OTHER, its spec's rules).
fn plan(run: &str, account: &(String, String)) -> Vec<(String, String, serde_json::Value)> {
    let mut out = vec![];
    for (group, resource) in RESOURCES {
        let what = kubectl_resource(group, resource);
        for verb in VERBS {
            let name = format!("{run}.{verb}.{}", what.replace('/', "."));
            let rules = json!([{"subjects": subjects(account), "resourceRules": [{
                "verbs": [verb], "apiGroups": [group], "resources": [resource],
                "clusterScope": true, "namespaces": ["*"],
            }]}]);
            out.push((name, format!("{} {what}", verb.to_uppercase()), rules));
        }
    }
    let rules = json!([{"subjects": subjects(account),
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    }]);
    out.push((format!("{run}.{OTHER}"), OTHER.to_string(), rules));
    out
}

fn subjects(account: &(String, String)) -> serde_json::Value {
    json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": account.0, "name": account.1}}])
}

fn flowschemas(version: &str) -> ApiResource {
    ApiResource {
        group: "flowcontrol.apiserver.k8s.io".into(),
        version: version.into(),
        api_version: format!("flowcontrol.apiserver.k8s.io/{version}"),
        kind: "FlowSchema".into(),
        plural: "flowschemas".into(),
    }
}

impl Schemas {
    /// Creates the run's schemas in the newest FlowSchema version the API server serves.
    pub async fn install(
        client: &Client,
        run: &str,
        account: (String, String),
        concurrency: usize,
    ) -> Result<Self> {
        let mut found = None;
        for version in ["v1", "v1beta3", "v1beta2", "v1beta1"] {
            let ar = flowschemas(version);
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            if api.list(&ListParams::default().limit(1)).await.is_ok() {
                found = Some(ar);
                break;
            }
        }
        let ar = found.ok_or("the API server serves no FlowSchema API (priority and fairness off)")?;
        let planned = plan(run, &account);
        let mut s = Schemas {
            run: run.to_string(),
            names: BTreeMap::new(),
            api: Some(ar.clone()),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let result = cluster::bounded(planned.len(), concurrency, |i| {
            let (api, ar) = (api.clone(), ar.clone());
            let (name, _, rules) = planned[i].clone();
            let precedence = if i + 1 == planned.len() {
                PRECEDENCE + 1
            } else {
                PRECEDENCE
            };
            async move {
                let obj: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": ar.api_version,
                    "kind": "FlowSchema",
                    "metadata": {"name": name, "labels": {RUN_LABEL: run, "app.kubernetes.io/part-of": "cmset-bench"}},
                    "spec": {
                        "priorityLevelConfiguration": {"name": PRIORITY_LEVEL},
                        "matchingPrecedence": precedence,
                        "distinguisherMethod": {"type": "ByUser"},
                        "rules": rules,
                    },
                }))?;
                cluster::create(&api, &obj).await
            }
        })
        .await;
        s.names = planned.into_iter().map(|(n, what, _)| (n, what)).collect();
        if let Err(e) = result {
            s.remove(client).await;
            return Err(e);
        }
        Ok(s)
    }

    /// Deletes the run's schemas.
    pub async fn remove(&self, client: &Client) {
        let Some(ar) = &self.api else { return };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run));
        let dp = DeleteParams::default();
        if let Err(e) = cluster::retry("delete the bench's FlowSchemas", || {
            api.delete_collection(&dp, &lp)
        })
        .await
        {
            eprintln!("bench: {e}");
        }
    }

    /// The operator's requests by `VERB resource` (and [`OTHER`]), from the dispatched counts by schema.
    pub fn requests(&self, dispatched: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for (schema, n) in dispatched {
            if let Some(what) = self.names.get(schema) {
                *out.entry(what.clone()).or_default() += n;
            }
        }
        out
    }
}

/// The run's own ServiceAccount for the replicas, with the install's rights.
#[derive(Clone, Debug)]
pub struct Identity {
    pub run: String,
    /// (namespace, name) of the ServiceAccount.
    pub account: (String, String),
    /// A copy of the operator's kubeconfig with that account's token.
    pub kubeconfig: PathBuf,
}

fn is_install_account(s: &Subject) -> bool {
    s.kind == "ServiceAccount"
        && s.name == SERVICE_ACCOUNT.1
        && s.namespace.as_deref() == Some(SERVICE_ACCOUNT.0)
}

fn run_meta(name: String, namespace: Option<String>, run: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace,
        labels: Some([(RUN_LABEL.to_string(), run.to_string())].into()),
        ..ObjectMeta::default()
    }
}

/// `kubeconfig` with every `token:` replaced by `token`; none there (client certificates) is an error.
fn with_token(kubeconfig: &str, token: &str) -> Result<String> {
    let mut found = false;
    let out: Vec<String> = kubeconfig
        .lines()
        .map(|line| match line.split_once("token:") {
            Some((indent, _)) if indent.trim().is_empty() => {
                found = true;
                format!("{indent}token: {token}")
            }
            _ => line.to_string(),
        })
        .collect();
    if !found {
        return Err("the operator's kubeconfig has no token to replace".into());
    }
    Ok(out.join("\n") + "\n")
}

impl Identity {
    /// Makes the ServiceAccount `cmset-controller` in `namespace` (which the caller made), copies of
    /// the install's ServiceAccount's ClusterRoleBindings and of its RoleBindings in its namespace, and a kubeconfig like `source` with its
    /// token, written into `dir`.
    pub async fn make(
        client: &Client,
        run: &str,
        namespace: &str,
        source: &Path,
        dir: &Path,
    ) -> Result<Self> {
        let account = (namespace.to_string(), SERVICE_ACCOUNT.1.to_string());
        let sas = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
        let sa = ServiceAccount {
            metadata: run_meta(account.1.clone(), None, run),
            ..ServiceAccount::default()
        };
        cluster::create(&sas, &sa).await?;
        let subject = Subject {
            kind: "ServiceAccount".into(),
            name: account.1.clone(),
            namespace: Some(account.0.clone()),
            api_group: None,
        };
        let crbs = Api::<ClusterRoleBinding>::all(client.clone());
        let lp = ListParams::default();
        for b in cluster::retry("list ClusterRoleBindings", || crbs.list(&lp)).await? {
            if b.subjects.iter().flatten().any(is_install_account) {
                let copy = ClusterRoleBinding {
                    metadata: run_meta(format!("{run}-{}", b.name_any()), None, run),
                    role_ref: b.role_ref.clone(),
                    subjects: Some(vec![subject.clone()]),
                };
                cluster::create(&crbs, &copy).await?;
            }
        }
        // The install's RoleBindings live in its own namespace; those of other namespaces (another
        // bench's Lease grants, e2e tests') are theirs.
        let rbs = Api::<RoleBinding>::namespaced(client.clone(), SERVICE_ACCOUNT.0);
        for b in cluster::retry("list RoleBindings", || rbs.list(&lp)).await? {
            if b.subjects.iter().flatten().any(is_install_account) {
                let ns = b.namespace().unwrap_or_default();
                let copy = RoleBinding {
                    metadata: run_meta(format!("{run}-{}", b.name_any()), Some(ns.clone()), run),
                    role_ref: b.role_ref.clone(),
                    subjects: Some(vec![subject.clone()]),
                };
                cluster::create(&Api::<RoleBinding>::namespaced(client.clone(), &ns), &copy).await?;
            }
        }
        // The token controller adds the account's token Secret (Kubernetes before 1.24); on later
        // versions none comes and the bench says so.
        let secrets = Api::<Secret>::namespaced(client.clone(), namespace);
        let deadline = Instant::now() + Duration::from_secs(30);
        let token = loop {
            let lp = ListParams::default().fields("type=kubernetes.io/service-account-token");
            let found = cluster::retry("list token Secrets", || secrets.list(&lp))
                .await?
                .into_iter()
                .find(|s| s.annotations().get("kubernetes.io/service-account.name") == Some(&account.1))
                .and_then(|s| {
                    s.data?
                        .get("token")
                        .map(|t| String::from_utf8_lossy(&t.0).into_owned())
                });
            if let Some(token) = found {
                break token;
            }
            if Instant::now() >= deadline {
                return Err("no token Secret for the run's ServiceAccount within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let kubeconfig = dir.join("operator-identity.kubeconfig");
        std::fs::write(
            &kubeconfig,
            with_token(&std::fs::read_to_string(source)?, &token)?,
        )?;
        Ok(Identity {
            run: run.to_string(),
            account,
            kubeconfig,
        })
    }

    /// Deletes the copies of the bindings and the kubeconfig (the account goes with its namespace).
    pub async fn remove(&self, client: &Client) {
        let _ = std::fs::remove_file(&self.kubeconfig);
        let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run));
        let dp = DeleteParams::default();
        let crbs = Api::<ClusterRoleBinding>::all(client.clone());
        if let Err(e) = cluster::retry("delete the run's ClusterRoleBindings", || {
            crbs.delete_collection(&dp, &lp)
        })
        .await
        {
            eprintln!("bench: {e}");
        }
        let all = Api::<RoleBinding>::all(client.clone());
        if let Ok(list) = cluster::retry("list the run's RoleBindings", || all.list(&lp)).await {
            for b in list {
                let api = Api::<RoleBinding>::namespaced(client.clone(), &b.namespace().unwrap_or_default());
                let name = b.name_any();
                if let Err(e) = cluster::retry("delete a RoleBinding", || api.delete(&name, &dp)).await {
                    eprintln!("bench: {e}");
                }
            }
        }
    }
}

/// `apiserver_flowcontrol_dispatched_requests_total` summed by flow schema.
pub fn parse_dispatched(body: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("apiserver_flowcontrol_dispatched_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        // Schema names hold no quote or comma.
        let schema = labels.split(',').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == "flow_schema" || k == "flowSchema").then(|| v.trim_matches('"').to_string())
        });
        if let Some(schema) = schema {
            *out.entry(schema).or_default() += value;
        }
    }
    out
}

/// The difference of two dispatched counts (schemas that appeared since count from 0).
pub fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_schema_per_verb_and_resource_and_one_for_the_rest() {
        let account = ("ns".to_string(), "cmset-controller".to_string());
        let p = plan("cmset-bench-abcde", &account);
        assert_eq!(p.len(), VERBS.len() * RESOURCES.len() + 1);
        let names: std::collections::HashSet<&str> = p.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names.len(), p.len(), "names are unique");
        assert!(
            p.iter().all(|(n, _, _)| n.len() <= 253
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')),
            "every name is a DNS subdomain"
        );
        let status = p
            .iter()
            .find(|(n, _, _)| n == "cmset-bench-abcde.patch.configmapsets.cmset.dev.status")
            .expect("a schema for status patches");
        assert_eq!(status.1, "PATCH configmapsets.cmset.dev/status");
        assert_eq!(
            status.2[0]["resourceRules"][0]["resources"][0],
            "configmapsets/status"
        );
        assert_eq!(p.last().unwrap().1, OTHER);
        assert_eq!(
            status.2[0]["subjects"][0]["serviceAccount"]["namespace"], "ns",
            "only the run's own account"
        );
    }

    #[test]
    fn the_kubeconfig_copy_differs_only_in_its_token() {
        let kc = "users:\n- name: op\n  user:\n    token: secret-one\ncontexts: []\n";
        let copy = with_token(kc, "secret-two").unwrap();
        assert_eq!(copy, kc.replace("secret-one", "secret-two"));
        assert!(with_token("users:\n- name: op\n  user:\n    client-certificate: x\n", "t").is_err());
    }

    #[test]
    fn dispatched_counts_by_schema_become_requests_by_verb_and_resource() {
        let body = r#"# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 11737
apiserver_flowcontrol_dispatched_requests_total{flow_schema="r.get.configmaps",priority_level="workload-low"} 4
apiserver_flowcontrol_dispatched_requests_total{flow_schema="r.other",priority_level="workload-low"} 2
"#;
        let before = parse_dispatched(body);
        assert_eq!(before["exempt"], 11737.0);
        let after = parse_dispatched(&body.replace("} 4", "} 9"));
        let account = ("ns".to_string(), "cmset-controller".to_string());
        let s = Schemas {
            run: "r".into(),
            names: plan("r", &account).into_iter().map(|(n, w, _)| (n, w)).collect(),
            api: None,
        };
        let r = s.requests(&delta(&after, &before));
        assert_eq!(r, [("GET configmaps".to_string(), 5.0)].into());
    }
}
