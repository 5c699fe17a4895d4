//! The regular expressions of a schema (`pattern`, the keys of `patternProperties`), checked before the
//! schema is compiled: cmset matches them with a linear-time engine, so a tenant's schema cannot make
//! one match take exponential time on a crafted document. What only a backtracking engine can do
//! (backreferences, lookahead and lookbehind) is refused by name and place, as is a pattern whose
//! compiled form would exceed [`SIZE_LIMIT`].

use serde_json::Value;

/// The largest compiled form (and lazy DFA cache) of one pattern, in bytes: far above what a
/// hand-written pattern needs, far below what a crafted repetition count would take.
pub const SIZE_LIMIT: usize = 2 * 1024 * 1024;

/// Subtrees that hold data, not schemas: a `pattern` inside them is a value like any other.
const DATA_KEYWORDS: [&str; 4] = ["const", "default", "enum", "examples"];

/// `Ok` when every pattern of `schema` can run in linear time; otherwise the first that cannot, with
/// its keyword, its JSON pointer in the schema and why.
pub fn check(schema: &Value) -> Result<(), String> {
    let mut found = Vec::new();
    collect(schema, &mut String::new(), &mut found);
    for (pointer, keyword, pattern) in found {
        if let Some(why) = needs_backtracking(&pattern) {
            return Err(format!(
                "{keyword} at {pointer} uses {why}, which needs a backtracking engine; cmset matches \
                 patterns in linear time, so rewrite it without"
            ));
        }
        let alone = serde_json::json!({ "pattern": pattern });
        let compiled = jsonschema::options()
            .with_pattern_options(
                jsonschema::PatternOptions::regex()
                    .size_limit(SIZE_LIMIT)
                    .dfa_size_limit(SIZE_LIMIT),
            )
            .build(&alone);
        if let Err(e) = compiled {
            return Err(format!(
                "{keyword} at {pointer} is not a pattern cmset can run: {e}"
            ));
        }
    }
    Ok(())
}

/// Every pattern under `value`, as (JSON pointer, keyword, pattern).
fn collect(value: &Value, at: &mut String, found: &mut Vec<(String, &'static str, String)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if DATA_KEYWORDS.contains(&key.as_str()) {
                    continue;
                }
                let before = at.len();
                at.push('/');
                at.push_str(&escape(key));
                match (key.as_str(), child) {
                    ("pattern", Value::String(pattern)) => {
                        found.push((at.clone(), "pattern", pattern.clone()));
                    }
                    ("patternProperties", Value::Object(patterns)) => {
                        for pattern in patterns.keys() {
                            found.push((
                                format!("{at}/{}", escape(pattern)),
                                "patternProperties",
                                pattern.clone(),
                            ));
                        }
                    }
                    _ => {}
                }
                collect(child, at, found);
                at.truncate(before);
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                let before = at.len();
                at.push('/');
                at.push_str(&index.to_string());
                collect(child, at, found);
                at.truncate(before);
            }
        }
        _ => {}
    }
}

/// A JSON pointer token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// What in `pattern` (ECMA-262 syntax) only a backtracking engine can match, if anything.
fn needs_backtracking(pattern: &str) -> Option<&'static str> {
    let mut chars = pattern.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('1'..='9') if !in_class => return Some("a backreference (\\1 to \\9)"),
                Some('k') if !in_class && chars.peek() == Some(&'<') => {
                    return Some("a named backreference (\\k<name>)");
                }
                _ => {}
            },
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class && chars.peek() == Some(&'?') => {
                chars.next();
                match chars.next() {
                    Some('=') => return Some("a lookahead (?=...)"),
                    Some('!') => return Some("a negative lookahead (?!...)"),
                    Some('<') => match chars.peek() {
                        Some('=') => return Some("a lookbehind (?<=...)"),
                        Some('!') => return Some("a negative lookbehind (?<!...)"),
                        _ => {}
                    },
                    _ => {}
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_backtracking_construct_is_refused_by_keyword_place_and_name() {
        let cases = [
            (
                json!({"properties": {"a": {"pattern": "^(a+)\\1$"}}}),
                r"pattern at /properties/a/pattern uses a backreference (\1 to \9), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without",
            ),
            (
                json!({"items": [{"pattern": "(?<x>a)\\k<x>"}]}),
                r"pattern at /items/0/pattern uses a named backreference (\k<name>), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without",
            ),
            (
                json!({"patternProperties": {"^(?=x)": {}}}),
                "patternProperties at /patternProperties/^(?=x) uses a lookahead (?=...), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without",
            ),
            (
                json!({"propertyNames": {"pattern": "a(?!b)"}}),
                "pattern at /propertyNames/pattern uses a negative lookahead (?!...), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without",
            ),
            (
                json!({"$defs": {"a/b": {"pattern": "(?<=a)b"}}}),
                "pattern at /$defs/a~1b/pattern uses a lookbehind (?<=...), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without",
            ),
            (
                json!({"pattern": "(?<!a)b"}),
                "pattern at /pattern uses a negative lookbehind (?<!...), which needs a backtracking engine; cmset matches patterns in linear time, so rewrite it without",
            ),
        ];
        for (schema, want) in cases {
            assert_eq!(check(&schema).unwrap_err(), want, "{schema}");
        }
    }

    #[test]
    fn linear_patterns_named_groups_and_escapes_in_classes_pass() {
        for pattern in [
            "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
            "^(?<major>\\d+)\\.(\\d+)$",
            "[\\d-]",
            "\\(?=not a group",
            "^(a+)+$",
        ] {
            assert_eq!(check(&json!({"pattern": pattern})), Ok(()), "{pattern}");
        }
    }

    #[test]
    fn patterns_in_data_are_not_patterns_and_oversized_ones_are_refused() {
        assert_eq!(check(&json!({"const": {"pattern": "(?=x)"}})), Ok(()));
        assert_eq!(check(&json!({"enum": [{"pattern": "\\1"}]})), Ok(()));
        let huge = check(&json!({"pattern": "(\\w{1000}){1000}"})).unwrap_err();
        assert!(
            huge.starts_with("pattern at /pattern is not a pattern cmset can run: "),
            "{huge}"
        );
    }
}
