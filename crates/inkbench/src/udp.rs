//! The UDP engine: batched `sendmmsg`/`recvmmsg` on connected non-blocking sockets, requests
//! matched to replies by the frame's request id, multi-datagram and multi-message replies
//! reassembled, unanswered requests expired after the timeout.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use anyhow::{Context, Result};
use inkproto::client::{parse_response, Response};
use inkproto::udp::{FrameHeader, Reassembly, HEADER_LEN};
use nix::errno::Errno;
use nix::poll::PollFlags;
use nix::sys::socket::{recvmmsg, sendmmsg, MsgFlags, MultiHeaders, SockaddrStorage};

use crate::config::RunConfig;
use crate::engine::{wait, RunControl, ThreadOut, ThreadPlan, Window};
use crate::pacer::Pacer;
use crate::workload::{Op, OpKind, Workload};

/// Datagrams per `sendmmsg`/`recvmmsg` call.
pub const BATCH: usize = 64;
/// Receive buffer per datagram (memcached sends at most 1400 bytes; leave room for others).
const RECV_BUF: usize = 9216;
const IDS: usize = 1 << 16;
/// Socket buffer size asked for (both directions).
const SOCK_BUF: usize = 4 << 20;

/// A request in flight and the reply collected so far.
struct Slot {
    op: Op,
    serial: u64,
    /// Datagrams of the message being reassembled.
    cur: Reassembly,
    /// Complete messages so far (memcached answers a multi-get with one message per key).
    payload: Vec<u8>,
}

/// One connected UDP socket and its request ids.
pub(crate) struct Sock {
    sock: UdpSocket,
    slots: Vec<Option<Box<Slot>>>,
    next_id: u16,
    inflight: usize,
    /// (deadline, id, serial) in send order: deadlines are non-decreasing.
    deadlines: VecDeque<(Instant, u16, u64)>,
    /// Datagrams waiting to be sent, with their ids.
    queue: VecDeque<(u16, Vec<u8>)>,
}

/// Opens a UDP socket bound to the wildcard address of `server`'s family and connected to it.
pub fn connect(server: SocketAddr) -> Result<UdpSocket> {
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let sock = UdpSocket::bind(local).context("binding a UDP socket")?;
    // Large buffers so bursts of replies are not dropped by the client's own socket. Forcing
    // past rmem_max needs CAP_NET_ADMIN; without it the plain option is capped by the kernel.
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(&sock, sockopt::RcvBufForce, &SOCK_BUF).is_err() {
        let _ = setsockopt(&sock, sockopt::RcvBuf, &SOCK_BUF);
    }
    if setsockopt(&sock, sockopt::SndBufForce, &SOCK_BUF).is_err() {
        let _ = setsockopt(&sock, sockopt::SndBuf, &SOCK_BUF);
    }
    sock.connect(server)
        .with_context(|| format!("connecting a UDP socket to {server}"))?;
    Ok(sock)
}

impl Sock {
    fn new(server: SocketAddr) -> Result<Self> {
        let sock = connect(server)?;
        sock.set_nonblocking(true)?;
        let mut slots = Vec::with_capacity(IDS);
        slots.resize_with(IDS, || None);
        Ok(Sock {
            sock,
            slots,
            next_id: 0,
            inflight: 0,
            deadlines: VecDeque::new(),
            queue: VecDeque::new(),
        })
    }

    /// A free request id, if any.
    fn alloc_id(&mut self) -> Option<u16> {
        for _ in 0..IDS {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if self.slots[id as usize].is_none() {
                return Some(id);
            }
        }
        None
    }
}

struct Engine<'a> {
    cfg: &'a RunConfig,
    socks: Vec<Sock>,
    work: Workload,
    out: ThreadOut,
    serial: u64,
    rr: usize,
    inflight: usize,
    completed: u64,
    hdrs_send: MultiHeaders<SockaddrStorage>,
    hdrs_recv: MultiHeaders<SockaddrStorage>,
    bufs: Vec<Vec<u8>>,
}

