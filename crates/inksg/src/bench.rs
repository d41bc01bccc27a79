//! The benchmark: the same workers and workload driven by scatter-gather (epoll and busy-poll
//! delivery) and by three user-space baselines that aggregate in user space (blocking
//! send/recv, epoll, io_uring), at several fan-outs and payload sizes.
//!
//! Topology (2 cores): a client namespace joined by one veth each to `worker_ns` worker
//! namespaces; every worker namespace holds fan-out / `worker_ns` workers (one address, ports
//! 7000..) answered by the XDP worker (`bpf/sg/sg_worker.bpf.c`, echo of the request's data) so
//! that the worker side costs as little as a packet can: no socket, no wakeup. The worker veths'
//! NAPI runs threaded on CPU1; the client process and the client veths' NAPI threads (where the
//! gather program, or the baselines' receive path, runs) on CPU0. Client CPU per request = CPU0
//! busy time / requests (everything the client side costs: user, system, softirq).
//!
//! Every mode keeps the same number of requests in flight (a closed loop: a new request when
//! one completes) and applies the same rules: an answer counts once per (request, worker), a
//! request is done when all its workers answered, or abandoned after `timeout`.
use std::{
    collections::HashMap,
    net::{SocketAddr, UdpSocket},
    os::fd::AsRawFd,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::{
    client::{Client, ClientOpts, Delivery, Elem, Policy, Reducer, Status},
    kernel::{AttachOpts, Sg},
    topo::{self, Topology},
    wire,
    worker::XdpProg,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// scatter-gather, completions through epoll on the ring buffer
    Sg,
    /// scatter-gather, busy-polling the ring buffer
    SgPoll,
    /// blocking sendto/recv on one socket
    Blocking,
    /// non-blocking socket, level-triggered epoll, drained to EAGAIN
    Epoll,
    /// io_uring: sends and a pool of receives as SQEs (user_data per SQE)
    IoUring,
}

#[derive(Clone, Debug)]
pub struct BenchOpts {
    pub fanouts: Vec<usize>,
    pub payloads: Vec<usize>,
    pub modes: Vec<Mode>,
    pub seconds: f64,
    pub worker_ns: usize,
    /// Packets in flight (requests in flight = this / fan-out, 1 to 32).
    pub window: usize,
    pub timeout: Duration,
}

#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct Point {
    pub mode: Mode,
    pub fanout: usize,
    pub payload: usize,
    pub inflight: usize,
    pub requests: u64,
    pub incomplete: u64,
    pub rps: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub client_us_per_req: f64,
    pub client_cpu_pct: f64,
    pub worker_cpu_pct: f64,
}

/// Busy and total jiffies of cpu0 and cpu1.
fn cpu_times() -> [(u64, u64); 2] {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let mut out = [(0, 0); 2];
    for l in s.lines() {
        for (i, name) in ["cpu0 ", "cpu1 "].iter().enumerate() {
            if let Some(rest) = l.strip_prefix(name) {
                let v: Vec<u64> = rest
                    .split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect();
                // user nice system idle iowait irq softirq steal: time stolen by the
                // hypervisor is not the client's work
                let total: u64 = v.iter().take(8).sum();
                let idle = v.get(3).copied().unwrap_or(0)
                    + v.get(4).copied().unwrap_or(0)
                    + v.get(7).copied().unwrap_or(0);
                out[i] = (total - idle, total);
            }
        }
    }
    out
}

fn pin_self(cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
        .context("pinning to a CPU")?;
    Ok(())
}

/// Threaded NAPI on `iface` in `ns` (after its XDP program is attached), and its kthreads on
/// `cpu`.
fn napi_on(ns: &str, iface: &str, cpu: usize) -> Result<()> {
    let st = Topology::cmd(ns, "sh")
        .args(["-c", &format!("echo 1 > /sys/class/net/{iface}/threaded")])
        .status()?;
    if !st.success() {
        bail!("cannot make {iface}'s NAPI threaded");
    }
    let want = format!("napi/{iface}");
    let want = &want[..want.len().min(15)];
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    for e in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim().starts_with(want) {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(pid), &set);
        }
    }
    Ok(())
}

