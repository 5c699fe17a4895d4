//! cmset's own writes, until their watch events come back: an event that shows exactly what cmset
//! wrote (the resourceVersion its write was answered with) brings no news to whoever wrote it, and to
//! the object's readers only what the writer says it does.
//!
//! Written by the controllers' writes ([`super::Index::expect_echo`]) and read once by the watch of
//! the object's kind, which forgets the entry when its echo arrives, the object goes, or the kind lists
//! again (a list shows the latest version, never the one written).

use std::collections::HashMap;

use super::Key;

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
struct Expected {
    resource_version: String,
    echo: Echo,
}

#[derive(Default)]
pub(super) struct Echoes {
    expected: HashMap<(&'static str, Key), Expected>,
}

impl Echoes {
    /// cmset wrote `key` of `kind`, answered at `resource_version`: its echo concerns `echo`.
    pub(super) fn expect(&mut self, kind: &'static str, key: Key, resource_version: String, echo: Echo) {
        self.expected.insert(
            (kind, key),
            Expected {
                resource_version,
                echo,
            },
        );
    }

    /// The writer of `key` waits for the store to catch up with its write: the echo wakes it.
    /// Whether a write is awaited at all (if not, the store has caught up already).
    pub(super) fn wake_writer(&mut self, kind: &'static str, key: &Key) -> bool {
        match self.expected.get_mut(&(kind, key.clone())) {
            Some(expected) => {
                expected.echo.writer = true;
                true
            }
            None => false,
        }
    }

    /// An event of `key` at `resource_version` arrived: who it concerns if it is the echo of cmset's
    /// write (`None`: it is anyone's news). An event of an earlier version leaves the entry for the
    /// echo still to come.
    pub(super) fn arrived(
        &mut self,
        kind: &'static str,
        key: &Key,
        resource_version: Option<&str>,
    ) -> Option<Echo> {
        let slot = (kind, key.clone());
        let expected = self.expected.get(&slot)?;
        if Some(expected.resource_version.as_str()) != resource_version {
            return None;
        }
        self.expected.remove(&slot).map(|e| e.echo)
    }

    /// `key` went, or its kind lists again: no echo of it is coming.
    pub(super) fn forget(&mut self, kind: &'static str, key: &Key) {
        self.expected.remove(&(kind, key.clone()));
    }

    pub(super) fn len(&self) -> usize {
        self.expected.len()
    }
}
