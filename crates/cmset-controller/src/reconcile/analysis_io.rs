//! The I/O of a set's metric analysis (`spec.rollout.analysis`): its AnalysisTemplates read before the
//! set is planned, the measurements taken since its last reconcile recorded before it is planned
//! again, and the runs its plan lists as due ([`cmset_core::rollout::plan::SetPlan::analysis_due`]) handed to
//! the [`Measurer`](crate::reconcile::measurer::Measurer), which queries Prometheus off the reconcile path. Nothing here decides, and
//! nothing here waits for Prometheus: every query sent is one the planner rendered from the
//! templates, the current revision, the wave and its members as the index knows them, never one read
//! from the set's status, which the set's namespace can write.
//!
//! Templates are read from the store of the AnalysisTemplate watch: a template created, edited or
//! deleted reconciles the sets that name it (see [`crate::engine::index::Index::handle_template`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use cmset_api::{AnalysisRef, AnalysisRunStatus, AnalysisTemplate};
use cmset_core::analysis::{self, Analysis, Measurement};
use cmset_core::rollout::plan::SetPlan;
use cmset_core::set::SetRef;
use kube::runtime::reflector::ObjectRef;
use tracing::debug;

use crate::engine::index::{Key, SetId};
use crate::platform::metrics::SetLabels;
use crate::reconcile::context::Context;
use crate::reconcile::measurer::{Finished, RunKey};

/// A set's analysis, ready for its plan.
pub struct Prepared {
    /// Its analyses resolved against their templates, or why they cannot run.
    pub analyses: Result<Vec<Analysis>, String>,
    /// The runs of its rollout: as the status records them (only their measurements are read), or as
    /// the last plan computed them with the measurements taken since recorded.
    pub runs: Vec<AnalysisRunStatus>,
}

fn id_of(set: SetRef<'_>) -> SetId {
    (set.kind(), Key::new(set.namespace(), set.name()))
}

/// The analysis of `set`, if its spec asks for one: its templates read. A set that asks for none
/// has nothing kept for it by the measurer.
pub fn prepare(ctx: &Context, set: SetRef<'_>) -> Option<Prepared> {
    let references = set.rollout().map(|r| r.analysis.as_slice()).unwrap_or_default();
    if references.is_empty() {
        if let Some(measurer) = &ctx.measurer {
            measurer.forget(&id_of(set));
        }
        return None;
    }
    let analyses = resolve(ctx, references);
    let runs = set
        .status()
        .and_then(|s| s.rollout.as_ref())
        .map(|r| r.analysis.clone())
        .unwrap_or_default();
    Some(Prepared { analyses, runs })
}

/// Records on the runs `plan` lists as due the measurements of them the [`Measurer`](crate::reconcile::measurer::Measurer) has taken since,
/// and returns the analysis to plan again with: the plan's runs with these recorded. `None` when
/// nothing was recorded. A measurement is recorded only on the run it was taken for (same rollout,
/// wave, workload and query), still due, sent after its wave last became healthy, and newer than
/// the run's last measurement (a status write that failed takes it again; a written one never counts
/// it twice). The measurements the plan has no use for any more are dropped.
pub fn measured(ctx: &Context, set: SetRef<'_>, prepared: &Prepared, plan: &SetPlan) -> Option<Prepared> {
    let (Ok(resolved), Some(measurer)) = (&prepared.analyses, &ctx.measurer) else {
        return None;
    };
    let id = id_of(set);
    let finished: HashMap<RunKey, Finished> = measurer
        .finished(&id)
        .into_iter()
        .map(|f| (f.run.clone(), f))
        .collect();
    if finished.is_empty() {
        return None;
    }
    let Some(rollout) = plan.status.rollout.as_ref() else {
        measurer.keep(&id, |_| false);
        return None;
    };
    let labels = SetLabels {
        namespace: set.namespace().to_string(),
        kind: set.kind().as_str(),
        name: set.name().to_string(),
    };
    let mut runs = rollout.analysis.clone();
    let places = analysis::RunPlaces::of(&runs);
    let mut recorded: HashSet<RunKey> = HashSet::new();
    for due in &plan.analysis_due {
        let key = RunKey::of(rollout, due);
        let Some(taken) = finished.get(&key) else {
            continue;
        };
        let before_healthy =
            (rollout.wave_healthy_since.as_ref()).is_some_and(|since| taken.sent_at.0 < since.0);
        let counted =
            (due.last_measured_at.as_ref()).is_some_and(|last| last.0.as_second() >= taken.at.0.as_second());
        let Some(analysis) = resolved.iter().find(|a| a.template == due.template) else {
            continue;
        };
        if before_healthy || counted {
            continue;
        }
        let measurement = Measurement::judge(&taken.outcome, &analysis.condition);
        let said = measurement.describe(&analysis.condition);
        debug!(template = %due.template, workload = ?due.workload, %said, "analysis measured");
        let (verdict, value) = match &measurement {
            Measurement::Passed { value, .. } => ("passed", Some(*value)),
            Measurement::Failed { value, .. } => ("failed", Some(*value)),
            Measurement::Inconclusive { value, .. } => ("inconclusive", *value),
        };
        let workload = due.workload.as_deref().unwrap_or_default();
        ctx.metrics
            .analysis_measured(&labels, &due.template, workload, verdict, value);
        let mut run = due.clone();
        analysis::record(&mut run, analysis, &taken.outcome, &taken.at);
        // A run the status writes in a group is recorded on its own; the next plan prefers it.
        match places.of_run(due) {
            Some(at) => runs[at] = run,
            None => runs.push(run),
        }
        recorded.insert(key);
    }
    // Kept until a plan finds them counted: a status write that fails does not lose them.
    measurer.keep(&id, |f| recorded.contains(&f.run));
    if recorded.is_empty() {
        return None;
    }
    Some(Prepared {
        analyses: prepared.analyses.clone(),
        runs,
    })
}

/// Hands the runs `plan` lists as due to the [`Measurer`](crate::reconcile::measurer::Measurer) (a run being measured is not sent twice),
/// without waiting for them. Their answers reconcile the set, so `plan` need not look again before
/// a query's timeout has passed.
pub fn request(ctx: &Context, set: SetRef<'_>, prepared: &Prepared, plan: &mut SetPlan) {
    let (Ok(_), Some(measurer), Some(rollout)) = (&prepared.analyses, &ctx.measurer, &plan.status.rollout)
    else {
        return;
    };
    if plan.analysis_due.is_empty() {
        return;
    }
    let runs = plan.analysis_due.iter().map(|due| RunKey::of(rollout, due));
    measurer.request(&id_of(set), runs);
    plan.recheck_in = plan.recheck_in.map(|d| d.max(measurer.timeout()));
}

/// `references` resolved against the AnalysisTemplates they name, as the watch's store holds them, or
/// the first reason they cannot run.
fn resolve(ctx: &Context, references: &[AnalysisRef]) -> Result<Vec<Analysis>, String> {
    let (Some(_), Some(store)) = (&ctx.measurer, &ctx.stores.templates) else {
        return Err("the operator has no Prometheus to query (its --prometheus-url is not set)".to_string());
    };
    if let Some(why) = ctx.index.templates_unlisted() {
        return Err(format!("the operator cannot list AnalysisTemplates: {why}"));
    }
    let templates: BTreeMap<&str, Arc<AnalysisTemplate>> = references
        .iter()
        .filter_map(|r| Some((r.template.as_str(), store.get(&ObjectRef::new(&r.template))?)))
        .collect();
    analysis::resolve_all(references, |name| templates.get(name).map(|t| &t.spec)).map_err(|e| e.to_string())
}
