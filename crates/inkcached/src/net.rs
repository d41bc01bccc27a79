//! Sockets and the worker event loops.
//!
//! Every worker thread owns a mio `Poll`, its own TCP listener(s) and its own UDP socket(s), all
//! bound with `SO_REUSEPORT` to the same address: the kernel spreads connections and datagrams
//! across workers, and a connection stays on the worker that accepted it. Sockets are
//! non-blocking and edge-triggered; a connection that has more work than its fair share per turn
//! is put on a "pending" list and resumed after the other ready sockets were served, so a busy or
//! slow client cannot stall the others.

use crate::exec::{self, Next, Shared};
use crate::stats::C;
use anyhow::{Context, Result};
use inkproto::request::{parse_request_with, Limits};
use inkproto::udp::{FrameHeader, HEADER_LEN, MAX_PAYLOAD};
use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};
use socket2::{Domain, Protocol, Socket, Type};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

const WAKE: Token = Token(usize::MAX - 1);
/// Tokens below this are listeners and UDP sockets; connections start here.
const CONN_BASE: usize = 1 << 16;
/// AF_XDP sockets' tokens start here (below CONN_BASE).
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
    let ctx = || format!("failed to listen on {what} {addr}");
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
    // Probe without SO_REUSEPORT: fails with EADDRINUSE if anyone else has the port.
    {
        let probe = new()?;
        probe.bind(&addr.into()).with_context(ctx)?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let s = new()?;
        s.set_reuse_port(true).with_context(ctx)?;
        s.set_nonblocking(true).with_context(ctx)?;
        s.bind(&addr.into()).with_context(ctx)?;
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
pub fn listen(per_worker: &[WorkerSockets]) -> Result<()> {
    for p in per_worker {
        for s in &p.tcp {
            s.listen(1024).context("listen")?;
        }
    }
    Ok(())
}

/// The sockets one worker serves.
pub struct WorkerSockets {
    pub tcp: Vec<Socket>,
    pub udp: Vec<Socket>,
    /// AF_XDP sockets (`--afxdp`), see afxdp.rs.
    pub xsk: Vec<crate::afxdp::XskSocket>,
}

/// Worker w runs on CPU w (`--steer-cpumap`).
pub static PIN_WORKERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

struct Conn {
    sock: TcpStream,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// wbuf[..safe] may be sent: in cooperative mode, answers wait until the kernel cache
    /// operations of their requests are committed (once per event-loop round, see run_worker).
    safe: usize,
    swallow: usize,
    closing: bool,
}

#[derive(PartialEq, Eq)]
enum Status {
    /// Wait for the next readiness event.
    Idle,
    /// Has more work: resume after serving others.
    More,
    Close,
}

impl Conn {
    fn new(sock: TcpStream) -> Self {
        Conn {
            sock,
            rbuf: vec![0; 16 * 1024],
            rstart: 0,
            rend: 0,
            wbuf: Vec::new(),
            wpos: 0,
            safe: 0,
            swallow: 0,
            closing: false,
        }
    }

    fn backlog(&self) -> usize {
        self.wbuf.len() - self.wpos
    }

    /// Executes every complete request in the read buffer.
    fn process(&mut self, sh: &Arc<Shared>, w: usize, limits: &Limits) {
        while self.rstart < self.rend && !self.closing && self.backlog() < WBUF_HIGH {
            if self.swallow > 0 {
                let n = self.swallow.min(self.rend - self.rstart);
                self.rstart += n;
                self.swallow -= n;
                continue;
            }
            let buf = &self.rbuf[self.rstart..self.rend];
            match parse_request_with(buf, limits) {
                Ok(Some((req, used))) => {
                    let note = crate::coop::note(&req);
                    if exec::execute(sh, w, req, &mut self.wbuf) == Next::Close {
                        self.closing = true;
                    }
                    crate::coop::apply(sh, w, note);
                    self.rstart += used;
                }
                Ok(None) => break,
                Err(e) => {
                    if e.close {
                        self.closing = true;
                        break;
                    }
                    exec::parse_error(sh, w, buf, &e, &mut self.wbuf);
                    coop_parse_error(sh, w, buf, &e);
                    self.rstart += e.consumed;
                    self.swallow = e.swallow;
                }
            }
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() > 1 << 20 {
                self.rbuf = vec![0; 16 * 1024];
            }
        }
    }

    /// Writes pending output; Err on a dead connection.
    fn flush(&mut self, sh: &Shared, w: usize) -> std::io::Result<()> {
        while self.wpos < self.safe {
            match self.sock.write(&self.wbuf[self.wpos..self.safe]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wpos += n;
                    sh.workers[w].add(C::bytes_written, n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wpos < self.wbuf.len() {
            return Ok(()); // the rest waits for its commit
        }
        self.wbuf.clear();
        self.wpos = 0;
        self.safe = 0;
        if self.wbuf.capacity() > 1 << 20 {
            self.wbuf = Vec::new();
        }
        Ok(())
    }

    fn drive(&mut self, sh: &Arc<Shared>, w: usize, limits: &Limits) -> Status {
        let mut reads = 0;
        loop {
            self.process(sh, w, limits);
            if !crate::coop::enabled() {
                self.safe = self.wbuf.len();
            }
            if self.flush(sh, w).is_err() {
                return Status::Close;
            }
            if self.closing {
                return if self.backlog() == 0 {
                    Status::Close
                } else {
                    Status::Idle
                };
            }
            if self.backlog() >= WBUF_HIGH {
                // The peer is not reading: wait until the socket is writable again.
                return Status::Idle;
            }
            if reads == READS_PER_TURN {
                return Status::More;
            }
            reads += 1;
            // Make room: compact, then grow if a request needs more than the buffer holds.
            if self.rstart > 0
                && (self.rend == self.rbuf.len() || self.rstart > self.rbuf.len() / 2)
            {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                self.rend -= self.rstart;
                self.rstart = 0;
            }
            if self.rbuf.len() - self.rend < READ_CHUNK / 4 {
                let grow = (self.rbuf.len()).max(READ_CHUNK);
                self.rbuf.resize(self.rbuf.len() + grow, 0);
            }
            match self.sock.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Status::Close,
                Ok(n) => {
                    self.rend += n;
                    sh.workers[w].add(C::bytes_read, n as u64);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Status::Idle,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Status::Close,
            }
        }
    }
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

/// A too large store deletes its key (exec::parse_error): the kernel's entry goes too.
fn coop_parse_error(sh: &Shared, w: usize, buf: &[u8], e: &inkproto::request::ProtoError) {
    if e.kind == inkproto::request::ErrorKind::TooLarge {
        if let Some((a, b)) = e.key {
            crate::coop::invalidate(sh, w, &buf[a..b]);
        }
    }
}

/// Executes the requests of one datagram, appending the answer to `out`.
pub(crate) fn execute_datagram(
    sh: &Arc<Shared>,
    w: usize,
    limits: &Limits,
    dgram: &[u8],
    out: &mut Vec<u8>,
) {
    // which worker owns the request's key (steer.rs), counted with or without steering
    let n = sh.settings.threads;
    if n > 1 {
        if let Some(o) = crate::steer::owner(&dgram[HEADER_LEN.min(dgram.len())..], n) {
            sh.workers[w].inc(if o == w {
                C::steer_owned
            } else {
                C::steer_foreign
            });
        }
    }
    let mut pos = HEADER_LEN;
    let n = dgram.len();
    while pos < n {
        let buf = &dgram[pos..n];
        match parse_request_with(buf, limits) {
            Ok(Some((req, used))) => {
                let note = crate::coop::note(&req);
                let quit = exec::execute(sh, w, req, out) == Next::Close;
                crate::coop::apply(sh, w, note);
                pos += used;
                if quit {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                if e.close {
                    break;
                }
                exec::parse_error(sh, w, buf, &e, out);
                coop_parse_error(sh, w, buf, &e);
                pos += e.consumed + e.swallow;
            }
        }
    }
}

/// Serves one UDP socket: up to [`DGRAMS_PER_TURN`] datagrams, received and answered in
/// batches. Returns true if more may wait.
fn serve_udp(
    sock: &UdpSocket,
    sh: &Arc<Shared>,
    w: usize,
    limits: &Limits,
    b: &mut UdpBatch,
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
                let start = b.out.len();
                if hdr.total != 1 || hdr.seq != 0 {
                    b.out
                        .extend_from_slice(b"SERVER_ERROR multi-packet request not supported\r\n");
                } else {
                    execute_datagram(sh, w, limits, dgram, &mut b.out);
                }
                let end = b.out.len();
                if start == end {
                    continue;
                }
                let total = (end - start).div_ceil(MAX_PAYLOAD);
                if total > u16::MAX as usize {
                    b.out.truncate(start);
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
            }
        }
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

/// Runs worker `w` until shutdown.
pub fn run_worker(w: usize, sh: Arc<Shared>, socks: WorkerSockets, mut poll: Poll) -> Result<()> {
    let limits = Limits {
        max_item: sh.settings.max_item,
    };
    let registry = poll.registry().try_clone()?;
    let mut listeners: Vec<TcpListener> = Vec::new();
    for s in socks.tcp {
        let mut l = TcpListener::from_std(s.into());
        registry.register(&mut l, Token(listeners.len()), Interest::READABLE)?;
        listeners.push(l);
    }
    let udp_base = listeners.len();
    let mut udps: Vec<UdpSocket> = Vec::new();
    for s in socks.udp {
        let mut u = UdpSocket::from_std(s.into());
        registry.register(&mut u, Token(udp_base + udps.len()), Interest::READABLE)?;
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
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut pending: Vec<Token> = Vec::new();
    let mut events = Events::with_capacity(256);
    let mut ubatch = UdpBatch::new();
    let st = &sh.workers[w];
    let verbose = sh.settings.verbose;

    let mut unused = Vec::new();
    let mut unsent: Vec<usize> = Vec::new();
    let close = |idx: usize, conns: &mut Vec<Option<Conn>>, free: &mut Vec<usize>| {
        let Some(mut c) = conns[idx].take() else {
            return;
        };
        let _ = registry.deregister(&mut c.sock);
        free.push(idx);
        st.atomic_add(C::curr_connections, -1);
        if verbose > 1 {
            eprintln!("<{} connection closed.", CONN_BASE + idx);
        }
    };
    while !sh.shutdown.load(Ordering::Relaxed) {
        // sent AF_XDP frames come back, the fill rings stay topped up
        for x in xsks.iter_mut() {
            x.recycle(&mut unused);
        }
        let timeout = if !xsks.is_empty() && pending.is_empty() {
            Some(Duration::from_millis(10))
        } else if pending.is_empty() {
            Some(Duration::from_millis(500))
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
            todo.push(ev.token());
        }
        todo.sort_unstable();
        todo.dedup();
        for tok in todo {
            if tok == WAKE {
                continue;
            }
            let t = tok.0;
            if t < udp_base {
                // Accept everything waiting.
                loop {
                    match listeners[t].accept() {
                        Ok((mut s, peer)) => {
                            let cur = crate::stats::sum_one(&sh.workers, C::curr_connections);
                            if cur >= sh.settings.max_conns as u64 {
                                st.atomic_add(C::rejected_connections, 1);
                                let _ = s.write(b"ERROR Too many open connections\r\n");
                                continue;
                            }
                            let _ = s.set_nodelay(true);
                            let idx = free.pop().unwrap_or_else(|| {
                                conns.push(None);
                                conns.len() - 1
                            });
                            let tok = Token(CONN_BASE + idx);
                            if registry
                                .register(&mut s, tok, Interest::READABLE | Interest::WRITABLE)
                                .is_err()
                            {
                                free.push(idx);
                                continue;
                            }
                            if verbose > 1 {
                                eprintln!("<{} new client connection from {peer}", tok.0);
                            }
                            conns[idx] = Some(Conn::new(s));
                            st.atomic_add(C::curr_connections, 1);
                            st.atomic_add(C::total_connections, 1);
                            pending.push(tok);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            // EMFILE and friends: back off rather than spin.
                            if verbose > 0 {
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
                let more = serve_udp(&udps[t - udp_base], &sh, w, &limits, &mut ubatch);
                if more {
                    pending.push(tok);
                }
            } else {
                let idx = t - CONN_BASE;
                let Some(Some(c)) = conns.get_mut(idx) else {
                    continue;
                };
                let status = c.drive(&sh, w, &limits);
                if c.safe < c.wbuf.len() {
                    unsent.push(idx);
                }
                match status {
                    Status::Idle => {}
                    Status::More => pending.push(tok),
                    Status::Close => close(idx, &mut conns, &mut free),
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
                c.safe = c.wbuf.len();
                if c.flush(&sh, w).is_err() || (c.closing && c.backlog() == 0) {
                    close(idx, &mut conns, &mut free);
                }
            }
        }
    }
    Ok(())
}

/// A poll and the waker that interrupts it on shutdown.
pub fn new_poll() -> Result<(Poll, Waker)> {
    let poll = Poll::new().context("epoll_create")?;
    let waker = Waker::new(poll.registry(), WAKE).context("eventfd")?;
    Ok((poll, waker))
}
