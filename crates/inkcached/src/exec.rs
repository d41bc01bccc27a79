//! Executes parsed text requests against the store and composes the answers. Meta commands are
//! in [`crate::meta`], admin commands (`stats`, `lru_crawler`, ...) in [`crate::admin`], the
//! binary protocol in [`crate::binexec`].

use crate::config::Config;
use crate::conns::ConnTable;
use crate::stats::{WorkerStats, C};
use crate::store::{DeltaResult, Mode, Store, StoreResult};
use inkproto::request::{ErrorKind, ProtoError, Request, StoreCmd};
use inkproto::response as resp;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub const VERSION: &str = concat!("1.6.18-inkcached-", env!("CARGO_PKG_VERSION"));
/// What `-V` prints.
pub const VERSION_LINE: &str = concat!("inkcached 1.6.18-inkcached-", env!("CARGO_PKG_VERSION"));

/// Settings that commands change at run time (memcached keeps them in `settings` too).
pub struct Runtime {
    pub verbosity: AtomicU32,
    /// `stats detail on|off`.
    pub detail: AtomicBool,
    pub maxbytes: AtomicUsize,
    pub lru_crawler: AtomicBool,
    pub crawler_sleep: AtomicU32,
    pub crawler_tocrawl: AtomicU32,
    pub crawler_starts: AtomicU64,
    pub crawler_reclaimed: AtomicU64,
    pub crawler_checked: AtomicU64,
    pub slab_automove: AtomicU32,
    /// f64 bits.
    pub automove_ratio: AtomicU64,
    pub hot_lru_pct: AtomicU32,
    pub warm_lru_pct: AtomicU32,
    /// f64 bits.
    pub hot_max_factor: AtomicU64,
    pub warm_max_factor: AtomicU64,
    pub temp_lru: AtomicBool,
    pub temporary_ttl: AtomicU32,
    /// The TCP and UDP ports actually bound (for `-p -1`).
    pub tcp_port: AtomicU32,
    pub udp_port: AtomicU32,
    /// `stats sizes` counts items with at least this CAS (u64::MAX: not tracking).
    pub sizes_cas_min: AtomicU64,
}

impl Runtime {
    pub fn new(c: &Config) -> Self {
        let f = |v: f64| AtomicU64::new(v.to_bits());
        Runtime {
            verbosity: AtomicU32::new(c.verbose),
            detail: AtomicBool::new(c.detail_enabled),
            maxbytes: AtomicUsize::new(c.maxbytes),
            lru_crawler: AtomicBool::new(c.lru_crawler),
            crawler_sleep: AtomicU32::new(c.lru_crawler_sleep as u32),
            crawler_tocrawl: AtomicU32::new(c.lru_crawler_tocrawl),
            crawler_starts: AtomicU64::new(0),
            crawler_reclaimed: AtomicU64::new(0),
            crawler_checked: AtomicU64::new(0),
            slab_automove: AtomicU32::new(c.slab_automove as u32),
            automove_ratio: f(c.slab_automove_ratio),
            hot_lru_pct: AtomicU32::new(c.hot_lru_pct as u32),
            warm_lru_pct: AtomicU32::new(c.warm_lru_pct as u32),
            hot_max_factor: f(c.hot_max_factor),
            warm_max_factor: f(c.warm_max_factor),
            temp_lru: AtomicBool::new(c.temp_lru),
            temporary_ttl: AtomicU32::new(c.temporary_ttl as u32),
            tcp_port: AtomicU32::new(c.port as u32),
            udp_port: AtomicU32::new(c.udp_port as u32),
            sizes_cas_min: AtomicU64::new(if c.track_sizes { 0 } else { u64::MAX }),
        }
    }
    pub fn get_f64(a: &AtomicU64) -> f64 {
        f64::from_bits(a.load(Ordering::Relaxed))
    }
}

