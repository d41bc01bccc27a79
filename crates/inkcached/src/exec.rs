//! Executes parsed requests against the store and composes the answers.

use crate::stats::{WorkerStats, C};
use crate::store::{DeltaResult, Mode, Store, StoreResult};
use inkproto::request::{ErrorKind, MetaCmd, MetaFlags, ProtoError, Request, StoreCmd};
use inkproto::response as resp;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

pub const VERSION: &str = concat!("1.6.18-inkcached-", env!("CARGO_PKG_VERSION"));

/// Settings as given on the command line (reported by `stats settings`).
#[derive(Clone, Debug)]
pub struct Settings {
    pub tcp_port: u16,
    pub udp_port: u16,
    pub listen: String,
    pub threads: usize,
    pub max_bytes: usize,
    pub max_conns: usize,
    pub max_item: usize,
    pub verbose: u8,
}

/// What every worker shares.
pub struct Shared {
    pub store: Store,
    pub workers: Box<[WorkerStats]>,
    pub settings: Settings,
    pub verbosity: AtomicU32,
    pub shutdown: AtomicBool,
    pub pid: u32,
}

/// What the connection should do after a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    Continue,
    Close,
}

/// Executes one request for worker `w`, appending the answer to `out`.
pub fn execute(sh: &Arc<Shared>, w: usize, req: Request<'_>, out: &mut Vec<u8>) -> Next {
    let st = &sh.workers[w];
    let store = &sh.store;
    match req {
        Request::Get { keys, cas } => {
            for key in keys.iter() {
                st.inc(C::cmd_get);
                let hit = store.get(key, None, |it| {
                    resp::value(out, key, it.flags(), it.value(), cas.then(|| it.cas()))
                });
                st.inc(if hit.is_some() {
                    C::get_hits
                } else {
                    C::get_misses
                });
            }
            resp::end(out);
        }
        Request::Gat { exptime, keys, cas } => {
            for key in keys.iter() {
                st.inc(C::cmd_touch);
                st.inc(C::cmd_get);
                let hit = store.get(key, Some(exptime), |it| {
                    resp::value(out, key, it.flags(), it.value(), cas.then(|| it.cas()))
                });
                if hit.is_some() {
                    st.inc(C::touch_hits);
                    st.inc(C::get_hits);
                } else {
                    st.inc(C::touch_misses);
                    st.inc(C::get_misses);
                }
            }
            resp::end(out);
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
                st.inc(match r {
                    StoreResult::Stored(_) => C::cas_hits,
                    StoreResult::Exists => C::cas_badval,
                    _ => C::cas_misses,
                });
            }
            if !noreply {
                match r {
                    StoreResult::Stored(_) => resp::stored(out),
                    StoreResult::NotStored => resp::not_stored(out),
                    StoreResult::Exists => resp::exists(out),
                    StoreResult::NotFound => resp::not_found(out),
                }
            }
        }
        Request::Delete { key, noreply } => {
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
            let (hit, miss) = if incr {
                (C::incr_hits, C::incr_misses)
            } else {
                (C::decr_hits, C::decr_misses)
            };
            st.inc(if matches!(r, DeltaResult::NotFound) {
                miss
            } else {
                hit
            });
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
            store.flush_all(delay);
            if !noreply {
                resp::ok(out);
            }
        }
        Request::Stats { group } => stats(sh, group, out),
        Request::Version => resp::version(out, VERSION),
        Request::Verbosity { noreply } => {
            if !noreply {
                resp::ok(out);
            }
        }
        Request::Quit => return Next::Close,
        Request::Meta {
            cmd,
            key,
            flags,
            data,
        } => {
            st.inc(C::cmd_meta);
            meta(sh, st, cmd, key, flags, data, out);
        }
    }
    Next::Continue
}

/// Handles a parse error: the answer (unless suppressed) and memcached's side effects.
pub fn parse_error(sh: &Shared, w: usize, buf: &[u8], e: &ProtoError, out: &mut Vec<u8>) {
    if e.kind == ErrorKind::TooLarge {
        sh.workers[w].inc(C::store_too_large);
        if let Some((a, b)) = e.key {
            let _ = sh.store.delete(&buf[a..b], None);
        }
    }
    if let Some(r) = e.reply() {
        out.extend_from_slice(r.as_bytes());
    }
}

fn rusage() -> (f64, f64) {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a rusage struct, RUSAGE_SELF is a valid `who`.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (tv(ru.ru_utime), tv(ru.ru_stime))
}

