//! Sockets and the worker event loops.
//!
//! Long file: the worker loop, its TCP connections, UDP batches and parked flash reads share the
//! worker's state and its one poll; they are kept together so that no request path skips a step.
//!
//! Every worker thread owns a mio `Poll`, its own TCP listener(s) and its own UDP socket(s), all
//! bound with `SO_REUSEPORT` to the same address: the kernel spreads connections and datagrams
//! across workers, and a connection stays on the worker that accepted it. Sockets are
//! non-blocking and edge-triggered; a connection that has more work than its fair share per turn
//! is put on a "pending" list and resumed after the other ready sockets were served, so a busy or
//! slow client cannot stall the others.

use crate::config::Proto;
use crate::conns::{addr_text, Kind};
use crate::exec::{Next, Shared};
use crate::ext::io::{self as extio, Attempt, Ticket};
use crate::session::{Session, Step};
use crate::stats::C;
use anyhow::{Context, Result};
use inkproto::request::Limits;
use inkproto::udp::{FrameHeader, HEADER_LEN, MAX_PAYLOAD};
use mio::net::{TcpListener, TcpStream, UdpSocket, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token, Waker};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "net_conn.rs"]
mod conn;
use conn::{Conn, Listener, Status};

const WAKE: Token = Token(usize::MAX - 1);
/// The flash tier's read completions (see `ext::io`).
const EXT_IO: Token = Token(usize::MAX - 2);
/// Tokens of UDP datagrams parked for flash reads start here.
const PARK_BASE: usize = usize::MAX / 2;
/// UDP datagrams parked for flash reads per worker at most (more are dropped, as UDP may).
const MAX_PARKED: usize = 4096;
/// Tokens below this are listeners and UDP sockets; connections start here.
const CONN_BASE: usize = 1 << 16;
/// AF_XDP sockets' tokens start here (below CONN_BASE, above listeners and UDP sockets).
const XSK_BASE: usize = 1 << 15;
/// Stop executing requests of a connection while this much output waits to be sent.
const WBUF_HIGH: usize = 4 << 20;
/// Reads per connection per turn before yielding to others.
const READS_PER_TURN: usize = 8;
const READ_CHUNK: usize = 64 * 1024;
/// Datagrams per UDP socket per turn.
const DGRAMS_PER_TURN: usize = 64;

