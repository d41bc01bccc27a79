//! Counters kept per CPU by the eBPF programs, summed.
use std::path::Path;

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde::{Deserialize, Serialize};

/// Declares the counters once, in the order of `enum ink_stat` in bpf/inkcache_common.h: the
/// struct fields (with their docs) and the index -> field mapping both come from this list.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident),* $(,)?) => {
        #[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
        pub struct Stats {
            $($(#[doc = $doc])* pub $name: u64,)*
        }

        impl Stats {
            const NAMES: &'static [&'static str] = &[$(stringify!($name)),*];
            /// Each counter's documentation (the text above), in the same order.
            const DOCS: &'static [&'static str] = &[$(concat!($($doc),*)),*];

            fn slots(&mut self) -> Vec<&mut u64> {
                vec![$(&mut self.$name),*]
            }

            /// (name, value) pairs in the kernel's order.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                Self::NAMES.iter().copied().zip([$(self.$name),*]).collect()
            }

            /// (name, one-line description) of every counter, in the kernel's order.
            pub fn help() -> Vec<(&'static str, &'static str)> {
                Self::NAMES.iter().copied().zip(Self::DOCS.iter().map(|d| d.trim())).collect()
            }
        }
    };
}

counters! {
    /// Requests answered by the kernel.
    hits,
    /// Cacheable gets passed to the server because a key missed.
    misses,
    /// Items installed from the server's replies.
    fills,
    /// Keys (or the whole cache) invalidated; the total of the `inval_*` counters.
    invalidations,
    /// Packets that were not for the cache (other traffic, other ports, other commands).
    passed,
    /// Gets from sources outside the allowlist, passed to the server.
    refused,
    /// Hits whose reply would need more than one datagram, passed to the server.
    too_big,
    /// Malformed memcached frames passed untouched, and helper failures.
    errors,
    /// Replies not installed: guarded by a recent write, CAS-bearing, too large, or unmatched.
    fill_skipped,
    /// Whole-cache invalidations: request segments that could not be parsed with certainty.
    inval_unparsable,
    /// Keys invalidated by mutating commands.
    inval_command,
    /// Whole-cache invalidations by flush_all.
    inval_flush,
    /// Whole-cache invalidations: the server stopped or (re)started (released or bound its port).
    inval_restart,
    /// Hits refused because the item had expired.
    expired,
    /// Hot items copied to the log head before the log came round to them.
    promoted,
    /// TCP connections followed from their SYN (their writes are settled by the server's answers).
    conn_tracked,
    /// Connections not followed because --max-conns were already followed (connections opened
    /// before attach are not followed either, and not counted).
    conn_untracked,
    /// Followed connections whose answers could no longer be counted (quiet meta commands, error
    /// answers, a gap in the stream): their writes fall back to the quarantine.
    conn_desync,
    /// Writes settled by the server's answer to them.
    settled,
    /// Writes settled by the quarantine (noreply, UDP, connections not followed or lost).
    quarantined,
    /// Hits whose reply did not fit the XDP frame, handed to the TC ingress program.
    tc_handoffs,
    /// Requests the TC ingress program answered (counted in `hits` too).
    tc_hits,
    /// Handed-off requests the TC ingress program could not answer (a key went meanwhile, the skb
    /// could not grow), passed to the server.
    tc_passed,
    /// Replies to sources outside the allowlist larger than `--max-amplification` times the
    /// request, passed to the server.
    amp_refused,
    /// Multi-key gets split: the kernel answered the keys that hit, memcached got a get for the
    /// others (its answer carries the END).
    splits,
}

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

    /// Reads the counters of the attachment pinned at `dir`.
    pub fn read(dir: &Path) -> Result<Stats> {
        let map = MapHandle::from_pinned_path(dir.join("stats"))
            .with_context(|| format!("opening {}/stats", dir.display()))?;
        Self::from_map(&map)
    }
}
