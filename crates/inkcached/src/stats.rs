//! Per-worker counters, named as memcached names them in `stats`. Each worker writes only its own
//! (cache-line aligned) block with relaxed atomics; `stats` sums them.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($($name:ident),* $(,)?) => {
        /// One counter.
        #[allow(non_camel_case_types, dead_code)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum C { $($name),* }
        /// The counters' names, in `C` order.
        pub const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

counters!(
    curr_connections,
    total_connections,
    rejected_connections,
    cmd_get,
    cmd_set,
    cmd_flush,
    cmd_touch,
    cmd_meta,
    get_hits,
    get_misses,
    get_expired,
    get_flushed,
    delete_misses,
    delete_hits,
    incr_misses,
    incr_hits,
    decr_misses,
    decr_hits,
    cas_misses,
    cas_hits,
    cas_badval,
    touch_hits,
    touch_misses,
    store_too_large,
    store_no_memory,
    auth_cmds,
    auth_errors,
    bytes_read,
    bytes_written,
    // AF_XDP path, key steering and cooperative mode (afxdp.rs, steer.rs, coop.rs)
    afxdp_rx_packets,
    afxdp_tx_packets,
    afxdp_dropped,
    steer_owned,
    steer_foreign,
    coop_installs,
    coop_invalidations,
    coop_flushes,
    coop_calls,
    coop_errors,
);

/// The counters of one worker.
#[repr(align(128))]
pub struct WorkerStats {
    c: [AtomicU64; NAMES.len()],
}

impl Default for WorkerStats {
    fn default() -> Self {
        WorkerStats {
            c: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl WorkerStats {
    #[inline]
    pub fn add(&self, c: C, n: u64) {
        // Only this worker writes: load + store is enough and avoids a locked instruction.
        let a = &self.c[c as usize];
        a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    #[inline]
    pub fn inc(&self, c: C) {
        self.add(c, 1)
    }
    /// For gauges changed by several threads (connections).
    pub fn atomic_add(&self, c: C, n: i64) {
        self.c[c as usize].fetch_add(n as u64, Ordering::Relaxed);
    }
    pub fn get(&self, c: usize) -> u64 {
        self.c[c].load(Ordering::Relaxed)
    }
    pub fn reset(&self) {
        for (i, a) in self.c.iter().enumerate() {
            if i != C::curr_connections as usize {
                a.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Sums of every counter over the workers.
pub fn sum(workers: &[WorkerStats]) -> Vec<u64> {
    (0..NAMES.len())
        .map(|i| {
            workers
                .iter()
                .map(|w| w.get(i))
                .fold(0u64, u64::wrapping_add)
        })
        .collect()
}

/// The sum of one counter over the workers.
pub fn sum_one(workers: &[WorkerStats], c: C) -> u64 {
    workers
        .iter()
        .map(|w| w.get(c as usize))
        .fold(0u64, u64::wrapping_add)
}
