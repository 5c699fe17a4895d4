//! A template's query with its variables, the arguments a set binds to it, and the query rendered for
//! one wave (and one workload).
//!
//! Variables are filled in one pass over the template's text, each from its own source: `{{namespace}}`
//! from the set's namespace, `{{args.NAME}}` from the bound arguments and nothing else. So an argument
//! can neither fill another variable nor bring in a variable of its own.
//!
//! Where a variable stands in the PromQL decides how its value is written ([`Place`]): inside a
//! double-quoted string it is escaped for that string (and regex-escaped in the string of a `=~` or
//! `!~` matcher, unless the argument is a `regex`), so no value can end the string it is in. Outside
//! one, only values checked to be harmless there may stand: an argument of type `duration` or `number`,
//! or cmset's own variables. A template that puts any other argument there is refused
//! ([`check_template`]), at admission and again when a set uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use cmset_api::{AnalysisArg, AnalysisArgType};

/// Characters a `string` argument's value may not contain: each could end a PromQL string (quotes,
/// backslash escapes) or open a variable or a label matcher (braces). Control characters too. Values
/// are escaped for their string besides; this keeps plain values plain.
pub const FORBIDDEN_ARG_CHARACTERS: [char; 6] = ['"', '\'', '`', '\\', '{', '}'];

/// A variable of a query.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variable {
    /// `{{namespace}}`: always the set's own namespace.
    Namespace,
    /// `{{workload.name}}`.
    WorkloadName,
    /// `{{workload.kind}}`.
    WorkloadKind,
    /// `{{revision}}`: the name of the revision being rolled out.
    Revision,
    /// `{{wave}}`.
    Wave,
    /// `{{args.NAME}}`.
    Arg(String),
}

impl Variable {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "namespace" => Self::Namespace,
            "workload.name" => Self::WorkloadName,
            "workload.kind" => Self::WorkloadKind,
            "revision" => Self::Revision,
            "wave" => Self::Wave,
            _ => Self::Arg(name.strip_prefix("args.").filter(|a| is_arg_name(a))?.to_string()),
        })
    }

    fn names_workload(&self) -> bool {
        matches!(self, Self::WorkloadName | Self::WorkloadKind)
    }
}

impl fmt::Display for Variable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Namespace => f.write_str("{{namespace}}"),
            Self::WorkloadName => f.write_str("{{workload.name}}"),
            Self::WorkloadKind => f.write_str("{{workload.kind}}"),
            Self::Revision => f.write_str("{{revision}}"),
            Self::Wave => f.write_str("{{wave}}"),
            Self::Arg(name) => write!(f, "{{{{args.{name}}}}}"),
        }
    }
}

/// Whether `name` matches [`cmset_api::analysis::ANALYSIS_ARG_NAME_PATTERN`].
pub fn is_arg_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Where a variable stands in the query's PromQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Place {
    /// Outside any double-quoted string: bare PromQL, a single-quoted or raw string, a comment.
    Bare,
    /// Inside a double-quoted string.
    Quoted,
    /// Inside the double-quoted string of a `=~` or `!~` matcher: a regular expression.
    Regex,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Variable(Variable, Place),
}

/// A query's text split into literal text and variables, each with its [`Place`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryTemplate {
    pieces: Vec<Piece>,
}

