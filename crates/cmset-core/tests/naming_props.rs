//! Properties of revision names and the `cmset.dev/set` label value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use cmset_core::revisions::hash::content_hash;
use cmset_core::revisions::naming::{
    MAX_DNS_SUBDOMAIN_LEN, MAX_SET_NAME_LEN, is_dns_subdomain, is_label_value, is_revision_name_of,
    refers_to_set, revision_name, set_candidates, set_label_value,
};
use proptest::prelude::*;
use regex::Regex;

/// Valid set names: DNS subdomains of 1 to 242 characters, short ones as likely as long ones.
fn set_name() -> impl Strategy<Value = String> {
    let part = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?";
    (prop::collection::vec(part, 1..8), 1..=MAX_SET_NAME_LEN).prop_map(|(parts, max)| {
        let mut name = parts.join(".");
        name.truncate(max);
        // Cutting may leave a '-' or '.' at the end, which a DNS subdomain may not have.
        name.trim_end_matches(['-', '.']).to_string()
    })
}

/// Names longer than a label value, the ones `set_label_value` must shorten.
fn long_set_name() -> impl Strategy<Value = String> {
    set_name().prop_filter("longer than a label value", |n| n.len() > 63)
}

/// Content for a hash, small and arbitrary.
fn data() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map("[-._a-zA-Z0-9]{1,10}", ".{0,20}", 0..4)
}

/// DNS subdomain rules stated another way than the implementation does: only `[a-z0-9.-]`, neither
/// end a '.' or '-', and no '.' next to another '.' or a '-'.
fn reference_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && !s.starts_with(['.', '-'])
        && !s.ends_with(['.', '-'])
        && !s.contains("..")
        && !s.contains(".-")
        && !s.contains("-.")
}

fn reference_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn generated_set_names_are_valid(name in set_name()) {
        prop_assert!(is_dns_subdomain(&name), "{}", name);
        prop_assert!(name.len() <= MAX_SET_NAME_LEN);
    }

    #[test]
    fn revision_names_are_dns_subdomains_that_belong_to_their_set(name in set_name(), data in data(), count in 0..5i32) {
        let revision = revision_name(&name, &content_hash(Some(&data), None, count));
        prop_assert!(revision.len() <= 253, "{} is {} long", revision, revision.len());
        prop_assert!(is_dns_subdomain(&revision), "{}", revision);
        prop_assert!(is_revision_name_of(&name, &revision));
    }

    #[test]
    fn a_set_does_not_claim_revisions_of_a_set_it_prefixes(
        name in set_name().prop_filter("room for a suffix", |n| n.len() < 200),
        suffix in "-[a-z0-9]{1,20}",
        data in data(),
    ) {
        let longer = format!("{name}{suffix}");
        let revision = revision_name(&longer, &content_hash(Some(&data), None, 0));
        prop_assert!(is_revision_name_of(&longer, &revision));
        prop_assert!(!is_revision_name_of(&name, &revision), "{} claims {}", name, revision);
    }

    #[test]
    fn set_label_value_is_always_a_label_value(name in set_name()) {
        let value = set_label_value(&name);
        prop_assert!(is_label_value(&value), "{} -> {}", name, value);
        prop_assert!(value.len() <= 63);
        prop_assert_eq!(&value, &set_label_value(&name));
        if name.len() <= 63 {
            // The contract users select on: `cmset.dev/set=<set name>`.
            prop_assert_eq!(&value, &name);
        } else {
            // Long names stay recognisable.
            prop_assert!(value.starts_with(&name[..20]), "{} -> {}", name, value);
        }
    }

    #[test]
    fn set_label_value_of_any_string_is_a_label_value(name in "\\PC{0,300}") {
        let value = set_label_value(&name);
        prop_assert!(is_label_value(&value), "{:?} -> {:?}", name, value);
    }

    #[test]
    fn distinct_long_names_get_distinct_label_values(a in long_set_name(), b in long_set_name()) {
        prop_assume!(a != b);
        prop_assert_ne!(set_label_value(&a), set_label_value(&b));
    }

    #[test]
    fn is_dns_subdomain_agrees_with_the_reference(s in "[-.a-z0-9A_]{0,12}") {
        prop_assert_eq!(is_dns_subdomain(&s), reference_dns_subdomain(&s), "{:?}", s);
    }

    #[test]
    fn is_label_value_agrees_with_the_reference(s in "[-._a-zA-Z0-9 /é]{0,66}") {
        prop_assert_eq!(is_label_value(&s), reference_label_value(&s), "{:?}", s);
    }
}

#[test]
fn long_names_sharing_a_prefix_get_distinct_label_values() {
    // The hard case: every name keeps the same 52-character prefix, so only the hash tells them apart.
    let prefix = "a".repeat(70);
    let values: BTreeSet<String> = (0..5000)
        .map(|i| set_label_value(&format!("{prefix}-{i}")))
        .collect();
    assert_eq!(values.len(), 5000);
    assert!(values.iter().all(|v| is_label_value(v) && v.len() == 63));
}

#[test]
fn label_value_boundary() {
    let at_limit = "a".repeat(63);
    assert_eq!(set_label_value(&at_limit), at_limit);
    let over = "a".repeat(64);
    let value = set_label_value(&over);
    assert_ne!(value, over);
    assert_eq!(value.len(), 63);
    assert!(value.starts_with(&format!("{}-", "a".repeat(52))), "{value}");
    let longest = "b".repeat(MAX_SET_NAME_LEN);
    assert!(is_label_value(&set_label_value(&longest)));
}