fn stats(sh: &Shared, group: Option<&[u8]>, out: &mut Vec<u8>) {
    let s = &sh.settings;
    let store = &sh.store;
    match group {
        None => {
            let now = store.now();
            let unix = store.process_started() + now as i64;
            let (u, sy) = rusage();
            let c = crate::stats::sum(&sh.workers);
            let ss = store.stats();
            resp::stat(out, "pid", sh.pid);
            resp::stat(out, "uptime", now);
            resp::stat(out, "time", unix);
            resp::stat(out, "version", VERSION);
            resp::stat(out, "pointer_size", usize::BITS);
            resp::stat(out, "rusage_user", format!("{u:.6}"));
            resp::stat(out, "rusage_system", format!("{sy:.6}"));
            resp::stat(out, "max_connections", s.max_conns);
            for (name, v) in crate::stats::NAMES.iter().zip(&c) {
                resp::stat(out, name, v);
                if *name == "get_flushed" {
                    crate::stats::extstore_gets(out, store);
                }
            }
            resp::stat(out, "limit_maxbytes", s.max_bytes);
            resp::stat(out, "threads", s.threads);
            resp::stat(out, "bytes", ss.bytes);
            resp::stat(out, "curr_items", ss.curr_items);
            resp::stat(out, "total_items", ss.total_items);
            resp::stat(out, "expired_unfetched", 0);
            resp::stat(out, "evicted_unfetched", 0);
            resp::stat(out, "evictions", ss.evictions);
            resp::stat(out, "reclaimed", ss.reclaimed);
            crate::stats::extstore(out, store);
        }
        Some(b"settings") => {
            resp::stat(out, "maxbytes", s.max_bytes);
            resp::stat(out, "maxconns", s.max_conns);
            resp::stat(out, "tcpport", s.tcp_port);
            resp::stat(out, "udpport", s.udp_port);
            resp::stat(
                out,
                "inter",
                if s.listen.is_empty() {
                    "NULL"
                } else {
                    &s.listen
                },
            );
            resp::stat(out, "verbosity", sh.verbosity.load(Ordering::Relaxed));
            resp::stat(out, "evictions", "on");
            resp::stat(out, "num_threads", s.threads);
            resp::stat(out, "num_threads_per_udp", 1);
            resp::stat(out, "cas_enabled", "yes");
            resp::stat(out, "item_size_max", s.max_item);
            resp::stat(out, "reuseport", "yes");
            resp::stat(out, "store_shards", store.shard_count());
            crate::stats::extstore_settings(out, store);
        }
        Some(b"items") => {
            let ss = store.stats();
            if ss.curr_items > 0 {
                resp::stat(out, "items:1:number", ss.curr_items);
                resp::stat(out, "items:1:age", 0);
                resp::stat(out, "items:1:evicted", ss.evictions);
                resp::stat(out, "items:1:reclaimed", ss.reclaimed);
            }
        }
        Some(b"slabs") => {
            let ss = store.stats();
            if ss.curr_items > 0 {
                resp::stat(out, "1:chunk_size", 0);
                resp::stat(out, "1:used_chunks", ss.curr_items);
                resp::stat(out, "1:mem_requested", ss.bytes);
            }
            resp::stat(out, "active_slabs", u32::from(ss.curr_items > 0));
            resp::stat(out, "total_malloced", ss.bytes);
        }
        Some(b"sizes") => {}
        Some(b"reset") => {
            for w in sh.workers.iter() {
                w.reset();
            }
            if let Some(e) = store.ext() {
                e.reset();
            }
            resp::line(out, "RESET");
            return;
        }
        Some(_) => {
            resp::error(out);
            return;
        }
    }
    resp::end(out);
}

// ---- meta protocol ----

fn b64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    if s.is_empty() || s.len() & 3 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for ch in s.chunks(4) {
        let pad = ch.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in ch.iter().enumerate() {
            let v = if i >= 4 - pad { 0 } else { val(c)? };
            n = (n << 6) | v;
        }
        out.push((n >> 16) as u8);
        if pad < 2 {
            out.push((n >> 8) as u8);
        }
        if pad < 1 {
            out.push(n as u8);
        }
    }
    Some(out)
}

fn parse_num<T: std::str::FromStr>(t: &[u8]) -> Option<T> {
    std::str::from_utf8(t).ok()?.parse().ok()
}

/// Flags echoed on every meta answer: opaque, key (and `b` if it was base64).
fn echo(flags: &MetaFlags<'_>, raw_key: &[u8], b64: bool, f: &mut Vec<u8>) {
    for (c, arg) in flags.iter() {
        match c {
            b'O' => push_flag(f, b'O', arg),
            b'k' => {
                push_flag(f, b'k', raw_key);
                if b64 {
                    push_flag(f, b'b', b"");
                }
            }
            _ => {}
        }
    }
}

fn push_flag(f: &mut Vec<u8>, c: u8, arg: &[u8]) {
    if !f.is_empty() {
        f.push(b' ');
    }
    f.push(c);
    f.extend_from_slice(arg);
}

