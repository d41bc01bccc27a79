//! The meta commands (`mg`, `ms`, `md`, `ma`, `me`, `mn`) with memcached 1.6.18's semantics:
//! return flags in the order asked, vivify on miss (`N`) and recache (`R`) with win tokens
//! (`W`, `Z`), stale items (`md ... I`, `X`), the quiet mode per command, and the errors the
//! parser left to execution (opaque tokens too long, bad modes).

use crate::exec::Shared;
use crate::stats::{WorkerStats, C};
use crate::store::meta::{FETCHED, KEY_BINARY, STALE, WON};
use crate::store::{DeltaResult, Meta, Mode, StoreResult};
use inkproto::meta::{b64_decode, b64_encode, MetaOpts, MAX_OPAQUE_LEN};
use inkproto::request::{MetaCmd, MetaFlags};
use inkproto::response::{self as resp, push_u64};
use std::borrow::Cow;

const OPAQUE_TOO_LONG: &str = "CLIENT_ERROR opaque token too long";

fn flag(f: &mut Vec<u8>, c: u8) {
    f.push(b' ');
    f.push(c);
}

fn flag_num(f: &mut Vec<u8>, c: u8, v: u64) {
    flag(f, c);
    push_u64(f, v);
}

/// ` k<key>`, and ` b` with the key in base64 when it was sent so.
fn flag_key(f: &mut Vec<u8>, key: &[u8], binary: bool) {
    flag(f, b'k');
    if binary {
        b64_encode(key, f);
        flag(f, b'b');
    } else {
        f.extend_from_slice(key);
    }
}

/// Remaining TTL as memcached prints it: -1 for none, else the unsigned difference.
fn ttl(exptime: u32, now: u32) -> Vec<u8> {
    if exptime == 0 {
        b"-1".to_vec()
    } else {
        exptime.wrapping_sub(now).to_string().into_bytes()
    }
}

/// Echoes `O` and `k` flags (misses and failures); Err on an opaque token too long.
fn echo(flags: &MetaFlags<'_>, key: &[u8], binary: bool, f: &mut Vec<u8>) -> Result<(), ()> {
    for (c, arg) in flags.iter() {
        match c {
            b'O' => {
                if arg.len() + 1 > MAX_OPAQUE_LEN {
                    return Err(());
                }
                flag(f, b'O');
                f.extend_from_slice(arg);
            }
            b'k' => flag_key(f, key, binary),
            _ => {}
        }
    }
    Ok(())
}

fn line(out: &mut Vec<u8>, code: &str, f: &[u8]) {
    out.extend_from_slice(code.as_bytes());
    out.extend_from_slice(f);
    out.extend_from_slice(b"\r\n");
}

/// Executes one meta command (already parsed and its flags checked).
#[allow(clippy::too_many_arguments)]
pub fn execute(
    sh: &Shared,
    st: &WorkerStats,
    cmd: MetaCmd,
    raw_key: &[u8],
    flags: MetaFlags<'_>,
    data: Option<&[u8]>,
    opts: &MetaOpts,
    out: &mut Vec<u8>,
) {
    if cmd == MetaCmd::Noop {
        resp::line(out, "MN");
        return;
    }
    let binary = opts.base64.is_some();
    let key: Cow<'_, [u8]> = if binary {
        match b64_decode(raw_key) {
            Some(k) => Cow::Owned(k),
            None => {
                resp::client_error(out, "bad command line format");
                return;
            }
        }
    } else {
        Cow::Borrowed(raw_key)
    };
    match cmd {
        MetaCmd::Get => get(sh, st, &key, binary, flags, opts, out),
        MetaCmd::Set => set(
            sh,
            st,
            &key,
            binary,
            flags,
            data.unwrap_or_default(),
            opts,
            out,
        ),
        MetaCmd::Delete => delete(sh, st, &key, binary, flags, opts, out),
        MetaCmd::Arith => arith(sh, st, &key, binary, flags, opts, out),
        MetaCmd::Debug => debug(sh, st, &key, out),
        MetaCmd::Noop => unreachable!("answered above"),
    }
}

