//! Cooperative mode (`--cooperative IFACE`): inkcached drives the kernel cache of the inkcache
//! attachment in front of it (attached with `inkcache attach --cooperative`), through
//! `inkcache::coop::KernelCache`, instead of the kernel learning from replies at TC egress.
//!
//! * Every request that may change keys (`Request::mutated_keys`, a `TooLarge` store that
//!   deletes its key, meta writes with base64 keys: everything) queues their invalidation after
//!   it was executed; every `get`/`gets` queues the install of each key it found, with the time
//!   taken before it was executed (`read_ts`).
//! * A worker commits its batch (one BPF_PROG_TEST_RUN) after executing a round of requests
//!   (a batch of datagrams, or every TCP connection ready in an event-loop round) and before
//!   sending their answers: no write is acknowledged before its key's kernel entry is
//!   gone, and the kernel refuses an install whose `read_ts` is not after the key's last
//!   invalidation, so an install that raced a write is either refused or removed by it.
//! * The kernel cache is flushed when cooperative mode starts (the store is empty).
//!
//! What it costs: a write's invalidation is one entry in a batch; no reply is parsed at TC
//! egress and no write waits for settling. Between a write being applied and its invalidation
//! (the rest of the round, microseconds) a kernel hit may still return the previous value; the
//! write is not acknowledged yet, so no client can have seen it acknowledged.

use crate::exec::Shared;
use crate::stats::C;
use anyhow::{Context, Result};
use inkcache::coop::{monotonic_ns, Batch, KernelCache};
use inkproto::request::{Keys, Mutation, Request};
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

static KC: OnceLock<Arc<KernelCache>> = OnceLock::new();

thread_local! {
    static BATCH: RefCell<Option<Batch>> = const { RefCell::new(None) };
}

/// Opens the attachment on `iface` for `workers` workers and empties it.
pub fn enable(iface: &str, workers: usize) -> Result<()> {
    let dir = inkcache::coop::find_attachment(iface).with_context(|| {
        format!(
            "--cooperative: inkcache is not attached to {iface} (or /sys/fs/bpf is not \
                 visible: start inkcached with `nsenter --net=/run/netns/NS`, not `ip netns exec`)"
        )
    })?;
    let kc = KernelCache::open(&dir, workers)?;
    let mut b = kc.batch(0);
    b.flush(0)?;
    b.commit()?;
    let _ = KC.set(kc);
    Ok(())
}

/// True in cooperative mode.
#[inline]
pub fn enabled() -> bool {
    KC.get().is_some()
}

/// Gives worker `w`'s thread its batch (call on the worker's thread).
pub fn init_worker(w: usize) {
    if let Some(kc) = KC.get() {
        BATCH.with(|b| *b.borrow_mut() = Some(kc.batch(w)));
    }
}

/// What a request will need once executed.
pub enum Note<'a> {
    None,
    /// Install the keys found, read after `ts`.
    Get(Keys<'a>, u64),
    /// Install one key found (binary get), read after `ts`.
    GetKey(&'a [u8], u64),
    Invalidate(Vec<&'a [u8]>),
    /// Flush all; with a delay (ns), install nothing until then.
    Flush(u64),
}

/// Looks at a request before it is executed.
#[inline]
pub fn note<'a>(req: &Request<'a>) -> Note<'a> {
    if KC.get().is_none() {
        return Note::None;
    }
    if let Request::Get { keys, .. } = req {
        return Note::Get(*keys, monotonic_ns());
    }
    match req.mutated_keys() {
        Mutation::None => Note::None,
        Mutation::All => match req {
            Request::FlushAll { delay: Some(d), .. } if *d > 0 => {
                // memcached's exptime rule: above 30 days it is a unix time
                let secs = if *d > 60 * 60 * 24 * 30 {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |t| t.as_secs() as i64);
                    *d - now
                } else {
                    *d
                };
                if secs > 0 {
                    Note::Flush((secs as u64 + 1).saturating_mul(1_000_000_000))
                } else {
                    Note::Flush(0)
                }
            }
            _ => Note::Flush(0),
        },
        Mutation::Keys(k) => match req {
            // a base64 key (meta `b` flag) is not the key the kernel holds: everything goes
            Request::Meta { flags, .. } if flags.iter().any(|(c, _)| c == b'b') => Note::Flush(0),
            _ => Note::Invalidate(k),
        },
    }
}

