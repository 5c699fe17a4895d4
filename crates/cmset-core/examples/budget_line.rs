//! Prints what finding a workload's place in the rollout budget's line costs as the line grows:
//! `cargo run --release -p cmset-core --example budget_line`. For each length (30, 300, 3,000 waiting)
//! it times `position` (what a set's status asks for each of its waiting workloads) and a `request`
//! that waits (what each waiting workload's reconcile asks), and, as the floor measured in the same run,
//! the same place found by walking the line as the budget did before it was ranked. Medians of
//! `ROUNDS` rounds of `OPS` look-ups each; only the ratios compare across machines.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::Instant;

use cmset_core::policy::budget::{Admit, Budget};

const ROUNDS: usize = 21;
const OPS: usize = 2_000;

/// A budget with one slot, held, and `waiting` workloads in line (turns spread over 60 s).
fn line(waiting: usize) -> Budget<u64, i64> {
    let mut budget = Budget::new(Some(1));
    assert_eq!(budget.request(&u64::MAX, 0, 1), Admit::Go);
    for w in 0..waiting as u64 {
        let turn = i64::try_from(w % 60).unwrap_or(0);
        assert!(matches!(budget.request(&w, turn, 1), Admit::Wait(_)));
    }
    budget
}

/// Median nanoseconds per call of `op` over `ROUNDS` rounds of `OPS` calls.
fn median_ns(mut op: impl FnMut(usize)) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for i in 0..OPS {
                op(i);
            }
            started.elapsed().as_nanos() as f64 / OPS as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

fn main() {
    println!("| waiting | position (ns) | request that waits (ns) | walk of the line, before (ns) |");
    println!("| ---: | ---: | ---: | ---: |");
    let mut first: Option<(f64, f64, f64)> = None;
    let mut last = (0.0, 0.0, 0.0);
    for waiting in [30usize, 300, 3_000] {
        let mut budget = line(waiting);
        let queue: BTreeSet<(i64, u64)> = (0..waiting as u64)
            .map(|w| (i64::try_from(w % 60).unwrap_or(0), w))
            .collect();
        let pick = |i: usize| (i * 7_919 % waiting) as u64;
        let position = median_ns(|i| {
            black_box(budget.position(&pick(i)));
        });
        let request = median_ns(|i| {
            let w = pick(i);
            let turn = i64::try_from(w % 60).unwrap_or(0);
            black_box(budget.request(&w, turn, 1));
        });
        let walk = median_ns(|i| {
            let w = pick(i);
            let turn = i64::try_from(w % 60).unwrap_or(0);
            black_box(queue.range(..(turn, w)).count());
        });
        println!("| {waiting} | {position:.0} | {request:.0} | {walk:.0} |");
        first.get_or_insert((position, request, walk));
        last = (position, request, walk);
    }
    if let Some((p, r, w)) = first {
        println!(
            "\n3,000 against 30 waiting: position {:.2}×, request {:.2}×, the walk {:.2}×",
            last.0 / p,
            last.1 / r,
            last.2 / w
        );
    }
}