fn get(
    sh: &Shared,
    st: &WorkerStats,
    key: &[u8],
    binary: bool,
    flags: MetaFlags<'_>,
    o: &MetaOpts,
    out: &mut Vec<u8>,
) {
    let mut f = Vec::new();
    let r = sh.store.with_entry(key, |e| {
        let mut created = false;
        if e.item().is_none() {
            if o.vivify.is_some() {
                created = e.vivify(0, binary);
            }
            if !created {
                return Ok(None);
            }
        }
        // the value first: if it is on flash and not read yet, this attempt changes nothing
        // (it runs again once the value is in)
        let value = match o.value {
            true => match e.value() {
                Some(v) => Some(v),
                None => return Ok(None),
            },
            false => None,
        };
        let now = e.now;
        let (mut won, mut ttl_set) = (false, false);
        for (c, arg) in flags.iter() {
            let (exptime, m) = (e.item().unwrap().exptime(), e.meta());
            match c {
                b'T' => {
                    ttl_set = true;
                    let t = e.realtime(i64::from(o.ttl.unwrap_or(0)));
                    e.set_exptime(t);
                }
                b'N' if created => {
                    let t = e.realtime(i64::from(o.vivify.unwrap_or(0)));
                    e.set_exptime(t);
                    won = true;
                }
                b'R' => {
                    let r = e.realtime(i64::from(o.recache.unwrap_or(0)));
                    if !m.has(WON) && !created && exptime != 0 && exptime < r {
                        won = true;
                    }
                }
                b's' => flag_num(&mut f, b's', e.item().unwrap().value_len() as u64),
                b't' => {
                    flag(&mut f, b't');
                    f.extend_from_slice(&ttl(exptime, now));
                }
                b'c' => flag_num(&mut f, b'c', e.item().unwrap().cas()),
                b'f' => flag_num(&mut f, b'f', u64::from(e.item().unwrap().flags())),
                b'l' => flag_num(&mut f, b'l', u64::from(now.wrapping_sub(m.atime))),
                b'h' => flag_num(&mut f, b'h', u64::from(m.has(FETCHED))),
                b'O' => {
                    if arg.len() + 1 > MAX_OPAQUE_LEN {
                        return Err(());
                    }
                    flag(&mut f, b'O');
                    f.extend_from_slice(arg);
                }
                b'k' => flag_key(&mut f, e.item().unwrap().key(), m.has(KEY_BINARY)),
                _ => {}
            }
        }
        let m = e.meta();
        if m.has(WON) {
            flag(&mut f, b'Z');
        }
        if m.stale() {
            flag(&mut f, b'X');
            if !m.has(WON) {
                won = true;
            }
        }
        if won {
            flag(&mut f, b'W');
            if let Some(mm) = e.meta_mut() {
                mm.bits |= WON;
            }
        }
        e.count_hit(ttl_set);
        if !o.no_update {
            e.bump();
        }
        Ok(Some((value, ttl_set)))
    });
    match r {
        Err(()) => resp::line(out, OPAQUE_TOO_LONG),
        Ok(Some((value, ttl_set))) => {
            if ttl_set {
                st.inc(C::cmd_touch);
                st.inc(C::touch_hits);
            } else {
                st.inc(C::cmd_get);
                st.inc(C::get_hits);
            }
            match value {
                Some(v) => {
                    out.extend_from_slice(b"VA ");
                    push_u64(out, v.len() as u64);
                    line(out, "", &f);
                    resp::meta_data(out, &v);
                }
                None => line(out, "HD", &f),
            }
        }
        Ok(None) => {
            st.inc(C::cmd_get);
            st.inc(C::get_misses);
            let mut f = Vec::new();
            if echo(&flags, key, binary, &mut f).is_err() {
                resp::line(out, OPAQUE_TOO_LONG);
            } else if !o.quiet {
                line(out, "EN", &f);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn set(
    sh: &Shared,
    st: &WorkerStats,
    key: &[u8],
    binary: bool,
    flags: MetaFlags<'_>,
    data: &[u8],
    o: &MetaOpts,
    out: &mut Vec<u8>,
) {
    st.inc(C::cmd_set);
    let mut mode = match o.mode {
        Some(b'E') => Mode::Add,
        Some(b'A') => Mode::Append,
        Some(b'P') => Mode::Prepend,
        Some(b'R') => Mode::Replace,
        _ => Mode::Set,
    };
    let cas = o.cas.unwrap_or(0);
    if o.cas.is_some() && matches!(mode, Mode::Set | Mode::Replace) {
        mode = Mode::Cas(cas);
    }
    let mut extra = Meta::default();
    if o.stale && matches!(mode, Mode::Cas(_)) {
        extra = extra.with_stale();
    }
    if binary {
        extra = extra.with_key_binary();
    }
    let r = sh.store.store_with(
        mode,
        key,
        o.client_flags,
        i64::from(o.ttl.unwrap_or(0)),
        data,
        cas,
        extra,
    );
    if let Mode::Cas(_) = mode {
        match r {
            StoreResult::Stored(_) => st.inc(C::cas_hits),
            StoreResult::Exists => st.inc(C::cas_badval),
            StoreResult::NotFound => st.inc(C::cas_misses),
            _ => {}
        }
    }
    let code = match r {
        StoreResult::Stored(_) => "HD",
        StoreResult::NotStored => "NS",
        StoreResult::Exists => "EX",
        StoreResult::NotFound => "NF",
        StoreResult::NoMemory => {
            st.inc(C::store_no_memory);
            sh.store.unlink_key(key);
            resp::server_error(out, "out of memory storing object");
            return;
        }
    };
    if code == "HD" && o.quiet {
        return;
    }
    let mut f = Vec::new();
    for (c, arg) in flags.iter() {
        match c {
            b'O' => {
                flag(&mut f, b'O');
                f.extend_from_slice(arg);
            }
            b'k' => flag_key(&mut f, key, binary),
            b'c' => flag_num(
                &mut f,
                b'c',
                match r {
                    StoreResult::Stored(c) => c,
                    _ => 0,
                },
            ),
            _ => {}
        }
    }
    line(out, code, &f);
}

fn delete(
    sh: &Shared,
    st: &WorkerStats,
    key: &[u8],
    binary: bool,
    flags: MetaFlags<'_>,
    o: &MetaOpts,
    out: &mut Vec<u8>,
) {
    let mut f = Vec::new();
    if echo(&flags, key, binary, &mut f).is_err() {
        resp::line(out, OPAQUE_TOO_LONG);
        return;
    }
    let code = sh.store.with_entry(key, |e| {
        let Some(it) = e.item() else {
            return "NF";
        };
        if let Some(c) = o.cas {
            if it.cas() != c {
                return "EX";
            }
        }
        if o.stale {
            if let Some(t) = o.ttl {
                let t = e.realtime(i64::from(t));
                e.set_exptime(t);
            }
            if let Some(m) = e.meta_mut() {
                m.bits |= STALE;
                m.bits &= !WON;
            }
            e.new_cas();
        } else {
            e.delete();
        }
        "HD"
    });
    match code {
        "HD" if !o.stale => st.inc(C::delete_hits),
        "HD" => {}
        _ => st.inc(C::delete_misses),
    }
    if code == "HD" && o.quiet {
        return;
    }
    line(out, code, &f);
}

fn arith(
    sh: &Shared,
    st: &WorkerStats,
    key: &[u8],
    binary: bool,
    flags: MetaFlags<'_>,
    o: &MetaOpts,
    out: &mut Vec<u8>,
) {
    let incr = match o.mode {
        None | Some(b'I' | b'+') => true,
        Some(b'D' | b'-') => false,
        _ => {
            resp::line(out, "CLIENT_ERROR invalid mode for ma M token");
            return;
        }
    };
    let store = &sh.store;
    let mut r = store.delta(key, incr, o.delta, o.cas);
    let mut created = false;
    if r == DeltaResult::NotFound && o.vivify.is_some() {
        let digits = o.initial.to_string();
        if let StoreResult::Stored(c) =
            store.store_with(Mode::Add, key, 0, 0, digits.as_bytes(), 0, Meta::default())
        {
            r = DeltaResult::Ok(o.initial, c);
            created = true;
        }
    } else {
        crate::exec::count_delta(st, incr, &r);
    }
    let mut f = Vec::new();
    let (code, value) = match r {
        DeltaResult::Ok(v, _) => {
            let res = store.with_entry(key, |e| {
                for (c, arg) in flags.iter() {
                    let Some(it) = e.item() else { break };
                    match c {
                        b'c' => flag_num(&mut f, b'c', it.cas()),
                        b't' => {
                            flag(&mut f, b't');
                            f.extend_from_slice(&ttl(it.exptime(), e.now));
                        }
                        b'T' => {
                            let t = e.realtime(i64::from(o.ttl.unwrap_or(0)));
                            e.set_exptime(t);
                        }
                        b'N' if created => {
                            let t = e.realtime(i64::from(o.vivify.unwrap_or(0)));
                            e.set_exptime(t);
                        }
                        b'O' => {
                            if arg.len() + 1 > MAX_OPAQUE_LEN {
                                return Err(());
                            }
                            flag(&mut f, b'O');
                            f.extend_from_slice(arg);
                        }
                        b'k' => flag_key(&mut f, key, binary),
                        _ => {}
                    }
                }
                Ok(())
            });
            if res.is_err() {
                resp::line(out, OPAQUE_TOO_LONG);
                return;
            }
            // q hides the answer of an incr/decr that found the item, not of a vivify
            if o.quiet && !created {
                return;
            }
            ("HD", o.value.then(|| v.to_string()))
        }
        DeltaResult::NonNumeric => {
            resp::client_error(out, "cannot increment or decrement non-numeric value");
            return;
        }
        DeltaResult::NotFound | DeltaResult::Exists => {
            if echo(&flags, key, binary, &mut f).is_err() {
                resp::line(out, OPAQUE_TOO_LONG);
                return;
            }
            (
                if r == DeltaResult::NotFound {
                    "NF"
                } else {
                    "EX"
                },
                None,
            )
        }
    };
    match value {
        Some(v) => {
            out.extend_from_slice(b"VA ");
            push_u64(out, v.len() as u64);
            line(out, "", &f);
            resp::meta_data(out, v.as_bytes());
        }
        None => line(out, code, &f),
    }
}

fn debug(sh: &Shared, st: &WorkerStats, key: &[u8], out: &mut Vec<u8>) {
    st.inc(C::cmd_meta);
    let store = &sh.store;
    let l = store.with_entry(key, |e| {
        let it = e.item()?;
        let m = e.meta();
        let now = e.now;
        let mut l = b"ME ".to_vec();
        if m.has(KEY_BINARY) {
            b64_encode(it.key(), &mut l);
        } else {
            l.extend_from_slice(it.key());
        }
        let exp = if it.exptime() == 0 {
            -1
        } else {
            now.wrapping_sub(it.exptime()) as i32
        };
        l.extend_from_slice(
            format!(
                " exp={exp} la={} cas={} fetch={} cls={} size={}\r\n",
                now.wrapping_sub(m.atime),
                it.cas(),
                if m.has(FETCHED) { "yes" } else { "no" },
                e.class(),
                e.ntotal()
            )
            .as_bytes(),
        );
        Some(l)
    });
    match l {
        Some(l) => out.extend_from_slice(&l),
        None => resp::line(out, "EN"),
    }
}
