//! Reading the configuration's YAML values by hand, field by field, so that every message names a field
//! and none quotes a value (a value may be a token or a webhook URL). Also the `$key` references to the
//! Secret and Go-style durations.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_yaml_ng::{Mapping, Value};

use super::SECRET_NAME;

/// The YAML text as a tree. The parser's messages name a place (line, column), not the text there.
pub(super) fn parse(text: &str) -> Result<Value, String> {
    serde_yaml_ng::from_str(text).map_err(|e| format!("is not valid YAML: {e}"))
}

/// The fields of one YAML mapping, read one by one; [`Fields::finish`] refuses any left unread.
pub(super) struct Fields<'a> {
    map: &'a Mapping,
    path: String,
    read: Vec<String>,
}

impl<'a> Fields<'a> {
    /// `value` as a mapping; `path` prefixes field names in messages (empty at the top).
    pub(super) fn of(value: &'a Value, path: &str) -> Result<Self, String> {
        let Value::Mapping(map) = value else {
            return Err(if path.is_empty() {
                "must be a mapping of fields".to_string()
            } else {
                format!("`{path}` must be a mapping of fields")
            });
        };
        for key in map.keys() {
            if !key.is_string() {
                return Err(format!("{} has a key that is not a string", in_path(path)));
            }
        }
        Ok(Self {
            map,
            path: path.to_string(),
            read: Vec::new(),
        })
    }

    fn name(&self, field: &str) -> String {
        if self.path.is_empty() {
            field.to_string()
        } else {
            format!("{}.{field}", self.path)
        }
    }

    pub(super) fn value(&mut self, field: &str) -> Option<&'a Value> {
        self.read.push(field.to_string());
        self.map.get(field).filter(|v| !v.is_null())
    }

    pub(super) fn string(&mut self, field: &str) -> Result<Option<String>, String> {
        let name = self.name(field);
        self.value(field).map(|v| scalar(v, &name)).transpose()
    }

    pub(super) fn required_string(&mut self, field: &str) -> Result<String, String> {
        let name = self.name(field);
        self.string(field)?.ok_or_else(|| format!("`{name}` is required"))
    }

    pub(super) fn bool(&mut self, field: &str) -> Result<Option<bool>, String> {
        let name = self.name(field);
        match self.value(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(format!("`{name}` must be true or false")),
        }
    }

    pub(super) fn count(&mut self, field: &str) -> Result<Option<u64>, String> {
        let name = self.name(field);
        match self.value(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(_) => Err(format!("`{name}` must be a whole number, 0 or more")),
        }
    }

    pub(super) fn fields(&mut self, field: &str) -> Result<Option<Fields<'a>>, String> {
        let name = self.name(field);
        self.value(field).map(|v| Fields::of(v, &name)).transpose()
    }

    /// A mapping from names to strings (`webhooks`, `recipientUrls`).
    pub(super) fn string_map(&mut self, field: &str) -> Result<Option<BTreeMap<String, String>>, String> {
        let name = self.name(field);
        let Some(value) = self.value(field) else {
            return Ok(None);
        };
        let Value::Mapping(map) = value else {
            return Err(format!("`{name}` must be a mapping of names to strings"));
        };
        let mut out = BTreeMap::new();
        for (k, v) in map {
            let Some(k) = k.as_str() else {
                return Err(format!("`{name}` has a key that is not a string"));
            };
            out.insert(k.to_string(), scalar(v, &format!("{name}.{k}"))?);
        }
        Ok(Some(out))
    }

    /// A list of strings; a single string is a list of one.
    pub(super) fn string_list(&mut self, field: &str) -> Result<Option<Vec<String>>, String> {
        let name = self.name(field);
        self.value(field).map(|v| string_list(v, &name)).transpose()
    }

    /// Refuses fields that were not read: a misspelt option is an error, not a silent default.
    pub(super) fn finish(self) -> Result<(), String> {
        let unknown: Vec<&str> = self
            .map
            .keys()
            .filter_map(Value::as_str)
            .filter(|k| !self.read.iter().any(|r| r == k))
            .collect();
        match unknown.as_slice() {
            [] => Ok(()),
            [one] => Err(format!("{} has an unknown field `{one}`", in_path(&self.path))),
            many => Err(format!(
                "{} has unknown fields {}",
                in_path(&self.path),
                many.iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
}

fn in_path(path: &str) -> String {
    if path.is_empty() {
        "the value".to_string()
    } else {
        format!("`{path}`")
    }
}

/// A string, or a number or boolean read as text (`username: 42`).
fn scalar(value: &Value, name: &str) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(format!("`{name}` must be a string")),
    }
}

pub(super) fn string_list(value: &Value, name: &str) -> Result<Vec<String>, String> {
    match value {
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| scalar(v, &format!("{name}[{i}]")))
            .collect(),
        Value::Null => Ok(Vec::new()),
        other => scalar(other, name).map(|s| vec![s]),
    }
}

