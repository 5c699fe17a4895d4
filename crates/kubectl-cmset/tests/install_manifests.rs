//! The install manifests under `config/` follow the table of workload kinds
//! (`cmset_core::workloads::kinds`), so that adding a kind to the table without its RBAC or webhook rule fails
//! here rather than in a cluster:
//!
//! - every RBAC variant of the operator (each `ClusterRole` or `Role` named `cmset-controller`, wherever
//!   it is under `config/`) lets it list and watch every built-in kind, patch exactly the kinds whose
//!   template can change, and read the history each kind keeps; and nothing more on them;
//! - the admission webhook has, for every built-in kind and each of its versions, a rule for its group,
//!   version and resource with CREATE and UPDATE (a Job too: an update that names its set again keeps
//!   the revisions it was created with); and no rule for anything else.
//!
//! - the table of kinds in `docs/kinds.md` ("Built-in kinds") has a row for every built-in kind with
//!   its API versions, resource and template.
//!
//! The files are read as written (rendered from the chart config/helm/cmset by `make manifests`;
//! `make manifests-check` checks the built variants against one another). The checks are plain functions returning what is
//! wrong, so that the last tests can prove they refuse manifests that drifted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use cmset_core::workloads::kinds::{HistoryRule, WorkloadKind};
use serde::Deserialize;
use serde_json::{Value, json};

const CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config");
const OPERATOR: &str = "cmset-controller";

/// One YAML document of a file under `config/`.
struct Document {
    file: PathBuf,
    value: Value,
}