/// Binds one socket per worker on `addr` with SO_REUSEPORT, after checking that no other process
/// holds the port (a reuseport group would otherwise silently share it).
pub fn bind_group(addr: SocketAddr, tcp: bool, n: usize) -> Result<Vec<Socket>> {
    let what = if tcp { "TCP" } else { "UDP" };
    let ctx = move || format!("failed to listen on {what} {addr}");
    let mut bind_to = addr;
    let (ty, proto) = if tcp {
        (Type::STREAM, Protocol::TCP)
    } else {
        (Type::DGRAM, Protocol::UDP)
    };
    let new = || -> Result<Socket> {
        let s = Socket::new(Domain::for_address(addr), ty, Some(proto)).with_context(ctx)?;
        if addr.is_ipv6() {
            s.set_only_v6(true).with_context(ctx)?;
        }
        if tcp {
            s.set_reuse_address(true).with_context(ctx)?;
        }
        Ok(s)
    };
    // Probe without SO_REUSEPORT: fails with EADDRINUSE if anyone else has the port. Port 0
    // (`-p -1`): the first socket picks a free port and the others join it.
    if addr.port() != 0 {
        let probe = new()?;
        probe.bind(&addr.into()).with_context(ctx)?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let s = new()?;
        s.set_reuse_port(true).with_context(ctx)?;
        s.set_nonblocking(true).with_context(ctx)?;
        s.bind(&bind_to.into()).with_context(ctx)?;
        if bind_to.port() == 0 {
            if let Some(a) = s.local_addr().ok().and_then(|a| a.as_socket()) {
                bind_to.set_port(a.port());
            }
        }
        if tcp {
            // listen() comes later (see `listen`), when everything else is ready
        } else {
            let _ = s.set_recv_buffer_size(4 << 20);
            let _ = s.set_send_buffer_size(4 << 20);
            // Let GRO hand us a flow's same-size datagrams coalesced (split again in
            // serve_udp); harmless where the kernel or the path does not do it.
            let one: libc::c_int = 1;
            // SAFETY: `s` owns a valid socket fd; the option value is a c_int of the given size.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_UDP,
                    UDP_GRO,
                    (&one as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
        out.push(s);
    }
    Ok(out)
}

/// Starts listening on every TCP socket: the last step of start-up, since a client (or a test)
/// takes an accepted connection for "ready", UDP (and the AF_XDP path) included.
pub fn listen(per_worker: &[WorkerSockets], backlog: i32) -> Result<()> {
    for p in per_worker {
        for (s, _) in &p.tcp {
            s.listen(backlog).context("failed to listen on TCP")?;
        }
    }
    Ok(())
}

/// Worker w runs on CPU w (`--steer-cpumap`).
pub static PIN_WORKERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The sockets one worker serves.
pub struct WorkerSockets {
    /// TCP listeners with the protocol each speaks (`-B`, or `proto[...]` in `-l`).
    pub tcp: Vec<(Socket, Proto)>,
    pub udp: Vec<Socket>,
    /// The unix socket listener (`-s`), shared by every worker.
    pub unix: Option<(std::os::unix::net::UnixListener, String)>,
    /// AF_XDP sockets (`--afxdp`), see afxdp.rs.
    pub xsk: Vec<crate::afxdp::XskSocket>,
}

/// Datagrams received (and answered) per `recvmmsg`/`sendmmsg` round.
const UDP_BATCH: usize = 32;
/// Receive buffer per datagram: the largest UDP payload fits.
const UDP_RBUF: usize = 65536;
/// `UDP_SEGMENT` (linux/udp.h): send one buffer as several datagrams of a given size (UDP GSO).
const UDP_SEGMENT: libc::c_int = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced datagrams, with their size in a control message.
const UDP_GRO: libc::c_int = 104;
/// The kernel's `UDP_MAX_SEGMENTS`.
const GSO_MAX_SEGS: usize = 64;
/// A GSO message is still one UDP payload (at most 65507 bytes over IPv4).
const GSO_MAX_BYTES: usize = 65000;

/// Buffers one worker reuses for every UDP round: no allocation per datagram.
///
/// A round receives up to [`UDP_BATCH`] datagrams with one `recvmmsg`, executes them in order
/// (replies appended to one output buffer), then sends every reply datagram with as few
/// `sendmmsg` calls as the kernel allows. Each reply datagram is two iovecs: its 8-byte frame
/// header and its slice of the output buffer, so payloads are never copied again.
struct UdpBatch {
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    addr_lens: Vec<libc::socklen_t>,
    lens: Vec<usize>,
    /// All replies' payloads of the round, back to back.
    out: Vec<u8>,
    /// One per reply datagram.
    hdrs: Vec<[u8; HEADER_LEN]>,
    /// One per reply datagram: (index of the request datagram = peer, start, end in `out`).
    sends: Vec<(usize, usize, usize)>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    /// Per request datagram: the first datagram of the round from the same address.
    canon: Vec<usize>,
    /// Reply datagrams in sending order (grouped by peer).
    order: Vec<u32>,
    groups: Vec<(usize, usize, usize)>,
    /// Control buffers (UDP_SEGMENT), one per message.
    cmsgs: Vec<[u64; 4]>,
    /// UDP GSO still believed to work.
    gso: bool,
    /// Receive control buffers (UDP_GRO), one per datagram.
    rctl: Vec<[u64; 8]>,
    /// Per received buffer: the size of the datagrams GRO coalesced into it (0: one datagram).
    segs: Vec<usize>,
    /// Ends of the reply messages of one datagram in `out`.
    ends: Vec<usize>,
}

impl UdpBatch {
    fn new() -> Self {
        UdpBatch {
            // Zeroed allocation: pages are only touched (and become resident) when written.
            bufs: vec![0; UDP_BATCH * UDP_RBUF],
            // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
            addrs: vec![unsafe { std::mem::zeroed() }; UDP_BATCH],
            addr_lens: vec![0; UDP_BATCH],
            lens: vec![0; UDP_BATCH],
            out: Vec::with_capacity(64 * 1024),
            hdrs: Vec::with_capacity(UDP_BATCH),
            sends: Vec::with_capacity(UDP_BATCH),
            iovs: Vec::with_capacity(2 * UDP_BATCH),
            msgs: Vec::with_capacity(UDP_BATCH),
            canon: vec![0; UDP_BATCH],
            order: Vec::with_capacity(UDP_BATCH),
            groups: Vec::with_capacity(UDP_BATCH),
            cmsgs: Vec::with_capacity(UDP_BATCH),
            gso: true,
            rctl: vec![[0; 8]; UDP_BATCH],
            segs: vec![0; UDP_BATCH],
            ends: Vec::with_capacity(8),
        }
    }

    /// Receives up to [`UDP_BATCH`] datagrams; returns how many (0 when none waits or on error).
    fn recv(&mut self, fd: RawFd) -> usize {
        self.iovs.clear();
        self.msgs.clear();
        for ((buf, addr), ctl) in self
            .bufs
            .chunks_exact_mut(UDP_RBUF)
            .zip(self.addrs.iter_mut())
            .zip(self.rctl.iter_mut())
        {
            self.iovs.push(libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            });
            // SAFETY: mmsghdr is plain old data; all-zero is valid (null pointers, zero lengths).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = (addr as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as _;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = ctl.as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = std::mem::size_of_val(ctl) as _;
            self.msgs.push(m);
        }
        // `iovs` is complete and no longer reallocates: point each message at its iovec.
        for (m, iov) in self.msgs.iter_mut().zip(self.iovs.iter_mut()) {
            m.msg_hdr.msg_iov = iov;
        }
        loop {
            // SAFETY: `msgs` holds UDP_BATCH valid mmsghdr whose name and iovec pointers refer
            // to `addrs`, `iovs` and `bufs`, which live in `self`, are not otherwise borrowed
            // during the call and are large enough for what they declare. The call is
            // non-blocking (the socket is O_NONBLOCK) and a null timeout is allowed.
            let n = unsafe {
                libc::recvmmsg(
                    fd,
                    self.msgs.as_mut_ptr(),
                    UDP_BATCH as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if n >= 0 {
                let n = n as usize;
                for i in 0..n {
                    self.lens[i] = self.msgs[i].msg_len as usize;
                    self.addr_lens[i] = self.msgs[i].msg_hdr.msg_namelen;
                    self.segs[i] = 0;
                    let mh = &self.msgs[i].msg_hdr;
                    // SAFETY: the kernel filled this message's control buffer (inside `rctl`)
                    // and set `msg_controllen` to what it wrote; CMSG_FIRSTHDR/CMSG_NXTHDR
                    // stay within it and return null at its end.
                    unsafe {
                        let mut c = libc::CMSG_FIRSTHDR(mh);
                        while !c.is_null() {
                            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                                let g = std::ptr::read_unaligned(
                                    libc::CMSG_DATA(c).cast::<libc::c_int>(),
                                );
                                self.segs[i] = g.max(0) as usize;
                            }
                            c = libc::CMSG_NXTHDR(mh, c);
                        }
                    }
                }
                return n;
            }
            if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                // WouldBlock: nothing waits. Anything else: UDP is best effort, try later.
                return 0;
            }
        }
    }

    /// Sends every reply datagram queued in `sends`; returns the bytes sent.
    ///
    /// Replies to the same peer are grouped (keeping their order) into one message with
    /// `UDP_SEGMENT` (UDP GSO) when their datagrams have the same size (the last may be
    /// shorter): the kernel cuts the group back into exactly the datagrams it would have sent
    /// one by one, after a single pass through the socket and routing layers.
    fn send(&mut self, fd: RawFd, n_recv: usize) -> u64 {
        if self.sends.is_empty() {
            return 0;
        }
        // Canonical peer of every request datagram: the first one with the same address.
        for i in 0..n_recv {
            self.canon[i] = i;
            if self.gso {
                let a = addr_bytes(&self.addrs[i], self.addr_lens[i]);
                if let Some(j) =
                    (0..i).find(|&j| addr_bytes(&self.addrs[j], self.addr_lens[j]) == a)
                {
                    self.canon[i] = self.canon[j];
                }
            }
        }
        self.order.clear();
        self.order.extend(0..self.sends.len() as u32);
        let (sends, canon) = (&self.sends, &self.canon);
        self.order.sort_by_key(|&k| canon[sends[k as usize].0]);
        // Groups: (first index in `order`, count, segment size or 0 for a single datagram).
        self.groups.clear();
        let mut k = 0;
        while k < self.order.len() {
            let (p0, s0, e0) = self.sends[self.order[k] as usize];
            let seg = HEADER_LEN + e0 - s0;
            let mut cnt = 1;
            let mut bytes = seg;
            if self.gso {
                while k + cnt < self.order.len() && cnt < GSO_MAX_SEGS {
                    let (p, s, e) = self.sends[self.order[k + cnt] as usize];
                    let len = HEADER_LEN + e - s;
                    if canon[p] != canon[p0] || len > seg || bytes + len > GSO_MAX_BYTES {
                        break;
                    }
                    cnt += 1;
                    bytes += len;
                    if len < seg {
                        break;
                    }
                }
            }
            self.groups.push((k, cnt, if cnt > 1 { seg } else { 0 }));
            k += cnt;
        }
        self.iovs.clear();
        self.msgs.clear();
        self.cmsgs.clear();
        self.cmsgs.resize(self.groups.len(), [0; 4]);
        for &(first, cnt, _) in &self.groups {
            for &o in &self.order[first..first + cnt] {
                let (_, s, e) = self.sends[o as usize];
                self.iovs.push(libc::iovec {
                    iov_base: self.hdrs[o as usize].as_mut_ptr().cast(),
                    iov_len: HEADER_LEN,
                });
                self.iovs.push(libc::iovec {
                    // The kernel only reads through send iovecs.
                    iov_base: self.out[s..e].as_ptr() as *mut libc::c_void,
                    iov_len: e - s,
                });
            }
        }
        for (g, &(first, cnt, seg)) in self.groups.iter().enumerate() {
            let peer = self.sends[self.order[first] as usize].0;
            // SAFETY: mmsghdr is plain old data; all-zero is valid (null pointers, zero lengths).
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = (&mut self.addrs[peer] as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = self.addr_lens[peer];
            m.msg_hdr.msg_iov = &mut self.iovs[2 * first];
            m.msg_hdr.msg_iovlen = (2 * cnt) as _;
            if seg > 0 {
                let c = &mut self.cmsgs[g];
                let hdr = libc::cmsghdr {
                    // SAFETY: CMSG_LEN only computes a length.
                    cmsg_len: unsafe { libc::CMSG_LEN(2) } as _,
                    cmsg_level: libc::SOL_UDP,
                    cmsg_type: UDP_SEGMENT,
                };
                // SAFETY: `c` is 32 bytes aligned to 8, room for CMSG_SPACE(2) = 24 bytes:
                // the cmsghdr (16 bytes) then the u16 segment size right after it
                // (CMSG_DATA is at CMSG_ALIGN(sizeof(cmsghdr)) = 16 on Linux).
                unsafe {
                    let base = c.as_mut_ptr().cast::<u8>();
                    std::ptr::write_unaligned(base.cast::<libc::cmsghdr>(), hdr);
                    std::ptr::write_unaligned(base.add(16).cast::<u16>(), seg as u16);
                }
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE only computes a length.
                m.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
            }
            self.msgs.push(m);
        }
        let mut bytes = 0u64;
        let mut pos = 0;
        while pos < self.msgs.len() {
            let left = &mut self.msgs[pos..];
            // SAFETY: every message in `left` points (name, iovecs, control) into `addrs`,
            // `iovs`, `hdrs`, `out` and `cmsgs`, all owned by `self` and neither moved nor
            // resized until the call returns; the kernel only reads them (and writes each
            // `msg_len`). `left.len()` is the number of valid entries (the kernel caps it at
            // UIO_MAXIOV).
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    left.as_mut_ptr(),
                    left.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let n = n as usize;
                bytes += left[..n].iter().map(|m| u64::from(m.msg_len)).sum::<u64>();
                pos += n;
                continue;
            }
            let err = std::io::Error::last_os_error();
            if n < 0 && err.kind() == ErrorKind::Interrupted {
                continue;
            }
            let (first, cnt, seg) = self.groups[pos];
            if seg > 0 && matches!(err.raw_os_error(), Some(libc::EIO | libc::EINVAL)) {
                // This path cannot do UDP GSO (no checksum offload, xfrm, ...): send the
                // group's datagrams one by one, and never group again on this worker.
                self.gso = false;
                for j in 0..cnt {
                    let mut m = self.msgs[pos];
                    m.msg_hdr.msg_iov = &mut self.iovs[2 * (first + j)];
                    m.msg_hdr.msg_iovlen = 2;
                    m.msg_hdr.msg_control = std::ptr::null_mut();
                    m.msg_hdr.msg_controllen = 0;
                    // SAFETY: as above, one message pointing into buffers owned by `self`.
                    let r = unsafe { libc::sendmsg(fd, &m.msg_hdr, libc::MSG_DONTWAIT) };
                    if r > 0 {
                        bytes += r as u64;
                    }
                }
            }
            // UDP is best effort: a datagram the kernel refuses (e.g. a full socket buffer)
            // is dropped, as memcached does, and the next ones are tried.
            pos += 1;
        }
        bytes
    }
}

/// The meaningful bytes of a socket address.
fn addr_bytes(a: &libc::sockaddr_storage, len: libc::socklen_t) -> &[u8] {
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: `a` is a live sockaddr_storage (plain old data, fully initialised) and `n` does
    // not exceed its size.
    unsafe { std::slice::from_raw_parts((a as *const libc::sockaddr_storage).cast::<u8>(), n) }
}

/// Executes the requests of one datagram from `pos` on, appending the answer to `out`. Each
/// binary answer is a reply message of its own, as memcached sends them; the text answers of a
/// datagram go out as one message. `ends` gets the end of every message in `out`. If a request
/// must wait for flash reads, returns its ticket and position (its answer and the following
/// ones are not in `out`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute_datagram(
    sh: &Arc<Shared>,
    w: usize,
    limits: &Limits,
    dgram: &[u8],
    mut pos: usize,
    resume: Option<Ticket>,
    out: &mut Vec<u8>,
    ends: &mut Vec<usize>,
) -> Option<(Ticket, usize)> {
    let n = dgram.len();
    if resume.is_none() {
        count_owner(sh, w, &dgram[HEADER_LEN.min(n)..]);
    }
    // every request of a datagram speaks the protocol of its first byte
    let mut session = Session::udp();
    if n > HEADER_LEN {
        session.proto = if dgram[HEADER_LEN] == inkproto::binary::REQ_MAGIC {
            crate::config::Proto::Binary
        } else {
            crate::config::Proto::Ascii
        };
    }
    while pos < n {
        let buf = &dgram[pos..n];
        let before = out.len();
        let mut used_swallow = None;
        let r = extio::attempt(&sh.workers[w], resume, out, |out| {
            match session.step(sh, w, limits, buf, out) {
                Step::NeedMore => Next::Drop,
                Step::Done {
                    used,
                    swallow,
                    next,
                } => {
                    used_swallow = Some(used + swallow);
                    next
                }
            }
        });
        let next = match r {
            Attempt::Done(next) => next,
            Attempt::Wait(t) => return Some((t, pos)),
        };
        let Some(u) = used_swallow else { break };
        pos += u;
        if session.proto == crate::config::Proto::Binary && out.len() > before {
            ends.push(out.len());
        }
        if !matches!(next, Next::Continue | Next::Flush | Next::Pause) {
            break;
        }
    }
    if ends.last() != Some(&out.len()) {
        ends.push(out.len());
    }
    if let Some(t) = resume {
        extio::release(t);
    }
    None
}

