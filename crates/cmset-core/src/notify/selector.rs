//! Kubernetes label selectors in their text form, as `kubectl get -l` takes them: requirements
//! separated by commas, each `key=value` (or `==`), `key!=value`, `key in (a,b)`, `key notin (a,b)`,
//! `key` (the label exists) or `!key` (it does not). All must hold. An empty selector matches every set.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub op: Op,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Equals(String),
    /// Also true when the label is missing, as in Kubernetes.
    NotEquals(String),
    In(BTreeSet<String>),
    /// Also true when the label is missing, as in Kubernetes.
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
}

impl Selector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if text.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for part in split_top_level(text)? {
            requirements.push(Requirement::parse(part.trim())?);
        }
        Ok(Self { requirements })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// The text split at the commas that are not inside parentheses.
fn split_top_level(text: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' if depth == 0 => depth = 1,
            '(' => return Err("has a `(` inside a set of values".to_string()),
            ')' if depth == 1 => depth = 0,
            ')' => return Err("has a `)` without its `(`".to_string()),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("has a `(` without its `)`".to_string());
    }
    parts.push(&text[start..]);
    Ok(parts)
}

impl Requirement {
    fn parse(part: &str) -> Result<Self, String> {
        if part.is_empty() {
            return Err("has an empty requirement (two commas in a row, or one at an end)".to_string());
        }
        if let Some(key) = part.strip_prefix('!') {
            let key = key.trim();
            check_key(key)?;
            return Ok(Self {
                key: key.to_string(),
                op: Op::DoesNotExist,
            });
        }
        let key_end = part
            .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '(' | '<' | '>'))
            .unwrap_or(part.len());
        let key = &part[..key_end];
        check_key(key)?;
        let rest = part[key_end..].trim_start();
        let op = if rest.is_empty() {
            Op::Exists
        } else if let Some(value) = rest.strip_prefix("!=") {
            Op::NotEquals(value_of(value.trim())?)
        } else if let Some(value) = rest.strip_prefix("==").or_else(|| rest.strip_prefix('=')) {
            Op::Equals(value_of(value.trim())?)
        } else if let Some(set) = word(rest, "notin") {
            Op::NotIn(set_of(set)?)
        } else if let Some(set) = word(rest, "in") {
            Op::In(set_of(set)?)
        } else {
            return Err(format!(
                "requirement {part:?} is not key, !key, key=value, key!=value, key in (...) or key notin (...)"
            ));
        };
        Ok(Self {
            key: key.to_string(),
            op,
        })
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            Op::Equals(v) => value == Some(v),
            Op::NotEquals(v) => value != Some(v),
            Op::In(set) => value.is_some_and(|v| set.contains(v)),
            Op::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
        }
    }
}

/// What follows the operator word `word`, if `text` starts with it as a word.
fn word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let rest = text.strip_prefix(word)?;
    (rest.starts_with(char::is_whitespace) || rest.starts_with('(')).then(|| rest.trim_start())
}

fn set_of(text: &str) -> Result<BTreeSet<String>, String> {
    let inner = text
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("{text:?} is not a set of values in parentheses"))?;
    if inner.trim().is_empty() {
        return Err("has an empty set of values".to_string());
    }
    inner.split(',').map(|v| value_of(v.trim())).collect()
}

/// A label name: 1 to 63 letters, digits, `-`, `_` or `.`, starting and ending with a letter or digit.
fn is_label_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

fn check_key(key: &str) -> Result<(), String> {
    let ok = match key.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_label_name(name),
        None => is_label_name(key),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{key:?} is not a label key"))
    }
}

