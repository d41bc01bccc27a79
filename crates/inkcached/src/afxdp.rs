//! The AF_XDP receive path for UDP requests (`--afxdp IFACE`).
//!
//! Long file: the UMEM, the four rings, the sockets' set-up and the frame path (parse, answer,
//! headers) are one unit over one shared memory layout; split, each part would expose it.
//!
//! An XDP program (inkcache's when inkcache is attached to IFACE in cooperative mode, else
//! inkcached's own `bpf/inkcached/inkcached_xdp.bpf.c`) hands the UDP requests for our port and addresses to the
//! AF_XDP sockets in the `xsks` map (see `bpf/xsk.h`); they skip the kernel's UDP stack. Each
//! worker answers them from the same store and sends the reply frames back through the socket's
//! TX ring, building Ethernet, IP and UDP headers itself (the request's, swapped). TCP, and every
//! packet the XDP program does not hand over, stays on ordinary sockets.
//!
//! Layout: per RX queue one UMEM (frames of [`FRAME`] bytes) and one socket per slot: one slot
//! per queue, owned by worker `queue % workers`, or with key steering one slot per worker (the
//! XDP program picks the slot by first-key hash), all slots of a queue sharing its UMEM. The
//! UMEM's fill and completion rings are shared by those sockets and kept behind a mutex (taken
//! once per batch); each socket's RX and TX rings belong to its worker alone.
//!
//! Frames: a request's frame is reused for the first datagram of its answer; longer answers
//! take more frames from the queue's free list. Sent frames come back on the completion ring
//! and go to the free list, which tops up the fill ring.
//!
//! The rings are hand-written over the kernel's UAPI (linux/if_xdp.h, through the `libc` crate):
//! producer and consumer indexes are shared with the kernel through mmap and accessed with
//! acquire/release atomics, as the UAPI requires.

use crate::exec::Shared;
use crate::stats::C;
use anyhow::{bail, Context, Result};
use inkproto::request::Limits;
use inkproto::udp::{FrameHeader, HEADER_LEN, MAX_PAYLOAD};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes per UMEM frame (one datagram each way).
pub const FRAME: usize = 4096;
/// Frames per queue's UMEM.
const FRAMES: usize = 4096;
/// Entries of every ring (a power of two).
const RING: u32 = 2048;
/// Requests taken from the RX ring per batch.
const BATCH: u32 = 32;
/// Batches per readiness event before yielding to the worker's other sockets.
const BATCHES_PER_TURN: usize = 4;
const ETH_LEN: usize = 14;

/// A memory mapping, unmapped on drop.
struct Mmap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; who may touch which part of it is ruled by the ring
// protocol (indexes) and by frame ownership, both enforced by the code below.
unsafe impl Send for Mmap {}
// SAFETY: as above.
unsafe impl Sync for Mmap {}

