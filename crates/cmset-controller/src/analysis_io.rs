//! The I/O of a set's metric analysis (`spec.rollout.analysis`): its AnalysisTemplates read before the
//! set is planned, and the runs a plan lists as due measured against Prometheus before it is planned
//! again ([`cmset_core::plan::SetPlan::analysis_due`]). Nothing here decides, and nothing here makes a
//! query: every query sent is one the planner rendered from the templates, the current revision, the
//! wave and its members as the index knows them, never one read from the set's status, which the
//! set's namespace can write.
//!
//! A template is read with a GET when a set that names it is reconciled: only sets that ask for
//! analysis pay for it, and a template edited by its admin is seen at the next reconcile.

use std::collections::BTreeMap;

use cmset_api::{AnalysisRef, AnalysisRunStatus, AnalysisTemplate, AnalysisTemplateSpec};
use cmset_core::analysis::{self, Analysis, Measurement};
use cmset_core::plan::SetPlan;
use cmset_core::set::SetRef;
use kube::Api;
use tracing::debug;

use crate::context::Context;
use crate::metrics::SetLabels;

/// A set's analysis, ready for its plan.
pub struct Prepared {
    /// Its analyses resolved against their templates, or why they cannot run.
    pub analyses: Result<Vec<Analysis>, String>,
    /// The runs of its rollout: as the status records them (only their measurements are read), or as
    /// the last plan computed them with the measurements taken now recorded.
    pub runs: Vec<AnalysisRunStatus>,
}

/// The analysis of `set`, if its spec asks for one: its templates read.
pub async fn prepare(ctx: &Context, set: SetRef<'_>) -> Option<Prepared> {
    let references = set
        .rollout()
        .map(|r| r.analysis.as_slice())
        .filter(|a| !a.is_empty())?;
    let analyses = resolve(ctx, references).await;
    let runs = set
        .status()
        .and_then(|s| s.rollout.as_ref())
        .map(|r| r.analysis.clone())
        .unwrap_or_default();
    Some(Prepared { analyses, runs })
}

/// Measures the runs `plan` lists as due, each with the query the planner rendered, and returns the
/// analysis to plan again with: the plan's runs with these measurements recorded. `None` when nothing
/// was measured (nothing due, no Prometheus).
pub async fn measure(
    ctx: &Context,
    set: SetRef<'_>,
    prepared: &Prepared,
    plan: &SetPlan,
) -> Option<Prepared> {
    let (Ok(resolved), Some(prometheus)) = (&prepared.analyses, &ctx.prometheus) else {
        return None;
    };
    if plan.analysis_due.is_empty() {
        return None;
    }
    let labels = SetLabels {
        namespace: set.namespace().to_string(),
        kind: set.kind().as_str(),
        name: set.name().to_string(),
    };
    let mut runs: Vec<AnalysisRunStatus> = plan
        .status
        .rollout
        .as_ref()
        .map(|r| r.analysis.clone())
        .unwrap_or_default();
    for due in &plan.analysis_due {
        let Some(analysis) = resolved.iter().find(|a| a.template == due.template) else {
            continue;
        };
        let outcome = prometheus.query(&due.query).await;
        // Taken when the answer came: the plan that follows must not find the run due again, however
        // long Prometheus took.
        let now = (ctx.clock)();
        let measured = Measurement::judge(&outcome, &analysis.condition);
        let said = measured.describe(&analysis.condition);
        debug!(template = %due.template, workload = ?due.workload, %said, "analysis measured");
        let (verdict, value) = match &measured {
            Measurement::Passed { value, .. } => ("passed", Some(*value)),
            Measurement::Failed { value, .. } => ("failed", Some(*value)),
            Measurement::Inconclusive { value, .. } => ("inconclusive", *value),
        };
        let workload = due.workload.as_deref().unwrap_or_default();
        ctx.metrics
            .analysis_measured(&labels, &due.template, workload, verdict, value);
        let mut run = due.clone();
        analysis::record(&mut run, analysis, &outcome, &now);
        match runs.iter_mut().find(|r| *r == due) {
            Some(planned) => *planned = run,
            None => runs.push(run),
        }
    }
    Some(Prepared {
        analyses: prepared.analyses.clone(),
        runs,
    })
}

/// `references` resolved against the AnalysisTemplates they name, or the first reason they cannot run.
async fn resolve(ctx: &Context, references: &[AnalysisRef]) -> Result<Vec<Analysis>, String> {
    if ctx.prometheus.is_none() {
        return Err("the operator has no Prometheus to query (its --prometheus-url is not set)".to_string());
    }
    let api: Api<AnalysisTemplate> = Api::all(ctx.client.clone());
    let mut templates: BTreeMap<&str, AnalysisTemplateSpec> = BTreeMap::new();
    for name in references.iter().map(|r| r.template.as_str()) {
        if templates.contains_key(name) {
            continue;
        }
        match api.get_opt(name).await {
            Ok(Some(template)) => {
                templates.insert(name, template.spec);
            }
            Ok(None) => {}
            Err(e) => {
                let e = crate::redact::api_error(&e);
                return Err(format!("AnalysisTemplate {name:?} could not be read: {e}"));
            }
        }
    }
    analysis::resolve_all(references, |name| templates.get(name)).map_err(|e| e.to_string())
}
