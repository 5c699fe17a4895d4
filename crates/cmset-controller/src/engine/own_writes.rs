//! A set's status, written by this process: one conversation from the plan's status to the API
//! server's answer. [`Context::own_status`] answers "write this unless it is already written, and
//! remember it as mine" in one place:
//!
//! - whether the status is what this process already wrote for the set as the store still shows it
//!   ([`OwnStatusWrite::written_already`]): the store has not caught up with that write, and writing
//!   it again would change nothing;
//! - not to send it at all while the store has not seen this process's last status write of the set
//!   ([`Context::behind_own_write`]): a plan from that store started from older state than the API
//!   server holds. That write's echo, which the index would otherwise keep from its writer, then
//!   plans the set again ([`Index::wake_writer_on_echo`]);
//! - otherwise, to announce the write to the index before it is sent (what the set's watch brings
//!   meanwhile waits, see [`Index::writing`]), send it through [`Context::write`], remember what was
//!   written and the version it was answered with ([`Context::remember_written`], kept in
//!   [`SetMemory`]), and tell the index whom its echo concerns: never its writer, and the set's
//!   readers only when it moved what their decisions read.
//!
//! The memory is bounded and per set ([`SetMemory`]); the echoes are the index's
//! (`index/echoes.rs`). Writes of revisions and workloads announce their echoes to the index
//! directly: they remember nothing.
//!
//! [`Index::wake_writer_on_echo`]: crate::engine::index::Index::wake_writer_on_echo
//! [`Index::writing`]: crate::engine::index::Index::writing
//! [`SetMemory`]: crate::engine::memory::SetMemory

use std::future::Future;

use cmset_api::ConfigMapSetStatus;
use cmset_core::set::SetRef;
use kube::{Resource, ResourceExt};
use tracing::debug;

use crate::engine::context::Context;
use crate::engine::index::{Echo, SetId};

/// This process's write of `status` to a set, as the store shows the set (see the module's doc).
#[must_use = "ask whether it is written already, or send it"]
pub struct OwnStatusWrite<'a> {
    ctx: &'a Context,
    id: &'a SetId,
    set: SetRef<'a>,
    status: &'a ConfigMapSetStatus,
}

/// What came of sending a status write.
#[derive(Debug)]
pub enum Sent<T> {
    /// Written: the API server's answer.
    Written(T),
    /// Not sent: the store has not yet seen the last status this process wrote for the set. The
    /// store's watch event of that write plans the set again.
    StoreBehind,
}

impl Context {
    /// The write of `status` to `set` (`id`), as the store shows it.
    pub fn own_status<'a>(
        &'a self,
        id: &'a SetId,
        set: SetRef<'a>,
        status: &'a ConfigMapSetStatus,
    ) -> OwnStatusWrite<'a> {
        OwnStatusWrite {
            ctx: self,
            id,
            set,
            status,
        }
    }

    /// Whether the store, which shows `set`, has not yet seen the last status this process wrote for
    /// it (see [`SetMemory::behind_own_write`]): planning from it would start from older state.
    ///
    /// [`SetMemory::behind_own_write`]: crate::engine::memory::SetMemory::behind_own_write
    pub fn behind_own_write(&self, key: &SetId, set: SetRef<'_>) -> bool {
        self.memory()
            .behind_own_write(key, &set.metadata().resource_version)
    }

    /// Remembers that `status` was written for `set` as the store shows it, and that the API server
    /// answered with the resourceVersion `answered`. (Public for the scenario tests, which prime the
    /// memory with it.)
    pub fn remember_written(
        &self,
        key: &SetId,
        set: SetRef<'_>,
        status: &ConfigMapSetStatus,
        answered: Option<String>,
    ) {
        self.memory().remember_written(
            key,
            set.metadata().resource_version.clone(),
            answered,
            status,
            |s| self.stores.set(s).is_some(),
        );
    }
}

