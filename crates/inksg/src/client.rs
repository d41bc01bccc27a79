//! A client: a UDP socket registered with the scatter-gather programs, a range of request slots
//! and a ring buffer. `scatter` sends one request (one sendmmsg); `wait` (epoll on the ring
//! buffer) or busy-polling returns completed requests.
use std::{
    cell::RefCell,
    collections::{HashMap, VecDeque},
    net::{SocketAddr, UdpSocket},
    os::fd::{AsRawFd, RawFd},
    rc::Rc,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle, RingBuffer, RingBufferBuilder};

use crate::kernel::{Group, Sg, DGRAM_MAX, EVENT_HDR, MAX_WORKERS, VEC_BYTES};
use crate::skel::sg::types;
use crate::wire;

/// When a request is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Every worker asked has answered.
    All,
    /// One worker has answered.
    Any,
    /// `n` workers have answered.
    N(u16),
}

/// Vector element type of the built-in reducers (big-endian on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Elem {
    U32,
    U64,
}

impl Elem {
    pub fn bytes(self) -> usize {
        match self {
            Elem::U32 => 4,
            Elem::U64 => 8,
        }
    }
}

/// How answers are aggregated in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reducer {
    /// Element-wise sum of vectors of `usize` elements.
    Sum(Elem, usize),
    Min(Elem, usize),
    Max(Elem, usize),
    /// Element-wise count of non-zero elements.
    Count(Elem, usize),
    /// Every answer kept (`Completion::records`).
    Concat,
    /// An application's aggregation program (`Sg::add_aggregator`) with `bytes` of state.
    Custom(u8, usize),
}

impl Reducer {
    fn wire(self) -> Result<(u8, u16, u16)> {
        let vec = |e: Elem, n: usize| -> Result<(u16, u16)> {
            let b = e.bytes() * n;
            if n == 0 || b > VEC_BYTES {
                bail!(
                    "vectors are 1-{} bytes (got {n} elements of {e:?})",
                    VEC_BYTES
                );
            }
            Ok((b as u16, e.bytes() as u16))
        };
        Ok(match self {
            Reducer::Sum(e, n) => (0, vec(e, n)?.0, vec(e, n)?.1),
            Reducer::Min(e, n) => (1, vec(e, n)?.0, vec(e, n)?.1),
            Reducer::Max(e, n) => (2, vec(e, n)?.0, vec(e, n)?.1),
            Reducer::Count(e, n) => (3, vec(e, n)?.0, vec(e, n)?.1),
            Reducer::Concat => (4, 0, 0),
            Reducer::Custom(id, b) => {
                if id >= crate::kernel::CUSTOM_MAX || b > VEC_BYTES {
                    bail!("custom reducer {id} with {b} bytes of state is out of range");
                }
                (8 + id, b as u16, 0)
            }
        })
    }
}

/// Answer protocol of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    /// inksg's own: `struct sg_req_hdr` to workers, `struct sg_ans_hdr` back.
    Sg,
    /// memcached UDP frames (for `mc::Pool`).
    Memcached,
}

/// How `wait` learns of completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Sleep in epoll on the ring buffer's fd.
    Epoll,
    /// Spin on the ring buffer (no wakeups, no syscalls while waiting).
    BusyPoll,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// The policy was met.
    Done,
    /// The timeout fired first: `missing` lists who did not answer.
    Timeout,
    /// No report from the kernel at all (the scatter never reached the programs: not routed
    /// through an attached interface, or refused as busy).
    Lost,
}

/// A request as it ended.
#[derive(Clone, Debug)]
pub struct Completion {
    pub req_id: u32,
    pub status: Status,
    /// Concatenated answers did not all fit the result buffer.
    pub truncated: bool,
    pub asked: u16,
    pub answered: u16,
    /// Workers (indices in the group) asked that did not (completely) answer.
    pub missing: Vec<u16>,
    /// From the scatter (in the kernel) to the decision.
    pub elapsed: Duration,
    /// The aggregate (vector/custom reducers) or the records (`Concat`, memcached).
    pub data: Vec<u8>,
    pub elem: Option<Elem>,
}