/// Counts whether worker `w` owns the request's first key (steer.rs), with or without steering.
fn count_owner(sh: &Shared, w: usize, req: &[u8]) {
    let n = sh.workers.len();
    if n > 1 {
        if let Some(o) = crate::steer::owner(req, n) {
            sh.workers[w].inc(if o == w {
                C::steer_owned
            } else {
                C::steer_foreign
            });
        }
    }
}

/// A UDP datagram whose requests wait for flash reads.
struct Parked {
    /// Index of the worker's UDP socket it came on.
    sock: usize,
    addr: libc::sockaddr_storage,
    addr_len: libc::socklen_t,
    request_id: u16,
    /// The datagram (frame header included) and where execution stopped.
    dgram: Vec<u8>,
    pos: usize,
    /// Answers of the requests before `pos`.
    out: Vec<u8>,
    ticket: Ticket,
}

/// The UDP datagrams a worker parked, by slot (token `PARK_BASE + slot`).
#[derive(Default)]
struct ParkedUdp {
    slots: Vec<Option<Parked>>,
    free: Vec<usize>,
    count: usize,
}

impl ParkedUdp {
    fn park(&mut self, p: Parked) {
        let t = p.ticket;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        self.slots[slot] = Some(p);
        self.count += 1;
        extio::watch(t, Token(PARK_BASE + slot));
    }
}

