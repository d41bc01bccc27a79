//! `inkbench`: load generator (`run`) and latency sampler (`sample`) for memcached servers.

use std::io::IsTerminal;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use inkbench::{parse_duration, Popularity, Proto, RunConfig, RunControl, ValueSize};

#[derive(Parser)]
#[command(
    name = "inkbench",
    version,
    about = "Load generator and latency sampler for memcached-protocol servers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Generate load (closed loop with --inflight, open loop with --rate) and report
    /// throughput, hits and latency percentiles.
    Run(RunArgs),
    /// Sample latency: one get per --interval on a pool of blocking workers, every sample's
    /// timing saved to DIR/samples.csv and samples.json, and a timeline plot DIR/timeline.svg.
    Sample(SampleArgs),
    /// Consistency check: writers over TCP, readers over UDP on a small hot key set; reports
    /// every read that returned a stale or expired value. Exits with status 3 on violations.
    Check(CheckArgs),
    /// Benchmark scenarios that set up namespaces, servers and the kernel cache themselves.
    #[command(subcommand)]
    Scenario(ScenarioCmd),
    /// Cache hit ratio, simulated on one Zipf trace: the kernel table (8-way index + item log,
    /// as bpf/table.h), the direct-mapped table it replaced and an ideal LRU, same memory each.
    /// With --preload ADDR: set every key of the mix over TCP instead (for a kernel measurement).
    Hitratio(HitRatioArgs),
}

#[derive(Args, Clone)]
struct HitRatioArgs {
    /// Distinct keys; key i is Zipf rank i, named as `run` names it.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Key length in bytes (prefix "k" + zero-padded id).
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    /// Zipf exponent of the key popularity.
    #[arg(long, default_value_t = 0.99)]
    zipf: f64,
    /// Requests simulated before the measured window (not counted).
    #[arg(long, default_value_t = 5_000_000)]
    warmup: u64,
    /// Measured requests.
    #[arg(long, default_value_t = 10_000_000)]
    requests: u64,
    /// Value sizes (repeatable): fixed:N, etc (Facebook ETC's generalized Pareto, truncated to
    /// fit one datagram) or etc:MAX (truncated at MAX bytes) [default: fixed:32 and etc].
    #[arg(long = "mix")]
    mixes: Vec<inkbench::hitratio::Mix>,
    /// Cache budget in % of the total item bytes (repeatable) [default: 1 and 10].
    #[arg(long = "budget-pct")]
    budget_pct: Vec<f64>,
    /// Cache budget in MiB, as --cache-mb (repeatable; with or instead of --budget-pct).
    #[arg(long = "budget-mib")]
    budget_mib: Vec<u32>,
    /// The --item-bytes the kernel table is split for [default: the mix's mean item, rounded].
    #[arg(long)]
    item_bytes: Option<u32>,
    /// Seeds the trace and the value sizes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also draw the hit ratios as a bar chart (SVG) into this file.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
    /// Print one JSON object instead of the tables.
    #[arg(long)]
    json: bool,
    /// Simulate nothing: set every key over TCP at this address, with its value size in the one
    /// --mix given (memcached must hold them all: give it enough -m).
    #[arg(long, value_parser = parse_addr)]
    preload: Option<SocketAddr>,
}

#[derive(Subcommand)]
enum ScenarioCmd {
    /// Stock memcached vs memcached+inkcache vs the XDP echo floor (and inkcached) on a target
    /// and a non-target workload; writes results.json, results.md and SVG plots to --out.
    Paper(PaperArgs),
}

#[derive(Args, Clone)]
struct PaperArgs {
    /// Short runs and a small key space (under 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Output directory.
    #[arg(long, default_value = "docs/results")]
    out: std::path::PathBuf,
    /// The inkcache CLI [default: next to this binary, or $INKCACHE_BIN].
    #[arg(long)]
    inkcache: Option<std::path::PathBuf>,
    /// The inkcached server [default: next to this binary, or $INKCACHED_BIN].
    #[arg(long)]
    inkcached: Option<std::path::PathBuf>,
    #[arg(long, default_value = "/usr/bin/memcached")]
    memcached: std::path::PathBuf,
    /// Worker threads of memcached and inkcached (they get one core).
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// UDP requests in flight in the max-throughput runs.
    #[arg(long, default_value_t = 32)]
    inflight: usize,
    /// Skip the memcaslap cross-check.
    #[arg(long)]
    no_memcaslap: bool,
    /// Run nothing: re-derive ratios and goals from this results.json and rewrite the report
    /// and plots into --out.
    #[arg(long)]
    from_json: Option<std::path::PathBuf>,
}

