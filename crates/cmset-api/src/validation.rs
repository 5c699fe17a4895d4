//! `spec.validation` of a ConfigMapSet or SecretSet: the format and schema each key's value must have
//! before cmset makes a revision of it.
//!
//! The webhook refuses a set whose content fails them, and the controller checks again before it
//! stamps a revision (a SecretSet's source, or a ConfigMapSet's `configMapName`, changes without any
//! admission of the set): content that fails makes no revision, and every workload stays where it is.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{DNS_SUBDOMAIN_PATTERN, MAX_DNS_SUBDOMAIN_LEN};

/// Most patterns one set's `spec.validation.keys` may hold.
pub const MAX_VALIDATED_PATTERNS: u32 = 64;

/// What the values of a set's keys must be.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidationSpec {
    /// By key, or by a glob over keys (`*.json`, `app-?.yaml`, `[ab].toml`): the format and schema of
    /// the value. A key that several patterns match must pass each of them; a pattern that matches no
    /// key is not an error (a key may come and go). For a SecretSet the keys are the source Secret's.
    #[serde(default)]
    #[schemars(extend("maxProperties" = MAX_VALIDATED_PATTERNS))]
    pub keys: BTreeMap<String, KeyValidation>,
}

impl ValidationSpec {
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The format and schema of one key's value (or of every key a glob matches).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.schema) || !has(self.schemaFrom)",
    "message": "schema and schemaFrom are alternatives: give one",
}]))]
pub struct KeyValidation {
    /// How the value is parsed: `json`, `yaml`, `toml` or `properties` (Java properties). Left out, it
    /// follows the key's extension (`.json`, `.yaml`/`.yml`, `.toml`, `.properties`); a key with none of
    /// those needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<ContentFormat>,

    /// A JSON Schema (draft 2020-12, or the draft its `$schema` names: 4, 6, 7, 2019-09) the parsed
    /// value must match; YAML, TOML and properties are read into the JSON data model first
    /// (properties: an object of strings). It may not `$ref` anything outside itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub schema: Option<serde_json::Value>,

    /// The schema kept in a key of a ConfigMap of the set's namespace, in JSON or YAML: for a schema
    /// shared by several sets or published with the application. Not together with `schema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_from: Option<SchemaSource>,
}

/// Where a schema is kept.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaSource {
    pub config_map_key_ref: ConfigMapKeyRef,
}

/// A key of a ConfigMap in the set's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub struct ConfigMapKeyRef {
    #[schemars(length(min = 1, max = MAX_DNS_SUBDOMAIN_LEN), pattern(DNS_SUBDOMAIN_PATTERN))]
    pub name: String,
    #[schemars(length(min = 1, max = MAX_DNS_SUBDOMAIN_LEN))]
    pub key: String,
}

/// How a value is parsed before its schema is applied.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContentFormat {
    Json,
    Yaml,
    Toml,
    Properties,
}

impl ContentFormat {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Yaml => "yaml",
            Self::Toml => "toml",
            Self::Properties => "properties",
        }
    }

    /// The format a key's extension names, if any.
    pub fn of_key(key: &str) -> Option<Self> {
        let extension = key.rsplit_once('.')?.1.to_ascii_lowercase();
        match extension.as_str() {
            "json" => Some(Self::Json),
            "yaml" | "yml" => Some(Self::Yaml),
            "toml" => Some(Self::Toml),
            "properties" => Some(Self::Properties),
            _ => None,
        }
    }
}

/// The schema of a field that holds any object, kept as written (the API server prunes nothing in it).
pub(crate) fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}
