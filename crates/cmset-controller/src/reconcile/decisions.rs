//! Gathers what the index knows of the sets one workload reads, and asks the core's one decision
//! ([`cmset_core::rollout::decide`]). The workload controller (on the leader) and the admission webhook (on
//! every replica) both come through here, so they decide from the same observations the same way.
//!
//! Everything is looked up by key: the sets the workload's names can refer to, their facts, their
//! revisions and the lowest wave of their readers. Nothing else in the namespace is read.

use std::time::{Duration, Instant};

use cmset_core::rollout::decide::{self, Identity, Observed, Undecided};
use cmset_core::rollout::pinning::SetTarget;
use cmset_core::rollout::window_hold;
use cmset_core::workloads::health::Wave;
use cmset_core::workloads::observe::{RevisionView, WorkloadView};

use crate::engine::index::{Index, SetFacts, SetId, SourceLookup};
use crate::engine::stores::{AnySet, Stores};

/// What is known of one set a workload reads.
struct Entry {
    set: AnySet,
    facts: SetFacts,
    identity: Held,
    revisions: Vec<RevisionView>,
    lowest_wave: i32,
    /// The change windows hold the set's moves now, before any override.
    window_held: bool,
    /// The revision whose rollout a WindowOverride lets through.
    window_override: Option<String>,
}

/// The content identity as the index holds it.
enum Held {
    Known(String),
    Invalid,
    Unread,
    /// Only the leader reads sources: a standby decides a source-mode set by what its status records.
    Recorded,
}

/// The observations one decision is made from.
pub struct Gathered {
    entries: Vec<Entry>,
}

impl Gathered {
    /// Looks up every set `workload`'s names can refer to in `namespace`. A set the index knows but the
    /// store does not hold yet (the two are fed by the same event, one a moment after the other) makes
    /// the decision wait. `windows`: whether the change windows may hold a move (not for the first
    /// start of a workload being created, but for a Job a CronJob starts: see
    /// [`cmset_core::admission::windows_apply`]).
    pub fn of(
        index: &Index,
        stores: &Stores,
        namespace: &str,
        workload: &WorkloadView,
        windows: bool,
    ) -> Result<Self, Undecided> {
        let now = jiff::Timestamp::now();
        let sets = index.sets_read(namespace, &workload.referenced());
        let mut entries = Vec::with_capacity(sets.len());
        for (id, facts) in sets {
            let set = stores
                .set(&id)
                .ok_or_else(|| Undecided::Set(format!("{} {}", id.0, id.1.name)))?;
            let identity = identity(index, &id, &facts);
            let revisions = index.revisions(id.0, namespace, &facts.label);
            // Without a wave of its own a workload is in the lowest one: no need to look at the others.
            let lowest_wave = match workload.wave {
                Wave::Number(0) => 0,
                _ => index.lowest_wave(&id),
            };
            let (window_held, window_override) = if windows {
                let set = set.as_set();
                let state = window_hold::verdict(set, &index.cluster_windows_for(set), now)
                    .with_break_glass(index.window_override(set));
                state.gate_inputs(set.status().and_then(|s| s.rollout.as_ref()))
            } else {
                (false, None)
            };
            entries.push(Entry {
                set,
                facts,
                identity,
                revisions,
                lowest_wave,
                window_held,
                window_override,
            });
        }
        Ok(Self { entries })
    }

    fn observed(&self) -> Vec<Observed<'_>> {
        self.entries
            .iter()
            .map(|e| Observed {
                set: e.set.as_set(),
                identity_generation: e.facts.generation,
                identity: match &e.identity {
                    Held::Known(identity) => Identity::Known(identity),
                    Held::Invalid => Identity::Invalid,
                    Held::Recorded => Identity::Recorded,
                    Held::Unread => Identity::Unread,
                },
                revisions: &e.revisions,
                lowest_wave: e.lowest_wave,
                window_held: e.window_held,
                window_override: e.window_override.as_deref(),
            })
            .collect()
    }

    /// The one decision: where each of `workload`'s references to these sets should point now.
    pub fn decide(&self, workload: &WorkloadView) -> Result<Vec<SetTarget>, Undecided> {
        decide::targets(&self.observed(), workload)
    }

    /// The turn of a move to `targets` in the rollout budget's line (see [`crate::engine::rollout_budget`]):
    /// when the newest of the revisions it moves to was created, in Unix seconds, as the API records
    /// it, so that every replica, before and after a restart, puts the same move in the same place.
    /// A revision not seen created yet counts as made at `now`. A change back to earlier content
    /// keeps that content's first turn and goes ahead, as a rollback would.
    pub fn turn(&self, targets: &[SetTarget], now: i64) -> i64 {
        targets
            .iter()
            .map(|t| {
                self.entries
                    .iter()
                    .flat_map(|e| e.revisions.iter())
                    .find(|r| r.name == t.current)
                    .and_then(|r| r.created)
                    .unwrap_or(now)
            })
            .max()
            .unwrap_or(now)
    }

    /// How long a workload reading several sets still waits for more changes of the same apply.
    pub fn gathering_left(&self, window: Duration) -> Option<Duration> {
        let now = Instant::now();
        let ago: Vec<Duration> = self
            .entries
            .iter()
            .map(|e| now.saturating_duration_since(e.facts.changed_at))
            .collect();
        decide::gathering_left(&ago, window)
    }
}

/// The content identity the decision reads: the spec's own, or in source mode the source's as last
/// read at the version the watch last saw (on the leader; see [`Held::Recorded`]).
fn identity(index: &Index, id: &SetId, facts: &SetFacts) -> Held {
    if !facts.valid {
        return Held::Invalid;
    }
    match &facts.source {
        Some(source) => match index.source(id.0, &id.1.namespace, source) {
            SourceLookup::Fresh(Some(identity)) => Held::Known(identity),
            // A missing source leaves workloads where they are, as an invalid spec does.
            SourceLookup::Fresh(None) => Held::Invalid,
            // The leader reads it (and its read wakes whoever waits); a standby never does. Its
            // admissions follow the status, which the leader updates moments after a source edit: an
            // admission in between keeps the previous revision and the leader moves it once.
            SourceLookup::Stale if !index.is_leading() => Held::Recorded,
            SourceLookup::Stale => Held::Unread,
        },
        None => facts.identity.clone().map_or(Held::Invalid, Held::Known),
    }
}
