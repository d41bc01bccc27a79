//! inklab: inkcache's benchmark scenarios. `inklab paper`: the side-by-side benchmark of the
//! inkcache paper. Stock memcached, memcached behind inkcache, the XDP echo floor, and inkcached
//! (alone and behind inkcache), on a workload the kernel cache targets and on one it cannot serve,
//! in one invocation.
//!
//! Topology (2 cores): a fresh pair of network namespaces per configuration, joined by a veth.
//! The client side (the load generator and the client veth's threaded NAPI kthread) is pinned to
//! CPU0. The server side (the server process and the server veth's threaded NAPI kthread, where
//! every XDP program runs) is pinned to CPU1. Every configuration has an XDP program on both
//! veth ends (XDP_PASS where nothing else is attached), so packets always take the NAPI path and
//! the server's receive work is always done on CPU1. Server cost per request = CPU1 busy time
//! (from /proc/stat) / requests answered.

//!
//! Files: this one (options, workloads, results, [`paper`]), `topology.rs` (namespaces, XDP,
//! pinning, servers, the kernel cache: one configuration set up and measured), `run.rs` (a
//! configuration from warm-up to profile; memcaslap), `rounds.rs` (`--rounds`: the target's
//! configurations measured in interleaved rounds), `cost.rs` (server CPU and eBPF program
//! cost), [`xdp`] (the echo floor and pass programs of `bpf/lab/`, built by this crate),
//! `report.rs` (ratios, goals, markdown), `plots.rs` (SVG), [`pagewalk`] (`inklab pagewalk`:
//! what a miss costs an XDP program by the pages of its map, on a CPU that slept or not). The
//! load is inkbench's, run as a library; the kernel cache is attached with the `inkcache` CLI and
//! its counters read through the inkcache library.

mod cost;
pub mod lock;
pub mod pagewalk;
mod plots;
mod report;
mod rounds;
mod run;
mod skel;
mod topology;
pub mod xdp;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inkbench::{LatencySummary, Popularity, Proto, RunConfig, ValueSize};
use serde::{Deserialize, Serialize};
use testkit::SRV_V4;

pub use rounds::RoundPoint;
use run::{run_memcaslap, run_setup};
use topology::{ensure_root, pin_self, read_trim};

/// The memcached port used inside the namespaces.
pub const PORT: u16 = 11211;
/// CPU of the client side.
pub const CLIENT_CPU: usize = 0;
/// CPU of the server side.
pub const SERVER_CPU: usize = 1;

/// What `inklab paper` runs and where it writes.
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
    /// Measurement only: inkcache is attached with `--debug-stop-stage` this (XDP passes gets
    /// after that stage of the hit; 0: never), to time the hit's stages live
    /// (docs/results/hitcost.md).
    #[serde(default)]
    pub stop_stage: u32,
    /// Keep the server CPU from halting between packets with a `SCHED_IDLE` thread that yields in
    /// a loop, and count the server's cost as that CPU's busy time less the loop's: capacity as on
    /// a core that a load saturates (docs/results/hitcost.md, seventeenth run).
    #[serde(default)]
    pub server_awake: bool,
    /// Measure the target workload's capacity again in this many interleaved rounds, every
    /// configuration set up at once and measured in turn (`rounds.rs`; 0: none). The goals then
    /// use the median of the rounds' ratios.
    #[serde(default)]
    pub rounds: u32,
    /// The key space of every workload (None: 100,000, or 10,000 with `quick`). Not a paper run
    /// unless the default: a smaller one shows what the costs are with every key's lines in the
    /// caches.
    #[serde(default)]
    pub keys: Option<u64>,
}