/// Executes a parked datagram again; sends its answer once nothing waits any more.
fn resume_udp(
    parked: &mut ParkedUdp,
    slot: usize,
    udps: &[UdpSocket],
    sh: &Arc<Shared>,
    w: usize,
    limits: &Limits,
) {
    let Some(Some(mut p)) = parked.slots.get_mut(slot).map(Option::take) else {
        return;
    };
    parked.free.push(slot);
    parked.count -= 1;
    if !extio::is_ready(p.ticket) {
        parked.park(p);
        return;
    }
    let mut ends = Vec::new();
    let pos = p.pos;
    match execute_datagram(
        sh,
        w,
        limits,
        &p.dgram,
        pos,
        Some(p.ticket),
        &mut p.out,
        &mut ends,
    ) {
        Some((t, pos)) => {
            p.ticket = t;
            p.pos = pos;
            parked.park(p);
        }
        None => {
            crate::coop::commit(sh, w);
            let sent = send_reply(
                udps[p.sock].as_raw_fd(),
                &p.addr,
                p.addr_len,
                p.request_id,
                &p.out,
            );
            sh.workers[w].add(C::bytes_written, sent);
        }
    }
}

/// Sends one answer to `addr`, cut into frames as [`serve_udp`] cuts them. Returns the bytes
/// sent.
fn send_reply(
    fd: RawFd,
    addr: &libc::sockaddr_storage,
    addr_len: libc::socklen_t,
    request_id: u16,
    payload: &[u8],
) -> u64 {
    if payload.is_empty() {
        return 0;
    }
    let total = payload.len().div_ceil(MAX_PAYLOAD);
    if total > u16::MAX as usize {
        return 0;
    }
    let mut sent = 0;
    for (j, chunk) in payload.chunks(MAX_PAYLOAD).enumerate() {
        let h = FrameHeader {
            request_id,
            seq: j as u16,
            total: total as u16,
            reserved: 0,
        }
        .encode();
        let mut iov = [
            libc::iovec {
                iov_base: h.as_ptr() as *mut libc::c_void,
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: chunk.as_ptr() as *mut libc::c_void,
                iov_len: chunk.len(),
            },
        ];
        // SAFETY: msghdr is plain old data; all-zero is valid.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_name = (addr as *const libc::sockaddr_storage as *mut libc::sockaddr_storage).cast();
        m.msg_namelen = addr_len;
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = 2;
        // SAFETY: the message points at `addr`, `h` and `chunk`, all alive for the call, which
        // only reads them.
        let r = unsafe { libc::sendmsg(fd, &m, libc::MSG_DONTWAIT) };
        if r > 0 {
            sent += r as u64;
        }
    }
    sent
}

