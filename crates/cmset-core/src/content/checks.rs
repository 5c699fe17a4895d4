//! `spec.checks`: the application's own checker, run as a Job against a candidate revision before wave 0.
//!
//! Everything here is pure: the check's hash, the Job's name, the locked-down Job built from the user's
//! template, reading a finished Job, the verdicts kept on the revision, and which checks are still due.
//!
//! Verdicts are kept in the set's status (`status.checks`, [`CheckRecord`]), which only cmset writes:
//! whoever may edit a set may not write its status subresource, while anyone who may edit the namespace
//! may annotate a revision or create a Job. A record names the revision object's uid and the uid of the
//! Job cmset's own create returned; a Job found by its (deterministic) name with another uid is not
//! cmset's and fails its check. Records survive a leader change and the Job's TTL deletion, and a revert
//! to a checked revision still in the history finds its verdicts there and starts no Job. A changed
//! check template has another hash, so it is run again.

use std::collections::BTreeMap;

use cmset_api::checks::{Check, CheckRecord, MAX_CHECK_RECORDS};
use k8s_openapi::api::batch::v1::{Job, JobTemplateSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Pod, PodSecurityContext, PodSpec, ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::revisions::hash::{HASH_LEN, short_hash};
use crate::revisions::naming::{MAX_LABEL_VALUE_LEN, revision_name, set_label_value};
use crate::workloads::refs::{Referenced, apply_changes, find_refs_to, plan_rewrite_to};

pub mod restricted;
pub use restricted::Refusal;

/// Label on every check Job and its pod: the deny-all NetworkPolicy selects it, and the engine's
/// watch of check Jobs filters on it. Its value is the set's label value, so a Job maps to its set.
pub const CHECK_LABEL: &str = "cmset.dev/check-of";
/// Label naming the check (its `name`) on the Job and pod.
pub const CHECK_NAME_LABEL: &str = "cmset.dev/check";
/// Annotations on the Job: which revision and which check version it runs.
pub const REVISION_HASH_ANNOTATION: &str = "cmset.dev/revision-hash";
pub const CHECK_HASH_ANNOTATION: &str = "cmset.dev/check-hash";
/// Annotation on a revision object where verdicts were once kept. No longer read (anyone who may edit
/// the namespace may write it); cmset leaves one it finds as it is.
pub const RESULTS_ANNOTATION: &str = "cmset.dev/check-results";

/// Deadline of a check whose template gives none; and the longest one a template may ask for.
pub const DEFAULT_DEADLINE_SECONDS: i64 = 120;
pub const MAX_DEADLINE_SECONDS: i64 = 600;
/// Retries a template may ask for at most (none unless it asks).
pub const MAX_BACKOFF_LIMIT: i32 = 3;
/// A finished check Job is deleted by Kubernetes after this; its verdict is on the revision by then.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 600;
/// Limits given to a container whose template sets none.
pub const DEFAULT_CPU_LIMIT: &str = "500m";
pub const DEFAULT_MEMORY_LIMIT: &str = "256Mi";
/// Longest termination message kept (bytes, cut at a character boundary).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// The hash of a check: of its canonical JSON (object keys sorted), so reordering a template's keys
/// does not run it again, while any change of name or template does.
pub fn check_hash(check: &Check) -> String {
    let value = serde_json::to_value(check).unwrap_or(Value::Null);
    short_hash(canonical(&value).as_bytes())
}

fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(","))
        }
        other => other.to_string(),
    }
}

/// The Job's name for check `check_hash` of revision `revision_hash` of set `set_name`:
/// `<set>-<revision hash>-<check hash>`, at most 63 characters (the Job controller copies it into a pod
/// label). A set name too long for that is cut and suffixed with its own hash, so names stay distinct.
pub fn job_name(set_name: &str, revision_hash: &str, check_hash: &str) -> String {
    let room = MAX_LABEL_VALUE_LEN - 2 - revision_hash.len() - check_hash.len();
    let prefix = if set_name.len() <= room {
        set_name.to_string()
    } else {
        let keep = room - 1 - HASH_LEN;
        let cut = set_name[..keep].trim_end_matches(['-', '.']);
        format!("{cut}-{}", short_hash(set_name.as_bytes()))
    };
    format!("{prefix}-{revision_hash}-{check_hash}")
}

/// Why a check's template cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateError {
    /// Not a Job template (`metadata` and `spec` of a Job).
    NotAJobTemplate(String),
    /// The template has no pod template spec.
    NoPodSpec,
    /// A field the restricted Pod Security profile refuses, or a service-account identity: cmset refuses
    /// it rather than run the check as something other than what it asked for.
    Refused(Refusal),
    /// The pod template names neither the set nor anything cmset can point at the revision.
    NoReference,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAJobTemplate(e) => write!(f, "jobTemplate is not a Job template: {e}"),
            Self::NoPodSpec => f.write_str("jobTemplate has no spec.template.spec"),
            Self::Refused(refusal) => refusal.fmt(f),
            Self::NoReference => f.write_str(
                "jobTemplate's pod does not read the set (no volume, envFrom or valueFrom names it)",
            ),
        }
    }
}

