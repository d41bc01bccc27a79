//! Counters kept per CPU by the eBPF programs, summed.
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};

pub use crate::abi::Stats;

impl Stats {
    pub fn from_map(map: &dyn MapCore) -> Result<Stats> {
        let mut s = Stats::default();
        for (i, slot) in s.slots().into_iter().enumerate() {
            let per_cpu = map
                .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
                .context("reading counters")?
                .unwrap_or_default();
            *slot = per_cpu
                .iter()
                .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8])))
                .sum();
        }
        Ok(s)
    }

    /// (name, one-line description) of every counter, in the kernel's order.
    pub fn help() -> Vec<(&'static str, &'static str)> {
        crate::abi::COUNTER_NAMES
            .iter()
            .copied()
            .zip(crate::abi::COUNTER_HELP.iter().map(|d| d.trim()))
            .collect()
    }

    /// Reads the counters of the attachment pinned at `dir`.
    pub fn read(dir: &Path) -> Result<Stats> {
        let map = MapHandle::from_pinned_path(dir.join("stats"))
            .with_context(|| format!("opening {}/stats", dir.display()))?;
        Self::from_map(&map)
    }
}
