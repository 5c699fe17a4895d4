//! Rollouts in waves, scenario by scenario: the set planner and the workload planner driven together
//! over a small simulated world (revisions appear when planned, workloads move as the workload
//! controller would move them, health is set by the test, time moves when the test says). Every
//! decision is made from the set's status and `now` only, as after a restart of the operator.

use std::collections::BTreeMap;

use cmset_api::{
    AnalysisRef, AnalysisRunStatus, AnalysisTemplateSpec, AnalysisVerdict, ChangeWindow, ChangeWindowSpec,
    ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, RolloutPhase, RolloutSpec, RolloutWindow, Strategy,
    WindowKind, WorkloadState, WorkloadStatus, labels,
};
use cmset_core::analysis::{self, Analysis, QueryOutcome};
use cmset_core::policy::break_glass::{OverrideView, judge};
use cmset_core::policy::windows::{Window, WindowSource};
use cmset_core::revisions::revision::inline_identity;
use cmset_core::rollout::pinning::{SetTarget, plan_workload};
use cmset_core::rollout::plan::{EventKind, SetInput, SetPlan, plan_set};
use cmset_core::rollout::waves::{Gate, WaveAnalysis, gate, transitions};
use cmset_core::rollout::window_hold::{cluster_windows_for, window_state};
use cmset_core::set::{SetRef, SourceState, rollout_id};
use cmset_core::workloads::health::{Health, Wave};
use cmset_core::workloads::observe::{RevisionView, WorkloadView};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use support::revision_of;

#[path = "../support/mod.rs"]
mod support;

mod metric_analysis;
mod overrides;
mod pause_and_promotion;
mod waves;
mod windows;
mod world;

#[allow(unused_imports)]
use metric_analysis::*;
#[allow(unused_imports)]
use overrides::*;
#[allow(unused_imports)]
use pause_and_promotion::*;
#[allow(unused_imports)]
use waves::*;
#[allow(unused_imports)]
use windows::*;
#[allow(unused_imports)]
use world::*;
