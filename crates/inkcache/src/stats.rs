//! Counters kept per CPU by the eBPF programs, summed.
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde::{Deserialize, Serialize};

/// Index order matches `enum ink_stat` in bpf/inkcache_common.h.
const NAMES: &[&str] = &[
    "hits",
    "misses",
    "fills",
    "invalidations",
    "passed",
    "refused",
    "too_big",
    "errors",
    "fill_skipped",
    "inval_unparsable",
    "inval_command",
    "inval_flush",
    "inval_restart",
    "expired",
];

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Stats {
    /// Requests answered by the kernel.
    pub hits: u64,
    /// Cacheable gets passed to the server because a key missed.
    pub misses: u64,
    /// Items installed from the server's replies.
    pub fills: u64,
    /// Keys (or the whole cache) invalidated by mutations.
    pub invalidations: u64,
    /// Packets that were not for the cache (other traffic, other ports, other commands).
    pub passed: u64,
    /// Gets from sources outside the allowlist, passed to the server.
    pub refused: u64,
    /// Hits whose reply did not fit the frame, passed to the server.
    pub too_big: u64,
    /// Malformed memcached frames passed untouched, and helper failures.
    pub errors: u64,
    /// Replies not installed: guarded by a recent write, CAS-bearing, too large, or unmatched.
    pub fill_skipped: u64,
    /// Whole-cache invalidations: request segments that could not be parsed with certainty.
    pub inval_unparsable: u64,
    /// Keys invalidated by mutating commands.
    pub inval_command: u64,
    /// Whole-cache invalidations by flush_all.
    pub inval_flush: u64,
    /// Whole-cache invalidations: the server stopped or (re)started (released or bound its port).
    pub inval_restart: u64,
    /// Hits refused because the item had expired.
    pub expired: u64,
}

impl Stats {
    fn set(&mut self, i: usize, v: u64) {
        let f = match i {
            0 => &mut self.hits,
            1 => &mut self.misses,
            2 => &mut self.fills,
            3 => &mut self.invalidations,
            4 => &mut self.passed,
            5 => &mut self.refused,
            6 => &mut self.too_big,
            7 => &mut self.errors,
            8 => &mut self.fill_skipped,
            9 => &mut self.inval_unparsable,
            10 => &mut self.inval_command,
            11 => &mut self.inval_flush,
            12 => &mut self.inval_restart,
            13 => &mut self.expired,
            _ => return,
        };
        *f = v;
    }

    pub fn from_map(map: &dyn MapCore) -> Result<Stats> {
        let mut s = Stats::default();
        for i in 0..NAMES.len() as u32 {
            let per_cpu = map
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .context("reading counters")?
                .unwrap_or_default();
            let sum = per_cpu
                .iter()
                .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap_or([0; 8])))
                .sum();
            s.set(i as usize, sum);
        }
        Ok(s)
    }

    /// Reads the counters of the attachment pinned at `dir`.
    pub fn read(dir: &Path) -> Result<Stats> {
        let map = MapHandle::from_pinned_path(dir.join("stats"))
            .with_context(|| format!("opening {}/stats", dir.display()))?;
        Self::from_map(&map)
    }

    /// (name, value) pairs in a stable order.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        let v = [
            self.hits,
            self.misses,
            self.fills,
            self.invalidations,
            self.passed,
            self.refused,
            self.too_big,
            self.errors,
            self.fill_skipped,
            self.inval_unparsable,
            self.inval_command,
            self.inval_flush,
            self.inval_restart,
            self.expired,
        ];
        NAMES.iter().copied().zip(v).collect()
    }
}
