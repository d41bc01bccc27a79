//! `inkbench scenario paper`: the side-by-side benchmark of the inkcache paper. Stock memcached,
//! memcached behind inkcache, the XDP echo floor, and inkcached (alone and behind inkcache), on
//! a workload the kernel cache targets and on one it cannot serve, in one invocation.
//!
//! Topology (2 cores): a fresh pair of network namespaces per configuration, joined by a veth.
//! The client side (the load generator and the client veth's threaded NAPI kthread) is pinned to
//! CPU0. The server side (the server process and the server veth's threaded NAPI kthread, where
//! every XDP program runs) is pinned to CPU1. Every configuration has an XDP program on both
//! veth ends (XDP_PASS where nothing else is attached), so packets always take the NAPI path and
//! the server's receive work is always done on CPU1. Server cost per request = CPU1 busy time
//! (from /proc/stat) / requests answered.

pub(crate) mod plots;
mod report;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use testkit::{Pair, SRV_V4};

use crate::config::{Popularity, Proto, RunConfig, ValueSize};
use crate::echo::{self, XdpGuard, XdpProg};
use crate::report::LatencySummary;
use crate::workload::key_name;

/// The memcached port used inside the namespaces.
pub const PORT: u16 = 11211;
/// CPU of the client side.
pub const CLIENT_CPU: usize = 0;
/// CPU of the server side.
pub const SERVER_CPU: usize = 1;

/// What `scenario paper` runs and where it writes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaperOpts {
    /// Short runs and a small key space (CI): under 2 minutes in total.
    pub quick: bool,
    pub out: PathBuf,
    /// The `inkcache` CLI; configurations with the kernel cache are skipped without it.
    pub inkcache: Option<PathBuf>,
    /// The `inkcached` server; its configurations are skipped without it.
    pub inkcached: Option<PathBuf>,
    pub memcached: PathBuf,
    /// Worker threads of memcached and inkcached (`-t`).
    pub server_threads: usize,
    /// UDP requests in flight in the closed-loop (max throughput) runs.
    pub inflight: usize,
    /// Cross-check with `memcaslap -U` (if installed).
    pub memcaslap: bool,
}

impl PaperOpts {
    /// Defaults: binaries next to the running executable (then `$INKCACHE_BIN`,
    /// `$INKCACHED_BIN`), stock memcached from /usr/bin.
    pub fn new(out: PathBuf, quick: bool) -> Self {
        PaperOpts {
            quick,
            out,
            inkcache: find_bin("inkcache", "INKCACHE_BIN"),
            inkcached: find_bin("inkcached", "INKCACHED_BIN"),
            memcached: PathBuf::from("/usr/bin/memcached"),
            server_threads: 1,
            inflight: 32,
            memcaslap: true,
        }
    }
}

/// `$ENV`, else `<dir of the current executable>/<name>` (also one level up, for test binaries
/// in target/<profile>/deps), if it exists.
pub fn find_bin(name: &str, env: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(name), dir.parent()?.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// A server configuration under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Setup {
    Memcached,
    MemcachedInkcache,
    XdpEcho,
    Inkcached,
    InkcachedInkcache,
}

