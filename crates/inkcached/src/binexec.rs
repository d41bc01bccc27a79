//! The binary protocol: framing and execution, with memcached 1.6.18's answers (`proto_bin.c`):
//! the checks of each opcode's lengths (a bad one is `Invalid arguments` and the connection
//! closes), quiet variants that answer only errors (quiet gets: only hits), error bodies in
//! memcached's words, stats as one packet per value, and unknown opcodes refused with their
//! body swallowed.

use crate::exec::{count_delta, Next, Shared};
use crate::stats::C;
use crate::store::{DeltaResult, Mode, StoreResult};
use inkproto::binary::{self, op, status, Header, HEADER_LEN, REQ_MAGIC};
use inkproto::request::{item_total, Limits};
use std::sync::Arc;

/// What to do with the stream after [`step`].
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not all of the request is there yet.
    NeedMore,
    /// `used` bytes were consumed, then `swallow` more are to be dropped from the stream.
    Done {
        used: usize,
        swallow: usize,
        next: Next,
    },
}

fn done(used: usize, next: Next) -> Step {
    Step::Done {
        used,
        swallow: 0,
        next,
    }
}

/// One response packet.
struct Reply<'o> {
    out: &'o mut Vec<u8>,
    opcode: u8,
    opaque: u32,
}

impl Reply<'_> {
    fn ok(&mut self, cas: u64, extras: &[u8], key: &[u8], value: &[u8]) {
        binary::response(
            self.out,
            self.opcode,
            status::OK,
            self.opaque,
            cas,
            extras,
            key,
            value,
        );
    }
    fn err(&mut self, s: u16) {
        binary::error(self.out, self.opcode, s, self.opaque);
    }
    fn err_msg(&mut self, s: u16, msg: &str) {
        binary::response(
            self.out,
            self.opcode,
            s,
            self.opaque,
            0,
            &[],
            &[],
            msg.as_bytes(),
        );
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().unwrap())
}