impl<'a> OwnStatusWrite<'a> {
    /// The status to write.
    pub fn status(&self) -> &'a ConfigMapSetStatus {
        self.status
    }

    /// Whether the status is what this process already wrote for the set as the store still shows
    /// it: the store has not caught up with that write yet, and writing it again would change
    /// nothing. A set changed by anyone since (another resourceVersion) is written to as usual.
    pub fn written_already(&self) -> bool {
        self.ctx
            .memory()
            .wrote_already(self.id, &self.set.metadata().resource_version, self.status)
    }

    /// Sends the write `request` makes of the status (operation `write_status`), unless the store is
    /// behind this process's last status write of the set: then nothing is made or sent, and that
    /// write's echo wakes the set's controller. Once answered, the status is remembered as this
    /// process's, and its echo concerns the set's readers only when it moved what they decide from.
    pub async fn send<T, F>(self, request: impl FnOnce() -> F) -> kube::Result<Sent<T>>
    where
        T: Resource,
        F: Future<Output = kube::Result<T>>,
    {
        let (kind, key) = (self.id.0.as_str(), &self.id.1);
        if self.ctx.behind_own_write(self.id, self.set) {
            // The store's catching up with that write plans again at once.
            self.ctx.index.wake_writer_on_echo(kind, key);
            debug!(
                "status not written: the store has not seen the last status written yet; planning again once it has"
            );
            return Ok(Sent::StoreBehind);
        }
        let request = request();
        let writing = self.ctx.index.writing(kind, key.clone());
        let answer = self.ctx.write("write_status", request).await?;
        let version = answer.resource_version();
        self.ctx
            .remember_written(self.id, self.set, self.status, version.clone());
        // Its echo is no news to its writer, and to the readers only when it moved what their
        // decisions read (a wave opened, a pin, a new current revision) or some still wait.
        let previous = self.set.status().cloned().unwrap_or_default();
        let echo = Echo {
            writer: false,
            readers: cmset_core::rollout::decide::status_wakes_readers(&previous, self.status),
        };
        writing.answered(version, echo);
        Ok(Sent::Written(answer))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::{Arc, RwLock};

    use cmset_api::{ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate};
    use cmset_core::set::SetKind;
    use kube::Client;
    use kube::runtime::{reflector, watcher};

    use super::*;
    use crate::engine::context::system_clock;
    use crate::engine::index::{Index, Key};
    use crate::engine::stores::Stores;
    use crate::platform::metrics::{Metrics, WriteLabel};

    /// A context whose client is never called: the writes below answer by themselves.
    fn context() -> Context {
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let index = Index::new(None);
        index.expect("ConfigMapSet");
        index.settle();
        let stores = Stores {
            sets: reflector::store::<ConfigMapSet>().0,
            secret_sets: None,
            workloads: Arc::new(RwLock::new(HashMap::new())),
            templates: None,
        };
        Context::new(
            Client::new(service, "team"),
            Arc::new(index),
            stores,
            Arc::new(Metrics::default()),
            system_clock(),
            None,
        )
    }

    /// ConfigMapSet `app` at resourceVersion `version`, with `status`.
    fn app(version: &str, status: Option<ConfigMapSetStatus>) -> ConfigMapSet {
        let mut set = ConfigMapSet::new(
            "app",
            ConfigMapSetSpec {
                template: ConfigMapTemplate {
                    data: Some(BTreeMap::from([("K".to_string(), "v".to_string())])),
                    ..ConfigMapTemplate::default()
                },
                revision_history_limit: 10,
                ..ConfigMapSetSpec::default()
            },
        );
        set.metadata.namespace = Some("team".into());
        set.metadata.uid = Some("uid-app".into());
        set.metadata.generation = Some(1);
        set.metadata.resource_version = Some(version.into());
        set.status = status;
        set
    }

    fn status(revision: i64) -> ConfigMapSetStatus {
        ConfigMapSetStatus {
            observed_generation: Some(1),
            revision: Some(revision),
            ..ConfigMapSetStatus::default()
        }
    }

    #[tokio::test]
    async fn a_status_written_is_mine_until_its_echo_and_a_store_behind_it_writes_nothing() {
        let ctx = context();
        let id: SetId = (SetKind::ConfigMapSet, Key::new("team", "app"));
        let stored = app("41", None);
        ctx.index.handle(&watcher::Event::Apply(stored.clone()));
        let first = status(1);
        let own = ctx.own_status(&id, (&stored).into(), &first);
        assert!(!own.written_already(), "nothing written yet");
        let answer = app("42", Some(first.clone()));
        let sent = own
            .send(|| {
                let answer = answer.clone();
                async move { Ok(answer) }
            })
            .await
            .unwrap();
        assert!(matches!(sent, Sent::Written(ref a) if a.metadata.resource_version.as_deref() == Some("42")));
        let sent_count = || {
            ctx.metrics
                .writes
                .get_or_create(&WriteLabel {
                    operation: "write_status",
                })
                .get()
        };
        assert_eq!(sent_count(), 1);
        // The store still shows 41: the same status is written already, and any other one waits.
        assert!(ctx.own_status(&id, (&stored).into(), &first).written_already());
        assert!(ctx.behind_own_write(&id, (&stored).into()));
        let second = status(2);
        let sent = ctx
            .own_status(&id, (&stored).into(), &second)
            .send(|| async {
                unreachable!("no request is made from a store behind its own write")
                    as kube::Result<ConfigMapSet>
            })
            .await
            .unwrap();
        assert!(matches!(sent, Sent::StoreBehind));
        assert_eq!(sent_count(), 1, "nothing sent");
        // The echo of the write wakes its writer, which waits for it; no one else.
        let out = ctx.index.handle(&watcher::Event::Apply(answer.clone()));
        assert!(out.sets.contains(&id), "{out:?}");
        assert!(out.workloads.is_empty(), "{out:?}");
        // From the store that shows the write, the next status is written.
        assert!(!ctx.behind_own_write(&id, (&answer).into()));
        assert!(!ctx.own_status(&id, (&answer).into(), &second).written_already());
    }

    #[tokio::test]
    async fn a_failed_write_leaves_nothing_behind_and_a_written_one_s_echo_wakes_no_one() {
        let ctx = context();
        let id: SetId = (SetKind::ConfigMapSet, Key::new("team", "app"));
        let stored = app("41", None);
        ctx.index.handle(&watcher::Event::Apply(stored.clone()));
        // A failed write remembers nothing and awaits no echo: what the watch brings next is news.
        let failed = ctx
            .own_status(&id, (&stored).into(), &status(1))
            .send(|| async { Err::<ConfigMapSet, _>(crate::platform::leader::TermEnded::error()) })
            .await;
        assert!(failed.is_err());
        assert!(!ctx.behind_own_write(&id, (&stored).into()));
        assert!(
            !ctx.own_status(&id, (&stored).into(), &status(1))
                .written_already()
        );
        let stored = app("42", Some(status(9)));
        let out = ctx.index.handle(&watcher::Event::Apply(stored.clone()));
        assert!(out.own, "{out:?}");
        // A written one's echo is no news to its writer, nor (this status moved nothing they decide
        // from) to the set's readers.
        let answer = app("43", Some(status(1)));
        let sent = ctx
            .own_status(&id, (&stored).into(), &status(1))
            .send(|| {
                let answer = answer.clone();
                async move { Ok(answer) }
            })
            .await
            .unwrap();
        assert!(matches!(sent, Sent::Written(_)));
        let out = ctx.index.handle(&watcher::Event::Apply(answer));
        assert!(
            !out.own && !out.sets.contains(&id) && out.workloads.is_empty(),
            "{out:?}"
        );
    }
}
