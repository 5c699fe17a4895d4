//! Change windows: when a rollout may move workloads. A set names its own (`spec.rollout.windows`);
//! whoever administers cmset names the cluster's in the cluster-scoped `ChangeWindow`
//! (`changewindows.cmset.dev`), for every set or for the namespaces and labels it selects.
//!
//! The fields and their meaning are Argo CD's sync windows: a window opens at each time its schedule
//! fires and stays open for its duration. When any Allow window applies, moves happen only inside one;
//! an open Deny window holds moves whatever the Allows say. A set's windows are added to the cluster's,
//! so they can only narrow them: the set's Allow windows and the cluster's must each allow. A
//! ChangeWindow binds every set it selects whatever its strategy, unless it exempts that strategy.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Strategy;

/// Most windows one set or one ChangeWindow may name.
pub const MAX_WINDOWS: u32 = 32;

/// One recurring window.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutWindow {
    /// A name for people: a Deny window that holds a rollout is its reason (`status.rollout.reason`).
    /// Without one, the reason is `DenyWindow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub name: Option<String>,

    /// `Allow`: moves may happen while it is open (once any Allow window applies, only then). `Deny`:
    /// no move happens while it is open, whatever the Allows say.
    pub kind: WindowKind,

    /// When the window opens: a five-field cron expression (`minute hour day-of-month month
    /// day-of-week`, as Argo CD's sync windows and Kubernetes CronJobs write it, with `@daily`,
    /// `@weekly` and the like), or an RFC 5545 recurrence rule (`FREQ=MONTHLY;BYDAY=-1FR;BYHOUR=18`,
    /// with or without the `RRULE:` prefix) for rules cron cannot say. Times are wall-clock times in
    /// `timeZone`.
    #[schemars(length(min = 1, max = 1024))]
    pub schedule: String,

    /// How long the window stays open each time, as a Go duration: `30m`, `1h30m`, `72h`.
    #[schemars(length(min = 1, max = 64))]
    pub duration: String,

    /// The IANA time zone of the schedule (`Europe/Berlin`, `America/New_York`); default `UTC`. The
    /// zone database is built into cmset, so the cluster's nodes need none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema)]
pub enum WindowKind {
    Allow,
    Deny,
}

impl WindowKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "Allow",
            Self::Deny => "Deny",
        }
    }
}

/// Windows for the whole cluster, or for the sets it selects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cmset.dev",
    version = "v1alpha1",
    kind = "ChangeWindow",
    plural = "changewindows",
    singular = "changewindow",
    shortname = "cmsetwindow",
    doc = "A ChangeWindow holds the rollouts of ConfigMapSets and SecretSets outside the times it allows, or inside the times it denies, for every set of the cluster or those it selects. It is cluster-scoped: whoever administers cmset installs it, and a set's own windows can only narrow it.",
    printcolumn = r#"{"name":"Namespaces","type":"string","jsonPath":".spec.namespaces"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ChangeWindowSpec {
    /// The namespaces whose sets these windows apply to, as names or glob patterns (`*-prod`,
    /// `team-?`), as Argo CD's sync windows name them. Empty: every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub namespaces: Vec<String>,

    /// Only sets whose labels match. Absent: every set of those namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// The windows.
    #[schemars(length(min = 1, max = MAX_WINDOWS))]
    pub windows: Vec<RolloutWindow>,

    /// The rollout strategies (`spec.rollout.strategy`) of the sets these windows do not bind. Empty:
    /// they bind every set they select, `Immediate` ones included. `[Immediate]` lets credentials a
    /// secret manager rotates through a freeze. Only this object decides it: a set's strategy, which
    /// its namespace writes, does not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub exempt_strategies: Vec<Strategy>,
}