impl Mmap {
    fn anonymous(len: usize) -> Result<Mmap> {
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of the UMEM");
        }
        Ok(Mmap { ptr: p.cast(), len })
    }

    fn ring(fd: RawFd, len: usize, pgoff: u64) -> Result<Mmap> {
        // SAFETY: maps a ring of the AF_XDP socket `fd` (the kernel checks offset and length);
        // the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()).context("mmap of an AF_XDP ring");
        }
        Ok(Mmap { ptr: p.cast(), len })
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `mmap` returned; nothing refers to it any more (the
        // owner is being dropped).
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

/// One single-producer single-consumer ring shared with the kernel.
struct Ring {
    map: Mmap,
    prod: usize,
    cons: usize,
    flags: usize,
    desc: usize,
    mask: u32,
}

impl Ring {
    fn new(fd: RawFd, off: &libc::xdp_ring_offset, entry: usize, pgoff: u64) -> Result<Ring> {
        let len = off.desc as usize + RING as usize * entry;
        let map = Mmap::ring(fd, len, pgoff)?;
        Ok(Ring {
            map,
            prod: off.producer as usize,
            cons: off.consumer as usize,
            flags: off.flags as usize,
            desc: off.desc as usize,
            mask: RING - 1,
        })
    }

    fn index(&self, off: usize) -> &AtomicU32 {
        // SAFETY: `off` is one of the kernel-given offsets of a u32 index inside the mapping,
        // which lives as long as `self`; AtomicU32 has the layout of u32 and the kernel updates
        // it concurrently, hence the atomic access.
        unsafe { &*(self.map.ptr.add(off) as *const AtomicU32) }
    }

    /// Entries a consumer may read: (first index, count up to `max`).
    fn peek(&self, max: u32) -> (u32, u32) {
        let cons = self.index(self.cons).load(Ordering::Relaxed);
        let prod = self.index(self.prod).load(Ordering::Acquire);
        (cons, prod.wrapping_sub(cons).min(max))
    }

    fn release(&self, n: u32) {
        let c = self.index(self.cons);
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    /// Free entries a producer may fill: (first index, count up to `max`).
    fn reserve(&self, max: u32) -> (u32, u32) {
        let prod = self.index(self.prod).load(Ordering::Relaxed);
        let cons = self.index(self.cons).load(Ordering::Acquire);
        (prod, (RING - prod.wrapping_sub(cons)).min(max))
    }

    fn submit(&self, n: u32) {
        let p = self.index(self.prod);
        p.store(p.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
    }

    fn needs_wakeup(&self) -> bool {
        self.index(self.flags).load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// Pointer to entry `i` (taken modulo the size) of a ring of `T`.
    fn entry<T>(&self, i: u32) -> *mut T {
        let k = (i & self.mask) as usize;
        // SAFETY: the descriptor array starts at `desc` and has RING entries of T (the ring was
        // mapped with that length for T's size).
        unsafe { (self.map.ptr.add(self.desc) as *mut T).add(k) }
    }
}

/// The fill and completion rings of a queue's UMEM, and its free frames.
struct UmemRings {
    fill: Ring,
    comp: Ring,
    free: Vec<u64>,
}

impl UmemRings {
    /// Completed frames back to the free list; the fill ring topped up from it.
    fn recycle(&mut self) {
        let (c, n) = self.comp.peek(RING);
        for i in 0..n {
            // SAFETY: entries [c, c+n) were published by the kernel (peek), u64 each.
            self.free
                .push(unsafe { *self.comp.entry::<u64>(c.wrapping_add(i)) });
        }
        self.comp.release(n);
        // keep a reserve for answers of several datagrams
        let spare = self.free.len().saturating_sub(64) as u32;
        let (p, n) = self.fill.reserve(spare);
        for i in 0..n {
            let a = self.free.pop().unwrap();
            // SAFETY: entries [p, p+n) are free for the producer (reserve), u64 each.
            unsafe { *self.fill.entry::<u64>(p.wrapping_add(i)) = a };
        }
        self.fill.submit(n);
    }
}

/// What the sockets of one queue share.
struct Queue {
    umem: Mmap,
    rings: Mutex<UmemRings>,
    /// The socket that registered the UMEM (kept open while any socket of the queue lives).
    _owner: Arc<OwnedFd>,
}

/// One AF_XDP socket, served by one worker.
pub struct XskSocket {
    fd: Arc<OwnedFd>,
    rx: Ring,
    tx: Ring,
    q: Arc<Queue>,
    /// Frames this socket took for TX that the kernel has not completed.
    scratch: Vec<u8>,
    /// Ends of the answer messages in `scratch` (see `net::execute_datagram`).
    ends: Vec<usize>,
    frames: Vec<u64>,
}

impl AsRawFd for XskSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn sockopt<T>(fd: RawFd, opt: libc::c_int, v: &T, what: &str) -> Result<()> {
    // SAFETY: `v` points to a live T of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("AF_XDP {what}"));
    }
    Ok(())
}

fn new_socket() -> Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked and owned right away.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()).context("AF_XDP socket");
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn offsets(fd: RawFd) -> Result<libc::xdp_mmap_offsets> {
    // SAFETY: xdp_mmap_offsets is plain old data; all-zero is valid.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: `off` and `len` are live and describe the buffer's size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut off as *mut libc::xdp_mmap_offsets).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error()).context("AF_XDP ring offsets");
    }
    Ok(off)
}

fn bind(fd: RawFd, ifindex: u32, queue: u32, flags: u16, shared: RawFd) -> std::io::Result<()> {
    let sa = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared as u32,
    };
    // SAFETY: `sa` is a valid sockaddr_xdp of the size given.
    let r = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Opens the sockets of one queue: `slots` sockets sharing one UMEM. Returns them and whether
/// the driver runs them zero-copy.
fn open_queue(ifindex: u32, queue: u32, slots: usize) -> Result<(Vec<XskSocket>, bool)> {
    let owner = Arc::new(new_socket()?);
    let ofd = owner.as_raw_fd();
    let umem = Mmap::anonymous(FRAMES * FRAME)?;
    let reg = libc::xdp_umem_reg {
        addr: umem.ptr as u64,
        len: (FRAMES * FRAME) as u64,
        chunk_size: FRAME as u32,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    sockopt(ofd, libc::XDP_UMEM_REG, &reg, "UMEM registration")?;
    sockopt(ofd, libc::XDP_UMEM_FILL_RING, &RING, "fill ring")?;
    sockopt(
        ofd,
        libc::XDP_UMEM_COMPLETION_RING,
        &RING,
        "completion ring",
    )?;
    let mut fds = vec![owner.clone()];
    for _ in 1..slots {
        fds.push(Arc::new(new_socket()?));
    }
    for fd in &fds {
        sockopt(fd.as_raw_fd(), libc::XDP_RX_RING, &RING, "RX ring")?;
        sockopt(fd.as_raw_fd(), libc::XDP_TX_RING, &RING, "TX ring")?;
    }
    let off = offsets(ofd)?;
    let fill = Ring::new(ofd, &off.fr, 8, libc::XDP_UMEM_PGOFF_FILL_RING)?;
    let comp = Ring::new(ofd, &off.cr, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
    let mut rings = UmemRings {
        fill,
        comp,
        free: (0..FRAMES as u64).rev().map(|i| i * FRAME as u64).collect(),
    };
    rings.recycle();
    // Zero-copy where the driver can, else copy mode (veth, most virtual devices).
    let zc = match bind(
        ofd,
        ifindex,
        queue,
        libc::XDP_USE_NEED_WAKEUP | libc::XDP_ZEROCOPY,
        0,
    ) {
        Ok(()) => true,
        Err(_) => {
            bind(
                ofd,
                ifindex,
                queue,
                libc::XDP_USE_NEED_WAKEUP | libc::XDP_COPY,
                0,
            )
            .with_context(|| format!("binding an AF_XDP socket to queue {queue}"))?;
            false
        }
    };
    for fd in &fds[1..] {
        bind(fd.as_raw_fd(), ifindex, queue, libc::XDP_SHARED_UMEM, ofd)
            .with_context(|| format!("binding a shared-UMEM AF_XDP socket to queue {queue}"))?;
    }
    let q = Arc::new(Queue {
        umem,
        rings: Mutex::new(rings),
        _owner: owner,
    });
    let mut out = Vec::with_capacity(slots);
    for fd in fds {
        let raw = fd.as_raw_fd();
        let off = offsets(raw)?;
        let rx = Ring::new(raw, &off.rx, 16, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = Ring::new(raw, &off.tx, 16, libc::XDP_PGOFF_TX_RING as u64)?;
        out.push(XskSocket {
            fd,
            rx,
            tx,
            q: q.clone(),
            scratch: Vec::with_capacity(64 * 1024),
            ends: Vec::new(),
            frames: Vec::with_capacity(64),
        });
    }
    Ok((out, zc))
}

/// The AF_XDP sockets of an interface, laid out as the XDP program indexes them.
pub struct Sockets {
    /// (xsks index, socket, worker that serves it)
    pub sockets: Vec<(u32, XskSocket, usize)>,
    pub queues: u32,
    pub slots: u32,
    pub zero_copy: bool,
}

/// Number of RX queues of `iface` in this network namespace: the driver's channel counts
/// (ETHTOOL_GCHANNELS, which needs no /sys of this namespace), else /sys, else 1.
pub fn rx_queues(iface: &str) -> u32 {
    #[repr(C)]
    struct Channels {
        cmd: u32,
        max: [u32; 4],
        rx: u32,
        tx: u32,
        other: u32,
        combined: u32,
    }
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    let mut ch = Channels {
        cmd: ETHTOOL_GCHANNELS,
        max: [0; 4],
        rx: 0,
        tx: 0,
        other: 0,
        combined: 0,
    };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr
        .ifr_name
        .iter_mut()
        .zip(iface.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = (&mut ch as *mut Channels).cast();
    // SAFETY: a datagram socket only used for the ioctl below and closed right after; the
    // ioctl reads the name from `ifr` and writes at most one `Channels` through ifru_data,
    // which points to a live one.
    let n = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        let r = if fd >= 0 {
            libc::ioctl(fd, libc::SIOCETHTOOL, &mut ifr)
        } else {
            -1
        };
        if fd >= 0 {
            libc::close(fd);
        }
        if r == 0 {
            ch.rx + ch.combined
        } else {
            0
        }
    };
    if n > 0 {
        return n;
    }
    std::fs::read_dir(format!("/sys/class/net/{iface}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count() as u32
        })
        .unwrap_or(1)
        .max(1)
}

/// Opens every socket: per queue, one slot (`steer` false) or one per worker.
pub fn open(ifindex: u32, queues: u32, workers: usize, steer: bool) -> Result<Sockets> {
    if queues as usize * workers > 1024 {
        bail!("{queues} queues x {workers} workers exceed the xsks map (1024)");
    }
    let slots = if steer { workers } else { 1 };
    let mut sockets = Vec::new();
    let mut zero_copy = true;
    for q in 0..queues {
        let (socks, zc) = open_queue(ifindex, q, slots)?;
        zero_copy &= zc;
        for (s, x) in socks.into_iter().enumerate() {
            let worker = if steer { s } else { q as usize % workers };
            sockets.push((q * slots as u32 + s as u32, x, worker));
        }
    }
    Ok(Sockets {
        sockets,
        queues,
        slots: slots as u32,
        zero_copy,
    })
}

/// The 16-bit one's complement sum of `b` added to `acc`.
fn sum16(mut acc: u32, b: &[u8]) -> u32 {
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [x] = it.remainder() {
        acc += u32::from(*x) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// A parsed request frame: where its parts are.
struct Req {
    v6: bool,
    #[cfg_attr(not(test), allow(dead_code))]
    l4: usize,
    payload: usize,
    end: usize,
}

/// Parses Ethernet + IPv4/IPv6 + UDP as the XDP program let it through; None if the frame is
/// not such a datagram or its UDP checksum is wrong (the stack would have dropped it too).
fn parse(f: &[u8]) -> Option<Req> {
    if f.len() < ETH_LEN + 28 {
        return None;
    }
    let (v6, l4, ulen) = match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => {
            let ip = &f[ETH_LEN..];
            if ip[0] != 0x45 || ip[9] != 17 {
                return None;
            }
            let tot = u16::from_be_bytes([ip[2], ip[3]]) as usize;
            if tot < 28 || ETH_LEN + tot > f.len() {
                return None;
            }
            (false, ETH_LEN + 20, tot - 20)
        }
        0x86dd => {
            if f.len() < ETH_LEN + 48 || f[ETH_LEN + 6] != 17 {
                return None;
            }
            let pl = u16::from_be_bytes([f[ETH_LEN + 4], f[ETH_LEN + 5]]) as usize;
            if ETH_LEN + 40 + pl > f.len() {
                return None;
            }
            (true, ETH_LEN + 40, pl)
        }
        _ => return None,
    };
    let u = &f[l4..];
    let len = u16::from_be_bytes([u[4], u[5]]) as usize;
    if len < 8 || len > ulen {
        return None;
    }
    let csum = u16::from_be_bytes([u[6], u[7]]);
    if csum != 0 || v6 {
        let acc = pseudo(f, v6, len);
        // A complete checksum, or one left for offload (CHECKSUM_PARTIAL: the field holds the
        // pseudo-header sum), which is what a local sender or a veth peer hands over.
        if fold(sum16(acc, &f[l4..l4 + len])) != 0xffff && csum != fold(acc) {
            return None;
        }
    }
    Some(Req {
        v6,
        l4,
        payload: l4 + 8,
        end: l4 + len,
    })
}

/// The pseudo-header sum for a UDP datagram of `len` bytes in frame `f`.
fn pseudo(f: &[u8], v6: bool, len: usize) -> u32 {
    let acc = if v6 {
        sum16(0, &f[ETH_LEN + 8..ETH_LEN + 40])
    } else {
        sum16(0, &f[ETH_LEN + 12..ETH_LEN + 20])
    };
    acc + 17 + len as u32
}

/// Writes into `f` the headers of an answer datagram of `plen` payload bytes (already in place)
/// to the request whose headers are `h` (its first bytes); returns the frame length.
fn answer_headers(f: &mut [u8], h: &[u8], v6: bool, plen: usize) -> usize {
    let l4 = if v6 { ETH_LEN + 40 } else { ETH_LEN + 20 };
    // Ethernet: back to where it came from
    f[0..6].copy_from_slice(&h[6..12]);
    f[6..12].copy_from_slice(&h[0..6]);
    f[12..14].copy_from_slice(&h[12..14]);
    let ulen = 8 + plen;
    if v6 {
        f[ETH_LEN..ETH_LEN + 4].copy_from_slice(&[0x60, 0, 0, 0]);
        f[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
        f[ETH_LEN + 6] = 17;
        f[ETH_LEN + 7] = 64;
        f[ETH_LEN + 8..ETH_LEN + 24].copy_from_slice(&h[ETH_LEN + 24..ETH_LEN + 40]);
        f[ETH_LEN + 24..ETH_LEN + 40].copy_from_slice(&h[ETH_LEN + 8..ETH_LEN + 24]);
    } else {
        let ip = &mut f[ETH_LEN..ETH_LEN + 20];
        ip[0] = 0x45;
        ip[1] = 0;
        ip[2..4].copy_from_slice(&((20 + ulen) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&[0, 0]);
        ip[6..8].copy_from_slice(&[0x40, 0]); // don't fragment
        ip[8] = 64;
        ip[9] = 17;
        ip[10..12].copy_from_slice(&[0, 0]);
        ip[12..16].copy_from_slice(&h[ETH_LEN + 16..ETH_LEN + 20]);
        ip[16..20].copy_from_slice(&h[ETH_LEN + 12..ETH_LEN + 16]);
        let c = !fold(sum16(0, ip));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    }
    f[l4..l4 + 2].copy_from_slice(&h[l4 + 2..l4 + 4]);
    f[l4 + 2..l4 + 4].copy_from_slice(&h[l4..l4 + 2]);
    f[l4 + 4..l4 + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
    f[l4 + 6..l4 + 8].copy_from_slice(&[0, 0]);
    let mut c = !fold(sum16(pseudo(f, v6, ulen), &f[l4..l4 + ulen]));
    if c == 0 {
        c = 0xffff;
    }
    f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
    l4 + ulen
}

/// The UMEM frame at `addr`: from there (copy mode puts a received packet some headroom into its
/// chunk) to the end of its chunk.
#[allow(clippy::mut_from_ref)]
fn frame(q: &Queue, addr: u64) -> &mut [u8] {
    let a = addr as usize;
    let end = (a & !(FRAME - 1)) + FRAME;
    assert!(end <= q.umem.len);
    // SAFETY: [a, end) lies inside one chunk of the UMEM (checked) owned by the calling worker
    // right now: it came from its RX ring or from the free list, and neither the kernel nor
    // another worker touches it until it is put on a TX or fill ring; callers hold at most one
    // slice of a given frame at a time.
    unsafe { std::slice::from_raw_parts_mut(q.umem.ptr.add(a), end - a) }
}

impl XskSocket {
    /// Tells the kernel to send what the TX ring holds (copy mode needs a syscall).
    fn kick(&self) {
        if self.tx.needs_wakeup() {
            // SAFETY: sendto with no buffer on our own socket only triggers transmission.
            unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                );
            }
        }
    }

    /// Returns completed and unused frames, tops up the fill ring; wakes the driver if it
    /// waits for fill entries.
    pub fn recycle(&mut self, unused: &mut Vec<u64>) {
        let mut r = self.q.rings.lock().unwrap_or_else(|p| p.into_inner());
        r.free.append(unused);
        r.recycle();
        if r.fill.needs_wakeup() {
            // SAFETY: a zero-length receive on our own socket only wakes the driver's RX.
            unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
            }
        }
    }

    /// Serves up to a few batches of requests; true if more may wait.
    pub fn serve(&mut self, sh: &Arc<Shared>, w: usize, limits: &Limits) -> bool {
        let st = &sh.workers[w];
        let mut unused: Vec<u64> = Vec::new();
        for _ in 0..BATCHES_PER_TURN {
            self.recycle(&mut unused);
            let (first, n) = self.rx.peek(BATCH);
            if n == 0 {
                self.kick();
                return false;
            }
            // (frame address, frame length) to send, in order
            let mut sends: Vec<(u64, usize)> = Vec::with_capacity(n as usize);
            for i in 0..n {
                // SAFETY: entries [first, first+n) were published by the kernel (peek).
                let d: libc::xdp_desc = unsafe { *self.rx.entry(first.wrapping_add(i)) };
                st.inc(C::afxdp_rx_packets);
                self.one(sh, w, limits, d, &mut sends, &mut unused);
            }
            self.rx.release(n);
            // cooperative mode: the kernel cache before the answers (coop.rs)
            crate::coop::commit(sh, w);
            let (p, room) = self.tx.reserve(sends.len() as u32);
            for (k, &(addr, len)) in sends.iter().enumerate() {
                if (k as u32) < room {
                    // SAFETY: entries [p, p+room) are free for the producer (reserve).
                    unsafe {
                        *self.tx.entry::<libc::xdp_desc>(p.wrapping_add(k as u32)) =
                            libc::xdp_desc {
                                addr,
                                len: len as u32,
                                options: 0,
                            };
                    }
                    st.add(C::bytes_written, len as u64);
                } else {
                    // no room to send: dropped like a datagram a full socket refuses
                    unused.push(addr);
                }
            }
            self.tx.submit(room);
            st.add(C::afxdp_tx_packets, u64::from(room));
            self.kick();
            if n < BATCH {
                self.recycle(&mut unused);
                return false;
            }
        }
        self.recycle(&mut unused);
        true
    }

    /// Answers the request in frame `d`: its answer datagrams go to `sends`; frames not sent go
    /// to `unused`.
    fn one(
        &mut self,
        sh: &Arc<Shared>,
        w: usize,
        limits: &Limits,
        d: libc::xdp_desc,
        sends: &mut Vec<(u64, usize)>,
        unused: &mut Vec<u64>,
    ) {
        let st = &sh.workers[w];
        let len = d.len as usize;
        let addr = d.addr;
        let mut out = std::mem::take(&mut self.scratch);
        out.clear();
        let mut ends = std::mem::take(&mut self.ends);
        let mut hdr = [0u8; ETH_LEN + 40 + 8];
        let (v6, hlen, req_id) = {
            let f = frame(&self.q, addr);
            let f = &f[..len.min(f.len())];
            let Some(r) = parse(f) else {
                st.inc(C::afxdp_dropped);
                unused.push(addr);
                self.scratch = out;
                return;
            };
            let dgram = &f[r.payload..r.end];
            st.add(C::bytes_read, dgram.len() as u64);
            let Some(fh) = FrameHeader::decode(dgram) else {
                unused.push(addr);
                self.scratch = out;
                return;
            };
            ends.clear();
            if fh.total != 1 || fh.seq != 0 {
                out.extend_from_slice(b"SERVER_ERROR multi-packet request not supported\r\n");
            } else if let Some((t, _)) = crate::net::execute_datagram(
                sh, w, limits, dgram, HEADER_LEN, None, &mut out, &mut ends,
            ) {
                // a value on flash: this path does not wait for it, the datagram is lost (as
                // UDP may lose it) and the client retries
                crate::ext::io::cancel(t);
                out.clear();
                st.inc(C::afxdp_dropped);
            }
            if ends.last() != Some(&out.len()) {
                ends.push(out.len());
            }
            let hlen = r.payload; // Ethernet, IP and UDP headers
            hdr[..hlen].copy_from_slice(&f[..hlen]);
            (r.v6, hlen, fh.request_id)
        };
        // each answer message (a binary datagram's answers are one each) in frames of its own
        let mut msgs: Vec<(usize, usize, usize)> = Vec::new(); // start, end, frames
        let mut start = 0;
        for &end in &ends {
            let total = (end - start).div_ceil(MAX_PAYLOAD);
            if total > 0 && total <= u16::MAX as usize {
                msgs.push((start, end, total));
            }
            start = end;
        }
        self.ends = ends;
        let need: usize = msgs.iter().map(|m| m.2).sum();
        if need == 0 {
            unused.push(addr);
            self.scratch = out;
            return;
        }
        // frames: the request's, then more from the free list
        self.frames.clear();
        self.frames.push(addr);
        if need > 1 {
            let mut r = self.q.rings.lock().unwrap_or_else(|p| p.into_inner());
            while self.frames.len() < need {
                match r.free.pop() {
                    Some(a) => self.frames.push(a),
                    None => break,
                }
            }
        }
        let frames = std::mem::take(&mut self.frames);
        let mut next = frames.iter();
        'msgs: for &(start, end, total) in &msgs {
            for (j, chunk) in out[start..end].chunks(MAX_PAYLOAD).enumerate() {
                let Some(&fa) = next.next() else {
                    break 'msgs; // out of frames: the rest is lost, as a datagram can be
                };
                let h = FrameHeader {
                    request_id: req_id,
                    seq: j as u16,
                    total: total as u16,
                    reserved: 0,
                };
                let f = frame(&self.q, fa);
                let p = hlen;
                f[p..p + HEADER_LEN].copy_from_slice(&h.encode());
                f[p + HEADER_LEN..p + HEADER_LEN + chunk.len()].copy_from_slice(chunk);
                let flen = answer_headers(f, &hdr[..hlen], v6, HEADER_LEN + chunk.len());
                sends.push((fa, flen));
            }
        }
        self.frames = frames;
        self.scratch = out;
    }
}

/// The destination addresses to take over: the listen addresses, or with a wildcard every
/// address of `iface`.
pub fn dst_addrs(iface: &str, listen: &[IpAddr]) -> Vec<[u8; 16]> {
    let mut out: Vec<[u8; 16]> = Vec::new();
    let wild = listen.iter().any(|a| a.is_unspecified());
    let mut push = |a: IpAddr| {
        let k = match a {
            IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
            IpAddr::V6(v) => v.octets(),
        };
        if !out.contains(&k) {
            out.push(k);
        }
    };
    for a in listen.iter().filter(|a| !a.is_unspecified()) {
        push(*a);
    }
    if wild {
        // SAFETY: getifaddrs allocates a list we walk and free exactly once.
        unsafe {
            let mut ifap: *mut libc::ifaddrs = std::ptr::null_mut();
            if libc::getifaddrs(&mut ifap) == 0 {
                let mut p = ifap;
                while !p.is_null() {
                    let ifa = &*p;
                    p = ifa.ifa_next;
                    if ifa.ifa_addr.is_null()
                        || std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes() != iface.as_bytes()
                    {
                        continue;
                    }
                    let fam = i32::from((*ifa.ifa_addr).sa_family);
                    let v4 = listen.iter().any(|a| a.is_ipv4() && a.is_unspecified());
                    let v6 = listen.iter().any(|a| a.is_ipv6() && a.is_unspecified());
                    if fam == libc::AF_INET && v4 {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        push(IpAddr::from(u32::from_be(sa.sin_addr.s_addr).to_be_bytes()));
                    } else if fam == libc::AF_INET6 && v6 {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        push(IpAddr::from(sa.sin6_addr.s6_addr));
                    }
                }
                libc::freeifaddrs(ifap);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_v4(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; ETH_LEN + 28 + payload.len()];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[ETH_LEN..ETH_LEN + 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&((28 + payload.len()) as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 1]);
        let l4 = ETH_LEN + 20;
        f[l4..l4 + 2].copy_from_slice(&5555u16.to_be_bytes());
        f[l4 + 2..l4 + 4].copy_from_slice(&11211u16.to_be_bytes());
        f[l4 + 4..l4 + 6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        f[l4 + 8..].copy_from_slice(payload);
        let c = !fold(sum16(pseudo(&f, false, 8 + payload.len()), &f[l4..]));
        f[l4 + 6..l4 + 8].copy_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn parses_a_request_and_builds_a_valid_answer() {
        let f = request_v4(b"\0\x01\0\0\0\x01\0\0get a\r\n");
        let r = parse(&f).expect("valid datagram");
        assert_eq!(&f[r.payload..r.end], b"\0\x01\0\0\0\x01\0\0get a\r\n");
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 1] ^= 1;
        assert!(parse(&bad).is_none(), "a wrong UDP checksum is dropped");
        let mut out = vec![0u8; FRAME];
        let body = b"\0\x01\0\0\0\x01\0\0END\r\n";
        out[r.payload..r.payload + body.len()].copy_from_slice(body);
        let n = answer_headers(&mut out, &f[..r.payload], false, body.len());
        let a = parse(&out[..n]).expect("the answer parses and its checksum holds");
        assert_eq!(&out[a.payload..a.end], body);
        assert_eq!(&out[0..6], &f[6..12]);
        assert_eq!(&out[ETH_LEN + 12..ETH_LEN + 16], &[198, 18, 0, 1]);
        assert_eq!(&out[ETH_LEN + 16..ETH_LEN + 20], &[198, 18, 0, 2]);
        assert_eq!(fold(sum16(0, &out[ETH_LEN..ETH_LEN + 20])), 0xffff);
        assert_eq!(u16::from_be_bytes([out[a.l4], out[a.l4 + 1]]), 11211);
    }
}
