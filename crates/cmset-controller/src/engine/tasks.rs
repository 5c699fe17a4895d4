//! Work run as tasks of its own, owned by whoever awaits it.
//!
//! A future polled inside another is polled when that one is: every watch in one `join_all`, every
//! reconcile inside its controller's stream, and the controllers inside `main`'s own future (which
//! `block_on` polls on the main thread). Spawned, each is a task the scheduler runs by itself: on
//! the main thread too with the engine's default current-thread runtime, on any worker with
//! `--engine-runtime multi-thread` (see `wiring::runtimes`). A plain `JoinHandle` dropped leaves its
//! task running, which would let a reconcile write after its controller was dropped (a lost lease);
//! [`Owned`] aborts its task when dropped instead, so dropping the owner stops the work at its next
//! await, as before.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;

/// A spawned task that is aborted when this handle is dropped; awaiting it yields the task's output.
#[must_use = "dropping it aborts the task"]
pub struct Owned<T>(JoinHandle<T>);

/// Runs `future` as a task of its own, owned by the returned handle.
pub fn spawn_owned<F>(future: F) -> Owned<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Owned(tokio::spawn(future))
}

/// [`spawn_owned`] on the runtime of `handle` rather than the current one: where its I/O belongs.
pub fn spawn_owned_on<F>(handle: &tokio::runtime::Handle, future: F) -> Owned<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Owned(handle.spawn(future))
}

impl<T> Future for Owned<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match Pin::new(&mut self.0).poll(cx) {
            Poll::Ready(Ok(output)) => Poll::Ready(output),
            // The task's panic is the awaiting code's panic, as it was before the work was spawned.
            Poll::Ready(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only this handle aborts its task, and only when dropped; the runtime cancels tasks only
            // while shutting down. Either way nobody is left to take an output.
            Poll::Ready(Err(_)) => Poll::Pending,
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T> Drop for Owned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn awaiting_yields_the_output() {
        assert_eq!(spawn_owned(async { 7 }).await, 7);
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_task_at_its_next_await() {
        let finished = Arc::new(AtomicBool::new(false));
        let task = spawn_owned({
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
            }
        });
        tokio::task::yield_now().await;
        drop(task);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !finished.load(Ordering::SeqCst),
            "the task ran on after its owner was dropped"
        );
    }

    #[tokio::test]
    #[should_panic(expected = "inside the task")]
    async fn a_panic_in_the_task_reaches_the_awaiting_code() {
        spawn_owned(async { panic!("inside the task") }).await;
    }

    /// `--engine-runtime multi-thread`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_a_multi_thread_runtime_tasks_run_on_the_worker_threads() {
        let caller = std::thread::current().id();
        let ran_on = spawn_owned(async { std::thread::current().id() }).await;
        assert_ne!(
            ran_on, caller,
            "a multi-thread runtime's test body runs outside its workers"
        );
    }

    /// The engine's default.
    #[tokio::test(flavor = "current_thread")]
    async fn on_a_current_thread_runtime_tasks_run_on_the_thread_that_polls_it() {
        let caller = std::thread::current().id();
        let ran_on = spawn_owned(async { std::thread::current().id() }).await;
        assert_eq!(ran_on, caller);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn spawned_on_another_runtime_a_task_runs_there_and_is_owned_here() {
        let other = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let caller = std::thread::current().id();
        let ran_on = spawn_owned_on(other.handle(), async { std::thread::current().id() }).await;
        assert_ne!(ran_on, caller);

        let finished = Arc::new(AtomicBool::new(false));
        let task = spawn_owned_on(other.handle(), {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                finished.store(true, Ordering::SeqCst);
            }
        });
        drop(task);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(
            !finished.load(Ordering::SeqCst),
            "dropping the handle aborts it there too"
        );
        // A runtime may not be dropped inside another's context.
        other.shutdown_background();
    }
}