/// What a check Job is built for.
#[derive(Debug, Clone, Copy)]
pub struct CheckTarget<'a> {
    pub set_name: &'a str,
    pub namespace: &'a str,
    /// Secrets for a SecretSet, ConfigMaps for a ConfigMapSet.
    pub kind: Referenced,
    pub revision_hash: &'a str,
}

/// The locked-down Job that runs `check` against the candidate revision of `target`.
///
/// Every reference of the pod template to the set is pointed at the revision and every mount of a
/// volume that reads it is read-only. Whatever the template says: no service-account token, the
/// restricted Pod Security profile on the pod and every container, limits where none are set, a
/// deadline of at most [`MAX_DEADLINE_SECONDS`], at most [`MAX_BACKOFF_LIMIT`] retries (none by
/// default), `restartPolicy: Never`, TTL cleanup, and [`CHECK_LABEL`] for the deny-all NetworkPolicy.
pub fn build_job(check: &Check, target: CheckTarget<'_>) -> Result<Job, TemplateError> {
    let template: JobTemplateSpec = serde_json::from_value(check.job_template.clone())
        .map_err(|e| TemplateError::NotAJobTemplate(e.to_string()))?;
    let mut spec = template.spec.unwrap_or_default();
    let mut pod_template = spec.template;
    let pod = pod_template.spec.take().ok_or(TemplateError::NoPodSpec)?;

    let revision = revision_name(target.set_name, target.revision_hash);
    let changes = plan_rewrite_to(&pod, target.kind, |name| {
        (name == target.set_name).then(|| revision.clone())
    });
    let already = find_refs_to(&pod, target.kind).iter().any(|r| r.name == revision);
    if changes.is_empty() && !already {
        return Err(TemplateError::NoReference);
    }
    // The rewrite only replaces strings found in this very spec, so it cannot fail.
    let mut pod = apply_changes(&pod, &changes).map_err(|e| TemplateError::NotAJobTemplate(e.to_string()))?;
    lock_down(&mut pod, &revision)?;
    pod_template.spec = Some(pod);

    let hash = check_hash(check);
    let set_label = set_label_value(target.set_name);
    let labels = |mut map: BTreeMap<String, String>| {
        map.insert(CHECK_LABEL.into(), set_label.clone());
        map.insert(CHECK_NAME_LABEL.into(), check.name.clone());
        map
    };
    let mut pod_meta = pod_template.metadata.unwrap_or_default();
    pod_meta.labels = Some(labels(pod_meta.labels.unwrap_or_default()));
    pod_template.metadata = Some(pod_meta);

    spec.template = pod_template;
    spec.active_deadline_seconds = Some(
        spec.active_deadline_seconds
            .unwrap_or(DEFAULT_DEADLINE_SECONDS)
            .clamp(1, MAX_DEADLINE_SECONDS),
    );
    spec.backoff_limit = Some(spec.backoff_limit.unwrap_or(0).clamp(0, MAX_BACKOFF_LIMIT));
    spec.ttl_seconds_after_finished = Some(TTL_SECONDS_AFTER_FINISHED);
    spec.completions = Some(1);
    spec.parallelism = Some(1);
    // The Job's own selector is generated by Kubernetes; a user's would be refused or misleading.
    spec.selector = None;
    spec.manual_selector = None;

    let meta = template.metadata.unwrap_or_default();
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(REVISION_HASH_ANNOTATION.into(), target.revision_hash.into());
    annotations.insert(CHECK_HASH_ANNOTATION.into(), hash.clone());
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(job_name(target.set_name, target.revision_hash, &hash)),
            namespace: Some(target.namespace.into()),
            labels: Some(labels(meta.labels.unwrap_or_default())),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

fn lock_down(pod: &mut PodSpec, revision: &str) -> Result<(), TemplateError> {
    if let Some(refusal) = restricted::refusals(pod).into_iter().next() {
        return Err(TemplateError::Refused(refusal));
    }
    // Volumes that now read the revision: their mounts are made read-only.
    let revision_volumes: Vec<String> = pod
        .volumes
        .iter()
        .flatten()
        .filter(|v| {
            let json = serde_json::to_string(v).unwrap_or_default();
            json.contains(&format!("\"{revision}\""))
        })
        .map(|v| v.name.clone())
        .collect();

    pod.automount_service_account_token = Some(false);
    pod.host_network = Some(false);
    pod.host_pid = Some(false);
    pod.host_ipc = Some(false);
    pod.restart_policy = Some("Never".into());
    let psc = pod
        .security_context
        .get_or_insert_with(PodSecurityContext::default);
    psc.run_as_non_root = Some(true);
    psc.seccomp_profile = Some(runtime_default());

    let init = pod.init_containers.iter_mut().flatten();
    for container in pod.containers.iter_mut().chain(init) {
        let sc = container
            .security_context
            .get_or_insert_with(SecurityContext::default);
        sc.run_as_non_root = Some(true);
        sc.allow_privilege_escalation = Some(false);
        sc.privileged = Some(false);
        // The one capability restricted lets a container add is kept when asked for (nothing else is
        // left: anything else was refused above).
        let add = sc
            .capabilities
            .as_ref()
            .and_then(|c| c.add.clone())
            .filter(|add| !add.is_empty());
        sc.capabilities = Some(Capabilities {
            add,
            drop: Some(vec!["ALL".into()]),
        });
        sc.seccomp_profile = Some(runtime_default());
        let resources = container
            .resources
            .get_or_insert_with(ResourceRequirements::default);
        let limits = resources.limits.get_or_insert_with(BTreeMap::new);
        limits
            .entry("cpu".into())
            .or_insert_with(|| Quantity(DEFAULT_CPU_LIMIT.into()));
        limits
            .entry("memory".into())
            .or_insert_with(|| Quantity(DEFAULT_MEMORY_LIMIT.into()));
        // A checker that dies without writing its termination message still leaves its last log lines.
        container.termination_message_policy = Some("FallbackToLogsOnError".into());
        for mount in container.volume_mounts.iter_mut().flatten() {
            if revision_volumes.contains(&mount.name) {
                mount.read_only = Some(true);
            }
        }
    }
    // Ephemeral containers cannot be declared in a template; anything there is dropped.
    pod.ephemeral_containers = None;
    Ok(())
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// A check Job's state, from its status conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    Running,
    Succeeded,
    Failed,
    /// A Job of the check's name whose uid (this one) is not the one cmset's create returned.
    NotOurs(String),
}

/// The outcome of `job`: `Complete` or `Failed` conditions that are `True`; anything else is running.
pub fn job_outcome(job: &Job) -> JobOutcome {
    let conditions = job.status.iter().flat_map(|s| s.conditions.iter().flatten());
    for condition in conditions {
        if condition.status == "True" {
            match condition.type_.as_str() {
                "Complete" | "SuccessCriteriaMet" => return JobOutcome::Succeeded,
                "Failed" | "FailureTarget" => return JobOutcome::Failed,
                _ => {}
            }
        }
    }
    JobOutcome::Running
}

/// The failed container of a check's pod: its exit code and termination message, the message cut to
/// [`MAX_MESSAGE_BYTES`] at a character boundary.
pub fn termination(pod: &Pod) -> Option<(i32, Option<String>)> {
    let statuses = pod.status.iter().flat_map(|s| {
        s.init_container_statuses
            .iter()
            .flatten()
            .chain(s.container_statuses.iter().flatten())
    });
    statuses
        .filter_map(|status| status.state.as_ref()?.terminated.as_ref())
        .find(|t| t.exit_code != 0)
        .map(|t| {
            (
                t.exit_code,
                t.message.as_deref().map(bound_message).filter(|m| !m.is_empty()),
            )
        })
}

/// `message` trimmed and cut to at most [`MAX_MESSAGE_BYTES`] bytes, at a character boundary.
pub fn bound_message(message: &str) -> String {
    let message = message.trim();
    let mut end = message.len().min(MAX_MESSAGE_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// A check's recorded verdict on a revision.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub name: String,
    pub passed: bool,
    /// What the failure says, already safe to show: the bounded termination message of a ConfigMapSet's
    /// check; only the exit code for a SecretSet's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The failure message to record: a SecretSet's check never repeats its termination message, which
/// might echo a secret.
pub fn failure_message(
    check_name: &str,
    kind: Referenced,
    termination: Option<(i32, Option<String>)>,
) -> String {
    match (kind, termination) {
        (Referenced::Secret, Some((code, _))) => format!("check {check_name} failed (exit code {code})"),
        (_, Some((_, Some(message)))) => format!("check {check_name} failed: {message}"),
        (_, Some((code, None))) => format!("check {check_name} failed (exit code {code})"),
        (_, None) => format!("check {check_name} failed (its Job failed, e.g. past its deadline)"),
    }
}

/// The verdicts cmset recorded for revision `revision` (the object of uid `uid`) in the set's status
/// (`records`), by check hash. Nothing else counts: not an annotation, not a record of another object
/// of that name.
pub fn recorded(records: &[CheckRecord], revision: &str, uid: &str) -> BTreeMap<String, Verdict> {
    of_revision(records, revision, uid)
        .filter_map(|r| {
            let verdict = Verdict {
                name: r.name.clone(),
                passed: r.passed?,
                message: r.message.clone(),
            };
            Some((r.hash.clone(), verdict))
        })
        .collect()
}

/// The uids of the Jobs cmset's own creates returned for revision `revision` (of uid `uid`), by check
/// hash, for the checks that have no verdict yet.
pub fn started(records: &[CheckRecord], revision: &str, uid: &str) -> BTreeMap<String, String> {
    of_revision(records, revision, uid)
        .filter(|r| r.passed.is_none() && !r.job_uid.is_empty())
        .map(|r| (r.hash.clone(), r.job_uid.clone()))
        .collect()
}

fn of_revision<'r>(
    records: &'r [CheckRecord],
    revision: &'r str,
    uid: &'r str,
) -> impl Iterator<Item = &'r CheckRecord> + 'r {
    records
        .iter()
        .filter(move |r| r.revision == revision && r.revision_uid == uid && !uid.is_empty())
}

/// The outcome of a check Job found by its name: only a Job whose uid is the one cmset's create
/// returned (`ours`) counts; anyone may create a Job of that name first.
pub fn judge_job(job: &Job, ours: Option<&str>) -> JobOutcome {
    let uid = job.metadata.uid.clone().unwrap_or_default();
    if ours != Some(uid.as_str()) || uid.is_empty() {
        return JobOutcome::NotOurs(uid);
    }
    job_outcome(job)
}

/// The failure of a check whose Job, found by its name, is not the one cmset created.
pub fn not_ours_message(check_name: &str, job_name: &str, uid: &str) -> String {
    format!("check {check_name}: Job {job_name} was not created by cmset (uid {uid})")
}

/// What the I/O learnt of one check of the revision being checked, to merge into the set's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learnt {
    /// cmset's create of its Job returned `job_uid`.
    Started {
        hash: String,
        name: String,
        job_uid: String,
    },
    /// Its verdict: from cmset's Job `job_uid`, or (empty) from a template refused before any Job.
    Verdict {
        hash: String,
        job_uid: String,
        verdict: Verdict,
    },
    /// The Job of its name has uid `job_uid`, which cmset did not record as its own.
    NotOurs {
        hash: String,
        name: String,
        job_uid: String,
        message: String,
    },
}

/// The set's check records after what was `learnt` of revision `revision` (of uid `revision_uid`),
/// merged into the records the API server holds now (`fresh`, read just before the write).
///
/// The fresh records decide: a verdict stands once recorded; a Job's verdict counts only if the fresh
/// record names that Job's uid, and a Job is found not ours only if it does not (a store behind cmset's
/// own last write would otherwise judge cmset's own Job foreign). Records are kept for the revisions in
/// `history` (and the one checked), newest first, at most [`MAX_CHECK_RECORDS`]: a revert to a revision
/// in the history finds its verdicts, and the status stays bounded.
pub fn merge_records(
    fresh: &[CheckRecord],
    revision: &str,
    revision_uid: &str,
    learnt: &[Learnt],
    history: &[String],
) -> Vec<CheckRecord> {
    let mut records = fresh.to_vec();
    for item in learnt {
        let hash = match item {
            Learnt::Started { hash, .. } | Learnt::Verdict { hash, .. } | Learnt::NotOurs { hash, .. } => {
                hash
            }
        };
        let at = records
            .iter()
            .position(|r| r.revision == revision && r.revision_uid == revision_uid && &r.hash == hash);
        let existing = at.map(|i| records[i].clone());
        if existing.as_ref().is_some_and(|e| e.passed.is_some()) {
            continue;
        }
        let ours = existing.as_ref().map(|e| e.job_uid.as_str()).unwrap_or_default();
        let record = |name: &str, job_uid: &str, passed: Option<bool>, message: Option<String>| CheckRecord {
            revision: revision.to_string(),
            revision_uid: revision_uid.to_string(),
            name: name.to_string(),
            hash: hash.clone(),
            job_uid: job_uid.to_string(),
            passed,
            message,
        };
        let new = match item {
            Learnt::Started { name, job_uid, .. } => record(name, job_uid, None, None),
            Learnt::Verdict { job_uid, verdict, .. } if job_uid.is_empty() || *job_uid == ours => record(
                &verdict.name,
                job_uid,
                Some(verdict.passed),
                verdict.message.clone(),
            ),
            Learnt::Verdict { .. } => continue,
            Learnt::NotOurs { job_uid, .. } if !ours.is_empty() && job_uid == ours => continue,
            Learnt::NotOurs { name, message, .. } => record(name, ours, Some(false), Some(message.clone())),
        };
        match at {
            Some(i) => records[i] = new,
            None => records.push(new),
        }
    }
    let rank = |r: &CheckRecord| {
        if r.revision == revision {
            Some(0)
        } else {
            history.iter().position(|h| *h == r.revision).map(|i| i + 1)
        }
    };
    let mut kept: Vec<(usize, CheckRecord)> =
        records.into_iter().filter_map(|r| Some((rank(&r)?, r))).collect();
    // Stable: within a revision, the records keep their order.
    kept.sort_by_key(|(rank, _)| *rank);
    kept.into_iter()
        .map(|(_, r)| r)
        .take(MAX_CHECK_RECORDS as usize)
        .collect()
}

/// One check's state for the candidate revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckState {
    /// No verdict and no Job: create it.
    Due,
    /// Its Job exists and has not finished.
    Running,
    /// Its Job finished; the verdict is to be recorded (the I/O reads the pod on failure).
    Finished(JobOutcome),
    Passed,
    Failed(String),
}

