//! Every validation rule, its boundaries, and several problems at once, as a table.

use std::collections::BTreeMap;

use cmset_api::{ConfigMapSetSpec, MAX_CONFIGMAP_BYTES};
use cmset_core::content::validate::{
    MAX_ANNOTATIONS_BYTES, SUMMARY_MAX_LEN, config_map_size, summary, validate,
};
use cmset_core::status::problem::Problem;
use k8s_openapi::ByteString;

/// A spec under construction.
#[derive(Clone)]
struct Spec(ConfigMapSetSpec);

fn spec() -> Spec {
    Spec(ConfigMapSetSpec {
        revision_history_limit: 10,
        rollout: None,
        ..ConfigMapSetSpec::default()
    })
}

impl Spec {
    fn data(mut self, key: &str, value: impl Into<String>) -> Self {
        self.0
            .template
            .data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.into());
        self
    }
    fn binary(mut self, key: &str, value: Vec<u8>) -> Self {
        self.0
            .template
            .binary_data
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), ByteString(value));
        self
    }
    fn label(mut self, key: &str, value: impl Into<String>) -> Self {
        self.0
            .template
            .metadata
            .labels
            .insert(key.to_string(), value.into());
        self
    }
    fn annotation(mut self, key: &str, value: impl Into<String>) -> Self {
        self.0
            .template
            .metadata
            .annotations
            .insert(key.to_string(), value.into());
        self
    }
    fn limit(mut self, limit: i32) -> Self {
        self.0.revision_history_limit = limit;
        self
    }
    fn rollout(mut self, stabilization: i32, deadline: i32) -> Self {
        self.0.rollout = Some(cmset_api::RolloutSpec {
            stabilization_seconds: stabilization,
            progress_deadline_seconds: deadline,
            auto_rollback: true,
            ..Default::default()
        });
        self
    }
}

struct Case {
    what: &'static str,
    set_name: String,
    spec: Spec,
    /// `(field, message)` of every problem, in order; empty when the spec is valid.
    problems: Vec<(String, String)>,
}

fn case(what: &'static str, set_name: impl Into<String>, spec: Spec, problems: &[(&str, &str)]) -> Case {
    Case {
        what,
        set_name: set_name.into(),
        spec,
        problems: problems
            .iter()
            .map(|(f, m)| (f.to_string(), m.to_string()))
            .collect(),
    }
}

const KEY_CHARS: &str = "key must consist of alphanumeric characters, '-', '_' or '.'";
const NAME_FORM: &str = "name must consist of lowercase alphanumeric characters, '-' or '.', and each '.'-separated \
     part must start and end with an alphanumeric character (e.g. 'example.com')";
const QUALIFIED_FORM: &str = "key must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
     with an alphanumeric character";
const QUALIFIED_NAME_FORM: &str = "key name (after '/') must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character";
const PREFIX_FORM: &str = "key prefix (before '/') must consist of lowercase alphanumeric characters, '-' or '.', \
     and each '.'-separated part must start and end with an alphanumeric character (e.g. 'example.com')";
const LABEL_VALUE_FORM: &str = "value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must \
     start and end with an alphanumeric character";
const NAME_TOO_LONG: &str = "name is 243 characters long; at most 242 are allowed, so that revision names (the \
     set's name, '-' and a 10-character hash) fit in the 253 characters of a ConfigMap name";

fn reserved(prefix: &str) -> String {
    format!(
        "key uses the prefix '{prefix}/', which is reserved for the labels and annotations cmset sets on revisions itself"
    )
}