/// One answer kept whole (`Reducer::Concat`, memcached replies).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub worker: u16,
    pub seq: u16,
    pub total: u16,
    pub data: &'a [u8],
}

impl Completion {
    pub fn u64s(&self) -> Vec<u64> {
        self.data
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }
    pub fn u32s(&self) -> Vec<u32> {
        self.data
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }
    /// The answers kept whole, in arrival order.
    pub fn records(&self) -> Vec<Record<'_>> {
        let mut out = vec![];
        let mut d = &self.data[..];
        while d.len() >= 8 {
            let worker = u16::from_ne_bytes([d[0], d[1]]);
            let len = u16::from_ne_bytes([d[2], d[3]]) as usize;
            let seq = u16::from_ne_bytes([d[4], d[5]]);
            let total = u16::from_ne_bytes([d[6], d[7]]);
            if d.len() < 8 + len {
                break;
            }
            out.push(Record {
                worker,
                seq,
                total,
                data: &d[8..8 + len],
            });
            d = &d[8 + len..];
        }
        out
    }
}

struct Pending {
    req_id: u32,
    deadline: Instant,
    asked: u16,
    elem: Option<Elem>,
    missing: Vec<u16>,
}

/// Options of a client.
#[derive(Clone, Debug)]
pub struct ClientOpts {
    pub proto: Proto,
    pub delivery: Delivery,
    /// Local address to bind (default: the unspecified address of the group's family).
    pub bind: Option<SocketAddr>,
    /// Largest scatter datagram (UDP payload): the path MTU's (1472 for IPv4, 1452 for IPv6
    /// over 1500-byte Ethernet).
    pub max_datagram: usize,
    /// Workers served by one scatter datagram: the clones of one datagram leave in one burst,
    /// so this bounds bursts (netdev_max_backlog, veth rings).
    pub batch: usize,
    /// Beyond the request's timeout, how long to wait for the kernel's report before
    /// declaring the request lost.
    pub grace: Duration,
}

impl Default for ClientOpts {
    fn default() -> Self {
        ClientOpts {
            proto: Proto::Sg,
            delivery: Delivery::Epoll,
            bind: None,
            max_datagram: 1452,
            batch: 128,
            grace: Duration::from_secs(1),
        }
    }
}

/// A scatter-gather client (not thread-safe: one per thread).
pub struct Client {
    sg: Arc<Sg>,
    sock: UdpSocket,
    port: u16,
    index: u32,
    base: u32,
    mask: u32,
    opts: ClientOpts,
    ring: RingBuffer<'static>,
    _ring_map: MapHandle,
    queue: Rc<RefCell<VecDeque<Vec<u8>>>>,
    free: Vec<u32>,
    gen: Vec<u32>,
    inflight: HashMap<u32, Pending>,
    ready: VecDeque<Completion>,
    bufs: Vec<Vec<u8>>,
}

impl Client {
    /// Opens a socket (bound to `opts.bind`, or the unspecified address of `family_v6`'s
    /// family) and registers it.
    pub fn new(sg: Arc<Sg>, v6: bool, opts: ClientOpts) -> Result<Client> {
        let bind = opts.bind.unwrap_or_else(|| {
            if v6 {
                "[::]:0".parse().unwrap()
            } else {
                "0.0.0.0:0".parse().unwrap()
            }
        });
        let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
        let port = sock.local_addr()?.port();
        if opts.max_datagram > DGRAM_MAX || opts.max_datagram < 64 {
            bail!("max datagram must be 64-{DGRAM_MAX} bytes");
        }
        if opts.batch == 0 || opts.batch > MAX_WORKERS {
            bail!("batch must be 1-{MAX_WORKERS}");
        }
        let index = sg.claim_client()?;
        let r = Self::register(&sg, index, port, &opts);
        let (ring_map, ring, queue) = match r {
            Ok(x) => x,
            Err(e) => {
                sg.release_client(index);
                return Err(e);
            }
        };
        let n = sg.slots_per_client;
        Ok(Client {
            base: index * n,
            mask: n - 1,
            sg,
            sock,
            port,
            index,
            opts,
            ring,
            _ring_map: ring_map,
            queue,
            free: (0..n).rev().collect(),
            gen: vec![0; n as usize],
            inflight: HashMap::new(),
            ready: VecDeque::new(),
            bufs: vec![],
        })
    }

