//! The cluster-wide budget over random clusters: workloads with random turns ask to move, moved ones
//! roll for a random number of rounds, and the budget is fed what a watch would show. Checked:
//!
//! - never more than `cap` workloads move at once because the budget let them;
//! - slots go in turn order: a workload is granted only when every waiting one with an earlier turn
//!   still has a free slot;
//! - nobody starves: every workload moves within a bounded number of rounds.

use std::collections::BTreeMap;

use cmset_core::policy::budget::{Admit, Budget};
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Workloads cmset never moved, rolling out forever (created broken, scaling, short of a node), with
    /// no mark or a mark of another generation, never hold a slot however many there are: fed to the
    /// budget as the index feeds it, through `moved::holds_slot`, they leave every slot to the moves.
    #[test]
    fn a_never_moved_unhealthy_workload_never_holds_a_slot(
        cap in 1usize..4,
        sick in prop::collection::vec((1i64..9, prop::option::of(-2i64..3)), 1..12),
        movers in 1usize..10,
    ) {
        use cmset_core::workloads::health::Health;
        use cmset_core::rollout::moved::holds_slot;

        let mut budget: Budget<usize, u32> = Budget::new(Some(cap));
        for (i, (generation, mark_offset)) in sick.iter().enumerate() {
            // A mark of another generation (or none): not a move of this one.
            let offset = mark_offset.filter(|o| *o != 0);
            let mark = offset.map(|o| (generation + o).to_string());
            let rolling = holds_slot(mark.as_deref(), *generation, &Health::Progressing, true);
            prop_assert!(!rolling);
            budget.observe(&(1000 + i), *generation, rolling);
        }
        prop_assert_eq!(budget.in_use(), 0);
        // The movers all get a slot in turn, each freeing it once healthy at the generation it marked.
        let mut moved = 0;
        let mut done = vec![false; movers];
        for round in 0..movers * 2 + 2 {
            for (m, done) in done.iter_mut().enumerate() {
                if *done {
                    continue;
                }
                let Admit::Go = budget.request(&m, 1, 1) else { continue };
                *done = true;
                let mark = "2";
                prop_assert!(holds_slot(Some(mark), 2, &Health::Progressing, true));
                budget.observe(&m, 2, true);
                budget.observe(&m, 2, holds_slot(Some(mark), 2, &Health::Healthy, true));
                moved += 1;
                prop_assert!(round < movers * 2 + 2);
            }
            if moved >= movers {
                break;
            }
        }
        prop_assert!(moved >= movers, "{} of {} moved past {} sick workloads", moved, movers, sick.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The line is a pure function of what the API records (each move's turn: when its revision was
    /// created) and not of when replicas heard of it: requests arriving in any order, as on a new leader
    /// that lists everything at once, give every waiting workload the same place.
    #[test]
    fn the_order_of_the_line_is_a_pure_function_of_recorded_turns(
        cap in 1usize..4,
        turns in prop::collection::vec(0i64..50, 1..30),
        shuffle in any::<u64>(),
    ) {
        let places = |order: &[usize]| {
            let mut budget: Budget<usize, i64> = Budget::new(Some(cap));
            // Every slot is held by moves under way, so everyone waits.
            for holder in 0..cap {
                budget.observe(&(10_000 + holder), 1, false);
                let _ = budget.request(&(10_000 + holder), -1, 1);
            }
            for &w in order {
                prop_assert!(matches!(budget.request(&w, turns[w], 1), Admit::Wait(_)));
            }
            Ok((0..turns.len()).map(|w| budget.position(&w).map(|p| p.position)).collect::<Vec<_>>())
        };
        let arrival: Vec<usize> = (0..turns.len()).collect();
        let mut shuffled = arrival.clone();
        let mut seed = shuffle;
        for i in (1..shuffled.len()).rev() {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let j = usize::try_from(seed >> 33).unwrap_or(0) % (i + 1);
            shuffled.swap(i, j);
        }
        let first = places(&arrival)?;
        prop_assert_eq!(&first, &places(&shuffled)?);
        // And the place is the rank by (turn, workload).
        for w in 0..turns.len() {
            let ahead = (0..turns.len()).filter(|&v| (turns[v], v) < (turns[w], w)).count();
            prop_assert_eq!(first[w], Some(ahead + 1));
        }
    }
}
