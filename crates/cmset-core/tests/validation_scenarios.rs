//! `spec.validation` in the set planner: content that fails makes no revision and leaves everything
//! where it is; content that passes is stamped exactly as written.

use std::collections::BTreeMap;

use cmset_api::{
    ConfigMapKeyRef, ConfigMapSet, ConfigMapSetSpec, ConfigMapSetStatus, ConfigMapTemplate, KeyValidation,
    SchemaSource, SecretSet, SecretSetSpec, ValidationSpec, labels,
};
use cmset_core::content::content_check::{SchemaText, SchemaTexts};
use cmset_core::revisions::revision::{NewRevision, set_owner_reference};
use cmset_core::rollout::plan::{EventKind, SetInput, SetPlan, VALIDATION_FAILED, plan_set};
use cmset_core::set::{Content, SetRef, SourceState};
use cmset_core::workloads::observe::RevisionView;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{Value, json};

const NS: &str = "team";

fn validation(schema: Value) -> ValidationSpec {
    ValidationSpec {
        keys: BTreeMap::from([(
            "app.json".to_string(),
            KeyValidation {
                format: None,
                schema: Some(schema),
                schema_from: None,
            },
        )]),
    }
}

fn port_schema() -> Value {
    json!({"type": "object", "required": ["port"], "properties": {"port": {"type": "integer"}}})
}

