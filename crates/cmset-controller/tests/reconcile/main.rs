//! Reconcile scenarios against a mocked API server. Each states the exact requests the controller sends
//! (method, path, and the bodies that matter), and the scenarios where it must send none assert exactly
//! that: an unchanged set, a restart with everything in place, a pinned workload, a workload not opted in.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use cmset_api::{
    AnalysisTemplate, ConfigMapSet, ConfigMapSetSpec, ConfigMapTemplate, SecretSet, SecretSetSpec, labels,
};
use cmset_controller::engine::context::{Clock, Context as EngineContext};
use cmset_controller::engine::index::{
    Index, Key, TEMPLATES, TriggerReceivers, TriggerSenders, trigger_channels,
};
use cmset_controller::engine::rollout_budget::RolloutBudget;
use cmset_controller::engine::stored_workload::StoredWorkload;
use cmset_controller::engine::stores::{Stores, WorkloadStore};
use cmset_controller::platform::metrics::Metrics;
use cmset_controller::reconcile::context::Context;
use cmset_controller::reconcile::{set_controller, workload_controller};
use cmset_core::revisions::revision::NewRevision;
use cmset_core::rollout::plan::{SetInput, plan_set};
use cmset_core::set::{Content, SetKind, SourceState};
use cmset_core::workloads::observe::WorkloadKind;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, DeploymentSpec, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, Container, EnvFromSource, PodSpec, PodTemplateSpec, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::api::ApiResource;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};

#[path = "../support/mod.rs"]
mod support;

use support::{Responder, Seen, mock_client, server_ends};

mod analysis_metrics;
mod analysis_queries;
mod checks;
mod judging;
mod late_writes;
mod one_decision;
mod pruning;
mod secret_sets;
mod sets;
mod waves;
mod workloads;
mod world;

#[allow(unused_imports)]
use analysis_metrics::*;
#[allow(unused_imports)]
use analysis_queries::*;
#[allow(unused_imports)]
use checks::*;
#[allow(unused_imports)]
use late_writes::*;
#[allow(unused_imports)]
use one_decision::*;
#[allow(unused_imports)]
use pruning::*;
#[allow(unused_imports)]
use secret_sets::*;
#[allow(unused_imports)]
use sets::*;
#[allow(unused_imports)]
use waves::*;
#[allow(unused_imports)]
use workloads::*;
#[allow(unused_imports)]
use world::*;