    #[allow(clippy::type_complexity)]
    fn register(
        sg: &Sg,
        index: u32,
        port: u16,
        opts: &ClientOpts,
    ) -> Result<(
        MapHandle,
        RingBuffer<'static>,
        Rc<RefCell<VecDeque<Vec<u8>>>>,
    )> {
        let ring_map = sg.install_ring(index)?;
        let queue: Rc<RefCell<VecDeque<Vec<u8>>>> = Rc::default();
        let q = queue.clone();
        let mut b = RingBufferBuilder::new();
        b.add(&ring_map, move |data: &[u8]| {
            q.borrow_mut().push_back(data.to_vec());
            0
        })?;
        let ring = b.build().context("opening the ring buffer")?;
        let n = sg.slots_per_client;
        let mut v = [0u8; std::mem::size_of::<types::sg_client>()];
        v[0..4].copy_from_slice(&(index * n).to_ne_bytes());
        v[4..8].copy_from_slice(&(n - 1).to_ne_bytes());
        v[8..10].copy_from_slice(&(index as u16).to_ne_bytes());
        v[10] = match opts.proto {
            Proto::Sg => 0,
            Proto::Memcached => 1,
        };
        sg.map("clients")?
            .update(&port.to_ne_bytes(), &v, MapFlags::ANY)
            .context("registering the client")?;
        Ok((ring_map, ring, queue))
    }

    pub fn local_port(&self) -> u16 {
        self.port
    }

    /// The ring buffer's epoll fd: readable when a completion is ready (`Delivery::Epoll`).
    pub fn epoll_fd(&self) -> RawFd {
        self.ring.epoll_fd()
    }

    pub fn socket_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    fn take_slot(&mut self) -> Result<(u32, u32)> {
        let s = self
            .free
            .pop()
            .ok_or_else(|| anyhow!("all {} request slots are in flight", self.mask + 1))?;
        let g = self.gen[s as usize].wrapping_add(1);
        self.gen[s as usize] = g;
        let bits = (self.mask + 1).trailing_zeros();
        let id_bits = if self.opts.proto == Proto::Memcached {
            16
        } else {
            32
        };
        let gen_mask = if id_bits - bits >= 32 {
            u32::MAX
        } else {
            (1u32 << (id_bits - bits)) - 1
        };
        let req_id = ((g & gen_mask) << bits) | s;
        Ok((s, req_id))
    }

    /// Sends `payload` to every worker of `group` (each gets `struct sg_req_hdr` with its own
    /// index, then `payload`); the answers are aggregated by `reducer` in the kernel. Returns the
    /// request id (`Completion::req_id`).
    pub fn scatter(
        &mut self,
        group: &Group,
        payload: &[u8],
        policy: Policy,
        reducer: Reducer,
        timeout: Duration,
    ) -> Result<u32> {
        let workers: Vec<u16> = (0..group.len() as u16).collect();
        self.send_request(group, &workers, policy, reducer, timeout, |rid| {
            wire::Body::Broadcast(wire::req_section(rid, payload))
        })
    }

    /// Sends each listed worker its own payload (`(worker index, payload)`).
    pub fn scatter_each(
        &mut self,
        group: &Group,
        payloads: &[(u16, &[u8])],
        policy: Policy,
        reducer: Reducer,
        timeout: Duration,
    ) -> Result<u32> {
        let workers: Vec<u16> = payloads.iter().map(|p| p.0).collect();
        self.send_request(group, &workers, policy, reducer, timeout, |rid| {
            wire::Body::Sections(
                payloads
                    .iter()
                    .map(|(w, p)| {
                        let mut s = wire::req_section(rid, p);
                        s[8..10].copy_from_slice(&w.to_be_bytes());
                        (*w, s)
                    })
                    .collect(),
            )
        })
    }

