//! `spec.checks` of a ConfigMapSet or SecretSet: the application's own checker, run as a Job against
//! a candidate revision before the rollout's first wave opens.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most checks one set may declare.
pub const MAX_CHECKS: u32 = 8;
/// Longest check name: it goes into the Job's name beside the set's hash.
pub const MAX_CHECK_NAME_LEN: u32 = 20;
/// A check's name: a DNS label.
pub const CHECK_NAME_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// One check: a Job cmset runs, in the set's namespace, with the candidate revision in place of every
/// reference its pod template makes to the set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// Names the check in the status, in events and in the Job's name.
    #[schemars(length(min = 1, max = MAX_CHECK_NAME_LEN), pattern(CHECK_NAME_PATTERN))]
    pub name: String,

    /// A Job template (`metadata` and `spec`, as in a CronJob's `jobTemplate`), built from the
    /// application's own image (`nginx -t`, `promtool check config`, ...). Its pod template reads the
    /// set as a workload does (a `configMap`/`secret` volume, `envFrom` or `valueFrom` naming the set),
    /// and cmset points those at the candidate revision, mounted read-only. cmset locks it down
    /// whatever it says: no service-account token, the restricted Pod Security profile, resource
    /// limits, a deadline and no retry.
    #[schemars(schema_with = "crate::validation::any_object")]
    pub job_template: serde_json::Value,
}

/// Most check records one set's status keeps (`status.checks`): 8 checks of 16 revisions.
pub const MAX_CHECK_RECORDS: u32 = 128;

/// One check of one revision as cmset ran it: the uid of the Job its own create returned, then the
/// verdict. Kept in the set's status, which only cmset writes (people who may edit a set may not write
/// its status subresource), so neither a forged verdict nor someone else's Job counts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckRecord {
    /// The revision checked, and the uid of the object it was checked as: a verdict holds for that
    /// object only.
    pub revision: String,
    pub revision_uid: String,
    /// The check's name, and the hash of its content: an edited check is another one.
    pub name: String,
    pub hash: String,
    /// The uid of the Job cmset created for it; empty for a check refused before any Job.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub job_uid: String,
    /// Absent while its Job runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
