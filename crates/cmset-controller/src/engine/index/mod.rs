//! The operator's index: what each reconcile needs, kept current by watch events, looked up by key.
//!
//! Every watched kind implements [`Indexed`] once (in `kinds/`): how one of its objects enters and
//! leaves the index, and which reconciles that change must trigger. Reconcilers and mappers then
//! answer their questions with map lookups whose cost grows with the objects that matter to one set or
//! workload, never with everything in the namespace:
//!
//! - set → its revisions ([`Index::revisions`]);
//! - set → the workloads and history objects (ReplicaSets, ControllerRevisions) that name it or one of
//!   its revisions ([`Index::readers`]), through [`naming::set_candidates`], so a ConfigMap name maps to
//!   its set in O(1);
//! - workload → the sets it reads ([`Index::sets_read`]);
//! - set → facts computed once per spec change ([`SetFacts`]: the content identity, whether the spec is
//!   valid, when it last changed), so a workload reconcile never hashes a set's content.
//!
//! Only keys and small views live here. Sets and workloads themselves stay in kube's reflector stores
//! (shared `Arc`s, which the controllers need anyway); revisions and history objects have no store at
//! all: the index keeps the few names a decision reads and drops the rest of the object.
//!
//! The [`State`] behind the lock is made of parts, each in its own file with its own writer:
//!
//! | part | holds | written by |
//! |---|---|---|
//! | `sets.rs` | set facts, tracked rollouts | the set watches (and a source read, for `changed_at`) |
//! | `revisions.rs` | revisions by label | the ConfigMap and Secret watches |
//! | `graph.rs` | reader names, readers by set, waves and health, history views | the reader kinds' watches |
//! | `sources.rs` | which sets version a source; versions seen; reads | set watches; ConfigMap/Secret watches; the set controller |
//! | `relist.rs` | keys seen during a list; kinds listed; kinds that cannot list now | [`Index::handle`], [`Index::unavailable`] |
//! | `templates.rs` | which sets name which AnalysisTemplate | the set watches |
//! | `overrides.rs` | the WindowOverrides, by the set they name | the WindowOverride watch |
//!
//! `triggers.rs` carries what a change asks to reconcile to the controllers. This file holds the
//! handle: the lock, whether this replica leads, change notifications, and the queries.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;

use cmset_core::revisions::naming;
use cmset_core::rollout::window_hold::{ClusterView, ClusterWindows, UnknownCause, WindowsUnknown};
use cmset_core::set::SetKind;
use cmset_core::workloads::observe::{HistoryObject, RefNames, RevisionView, WorkloadKind};
use cmset_core::workloads::refs::Referenced;
use kube::Resource;
use kube::runtime::watcher;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::engine::rollout_budget::{RolloutBudget, WorkloadId};
use crate::engine::stored_workload::StoredWorkload;
use crate::platform::metrics::{WatchEventLabels, WindowsUnknownLabels};

mod echoes;
mod graph;
mod kinds;
mod overrides;
mod relist;
mod revisions;
mod sets;
mod sources;
mod templates;
#[cfg(test)]
mod tests;
mod triggers;

pub use echoes::Echo;
pub use graph::ReaderKind;
pub use kinds::{Indexed, workloads};
pub use sets::SetFacts;
pub use sources::SourceLookup;
pub use triggers::{TriggerReceivers, TriggerSenders, Triggers, WorkloadQueue, trigger_channels};

/// An object's namespace and name. Boxed strings, not `String`s: a key never grows, and the index holds
/// about ten per set in its tables, each 16 bytes smaller this way (341 B per set by
/// `examples/index_footprint.rs`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub namespace: Box<str>,
    pub name: Box<str>,
}

impl Key {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    fn of<K: Resource>(obj: &K) -> Option<Self> {
        Some(Self::new(
            obj.meta().namespace.as_deref()?,
            obj.meta().name.as_deref()?,
        ))
    }
}

/// The name of the AnalysisTemplate watch in the relist bookkeeping ([`Index::expect`]).
pub const TEMPLATES: &str = "AnalysisTemplate";
/// The name of the ChangeWindow watch in the relist bookkeeping.
pub const WINDOWS: &str = "ChangeWindow";
/// The name of the WindowOverride watch in the relist bookkeeping.
pub const OVERRIDES: &str = "WindowOverride";

/// A set of either kind, by key: a ConfigMapSet and a SecretSet may share a name.
pub type SetId = (SetKind, Key);

/// What reads one set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Readers {
    pub workloads: Vec<(WorkloadKind, String)>,
    pub history: Vec<HistoryObject>,
}