/// Characters of a Secret key, as Kubernetes allows them.
fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// `text` with every `$key` replaced by that key of the Secret; `$$` is a literal `$`, and a `$` not
/// followed by a key character stays as it is. The error names the key, never a value.
pub(super) fn resolve(text: &str, secret: &BTreeMap<String, Vec<u8>>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let end = after.find(|c| !is_key_char(c)).unwrap_or(after.len());
        if end == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        let key = &after[..end];
        let Some(bytes) = secret.get(key) else {
            return Err(format!(
                "refers to `${key}`, which the Secret {SECRET_NAME} does not have"
            ));
        };
        let Ok(value) = std::str::from_utf8(bytes) else {
            return Err(format!(
                "refers to `${key}`, whose value in {SECRET_NAME} is not UTF-8 text"
            ));
        };
        out.push_str(value);
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Longest timeout accepted.
pub(super) const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// A Go-style duration (`10s`, `1m30s`, `1.5s`, `500ms`), more than 0 and at most 10 minutes.
pub(super) fn duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 10s, 1m30s or 500ms");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..num_end].parse().map_err(|_| bad())?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += number * scale;
        rest = &rest[unit_end..];
    }
    let max = MAX_TIMEOUT.as_nanos() as f64;
    if nanos <= 0.0 || nanos > max {
        return Err(format!("{text:?} must be more than 0 and at most 10m"));
    }
    Ok(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            ("token".to_string(), b"xoxb-1".to_vec()),
            ("a.b_c-d".to_string(), b"v".to_vec()),
            ("binary".to_string(), vec![0xff, 0xfe]),
        ])
    }

    #[test]
    fn references_are_replaced_from_the_secret() {
        for (text, want) in [
            ("$token", Ok("xoxb-1")),
            ("Bearer $token", Ok("Bearer xoxb-1")),
            ("https://h/$a.b_c-d/x", Ok("https://h/v/x")),
            ("costs $$5", Ok("costs $5")),
            ("a $ alone", Ok("a $ alone")),
            ("trailing $", Ok("trailing $")),
            ("no reference", Ok("no reference")),
            (
                "$missing",
                Err("refers to `$missing`, which the Secret cmset-notifications-secret does not have"),
            ),
            (
                "$binary",
                Err("refers to `$binary`, whose value in cmset-notifications-secret is not UTF-8 text"),
            ),
        ] {
            assert_eq!(
                resolve(text, &secret()),
                want.map(str::to_string).map_err(str::to_string),
                "{text}"
            );
        }
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        for (text, want) in [
            ("10s", Some(Duration::from_secs(10))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("500ms", Some(Duration::from_millis(500))),
            ("250us", Some(Duration::from_micros(250))),
            ("10m", Some(MAX_TIMEOUT)),
            ("10m1s", None),
            ("0s", None),
            ("10", None),
            ("s", None),
            ("1d", None),
            ("", None),
            ("1..2s", None),
        ] {
            assert_eq!(duration(text).ok(), want, "{text}");
        }
    }

    #[test]
    fn unread_fields_are_refused_by_name() {
        let value = parse("url: x\nheader: y\nmethd: z\n").unwrap();
        let mut fields = Fields::of(&value, "").unwrap();
        assert_eq!(fields.string("url").unwrap().as_deref(), Some("x"));
        assert_eq!(
            fields.finish().unwrap_err(),
            "the value has unknown fields `header`, `methd`"
        );
    }

    #[test]
    fn a_wrong_type_names_the_field_and_not_the_value() {
        let value = parse("headers:\n  x-team: [1]\nretries: lots\n").unwrap();
        let mut fields = Fields::of(&value, "").unwrap();
        let err = fields.string_map("headers").unwrap_err();
        assert_eq!(err, "`headers.x-team` must be a string");
        assert_eq!(
            fields.count("retries").unwrap_err(),
            "`retries` must be a whole number, 0 or more"
        );
        let scalar = parse("just-a-token").unwrap();
        assert_eq!(
            Fields::of(&scalar, "").err().unwrap(),
            "must be a mapping of fields"
        );
    }
}