#[derive(Args, Clone)]
struct CheckArgs {
    /// Server address, HOST:PORT: TCP for the writers, UDP for the readers.
    #[arg(long, value_parser = parse_addr)]
    server: SocketAddr,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Hot keys (every 4th holds a number for incr).
    #[arg(long, default_value_t = 32)]
    keys: usize,
    /// Writer threads (one TCP connection each).
    #[arg(long, default_value_t = 4)]
    writers: usize,
    /// Reader threads (one UDP socket each, one get outstanding).
    #[arg(long, default_value_t = 4)]
    readers: usize,
    /// Keys written only every few seconds with short TTLs (expiry probes; 10% of reads).
    #[arg(long, default_value_t = 4)]
    expiry_keys: usize,
    /// Writes per pipelined batch: 1 to N.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    #[arg(long, default_value_t = 0.15)]
    noreply_ratio: f64,
    /// Share of set/add/cas/touch with a TTL of 1 or 2 s.
    #[arg(long, default_value_t = 0.2)]
    ttl_ratio: f64,
    /// Chance per write of a flush_all instead.
    #[arg(long, default_value_t = 0.0002)]
    flush_ratio: f64,
    /// Share of gets asking for 2 to 4 keys.
    #[arg(long, default_value_t = 0.2)]
    multiget_ratio: f64,
    /// Share of sets with 1500-3000 byte values (multi-datagram replies).
    #[arg(long, default_value_t = 0.03)]
    large_ratio: f64,
    /// Slack past the latest possible expiry before a read counts as expired (memcached's
    /// clock has whole-second ticks).
    #[arg(long, default_value = "2500ms", value_parser = dur)]
    expiry_slack: Duration,
    /// UDP reply timeout.
    #[arg(long, default_value = "1s", value_parser = dur)]
    timeout: Duration,
    /// Example violations shown per kind.
    #[arg(long, default_value_t = 5)]
    examples: usize,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct SampleArgs {
    /// Server address, HOST:PORT (IPv6: [::1]:11211).
    #[arg(long, value_parser = parse_addr)]
    server: SocketAddr,
    /// Transport of the samples: udp or tcp.
    #[arg(long, default_value = "udp")]
    proto: Proto,
    /// Time between samples.
    #[arg(long, default_value = "1ms", value_parser = dur)]
    interval: Duration,
    #[arg(long, default_value = "10s", value_parser = dur)]
    duration: Duration,
    /// Blocking worker threads (a stalled request holds only one).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// A sample unanswered after this is a timeout.
    #[arg(long, default_value = "1s", value_parser = dur)]
    timeout: Duration,
    /// Keys sampled uniformly from 0..N (named as `run` names them).
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Set every key once over TCP first.
    #[arg(long)]
    preload: bool,
    /// TCP address for the preload [default: --server].
    #[arg(long, value_parser = parse_addr)]
    admin: Option<SocketAddr>,
    /// Output directory.
    #[arg(long)]
    out: std::path::PathBuf,
    /// Also run a load in the background while sampling (see the --load-* options).
    #[arg(long)]
    with_load: bool,
    /// Background load: transport.
    #[arg(long, default_value = "udp")]
    load_proto: Proto,
    /// Background load: open-loop rate (req/s); closed loop if absent.
    #[arg(long)]
    load_rate: Option<f64>,
    /// Background load: closed-loop requests in flight.
    #[arg(long)]
    load_inflight: Option<usize>,
    #[arg(long, default_value_t = 1)]
    load_connections: usize,
    #[arg(long, default_value_t = 0.9)]
    load_get_ratio: f64,
    #[arg(long, default_value = "100")]
    load_value_size: ValueSize,
    #[arg(long, default_value = "uniform")]
    load_popularity: Popularity,
    /// Print the summary as JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_addr(s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("bad address {s:?} (expected HOST:PORT, [::1]:PORT for IPv6)"))?
        .next()
        .with_context(|| format!("{s:?} resolves to no address"))
}

fn dur(s: &str) -> Result<Duration> {
    parse_duration(s)
}

#[derive(Args, Clone)]
struct RunArgs {
    /// Server address, HOST:PORT (IPv6: [::1]:11211).
    #[arg(long, value_parser = parse_addr)]
    server: SocketAddr,
    /// Transport: udp or tcp.
    #[arg(long, default_value = "udp")]
    proto: Proto,
    /// Fraction of requests that are gets; the rest are sets.
    #[arg(long, default_value_t = 0.9)]
    get_ratio: f64,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 10_000)]
    keys: u64,
    /// Key length in bytes (prefix "k" + zero-padded id).
    #[arg(long, default_value_t = 16)]
    key_size: usize,
    /// Value size of sets: N or uniform:MIN:MAX.
    #[arg(long, default_value = "100")]
    value_size: ValueSize,
    /// Key popularity: uniform or zipf:S.
    #[arg(long, default_value = "uniform")]
    popularity: Popularity,
    /// Keys per get.
    #[arg(long, default_value_t = 1)]
    multiget: usize,
    /// TCP: requests outstanding per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// TCP connections or UDP sockets.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Closed loop: requests outstanding in total [default: connections x pipeline for TCP,
    /// 32 for UDP].
    #[arg(long, conflicts_with = "rate")]
    inflight: Option<usize>,
    /// Open loop: requests per second in total, paced by absolute send times.
    #[arg(long)]
    rate: Option<f64>,
    /// Measured time (10s, 500ms, 2m).
    #[arg(long, default_value = "5s", value_parser = dur)]
    duration: Duration,
    /// Unmeasured time before the measurement.
    #[arg(long, default_value = "1s", value_parser = dur)]
    warmup: Duration,
    /// Per-request timeout (UDP requests unanswered after it are lost).
    #[arg(long, default_value = "1s", value_parser = dur)]
    timeout: Duration,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Set every key once over TCP before the run.
    #[arg(long)]
    preload: bool,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// TCP address for the preload and stats [default: --server].
    #[arg(long, value_parser = parse_addr)]
    admin: Option<SocketAddr>,
    /// Do not read the server's stats before and after.
    #[arg(long)]
    no_server_stats: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

