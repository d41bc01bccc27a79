//! Plots (SVG): the sampler's timeline ([`timeline`]: latency of every sample against its
//! scheduled time, on a log scale so that both the usual latency and pauses show; timeouts and
//! errors are drawn in red at the top), and grouped bar charts ([`bars`]) for the reports of the
//! tools built on the load generator (inklab's scenarios, inkmodel's hit ratios).

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::sample::{Outcome, SampleResults};

pub fn timeline(res: &SampleResults, path: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let secs = |us: f64| us / 1e6;
    let x_max = res
        .samples
        .iter()
        .map(|s| secs(s.scheduled_us))
        .fold(res.config.duration.as_secs_f64(), f64::max)
        .max(1e-3);
    let timeout_us = res.config.timeout.as_secs_f64() * 1e6;
    let lat: Vec<f64> = res.samples.iter().filter_map(|s| s.latency_us).collect();
    let y_min = lat.iter().copied().fold(f64::INFINITY, f64::min);
    let y_min = if y_min.is_finite() {
        (y_min / 2.0).max(0.1)
    } else {
        1.0
    };
    let y_max = lat
        .iter()
        .copied()
        .fold(0.0, f64::max)
        .max(if res.timeouts + res.errors > 0 {
            timeout_us
        } else {
            0.0
        })
        .max(y_min * 10.0)
        * 1.5;

    let root = SVGBackend::new(path, (1200, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let title = format!(
        "inkbench sample: {} {} every {:?}, {} samples, {} timeouts",
        res.config.proto,
        res.config.server,
        res.config.interval,
        res.count,
        res.timeouts + res.errors
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("time since start (s, scheduled)")
        .y_desc("latency (us, from scheduled time)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format!("{v:.1}"))
        .draw()
        .map_err(|e| err(&e))?;
    let point = |s: &crate::sample::SampleRecord, color: RGBColor| {
        let y = s.latency_us.unwrap_or(timeout_us).clamp(y_min, y_max);
        Circle::new((secs(s.scheduled_us), y), 2, color.filled())
    };
    for (outcome, color, label) in [
        (Outcome::Hit, RGBColor(31, 119, 180), "hit"),
        (Outcome::Miss, RGBColor(44, 160, 44), "miss"),
        (Outcome::Timeout, RGBColor(214, 39, 40), "timeout"),
        (Outcome::Error, RGBColor(148, 103, 189), "error"),
    ] {
        let pts: Vec<_> = res
            .samples
            .iter()
            .filter(|s| s.result == outcome)
            .map(|s| point(s, color))
            .collect();
        if pts.is_empty() {
            continue;
        }
        chart
            .draw_series(pts)
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| Circle::new((x, y), 3, color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
];

/// A panel: its title and, per configuration, its label and one value per series.
pub type Panel = (String, Vec<(String, Vec<f64>)>);

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
pub fn bars(
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
