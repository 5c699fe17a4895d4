//! What a run found: `results.json` (everything), `table.md` (the summary, also printed) and two SVG
//! plots. Every time is also given as a multiple of the floor measured in the same run, because the
//! machines are shared and noisy: only those ratios compare across runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cluster::Result;
use crate::operator::Memory;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Results {
    pub meta: Meta,
    pub floor: Option<Floor>,
    pub initial: Option<Convergence>,
    pub churn: Option<Churn>,
    pub burst: Option<Burst>,
    pub restart: Option<Restart>,
    pub memory: Option<MemoryFigures>,
    #[serde(default)]
    pub scales: Vec<Scale>,
    /// Figures that could not be measured (a timeout, an error), in words.
    #[serde(default)]
    pub failures: Vec<String>,
    pub total_seconds: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Meta {
    pub started_utc: String,
    pub operator_bin: String,
    pub operator_version: String,
    pub operator_args: Vec<String>,
    pub server_version: String,
    pub cpus: usize,
    pub sets: usize,
    pub rate: f64,
    pub duration_s: u64,
    pub scales: Vec<usize>,
    pub concurrency: usize,
    pub unrelated_configmaps: usize,
    pub unrelated_deployments: usize,
    /// CPU the bench itself used over the whole run (it shares the machine with what it measures).
    pub bench_cpu_s: f64,
}

/// The bare API cost of one change, no operator involved: create a ConfigMap, patch a Deployment's
/// pod template, patch an annotation on a ConfigMapSet.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Floor {
    pub sequential_changes: usize,
    pub seq_p50_ms: f64,
    pub seq_p90_ms: f64,
    pub concurrency: usize,
    pub concurrent_changes: usize,
    pub concurrent_rate: f64,
    pub concurrent_ms_per_change: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Convergence {
    pub sets: usize,
    pub converged: usize,
    /// From the operator's start until every Deployment named its revision.
    pub seconds: Option<f64>,
    /// From the operator's start until /readyz answered 200.
    pub ready_s: Option<f64>,
    pub sets_per_s: Option<f64>,
    /// Time per set ÷ the floor's concurrent time per change.
    pub x_floor: Option<f64>,
    pub cpu_ms_per_set: Option<f64>,
    pub memory: Option<Memory>,
    /// How long the rollouts and the operator took to go quiet afterwards (CPU is counted until then).
    pub settle_s: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Each ÷ the floor's sequential p50.
    pub p50_x_floor: Option<f64>,
    pub p90_x_floor: Option<f64>,
    pub p99_x_floor: Option<f64>,
    pub max_x_floor: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Cost {
    /// Operator CPU per change.
    pub cpu_ms_per_change: Option<f64>,
    /// ÷ the floor's sequential p50 (a per-machine yardstick for "one change").
    pub cpu_x_floor: Option<f64>,
    /// CPU per change of the other processes watched (`--pid`), and of the bench itself.
    #[serde(default)]
    pub other_cpu_ms_per_change: BTreeMap<String, f64>,
    pub writes: Option<Writes>,
    /// The window ends when the rollouts and the operator went quiet: this long after the last change
    /// landed.
    pub settle_s: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Churn {
    pub target_rate: f64,
    pub achieved_rate: f64,
    pub duration_s: f64,
    pub changes: usize,
    pub converged: usize,
    pub timed_out: usize,
    /// Ticks at which every set still had a change in flight (none was sent).
    pub skipped_busy: usize,
    pub latency: Option<Latency>,
    pub cost: Cost,
    pub latencies_ms: Vec<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Burst {
    pub changes: usize,
    pub converged: usize,
    /// From the first PATCH sent until every Deployment named its new revision.
    pub seconds: Option<f64>,
    pub rate: Option<f64>,
    /// Time per change ÷ the floor's concurrent time per change.
    pub x_floor: Option<f64>,
    /// Per change, from its PATCH response.
    pub latency: Option<Latency>,
    pub cost: Cost,
}

/// API requests per change, from the API server's `apiserver_request_total` (by `verb resource`), and
/// the operator's own `cmset_api_writes_total` (by operation).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Writes {
    pub changes: usize,
    pub operator: BTreeMap<String, f64>,
    pub controller_manager: BTreeMap<String, f64>,
    /// Writes neither of the two sends (node heartbeats, other tenants of a shared cluster).
    pub other: BTreeMap<String, f64>,
    /// GET and LIST by anyone (watches excluded).
    pub reads: BTreeMap<String, f64>,
    pub operator_per_change: f64,
    pub operator_excl_events_per_change: f64,
    pub controller_manager_per_change: f64,
    pub operator_self: BTreeMap<String, f64>,
    pub operator_self_per_change: f64,
    /// The bench's own requests taken out of the counts.
    pub bench_requests_subtracted: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Restart {
    pub ready_s: f64,
    pub window_s: f64,
    /// Everything the new process counted since it started.
    pub operator_self_writes: f64,
    /// What the API server saw of the operator's kinds of writes from the kill to the window's end.
    pub operator_apiserver_writes: BTreeMap<String, f64>,
    pub operator_apiserver_total: f64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct MemoryFigures {
    pub after_initial: Option<Memory>,
    pub before_unrelated: Option<Memory>,
    pub after_unrelated: Option<Memory>,
    pub unrelated_configmaps: usize,
    pub unrelated_deployments: usize,
    pub create_seconds: f64,
    /// RSS with the unrelated objects ÷ RSS before them (same process).
    pub rss_ratio: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Scale {
    pub sets: usize,
    pub initial: Convergence,
    pub burst: Option<Burst>,
    pub namespace_delete_s: Option<f64>,
}

// -------------------------------------------------------------------------------------- numbers --

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn latency(ms: &[f64], floor: Option<&Floor>) -> Option<Latency> {
    if ms.is_empty() {
        return None;
    }
    let mut sorted = ms.to_vec();
    sorted.sort_by(f64::total_cmp);
    let x = |v: f64| floor.map(|f| v / f.seq_p50_ms);
    let (p50, p90, p99, max) = (
        percentile(&sorted, 50.0),
        percentile(&sorted, 90.0),
        percentile(&sorted, 99.0),
        sorted[sorted.len() - 1],
    );
    Some(Latency {
        p50_ms: p50,
        p90_ms: p90,
        p99_ms: p99,
        max_ms: max,
        p50_x_floor: x(p50),
        p90_x_floor: x(p90),
        p99_x_floor: x(p99),
        max_x_floor: x(max),
    })
}

fn num(v: f64) -> String {
    let v = v + 0.0; // -0.0 prints as "-0"
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(num).unwrap_or_else(|| "-".into())
}

fn ratio(v: Option<f64>) -> String {
    v.map(|v| format!("{}×", num(v))).unwrap_or_default()
}

fn mib(m: Option<Memory>) -> String {
    m.map(|m| format!("{:.1} MiB", m.rss_kib as f64 / 1024.0))
        .unwrap_or_else(|| "-".into())
}

/// One summary row: figure, value, value as a multiple of the floor.
type Row = (String, String, String);

fn rows(r: &Results) -> Vec<Row> {
    let mut rows: Vec<Row> = vec![];
    let mut row = |a: &str, b: String, c: String| rows.push((a.to_string(), b, c));
    match &r.floor {
        Some(f) => {
            row(
                "floor: one change, sequential p50",
                format!("{} ms", num(f.seq_p50_ms)),
                "1×".into(),
            );
            row(
                &format!("floor: changes/s at {} in flight", f.concurrency),
                format!(
                    "{} /s ({} ms each)",
                    num(f.concurrent_rate),
                    num(f.concurrent_ms_per_change)
                ),
                "1×".into(),
            );
        }
        None => row("floor", "not measured".into(), String::new()),
    }
    if let Some(c) = &r.initial {
        row(
            &format!("initial convergence, {} sets", c.sets),
            match c.sets_per_s {
                Some(v) => format!("{} sets/s ({} s)", num(v), opt(c.seconds)),
                None => format!("TIMEOUT ({} of {} converged)", c.converged, c.sets),
            },
            ratio(c.x_floor),
        );
    }
    if let Some(c) = &r.churn {
        let label = format!(
            "churn latency p50 / p90 / p99 / max ({} changes at {}/s)",
            c.changes,
            num(c.achieved_rate)
        );
        match &c.latency {
            Some(l) => row(
                &label,
                format!(
                    "{} / {} / {} / {} ms{}",
                    num(l.p50_ms),
                    num(l.p90_ms),
                    num(l.p99_ms),
                    num(l.max_ms),
                    if c.timed_out > 0 {
                        format!(" ({} TIMED OUT)", c.timed_out)
                    } else {
                        String::new()
                    }
                ),
                match (l.p50_x_floor, l.p90_x_floor, l.p99_x_floor, l.max_x_floor) {
                    (Some(a), Some(b), Some(c), Some(d)) => {
                        format!("{} / {} / {} / {}×", num(a), num(b), num(c), num(d))
                    }
                    _ => String::new(),
                },
            ),
            None => row(&label, "no change converged".into(), String::new()),
        }
        row(
            "churn: operator CPU per change",
            format!("{} ms", opt(c.cost.cpu_ms_per_change)),
            ratio(c.cost.cpu_x_floor),
        );
        if let Some(w) = &c.cost.writes {
            row(
                "churn: operator writes per change (excluding events)",
                format!(
                    "{} ({})",
                    num(w.operator_per_change),
                    num(w.operator_excl_events_per_change)
                ),
                String::new(),
            );
        }
    }
    if let Some(b) = &r.burst {
        burst_rows(&mut row, "burst", b);
    }
    if let Some(w) = r.burst.as_ref().and_then(|b| b.cost.writes.as_ref()) {
        row(
            "burst: operator writes per change (excluding events)",
            format!(
                "{} ({})",
                num(w.operator_per_change),
                num(w.operator_excl_events_per_change)
            ),
            String::new(),
        );
        row(
            "burst: operator's own count of its writes per change",
            num(w.operator_self_per_change),
            String::new(),
        );
        row(
            "burst: kube-controller-manager writes per change",
            num(w.controller_manager_per_change),
            String::new(),
        );
    }
    if let Some(b) = r
        .burst
        .as_ref()
        .filter(|b| !b.cost.other_cpu_ms_per_change.is_empty())
    {
        let others: Vec<String> = b
            .cost
            .other_cpu_ms_per_change
            .iter()
            .map(|(k, v)| format!("{k} {}", num(*v)))
            .collect();
        row(
            "burst: CPU ms per change of the others",
            others.join(", "),
            String::new(),
        );
    }
    if let Some(x) = &r.restart {
        row(
            &format!(
                "writes after a restart (ready + {} s)",
                num(x.window_s - x.ready_s)
            ),
            format!(
                "{} (API server: {})",
                num(x.operator_self_writes),
                num(x.operator_apiserver_total)
            ),
            String::new(),
        );
    }
    if let Some(m) = &r.memory {
        row(
            "RSS after initial convergence",
            mib(m.after_initial),
            String::new(),
        );
        row(
            &format!(
                "RSS before / after {} unrelated ConfigMaps + {} Deployments",
                m.unrelated_configmaps, m.unrelated_deployments
            ),
            format!("{} / {}", mib(m.before_unrelated), mib(m.after_unrelated)),
            m.rss_ratio
                .map(|v| format!("{:+.1}%", (v - 1.0) * 100.0))
                .unwrap_or_default(),
        );
    }
    rows
}

fn burst_rows(row: &mut impl FnMut(&str, String, String), name: &str, b: &Burst) {
    row(
        &format!("{name}: {} changes at once", b.changes),
        match b.rate {
            Some(v) => format!("{} changes/s ({} s)", num(v), opt(b.seconds)),
            None => format!("TIMEOUT ({} of {} converged)", b.converged, b.changes),
        },
        ratio(b.x_floor),
    );
    row(
        &format!("{name}: operator CPU per change"),
        format!("{} ms", opt(b.cost.cpu_ms_per_change)),
        ratio(b.cost.cpu_x_floor),
    );
}

/// The Markdown summary; with a baseline (an earlier results.json), its figures in two more columns.
pub fn table(r: &Results, baseline: Option<&Results>) -> String {
    let mut out = String::new();
    let m = &r.meta;
    let _ = writeln!(
        out,
        "## cmset bench, {}\n\noperator `{}` ({}), API server {}, {} CPUs; {} sets, churn {}/s for {} s, \
         {} requests in flight; run took {:.0} s.\n",
        m.started_utc,
        m.operator_bin,
        if m.operator_version.is_empty() {
            "?"
        } else {
            &m.operator_version
        },
        m.server_version,
        m.cpus,
        m.sets,
        m.rate,
        m.duration_s,
        m.concurrency,
        r.total_seconds
    );
    let ours = rows(r);
    match baseline {
        None => {
            out += "| figure | value | × floor |\n| --- | --- | --- |\n";
            for (a, b, c) in &ours {
                let _ = writeln!(out, "| {a} | {b} | {c} |");
            }
        }
        Some(base) => {
            let theirs: BTreeMap<String, (String, String)> =
                rows(base).into_iter().map(|(a, b, c)| (a, (b, c))).collect();
            out += "| figure | value | × floor | baseline | baseline × floor |\n| --- | --- | --- | --- | --- |\n";
            for (a, b, c) in &ours {
                let (d, e) = theirs.get(a).cloned().unwrap_or_default();
                let _ = writeln!(out, "| {a} | {b} | {c} | {d} | {e} |");
            }
        }
    }
    if !r.scales.is_empty() {
        out += "\n| sets | initial sets/s | × floor | burst changes/s | × floor | operator CPU ms/change | × floor | operator writes/change | RSS |\n\
                | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
        for s in &r.scales {
            let b = s.burst.clone().unwrap_or_default();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
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
                mib(s.initial.memory),
            );
        }
    }
    if let Some(w) = r.burst.as_ref().and_then(|b| b.cost.writes.as_ref()) {
        out += "\nBurst, requests per change by verb and resource (API server counters, the bench's own removed):\n\n\
                | by | request | per change |\n| --- | --- | --- |\n";
        for (by, map) in [
            ("operator", &w.operator),
            ("kube-controller-manager", &w.controller_manager),
            ("other", &w.other),
            ("reads (anyone)", &w.reads),
            ("operator's own count", &w.operator_self),
        ] {
            for (k, v) in map {
                let _ = writeln!(out, "| {by} | {k} | {} |", num(*v));
            }
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

// ---------------------------------------------------------------------------------------- plots --

const COLORS: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40)];

fn plot_err<E: std::fmt::Debug>(e: E) -> crate::cluster::Error {
    format!("plot: {e:?}").into()
}

/// (a) The latency distribution of steady churn, as a CDF on a log time axis.
pub fn plot_churn(path: &Path, r: &Results, baseline: Option<&Results>) -> Result<()> {
    let series: Vec<(String, Vec<f64>)> = [Some(("this run", r)), baseline.map(|b| ("baseline", b))]
        .into_iter()
        .flatten()
        .filter_map(|(name, res)| {
            let c = res.churn.as_ref()?;
            let mut v: Vec<f64> = c.latencies_ms.iter().copied().filter(|v| *v > 0.0).collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| (format!("{name} (p50 {} ms)", num(percentile(&v, 50.0))), v))
        })
        .collect();
    let lo = series.iter().map(|(_, v)| v[0]).fold(f64::INFINITY, f64::min);
    let hi = series.iter().map(|(_, v)| v[v.len() - 1]).fold(0.0, f64::max);
    let floor_ms = r.floor.as_ref().map(|f| f.seq_p50_ms);
    let (lo, hi) = if series.is_empty() {
        (1.0, 10.0)
    } else {
        (lo.min(floor_ms.unwrap_or(lo)) * 0.8, hi * 1.25)
    };
    // At least a decade, so the log axis has labels.
    let lo = lo.min(hi / 10.0);
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let caption = format!(
        "Steady churn: change to rollout latency ({} sets, {}/s)",
        r.meta.sets, r.meta.rate
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..1f64)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|v| num(*v))
        .x_desc("latency from the set's PATCH response to the Deployment naming the revision (ms)")
        .y_desc("fraction of changes")
        .draw()
        .map_err(plot_err)?;
    for (i, (name, v)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let n = v.len() as f64;
        let points = v.iter().enumerate().map(|(k, ms)| (*ms, (k + 1) as f64 / n));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(plot_err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if let Some(f) = floor_ms {
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new([(f, 0.0), (f, 1.0)], grey.stroke_width(1)))
            .map_err(plot_err)?
            .label(format!("floor: one bare change, p50 {} ms", num(f)))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;
    root.present().map_err(plot_err)?;
    Ok(())
}

/// (b) Cost per change against the number of sets: operator CPU per change, and the burst's time per
/// change as a multiple of the floor.
pub fn plot_scaling(path: &Path, r: &Results, baseline: Option<&Results>) -> Result<()> {
    type Pick = fn(&Scale) -> Option<f64>;
    let cpu: Pick = |s| s.burst.as_ref()?.cost.cpu_ms_per_change;
    let time: Pick = |s| s.burst.as_ref()?.x_floor;
    let runs: Vec<(&str, &Results)> = [Some(("this run", r)), baseline.map(|b| ("baseline", b))]
        .into_iter()
        .flatten()
        .collect();
    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let panels = root.split_evenly((1, 2));
    let sets: Vec<f64> = runs
        .iter()
        .flat_map(|(_, res)| res.scales.iter().map(|s| s.sets as f64))
        .collect();
    let x_lo = sets.iter().copied().fold(f64::INFINITY, f64::min).min(100.0) * 0.7;
    let x_hi = sets.iter().copied().fold(0.0, f64::max).max(1000.0) * 1.4;
    for (panel, (title, y_desc, pick)) in panels.iter().zip([
        ("Operator CPU per change (burst)", "CPU ms per change", cpu),
        (
            "Burst time per change ÷ floor",
            "× the bare API's time per change",
            time,
        ),
    ]) {
        let values: Vec<f64> = runs
            .iter()
            .flat_map(|(_, res)| res.scales.iter().filter_map(pick))
            .filter(|v| *v > 0.0)
            .collect();
        let y_lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let y_hi = values.iter().copied().fold(0.0, f64::max);
        let (y_lo, y_hi) = if values.is_empty() {
            (0.1, 10.0)
        } else {
            (y_lo / 2.0, y_hi * 2.0)
        };
        let y_lo = y_lo.min(y_hi / 10.0);
        let mut chart = ChartBuilder::on(panel)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(60)
            .build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())
            .map_err(plot_err)?;
        chart
            .configure_mesh()
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| num(*v))
            .x_desc("ConfigMapSets (and Deployments) in the namespace")
            .y_desc(y_desc)
            .draw()
            .map_err(plot_err)?;
        for (i, (name, res)) in runs.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = res
                .scales
                .iter()
                .filter_map(|s| Some((s.sets as f64, pick(s)?)))
                .filter(|(_, v)| *v > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
            chart
                .draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))
                .map_err(plot_err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.9))
            .border_style(BLACK)
            .draw()
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 90.0), 7.0);
    }

    #[test]
    fn plots_and_table_from_a_sparse_result() {
        let dir = std::env::temp_dir().join(format!("cmset-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Results {
            churn: Some(Churn {
                latencies_ms: vec![10.0, 20.0, 30.0],
                ..Churn::default()
            }),
            ..Results::default()
        };
        r.scales.push(Scale {
            sets: 100,
            burst: Some(Burst {
                x_floor: Some(3.0),
                cost: Cost {
                    cpu_ms_per_change: Some(2.0),
                    ..Cost::default()
                },
                ..Burst::default()
            }),
            ..Scale::default()
        });
        plot_churn(&dir.join("a.svg"), &r, Some(&r)).unwrap();
        plot_scaling(&dir.join("b.svg"), &r, None).unwrap();
        assert!(
            std::fs::read_to_string(dir.join("b.svg"))
                .unwrap()
                .contains("<svg")
        );
        assert!(table(&r, Some(&r)).contains("| sets |"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
