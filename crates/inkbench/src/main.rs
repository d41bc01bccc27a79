//! `inkbench`: load generator (`run`) and latency sampler (`sample`) for memcached servers.
//! (The consistency checker is `inkcheck`, the benchmark scenarios `inklab`, the hit-ratio
//! simulation `inkmodel hitratio`.)

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use inkbench::{parse_addr, parse_duration, Popularity, Proto, RunConfig, RunControl, ValueSize};

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

fn dur(s: &str) -> Result<Duration> {
    parse_duration(s)
}

#[derive(Args, Clone)]
struct RunArgs {
    #[command(flatten)]
    cfg: RunConfig,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
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
    let cfg = a.cfg.clone();
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

fn main() {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Sample(a) => cmd_sample(a),
    };
    if let Err(e) = r {
        eprintln!("inkbench: error: {e:#}");
        std::process::exit(1);
    }
}