/// What is wrong with a template's query, or with the arguments a set gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueryError {
    /// `{{...}}` names no variable (the text between the braces, trimmed).
    UnknownVariable(String),
    /// `{{` with no `}}` after it.
    Unclosed,
    /// A variable stands right after a backslash in a string: the backslash would escape its value.
    AfterBackslash(String),
    /// The query uses `{{args.NAME}}` but the template declares no argument NAME.
    UndeclaredInQuery(String),
    /// The template declares an argument whose name is not a valid one.
    InvalidArgName(String),
    /// The template declares an argument twice.
    DuplicateArg(String),
    /// `{{args.NAME}}` stands outside a double-quoted string, and NAME's type allows no such use.
    Unquoted {
        arg: String,
        value_type: AnalysisArgType,
    },
    /// The set passes an argument the template does not declare.
    NotDeclared(String),
    /// The template declares an argument without default and the set does not pass it.
    Missing(String),
    /// A `string` argument's value (passed, or the default) contains a character that could leave a
    /// string (a `regex` one, a control character).
    ForbiddenCharacter { arg: String, character: char },
    /// A `duration` or `number` argument's value is not one.
    NotOfType {
        arg: String,
        value_type: AnalysisArgType,
        value: String,
    },
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownVariable(name) => write!(
                f,
                "the query uses {{{{{name}}}}}, which is not a variable (namespace, workload.name, workload.kind, revision, wave, args.NAME)"
            ),
            Self::Unclosed => f.write_str("the query opens a variable with {{ and does not close it"),
            Self::AfterBackslash(variable) => write!(
                f,
                "the query puts {variable} right after a backslash, which would escape its value"
            ),
            Self::UndeclaredInQuery(arg) => {
                write!(
                    f,
                    "the query uses {{{{args.{arg}}}}} but the template declares no argument {arg:?}"
                )
            }
            Self::InvalidArgName(arg) => write!(
                f,
                "argument name {arg:?} is not a lowercase letter followed by letters, digits and _"
            ),
            Self::DuplicateArg(arg) => write!(f, "argument {arg:?} is declared twice"),
            Self::Unquoted { arg, value_type } => write!(
                f,
                "argument {arg:?} ({}) is used outside a double-quoted string: put {{{{args.{arg}}}}} inside \"...\", or declare it with type: duration or type: number",
                value_type.as_str()
            ),
            Self::NotDeclared(arg) => write!(f, "the template declares no argument {arg:?}"),
            Self::Missing(arg) => write!(f, "argument {arg:?} has no default and is not passed"),
            Self::ForbiddenCharacter { arg, character } => write!(
                f,
                "the value of argument {arg:?} contains {character:?}, which a value may not contain"
            ),
            Self::NotOfType {
                arg,
                value_type,
                value,
            } => {
                let example = match value_type {
                    AnalysisArgType::Duration => "a duration such as 30s, 5m or 1h30m",
                    AnalysisArgType::Number => "a decimal number such as 0.05 or -3",
                    AnalysisArgType::String | AnalysisArgType::Regex => "text",
                };
                write!(f, "the value {value:?} of argument {arg:?} is not {example}")
            }
        }
    }
}

impl std::error::Error for QueryError {}

/// Reads PromQL far enough to tell where a variable stands: strings (with their escapes), comments,
/// and the matcher operator before a string.
#[derive(Clone, Copy, Debug)]
struct Lexer {
    state: State,
    /// The last two characters of code that are not white space.
    tail: [char; 2],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Code,
    Comment,
    /// In a string ended by `quote`; `escaped`: the last character was an escaping backslash.
    String {
        quote: char,
        regex: bool,
        escaped: bool,
    },
}

impl Lexer {
    fn new() -> Self {
        Self {
            state: State::Code,
            tail: [' ', ' '],
        }
    }

    fn text(&mut self, text: &str) {
        for c in text.chars() {
            self.state = match self.state {
                State::Code => match c {
                    '"' | '\'' | '`' => State::String {
                        quote: c,
                        regex: c == '"' && matches!(self.tail, ['=' | '!', '~']),
                        escaped: false,
                    },
                    '#' => State::Comment,
                    c if c.is_whitespace() => State::Code,
                    c => {
                        self.tail = [self.tail[1], c];
                        State::Code
                    }
                },
                State::Comment if c == '\n' => State::Code,
                State::Comment => State::Comment,
                State::String {
                    quote,
                    regex,
                    escaped,
                } => {
                    if c == quote && !escaped {
                        self.tail = [' ', c];
                        State::Code
                    } else {
                        // Raw strings (backquotes) have no escapes.
                        let escapes = quote != '`' && c == '\\' && !escaped;
                        State::String {
                            quote,
                            regex,
                            escaped: escapes,
                        }
                    }
                }
            };
        }
    }

    /// Where a variable that comes now stands; it then counts as one token of code (or of the string).
    fn variable(&mut self, variable: &Variable) -> Result<Place, QueryError> {
        let place = match self.state {
            State::String { escaped: true, .. } => {
                return Err(QueryError::AfterBackslash(variable.to_string()));
            }
            State::String {
                quote: '"', regex, ..
            } => {
                if regex {
                    Place::Regex
                } else {
                    Place::Quoted
                }
            }
            State::String { .. } | State::Comment => Place::Bare,
            State::Code => {
                self.tail = [' ', 'x'];
                Place::Bare
            }
        };
        Ok(place)
    }
}

