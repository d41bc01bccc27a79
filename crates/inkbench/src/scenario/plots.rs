//! SVG bar charts of the paper scenario: max throughput, server CPU per request, and latency
//! percentiles at the fixed offered load, one panel per workload.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use super::PaperResults;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

/// A panel: its title and, per configuration, its label and one value per series.
pub(crate) type Panel = (String, Vec<(String, Vec<f64>)>);

fn short(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}K", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Bar charts, a panel per entry of `panels` (captioned `<title>: <panel name>`), a group of bars
/// per configuration, a bar per series.
pub(crate) fn bars(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[&str],
    panels: &[Panel],
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let root = SVGBackend::new(path, (1100, 330 * panels.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, (name, groups)) in areas.iter().zip(panels) {
        let n = groups.len().max(1) as f64;
        let vmax = groups
            .iter()
            .flat_map(|g| g.1.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
            .max(1e-9);
        // Room above the bars for the labels and, with several series, the legend.
        let top = vmax * if series.len() > 1 { 1.55 } else { 1.25 };
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{title}: {name}"), ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(8)
            .y_label_area_size(80)
            .build_cartesian_2d(0f64..n, 0f64..top)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(y_desc)
            .y_label_formatter(&|v| short(*v))
            .draw()
            .map_err(|e| err(&e))?;
        let k = series.len().max(1);
        let w = 0.7 / k as f64;
        for (j, sname) in series.iter().enumerate() {
            let color = COLORS[j % COLORS.len()];
            // (left edge, value) of each drawable bar of this series
            let bars: Vec<(f64, f64)> = groups
                .iter()
                .enumerate()
                .filter_map(|(i, (_, vals))| {
                    let v = *vals.get(j)?;
                    (v.is_finite() && v > 0.0).then_some((i as f64 + 0.15 + j as f64 * w, v))
                })
                .collect();
            let rects = bars
                .iter()
                .map(|&(x0, v)| Rectangle::new([(x0, 0.0), (x0 + w * 0.92, v)], color.filled()));
            let s = chart.draw_series(rects).map_err(|e| err(&e))?;
            if k > 1 {
                s.label(*sname).legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
            }
            let texts = bars
                .iter()
                .map(|&(x0, v)| Text::new(short(v), (x0, v + vmax * 0.03), ("sans-serif", 11)));
            chart.draw_series(texts).map_err(|e| err(&e))?;
        }
        let labels: Vec<_> = groups
            .iter()
            .enumerate()
            .map(|(i, (l, _))| {
                Text::new(
                    l.clone(),
                    (i as f64 + 0.15, vmax * 1.18),
                    ("sans-serif", 13),
                )
            })
            .collect();
        chart.draw_series(labels).map_err(|e| err(&e))?;
        if k > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Writes throughput.svg, cpu_per_request.svg and latency.svg into `out`.
pub fn all(res: &PaperResults, out: &Path) -> Result<Vec<PathBuf>> {
    let panel = |f: &dyn Fn(&super::SetupResult) -> Option<Vec<f64>>| -> Vec<Panel> {
        res.workloads
            .iter()
            .map(|wl| {
                let groups = res
                    .results
                    .iter()
                    .filter(|r| r.workload == wl.name)
                    .filter_map(|r| f(r).map(|v| (r.label.clone(), v)))
                    .collect();
                (format!("workload {}", wl.name), groups)
            })
            .collect()
    };
    let mut files = Vec::new();
    let p = out.join("throughput.svg");
    bars(
        &p,
        "Max throughput (closed loop)",
        "answered req/s",
        &["req/s"],
        &panel(&|r| r.max.as_ref().map(|m| vec![m.throughput])),
    )?;
    files.push(p);
    let p = out.join("cpu_per_request.svg");
    bars(
        &p,
        "Server CPU per request (CPU1 busy / answered)",
        "ns per request",
        &["CPU1 busy", "server tasks' own CPU time"],
        &panel(&|r| {
            r.max
                .as_ref()
                .map(|m| vec![m.server_ns_per_req, m.attributed_ns_per_req])
        }),
    )?;
    files.push(p);
    let p = out.join("latency.svg");
    bars(
        &p,
        "Latency at a fixed offered load (open loop)",
        "microseconds",
        &["p50", "p99", "p99.9"],
        &panel(&|r| {
            r.latency
                .as_ref()
                .map(|l| vec![l.latency.p50_us, l.latency.p99_us, l.latency.p999_us])
        }),
    )?;
    files.push(p);
    Ok(files)
}
