//! `spec.validation`: whether a set's content has the format and matches the schema declared for each
//! key, before it becomes a revision. The webhook, the controller and `kubectl cmset validate` all call
//! [`check`], so a refusal reads the same wherever it appears.
//!
//! Nothing here rewrites content: a value is parsed only to be judged, and the revision is stamped from
//! the text as written. Schemas resolve no `$ref` outside themselves (the `jsonschema` crate is built
//! without its file and HTTP retrievers), so a tenant's schema cannot make cmset read a file or call a
//! URL. For a SecretSet no message quotes a value, nor a parser's or validator's words about one: only
//! keys, positions, JSON pointers and rule names.

pub mod formats;
pub mod patterns;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use cmset_api::{ConfigMapKeyRef, ContentFormat, KeyValidation, ValidationSpec};
use serde_json::Value;

use crate::set::Content;
use crate::status::message::join_capped;
use crate::status::problem::Problem;

/// What a key not judged in time is refused with.
const OVER_BUDGET: &str = "was not judged: over the time budget";

/// Most problems one refusal lists; the rest are counted.
pub const MAX_REPORTED: usize = 20;
/// Longest summary of a refusal, in bytes (what a condition, an Event or an admission answer shows).
pub const SUMMARY_MAX_LEN: usize = 1000;

/// A schema kept in a ConfigMap key, as the I/O layer found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaText {
    Found(String),
    /// Why it is not there (the ConfigMap or its key is missing, or it could not be read).
    Missing(String),
}

/// The schemas a set's `schemaFrom`s name, by reference.
pub type SchemaTexts = BTreeMap<ConfigMapKeyRef, SchemaText>;

/// The ConfigMap keys `validation` reads schemas from.
pub fn schema_refs(validation: &ValidationSpec) -> BTreeSet<&ConfigMapKeyRef> {
    validation
        .keys
        .values()
        .filter_map(|rule| rule.schema_from.as_ref().map(|s| &s.config_map_key_ref))
        .collect()
}

/// What is wrong with `spec.validation` itself, whatever the content: a glob that does not compile, a
/// format that cannot be known, an inline schema that is not one.
pub fn spec_problems(validation: &ValidationSpec) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (pattern, rule) in &validation.keys {
        let field = format!("spec.validation.keys[{pattern:?}]");
        if pattern.is_empty() {
            problems.push(Problem::new(&field, "a key or glob must not be empty"));
        } else if let Err(e) = glob::Pattern::new(pattern) {
            problems.push(Problem::new(&field, format!("is not a valid glob: {}", e.msg)));
        }
        if rule.format.is_none() && ContentFormat::of_key(pattern).is_none() {
            problems.push(Problem::new(
                format!("{field}.format"),
                "is required: the key's extension does not name a format (json, yaml or yml, toml, properties)",
            ));
        }
        if rule.schema.is_some() && rule.schema_from.is_some() {
            problems.push(Problem::new(&field, "give schema or schemaFrom, not both"));
        }
        if let Some(schema) = &rule.schema
            && let Err(e) = compile(schema)
        {
            problems.push(Problem::new(format!("{field}.schema"), e));
        }
    }
    problems
}

/// Why a piece of content fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// The value is not text, or does not parse as its format.
    Parse,
    /// The parsed value does not match its schema.
    Schema,
    /// The schema could not be had: its ConfigMap or key is missing, or it is not a schema. Admission
    /// lets this pass (the ConfigMap may come in the same apply); the controller reports it.
    SchemaUnavailable,
    /// The judging ran out of its time budget before this key was judged.
    OverBudget,
}

/// One thing wrong with one key's value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentProblem {
    pub key: String,
    pub kind: ProblemKind,
    pub message: String,
}

impl fmt::Display for ContentProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "key {:?}: {}", self.key, self.message)
    }
}

/// Content that does not pass: the first [`MAX_REPORTED`] problems, in key order, and how many more.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub problems: Vec<ContentProblem>,
    pub more: usize,
}

impl Refusal {
    /// Whether every problem is an unavailable schema (nothing the content itself did).
    pub fn only_unavailable_schemas(&self) -> bool {
        self.more == 0
            && self
                .problems
                .iter()
                .all(|p| p.kind == ProblemKind::SchemaUnavailable)
    }

