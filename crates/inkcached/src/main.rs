//! inkcached: a memcached-compatible server. See README.md.

mod afxdp;
mod bypass;
mod coop;
mod exec;
mod net;
mod stats;
mod steer;
mod store;

use anyhow::{bail, Context, Result};
use clap::Parser;
use exec::{Settings, Shared};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// memcached-compatible cache server (text and meta protocol, TCP and UDP).
#[derive(Parser, Debug)]
#[command(name = "inkcached", version, disable_help_flag = true)]
struct Cli {
    /// TCP port to listen on (0 = off)
    #[arg(short = 'p', long = "port", default_value_t = 11211)]
    port: u16,
    /// UDP port to listen on (0 = off, the default as in memcached >= 1.5.6)
    #[arg(short = 'U', long = "udp-port", default_value_t = 0)]
    udp_port: u16,
    /// Interface(s) to listen on, comma separated (default: all)
    #[arg(short = 'l', long = "listen")]
    listen: Vec<String>,
    /// Number of worker threads
    #[arg(short = 't', long = "threads", default_value_t = 4)]
    threads: usize,
    /// Item memory in megabytes
    #[arg(short = 'm', long = "memory-limit", default_value_t = 64)]
    memory_mb: u64,
    /// Max item size (bytes, or with k/m suffix)
    #[arg(short = 'I', long = "max-item-size", default_value = "1m", value_parser = parse_size)]
    max_item: usize,
    /// Max simultaneous connections
    #[arg(short = 'c', long = "conn-limit", default_value_t = 1024)]
    conns: usize,
    /// Verbose (repeat for more)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
    /// User to run as (accepted for compatibility; inkcached does not change user)
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
    /// Print help
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    help: Option<bool>,
    #[command(flatten)]
    bypass: bypass::Opts,
}

fn parse_size(s: &str) -> Result<usize, String> {
    let (num, mul) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 1024),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 1024 * 1024),
        _ => (s, 1),
    };
    let n: usize = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let v = n * mul;
    if !(1024..=1 << 30).contains(&v) {
        return Err(format!("item size {v} out of range (1k..1g)"));
    }
    Ok(v)
}

fn listen_addrs(cli: &Cli) -> Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    for l in &cli.listen {
        for a in l.split(',').filter(|a| !a.is_empty()) {
            let a = a.trim_start_matches('[').trim_end_matches(']');
            out.push(
                a.parse::<IpAddr>()
                    .with_context(|| format!("bad -l address {a:?}"))?,
            );
        }
    }
    if out.is_empty() {
        // like memcached: every IPv4 and IPv6 address (IPv6 skipped if the host has none)
        out.push(IpAddr::from([0, 0, 0, 0]));
        out.push(IpAddr::from([0u16; 8]));
    }
    Ok(out)
}

/// With no `-l`, the IPv6 wildcard is best effort: hosts without IPv6 still start.
fn optional(cli: &Cli, ip: IpAddr) -> bool {
    cli.listen.is_empty() && ip.is_ipv6()
}

fn run(cli: Cli) -> Result<()> {
    if cli.threads == 0 || cli.threads > 1024 {
        bail!("-t must be between 1 and 1024");
    }
    if cli.port == 0 && cli.udp_port == 0 {
        bail!("both TCP (-p) and UDP (-U) are off");
    }
    let max_bytes = (cli.memory_mb.max(1) as usize) << 20;
    if cli.max_item > max_bytes / 2 {
        bail!(
            "-I {} is larger than half the memory limit (-m)",
            cli.max_item
        );
    }
    let addrs = listen_addrs(&cli)?;
    let n = cli.threads;
    let mut per_worker: Vec<net::WorkerSockets> = (0..n)
        .map(|_| net::WorkerSockets {
            tcp: Vec::new(),
            udp: Vec::new(),
            xsk: Vec::new(),
        })
        .collect();
    for &ip in &addrs {
        // UDP first: once the TCP port accepts connections (what clients and tests take for
        // "ready"), UDP datagrams are already queued rather than refused
        let udp = match cli.udp_port {
            0 => Vec::new(),
            p => match net::bind_group(SocketAddr::new(ip, p), false, n) {
                Ok(v) => v,
                Err(_) if optional(&cli, ip) => continue,
                Err(e) => return Err(e),
            },
        };
        let tcp = match cli.port {
            0 => Vec::new(),
            p => match net::bind_group(SocketAddr::new(ip, p), true, n) {
                Ok(v) => v,
                Err(_) if optional(&cli, ip) => continue,
                Err(e) => return Err(e),
            },
        };
        for (w, s) in tcp.into_iter().enumerate() {
            per_worker[w].tcp.push(s);
        }
        for (w, s) in udp.into_iter().enumerate() {
            per_worker[w].udp.push(s);
        }
    }
    let bypass = bypass::setup(
        &cli.bypass,
        n,
        cli.udp_port,
        &addrs,
        &mut per_worker,
        cli.verbose > 0,
    )?;
    net::PIN_WORKERS.store(bypass.pin_workers, Ordering::Relaxed);
    net::listen(&per_worker)?;
    let settings = Settings {
        tcp_port: cli.port,
        udp_port: cli.udp_port,
        listen: cli.listen.join(","),
        threads: n,
        max_bytes,
        max_conns: cli.conns,
        max_item: cli.max_item,
        verbose: cli.verbose,
    };
    let shared = Arc::new(Shared {
        store: store::Store::new(max_bytes, cli.max_item),
        workers: (0..n).map(|_| Default::default()).collect(),
        settings,
        verbosity: AtomicU32::new(u32::from(cli.verbose)),
        shutdown: AtomicBool::new(false),
        pid: std::process::id(),
    });

    // Block SIGTERM/SIGINT handling to one place: signal-hook registers a handler that feeds
    // this iterator; workers are woken through their mio wakers.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("installing signal handlers")?;
    // A client that goes away must not kill us.
    // SAFETY: setting SIGPIPE to SIG_IGN is async-signal-safe and affects only signal delivery.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }

    let mut wakers = Vec::new();
    let mut handles = Vec::new();
    for (w, socks) in per_worker.into_iter().enumerate() {
        let (poll, waker) = net::new_poll()?;
        wakers.push(waker);
        let sh = shared.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("worker-{w}"))
                .spawn(move || {
                    if let Err(e) = net::run_worker(w, sh.clone(), socks, poll) {
                        eprintln!("inkcached: worker {w}: {e:#}");
                        sh.shutdown.store(true, Ordering::Relaxed);
                    }
                })
                .context("spawning worker")?,
        );
    }
    if cli.verbose > 0 {
        eprintln!(
            "inkcached {}: tcp {} udp {} on {:?}, {n} threads, {} MB, {} shards",
            exec::VERSION,
            cli.port,
            cli.udp_port,
            addrs,
            cli.memory_mb,
            shared.store.shard_count()
        );
    }
    let sig = signals.forever().next();
    if cli.verbose > 0 {
        eprintln!("inkcached: signal {sig:?}, shutting down");
    }
    shared.shutdown.store(true, Ordering::Relaxed);
    for wk in &wakers {
        let _ = wk.wake();
    }
    for h in handles {
        let _ = h.join();
    }
    drop(bypass);
    Ok(())
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind as K;
            if matches!(e.kind(), K::DisplayHelp | K::DisplayVersion) {
                e.exit();
            }
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("inkcached: {first} (see inkcached --help)");
            std::process::exit(64);
        }
    };
    if let Err(e) = run(cli) {
        eprintln!("inkcached: {e:#}");
        std::process::exit(71);
    }
}
