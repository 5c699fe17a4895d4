//! Prints the heap bytes kube-runtime's scheduler holds per settled set when every set's reconcile
//! asks to be requeued in 30 minutes (cmset before 0a8d964), against none asking (one resync timer
//! for all sets): `cargo run --release -p cmset-controller --example scheduler_footprint`. Counted by
//! dhat's allocator, so the figures are exact and do not depend on the machine. Both cases first take
//! a burst of every set at once, as a fresh leader or a bench's creation of the sets does: the
//! tables keep the room that burst needed either way.
use std::pin::pin;
use std::time::Duration;

use cmset_api::ConfigMapSet;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use kube::runtime::controller::{ReconcileReason, ReconcileRequest};
use kube::runtime::reflector::{Lookup, ObjectRef};
use kube::runtime::scheduler::{ScheduleRequest, scheduler};
use tokio::time::Instant;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const NS: &str = "cmset-bench";

fn live() -> usize {
    dhat::HeapStats::get().curr_bytes
}

/// What the controller schedules for set `i`: its reference as the store keys it (name, namespace,
/// resourceVersion, uid), and why.
fn request(
    i: usize,
    reason: ReconcileReason,
    run_at: Instant,
) -> ScheduleRequest<ReconcileRequest<ConfigMapSet>> {
    let mut set = ConfigMapSet::new(&format!("bench-{i:05}"), Default::default());
    set.metadata.namespace = Some(NS.into());
    set.metadata.uid = Some(format!("0b0e4a52-5a3c-4c64-9d0e-{i:012}"));
    set.metadata.resource_version = Some(format!("{}", 1_000_000 + i));
    let obj_ref: ObjectRef<ConfigMapSet> = set.to_object_ref(());
    ScheduleRequest {
        message: ReconcileRequest { obj_ref, reason },
        run_at,
    }
}

/// Takes from `stream` until it gives nothing for 100 ms, returning how many items it gave.
async fn drain<S: Stream + Unpin>(stream: &mut S) -> usize {
    let mut n = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(100), stream.next()).await {
        n += 1;
    }
    n
}

/// Heap held per set by a scheduler that took a burst of `n` sets at once, handed them all out, and
/// then got `later` requests, each due in 30 minutes.
async fn held_per_set(n: usize, later: bool) -> f64 {
    let (tx, rx) = mpsc::unbounded();
    let before = live();
    let mut scheduled = pin!(scheduler(rx));
    let now = Instant::now();
    for i in 0..n {
        tx.unbounded_send(request(i, ReconcileReason::ObjectUpdated, now))
            .unwrap();
    }
    assert_eq!(drain(&mut scheduled).await, n, "the burst is handed out at once");
    if later {
        let due = now + Duration::from_secs(30 * 60);
        for i in 0..n {
            tx.unbounded_send(request(i, ReconcileReason::ReconcilerRequestedRetry, due))
                .unwrap();
        }
        assert_eq!(drain(&mut scheduled).await, 0, "nothing is due yet");
    }
    let held = live() - before;
    held as f64 / n as f64
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let n = 1000;
    let requeued = runtime.block_on(held_per_set(n, true));
    let awaiting = runtime.block_on(held_per_set(n, false));
    println!("Heap bytes kube-runtime's scheduler holds per settled set ({n} sets, after a burst of all):\n");
    println!("| every set's reconcile returns | bytes per set |\n| --- | ---: |");
    println!("| `requeue(30 min)` (before) | {requeued:.0} |");
    println!("| `await_change()`, one resync timer for all (now) | {awaiting:.0} |");
    println!("| saved | {:.0} |", requeued - awaiting);
}