/// What the checks allow for the candidate revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// No check, or every one passed: wave 0 may open.
    Open,
    /// Some check has not finished (or its verdict is not recorded yet): phase `Checking`, nothing moves.
    Checking,
    /// A check failed: the revision is failed and nothing moves. The first failed check's message.
    Failed(String),
}

/// The plan of the checks of the candidate revision, in the set's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckPlan {
    pub checks: Vec<(String, String, CheckState)>,
    pub gate: Gate,
}

/// Plans `checks` against the verdicts `recorded` on the candidate revision and the outcomes of the
/// check Jobs that exist for it (`jobs`: check hash → outcome). A recorded verdict wins over any Job.
pub fn plan_checks(
    checks: &[Check],
    recorded: &BTreeMap<String, Verdict>,
    jobs: &BTreeMap<String, JobOutcome>,
) -> CheckPlan {
    let mut planned = Vec::with_capacity(checks.len());
    let mut failed = None;
    let mut pending = false;
    for check in checks {
        let hash = check_hash(check);
        let state = match (recorded.get(&hash), jobs.get(&hash)) {
            (Some(v), _) if v.passed => CheckState::Passed,
            (Some(v), _) => CheckState::Failed(
                v.message
                    .clone()
                    .unwrap_or_else(|| format!("check {} failed", check.name)),
            ),
            (None, None) => CheckState::Due,
            (None, Some(JobOutcome::Running)) => CheckState::Running,
            (None, Some(outcome)) => CheckState::Finished(outcome.clone()),
        };
        match &state {
            CheckState::Failed(message) if failed.is_none() => failed = Some(message.clone()),
            CheckState::Passed | CheckState::Failed(_) => {}
            _ => pending = true,
        }
        planned.push((check.name.clone(), hash, state));
    }
    let gate = match (failed, pending) {
        (Some(message), _) => Gate::Failed(message),
        (None, true) => Gate::Checking,
        (None, false) => Gate::Open,
    };
    CheckPlan {
        checks: planned,
        gate,
    }
}