/// Runs one thread's share of a UDP run.
pub(crate) fn run_thread(
    cfg: &RunConfig,
    plan: &ThreadPlan,
    win: Window,
    ctl: &RunControl,
) -> Result<ThreadOut> {
    let socks = (0..plan.connections)
        .map(|_| Sock::new(cfg.server))
        .collect::<Result<Vec<_>>>()?;
    let mut e = Engine {
        cfg,
        socks,
        work: Workload::new(cfg, plan.seed),
        out: ThreadOut::new(),
        serial: 0,
        rr: 0,
        inflight: 0,
        completed: 0,
        hdrs_send: MultiHeaders::preallocate(BATCH, None),
        hdrs_recv: MultiHeaders::preallocate(BATCH, None),
        bufs: vec![vec![0u8; RECV_BUF]; BATCH],
    };
    let mut pacer = plan.rate.map(|(r, t0)| Pacer::new(t0, r));
    let hard_end = win.end + cfg.timeout + cfg.timeout / 2;
    loop {
        let now = Instant::now();
        // Open loop: requests scheduled before the end are all sent, even late.
        let stopping = ctl.is_stopped()
            || match &pacer {
                Some(p) => p.next_due() >= win.end,
                None => now >= win.end,
            };
        if !stopping {
            match &mut pacer {
                Some(p) => p.issue_due(now, win.end, 4096, |t| {
                    e.issue(t, win.measured(t));
                }),
                None => while e.inflight < plan.inflight && e.issue(now, win.measured(now)) {},
            }
        }
        e.flush()?;
        if stopping && (e.inflight == 0 || now >= hard_end) {
            break;
        }
        // Sleep until a reply, the next scheduled send, the next deadline or the end.
        let mut until = e.next_deadline();
        if !stopping {
            let next = match &pacer {
                Some(p) => p.next_due().min(win.end),
                None => win.end,
            };
            until = Some(until.map_or(next, |u| u.min(next)));
        }
        let until = Some(until.map_or(hard_end, |u| u.min(hard_end)));
        let fds: Vec<_> = e.socks.iter().map(|s| s.sock.as_fd()).collect();
        let evs: Vec<_> = e
            .socks
            .iter()
            .map(|s| {
                if s.queue.is_empty() {
                    PollFlags::POLLIN
                } else {
                    PollFlags::POLLIN | PollFlags::POLLOUT
                }
            })
            .collect();
        wait(&fds, &evs, until)?;
        for i in 0..e.socks.len() {
            e.receive(i)?;
        }
        e.expire(Instant::now());
        ctl.completed.fetch_add(
            std::mem::take(&mut e.completed),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
    // Whatever is still in flight was never answered.
    for s in &mut e.socks {
        for slot in s.slots.iter_mut() {
            if let Some(sl) = slot.take() {
                if sl.op.measured {
                    e.out.counters.lost += 1;
                }
            }
        }
        for (_, _) in s.queue.drain(..) {}
    }
    Ok(e.out)
}

impl Engine<'_> {
    /// Creates a request due at `start` and queues it on the next socket; false if no request
    /// id was free.
    fn issue(&mut self, start: Instant, measured: bool) -> bool {
        let n = self.socks.len();
        let si = self.rr % n;
        self.rr = self.rr.wrapping_add(1);
        let Some(id) = self.socks[si].alloc_id() else {
            // 65536 requests in flight on one socket: count it as a failed send.
            self.out.counters.send_errors += 1;
            return false;
        };
        let mut d = Vec::with_capacity(64);
        d.extend_from_slice(&FrameHeader::request(id).encode());
        let op = self.work.next_request(start, measured, &mut d);
        self.serial += 1;
        let s = &mut self.socks[si];
        s.slots[id as usize] = Some(Box::new(Slot {
            op,
            serial: self.serial,
            cur: Reassembly::new(),
            payload: Vec::new(),
        }));
        s.inflight += 1;
        self.inflight += 1;
        s.queue.push_back((id, d));
        true
    }

    /// Sends the queued datagrams of every socket, in batches.
    fn flush(&mut self) -> Result<()> {
        for si in 0..self.socks.len() {
            let mut retried = false;
            while !self.socks[si].queue.is_empty() {
                let s = &mut self.socks[si];
                let n = s.queue.len().min(BATCH);
                let res = {
                    let iovs: Vec<[IoSlice; 1]> = s
                        .queue
                        .iter()
                        .take(n)
                        .map(|(_, d)| [IoSlice::new(d)])
                        .collect();
                    let addrs: Vec<Option<SockaddrStorage>> = vec![None; n];
                    sendmmsg(
                        s.sock.as_raw_fd(),
                        &mut self.hdrs_send,
                        &iovs,
                        &addrs,
                        [],
                        MsgFlags::MSG_DONTWAIT,
                    )
                    .map(|r| r.count())
                };
                match res {
                    Ok(sent) => {
                        let now = Instant::now();
                        let deadline = now + self.cfg.timeout;
                        for _ in 0..sent {
                            let (id, _) = s.queue.pop_front().expect("sent datagram queued");
                            let slot = s.slots[id as usize].as_mut().expect("queued slot");
                            s.deadlines.push_back((deadline, id, slot.serial));
                            if slot.op.measured {
                                let c = &mut self.out.counters;
                                c.requests += 1;
                                match slot.op.kind {
                                    OpKind::Get => c.gets += 1,
                                    OpKind::Set => c.sets += 1,
                                }
                            }
                        }
                        if sent < n {
                            break; // socket buffer full: wait for POLLOUT
                        }
                    }
                    Err(Errno::EAGAIN) => break,
                    // A previous datagram drew an ICMP error (nobody listening): the error is
                    // now consumed and this batch was not sent; try once more.
                    Err(Errno::ECONNREFUSED) if !retried => retried = true,
                    Err(_) => {
                        // Not sent: drop the batch and count it.
                        for _ in 0..n {
                            let (id, _) = s.queue.pop_front().expect("queued");
                            s.slots[id as usize] = None;
                            s.inflight -= 1;
                            self.inflight -= 1;
                            self.out.counters.send_errors += 1;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.socks
            .iter()
            .filter_map(|s| s.deadlines.front().map(|d| d.0))
            .min()
    }

    /// Reads every datagram waiting on socket `si`.
    fn receive(&mut self, si: usize) -> Result<()> {
        loop {
            let lens: Vec<usize> = {
                let fd = self.socks[si].sock.as_raw_fd();
                let mut iovs: Vec<[IoSliceMut; 1]> = self
                    .bufs
                    .iter_mut()
                    .map(|b| [IoSliceMut::new(&mut b[..])])
                    .collect();
                match recvmmsg(
                    fd,
                    &mut self.hdrs_recv,
                    iovs.iter_mut(),
                    MsgFlags::MSG_DONTWAIT,
                    None,
                ) {
                    Ok(r) => r.map(|m| m.bytes).collect(),
                    Err(Errno::EAGAIN) => return Ok(()),
                    // An ICMP error for an earlier datagram (e.g. port unreachable): ignore.
                    Err(Errno::ECONNREFUSED) => continue,
                    Err(e) => return Err(e).context("recvmmsg"),
                }
            };
            let now = Instant::now();
            for (i, &len) in lens.iter().enumerate() {
                let len = len.min(RECV_BUF);
                let d = std::mem::take(&mut self.bufs[i]);
                self.datagram(si, &d[..len], now);
                self.bufs[i] = d;
            }
            if lens.len() < BATCH {
                return Ok(());
            }
        }
    }

    /// Handles one received datagram.
    fn datagram(&mut self, si: usize, d: &[u8], now: Instant) {
        let c = &mut self.out.counters;
        let Some(hdr) = FrameHeader::decode(d) else {
            c.unmatched += 1;
            return;
        };
        let s = &mut self.socks[si];
        let Some(slot) = s.slots[hdr.request_id as usize].as_mut() else {
            c.unmatched += 1;
            return;
        };
        if hdr.total == 0 {
            // memcached sometimes sends an empty datagram with total 0 before a multi-get's
            // messages: it carries nothing.
            return;
        }
        let data = &d[HEADER_LEN..];
        if !slot.cur.push(hdr, data) {
            // The start of another message while one was incomplete: start over with it.
            slot.cur = Reassembly::new();
            if !slot.cur.push(hdr, data) {
                c.unmatched += 1;
                return;
            }
        }
        if !slot.cur.is_complete() {
            return;
        }
        let msg = std::mem::take(&mut slot.cur).finish().expect("complete");
        slot.payload.extend_from_slice(&msg);
        let resp = match parse_response(&slot.payload) {
            Ok(None) => return, // more messages to come (multi-get: END comes last)
            Ok(Some((r, used))) => {
                if used != slot.payload.len() {
                    Some(Response::Error)
                } else {
                    Some(r)
                }
            }
            Err(_) => None,
        };
        let slot = s.slots[hdr.request_id as usize].take().expect("slot");
        s.inflight -= 1;
        self.inflight -= 1;
        self.completed += 1;
        match resp {
            Some(r) => self.work.account(&slot.op, &r, &mut self.out.counters),
            None => {
                if slot.op.measured {
                    self.out.counters.responses += 1;
                    self.out.counters.errors += 1;
                }
            }
        }
        self.out.record(&slot.op, now);
    }

    /// Counts as lost the requests whose deadline passed.
    fn expire(&mut self, now: Instant) {
        for s in &mut self.socks {
            while let Some(&(t, id, serial)) = s.deadlines.front() {
                if t > now {
                    break;
                }
                s.deadlines.pop_front();
                let slot = &mut s.slots[id as usize];
                if slot.as_ref().is_some_and(|sl| sl.serial == serial) {
                    let sl = slot.take().expect("checked");
                    s.inflight -= 1;
                    self.inflight -= 1;
                    if sl.op.measured {
                        self.out.counters.lost += 1;
                    }
                }
            }
        }
    }
}