impl QueryTemplate {
    /// Splits `text` at its `{{...}}` variables (spaces inside the braces are allowed), each with the
    /// place it stands in. Anything else, single braces of label matchers included, is literal PromQL.
    pub fn parse(text: &str) -> Result<Self, QueryError> {
        let mut pieces = Vec::new();
        let mut lexer = Lexer::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                lexer.text(&rest[..open]);
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or(QueryError::Unclosed)?;
            let name = after[..close].trim_matches([' ', '\t']);
            let variable =
                Variable::parse(name).ok_or_else(|| QueryError::UnknownVariable(name.to_string()))?;
            let place = lexer.variable(&variable)?;
            pieces.push(Piece::Variable(variable, place));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        Ok(Self { pieces })
    }

    /// The variables it uses, each once.
    pub fn variables(&self) -> BTreeSet<&Variable> {
        self.uses().map(|(v, _)| v).collect()
    }

    /// Each use of a variable, in order, with where it stands.
    pub fn uses(&self) -> impl Iterator<Item = (&Variable, Place)> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Variable(v, place) => Some((v, *place)),
            Piece::Text(_) => None,
        })
    }

    /// It names a workload: it runs once per workload of the wave rather than once per wave.
    pub fn names_workload(&self) -> bool {
        self.variables().iter().any(|v| v.names_workload())
    }

    /// The query with every variable filled in from `values`, each written for its place. Single pass:
    /// what a value contains is never read as a variable.
    pub fn render(&self, values: &Values<'_>) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Variable(variable, place) => {
                    let (value, value_type) = values.value(variable);
                    out.push_str(&written(&value, value_type, *place));
                }
            }
        }
        out
    }
}

/// `value` as it stands at `place`: escaped for a double-quoted string, and regex-escaped first in a
/// matcher's regular expression unless it is a `regex`. Bare, it stands as it is: only values checked
/// to be harmless there reach it (see [`check_template`]).
pub fn written(value: &str, value_type: AnalysisArgType, place: Place) -> String {
    match place {
        Place::Bare => value.to_string(),
        Place::Quoted => escape_string(value),
        Place::Regex if value_type == AnalysisArgType::Regex => escape_string(value),
        Place::Regex => escape_string(&escape_regex(value)),
    }
}

/// `value` escaped for the inside of a double-quoted PromQL string (Go's escapes): it reads back as
/// exactly `value` and cannot end the string.
pub fn escape_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Characters with a meaning in RE2, Prometheus' regular expressions.
const REGEX_META: &str = r"\.+*?()|[]{}^$";

/// `value` as a regular expression that matches exactly `value`.
pub fn escape_regex(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if REGEX_META.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One argument's value, bound, with its declared type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    pub value: String,
    pub value_type: AnalysisArgType,
}

/// What the variables of one run stand for.
#[derive(Clone, Copy, Debug)]
pub struct Values<'a> {
    pub namespace: &'a str,
    pub revision: &'a str,
    pub wave: i32,
    /// `(kind, name)`; empty text for a query that names no workload.
    pub workload: Option<(&'a str, &'a str)>,
    pub args: &'a BTreeMap<String, Bound>,
}

impl Values<'_> {
    /// The value of `variable` and the type it is written as: cmset's own variables are text.
    fn value(&self, variable: &Variable) -> (String, AnalysisArgType) {
        let text = |s: &str| (s.to_string(), AnalysisArgType::String);
        match variable {
            Variable::Namespace => text(self.namespace),
            Variable::WorkloadName => text(self.workload.map(|(_, name)| name).unwrap_or_default()),
            Variable::WorkloadKind => text(self.workload.map(|(kind, _)| kind).unwrap_or_default()),
            Variable::Revision => text(self.revision),
            Variable::Wave => (self.wave.to_string(), AnalysisArgType::Number),
            // Bound arguments cover every argument the query uses (see `bind_args`).
            Variable::Arg(name) => self
                .args
                .get(name)
                .map(|b| (b.value.clone(), b.value_type))
                .unwrap_or_else(|| text("")),
        }
    }
}