impl Document {
    fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    fn label(&self) -> String {
        let file = self.file.strip_prefix(CONFIG).unwrap_or(&self.file);
        format!("config/{} ({} {})", file.display(), self.kind(), self.name())
    }
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            // The chart's templates are Go templates, not YAML; what they render is here too (config/default
            // and the variants, and the chart's golden files), and is read instead.
            if !path.ends_with("helm/cmset/templates") {
                yaml_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

/// Every YAML document under `config/`, in path order.
fn documents() -> Vec<Document> {
    let mut files = Vec::new();
    yaml_files(Path::new(CONFIG), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = Value::deserialize(document).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            if !value.is_null() {
                out.push(Document {
                    file: file.clone(),
                    value,
                });
            }
        }
    }
    out
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// The verbs a role grants on each (group, resource), from its rules that apply to every object of the
/// resource (rules limited by `resourceNames` grant nothing on a workload cmset does not know by name).
fn verbs_by_resource(role: &Value) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in role.get("rules").and_then(Value::as_array).into_iter().flatten() {
        if !strings(rule.get("resourceNames")).is_empty() {
            continue;
        }
        for group in strings(rule.get("apiGroups")) {
            for resource in strings(rule.get("resources")) {
                out.entry((group.clone(), resource))
                    .or_default()
                    .extend(strings(rule.get("verbs")));
            }
        }
    }
    out
}

fn set(words: &[&str]) -> BTreeSet<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// What the operator's role must grant, and may grant, on each resource the table of kinds names:
/// (needed, allowed).
fn rbac_expected() -> BTreeMap<(String, String), (BTreeSet<String>, BTreeSet<String>)> {
    let mut out: BTreeMap<(String, String), (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut need = |group: &str, resource: &str, needed: &[&str], allowed: &[&str]| {
        let entry = out.entry((group.to_string(), resource.to_string())).or_default();
        entry.0.extend(set(needed));
        entry.1.extend(set(needed));
        entry.1.extend(set(allowed));
    };
    for kind in WorkloadKind::BUILT_IN {
        let spec = kind.spec();
        let plural = spec.plural.expect("a built-in kind names its resource");
        // Watched by label; patched only when its template may change after creation (never a Job).
        let needed: &[&str] = if kind.is_mutable() {
            &["list", "watch", "patch"]
        } else {
            &["list", "watch"]
        };
        need(spec.group, plural, needed, &["get"]);
        let history = match spec.history {
            HistoryRule::ReplicaSets => Some(("apps", "replicasets")),
            HistoryRule::ControllerRevisions => Some(("apps", "controllerrevisions")),
            HistoryRule::Jobs => Some(("batch", "jobs")),
            HistoryRule::None => None,
        };
        if let Some((group, resource)) = history {
            need(group, resource, &["list", "watch"], &["get"]);
        }
    }
    out
}

/// What is wrong with an operator role, for the table of kinds; empty when nothing is.
fn rbac_problems(role: &Value) -> Vec<String> {
    let granted = verbs_by_resource(role);
    let mut problems = Vec::new();
    for ((group, resource), verbs) in &granted {
        if group == "*" || resource == "*" || verbs.contains("*") {
            problems.push(format!(
                "grants {verbs:?} on {resource:?} in group {group:?}: no wildcards (least privilege)"
            ));
        }
    }
    for ((group, resource), (needed, allowed)) in rbac_expected() {
        let have = granted
            .get(&(group.clone(), resource.clone()))
            .cloned()
            .unwrap_or_default();
        let missing: Vec<&String> = needed.difference(&have).collect();
        let extra: Vec<&String> = have.difference(&allowed).collect();
        if !missing.is_empty() {
            problems.push(format!("lacks {missing:?} on {group}/{resource}"));
        }
        if !extra.is_empty() {
            problems.push(format!(
                "grants {extra:?} on {group}/{resource}, which the table of kinds does not need"
            ));
        }
    }
    problems
}

/// The operations the table of kinds wants admitted per (group, version, resource).
fn webhook_expected() -> BTreeMap<(String, String, String), BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for kind in WorkloadKind::BUILT_IN {
        let spec = kind.spec();
        let plural = spec.plural.expect("a built-in kind names its resource");
        // Every kind on UPDATE too: a template that cannot change (a Job) is given its revisions when
        // the object is created, and an update that names the set again keeps them as stored.
        let operations = set(&["CREATE", "UPDATE"]);
        for version in spec.versions {
            out.insert(
                (spec.group.to_string(), version.to_string(), plural.to_string()),
                operations.clone(),
            );
        }
    }
    out
}

/// What is wrong with a webhook of the MutatingWebhookConfiguration, for the table of kinds.
fn webhook_problems(webhook: &Value) -> Vec<String> {
    let mut admitted: BTreeMap<(String, String, String), BTreeSet<String>> = BTreeMap::new();
    for rule in webhook
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let operations = strings(rule.get("operations"));
        for group in strings(rule.get("apiGroups")) {
            for version in strings(rule.get("apiVersions")) {
                for resource in strings(rule.get("resources")) {
                    admitted
                        .entry((group.clone(), version.clone(), resource))
                        .or_default()
                        .extend(operations.iter().cloned());
                }
            }
        }
    }
    let expected = webhook_expected();
    let mut problems = Vec::new();
    for ((group, version, resource), want) in &expected {
        match admitted.get(&(group.clone(), version.clone(), resource.clone())) {
            None => problems.push(format!("no rule for {group}/{version} {resource}")),
            Some(have) if have != want => problems.push(format!(
                "the rule for {group}/{version} {resource} admits {have:?}, the table of kinds wants {want:?}"
            )),
            Some(_) => {}
        }
    }
    for ((group, version, resource), have) in &admitted {
        if !expected.contains_key(&(group.clone(), version.clone(), resource.clone())) {
            problems.push(format!(
                "a rule admits {have:?} on {group}/{version} {resource}, which is no built-in workload kind"
            ));
        }
    }
    problems
}

fn operator_roles(documents: &[Document]) -> Vec<&Document> {
    documents
        .iter()
        .filter(|d| matches!(d.kind(), "ClusterRole" | "Role") && d.name() == OPERATOR)
        .collect()
}

fn webhook_configurations(documents: &[Document]) -> Vec<&Document> {
    documents
        .iter()
        .filter(|d| d.kind() == "MutatingWebhookConfiguration")
        .collect()
}

fn relative_files(documents: &[&Document]) -> BTreeSet<String> {
    documents
        .iter()
        .map(|d| {
            let file = d.file.strip_prefix(CONFIG).unwrap_or(&d.file);
            file.display().to_string()
        })
        .collect()
}

