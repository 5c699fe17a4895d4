//! Reading a value in one of the formats `spec.validation` names into the JSON data model, so that one
//! JSON Schema applies to all of them. A value that does not parse gives its position (1-based line and
//! column, the column in characters) and what the parser said, kept apart: for a SecretSet only the
//! position is shown, since a parser's words may quote the text.

use std::io::Cursor;

use cmset_api::ContentFormat;
use serde_json::{Map, Number, Value};

/// Why a value does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line and column, when the parser says where.
    pub position: Option<(usize, usize)>,
    /// The parser's description, without the position. May quote the text.
    pub description: String,
}

/// The documents of `text` read as `format`: one, except for YAML with several documents (`---`).
pub fn parse(format: ContentFormat, text: &str) -> Result<Vec<Value>, ParseError> {
    match format {
        ContentFormat::Json => parse_json(text).map(|v| vec![v]),
        ContentFormat::Yaml => parse_yaml(text),
        ContentFormat::Toml => parse_toml(text).map(|v| vec![v]),
        ContentFormat::Properties => parse_properties(text).map(|v| vec![v]),
    }
}

fn parse_json(text: &str) -> Result<Value, ParseError> {
    serde_json::from_str(text).map_err(|e| ParseError {
        position: (e.line() > 0).then(|| (e.line(), e.column())),
        description: without_position(&e.to_string()),
    })
}

/// `serde_json` and `serde_yaml_ng` end their messages with ` at line L column C` (the YAML one
/// sometimes before a `, while ...` clause): the position is reported on its own.
fn without_position(message: &str) -> String {
    let Some(at) = message.find(" at line ") else {
        return message.to_string();
    };
    let rest = &message[at + " at line ".len()..];
    let after_numbers = rest
        .find(|c: char| !(c.is_ascii_digit() || c == ' ' || "column".contains(c)))
        .unwrap_or(rest.len());
    format!("{}{}", &message[..at], &rest[after_numbers..])
}

fn parse_yaml(text: &str) -> Result<Vec<Value>, ParseError> {
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value: serde_yaml_ng::Value =
            serde::Deserialize::deserialize(document).map_err(|e| yaml_error(&e))?;
        documents.push(yaml_to_json(value).map_err(|description| ParseError {
            position: None,
            description,
        })?);
    }
    if documents.is_empty() {
        // An empty text is one null document, as every YAML reader takes it.
        documents.push(Value::Null);
    }
    Ok(documents)
}

fn yaml_error(e: &serde_yaml_ng::Error) -> ParseError {
    ParseError {
        position: e.location().map(|l| (l.line(), l.column())),
        description: without_position(&e.to_string()),
    }
}

/// A YAML value in the JSON data model: tags are dropped, keys that are scalars become their text
/// (`1: a` has key `"1"`, as JSON Schema tools read YAML), and numbers JSON cannot hold (`.nan`,
/// `.inf`) become strings.
fn yaml_to_json(value: serde_yaml_ng::Value) -> Result<Value, String> {
    use serde_yaml_ng::Value as Y;
    Ok(match value {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => yaml_number(&n),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect::<Result<_, _>>()?),
        Y::Mapping(mapping) => {
            let mut object = Map::new();
            for (key, value) in mapping {
                let key = match key {
                    Y::String(s) => s,
                    Y::Bool(b) => b.to_string(),
                    Y::Number(n) => n.to_string(),
                    Y::Null => "null".to_string(),
                    Y::Tagged(tagged) => match yaml_to_json(tagged.value)? {
                        Value::String(s) => s,
                        other if !other.is_object() && !other.is_array() => other.to_string(),
                        _ => return Err("a mapping key is a collection; JSON keys are text".into()),
                    },
                    Y::Sequence(_) | Y::Mapping(_) => {
                        return Err("a mapping key is a collection; JSON keys are text".into());
                    }
                };
                object.insert(key, yaml_to_json(value)?);
            }
            Value::Object(object)
        }
        Y::Tagged(tagged) => yaml_to_json(tagged.value)?,
    })
}

fn yaml_number(n: &serde_yaml_ng::Number) -> Value {
    if let Some(i) = n.as_i64() {
        Value::Number(i.into())
    } else if let Some(u) = n.as_u64() {
        Value::Number(u.into())
    } else {
        let f = n.as_f64().unwrap_or(f64::NAN);
        Number::from_f64(f).map_or_else(|| Value::String(n.to_string()), Value::Number)
    }
}

fn parse_toml(text: &str) -> Result<Value, ParseError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| ParseError {
        position: e.span().map(|span| line_and_column(text, span.start)),
        description: e.message().trim_end().to_string(),
    })?;
    Ok(toml_to_json(toml::Value::Table(table)))
}

