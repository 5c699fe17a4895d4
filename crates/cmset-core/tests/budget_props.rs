//! The cluster-wide budget over random clusters: workloads with random turns ask to move, moved ones
//! roll for a random number of rounds, and the budget is fed what a watch would show. Checked:
//!
//! - never more than `cap` workloads move at once because the budget let them;
//! - slots go in turn order: a workload is granted only when every waiting one with an earlier turn
//!   still has a free slot;
//! - nobody starves: every workload moves within a bounded number of rounds.

use std::collections::BTreeMap;

use cmset_core::budget::{Admit, Budget};
use proptest::prelude::*;

/// A workload of the simulated cluster.
#[derive(Clone, Debug)]
struct Workload {
    turn: u32,
    /// Rounds its rollout takes once moved.
    rolls_for: u32,
    generation: i64,
    /// Rounds left rolling; `None` before it moved.
    rolling: Option<u32>,
    moved: bool,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_cap_holds_turns_are_kept_and_nobody_starves(
        cap in 1usize..6,
        workloads in prop::collection::vec((0u32..20, 0u32..4), 1..40),
        // Whether a workload asks in a given round (a reconcile may come late): the rest ask later.
        asks in prop::collection::vec(any::<bool>(), 64),
    ) {
        let mut budget: Budget<usize, u32> = Budget::new(Some(cap));
        let mut cluster: Vec<Workload> = workloads
            .iter()
            .map(|&(turn, rolls_for)| Workload { turn, rolls_for, generation: 1, rolling: None, moved: false })
            .collect();
        let rounds_allowed = (cluster.len() / cap + 2) * 6 + 8;
        let mut round = 0;
        while cluster.iter().any(|w| !w.moved) {
            prop_assert!(round < rounds_allowed, "someone starved: {:?}", cluster);
            // Each workload that still wants to move may ask (every one asks every other round at least).
            for i in 0..cluster.len() {
                let w = &cluster[i];
                let asking = !w.moved && (asks[(i + round) % asks.len()] || round % 2 == 0);
                if !asking {
                    continue;
                }
                let earlier_waiting = (0..cluster.len())
                    .filter(|&j| {
                        j != i && budget.position(&j).is_some() && (cluster[j].turn, j) < (w.turn, i)
                    })
                    .count();
                let free = cap.saturating_sub(budget.in_use());
                if budget.request(&i, w.turn, w.generation) == Admit::Go {
                    // Granted, it took a slot that no earlier turn waiting now needs.
                    prop_assert!(earlier_waiting < free, "workload {} went before an earlier turn", i);
                    prop_assert!(budget.in_use() <= cap, "{} moving with a cap of {}", budget.in_use(), cap);
                    let w = &mut cluster[i];
                    w.moved = true;
                    w.generation += 1;
                    w.rolling = Some(w.rolls_for);
                }
            }
            // The watch shows each moved workload: rolling for a while, then healthy.
            for (i, w) in cluster.iter_mut().enumerate() {
                if let Some(left) = w.rolling {
                    budget.observe(&i, w.generation, left > 0);
                    w.rolling = left.checked_sub(1);
                }
            }
            prop_assert!(budget.in_use() <= cap);
            round += 1;
        }
        // Everything healthy in the end: nothing holds a slot, nobody waits.
        for (i, w) in cluster.iter().enumerate() {
            budget.observe(&i, w.generation, false);
        }
        prop_assert_eq!((budget.in_use(), budget.waiting()), (0, 0));
    }

    #[test]
    fn whoever_the_budget_wakes_is_granted_when_it_asks(
        cap in 1usize..4,
        turns in prop::collection::vec(0u32..10, 1..20),
    ) {
        let mut budget: Budget<usize, u32> = Budget::new(Some(cap));
        let mut generation: BTreeMap<usize, i64> = BTreeMap::new();
        for (i, turn) in turns.iter().enumerate() {
            if budget.request(&i, *turn, 1) == Admit::Go {
                generation.insert(i, 1);
            }
        }
        // Every granted one is seen healthy after its patch: whoever is woken then must be granted.
        let granted: Vec<usize> = generation.keys().copied().collect();
        for i in granted {
            for woken in budget.observe(&i, 2, false) {
                let turn = turns[woken];
                prop_assert_eq!(budget.request(&woken, turn, 1), Admit::Go);
            }
        }
    }
}