impl Setup {
    pub fn label(self) -> &'static str {
        match self {
            Setup::Memcached => "memcached",
            Setup::MemcachedInkcache => "memcached+inkcache",
            Setup::XdpEcho => "xdp-echo floor",
            Setup::Inkcached => "inkcached",
            Setup::InkcachedInkcache => "inkcached+inkcache",
        }
    }
    fn with_inkcache(self) -> bool {
        matches!(self, Setup::MemcachedInkcache | Setup::InkcachedInkcache)
    }
    fn server(self) -> Option<ServerKind> {
        match self {
            Setup::Memcached | Setup::MemcachedInkcache => Some(ServerKind::Memcached),
            Setup::Inkcached | Setup::InkcachedInkcache => Some(ServerKind::Inkcached),
            Setup::XdpEcho => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ServerKind {
    Memcached,
    Inkcached,
}

/// A workload: what the client asks for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Workload {
    pub name: String,
    pub description: String,
    pub keys: u64,
    pub key_size: usize,
    pub value_size: ValueSize,
    pub get_ratio: f64,
    pub zipf: f64,
    pub setups: Vec<Setup>,
}

impl Workload {
    fn run_config(&self, inflight: usize) -> RunConfig {
        let mut c = RunConfig::new(SocketAddr::new(IpAddr::V4(SRV_V4), PORT));
        c.proto = Proto::Udp;
        c.keys = self.keys;
        c.key_size = self.key_size;
        c.value_size = self.value_size;
        c.get_ratio = self.get_ratio;
        c.popularity = Popularity::Zipf { s: self.zipf };
        c.inflight = Some(inflight);
        c.connections = 1;
        c.threads = 1;
        c.warmup = Duration::ZERO;
        c.timeout = Duration::from_millis(500);
        c.server_stats = false;
        c
    }
}

/// The workloads of the paper scenario.
pub fn workloads(quick: bool) -> Vec<Workload> {
    let keys = if quick { 10_000 } else { 100_000 };
    let all = vec![
        Setup::Memcached,
        Setup::MemcachedInkcache,
        Setup::XdpEcho,
        Setup::Inkcached,
        Setup::InkcachedInkcache,
    ];
    vec![
        Workload {
            name: "target".into(),
            description: format!(
                "what the kernel cache is for: 100% UDP gets, {keys} keys of 16 bytes, values of \
                 32-64 bytes, Zipf 0.99, keys preloaded"
            ),
            keys,
            key_size: 16,
            value_size: ValueSize::Uniform { min: 32, max: 64 },
            get_ratio: 1.0,
            zipf: 0.99,
            setups: all,
        },
        Workload {
            name: "target_95get".into(),
            description: format!(
                "the target workload with writes: 95% UDP gets, 5% UDP sets (each invalidates \
                 the key in the kernel), {keys} keys, values of 32-64 bytes, Zipf 0.99"
            ),
            keys,
            key_size: 16,
            value_size: ValueSize::Uniform { min: 32, max: 64 },
            get_ratio: 0.95,
            zipf: 0.99,
            setups: vec![Setup::Memcached, Setup::MemcachedInkcache],
        },
        Workload {
            name: "nontarget".into(),
            description: format!(
                "large values: 100% UDP gets of 1000-byte values (too big for a reply built in XDP \
                 on veth: answered on the skb path, TC ingress), {keys} keys, Zipf 0.99"
            ),
            keys,
            key_size: 16,
            value_size: ValueSize::Fixed { bytes: 1000 },
            get_ratio: 1.0,
            zipf: 0.99,
            setups: vec![
                Setup::Memcached,
                Setup::MemcachedInkcache,
                Setup::Inkcached,
                Setup::InkcachedInkcache,
            ],
        },
    ]
}

/// Measurement lengths.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Timing {
    pub warm_s: f64,
    pub measure_s: f64,
    pub profile_s: f64,
    pub memcaslap_s: u64,
}

impl Timing {
    fn new(quick: bool) -> Self {
        if quick {
            Timing {
                warm_s: 0.3,
                measure_s: 1.0,
                profile_s: 0.5,
                memcaslap_s: 2,
            }
        } else {
            Timing {
                warm_s: 2.0,
                measure_s: 8.0,
                profile_s: 3.0,
                memcaslap_s: 5,
            }
        }
    }
}

/// Counters of the kernel cache (`inkcache stats --json`), as a difference over a run.
pub type KernelStats = BTreeMap<String, u64>;

/// One measurement: a closed-loop (max throughput) or open-loop (latency) run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// Open loop: the offered load (req/s); closed loop: None.
    pub offered_rate: Option<f64>,
    pub inflight: Option<usize>,
    pub duration_s: f64,
    /// Answered requests per second.
    pub throughput: f64,
    pub requests: u64,
    pub responses: u64,
    /// Requests not answered within the timeout.
    pub lost: u64,
    pub loss_ratio: f64,
    /// Answers that were not the expected kind (the echo floor's answers all are: it returns
    /// the request itself).
    pub errors: u64,
    /// Gets answered with a value (client's view).
    pub hits: u64,
    pub latency: LatencySummary,
    /// Busy share of the server CPU over the run (user+nice+system+irq+softirq).
    pub server_cpu_busy: f64,
    /// Stolen share of the server CPU (hypervisor), not counted as busy.
    pub server_cpu_steal: f64,
    /// Server CPU busy time per answered request, ns.
    pub server_ns_per_req: f64,
    /// CPU time of the server process plus the server veth's NAPI kthreads per answered request,
    /// ns (a cross-check that the CPU1 figure is not someone else's work).
    pub attributed_ns_per_req: f64,
    /// Requests per second one server core would answer at this cost (1e9 / server_ns_per_req).
    pub capacity_per_core: f64,
    /// The kernel cache's counters over the run (configurations with inkcache).
    pub kernel: Option<KernelStats>,
    /// Kernel hits / requests.
    pub kernel_hit_ratio: Option<f64>,
}

impl Point {
    /// Share of the server CPU's busy time that was not the server tasks' (other jobs).
    pub fn cpu_other_share(&self) -> f64 {
        if self.server_ns_per_req > 0.0 {
            ((self.server_ns_per_req - self.attributed_ns_per_req) / self.server_ns_per_req)
                .max(0.0)
        } else {
            0.0
        }
    }
}

/// Per-program cost from `kernel.bpf_stats_enabled` (run_time_ns / run_cnt).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgProfile {
    pub name: String,
    pub prog_type: String,
    pub id: u64,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    pub ns_per_run: f64,
    /// Runs per answered request of the profiling run.
    pub runs_per_req: f64,
}

/// One configuration on one workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SetupResult {
    pub workload: String,
    pub setup: Setup,
    pub label: String,
    /// Why it was not run (binary missing), if so.
    pub skipped: Option<String>,
    /// Why it failed, if it did.
    pub error: Option<String>,
    pub server_cmd: Option<String>,
    /// XDP mode on the server veth (`native`/`generic`).
    pub xdp_mode: Option<String>,
    pub max: Option<Point>,
    pub latency: Option<Point>,
    pub bpf_profile: Vec<ProgProfile>,
    /// Total server-CPU cost per request during the profiling run (bpf stats on), ns.
    pub profile_server_ns_per_req: Option<f64>,
}

