//! The `SecretSet` custom resource (`secretsets.cmset.dev`, version `v1alpha1`): versioned, immutable
//! Secrets.
//!
//! A SecretSet holds no secret material. It names a source Secret in its namespace, which stays whatever
//! produced it (External Secrets Operator, sealed-secrets, SOPS, `kubectl create secret`); cmset only
//! reads it. A custom resource is not encrypted at rest like a Secret, and roles that may view it need
//! not be allowed to read Secrets, so there is deliberately no inline data field.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    Check, ConfigMapSetStatus, DNS_SUBDOMAIN_PATTERN, MAX_DNS_SUBDOMAIN_LEN, RolloutSpec, TemplateMetadata,
    ValidationSpec, checks, default_revision_history_limit,
};

/// Desired versioning of one Secret: cmset copies every distinct content (`type` and `data`) of the
/// source Secret into an immutable, content-hashed Secret revision and points opted-in workloads at the
/// current one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cmset.dev",
    version = "v1alpha1",
    kind = "SecretSet",
    plural = "secretsets",
    singular = "secretset",
    shortname = "secset",
    namespaced,
    doc = "A SecretSet owns the immutable, content-hashed Secret revisions of one source Secret and keeps opted-in workloads pointed at the current one.",
    status = "SecretSetStatus",
    printcolumn = r#"{"name":"Revision","type":"integer","description":"Number of the current revision","jsonPath":".status.revision"}"#,
    printcolumn = r#"{"name":"Secret","type":"string","description":"Name of the current revision's Secret","jsonPath":".status.currentRevision"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("self.metadata.name.size() <= 242").message("metadata.name must be at most 242 characters so that '-<hash>' fits in a Secret name (253)"),
)]
#[serde(rename_all = "camelCase")]
pub struct SecretSetSpec {
    /// The Secret in the same namespace whose `type` and `data` are versioned. cmset only reads it;
    /// whatever produces it keeps writing it.
    #[schemars(length(min = 1, max = MAX_DNS_SUBDOMAIN_LEN), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub secret_name: String,

    /// Metadata of the Secret revisions.
    #[serde(default, skip_serializing_if = "SecretTemplate::is_empty")]
    pub template: SecretTemplate,

    /// How many old revisions that nothing uses any more are kept for rollback (default 10). Revisions
    /// still named by a workload, one of its ReplicaSets or ControllerRevisions, or a Pod are always kept.
    #[serde(default = "default_revision_history_limit")]
    #[schemars(range(min = 0))]
    pub revision_history_limit: i32,

    /// How a new revision reaches the workloads: in waves (by their `cmset.dev/wave` label), gated on
    /// their health, and rolled back when it fails. Left out, every workload moves at once and a
    /// failure is only reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,

    /// The format and schema each key's value (the source Secret's keys) must have: content that fails is refused at admission,
    /// and never becomes a revision.
    #[serde(default, skip_serializing_if = "ValidationSpec::is_empty")]
    pub validation: ValidationSpec,

    /// The application's own checks, each a Job run against a new revision before its rollout's first
    /// wave opens: a failed check fails the revision and nothing moves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = checks::MAX_CHECKS))]
    pub checks: Vec<Check>,
}

/// What a SecretSet's revisions carry besides the source's content: only metadata.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretTemplate {
    /// Labels and annotations copied onto every revision. They are not part of the content hash:
    /// changing them updates the existing revisions in place and rolls no pods.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
}

impl SecretTemplate {
    pub fn is_empty(&self) -> bool {
        self.metadata.is_empty()
    }
}

/// A SecretSet reports exactly what a ConfigMapSet does (revision, history, workloads, conditions), so
/// status handling is shared. Only the descriptions in its CRD speak of Secrets: see [`crd`].
pub type SecretSetStatus = ConfigMapSetStatus;

impl SecretSet {
    /// The condition of the given type, if any.
    pub fn condition(
        &self,
        type_: &str,
    ) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
        self.status.as_ref()?.condition(type_)
    }
}

/// The SecretSet CRD as committed under `crds/`. Use it rather than `SecretSet::crd()`: the status
/// schema is ConfigMapSet's, and its descriptions are rewritten here to speak of Secrets.
pub fn crd() -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    use kube::CustomResourceExt;
    let mut crd = serde_json::to_value(SecretSet::crd()).expect("a CRD always serializes");
    if let Some(status) = crd.pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/status") {
        describe_secrets(status);
    }
    serde_json::from_value(crd).expect("the rewritten CRD is still a CRD")
}

