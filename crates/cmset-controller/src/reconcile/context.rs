//! What the set and workload controllers share: the engine's context (the client, the index, the
//! stores, events and the one wrapper every write goes through; see [`crate::engine::context`]), and
//! what the controllers decide with beyond it: the measurer of metric analysis and the notifier.
//!
//! Assembled above the rooms it draws on, where a scope is led (`wiring::lead`), so that the
//! engine knows neither the measurer nor the notifier, and the notifier takes only the engine's part.

use std::ops::Deref;
use std::sync::Arc;

use crate::engine::context::Context as EngineContext;
use crate::engine::index::SetId;
use crate::notify::notifier::Notifier;
use crate::reconcile::measurer::Measurer;

pub struct Context {
    /// The engine's parts, shared with the notifier's own tasks.
    pub engine: Arc<EngineContext>,
    /// What measures the metric analysis of rollouts, off the reconcile path, against
    /// `--prometheus-url`; `None` without one: a set that asks for analysis holds its rollout and says
    /// why.
    pub measurer: Option<Arc<Measurer>>,
    /// Hears of every set reconciled, to notify about its rollout (`None`: not configured).
    pub notifier: Option<Arc<Notifier>>,
}

impl Context {
    /// A context with the engine's parts only: no analysis, no notifications.
    pub fn new(engine: EngineContext) -> Self {
        Self {
            engine: Arc::new(engine),
            measurer: None,
            notifier: None,
        }
    }

    /// Forgets everything the controllers remember of a set being deleted: the memory of their writes
    /// and the measurements taken for it.
    pub fn forget_set(&self, set: &SetId) {
        self.engine.forget_memory(set);
        if let Some(measurer) = &self.measurer {
            measurer.forget(set);
        }
    }
}

/// The controllers use the engine's parts as their own (`ctx.index`, `ctx.write(..)`): they are what
/// nearly every line of a reconcile reaches for.
impl Deref for Context {
    type Target = EngineContext;

    fn deref(&self) -> &EngineContext {
        &self.engine
    }
}
