//! Work spread over the runtime's worker threads, owned by whoever awaits it.
//!
//! A future polled inside another runs on that one's thread: every watch in one `join_all`, every
//! reconcile inside its controller's stream, and the controllers inside `main`'s own future (which
//! `#[tokio::main]` polls on the main thread, not on a worker). Spawned, each is a task the scheduler
//! can run on any core. A plain `JoinHandle` dropped leaves its task running, which would let a
//! reconcile write after its controller was dropped (a lost lease); [`Owned`] aborts its task when
//! dropped instead, so dropping the owner stops the work at its next await, as before.

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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_run_on_the_worker_threads() {
        let caller = std::thread::current().id();
        let ran_on = spawn_owned(async { std::thread::current().id() }).await;
        assert_ne!(
            ran_on, caller,
            "a multi-thread runtime's test body runs outside its workers"
        );
    }
}