    /// Sends each listed worker bytes built by `build(req_id)`, verbatim (the memcached pool
    /// builds memcached frames).
    pub(crate) fn scatter_raw(
        &mut self,
        group: &Group,
        workers: &[u16],
        policy: Policy,
        timeout: Duration,
        build: impl FnOnce(u32) -> Vec<(u16, Vec<u8>)>,
    ) -> Result<u32> {
        self.send_request(group, workers, policy, Reducer::Concat, timeout, |rid| {
            wire::Body::Sections(build(rid))
        })
    }

    fn send_request(
        &mut self,
        group: &Group,
        workers: &[u16],
        policy: Policy,
        reducer: Reducer,
        timeout: Duration,
        body: impl FnOnce(u32) -> wire::Body,
    ) -> Result<u32> {
        if workers.is_empty() {
            bail!("no worker to ask");
        }
        if workers.iter().any(|&w| w as usize >= group.len()) {
            bail!("worker index out of the group");
        }
        let (red, vec_len, elem) = reducer.wire()?;
        let asked = workers.len() as u16;
        let need = match policy {
            Policy::All => asked,
            Policy::Any => 1,
            Policy::N(0) => bail!("WaitN needs n >= 1"),
            Policy::N(n) => n.min(asked),
        };
        let timeout_us = u32::try_from(timeout.as_micros().max(1))
            .map_err(|_| anyhow!("timeout too long (at most ~71 minutes)"))?;
        let (slot, req_id) = self.take_slot()?;
        let mut flags = 0u8;
        if self.opts.delivery == Delivery::BusyPoll {
            flags |= wire::F_NO_WAKEUP;
        }
        let hdr = wire::Header {
            req_id,
            group: group.id,
            need,
            timeout_us,
            flags,
            reducer: red,
            vec_len,
            asked,
            elem,
        };
        let dgrams = match wire::datagrams(
            &hdr,
            workers,
            body(req_id),
            self.opts.max_datagram,
            self.opts.batch,
            &mut self.bufs,
        ) {
            Ok(d) => d,
            Err(e) => {
                self.free.push(slot);
                return Err(e);
            }
        };
        let dest = group.workers[workers[0] as usize];
        if let Err(e) = send_all(&self.sock, dest, &self.bufs[..dgrams]) {
            self.free.push(slot);
            return Err(e);
        }
        let mut missing: Vec<u16> = workers.to_vec();
        missing.sort_unstable();
        self.inflight.insert(
            slot,
            Pending {
                req_id,
                deadline: Instant::now() + timeout + self.opts.grace,
                asked,
                elem: match reducer {
                    Reducer::Sum(e, _)
                    | Reducer::Min(e, _)
                    | Reducer::Max(e, _)
                    | Reducer::Count(e, _) => Some(e),
                    _ => None,
                },
                missing,
            },
        );
        Ok(req_id)
    }

    fn drain_queue(&mut self) {
        let events: Vec<Vec<u8>> = self.queue.borrow_mut().drain(..).collect();
        for ev in events {
            if let Some(c) = self.complete(&ev) {
                self.ready.push_back(c);
            }
        }
    }