    /// The problems in one line, at most [`SUMMARY_MAX_LEN`] bytes.
    pub fn summary(&self) -> String {
        let mut texts: Vec<String> = self.problems.iter().map(ContentProblem::to_string).collect();
        if self.more > 0 {
            texts.push(format!("and {} more", self.more));
        }
        join_capped(&texts, SUMMARY_MAX_LEN)
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Whether `content` passes `validation`, with the schemas `schemaFrom` names in `schemas` (a missing
/// entry counts as not read). `secret`: the content is a Secret's, so messages quote nothing of it.
pub fn check(
    validation: &ValidationSpec,
    content: &Content<'_>,
    schemas: &SchemaTexts,
    secret: bool,
) -> Result<(), Refusal> {
    check_within(validation, content, schemas, secret, &|| false)
}

/// How long judging may go on: asked before each key and each document, it answers whether the time
/// is up. The caller owns the clock; [`Budget::UNLIMITED`] never says stop.
#[derive(Clone, Copy)]
pub struct Budget<'a>(pub &'a dyn Fn() -> bool);

impl Budget<'_> {
    pub const UNLIMITED: Budget<'static> = Budget(&|| false);
}

impl fmt::Debug for Budget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Budget")
    }
}

impl Default for Budget<'_> {
    fn default() -> Self {
        Budget::UNLIMITED
    }
}

/// [`check`], stopping when `out_of_time` says so (asked before each key and each document): the
/// content is then refused, naming the key that was not judged. The caller owns the clock.
pub fn check_within(
    validation: &ValidationSpec,
    content: &Content<'_>,
    schemas: &SchemaTexts,
    secret: bool,
    out_of_time: &dyn Fn() -> bool,
) -> Result<(), Refusal> {
    if validation.is_empty() {
        return Ok(());
    }
    let rules: Vec<Rule<'_>> = validation
        .keys
        .iter()
        .filter_map(|(pattern, rule)| Rule::new(pattern, rule))
        .collect();
    let mut found = Found::default();
    // Schemas are compiled once per pattern, and only for patterns that match a key.
    let mut compiled: BTreeMap<&str, Result<jsonschema::Validator, ContentProblemText>> = BTreeMap::new();
    for (key, value) in values(content) {
        for rule in rules.iter().filter(|r| r.matches(key)) {
            if out_of_time() {
                found.push(key, ProblemKind::OverBudget, OVER_BUDGET.to_string());
                return found.into_result();
            }
            let format = rule.format(key);
            let Some(text) = value.text() else {
                found.push(
                    key,
                    ProblemKind::Parse,
                    format!("is binary data, not {} text", format.as_str()),
                );
                continue;
            };
            let documents = match formats::parse(format, text) {
                Ok(documents) => documents,
                Err(e) => {
                    found.push(key, ProblemKind::Parse, parse_message(format, &e, secret));
                    continue;
                }
            };
            if !rule.has_schema() {
                continue;
            }
            let validator = compiled
                .entry(rule.pattern)
                .or_insert_with(|| rule.validator(schemas));
            let validator = match validator {
                Ok(v) => v,
                Err(ContentProblemText(message)) => {
                    found.push(key, ProblemKind::SchemaUnavailable, message.clone());
                    continue;
                }
            };
            let several = documents.len() > 1;
            for (index, document) in documents.iter().enumerate() {
                if index > 0 && out_of_time() {
                    found.push(key, ProblemKind::OverBudget, OVER_BUDGET.to_string());
                    return found.into_result();
                }
                for error in validator.iter_errors(document) {
                    let place = match (several, error.instance_path().as_str()) {
                        (true, "") => format!("document {}", index + 1),
                        (true, pointer) => format!("document {}, at {pointer}", index + 1),
                        (false, "") => "at the root".to_string(),
                        (false, pointer) => format!("at {pointer}"),
                    };
                    let rule_name = error.kind().keyword();
                    let message = if secret {
                        format!("{place}: fails rule {rule_name:?}")
                    } else {
                        format!("{place}: {error} (rule {rule_name:?})")
                    };
                    found.push(key, ProblemKind::Schema, message);
                }
            }
        }
    }
    found.into_result()
}

/// Problems as they are found, keeping the first [`MAX_REPORTED`].
#[derive(Default)]
struct Found {
    problems: Vec<ContentProblem>,
    more: usize,
}

impl Found {
    fn push(&mut self, key: &str, kind: ProblemKind, message: String) {
        if self.problems.len() < MAX_REPORTED {
            self.problems.push(ContentProblem {
                key: key.to_string(),
                kind,
                message,
            });
        } else {
            self.more += 1;
        }
    }

    fn into_result(self) -> Result<(), Refusal> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(Refusal {
                problems: self.problems,
                more: self.more,
            })
        }
    }
}

/// A message about a schema, which quotes nothing of the content.
#[derive(Clone)]
struct ContentProblemText(String);

/// One pattern of `spec.validation.keys`, ready to match.
struct Rule<'a> {
    pattern: &'a str,
    glob: glob::Pattern,
    rule: &'a KeyValidation,
}

