//! Flash reads for the workers, without ever blocking an event loop.
//!
//! Each worker has its own io_uring (an eventfd registered in its mio poll signals completions).
//! A request is executed in an *attempt*: whenever it touches the value of an item that lives on
//! flash and is neither in a write buffer nor already read, the item's [`ItemRef::value`]
//! records a *need* (and gives a placeholder). If an attempt ends with needs, its output is
//! discarded, its counters restored, the reads are submitted under a [`Ticket`], and the caller
//! parks the request (a TCP connection stops there, a UDP datagram is set aside). When the
//! ticket's reads are in, the request is executed again and finds the values ready; store
//! operations that need a value (append, prepend, incr, decr) change nothing in an attempt that
//! ends with needs. A read that fails its checks (generation, CAS, key, CRC, short read) drops
//! the item from RAM: the next attempt is a miss, as memcached answers a bad flash read.
//!
//! [`ItemRef::value`]: crate::store::ItemRef::value

use super::{parse_item, AlignedBuf, Ext, Ptr, ALIGN};
use crate::stats::WorkerStats;
use crate::store::Store;
use inkproto::request::{MetaCmd, Request};
use io_uring::{opcode, types, IoUring};
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Reads in flight per worker at most (the rest wait in a queue).
const MAX_INFLIGHT: usize = 256;

/// A set of reads one parked request waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket(u64);

/// The outcome of an attempt.
pub enum Attempt<R> {
    Done(R),
    /// Parked: execute the request again once the ticket is ready (`resume` it then).
    Wait(Ticket),
}

struct Need {
    ptr: Ptr,
    key: Vec<u8>,
    cas: u64,
}

struct Read {
    need: Need,
    buf: AlignedBuf,
    /// Where the item starts in `buf`.
    start: usize,
    tickets: Vec<u64>,
}

struct Resolved {
    buf: AlignedBuf,
    start: usize,
    len: usize,
    refs: u32,
}

#[derive(Default)]
struct TicketState {
    waiting: u32,
    held: Vec<Ptr>,
    watcher: Option<Token>,
    cancelled: bool,
}

struct WorkerIo {
    ext: Arc<Ext>,
    ring: IoUring,
    efd: OwnedFd,
    reads: Vec<Option<Read>>,
    free: Vec<usize>,
    by_ptr: HashMap<Ptr, usize>,
    /// Reads not yet submitted (ring full).
    backlog: VecDeque<usize>,
    inflight: usize,
    tickets: HashMap<u64, TicketState>,
    next: u64,
    /// Tickets whose reads are all in, with a watcher to wake.
    ready: Vec<Token>,
    /// Failed reads: (key, ptr) whose items the worker drops.
    failed: Vec<(Vec<u8>, Ptr)>,
    /// Reads pushed to the ring and not yet submitted (see [`submit_pending`]).
    unsubmitted: bool,
}

#[derive(Default)]
struct Needs {
    active: bool,
    list: Vec<Need>,
}

thread_local! {
    static IO: RefCell<Option<WorkerIo>> = const { RefCell::new(None) };
    static NEEDS: RefCell<Needs> = RefCell::new(Needs::default());
    static RESOLVED: RefCell<HashMap<Ptr, Resolved>> = RefCell::new(HashMap::new());
    static BUFFERED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Sets up this worker thread's ring and registers its eventfd under `token`. Without a flash
/// tier this does nothing.
pub fn init_worker(
    ext: Option<&Arc<Ext>>,
    registry: &Registry,
    token: Token,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let Some(ext) = ext else { return Ok(()) };
    let ring = IoUring::new((MAX_INFLIGHT * 2) as u32).context("io_uring setup")?;
    // SAFETY: eventfd has no memory preconditions; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("eventfd");
    }
    // SAFETY: fd is a fresh descriptor we own.
    let efd = unsafe { OwnedFd::from_raw_fd(fd) };
    ring.submitter()
        .register_eventfd(efd.as_raw_fd())
        .context("io_uring eventfd")?;
    registry
        .register(&mut SourceFd(&efd.as_raw_fd()), token, Interest::READABLE)
        .context("registering the io_uring eventfd")?;
    IO.with(|io| {
        *io.borrow_mut() = Some(WorkerIo {
            ext: ext.clone(),
            ring,
            efd,
            reads: Vec::new(),
            free: Vec::new(),
            by_ptr: HashMap::new(),
            backlog: VecDeque::new(),
            inflight: 0,
            tickets: HashMap::new(),
            next: 1,
            ready: Vec::new(),
            failed: Vec::new(),
            unsubmitted: false,
        })
    });
    Ok(())
}

/// Checks that this kernel lets us use io_uring (it can be disabled by sysctl or seccomp).
pub fn probe() -> std::io::Result<()> {
    IoUring::new(8).map(|_| ())
}