/// What every worker shares.
pub struct Shared {
    pub store: Store,
    pub workers: Box<[WorkerStats]>,
    pub cfg: Arc<Config>,
    pub rt: Runtime,
    pub shutdown: AtomicBool,
    pub pid: u32,
    /// Open connections and listeners (`stats conns`).
    pub conns: ConnTable,
    /// Per key prefix counters (`stats detail`).
    pub prefixes: Mutex<crate::admin::Prefixes>,
    /// `-Y`: user and password pairs.
    pub auth: RwLock<crate::auth::Users>,
}

/// What the connection does after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    /// Continue; what is queued so far is written out even if the connection is dropped
    /// later (memcached writes at `get`, `mn` and binary noop).
    Flush,
    /// Write what is pending, then close.
    Close,
    /// As `Close`, because the client asked to (`quit`): a normal close in `watch` logs.
    Quit,
    /// As `Drop`, for `shutdown`: logged with reason `shutdown`.
    Shutdown,
    /// Close at once, dropping what is pending (memcached's `conn_closing`).
    Drop,
    /// The connection became a log watcher (`watch`).
    Watch,
    /// Continue, but what is already read waits until more arrives (memcached hands the
    /// connection back after `lru_crawler metadump` and only reads on the next event).
    Pause,
}

/// What an admin command needs to know of the connection it runs on.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ctx {
    /// The connection's id in [`ConnTable`].
    pub id: usize,
    /// Answers of earlier commands of the same read are still queued (memcached refuses
    /// `watch` and `lru_crawler metadump` then).
    pub stacked: bool,
    /// The watch flags when `execute` returned [`Next::Watch`].
    pub watch_flags: u16,
}

