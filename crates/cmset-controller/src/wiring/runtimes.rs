//! The process's two tokio runtimes, and what runs on each.
//!
//! - The engine: the watches and the index, the set and workload controllers, leader election, the
//!   notifier, and the webhook's certificate keeper (it talks to the API server). `main` polls it with
//!   `block_on` on the main thread. By default it is a current-thread runtime: a watch event, the
//!   reconcile it queues and the write that follows never change threads, where two workers spent
//!   17-19% of the operator's CPU handing work between them and parking (issue 51).
//!   `--engine-runtime multi-thread` runs it on a worker per core instead, for comparison.
//! - Serving: the admission webhook and the metrics and probe endpoints, on a thread of their own, so
//!   that an admission never waits behind a reconcile, nor a reconcile behind an admission.
//!
//! They share only what is `Arc`'d already (the scopes and their index, the metrics, the readiness)
//! and the futures that say when to stop. A socket belongs to the runtime it was made on (its reactor
//! wakes whoever waits on it), and so does a timer, so `main` binds and spawns what serves through the
//! serving runtime's handle, and builds every API client on the engine. Nothing long runs on the
//! engine's thread: judging a set's content goes to its blocking pool (`set_controller`).

use tokio::runtime::{Builder, Runtime};

use crate::wiring::cli::EngineRuntime;

/// The name of the serving runtime's thread (and of its blocking pool's).
pub const SERVING_THREAD: &str = "cmset-serving";

/// The name of the engine's blocking pool's threads, and of its workers when it has some.
pub const ENGINE_THREAD: &str = "cmset-engine";

/// The engine's runtime, of `flavor`; `block_on` it on the main thread.
pub fn engine(flavor: EngineRuntime) -> std::io::Result<Runtime> {
    let mut builder = match flavor {
        EngineRuntime::CurrentThread => Builder::new_current_thread(),
        EngineRuntime::MultiThread => Builder::new_multi_thread(),
    };
    builder.thread_name(ENGINE_THREAD).enable_all().build()
}

/// The serving runtime: one worker, on a thread the runtime starts itself. A multi-thread runtime of
/// one worker rather than a current-thread runtime on a thread of our own, because then tokio owns
/// the thread: dropping the runtime stops and joins it, with no thread, stop signal or join to write
/// here; and one worker has no one to steal from.
pub fn serving() -> std::io::Result<Runtime> {
    Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(SERVING_THREAD)
        .enable_all()
        .build()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_current_thread_engine_runs_its_tasks_on_the_thread_that_polls_it() {
        let engine = engine(EngineRuntime::CurrentThread).unwrap();
        let caller = std::thread::current().id();
        let ran_on = engine.block_on(async { tokio::spawn(async { std::thread::current().id() }).await });
        assert_eq!(ran_on.unwrap(), caller);
    }

    #[test]
    fn the_multi_thread_engine_runs_its_tasks_on_its_workers() {
        let engine = engine(EngineRuntime::MultiThread).unwrap();
        let ran_on = engine.block_on(async {
            tokio::spawn(async { std::thread::current().name().map(str::to_string) }).await
        });
        assert_eq!(ran_on.unwrap().as_deref(), Some(ENGINE_THREAD));
    }

    /// The engine's thread held by synchronous work (what a reconcile must never do, and what an
    /// admission must not wait for): the serving runtime goes on meanwhile.
    #[test]
    fn serving_goes_on_while_the_engine_thread_is_held() {
        let engine = engine(EngineRuntime::CurrentThread).unwrap();
        let serving = serving().unwrap();
        let ticks = Arc::new(AtomicUsize::new(0));
        let thread = engine.block_on(async {
            let counted = ticks.clone();
            serving.spawn(async move {
                let mut every = tokio::time::interval(Duration::from_millis(10));
                loop {
                    every.tick().await;
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            });
            let thread = serving
                .spawn(async { std::thread::current().name().map(str::to_string) })
                .await
                .unwrap();
            let before = ticks.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(300));
            assert!(
                ticks.load(Ordering::Relaxed) >= before + 10,
                "the serving runtime ticked {} times in 300 ms",
                ticks.load(Ordering::Relaxed) - before
            );
            thread
        });
        assert_eq!(thread.as_deref(), Some(SERVING_THREAD));
    }
}
