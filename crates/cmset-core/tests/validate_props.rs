//! Properties of validation over arbitrary sets (the table in `validate_table.rs` pins each rule and its
//! boundaries; `e2e/tests/validation_differential.rs` compares with a real API server):
//! - any name and any template are judged without panicking, and the summary stays within its cap;
//! - a set cmset accepts stamps a revision the API server accepts, by the API server's rules stated
//!   independently here;
//! - a key is accepted exactly when those rules accept it.

use std::collections::BTreeMap;

use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, MAX_CONFIGMAP_BYTES, TemplateMetadata};
use cmset_core::content::validate::{SUMMARY_MAX_LEN, summary, validate};
use cmset_core::revisions::hash::content_hash;
use cmset_core::revisions::naming::revision_name;
use cmset_core::revisions::revision::new_revision;
use cmset_core::set::Content;
use k8s_openapi::ByteString;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;

/// Keys of every kind: mostly the allowed characters, sometimes anything, lengths up to past 253.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[-._a-zA-Z0-9]{0,12}",
        1 => "[-._a-z]{250,256}",
        1 => "\\PC{0,8}",
        1 => prop::sample::select(vec![".", "..", "...", "..a", ".a", "a..b"]).prop_map(str::to_owned),
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?",
        1 => "[a-z]{240,255}",
        1 => "\\PC{0,12}",
    ]
}

/// Label and annotation keys: plain, prefixed (cmset's own prefix among them), or anything.
fn metadata_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9]([-._a-zA-Z0-9]{0,8}[a-zA-Z0-9])?",
        2 => "[a-z0-9.]{1,12}/[a-zA-Z0-9]{1,8}",
        1 => Just("cmset.dev/set".to_string()),
        1 => "\\PC{0,10}",
    ]
}

fn spec() -> impl Strategy<Value = ConfigMapSetSpec> {
    spec_of(key().boxed(), metadata_key().boxed())
}

/// Templates that are mostly valid, so that accepted ones are common; their keys still reach 253
/// characters, dots and prefixes.
fn likely_valid_spec() -> impl Strategy<Value = ConfigMapSetSpec> {
    let key = prop_oneof![9 => "[-_a-zA-Z0-9][-._a-zA-Z0-9]{0,12}", 1 => "[-._a-z]{250,253}"];
    let metadata_key = prop_oneof![
        3 => "[a-zA-Z0-9]([-._a-zA-Z0-9]{0,8}[a-zA-Z0-9])?",
        1 => "[a-z0-9]{1,5}(\\.[a-z0-9]{1,5}){0,2}/[a-zA-Z0-9]{1,8}",
    ];
    spec_of(key.boxed(), metadata_key.boxed())
}

fn spec_of(
    key: BoxedStrategy<String>,
    metadata_key: BoxedStrategy<String>,
) -> impl Strategy<Value = ConfigMapSetSpec> {
    (
        btree_map(metadata_key.clone(), "[-._a-zA-Z0-9 ]{0,10}", 0..3),
        btree_map(metadata_key, "\\PC{0,10}", 0..3),
        proptest::option::of(btree_map(key.clone(), "\\PC{0,10}", 0..4)),
        proptest::option::of(btree_map(key, vec(any::<u8>(), 0..8).prop_map(ByteString), 0..3)),
        -2..12i32,
    )
        .prop_map(
            |(labels, annotations, data, binary_data, limit)| ConfigMapSetSpec {
                template: ConfigMapTemplate {
                    metadata: TemplateMetadata { labels, annotations },
                    data,
                    binary_data,
                },
                revision_history_limit: limit,
                rollout: None,
                config_map_name: None,
                ..ConfigMapSetSpec::default()
            },
        )
}

// The API server's rules (`IsConfigMapKey`, `IsDNS1123Subdomain`, `IsQualifiedName`, `IsValidLabelValue`,
// `ValidateConfigMap`), stated on their own.

fn api_config_map_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 253
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        && k != "."
        && !k.starts_with("..")
}

fn api_dns_subdomain(s: &str) -> bool {
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b[0] != b'-'
            && b[b.len() - 1] != b'-'
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(part)
}

fn api_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-._".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