fn set_with(json_text: &str, validation: ValidationSpec) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(
        "app",
        ConfigMapSetSpec {
            template: ConfigMapTemplate {
                data: Some(BTreeMap::from([("app.json".to_string(), json_text.to_string())])),
                ..ConfigMapTemplate::default()
            },
            validation,
            ..ConfigMapSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some("set-uid".into());
    set.metadata.generation = Some(2);
    set
}

fn plan_with(
    set: SetRef<'_>,
    source: SourceState<'_>,
    revisions: &[RevisionView],
    schemas: &SchemaTexts,
) -> SetPlan {
    plan_within(set, source, revisions, schemas, Default::default())
}

/// [`plan_with`], judging the content within `content_budget`.
fn plan_within(
    set: SetRef<'_>,
    source: SourceState<'_>,
    revisions: &[RevisionView],
    schemas: &SchemaTexts,
    content_budget: cmset_core::content::content_check::Budget<'_>,
) -> SetPlan {
    plan_set(&SetInput {
        set,
        source,
        revisions,
        workloads: &[],
        history: &[],
        pod_refs: None,
        now: Time(Timestamp::from_second(1_800_000_000).unwrap()),
        budget_waiting: &Default::default(),
        analysis: None,
        windows: &Default::default(),
        schemas,
        check_jobs: &Default::default(),
        content_budget,
    })
}

fn plan(set: &ConfigMapSet, revisions: &[RevisionView]) -> SetPlan {
    plan_with(set.into(), SourceState::Inline, revisions, &SchemaTexts::new())
}

fn revision(set: SetRef<'_>, name: &str, number: i64) -> RevisionView {
    RevisionView {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([(labels::SET.to_string(), set.name().to_string())]),
        annotations: BTreeMap::from([
            (labels::REVISION.to_string(), number.to_string()),
            (
                labels::CONTENT_HASH.to_string(),
                name.rsplit('-').next().unwrap().to_string(),
            ),
        ]),
        owner_references: vec![set_owner_reference(set)],
        being_deleted: false,
        created: Some(number),
        resource_version: None,
    }
}

fn condition(plan: &SetPlan, type_: &str) -> Option<(String, String, String)> {
    plan.status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The set as it stands once `plan`'s status is written.
fn after(set: &ConfigMapSet, plan: &SetPlan) -> ConfigMapSet {
    let mut set = set.clone();
    set.status = Some(plan.status.clone());
    set
}

#[test]
fn content_that_fails_makes_no_revision_and_keeps_the_last_good_one() {
    let good = set_with(r#"{"port": 80}"#, validation(port_schema()));
    let first = plan(&good, &[]);
    let created = first.create.as_ref().expect("a revision of good content");
    let name = created.name().to_string();
    assert_eq!(condition(&first, "Valid").unwrap().0, "True");
    let good = after(&good, &first);
    let revisions = [revision((&good).into(), &name, 1)];

    // The same set, its JSON broken.
    let mut bad = set_with("{\"port\": 80,\n}", validation(port_schema()));
    bad.status = good.status.clone();
    let p = plan(&bad, &revisions);
    assert_eq!((p.create.as_ref(), p.patches.len(), p.prune.len()), (None, 0, 0));
    assert_eq!(p.status.current_revision.as_deref(), Some(name.as_str()));
    assert_eq!(p.status.revision, Some(1));
    let (status, reason, message) = condition(&p, "Valid").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", VALIDATION_FAILED));
    assert!(
        message.starts_with("content not made into revision app-"),
        "{message}"
    );
    assert!(
        message.ends_with(&format!(
            "(workloads stay on revision 1 ({name})): key \"app.json\": is not valid JSON at line 2 column 1: trailing comma"
        )),
        "{message}"
    );
    assert_eq!(
        condition(&p, "Ready").unwrap(),
        ("False".into(), VALIDATION_FAILED.into(), message.clone())
    );
    assert_eq!(condition(&p, "Stalled").unwrap().0, "True");
    assert_eq!(p.events.len(), 1);
    assert_eq!(
        (p.events[0].kind.clone(), p.events[0].reason),
        (EventKind::Warning, VALIDATION_FAILED)
    );
    assert_eq!(p.events[0].message, message);

    // Planned again from what it wrote: nothing to do, no second event.
    let again = plan(&after(&bad, &p), &revisions);
    assert!(again.is_quiet((&after(&bad, &p)).into()), "{again:?}");
    assert!(again.events.is_empty());

    // Fixed: a revision again, Valid again.
    let mut fixed = set_with(r#"{"port": 8080}"#, validation(port_schema()));
    fixed.status = Some(p.status.clone());
    let p = plan(&fixed, &revisions);
    assert!(p.create.is_some());
    assert_eq!(condition(&p, "Valid").unwrap().0, "True");
    assert!(condition(&p, "Stalled").is_none());
}

#[test]
fn a_schema_error_names_the_pointer_and_the_rule() {
    let set = set_with(r#"{"port": "eighty"}"#, validation(port_schema()));
    let p = plan(&set, &[]);
    assert!(p.create.is_none());
    let message = condition(&p, "Valid").unwrap().2;
    assert!(
        message.ends_with(r#"(no revision exists yet): key "app.json": at /port: "eighty" is not of type "integer" (rule "type")"#),
        "{message}"
    );
}

#[test]
fn a_set_without_validation_has_no_valid_condition() {
    let p = plan(&set_with("not json at all", ValidationSpec::default()), &[]);
    assert!(p.create.is_some());
    assert!(condition(&p, "Valid").is_none());
}

#[test]
fn schemas_from_configmaps_are_read_with_the_content_and_a_missing_one_is_looked_for_again() {
    let reference = ConfigMapKeyRef {
        name: "schemas".into(),
        key: "app".into(),
    };
    let spec = ValidationSpec {
        keys: BTreeMap::from([(
            "app.json".to_string(),
            KeyValidation {
                schema_from: Some(SchemaSource {
                    config_map_key_ref: reference.clone(),
                }),
                ..KeyValidation::default()
            },
        )]),
    };
    let set = set_with(r#"{"port": "x"}"#, spec);
    // Not read yet: the planner asks for the content and its schemas.
    let p = plan(&set, &[]);
    assert!(p.needs_content && p.create.is_none());

    let missing = SchemaTexts::from([(
        reference.clone(),
        SchemaText::Missing("the ConfigMap does not exist".into()),
    )]);
    let p = plan_with((&set).into(), SourceState::Inline, &[], &missing);
    assert!(!p.needs_content && p.create.is_none());
    assert_eq!(condition(&p, "Valid").unwrap().0, "False");
    // Not stalled: the ConfigMap may yet come, and is looked for again.
    assert!(condition(&p, "Stalled").is_none());
    assert_eq!(p.recheck_in, Some(std::time::Duration::from_secs(60)));

    let found = SchemaTexts::from([(
        reference,
        SchemaText::Found("properties: {port: {type: integer}}".into()),
    )]);
    let p = plan_with((&set).into(), SourceState::Inline, &[], &found);
    assert!(p.create.is_none());
    assert_eq!(condition(&p, "Stalled").unwrap().0, "True");
}

#[test]
fn a_rotated_secret_that_fails_its_schema_is_not_rolled_out_even_immediately_and_nothing_is_quoted() {
    let mut set = SecretSet::new(
        "db",
        SecretSetSpec {
            secret_name: "db-credentials".into(),
            validation: ValidationSpec {
                keys: BTreeMap::from([(
                    "config.json".to_string(),
                    KeyValidation {
                        schema: Some(json!({"properties": {"password": {"minLength": 12}}})),
                        ..KeyValidation::default()
                    },
                )]),
            },
            rollout: Some(cmset_api::RolloutSpec {
                strategy: cmset_api::Strategy::Immediate,
                ..cmset_api::RolloutSpec::default()
            }),
            ..SecretSetSpec::default()
        },
    );
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some("uid-db".into());
    set.metadata.generation = Some(1);
    let secret = |password: &str| Secret {
        data: Some(BTreeMap::from([(
            "config.json".to_string(),
            ByteString(format!(r#"{{"password": "{password}"}}"#).into_bytes()),
        )])),
        ..Secret::default()
    };
    let good = secret("a-long-enough-one");
    let p = plan_with(
        (&set).into(),
        SourceState::Read(Content::of_secret(&good)),
        &[],
        &SchemaTexts::new(),
    );
    let Some(NewRevision::Secret(created)) = &p.create else {
        panic!("a Secret revision: {p:?}")
    };
    let revisions = [revision(
        (&set).into(),
        created.metadata.name.as_deref().unwrap(),
        1,
    )];
    set.status = Some(p.status.clone());

    let rotated = secret("shortSECRET");
    let p = plan_with(
        (&set).into(),
        SourceState::Read(Content::of_secret(&rotated)),
        &revisions,
        &SchemaTexts::new(),
    );
    assert!(p.create.is_none());
    let message = condition(&p, "Valid").unwrap().2;
    assert!(
        message.ends_with(r#"key "config.json": at /password: fails rule "minLength""#),
        "{message}"
    );
    let everything = format!("{:?}", p);
    assert!(!everything.contains("shortSECRET"), "{everything}");
    assert_eq!(
        p.status.current_revision,
        set.status.as_ref().unwrap().current_revision
    );
}

/// JSON text: an object, written compactly, pretty, or indented by tabs with white space around.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    (prop::collection::btree_map("[a-z]{1,6}", value, 0..4), 0..3usize).prop_map(|(object, style)| {
        let object = Value::Object(object.into_iter().collect());
        match style {
            0 => serde_json::to_string(&object).unwrap(),
            1 => serde_json::to_string_pretty(&object).unwrap(),
            _ => {
                let mut out = b"\n ".to_vec();
                let formatter = serde_json::ser::PrettyFormatter::with_indent(b"\t");
                let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
                serde::Serialize::serialize(&object, &mut serializer).unwrap();
                out.extend_from_slice(b"  \n");
                String::from_utf8(out).unwrap()
            }
        }
    })
}

proptest! {
    /// Validation never rewrites: content that passes is stamped byte for byte as written.
    #[test]
    fn content_that_passes_is_stored_as_written(text in json_text()) {
        let set = set_with(&text, validation(json!({"type": "object"})));
        let p = plan(&set, &[]);
        let Some(NewRevision::ConfigMap(created)) = &p.create else {
            panic!("no revision for {text:?}: {:?}", p.status.conditions)
        };
        prop_assert_eq!(created.data.as_ref().unwrap().get("app.json"), Some(&text));
    }
}

#[test]
fn a_status_without_a_previous_revision_is_kept_as_it_was() {
    let p = plan(&set_with("[", validation(json!({}))), &[]);
    assert_eq!(p.status.current_revision, None);
    assert_eq!(
        ConfigMapSetStatus {
            conditions: Vec::new(),
            ..p.status.clone()
        },
        ConfigMapSetStatus {
            observed_generation: Some(2),
            ..ConfigMapSetStatus::default()
        }
    );
}

/// Judging content has a budget the I/O layer sets (the controller's clock): over it, no revision is
/// made and the set says which key was not judged, as for content that fails.
#[test]
fn content_judged_past_its_budget_makes_no_revision_and_says_so() {
    let validation = ValidationSpec {
        keys: BTreeMap::from([(
            "app.json".to_string(),
            KeyValidation {
                format: None,
                schema: Some(serde_json::json!({"type": "object"})),
                schema_from: None,
            },
        )]),
    };
    let set = set_with("{}", validation);
    let out_of_time = cmset_core::content::content_check::Budget(&|| true);
    let plan = plan_within(
        (&set).into(),
        SourceState::Inline,
        &[],
        &SchemaTexts::new(),
        out_of_time,
    );
    assert!(plan.create.is_none(), "no revision");
    let (status, reason, message) = condition(&plan, "Valid").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "ValidationFailed"));
    assert!(
        message.ends_with(r#"key "app.json": was not judged: over the time budget"#),
        "{message}"
    );
}
