//! Checks on a ConfigMapSet or SecretSet that its schema cannot express, each with a message a user can act on.
//!
//! The CRD's schema and CEL rules already reject some of these at admission; they are checked here too
//! so that cmset never stamps a revision the API server would refuse, and so that an object admitted
//! before a rule existed still gets a clear `Stalled` condition instead of a failing create. The rules
//! mirror those the API server applies to the ConfigMaps cmset creates (`ValidateConfigMap`,
//! `IsConfigMapKey`, `ValidateLabels`, `ValidateAnnotations` in Kubernetes), plus cmset's own: the
//! length of set names and the reserved `cmset.dev/` prefix.
//!
//! Every problem is reported, not only the first, so that one edit can fix them all.

use std::collections::BTreeMap;

use cmset_api::{ConfigMapSetSpec, MAX_CONFIGMAP_BYTES, SecretSetSpec, TemplateMetadata};
use k8s_openapi::ByteString;

use crate::policy::windows::{WindowSource, parse_all};
use crate::revisions::hash::HASH_LEN;
use crate::revisions::naming::{
    DNS_SUBDOMAIN_FORM, MAX_DNS_SUBDOMAIN_LEN, MAX_SET_NAME_LEN, check_label_value, check_qualified_name,
    has_dns_subdomain_form,
};
use crate::set::SetRef;
use crate::status::message::join_capped;
use crate::status::problem::Problem;

/// Most bytes the annotations of an object may take, keys and values together (Kubernetes'
/// `TotalAnnotationSizeLimitB`).
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Most characters in a ConfigMap key, as in Kubernetes' `IsConfigMapKey`.
pub const MAX_CONFIGMAP_KEY_LEN: usize = MAX_DNS_SUBDOMAIN_LEN;

/// Key prefix of cmset's own labels and annotations (and its subdomains, as `*.kubernetes.io` is
/// Kubernetes'). A template may not set them: cmset would overwrite them, or worse, believe them.
pub const RESERVED_PREFIX: &str = "cmset.dev";

/// Longest [`summary`], in bytes.
pub const SUMMARY_MAX_LEN: usize = 1000;

/// Checks everything about set `set_name` with `spec` that the schema cannot, and returns every
/// problem found, in the order of the fields.
pub fn validate(set_name: &str, spec: &ConfigMapSetSpec) -> Result<(), Vec<Problem>> {
    let mut problems = Vec::new();
    let template = &spec.template;

    check_set_name(set_name, &mut problems);
    check_template_metadata(&template.metadata, &mut problems);

    let data = template.data.as_ref();
    let binary_data = template.binary_data.as_ref();
    if let Some(source) = &spec.config_map_name {
        check_source_name("spec.configMapName", source, &mut problems);
        if data.is_some() || binary_data.is_some() {
            problems.push(Problem::new(
                "spec.configMapName",
                "names the source of the content, so spec.template.data and spec.template.binaryData must be \
                 left out",
            ));
        }
    }
    for key in data.into_iter().flat_map(BTreeMap::keys) {
        let field = format!("spec.template.data[{key:?}]");
        check_config_map_key(&field, key, &mut problems);
        if binary_data.is_some_and(|b| b.contains_key(key)) {
            // Reported once, on the `data` side, as Kubernetes does.
            problems.push(Problem::new(
                field,
                "key also appears in binaryData; a ConfigMap key may be in data or in binaryData, not both",
            ));
        }
    }
    for key in binary_data.into_iter().flat_map(BTreeMap::keys) {
        check_config_map_key(&format!("spec.template.binaryData[{key:?}]"), key, &mut problems);
    }
    let size = config_map_size(data, binary_data);
    if size > MAX_CONFIGMAP_BYTES {
        problems.push(Problem::new(
            "spec.template",
            format!("total size {size} bytes exceeds the {MAX_CONFIGMAP_BYTES} bytes a ConfigMap can hold"),
        ));
    }

    check_history_limit(spec.revision_history_limit, &mut problems);
    check_rollout(spec.rollout.as_ref(), &mut problems);
    problems.extend(crate::content::content_check::spec_problems(&spec.validation));
    into_result(problems)
}

/// Checks everything about SecretSet `set_name` with `spec` that the schema cannot.
pub fn validate_secret_set(set_name: &str, spec: &SecretSetSpec) -> Result<(), Vec<Problem>> {
    let mut problems = Vec::new();
    check_set_name(set_name, &mut problems);
    check_source_name("spec.secretName", &spec.secret_name, &mut problems);
    check_template_metadata(&spec.template.metadata, &mut problems);
    check_history_limit(spec.revision_history_limit, &mut problems);
    check_rollout(spec.rollout.as_ref(), &mut problems);
    problems.extend(crate::content::content_check::spec_problems(&spec.validation));
    into_result(problems)
}

