//! Commands about the server rather than the data, answered as memcached 1.6.18 answers them:
//! `stats` and its groups, `shutdown`, `slabs`, `lru_crawler`, `lru`, `watch` and
//! `cache_memlimit`. Real figures where inkcached has them; memcached's own refusal where a
//! command has nothing to act on here.

use crate::exec::{Ctx, Next, Runtime, Shared};
use crate::stats::{self, C};
use inkproto::num::{strtod, strtol32, strtoul32};
use inkproto::response as resp;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Per key prefix counters (`stats detail`), in first-seen order.
#[derive(Default)]
pub struct Prefixes {
    list: Vec<(Vec<u8>, [u64; 4])>,
}

/// One prefix's counters.
pub struct Prefix<'a>(&'a mut [u64; 4]);

impl Prefix<'_> {
    pub fn get(&mut self, hit: bool) {
        self.0[0] += 1;
        self.0[1] += u64::from(hit);
    }
    pub fn set(&mut self) {
        self.0[2] += 1;
    }
    pub fn delete(&mut self) {
        self.0[3] += 1;
    }
}

/// Counts a command on the prefix of `key` (up to the `-D` delimiter; keys without one are not
/// counted, as in memcached).
pub fn record(sh: &Shared, key: &[u8], f: impl FnOnce(&mut Prefix<'_>)) {
    let Some(n) = key.iter().position(|&b| b == sh.cfg.prefix_delimiter) else {
        return;
    };
    let p = &key[..n];
    let mut ps = sh.prefixes.lock().unwrap_or_else(|e| e.into_inner());
    let i = match ps.list.iter().position(|(k, _)| k == p) {
        Some(i) => i,
        None => {
            ps.list.push((p.to_vec(), [0; 4]));
            ps.list.len() - 1
        }
    };
    f(&mut Prefix(&mut ps.list[i].1));
}

/// memcached's tokenizer: at most 23 tokens.
fn tokens(line: &[u8]) -> Vec<&[u8]> {
    line.split(|&b| b == b' ')
        .filter(|t| !t.is_empty())
        .take(23)
        .collect()
}

/// Executes one admin command line.
pub fn execute(sh: &Arc<Shared>, w: usize, ctx: &mut Ctx, line: &[u8], out: &mut Vec<u8>) -> Next {
    let t = tokens(line);
    // memcached's ntokens counts a terminating empty token.
    let n = t.len() + 1;
    let noreply = n >= 3 && t[n - 2] == b"noreply";
    let mut say = |l: &str| {
        if !noreply {
            resp::line(out, l);
        }
    };
    match t[0] {
        b"stats" => return stats(sh, ctx, &t, out),
        b"shutdown" => {
            if !sh.cfg.shutdown_enabled {
                resp::line(out, "ERROR: shutdown not enabled");
            } else if n == 2 || (n == 3 && t[1] == b"graceful") {
                sh.shutdown.store(true, Ordering::Relaxed);
                // SAFETY: raise only queues a signal for this process; the main thread's
                // handler (signal-hook) turns it into an orderly shutdown.
                unsafe {
                    libc::raise(if n == 2 { libc::SIGINT } else { libc::SIGUSR1 });
                }
                return Next::Shutdown;
            } else {
                resp::line(out, "CLIENT_ERROR invalid shutdown mode");
            }
        }
        b"slabs" => {
            if n == 5 && t[1] == b"reassign" {
                if !sh.cfg.slab_reassign {
                    resp::line(out, "CLIENT_ERROR slab reassignment disabled");
                } else if let (Some(src), Some(dst)) = (strtol32(t[2]), strtol32(t[3])) {
                    // Items are not in pages here: no page can move. memcached's answers for
                    // the cases it checks first, then "no spare pages".
                    let largest = sh.store.slabs().largest() as i32;
                    let ok = |c: i32| c == -1 || (1..=largest).contains(&c);
                    resp::line(
                        out,
                        if src == dst {
                            "SAME src and dst class are identical"
                        } else if !ok(src) || !(1..=largest).contains(&dst) {
                            "BADCLASS invalid src or dst class id"
                        } else {
                            "NOSPARE source class has no spare pages"
                        },
                    );
                } else {
                    resp::line(out, "CLIENT_ERROR bad command line format");
                }
            } else if n >= 4 && t[1] == b"automove" {
                if t[2] == b"ratio" {
                    match (n >= 5).then(|| strtod(t[3])).flatten() {
                        Some(r) => {
                            sh.rt.automove_ratio.store(r.to_bits(), Ordering::Relaxed);
                            say("OK");
                        }
                        None => say("ERROR"),
                    }
                } else {
                    match strtoul32(t[2]) {
                        Some(l @ 0..=2) => {
                            sh.rt.slab_automove.store(l, Ordering::Relaxed);
                            say("OK");
                        }
                        Some(_) => say("ERROR"),
                        None => say("CLIENT_ERROR bad command line format"),
                    }
                }
            } else {
                resp::error(out);
            }
        }
        b"cache_memlimit" => match strtoul32(t[1]) {
            None => say("ERROR"),
            Some(m) if m < 8 => say("MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"),
            Some(m) if m > 1_000_000_000 => {
                say("MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes")
            }
            Some(m) => {
                let bytes = m as usize * 1024 * 1024;
                sh.rt.maxbytes.store(bytes, Ordering::Relaxed);
                sh.store.set_limit(bytes);
                if sh.rt.verbosity.load(Ordering::Relaxed) > 0 {
                    eprintln!("maxbytes adjusted to {m}m");
                }
                say("OK");
            }
        },
        b"lru" => lru(sh, &t, n, &mut say),
        b"lru_crawler" => return crate::watch::lru_crawler(sh, ctx, &t, out),
        b"watch" => return crate::watch::start(sh, ctx, &t, noreply, out),
        _ => resp::error(out),
    }
    let _ = w;
    Next::Continue
}

fn lru(sh: &Shared, t: &[&[u8]], n: usize, say: &mut impl FnMut(&str)) {
    let rt = &sh.rt;
    // memcached answers `lru mode` and `lru temp_ttl` only with its LRU maintainer thread;
    // inkcached's LRU is flat, as memcached's is without it.
    match t[1] {
        b"tune" if n >= 7 => match (strtoul32(t[2]), strtoul32(t[3]), strtod(t[4]), strtod(t[5])) {
            (Some(h), Some(w), Some(hf), Some(wf)) => {
                if h + w > 80 {
                    say("ERROR hot and warm pcts must not exceed 80");
                } else if wf <= 0.0 || hf <= 0.0 {
                    say("ERROR hot/warm age factors must be greater than 0");
                } else {
                    rt.hot_lru_pct.store(h, Ordering::Relaxed);
                    rt.warm_lru_pct.store(w, Ordering::Relaxed);
                    rt.hot_max_factor.store(hf.to_bits(), Ordering::Relaxed);
                    rt.warm_max_factor.store(wf.to_bits(), Ordering::Relaxed);
                    say("OK");
                }
            }
            _ => say("ERROR"),
        },
        _ => say("ERROR"),
    }
}

fn stats(sh: &Arc<Shared>, ctx: &Ctx, t: &[&[u8]], out: &mut Vec<u8>) -> Next {
    let n = t.len() + 1;
    if n == 2 {
        general(sh, out);
        resp::end(out);
        return Next::Continue;
    }
    match t[1] {
        b"reset" => {
            // memcached's stats_reset: every counter, the prefix counters of `stats detail`
            // too; not the gauges (items, bytes, connections)
            for w in sh.workers.iter() {
                w.reset();
            }
            sh.store.reset_stats();
            sh.rt.crawler_starts.store(0, Ordering::Relaxed);
            crate::watch::WATCH.reset_stats();
            sh.prefixes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .list
                .clear();
            if let Some(e) = sh.store.ext() {
                e.reset();
            }
            resp::line(out, "RESET");
        }
        b"detail" => match t.get(2).copied() {
            Some(b"on") if n >= 4 => {
                sh.rt.detail.store(true, Ordering::Relaxed);
                resp::ok(out);
            }
            Some(b"off") if n >= 4 => {
                sh.rt.detail.store(false, Ordering::Relaxed);
                resp::ok(out);
            }
            Some(b"dump") if n >= 4 => {
                let ps = sh.prefixes.lock().unwrap_or_else(|e| e.into_inner());
                for (p, c) in &ps.list {
                    out.extend_from_slice(b"PREFIX ");
                    out.extend_from_slice(p);
                    let _ = write!(
                        VecWriter(out),
                        " get {} hit {} set {} del {}\r\n",
                        c[0],
                        c[1],
                        c[2],
                        c[3]
                    );
                }
                resp::end(out);
            }
            _ => resp::line(out, "CLIENT_ERROR usage: stats detail on|off|dump"),
        },
        b"settings" => {
            settings(sh, out);
            resp::end(out);
        }
        b"cachedump" => cachedump(sh, t, out),
        b"conns" => {
            sh.conns.stats(ctx.id, sh.store.now(), out);
            resp::end(out);
        }
        b"items" => {
            items(sh, out);
            resp::end(out);
        }
        b"slabs" => {
            slabs(sh, out);
            resp::end(out);
        }
        b"sizes" => {
            sizes(sh, out);
            resp::end(out);
        }
        // (memcached ends these two without END)
        b"sizes_enable" => {
            if !sh.cfg.use_cas {
                resp::stat(out, "sizes_status", "error");
                resp::stat(out, "sizes_error", "cas_support_disabled");
            } else {
                if sh.rt.sizes_cas_min.load(Ordering::Relaxed) == u64::MAX {
                    // like memcached, count the items stored from now on
                    sh.rt
                        .sizes_cas_min
                        .store(sh.store.peek_next_cas(), Ordering::Relaxed);
                }
                resp::stat(out, "sizes_status", "enabled");
            }
        }
        b"sizes_disable" => {
            sh.rt.sizes_cas_min.store(u64::MAX, Ordering::Relaxed);
            resp::stat(out, "sizes_status", "disabled");
        }
        _ => resp::error(out),
    }
    Next::Continue
}

struct VecWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

fn rusage() -> (String, String) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct, RUSAGE_SELF is a valid `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return ("0.000000".into(), "0.000000".into());
    }
    let tv = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn general(sh: &Shared, out: &mut Vec<u8>) {
    let store = &sh.store;
    let now = store.now();
    let (u, sy) = rusage();
    let c = stats::sum(&sh.workers);
    let v = |name: C| c[name as usize];
    let ss = store.stats();
    let s = |out: &mut Vec<u8>, n: &str, v: &dyn std::fmt::Display| resp::stat(out, n, v);
    s(out, "pid", &sh.pid);
    s(out, "uptime", &now);
    s(out, "time", &(store.process_started() + i64::from(now)));
    s(out, "version", &crate::exec::VERSION);
    s(out, "pointer_size", &usize::BITS);
    s(out, "rusage_user", &u);
    s(out, "rusage_system", &sy);
    s(out, "max_connections", &sh.cfg.maxconns);
    s(out, "curr_connections", &v(C::curr_connections));
    s(out, "total_connections", &v(C::total_connections));
    if sh.cfg.maxconns_fast {
        s(out, "rejected_connections", &v(C::rejected_connections));
    }
    s(out, "connection_structures", &sh.conns.len());
    s(out, "reserved_fds", &crate::conns::RESERVED_FDS);
    for name in [
        C::cmd_get,
        C::cmd_set,
        C::cmd_flush,
        C::cmd_touch,
        C::cmd_meta,
        C::get_hits,
        C::get_misses,
        C::delete_misses,
        C::delete_hits,
        C::incr_misses,
        C::incr_hits,
        C::decr_misses,
        C::decr_hits,
        C::cas_misses,
        C::cas_hits,
        C::cas_badval,
        C::touch_hits,
        C::touch_misses,
        C::store_too_large,
        C::store_no_memory,
        C::auth_cmds,
        C::auth_errors,
    ] {
        s(out, stats::NAMES[name as usize], &v(name));
        if name == C::get_misses {
            // counted by the store's lookups, whatever the command (memcached's do_item_get)
            s(out, "get_expired", &ss.get_expired);
            s(out, "get_flushed", &ss.get_flushed);
            stats::extstore_gets(out, store);
        }
    }
    if sh.cfg.idle_timeout > 0 {
        s(out, "idle_kicks", &v(C::idle_kicks));
    }
    s(out, "bytes_read", &v(C::bytes_read));
    s(out, "bytes_written", &v(C::bytes_written));
    s(
        out,
        "limit_maxbytes",
        &sh.rt.maxbytes.load(Ordering::Relaxed),
    );
    s(out, "accepting_conns", &1);
    s(out, "listen_disabled_num", &v(C::listen_disabled_num));
    s(
        out,
        "time_in_listen_disabled_us",
        &v(C::time_in_listen_disabled_us),
    );
    s(out, "threads", &sh.cfg.threads);
    s(out, "conn_yields", &v(C::conn_yields));
    if sh.cfg.lru_crawler {
        s(out, "lru_crawler_running", &0);
        s(
            out,
            "lru_crawler_starts",
            &sh.rt.crawler_starts.load(Ordering::Relaxed),
        );
    }
    let w = &crate::watch::WATCH;
    s(
        out,
        "log_watcher_skipped",
        &w.skipped.load(Ordering::Relaxed),
    );
    s(out, "log_watcher_sent", &w.sent.load(Ordering::Relaxed));
    s(out, "log_watchers", &w.count());
    s(out, "bytes", &ss.bytes);
    s(out, "curr_items", &ss.curr_items);
    s(out, "total_items", &ss.total_items);
    let cls = store.class_stats();
    let sum = |f: fn(&crate::store::ClassStats) -> u64| cls.iter().map(f).sum::<u64>();
    s(out, "expired_unfetched", &sum(|c| c.expired_unfetched));
    s(out, "evicted_unfetched", &sum(|c| c.evicted_unfetched));
    s(out, "evictions", &ss.evictions);
    s(out, "reclaimed", &ss.reclaimed);
    s(out, "crawler_reclaimed", &sum(|c| c.crawler_reclaimed));
    s(
        out,
        "crawler_items_checked",
        &sum(|c| c.crawler_items_checked),
    );
    s(out, "store_shards", &store.shard_count());
    // inkcached's own: the kernel-bypass options (bypass.rs)
    for name in [
        C::afxdp_rx_packets,
        C::afxdp_tx_packets,
        C::afxdp_dropped,
        C::steer_owned,
        C::steer_foreign,
        C::coop_installs,
        C::coop_invalidations,
        C::coop_flushes,
        C::coop_calls,
        C::coop_errors,
    ] {
        s(out, stats::NAMES[name as usize], &v(name));
    }
    stats::extstore(out, store);
}

fn settings(sh: &Shared, out: &mut Vec<u8>) {
    let c = &sh.cfg;
    let rt = &sh.rt;
    let yn = |b: bool| if b { "yes" } else { "no" };
    let f2 = |a: &std::sync::atomic::AtomicU64| format!("{:.2}", Runtime::get_f64(a));
    let s = |out: &mut Vec<u8>, n: &str, v: &dyn std::fmt::Display| resp::stat(out, n, v);
    s(out, "maxbytes", &rt.maxbytes.load(Ordering::Relaxed));
    s(out, "maxconns", &c.maxconns);
    s(out, "tcpport", &c.port);
    s(out, "udpport", &c.udp_port);
    s(out, "inter", &c.listen.as_deref().unwrap_or("NULL"));
    s(out, "verbosity", &rt.verbosity.load(Ordering::Relaxed));
    s(out, "oldest", &0);
    s(out, "evictions", &if c.evict { "on" } else { "off" });
    s(
        out,
        "domain_socket",
        &c.socket_path.as_deref().unwrap_or("NULL"),
    );
    s(out, "umask", &format!("{:o}", c.unix_mask));
    s(out, "shutdown_command", &yn(c.shutdown_enabled));
    s(out, "growth_factor", &format!("{:.2}", c.factor));
    s(out, "chunk_size", &c.chunk_size);
    s(out, "num_threads", &c.threads);
    let per_udp = if c.listen.as_deref().is_some_and(|l| l.contains(',')) {
        1
    } else {
        c.threads
    };
    s(out, "num_threads_per_udp", &per_udp);
    s(out, "stat_key_prefix", &(c.prefix_delimiter as char));
    s(
        out,
        "detail_enabled",
        &yn(rt.detail.load(Ordering::Relaxed)),
    );
    s(out, "reqs_per_event", &c.reqs_per_event);
    s(out, "cas_enabled", &yn(c.use_cas));
    s(out, "tcp_backlog", &c.backlog);
    s(out, "binding_protocol", &c.protocol.name());
    s(out, "auth_enabled_sasl", &"no");
    s(
        out,
        "auth_enabled_ascii",
        &c.auth_file.as_deref().unwrap_or("no"),
    );
    s(out, "item_size_max", &c.item_size_max);
    s(out, "maxconns_fast", &yn(c.maxconns_fast));
    s(out, "hashpower_init", &c.hashpower_init);
    s(out, "slab_reassign", &yn(c.slab_reassign));
    s(
        out,
        "slab_automove",
        &rt.slab_automove.load(Ordering::Relaxed),
    );
    s(out, "slab_automove_ratio", &f2(&rt.automove_ratio));
    s(out, "slab_automove_window", &c.slab_automove_window);
    s(out, "slab_chunk_max", &c.slab_chunk_max);
    s(
        out,
        "lru_crawler",
        &yn(rt.lru_crawler.load(Ordering::Relaxed)),
    );
    s(
        out,
        "lru_crawler_sleep",
        &rt.crawler_sleep.load(Ordering::Relaxed),
    );
    s(
        out,
        "lru_crawler_tocrawl",
        &rt.crawler_tocrawl.load(Ordering::Relaxed),
    );
    s(out, "tail_repair_time", &c.tail_repair_time);
    s(out, "flush_enabled", &yn(c.flush_enabled));
    s(out, "dump_enabled", &yn(c.dump_enabled));
    s(out, "hash_algorithm", &c.hash_algorithm);
    // One flat LRU per shard: memcached's layout without its LRU maintainer.
    s(out, "lru_maintainer_thread", &"no");
    s(out, "lru_segmented", &"no");
    s(out, "hot_lru_pct", &rt.hot_lru_pct.load(Ordering::Relaxed));
    s(
        out,
        "warm_lru_pct",
        &rt.warm_lru_pct.load(Ordering::Relaxed),
    );
    s(out, "hot_max_factor", &f2(&rt.hot_max_factor));
    s(out, "warm_max_factor", &f2(&rt.warm_max_factor));
    s(out, "temp_lru", &yn(rt.temp_lru.load(Ordering::Relaxed)));
    s(
        out,
        "temporary_ttl",
        &rt.temporary_ttl.load(Ordering::Relaxed),
    );
    s(out, "idle_timeout", &c.idle_timeout);
    s(out, "watcher_logbuf_size", &c.watcher_logbuf_size);
    s(out, "worker_logbuf_size", &c.worker_logbuf_size);
    s(out, "read_buf_mem_limit", &c.read_buf_mem_limit);
    s(
        out,
        "track_sizes",
        &yn(rt.sizes_cas_min.load(Ordering::Relaxed) != u64::MAX),
    );
    s(out, "inline_ascii_response", &"no");
    s(out, "num_napi_ids", &c.napi_ids);
    s(out, "memory_file", &"(null)");
    s(out, "store_shards", &sh.store.shard_count());
    stats::extstore_settings(out, &sh.store);
}

fn cachedump(sh: &Shared, t: &[&[u8]], out: &mut Vec<u8>) {
    if !sh.cfg.dump_enabled {
        resp::line(out, "CLIENT_ERROR stats cachedump not allowed");
        return;
    }
    if t.len() + 1 < 5 {
        resp::line(out, "CLIENT_ERROR bad command line");
        return;
    }
    let (Some(id), Some(limit)) = (strtoul32(t[2]), strtoul32(t[3])) else {
        resp::line(out, "CLIENT_ERROR bad command line format");
        return;
    };
    if id as usize >= crate::slabs::MAX_CLASSES {
        resp::line(out, "CLIENT_ERROR Illegal slab id");
        return;
    }
    let started = sh.store.process_started();
    let mut shown = 0u32;
    let mut bytes = 0usize;
    sh.store.for_each(true, |seen| {
        if limit != 0 && shown >= limit {
            return false;
        }
        if seen.cls != id as usize || seen.meta.has(crate::store::meta::KEY_BINARY) {
            return true;
        }
        let e = seen.item.exptime();
        let line = format!(
            " [{} b; {} s]\r\n",
            seen.item.value_len(),
            if e == 0 { 0 } else { i64::from(e) + started }
        );
        // memcached's 2 MB answer limit
        bytes += 5 + seen.item.key().len() + line.len();
        if bytes + 6 > 2 * 1024 * 1024 {
            return false;
        }
        out.extend_from_slice(b"ITEM ");
        out.extend_from_slice(seen.item.key());
        out.extend_from_slice(line.as_bytes());
        shown += 1;
        true
    });
    resp::end(out);
}

fn items(sh: &Shared, out: &mut Vec<u8>) {
    for (i, c) in sh.store.class_stats().iter().enumerate() {
        if c.number == 0 {
            continue;
        }
        let mut s = |name: &str, v: u64| {
            let _ = write!(VecWriter(out), "STAT items:{i}:{name} {v}\r\n");
        };
        s("number", c.number);
        s("age", u64::from(c.age));
        s("mem_requested", c.requested);
        s("evicted", c.evicted);
        s("evicted_nonzero", c.evicted_nonzero);
        s("evicted_time", u64::from(c.evicted_time));
        s("outofmemory", c.outofmemory);
        s("tailrepairs", 0);
        s("reclaimed", c.reclaimed);
        s("expired_unfetched", c.expired_unfetched);
        s("evicted_unfetched", c.evicted_unfetched);
        s("crawler_reclaimed", c.crawler_reclaimed);
        s("crawler_items_checked", c.crawler_items_checked);
        s("lrutail_reflocked", 0);
    }
}

fn slabs(sh: &Shared, out: &mut Vec<u8>) {
    let sl = sh.store.slabs();
    let page = u64::from(sl.page_size());
    let mut active = 0;
    let mut pages_total = 0u64;
    for (i, c) in sh.store.class_stats().iter().enumerate() {
        if c.number == 0 {
            continue;
        }
        active += 1;
        // memcached's pages: the items of a class packed in chunks of its size
        let per = u64::from(sl.per_page(i).max(1));
        let pages = c.number.div_ceil(per);
        pages_total += pages;
        let mut s = |name: &str, v: u64| {
            let _ = write!(VecWriter(out), "STAT {i}:{name} {v}\r\n");
        };
        s("chunk_size", u64::from(sl.chunk_size(i)));
        s("chunks_per_page", per);
        s("total_pages", pages);
        s("total_chunks", pages * per);
        s("used_chunks", c.number);
        s("free_chunks", pages * per - c.number);
        s("free_chunks_end", 0);
        s("get_hits", c.get_hits);
        s("cmd_set", c.cmd_set);
        s("delete_hits", c.delete_hits);
        s("incr_hits", c.incr_hits);
        s("decr_hits", c.decr_hits);
        s("cas_hits", c.cas_hits);
        s("cas_badval", c.cas_badval);
        s("touch_hits", c.touch_hits);
    }
    resp::stat(out, "active_slabs", active);
    resp::stat(out, "total_malloced", pages_total * page);
}

fn sizes(sh: &Shared, out: &mut Vec<u8>) {
    let min = sh.rt.sizes_cas_min.load(Ordering::Relaxed);
    if min == u64::MAX {
        resp::stat(out, "sizes_status", "disabled");
        return;
    }
    // memcached's histogram: item totals rounded up to 32 bytes, of items stored since
    // tracking began.
    let mut h = std::collections::BTreeMap::new();
    sh.store.for_each(false, |seen| {
        if seen.item.cas() >= min {
            *h.entry(seen.ntotal.div_ceil(32) * 32).or_insert(0u64) += 1;
        }
        true
    });
    for (size, n) in h {
        resp::stat(out, &size.to_string(), n);
    }
}