#[test]
fn revision_name_examples() {
    assert_eq!(
        revision_name("nginx-config", "d2c65kk9hm"),
        "nginx-config-d2c65kk9hm"
    );
    assert!(is_revision_name_of("nginx-config", "nginx-config-d2c65kk9hm"));
    assert!(is_revision_name_of("app-config", "app-config-d2c65kk9hm"));
    // `app` does not claim its neighbour's revision.
    assert!(!is_revision_name_of("app", "app-config-d2c65kk9hm"));
    assert!(!is_revision_name_of("app", "app"));
    assert!(!is_revision_name_of("app", "app-"));
    assert!(!is_revision_name_of("app", "app-d2c65kk9h"));
    assert!(!is_revision_name_of("app", "app-d2c65kk9hmm"));
    assert!(!is_revision_name_of("app", "app-d2c653391a"));
    assert!(!is_revision_name_of("app", "app.d2c65kk9hm"));
    assert!(!is_revision_name_of("app", "xapp-d2c65kk9hm"));
    // Found by `candidates_are_exactly_the_sets_any_name_refers_to`: the empty name claimed `-<hash>`,
    // which `set_candidates` never offers.
    assert!(!is_revision_name_of("", "-d2c65kk9hm"));
    assert!(!refers_to_set("", "-d2c65kk9hm"));
    // The longest set name still gives a valid revision name.
    let longest = "c".repeat(MAX_SET_NAME_LEN);
    let revision = revision_name(&longest, "d2c65kk9hm");
    assert_eq!(revision.len(), 253);
    assert!(is_dns_subdomain(&revision));
}

proptest! {
    /// `set_candidates` is exactly the sets `refers_to_set` accepts: a set is a candidate of a name iff
    /// the name refers to it.
    #[test]
    fn candidates_are_exactly_the_sets_a_name_refers_to(name in "[a-z][a-z0-9-]{0,30}", content in "[a-z]{0,8}") {
        let hash = cmset_core::revisions::hash::short_hash(content.as_bytes());
        for configmap in [name.clone(), revision_name(&name, &hash)] {
            let candidates: Vec<&str> = set_candidates(&configmap).collect();
            prop_assert!(candidates.contains(&configmap.as_str()));
            prop_assert!(candidates.iter().all(|set| refers_to_set(set, &configmap)));
            prop_assert!(refers_to_set(&name, &configmap));
            prop_assert!(candidates.contains(&name.as_str()), "{configmap} does not name {name} as a candidate");
        }
    }
}

#[test]
fn candidates_of_plain_and_revision_names() {
    assert_eq!(set_candidates("app").collect::<Vec<_>>(), vec!["app"]);
    assert_eq!(
        set_candidates("app-config-d2c65kk9hm").collect::<Vec<_>>(),
        vec!["app-config-d2c65kk9hm", "app-config"]
    );
    assert_eq!(
        set_candidates("app-d2c653391a").collect::<Vec<_>>(),
        vec!["app-d2c653391a"]
    );
    assert_eq!(
        set_candidates("-d2c65kk9hm").collect::<Vec<_>>(),
        vec!["-d2c65kk9hm"]
    );
    assert!(!refers_to_set("app", "app-config-d2c65kk9hm"));
}

proptest! {
    /// The same, over any strings at all (unicode, no hash, several '-'): `set_candidates` never panics,
    /// every candidate is a set the name refers to, and every set the name refers to is a candidate.
    #[test]
    fn candidates_are_exactly_the_sets_any_name_refers_to(set in "\\PC{0,16}", other in "\\PC{0,28}", content in any::<u8>()) {
        let revision = revision_name(&set, &cmset_core::revisions::hash::short_hash(&[content]));
        for configmap in [revision.as_str(), other.as_str(), set.as_str()] {
            let candidates: Vec<&str> = set_candidates(configmap).collect();
            prop_assert!(candidates.iter().all(|c| refers_to_set(c, configmap)), "{:?}", configmap);
            for claimant in [set.as_str(), other.as_str(), revision.as_str()] {
                if refers_to_set(claimant, configmap) {
                    prop_assert!(candidates.contains(&claimant), "{:?} refers to {:?}", configmap, claimant);
                }
            }
        }
        prop_assert_eq!(is_revision_name_of(&set, &revision), !set.is_empty());
    }
}

/// What a CRD schema with `pattern: DNS_SUBDOMAIN_PATTERN` and `maxLength: 253` accepts (the API
/// server uses Go's RE2; the `regex` crate has the same syntax and semantics for this expression).
fn schema_accepts(name: &str) -> bool {
    static PATTERN: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(cmset_api::DNS_SUBDOMAIN_PATTERN).expect("a valid expression"));
    name.len() <= MAX_DNS_SUBDOMAIN_LEN && PATTERN.is_match(name)
}

#[test]
fn the_schema_pattern_accepts_exactly_dns_subdomains_on_edge_cases() {
    let longest = format!("{}.{}", "a".repeat(126), "b".repeat(126));
    let too_long = format!("{longest}c");
    for name in [
        "", "a", "1", "a-b", "a.b", "a.b-c.d9", "-a", "a-", ".a", "a.", "a..b", "a.-b", "A", "a_b", "a b",
        "a\n", "\na", "é", &longest, &too_long,
    ] {
        assert_eq!(schema_accepts(name), is_dns_subdomain(name), "{name:?}");
    }
    assert!(schema_accepts(&longest) && !schema_accepts(&too_long));
}

proptest! {
    /// A SecretSet's `secretName` is checked by the schema's pattern; it must agree with the core.
    #[test]
    fn the_schema_pattern_accepts_exactly_dns_subdomains(
        name in prop_oneof![set_name(), "[-.a-z0-9]{0,12}", "[-.a-zA-Z0-9_ ]{0,12}", ".{0,6}"],
    ) {
        prop_assert_eq!(schema_accepts(&name), is_dns_subdomain(&name), "{:?}", name);
    }
}