    fn complete(&mut self, ev: &[u8]) -> Option<Completion> {
        if ev.len() < EVENT_HDR {
            return None;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(ev[o..o + 4].try_into().unwrap());
        let u16_at = |o: usize| u16::from_ne_bytes(ev[o..o + 2].try_into().unwrap());
        use std::mem::offset_of;
        type E = types::sg_event;
        let req_id = u32_at(offset_of!(E, req_id));
        let slot = u32_at(offset_of!(E, slot)).wrapping_sub(self.base);
        let p = self.inflight.get(&slot)?;
        if p.req_id != req_id {
            return None; // a report for a request already declared lost
        }
        let p = self.inflight.remove(&slot)?;
        self.free.push(slot);
        let status = match ev[offset_of!(E, status)] {
            1 => Status::Done,
            _ => Status::Timeout,
        };
        let len = u32_at(offset_of!(E, len)) as usize;
        let mo = offset_of!(E, missing);
        let mut missing = vec![];
        for word in 0..MAX_WORKERS / 64 {
            let w = u64::from_ne_bytes(ev[mo + word * 8..mo + word * 8 + 8].try_into().unwrap());
            for b in 0..64 {
                if w >> b & 1 == 1 {
                    missing.push((word * 64 + b) as u16);
                }
            }
        }
        let eo = offset_of!(E, elapsed_ns);
        let elapsed = u64::from_ne_bytes(ev[eo..eo + 8].try_into().unwrap());
        let end = (EVENT_HDR + len).min(ev.len());
        Some(Completion {
            req_id,
            status,
            truncated: ev[offset_of!(E, flags)] & 1 != 0,
            asked: u16_at(offset_of!(E, asked)).max(p.asked),
            answered: u16_at(offset_of!(E, answered)),
            missing,
            elapsed: Duration::from_nanos(elapsed),
            data: ev[EVENT_HDR..end].to_vec(),
            elem: p.elem,
        })
    }

    fn expire(&mut self) {
        let now = Instant::now();
        let lost: Vec<u32> = self
            .inflight
            .iter()
            .filter(|(_, p)| now > p.deadline)
            .map(|(s, _)| *s)
            .collect();
        for s in lost {
            if let Some(p) = self.inflight.remove(&s) {
                // The slot is not reused until the kernel is surely done with it.
                self.free.insert(0, s);
                self.ready.push_back(Completion {
                    req_id: p.req_id,
                    status: Status::Lost,
                    truncated: false,
                    asked: p.asked,
                    answered: 0,
                    missing: p.missing,
                    elapsed: Duration::ZERO,
                    data: vec![],
                    elem: p.elem,
                });
            }
        }
    }

    /// A completed request if one is ready now (never blocks).
    pub fn poll(&mut self) -> Result<Option<Completion>> {
        if let Some(c) = self.ready.pop_front() {
            return Ok(Some(c));
        }
        self.ring.consume().context("reading the ring buffer")?;
        self.drain_queue();
        if self.ready.is_empty() {
            self.expire();
        }
        Ok(self.ready.pop_front())
    }

    /// The next completed request, waiting at most `timeout` (epoll or busy-polling, as the
    /// client's `Delivery`). None if nothing completed in time.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<Completion>> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(c) = self.poll()? {
                return Ok(Some(c));
            }
            let now = Instant::now();
            if now >= end {
                return Ok(None);
            }
            if self.opts.delivery == Delivery::Epoll {
                let next = self
                    .inflight
                    .values()
                    .map(|p| p.deadline)
                    .min()
                    .unwrap_or(end)
                    .min(end);
                let d = next.saturating_duration_since(now) + Duration::from_micros(100);
                self.ring.poll(d).context("waiting on the ring buffer")?;
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Ok(m) = self.sg.map("clients") {
            let _ = m.delete(&self.port.to_ne_bytes());
        }
        if let Ok(m) = self.sg.map("rings") {
            let _ = m.delete(&self.index.to_ne_bytes());
        }
        self.sg.release_client(self.index);
    }
}

/// Sends datagrams to `dest` in one sendmmsg (repeated only if the kernel took fewer).
pub fn send_all(sock: &UdpSocket, dest: SocketAddr, bufs: &[Vec<u8>]) -> Result<()> {
    let addr = nix::sys::socket::SockaddrStorage::from(dest);
    let mut done = 0;
    while done < bufs.len() {
        let chunk = &bufs[done..];
        let mut iovs: Vec<libc::iovec> = chunk
            .iter()
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .map(|iov| {
                // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_name =
                    nix::sys::socket::SockaddrLike::as_ptr(&addr) as *mut libc::c_void;
                m.msg_hdr.msg_namelen = nix::sys::socket::SockaddrLike::len(&addr);
                m.msg_hdr.msg_iov = iov as *mut libc::iovec;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        // SAFETY: msgs points at `msgs.len()` headers whose address and iovec buffers (addr,
        // iovs, bufs) outlive the call.
        let n = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                0,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e).with_context(|| format!("sendmmsg to {dest}"));
        }
        done += n as usize;
    }
    Ok(())
}