/// Parses and executes the binary request at the start of `buf` for worker `w`.
pub fn step(sh: &Arc<Shared>, w: usize, limits: &Limits, buf: &[u8], out: &mut Vec<u8>) -> Step {
    let Some(h) = Header::decode(buf) else {
        return Step::NeedMore;
    };
    if h.magic != REQ_MAGIC {
        // memcached closes without an answer
        return done(buf.len(), Next::Drop);
    }
    let (e, k) = (h.extlen as usize, h.keylen as usize);
    let head = HEADER_LEN + e + k;
    if buf.len() < head {
        return Step::NeedMore;
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + e];
    let key = &buf[HEADER_LEN + e..head];
    let body = h.bodylen as usize;
    let mut r = Reply {
        out,
        opcode: h.opcode,
        opaque: h.opaque,
    };
    if k > body || k + e > body {
        r.err(status::UNKNOWN_COMMAND);
        return done(head, Next::Close);
    }
    let (cmd, quiet) = op::loud(h.opcode);
    if k > inkproto::KEY_MAX_LEN {
        r.err(status::EINVAL);
        return done(head, Next::Close);
    }
    let st = &sh.workers[w];
    let store = &sh.store;
    let valid = match cmd {
        op::VERSION | op::NOOP | op::QUIT => e == 0 && k == 0 && body == 0,
        op::FLUSH => k == 0 && body == e && (e == 0 || e == 4),
        op::SET | op::ADD | op::REPLACE => e == 8 && k != 0 && body >= k + 8,
        op::GET | op::GETK => e == 0 && body == k && k > 0,
        op::DELETE => k > 0 && e == 0 && body == k,
        op::INCREMENT | op::DECREMENT => k > 0 && e == 20 && body == k + e,
        op::APPEND | op::PREPEND => k > 0 && e == 0,
        op::STAT => e == 0,
        op::TOUCH | op::GAT | op::GATK => e == 4 && k != 0,
        op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP => {
            // No SASL here (memcached without -S): unknown, body swallowed.
            r.err(status::UNKNOWN_COMMAND);
            return Step::Done {
                used: head,
                swallow: body - k,
                next: Next::Continue,
            };
        }
        _ => {
            r.err(status::UNKNOWN_COMMAND);
            // memcached swallows the whole body length after extras and key were read.
            return Step::Done {
                used: head,
                swallow: body,
                next: Next::Continue,
            };
        }
    };
    if !valid {
        r.err(status::EINVAL);
        return done(head, Next::Close);
    }
    let detail = sh.rt.detail.load(std::sync::atomic::Ordering::Relaxed);
    match cmd {
        op::VERSION => r.ok(0, &[], &[], crate::exec::VERSION.as_bytes()),
        op::NOOP => {
            r.ok(0, &[], &[], &[]);
            // memcached writes out everything queued so far at a noop
            return done(head, Next::Flush);
        }
        op::QUIT => {
            if !quiet {
                r.ok(0, &[], &[], &[]);
            }
            return done(head, Next::Quit);
        }
        op::FLUSH => {
            if !sh.cfg.flush_enabled {
                r.err(status::AUTH_ERROR);
            } else {
                let delay = if e == 4 { i64::from(be32(extras)) } else { 0 };
                store.flush_all(delay);
                st.inc(C::cmd_flush);
                if !quiet {
                    r.ok(0, &[], &[], &[]);
                }
            }
        }
        op::GET | op::GETK | op::TOUCH | op::GAT | op::GATK => {
            let touch = matches!(cmd, op::TOUCH | op::GAT | op::GATK);
            let with_key = matches!(cmd, op::GETK | op::GATK);
            let exptime = touch.then(|| i64::from(be32(extras)));
            let hit = store.get(key, exptime, |it| {
                let flags = it.flags().to_be_bytes();
                let value = if cmd == op::TOUCH {
                    &[][..]
                } else {
                    it.value()
                };
                r.ok(it.cas(), &flags, if with_key { key } else { &[] }, value);
            });
            if touch {
                st.inc(C::cmd_touch);
                st.inc(if hit.is_some() {
                    C::touch_hits
                } else {
                    C::touch_misses
                });
            } else {
                st.inc(C::cmd_get);
                st.inc(if hit.is_some() {
                    C::get_hits
                } else {
                    C::get_misses
                });
            }
            if hit.is_none() && !quiet {
                if with_key {
                    binary::response(
                        r.out,
                        h.opcode,
                        status::KEY_ENOENT,
                        h.opaque,
                        0,
                        &[],
                        key,
                        &[],
                    );
                } else {
                    r.err(status::KEY_ENOENT);
                }
            }
            if detail {
                crate::admin::record(sh, key, |p| p.get(hit.is_some()));
            }
        }
        op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND => {
            let vlen = body - k - e;
            let append = matches!(cmd, op::APPEND | op::PREPEND);
            let (flags, exptime) = if append {
                (0, 0)
            } else {
                (be32(extras), i64::from(be32(&extras[4..])))
            };
            let too_large = item_total(k, flags, vlen, limits.use_cas) > limits.max_item;
            if !too_large && buf.len() < head + vlen {
                // nothing was done yet: the whole request is parsed again
                return Step::NeedMore;
            }
            if detail {
                crate::admin::record(sh, key, |p| p.set());
            }
            if too_large {
                r.err(status::E2BIG);
                st.inc(C::store_too_large);
                if cmd == op::SET {
                    store.unlink_key(key);
                }
                return Step::Done {
                    used: head,
                    swallow: vlen,
                    next: Next::Continue,
                };
            }
            let value = &buf[head..head + vlen];
            st.inc(C::cmd_set);
            let mode = match cmd {
                _ if h.cas != 0 && !append => Mode::Cas(h.cas),
                op::SET => Mode::Set,
                op::ADD => Mode::Add,
                op::REPLACE => Mode::Replace,
                op::APPEND => Mode::Append,
                _ => Mode::Prepend,
            };
            let res = store.store_with(mode, key, flags, exptime, value, h.cas, Default::default());
            if let Mode::Cas(_) = mode {
                match res {
                    StoreResult::Stored(_) => st.inc(C::cas_hits),
                    StoreResult::Exists => st.inc(C::cas_badval),
                    StoreResult::NotFound => st.inc(C::cas_misses),
                    _ => {}
                }
            }
            match res {
                StoreResult::Stored(cas) => {
                    if !quiet {
                        r.ok(cas, &[], &[], &[]);
                    }
                }
                StoreResult::Exists => r.err(status::KEY_EEXISTS),
                StoreResult::NotFound => r.err(status::KEY_ENOENT),
                StoreResult::NoMemory => {
                    st.inc(C::store_no_memory);
                    if cmd == op::SET {
                        store.unlink_key(key);
                    }
                    r.err_msg(status::ENOMEM, "Out of memory allocating item");
                }
                StoreResult::NotStored => r.err(match cmd {
                    op::ADD => status::KEY_EEXISTS,
                    op::REPLACE => status::KEY_ENOENT,
                    _ => status::NOT_STORED,
                }),
            }
            return done(head + vlen, Next::Continue);
        }
        op::DELETE => {
            if detail {
                crate::admin::record(sh, key, |p| p.delete());
            }
            let cas = (h.cas != 0).then_some(h.cas);
            match store.delete(key, cas) {
                Ok(true) => {
                    st.inc(C::delete_hits);
                    if !quiet {
                        r.ok(0, &[], &[], &[]);
                    }
                }
                Ok(false) => {
                    st.inc(C::delete_misses);
                    r.err(status::KEY_ENOENT);
                }
                Err(()) => r.err(status::KEY_EEXISTS),
            }
        }
        op::INCREMENT | op::DECREMENT => {
            let incr = cmd == op::INCREMENT;
            let (delta, initial, exp) = (be64(extras), be64(&extras[8..]), be32(&extras[16..]));
            let res = store.delta(key, incr, delta, Some(h.cas));
            match res {
                DeltaResult::Ok(v, cas) => {
                    count_delta(st, incr, &res);
                    if !quiet {
                        r.ok(cas, &[], &[], &v.to_be_bytes());
                    }
                }
                DeltaResult::NonNumeric => r.err(status::DELTA_BADVAL),
                DeltaResult::Exists => r.err(status::KEY_EEXISTS),
                DeltaResult::NotFound if exp != 0xffff_ffff => {
                    let digits = initial.to_string();
                    match store.store_with(
                        Mode::Add,
                        key,
                        0,
                        i64::from(exp),
                        digits.as_bytes(),
                        0,
                        Default::default(),
                    ) {
                        StoreResult::Stored(cas) => {
                            if !quiet {
                                r.ok(cas, &[], &[], &initial.to_be_bytes());
                            }
                        }
                        StoreResult::NoMemory => {
                            r.err_msg(status::ENOMEM, "Out of memory allocating new item")
                        }
                        _ => r.err(status::NOT_STORED),
                    }
                }
                DeltaResult::NotFound => {
                    count_delta(st, incr, &res);
                    r.err(status::KEY_ENOENT);
                }
            }
        }
        op::STAT => stats(sh, key, &mut r),
        _ => unreachable!("opcodes checked above"),
    }
    done(head, Next::Continue)
}

