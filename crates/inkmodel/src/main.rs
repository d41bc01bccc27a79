//! `inkmodel`: the kernel table model's command line (`inkmodel hitratio`).

use std::net::{SocketAddr, ToSocketAddrs};

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use inkmodel::hitratio::{self, Budget, HitRatioConfig, Mix};

#[derive(Parser)]
#[command(
    name = "inkmodel",
    version,
    about = "A model of inkcache's kernel table: hit-ratio simulations"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Cache hit ratio, simulated on one Zipf trace: the kernel table (8-way index + item log,
    /// as bpf/table.h), the direct-mapped table it replaced and an ideal LRU, same memory each.
    /// With --preload ADDR: set every key of the mix over TCP instead (for a kernel measurement).
    Hitratio(HitRatioArgs),
}

/// The options of `hitratio`; their defaults are [`HitRatioConfig::new`]'s.
#[derive(Args, Clone)]
struct HitRatioArgs {
    /// Distinct keys; key i is Zipf rank i, named as `inkbench run` names it.
    #[arg(long, default_value_t = HitRatioConfig::new().keys)]
    keys: u64,
    /// Key length in bytes (prefix "k" + zero-padded id).
    #[arg(long, default_value_t = HitRatioConfig::new().key_size)]
    key_size: usize,
    /// Zipf exponent of the key popularity.
    #[arg(long, default_value_t = HitRatioConfig::new().zipf)]
    zipf: f64,
    /// Requests simulated before the measured window (not counted).
    #[arg(long, default_value_t = HitRatioConfig::new().warmup)]
    warmup: u64,
    /// Measured requests.
    #[arg(long, default_value_t = HitRatioConfig::new().requests)]
    requests: u64,
    /// Value sizes (repeatable): fixed:N, etc (Facebook ETC's generalized Pareto, truncated to
    /// fit one datagram) or etc:MAX (truncated at MAX bytes) [default: fixed:32 and etc].
    #[arg(long = "mix")]
    mixes: Vec<Mix>,
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
    #[arg(long, default_value_t = HitRatioConfig::new().seed)]
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

fn parse_addr(s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("bad address {s:?} (expected HOST:PORT, [::1]:PORT for IPv6)"))?
        .next()
        .with_context(|| format!("{s:?} resolves to no address"))
}

fn cmd_hitratio(a: &HitRatioArgs) -> Result<()> {
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
        inkmodel::plot(&res, p)?;
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

fn main() {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Hitratio(a) => cmd_hitratio(a),
    };
    if let Err(e) = r {
        eprintln!("inkmodel: error: {e:#}");
        std::process::exit(1);
    }
}
