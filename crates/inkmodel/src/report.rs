//! The simulation's results as text tables and a bar chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;
use inkbench::plot::Panel;

use crate::hitratio::HitRatioResults;

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn size(b: u64) -> String {
    if b >= 10 << 20 {
        format!("{:.1} MiB", b as f64 / 1048576.0)
    } else {
        format!("{:.0} KiB", b as f64 / 1024.0)
    }
}

impl HitRatioResults {
    /// The report as text: a line per mix, the hit-ratio table, the kernel table's details.
    pub fn table(&self) -> String {
        let c = &self.config;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} keys of {} bytes, Zipf {}, {} warm-up + {} measured requests, seed {}",
            c.keys, c.key_size, c.zipf, c.warmup, c.requests, c.seed
        );
        for m in &self.mixes {
            let _ = writeln!(
                s,
                "values {}: items {}..{} B (mean {:.1}, median {}, p99 {}), {} in all; \
                 kernel split for --item-bytes {}",
                m.mix,
                m.min_item_bytes,
                m.max_item_bytes,
                m.mean_item_bytes,
                m.p50_item_bytes,
                m.p99_item_bytes,
                size(m.total_item_bytes),
                m.split_item_bytes
            );
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<10} {:<8} {:>10} {:>8} {:>14} {:>8} {:>14}",
            "mix", "budget", "bytes", "kernel", "direct-mapped", "LRU", "LRU, log bytes"
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "{:<10} {:<8} {:>10} {:>8} {:>14} {:>8} {:>14}",
                r.mix,
                r.budget,
                r.budget_bytes,
                pct(r.kernel.hit_ratio),
                pct(r.direct.hit_ratio),
                pct(r.lru.hit_ratio),
                pct(r.lru_log.hit_ratio)
            );
        }
        let _ = writeln!(
            s,
            "(LRU, log bytes: an ideal LRU with only the kernel table's log bytes, items rounded \
             up to 16)"
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<10} {:<8} {:>7} {:>5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9}",
            "mix",
            "budget",
            "sets",
            "segs",
            "resident",
            "LRU items",
            "DM slots",
            "promoted",
            "lapped",
            "fills",
            "abandoned"
        );
        for r in &self.rows {
            let d = &r.kernel_detail;
            let _ = writeln!(
                s,
                "{:<10} {:<8} {:>7} {:>5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9}",
                r.mix,
                r.budget,
                d.sets,
                d.segs,
                d.resident_items,
                r.lru_items,
                r.direct_slots,
                pct(d.promoted_per_request),
                pct(d.lapped_per_request),
                pct(d.fills_per_request),
                pct(d.abandoned_share)
            );
        }
        let _ = writeln!(
            s,
            "(promoted, lapped misses and fills per measured request; abandoned: share of the log \
             skipped at segment ends)"
        );
        s
    }
}

/// Writes a bar chart of the hit ratios: a panel per mix, a group per budget, a bar per policy.
pub fn plot(res: &HitRatioResults, path: &Path) -> Result<()> {
    let mut panels: BTreeMap<usize, Panel> = BTreeMap::new();
    for r in &res.rows {
        let i = res
            .mixes
            .iter()
            .position(|m| m.mix == r.mix)
            .unwrap_or(usize::MAX);
        panels
            .entry(i)
            .or_insert_with(|| (format!("values {}", r.mix), Vec::new()))
            .1
            .push((
                format!("{} ({})", r.budget, size(r.budget_bytes)),
                vec![
                    r.kernel.hit_ratio * 100.0,
                    r.direct.hit_ratio * 100.0,
                    r.lru.hit_ratio * 100.0,
                    r.lru_log.hit_ratio * 100.0,
                ],
            ));
    }
    let panels: Vec<_> = panels.into_values().collect();
    let c = &res.config;
    inkbench::plot::bars(
        path,
        &format!("Hit ratio (%), {} keys, Zipf {}", c.keys, c.zipf),
        "hit ratio (%)",
        &[
            "kernel table (8-way index + log)",
            "direct-mapped (old)",
            "LRU (ideal, whole budget)",
            "LRU (ideal, kernel's log bytes)",
        ],
        &panels,
    )
}