impl PaperOpts {
    /// Where `inklab paper` writes by default (the committed results).
    pub const DEFAULT_OUT: &'static str = "docs/results";

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
            stop_stage: 0,
            server_awake: false,
            rounds: 0,
            keys: None,
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

/// The key space of a paper run: 100,000 keys, or 10,000 when quick.
pub fn default_keys(quick: bool) -> u64 {
    if quick {
        10_000
    } else {
        100_000
    }
}

/// The workloads of the paper scenario over `keys` keys (None: [`default_keys`]).
pub fn workloads(quick: bool, keys: Option<u64>) -> Vec<Workload> {
    let keys = keys.unwrap_or(default_keys(quick));
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
    /// One configuration's closed-loop run in an interleaved round (`--rounds`).
    #[serde(default)]
    pub round_s: f64,
}

impl Timing {
    fn new(quick: bool) -> Self {
        if quick {
            Timing {
                warm_s: 0.3,
                measure_s: 1.0,
                profile_s: 0.5,
                memcaslap_s: 2,
                round_s: 1.0,
            }
        } else {
            Timing {
                warm_s: 2.0,
                measure_s: 8.0,
                profile_s: 3.0,
                memcaslap_s: 5,
                round_s: 4.0,
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

/// Per-program cost from the BPF run-time statistics (run_time_ns / run_cnt).
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
    /// The target workload's interleaved capacity rounds (`--rounds`), in the order measured.
    #[serde(default)]
    pub rounds: Vec<RoundPoint>,
    /// Why the rounds stopped, if they failed (the main pass's results stand, and the rounds'
    /// points measured before the failure are kept).
    #[serde(default)]
    pub rounds_error: Option<String>,
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
    /// [`PaperOpts::stop_stage`] of the run (0: a paper run).
    #[serde(default)]
    pub stop_stage: u32,
    /// [`PaperOpts::server_awake`] of the run.
    #[serde(default)]
    pub server_awake: bool,
    /// [`PaperOpts::rounds`] of the run.
    #[serde(default)]
    pub rounds: u32,
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

/// What `--server-awake` adds to [`TOPOLOGY`].
pub const AWAKE: &str = " less the CPU time of a SCHED_IDLE thread that yields in a loop on \
CPU1, which keeps CPU1 from halting between packets (`--server-awake`: as on a core a load \
saturates; a server process can still wait behind the loop now and then, so its latency is not \
a default run's)";

/// Runs the paper scenario and writes results.json, results.md and the plots into `opts.out`.
pub fn paper(opts: &PaperOpts) -> Result<PaperResults> {
    let t0 = Instant::now();
    ensure_root()?;
    let _stats_off = cost::StatsSysctlOff::new()?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("creating {}", opts.out.display()))?;
    // The client side runs on CPU0: this thread and every thread and process it starts.
    pin_self(CLIENT_CPU)?;
    let timing = Timing::new(opts.quick);
    let wls = workloads(opts.quick, opts.keys);
    let mut results = Vec::new();
    let mut rates = BTreeMap::new();
    let mut memcaslap = Vec::new();
    let mut rounds = Vec::new();
    let mut rounds_error = None;
    for wl in &wls {
        let mut rate: Option<f64> = None;
        for &setup in &wl.setups {
            eprintln!("inklab: {} / {} ...", wl.name, setup.label());
            let t_setup = Instant::now();
            let mut r = run_setup(opts, &timing, wl, setup, &mut rate);
            if let Err(e) = &r {
                eprintln!("inklab: {e:#}; trying once more");
                r = run_setup(opts, &timing, wl, setup, &mut rate);
            }
            eprintln!("  ({:.1} s)", t_setup.elapsed().as_secs_f64());
            let mut res = match r {
                Ok(r) => r,
                Err(e) => {
                    if setup == Setup::Memcached {
                        return Err(e.context(format!("{} / {}", wl.name, setup.label())));
                    }
                    eprintln!("inklab: {} / {} failed: {e:#}", wl.name, setup.label());
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
                eprintln!("inklab: memcaslap -U / {} ...", setup.label());
                memcaslap.push(run_memcaslap(opts, &timing, setup));
            }
        }
        if wl.name == "target" && opts.rounds > 0 {
            eprintln!(
                "inklab: {} / {} interleaved rounds ...",
                wl.name, opts.rounds
            );
            if let Err(e) = rounds::capacity_rounds(opts, &timing, wl, opts.rounds, &mut rounds) {
                eprintln!("inklab: interleaved rounds failed: {e:#}");
                rounds_error = Some(format!("{e:#}"));
            }
        }
    }
    let meta = Meta {
        scenario: "paper".into(),
        quick: opts.quick,
        stop_stage: opts.stop_stage,
        server_awake: opts.server_awake,
        rounds: opts.rounds,
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
        topology: if opts.server_awake {
            format!("{TOPOLOGY}{AWAKE}")
        } else {
            TOPOLOGY.into()
        },
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
        rounds,
        rounds_error,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_override_every_workloads_key_space() {
        for quick in [false, true] {
            let default = if quick { 10_000 } else { 100_000 };
            assert!(workloads(quick, None).iter().all(|w| w.keys == default));
            let wls = workloads(quick, Some(1_000));
            assert!(wls.iter().all(|w| w.keys == 1_000), "{wls:?}");
            assert!(
                wls[0].description.contains("1000 keys"),
                "{}",
                wls[0].description
            );
        }
    }
}
