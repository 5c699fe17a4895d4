//! Reads a results.json back (`--baseline`): of this version as it is, and from before
//! configurations existed (one operator process, no webhook, one floor per run) as one
//! configuration named `legacy`, its floor given to every stage.

use std::path::Path;

use serde::Deserialize;

use super::results::{
    Burst, Churn, ConfigResults, Convergence, Flags, Floor, MemoryFigures, Meta, Restart, Results, Scale,
};
use crate::cluster::Result;
use crate::install::ReplicaMemory;
use crate::operator::Memory;

/// A results.json from before configurations (one operator process, no webhook, one floor per run).
#[derive(Deserialize)]
struct Legacy {
    #[serde(default)]
    meta: LegacyMeta,
    floor: Option<Floor>,
    initial: Option<Convergence>,
    churn: Option<Churn>,
    burst: Option<Burst>,
    restart: Option<Restart>,
    memory: Option<LegacyMemory>,
    #[serde(default)]
    scales: Vec<Scale>,
    #[serde(default)]
    failures: Vec<String>,
    #[serde(default)]
    total_seconds: f64,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct LegacyMeta {
    started_utc: String,
    operator_bin: String,
    operator_version: String,
    operator_args: Vec<String>,
    server_version: String,
    cpus: usize,
    sets: usize,
    rate: f64,
    duration_s: u64,
    scales: Vec<usize>,
    concurrency: usize,
    unrelated_configmaps: usize,
    unrelated_deployments: usize,
    bench_cpu_s: f64,
}

#[derive(Deserialize)]
struct LegacyMemory {
    after_initial: Option<Memory>,
    before_unrelated: Option<Memory>,
    after_unrelated: Option<Memory>,
    #[serde(default)]
    unrelated_configmaps: usize,
    #[serde(default)]
    unrelated_deployments: usize,
    #[serde(default)]
    create_seconds: f64,
    rss_ratio: Option<f64>,
}

fn single(m: Option<Memory>) -> Vec<ReplicaMemory> {
    m.map(|m| ReplicaMemory {
        role: "single".into(),
        memory: Some(m),
    })
    .into_iter()
    .collect()
}

impl Legacy {
    fn convert(self) -> Results {
        let floor = self.floor;
        let mut initial = self.initial;
        if let Some(c) = &mut initial {
            c.floor = floor.clone();
            if c.replicas.is_empty() {
                c.replicas = single(self.memory.as_ref().and_then(|m| m.after_initial));
            }
        }
        let mut churn = self.churn;
        if let Some(c) = &mut churn {
            c.floor = floor.clone();
        }
        let mut burst = self.burst;
        if let Some(b) = &mut burst {
            b.floor = floor.clone();
        }
        let mut scales = self.scales;
        for s in &mut scales {
            s.initial.floor = floor.clone();
            if let Some(b) = &mut s.burst {
                b.floor = floor.clone();
            }
        }
        let m = self.meta;
        Results {
            meta: Meta {
                started_utc: m.started_utc,
                operator: Path::new(&m.operator_bin)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                operator_source: "given".into(),
                operator_version: m.operator_version,
                operator_args: m.operator_args,
                server_version: m.server_version,
                cpus: m.cpus,
                replicas: 1,
                flags: Flags {
                    configurations: vec!["legacy".into()],
                    sets: m.sets,
                    rate: m.rate,
                    duration_s: m.duration_s,
                    scales: m.scales,
                    concurrency: m.concurrency,
                    unrelated_configmaps: m.unrelated_configmaps,
                    unrelated_deployments: m.unrelated_deployments,
                    ..Flags::default()
                },
                bench_cpu_s: m.bench_cpu_s,
                ..Meta::default()
            },
            configurations: vec![ConfigResults {
                name: "legacy".into(),
                initial,
                churn,
                burst,
                restart: self.restart,
                memory: self.memory.map(|m| MemoryFigures {
                    before_unrelated: single(m.before_unrelated),
                    after_unrelated: single(m.after_unrelated),
                    unrelated_configmaps: m.unrelated_configmaps,
                    unrelated_deployments: m.unrelated_deployments,
                    create_seconds: m.create_seconds,
                    rss_ratio: m.rss_ratio,
                }),
                scales,
                ..ConfigResults::default()
            }],
            failures: self.failures,
            total_seconds: self.total_seconds,
        }
    }
}

/// Reads a results.json, of this version or from before configurations existed (as one
/// configuration named `legacy`).
pub fn load(text: &str) -> Result<Results> {
    let value: serde_json::Value = serde_json::from_str(text)?;
    if value.get("configurations").is_some() {
        Ok(serde_json::from_value(value)?)
    } else {
        Ok(serde_json::from_value::<Legacy>(value)?.convert())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::table;

    #[test]
    fn a_results_json_from_before_configurations_reads_as_one_named_legacy() {
        let old = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/results/before/results.json"
        ))
        .unwrap();
        let r = load(&old).unwrap();
        assert_eq!(r.configurations.len(), 1);
        let c = &r.configurations[0];
        assert_eq!(c.name, "legacy");
        assert!(
            c.churn.as_ref().unwrap().floor.is_some(),
            "the run's floor for every stage"
        );
        assert_eq!(c.initial.as_ref().unwrap().replicas[0].role, "single");
        assert!(!r.meta.operator.contains('/'), "{}", r.meta.operator);
        let t = table(&r, Some(&r));
        assert!(t.contains("baseline legacy"), "{t}");
        assert!(t.contains("| churn latency p50 / p90 / p99 / max |"), "{t}");
        // And this version's own output reads back.
        let again = load(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(again.configurations[0].name, "legacy");
    }
}