/// Name of the NetworkPolicy cmset creates in each namespace where checks run.
pub const NETWORK_POLICY_NAME: &str = "cmset-checks-deny-all";

/// The NetworkPolicy that cuts every check pod of `namespace` off the network, both ways (DNS
/// included): a checker reads files and needs none. It selects [`CHECK_LABEL`] and allows nothing.
pub fn deny_all_policy(namespace: &str) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(NETWORK_POLICY_NAME.into()),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: CHECK_LABEL.into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
                match_labels: None,
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: None,
            egress: None,
        }),
    }
}

/// The JSON patch that puts back the spec of the deny-all NetworkPolicy `existing` when it differs from
/// cmset's ([`deny_all_policy`]): anyone who may edit the namespace may rewrite it to allow everything.
/// `None` when it says what cmset's says (empty lists read as absent, as the API server may serve them).
pub fn policy_restore(existing: &NetworkPolicy) -> Option<Value> {
    let namespace = existing.metadata.namespace.as_deref().unwrap_or_default();
    let wanted = deny_all_policy(namespace).spec.unwrap_or_default();
    let found = existing.spec.clone().unwrap_or_default();
    if normal(found) == normal(wanted.clone()) {
        return None;
    }
    let spec = serde_json::to_value(wanted).unwrap_or(Value::Null);
    Some(serde_json::json!([{"op": "replace", "path": "/spec", "value": spec}]))
}