/// Requests being answered, as the baselines track them.
struct Track {
    fanout: usize,
    words: usize,
    inflight: HashMap<u32, (Instant, Vec<u64>, usize, Vec<u64>)>,
    hist: Histogram<u64>,
    done: u64,
    incomplete: u64,
    next_id: u32,
}

impl Track {
    fn new(fanout: usize, payload: usize) -> Track {
        Track {
            fanout,
            words: payload / 8,
            inflight: HashMap::new(),
            hist: Histogram::new_with_bounds(1, 60_000_000, 3).unwrap(),
            done: 0,
            incomplete: 0,
            next_id: 1,
        }
    }

    fn start(&mut self) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.inflight.insert(
            id,
            (
                Instant::now(),
                vec![0; self.fanout.div_ceil(64)],
                0,
                vec![0; self.words],
            ),
        );
        id
    }

    /// An answer; true when it completed its request.
    fn answer(&mut self, buf: &[u8]) -> bool {
        if buf.len() < wire::ANS_HDR || buf[..4] != wire::MAGIC_ANS.to_be_bytes() {
            return false;
        }
        let id = u32::from_be_bytes(buf[4..8].try_into().unwrap());
        let w = u16::from_be_bytes([buf[8], buf[9]]) as usize;
        let Some(r) = self.inflight.get_mut(&id) else {
            return false; // late
        };
        if w >= self.fanout || r.1[w / 64] >> (w % 64) & 1 == 1 {
            return false; // unknown or duplicate
        }
        let data = &buf[wire::ANS_HDR..];
        if data.len() != self.words * 8 {
            return false;
        }
        r.1[w / 64] |= 1 << (w % 64);
        r.2 += 1;
        for (i, c) in data.chunks_exact(8).enumerate() {
            r.3[i] = r.3[i].wrapping_add(u64::from_be_bytes(c.try_into().unwrap()));
        }
        if r.2 == self.fanout {
            let (t0, ..) = self.inflight.remove(&id).unwrap();
            let _ = self.hist.record(t0.elapsed().as_micros().max(1) as u64);
            self.done += 1;
            return true;
        }
        false
    }

    /// Abandons requests older than `timeout`; returns how many.
    fn expire(&mut self, timeout: Duration) -> usize {
        let old: Vec<u32> = self
            .inflight
            .iter()
            .filter(|(_, r)| r.0.elapsed() > timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in &old {
            self.inflight.remove(id);
        }
        self.incomplete += old.len() as u64;
        old.len()
    }
}

/// The datagrams of request `id` (one per worker).
fn request_bufs(id: u32, fanout: usize, payload: &[u8]) -> Vec<Vec<u8>> {
    (0..fanout)
        .map(|w| {
            let mut s = wire::req_section(id, payload);
            s[8..10].copy_from_slice(&(w as u16).to_be_bytes());
            s
        })
        .collect()
}

fn send_blocking(sock: &UdpSocket, workers: &[SocketAddr], bufs: &[Vec<u8>]) -> Result<()> {
    for (b, w) in bufs.iter().zip(workers) {
        loop {
            match sock.send_to(b, w) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => return Err(e).context("sendto"),
            }
        }
    }
    Ok(())
}

fn big_buffers(sock: &UdpSocket) {
    let fd = sock.as_raw_fd();
    let v: libc::c_int = 32 << 20;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        // SAFETY: setsockopt reads `v` (an int) for its size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &v as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
    }
}

