//! The cluster-wide budget: at most `cap` workloads moving at once, the rest waiting their turn.
//!
//! A workload is *moving* while it rolls out: the index sees it not yet healthy on the template it
//! names (whatever moved it), or cmset granted it a move that the index has not shown yet (the few
//! milliseconds between the patch and its watch event, so that two grants cannot both take the last
//! slot). A workload that wants to move asks for a slot with its *turn*, the time of the change it moves
//! for; slots go to the waiting workloads in turn order (oldest change first, ties broken by the
//! workload's own order), so a set whose change came first is served first and none is passed over
//! forever: a later change never overtakes an earlier one.
//!
//! Rolling back a failed rollout is never held by the budget; neither is a workload created paused
//! by cmset (its first start is not a restart). The caller decides which moves ask.
//!
//! Pure bookkeeping: the caller (the index) feeds observations and asks; the answers it returns name
//! the workloads whose turn has come, for the caller to wake.

use std::collections::{BTreeMap, BTreeSet};

use indexset::BTreeSet as RankedSet;
use std::fmt;

/// The budget's bookkeeping over workloads `W` with turns `T` (both ordered).
#[derive(Clone, Debug)]
pub struct Budget<W: Ord, T: Ord> {
    cap: Option<usize>,
    /// Rolling out, as last observed.
    moving: BTreeSet<W>,
    /// Granted a move not observed yet, with the generation it had when granted: an observation of a
    /// later generation shows the move.
    granted: BTreeMap<W, i64>,
    /// Waiting for a slot, in turn order; ranked, so that a place in line costs O(log n), not the
    /// length of the line.
    queue: RankedSet<(T, W)>,
    turns: BTreeMap<W, T>,
}

/// The answer to a request for a slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Move now (a slot is taken until it is observed healthy).
    Go,
    /// Wait: every slot is taken, or workloads with an earlier turn wait too.
    Wait(Waiting),
}

/// Where a waiting workload stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    /// 1 for the next in line.
    pub position: usize,
    pub moving: usize,
    pub cap: usize,
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "waiting for the cluster-wide rollout budget: {} of {} workloads moving, number {} in line",
            self.moving, self.cap, self.position
        )
    }
}

impl<W: Ord + Clone, T: Ord + Clone> Budget<W, T> {
    /// A budget of `cap` workloads moving at once; `None`: no cap (every request is granted and
    /// nothing is kept).
    pub fn new(cap: Option<usize>) -> Self {
        Self {
            cap,
            moving: BTreeSet::new(),
            granted: BTreeMap::new(),
            queue: RankedSet::new(),
            turns: BTreeMap::new(),
        }
    }

    pub fn cap(&self) -> Option<usize> {
        self.cap
    }

    /// Workloads moving now (observed, or granted and not observed yet).
    pub fn in_use(&self) -> usize {
        self.moving.len() + self.granted.len()
    }

    /// Workloads waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    /// Where `w` stands in line, if it waits.
    pub fn position(&self, w: &W) -> Option<Waiting> {
        let cap = self.cap?;
        let turn = self.turns.get(w)?;
        let ahead = self.queue.rank(&(turn.clone(), w.clone()));
        Some(Waiting {
            position: ahead + 1,
            moving: self.in_use(),
            cap,
        })
    }

    /// `w` was observed at `generation`, rolling out or not. Returns the waiting workloads whose turn
    /// came because a slot freed up.
    pub fn observe(&mut self, w: &W, generation: i64, rolling: bool) -> Vec<W> {
        if self.cap.is_none() {
            return Vec::new();
        }
        let shown = self.granted.get(w).is_some_and(|g| generation > *g);
        if shown {
            self.granted.remove(w);
        }
        // Granted and not shown yet, it already holds a slot: counting it twice would waste one.
        if rolling && !self.granted.contains_key(w) {
            self.moving.insert(w.clone());
        } else {
            self.moving.remove(w);
        }
        self.eligible()
    }

    /// `w` is gone: it neither moves nor waits. Returns the workloads whose turn came.
    pub fn forget(&mut self, w: &W) -> Vec<W> {
        if self.cap.is_none() {
            return Vec::new();
        }
        self.moving.remove(w);
        self.granted.remove(w);
        self.leave_queue(w);
        self.eligible()
    }

    /// `w` no longer wants to move (its sets changed back, it moved by other means): it leaves the
    /// line. Returns the workloads whose turn came.
    pub fn withdraw(&mut self, w: &W) -> Vec<W> {
        if self.cap.is_none() || !self.leave_queue(w) {
            return Vec::new();
        }
        self.eligible()
    }

    /// A granted move was not made (its patch failed): the slot is free again. Returns the workloads
    /// whose turn came.
    pub fn release(&mut self, w: &W) -> Vec<W> {
        if self.granted.remove(w).is_none() {
            return Vec::new();
        }
        self.eligible()
    }

