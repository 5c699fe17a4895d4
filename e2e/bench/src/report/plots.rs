//! The two SVG plots: (a) the latency distribution of steady churn, (b) cost per change against the
//! number of sets; every configuration of the run, and a baseline's, as its own series.

use std::path::Path;

use plotters::prelude::*;

use super::cells::num;
use super::results::{ConfigResults, Results, Scale, percentile};
use crate::cluster::Result;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

fn plot_err<E: std::fmt::Debug>(e: E) -> crate::cluster::Error {
    format!("plot: {e:?}").into()
}

/// Every configuration of this run, then the baseline's, with a name for the legend.
fn series<'a>(r: &'a Results, baseline: Option<&'a Results>) -> Vec<(String, &'a ConfigResults)> {
    let mut out: Vec<(String, &ConfigResults)> =
        r.configurations.iter().map(|c| (c.name.clone(), c)).collect();
    if let Some(b) = baseline {
        out.extend(
            b.configurations
                .iter()
                .map(|c| (format!("baseline {}", c.name), c)),
        );
    }
    out
}

/// (a) The latency distribution of steady churn, as a CDF on a log time axis.
pub fn plot_churn(path: &Path, r: &Results, baseline: Option<&Results>) -> Result<()> {
    let lines: Vec<(String, Vec<f64>)> = series(r, baseline)
        .into_iter()
        .filter_map(|(name, c)| {
            let churn = c.churn.as_ref()?;
            let mut v: Vec<f64> = churn.latencies_ms.iter().copied().filter(|v| *v > 0.0).collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| (format!("{name} (p50 {} ms)", num(percentile(&v, 50.0))), v))
        })
        .collect();
    let lo = lines.iter().map(|(_, v)| v[0]).fold(f64::INFINITY, f64::min);
    let hi = lines.iter().map(|(_, v)| v[v.len() - 1]).fold(0.0, f64::max);
    let floor_ms = r
        .configurations
        .iter()
        .find_map(|c| c.churn.as_ref()?.floor.as_ref().map(|f| f.seq_p50_ms));
    let (lo, hi) = if lines.is_empty() {
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
        r.meta.flags.sets, r.meta.flags.rate
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
    for (i, (name, v)) in lines.iter().enumerate() {
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
/// change as a multiple of its floor.
pub fn plot_scaling(path: &Path, r: &Results, baseline: Option<&Results>) -> Result<()> {
    type Pick = fn(&Scale) -> Option<f64>;
    let cpu: Pick = |s| s.burst.as_ref()?.cost.cpu_ms_per_change;
    let time: Pick = |s| s.burst.as_ref()?.x_floor;
    let runs = series(r, baseline);
    let root = SVGBackend::new(path, (1000, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let panels = root.split_evenly((1, 2));
    let sets: Vec<f64> = runs
        .iter()
        .flat_map(|(_, c)| c.scales.iter().map(|s| s.sets as f64))
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
            .flat_map(|(_, c)| c.scales.iter().filter_map(pick))
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
        for (i, (name, c)) in runs.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let points: Vec<(f64, f64)> = c
                .scales
                .iter()
                .filter_map(|s| Some((s.sets as f64, pick(s)?)))
                .filter(|(_, v)| *v > 0.0)
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                .map_err(plot_err)?
                .label(name.as_str())
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
    use crate::report::{Burst, Churn, Cost, table};

    #[test]
    fn plots_and_table_from_a_sparse_result() {
        let dir = std::env::temp_dir().join(format!("cmset-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = ConfigResults {
            name: "webhook".into(),
            churn: Some(Churn {
                latencies_ms: vec![10.0, 20.0, 30.0],
                ..Churn::default()
            }),
            ..ConfigResults::default()
        };
        c.scales.push(Scale {
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
        let mut other = c.clone();
        other.name = "no-webhook".into();
        let r = Results {
            configurations: vec![c, other],
            ..Results::default()
        };
        plot_churn(&dir.join("a.svg"), &r, Some(&r)).unwrap();
        plot_scaling(&dir.join("b.svg"), &r, None).unwrap();
        assert!(
            std::fs::read_to_string(dir.join("b.svg"))
                .unwrap()
                .contains("<svg")
        );
        let t = table(&r, Some(&r));
        assert!(
            t.contains("| figure | webhook | × floor | no-webhook | × floor |"),
            "{t}"
        );
        assert!(t.contains("Scale, no-webhook"), "{t}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
