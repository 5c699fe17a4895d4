use std::collections::{BTreeMap, BTreeSet};

use cmset_api::{ConfigMapKeyRef, ContentFormat, KeyValidation, SchemaSource, ValidationSpec};
use k8s_openapi::ByteString;
use serde_json::{Value, json};

use super::*;

fn rule(format: Option<ContentFormat>, schema: Option<Value>) -> KeyValidation {
    KeyValidation {
        format,
        schema,
        schema_from: None,
    }
}

fn spec(rules: &[(&str, KeyValidation)]) -> ValidationSpec {
    ValidationSpec {
        keys: rules.iter().map(|(k, r)| (k.to_string(), r.clone())).collect(),
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn check_data(validation: &ValidationSpec, pairs: &[(&str, &str)]) -> Result<(), Refusal> {
    let data = data(pairs);
    let content = Content::ConfigMap {
        data: Some(&data),
        binary_data: None,
    };
    check(validation, &content, &SchemaTexts::new(), false)
}

fn check_secret(validation: &ValidationSpec, pairs: &[(&str, &str)]) -> Result<(), Refusal> {
    let data: BTreeMap<String, ByteString> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
    let content = Content::Secret {
        type_: None,
        data: Some(&data),
    };
    check(validation, &content, &SchemaTexts::new(), true)
}

fn port_schema() -> Value {
    json!({
        "type": "object",
        "required": ["port"],
        "properties": {
            "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "host": {"type": "string", "pattern": "^[a-z.]+$"},
        },
        "additionalProperties": false,
    })
}

#[test]
fn a_json_key_that_does_not_parse_is_named_with_line_and_column() {
    let validation = spec(&[("*.json", rule(None, None))]);
    let refusal = check_data(
        &validation,
        &[("app.json", "{\n  \"port\": 80,\n}\n"), ("notes.txt", "{")],
    )
    .unwrap_err();
    assert_eq!(
        refusal.summary(),
        r#"key "app.json": is not valid JSON at line 3 column 1: trailing comma"#
    );
    assert_eq!(refusal.problems[0].kind, ProblemKind::Parse);
}

#[test]
fn each_format_is_checked_by_its_extension_or_as_declared() {
    let validation = spec(&[
        ("*.yaml", rule(None, None)),
        ("*.toml", rule(None, None)),
        ("*.properties", rule(None, None)),
        ("nginx", rule(Some(ContentFormat::Json), None)),
    ]);
    assert_eq!(
        check_data(
            &validation,
            &[
                ("a.yaml", "a: 1\n"),
                ("b.toml", "a = 1\n"),
                ("c.properties", "a=1\n"),
                ("nginx", "{}")
            ]
        ),
        Ok(())
    );
    let refusal = check_data(
        &validation,
        &[
            ("a.yaml", "a: [1\n"),
            ("b.toml", "a = \n"),
            ("c.properties", "a=\\u1\n"),
            ("nginx", "{"),
        ],
    )
    .unwrap_err();
    let shown: Vec<(&str, &str)> = refusal
        .problems
        .iter()
        .map(|p| (p.key.as_str(), p.message.split(':').next().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("a.yaml", "is not valid YAML at line 2 column 1"),
            ("b.toml", "is not valid TOML at line 1 column 5"),
            ("c.properties", "is not valid properties at line 1 column 1"),
            ("nginx", "is not valid JSON at line 1 column 1"),
        ]
    );
}

#[test]
fn schema_errors_name_the_pointer_and_the_rule_every_one() {
    let validation = spec(&[("app.json", rule(None, Some(port_schema())))]);
    assert_eq!(
        check_data(&validation, &[("app.json", r#"{"port": 8080, "host": "a.b"}"#)]),
        Ok(())
    );
    let refusal = check_data(
        &validation,
        &[("app.json", r#"{"port": "80", "host": "A", "extra": 1}"#)],
    )
    .unwrap_err();
    let rules: Vec<(&str, &str)> = refusal
        .problems
        .iter()
        .map(|p| {
            let at = p.message.split(':').next().unwrap();
            let rule = p.message.rsplit("(rule ").next().unwrap().trim_end_matches(')');
            (at, rule)
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("at /host", "\"pattern\""),
            ("at /port", "\"type\""),
            ("at the root", "\"additionalProperties\""),
        ],
        "{refusal}"
    );
    assert!(refusal.problems.iter().all(|p| p.kind == ProblemKind::Schema));
    assert_eq!(
        refusal.problems[1].to_string(),
        r#"key "app.json": at /port: "80" is not of type "integer" (rule "type")"#
    );
}

#[test]
fn yaml_toml_and_properties_are_checked_against_the_same_schema() {
    let validation = spec(&[
        ("app.yaml", rule(None, Some(port_schema()))),
        ("app.toml", rule(None, Some(port_schema()))),
        (
            "app.properties",
            rule(
                None,
                Some(json!({"required": ["port"], "properties": {"port": {"pattern": "^[0-9]+$"}}})),
            ),
        ),
    ]);
    assert_eq!(
        check_data(
            &validation,
            &[
                ("app.yaml", "port: 80\n"),
                ("app.toml", "port = 80\n"),
                ("app.properties", "port=80\n")
            ]
        ),
        Ok(())
    );
    let refusal = check_data(
        &validation,
        &[
            ("app.yaml", "port: 0\n"),
            ("app.toml", "host = \"x\"\n"),
            ("app.properties", "port=eighty\n"),
        ],
    )
    .unwrap_err();
    let shown: Vec<String> = refusal
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.key, p.message.split(':').next().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            "app.properties: at /port",
            "app.toml: at the root",
            "app.yaml: at /port"
        ],
        "{refusal}"
    );
}

#[test]
fn several_yaml_documents_are_each_checked() {
    let validation = spec(&[("rules.yaml", rule(None, Some(port_schema())))]);
    let refusal = check_data(&validation, &[("rules.yaml", "port: 1\n---\nport: x\n")]).unwrap_err();
    assert!(
        refusal.problems[0].message.starts_with("document 2, at /port:"),
        "{refusal}"
    );
}

#[test]
fn a_key_every_matching_pattern_checks_and_globs_match_as_a_shell_does() {
    let validation = spec(&[
        ("*.json", rule(None, None)),
        ("app-?.json", rule(None, Some(json!({"type": "object"})))),
    ]);
    let refusal = check_data(
        &validation,
        &[("app-1.json", "[]"), ("app-10.json", "[]"), ("x.json", "{")],
    )
    .unwrap_err();
    let keys: Vec<&str> = refusal.problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["app-1.json", "x.json"], "{refusal}");
}

#[test]
fn binary_values_are_checked_as_text_when_they_are() {
    let validation = spec(&[("*.json", rule(None, None))]);
    let binary = BTreeMap::from([
        ("ok.json".to_string(), ByteString(b"{}".to_vec())),
        ("raw.json".to_string(), ByteString(vec![0xff, 0xfe])),
    ]);
    let content = Content::ConfigMap {
        data: None,
        binary_data: Some(&binary),
    };
    let refusal = check(&validation, &content, &SchemaTexts::new(), false).unwrap_err();
    assert_eq!(
        refusal.summary(),
        r#"key "raw.json": is binary data, not json text"#
    );
}

#[test]
fn a_refusal_lists_a_bounded_number_of_problems_and_counts_the_rest() {
    let validation = spec(&[("*.json", rule(None, None))]);
    let keys: Vec<String> = (0..25).map(|i| format!("k{i:02}.json")).collect();
    let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "{")).collect();
    let refusal = check_data(&validation, &pairs).unwrap_err();
    assert_eq!((refusal.problems.len(), refusal.more), (MAX_REPORTED, 5));
    assert!(refusal.summary().len() <= SUMMARY_MAX_LEN);
    assert!(refusal.summary().ends_with("more"), "{}", refusal.summary());
}

#[test]
fn schemas_from_configmaps_resolve_or_say_why_not() {
    let reference = ConfigMapKeyRef {
        name: "schemas".into(),
        key: "app.yaml".into(),
    };
    let validation = spec(&[(
        "app.json",
        KeyValidation {
            format: None,
            schema: None,
            schema_from: Some(SchemaSource {
                config_map_key_ref: reference.clone(),
            }),
        },
    )]);
    assert_eq!(
        schema_refs(&validation).into_iter().collect::<Vec<_>>(),
        [&reference]
    );
    let data = data(&[("app.json", r#"{"port": "x"}"#)]);
    let content = Content::ConfigMap {
        data: Some(&data),
        binary_data: None,
    };
    let with = |text: SchemaText| {
        let schemas = SchemaTexts::from([(reference.clone(), text)]);
        check(&validation, &content, &schemas, false)
    };
    // A schema in YAML.
    let refusal = with(SchemaText::Found("properties:\n  port: {type: integer}\n".into())).unwrap_err();
    assert_eq!(refusal.problems[0].kind, ProblemKind::Schema);
    let refusal = with(SchemaText::Missing("ConfigMap not found".into())).unwrap_err();
    assert_eq!(
        refusal.summary(),
        r#"key "app.json": schema from ConfigMap "schemas" key "app.yaml": ConfigMap not found"#
    );
    assert!(refusal.only_unavailable_schemas());
    let refusal = with(SchemaText::Found("type: 12\n".into())).unwrap_err();
    assert!(
        refusal.summary().contains("is not a valid JSON Schema"),
        "{refusal}"
    );
    assert!(
        with(SchemaText::Found("[1, 2]".into()))
            .unwrap_err()
            .summary()
            .contains("is an object")
    );
    assert!(
        check(&validation, &content, &SchemaTexts::new(), false)
            .unwrap_err()
            .summary()
            .ends_with("not read")
    );
}

#[test]
fn a_schema_cannot_reach_outside_itself() {
    for target in ["https://example.com/schema.json", "file:///etc/passwd"] {
        let validation = spec(&[("app.json", rule(None, Some(json!({"$ref": target}))))]);
        let problems = spec_problems(&validation);
        assert_eq!(problems.len(), 1, "{target}: {problems:?}");
        assert_eq!(problems[0].field, r#"spec.validation.keys["app.json"].schema"#);
    }
    // Within itself it may.
    let local =
        json!({"$defs": {"port": {"type": "integer"}}, "properties": {"port": {"$ref": "#/$defs/port"}}});
    let validation = spec(&[("app.json", rule(None, Some(local)))]);
    assert_eq!(spec_problems(&validation), []);
    assert!(check_data(&validation, &[("app.json", r#"{"port": "x"}"#)]).is_err());
}

#[test]
fn the_draft_is_the_one_the_schema_names() {
    // Draft 4's `exclusiveMaximum` is a boolean; from draft 6 on it is a number.
    let draft4 =
        json!({"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 5, "exclusiveMaximum": true});
    let validation = spec(&[("app.json", rule(None, Some(draft4)))]);
    assert_eq!(spec_problems(&validation), []);
    assert_eq!(check_data(&validation, &[("app.json", "4")]), Ok(()));
    assert!(check_data(&validation, &[("app.json", "5")]).is_err());
    let latest = json!({"maximum": 5, "exclusiveMaximum": true});
    assert_eq!(
        spec_problems(&spec(&[("app.json", rule(None, Some(latest)))])).len(),
        1
    );
}

#[test]
fn spec_problems_name_the_field() {
    let validation = spec(&[
        ("[", rule(Some(ContentFormat::Json), None)),
        ("config", rule(None, None)),
        ("a.json", rule(None, Some(json!({"type": "integr"})))),
        (
            "b.json",
            KeyValidation {
                format: None,
                schema: Some(json!({})),
                schema_from: Some(SchemaSource::default()),
            },
        ),
        ("ok.yml", rule(None, Some(json!(true)))),
    ]);
    let fields: Vec<String> = spec_problems(&validation).into_iter().map(|p| p.field).collect();
    assert_eq!(
        fields,
        [
            r#"spec.validation.keys["["]"#,
            r#"spec.validation.keys["a.json"].schema"#,
            r#"spec.validation.keys["b.json"]"#,
            r#"spec.validation.keys["config"].format"#,
        ]
    );
}

/// Every kind of refusal, fed a secret: no message may contain it.
#[test]
fn no_secret_set_message_quotes_a_value() {
    const SECRET: &str = "hunter2-S3cr3t";
    let schema = json!({
        "type": "object",
        "required": ["password", "missing"],
        "additionalProperties": {"type": "integer"},
        "properties": {
            "password": {"type": "integer", "enum": [1, 2], "const": 1, "pattern": "^x$",
                         "minLength": 100, "maxLength": 1, "format": "email"},
            "user": {"not": {"type": "string"}, "anyOf": [{"type": "integer"}], "oneOf": [{"type": "null"}]},
            "list": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true, "contains": {"const": 0}},
        },
        "propertyNames": {"maxLength": 5},
    });
    let documents = [
        (
            "a.json",
            format!(
                r#"{{"password": "{SECRET}", "user": "{SECRET}", "list": ["{SECRET}", "{SECRET}"], "extra": "{SECRET}"}}"#
            ),
        ),
        ("b.json", format!(r#"{{"password": "{SECRET}"#)),
        ("c.json", SECRET.to_string()),
        ("d.yaml", format!("password: {SECRET}\n bad: [{SECRET}")),
        ("e.yaml", format!("password: \"{SECRET}\\q\"\n")),
        ("f.toml", format!("password = {SECRET}\n")),
        ("g.toml", format!("password = \"{SECRET}\"\npassword = 1\n")),
        ("h.properties", format!("password={SECRET}\\u12\n")),
        ("i.yaml", format!("password: {SECRET}\nuser: {SECRET}\n")),
    ];
    let pairs: Vec<(&str, &str)> = documents.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let validation = spec(&[
        ("*.json", rule(None, Some(schema.clone()))),
        ("*.yaml", rule(None, Some(schema.clone()))),
        ("*.toml", rule(None, Some(schema.clone()))),
        ("*.properties", rule(None, Some(schema))),
    ]);
    let mut rules = BTreeSet::new();
    for pair in &pairs {
        // One document at a time, so that no problem is left out by the bound.
        let refusal = check_secret(&validation, &[*pair]).expect_err(pair.0);
        assert_eq!(refusal.more, 0);
        for problem in &refusal.problems {
            assert!(!problem.to_string().contains("hunter2"), "{problem}");
            rules.insert(problem.message.rsplit(' ').next().unwrap().to_string());
        }
    }
    // Every kind of rule failed somewhere.
    assert!(rules.len() >= 15, "{rules:?}");
    // The same content in a ConfigMapSet is quoted, which is what makes the test above mean something.
    let quoted = check_data(&validation, &pairs).unwrap_err();
    assert!(quoted.summary().contains("hunter2"), "{quoted}");
}

#[test]
fn judging_stops_when_out_of_time_naming_the_key_not_judged() {
    let validation = spec(&[("*.json", rule(None, Some(json!({"type": "object"}))))]);
    let data = data(&[("a.json", "{}"), ("b.json", "{}")]);
    let content = Content::ConfigMap {
        data: Some(&data),
        binary_data: None,
    };
    let asked = std::cell::Cell::new(0);
    // In time for the first key, out of it for the second.
    let out_of_time = || {
        asked.set(asked.get() + 1);
        asked.get() > 1
    };
    let refusal = check_within(&validation, &content, &SchemaTexts::new(), false, &out_of_time).unwrap_err();
    assert_eq!(
        refusal.problems,
        vec![ContentProblem {
            key: "b.json".into(),
            kind: ProblemKind::OverBudget,
            message: "was not judged: over the time budget".into(),
        }]
    );
    assert!(!refusal.only_unavailable_schemas());
}

#[test]
fn a_backtracking_pattern_is_refused_in_the_spec_and_a_catastrophic_one_runs_in_linear_time() {
    let backreference = spec(&[(
        "app.json",
        rule(
            None,
            Some(json!({"properties": {"id": {"pattern": "^(a+)\\1$"}}})),
        ),
    )]);
    let problems = spec_problems(&backreference);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(
        problems[0].to_string(),
        r#"spec.validation.keys["app.json"].schema: pattern at /properties/id/pattern uses a backreference (\1 to \9), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without"#
    );
    // Exponential on a backtracking engine: here judged at once, and the verdict is a plain mismatch.
    let nested = spec(&[(
        "app.json",
        rule(None, Some(json!({"properties": {"id": {"pattern": "^(a+)+$"}}}))),
    )]);
    let long = format!(r#"{{"id": "{}!"}}"#, "a".repeat(50_000));
    let refusal = check_data(&nested, &[("app.json", &long)]).unwrap_err();
    assert_eq!(refusal.problems.len(), 1);
    assert_eq!(refusal.problems[0].kind, ProblemKind::Schema);
    assert!(
        refusal.problems[0].message.ends_with(r#"(rule "pattern")"#),
        "{refusal}"
    );
}
