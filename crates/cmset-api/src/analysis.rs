//! Metric analysis of a rollout: the cluster-scoped `AnalysisTemplate` (`analysistemplates.cmset.dev`)
//! that whoever administers cmset installs, the reference a set makes to one
//! (`spec.rollout.analysis`), and what the set's status reports of each query.
//!
//! The split is the security boundary: a template holds the Prometheus query, and only cluster admins
//! can write a cluster-scoped object. A set, written by a namespace's users, only names a template and
//! fills the arguments that template declares, so a set's author cannot run a query of their own
//! against the cluster's Prometheus through cmset.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{DNS_SUBDOMAIN_PATTERN, MAX_DNS_SUBDOMAIN_LEN};

/// An argument's name: a letter, then letters, digits and `_` (it appears in a query as
/// `{{args.NAME}}`).
pub const ANALYSIS_ARG_NAME_PATTERN: &str = "^[a-z][a-zA-Z0-9_]*$";

/// `result`, a comparison and a decimal number, e.g. `result < 0.05`. cmset-core's parser accepts
/// exactly this language (a property test checks it), so whatever the API server stores parses.
pub const SUCCESS_CONDITION_PATTERN: &str =
    r"^ *result *(<=|>=|==|!=|<|>) *[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)? *$";

/// Default of [`AnalysisTemplateSpec::interval_seconds`].
pub const DEFAULT_ANALYSIS_INTERVAL_SECONDS: i32 = 30;
/// Smallest [`AnalysisTemplateSpec::interval_seconds`]: a template cannot make cmset hammer Prometheus.
pub const MIN_ANALYSIS_INTERVAL_SECONDS: i32 = 5;
/// Most arguments a set may pass to one template.
pub const MAX_ANALYSIS_ARGS: u32 = 64;

/// A Prometheus query and the condition its result must meet while a wave of a rollout stabilizes.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "cmset.dev",
    version = "v1alpha1",
    kind = "AnalysisTemplate",
    plural = "analysistemplates",
    singular = "analysistemplate",
    shortname = "cmsetanalysis",
    doc = "An AnalysisTemplate is a Prometheus query and the condition its result must meet while a wave of a ConfigMapSet or SecretSet rollout stabilizes. It is cluster-scoped: cluster admins install templates, and a set only names one and passes the arguments it declares.",
    printcolumn = r#"{"name":"Condition","type":"string","jsonPath":".spec.successCondition"}"#,
    printcolumn = r#"{"name":"Interval","type":"integer","description":"Seconds between measurements","jsonPath":".spec.intervalSeconds"}"#,
    printcolumn = r#"{"name":"Failure Limit","type":"integer","jsonPath":".spec.failureLimit"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisTemplateSpec {
    /// The arguments a set may pass (`spec.rollout.analysis[].args`), each used in the query as
    /// `{{args.NAME}}`. An argument without a default must be passed. A set can pass nothing else, and
    /// a `string` value may not contain `"`, `'`, `` ` ``, `\`, `{`, `}` or control characters, and every
    /// value is escaped for the string it stands in, so it cannot leave it. An `{{args.NAME}}` outside
    /// a double-quoted string is refused unless the argument's type is `duration` or `number`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub args: Vec<AnalysisArg>,

    /// The PromQL query, run as an instant query. Variables: `{{namespace}}` (always the set's own
    /// namespace), `{{workload.name}}` and `{{workload.kind}}` (then the query runs once per workload
    /// of the wave, else once per wave), `{{revision}}` (the name of the revision being rolled out),
    /// `{{wave}}` and `{{args.NAME}}`. Any other `{{...}}` is an error.
    #[schemars(length(min = 1))]
    pub query: String,

    /// What every sample of the result must satisfy: `result`, one of `<`, `<=`, `>`, `>=`, `==`, `!=`,
    /// and a number, e.g. `result < 0.05`. A NaN result, an empty result or an unreachable Prometheus
    /// proves nothing: the wave waits, and fails at the progress deadline.
    #[schemars(pattern(SUCCESS_CONDITION_PATTERN))]
    pub success_condition: String,

    /// Seconds between two measurements of the query (default 30, at least 5).
    #[serde(default = "default_interval_seconds")]
    #[schemars(range(min = MIN_ANALYSIS_INTERVAL_SECONDS))]
    pub interval_seconds: i32,

    /// How many measurements may fail the condition before the wave fails (default 0: the first failed
    /// measurement fails it, as an unhealthy workload does).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub failure_limit: i32,

    /// Seconds to wait, once every workload of a wave is healthy, before the first measurement (default
    /// 0), as Argo Rollouts' `initialDelay`: time for a metric to reflect the change.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub initial_delay_seconds: i32,

    /// How many measurements, taken after the wave became healthy and `intervalSeconds` apart, a run
    /// needs before its wave can pass (default and least 2). The stabilization window stretches until
    /// they are taken, so a verdict always rests on data from the change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = MIN_ANALYSIS_COUNT))]
    pub count: Option<i32>,

    /// How many measurements may be inconclusive (no data, NaN, Prometheus unreachable) before the wave
    /// fails, as Argo Rollouts' `inconclusiveLimit`. Unset: an inconclusive wave waits, and fails at the
    /// progress deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub inconclusive_limit: Option<i32>,
}