/// Everything indexed, for all namespaces in scope: one part per seam (see the table above). A kind's
/// [`Indexed`] impl writes its own parts through their methods and only reads the others.
#[derive(Default)]
pub struct State {
    sets: sets::Sets,
    revisions: revisions::Revisions,
    graph: graph::Graph,
    sources: sources::Sources,
    relist: relist::Relist,
    templates: templates::Templates,
    overrides: overrides::Overrides,
    echoes: echoes::Echoes,
    /// The cluster-wide rollout budget, when one is set: fed the workloads' progress (see
    /// [`crate::engine::rollout_budget`]).
    budget: Option<Arc<RolloutBudget>>,
}

/// The index of one scope, shared by its watches (writers) and its readers: the reconcilers on the
/// leader, and the admission webhook on every replica.
pub struct Index {
    state: RwLock<State>,
    senders: Option<TriggerSenders>,
    /// Whether triggered reconciles are sent: only once this replica leads. A standby keeps its index
    /// warm and sends nothing.
    leading: AtomicBool,
    /// Counts every change applied, so that a reader can wait for the next one (admission waiting for
    /// a set created moments before to get its revision).
    changes: tokio::sync::watch::Sender<u64>,
    /// Told of every set deleted (the leader drops the set's metric series).
    set_gone: RwLock<Option<SetGone>>,
    /// Where every watch event is counted, by kind (`cmset_watch_events_total`), once set.
    watch_events: OnceLock<WatchEvents>,
    /// The cluster's ChangeWindows as this replica's own watch sees them, parsed once per change of
    /// one of them (they are few, and every decision to move a workload reads them). A standby answers
    /// admission from its own view, never the leader's.
    cluster_windows: RwLock<WindowsSeen>,
    /// Where this index counts itself while it does not know the cluster's windows
    /// (`cmset_change_windows_unknown`), once set.
    windows_unknown_gauge: OnceLock<WindowsUnknownGauge>,
}

/// What this replica's ChangeWindow watch has seen.
#[derive(Clone, Debug, Default)]
enum WindowsSeen {
    /// No watch: cluster windows are off (`--change-windows=false`), so none applies.
    #[default]
    NotWatched,
    /// Watched, and not listed yet: moves wait (the watch reports it after a while).
    Pending,
    /// Listed: these are the cluster's windows (none when the ChangeWindow CRD is absent).
    Listed(Arc<Vec<ClusterWindows>>),
    /// Cannot be listed now: any freeze may be in force, so moves wait.
    Unknown(WindowsUnknown),
}

impl WindowsSeen {
    fn unknown(&self) -> Option<WindowsUnknown> {
        match self {
            Self::NotWatched | Self::Listed(_) => None,
            Self::Pending => Some(WindowsUnknown {
                cause: UnknownCause::NotListed,
                detail: "their first list has not answered yet".to_string(),
            }),
            Self::Unknown(unknown) => Some(unknown.clone()),
        }
    }
}

/// The gauge of indexes that do not know the cluster's windows now, by cause.
pub type WindowsUnknownGauge = Family<WindowsUnknownLabels, Gauge>;

/// The counters of watch events, by kind and event.
pub type WatchEvents = Family<WatchEventLabels, Counter>;

/// What is told of a deleted set.
pub type SetGone = Arc<dyn Fn(&SetId) + Send + Sync>;

impl Index {
    /// An index sending what changes trigger to `senders` (none in tests that drive reconciles by
    /// hand). Each watch that feeds it says so ([`Index::expect`]).
    pub fn new(senders: Option<TriggerSenders>) -> Self {
        Self {
            state: RwLock::new(State::default()),
            senders,
            leading: AtomicBool::new(false),
            changes: tokio::sync::watch::Sender::new(0),
            set_gone: RwLock::new(None),
            watch_events: OnceLock::new(),
            cluster_windows: RwLock::default(),
            windows_unknown_gauge: OnceLock::new(),
        }
    }

    /// The set's break glass: the WindowOverrides that name it (this very object: its uid), and
    /// whether it carries the old annotation. A lookup by the set's key, never a scan.
    pub fn window_override(
        &self,
        set: cmset_core::set::SetRef<'_>,
    ) -> cmset_core::policy::break_glass::BreakGlass {
        let id: SetId = (set.kind(), Key::new(set.namespace(), set.name()));
        let named = self.read().overrides.for_set(&id);
        cmset_core::policy::break_glass::judge(set, &named)
    }

