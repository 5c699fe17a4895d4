//! cmset's own writes, until their watch events come back: an event that shows exactly what cmset
//! wrote (the resourceVersion its write was answered with) brings no news to whoever wrote it, and to
//! the object's readers only what the writer says it does.
//!
//! A write's echo may reach the watch before its answer reaches the writer (they travel on different
//! connections), so a write is announced before it is sent ([`Echoes::begin`]): what the watch brings
//! of the object meanwhile is held back, and sent once the answer says which event was the echo
//! ([`Echoes::answered`]), or all of it when the write fails ([`Echoes::abandon`]). The index stays
//! current throughout; only the reconciles wait, for as long as the write takes.
//!
//! Written by the controllers' writes (through [`super::EchoGuard`]) and read by the watch of the
//! object's kind, which forgets an entry when its echo arrives, the object goes, or the kind lists
//! again (a list shows the latest version, never the one written).

use std::collections::HashMap;

use crate::engine::sparse::ShrinkIfSparse;

use super::{Key, Triggers};

/// Who a write's echo still concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Echo {
    /// The writer plans again (a set's controller after its own status write, a workload's after its
    /// own patch, a set after creating its revision). False unless a re-plan waits for the store to
    /// catch up with the write.
    pub writer: bool,
    /// The object's readers reconcile: the workloads that read a set whose status they decide from
    /// changed, or the readers of a revision just created.
    pub readers: bool,
}

#[derive(Debug)]
enum Awaited {
    /// Sent, not answered yet: the events that arrived meanwhile, each with what it triggered.
    InFlight(Vec<(Option<String>, Triggers)>),
    /// Answered at this resourceVersion; its echo has not arrived yet.
    Answered { resource_version: String, echo: Echo },
}

#[derive(Default)]
pub(super) struct Echoes {
    awaited: HashMap<(&'static str, Key), Awaited>,
}

/// What an event of an object cmset writes comes to.
pub(super) enum Arrival {
    /// Anyone's news: send what it triggers.
    News,
    /// The echo of a write answered before it arrived: it concerns only whom this names.
    Echo(Echo),
    /// A write of the object is under way: what it triggers is held until the write's answer.
    Held,
}

impl Echoes {
    /// cmset is about to write `key` of `kind`.
    pub(super) fn begin(&mut self, kind: &'static str, key: Key) {
        self.awaited.insert((kind, key), Awaited::InFlight(Vec::new()));
    }

    /// The write of `key` was answered at `resource_version`; its echo concerns `echo`. Returns what
    /// the events held meanwhile still trigger (the echo among them quietened by `quiet`).
    pub(super) fn answered(
        &mut self,
        kind: &'static str,
        key: Key,
        resource_version: Option<String>,
        echo: Echo,
        quiet: impl Fn(Echo, &mut Triggers),
    ) -> Vec<Triggers> {
        let held = match self.awaited.remove(&(kind, key.clone())) {
            Some(Awaited::InFlight(held)) => held,
            _ => Vec::new(),
        };
        let mut echoed = false;
        let released = held
            .into_iter()
            .map(|(version, mut out)| {
                if version.is_some() && version == resource_version {
                    echoed = true;
                    quiet(echo, &mut out);
                }
                out
            })
            .collect();
        if let (false, Some(resource_version)) = (echoed, resource_version) {
            self.awaited.insert(
                (kind, key),
                Awaited::Answered {
                    resource_version,
                    echo,
                },
            );
        }
        released
    }

    /// The write of `key` failed, or was not sent: what arrived meanwhile is news.
    pub(super) fn abandon(&mut self, kind: &'static str, key: &Key) -> Vec<Triggers> {
        match self.awaited.remove(&(kind, key.clone())) {
            Some(Awaited::InFlight(held)) => held.into_iter().map(|(_, out)| out).collect(),
            Some(answered) => {
                self.awaited.insert((kind, key.clone()), answered);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Whether a write of `key` is under way or its echo awaited.
    pub(super) fn is_awaited(&self, kind: &'static str, key: &Key) -> bool {
        self.awaited.contains_key(&(kind, key.clone()))
    }

    /// The writer of `key` waits for the store to catch up with its write: the echo wakes it.
    /// Whether a write is awaited at all (if not, the store has caught up already).
    pub(super) fn wake_writer(&mut self, kind: &'static str, key: &Key) -> bool {
        match self.awaited.get_mut(&(kind, key.clone())) {
            Some(Awaited::Answered { echo, .. }) => {
                echo.writer = true;
                true
            }
            Some(Awaited::InFlight(_)) => true,
            None => false,
        }
    }

    /// An event of `key` at `resource_version` arrived, triggering `out`: whether that is news, an
    /// echo, or held until a write under way is answered (then `out` is kept here, and left empty).
    pub(super) fn arrived(
        &mut self,
        kind: &'static str,
        key: &Key,
        resource_version: Option<&str>,
        out: &mut Triggers,
    ) -> Arrival {
        let slot = (kind, key.clone());
        match self.awaited.get_mut(&slot) {
            None => Arrival::News,
            Some(Awaited::InFlight(held)) => {
                held.push((resource_version.map(str::to_string), std::mem::take(out)));
                Arrival::Held
            }
            Some(Awaited::Answered {
                resource_version: expected,
                echo,
            }) => {
                // An event of an earlier version leaves the entry for the echo still to come.
                if Some(expected.as_str()) != resource_version {
                    return Arrival::News;
                }
                let echo = *echo;
                self.awaited.remove(&slot);
                // A burst's writes come and go: its table does not stay at the burst's size.
                self.awaited.shrink_if_sparse();
                Arrival::Echo(echo)
            }
        }
    }

    /// `key` went, or its kind lists again: no echo of it is coming. What a write under way held back
    /// is returned, to be sent.
    pub(super) fn forget(&mut self, kind: &'static str, key: &Key) -> Vec<Triggers> {
        let removed = self.awaited.remove(&(kind, key.clone()));
        self.awaited.shrink_if_sparse();
        match removed {
            Some(Awaited::InFlight(held)) => held.into_iter().map(|(_, out)| out).collect(),
            _ => Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.awaited.len()
    }
}