/// Called by an item whose value is on flash and not at hand: the current attempt needs it.
pub fn need(ptr: Ptr, key: &[u8], cas: u64) {
    NEEDS.with(|n| {
        let mut n = n.borrow_mut();
        if n.active && !n.list.iter().any(|x| x.ptr == ptr) {
            n.list.push(Need {
                ptr,
                key: key.to_vec(),
                cas,
            });
        }
    })
}

/// True while the current attempt has recorded needs (store operations that need a value
/// then change nothing).
pub fn pending_needs() -> bool {
    NEEDS.with(|n| !n.borrow().list.is_empty())
}

/// Calls `f` with the value at `p` if this worker has it (read for a ticket, or still in a
/// write buffer), or with None.
pub fn with_value<R>(ext: &Ext, p: &Ptr, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
    RESOLVED.with(|r| {
        let r = r.borrow();
        if let Some(v) = r.get(p) {
            return f(Some(&v.buf[v.start..v.start + v.len]));
        }
        drop(r);
        BUFFERED.with(|b| {
            let mut b = b.borrow_mut();
            if ext.read_buffered(p, &mut b) {
                f(Some(&b))
            } else {
                f(None)
            }
        })
    })
}

/// Executes `f` as an attempt (see the module doc). `hold` is the ticket whose values the caller
/// holds, if any: it stays valid when the attempt is done (the caller releases it when it needs
/// those values no more), and its values move to the new ticket when the attempt has to wait.
pub fn attempt<R>(
    stats: &WorkerStats,
    hold: Option<Ticket>,
    out: &mut Vec<u8>,
    f: impl FnOnce(&mut Vec<u8>) -> R,
) -> Attempt<R> {
    let on = IO.with(|io| io.borrow().is_some());
    if !on {
        return Attempt::Done(f(out));
    }
    let snap = stats.snapshot();
    let start = out.len();
    NEEDS.with(|n| {
        let mut n = n.borrow_mut();
        n.active = true;
        n.list.clear();
    });
    let r = f(out);
    let needs = NEEDS.with(|n| {
        let mut n = n.borrow_mut();
        n.active = false;
        std::mem::take(&mut n.list)
    });
    if needs.is_empty() {
        return Attempt::Done(r);
    }
    out.truncate(start);
    stats.restore(&snap);
    Attempt::Wait(submit(needs, hold))
}

fn submit(needs: Vec<Need>, carry: Option<Ticket>) -> Ticket {
    IO.with(|io| {
        let mut g = io.borrow_mut();
        let io = g.as_mut().expect("attempt checked the ring");
        let id = io.next;
        io.next += 1;
        let mut ts = TicketState::default();
        if let Some(c) = carry {
            if let Some(old) = io.tickets.remove(&c.0) {
                ts.held = old.held;
            }
        }
        io.tickets.insert(id, ts);
        io.add_reads(id, needs);
        Ticket(id)
    })
}

/// Most values one parked connection reads ahead for the requests pipelined behind it.
const PREFETCH_MAX: usize = 64;

/// Reads ahead, under the parked ticket `t`, the flash values that `req` (a request pipelined
/// behind the parked one, not executed yet) will get: a pipeline of gets then waits for its
/// reads together instead of one after the other. Only looks; changes nothing.
pub fn prefetch(store: &Store, t: Ticket, req: &Request<'_>) {
    let Some(ext) = store.ext() else { return };
    let mut needs = Vec::new();
    let mut want = |key: &[u8]| {
        let Some((ptr, cas)) = store.flash_ref(key) else {
            return;
        };
        let known = RESOLVED.with(|r| r.borrow().contains_key(&ptr));
        if !known && !ext.is_buffered(&ptr) && !needs.iter().any(|n: &Need| n.ptr == ptr) {
            needs.push(Need {
                ptr,
                key: key.to_vec(),
                cas,
            });
        }
    };
    match req {
        Request::Get { keys, .. } | Request::Gat { keys, .. } => {
            for k in keys.iter() {
                want(k);
            }
        }
        Request::Meta {
            cmd: MetaCmd::Get,
            key,
            flags,
            ..
        } if flags.has(b'v') && !flags.has(b'b') => want(key),
        _ => {}
    }
    if needs.is_empty() {
        return;
    }
    IO.with(|io| {
        let mut g = io.borrow_mut();
        let Some(io) = g.as_mut() else { return };
        let room = PREFETCH_MAX.saturating_sub(
            io.tickets
                .get(&t.0)
                .map_or(0, |ts| ts.held.len() + ts.waiting as usize),
        );
        needs.truncate(room);
        if io.tickets.contains_key(&t.0) {
            io.add_reads(t.0, needs);
        }
    })
}