#[test]
fn every_rbac_variant_grants_each_built_in_kind_what_it_needs_and_no_more() {
    let documents = documents();
    let roles = operator_roles(&documents);
    // The search found the variants we know of, so the test cannot pass on finding none.
    let files = relative_files(&roles);
    for known in ["rbac/cluster_role.yaml", "namespaced/cmset.yaml"] {
        assert!(
            files.contains(known),
            "no {OPERATOR} role in config/{known}; found {files:?}"
        );
    }
    let problems: Vec<String> = roles
        .iter()
        .flat_map(|role| {
            rbac_problems(&role.value)
                .into_iter()
                .map(|p| format!("{}: {p}", role.label()))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "RBAC drifted from the table of kinds:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_webhook_admits_each_built_in_kind_at_every_version_with_the_operations_its_template_allows() {
    let documents = documents();
    let configurations = webhook_configurations(&documents);
    let files = relative_files(&configurations);
    assert!(
        files.contains("webhook/configuration/mutating_webhook.yaml"),
        "no MutatingWebhookConfiguration in config/webhook/configuration/mutating_webhook.yaml; found {files:?}"
    );
    let mut problems = Vec::new();
    for configuration in configurations {
        let webhooks = configuration.value.get("webhooks").and_then(Value::as_array);
        assert!(
            webhooks.is_some_and(|w| !w.is_empty()),
            "{}: no webhooks",
            configuration.label()
        );
        for webhook in webhooks.into_iter().flatten() {
            let name = webhook.get("name").and_then(Value::as_str).unwrap_or_default();
            if name == BREAK_GLASS_WEBHOOK {
                // Sets, not workloads: checked in `break_glass_is_registered_and_granted`.
                continue;
            }
            problems.extend(
                webhook_problems(webhook)
                    .into_iter()
                    .map(|p| format!("{}, webhook {name}: {p}", configuration.label())),
            );
        }
    }
    assert!(
        problems.is_empty(),
        "webhook rules drifted from the table of kinds:\n{}",
        problems.join("\n")
    );
}

#[test]
fn what_the_table_asks_of_the_manifests() {
    // Spelled out once, so that a change to the table shows up here as the manifests it implies.
    let rbac = rbac_expected();
    let needed = |group: &str, resource: &str| {
        rbac[&(group.to_string(), resource.to_string())]
            .0
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(",")
    };
    assert_eq!(needed("apps", "deployments"), "list,patch,watch");
    assert_eq!(needed("batch", "cronjobs"), "list,patch,watch");
    assert_eq!(needed("batch", "jobs"), "list,watch");
    assert_eq!(needed("argoproj.io", "rollouts"), "list,patch,watch");
    assert_eq!(needed("apps", "replicasets"), "list,watch");
    assert_eq!(needed("apps", "controllerrevisions"), "list,watch");

    let webhook = webhook_expected();
    let rules: Vec<String> = webhook
        .iter()
        .map(|((g, v, r), ops)| {
            format!(
                "{g}/{v} {r}: {}",
                ops.iter().cloned().collect::<Vec<_>>().join("+")
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            "apps/v1 daemonsets: CREATE+UPDATE",
            "apps/v1 deployments: CREATE+UPDATE",
            "apps/v1 statefulsets: CREATE+UPDATE",
            "argoproj.io/v1alpha1 rollouts: CREATE+UPDATE",
            "batch/v1 cronjobs: CREATE+UPDATE",
            "batch/v1 jobs: CREATE+UPDATE",
            "batch/v1beta1 cronjobs: CREATE+UPDATE",
        ]
    );
}

#[test]
fn the_docs_table_of_kinds_has_every_built_in_kind() {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/kinds.md"))
        .expect("docs/kinds.md");
    let section = page
        .split("\n## Built-in kinds\n")
        .nth(1)
        .and_then(|rest| rest.split("\n#").next())
        .expect("a section \"Built-in kinds\" in docs/kinds.md");
    for kind in WorkloadKind::BUILT_IN {
        let spec = kind.spec();
        let row = section
            .lines()
            .find(|line| line.starts_with(&format!("| {kind} ")))
            .unwrap_or_else(|| panic!("docs/kinds.md's table of kinds has no row for {kind}"));
        let template = spec.template.trim_start_matches('/').replace('/', ".");
        let plural = spec.plural.expect("a built-in kind names its resource");
        let mut wanted: Vec<String> = spec
            .versions
            .iter()
            .map(|v| format!("`{}`", kind.api_version(v)))
            .collect();
        wanted.push(format!("(`{plural}`)"));
        wanted.push(format!("`{template}`"));
        for want in wanted {
            assert!(
                row.contains(&want),
                "docs/kinds.md's row for {kind} lacks {want}: {row}"
            );
        }
    }
}

fn shipped_cluster_role() -> Value {
    let documents = documents();
    let role = operator_roles(&documents)
        .into_iter()
        .find(|d| d.kind() == "ClusterRole")
        .expect("the operator's ClusterRole");
    role.value.clone()
}

fn shipped_webhook() -> Value {
    let documents = documents();
    let configuration = webhook_configurations(&documents)
        .into_iter()
        .next()
        .expect("a MutatingWebhookConfiguration");
    configuration.value["webhooks"][0].clone()
}

/// The rules of `value` with those matching `pick` replaced by `with` (removed when `with` is null).
fn replace_rule(value: &mut Value, pick: impl Fn(&Value) -> bool, with: Value) {
    let rules = value["rules"].as_array_mut().expect("rules");
    let at = rules.iter().position(pick).expect("the rule to replace");
    if with.is_null() {
        rules.remove(at);
    } else {
        rules[at] = with;
    }
}

fn names(rule: &Value, resource: &str) -> bool {
    strings(rule.get("resources")).iter().any(|r| r == resource)
}

#[test]
fn the_rbac_check_refuses_roles_that_drifted() {
    let shipped = shipped_cluster_role();
    assert_eq!(rbac_problems(&shipped), Vec::<String>::new());

    let cases = [
        (
            "no rule for CronJobs",
            json!(null),
            "cronjobs",
            "lacks [\"list\", \"patch\", \"watch\"] on batch/cronjobs",
        ),
        (
            "Jobs patched",
            json!({"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "watch", "patch"]}),
            "jobs",
            "grants [\"patch\"] on batch/jobs",
        ),
        (
            "Rollouts read but not patched",
            json!({"apiGroups": ["argoproj.io"], "resources": ["rollouts"], "verbs": ["list", "watch"]}),
            "rollouts",
            "lacks [\"patch\"] on argoproj.io/rollouts",
        ),
        (
            "Rollouts under a wildcard",
            json!({"apiGroups": ["*"], "resources": ["rollouts"], "verbs": ["list", "watch", "patch"]}),
            "rollouts",
            "no wildcards",
        ),
        (
            "Deployments updated",
            json!({"apiGroups": ["apps"], "resources": ["deployments", "statefulsets", "daemonsets"],
                   "verbs": ["get", "list", "watch", "patch", "update"]}),
            "deployments",
            "grants [\"update\"] on apps/deployments",
        ),
        (
            "history of Deployments and Rollouts not read",
            json!({"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["get", "list", "watch"]}),
            "replicasets",
            "lacks [\"list\", \"watch\"] on apps/replicasets",
        ),
    ];
    for (label, with, resource, expected) in cases {
        let mut role = shipped.clone();
        replace_rule(&mut role, |r| names(r, resource), with);
        let problems = rbac_problems(&role);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{label}: {problems:?} lacks {expected:?}"
        );
    }
}

#[test]
fn the_webhook_check_refuses_rules_that_drifted() {
    let shipped = shipped_webhook();
    assert_eq!(webhook_problems(&shipped), Vec::<String>::new());

    let cases = [
        (
            "CronJobs on v1 only (servers before 1.21 serve v1beta1)",
            json!({"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                   "resources": ["cronjobs"]}),
            "cronjobs",
            "no rule for batch/v1beta1 cronjobs",
        ),
        (
            "Jobs on CREATE only (a GitOps re-apply would be refused as an immutable change)",
            json!({"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["jobs"]}),
            "jobs",
            "the rule for batch/v1 jobs admits {\"CREATE\"}",
        ),
        (
            "no rule for Rollouts",
            json!(null),
            "rollouts",
            "no rule for argoproj.io/v1alpha1 rollouts",
        ),
        (
            "Rollouts on CREATE only",
            json!({"apiGroups": ["argoproj.io"], "apiVersions": ["v1alpha1"], "operations": ["CREATE"],
                   "resources": ["rollouts"]}),
            "rollouts",
            "admits {\"CREATE\"}",
        ),
        (
            "ReplicaSets admitted",
            json!({"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                   "resources": ["deployments", "statefulsets", "daemonsets", "replicasets"]}),
            "deployments",
            "apps/v1 replicasets, which is no built-in workload kind",
        ),
    ];
    for (label, with, resource, expected) in cases {
        let mut webhook = shipped.clone();
        replace_rule(&mut webhook, |r| names(r, resource), with);
        let problems = webhook_problems(&webhook);
        assert!(
            problems.iter().any(|p| p.contains(expected)),
            "{label}: {problems:?} lacks {expected:?}"
        );
    }
}

/// The webhook that records who created a break-glass WindowOverride.
const BREAK_GLASS_WEBHOOK: &str = "window-overrides.cmset.dev";

#[test]
fn break_glass_is_registered_and_granted() {
    let documents = documents();
    // The MutatingWebhookConfiguration sends the creates and updates of WindowOverrides to
    // /override-window (the record of who created one), failing open like the others; no set.
    let configurations = webhook_configurations(&documents);
    assert!(!configurations.is_empty());
    for configuration in configurations {
        let webhooks = configuration.value["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let hook = webhooks
            .iter()
            .find(|w| w["name"] == BREAK_GLASS_WEBHOOK)
            .unwrap_or_else(|| panic!("{}: no {BREAK_GLASS_WEBHOOK}", configuration.label()));
        let path = hook["clientConfig"]["service"]["path"]
            .as_str()
            .or_else(|| hook["clientConfig"]["url"].as_str())
            .unwrap_or_default();
        assert!(
            path.ends_with("/override-window"),
            "{}: {path}",
            configuration.label()
        );
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(
            hook["rules"],
            json!([{"apiGroups": ["cmset.dev"], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                    "resources": ["windowoverrides"], "scope": "Namespaced"}])
        );
    }
    // The operator reads WindowOverrides, and asks the API server nothing about users any more.
    let granted = verbs_by_resource(&shipped_cluster_role());
    assert_eq!(
        granted.get(&("cmset.dev".into(), "windowoverrides".into())),
        Some(&set(&["list", "watch"]))
    );
    assert_eq!(
        granted.get(&("authorization.k8s.io".into(), "subjectaccessreviews".into())),
        None
    );
    // The ClusterRole that breaks the glass grants creating (and reading, deleting) overrides only.
    let role = documents
        .iter()
        .find(|d| d.kind() == "ClusterRole" && d.name() == "cmset-break-glass")
        .expect("ClusterRole cmset-break-glass in config/rbac");
    assert_eq!(
        role.value["rules"],
        json!([{"apiGroups": ["cmset.dev"], "resources": ["windowoverrides"],
                "verbs": ["create", "get", "list", "watch", "delete"]}])
    );
    assert!(role.value["metadata"]["labels"].as_object().is_none_or(|labels| {
        !labels
            .keys()
            .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate"))
    }));
}

/// Whether `role` lets its holder create WindowOverrides (wildcards included).
fn breaks_glass(role: &Value) -> bool {
    verbs_by_resource(role).iter().any(|((group, resource), verbs)| {
        matches!(group.as_str(), "cmset.dev" | "*")
            && matches!(resource.as_str(), "windowoverrides" | "*")
            && (verbs.contains("create") || verbs.contains("*"))
    })
}

/// Break glass is ClusterRole cmset-break-glass's alone: no role aggregated into the built-in admin,
/// edit or view roles (cmset-edit, cmset-view, cmset-admin-delegation) grants creating a WindowOverride,
/// in any install.
#[test]
fn no_aggregated_role_breaks_the_glass() {
    let documents = documents();
    let aggregated: Vec<&Document> = documents
        .iter()
        .filter(|d| d.kind() == "ClusterRole")
        .filter(|d| {
            d.value["metadata"]["labels"].as_object().is_some_and(|labels| {
                labels
                    .keys()
                    .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
            })
        })
        .collect();
    assert!(
        aggregated.iter().any(|d| d.name() == "cmset-edit"),
        "cmset-edit is checked"
    );
    for role in aggregated {
        assert!(
            !breaks_glass(&role.value),
            "{} in {}: an aggregated role lets tenants create WindowOverrides",
            role.name(),
            role.file.display()
        );
    }
    // The check sees what it must refuse.
    for rules in [
        json!([{"apiGroups": ["cmset.dev"], "resources": ["windowoverrides"], "verbs": ["create"]}]),
        json!([{"apiGroups": ["cmset.dev"], "resources": ["*"], "verbs": ["*"]}]),
        json!([{"apiGroups": ["*"], "resources": ["windowoverrides"], "verbs": ["create", "get"]}]),
    ] {
        assert!(breaks_glass(&json!({"rules": rules})), "{rules}");
    }
    assert!(!breaks_glass(&json!({"rules": [
        {"apiGroups": ["cmset.dev"], "resources": ["windowoverrides"], "verbs": ["get", "list", "watch"]}]})));
}