    /// `w`, now at `generation`, asks to move for a change made at `turn`. A workload already moving
    /// goes on (it holds its slot); otherwise it joins the line (keeping the earlier of its turns) and
    /// goes when it is among the first in line for the free slots.
    pub fn request(&mut self, w: &W, turn: T, generation: i64) -> Admit {
        let Some(cap) = self.cap else {
            return Admit::Go;
        };
        if self.moving.contains(w) || self.granted.contains_key(w) {
            return Admit::Go;
        }
        let turn = match self.turns.get(w) {
            Some(held) if *held <= turn => held.clone(),
            _ => turn,
        };
        self.leave_queue(w);
        self.queue.insert((turn.clone(), w.clone()));
        self.turns.insert(w.clone(), turn.clone());
        let free = cap.saturating_sub(self.in_use());
        let ahead = self.queue.rank(&(turn.clone(), w.clone()));
        if ahead < free {
            self.leave_queue(w);
            self.granted.insert(w.clone(), generation);
            Admit::Go
        } else {
            Admit::Wait(Waiting {
                position: ahead + 1,
                moving: self.in_use(),
                cap,
            })
        }
    }

    /// The first waiting workloads, as many as there are free slots: those whose request would be
    /// granted now.
    pub fn eligible(&self) -> Vec<W> {
        let Some(cap) = self.cap else {
            return Vec::new();
        };
        let free = cap.saturating_sub(self.in_use());
        self.queue.iter().take(free).map(|(_, w)| w.clone()).collect()
    }

    fn leave_queue(&mut self, w: &W) -> bool {
        match self.turns.remove(w) {
            Some(turn) => self.queue.remove(&(turn, w.clone())),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(cap: usize) -> Budget<&'static str, u32> {
        Budget::new(Some(cap))
    }

    #[test]
    fn without_a_cap_every_move_goes_and_nothing_is_kept() {
        let mut b: Budget<&str, u32> = Budget::new(None);
        for w in ["a", "b", "c"] {
            assert_eq!(b.request(&w, 1, 1), Admit::Go);
        }
        assert_eq!((b.in_use(), b.waiting()), (0, 0));
        assert_eq!(b.position(&"a"), None);
    }

    #[test]
    fn slots_go_in_turn_order_and_free_up_when_a_move_is_seen_healthy() {
        let mut b = budget(2);
        assert_eq!(b.request(&"a", 1, 1), Admit::Go);
        assert_eq!(b.request(&"b", 1, 1), Admit::Go);
        let Admit::Wait(w) = b.request(&"c", 2, 1) else {
            panic!("the budget is full")
        };
        assert_eq!((w.position, w.moving, w.cap), (1, 2, 2));
        assert_eq!(
            w.to_string(),
            "waiting for the cluster-wide rollout budget: 2 of 2 workloads moving, number 1 in line"
        );
        // An earlier change that asks later still goes first.
        assert!(matches!(
            b.request(&"d", 0, 1),
            Admit::Wait(Waiting { position: 1, .. })
        ));
        assert_eq!(b.position(&"c").map(|w| w.position), Some(2));
        // "a"'s patch shows (a later generation), rolling: still moving.
        assert_eq!(b.observe(&"a", 2, true), Vec::<&str>::new());
        // ... then healthy: its slot goes to the first in line.
        assert_eq!(b.observe(&"a", 2, false), vec!["d"]);
        assert_eq!(
            b.request(&"c", 2, 1),
            Admit::Wait(Waiting {
                position: 2,
                moving: 1,
                cap: 2
            })
        );
        assert_eq!(b.request(&"d", 0, 1), Admit::Go);
        assert_eq!(b.in_use(), 2);
    }

    #[test]
    fn a_grant_holds_its_slot_until_an_observation_of_a_later_generation() {
        let mut b = budget(1);
        assert_eq!(b.request(&"a", 1, 5), Admit::Go);
        // An event from before the patch (same generation) does not free the slot.
        assert!(b.observe(&"a", 5, false).is_empty());
        assert_eq!(b.in_use(), 1);
        assert!(matches!(b.request(&"b", 1, 1), Admit::Wait(_)));
        // The patch seen, healthy at once (nothing to roll): the slot frees up.
        assert_eq!(b.observe(&"a", 6, false), vec!["b"]);
    }

    #[test]
    fn a_failed_patch_a_withdrawal_and_a_deletion_free_their_places() {
        let mut b = budget(1);
        assert_eq!(b.request(&"a", 1, 1), Admit::Go);
        assert!(matches!(b.request(&"b", 2, 1), Admit::Wait(_)));
        assert!(matches!(b.request(&"c", 3, 1), Admit::Wait(_)));
        assert_eq!(b.withdraw(&"b"), Vec::<&str>::new(), "no slot is free yet");
        assert_eq!(b.position(&"c").map(|w| w.position), Some(1));
        assert_eq!(b.release(&"a"), vec!["c"]);
        assert_eq!(b.forget(&"c"), Vec::<&str>::new());
        assert_eq!((b.in_use(), b.waiting()), (0, 0));
    }

    #[test]
    fn a_workload_already_rolling_keeps_going_and_its_turn_never_moves_back() {
        let mut b = budget(1);
        b.observe(&"a", 1, true);
        assert_eq!(b.request(&"a", 9, 1), Admit::Go, "it holds its slot already");
        assert!(matches!(b.request(&"b", 5, 1), Admit::Wait(_)));
        // Asking again with a later change keeps its earlier turn.
        assert!(matches!(
            b.request(&"c", 4, 1),
            Admit::Wait(Waiting { position: 1, .. })
        ));
        assert!(matches!(
            b.request(&"b", 7, 1),
            Admit::Wait(Waiting { position: 2, .. })
        ));
    }
}
