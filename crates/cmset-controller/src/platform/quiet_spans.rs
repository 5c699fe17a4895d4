//! Spans that cost every reconcile and carry nothing a log line needs.
//!
//! kube's controller runner opens a span, "reconciling object", around the call that starts each
//! reconcile. cmset's reconcilers run as tasks of their own (`engine::tasks`), so that span
//! ends as the task is spawned: no line is ever logged inside it. Opening it still formats its
//! fields into a string for the log layer, once per reconcile. cmset's own `reconcile` span names
//! the same object (controller, kind, namespace, name) and is the one its lines are logged in.

use tracing::Metadata;
use tracing::subscriber::Interest;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};

/// The target and name of kube's runner span.
const RUNNER_SPAN: (&str, &str) = ("kube_runtime::controller", "reconciling object");

/// Drops kube's runner span; everything else passes.
#[derive(Debug, Clone, Copy)]
pub struct WithoutRunnerSpan;

impl WithoutRunnerSpan {
    fn allows(metadata: &Metadata<'_>) -> bool {
        !(metadata.is_span() && (metadata.target(), metadata.name()) == RUNNER_SPAN)
    }
}

impl<S> Filter<S> for WithoutRunnerSpan {
    fn enabled(&self, metadata: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::allows(metadata)
    }

    fn callsite_enabled(&self, metadata: &'static Metadata<'static>) -> Interest {
        if Self::allows(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    /// No level is filtered here (see `redact::NoResponseText::max_level_hint`).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Records the name of every span the filtered layer is told of.
    struct Spans(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> Layer<S> for Spans {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.lock().unwrap().push(attrs.metadata().name().to_string());
        }
    }

    #[test]
    fn kubes_runner_span_is_dropped_and_cmsets_own_is_kept() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber =
            tracing_subscriber::registry().with(Spans(seen.clone()).with_filter(WithoutRunnerSpan));
        tracing::subscriber::with_default(subscriber, || {
            // Both callsites as their crates write them: the target is the module path.
            let _kube =
                tracing::info_span!(target: "kube_runtime::controller", "reconciling object").entered();
            let _other = tracing::info_span!(target: "kube_runtime::controller", "another").entered();
            let _own = tracing::info_span!("reconcile", controller = "set").entered();
        });
        assert_eq!(*seen.lock().unwrap(), vec!["another", "reconcile"]);
    }
}
