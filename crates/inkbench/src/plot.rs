//! The sampler's timeline: latency of every sample against its scheduled time (SVG), on a log
//! scale so that both the usual latency and pauses show; timeouts and errors are drawn in red at
//! the top.

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