/// What a template must be, whatever a set passes: its declared arguments well named and each once,
/// every argument its query uses declared, each used only where its type allows (outside a
/// double-quoted string only a `duration` or a `number`), and each default a value of its type. The
/// error names the argument. Run when the template is created or changed (the admission webhook) and
/// whenever a set uses it.
pub fn check_template(query: &QueryTemplate, declared: &[AnalysisArg]) -> Result<(), QueryError> {
    let mut types = BTreeMap::new();
    for arg in declared {
        if !is_arg_name(&arg.name) {
            return Err(QueryError::InvalidArgName(arg.name.clone()));
        }
        if types.insert(arg.name.as_str(), arg.value_type).is_some() {
            return Err(QueryError::DuplicateArg(arg.name.clone()));
        }
    }
    for (variable, place) in query.uses() {
        let Variable::Arg(name) = variable else {
            continue;
        };
        let value_type = *types
            .get(name.as_str())
            .ok_or_else(|| QueryError::UndeclaredInQuery(name.clone()))?;
        if place == Place::Bare && !value_type.is_bare_safe() {
            return Err(QueryError::Unquoted {
                arg: name.clone(),
                value_type,
            });
        }
    }
    for arg in declared {
        if let Some(default) = &arg.default {
            check_value(arg, default)?;
        }
    }
    Ok(())
}

/// Checks `value` against `arg`'s type.
fn check_value(arg: &AnalysisArg, value: &str) -> Result<(), QueryError> {
    let not_of_type = || QueryError::NotOfType {
        arg: arg.name.clone(),
        value_type: arg.value_type,
        value: value.to_string(),
    };
    match arg.value_type {
        AnalysisArgType::String => match forbidden_character(value) {
            Some(character) => Err(QueryError::ForbiddenCharacter {
                arg: arg.name.clone(),
                character,
            }),
            None => Ok(()),
        },
        AnalysisArgType::Regex => match value.chars().find(|c| c.is_control()) {
            Some(character) => Err(QueryError::ForbiddenCharacter {
                arg: arg.name.clone(),
                character,
            }),
            None => Ok(()),
        },
        AnalysisArgType::Duration if is_duration(value) => Ok(()),
        AnalysisArgType::Number if is_number(value) => Ok(()),
        AnalysisArgType::Duration | AnalysisArgType::Number => Err(not_of_type()),
    }
}

/// The value of every argument `declared`: the one `passed`, else the default, checked against its
/// type. The template is checked first ([`check_template`]); an argument passed but not declared, one
/// declared without default and not passed, and a value not of its type are errors naming the argument.
pub fn bind_args(
    query: &QueryTemplate,
    declared: &[AnalysisArg],
    passed: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Bound>, QueryError> {
    check_template(query, declared)?;
    if let Some(unknown) = passed.keys().find(|k| !declared.iter().any(|a| &a.name == *k)) {
        return Err(QueryError::NotDeclared(unknown.clone()));
    }
    let mut bound = BTreeMap::new();
    for arg in declared {
        let value = passed
            .get(&arg.name)
            .or(arg.default.as_ref())
            .ok_or_else(|| QueryError::Missing(arg.name.clone()))?;
        check_value(arg, value)?;
        bound.insert(
            arg.name.clone(),
            Bound {
                value: value.clone(),
                value_type: arg.value_type,
            },
        );
    }
    Ok(bound)
}

/// The first character of `value` a `string` argument may not contain, if any.
pub fn forbidden_character(value: &str) -> Option<char> {
    value
        .chars()
        .find(|c| c.is_control() || FORBIDDEN_ARG_CHARACTERS.contains(c))
}

/// Whether `text` is a Prometheus duration: `0`, or one or more of a number and a unit, units from
/// largest to smallest, each at most once (`y`, `w`, `d`, `h`, `m`, `s`, `ms`), e.g. `1h30m`.
pub fn is_duration(text: &str) -> bool {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    if text == "0" {
        return true;
    }
    let mut rest = text;
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 18 {
            return false;
        }
        rest = &rest[digits..];
        // `ms` before `m`: the longer unit wins where both fit.
        let Some((index, unit)) = UNITS
            .iter()
            .enumerate()
            .skip(next_unit)
            .filter(|(_, u)| rest.starts_with(**u))
            .max_by_key(|(_, u)| u.len())
        else {
            return false;
        };
        rest = &rest[unit.len()..];
        next_unit = index + 1;
    }
    !text.is_empty()
}

