//! `watch` (live logs of fetches, stores and connections, in memcached's log line format) and
//! `lru_crawler` (expired item reclaim, `metadump`).
//!
//! A `watch` connection stops taking commands and receives log lines. Workers that serve a
//! logged event format its line once and append it to every matching watcher's buffer (bounded
//! by `-o watcher_logbuf_size`; lines that do not fit are skipped, as memcached skips them, and
//! the next line that fits is preceded by `skipped=N`),
//! then wake the watcher's worker, which writes the buffer out. With no watcher, logging costs
//! one relaxed load per event.

use crate::exec::{Ctx, Next, Shared};
use crate::store::StoreResult;
use inkproto::num::strtoul32;
use inkproto::response as resp;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

pub const LOG_FETCHERS: u16 = 1;
pub const LOG_MUTATIONS: u16 = 2;
pub const LOG_EVICTIONS: u16 = 4;
pub const LOG_SYSEVENTS: u16 = 8;
pub const LOG_CONNEVENTS: u16 = 16;
pub const LOG_RAWCMDS: u16 = 32;
const LOG_PROXY: u16 = 64;

/// memcached's limit of simultaneous watchers.
const MAX_WATCHERS: usize = 20;

struct Watcher {
    conn: usize,
    worker: usize,
    flags: u16,
    buf: Arc<Mutex<Vec<u8>>>,
    /// Lines that did not fit in `buf` since the last one that did (memcached's
    /// `w->skipped`): told to the watcher as `skipped=N` before its next line.
    skipped: AtomicU64,
}

#[derive(Default)]
pub struct Watchers {
    count: AtomicUsize,
    gid: AtomicU64,
    list: Mutex<Vec<Watcher>>,
    /// Lines given to a watcher's buffer, and lines skipped for want of room in it (`stats`:
    /// log_watcher_sent, log_watcher_skipped).
    pub sent: AtomicU64,
    pub skipped: AtomicU64,
    /// Each worker's waker, set once the workers run.
    pub wakers: std::sync::OnceLock<Vec<mio::Waker>>,
}

impl Watchers {
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// `stats reset`: the sent and skipped counts start again from zero.
    pub fn reset_stats(&self) {
        self.sent.store(0, Ordering::Relaxed);
        self.skipped.store(0, Ordering::Relaxed);
    }

    /// Adds a watcher; its lines go to `buf`. False if too many.
    fn add(&self, conn: usize, worker: usize, flags: u16, buf: Arc<Mutex<Vec<u8>>>) -> bool {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() >= MAX_WATCHERS {
            return false;
        }
        l.push(Watcher {
            conn,
            worker,
            flags,
            buf,
            skipped: AtomicU64::new(0),
        });
        self.count.store(l.len(), Ordering::Relaxed);
        true
    }

    /// Removes the watcher of connection `conn` (closed).
    pub fn remove(&self, conn: usize) {
        let mut l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        l.retain(|w| w.conn != conn);
        self.count.store(l.len(), Ordering::Relaxed);
    }

