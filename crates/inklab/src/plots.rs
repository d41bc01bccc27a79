//! SVG bar charts of the paper scenario: max throughput, server CPU per request, and latency
//! percentiles at the fixed offered load, one panel per workload.

use std::path::{Path, PathBuf};

use anyhow::Result;
use inkbench::plot::{bars, Panel};

use crate::PaperResults;

/// Writes throughput.svg, cpu_per_request.svg and latency.svg into `out`.
pub fn all(res: &PaperResults, out: &Path) -> Result<Vec<PathBuf>> {
    let panel = |f: &dyn Fn(&crate::SetupResult) -> Option<Vec<f64>>| -> Vec<Panel> {
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