fn cases() -> Vec<Case> {
    let mib = MAX_CONFIGMAP_BYTES;
    let reserved_cmset = reserved("cmset.dev");
    let reserved_sub = reserved("team.cmset.dev");
    vec![
        // Valid specs and the boundaries that still pass.
        case("an empty template", "app", spec(), &[]),
        case(
            "a typical spec",
            "app-config",
            spec()
                .data("LOG_LEVEL", "info")
                .binary("logo.png", vec![0x89, b'P']),
            &[],
        ),
        case("a set name of 242 characters", "a".repeat(242), spec(), &[]),
        case("a dotted set name", "web.frontend-1", spec(), &[]),
        case(
            "data of exactly 1 MiB",
            "app",
            spec().data("big", "x".repeat(mib)),
            &[],
        ),
        case(
            "data and binaryData of exactly 1 MiB together",
            "app",
            spec()
                .data("text", "x".repeat(mib - 10))
                .binary("bin", vec![0xff; 10]),
            &[],
        ),
        case(
            "keys do not count toward the size, as in Kubernetes",
            "app",
            spec().data(&"k".repeat(253), "x".repeat(mib)),
            &[],
        ),
        case(
            "every key character",
            "app",
            spec()
                .data("-._aZ09", "")
                .data(".hidden", "")
                .binary("_b-1.x", vec![]),
            &[],
        ),
        case(
            "a key of 253 characters",
            "app",
            spec().data(&"k".repeat(253), "v"),
            &[],
        ),
        case("no history kept", "app", spec().limit(0), &[]),
        case(
            "valid labels",
            "app",
            spec()
                .label("app", "web")
                .label("app.kubernetes.io/name", "")
                .label("example.com/x", "v".repeat(63))
                .label(&"n".repeat(63), "A-b_c.D"),
            &[],
        ),
        case(
            "valid annotations, an uppercase prefix included",
            "app",
            spec()
                .annotation("Example.com/Note", "anything at all: <>&\n")
                .annotation("note", ""),
            &[],
        ),
        case(
            "annotations of exactly 256 KiB",
            "app",
            spec().annotation("k", "v".repeat(MAX_ANNOTATIONS_BYTES - 1)),
            &[],
        ),
        case(
            "keys that only look like cmset's",
            "app",
            spec()
                .label("cmset.dev", "x")
                .label("xcmset.dev/a", "x")
                .label("cmset.devx/a", "x")
                .annotation("notcmset.dev/a", ""),
            &[],
        ),
        // The set's name.
        case(
            "a set name of 243 characters",
            "a".repeat(243),
            spec(),
            &[("metadata.name", NAME_TOO_LONG)],
        ),
        case(
            "a set name that is not a DNS subdomain",
            "My_App",
            spec(),
            &[("metadata.name", NAME_FORM)],
        ),
        case(
            "a set name ending in '-'",
            "app-",
            spec(),
            &[("metadata.name", NAME_FORM)],
        ),
        case(
            "a set name with an empty part",
            "app..x",
            spec(),
            &[("metadata.name", NAME_FORM)],
        ),
        case(
            "an empty set name",
            "",
            spec(),
            &[("metadata.name", "name must not be empty")],
        ),
        case(
            "a set name both too long and malformed",
            format!("{}_", "a".repeat(242)),
            spec(),
            &[("metadata.name", NAME_TOO_LONG), ("metadata.name", NAME_FORM)],
        ),
        // Keys of data and binaryData.
        case(
            "a key with a space",
            "app",
            spec().data("my key", "v"),
            &[(r#"spec.template.data["my key"]"#, KEY_CHARS)],
        ),
        case(
            "a key with a slash",
            "app",
            spec().binary("a/b", vec![1]),
            &[(r#"spec.template.binaryData["a/b"]"#, KEY_CHARS)],
        ),
        case(
            "a non-ASCII key",
            "app",
            spec().data("clé", "v"),
            &[(r#"spec.template.data["clé"]"#, KEY_CHARS)],
        ),
        case(
            "an empty key",
            "app",
            spec().data("", "v"),
            &[(r#"spec.template.data[""]"#, "key must not be empty")],
        ),
        case(
            "the key '.'",
            "app",
            spec().data(".", "v"),
            &[(r#"spec.template.data["."]"#, "key must not be '.'")],
        ),
        case(
            "the key '..'",
            "app",
            spec().binary("..", vec![]),
            &[(r#"spec.template.binaryData[".."]"#, "key must not be '..'")],
        ),
        case(
            "a key starting with '..'",
            "app",
            spec().data("..data", "v"),
            &[(r#"spec.template.data["..data"]"#, "key must not start with '..'")],
        ),
        case(
            "a key of 254 characters",
            "app",
            spec().data(&"k".repeat(254), "v"),
            &[(
                &format!("spec.template.data[\"{}\"]", "k".repeat(254)),
                "key is 254 characters long; at most 253 are allowed",
            )],
        ),
        case(
            "a key with a quote is quoted unambiguously",
            "app",
            spec().data("a\"b", "v"),
            &[(r#"spec.template.data["a\"b"]"#, KEY_CHARS)],
        ),
        case(
            "a key in both data and binaryData",
            "app",
            spec().data("shared", "v").binary("shared", vec![1]),
            &[(
                r#"spec.template.data["shared"]"#,
                "key also appears in binaryData; a ConfigMap key may be in data or in binaryData, not both",
            )],
        ),
        // Size.
        case(
            "data of 1 MiB and one byte",
            "app",
            spec().data("big", "x".repeat(mib + 1)),
            &[(
                "spec.template",
                "total size 1048577 bytes exceeds the 1048576 bytes a ConfigMap can hold",
            )],
        ),
        case(
            "binaryData counts its decoded bytes",
            "app",
            spec()
                .data("a", "x".repeat(1_000_000))
                .binary("b", vec![0; 200_345]),
            &[(
                "spec.template",
                "total size 1200345 bytes exceeds the 1048576 bytes a ConfigMap can hold",
            )],
        ),
        case(
            "multi-byte characters count as their UTF-8 bytes",
            "app",
            spec().data("a", "é".repeat(mib / 2 + 1)),
            &[(
                "spec.template",
                "total size 1048578 bytes exceeds the 1048576 bytes a ConfigMap can hold",
            )],
        ),
        // History.
        case(
            "a negative history limit",
            "app",
            spec().limit(-1),
            &[("spec.revisionHistoryLimit", "must be 0 or more, not -1")],
        ),
        // Rollout.
        case("a rollout policy within bounds", "app", spec().rollout(0, 1), &[]),
        case(
            "a negative stabilization window and a zero deadline",
            "app",
            spec().rollout(-1, 0),
            &[
                ("spec.rollout.stabilizationSeconds", "must be 0 or more, not -1"),
                ("spec.rollout.progressDeadlineSeconds", "must be 1 or more, not 0"),
            ],
        ),
        // Labels.
        case(
            "a label key with a space",
            "app",
            spec().label("bad key", "v"),
            &[(r#"spec.template.metadata.labels["bad key"]"#, QUALIFIED_FORM)],
        ),
        case(
            "a label key with two slashes",
            "app",
            spec().label("a/b/c", "v"),
            &[(
                r#"spec.template.metadata.labels["a/b/c"]"#,
                "key may contain at most one '/', between an optional DNS subdomain prefix and a name (e.g. 'example.com/my-name')",
            )],
        ),
        case(
            "a label key with an empty prefix",
            "app",
            spec().label("/name", "v"),
            &[(
                r#"spec.template.metadata.labels["/name"]"#,
                "key prefix (before '/') must not be empty",
            )],
        ),
        case(
            "a label key with an empty name",
            "app",
            spec().label("example.com/", "v"),
            &[(
                r#"spec.template.metadata.labels["example.com/"]"#,
                "key name (after '/') must not be empty",
            )],
        ),
        case(
            "a label key with an uppercase prefix",
            "app",
            spec().label("Example.com/name", "v"),
            &[(
                r#"spec.template.metadata.labels["Example.com/name"]"#,
                PREFIX_FORM,
            )],
        ),
        case(
            "a label key whose name ends in '-'",
            "app",
            spec().label("example.com/name-", "v"),
            &[(
                r#"spec.template.metadata.labels["example.com/name-"]"#,
                QUALIFIED_NAME_FORM,
            )],
        ),
        case(
            "a label key name of 64 characters",
            "app",
            spec().label(&"n".repeat(64), "v"),
            &[(
                &format!("spec.template.metadata.labels[\"{}\"]", "n".repeat(64)),
                "key is 64 characters long; at most 63 are allowed",
            )],
        ),
        case(
            "a label key prefix of 254 characters",
            "app",
            spec().label(&format!("{}/n", "p".repeat(254)), "v"),
            &[(
                &format!("spec.template.metadata.labels[\"{}/n\"]", "p".repeat(254)),
                "key prefix (before '/') is 254 characters long; at most 253 are allowed",
            )],
        ),
        case(
            "a label value of 64 characters",
            "app",
            spec().label("app", "v".repeat(64)),
            &[(
                r#"spec.template.metadata.labels["app"]"#,
                "value is 64 characters long; at most 63 are allowed",
            )],
        ),
        case(
            "a label value starting with '-'",
            "app",
            spec().label("app", "-web"),
            &[(r#"spec.template.metadata.labels["app"]"#, LABEL_VALUE_FORM)],
        ),
        case(
            "a label value with a space",
            "app",
            spec().label("app", "my web"),
            &[(r#"spec.template.metadata.labels["app"]"#, LABEL_VALUE_FORM)],
        ),
        // Annotations.
        case(
            "an annotation key with a space",
            "app",
            spec().annotation("my note", ""),
            &[(r#"spec.template.metadata.annotations["my note"]"#, QUALIFIED_FORM)],
        ),
        case(
            "annotations of 256 KiB and one byte",
            "app",
            spec().annotation("k", "v".repeat(MAX_ANNOTATIONS_BYTES)),
            &[(
                "spec.template.metadata.annotations",
                "total size 262145 bytes (keys and values) exceeds the 262144 bytes Kubernetes allows for annotations",
            )],
        ),
        // cmset's reserved prefix.
        case(
            "a label under cmset.dev/",
            "app",
            spec().label("cmset.dev/set", "other"),
            &[(
                r#"spec.template.metadata.labels["cmset.dev/set"]"#,
                &reserved_cmset,
            )],
        ),
        case(
            "an annotation under cmset.dev/",
            "app",
            spec().annotation("cmset.dev/revision", "7"),
            &[(
                r#"spec.template.metadata.annotations["cmset.dev/revision"]"#,
                &reserved_cmset,
            )],
        ),
        case(
            "an annotation under cmset.dev/ in capitals",
            "app",
            spec().annotation("CMSET.DEV/x", ""),
            &[(
                r#"spec.template.metadata.annotations["CMSET.DEV/x"]"#,
                &reserved_cmset,
            )],
        ),
        case(
            "a label under a subdomain of cmset.dev",
            "app",
            spec().label("team.cmset.dev/x", "y"),
            &[(
                r#"spec.template.metadata.labels["team.cmset.dev/x"]"#,
                &reserved_sub,
            )],
        ),
        // Several problems at once, all reported, in the order of the fields.
        case(
            "a key with two problems",
            "app",
            spec().data(&format!("{} ", "k".repeat(253)), "v"),
            &[
                (
                    &format!("spec.template.data[\"{} \"]", "k".repeat(253)),
                    "key is 254 characters long; at most 253 are allowed",
                ),
                (
                    &format!("spec.template.data[\"{} \"]", "k".repeat(253)),
                    KEY_CHARS,
                ),
            ],
        ),
        case(
            "everything wrong at once",
            "Bad_Name",
            spec()
                .label("cmset.dev/set", "-x")
                .annotation("a b", "")
                .data("my key", "v")
                .data("dup", "v")
                .data("..", "x".repeat(mib))
                .binary("dup", vec![1])
                .binary("bad/key", vec![])
                .limit(-5),
            &[
                ("metadata.name", NAME_FORM),
                (
                    r#"spec.template.metadata.labels["cmset.dev/set"]"#,
                    &reserved_cmset,
                ),
                (
                    r#"spec.template.metadata.labels["cmset.dev/set"]"#,
                    LABEL_VALUE_FORM,
                ),
                (r#"spec.template.metadata.annotations["a b"]"#, QUALIFIED_FORM),
                (r#"spec.template.data[".."]"#, "key must not be '..'"),
                (
                    r#"spec.template.data["dup"]"#,
                    "key also appears in binaryData; a ConfigMap key may be in data or in binaryData, not both",
                ),
                (r#"spec.template.data["my key"]"#, KEY_CHARS),
                (r#"spec.template.binaryData["bad/key"]"#, KEY_CHARS),
                // 1 MiB in "..", a byte in each of "dup" (twice) and "my key".
                (
                    "spec.template",
                    "total size 1048579 bytes exceeds the 1048576 bytes a ConfigMap can hold",
                ),
                ("spec.revisionHistoryLimit", "must be 0 or more, not -5"),
            ],
        ),
    ]
}

#[test]
fn table() {
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases {
        let got: Vec<(String, String)> = match validate(&case.set_name, &case.spec.0) {
            Ok(()) => Vec::new(),
            Err(problems) => {
                assert!(!problems.is_empty(), "{}: Err with no problems", case.what);
                problems.into_iter().map(|p| (p.field, p.message)).collect()
            }
        };
        if got != case.problems {
            failures.push(format!(
                "{}:\n  expected {:#?}\n  got      {:#?}",
                case.what, case.problems, got
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn problems_display_as_field_colon_message() {
    let problems = validate("app", &spec().data("my key", "v").0).unwrap_err();
    assert_eq!(
        problems[0].to_string(),
        r#"spec.template.data["my key"]: key must consist of alphanumeric characters, '-', '_' or '.'"#
    );
}

#[test]
fn summary_lists_every_problem_that_fits() {
    let problems = validate("app", &spec().data("my key", "v").limit(-1).0).unwrap_err();
    assert_eq!(
        summary(&problems),
        r#"spec.template.data["my key"]: key must consist of alphanumeric characters, '-', '_' or '.'; spec.revisionHistoryLimit: must be 0 or more, not -1"#
    );
}

#[test]
fn summary_of_many_problems_is_capped_and_counts_the_rest() {
    let mut s = spec();
    for i in 0..200 {
        s = s.data(&format!("bad key {i}"), "v");
    }
    let problems = validate("app", &s.0).unwrap_err();
    assert_eq!(problems.len(), 200);
    let text = summary(&problems);
    assert!(text.len() <= SUMMARY_MAX_LEN, "{} bytes", text.len());
    let shown = text.matches("key must consist").count();
    assert!(shown >= 5, "{text}");
    assert!(text.ends_with(&format!("; and {} more", 200 - shown)), "{text}");
}

#[test]
fn config_map_size_counts_values_only() {
    let data = BTreeMap::from([("key".to_string(), "é".to_string())]);
    let binary = BTreeMap::from([("bin".to_string(), ByteString(vec![0; 5]))]);
    assert_eq!(config_map_size(Some(&data), Some(&binary)), 7);
    assert_eq!(config_map_size(None, None), 0);
}

#[test]
fn problem_fields_are_public_and_comparable() {
    let p = Problem {
        field: "spec.x".into(),
        message: "m".into(),
    };
    assert_eq!(p.clone(), p);
    assert_eq!(p.to_string(), "spec.x: m");
}