/// Serves one UDP socket: up to [`DGRAMS_PER_TURN`] datagrams, received and answered in
/// batches. Returns true if more may wait.
fn serve_udp(
    (sock, sock_idx): (&UdpSocket, usize),
    sh: &Arc<Shared>,
    w: usize,
    limits: &Limits,
    b: &mut UdpBatch,
    parked: &mut ParkedUdp,
) -> bool {
    let fd = sock.as_raw_fd();
    let st = &sh.workers[w];
    for _ in 0..DGRAMS_PER_TURN.div_ceil(UDP_BATCH) {
        let n = b.recv(fd);
        if n == 0 {
            return false;
        }
        b.out.clear();
        b.hdrs.clear();
        b.sends.clear();
        for i in 0..n {
            let len = b.lens[i];
            let seg = match b.segs[i] {
                0 => len.max(1),
                g => g,
            };
            // GRO may have coalesced several datagrams of `seg` bytes (the last maybe shorter).
            for off in (0..len.max(1)).step_by(seg) {
                let dgram = &b.bufs[i * UDP_RBUF + off..i * UDP_RBUF + (off + seg).min(len)];
                st.add(C::bytes_read, dgram.len() as u64);
                let Some(hdr) = FrameHeader::decode(dgram) else {
                    continue;
                };
                let mut start = b.out.len();
                b.ends.clear();
                if hdr.total != 1 || hdr.seq != 0 {
                    b.out
                        .extend_from_slice(b"SERVER_ERROR multi-packet request not supported\r\n");
                    b.ends.push(b.out.len());
                } else if let Some((ticket, pos)) = execute_datagram(
                    sh,
                    w,
                    limits,
                    dgram,
                    HEADER_LEN,
                    None,
                    &mut b.out,
                    &mut b.ends,
                ) {
                    // Answered later, once the flash reads are in; UDP may drop it when too
                    // many wait already.
                    if parked.count < MAX_PARKED {
                        parked.park(Parked {
                            sock: sock_idx,
                            addr: b.addrs[i],
                            addr_len: b.addr_lens[i],
                            request_id: hdr.request_id,
                            dgram: dgram.to_vec(),
                            pos,
                            out: b.out[start..].to_vec(),
                            ticket,
                        });
                    } else {
                        extio::cancel(ticket);
                    }
                    b.out.truncate(start);
                    continue;
                }
                for k in 0..b.ends.len() {
                    let end = b.ends[k];
                    if start == end {
                        continue;
                    }
                    let total = (end - start).div_ceil(MAX_PAYLOAD);
                    if total > u16::MAX as usize {
                        start = end;
                        continue;
                    }
                    for (j, s) in (start..end).step_by(MAX_PAYLOAD).enumerate() {
                        let h = FrameHeader {
                            request_id: hdr.request_id,
                            seq: j as u16,
                            total: total as u16,
                            reserved: 0,
                        };
                        b.hdrs.push(h.encode());
                        b.sends.push((i, s, (s + MAX_PAYLOAD).min(end)));
                    }
                    start = end;
                }
            }
        }
        // cooperative mode: the kernel cache before the answers (coop.rs)
        crate::coop::commit(sh, w);
        let sent = b.send(fd, n);
        st.add(C::bytes_written, sent);
        if b.out.capacity() > 4 << 20 {
            b.out = Vec::with_capacity(64 * 1024);
        }
        if n < UDP_BATCH {
            return false;
        }
    }
    true
}