impl RunArgs {
    fn config(&self) -> RunConfig {
        let mut c = RunConfig::new(self.server);
        c.proto = self.proto;
        c.get_ratio = self.get_ratio;
        c.keys = self.keys;
        c.key_size = self.key_size;
        c.value_size = self.value_size;
        c.popularity = self.popularity;
        c.multiget = self.multiget;
        c.pipeline = self.pipeline;
        c.connections = self.connections;
        c.inflight = self.inflight;
        c.rate = self.rate;
        c.duration = self.duration;
        c.warmup = self.warmup;
        c.timeout = self.timeout;
        c.seed = self.seed;
        c.preload = self.preload;
        c.threads = self.threads;
        c.admin = self.admin;
        c.server_stats = !self.no_server_stats;
        c
    }
}

/// Runs `f` with a progress bar on stderr if it is a terminal.
fn with_progress<T>(total: Duration, ctl: &RunControl, f: impl FnOnce() -> Result<T>) -> Result<T> {
    if !std::io::stderr().is_terminal() {
        return f();
    }
    let bar = indicatif::ProgressBar::new(total.as_millis() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {elapsed}/{duration} {msg}")
            .expect("valid template"),
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let t0 = std::time::Instant::now();
            while !done.load(Ordering::Relaxed) {
                let el = t0.elapsed();
                bar.set_position((el.as_millis() as u64).min(total.as_millis() as u64));
                bar.set_message(format!(
                    "{} answered",
                    ctl.completed.load(Ordering::Relaxed)
                ));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        let r = f();
        done.store(true, Ordering::Relaxed);
        r
    })
}

fn cmd_run(a: &RunArgs) -> Result<()> {
    let cfg = a.config();
    let ctl = RunControl::new();
    let res = with_progress(cfg.warmup + cfg.duration, &ctl, || {
        inkbench::run_with(&cfg, &ctl)
    })?;
    if a.json {
        println!("{}", serde_json::to_string(&res)?);
    } else {
        print!("{}", res.table());
    }
    Ok(())
}

fn cmd_sample(a: &SampleArgs) -> Result<()> {
    let mut c = inkbench::SampleConfig::new(a.server);
    c.proto = a.proto;
    c.interval = a.interval;
    c.duration = a.duration;
    c.workers = a.workers;
    c.timeout = a.timeout;
    c.keys = a.keys;
    c.key_size = a.key_size;
    c.seed = a.seed;
    c.preload = a.preload;
    c.admin = a.admin;
    if a.with_load {
        let mut l = RunConfig::new(a.server);
        l.proto = a.load_proto;
        l.rate = a.load_rate;
        l.inflight = a.load_inflight;
        l.connections = a.load_connections;
        l.get_ratio = a.load_get_ratio;
        l.value_size = a.load_value_size;
        l.popularity = a.load_popularity;
        l.keys = a.keys;
        l.key_size = a.key_size;
        l.admin = a.admin;
        l.seed = a.seed.wrapping_add(1);
        l.warmup = Duration::ZERO;
        // Stopped when the sampling ends.
        l.duration = a.duration + Duration::from_secs(1);
        l.validate().context("background load")?;
        c.with_load = Some(l);
    }
    let ctl = RunControl::new();
    let res = with_progress(c.duration, &ctl, || inkbench::sample(&c))?;
    let files = inkbench::sample::write_outputs(&res, &a.out)?;
    if a.json {
        let mut v = serde_json::to_value(&res)?;
        if let Some(o) = v.as_object_mut() {
            o.remove("samples");
        }
        println!("{v}");
    } else {
        let l = &res.latency;
        println!(
            "samples {}  hits {}  misses {}  timeouts {}  errors {}  late sends {}",
            res.count, res.hits, res.misses, res.timeouts, res.errors, res.late_sends
        );
        println!(
            "latency us   min {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
            l.min_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
        );
        if let Some(load) = &res.load {
            println!(
                "background load: {:.0} req/s, lost {}, errors {}",
                load.throughput, load.counters.lost, load.counters.errors
            );
        }
        for f in files {
            println!("wrote {}", f.display());
        }
    }
    Ok(())
}