/// The fewest measurements after a wave became healthy that a run passes on: two, `intervalSeconds`
/// apart, so that one sample taken at the moment of the change never decides.
pub const MIN_ANALYSIS_COUNT: i32 = 2;

fn is_zero(n: &i32) -> bool {
    *n == 0
}

fn default_interval_seconds() -> i32 {
    DEFAULT_ANALYSIS_INTERVAL_SECONDS
}

/// One argument of a template.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct AnalysisArg {
    /// Its name, used in the query as `{{args.NAME}}`: a lowercase letter, then letters, digits, `_`.
    #[schemars(length(min = 1, max = 63), pattern(ANALYSIS_ARG_NAME_PATTERN))]
    pub name: String,

    /// The value when a set does not pass one. Without a default, every set that names the template
    /// must pass it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,

    /// What its values are, and so where the query may use it: `string` (the default) and `regex` only
    /// inside a double-quoted PromQL string, `duration` (e.g. `5m`, `1h30m`) and `number` anywhere.
    /// Inside the string of a `=~` or `!~` matcher a `string` value is matched literally (regex-escaped);
    /// a `regex` value is used as the regular expression it is.
    #[serde(rename = "type", default, skip_serializing_if = "AnalysisArgType::is_string")]
    pub value_type: AnalysisArgType,
}

/// The type of an [`AnalysisArg`]'s values.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnalysisArgType {
    /// Text, put in a double-quoted string (escaped; regex-escaped in a matcher's regular expression).
    #[default]
    String,
    /// A regular expression, put in a double-quoted string (escaped for the string only).
    Regex,
    /// A Prometheus duration such as `30s`, `5m` or `1h30m`: usable outside strings (`[{{args.window}}]`).
    Duration,
    /// A decimal number such as `0.05` or `-3`: usable outside strings.
    Number,
}

impl AnalysisArgType {
    pub fn is_string(&self) -> bool {
        *self == Self::String
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Regex => "regex",
            Self::Duration => "duration",
            Self::Number => "number",
        }
    }

    /// Its values are checked to be safe outside a PromQL string.
    pub fn is_bare_safe(self) -> bool {
        matches!(self, Self::Duration | Self::Number)
    }
}

/// A set's use of an analysis template during its rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct AnalysisRef {
    /// The name of the AnalysisTemplate (cluster-scoped).
    #[schemars(length(min = 1, max = MAX_DNS_SUBDOMAIN_LEN), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub template: String,

    /// Values of the arguments the template declares, by name. Passing one it does not declare is an
    /// error; they fill only `{{args.NAME}}`, never `{{namespace}}` or another variable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = MAX_ANALYSIS_ARGS))]
    pub args: BTreeMap<String, String>,
}

/// One query of a wave's analysis: a template rendered for the wave (and for one workload, when the
/// query names it), and what its measurements showed. Together with the rollout's timestamps this is
/// all the analysis remembers, so an operator restart continues it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisRunStatus {
    /// The AnalysisTemplate.
    pub template: String,
    /// The kind of the workload the query is about; absent when the query names no workload (it then
    /// runs once for the whole wave).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_kind: Option<String>,
    /// The name of that workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// A group of per-workload runs that stand alike (same counts, verdict and times, none failed or
    /// inconclusive), written as one entry so thousands of workloads fit in the object: the names of
    /// its workloads, all of `workloadKind`, and no `workload`. Its `query`, `lastValue` and `message`
    /// are those of the first; the others' queries differ only by the name. Only a wave with more
    /// than 20 such runs of one template has groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<String>,
    /// The wave it ran in.
    pub wave: i32,
    /// The query as sent to Prometheus, variables filled in.
    pub query: String,
    /// The success condition, e.g. `result < 0.05`.
    pub condition: String,
    /// The last measured value, as text (`NaN` included): of several samples, a failing one furthest
    /// past the threshold, else the one closest to it. Absent when the last measurement had no data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_value: Option<String>,
    /// `Running`, `Passed` (the wave's window is over and the last measurement passed), `Failed` (more
    /// failed measurements than the template's failureLimit, or nothing conclusive by the progress
    /// deadline) or `Inconclusive` (no data, NaN, or Prometheus unreachable: the wave waits).
    pub verdict: AnalysisVerdict,
    /// Measurements taken.
    #[serde(default)]
    pub measurements: i32,
    /// Measurements whose result failed the condition.
    #[serde(default)]
    pub failures: i32,
    /// When the last measurement was taken; the next is due `intervalSeconds` later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_measured_at: Option<Time>,
    /// Measurements taken since the wave was last seen becoming healthy: only these can pass it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub streak: i32,
    /// When the first of those was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streak_since: Option<Time>,
    /// Measurements that were inconclusive (see the template's `inconclusiveLimit`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inconclusive: i32,
    /// What the last measurement showed, or why the query failed the wave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where one query of a wave's analysis stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum AnalysisVerdict {
    #[default]
    Running,
    Passed,
    Failed,
    Inconclusive,
}

