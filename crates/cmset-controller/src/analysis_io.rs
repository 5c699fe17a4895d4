//! The I/O of a set's metric analysis (`spec.rollout.analysis`), done before the set is planned: its
//! AnalysisTemplates read, and the runs of the wave in its stabilization window that are due measured
//! against Prometheus. The planner then judges the wave from what was measured
//! ([`cmset_core::waves::WaveAnalysis`]); nothing here decides.
//!
//! A template is read with a GET when a set that names it is reconciled: only sets that ask for
//! analysis pay for it, and a template edited by its admin is seen at the next reconcile.

use std::collections::BTreeMap;

use cmset_api::{AnalysisRef, AnalysisRunStatus, AnalysisTemplate, AnalysisTemplateSpec};
use cmset_core::analysis::{self, Analysis, Measurement};
use cmset_core::set::SetRef;
use cmset_core::waves;
use kube::Api;
use tracing::debug;

use crate::context::Context;
use crate::metrics::SetLabels;

/// A set's analysis, ready for its plan.
pub struct Prepared {
    /// Its analyses resolved against their templates, or why they cannot run.
    pub analyses: Result<Vec<Analysis>, String>,
    /// The runs of its rollout, with the measurements taken now recorded.
    pub runs: Vec<AnalysisRunStatus>,
}

/// The analysis of `set`, if its spec asks for one: templates read, due runs measured.
pub async fn prepare(ctx: &Context, set: SetRef<'_>) -> Option<Prepared> {
    let references = set
        .rollout()
        .map(|r| r.analysis.as_slice())
        .filter(|a| !a.is_empty())?;
    let analyses = resolve(ctx, references).await;
    let status = set.status().cloned().unwrap_or_default();
    let Ok(resolved) = &analyses else {
        let runs = status.rollout.map(|r| r.analysis).unwrap_or_default();
        return Some(Prepared { analyses, runs });
    };
    let (mut runs, wave) = waves::runs_to_measure(&status, resolved, set.namespace());
    // Paused, nothing measures: the pause may have begun since the status was written.
    let wave = wave.filter(|_| !set.paused());
    if let (Some(wave), Some(prometheus)) = (wave, &ctx.prometheus) {
        let now = (ctx.clock)();
        let labels = SetLabels {
            namespace: set.namespace().to_string(),
            kind: set.kind().as_str(),
            name: set.name().to_string(),
        };
        for run in runs.iter_mut().filter(|r| r.wave == wave) {
            let Some(analysis) = resolved.iter().find(|a| a.template == run.template) else {
                continue;
            };
            if !analysis::due(run, analysis, &now) {
                continue;
            }
            let outcome = prometheus.query(&run.query).await;
            let measured = Measurement::judge(&outcome, &analysis.condition);
            let said = measured.describe(&analysis.condition);
            debug!(template = %run.template, workload = ?run.workload, %said, "analysis measured");
            let (verdict, value) = match &measured {
                Measurement::Passed { value, .. } => ("passed", Some(*value)),
                Measurement::Failed { value, .. } => ("failed", Some(*value)),
                Measurement::Inconclusive { value, .. } => ("inconclusive", *value),
            };
            let workload = run.workload.as_deref().unwrap_or_default();
            ctx.metrics
                .analysis_measured(&labels, &run.template, workload, verdict, value);
            analysis::record(run, analysis, &outcome, &now);
        }
    }
    Some(Prepared { analyses, runs })
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