    /// Appends a line made by `f` to the watchers asking for `flag`.
    fn log(&self, flag: u16, limit: usize, f: impl FnOnce(&mut String)) {
        if self.count() == 0 {
            return;
        }
        let l = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if !l.iter().any(|w| w.flags & flag != 0) {
            return;
        }
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.gid.fetch_add(1, Ordering::Relaxed) + 1;
        let mut line = format!("ts={}.{} gid={gid} ", t.as_secs(), t.subsec_micros());
        f(&mut line);
        line.push('\n');
        for w in l.iter().filter(|w| w.flags & flag != 0) {
            {
                let mut b = w.buf.lock().unwrap_or_else(|e| e.into_inner());
                let skipped = w.skipped.load(Ordering::Relaxed);
                let note = if skipped > 0 {
                    format!("skipped={skipped}\n")
                } else {
                    String::new()
                };
                if b.len() + note.len() + line.len() > limit {
                    w.skipped.fetch_add(1, Ordering::Relaxed);
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                b.extend_from_slice(note.as_bytes());
                b.extend_from_slice(line.as_bytes());
                w.skipped.store(0, Ordering::Relaxed);
                self.sent.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(wk) = self.wakers.get().and_then(|v| v.get(w.worker)) {
                let _ = wk.wake();
            }
        }
    }
}

/// memcached's key encoding in logs: letters, digits and `-._~` as they are, the rest `%XX`.
pub fn uriencode(key: &[u8], out: &mut String) {
    for &b in key {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The watchers of this process (one server per process).
pub static WATCH: std::sync::LazyLock<Watchers> = std::sync::LazyLock::new(Watchers::default);
/// `-o watcher_logbuf_size`.
pub static BUF_LIMIT: AtomicUsize = AtomicUsize::new(256 * 1024);

thread_local! {
    /// The descriptor of the connection this worker is serving (`cfd=` in log lines).
    static CURRENT_FD: std::cell::Cell<i32> = const { std::cell::Cell::new(0) };
}

/// Notes which connection the following log lines are for.
pub fn set_current_fd(fd: i32) {
    CURRENT_FD.with(|c| c.set(fd));
}

fn cfd() -> i32 {
    CURRENT_FD.with(|c| c.get())
}

/// A key lookup (`watch fetchers`), as memcached logs each one: `found` is (class, value
/// size) of a live item; `gone` says why a stored item was not live (flushed or expired).
pub fn on_fetch(key: &[u8], found: Option<(usize, usize)>, gone: Option<&str>) {
    if WATCH.count() == 0 {
        return;
    }
    let (status, cls, size) = match (found, gone) {
        (Some((c, s)), _) => ("found", c, s),
        (None, Some(g)) => (g, 0, 0),
        (None, None) => ("not_found", 0, 0),
    };
    WATCH.log(LOG_FETCHERS, BUF_LIMIT.load(Ordering::Relaxed), |l| {
        l.push_str("type=item_get key=");
        uriencode(key, l);
        l.push_str(&format!(
            " status={status} clsid={cls} cfd={} size={size}",
            cfd()
        ));
    });
}

/// An item evicted (`watch evictions`), as memcached logs it: whether it was ever fetched, its
/// remaining TTL (-1 if it has none), seconds since it was last accessed, its class and its
/// value's size.
pub fn on_evict(key: &[u8], fetched: bool, ttl: i64, la: u32, cls: usize, size: usize) {
    WATCH.log(LOG_EVICTIONS, BUF_LIMIT.load(Ordering::Relaxed), |l| {
        l.push_str("type=eviction key=");
        uriencode(key, l);
        let fetch = if fetched { "yes" } else { "no" };
        l.push_str(&format!(
            " fetch={fetch} ttl={ttl} la={la} clsid={cls} size={size}"
        ));
    });
}

/// A store (`watch mutations`): memcached's command name, result, the remaining TTL, class
/// and value size of the item stored.
pub fn on_store(key: &[u8], cmd: &str, r: StoreResult, ttl: u32, cls: usize, size: usize) {
    if WATCH.count() == 0 {
        return;
    }
    let status = match r {
        StoreResult::Stored(_) => "stored",
        StoreResult::NotStored => "not_stored",
        StoreResult::Exists => "exists",
        StoreResult::NotFound => "not_found",
        StoreResult::NoMemory => "no_memory",
    };
    WATCH.log(LOG_MUTATIONS, BUF_LIMIT.load(Ordering::Relaxed), |l| {
        l.push_str("type=item_store key=");
        uriencode(key, l);
        l.push_str(&format!(
            " status={status} cmd={cmd} ttl={ttl} clsid={cls} cfd={} size={size}",
            cfd()
        ));
    });
}

/// Why a connection closed, as memcached's `watch connevents` says it (`close_reasons`): an
/// error unless the client ended it, it sat idle past `-o idle_timeout`, or it asked for
/// `shutdown`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CloseReason {
    #[default]
    Error,
    Normal,
    IdleTimeout,
    Shutdown,
}

impl CloseReason {
    fn as_str(self) -> &'static str {
        match self {
            CloseReason::Error => "error",
            CloseReason::Normal => "normal",
            CloseReason::IdleTimeout => "idle_timeout",
            CloseReason::Shutdown => "shutdown",
        }
    }
}

/// A connection opened (`closed` None) or closed (`watch connevents`).
pub fn conn_event(closed: Option<CloseReason>, peer: &str, fd: i32) {
    if WATCH.count() == 0 {
        return;
    }
    let (rip, rport, transport) = match peer.rsplit_once(':') {
        Some((a, p)) => match a.split_once(':') {
            Some((t, ip)) => (ip.trim_matches(['[', ']']), p, t),
            None => (a, p, "local"),
        },
        None => (peer, "0", "local"),
    };
    WATCH.log(
        LOG_CONNEVENTS,
        BUF_LIMIT.load(Ordering::Relaxed),
        |l| match closed {
            None => l.push_str(&format!(
                "type=conn_new rip={rip} rport={rport} transport={transport} cfd={fd}"
            )),
            Some(r) => l.push_str(&format!(
                "type=conn_close rip={rip} rport={rport} transport={transport} reason={} cfd={fd}",
                r.as_str()
            )),
        },
    );
}

/// `watch [kinds...]`: the connection becomes a watcher.
pub fn start(
    sh: &Arc<Shared>,
    ctx: &mut Ctx,
    t: &[&[u8]],
    noreply: bool,
    out: &mut Vec<u8>,
) -> Next {
    let say = |out: &mut Vec<u8>, l: &str| {
        if !noreply {
            resp::line(out, l);
        }
    };
    if !sh.cfg.watch_enabled {
        say(out, "CLIENT_ERROR watch commands not allowed");
        return Next::Continue;
    }
    if ctx.stacked {
        say(out, "ERROR cannot pipeline other commands before watch");
        return Next::Continue;
    }
    let mut flags = 0;
    for k in &t[1..] {
        flags |= match *k {
            b"rawcmds" => LOG_RAWCMDS,
            b"evictions" => LOG_EVICTIONS,
            b"fetchers" => LOG_FETCHERS,
            b"mutations" => LOG_MUTATIONS,
            b"sysevents" => LOG_SYSEVENTS,
            b"connevents" => LOG_CONNEVENTS,
            b"proxyreqs" | b"proxyevents" | b"proxyuser" => LOG_PROXY,
            _ => {
                say(out, "ERROR");
                return Next::Continue;
            }
        };
    }
    if t.len() == 1 {
        flags = LOG_FETCHERS;
    }
    ctx.watch_flags = flags;
    Next::Watch
}

/// Registers connection `conn` of worker `worker` as a watcher writing into `buf`; the "OK"
/// (or memcached's refusal) goes first into `out`. False if refused.
pub fn register(
    conn: usize,
    worker: usize,
    flags: u16,
    buf: Arc<Mutex<Vec<u8>>>,
    out: &mut Vec<u8>,
) -> bool {
    if WATCH.add(conn, worker, flags, buf) {
        resp::ok(out);
        true
    } else {
        resp::line(out, "WATCHER_TOO_MANY log watcher limit reached");
        false
    }
}

/// Parses memcached's class list: `all`, `hash` or `1,2,3` (None: a bad class).
fn classes(sh: &Shared, arg: &[u8]) -> Option<Vec<usize>> {
    if arg == b"all" || arg == b"hash" {
        return Some(Vec::new());
    }
    let mut v = Vec::new();
    for p in arg.split(|&b| b == b',').filter(|p| !p.is_empty()) {
        let c = strtoul32(p)? as usize;
        if !(1..crate::slabs::MAX_CLASSES).contains(&c) {
            return None;
        }
        v.push(c);
    }
    let _ = sh;
    Some(v)
}

/// `lru_crawler crawl|metadump|tocrawl|sleep|enable|disable ...`.
pub fn lru_crawler(sh: &Arc<Shared>, ctx: &Ctx, t: &[&[u8]], out: &mut Vec<u8>) -> Next {
    let n = t.len() + 1;
    let rt = &sh.rt;
    let enabled = rt.lru_crawler.load(Ordering::Relaxed);
    let sub = t.get(1).copied().unwrap_or_default();
    match (n, sub) {
        (4, b"crawl") | (4, b"metadump") => {
            let dump = sub == b"metadump";
            if !enabled {
                resp::line(out, "CLIENT_ERROR lru crawler disabled");
            } else if dump && !sh.cfg.dump_enabled {
                resp::line(out, "ERROR metadump not allowed");
            } else if dump && ctx.stacked {
                resp::line(out, "ERROR cannot pipeline other commands before metadump");
            } else {
                match classes(sh, t[2]) {
                    None => resp::line(out, "BADCLASS invalid class id"),
                    // memcached cannot crawl for expired items in hash order
                    Some(_) if !dump && t[2] == b"hash" => {
                        resp::line(out, "ERROR an unknown error happened")
                    }
                    Some(cls) => {
                        rt.crawler_starts.fetch_add(1, Ordering::Relaxed);
                        if dump {
                            metadump(sh, &cls, out);
                            return Next::Pause;
                        } else {
                            resp::ok(out);
                            let (checked, dropped) = sh.store.crawl(&cls);
                            rt.crawler_checked.fetch_add(checked, Ordering::Relaxed);
                            rt.crawler_reclaimed.fetch_add(dropped, Ordering::Relaxed);
                        }
                    }
                }
            }
        }
        (4, b"tocrawl") => match strtoul32(t[2]) {
            Some(v) => {
                rt.crawler_tocrawl.store(v, Ordering::Relaxed);
                resp::ok(out);
            }
            None => resp::line(out, "CLIENT_ERROR bad command line format"),
        },
        (4, b"sleep") => match strtoul32(t[2]) {
            Some(v) if v > 1_000_000 => {
                resp::line(out, "CLIENT_ERROR sleep must be one second or less")
            }
            Some(v) => {
                rt.crawler_sleep.store(v, Ordering::Relaxed);
                resp::ok(out);
            }
            None => resp::line(out, "CLIENT_ERROR bad command line format"),
        },
        (3, b"enable") => {
            if enabled {
                resp::line(out, "ERROR failed to start lru crawler thread");
            } else {
                rt.lru_crawler.store(true, Ordering::Relaxed);
                resp::ok(out);
            }
        }
        (3, b"disable") => {
            rt.lru_crawler.store(false, Ordering::Relaxed);
            resp::ok(out);
        }
        _ => resp::error(out),
    }
    Next::Continue
}

fn metadump(sh: &Shared, cls: &[usize], out: &mut Vec<u8>) {
    let started = sh.store.process_started();
    let mut lines: Vec<(usize, String)> = Vec::new();
    sh.store.for_each(false, |s| {
        if !cls.is_empty() && !cls.contains(&s.cls) {
            return true;
        }
        let mut l = String::from("key=");
        uriencode(s.item.key(), &mut l);
        let e = s.item.exptime();
        let exp = if e == 0 { -1 } else { i64::from(e) + started };
        l.push_str(&format!(
            " exp={exp} la={} cas={} fetch={} cls={} size={}\n",
            i64::from(s.meta.atime) + started,
            s.item.cas(),
            if s.meta.has(crate::store::meta::FETCHED) {
                "yes"
            } else {
                "no"
            },
            s.cls,
            s.ntotal
        ));
        lines.push((s.cls, l));
        true
    });
    // memcached crawls every class at once, one item of each class in turn
    let mut per: std::collections::BTreeMap<usize, std::collections::VecDeque<String>> =
        Default::default();
    for (c, l) in lines {
        per.entry(c).or_default().push_back(l);
    }
    while !per.is_empty() {
        per.retain(|_, q| match q.pop_front() {
            Some(l) => {
                out.extend_from_slice(l.as_bytes());
                true
            }
            None => false,
        });
    }
    resp::end(out);
}
