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
    conn_yields,
    idle_kicks,
    listen_disabled_num,
    time_in_listen_disabled_us,
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
    /// Every counter, to undo an attempt that is executed again later (see `ext::io`).
    pub fn snapshot(&self) -> [u64; NAMES.len()] {
        std::array::from_fn(|i| self.c[i].load(Ordering::Relaxed))
    }
    /// Puts back what [`WorkerStats::snapshot`] took (connection gauges excepted).
    pub fn restore(&self, s: &[u64; NAMES.len()]) {
        for (i, a) in self.c.iter().enumerate() {
            if i != C::curr_connections as usize && i != C::total_connections as usize {
                a.store(s[i], Ordering::Relaxed);
            }
        }
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

/// memcached's per-request extstore counters (printed after `get_flushed` when a flash tier
/// runs).
pub fn extstore_gets(out: &mut Vec<u8>, store: &crate::store::Store) {
    use inkproto::response as resp;
    let Some(e) = store.ext() else { return };
    let s = &e.stats;
    for (name, a) in [
        ("get_extstore", &s.get_extstore),
        ("get_aborted_extstore", &s.get_aborted_extstore),
        ("get_oom_extstore", &s.get_oom_extstore),
        ("recache_from_extstore", &s.recache_from_extstore),
        ("miss_from_extstore", &s.miss_from_extstore),
        ("badcrc_from_extstore", &s.badcrc_from_extstore),
    ] {
        resp::stat(out, name, a.load(Ordering::Relaxed));
    }
}

/// memcached's `extstore_*` counters (at the end of `stats` when a flash tier runs).
pub fn extstore(out: &mut Vec<u8>, store: &crate::store::Store) {
    use inkproto::response as resp;
    let Some(e) = store.ext() else { return };
    let s = &e.stats;
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let (free, used) = e.pages();
    let (objs, bytes) = e.objects_used();
    let written_pages = used * e.cfg.page_size;
    resp::stat(out, "extstore_compact_lost", l(&s.compact_lost));
    resp::stat(out, "extstore_compact_rescues", l(&s.compact_rescues));
    resp::stat(out, "extstore_compact_skipped", l(&s.compact_skipped));
    resp::stat(out, "extstore_page_allocs", l(&s.page_allocs));
    resp::stat(out, "extstore_page_evictions", l(&s.page_evictions));
    resp::stat(out, "extstore_page_reclaims", l(&s.page_reclaims));
    resp::stat(out, "extstore_pages_free", free);
    resp::stat(out, "extstore_pages_used", used);
    resp::stat(out, "extstore_objects_evicted", l(&s.objects_evicted));
    resp::stat(out, "extstore_objects_read", l(&s.objects_read));
    resp::stat(out, "extstore_objects_written", l(&s.objects_written));
    resp::stat(out, "extstore_objects_used", objs);
    resp::stat(out, "extstore_bytes_evicted", l(&s.bytes_evicted));
    resp::stat(out, "extstore_bytes_written", l(&s.bytes_written));
    resp::stat(out, "extstore_bytes_read", l(&s.bytes_read));
    resp::stat(out, "extstore_bytes_used", bytes);
    resp::stat(
        out,
        "extstore_bytes_fragmented",
        written_pages.saturating_sub(bytes),
    );
    resp::stat(out, "extstore_limit_maxbytes", e.limit());
    resp::stat(out, "extstore_io_queue", l(&s.io_queue));
    resp::stat(out, "extstore_write_skipped", l(&s.write_skipped));
}

/// The flash tier's settings in `stats settings`, named as memcached names them.
pub fn extstore_settings(out: &mut Vec<u8>, store: &crate::store::Store) {
    use inkproto::response as resp;
    let Some(e) = store.ext() else { return };
    let c = &e.cfg;
    resp::stat(out, "ext_item_size", c.item_size);
    resp::stat(out, "ext_recache_rate", c.recache_rate);
    resp::stat(out, "ext_wbuf_size", c.wbuf_size);
    resp::stat(out, "ext_page_size", c.page_size);
    resp::stat(out, "ext_drop_unread", "yes");
    resp::stat(out, "ext_path", format!("{}:{}", c.path.display(), c.size));
}