impl<'a> Rule<'a> {
    /// `None` for a pattern that is not a glob: [`spec_problems`] reports it.
    fn new(pattern: &'a str, rule: &'a KeyValidation) -> Option<Self> {
        let glob = glob::Pattern::new(pattern).ok()?;
        Some(Self { pattern, glob, rule })
    }

    fn matches(&self, key: &str) -> bool {
        self.glob.matches(key)
    }

    /// The format a key is read as: the rule's, else the key's extension, else the pattern's (a spec
    /// without either is refused by [`spec_problems`]; JSON stands in).
    fn format(&self, key: &str) -> ContentFormat {
        self.rule
            .format
            .or_else(|| ContentFormat::of_key(key))
            .or_else(|| ContentFormat::of_key(self.pattern))
            .unwrap_or(ContentFormat::Json)
    }

    fn has_schema(&self) -> bool {
        self.rule.schema.is_some() || self.rule.schema_from.is_some()
    }

    fn validator(&self, schemas: &SchemaTexts) -> Result<jsonschema::Validator, ContentProblemText> {
        if let Some(schema) = &self.rule.schema {
            return compile(schema).map_err(|e| ContentProblemText(format!("schema: {e}")));
        }
        let Some(source) = &self.rule.schema_from else {
            unreachable!("has_schema was checked")
        };
        let reference = &source.config_map_key_ref;
        let origin = format!(
            "schema from ConfigMap {:?} key {:?}",
            reference.name, reference.key
        );
        let text = match schemas.get(reference) {
            Some(SchemaText::Found(text)) => text,
            Some(SchemaText::Missing(why)) => return Err(ContentProblemText(format!("{origin}: {why}"))),
            None => return Err(ContentProblemText(format!("{origin}: not read"))),
        };
        let schema = schema_document(text).map_err(|e| ContentProblemText(format!("{origin}: {e}")))?;
        compile(&schema).map_err(|e| ContentProblemText(format!("{origin}: {e}")))
    }
}

/// A schema kept as text, JSON or YAML (YAML is read as JSON would be where they overlap).
fn schema_document(text: &str) -> Result<Value, String> {
    let documents = formats::parse(ContentFormat::Yaml, text).map_err(|e| {
        let at = e
            .position
            .map(|(line, column)| format!(" at line {line} column {column}"))
            .unwrap_or_default();
        format!("is not JSON or YAML{at}: {}", e.description)
    })?;
    match <[Value; 1]>::try_from(documents) {
        Ok([schema]) => Ok(schema),
        Err(_) => Err("holds several YAML documents; a schema is one".into()),
    }
}

/// A validator of `schema`, or why it is not a schema. Its draft is the one `$schema` names (2020-12
/// when none); no `$ref` outside it resolves. Its patterns run on a linear-time engine, so no document
/// can make one match take long; a pattern that needs backtracking is refused first, by name and place
/// (see [`patterns`]).
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    if !schema.is_object() && !schema.is_boolean() {
        return Err("a JSON Schema is an object (or true or false)".into());
    }
    patterns::check(schema)?;
    jsonschema::options()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(patterns::SIZE_LIMIT)
                .dfa_size_limit(patterns::SIZE_LIMIT),
        )
        .build(schema)
        .map_err(|e| format!("is not a valid JSON Schema: {e}"))
}

fn parse_message(format: ContentFormat, e: &formats::ParseError, secret: bool) -> String {
    let name = match format {
        ContentFormat::Json => "JSON",
        ContentFormat::Yaml => "YAML",
        ContentFormat::Toml => "TOML",
        ContentFormat::Properties => "properties",
    };
    let at = e
        .position
        .map(|(line, column)| format!(" at line {line} column {column}"))
        .unwrap_or_default();
    if secret {
        format!("is not valid {name}{at}")
    } else {
        format!("is not valid {name}{at}: {}", e.description)
    }
}

/// A value of the content: text, or bytes that may be text.
enum Bytes<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
}

impl<'a> Bytes<'a> {
    fn text(&self) -> Option<&'a str> {
        match *self {
            Self::Text(text) => Some(text),
            Self::Binary(bytes) => std::str::from_utf8(bytes).ok(),
        }
    }
}

/// Every key of `content` with its value, in key order.
fn values<'a>(content: &Content<'a>) -> Vec<(&'a str, Bytes<'a>)> {
    let mut out: Vec<(&str, Bytes<'_>)> = match *content {
        Content::ConfigMap { data, binary_data } => data
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), Bytes::Text(v)))
            .chain(
                binary_data
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.as_str(), Bytes::Binary(&v.0))),
            )
            .collect(),
        Content::Secret { data, .. } => data
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), Bytes::Binary(&v.0)))
            .collect(),
    };
    out.sort_by(|a, b| a.0.cmp(b.0));
    out
}

#[cfg(test)]
mod tests;
