//! Whether the change windows hold a set's rollout at an instant: the set's own windows
//! (`spec.rollout.windows`) and the cluster's that select it (`ChangeWindow`), evaluated together (see
//! [`crate::policy::windows`]), less a break-glass `WindowOverride` of that very rollout
//! ([`crate::policy::break_glass`]).
//!
//! A window holds only moves to a new revision and the opening of waves. Rollbacks, a new workload's
//! first start (but for a Job a held CronJob starts: it runs what the CronJob runs), revisions and
//! history are never held: the callers ask this only where a move forward is decided.
//!
//! A ChangeWindow binds every set it selects whatever the set's strategy, unless the ChangeWindow
//! itself exempts that strategy (`spec.exemptStrategies`): the set's namespace writes the strategy,
//! the admin writes the window. An `Immediate` set's own windows bind it too: like any set's, they only
//! narrow.
//!
//! Windows fail closed: when the operator does not know the cluster's windows (their watch has not
//! listed them yet, may not, or its list fails), [`verdict`] holds every move until it does.

use std::collections::BTreeMap;

use cmset_api::{ChangeWindow, RolloutStatus, Strategy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;

use crate::policy::break_glass::{BreakGlass, OverrideView};
use crate::policy::windows::{self, Verdict, Window, WindowSource};
use crate::set::SetRef;
use crate::status::problem::Problem;

/// Why the windows hold a set's moves now, and until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowHold {
    /// `status.rollout.reason`: `OutsideWindow`, or the name of the Deny window that holds it.
    pub reason: String,
    /// For people: which window holds it.
    pub by: String,
    /// When moves may resume; `None` when no window opens within the horizon.
    pub opens_at: Option<Timestamp>,
}

/// What the windows say of one set at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowState {
    /// Held now, before any override of the rollout.
    pub held: Option<WindowHold>,
    /// When the verdict may next change: the rollout looks again then.
    pub changes_at: Option<Timestamp>,
    /// The set's windows could not be read: the set is invalid, and its own windows are left out.
    pub invalid: bool,
    /// The set's break glass: its WindowOverrides (see [`crate::policy::break_glass`]); only one naming the
    /// rollout lets it through.
    pub break_glass: BreakGlass,
    /// The cluster's windows are unknown now, and why: every move is held (see [`verdict`]).
    pub cluster_unknown: Option<WindowsUnknown>,
}

impl WindowState {
    /// Whether the windows hold the moves of `rollout` (the status's record of the current revision's
    /// rollout, if any): held now, and no WindowOverride lets that very rollout through.
    pub fn holds(&self, _set: SetRef<'_>, rollout: Option<&RolloutStatus>) -> bool {
        self.held.is_some() && rollout.is_none_or(|r| self.override_for(r).is_none())
    }

    /// With the set's break glass as judged: `break_glass::judge(set, overrides)`.
    pub fn with_break_glass(self, break_glass: BreakGlass) -> Self {
        Self { break_glass, ..self }
    }

    /// What a reader's gate needs of the windows: whether they hold moves now, before any override,
    /// and the revision of `rollout` (the status's record) when a WindowOverride lets that rollout
    /// through. Only a move to that very revision is let through: the status may still name the
    /// overridden rollout while the set already has a newer revision, which is held as usual.
    pub fn gate_inputs(&self, rollout: Option<&RolloutStatus>) -> (bool, Option<String>) {
        let overridden = rollout.filter(|r| self.override_for(r).is_some());
        (self.held.is_some(), overridden.map(|r| r.revision.clone()))
    }

    /// The WindowOverride that lets `rollout` through, if one does.
    pub fn override_for(&self, rollout: &RolloutStatus) -> Option<&OverrideView> {
        self.break_glass.for_rollout(rollout)
    }
}

/// The windows' verdict for `set` at `now`, with `cluster` the cluster's windows that select it.
pub fn window_state(set: SetRef<'_>, cluster: &[Window], now: Timestamp) -> WindowState {
    let own = set.rollout().map(|r| r.windows.as_slice()).unwrap_or_default();
    if own.is_empty() && cluster.is_empty() {
        return WindowState::default();
    }
    let (mut all, invalid) = match windows::parse_all(own, &WindowSource::Set, "spec.rollout.windows") {
        Ok(parsed) => (parsed, false),
        Err(_) => (Vec::new(), true),
    };
    all.extend(cluster.iter().cloned());
    match windows::evaluate(&all, now) {
        Verdict::Open { until } => WindowState {
            held: None,
            changes_at: until,
            invalid,
            break_glass: BreakGlass::default(),
            cluster_unknown: None,
        },
        Verdict::Held { reason, by, opens_at } => WindowState {
            held: Some(WindowHold { reason, by, opens_at }),
            changes_at: opens_at,
            invalid,
            break_glass: BreakGlass::default(),
            cluster_unknown: None,
        },
    }
}

/// `status.rollout.reason` of a rollout held because the cluster's windows are unknown.
pub const UNKNOWN_REASON: &str = "ChangeWindowsUnknown";

/// The cluster's windows that apply to one set, as the operator sees them now.
#[derive(Clone, Debug)]
pub enum ClusterView {
    /// Listed: these select the set (none, when none does, the CRD is absent, or an install turned
    /// cluster windows off).
    Known(Vec<Window>),
    /// Not known: any freeze may be in force.
    Unknown(WindowsUnknown),
}