/// `STAT`: every `STAT name value` line of the text answer as one packet, then an empty one.
fn stats(sh: &Arc<Shared>, key: &[u8], r: &mut Reply<'_>) {
    let mut text = Vec::new();
    let sub: &[u8] = if key.starts_with(b"reset") {
        b"stats reset"
    } else if key.starts_with(b"settings") {
        b"stats settings"
    } else if let Some(rest) = key.strip_prefix(b"detail") {
        if rest.starts_with(b" dump") {
            let mut ctx = Default::default();
            crate::admin::execute(sh, 0, &mut ctx, b"stats detail dump", &mut text);
            r.ok(0, &[], b"detailed", &text);
            r.ok(0, &[], &[], &[]);
            return;
        } else if rest.starts_with(b" on") {
            b"stats detail on"
        } else if rest.starts_with(b" off") {
            b"stats detail off"
        } else {
            r.err(status::KEY_ENOENT);
            return;
        }
    } else if key.is_empty() {
        b"stats"
    } else if matches!(key, b"items" | b"slabs" | b"sizes" | b"conns") {
        let mut line = b"stats ".to_vec();
        line.extend_from_slice(key);
        let mut ctx = Default::default();
        crate::admin::execute(sh, 0, &mut ctx, &line, &mut text);
        emit(&text, r);
        return;
    } else {
        r.err(status::KEY_ENOENT);
        return;
    };
    let mut ctx = Default::default();
    crate::admin::execute(sh, 0, &mut ctx, sub, &mut text);
    emit(&text, r);
}

fn emit(text: &[u8], r: &mut Reply<'_>) {
    for l in text.split(|&b| b == b'\n') {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let Some(l) = l.strip_prefix(b"STAT ") else {
            continue;
        };
        let (name, value) = match l.iter().position(|&b| b == b' ') {
            Some(p) => (&l[..p], &l[p + 1..]),
            None => (l, &[][..]),
        };
        r.ok(0, &[], name, value);
    }
    r.ok(0, &[], &[], &[]);
}