fn meta(
    sh: &Shared,
    st: &WorkerStats,
    cmd: MetaCmd,
    raw_key: &[u8],
    flags: MetaFlags<'_>,
    data: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    let store = &sh.store;
    if cmd == MetaCmd::Noop {
        resp::line(out, "MN");
        return;
    }
    let b64 = flags.has(b'b');
    let decoded;
    let key: &[u8] = if b64 {
        match b64_decode(raw_key) {
            Some(k) if !k.is_empty() && k.len() <= inkproto::KEY_MAX_LEN => {
                decoded = k;
                &decoded
            }
            _ => {
                resp::client_error(out, "error decoding key");
                return;
            }
        }
    } else {
        raw_key
    };
    let quiet = flags.has(b'q');
    let num = |c: u8| -> Result<Option<i64>, ()> {
        match flags.get(c) {
            None => Ok(None),
            Some(a) => parse_num::<i64>(a).map(Some).ok_or(()),
        }
    };
    let unum = |c: u8| -> Result<Option<u64>, ()> {
        match flags.get(c) {
            None => Ok(None),
            Some(a) => parse_num::<u64>(a).map(Some).ok_or(()),
        }
    };
    let mut f = Vec::new();
    match cmd {
        MetaCmd::Get => {
            st.inc(C::cmd_get);
            let Ok(touch) = num(b'T') else {
                resp::client_error(out, "bad token in command line format");
                return;
            };
            if touch.is_some() {
                st.inc(C::cmd_touch);
            }
            let now = store.now();
            let mut value = None;
            let hit = store.get(key, touch, |it| {
                // return flags in the order the request gives them, as memcached does
                for (c, arg) in flags.iter() {
                    match c {
                        b'O' => push_flag(&mut f, b'O', arg),
                        b'k' => {
                            push_flag(&mut f, b'k', raw_key);
                            if b64 {
                                push_flag(&mut f, b'b', b"");
                            }
                        }
                        b'c' => push_flag(&mut f, b'c', it.cas().to_string().as_bytes()),
                        b'f' => push_flag(&mut f, b'f', it.flags().to_string().as_bytes()),
                        b's' => push_flag(&mut f, b's', it.value().len().to_string().as_bytes()),
                        b't' => {
                            let e = it.exptime();
                            let ttl = if e == 0 {
                                -1
                            } else {
                                i64::from(e) - i64::from(now)
                            };
                            push_flag(&mut f, b't', ttl.to_string().as_bytes())
                        }
                        b'h' => push_flag(&mut f, b'h', b"0"),
                        b'l' => push_flag(&mut f, b'l', b"0"),
                        _ => {}
                    }
                }
                if flags.has(b'v') {
                    value = Some(it.value().to_vec());
                }
            });
            if hit.is_some() {
                st.inc(C::get_hits);
                match value {
                    Some(v) => {
                        resp::meta(out, "VA", Some(v.len()), &f);
                        resp::meta_data(out, &v);
                    }
                    None => {
                        if !quiet {
                            resp::meta(out, "HD", None, &f)
                        }
                    }
                }
            } else {
                st.inc(C::get_misses);
                if !quiet {
                    echo(&flags, raw_key, b64, &mut f);
                    resp::meta(out, "EN", None, &f);
                }
            }
        }
        MetaCmd::Set => {
            st.inc(C::cmd_set);
            let data = data.unwrap_or_default();
            let (Ok(ttl), Ok(fl), Ok(cas)) = (num(b'T'), unum(b'F'), unum(b'C')) else {
                resp::client_error(out, "bad token in command line format");
                return;
            };
            let mode = match flags.get(b'M').map(|m| m.first().copied()) {
                None => Mode::Set,
                Some(Some(b'S' | b's')) => Mode::Set,
                Some(Some(b'E' | b'e')) => Mode::Add,
                Some(Some(b'A' | b'a')) => Mode::Append,
                Some(Some(b'P' | b'p')) => Mode::Prepend,
                Some(Some(b'R' | b'r')) => Mode::Replace,
                _ => {
                    resp::client_error(out, "invalid mode for ms M token");
                    return;
                }
            };
            let mode = match cas {
                Some(c) => Mode::Cas(c),
                None => mode,
            };
            let r = store.store(mode, key, fl.unwrap_or(0) as u32, ttl.unwrap_or(0), data);
            if let StoreResult::Stored(c) = r {
                if flags.has(b'c') {
                    push_flag(&mut f, b'c', c.to_string().as_bytes());
                }
            }
            echo(&flags, raw_key, b64, &mut f);
            match r {
                StoreResult::Stored(_) => {
                    if !quiet {
                        resp::meta(out, "HD", None, &f)
                    }
                }
                StoreResult::NotStored => resp::meta(out, "NS", None, &f),
                StoreResult::Exists => resp::meta(out, "EX", None, &f),
                StoreResult::NotFound => resp::meta(out, "NF", None, &f),
            }
        }
        MetaCmd::Delete => {
            let Ok(cas) = unum(b'C') else {
                resp::client_error(out, "bad token in command line format");
                return;
            };
            let r = store.delete(key, cas);
            echo(&flags, raw_key, b64, &mut f);
            match r {
                Ok(true) => {
                    st.inc(C::delete_hits);
                    if !quiet {
                        resp::meta(out, "HD", None, &f)
                    }
                }
                Ok(false) => {
                    st.inc(C::delete_misses);
                    resp::meta(out, "NF", None, &f)
                }
                Err(()) => resp::meta(out, "EX", None, &f),
            }
        }
        MetaCmd::Arith => {
            let (Ok(viv), Ok(init), Ok(delta), Ok(cas), Ok(ttl)) =
                (num(b'N'), unum(b'J'), unum(b'D'), unum(b'C'), num(b'T'))
            else {
                resp::client_error(out, "bad token in command line format");
                return;
            };
            let incr = match flags.get(b'M').map(|m| m.first().copied()) {
                None => true,
                Some(Some(b'I' | b'i' | b'+')) => true,
                Some(Some(b'D' | b'd' | b'-')) => false,
                _ => {
                    resp::client_error(out, "invalid mode for ma M token");
                    return;
                }
            };
            let delta = delta.unwrap_or(1);
            let mut r = store.delta(key, incr, delta, cas);
            if r == DeltaResult::NotFound {
                if let Some(v) = viv {
                    let init = init.unwrap_or(0);
                    r = match store.store(Mode::Add, key, 0, v, init.to_string().as_bytes()) {
                        StoreResult::Stored(c) => DeltaResult::Ok(init, c),
                        _ => store.delta(key, incr, delta, cas),
                    };
                }
            }
            if let (DeltaResult::Ok(..), Some(t)) = (r, ttl) {
                store.touch(key, t);
            }
            let (hit, miss) = if incr {
                (C::incr_hits, C::incr_misses)
            } else {
                (C::decr_hits, C::decr_misses)
            };
            st.inc(if r == DeltaResult::NotFound {
                miss
            } else {
                hit
            });
            match r {
                DeltaResult::Ok(v, c) => {
                    let now = store.now();
                    for (fc, _) in flags.iter() {
                        match fc {
                            b'c' => push_flag(&mut f, b'c', c.to_string().as_bytes()),
                            b't' => {
                                let e = store.peek(key, |it| it.exptime()).unwrap_or(0);
                                let t = if e == 0 {
                                    -1
                                } else {
                                    i64::from(e) - i64::from(now)
                                };
                                push_flag(&mut f, b't', t.to_string().as_bytes());
                            }
                            _ => {}
                        }
                    }
                    echo(&flags, raw_key, b64, &mut f);
                    if flags.has(b'v') {
                        let s = v.to_string();
                        resp::meta(out, "VA", Some(s.len()), &f);
                        resp::meta_data(out, s.as_bytes());
                    } else if !quiet {
                        resp::meta(out, "HD", None, &f);
                    }
                }
                DeltaResult::NotFound => {
                    echo(&flags, raw_key, b64, &mut f);
                    resp::meta(out, "NF", None, &f)
                }
                DeltaResult::Exists => {
                    echo(&flags, raw_key, b64, &mut f);
                    resp::meta(out, "EX", None, &f)
                }
                DeltaResult::NonNumeric => {
                    resp::client_error(out, "cannot increment or decrement non-numeric value")
                }
            }
        }
        MetaCmd::Debug => {
            let now = store.now();
            let r = store.peek(key, |it| {
                let e = it.exptime();
                let exp = if e == 0 {
                    -1
                } else {
                    i64::from(e) - i64::from(now)
                };
                format!(
                    "ME {} exp={} la=0 cas={} fetch=no cls=1 size={}",
                    String::from_utf8_lossy(raw_key),
                    exp,
                    it.cas(),
                    it.size()
                )
            });
            match r {
                Some(l) => resp::line(out, &l),
                None => resp::line(out, "EN"),
            }
        }
        MetaCmd::Noop => unreachable!("handled above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64() {
        assert_eq!(b64_decode(b"a2V5").unwrap(), b"key");
        assert_eq!(b64_decode(b"YQ==").unwrap(), b"a");
        assert_eq!(b64_decode(b"YWI=").unwrap(), b"ab");
        assert!(b64_decode(b"a2V").is_none());
        assert!(b64_decode(b"a*V5").is_none());
    }
}