fn api_qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => api_dns_subdomain(prefix) && api_label_name(name),
        None => api_label_name(key),
    }
}

fn api_label_value(v: &str) -> bool {
    v.is_empty() || api_label_name(v)
}

/// Whether the API server would create the ConfigMap `new_revision` makes.
fn api_accepts(set: &ConfigMapSet, name: &str) -> Result<(), String> {
    let t = &set.spec.template;
    let revision = new_revision(set.into(), &Content::of_template(t), name, 1);
    let cm = revision
        .config_map()
        .expect("a ConfigMapSet's revision is a ConfigMap")
        .clone();
    let data = cm.data.unwrap_or_default();
    let binary = cm.binary_data.unwrap_or_default();
    let meta = cm.metadata;
    let check = |ok: bool, what: String| if ok { Ok(()) } else { Err(what) };
    check(api_dns_subdomain(name), format!("name {name:?}"))?;
    for k in data.keys().chain(binary.keys()) {
        check(api_config_map_key(k), format!("key {k:?}"))?;
    }
    for k in data.keys() {
        check(!binary.contains_key(k), format!("key {k:?} in both"))?;
    }
    let size: usize =
        data.values().map(String::len).sum::<usize>() + binary.values().map(|b| b.0.len()).sum::<usize>();
    check(size <= MAX_CONFIGMAP_BYTES, format!("size {size}"))?;
    for (k, v) in meta.labels.iter().flatten() {
        check(
            api_qualified_name(k) && api_label_value(v),
            format!("label {k:?}={v:?}"),
        )?;
    }
    for k in meta.annotations.iter().flatten().map(|(k, _)| k) {
        check(
            api_qualified_name(&k.to_ascii_lowercase()),
            format!("annotation {k:?}"),
        )?;
    }
    // The template's own content and metadata are all on the revision.
    check(
        t.data.iter().flatten().all(|(k, v)| data.get(k) == Some(v)),
        "data copied".into(),
    )?;
    check(
        t.metadata
            .labels
            .iter()
            .all(|(k, _)| meta.labels.iter().flatten().any(|(l, _)| l == k)),
        "labels copied".into(),
    )
}

fn set_named(name: &str, spec: ConfigMapSetSpec) -> ConfigMapSet {
    let mut set = ConfigMapSet::new(name, spec);
    set.metadata.namespace = Some("ns".into());
    set.metadata.uid = Some("set-uid".into());
    set
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any name, any template: a verdict, and for a refusal a summary that names a problem and fits.
    #[test]
    fn any_set_is_judged_and_summed_up_within_the_cap(name in name(), spec in spec()) {
        if let Err(problems) = validate(&name, &spec) {
            prop_assert!(!problems.is_empty());
            let text = summary(&problems);
            prop_assert!(!text.is_empty() && text.len() <= SUMMARY_MAX_LEN, "{} bytes", text.len());
        }
    }

    /// cmset never stamps a revision the API server would refuse.
    #[test]
    fn an_accepted_set_stamps_a_revision_the_api_server_accepts(name in name(), spec in likely_valid_spec(), count in 0..3i32) {
        if validate(&name, &spec).is_err() {
            return Ok(());
        }
        let set = set_named(&name, spec);
        let t = &set.spec.template;
        let revision = revision_name(&name, &content_hash(t.data.as_ref(), t.binary_data.as_ref(), count));
        api_accepts(&set, &revision).map_err(TestCaseError::fail)?;
    }

    /// A data or binaryData key is accepted exactly when the API server's rule accepts it.
    #[test]
    fn a_key_is_accepted_exactly_when_the_api_server_accepts_it(key in key(), binary in any::<bool>()) {
        let mut template = ConfigMapTemplate::default();
        if binary {
            template.binary_data = Some(BTreeMap::from([(key.clone(), ByteString(vec![1]))]));
        } else {
            template.data = Some(BTreeMap::from([(key.clone(), "v".to_string())]));
        }
        let spec = ConfigMapSetSpec { template, revision_history_limit: 1, rollout: None, config_map_name: None, ..ConfigMapSetSpec::default() };
        prop_assert_eq!(validate("app", &spec).is_ok(), api_config_map_key(&key), "{:?}", key);
    }
}
