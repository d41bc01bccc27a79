//! `inklab`: inkcache's benchmark scenarios (`inklab paper`).

use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use inklab::PaperOpts;

#[derive(Parser)]
#[command(
    name = "inklab",
    version,
    about = "Benchmark scenarios that set up namespaces, servers and the kernel cache themselves"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Stock memcached vs memcached+inkcache vs the XDP echo floor (and inkcached) on a target
    /// and a non-target workload; writes results.json, results.md and SVG plots to --out.
    Paper(PaperArgs),
    /// What a cache miss costs an XDP program by the pages its map lives in (4 KiB vmalloc'd
    /// pages, as the kernel cache's maps, against the direct map's), on a CPU that has just slept
    /// or not (docs/results/hitcost.md, nineteenth run); prints a markdown table.
    Pagewalk(PagewalkArgs),
}

/// The options of `pagewalk`.
#[derive(Args, Clone)]
struct PagewalkArgs {
    /// Lines in each chain of dependent reads, drawn at random from 60-64 MiB.
    #[arg(long, default_value_t = 3000)]
    lines: usize,
    /// How long the CPU sleeps before each run, in microseconds (0: not at all), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0,5,20,100")]
    sleeps_us: Vec<u64>,
    /// Runs of each program per sleep time.
    #[arg(long, default_value_t = 2000)]
    runs: usize,
    /// The CPU the programs run on (the benchmarks' server CPU).
    #[arg(long, default_value_t = inklab::SERVER_CPU)]
    cpu: usize,
}

fn cmd_pagewalk(a: &PagewalkArgs) -> Result<()> {
    let o = inklab::pagewalk::PagewalkOpts {
        lines: a.lines,
        sleeps_us: a.sleeps_us.clone(),
        runs: a.runs,
        cpu: a.cpu,
    };
    let _lock = inklab::lock::bench_lock()?;
    let rows = inklab::pagewalk::pagewalk(&o)?;
    print!("{}", inklab::pagewalk::table(&o, &rows));
    Ok(())
}

/// The options of `paper`; their defaults are [`PaperOpts::new`]'s.
#[derive(Args, Clone)]
struct PaperArgs {
    /// Short runs and a small key space (under 2 minutes).
    #[arg(long)]
    quick: bool,
    /// Output directory.
    #[arg(long, default_value = PaperOpts::DEFAULT_OUT)]
    out: PathBuf,
    /// The inkcache CLI [default: next to this binary, or $INKCACHE_BIN].
    #[arg(long)]
    inkcache: Option<PathBuf>,
    /// The inkcached server [default: next to this binary, or $INKCACHED_BIN].
    #[arg(long)]
    inkcached: Option<PathBuf>,
    #[arg(long, default_value_os_t = defaults().memcached)]
    memcached: PathBuf,
    /// Worker threads of memcached and inkcached (they get one core).
    #[arg(long, default_value_t = defaults().server_threads)]
    server_threads: usize,
    /// UDP requests in flight in the max-throughput runs.
    #[arg(long, default_value_t = defaults().inflight)]
    inflight: usize,
    /// Skip the memcaslap cross-check.
    #[arg(long)]
    no_memcaslap: bool,
    /// Measurement only: attach inkcache so that XDP passes gets after this stage of the hit
    /// (bpf/inkcache_xdp.bpf.c STAGE_*; 0: never), to time the stages live under bpf_stats
    /// (docs/results/hitcost.md). The results are not a valid paper run.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=6))]
    stop_stage: u32,
    /// Keep the server CPU from halting between packets (a SCHED_IDLE thread yielding in a loop
    /// on it) and count the server's cost as that CPU's busy time less the loop's: capacity as on
    /// a core a load saturates, which a single client cannot do on 2 CPUs.
    #[arg(long)]
    server_awake: bool,
    /// Measure the target workload's capacity again in N interleaved rounds: every configuration
    /// set up at once and measured in turn, so that the host's drift weighs on all alike; the
    /// goals then use the median of the rounds' ratios (0: none).
    #[arg(long, default_value_t = defaults().rounds)]
    rounds: u32,
    /// The key space of every workload [default: 100000, or 10000 with --quick]. Another count
    /// is not a paper run: a small one shows the costs with every key's lines in the caches.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    keys: Option<u64>,
    /// Run nothing: re-derive ratios and goals from this results.json and rewrite the report
    /// and plots into --out.
    #[arg(long)]
    from_json: Option<PathBuf>,
}

fn defaults() -> PaperOpts {
    PaperOpts::new(PaperOpts::DEFAULT_OUT.into(), false)
}

fn cmd_paper(a: &PaperArgs) -> Result<()> {
    let mut o = PaperOpts::new(a.out.clone(), a.quick);
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
    o.stop_stage = a.stop_stage;
    o.server_awake = a.server_awake;
    o.rounds = a.rounds;
    o.keys = a.keys;
    let res = match &a.from_json {
        Some(f) => inklab::rewrite(f, &o.out)?,
        None => {
            let _lock = inklab::lock::bench_lock()?;
            inklab::paper(&o)?
        }
    };
    print!("{}", inklab::summary(&res));
    println!(
        "wrote {}/results.json, results.md and plots",
        o.out.display()
    );
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Paper(a) => cmd_paper(a),
        Cmd::Pagewalk(a) => cmd_pagewalk(a),
    };
    if let Err(e) = r {
        eprintln!("inklab: error: {e:#}");
        std::process::exit(1);
    }
}
