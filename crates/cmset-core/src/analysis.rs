//! Metric analysis of a rollout's waves (`spec.rollout.analysis`): Prometheus queries, from
//! AnalysisTemplates, run during each wave's stabilization window; a query that fails its condition
//! more often than the template allows fails the wave, as an unhealthy workload does.
//!
//! - [`Analysis::resolve`] checks a set's reference against its template and binds the arguments
//!   ([`query`]): only `{{args.NAME}}` takes them, `{{namespace}}` is always the set's own.
//! - [`plan_runs`] lists the wave's runs (one per analysis, or one per workload when the query names
//!   one), each rendered from the template and the values cmset decided (never from the status, which
//!   the set's namespace can write), carrying on only what the status recorded of the same run's
//!   measurements; [`due`] says which to measure now. Every value is checked before it is rendered,
//!   and written for the place it stands in the PromQL ([`query::Place`]).
//! - The I/O layer runs a due run's query and turns Prometheus' answer into a [`QueryOutcome`]
//!   ([`parse_query_response`]); [`record`] notes the measurement and [`settle`] gives the run its
//!   verdict at the wave's [`WaveStage`]; [`wave_verdict`] combines a wave's runs.
//!
//! Inconclusive (no data, NaN, Prometheus unreachable) never passes: it holds the wave and is reported,
//! and at the progress deadline it fails.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use cmset_api::analysis::{MIN_ANALYSIS_COUNT, MIN_ANALYSIS_INTERVAL_SECONDS};
use cmset_api::{AnalysisRef, AnalysisTemplateSpec};

use crate::revisions::naming::is_dns_subdomain;
use crate::workloads::kinds::WorkloadKind;

mod condition;
pub mod query;
mod response;
mod run;

pub use condition::{Comparison, Condition, ConditionError};
pub use query::{Bound, Place, QueryError, QueryTemplate};
pub use response::{QueryOutcome, format_value, parse_query_response, parse_value};
pub use run::{
    LISTED_RUNS_PER_TEMPLATE, Measurement, RunPlaces, RunVerdict, WaveStage, clauses, compact, due, due_in,
    kept, known_runs, new_run, plan_runs, record, restart_streak, run_name, settle, verdict, wave_verdict,
};

/// The rollout a run belongs to: what `{{namespace}}`, `{{revision}}` and `{{wave}}` stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaveSubject<'a> {
    /// The set's namespace.
    pub namespace: &'a str,
    /// The name of the revision being rolled out.
    pub revision: &'a str,
    pub wave: i32,
}

/// A workload of the wave, for a query that names one (`{{workload.kind}}`, `{{workload.name}}`): one
/// of the set's members as cmset's index knows it, so its kind is one cmset serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Workload<'a> {
    pub kind: WorkloadKind,
    pub name: &'a str,
}

/// A value of a run's subject that is not what it must be, so the query is not rendered: cmset's own
/// values always are (the API server checked the names), this is the last line of defence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsafeValue {
    /// What it is: `namespace`, `revision`, `workload name`.
    pub what: &'static str,
    pub value: String,
}

impl fmt::Display for UnsafeValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {} {:?} is not a DNS-1123 name; the query is not sent",
            self.what, self.value
        )
    }
}

impl std::error::Error for UnsafeValue {}

/// Whether `text` is a DNS-1123 label, as a namespace's name is.
fn is_dns_label(text: &str) -> bool {
    text.len() <= 63 && !text.contains('.') && is_dns_subdomain(text)
}

impl WaveSubject<'_> {
    fn check(&self) -> Result<(), UnsafeValue> {
        let unsafe_value = |what, value: &str| UnsafeValue {
            what,
            value: value.to_string(),
        };
        if !is_dns_label(self.namespace) {
            return Err(unsafe_value("namespace", self.namespace));
        }
        if !is_dns_subdomain(self.revision) {
            return Err(unsafe_value("revision", self.revision));
        }
        Ok(())
    }
}

impl Workload<'_> {
    fn check(&self) -> Result<(), UnsafeValue> {
        if is_dns_subdomain(self.name) {
            Ok(())
        } else {
            Err(UnsafeValue {
                what: "workload name",
                value: self.name.to_string(),
            })
        }
    }
}

/// One entry of `spec.rollout.analysis` with its template: the query, the bound arguments, the
/// condition and the pace.
#[derive(Clone, Debug, PartialEq)]
pub struct Analysis {
    /// The AnalysisTemplate's name.
    pub template: String,
    query: QueryTemplate,
    args: BTreeMap<String, Bound>,
    pub condition: Condition,
    pub interval_seconds: i64,
    pub failure_limit: i32,
    /// Seconds after the wave became healthy before a run's first measurement.
    pub initial_delay_seconds: i64,
    /// Measurements after the wave became healthy that a run needs to pass (at least 2).
    pub count: i32,
    /// Inconclusive measurements tolerated; `None`: any number (the deadline decides).
    pub inconclusive_limit: Option<i32>,
}