/// Closes connection `idx` of a worker.
fn close_conn(
    idx: usize,
    conns: &mut [Option<Conn>],
    free: &mut Vec<usize>,
    registry: &mio::Registry,
    sh: &Shared,
    w: usize,
) {
    let Some(mut c) = conns[idx].take() else {
        return;
    };
    if let Some(t) = c.wait {
        extio::cancel(t);
    }
    let fd = c.sock.fd();
    let _ = registry.deregister(c.sock.source());
    let peer = sh.conns.remove(fd).unwrap_or_default();
    crate::watch::conn_event(Some(c.close_reason), &peer, fd);
    if c.watch.is_some() {
        crate::watch::WATCH.remove(c.session.ctx.id);
    }
    free.push(idx);
    sh.workers[w].atomic_add(C::curr_connections, -1);
    if sh.rt.verbosity.load(Ordering::Relaxed) > 1 {
        eprintln!("<{fd} connection closed.");
    }
}

/// Runs worker `w` until shutdown.
pub fn run_worker(w: usize, sh: Arc<Shared>, socks: WorkerSockets, mut poll: Poll) -> Result<()> {
    let limits = Limits {
        max_item: sh.cfg.item_size_max as usize,
        use_cas: sh.cfg.use_cas,
    };
    let registry = poll.registry().try_clone()?;
    let never = Arc::new(AtomicU32::new(sh.store.now()));
    let mut listeners: Vec<(Listener, Proto)> = Vec::new();
    for (s, proto) in socks.tcp {
        let local = s.local_addr().ok().and_then(|a| a.as_socket());
        let mut l = TcpListener::from_std(s.into());
        registry.register(&mut l, Token(listeners.len()), Interest::READABLE)?;
        sh.conns.add(
            l.as_raw_fd(),
            Kind::Listen,
            addr_text(local, false, None),
            String::new(),
            never.clone(),
        );
        listeners.push((Listener::Tcp(l), proto));
    }
    if let Some((u, path)) = socks.unix {
        let mut l = UnixListener::from_std(u);
        registry.register(&mut l, Token(listeners.len()), Interest::READABLE)?;
        sh.conns.add(
            l.as_raw_fd(),
            Kind::Listen,
            addr_text(None, false, Some(&path)),
            String::new(),
            never.clone(),
        );
        listeners.push((Listener::Unix(l), sh.cfg.protocol));
    }
    let udp_base = listeners.len();
    let mut udps: Vec<UdpSocket> = Vec::new();
    for s in socks.udp {
        let local = s.local_addr().ok().and_then(|a| a.as_socket());
        let mut u = UdpSocket::from_std(s.into());
        registry.register(&mut u, Token(udp_base + udps.len()), Interest::READABLE)?;
        sh.conns.add(
            u.as_raw_fd(),
            Kind::Udp,
            addr_text(local, true, None),
            String::new(),
            never.clone(),
        );
        udps.push(u);
    }
    let mut xsks = socks.xsk;
    for (i, x) in xsks.iter().enumerate() {
        registry.register(
            &mut mio::unix::SourceFd(&x.as_raw_fd()),
            Token(XSK_BASE + i),
            Interest::READABLE,
        )?;
    }
    crate::coop::init_worker(w);
    if PIN_WORKERS.load(Ordering::Relaxed) {
        // SAFETY: cpu_set_t is plain old data; CPU_SET writes within it; the call only reads
        // the set (pid 0: this thread).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(w, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    let mut unused = Vec::new();
    // cooperative mode: connections whose answers wait for the round's commit
    let mut unsent: Vec<usize> = Vec::new();
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut pending: Vec<Token> = Vec::new();
    let mut events = Events::with_capacity(256);
    let mut ubatch = UdpBatch::new();
    let st = &sh.workers[w];
    let verbose = || sh.rt.verbosity.load(Ordering::Relaxed);
    // Listeners not accepting while at the connection limit (without maxconns_fast).
    let mut paused = false;
    // since when (memcached's maxconns_entered, for time_in_listen_disabled_us)
    let mut paused_at: Option<Instant> = None;
    let mut last_idle_scan = sh.store.now();
    let mut parked = ParkedUdp::default();
    if let Err(e) = extio::init_worker(sh.store.ext(), &registry, EXT_IO) {
        eprintln!("inkcached: worker {w}: flash reads unavailable ({e:#}); its flash items miss");
    }

    while !sh.shutdown.load(Ordering::Relaxed) {
        extio::submit_pending();
        // sent AF_XDP frames come back, the fill rings stay topped up
        for x in xsks.iter_mut() {
            x.recycle(&mut unused);
        }
        let timeout = if pending.is_empty() {
            Some(Duration::from_millis(if paused || !xsks.is_empty() {
                10
            } else {
                500
            }))
        } else {
            Some(Duration::ZERO)
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e).context("poll");
        }
        let mut todo: Vec<Token> = std::mem::take(&mut pending);
        for ev in events.iter() {
            if ev.token() == WAKE {
                // log lines for this worker's watchers
                for (i, c) in conns.iter().enumerate() {
                    if c.as_ref().is_some_and(|c| c.watch.is_some()) {
                        todo.push(Token(CONN_BASE + i));
                    }
                }
            }
            todo.push(ev.token());
        }
        if paused {
            // retry accepting (memcached's maxconns handler polls every 10 ms)
            paused = false;
            if let Some(t) = paused_at.take() {
                let us = i64::try_from(t.elapsed().as_micros()).unwrap_or(i64::MAX);
                st.atomic_add(C::time_in_listen_disabled_us, us);
            }
            todo.extend((0..udp_base).map(Token));
        }
        let idle = sh.cfg.idle_timeout;
        let now = sh.store.now();
        if idle > 0 && now != last_idle_scan {
            last_idle_scan = now;
            for (i, c) in conns.iter_mut().enumerate() {
                if let Some(c) = c.as_mut().filter(|c| c.watch.is_none()) {
                    let last = c.last_cmd.load(Ordering::Relaxed) & crate::conns::TIME;
                    if now.saturating_sub(last) > idle as u32 {
                        st.inc(C::idle_kicks);
                        c.closing = true;
                        c.dropping = true;
                        c.close_reason = crate::watch::CloseReason::IdleTimeout;
                        todo.push(Token(CONN_BASE + i));
                    }
                }
            }
        }
        todo.sort_unstable();
        todo.dedup();
        for tok in todo {
            if tok == WAKE {
                continue;
            }
            if tok == EXT_IO {
                let store = &sh.store;
                pending.extend(extio::on_event(&mut |k, p| store.drop_flash(k, p)));
                continue;
            }
            let t = tok.0;
            if t >= PARK_BASE {
                resume_udp(&mut parked, t - PARK_BASE, &udps, &sh, w, &limits);
                continue;
            }
            if t < udp_base {
                // Accept everything waiting.
                while !paused {
                    match listeners[t].0.accept() {
                        Ok((mut s, peer, local)) => {
                            // memcached's rule: a descriptor number at -c minus one or above
                            if sh.cfg.maxconns_fast && s.fd() >= sh.cfg.maxconns - 1 {
                                st.atomic_add(C::rejected_connections, 1);
                                let _ = s.write(b"ERROR Too many open connections\r\n");
                                continue;
                            }
                            let idx = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            let tok = Token(CONN_BASE + idx);
                            if registry
                                .register(s.source(), tok, Interest::READABLE | Interest::WRITABLE)
                                .is_err()
                            {
                                free.push(idx);
                                continue;
                            }
                            let fd = s.fd();
                            if verbose() > 1 {
                                eprintln!("<{fd} new client connection");
                            }
                            let c = Conn::new(
                                s,
                                Session::new(&sh, listeners[t].1, fd as usize),
                                sh.store.now(),
                            );
                            sh.conns
                                .add(fd, Kind::Conn, peer.clone(), local, c.last_cmd.clone());
                            crate::watch::conn_event(None, &peer, fd);
                            conns[idx] = Some(c);
                            st.atomic_add(C::curr_connections, 1);
                            st.atomic_add(C::total_connections, 1);
                            pending.push(tok);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e)
                            if e.raw_os_error() == Some(libc::EMFILE) && !sh.cfg.maxconns_fast =>
                        {
                            // out of descriptors (the limit is -c): stop accepting for a
                            // while, as memcached's accept_new_conns(false)
                            paused = true;
                            paused_at.get_or_insert_with(Instant::now);
                            st.atomic_add(C::listen_disabled_num, 1);
                            break;
                        }
                        Err(e) => {
                            // EMFILE and friends: back off rather than spin.
                            if verbose() > 0 {
                                eprintln!("accept: {e}");
                            }
                            std::thread::sleep(Duration::from_millis(10));
                            break;
                        }
                    }
                }
            } else if (XSK_BASE..CONN_BASE).contains(&t) {
                if xsks[t - XSK_BASE].serve(&sh, w, &limits) {
                    pending.push(tok);
                }
            } else if t < CONN_BASE {
                let i = t - udp_base;
                let more = serve_udp((&udps[i], i), &sh, w, &limits, &mut ubatch, &mut parked);
                if more {
                    pending.push(tok);
                }
            } else {
                let idx = t - CONN_BASE;
                let Some(Some(c)) = conns.get_mut(idx) else {
                    continue;
                };
                let status = if c.dropping {
                    Status::Close
                } else {
                    c.drive(&sh, w, &limits, tok)
                };
                if status != Status::Close && c.held() {
                    unsent.push(idx);
                }
                match status {
                    Status::Idle => {}
                    Status::More => pending.push(tok),
                    Status::Close => {
                        close_conn(idx, &mut conns, &mut free, &registry, &sh, w);
                        if paused {
                            pending.extend((0..udp_base).map(Token));
                        }
                    }
                }
            }
        }
        // Cooperative mode: one commit for the round's TCP requests, then their answers.
        if !unsent.is_empty() {
            crate::coop::commit(&sh, w);
            for idx in unsent.drain(..) {
                let Some(Some(c)) = conns.get_mut(idx) else {
                    continue;
                };
                if c.release(&sh, w) == Status::Close {
                    close_conn(idx, &mut conns, &mut free, &registry, &sh, w);
                }
            }
        }
    }
    extio::shutdown_worker();
    Ok(())
}

/// A poll and the waker that interrupts it on shutdown.
pub fn new_poll() -> Result<(Poll, Waker)> {
    let poll = Poll::new().context("epoll_create")?;
    let waker = Waker::new(poll.registry(), WAKE).context("eventfd")?;
    Ok((poll, waker))
}