/// `memcaslap -U` against one configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Memcaslap {
    pub setup: Setup,
    pub label: String,
    pub command: String,
    pub tps: Option<f64>,
    pub cmd_get: Option<u64>,
    pub get_misses: Option<u64>,
    pub kernel: Option<KernelStats>,
    pub error: Option<String>,
    pub output_tail: String,
}

/// Everything `results.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PaperResults {
    pub meta: Meta,
    pub workloads: Vec<Workload>,
    pub results: Vec<SetupResult>,
    pub ratios: BTreeMap<String, f64>,
    pub goals: Vec<Goal>,
    pub memcaslap: Vec<Memcaslap>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Meta {
    pub scenario: String,
    pub quick: bool,
    pub started_unix: u64,
    pub elapsed_s: f64,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memcached_version: String,
    pub server_threads: usize,
    pub inflight: usize,
    pub timing: Timing,
    /// Open-loop rate per workload (half the baseline's closed-loop throughput).
    pub latency_rates: BTreeMap<String, f64>,
    pub topology: String,
    pub inkcache_bin: Option<String>,
    pub inkcached_bin: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Goal {
    pub goal: String,
    pub target: String,
    pub measured: Option<f64>,
    pub met: Option<bool>,
    pub note: String,
}

pub const TOPOLOGY: &str = "client netns (inkbench, 1 thread, sendmmsg/recvmmsg, and the client \
veth's threaded NAPI kthread) pinned to CPU0; server netns (server process and the server veth's \
threaded NAPI kthread, where XDP runs) pinned to CPU1; XDP programs on both veth ends in every \
configuration (XDP_PASS where nothing else is attached) so packets take the NAPI path; server cost \
= CPU1 busy time from /proc/stat / answered requests";

/// Runs the paper scenario and writes results.json, results.md and the plots into `opts.out`.
pub fn paper(opts: &PaperOpts) -> Result<PaperResults> {
    let t0 = Instant::now();
    ensure_root()?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    // The client side runs on CPU0: this thread and every thread and process it starts.
    pin_self(CLIENT_CPU)?;
    let timing = Timing::new(opts.quick);
    let wls = workloads(opts.quick);
    let mut results = Vec::new();
    let mut rates = BTreeMap::new();
    let mut memcaslap = Vec::new();
    for wl in &wls {
        let mut rate: Option<f64> = None;
        for &setup in &wl.setups {
            eprintln!("inkbench scenario: {} / {} ...", wl.name, setup.label());
            let t_setup = Instant::now();
            let mut r = run_setup(opts, &timing, wl, setup, &mut rate);
            if let Err(e) = &r {
                eprintln!("inkbench scenario: {e:#}; trying once more");
                r = run_setup(opts, &timing, wl, setup, &mut rate);
            }
            eprintln!("  ({:.1} s)", t_setup.elapsed().as_secs_f64());
            let mut res = match r {
                Ok(r) => r,
                Err(e) => {
                    if setup == Setup::Memcached {
                        return Err(e.context(format!("{} / {}", wl.name, setup.label())));
                    }
                    eprintln!(
                        "inkbench scenario: {} / {} failed: {e:#}",
                        wl.name,
                        setup.label()
                    );
                    let mut r = SetupResult::empty(wl, setup);
                    r.error = Some(format!("{e:#}"));
                    r
                }
            };
            if let Some(p) = &res.max {
                eprintln!(
                    "  max {:.0} req/s, {:.0} ns/req on CPU{SERVER_CPU}, lost {}",
                    p.throughput, p.server_ns_per_req, p.lost
                );
            }
            if let Some(p) = &res.latency {
                eprintln!(
                    "  at {:.0} req/s: p50 {:.1} us, p99 {:.1} us, p99.9 {:.1} us",
                    p.offered_rate.unwrap_or(0.0),
                    p.latency.p50_us,
                    p.latency.p99_us,
                    p.latency.p999_us
                );
            }
            if let Some(s) = &res.skipped {
                eprintln!("  skipped: {s}");
            }
            res.workload = wl.name.clone();
            results.push(res);
        }
        if let Some(r) = rate {
            rates.insert(wl.name.clone(), r);
        }
        if wl.name == "target" && opts.memcaslap {
            for setup in [Setup::Memcached, Setup::MemcachedInkcache] {
                if setup.with_inkcache() && opts.inkcache.is_none() {
                    continue;
                }
                eprintln!("inkbench scenario: memcaslap -U / {} ...", setup.label());
                memcaslap.push(run_memcaslap(opts, &timing, setup));
            }
        }
    }
    let meta = Meta {
        scenario: "paper".into(),
        quick: opts.quick,
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            .saturating_sub(t0.elapsed().as_secs()),
        elapsed_s: t0.elapsed().as_secs_f64(),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        cpu_model: std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
            .unwrap_or_default(),
        // (available_parallelism would count only the CPU this thread is pinned to)
        cpus: std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count(),
        memcached_version: Command::new(&opts.memcached)
            .arg("-V")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default(),
        server_threads: opts.server_threads,
        inflight: opts.inflight,
        timing,
        latency_rates: rates,
        topology: TOPOLOGY.into(),
        inkcache_bin: opts.inkcache.as_ref().map(|p| p.display().to_string()),
        inkcached_bin: opts.inkcached.as_ref().map(|p| p.display().to_string()),
    };
    let mut res = PaperResults {
        meta,
        workloads: wls,
        results,
        ratios: BTreeMap::new(),
        goals: Vec::new(),
        memcaslap,
    };
    report::derive(&mut res);
    res.meta.elapsed_s = t0.elapsed().as_secs_f64();
    write_outputs(&res, &opts.out)?;
    Ok(res)
}

/// Writes results.json, results.md and the SVG plots; returns the files written.
pub fn write_outputs(res: &PaperResults, out: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let json = out.join("results.json");
    std::fs::write(&json, serde_json::to_string_pretty(res)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    files.push(json);
    let md = out.join("results.md");
    std::fs::write(&md, report::markdown(res))
        .with_context(|| format!("writing {}", md.display()))?;
    files.push(md);
    files.extend(plots::all(res, out)?);
    Ok(files)
}

impl SetupResult {
    fn empty(wl: &Workload, setup: Setup) -> Self {
        SetupResult {
            workload: wl.name.clone(),
            setup,
            label: setup.label().into(),
            skipped: None,
            error: None,
            server_cmd: None,
            xdp_mode: None,
            max: None,
            latency: None,
            bpf_profile: Vec::new(),
            profile_server_ns_per_req: None,
        }
    }
}

fn ensure_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("scenario paper needs root (network namespaces, XDP, CPU pinning)");
    }
    Ok(())
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn cpuset(cpu: usize) -> Result<CpuSet> {
    let mut s = CpuSet::new();
    s.set(cpu).context("CPU index")?;
    Ok(s)
}

/// Pins the calling thread (and what it later starts) to `cpu`.
fn pin_self(cpu: usize) -> Result<()> {
    sched_setaffinity(Pid::from_raw(0), &cpuset(cpu)?)
        .with_context(|| format!("pinning to CPU{cpu} (needs at least 2 CPUs)"))
}

/// Pins every thread of process (or kernel thread) `pid` to `cpu`.
fn pin_pid(pid: i32, cpu: usize) -> Result<()> {
    let set = cpuset(cpu)?;
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("listing the threads of {pid}"))?;
    for t in tasks.flatten() {
        if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
            sched_setaffinity(Pid::from_raw(tid), &set)
                .with_context(|| format!("pinning task {tid} to CPU{cpu}"))?;
        }
    }
    Ok(())
}

