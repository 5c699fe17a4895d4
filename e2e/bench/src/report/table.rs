//! `table.md`: the run's meta and flags, then every configuration (and a baseline's) side by side, the
//! floor before each stage, the scale stages, and the burst's requests by verb and resource.

use std::fmt::Write as _;

use super::cells::{Row, admission_latency, num, opt, ratio, replicas_mib};
use super::results::Results;
use super::rows::{floors, rows};

/// Rows of several configurations side by side: labels in the order they first appear.
fn side_by_side(columns: &[Vec<(String, String, String)>]) -> Vec<(String, Vec<(String, String)>)> {
    let mut labels: Vec<String> = vec![];
    for col in columns {
        for (label, _, _) in col {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
    }
    labels
        .into_iter()
        .map(|label| {
            let cells = columns
                .iter()
                .map(|col| {
                    col.iter()
                        .find(|(l, _, _)| *l == label)
                        .map(|(_, v, x)| (v.clone(), x.clone()))
                        .unwrap_or_default()
                })
                .collect();
            (label, cells)
        })
        .collect()
}

/// The Markdown summary: every configuration side by side, and with a baseline (an earlier
/// results.json), its configurations in more columns.
pub fn table(r: &Results, baseline: Option<&Results>) -> String {
    let mut out = String::new();
    let m = &r.meta;
    let _ = writeln!(
        out,
        "## cmset bench, {}\n\ncommit `{}`{}; operator `{}` ({}, {}); API server {}, {} CPUs; {} replicas, \
         lease {} s; run took {:.0} s.\n\nflags: `{}`{}\n",
        m.started_utc,
        if m.commit.is_empty() { "?" } else { &m.commit },
        match m.dirty {
            Some(true) => " (with uncommitted changes)",
            Some(false) => "",
            None => " (tree state unknown)",
        },
        m.operator,
        if m.operator_version.is_empty() {
            "?"
        } else {
            &m.operator_version
        },
        if m.operator_source.is_empty() {
            "?"
        } else {
            &m.operator_source
        },
        m.server_version,
        m.cpus,
        m.replicas,
        m.lease_duration_s,
        r.total_seconds,
        m.flags.command_line(),
        if m.operator_args.is_empty() {
            String::new()
        } else {
            format!("; operator flags: `{}`", m.operator_args.join(" "))
        }
    );
    for c in &r.configurations {
        let _ = writeln!(out, "- `{}`: {}", c.name, c.install);
    }
    if !r.configurations.is_empty() {
        out += "\n";
    }
    let mut names: Vec<String> = r.configurations.iter().map(|c| c.name.clone()).collect();
    let mut columns: Vec<Vec<Row>> = r.configurations.iter().map(rows).collect();
    if let Some(base) = baseline {
        for c in &base.configurations {
            names.push(format!("baseline {} ({})", c.name, base.meta.started_utc));
            columns.push(rows(c));
        }
    }
    out += "| figure |";
    for n in &names {
        let _ = write!(out, " {n} | × floor |");
    }
    out += "\n| --- |";
    out += &" --- | --- |".repeat(names.len());
    out += "\n";
    for (label, cells) in side_by_side(&columns) {
        let _ = write!(out, "| {label} |");
        for (v, x) in cells {
            let _ = write!(out, " {v} | {x} |");
        }
        out += "\n";
    }

    // The floor each stage's ratios use.
    let floor_cols: Vec<Vec<Row>> = r
        .configurations
        .iter()
        .map(|c| {
            floors(c)
                .into_iter()
                .map(|(a, b)| (a, b, String::new()))
                .collect()
        })
        .collect();
    if floor_cols.iter().any(|c| !c.is_empty()) {
        out +=
            "\nThe floor before each stage (sequential p50 of one change; changes/s in flight):\n\n| stage |";
        for c in &r.configurations {
            let _ = write!(out, " {} |", c.name);
        }
        out += "\n| --- |";
        out += &" --- |".repeat(r.configurations.len());
        out += "\n";
        for (label, cells) in side_by_side(&floor_cols) {
            let _ = write!(out, "| {label} |");
            for (v, _) in cells {
                let _ = write!(out, " {v} |");
            }
            out += "\n";
        }
    }

    for c in &r.configurations {
        if c.scales.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\nScale, {}:\n", c.name);
        out += "| sets | initial sets/s | × floor | burst changes/s | × floor | operator CPU ms/change | × floor \
                | operator writes/change | admission p50 / p99 (burst) | RSS after convergence |\n\
                | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
        for s in &c.scales {
            let b = s.burst.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.sets,
                s.initial
                    .sets_per_s
                    .map(num)
                    .unwrap_or_else(|| format!("TIMEOUT ({}/{})", s.initial.converged, s.sets)),
                ratio(s.initial.x_floor),
                if s.burst.is_none() {
                    "-".into()
                } else {
                    b.rate
                        .map(num)
                        .unwrap_or_else(|| format!("TIMEOUT ({}/{})", b.converged, b.changes))
                },
                ratio(b.x_floor),
                opt(b.cost.cpu_ms_per_change),
                ratio(b.cost.cpu_x_floor),
                opt(b.cost.writes.as_ref().map(|w| w.operator_per_change)),
                admission_latency(b.cost.admission.as_ref()),
                replicas_mib(&s.initial.replicas),
            );
        }
    }

    // Requests per change of the burst, by verb and resource, configurations side by side.
    let breakdown: Vec<Vec<Row>> = r
        .configurations
        .iter()
        .map(|c| {
            let mut rows = vec![];
            if let Some(w) = c.burst.as_ref().and_then(|b| b.cost.writes.as_ref()) {
                for (by, map) in [
                    ("operator", &w.operator),
                    ("kube-controller-manager", &w.controller_manager),
                    ("other", &w.other),
                    ("reads (anyone)", &w.reads),
                    ("operator's own count", &w.operator_self),
                ] {
                    for (k, v) in map {
                        rows.push((format!("{by} | {k}"), num(*v), String::new()));
                    }
                }
            }
            rows
        })
        .collect();
    if breakdown.iter().any(|c| !c.is_empty()) {
        out += "\nBurst, requests per change by verb and resource (API server counters, the bench's own removed):\n\n\
                | by | request |";
        for c in &r.configurations {
            let _ = write!(out, " {} |", c.name);
        }
        out += "\n| --- | --- |";
        out += &" --- |".repeat(r.configurations.len());
        out += "\n";
        for (label, cells) in side_by_side(&breakdown) {
            let _ = write!(out, "| {label} |");
            for (v, _) in cells {
                let _ = write!(out, " {} |", if v.is_empty() { "-" } else { &v });
            }
            out += "\n";
        }
    }
    if !r.failures.is_empty() {
        out += "\nFailed figures:\n\n";
        for f in &r.failures {
            let _ = writeln!(out, "- {f}");
        }
    }
    out
}