/// A TOML value in the JSON data model: dates and times become their RFC 3339 text; floats JSON
/// cannot hold (`nan`, `inf`) become strings.
fn toml_to_json(value: toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::Number(i.into()),
        toml::Value::Float(f) => {
            Number::from_f64(f).map_or_else(|| Value::String(f.to_string()), Value::Number)
        }
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => {
            Value::Object(table.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}

/// Properties as `java.util.Properties` reads them, in the JSON data model: an object of strings.
fn parse_properties(text: &str) -> Result<Value, ParseError> {
    let map = java_properties::read(Cursor::new(text.as_bytes())).map_err(|e| ParseError {
        position: e.line_number().map(|line| (line, 1)),
        description: properties_description(&e),
    })?;
    Ok(Value::Object(
        map.into_iter().map(|(k, v)| (k, Value::String(v))).collect(),
    ))
}

/// The crate's message without its `(line_number = N)` suffix: the line is reported on its own.
fn properties_description(e: &java_properties::PropertiesError) -> String {
    let text = e.to_string();
    match text.find(" (line_number") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
pub fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn error(format: ContentFormat, text: &str) -> ParseError {
        parse(format, text).expect_err(text)
    }

    #[test]
    fn json_errors_have_line_and_column_apart_from_the_description() {
        let e = error(ContentFormat::Json, "{\n  \"port\": 80,\n  \"host\": \"a\",\n}");
        assert_eq!(e.position, Some((4, 1)));
        assert_eq!(e.description, "trailing comma");
        let e = error(ContentFormat::Json, "{\"a\": 1} x");
        assert_eq!(
            (e.position, e.description.as_str()),
            (Some((1, 10)), "trailing characters")
        );
    }

    #[test]
    fn yaml_errors_have_line_and_column() {
        let e = error(ContentFormat::Yaml, "server:\n  port: 80\n host: a\n");
        assert_eq!(e.position.map(|p| p.0), Some(3), "{e:?}");
        assert!(!e.description.contains(" at line "), "{e:?}");
        let e = error(ContentFormat::Yaml, "a: [1, 2\n");
        assert!(e.position.is_some(), "{e:?}");
    }

    #[test]
    fn toml_errors_have_line_and_column_from_the_span() {
        let e = error(ContentFormat::Toml, "[server]\nport = 80\nhost = \n");
        assert_eq!(e.position.map(|p| p.0), Some(3), "{e:?}");
        assert!(!e.description.is_empty());
    }

    #[test]
    fn properties_errors_have_the_line() {
        let e = error(ContentFormat::Properties, "a=1\nb=\\u12\n");
        assert_eq!(e.position, Some((2, 1)), "{e:?}");
        assert!(!e.description.contains("line_number"), "{e:?}");
    }

    #[test]
    fn every_format_reads_into_the_json_model() {
        assert_eq!(
            parse(ContentFormat::Toml, "title = \"x\"\n[server]\nport = 80\nratio = 0.5\nwhen = 1979-05-27T07:32:00Z\ntags = [\"a\"]\n")
                .unwrap(),
            vec![json!({"title": "x", "server": {"port": 80, "ratio": 0.5, "when": "1979-05-27T07:32:00Z", "tags": ["a"]}})]
        );
        assert_eq!(
            parse(
                ContentFormat::Properties,
                "# comment\nname = app\nport: 8080\nlong = a\\\n  b\n"
            )
            .unwrap(),
            vec![json!({"name": "app", "port": "8080", "long": "ab"})]
        );
        assert_eq!(
            parse(
                ContentFormat::Yaml,
                "1: one\ntrue: yes\nn: .nan\nt: !custom {a: 1}\n"
            )
            .unwrap(),
            vec![json!({"1": "one", "true": "yes", "n": ".nan", "t": {"a": 1}})]
        );
        assert_eq!(
            parse(ContentFormat::Yaml, "a: 1\n---\na: 2\n").unwrap(),
            vec![json!({"a": 1}), json!({"a": 2})]
        );
        assert_eq!(parse(ContentFormat::Yaml, "").unwrap(), vec![Value::Null]);
        assert!(parse(ContentFormat::Yaml, "? [a]\n: 1\n").is_err());
    }

    #[test]
    fn line_and_column_count_characters() {
        assert_eq!(line_and_column("ab\ncé\nx", 0), (1, 1));
        assert_eq!(line_and_column("ab\ncé\nx", 3), (2, 1));
        assert_eq!(line_and_column("ab\ncé\nx", 6), (2, 3));
        assert_eq!(line_and_column("ab\ncé\nx", 7), (3, 1));
        assert_eq!(line_and_column("ab", 99), (1, 3));
    }
}