/// Why a set's analysis cannot run; the message names the template and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AnalysisError {
    NotFound { template: String },
    Query { template: String, error: QueryError },
    Condition { template: String, error: ConditionError },
}

impl fmt::Display for AnalysisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound { template } => write!(f, "AnalysisTemplate {template:?} not found"),
            Self::Query { template, error } => write!(f, "AnalysisTemplate {template:?}: {error}"),
            Self::Condition { template, error } => write!(f, "AnalysisTemplate {template:?}: {error}"),
        }
    }
}

impl std::error::Error for AnalysisError {}

impl Analysis {
    /// `reference`, a set's entry, against `template`, the AnalysisTemplate it names: the query parsed,
    /// the arguments bound (see [`query::bind_args`]), the condition parsed. The interval and the
    /// failure limit are held to the schema's bounds even for an object stored without them.
    pub fn resolve(reference: &AnalysisRef, template: &AnalysisTemplateSpec) -> Result<Self, AnalysisError> {
        let name = &reference.template;
        let query_error = |error| AnalysisError::Query {
            template: name.clone(),
            error,
        };
        let query = QueryTemplate::parse(&template.query).map_err(query_error)?;
        let args = query::bind_args(&query, &template.args, &reference.args).map_err(query_error)?;
        let condition =
            Condition::parse(&template.success_condition).map_err(|error| AnalysisError::Condition {
                template: name.clone(),
                error,
            })?;
        Ok(Self {
            template: name.clone(),
            query,
            args,
            condition,
            interval_seconds: i64::from(template.interval_seconds.max(MIN_ANALYSIS_INTERVAL_SECONDS)),
            failure_limit: template.failure_limit.max(0),
            initial_delay_seconds: i64::from(template.initial_delay_seconds.max(0)),
            count: template
                .count
                .unwrap_or(MIN_ANALYSIS_COUNT)
                .max(MIN_ANALYSIS_COUNT),
            inconclusive_limit: template.inconclusive_limit.map(|l| l.max(0)),
        })
    }

    /// Its query names a workload: it runs once per workload of the wave, not once per wave.
    pub fn names_workload(&self) -> bool {
        self.query.names_workload()
    }

    /// The query for `subject` (and `workload`, for a query that names one), as sent to Prometheus;
    /// each value checked first (DNS-1123 names; the kind is one cmset serves by its type).
    pub fn render(
        &self,
        subject: &WaveSubject<'_>,
        workload: Option<&Workload<'_>>,
    ) -> Result<String, UnsafeValue> {
        subject.check()?;
        if let Some(workload) = workload {
            workload.check()?;
        }
        Ok(self.query.render(&query::Values {
            namespace: subject.namespace,
            revision: subject.revision,
            wave: subject.wave,
            workload: workload.map(|w| (w.kind.as_str(), w.name)),
            args: &self.args,
        }))
    }

    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval_seconds.unsigned_abs())
    }
}

/// Checks the template `name` as it is created or changed, whatever a set will pass: its query parses,
/// every argument is declared once and used only where its type allows, each default is of its type,
/// and its condition parses. The error names the template and the argument.
pub fn check_template(name: &str, template: &AnalysisTemplateSpec) -> Result<(), AnalysisError> {
    let query_error = |error| AnalysisError::Query {
        template: name.to_string(),
        error,
    };
    let query = QueryTemplate::parse(&template.query).map_err(query_error)?;
    query::check_template(&query, &template.args).map_err(query_error)?;
    Condition::parse(&template.success_condition).map_err(|error| AnalysisError::Condition {
        template: name.to_string(),
        error,
    })?;
    Ok(())
}

/// Every entry of `references` resolved against the template `find` returns for its name; the first
/// error stops it (a set whose analysis cannot run must not roll out as if it had none).
pub fn resolve_all<'t>(
    references: &[AnalysisRef],
    find: impl Fn(&str) -> Option<&'t AnalysisTemplateSpec>,
) -> Result<Vec<Analysis>, AnalysisError> {
    references
        .iter()
        .map(|reference| {
            let template = find(&reference.template).ok_or_else(|| AnalysisError::NotFound {
                template: reference.template.clone(),
            })?;
            Analysis::resolve(reference, template)
        })
        .collect()
}

#[cfg(test)]
mod tests;