fn normal(mut spec: NetworkPolicySpec) -> NetworkPolicySpec {
    fn none_if_empty<T>(list: Option<Vec<T>>) -> Option<Vec<T>> {
        list.filter(|l| !l.is_empty())
    }
    spec.ingress = none_if_empty(spec.ingress);
    spec.egress = none_if_empty(spec.egress);
    spec.policy_types = none_if_empty(spec.policy_types);
    if let Some(selector) = spec.pod_selector.as_mut() {
        selector.match_labels = selector.match_labels.take().filter(|l| !l.is_empty());
        selector.match_expressions = none_if_empty(selector.match_expressions.take()).map(|exprs| {
            exprs
                .into_iter()
                .map(|mut e| {
                    e.values = none_if_empty(e.values);
                    e
                })
                .collect()
        });
    }
    spec
}

/// Whether a workload may move to a revision whose recorded verdicts are `recorded`: every check
/// passed. The workload controller asks this before the set's status records a rollout, as a workload
/// otherwise moves as soon as its revision exists.
pub fn allows_move(checks: &[Check], recorded: &BTreeMap<String, Verdict>) -> bool {
    plan_checks(checks, recorded, &BTreeMap::new()).gate == Gate::Open
}

/// The rollout's message while checking: each check and how it stands, in the set's order.
pub fn summary(plan: &CheckPlan) -> String {
    let parts: Vec<String> = plan
        .checks
        .iter()
        .map(|(name, _, state)| match state {
            CheckState::Due => format!("{name} starting"),
            CheckState::Running | CheckState::Finished(_) => format!("{name} running"),
            CheckState::Passed => format!("{name} passed"),
            CheckState::Failed(message) => format!("{name} failed: {message}"),
        })
        .collect();
    format!("checks: {}", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};
    use serde_json::json;

    fn nginx_check() -> Check {
        Check {
            name: "nginx".into(),
            job_template: json!({"spec": {"template": {"spec": {
                "containers": [{"name": "t", "image": "nginx:1.27", "command": ["nginx", "-t"],
                    "volumeMounts": [{"name": "conf", "mountPath": "/etc/nginx"},
                                     {"name": "scratch", "mountPath": "/tmp"}],
                    "securityContext": {"capabilities": {"drop": ["CHOWN"]}}}],
                "volumes": [{"name": "conf", "configMap": {"name": "web"}},
                            {"name": "scratch", "emptyDir": {}}]
            }}, "activeDeadlineSeconds": 9999, "backoffLimit": 7}}),
        }
    }

    fn target(kind: Referenced) -> CheckTarget<'static> {
        CheckTarget {
            set_name: "web",
            namespace: "shop",
            kind,
            revision_hash: "b7k2d9m4tc",
        }
    }

    #[test]
    fn check_hash_ignores_key_order_but_not_content() {
        let a = nginx_check();
        let mut reordered = a.clone();
        reordered.job_template = serde_json::from_str(
            &serde_json::to_string(&a.job_template)
                .unwrap()
                .replace("\"activeDeadlineSeconds\":9999,", ""),
        )
        .unwrap();
        reordered.job_template["spec"]["activeDeadlineSeconds"] = json!(9999);
        assert_eq!(check_hash(&a), check_hash(&reordered));
        let mut changed = a.clone();
        changed.job_template["spec"]["backoffLimit"] = json!(1);
        assert_ne!(check_hash(&a), check_hash(&changed));
        let mut renamed = a.clone();
        renamed.name = "other".into();
        assert_ne!(check_hash(&a), check_hash(&renamed));
    }

    #[test]
    fn job_names_fit_a_label_and_stay_distinct() {
        let cases = [
            ("web", 25),
            (&"a".repeat(41)[..], 63),
            (&"a".repeat(42)[..], 63),
            (&"b".repeat(253)[..], 63),
        ];
        for (set, len) in cases {
            let name = job_name(set, "b7k2d9m4tc", "c8d9f2g4h5");
            assert_eq!(name.len(), len, "{name}");
            assert!(crate::revisions::naming::is_label_value(&name));
        }
        assert_ne!(
            job_name(&format!("{}x", "a".repeat(60)), "b7k2d9m4tc", "c8d9f2g4h5"),
            job_name(&format!("{}y", "a".repeat(60)), "b7k2d9m4tc", "c8d9f2g4h5")
        );
        assert_eq!(
            job_name("web", "b7k2d9m4tc", "c8d9f2g4h5"),
            "web-b7k2d9m4tc-c8d9f2g4h5"
        );
    }

    #[test]
    fn the_job_reads_the_revision_and_is_locked_down_whatever_the_template_says() {
        let job = build_job(&nginx_check(), target(Referenced::ConfigMap)).unwrap();
        let value = serde_json::to_value(&job).unwrap();
        let spec = &value["spec"];
        assert_eq!(spec["activeDeadlineSeconds"], json!(MAX_DEADLINE_SECONDS));
        assert_eq!(spec["backoffLimit"], json!(MAX_BACKOFF_LIMIT));
        assert_eq!(spec["ttlSecondsAfterFinished"], json!(TTL_SECONDS_AFTER_FINISHED));
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["volumes"][0]["configMap"]["name"], json!("web-b7k2d9m4tc"));
        assert_eq!(pod["automountServiceAccountToken"], json!(false));
        assert_eq!(pod["hostNetwork"], json!(false));
        assert_eq!(pod["restartPolicy"], json!("Never"));
        assert_eq!(pod["securityContext"]["runAsNonRoot"], json!(true));
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            json!("RuntimeDefault")
        );
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["privileged"], json!(false));
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], json!(false));
        assert_eq!(c["securityContext"]["capabilities"], json!({"drop": ["ALL"]}));
        assert_eq!(
            c["resources"]["limits"],
            json!({"cpu": "500m", "memory": "256Mi"})
        );
        assert_eq!(c["volumeMounts"][0]["readOnly"], json!(true));
        assert_eq!(
            c["volumeMounts"][1].get("readOnly"),
            None,
            "scratch stays writable"
        );
        assert_eq!(value["metadata"]["labels"][CHECK_LABEL], json!("web"));
        assert_eq!(spec["template"]["metadata"]["labels"][CHECK_LABEL], json!("web"));
        assert_eq!(
            value["metadata"]["name"],
            json!(job_name("web", "b7k2d9m4tc", &check_hash(&nginx_check())))
        );
    }

    #[test]
    fn defaults_apply_when_the_template_is_silent() {
        let check = Check {
            name: "env".into(),
            job_template: json!({"spec": {"template": {"spec": {"containers": [{"name": "t", "image": "x",
                "envFrom": [{"secretRef": {"name": "db"}}],
                "resources": {"limits": {"memory": "1Gi"}}}]}}}}),
        };
        let t = CheckTarget {
            set_name: "db",
            ..target(Referenced::Secret)
        };
        let job = serde_json::to_value(build_job(&check, t).unwrap()).unwrap();
        assert_eq!(job["spec"]["activeDeadlineSeconds"], json!(120));
        assert_eq!(job["spec"]["backoffLimit"], json!(0));
        let c = &job["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["envFrom"][0]["secretRef"]["name"], json!("db-b7k2d9m4tc"));
        assert_eq!(c["resources"]["limits"], json!({"cpu": "500m", "memory": "1Gi"}));
    }

    #[test]
    fn templates_that_cannot_run_are_refused() {
        let mut host = nginx_check();
        host.job_template["spec"]["template"]["spec"]["volumes"][1] =
            json!({"name": "h", "hostPath": {"path": "/"}});
        let refused = build_job(&host, target(Referenced::ConfigMap)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            r#"spec.template.spec.volumes[1].hostPath: "h" is not allowed (restricted profile)"#
        );
        let mut root = nginx_check();
        root.job_template["spec"]["template"]["spec"]["containers"][0]["securityContext"] =
            json!({"runAsUser": 0});
        assert_eq!(
            build_job(&root, target(Referenced::ConfigMap))
                .unwrap_err()
                .to_string(),
            "spec.template.spec.containers[0].securityContext.runAsUser: 0 is not allowed (restricted profile)"
        );
        let other = CheckTarget {
            set_name: "api",
            ..target(Referenced::ConfigMap)
        };
        assert_eq!(build_job(&nginx_check(), other), Err(TemplateError::NoReference));
        let empty = Check {
            name: "x".into(),
            job_template: json!({"spec": {}}),
        };
        assert!(build_job(&empty, target(Referenced::ConfigMap)).is_err());
    }

    fn job_with(type_: &str) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: type_.into(),
                    status: "True".into(),
                    ..JobCondition::default()
                }]),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn the_network_policy_selects_check_pods_and_allows_nothing() {
        let policy = serde_json::to_value(deny_all_policy("shop")).unwrap();
        assert_eq!(
            policy["spec"],
            json!({"podSelector": {"matchExpressions": [{"key": CHECK_LABEL, "operator": "Exists"}]},
                   "policyTypes": ["Ingress", "Egress"]})
        );
    }

    #[test]
    fn outcomes_come_from_true_conditions() {
        assert_eq!(job_outcome(&Job::default()), JobOutcome::Running);
        assert_eq!(job_outcome(&job_with("Complete")), JobOutcome::Succeeded);
        assert_eq!(job_outcome(&job_with("Failed")), JobOutcome::Failed);
        assert_eq!(job_outcome(&job_with("Suspended")), JobOutcome::Running);
    }

    #[test]
    fn termination_messages_are_bounded_and_hidden_for_secret_sets() {
        let pod = Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 1,
                            message: Some(format!("{}é", "x".repeat(1023))),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        };
        let (code, message) = termination(&pod).unwrap();
        assert_eq!((code, message.as_ref().map(String::len)), (1, Some(1023)));
        assert_eq!(
            failure_message("t", Referenced::Secret, Some((code, message.clone()))),
            "check t failed (exit code 1)"
        );
        assert!(
            failure_message("t", Referenced::ConfigMap, Some((code, message)))
                .starts_with("check t failed: xxx")
        );
    }

    #[test]
    fn plan_gates_wave_zero_on_every_verdict() {
        let a = nginx_check();
        let b = Check {
            name: "b".into(),
            ..nginx_check()
        };
        let (ha, hb) = (check_hash(&a), check_hash(&b));
        let checks = [a.clone(), b.clone()];
        let none: BTreeMap<String, Verdict> = BTreeMap::new();
        let no_jobs: BTreeMap<String, JobOutcome> = BTreeMap::new();
        let plan = plan_checks(&checks, &none, &no_jobs);
        assert_eq!(plan.gate, Gate::Checking);
        assert!(plan.checks.iter().all(|(_, _, s)| *s == CheckState::Due));

        let jobs = BTreeMap::from([
            (ha.clone(), JobOutcome::Succeeded),
            (hb.clone(), JobOutcome::Running),
        ]);
        let plan = plan_checks(&checks, &none, &jobs);
        assert_eq!(plan.checks[0].2, CheckState::Finished(JobOutcome::Succeeded));
        assert_eq!(plan.checks[1].2, CheckState::Running);
        assert_eq!(plan.gate, Gate::Checking);

        // A revert: both verdicts are on the revision, its Jobs long gone: nothing to run.
        let pass = |name: &str| Verdict {
            name: name.into(),
            passed: true,
            message: None,
        };
        let all = BTreeMap::from([(ha.clone(), pass("nginx")), (hb.clone(), pass("b"))]);
        assert_eq!(plan_checks(&checks, &all, &no_jobs).gate, Gate::Open);
        assert_eq!(plan_checks(&[], &none, &no_jobs).gate, Gate::Open);

        let failed = BTreeMap::from([(
            ha,
            Verdict {
                name: "nginx".into(),
                passed: false,
                message: Some("bad".into()),
            },
        )]);
        assert_eq!(
            plan_checks(&checks, &failed, &no_jobs).gate,
            Gate::Failed("bad".into())
        );

        assert!(allows_move(&checks, &all));
        assert!(!allows_move(&checks, &none));
        assert_eq!(
            summary(&plan_checks(&checks, &none, &jobs)),
            "checks: nginx running; b running"
        );

        let _ = hb;
    }

    fn job_of(uid: &str, type_: &str) -> Job {
        let mut job = job_with(type_);
        job.metadata.uid = Some(uid.into());
        job
    }

    #[test]
    fn a_job_counts_only_with_the_uid_cmsets_create_returned() {
        assert_eq!(
            judge_job(&job_of("j1", "Complete"), Some("j1")),
            JobOutcome::Succeeded
        );
        assert_eq!(
            judge_job(&job_of("j2", "Complete"), Some("j1")),
            JobOutcome::NotOurs("j2".into())
        );
        assert_eq!(
            judge_job(&job_of("j2", "Complete"), None),
            JobOutcome::NotOurs("j2".into())
        );
        assert_eq!(
            not_ours_message("lint", "app-b7k2d9m4tc-c8d9f2g4h5", "j2"),
            "check lint: Job app-b7k2d9m4tc-c8d9f2g4h5 was not created by cmset (uid j2)"
        );
        // A not-ours Job holds the gate until its failure is recorded.
        let checks = [nginx_check()];
        let jobs = BTreeMap::from([(check_hash(&checks[0]), JobOutcome::NotOurs("j2".into()))]);
        assert_eq!(plan_checks(&checks, &BTreeMap::new(), &jobs).gate, Gate::Checking);
    }

    fn rec(revision: &str, hash: &str, job_uid: &str, passed: Option<bool>) -> CheckRecord {
        CheckRecord {
            revision: revision.into(),
            revision_uid: format!("{revision}-uid"),
            name: "lint".into(),
            hash: hash.into(),
            job_uid: job_uid.into(),
            passed,
            message: passed.filter(|p| !p).map(|_| "bad".into()),
        }
    }

    fn verdict(job_uid: &str, passed: bool) -> Learnt {
        Learnt::Verdict {
            hash: "h".into(),
            job_uid: job_uid.into(),
            verdict: Verdict {
                name: "lint".into(),
                passed,
                message: (!passed).then(|| "bad".into()),
            },
        }
    }

    fn not_ours(job_uid: &str) -> Learnt {
        Learnt::NotOurs {
            hash: "h".into(),
            name: "lint".into(),
            job_uid: job_uid.into(),
            message: format!("not ours {job_uid}"),
        }
    }

    #[test]
    fn records_merge_into_what_the_api_server_holds() {
        let history = ["web-b".to_string(), "web-a".to_string()];
        let merge = |fresh: &[CheckRecord], learnt: &[Learnt]| {
            merge_records(fresh, "web-b", "web-b-uid", learnt, &history)
        };
        let started = Learnt::Started {
            hash: "h".into(),
            name: "lint".into(),
            job_uid: "j1".into(),
        };
        assert_eq!(
            merge(&[], std::slice::from_ref(&started)),
            [rec("web-b", "h", "j1", None)]
        );
        let running = [rec("web-b", "h", "j1", None)];
        // The verdict of cmset's own Job is recorded; one of another Job is not.
        assert_eq!(
            merge(&running, &[verdict("j1", true)]),
            [rec("web-b", "h", "j1", Some(true))]
        );
        assert_eq!(merge(&running, &[verdict("j9", true)]), running);
        // A Job not ours fails the check, unless the fresh record shows it is cmset's after all (the
        // store was behind cmset's own write).
        let failed = merge(&running, &[not_ours("j9")]);
        assert_eq!(failed[0].passed, Some(false));
        assert_eq!(failed[0].message.as_deref(), Some("not ours j9"));
        assert_eq!(
            failed[0].job_uid, "j1",
            "the foreign uid is never recorded as cmset's"
        );
        assert_eq!(merge(&running, &[not_ours("j1")]), running);
        assert_eq!(merge(&[], &[not_ours("j9")])[0].passed, Some(false));
        // A verdict stands once recorded.
        let passed = [rec("web-b", "h", "j1", Some(true))];
        assert_eq!(merge(&passed, &[not_ours("j9"), started.clone()]), passed);
        // A template refused before any Job.
        assert_eq!(
            merge(&[], &[verdict("", false)]),
            [rec("web-b", "h", "", Some(false))]
        );
    }

    #[test]
    fn records_are_kept_for_the_history_newest_first_and_bounded() {
        let history = ["web-c".to_string(), "web-b".to_string()];
        let fresh = [
            rec("web-a", "h", "j", Some(true)),
            rec("web-b", "h", "j", Some(true)),
            rec("web-c", "h", "j", Some(true)),
        ];
        let merged = merge_records(&fresh, "web-d", "web-d-uid", &[verdict("", false)], &history);
        let revisions: Vec<&str> = merged.iter().map(|r| r.revision.as_str()).collect();
        assert_eq!(revisions, ["web-d", "web-c", "web-b"], "web-a left the history");
        let many: Vec<CheckRecord> = (0..200)
            .map(|i| rec("web-c", &format!("h{i}"), "j", Some(true)))
            .collect();
        assert_eq!(
            merge_records(&many, "web-d", "web-d-uid", &[], &history).len(),
            MAX_CHECK_RECORDS as usize
        );
    }

    #[test]
    fn a_rewritten_deny_all_policy_is_put_back_and_an_intact_one_left_alone() {
        let intact = deny_all_policy("shop");
        assert_eq!(policy_restore(&intact), None);
        // As the API server may serve it: empty lists rather than absent ones.
        let mut served = intact.clone();
        let spec = served.spec.as_mut().expect("a spec");
        spec.ingress = Some(vec![]);
        spec.pod_selector.as_mut().expect("a selector").match_labels = Some(BTreeMap::new());
        assert_eq!(policy_restore(&served), None);

        let mut open: NetworkPolicy = serde_json::from_value(json!({
            "metadata": {"name": NETWORK_POLICY_NAME, "namespace": "shop"},
            "spec": {"podSelector": {"matchLabels": {"nothing": "here"}}, "policyTypes": ["Ingress"],
                     "ingress": [{}]}
        }))
        .expect("a policy");
        let patch = json!([{"op": "replace", "path": "/spec", "value": {
            "podSelector": {"matchExpressions": [{"key": CHECK_LABEL, "operator": "Exists"}]},
            "policyTypes": ["Ingress", "Egress"]}}]);
        assert_eq!(policy_restore(&open), Some(patch));
        open.spec.as_mut().expect("a spec").egress = Some(vec![Default::default()]);
        assert!(policy_restore(&open).is_some());
    }
}