/// Whether `text` is a decimal number: an optional sign, digits with an optional fraction (or a
/// fraction alone), an optional exponent.
pub fn is_number(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => {
            (!whole.is_empty() || !fraction.is_empty()) && digits(whole) && digits(fraction)
        }
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(name: &str, default: Option<&str>) -> AnalysisArg {
        AnalysisArg {
            name: name.into(),
            default: default.map(str::to_string),
            value_type: AnalysisArgType::String,
        }
    }

    fn typed(name: &str, default: Option<&str>, value_type: AnalysisArgType) -> AnalysisArg {
        AnalysisArg {
            value_type,
            ..arg(name, default)
        }
    }

    fn values(args: &BTreeMap<String, Bound>) -> Values<'_> {
        Values {
            namespace: "shop",
            revision: "r",
            wave: 0,
            workload: None,
            args,
        }
    }

    fn values_of(bound: &BTreeMap<String, Bound>) -> BTreeMap<String, String> {
        bound.iter().map(|(k, b)| (k.clone(), b.value.clone())).collect()
    }

    fn passed(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const QUERY: &str = r#"sum(rate(errors{namespace="{{namespace}}",service="{{ args.service }}",pod=~"{{workload.name}}-.*"}[{{args.window}}])) / {{wave}} # {{revision}} {{workload.kind}}"#;

    #[test]
    fn renders_each_variable_from_its_own_source() {
        let query = QueryTemplate::parse(QUERY).unwrap();
        assert!(query.names_workload());
        let declared = [
            arg("service", None),
            typed("window", Some("5m"), AnalysisArgType::Duration),
        ];
        let args = bind_args(&query, &declared, &passed(&[("service", "checkout")])).unwrap();
        let values = Values {
            namespace: "shop",
            revision: "app-config-5g7bm8k4f2",
            wave: 1,
            workload: Some(("Deployment", "web")),
            args: &args,
        };
        assert_eq!(
            query.render(&values),
            r#"sum(rate(errors{namespace="shop",service="checkout",pod=~"web-.*"}[5m])) / 1 # app-config-5g7bm8k4f2 Deployment"#
        );
    }

    #[test]
    fn a_query_without_workload_variables_runs_per_wave() {
        let query = QueryTemplate::parse(r#"up{namespace="{{namespace}}"} == {{wave}}"#).unwrap();
        assert!(!query.names_workload());
        // Single braces and lone closing braces are PromQL.
        let query = QueryTemplate::parse("x{a=\"b\"}}").unwrap();
        assert_eq!(query.variables().len(), 0);
    }

    #[test]
    fn bad_variables_are_errors_naming_them() {
        let table = [
            ("{{ pod }}", QueryError::UnknownVariable("pod".into())),
            ("{{args.}}", QueryError::UnknownVariable("args.".into())),
            (
                "{{args.Service}}",
                QueryError::UnknownVariable("args.Service".into()),
            ),
            ("{{workload}}", QueryError::UnknownVariable("workload".into())),
            ("{{}}", QueryError::UnknownVariable(String::new())),
            ("rate(x[5m]) {{namespace", QueryError::Unclosed),
        ];
        for (text, expected) in table {
            assert_eq!(QueryTemplate::parse(text), Err(expected), "{text}");
        }
        assert_eq!(
            QueryError::UnknownVariable("pod".into()).to_string(),
            "the query uses {{pod}}, which is not a variable (namespace, workload.name, workload.kind, revision, wave, args.NAME)"
        );
    }

    #[test]
    fn binding_errors_name_the_argument() {
        let query = QueryTemplate::parse(r#"x{a="{{args.service}}"}"#).unwrap();
        let declared = [arg("service", None), arg("window", Some("5m"))];
        let bind = |p: &[(&str, &str)]| bind_args(&query, &declared, &passed(p));
        assert_eq!(
            bind(&[("service", "a"), ("namespace", "kube-system")]),
            Err(QueryError::NotDeclared("namespace".into()))
        );
        assert_eq!(bind(&[]), Err(QueryError::Missing("service".into())));
        assert_eq!(
            bind(&[("service", "a\"} or vector(1) #")]),
            Err(QueryError::ForbiddenCharacter {
                arg: "service".into(),
                character: '"'
            })
        );
        assert_eq!(
            bind(&[("service", "a"), ("window", "5m\n")]),
            Err(QueryError::ForbiddenCharacter {
                arg: "window".into(),
                character: '\n'
            })
        );
        assert_eq!(
            QueryError::ForbiddenCharacter {
                arg: "window".into(),
                character: '\n'
            }
            .to_string(),
            r#"the value of argument "window" contains '\n', which a value may not contain"#
        );
        assert_eq!(
            values_of(&bind(&[("service", "a")]).unwrap()),
            passed(&[("service", "a"), ("window", "5m")])
        );

        let undeclared = QueryTemplate::parse(r#"x{a="{{args.other}}"}"#).unwrap();
        assert_eq!(
            bind_args(&undeclared, &declared, &passed(&[("service", "a")])),
            Err(QueryError::UndeclaredInQuery("other".into()))
        );
        assert_eq!(
            bind_args(
                &query,
                &[arg("service", None), arg("service", None)],
                &BTreeMap::new()
            ),
            Err(QueryError::DuplicateArg("service".into()))
        );
        assert_eq!(
            bind_args(&query, &[arg("Service", None)], &BTreeMap::new()),
            Err(QueryError::InvalidArgName("Service".into()))
        );
        // A default is held to the same rule as a passed value.
        assert_eq!(
            bind_args(&query, &[arg("service", Some("a'b"))], &BTreeMap::new()),
            Err(QueryError::ForbiddenCharacter {
                arg: "service".into(),
                character: '\''
            })
        );
    }

    #[test]
    fn an_argument_called_namespace_fills_only_args_namespace() {
        let query = QueryTemplate::parse(r#""{{namespace}}/{{args.namespace}}""#).unwrap();
        let args = bind_args(
            &query,
            &[arg("namespace", None)],
            &passed(&[("namespace", "kube-system")]),
        )
        .unwrap();
        assert_eq!(query.render(&values(&args)), r#""shop/kube-system""#);
    }

    #[test]
    fn each_variable_knows_where_it_stands() {
        let query = QueryTemplate::parse(concat!(
            r#"a{x="{{args.q}}", y=~"p-{{args.r}}", z!~ "{{args.s}}"} "#,
            r#"[{{args.t}}] 'u{{args.u}}' `v{{args.v}}` "\"{{args.w}}" # {{args.c}}"#,
            "\n{{args.n}}"
        ))
        .unwrap();
        let places: Vec<(String, Place)> = query.uses().map(|(v, p)| (v.to_string(), p)).collect();
        let expected = [
            ("q", Place::Quoted),
            ("r", Place::Regex),
            ("s", Place::Regex),
            ("t", Place::Bare),
            ("u", Place::Bare),
            ("v", Place::Bare),
            ("w", Place::Quoted),
            ("c", Place::Bare),
            ("n", Place::Bare),
        ]
        .map(|(name, place)| (format!("{{{{args.{name}}}}}"), place));
        assert_eq!(places, expected);
        // A quote in a raw string, and an escaped one, do not end or start strings.
        let query = QueryTemplate::parse(r#"a{b=`"`} == "\"{{args.x}}\"" "#).unwrap();
        assert_eq!(query.uses().next().unwrap().1, Place::Quoted);
        let query = QueryTemplate::parse(r#"a{b="=~"} == "{{args.x}}""#).unwrap();
        assert_eq!(query.uses().next().unwrap().1, Place::Quoted);
    }

    #[test]
    fn a_variable_right_after_a_backslash_is_refused() {
        assert_eq!(
            QueryTemplate::parse(r#"a{b="\{{args.x}}"}"#),
            Err(QueryError::AfterBackslash("{{args.x}}".into()))
        );
        // An escaped backslash escapes nothing further.
        assert!(QueryTemplate::parse(r#"a{b="\\{{args.x}}"}"#).is_ok());
    }

    #[test]
    fn an_argument_outside_a_double_quoted_string_is_refused_unless_typed() {
        let table = [
            ("a > {{args.x}}", AnalysisArgType::String, false),
            ("a > {{args.x}}", AnalysisArgType::Regex, false),
            ("a > {{args.x}}", AnalysisArgType::Number, true),
            ("rate(a[{{args.x}}])", AnalysisArgType::Duration, true),
            ("a{b='{{args.x}}'}", AnalysisArgType::String, false),
            ("a{b=`{{args.x}}`}", AnalysisArgType::String, false),
            ("a # {{args.x}}", AnalysisArgType::String, false),
            (r#"a{b="{{args.x}}"}"#, AnalysisArgType::String, true),
            (r#"a{b=~"{{args.x}}"}"#, AnalysisArgType::Regex, true),
            (r#"a{b="{{args.x}}"}"#, AnalysisArgType::Duration, true),
        ];
        for (text, value_type, allowed) in table {
            let query = QueryTemplate::parse(text).unwrap();
            let result = check_template(&query, &[typed("x", None, value_type)]);
            if allowed {
                assert_eq!(result, Ok(()), "{text} {value_type:?}");
            } else {
                assert_eq!(
                    result,
                    Err(QueryError::Unquoted {
                        arg: "x".into(),
                        value_type
                    }),
                    "{text} {value_type:?}"
                );
            }
        }
        let message = QueryError::Unquoted {
            arg: "threshold".into(),
            value_type: AnalysisArgType::String,
        }
        .to_string();
        assert_eq!(
            message,
            r#"argument "threshold" (string) is used outside a double-quoted string: put {{args.threshold}} inside "...", or declare it with type: duration or type: number"#
        );
    }

    #[test]
    fn typed_values_are_checked_when_bound() {
        let query = QueryTemplate::parse("rate(a[{{args.window}}]) > {{args.limit}}").unwrap();
        let declared = [
            typed("window", Some("5m"), AnalysisArgType::Duration),
            typed("limit", None, AnalysisArgType::Number),
        ];
        let bind = |p: &[(&str, &str)]| bind_args(&query, &declared, &passed(p)).map(|b| values_of(&b));
        for (window, limit) in [("1h30m", "0.05"), ("0", "-3"), ("90s", "1e-3"), ("100ms", ".5")] {
            assert!(
                bind(&[("window", window), ("limit", limit)]).is_ok(),
                "{window} {limit}"
            );
        }
        for window in ["5", "m", "5m1h", "5 m", "1h]) or vector(1", "", "5mm"] {
            assert_eq!(
                bind(&[("window", window), ("limit", "1")]),
                Err(QueryError::NotOfType {
                    arg: "window".into(),
                    value_type: AnalysisArgType::Duration,
                    value: window.into()
                }),
                "{window:?}"
            );
        }
        for limit in ["", "1 or vector(1)", "0x10", "1.2.3", "e5", "--1", "NaN"] {
            assert_eq!(
                bind(&[("limit", limit)]),
                Err(QueryError::NotOfType {
                    arg: "limit".into(),
                    value_type: AnalysisArgType::Number,
                    value: limit.into()
                }),
                "{limit:?}"
            );
        }
        // A default is checked with the template.
        let bad_default = [typed("window", Some("soon"), AnalysisArgType::Duration)];
        let query = QueryTemplate::parse("rate(a[{{args.window}}])").unwrap();
        let error = check_template(&query, &bad_default).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"the value "soon" of argument "window" is not a duration such as 30s, 5m or 1h30m"#
        );
    }

    #[test]
    fn values_are_escaped_for_their_string_and_regex_escaped_in_a_matcher() {
        let query = QueryTemplate::parse(
            r#"a{b="{{args.s}}", c=~"{{args.s}}-.*", d!~"{{args.re}}", e=~"{{namespace}}"}"#,
        )
        .unwrap();
        let declared = [
            typed("s", None, AnalysisArgType::Regex),
            typed("re", None, AnalysisArgType::Regex),
        ];
        // A regex argument in a matcher stays a regex; the same value elsewhere is only string-escaped.
        let args = bind_args(
            &query,
            &declared,
            &passed(&[("s", r#"a.b"c\d"#), ("re", "(x|y)+")]),
        )
        .unwrap();
        let rendered = query.render(&Values {
            namespace: "my.team",
            ..values(&args)
        });
        assert_eq!(
            rendered,
            r#"a{b="a.b\"c\\d", c=~"a.b\"c\\d-.*", d!~"(x|y)+", e=~"my\\.team"}"#
        );
        assert_eq!(
            escape_regex("a.b*c(d)[e]{f}|g^h$i+j?k\\"),
            r"a\.b\*c\(d\)\[e\]\{f\}\|g\^h\$i\+j\?k\\"
        );
        assert_eq!(escape_string("a\"b\\c\nd\u{1}"), "a\\\"b\\\\c\\nd\\u0001");
        assert_eq!(written("a.b", AnalysisArgType::String, Place::Regex), r"a\\.b");
    }
}