fn into_result(problems: Vec<Problem>) -> Result<(), Vec<Problem>> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// The name of a source object: a DNS subdomain, as every ConfigMap and Secret name is.
fn check_source_name(field: &str, name: &str, problems: &mut Vec<Problem>) {
    if name.is_empty() {
        problems.push(Problem::new(field, "must not be empty"));
    } else if !crate::revisions::naming::is_dns_subdomain(name) {
        problems.push(Problem::new(
            field,
            format!("{name:?} is not a valid object name: it {DNS_SUBDOMAIN_FORM}, at most {MAX_DNS_SUBDOMAIN_LEN} characters"),
        ));
    }
}

fn check_history_limit(limit: i32, problems: &mut Vec<Problem>) {
    if limit < 0 {
        problems.push(Problem::new(
            "spec.revisionHistoryLimit",
            format!("must be 0 or more, not {limit}"),
        ));
    }
}

/// The schema bounds of `spec.rollout`, checked again for servers (or clients) that skip them: a
/// negative window or a deadline of 0 would fail or advance every wave at once.
fn check_rollout(rollout: Option<&cmset_api::RolloutSpec>, problems: &mut Vec<Problem>) {
    let Some(rollout) = rollout else { return };
    if rollout.stabilization_seconds < 0 {
        problems.push(Problem::new(
            "spec.rollout.stabilizationSeconds",
            format!("must be 0 or more, not {}", rollout.stabilization_seconds),
        ));
    }
    if rollout.progress_deadline_seconds < 1 {
        problems.push(Problem::new(
            "spec.rollout.progressDeadlineSeconds",
            format!("must be 1 or more, not {}", rollout.progress_deadline_seconds),
        ));
    }
    if let Err(found) = parse_all(&rollout.windows, &WindowSource::Set, "spec.rollout.windows") {
        problems.extend(found);
    }
}

/// The labels and annotations a template copies onto every revision.
fn check_template_metadata(metadata: &TemplateMetadata, problems: &mut Vec<Problem>) {
    for (key, value) in &metadata.labels {
        let field = format!("spec.template.metadata.labels[{key:?}]");
        check_qualified_name(&field, key, problems);
        check_not_reserved(&field, key, problems);
        check_label_value(&field, value, problems);
    }

    let mut annotations_size = 0;
    for (key, value) in &metadata.annotations {
        let field = format!("spec.template.metadata.annotations[{key:?}]");
        // Kubernetes checks annotation keys as qualified names without regard to case, so
        // `Example.com/Name` is a valid annotation key (though not a valid label key).
        let lowercase = key.to_ascii_lowercase();
        check_qualified_name(&field, &lowercase, problems);
        check_not_reserved(&field, &lowercase, problems);
        annotations_size += key.len() + value.len();
    }
    if annotations_size > MAX_ANNOTATIONS_BYTES {
        problems.push(Problem::new(
            "spec.template.metadata.annotations",
            format!(
                "total size {annotations_size} bytes (keys and values) exceeds the {MAX_ANNOTATIONS_BYTES} bytes \
                 Kubernetes allows for annotations"
            ),
        ));
    }
}

/// The size Kubernetes holds against a ConfigMap's limit of 1 MiB: the bytes of every `data` value
/// plus the (decoded) bytes of every `binaryData` value. Keys are not counted, exactly as in
/// Kubernetes' `ValidateConfigMap`, so counting them here would refuse content the API server accepts.
pub fn config_map_size(
    data: Option<&BTreeMap<String, String>>,
    binary_data: Option<&BTreeMap<String, ByteString>>,
) -> usize {
    let text: usize = data.into_iter().flat_map(BTreeMap::values).map(String::len).sum();
    let binary: usize = binary_data
        .into_iter()
        .flat_map(BTreeMap::values)
        .map(|v| v.0.len())
        .sum();
    text + binary
}

/// The problems as one line for a condition message: `field: message; field: message; and 3 more`.
/// At most [`SUMMARY_MAX_LEN`] bytes, since condition messages are read by people and capped by
/// Kubernetes; the first problem is always shown, if need be cut short with `…`.
pub fn summary(problems: &[Problem]) -> String {
    let texts: Vec<String> = problems.iter().map(Problem::to_string).collect();
    join_capped(&texts, SUMMARY_MAX_LEN)
}

fn check_set_name(name: &str, problems: &mut Vec<Problem>) {
    const FIELD: &str = "metadata.name";
    if name.is_empty() {
        problems.push(Problem::new(FIELD, "name must not be empty"));
        return;
    }
    if name.len() > MAX_SET_NAME_LEN {
        problems.push(Problem::new(
            FIELD,
            format!(
                "name is {} characters long; at most {MAX_SET_NAME_LEN} are allowed, so that revision names \
                 (the set's name, '-' and a {HASH_LEN}-character hash) fit in the {MAX_DNS_SUBDOMAIN_LEN} \
                 characters of a ConfigMap name",
                name.len()
            ),
        ));
    }
    if !has_dns_subdomain_form(name) {
        problems.push(Problem::new(FIELD, format!("name {}", DNS_SUBDOMAIN_FORM)));
    }
}