/// Executes one request for worker `w`, appending the answer to `out`.
pub fn execute(
    sh: &Arc<Shared>,
    w: usize,
    ctx: &mut Ctx,
    req: Request<'_>,
    out: &mut Vec<u8>,
) -> Next {
    let st = &sh.workers[w];
    let store = &sh.store;
    let detail = sh.rt.detail.load(Ordering::Relaxed);
    match req {
        Request::Get { keys, cas } => {
            for key in keys.iter() {
                st.inc(C::cmd_get);
                let hit = store.get(key, None, |it| {
                    let c = (cas).then(|| it.cas());
                    resp::value(out, key, it.flags(), it.value(), c)
                });
                st.inc(if hit.is_some() {
                    C::get_hits
                } else {
                    C::get_misses
                });
                if detail {
                    crate::admin::record(sh, key, |p| p.get(hit.is_some()));
                }
            }
            resp::end(out);
            return Next::Flush;
        }
        Request::Gat { exptime, keys, cas } => {
            for key in keys.iter() {
                st.inc(C::cmd_touch);
                let hit = store.get(key, Some(exptime), |it| {
                    resp::value(out, key, it.flags(), it.value(), cas.then(|| it.cas()))
                });
                st.inc(if hit.is_some() {
                    C::touch_hits
                } else {
                    C::touch_misses
                });
                if detail {
                    crate::admin::record(sh, key, |p| p.get(hit.is_some()));
                }
            }
            resp::end(out);
            return Next::Flush;
        }
        Request::Store {
            cmd,
            key,
            flags,
            exptime,
            data,
            cas,
            noreply,
        } => {
            st.inc(C::cmd_set);
            if detail {
                crate::admin::record(sh, key, |p| p.set());
            }
            let mode = match cmd {
                StoreCmd::Set => Mode::Set,
                StoreCmd::Add => Mode::Add,
                StoreCmd::Replace => Mode::Replace,
                StoreCmd::Append => Mode::Append,
                StoreCmd::Prepend => Mode::Prepend,
                StoreCmd::Cas => Mode::Cas(cas),
            };
            let r = store.store(mode, key, flags, exptime, data);
            if cmd == StoreCmd::Cas {
                match r {
                    StoreResult::Stored(_) => st.inc(C::cas_hits),
                    StoreResult::Exists => st.inc(C::cas_badval),
                    StoreResult::NotFound => st.inc(C::cas_misses),
                    _ => {}
                }
            }
            if r == StoreResult::NoMemory {
                st.inc(C::store_no_memory);
                if cmd == StoreCmd::Set {
                    // memcached drops the old value so a failed set leaves nothing stale.
                    store.unlink_key(key);
                }
            }
            if !noreply {
                match r {
                    StoreResult::Stored(_) => resp::stored(out),
                    StoreResult::NotStored => resp::not_stored(out),
                    StoreResult::Exists => resp::exists(out),
                    StoreResult::NotFound => resp::not_found(out),
                    StoreResult::NoMemory => {
                        resp::server_error(out, "out of memory storing object")
                    }
                }
            }
        }
        Request::Delete { key, noreply } => {
            if detail {
                crate::admin::record(sh, key, |p| p.delete());
            }
            let ok = store.delete(key, None) == Ok(true);
            st.inc(if ok { C::delete_hits } else { C::delete_misses });
            if !noreply {
                if ok {
                    resp::deleted(out)
                } else {
                    resp::not_found(out)
                }
            }
        }
        Request::Arith {
            incr,
            key,
            delta,
            noreply,
        } => {
            let r = store.delta(key, incr, delta, None);
            count_delta(st, incr, &r);
            if !noreply {
                match r {
                    DeltaResult::Ok(v, _) => resp::number(out, v),
                    DeltaResult::NotFound | DeltaResult::Exists => resp::not_found(out),
                    DeltaResult::NonNumeric => {
                        resp::client_error(out, "cannot increment or decrement non-numeric value")
                    }
                }
            }
        }
        Request::Touch {
            key,
            exptime,
            noreply,
        } => {
            st.inc(C::cmd_touch);
            let ok = store.touch(key, exptime);
            st.inc(if ok { C::touch_hits } else { C::touch_misses });
            if !noreply {
                if ok {
                    resp::touched(out)
                } else {
                    resp::not_found(out)
                }
            }
        }
        Request::FlushAll { delay, noreply } => {
            st.inc(C::cmd_flush);
            let line = if !sh.cfg.flush_enabled {
                "CLIENT_ERROR flush_all not allowed"
            } else if let Some(d) = delay {
                store.flush_all(d);
                "OK"
            } else {
                "CLIENT_ERROR invalid exptime argument"
            };
            if !noreply {
                resp::line(out, line);
            }
        }
        Request::Version => resp::version(out, VERSION),
        Request::Verbosity { level, noreply } => {
            sh.rt.verbosity.store(level.min(2), Ordering::Relaxed);
            if !noreply {
                resp::ok(out);
            }
        }
        Request::Quit => return Next::Quit,
        Request::Admin { line } => return crate::admin::execute(sh, w, ctx, line, out),
        Request::Meta {
            cmd,
            key,
            flags,
            data,
            opts,
        } => {
            crate::meta::execute(sh, st, cmd, key, flags, data, &opts, out);
            if cmd == inkproto::request::MetaCmd::Noop {
                return Next::Flush;
            }
        }
    }
    Next::Continue
}

/// The counters of an incr/decr.
pub fn count_delta(st: &WorkerStats, incr: bool, r: &DeltaResult) {
    let (hit, miss) = if incr {
        (C::incr_hits, C::incr_misses)
    } else {
        (C::decr_hits, C::decr_misses)
    };
    match r {
        DeltaResult::Ok(..) => st.inc(hit),
        DeltaResult::NotFound => st.inc(miss),
        _ => {}
    }
}

/// Handles a parse error: the answer (unless suppressed) and memcached's side effects.
pub fn parse_error(sh: &Shared, w: usize, buf: &[u8], e: &ProtoError, out: &mut Vec<u8>) {
    if e.kind == ErrorKind::TooLarge {
        sh.workers[w].inc(C::store_too_large);
        if let Some((a, b)) = e.key {
            let key = &buf[a..b];
            if e.key_base64 {
                if let Some(k) = inkproto::meta::b64_decode(key) {
                    sh.store.unlink_key(&k);
                }
            } else {
                sh.store.unlink_key(key);
            }
        }
    }
    if let Some(r) = e.reply() {
        out.extend_from_slice(r.as_bytes());
    }
}
