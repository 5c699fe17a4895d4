//! Names of revisions, the label that ties them to their set, and the Kubernetes name rules they obey.
//!
//! A revision of set `app` is the ConfigMap `app-<hash>`, where `<hash>` is the 10-character
//! [content hash](crate::revisions::hash::content_hash), and carries the label `cmset.dev/set: app`.

use crate::revisions::hash::{HASH_LEN, is_hash, short_hash};
use crate::status::problem::Problem;

/// Longest name of an object Kubernetes accepts (a DNS subdomain, RFC 1123). Defined with the API,
/// whose schemas use it too.
pub use cmset_api::MAX_DNS_SUBDOMAIN_LEN;

/// Longest label value Kubernetes accepts.
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// Longest set name whose revision names still fit: `<set>-<hash>` must be at most 253 characters.
pub const MAX_SET_NAME_LEN: usize = MAX_DNS_SUBDOMAIN_LEN - 1 - HASH_LEN;

/// Length of the name prefix kept in the label value of a set whose name is too long for a label:
/// the prefix, `-` and a hash make exactly 63 characters.
const LABEL_PREFIX_LEN: usize = MAX_LABEL_VALUE_LEN - 1 - HASH_LEN;

/// Name of the revision of set `set_name` whose content hash is `hash`: `<set>-<hash>`.
pub fn revision_name(set_name: &str, hash: &str) -> String {
    format!("{set_name}-{hash}")
}

/// Whether `candidate` is the name of a revision of set `set_name`: the set's name, `-`, then exactly
/// a hash. The fixed length of the hash keeps sets apart whose names prefix one another: set `app`
/// does not claim `app-config-d2c65kk9hm`, a revision of set `app-config`. No set has an empty name, so
/// the empty name has no revisions (as [`set_candidates`] never offers it).
pub fn is_revision_name_of(set_name: &str, candidate: &str) -> bool {
    !set_name.is_empty()
        && candidate
            .strip_prefix(set_name)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(is_hash)
}

/// Whether the ConfigMap name `configmap` refers to set `set_name`: the set's bare name (how a workload
/// opts in) or one of its revisions. This is the one rule for "does this name belong to that set";
/// everything that asks (the controllers, the plugin, the indexes) asks here.
pub fn refers_to_set(set_name: &str, configmap: &str) -> bool {
    configmap == set_name || is_revision_name_of(set_name, configmap)
}

/// The names of the sets a ConfigMap name can refer to, by [`refers_to_set`]: the name itself, and the
/// part before `-<hash>` when it ends in one. At most two, so a reference is mapped to its set in O(1)
/// instead of by asking every set.
pub fn set_candidates(configmap: &str) -> impl Iterator<Item = &str> {
    let revision_of = configmap
        .len()
        .checked_sub(HASH_LEN + 1)
        .filter(|&cut| cut > 0 && configmap.is_char_boundary(cut))
        .map(|cut| configmap.split_at(cut))
        .filter(|(_, suffix)| suffix.strip_prefix('-').is_some_and(is_hash))
        .map(|(set, _)| set);
    std::iter::once(configmap).chain(revision_of)
}

/// Value of the `cmset.dev/set` label on the revisions of set `set_name`.
///
/// A set name that is a valid label value (every valid set name of at most 63 characters) is used as
/// it is: that is the contract users select on, `cmset.dev/set=<set name>`. A longer name (set names
/// go up to [`MAX_SET_NAME_LEN`]) cannot be a label value, so it becomes its first 52 characters, `-`
/// and a hash of the whole name: still readable, at most 63 characters, the same every time, and
/// distinct for distinct names unless SHA-256 collides on its first 40 bits among names that already
/// share those 52 characters.
///
/// Any input gives a valid label value, even one that is not a valid set name.
pub fn set_label_value(set_name: &str) -> String {
    if is_label_value(set_name) {
        return set_name.to_string();
    }
    // A valid set name only holds characters a label value may hold; an invalid one has the others
    // dropped, so the result stays a label value whatever it is given.
    let kept: String = set_name
        .chars()
        .filter(|&c| is_label_char(c))
        .take(LABEL_PREFIX_LEN)
        .collect();
    // A label value must start and end with an alphanumeric character; the hash is alphanumeric, and
    // the '-' in between is fine, so only the ends of the prefix need care.
    let prefix = kept.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = short_hash(set_name.as_bytes());
    if prefix.is_empty() {
        hash
    } else {
        format!("{prefix}-{hash}")
    }
}

/// Whether `s` is a DNS subdomain as Kubernetes requires of most object names (RFC 1123): at most 253
/// characters, one or more dot-separated parts, each made of lowercase letters, digits and `-`, and
/// each starting and ending with a letter or digit.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_DNS_SUBDOMAIN_LEN && has_dns_subdomain_form(s)
}

/// [`is_dns_subdomain`] without the length limit, so that validation can report length and form
/// separately.
pub(crate) fn has_dns_subdomain_form(s: &str) -> bool {
    // An empty string splits into one empty part, which is rejected.
    s.split('.').all(is_dns_subdomain_part)
}

fn is_dns_subdomain_part(part: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = part.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&b| alnum(b) || b == b'-')
        }
        _ => false,
    }
}

