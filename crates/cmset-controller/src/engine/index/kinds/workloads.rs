//! Opted-in workloads of every kind in the table (`cmset_core::workloads::kinds`), watched as dynamic objects:
//! only the references of their pod template are kept (see [`crate::engine::stored_workload`]); the store keeps
//! the slim object for the controller keyed by it, and the index their names, wave and health.

use cmset_api::labels;
use cmset_core::rollout::moved;
use cmset_core::workloads::observe::WorkloadKind;

use super::Ops;
use crate::engine::index::graph::PlannedFrom;
use crate::engine::index::{Key, ReaderKind, State, Triggers};
use crate::engine::stored_workload::StoredWorkload;
use crate::engine::views;

/// Only workloads that opted in are watched.
pub fn selector() -> String {
    format!("{}={}", labels::ENABLED, labels::ENABLED_VALUE)
}

impl Ops<StoredWorkload> for WorkloadKind {
    fn index(&self, obj: &StoredWorkload, key: &Key, state: &mut State, out: &mut Triggers) {
        let kind = *self;
        let view = views::workload_view(kind, obj);
        let names = view.as_ref().map(|v| v.referenced()).unwrap_or_default();
        let template_labels = view
            .as_ref()
            .map(|v| v.template_labels.clone())
            .unwrap_or_default();
        let reads = !names.is_empty();
        state
            .graph
            .link(ReaderKind::Workload(kind), key, names.clone(), &state.sets, out);
        // A kind whose template never changes after creation (a Job) has no rollout to follow.
        let progress = view.filter(|_| kind.is_mutable()).map(|v| (v.wave, v.health));
        if let Some(budget) = &state.budget {
            // Moving, for the budget: rolling out the generation a move by cmset gave it (its mark),
            // never merely unhealthy (see `cmset_core::rollout::moved`).
            let generation = obj.metadata.generation.unwrap_or(0);
            let mark = obj.metadata.labels.as_ref().and_then(|l| l.get(moved::MOVED));
            let rolling = progress.as_ref().is_some_and(|(_, health)| {
                moved::holds_slot(mark.map(String::as_str), generation, health, reads)
            });
            // Whoever's turn came is woken through the scope that watches it, this one or another.
            budget.wake(budget.observe(&(kind, key.clone()), generation, rolling));
        }
        state
            .graph
            .progress(kind, key, progress.clone(), &state.sets, out);
        // Its own controller plans again only when what it plans from moved: not for a status step of
        // its rollout (a Deployment writes three or four per template change), unless the budget's
        // slot it may hold reads its health; nor for a restart, a scale or a new image, which leave
        // the names its template references as they were.
        let health = progress.filter(|_| state.budget.is_some()).map(|(_, h)| h);
        let planned_from = PlannedFrom {
            references: names,
            template_labels,
            labels: obj.metadata.labels.clone(),
            annotations: obj.metadata.annotations.clone(),
            deleting: obj.metadata.deletion_timestamp.is_some(),
            health,
        };
        out.own = state.graph.planned_from(kind, key, Some(planned_from));
    }

    fn unindex(&self, key: &Key, state: &mut State, out: &mut Triggers) {
        if let Some(budget) = &state.budget {
            budget.wake(budget.forget(&(*self, key.clone())));
        }
        state.graph.progress(*self, key, None, &state.sets, out);
        state.graph.planned_from(*self, key, None);
        state.graph.link(
            ReaderKind::Workload(*self),
            key,
            Default::default(),
            &state.sets,
            out,
        );
    }

    fn keys(&self, state: &State) -> Vec<Key> {
        state.graph.keys(ReaderKind::Workload(*self))
    }
}