/// Kernel threads `napi/<iface>-N` (threaded NAPI), by their (15-byte) command name.
fn napi_threads(iface: &str) -> Vec<i32> {
    let full = format!("napi/{iface}-");
    let prefix = &full[..full.len().min(15)];
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim_end().starts_with(prefix) {
                v.push(pid);
            }
        }
    }
    v
}

/// Enables threaded NAPI on `iface` (sysfs net is per namespace) and pins its kthreads to `cpu`.
fn threaded_napi(netns: &str, iface: &str, cpu: usize) -> Result<Vec<i32>> {
    testkit::sh(Command::new("ip").args([
        "netns",
        "exec",
        netns,
        "sh",
        "-c",
        &format!("echo 1 > /sys/class/net/{iface}/threaded"),
    ]))
    .with_context(|| format!("enabling threaded NAPI on {iface}"))?;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let pids = napi_threads(iface);
        if !pids.is_empty() {
            for &p in &pids {
                pin_pid(p, cpu)?;
            }
            return Ok(pids);
        }
        if Instant::now() > deadline {
            bail!("no napi/{iface}-N kernel thread appeared after enabling threaded NAPI");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server process in the server namespace, pinned to the server CPU; killed on drop.
struct ServerProc {
    child: Child,
    cmd: String,
}

impl ServerProc {
    fn start(opts: &PaperOpts, netns: &str, kind: ServerKind) -> Result<Self> {
        let (prog, mem) = match kind {
            ServerKind::Memcached => (opts.memcached.clone(), "1024"),
            ServerKind::Inkcached => (
                opts.inkcached
                    .clone()
                    .context("inkcached binary not found")?,
                "1024",
            ),
        };
        let port = PORT.to_string();
        let threads = opts.server_threads.to_string();
        let args = [
            "-u", "root", "-p", &port, "-U", &port, "-t", &threads, "-m", mem, "-c", "4096",
        ];
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            netns,
            "taskset",
            "-c",
            &SERVER_CPU.to_string(),
        ])
        .arg(&prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let shown = format!("{} {}", prog.display(), args.join(" "));
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", prog.display()))?;
        let mut s = ServerProc { child, cmd: shown };
        // Ready when TCP accepts on the server address.
        let addr = SocketAddr::new(IpAddr::V4(SRV_V4), PORT);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ok = echo::in_netns(netns, move || {
                Ok(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok())
            })?;
            if ok {
                break;
            }
            if let Ok(Some(st)) = s.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = s.child.stderr.take() {
                    use std::io::Read;
                    let _ = e.read_to_string(&mut err);
                }
                bail!("{} exited ({st}): {}", s.cmd, err.trim());
            }
            if Instant::now() > deadline {
                bail!("{} did not accept TCP on {addr} within 10 s", s.cmd);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // `ip netns exec` and `taskset` exec in place: the child is the server itself.
        pin_pid(s.child.id() as i32, SERVER_CPU)?;
        Ok(s)
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// inkcache attached to the server veth through its CLI; detached on drop.
struct Inkcache {
    bin: PathBuf,
    netns: String,
    iface: String,
}

impl Inkcache {
    fn attach(bin: &Path, netns: &str, iface: &str) -> Result<Self> {
        let me = Inkcache {
            bin: bin.to_path_buf(),
            netns: netns.into(),
            iface: iface.into(),
        };
        me.cli(&[
            "attach",
            "--iface",
            iface,
            "--port",
            &PORT.to_string(),
            "--cache-mb",
            "256",
        ])
        .context("inkcache attach")?;
        Ok(me)
    }

    fn cli(&self, args: &[&str]) -> Result<String> {
        let out = testkit::sh(
            Command::new(&self.bin)
                .args(["--netns", &self.netns])
                .args(args),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn stats_or_warn(&self) -> Option<KernelStats> {
        self.stats()
            .map_err(|e| eprintln!("inkbench scenario: inkcache stats: {e:#}"))
            .ok()
    }

    fn stats(&self) -> Result<KernelStats> {
        let s = self.cli(&["stats", "--iface", &self.iface, "--json"])?;
        let v: serde_json::Value =
            serde_json::from_str(&s).with_context(|| format!("inkcache stats output {s:?}"))?;
        let obj = v.as_object().context("inkcache stats: not a JSON object")?;
        Ok(obj
            .iter()
            .filter_map(|(k, v)| v.as_u64().map(|n| (k.clone(), n)))
            .collect())
    }
}

impl Drop for Inkcache {
    fn drop(&mut self) {
        if let Err(e) = self.cli(&["detach", "--iface", &self.iface]) {
            eprintln!("inkbench scenario: inkcache detach: {e:#}");
        }
    }
}

fn stats_delta(a: &KernelStats, b: &KernelStats) -> KernelStats {
    b.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
        .collect()
}

/// One configuration set up: namespaces, XDP on both ends, threaded NAPI, pinning, the server.
/// Fields drop in order: server and attachments before the namespaces.
struct Rig {
    server: Option<ServerProc>,
    inkcache: Option<Inkcache>,
    _srv_xdp: Option<XdpGuard>,
    _cli_xdp: XdpGuard,
    srv_napi: Vec<i32>,
    xdp_mode: String,
    pair: Pair,
}

impl Rig {
    fn new(opts: &PaperOpts, setup: Setup) -> Result<Self> {
        let pair = Pair::new().context("creating the namespaces")?;
        let cli_xdp = echo::attach(&pair.client.name, &pair.cli_if, XdpProg::Pass, PORT)
            .context("XDP_PASS on the client veth")?;
        let mut srv_xdp = None;
        let mut inkcache = None;
        let xdp_mode;
        if setup.with_inkcache() {
            let bin = opts
                .inkcache
                .as_ref()
                .context("inkcache binary not found")?;
            inkcache = Some(Inkcache::attach(bin, &pair.server.name, &pair.srv_if)?);
            xdp_mode = "inkcache (auto)".to_string();
        } else {
            let prog = if setup == Setup::XdpEcho {
                XdpProg::Echo
            } else {
                XdpProg::Pass
            };
            let g = echo::attach(&pair.server.name, &pair.srv_if, prog, PORT)
                .with_context(|| format!("XDP {prog:?} on the server veth"))?;
            xdp_mode = g.mode.to_string();
            srv_xdp = Some(g);
        }
        threaded_napi(&pair.client.name, &pair.cli_if, CLIENT_CPU)?;
        let srv_napi = threaded_napi(&pair.server.name, &pair.srv_if, SERVER_CPU)?;
        let server = match setup.server() {
            Some(kind) => Some(ServerProc::start(opts, &pair.server.name, kind)?),
            None => None,
        };
        // Resolve the neighbours both ways now: requests sent before ARP completes are dropped
        // beyond the neighbour queue, and some clients (memcaslap) never retry them.
        // (A TCP connection attempt does it; refused is fine, there is no ping here.)
        let addr = SocketAddr::new(IpAddr::V4(SRV_V4), PORT);
        echo::in_netns(&pair.client.name, move || {
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
            Ok(())
        })?;
        Ok(Rig {
            server,
            inkcache,
            _srv_xdp: srv_xdp,
            _cli_xdp: cli_xdp,
            srv_napi,
            xdp_mode,
            pair,
        })
    }

    /// Runs a load from the client namespace, on the client CPU.
    fn load(&self, cfg: &RunConfig) -> Result<crate::RunResults> {
        self.pair.client.run(|| {
            pin_self(CLIENT_CPU)?;
            crate::run(cfg)
        })
    }

    /// Tasks whose CPU time is the server's (process and NAPI kthreads).
    fn server_tasks(&self) -> Vec<i32> {
        let mut v = self.srv_napi.clone();
        if let Some(s) = &self.server {
            v.push(s.pid());
        }
        v
    }

    /// Preloads every key over TCP (if there is a server) and touches every key once with a UDP
    /// get, so the kernel cache learns them all.
    fn warm(&self, wl: &Workload, cfg: &RunConfig, timing: &Timing) -> Result<()> {
        if self.server.is_some() {
            let mut c = cfg.clone();
            c.preload = true;
            c.timeout = Duration::from_secs(5);
            self.pair
                .client
                .run(|| crate::admin::preload(&c))
                .context("preload")?;
            let (keys, ks) = (wl.keys, wl.key_size);
            self.pair
                .client
                .run(move || touch_all(cfg.server, keys, ks))
                .context("touching every key over UDP")?;
        }
        let mut c = cfg.clone();
        c.duration = Duration::from_secs_f64(timing.warm_s);
        self.load(&c).context("warmup run")?;
        Ok(())
    }

    /// One measured run: the load plus the server CPU and the kernel counters around it.
    fn measure(&self, cfg: &RunConfig) -> Result<Point> {
        // Best effort: the counters are read through the pins, which a cleanup elsewhere on a
        // shared machine may remove; the programs keep running without them.
        let k0 = self.inkcache.as_ref().and_then(|k| k.stats_or_warn());
        let tasks = self.server_tasks();
        let (res, cpu) = std::thread::scope(|s| {
            let dur = cfg.duration;
            let tasks = &tasks;
            let mon = s.spawn(move || {
                // inkbench::run starts sending 20 ms after it is called.
                std::thread::sleep(Duration::from_millis(20));
                let a = CpuSnap::take(SERVER_CPU, tasks);
                std::thread::sleep(dur);
                let b = CpuSnap::take(SERVER_CPU, tasks);
                (a, b)
            });
            let res = self.load(cfg);
            let cpu = mon
                .join()
                .map_err(|_| anyhow::anyhow!("CPU monitor panicked"));
            (res, cpu)
        });
        let res = res?;
        let (a, b) = cpu?;
        let (a, b) = (a?, b?);
        let kernel = match (&self.inkcache, k0) {
            (Some(k), Some(k0)) => k.stats_or_warn().map(|k1| stats_delta(&k0, &k1)),
            _ => None,
        };
        let c = &res.counters;
        let answered = c.responses.max(1) as f64;
        let busy_ns = b.busy_ns.saturating_sub(a.busy_ns) as f64;
        let total_ns = b.total_ns.saturating_sub(a.total_ns).max(1) as f64;
        let steal_ns = b.steal_ns.saturating_sub(a.steal_ns) as f64;
        let task_ns = b.tasks_ns.saturating_sub(a.tasks_ns) as f64;
        let server_ns_per_req = busy_ns / answered;
        let kernel_hit_ratio = kernel
            .as_ref()
            .map(|k| k.get("hits").copied().unwrap_or(0) as f64 / c.requests.max(1) as f64);
        Ok(Point {
            offered_rate: cfg.rate,
            inflight: if cfg.rate.is_none() {
                Some(cfg.effective_inflight())
            } else {
                None
            },
            duration_s: res.duration_s,
            throughput: res.throughput,
            requests: c.requests,
            responses: c.responses,
            lost: c.lost,
            loss_ratio: c.lost as f64 / c.requests.max(1) as f64,
            errors: c.errors,
            hits: c.hits,
            latency: res.latency,
            server_cpu_busy: busy_ns / total_ns,
            server_cpu_steal: steal_ns / total_ns,
            server_ns_per_req,
            attributed_ns_per_req: task_ns / answered,
            capacity_per_core: if server_ns_per_req > 0.0 {
                1e9 / server_ns_per_req
            } else {
                0.0
            },
            kernel,
            kernel_hit_ratio,
        })
    }

    /// Per-program cost of the XDP and TC programs on the server veth, with bpf stats enabled
    /// for one closed-loop run. Returns the programs and the server ns/request of that run.
    fn profile(&self, cfg: &RunConfig) -> Result<(Vec<ProgProfile>, f64)> {
        let ids = prog_ids(&self.pair.server.name, &self.pair.srv_if)?;
        if ids.is_empty() {
            return Ok((Vec::new(), 0.0));
        }
        let _stats = BpfStats::enable()?;
        let before: Vec<_> = ids.iter().map(|&id| prog_show(id)).collect::<Result<_>>()?;
        let p = self.measure(cfg)?;
        let mut out = Vec::new();
        for (b, &id) in before.iter().zip(&ids) {
            let a = prog_show(id)?;
            let cnt = a.run_cnt.saturating_sub(b.run_cnt);
            let ns = a.run_time_ns.saturating_sub(b.run_time_ns);
            out.push(ProgProfile {
                name: a.name.clone(),
                prog_type: a.prog_type.clone(),
                id,
                run_cnt: cnt,
                run_time_ns: ns,
                ns_per_run: ns as f64 / cnt.max(1) as f64,
                runs_per_req: cnt as f64 / p.responses.max(1) as f64,
            });
        }
        Ok((out, p.server_ns_per_req))
    }
}

/// CPU counters at one instant: the server CPU's line of /proc/stat and the server tasks' times.
struct CpuSnap {
    busy_ns: u64,
    total_ns: u64,
    steal_ns: u64,
    tasks_ns: u64,
}

fn clk_tck() -> u64 {
    // /proc/stat and /proc/PID/stat count in USER_HZ, 100 on every architecture Linux exports.
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

impl CpuSnap {
    fn take(cpu: usize, tasks: &[i32]) -> Result<Self> {
        static TCK: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let tck = *TCK.get_or_init(clk_tck);
        let to_ns = |ticks: u64| ticks * 1_000_000_000 / tck;
        let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
        let name = format!("cpu{cpu}");
        let line = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .with_context(|| format!("no {name} in /proc/stat"))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        let g = |i: usize| f.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal
        let busy = g(0) + g(1) + g(2) + g(5) + g(6);
        let total = busy + g(3) + g(4) + g(7);
        let mut tasks_ticks = 0;
        for &p in tasks {
            if let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/stat")) {
                if let Some(rest) = s.rsplit_once(") ").map(|(_, r)| r) {
                    let v: Vec<&str> = rest.split_whitespace().collect();
                    // fields 14 and 15 (utime, stime), counted from the state (field 3)
                    let ut: u64 = v.get(11).and_then(|x| x.parse().ok()).unwrap_or(0);
                    let st: u64 = v.get(12).and_then(|x| x.parse().ok()).unwrap_or(0);
                    tasks_ticks += ut + st;
                }
            }
        }
        Ok(CpuSnap {
            busy_ns: to_ns(busy),
            total_ns: to_ns(total),
            steal_ns: to_ns(g(7)),
            tasks_ns: to_ns(tasks_ticks),
        })
    }
}

/// `kernel.bpf_stats_enabled=1` while alive; the previous value restored on drop.
struct BpfStats {
    prev: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<Self> {
        let prev = read_trim(BPF_STATS);
        std::fs::write(BPF_STATS, "1").context("enabling kernel.bpf_stats_enabled")?;
        Ok(BpfStats { prev })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let v = if self.prev.is_empty() {
            "0"
        } else {
            &self.prev
        };
        let _ = std::fs::write(BPF_STATS, v);
    }
}

/// IDs of the BPF programs attached to `iface` (XDP and TC), from `bpftool net show`.
fn prog_ids(netns: &str, iface: &str) -> Result<Vec<u64>> {
    let out = testkit::sh(Command::new("ip").args([
        "netns", "exec", netns, "bpftool", "-j", "net", "show", "dev", iface,
    ]))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("bpftool net show")?;
    let mut ids = Vec::new();
    let mut visit = |o: &serde_json::Value| {
        for key in ["id", "prog_id"] {
            if let Some(id) = o.get(key).and_then(|x| x.as_u64()) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
    };
    for top in v.as_array().into_iter().flatten() {
        for kind in ["xdp", "tc", "tcx"] {
            for o in top
                .get(kind)
                .and_then(|x| x.as_array())
                .into_iter()
                .flatten()
            {
                visit(o);
            }
        }
    }
    Ok(ids)
}

struct ProgShow {
    name: String,
    prog_type: String,
    run_cnt: u64,
    run_time_ns: u64,
}

fn prog_show(id: u64) -> Result<ProgShow> {
    let out =
        testkit::sh(Command::new("bpftool").args(["-j", "prog", "show", "id", &id.to_string()]))?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("bpftool prog show")?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let n = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    Ok(ProgShow {
        name: s("name"),
        prog_type: s("type"),
        run_cnt: n("run_cnt"),
        run_time_ns: n("run_time_ns"),
    })
}

/// Sends one UDP get for every key `0..keys` (16 in flight) so that the kernel cache sees each
/// miss and learns the item from the server's reply. Answers are not checked.
fn touch_all(server: SocketAddr, keys: u64, key_size: usize) -> Result<()> {
    const WINDOW: u64 = 16;
    let s = UdpSocket::bind("0.0.0.0:0").context("binding a UDP socket")?;
    s.connect(server)?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 2048];
    let mut id = 0u16;
    let mut k = 0;
    while k < keys {
        let end = (k + WINDOW).min(keys);
        for key in k..end {
            let mut d = inkproto::udp::FrameHeader::request(id).encode().to_vec();
            id = id.wrapping_add(1);
            d.extend_from_slice(format!("get {}\r\n", key_name("k", key, key_size)).as_bytes());
            s.send(&d).context("sending a get")?;
        }
        for _ in k..end {
            if s.recv(&mut buf).is_err() {
                break;
            }
        }
        k = end;
    }
    Ok(())
}

/// Sets up `setup`, warms it, and measures max throughput, latency at the workload's fixed rate
/// (set from the first setup's max throughput) and, where XDP answers, per-program cost.
fn run_setup(
    opts: &PaperOpts,
    timing: &Timing,
    wl: &Workload,
    setup: Setup,
    rate: &mut Option<f64>,
) -> Result<SetupResult> {
    let mut r = SetupResult::empty(wl, setup);
    if setup.with_inkcache() && opts.inkcache.is_none() {
        r.skipped =
            Some("inkcache binary not found (build it: cargo build --release -p inkcache)".into());
        return Ok(r);
    }
    if setup.server() == Some(ServerKind::Inkcached) && opts.inkcached.is_none() {
        r.skipped = Some("inkcached binary not found".into());
        return Ok(r);
    }
    let rig = Rig::new(opts, setup)?;
    r.server_cmd = rig.server.as_ref().map(|s| s.cmd.clone());
    r.xdp_mode = Some(rig.xdp_mode.clone());
    let mut cfg = wl.run_config(opts.inflight);
    rig.warm(wl, &cfg, timing)?;

    cfg.duration = Duration::from_secs_f64(timing.measure_s);
    let max = rig.measure(&cfg).context("max throughput run")?;
    let r_lat = *rate.get_or_insert_with(|| {
        // Half the baseline's max, rounded down to a thousand.
        ((max.throughput * 0.5 / 1000.0).floor() * 1000.0).max(1000.0)
    });
    r.max = Some(max);

    let mut lc = cfg.clone();
    lc.rate = Some(r_lat);
    r.latency = Some(rig.measure(&lc).context("latency run")?);

    if setup.with_inkcache() || setup == Setup::XdpEcho {
        let mut pc = cfg.clone();
        pc.duration = Duration::from_secs_f64(timing.profile_s);
        match rig.profile(&pc) {
            Ok((progs, ns)) => {
                r.bpf_profile = progs;
                r.profile_server_ns_per_req = Some(ns);
            }
            Err(e) => eprintln!("inkbench scenario: profiling {}: {e:#}", setup.label()),
        }
    }
    Ok(r)
}

/// `memcaslap -U` from the client namespace (pinned to the client CPU) against `setup`.
fn run_memcaslap(opts: &PaperOpts, timing: &Timing, setup: Setup) -> Memcaslap {
    let server = format!("{SRV_V4}:{PORT}");
    let secs = format!("{}s", timing.memcaslap_s);
    let args = [
        "-s", &server, "-U", "-t", &secs, "-T", "1", "-c", "16", "-X", "64",
    ];
    let mut m = Memcaslap {
        setup,
        label: setup.label().into(),
        command: format!("memcaslap {}", args.join(" ")),
        tps: None,
        cmd_get: None,
        get_misses: None,
        kernel: None,
        error: None,
        output_tail: String::new(),
    };
    let r = (|| -> Result<()> {
        let rig = Rig::new(opts, setup)?;
        let k0 = match &rig.inkcache {
            Some(k) => Some(k.stats()?),
            None => None,
        };
        let out = Command::new("ip")
            .args(["netns", "exec", &rig.pair.client.name, "taskset", "-c"])
            .arg(CLIENT_CPU.to_string())
            .arg("memcaslap")
            .args(args)
            .output()
            .context("running memcaslap (Debian package libmemcached-tools)")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        m.output_tail = lines[lines.len().saturating_sub(6)..].join("\n");
        if !out.status.success() {
            bail!(
                "memcaslap failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if let (Some(k), Some(k0)) = (&rig.inkcache, k0) {
            m.kernel = Some(stats_delta(&k0, &k.stats()?));
        }
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        m.cmd_get = field("cmd_get");
        m.get_misses = field("get_misses");
        // "Run time: 5.0s Ops: 443013 TPS: 88572 Net_rate: 10.3M/s"
        m.tps = text
            .lines()
            .rev()
            .find_map(|l| l.split("TPS:").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok());
        if m.tps.is_none() {
            bail!("no TPS in memcaslap's output");
        }
        Ok(())
    })();
    if let Err(e) = r {
        eprintln!("inkbench scenario: memcaslap / {}: {e:#}", setup.label());
        m.error = Some(format!("{e:#}"));
    }
    m
}

/// The report printed at the end of a run (the markdown of results.md).
pub fn summary(res: &PaperResults) -> String {
    report::markdown(res)
}

/// Reads a results.json, derives ratios and goals again, and rewrites the outputs into `out`.
pub fn rewrite(json: &Path, out: &Path) -> Result<PaperResults> {
    let text =
        std::fs::read_to_string(json).with_context(|| format!("reading {}", json.display()))?;
    let mut res: PaperResults = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a paper results.json", json.display()))?;
    report::derive(&mut res);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    write_outputs(&res, out)?;
    Ok(res)
}