    /// Applies one event of the WindowOverride watch: the override is indexed under the set it names,
    /// and that set reconciles (an override created lets its rollout through at once). A list's end
    /// drops the overrides it did not hold (deleted while the watch was down), reconciling their sets.
    pub fn handle_override(&self, event: &watcher::Event<cmset_api::WindowOverride>) -> Triggers {
        use cmset_core::policy::break_glass::OverrideView;
        self.count(OVERRIDES, event);
        let mut out = Triggers::default();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    if let (Some(key), Some(view)) = (Key::of(o), OverrideView::of(o)) {
                        if matches!(event, watcher::Event::InitApply(_)) {
                            state.relist.seen(OVERRIDES, key.clone());
                        }
                        state.overrides.apply(&key.namespace, view, &mut out);
                    }
                }
                watcher::Event::Delete(o) => {
                    if let Some(key) = Key::of(o) {
                        state.overrides.remove(&key, &mut out);
                    }
                }
                watcher::Event::Init => state.relist.start(OVERRIDES),
                watcher::Event::InitDone => {
                    let seen = state.relist.done(OVERRIDES);
                    state.relist.available(OVERRIDES);
                    let gone: Vec<Key> = state
                        .overrides
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        state.overrides.remove(&key, &mut out);
                    }
                }
            }
        }
        self.changed();
        self.send(&out);
        out
    }

    /// The WindowOverride watch could not list, for `why` (the CRD not installed yet, or refused): it
    /// does not hold readiness, and what it indexed before stays. Without it no override counts, so
    /// the windows hold as they would anyway: nothing is let through that should not be.
    pub fn overrides_unavailable(&self, why: String) {
        self.write().relist.unavailable(OVERRIDES, why);
        self.changed();
    }

    /// Applies one event of the ChangeWindow watch: the windows are parsed again from `listed` (the
    /// watch's store, which already holds the change), and every set reconciles, since a window may
    /// hold or release any of them. A ChangeWindow that does not parse is left out, with a warning (the
    /// admission webhook refuses those; one can only slip in while the webhook is down).
    pub fn handle_change_window(
        &self,
        event: &watcher::Event<cmset_api::ChangeWindow>,
        listed: &[Arc<cmset_api::ChangeWindow>],
    ) -> Triggers {
        self.count(WINDOWS, event);
        let mut out = Triggers::default();
        match event {
            watcher::Event::Init => self.write().relist.start(WINDOWS),
            watcher::Event::InitApply(w) => {
                let name = w.metadata.name.clone().unwrap_or_default();
                self.write().relist.seen(WINDOWS, Key::new("", &name));
            }
            watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone => {
                if matches!(event, watcher::Event::InitDone) {
                    let mut state = self.write();
                    state.relist.done(WINDOWS);
                    state.relist.available(WINDOWS);
                }
                let parsed: Vec<ClusterWindows> = listed
                    .iter()
                    .filter_map(|w| match ClusterWindows::parse(w) {
                        Ok(parsed) => Some(parsed),
                        Err(problems) => {
                            let name = w.metadata.name.as_deref().unwrap_or_default();
                            let why = cmset_core::content::validate::summary(&problems);
                            tracing::warn!(changewindow = %name, problems = %why, "ignoring a ChangeWindow that does not parse");
                            None
                        }
                    })
                    .collect();
                self.see_windows(WindowsSeen::Listed(Arc::new(parsed)));
                self.read().sets.trigger_all(&mut out);
            }
        }
        self.changed();
        self.send(&out);
        out
    }

    /// A ChangeWindow watch feeds this index from now on: until it lists, the cluster's windows are
    /// unknown and moves wait.
    pub fn watch_windows(&self) {
        self.expect(WINDOWS);
        self.see_windows(WindowsSeen::Pending);
    }

    /// The ChangeWindow watch cannot list now (forbidden, failed, or no answer yet), and why: windows
    /// fail closed, so every set holds its moves and says why until a list succeeds. The sets are
    /// asked to reconcile when that is news (`None` when it is not); the watch keeps trying.
    pub fn windows_unavailable(&self, unknown: WindowsUnknown) -> Option<Triggers> {
        let news = self.write().relist.unavailable(WINDOWS, unknown.message());
        let was = self.see_windows(WindowsSeen::Unknown(unknown.clone()));
        if !news && was.unknown().as_ref() == Some(&unknown) {
            return None;
        }
        let mut out = Triggers::default();
        self.read().sets.trigger_all(&mut out);
        self.changed();
        self.send(&out);
        Some(out)
    }

    /// The first list of the ChangeWindow watch has not answered within the patience given to it:
    /// moves still wait, and now every set says why. (Nothing when it has answered meanwhile.)
    pub fn windows_not_listed_within(&self, patience: std::time::Duration) {
        let pending = matches!(
            *self.cluster_windows.read().unwrap_or_else(|e| e.into_inner()),
            WindowsSeen::Pending
        );
        if pending {
            let _ = self.windows_unavailable(WindowsUnknown {
                cause: UnknownCause::NotListed,
                detail: format!("their first list has not answered within {}s", patience.as_secs()),
            });
        }
    }

    /// The ChangeWindow watch's list answered 404: the CRD is not installed, so the cluster has no
    /// windows. (The watch keeps trying: a CRD installed later is listed then.)
    pub fn windows_absent(&self) -> Triggers {
        let was = self.see_windows(WindowsSeen::Listed(Arc::default()));
        {
            let mut state = self.write();
            state.relist.done(WINDOWS);
            state.relist.available(WINDOWS);
        }
        let mut out = Triggers::default();
        if was.unknown().is_some() {
            // The sets held for unknown windows move again.
            self.read().sets.trigger_all(&mut out);
        }
        self.changed();
        self.send(&out);
        out
    }

    /// Why the cluster's windows are unknown to this replica now, if they are.
    pub fn windows_unknown(&self) -> Option<WindowsUnknown> {
        self.cluster_windows
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .unknown()
    }

    /// The cluster's windows that apply to `set`, or why they are unknown.
    pub fn cluster_windows_for(&self, set: cmset_core::set::SetRef<'_>) -> ClusterView {
        let seen = self
            .cluster_windows
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(unknown) = seen.unknown() {
            return ClusterView::Unknown(unknown);
        }
        match seen {
            WindowsSeen::Listed(all) => {
                ClusterView::Known(cmset_core::rollout::window_hold::windows_for(set, &all))
            }
            _ => ClusterView::Known(Vec::new()),
        }
    }

    /// Replaces what is seen of the cluster's windows, and counts this index in the gauge of unknown
    /// windows under its new cause; returns what was seen before. (The gauge changes under the lock,
    /// so that it cannot miss or double a change made while counting begins.)
    fn see_windows(&self, seen: WindowsSeen) -> WindowsSeen {
        let cause = seen.unknown().map(|u| u.cause);
        let mut current = self.cluster_windows.write().unwrap_or_else(|e| e.into_inner());
        let was = std::mem::replace(&mut *current, seen);
        let was_cause = was.unknown().map(|u| u.cause);
        if let Some(gauge) = self.windows_unknown_gauge.get()
            && cause != was_cause
        {
            if let Some(was) = was_cause {
                gauge
                    .get_or_create(&WindowsUnknownLabels { cause: was.as_str() })
                    .dec();
            }
            if let Some(now) = cause {
                gauge
                    .get_or_create(&WindowsUnknownLabels { cause: now.as_str() })
                    .inc();
            }
        }
        was
    }

    /// From now on this index counts itself in `gauge` while it does not know the cluster's windows.
    /// (Set once; a second call is ignored.)
    pub fn count_windows_unknown(&self, gauge: WindowsUnknownGauge) {
        let current = self.cluster_windows.write().unwrap_or_else(|e| e.into_inner());
        if self.windows_unknown_gauge.set(gauge.clone()).is_ok()
            && let Some(unknown) = current.unknown()
        {
            gauge
                .get_or_create(&WindowsUnknownLabels {
                    cause: unknown.cause.as_str(),
                })
                .inc();
        }
    }

    /// From now on every watch event this index receives is counted in `counters`. (Set once, before
    /// the watches start; a second call is ignored.)
    pub fn count_watch_events(&self, counters: WatchEvents) {
        let _ = self.watch_events.set(counters);
    }

    fn count<O>(&self, kind: &'static str, event: &watcher::Event<O>) {
        let event = match event {
            watcher::Event::Apply(_) => "apply",
            watcher::Event::Delete(_) => "delete",
            watcher::Event::InitApply(_) => "listed",
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        if let Some(counters) = self.watch_events.get() {
            counters.get_or_create(&WatchEventLabels { kind, event }).inc();
        }
    }

    /// An index that feeds `budget` what the workload watches show.
    pub fn with_budget(self, budget: Option<Arc<RolloutBudget>>) -> Self {
        self.write().budget = budget;
        self
    }

    /// The cluster-wide rollout budget, if one is set.
    pub fn budget(&self) -> Option<Arc<RolloutBudget>> {
        self.read().budget.clone()
    }

    /// Wakes the workloads whose turn in the budget came (a slot freed up).
    pub fn wake(&self, workloads: Vec<WorkloadId>) {
        if workloads.is_empty() {
            return;
        }
        let out = Triggers {
            workloads: workloads.into_iter().collect(),
            ..Triggers::default()
        };
        self.send(&out);
    }

    /// Asks the sets `kind` `key` reads to reconcile: what it waits for changed, and their status
    /// says so.
    pub fn remind_sets(&self, kind: WorkloadKind, key: &Key) {
        let mut out = Triggers::default();
        {
            let state = self.read();
            state
                .graph
                .trigger_sets_read(ReaderKind::Workload(kind), key, &state.sets, &mut out);
        }
        self.send(&out);
    }

    /// Asks set `set` to reconcile: something it waits for outside the cluster came (a measurement).
    pub fn remind_set(&self, set: &SetId) {
        let out = Triggers {
            sets: [set.clone()].into(),
            ..Triggers::default()
        };
        self.send(&out);
    }

    /// Applies one event of the AnalysisTemplate watch (cluster-scoped, kept whole in its store): the
    /// sets that name a template created, changed or deleted reconcile. A list's end also triggers the
    /// sets naming a template it did not hold (deleted while the watch was down).
    pub fn handle_template(&self, event: &watcher::Event<cmset_api::AnalysisTemplate>) -> Triggers {
        const NAME: &str = TEMPLATES;
        let name_of = |t: &cmset_api::AnalysisTemplate| t.metadata.name.clone().unwrap_or_default();
        self.count(TEMPLATES, event);
        let mut out = Triggers::default();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            match event {
                watcher::Event::Apply(t) | watcher::Event::Delete(t) => {
                    state.templates.trigger_naming(&name_of(t), &mut out);
                }
                watcher::Event::Init => state.relist.start(NAME),
                watcher::Event::InitApply(t) => {
                    let name = name_of(t);
                    state.templates.trigger_naming(&name, &mut out);
                    state.relist.seen(NAME, Key::new("", &name));
                }
                watcher::Event::InitDone => {
                    let seen = state.relist.done(NAME);
                    let back = state.relist.available(NAME);
                    let unseen: Vec<String> = (state.templates.named())
                        .filter(|name| back || !seen.contains(&Key::new("", name)))
                        .map(str::to_string)
                        .collect();
                    for name in unseen {
                        state.templates.trigger_naming(&name, &mut out);
                    }
                }
            }
        }
        self.changed();
        self.send(&out);
        out
    }

    /// The AnalysisTemplate watch could not list, for `why`. It does not hold the replica's readiness
    /// nor any set without analysis: until its first list, the sets that name a template hold their
    /// analysis and say why (see [`Index::templates_unlisted`]); they are asked to reconcile.
    pub fn templates_unavailable(&self, why: String) {
        let mut out = Triggers::default();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            if !state.relist.unavailable(TEMPLATES, why) {
                return;
            }
            let named: Vec<String> = state.templates.named().map(str::to_string).collect();
            for name in named {
                state.templates.trigger_naming(&name, &mut out);
            }
        }
        self.changed();
        self.send(&out);
    }

    /// Why the AnalysisTemplates cannot be read, when their watch has never listed them and cannot
    /// now. (Once listed, a later refusal leaves the templates as last listed in use.)
    pub fn templates_unlisted(&self) -> Option<String> {
        self.read().relist.never_listed(TEMPLATES).map(str::to_string)
    }

    /// From now on the reconciles that changes trigger are sent (this replica leads).
    pub fn lead(&self) {
        self.leading.store(true, Ordering::SeqCst);
    }

    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// A receiver that is told of every change applied to the index from now on.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A panic while holding the lock leaves plain maps behind, still consistent per entry.
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watch event and sends the reconciles it triggers.
    pub fn handle<K: Indexed>(&self, event: &watcher::Event<K>) -> Triggers {
        let own = SetKind::parse(K::NAME).map(OwnTarget::Set);
        let out = self.apply(K::NAME, event, &kinds::Static::<K>::default(), own);
        if let watcher::Event::Delete(obj) = event
            && let Some(kind) = SetKind::ALL.into_iter().find(|k| k.as_str() == K::NAME)
            && let Some(key) = Key::of(obj)
            && let Some(gone) = self.set_gone.read().unwrap_or_else(|e| e.into_inner()).as_ref()
        {
            gone(&(kind, key));
        }
        out
    }

    /// From now on `gone` is told of every set deleted.
    pub fn on_set_gone(&self, gone: SetGone) {
        *self.set_gone.write().unwrap_or_else(|e| e.into_inner()) = Some(gone);
    }

    /// cmset is about to write `key`, an object of the watched kind `kind` (its [`Indexed::NAME`]):
    /// until the write is answered, what the watch brings of it waits (see `echoes.rs`). Tell the
    /// guard the answer ([`EchoGuard::answered`]); dropped unanswered (the write failed), it sends what
    /// waited.
    pub fn writing(&self, kind: &'static str, key: Key) -> EchoGuard<'_> {
        self.writing_as(kind, key, SetKind::parse(kind).map(OwnTarget::Set))
    }

    /// [`Index::writing`] of workload `key` of `kind`.
    pub fn writing_workload(&self, kind: WorkloadKind, key: Key) -> EchoGuard<'_> {
        self.writing_as(kind.as_str(), key, Some(OwnTarget::Workload(kind)))
    }

    fn writing_as(&self, kind: &'static str, key: Key, own: Option<OwnTarget>) -> EchoGuard<'_> {
        self.write().echoes.begin(kind, key.clone());
        EchoGuard {
            index: self,
            kind,
            key: Some(key),
            own,
        }
    }

    /// The writer of `key` of `kind` waits for the store to show its last write: that write's echo
    /// reconciles it after all. Whether such an echo is still to come.
    pub fn wake_writer_on_echo(&self, kind: &'static str, key: &Key) -> bool {
        self.write().echoes.wake_writer(kind, key)
    }

    /// Applies one watch event of the workload kind `kind` and sends the reconciles it triggers.
    pub fn handle_workload(&self, kind: WorkloadKind, event: &watcher::Event<StoredWorkload>) -> Triggers {
        self.apply(kind.as_str(), event, &kind, Some(OwnTarget::Workload(kind)))
    }

    fn apply<O: Resource>(
        &self,
        name: &'static str,
        event: &watcher::Event<O>,
        ops: &dyn kinds::Ops<O>,
        own: Option<OwnTarget>,
    ) -> Triggers {
        self.count(name, event);
        let mut out = Triggers::default();
        let mut released = Vec::new();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            match event {
                watcher::Event::Apply(obj) => {
                    if let Some(key) = Key::of(obj) {
                        ops.index(obj, &key, state, &mut out);
                        let version = obj.meta().resource_version.as_deref();
                        if state.echoes.is_awaited(name, &key) {
                            // Held or quietened, its own reconcile goes by the index's queues.
                            own_by_queue(own, &key, &mut out);
                        }
                        match state.echoes.arrived(name, &key, version, &mut out) {
                            echoes::Arrival::News | echoes::Arrival::Held => {}
                            echoes::Arrival::Echo(echo) => quiet_echo(name, own, &key, echo, &mut out),
                        }
                    }
                }
                watcher::Event::Delete(obj) => {
                    if let Some(key) = Key::of(obj) {
                        released.extend(state.echoes.forget(name, &key));
                        ops.unindex(&key, state, &mut out);
                    }
                }
                watcher::Event::Init => state.relist.start(name),
                watcher::Event::InitApply(obj) => {
                    if let Some(key) = Key::of(obj) {
                        released.extend(state.echoes.forget(name, &key));
                        ops.index(obj, &key, state, &mut out);
                        state.relist.seen(name, key);
                    }
                }
                watcher::Event::InitDone => {
                    let history_was_listed = state.relist.history_listed();
                    let seen = state.relist.done(name);
                    if !history_was_listed && state.relist.history_listed() {
                        // Every set planned without history until now: they prune now.
                        state.sets.trigger_all(&mut out);
                    }
                    for key in ops.keys(state) {
                        if !seen.contains(&key) {
                            ops.unindex(&key, state, &mut out);
                        }
                    }
                    if state.relist.available(name) {
                        // The sets that held for this kind plan again, from its fresh list.
                        state.sets.trigger_all(&mut out);
                    }
                }
            }
        }
        self.changed();
        self.send(&out);
        for held in &released {
            self.send(held);
        }
        out
    }

    /// The workload kind `kind` is no longer served (its CRD was removed): everything it named is
    /// dropped, as if each of its objects had been deleted, and its watch no longer counts.
    pub fn forget_workloads(&self, kind: WorkloadKind) -> Triggers {
        let mut out = Triggers::default();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            let ops: &dyn kinds::Ops<StoredWorkload> = &kind;
            for key in ops.keys(state) {
                ops.unindex(&key, state, &mut out);
            }
            state.relist.forget(kind.as_str());
        }
        self.changed();
        self.send(&out);
        out
    }

    /// The watch of workload kind `kind` cannot list or watch now (refused, or its list failed), for
    /// `why`: a refusal is not a removal. What it last listed stays indexed, budget slots included, and
    /// the sets it may read hold until its next full list (see [`Index::unobserved_readers`]); they are
    /// asked to reconcile, so that their status says why. `None` when that is no news (the same
    /// refusal again).
    pub fn unavailable(&self, kind: WorkloadKind, why: String) -> Option<Triggers> {
        let mut out = Triggers::default();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            if !state.relist.unavailable(kind.as_str(), why) {
                return None;
            }
            state.sets.trigger_all(&mut out);
        }
        self.changed();
        self.send(&out);
        Some(out)
    }

    /// The workload kinds that may read set `set` but cannot be listed or watched now, with why: one
    /// whose objects as last listed name the set, and one that never listed (any of its objects may).
    /// The set's readers as the index holds them may be stale or incomplete, so the set plans nothing
    /// from them: no wave opens, nothing is pruned.
    pub fn unobserved_readers(&self, set: &SetId) -> Vec<(String, String)> {
        let state = self.read();
        let mut unavailable = state.relist.unavailable_kinds().peekable();
        if unavailable.peek().is_none() {
            return Vec::new();
        }
        let readers = state.graph.readers(set).workloads;
        unavailable
            // Templates and ChangeWindows are no readers: the sets that need templates hold their
            // analysis only, and windows that cannot be listed hold moves only (see
            // `windows_unavailable`), so that the sets still say why.
            .filter(|(kind, ..)| *kind != TEMPLATES && *kind != WINDOWS)
            .filter(|(kind, _, listed)| !listed || readers.iter().any(|(k, _)| k.as_str() == *kind))
            .map(|(kind, why, _)| (kind.to_string(), why.to_string()))
            .collect()
    }

    /// A watch of `name` feeds the index from now on: until it has listed once, the index is not
    /// complete.
    pub fn expect(&self, name: &'static str) {
        self.write().relist.expect(name);
        self.changed();
    }

    /// Every watch the replica needs to serve has been started ([`Index::expect`]): once they have all
    /// listed, the index is ready. A watch started later (a kind installed afterwards) never makes it
    /// unready again.
    pub fn settle(&self) {
        self.write().relist.settle();
        // Every list may have ended already: settling alone can make the index ready.
        self.changed();
    }

    fn send(&self, out: &Triggers) {
        if let Some(senders) = self.senders.as_ref().filter(|_| self.is_leading()) {
            senders.send(out);
        }
    }

    /// Whether every watch needed at start-up has delivered its first full list: the replica can
    /// answer admission.
    pub fn is_ready(&self) -> bool {
        self.read().relist.is_ready()
    }

    /// Whether every watch running now has delivered its first full list: nothing in scope is
    /// missing from the index, so reconcilers may plan (and prune) from it.
    pub fn is_complete(&self) -> bool {
        self.read().relist.is_complete()
    }

    /// Whether every watch running now but the history kinds' has delivered its first full list: a set
    /// may plan its moves and status from the index (see [`Index::history_listed`] for the rest).
    pub fn is_complete_but_history(&self) -> bool {
        self.read().relist.is_complete_but_history()
    }

    /// Whether the history kinds (ReplicaSets, ControllerRevisions, Jobs), watched only once this replica
    /// leads, have each listed once: until then what the index holds of history is partial, so no set
    /// prunes, nor adds history's owner references. Their last first list triggers every set.
    pub fn history_listed(&self) -> bool {
        self.read().relist.history_listed()
    }

    /// Waits until `holds` holds of the index, checked after every change, for at most `timeout`;
    /// whether it held. A reconciler waiting for the first lists starts the moment they end rather
    /// than at its next poll.
    pub async fn wait_until(&self, timeout: std::time::Duration, holds: impl Fn(&Self) -> bool) -> bool {
        // Every reconcile asks: when it holds, no subscription and no timer.
        if holds(self) {
            return true;
        }
        // Subscribed before the next check, so that a change in between is not missed.
        let mut changes = self.changes();
        let until_holds = async {
            while !holds(self) {
                if changes.changed().await.is_err() {
                    // The index is being dropped: nothing will change any more.
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::time::timeout(timeout, until_holds).await.is_ok()
    }

    pub fn set_facts(&self, set: &SetId) -> Option<SetFacts> {
        self.read().sets.get(set).cloned()
    }

    /// The revisions labelled for the set of `kind` whose label value is `label`.
    pub fn revisions(&self, kind: SetKind, namespace: &str, label: &str) -> Vec<RevisionView> {
        self.read().revisions.labelled(kind, namespace, label)
    }

    /// The workloads and history objects that name set `set` or one of its revisions. (A reader is
    /// listed under every set its names could refer to; the planners look at the names themselves.)
    pub fn readers(&self, set: &SetId) -> Readers {
        self.read().graph.readers(set)
    }

    /// The lowest valid wave among the opted-in workloads that name set `set` or one of its revisions
    /// (0 when none has one).
    pub fn lowest_wave(&self, set: &SetId) -> i32 {
        self.read().graph.lowest_wave(set)
    }

    /// The existing sets that the ConfigMap and Secret names `names` refer to, with their facts.
    pub fn sets_read(&self, namespace: &str, names: &RefNames) -> Vec<(SetId, SetFacts)> {
        let state = self.read();
        graph::candidates(namespace, names)
            .into_iter()
            .filter_map(|set| {
                let facts = state.sets.get(&set)?.clone();
                Some((set, facts))
            })
            .collect()
    }

    /// Whether a set of `namespace` claims `name`, a name of objects of kind `of`: its bare name or a
    /// name of its revisions' form (see [`naming::set_candidates`]).
    pub fn claims(&self, namespace: &str, of: Referenced, name: &str) -> bool {
        let state = self.read();
        let kind = SetKind::of_revisions(of);
        naming::set_candidates(name).any(|set| state.sets.contains(&(kind, Key::new(namespace, set))))
    }

    /// What is known of the content of source `name` of the sets of `kind` in `namespace`.
    pub fn source(&self, kind: SetKind, namespace: &str, name: &str) -> SourceLookup {
        self.read()
            .sources
            .lookup(kind.revision_kind(), &Key::new(namespace, name))
    }

    /// Records what the set controller read of a source: its version and content identity (`None`:
    /// it does not exist). A read of a new version triggers the readers of the sets that version it: a
    /// workload may have waited for it (see `workload_controller`), and the content may have changed,
    /// in which case those sets also count as changed now.
    pub fn record_source(
        &self,
        kind: SetKind,
        namespace: &str,
        name: &str,
        version: Option<String>,
        identity: Option<String>,
    ) -> Triggers {
        let mut out = Triggers::default();
        {
            let mut guard = self.write();
            let state = &mut *guard;
            let source = Key::new(namespace, name);
            let Some(read) = state.sources.record(kind, &source, version, identity) else {
                return out;
            };
            let now = Instant::now();
            for id in read.sets {
                if read.content_changed {
                    state.sets.content_changed(&id, now);
                }
                state.graph.trigger_readers(&id, &mut out);
            }
        }
        self.changed();
        self.send(&out);
        out
    }

    /// Sizes of the index, for tests and the debug log.
    pub fn sizes(&self) -> BTreeMap<&'static str, usize> {
        let state = self.read();
        let (readers, history) = state.graph.sizes();
        BTreeMap::from([
            ("sets", state.sets.len()),
            ("revisions", state.revisions.len()),
            ("readers", readers),
            ("history", history),
            ("sources", state.sources.len()),
            ("templates named", state.templates.len()),
            ("window overrides", state.overrides.len()),
            ("echoes awaited", state.echoes.len()),
        ])
    }
}

/// The controller an object's own reconcile goes to: a set's or a workload's.
#[derive(Clone, Copy, Debug)]
enum OwnTarget {
    Set(SetKind),
    Workload(WorkloadKind),
}

/// Turns `out`'s own reconcile of `key` into an entry of the index's queues, so that it can be held
/// and sent later (the watch sends `own` only as the event arrives).
fn own_by_queue(own: Option<OwnTarget>, key: &Key, out: &mut Triggers) {
    if !std::mem::take(&mut out.own) {
        return;
    }
    match own {
        Some(OwnTarget::Set(kind)) => {
            out.sets.insert((kind, key.clone()));
        }
        Some(OwnTarget::Workload(kind)) => {
            out.workloads.insert((kind, key.clone()));
        }
        None => {}
    }
}

/// Drops from `out` what the echo of cmset's own write of `key`, an object of `kind`, does not
/// concern: its writer (the set or workload's own controller, or for a revision the set that created
/// it), and the readers of a set whose status moved nothing they decide from.
fn quiet_echo(kind: &'static str, own: Option<OwnTarget>, key: &Key, echo: Echo, out: &mut Triggers) {
    let is_revision = SetKind::ALL
        .into_iter()
        .any(|k| k.revision_kind().as_str() == kind);
    if !echo.writer {
        out.own = false;
        match own {
            Some(OwnTarget::Set(set)) => {
                out.sets.remove(&(set, key.clone()));
            }
            Some(OwnTarget::Workload(workload)) => {
                out.workloads.remove(&(workload, key.clone()));
            }
            None => {}
        }
        if is_revision {
            out.sets.clear();
        }
    }
    if !echo.readers && matches!(own, Some(OwnTarget::Set(_))) {
        out.workloads.clear();
    }
}

/// A write of an object under way (see [`Index::writing`]).
#[must_use = "tell it the answer, or drop it when the write failed"]
pub struct EchoGuard<'a> {
    index: &'a Index,
    kind: &'static str,
    key: Option<Key>,
    own: Option<OwnTarget>,
}

impl EchoGuard<'_> {
    /// The write was answered at `resource_version`: its echo concerns `echo`. What the watch brought
    /// meanwhile is sent now, the echo among it quietened.
    pub fn answered(mut self, resource_version: Option<String>, echo: Echo) {
        let Some(key) = self.key.take() else { return };
        let (kind, own) = (self.kind, self.own);
        let released =
            self.index
                .write()
                .echoes
                .answered(kind, key.clone(), resource_version, echo, |echo, out| {
                    quiet_echo(kind, own, &key, echo, out)
                });
        for out in &released {
            self.index.send(out);
        }
    }
}

impl Drop for EchoGuard<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let released = self.index.write().echoes.abandon(self.kind, &key);
            for out in &released {
                self.index.send(out);
            }
        }
    }
}