/// Whether `s` is a valid label value: empty, or at most 63 letters, digits, `-`, `_` and `.`,
/// starting and ending with a letter or digit.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || (s.len() <= MAX_LABEL_VALUE_LEN && has_label_value_form(s))
}

/// A non-empty run of letters, digits, `-`, `_` and `.` that starts and ends with a letter or digit:
/// the form of a non-empty label value and of the name part of a label or annotation key.
pub(crate) fn has_label_value_form(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() && s.chars().all(is_label_char)
        }
        _ => false,
    }
}

/// The characters a label value (or the name part of a label key) may hold.
fn is_label_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Most characters in the name part of a label or annotation key.
pub const MAX_QUALIFIED_NAME_LEN: usize = 63;

/// What a DNS subdomain looks like, as Kubernetes says it (with an example).
pub(crate) const DNS_SUBDOMAIN_FORM: &str = "must consist of lowercase alphanumeric characters, '-' or '.', and each \
     '.'-separated part must start and end with an alphanumeric character (e.g. 'example.com')";

/// A label or annotation key: a name, optionally preceded by a DNS subdomain and `/`, as Kubernetes'
/// `IsQualifiedName` checks it.
pub(crate) fn check_qualified_name(field: &str, key: &str, problems: &mut Vec<Problem>) {
    let (prefix, name) = match key.split_once('/') {
        Some((_, rest)) if rest.contains('/') => {
            problems.push(Problem::new(
                field,
                "key may contain at most one '/', between an optional DNS subdomain prefix and a name \
                 (e.g. 'example.com/my-name')",
            ));
            return;
        }
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            problems.push(Problem::new(field, "key prefix (before '/') must not be empty"));
        } else {
            if prefix.len() > MAX_DNS_SUBDOMAIN_LEN {
                problems.push(Problem::new(
                    field,
                    format!(
                        "key prefix (before '/') is {} characters long; at most {MAX_DNS_SUBDOMAIN_LEN} are allowed",
                        prefix.len()
                    ),
                ));
            }
            if !has_dns_subdomain_form(prefix) {
                problems.push(Problem::new(
                    field,
                    format!("key prefix (before '/') {DNS_SUBDOMAIN_FORM}"),
                ));
            }
        }
    }
    let part = if prefix.is_some() {
        "key name (after '/')"
    } else {
        "key"
    };
    if name.is_empty() {
        problems.push(Problem::new(field, format!("{part} must not be empty")));
        return;
    }
    if name.len() > MAX_QUALIFIED_NAME_LEN {
        problems.push(Problem::new(
            field,
            format!(
                "{part} is {} characters long; at most {MAX_QUALIFIED_NAME_LEN} are allowed",
                name.len()
            ),
        ));
    }
    if !has_label_value_form(name) {
        problems.push(Problem::new(
            field,
            format!(
                "{part} must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
                 with an alphanumeric character"
            ),
        ));
    }
}

pub(crate) fn check_label_value(field: &str, value: &str, problems: &mut Vec<Problem>) {
    if value.len() > MAX_LABEL_VALUE_LEN {
        problems.push(Problem::new(
            field,
            format!(
                "value is {} characters long; at most {MAX_LABEL_VALUE_LEN} are allowed",
                value.len()
            ),
        ));
    }
    if !value.is_empty() && !has_label_value_form(value) {
        problems.push(Problem::new(
            field,
            "value must be empty or consist of alphanumeric characters, '-', '_' or '.', and must start and \
             end with an alphanumeric character",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_set_name_len_leaves_room_for_the_hash() {
        assert_eq!(MAX_SET_NAME_LEN, 242);
        assert_eq!(LABEL_PREFIX_LEN, 52);
    }

    #[test]
    fn dns_subdomains() {
        for ok in [
            "a",
            "app",
            "app-config",
            "a.b.c",
            "0",
            "9lives",
            "x-1.y-2",
            &"a".repeat(253),
        ] {
            assert!(is_dns_subdomain(ok), "{ok:?} should be a DNS subdomain");
        }
        for bad in [
            "",
            "App",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a.",
            "a_b",
            "a b",
            "a.-b",
            "é",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?} should not be a DNS subdomain");
        }
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "A", "a.b_c-d", "0x", "MyValue", &"z".repeat(63)] {
            assert!(is_label_value(ok), "{ok:?} should be a label value");
        }
        for bad in ["-a", "a-", "_a", "a.", "a b", "a/b", "é", &"z".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?} should not be a label value");
        }
    }

    #[test]
    fn label_value_of_an_awkward_long_name_is_still_valid() {
        // The 52-character prefix would end in '.', which is trimmed.
        let name = format!("{}.{}", "a".repeat(51), "b".repeat(40));
        let value = set_label_value(&name);
        assert!(is_label_value(&value), "{value:?}");
        assert!(value.starts_with(&format!("{}-", "a".repeat(51))), "{value:?}");
        // Names that are not set names at all still give label values.
        for odd in ["", "Bad Name!", "é", "---", &"é".repeat(100), &"-".repeat(300)] {
            assert!(is_label_value(&set_label_value(odd)), "{odd:?}");
        }
    }
}