impl WorkerIo {
    /// Queues reads for ticket `id` (joining reads of the same place already in flight).
    fn add_reads(&mut self, id: u64, needs: Vec<Need>) {
        let io = self;
        let mut waiting = 0;
        for need in needs {
            io.ext.stats.get_extstore.fetch_add(1, Ordering::Relaxed);
            if let Some(&slot) = io.by_ptr.get(&need.ptr) {
                io.reads[slot].as_mut().unwrap().tickets.push(id);
                waiting += 1;
                continue;
            }
            let off = io.ext.file_offset(&need.ptr);
            let len = super::item_len(need.key.len(), need.ptr.vlen as usize) as u64;
            let a = off & !(ALIGN as u64 - 1);
            let end = (off + len).next_multiple_of(ALIGN as u64);
            let read = Read {
                buf: AlignedBuf::new((end - a) as usize),
                start: (off - a) as usize,
                need,
                tickets: vec![id],
            };
            let slot = match io.free.pop() {
                Some(s) => s,
                None => {
                    io.reads.push(None);
                    io.reads.len() - 1
                }
            };
            io.by_ptr.insert(read.need.ptr, slot);
            io.reads[slot] = Some(read);
            io.backlog.push_back(slot);
            waiting += 1;
        }
        if let Some(ts) = io.tickets.get_mut(&id) {
            ts.waiting += waiting;
        }
        io.pump();
    }
}

impl WorkerIo {
    /// Moves queued reads into the ring while there is room (submitted by
    /// [`submit_pending`], once per event loop turn).
    fn pump(&mut self) {
        while self.inflight < MAX_INFLIGHT {
            let Some(slot) = self.backlog.pop_front() else {
                break;
            };
            let r = self.reads[slot].as_mut().unwrap();
            let a = self.ext.file_offset(&r.need.ptr) & !(ALIGN as u64 - 1);
            let sqe = opcode::Read::new(
                types::Fd(self.ext.fd()),
                r.buf.as_mut_ptr(),
                r.buf.len() as u32,
            )
            .offset(a)
            .build()
            .user_data(slot as u64);
            // SAFETY: the buffer is owned by `reads[slot]`, which is neither dropped nor moved
            // in memory (AlignedBuf is a heap allocation) until this read's completion has been
            // reaped; the file descriptor lives in `ext`, which the ring does not outlive.
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                self.backlog.push_front(slot);
                break;
            }
            self.inflight += 1;
            self.unsubmitted = true;
        }
        self.ext.stats.io_queue.store(
            (self.inflight + self.backlog.len()) as u64,
            Ordering::Relaxed,
        );
    }

    /// Reaps completions: values go to RESOLVED, failures to `failed`, tickets whose reads are
    /// all in to `ready`.
    fn reap(&mut self) {
        let mut done = Vec::new();
        for cqe in self.ring.completion() {
            done.push((cqe.user_data() as usize, cqe.result()));
        }
        for (slot, res) in done {
            let Some(r) = self.reads.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            self.free.push(slot);
            self.by_ptr.remove(&r.need.ptr);
            self.inflight -= 1;
            let ok = self.check(&r, res);
            let st = &self.ext.stats;
            let mut alive = 0;
            for &t in &r.tickets {
                if let Some(ts) = self.tickets.get_mut(&t) {
                    if ok.is_some() && !ts.cancelled {
                        ts.held.push(r.need.ptr);
                        alive += 1;
                    }
                }
            }
            match ok {
                Some(len) => {
                    st.objects_read.fetch_add(1, Ordering::Relaxed);
                    st.bytes_read.fetch_add(len as u64, Ordering::Relaxed);
                    if alive > 0 {
                        let start = r.start + super::FHDR + r.need.key.len();
                        RESOLVED.with(|m| {
                            m.borrow_mut()
                                .entry(r.need.ptr)
                                .and_modify(|v| v.refs += alive)
                                .or_insert(Resolved {
                                    buf: r.buf,
                                    start,
                                    len: r.need.ptr.vlen as usize,
                                    refs: alive,
                                });
                        });
                    }
                }
                None => {
                    st.miss_from_extstore.fetch_add(1, Ordering::Relaxed);
                    self.failed.push((r.need.key, r.need.ptr));
                }
            }
            for t in r.tickets {
                self.one_done(t);
            }
        }
    }

    fn one_done(&mut self, t: u64) {
        let Some(ts) = self.tickets.get_mut(&t) else {
            return;
        };
        ts.waiting -= 1;
        if ts.waiting == 0 {
            if ts.cancelled {
                let ts = self.tickets.remove(&t).unwrap();
                drop_held(&ts.held);
            } else if let Some(w) = ts.watcher {
                self.ready.push(w);
            }
        }
    }

    /// The item's length on success.
    fn check(&self, r: &Read, res: i32) -> Option<usize> {
        let st = &self.ext.stats;
        if res < 0 {
            let e = std::io::Error::from_raw_os_error(-res);
            if res != -libc::ECANCELED {
                self.ext.fail("read", &e);
            }
            return None;
        }
        let got = (res as usize).min(r.buf.len());
        let bytes = r.buf.get(r.start..got).unwrap_or_default();
        let p = &r.need.ptr;
        match parse_item(bytes) {
            Some(Ok(it))
                if it.gen == p.gen
                    && it.cas == r.need.cas
                    && it.key == r.need.key.as_slice()
                    && it.value.len() == p.vlen as usize =>
            {
                Some(it.len)
            }
            // Short read: the file shrank under us.
            None => None,
            _ => {
                // A page reclaimed since is not corruption: its new generation says so.
                if self.ext.valid(p) {
                    st.badcrc_from_extstore.fetch_add(1, Ordering::Relaxed);
                }
                None
            }
        }
    }
}