fn baseline(
    mode: Mode,
    workers: &[SocketAddr],
    payload: &[u8],
    inflight: usize,
    dur: Duration,
    timeout: Duration,
) -> Result<Track> {
    let fanout = workers.len();
    let sock = UdpSocket::bind("0.0.0.0:0")?;
    big_buffers(&sock);
    let mut t = Track::new(fanout, payload.len());
    let end = Instant::now() + dur;
    let mut buf = vec![0u8; 4096];
    match mode {
        Mode::Blocking => {
            sock.set_read_timeout(Some(Duration::from_millis(10)))?;
            for _ in 0..inflight {
                let id = t.start();
                send_blocking(&sock, workers, &request_bufs(id, fanout, payload))?;
            }
            while Instant::now() < end {
                match sock.recv(&mut buf) {
                    Ok(n) => {
                        if t.answer(&buf[..n]) {
                            let id = t.start();
                            send_blocking(&sock, workers, &request_bufs(id, fanout, payload))?;
                        }
                    }
                    Err(e)
                        if e.kind() == std::io::ErrorKind::WouldBlock
                            || e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(e) => return Err(e).context("recv"),
                }
                for _ in 0..t.expire(timeout) {
                    let id = t.start();
                    send_blocking(&sock, workers, &request_bufs(id, fanout, payload))?;
                }
            }
        }
        Mode::Epoll => {
            use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
            sock.set_nonblocking(true)?;
            let ep = Epoll::new(EpollCreateFlags::empty())?;
            // level-triggered: no packet is stranded even if a drain stops early
            ep.add(&sock, EpollEvent::new(EpollFlags::EPOLLIN, 0))?;
            for _ in 0..inflight {
                let id = t.start();
                send_blocking(&sock, workers, &request_bufs(id, fanout, payload))?;
            }
            let mut evs = [EpollEvent::empty(); 4];
            while Instant::now() < end {
                let n = ep.wait(&mut evs, EpollTimeout::from(10u16))?;
                if n > 0 {
                    loop {
                        match sock.recv(&mut buf) {
                            Ok(n) => {
                                if t.answer(&buf[..n]) {
                                    let id = t.start();
                                    send_blocking(
                                        &sock,
                                        workers,
                                        &request_bufs(id, fanout, payload),
                                    )?;
                                }
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(e) => return Err(e).context("recv"),
                        }
                    }
                }
                for _ in 0..t.expire(timeout) {
                    let id = t.start();
                    send_blocking(&sock, workers, &request_bufs(id, fanout, payload))?;
                }
            }
        }
        Mode::IoUring => uring(&sock, workers, payload, inflight, end, timeout, &mut t)?,
        Mode::Sg | Mode::SgPoll => bail!("not a baseline"),
    }
    Ok(t)
}

/// io_uring: every send and every receive is an SQE whose user_data says which (kind and
/// buffer); a pool of receives stays posted.
fn uring(
    sock: &UdpSocket,
    workers: &[SocketAddr],
    payload: &[u8],
    inflight: usize,
    end: Instant,
    timeout: Duration,
    t: &mut Track,
) -> Result<()> {
    use io_uring::{opcode, types, IoUring};
    let fanout = workers.len();
    let recvs = 256usize;
    let sends = (inflight * fanout).max(64) * 2;
    let mut ring = IoUring::new((recvs + sends).next_power_of_two() as u32)?;
    let fd = types::Fd(sock.as_raw_fd());
    let mut rbufs = vec![vec![0u8; 2048]; recvs];
    let addrs: Vec<nix::sys::socket::SockaddrStorage> = workers
        .iter()
        .map(|w| nix::sys::socket::SockaddrStorage::from(*w))
        .collect();
    // send buffers: a slot per send in flight
    let mut sbufs: Vec<Vec<u8>> = vec![vec![]; sends];
    let mut sfree: Vec<usize> = (0..sends).collect();
    const RECV: u64 = 1 << 32;
    let post_recv = |ring: &mut IoUring, rbufs: &mut [Vec<u8>], i: usize| -> Result<()> {
        let e = opcode::Recv::new(fd, rbufs[i].as_mut_ptr(), rbufs[i].len() as u32)
            .build()
            .user_data(RECV | i as u64);
        // SAFETY: rbufs[i] is neither moved nor freed while the receive is posted (the
        // vector lives until the ring is dropped, below, after which nothing is posted).
        unsafe { ring.submission().push(&e) }.map_err(|_| anyhow::anyhow!("SQ full"))?;
        Ok(())
    };
    for i in 0..recvs {
        post_recv(&mut ring, &mut rbufs, i)?;
    }
    let mut pending_reqs = inflight;
    let mut sends_posted = 0usize;
    while Instant::now() < end {
        // new requests: one send SQE per worker
        while pending_reqs > 0 && sfree.len() >= fanout {
            pending_reqs -= 1;
            let id = t.start();
            for (w, b) in request_bufs(id, fanout, payload).into_iter().enumerate() {
                let s = sfree.pop().unwrap();
                sbufs[s] = b;
                let a = &addrs[w];
                let e = opcode::Send::new(fd, sbufs[s].as_ptr(), sbufs[s].len() as u32)
                    .dest_addr(nix::sys::socket::SockaddrLike::as_ptr(a))
                    .dest_addr_len(nix::sys::socket::SockaddrLike::len(a))
                    .build()
                    .user_data(s as u64);
                // SAFETY: sbufs[s] and addrs[w] stay put until the send's completion frees s.
                unsafe { ring.submission().push(&e) }.map_err(|_| anyhow::anyhow!("SQ full"))?;
                sends_posted += 1;
            }
        }
        ring.submit_and_wait(1)?;
        let cqes: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (ud, res) in cqes {
            if ud & RECV != 0 {
                let i = (ud & 0xffff_ffff) as usize;
                if res > 0 && t.answer(&rbufs[i][..res as usize]) {
                    pending_reqs += 1;
                }
                post_recv(&mut ring, &mut rbufs, i)?;
            } else {
                sfree.push(ud as usize);
                sends_posted -= 1;
            }
        }
        pending_reqs += t.expire(timeout);
    }
    // let posted operations finish before their buffers go
    let _ = sends_posted;
    drop(ring);
    Ok(())
}

fn sg_point(
    sg: &Arc<Sg>,
    workers: &[SocketAddr],
    payload: &[u8],
    inflight: usize,
    dur: Duration,
    timeout: Duration,
    delivery: Delivery,
) -> Result<Track> {
    let g = sg.group(workers)?;
    let mut c = Client::new(
        sg.clone(),
        false,
        ClientOpts {
            delivery,
            batch: 128,
            max_datagram: 1472,
            ..Default::default()
        },
    )?;
    let mut t = Track::new(workers.len(), payload.len());
    let red = Reducer::Sum(Elem::U64, payload.len() / 8);
    let mut starts: HashMap<u32, Instant> = HashMap::new();
    let end = Instant::now() + dur;
    // the clock starts before the send, as the baselines' (the clones leave inside it)
    for _ in 0..inflight {
        let t0 = Instant::now();
        let id = c.scatter(&g, payload, Policy::All, red, timeout)?;
        starts.insert(id, t0);
    }
    while Instant::now() < end {
        let Some(d) = c.wait(Duration::from_millis(10))? else {
            continue;
        };
        if let Some(t0) = starts.remove(&d.req_id) {
            if d.status == Status::Done {
                let _ = t.hist.record(t0.elapsed().as_micros().max(1) as u64);
                t.done += 1;
            } else {
                t.incomplete += 1;
            }
        }
        let t0 = Instant::now();
        let id = c.scatter(&g, payload, Policy::All, red, timeout)?;
        starts.insert(id, t0);
    }
    // drain what is in flight before the group goes
    let drain_end = Instant::now() + timeout + Duration::from_secs(2);
    while c.in_flight() > 0 && Instant::now() < drain_end {
        c.wait(Duration::from_millis(50))?;
    }
    drop(c);
    sg.remove_group(&g)?;
    Ok(t)
}

/// Runs every (mode, fan-out, payload) point; calls `each` with every point measured.
pub fn run(o: &BenchOpts, mut each: impl FnMut(&Point) + Send) -> Result<Vec<Point>> {
    let maxf = *o.fanouts.iter().max().context("no fan-out")?;
    if o.payloads.iter().any(|&p| p == 0 || p % 8 != 0 || p > 1024) {
        bail!("payloads are multiples of 8 bytes, 8-1024");
    }
    let t = Topology::new("sgb", o.worker_ns)?;
    let mut xdp = vec![];
    for w in &t.workers {
        xdp.push(topo::in_netns(&w.ns, || {
            XdpProg::worker(&w.iface, 7000, 7999)
        })??);
        napi_on(&w.ns, &w.iface, 1)?;
    }
    // workers round-robin over the namespaces: any prefix spreads evenly
    let per = maxf.div_ceil(o.worker_ns);
    let mut all = vec![];
    for i in 0..per {
        for w in &t.workers {
            all.push(SocketAddr::new(w.v4.into(), 7000 + i as u16));
        }
    }
    let mut points = vec![];
    topo::in_netns(&t.client, || -> Result<()> {
        pin_self(0)?;
        for &mode in &o.modes {
            let sg = match mode {
                Mode::Sg | Mode::SgPoll => Some(Arc::new(Sg::attach(&AttachOpts {
                    ifaces: t.client_ifaces(),
                    clients: 2,
                    slots_per_client: 64,
                    groups: 2,
                    ..Default::default()
                })?)),
                _ => None,
            };
            let mut pass = vec![];
            if sg.is_none() {
                for w in &t.workers {
                    pass.push(XdpProg::pass(&w.peer)?);
                }
            }
            for w in &t.workers {
                napi_on(&t.client, &w.peer, 0)?;
                // the worker side's threads may have been recreated too
                napi_on(&w.ns, &w.iface, 1)?;
            }
            crate::kernel::resolve_next_hops(&all);
            for &fanout in &o.fanouts {
                for &payload in &o.payloads {
                    let ws = &all[..fanout];
                    let inflight = (o.window / fanout).clamp(1, 32);
                    let data: Vec<u8> = (0..payload / 8)
                        .flat_map(|i| (i as u64 + 1).to_be_bytes())
                        .collect();
                    let dur = Duration::from_secs_f64(o.seconds);
                    let c0 = cpu_times();
                    let t0 = Instant::now();
                    let tr = match (mode, &sg) {
                        (Mode::Sg, Some(sg)) => {
                            sg_point(sg, ws, &data, inflight, dur, o.timeout, Delivery::Epoll)?
                        }
                        (Mode::SgPoll, Some(sg)) => {
                            sg_point(sg, ws, &data, inflight, dur, o.timeout, Delivery::BusyPoll)?
                        }
                        _ => baseline(mode, ws, &data, inflight, dur, o.timeout)?,
                    };
                    let secs = t0.elapsed().as_secs_f64();
                    let c1 = cpu_times();
                    let busy = |i: usize| (c1[i].0 - c0[i].0) as f64 / 100.0; // USER_HZ
                    let tot = |i: usize| ((c1[i].1 - c0[i].1) as f64 / 100.0).max(1e-9);
                    let n = tr.done.max(1) as f64;
                    let p = Point {
                        mode,
                        fanout,
                        payload,
                        inflight,
                        requests: tr.done,
                        incomplete: tr.incomplete,
                        rps: tr.done as f64 / secs,
                        p50_us: tr.hist.value_at_quantile(0.5) as f64,
                        p99_us: tr.hist.value_at_quantile(0.99) as f64,
                        client_us_per_req: busy(0) / n * 1e6,
                        client_cpu_pct: 100.0 * busy(0) / tot(0),
                        worker_cpu_pct: 100.0 * busy(1) / tot(1),
                    };
                    each(&p);
                    points.push(p);
                }
            }
            drop(pass);
            drop(sg);
        }
        Ok(())
    })??;
    drop(xdp);
    Ok(points)
}

/// A markdown table of the points, with each mode's throughput relative to io_uring's.
pub fn table(points: &[Point]) -> String {
    let mut s = String::from(
        "| fan-out | payload | mode | in flight | req/s | vs io_uring | p50 µs | p99 µs | client µs/req | client CPU | worker CPU | incomplete |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for p in points {
        let base = points
            .iter()
            .find(|q| q.mode == Mode::IoUring && q.fanout == p.fanout && q.payload == p.payload)
            .map(|q| q.rps);
        let rel = base
            .filter(|b| *b > 0.0)
            .map(|b| format!("{:.2}x", p.rps / b))
            .unwrap_or_default();
        s += &format!(
            "| {} | {} | {} | {} | {:.0} | {} | {:.0} | {:.0} | {:.1} | {:.0}% | {:.0}% | {} |\n",
            p.fanout,
            p.payload,
            serde_json::to_value(p.mode).unwrap().as_str().unwrap_or(""),
            p.inflight,
            p.rps,
            rel,
            p.p50_us,
            p.p99_us,
            p.client_us_per_req,
            p.client_cpu_pct,
            p.worker_cpu_pct,
            p.incomplete
        );
    }
    s
}

/// SVG plots (throughput, p99, client CPU per request against fan-out), one per payload.
pub fn plots(points: &[Point], dir: &Path) -> Result<()> {
    use plotters::prelude::*;
    let mut payloads: Vec<usize> = points.iter().map(|p| p.payload).collect();
    payloads.sort();
    payloads.dedup();
    type Metric = fn(&Point) -> f64;
    let metrics: [(&str, &str, Metric); 3] = [
        ("throughput", "requests/s", |p| p.rps),
        ("p99", "p99 latency (µs)", |p| p.p99_us),
        ("client-cpu", "client CPU per request (µs)", |p| {
            p.client_us_per_req
        }),
    ];
    let modes = [
        Mode::Sg,
        Mode::SgPoll,
        Mode::Blocking,
        Mode::Epoll,
        Mode::IoUring,
    ];
    let colors = [RED, MAGENTA, BLACK, BLUE, GREEN];
    for &payload in &payloads {
        for (name, label, f) in metrics {
            let path = dir.join(format!("{name}-{payload}B.svg"));
            let root = SVGBackend::new(&path, (640, 400)).into_drawing_area();
            root.fill(&WHITE)?;
            let pts: Vec<&Point> = points.iter().filter(|p| p.payload == payload).collect();
            let ymax = pts.iter().map(|p| f(p)).fold(1.0, f64::max) * 1.5;
            let ymin = pts.iter().map(|p| f(p)).fold(f64::MAX, f64::min).max(0.1) / 1.5;
            let xmax = pts.iter().map(|p| p.fanout).max().unwrap_or(1) as f64 * 1.5;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!("{label}, {payload}-byte answers"),
                    ("sans-serif", 18),
                )
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(60)
                .build_cartesian_2d((0.7f64..xmax).log_scale(), (ymin..ymax).log_scale())?;
            chart
                .configure_mesh()
                .x_desc("fan-out (workers per request)")
                .y_desc(label)
                .draw()?;
            for (m, c) in modes.iter().zip(colors) {
                let mut series: Vec<(f64, f64)> = pts
                    .iter()
                    .filter(|p| p.mode == *m)
                    .map(|p| (p.fanout as f64, f(p)))
                    .collect();
                if series.is_empty() {
                    continue;
                }
                series.sort_by(|a, b| a.0.total_cmp(&b.0));
                let name = serde_json::to_value(m)?.as_str().unwrap_or("").to_string();
                chart
                    .draw_series(LineSeries::new(series.clone(), c.stroke_width(2)))?
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], c));
                chart.draw_series(
                    series
                        .iter()
                        .map(|&(x, y)| Circle::new((x, y), 3, c.filled())),
                )?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
            root.present()?;
        }
    }
    Ok(())
}