/// Why the operator does not know the cluster's ChangeWindows now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowsUnknown {
    pub cause: UnknownCause,
    /// What the API server answered, for people (an API error's status, never a secret).
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnknownCause {
    /// Their watch has not delivered its first list yet.
    NotListed,
    /// The operator may not list them (403): its RBAC lacks `changewindows`.
    Forbidden,
    /// Their list failed otherwise (a 5xx, a timeout).
    ListFailed,
}

impl UnknownCause {
    pub const ALL: [Self; 3] = [Self::NotListed, Self::Forbidden, Self::ListFailed];

    /// The reason of the set's condition `ChangeWindowsKnown`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::NotListed => "ChangeWindowsNotListed",
            Self::Forbidden => "ChangeWindowsForbidden",
            Self::ListFailed => "ChangeWindowsListFailed",
        }
    }

    /// The `cause` label of the metric `cmset_change_windows_unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotListed => "not_listed",
            Self::Forbidden => "forbidden",
            Self::ListFailed => "list_failed",
        }
    }
}

impl WindowsUnknown {
    /// For people: what is unknown, why, and what waits.
    pub fn message(&self) -> String {
        let why = match self.cause {
            UnknownCause::NotListed => "has not listed them yet",
            UnknownCause::Forbidden => "may not list them",
            UnknownCause::ListFailed => "could not list them",
        };
        format!(
            "the operator {why} ({}): the cluster's ChangeWindows are unknown, so moves wait until they are listed",
            self.detail
        )
    }
}

/// The windows' verdict for `set` at `now`, from what the operator sees of the cluster's windows:
/// when they are known, [`window_state`]; when not, every move is held (`ChangeWindowsUnknown`),
/// whatever the set's strategy, since any freeze may be in force. Only their watch listing them ends
/// that hold, so it names no instant.
pub fn verdict(set: SetRef<'_>, cluster: &ClusterView, now: Timestamp) -> WindowState {
    match cluster {
        ClusterView::Known(windows) => window_state(set, windows, now),
        ClusterView::Unknown(unknown) => WindowState {
            held: Some(WindowHold {
                reason: UNKNOWN_REASON.to_string(),
                by: unknown.message(),
                opens_at: None,
            }),
            changes_at: None,
            invalid: window_state(set, &[], now).invalid,
            cluster_unknown: Some(unknown.clone()),
            break_glass: BreakGlass::default(),
        },
    }
}

/// A `ChangeWindow`, parsed: which sets it selects and its windows.
#[derive(Clone, Debug)]
pub struct ClusterWindows {
    pub name: String,
    namespaces: Vec<String>,
    selector: Option<LabelSelector>,
    /// The strategies of the sets it does not bind.
    exempt: Vec<Strategy>,
    pub windows: Vec<Window>,
}

impl ClusterWindows {
    /// The `ChangeWindow` parsed, or every problem with it (each naming its field).
    pub fn parse(object: &ChangeWindow) -> Result<Self, Vec<Problem>> {
        let name = object.metadata.name.clone().unwrap_or_default();
        let source = WindowSource::Cluster { name: name.clone() };
        let windows = windows::parse_all(&object.spec.windows, &source, "spec.windows")?;
        Ok(Self {
            name,
            namespaces: object.spec.namespaces.clone(),
            selector: object.spec.selector.clone(),
            exempt: object.spec.exempt_strategies.clone(),
            windows,
        })
    }

    /// Whether its windows apply to `set`: its namespace matches one of the globs (or there are
    /// none), its labels match the selector (or there is none), and it does not exempt the set's
    /// strategy.
    pub fn selects(&self, set: SetRef<'_>) -> bool {
        let labels = set.metadata().labels.as_ref();
        let strategy = set.rollout().map(|r| r.strategy).unwrap_or_default();
        !self.exempt.contains(&strategy)
            && windows::namespaces_match(&self.namespaces, set.namespace())
            && self
                .selector
                .as_ref()
                .is_none_or(|s| selector_matches(s, labels.unwrap_or(&BTreeMap::new())))
    }
}

/// The windows of `cluster` that apply to `set`.
pub fn windows_for(set: SetRef<'_>, cluster: &[ClusterWindows]) -> Vec<Window> {
    cluster
        .iter()
        .filter(|c| c.selects(set))
        .flat_map(|c| c.windows.iter().cloned())
        .collect()
}

/// The windows of the `changewindows` that apply to `set`, parsed; a ChangeWindow that does not
/// parse is left out (the admission webhook refuses those).
pub fn cluster_windows_for(set: SetRef<'_>, changewindows: &[ChangeWindow]) -> Vec<Window> {
    let parsed: Vec<ClusterWindows> = changewindows
        .iter()
        .filter_map(|c| ClusterWindows::parse(c).ok())
        .collect();
    windows_for(set, &parsed)
}

/// Whether `labels` match a Kubernetes label selector: every `matchLabels` pair and every
/// `matchExpressions` requirement (`In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector
/// matches everything; an unknown operator matches nothing.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        let value = labels.get(&e.key);
        match e.operator.as_str() {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    pairs && expressions
}