fn drop_held(held: &[Ptr]) {
    RESOLVED.with(|m| {
        let mut m = m.borrow_mut();
        for p in held {
            if let Some(v) = m.get_mut(p) {
                v.refs -= 1;
                if v.refs == 0 {
                    m.remove(p);
                }
            }
        }
    })
}

/// Submits the reads the worker queued during this turn of its event loop (one system call
/// for all of them); called before the worker waits for events.
pub fn submit_pending() {
    IO.with(|io| {
        let mut g = io.borrow_mut();
        let Some(io) = g.as_mut() else { return };
        if io.unsubmitted {
            io.unsubmitted = false;
            if let Err(e) = io.ring.submit() {
                io.ext.fail("io_uring submit", &e);
            }
        }
    })
}

/// Wakes `token` when `t` is ready (at once if it already is).
pub fn watch(t: Ticket, token: Token) {
    IO.with(|io| {
        let mut g = io.borrow_mut();
        let Some(io) = g.as_mut() else { return };
        if let Some(ts) = io.tickets.get_mut(&t.0) {
            ts.watcher = Some(token);
            if ts.waiting == 0 {
                io.ready.push(token);
            }
        }
    })
}

/// True once every read of `t` is in (or `t` is unknown).
pub fn is_ready(t: Ticket) -> bool {
    IO.with(|io| {
        io.borrow()
            .as_ref()
            .and_then(|io| io.tickets.get(&t.0))
            .is_none_or(|ts| ts.waiting == 0)
    })
}

/// Forgets `t`'s values.
pub fn release(t: Ticket) {
    let held = IO.with(|io| {
        io.borrow_mut()
            .as_mut()
            .and_then(|io| io.tickets.remove(&t.0))
            .map(|ts| ts.held)
    });
    if let Some(h) = held {
        drop_held(&h);
    }
}

/// The request waiting for `t` went away (connection closed).
pub fn cancel(t: Ticket) {
    let done = IO.with(|io| {
        let mut g = io.borrow_mut();
        let io = g.as_mut()?;
        let ts = io.tickets.get_mut(&t.0)?;
        if ts.waiting > 0 {
            ts.cancelled = true;
            io.ext
                .stats
                .get_aborted_extstore
                .fetch_add(1, Ordering::Relaxed);
            None
        } else {
            io.tickets.remove(&t.0).map(|ts| ts.held)
        }
    });
    if let Some(h) = done {
        drop_held(&h);
    }
}

/// Handles the ring's eventfd: reaps completions, drops the items whose reads failed (through
/// `drop_item`), and returns the tokens to run again.
pub fn on_event(drop_item: &mut dyn FnMut(&[u8], &Ptr)) -> Vec<Token> {
    let (failed, ready) = IO.with(|io| {
        let mut g = io.borrow_mut();
        let Some(io) = g.as_mut() else {
            return (Vec::new(), Vec::new());
        };
        let mut n = [0u8; 8];
        // SAFETY: reading 8 bytes into a local buffer from our own non-blocking eventfd.
        unsafe {
            libc::read(io.efd.as_raw_fd(), n.as_mut_ptr().cast(), 8);
        }
        io.reap();
        io.pump();
        (
            std::mem::take(&mut io.failed),
            std::mem::take(&mut io.ready),
        )
    });
    for (k, p) in &failed {
        drop_item(k, p);
    }
    ready
}

/// Waits for the reads still in flight (their buffers must outlive them), then drops the ring.
pub fn shutdown_worker() {
    IO.with(|io| {
        if let Some(mut io) = io.borrow_mut().take() {
            if io.unsubmitted && io.ring.submit().is_err() {
                std::mem::forget(io);
                return;
            }
            while io.inflight > 0 {
                if io.ring.submit_and_wait(1).is_err() {
                    // Leak the buffers rather than free memory the kernel may still write.
                    std::mem::forget(io);
                    return;
                }
                io.reap();
            }
        }
    });
    RESOLVED.with(|m| m.borrow_mut().clear());
}
