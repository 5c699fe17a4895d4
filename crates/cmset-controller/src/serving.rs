//! Serving over HTTP: the admission webhooks (workloads, AnalysisTemplates, change windows, break glass)
//! and their certificates, `/metrics` and the probes, and the drain that keeps admission answered while
//! a replica leaves.

pub mod cert_keeper;
pub mod drain;
pub mod http;
pub mod override_admission;
pub mod server;
pub mod set_admission;
pub mod template_admission;
pub mod webhook;
pub mod webhook_certs;
pub mod window_admission;