/// Looks at a binary request (its header, extras and key at the start of `buf`) before it is
/// executed: gets install their key, flushes flush, every other command with a key may change
/// it (sets, deletes, arithmetic, append, touch, gat: invalidated, whatever their answer).
pub fn note_binary(buf: &[u8]) -> Note<'_> {
    use inkproto::binary::{op, Header, HEADER_LEN};
    if KC.get().is_none() {
        return Note::None;
    }
    let Some(h) = Header::decode(buf) else {
        return Note::None;
    };
    let (e, k) = (h.extlen as usize, h.keylen as usize);
    let Some(key) = buf.get(HEADER_LEN + e..HEADER_LEN + e + k) else {
        return Note::None; // not all there: nothing is executed yet
    };
    let (cmd, _) = op::loud(h.opcode);
    match cmd {
        op::GET | op::GETK if k > 0 => Note::GetKey(key, monotonic_ns()),
        op::FLUSH => {
            let delay = buf
                .get(HEADER_LEN..HEADER_LEN + 4)
                .filter(|_| e == 4)
                .map_or(0, |d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]));
            Note::Flush(if delay > 0 {
                (u64::from(delay) + 1).saturating_mul(1_000_000_000)
            } else {
                0
            })
        }
        op::STAT | op::VERSION | op::NOOP | op::QUIT => Note::None,
        _ if k > 0 => Note::Invalidate(vec![key]),
        _ => Note::None,
    }
}

/// A text request that could not be parsed: a too large store deletes its key
/// (`exec::parse_error`), the kernel's entry goes too.
pub fn parse_error(sh: &Shared, w: usize, buf: &[u8], e: &inkproto::request::ProtoError) {
    if KC.get().is_some() && e.kind == inkproto::request::ErrorKind::TooLarge {
        if e.key_base64 {
            with_batch(sh, w, |b| b.flush(0)); // not the key the kernel holds
        } else if let Some((a, b)) = e.key {
            invalidate(sh, w, &buf[a..b]);
        }
    }
}

fn with_batch(sh: &Shared, w: usize, f: impl FnOnce(&mut Batch) -> Result<()>) {
    BATCH.with(|b| {
        if let Some(b) = b.borrow_mut().as_mut() {
            if f(b).is_err() {
                sh.workers[w].inc(C::coop_errors);
            }
        }
    })
}

/// Queues what the executed request needs.
pub fn apply(sh: &Shared, w: usize, note: Note<'_>) {
    match note {
        Note::None => {}
        Note::Invalidate(keys) => with_batch(sh, w, |b| {
            for k in keys {
                b.invalidate(k)?;
            }
            Ok(())
        }),
        Note::Flush(delay) => with_batch(sh, w, |b| b.flush(delay)),
        Note::GetKey(key, ts) => install(sh, w, key, ts),
        Note::Get(keys, ts) => {
            for key in keys.iter() {
                install(sh, w, key, ts);
            }
        }
    }
}

/// Queues the install of `key` as the store holds it now (read after `ts`).
fn install(sh: &Shared, w: usize, key: &[u8], ts: u64) {
    // never a syscall with a shard locked
    if BATCH.with(|b| b.borrow().as_ref().is_some_and(Batch::is_full)) {
        commit(sh, w);
    }
    let store = &sh.store;
    let _ = store.peek(key, |it| {
        if it.on_flash() {
            return; // its value is not at hand (reading it would park the request)
        }
        let now = store.now();
        let exp = it.exptime();
        let exp_ns = match exp {
            0 => 0,
            e if e > now + 1 => {
                // whole seconds, rounded down: the kernel entry expires first
                monotonic_ns() + u64::from(e - now - 1) * 1_000_000_000
            }
            _ => return,
        };
        with_batch(sh, w, |b| {
            b.install(key, it.flags(), it.value(), it.cas(), exp_ns, ts)
                .map(|_| ())
        });
    });
}

/// Queues the invalidation of one key (a side effect outside `Request`, e.g. a too large set).
pub fn invalidate(sh: &Shared, w: usize, key: &[u8]) {
    if KC.get().is_some() {
        with_batch(sh, w, |b| b.invalidate(key));
    }
}

/// Runs what the worker queued: before the answers of the round are sent.
#[inline]
pub fn commit(sh: &Shared, w: usize) {
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        let Some(b) = b.as_mut() else { return };
        let st = &sh.workers[w];
        match b.commit() {
            Ok(c) => {
                st.add(C::coop_installs, c.installs);
                st.add(C::coop_invalidations, c.invalidations);
                st.add(C::coop_flushes, c.flushes);
                st.add(C::coop_calls, c.calls);
            }
            Err(e) => {
                if st.get(C::coop_errors as usize) == 0 {
                    eprintln!("inkcached: cooperative mode: {e:#}");
                }
                st.inc(C::coop_errors);
            }
        }
    })
}
