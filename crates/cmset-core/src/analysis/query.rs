//! A template's query with its variables, the arguments a set binds to it, and the query rendered for
//! one wave (and one workload).
//!
//! Variables are filled in one pass over the template's text, each from its own source: `{{namespace}}`
//! from the set's namespace, `{{args.NAME}}` from the bound arguments and nothing else. So an argument
//! can neither fill another variable nor bring in a variable of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use cmset_api::AnalysisArg;

/// Characters an argument value may not contain: each could end the PromQL string the value is put in
/// (quotes, backslash escapes) or open a variable or a label matcher (braces). Control characters too.
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

/// Whether `name` matches [`cmset_api::analysis::ANALYSIS_ARG_NAME_PATTERN`].
pub fn is_arg_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Variable(Variable),
}

/// A query's text split into literal text and variables.
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
    /// The query uses `{{args.NAME}}` but the template declares no argument NAME.
    UndeclaredInQuery(String),
    /// The template declares an argument whose name is not a valid one.
    InvalidArgName(String),
    /// The template declares an argument twice.
    DuplicateArg(String),
    /// The set passes an argument the template does not declare.
    NotDeclared(String),
    /// The template declares an argument without default and the set does not pass it.
    Missing(String),
    /// An argument's value (passed, or the default) contains a character that could leave a string.
    ForbiddenCharacter { arg: String, character: char },
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownVariable(name) => write!(
                f,
                "the query uses {{{{{name}}}}}, which is not a variable (namespace, workload.name, workload.kind, revision, wave, args.NAME)"
            ),
            Self::Unclosed => f.write_str("the query opens a variable with {{ and does not close it"),
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
            Self::NotDeclared(arg) => write!(f, "the template declares no argument {arg:?}"),
            Self::Missing(arg) => write!(f, "argument {arg:?} has no default and is not passed"),
            Self::ForbiddenCharacter { arg, character } => write!(
                f,
                "the value of argument {arg:?} contains {character:?}, which a value may not contain"
            ),
        }
    }
}

impl std::error::Error for QueryError {}

impl QueryTemplate {
    /// Splits `text` at its `{{...}}` variables (spaces inside the braces are allowed). Anything else,
    /// single braces of label matchers included, is literal PromQL.
    pub fn parse(text: &str) -> Result<Self, QueryError> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or(QueryError::Unclosed)?;
            let name = after[..close].trim_matches([' ', '\t']);
            let variable =
                Variable::parse(name).ok_or_else(|| QueryError::UnknownVariable(name.to_string()))?;
            pieces.push(Piece::Variable(variable));
            rest = &after[close + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        Ok(Self { pieces })
    }

    /// The variables it uses, each once.
    pub fn variables(&self) -> BTreeSet<&Variable> {
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Variable(v) => Some(v),
                Piece::Text(_) => None,
            })
            .collect()
    }

    /// It names a workload: it runs once per workload of the wave rather than once per wave.
    pub fn names_workload(&self) -> bool {
        self.variables().iter().any(|v| v.names_workload())
    }

    /// The query with every variable filled in from `values`. Single pass: what a value contains is
    /// never read as a variable.
    pub fn render(&self, values: &Values<'_>) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Variable(variable) => out.push_str(&values.value(variable)),
            }
        }
        out
    }
}

/// What the variables of one run stand for.
#[derive(Clone, Copy, Debug)]
pub struct Values<'a> {
    pub namespace: &'a str,
    pub revision: &'a str,
    pub wave: i32,
    /// `(kind, name)`; empty text for a query that names no workload.
    pub workload: Option<(&'a str, &'a str)>,
    pub args: &'a BTreeMap<String, String>,
}

impl Values<'_> {
    fn value(&self, variable: &Variable) -> String {
        match variable {
            Variable::Namespace => self.namespace.to_string(),
            Variable::WorkloadName => self
                .workload
                .map(|(_, name)| name)
                .unwrap_or_default()
                .to_string(),
            Variable::WorkloadKind => self
                .workload
                .map(|(kind, _)| kind)
                .unwrap_or_default()
                .to_string(),
            Variable::Revision => self.revision.to_string(),
            Variable::Wave => self.wave.to_string(),
            // Bound arguments cover every argument the query uses (see `bind_args`).
            Variable::Arg(name) => self.args.get(name).cloned().unwrap_or_default(),
        }
    }
}

/// The value of every argument `declared`: the one `passed`, else the default. An argument passed but
/// not declared, one declared without default and not passed, and a value with a character that could
/// leave a PromQL string are errors naming the argument; so is a query that uses an argument not
/// declared, and a declaration with a bad or repeated name.
pub fn bind_args(
    query: &QueryTemplate,
    declared: &[AnalysisArg],
    passed: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, QueryError> {
    let mut names = BTreeSet::new();
    for arg in declared {
        if !is_arg_name(&arg.name) {
            return Err(QueryError::InvalidArgName(arg.name.clone()));
        }
        if !names.insert(arg.name.as_str()) {
            return Err(QueryError::DuplicateArg(arg.name.clone()));
        }
    }
    if let Some(unknown) = passed.keys().find(|k| !names.contains(k.as_str())) {
        return Err(QueryError::NotDeclared(unknown.clone()));
    }
    for variable in query.variables() {
        if let Variable::Arg(name) = variable
            && !names.contains(name.as_str())
        {
            return Err(QueryError::UndeclaredInQuery(name.clone()));
        }
    }
    let mut bound = BTreeMap::new();
    for arg in declared {
        let value = passed
            .get(&arg.name)
            .or(arg.default.as_ref())
            .ok_or_else(|| QueryError::Missing(arg.name.clone()))?;
        if let Some(character) = forbidden_character(value) {
            return Err(QueryError::ForbiddenCharacter {
                arg: arg.name.clone(),
                character,
            });
        }
        bound.insert(arg.name.clone(), value.clone());
    }
    Ok(bound)
}

/// The first character of `value` an argument may not contain, if any.
pub fn forbidden_character(value: &str) -> Option<char> {
    value
        .chars()
        .find(|c| c.is_control() || FORBIDDEN_ARG_CHARACTERS.contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arg(name: &str, default: Option<&str>) -> AnalysisArg {
        AnalysisArg {
            name: name.into(),
            default: default.map(str::to_string),
        }
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
        let declared = [arg("service", None), arg("window", Some("5m"))];
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
        let query = QueryTemplate::parse("{{args.service}}").unwrap();
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
            bind(&[("service", "a")]).unwrap(),
            passed(&[("service", "a"), ("window", "5m")])
        );

        let undeclared = QueryTemplate::parse("{{args.other}}").unwrap();
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
        let query = QueryTemplate::parse("{{namespace}}/{{args.namespace}}").unwrap();
        let args = bind_args(
            &query,
            &[arg("namespace", None)],
            &passed(&[("namespace", "kube-system")]),
        )
        .unwrap();
        let values = Values {
            namespace: "shop",
            revision: "r",
            wave: 0,
            workload: None,
            args: &args,
        };
        assert_eq!(query.render(&values), "shop/kube-system");
    }
}