/// Replaces "ConfigMap" by "Secret" in every description below `schema` (and nothing else).
fn describe_secrets(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    serde_json::Value::String(text) if key == "description" => {
                        *text = text.replace("ConfigMap", "Secret");
                    }
                    _ => describe_secrets(value),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(describe_secrets),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::{Value, json};

    use super::*;
    use crate::ConfigMapSet;

    fn crd_json() -> Value {
        serde_json::to_value(crd()).unwrap()
    }

    fn open_api_schema(crd: &Value) -> &Value {
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    }

    #[test]
    fn names_scope_and_version() {
        let crd = crd_json();
        assert_eq!(crd["metadata"]["name"], "secretsets.cmset.dev");
        assert_eq!(SecretSet::crd_name(), "secretsets.cmset.dev");
        assert_eq!(crd["spec"]["group"], crate::GROUP);
        assert_eq!(
            crd["spec"]["names"],
            json!({"kind": "SecretSet", "plural": "secretsets", "singular": "secretset", "shortNames": ["secset"]})
        );
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        let versions = crd["spec"]["versions"].as_array().unwrap();
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0]["name"], crate::VERSION);
        assert_eq!(
            (&versions[0]["served"], &versions[0]["storage"]),
            (&json!(true), &json!(true))
        );
        assert_eq!(versions[0]["subresources"], json!({"status": {}}));
    }

    #[test]
    fn printer_columns_mirror_config_map_sets() {
        let crd = crd_json();
        let columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap();
        let shown: Vec<(&str, &str)> = columns
            .iter()
            .filter(|c| c.get("priority").is_none())
            .map(|c| (c["name"].as_str().unwrap(), c["jsonPath"].as_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("Revision", ".status.revision"),
                ("Secret", ".status.currentRevision"),
                ("Ready", r#".status.conditions[?(@.type=="Ready")].status"#),
                ("Age", ".metadata.creationTimestamp"),
            ]
        );
        // Column for column ConfigMapSet's, the second one named for Secrets.
        let cm = serde_json::to_value(ConfigMapSet::crd()).unwrap();
        let mut cm_columns = cm["spec"]["versions"][0]["additionalPrinterColumns"].clone();
        cm_columns[1] = json!({
            "name": "Secret",
            "type": "string",
            "description": "Name of the current revision's Secret",
            "jsonPath": ".status.currentRevision",
        });
        assert_eq!(&Value::Array(columns.clone()), &cm_columns);
    }

    #[test]
    fn spec_requires_a_dns_subdomain_secret_name_and_has_no_data() {
        let crd = crd_json();
        let spec = &open_api_schema(&crd)["properties"]["spec"];
        assert_eq!(spec["required"], json!(["secretName"]));
        let name = &spec["properties"]["secretName"];
        assert_eq!(name["type"], "string");
        assert_eq!(name["pattern"], DNS_SUBDOMAIN_PATTERN);
        assert_eq!((&name["minLength"], &name["maxLength"]), (&json!(1), &json!(253)));
        let mut fields: Vec<&String> = spec["properties"].as_object().unwrap().keys().collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                "checks",
                "revisionHistoryLimit",
                "rollout",
                "secretName",
                "template",
                "validation"
            ]
        );
        let template: Vec<&String> = spec["properties"]["template"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(template, ["metadata"]);
    }

    #[test]
    fn template_metadata_and_history_limit_are_config_map_sets() {
        let crd = crd_json();
        let cm = serde_json::to_value(ConfigMapSet::crd()).unwrap();
        let spec = &open_api_schema(&crd)["properties"]["spec"]["properties"];
        let cm_spec = &open_api_schema(&cm)["properties"]["spec"]["properties"];
        assert_eq!(
            spec["template"]["properties"]["metadata"],
            cm_spec["template"]["properties"]["metadata"]
        );
        assert_eq!(spec["revisionHistoryLimit"], cm_spec["revisionHistoryLimit"]);
        assert_eq!(spec["revisionHistoryLimit"]["default"], 10);
        assert_eq!(spec["revisionHistoryLimit"]["minimum"], 0.0);
    }

    #[test]
    fn status_is_config_map_sets_described_for_secrets() {
        let crd = crd_json();
        let cm = serde_json::to_value(ConfigMapSet::crd()).unwrap();
        let mut expected = open_api_schema(&cm)["properties"]["status"].clone();
        describe_secrets(&mut expected);
        assert_eq!(open_api_schema(&crd)["properties"]["status"], expected);
        // A schema may be kept in a ConfigMap (`spec.validation.keys.*.schemaFrom`): the only ConfigMap
        // a SecretSet names.
        let mut crd = crd;
        let key = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/validation/properties/keys/additionalProperties/properties";
        let schema_from = crd
            .pointer_mut(key)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .remove("schemaFrom");
        assert!(schema_from.is_some_and(|s| s.to_string().contains("configMapKeyRef")));
        let yaml = serde_yaml_ng::to_string(&crd).unwrap();
        assert!(
            !yaml.contains("ConfigMap"),
            "the SecretSet CRD speaks of ConfigMaps"
        );
    }

    #[test]
    fn describe_secrets_rewrites_descriptions_only() {
        let mut schema = json!({
            "description": "a ConfigMap",
            "properties": {"description": {"type": "string", "description": "ConfigMaps"}},
            "enum": ["ConfigMap"],
        });
        describe_secrets(&mut schema);
        assert_eq!(
            schema,
            json!({
                "description": "a Secret",
                "properties": {"description": {"type": "string", "description": "Secrets"}},
                "enum": ["ConfigMap"],
            })
        );
    }

    #[test]
    fn a_minimal_secret_set_takes_the_defaults() {
        let set: SecretSet = serde_json::from_value(json!({
            "apiVersion": "cmset.dev/v1alpha1",
            "kind": "SecretSet",
            "metadata": {"name": "db", "namespace": "app"},
            "spec": {"secretName": "db-credentials"},
        }))
        .unwrap();
        assert_eq!(set.spec.secret_name, "db-credentials");
        assert_eq!(
            set.spec.revision_history_limit,
            crate::DEFAULT_REVISION_HISTORY_LIMIT
        );
        assert!(set.spec.template.is_empty());
        // An empty template is left out again, so server-side apply never claims it.
        assert_eq!(
            serde_json::to_value(&set.spec).unwrap(),
            json!({"secretName": "db-credentials", "revisionHistoryLimit": 10})
        );
        assert_eq!(set.condition("Ready"), None);
    }
}