/// A ConfigMap key, as Kubernetes' `IsConfigMapKey` checks it. A key can have several problems at once
/// (too long and a bad character); all are reported.
fn check_config_map_key(field: &str, key: &str, problems: &mut Vec<Problem>) {
    if key.is_empty() {
        problems.push(Problem::new(field, "key must not be empty"));
        return;
    }
    if key.len() > MAX_CONFIGMAP_KEY_LEN {
        problems.push(Problem::new(
            field,
            format!(
                "key is {} characters long; at most {MAX_CONFIGMAP_KEY_LEN} are allowed",
                key.len()
            ),
        ));
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        problems.push(Problem::new(
            field,
            "key must consist of alphanumeric characters, '-', '_' or '.'",
        ));
    }
    // Keys become file names in a mounted volume; these would name the directory or its parent (and
    // Kubernetes reserves names starting with '..' for the volume's own bookkeeping).
    let chdir = match key {
        "." => Some("key must not be '.'"),
        ".." => Some("key must not be '..'"),
        _ if key.starts_with("..") => Some("key must not start with '..'"),
        _ => None,
    };
    if let Some(message) = chdir {
        problems.push(Problem::new(field, message));
    }
}

/// `key` may not use cmset's own prefix or a subdomain of it.
fn check_not_reserved(field: &str, key: &str, problems: &mut Vec<Problem>) {
    let Some((prefix, _)) = key.split_once('/') else {
        return;
    };
    let reserved = prefix == RESERVED_PREFIX
        || prefix
            .strip_suffix(RESERVED_PREFIX)
            .is_some_and(|sub| sub.ends_with('.'));
    if reserved {
        problems.push(Problem::new(
            field,
            format!(
                "key uses the prefix '{prefix}/', which is reserved for the labels and annotations cmset \
                 sets on revisions itself"
            ),
        ));
    }
}

/// A set's own validation, whatever its kind; defined here, where validation is decided, so that the
/// set view needs nothing above it.
impl SetRef<'_> {
    /// Every problem of the spec that the schema cannot catch.
    pub fn validate(self) -> Result<(), Vec<Problem>> {
        match self {
            Self::ConfigMap(s) => validate(self.name(), &s.spec),
            Self::Secret(s) => validate_secret_set(self.name(), &s.spec),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(i: usize) -> Problem {
        Problem::new(
            format!("spec.template.data[\"k{i}\"]"),
            "key must consist of something",
        )
    }

    #[test]
    fn summary_of_nothing_is_empty() {
        assert_eq!(summary(&[]), "");
    }

    #[test]
    fn summary_joins_problems_that_fit() {
        let problems = [problem(1), problem(2)];
        assert_eq!(summary(&problems), format!("{}; {}", problems[0], problems[1]));
    }

    #[test]
    fn summary_counts_what_does_not_fit() {
        let problems: Vec<Problem> = (0..100).map(problem).collect();
        let text = summary(&problems);
        assert!(text.len() <= SUMMARY_MAX_LEN, "{} bytes", text.len());
        let shown = text.matches("key must consist").count();
        assert!(shown > 5, "{text}");
        assert!(text.ends_with(&format!("; and {} more", 100 - shown)), "{text}");
    }

    #[test]
    fn summary_cuts_a_single_huge_problem() {
        let huge = Problem::new(
            format!("spec.template.data[{:?}]", "é".repeat(5000)),
            "key is too long",
        );
        let text = summary(std::slice::from_ref(&huge));
        assert!(text.len() <= SUMMARY_MAX_LEN);
        assert!(text.ends_with('…'));
        let text = summary(&[huge, problem(1), problem(2)]);
        assert!(text.len() <= SUMMARY_MAX_LEN);
        assert!(text.ends_with("…; and 2 more"), "{text}");
    }

    #[test]
    fn set_validation_names_the_window_field() {
        use cmset_api::{RolloutSpec, RolloutWindow, WindowKind};
        let set = ConfigMapSetSpec {
            rollout: Some(RolloutSpec {
                windows: vec![RolloutWindow {
                    name: None,
                    kind: WindowKind::Deny,
                    schedule: "0 25 * * *".to_string(),
                    duration: "1h".to_string(),
                    time_zone: None,
                }],
                ..RolloutSpec::default()
            }),
            ..ConfigMapSetSpec::default()
        };
        let problems = validate("app", &set).unwrap_err();
        assert!(
            problems.iter().any(|p| p
                .to_string()
                .starts_with("spec.rollout.windows[0].schedule: hour field \"25\"")),
            "{problems:?}"
        );
    }
}