impl AnalysisVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::Passed => "Passed",
            Self::Failed => "Failed",
            Self::Inconclusive => "Inconclusive",
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::{Value, json};

    use super::*;

    fn crd_json() -> Value {
        serde_json::to_value(AnalysisTemplate::crd()).unwrap()
    }

    fn spec_schema(crd: &Value) -> &Value {
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    }

    #[test]
    fn is_cluster_scoped_with_its_names() {
        let crd = crd_json();
        assert_eq!(crd["metadata"]["name"], "analysistemplates.cmset.dev");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(
            crd["spec"]["names"],
            json!({"kind": "AnalysisTemplate", "plural": "analysistemplates",
                   "singular": "analysistemplate", "shortNames": ["cmsetanalysis"]})
        );
        assert_eq!(crd["spec"]["versions"][0]["name"], crate::VERSION);
    }

    #[test]
    fn schema_checks_what_the_api_server_can() {
        let crd = crd_json();
        let spec = spec_schema(&crd);
        assert_eq!(spec["required"], json!(["query", "successCondition"]));
        let props = &spec["properties"];
        assert_eq!(props["successCondition"]["pattern"], SUCCESS_CONDITION_PATTERN);
        assert_eq!(props["intervalSeconds"]["default"], 30);
        assert_eq!(props["intervalSeconds"]["minimum"], 5.0);
        assert_eq!(props["failureLimit"]["default"], 0);
        assert_eq!(props["failureLimit"]["minimum"], 0.0);
        assert_eq!(props["args"]["x-kubernetes-list-type"], "map");
        assert_eq!(props["args"]["x-kubernetes-list-map-keys"], json!(["name"]));
        let arg = &props["args"]["items"];
        assert_eq!(arg["required"], json!(["name"]));
        assert_eq!(arg["properties"]["name"]["pattern"], ANALYSIS_ARG_NAME_PATTERN);
        for (field, schema) in props.as_object().unwrap() {
            assert!(schema["description"].is_string(), "{field} has no description");
        }
    }

    #[test]
    fn a_minimal_template_takes_the_defaults() {
        let template: AnalysisTemplate = serde_json::from_value(json!({
            "apiVersion": "cmset.dev/v1alpha1",
            "kind": "AnalysisTemplate",
            "metadata": {"name": "error-rate"},
            "spec": {"query": "vector(0)", "successCondition": "result < 0.05"},
        }))
        .unwrap();
        assert_eq!(template.spec.interval_seconds, 30);
        assert_eq!(template.spec.failure_limit, 0);
        assert!(template.spec.args.is_empty());
    }

    #[test]
    fn a_set_names_templates_in_its_rollout() {
        let rollout: crate::RolloutSpec = serde_json::from_value(
            json!({"analysis": [{"template": "error-rate", "args": {"service": "checkout"}}]}),
        )
        .unwrap();
        assert_eq!(
            rollout.analysis,
            [AnalysisRef {
                template: "error-rate".into(),
                args: BTreeMap::from([("service".into(), "checkout".into())]),
            }]
        );
        // Left out when empty, so sets that use no analysis keep the spec they had.
        let plain = serde_json::to_value(crate::RolloutSpec::default()).unwrap();
        assert!(plain.get("analysis").is_none(), "{plain}");
        let bare: AnalysisRef = serde_json::from_value(json!({"template": "t"})).unwrap();
        assert_eq!(serde_json::to_value(bare).unwrap(), json!({"template": "t"}));
    }
}