fn value_of(value: &str) -> Result<String, String> {
    if value.is_empty() || is_label_name(value) {
        Ok(value.to_string())
    } else {
        Err(format!("{value:?} is not a label value"))
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |set: &BTreeSet<String>| set.iter().map(String::as_str).collect::<Vec<_>>().join(",");
        match &self.op {
            Op::Equals(v) => write!(f, "{}={v}", self.key),
            Op::NotEquals(v) => write!(f, "{}!={v}", self.key),
            Op::In(set) => write!(f, "{} in ({})", self.key, join(set)),
            Op::NotIn(set) => write!(f, "{} notin ({})", self.key, join(set)),
            Op::Exists => write!(f, "{}", self.key),
            Op::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        let set = labels(&[("team", "payments"), ("tier", "prod"), ("cmset.dev/wave", "1")]);
        for (selector, want) in [
            ("", true),
            ("team=payments", true),
            ("team==payments", true),
            ("team = payments", true),
            ("team=checkout", false),
            ("team!=checkout", true),
            ("team!=payments", false),
            ("owner!=x", true),
            ("tier in (prod,staging)", true),
            ("tier in (staging)", false),
            ("owner in (x)", false),
            ("tier notin (staging)", true),
            ("tier notin (prod)", false),
            ("owner notin (x)", true),
            ("team", true),
            ("owner", false),
            ("!owner", true),
            ("! team", false),
            ("cmset.dev/wave=1", true),
            ("team=payments,tier in (prod, staging)", true),
            ("team=payments,tier notin (prod)", false),
            ("team=payments,!owner,tier", true),
        ] {
            let parsed = Selector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
            assert_eq!(parsed.matches(&set), want, "{selector}");
        }
    }

    #[test]
    fn bad_selectors_say_what_is_wrong() {
        for (selector, want) in [
            (
                "team=payments,",
                "has an empty requirement (two commas in a row, or one at an end)",
            ),
            ("tier in prod", r#""prod" is not a set of values in parentheses"#),
            ("tier in ()", "has an empty set of values"),
            ("tier in (a,(b))", "has a `(` inside a set of values"),
            ("tier in (a", "has a `(` without its `)`"),
            ("team=a)", "has a `)` without its `(`"),
            ("-team=a", r#""-team" is not a label key"#),
            ("Example.com/team=a", r#""Example.com/team" is not a label key"#),
            ("team=a b", r#""a b" is not a label value"#),
            (
                "team>1",
                r#"requirement "team>1" is not key, !key, key=value, key!=value, key in (...) or key notin (...)"#,
            ),
            (
                "tier inside",
                r#"requirement "tier inside" is not key, !key, key=value, key!=value, key in (...) or key notin (...)"#,
            ),
        ] {
            assert_eq!(Selector::parse(selector), Err(want.to_string()), "{selector}");
        }
    }

    fn name() -> impl Strategy<Value = String> + Clone {
        "[a-z0-9]([a-z0-9._-]{0,8}[a-z0-9])?"
    }

    fn requirement() -> impl Strategy<Value = Requirement> {
        let key = (proptest::option::of("[a-z]{1,5}(\\.[a-z]{1,5})?"), name())
            .prop_map(|(prefix, name)| prefix.map_or(name.clone(), |p| format!("{p}/{name}")));
        let value = prop_oneof![Just(String::new()), name()];
        let set = || proptest::collection::btree_set(name(), 1..4);
        let op = prop_oneof![
            value.clone().prop_map(Op::Equals),
            value.prop_map(Op::NotEquals),
            set().prop_map(Op::In),
            set().prop_map(Op::NotIn),
            Just(Op::Exists),
            Just(Op::DoesNotExist),
        ];
        (key, op).prop_map(|(key, op)| Requirement { key, op })
    }

    proptest! {
        #[test]
        fn a_written_selector_reads_back_the_same(reqs in proptest::collection::vec(requirement(), 0..5)) {
            let selector = Selector { requirements: reqs };
            prop_assert_eq!(Selector::parse(&selector.to_string()), Ok(selector));
        }

        #[test]
        fn negated_operators_match_exactly_where_their_opposite_does_not(
            req in requirement(),
            pairs in proptest::collection::btree_map(name(), name(), 0..4),
        ) {
            let opposite = match &req.op {
                Op::Equals(v) => Op::NotEquals(v.clone()),
                Op::NotEquals(v) => Op::Equals(v.clone()),
                Op::In(s) => Op::NotIn(s.clone()),
                Op::NotIn(s) => Op::In(s.clone()),
                Op::Exists => Op::DoesNotExist,
                Op::DoesNotExist => Op::Exists,
            };
            let negated = Requirement { key: req.key.clone(), op: opposite };
            prop_assert_ne!(req.matches(&pairs), negated.matches(&pairs));
        }

        #[test]
        fn a_set_matches_the_selector_of_its_own_labels(
            pairs in proptest::collection::btree_map(name(), name(), 0..5),
        ) {
            let text: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            prop_assert!(Selector::parse(&text.join(",")).unwrap().matches(&pairs));
        }

        #[test]
        fn parsing_never_panics(text in "\\PC{0,40}") {
            let _ = Selector::parse(&text);
        }
    }
}