/// Runs the checker; Ok(true) when it found violations.
fn cmd_check(a: &CheckArgs) -> Result<bool> {
    if !(a.seconds > 0.0 && a.seconds <= 86_400.0) {
        anyhow::bail!("--seconds must be within (0, 86400]");
    }
    let mut c = inkbench::check::CheckConfig::new(a.server);
    c.duration = Duration::from_secs_f64(a.seconds);
    c.seed = a.seed;
    c.keys = a.keys;
    c.writers = a.writers;
    c.readers = a.readers;
    c.expiry_keys = a.expiry_keys;
    c.batch = a.batch;
    c.noreply_ratio = a.noreply_ratio;
    c.ttl_ratio = a.ttl_ratio;
    c.flush_ratio = a.flush_ratio;
    c.multiget_ratio = a.multiget_ratio;
    c.large_ratio = a.large_ratio;
    c.expiry_slack = a.expiry_slack;
    c.timeout = a.timeout;
    c.examples = a.examples;
    let rep = inkbench::check::run(&c)?;
    if a.json {
        println!("{}", serde_json::to_string(&rep)?);
    } else {
        print!("{}", rep.summary());
    }
    Ok(rep.violations > 0)
}

fn cmd_hitratio(a: &HitRatioArgs) -> Result<()> {
    use inkbench::hitratio::{self, Budget, HitRatioConfig};
    let mut c = HitRatioConfig::new();
    c.keys = a.keys;
    c.key_size = a.key_size;
    c.zipf = a.zipf;
    c.warmup = a.warmup;
    c.requests = a.requests;
    c.item_bytes = a.item_bytes;
    c.seed = a.seed;
    if !a.mixes.is_empty() {
        c.mixes = a.mixes.clone();
    }
    if !a.budget_pct.is_empty() || !a.budget_mib.is_empty() {
        c.budgets = a.budget_pct.iter().map(|&p| Budget::Percent(p)).collect();
        c.budgets.extend(
            a.budget_mib
                .iter()
                .map(|&m| Budget::Bytes(m as u64 * 1024 * 1024)),
        );
    }
    if let Some(addr) = a.preload {
        let [mix] = c.mixes[..] else {
            anyhow::bail!("--preload needs exactly one --mix");
        };
        let bytes = hitratio::preload(&c, mix, addr)?;
        println!(
            "set {} keys of {} at {addr}: {bytes} item bytes, mean {:.1}",
            c.keys,
            mix,
            bytes as f64 / c.keys as f64
        );
        return Ok(());
    }
    let res = hitratio::run(&c)?;
    if let Some(p) = &a.plot {
        hitratio::plot(&res, p)?;
    }
    if a.json {
        println!("{}", serde_json::to_string(&res)?);
    } else {
        print!("{}", res.table());
        if let Some(p) = &a.plot {
            println!("wrote {}", p.display());
        }
    }
    Ok(())
}

fn cmd_paper(a: &PaperArgs) -> Result<()> {
    let mut o = inkbench::scenario::PaperOpts::new(a.out.clone(), a.quick);
    if a.inkcache.is_some() {
        o.inkcache = a.inkcache.clone();
    }
    if a.inkcached.is_some() {
        o.inkcached = a.inkcached.clone();
    }
    o.memcached = a.memcached.clone();
    o.server_threads = a.server_threads;
    o.inflight = a.inflight;
    o.memcaslap = !a.no_memcaslap;
    let res = match &a.from_json {
        Some(f) => inkbench::scenario::rewrite(f, &o.out)?,
        None => inkbench::scenario::paper(&o)?,
    };
    print!("{}", inkbench::scenario::summary(&res));
    println!(
        "wrote {}/results.json, results.md and plots",
        o.out.display()
    );
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Sample(a) => cmd_sample(a),
        Cmd::Scenario(ScenarioCmd::Paper(a)) => cmd_paper(a),
        Cmd::Hitratio(a) => cmd_hitratio(a),
        Cmd::Check(a) => match cmd_check(a) {
            Ok(true) => std::process::exit(3),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        },
    };
    if let Err(e) = r {
        eprintln!("inkbench: error: {e:#}");
        std::process::exit(1);
    }
}
