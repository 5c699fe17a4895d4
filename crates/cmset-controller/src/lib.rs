//! The cmset operator's I/O layer: it observes the cluster through label-selected watches, asks
//! `cmset-core` what to do, and carries out exactly those writes.
#![forbid(unsafe_code)]

pub mod analysis_io;
pub mod backoff;
pub mod cert_keeper;
pub mod cli;
pub mod context;
pub mod crash_points;
pub mod decisions;
pub mod drain;
pub mod error;
pub mod http;
pub mod index;
pub mod leader;
pub mod measurer;
pub mod memory;
pub mod metrics;
pub mod prometheus;
pub mod redact;
pub mod rollout_budget;
pub mod runtime;
pub mod served;
pub mod server;
pub mod set_controller;
pub mod stored_workload;
pub mod stores;
pub mod tasks;
pub mod template_admission;
pub mod views;
pub mod webhook;
pub mod webhook_certs;
pub mod workload_controller;
