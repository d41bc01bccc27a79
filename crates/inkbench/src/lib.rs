//! inkbench: a load generator and latency sampler for memcached-protocol servers.
//!
//! The engine is a library so that other code (inklab's scenarios, inkmodel's preload) can call
//! it as a function:
//!
//! ```no_run
//! use inkbench::{run, RunConfig, Proto};
//! let mut cfg = RunConfig::new("127.0.0.1:11211".parse().unwrap());
//! cfg.proto = Proto::Udp;
//! cfg.rate = Some(50_000.0); // open loop; None = closed loop with `inflight` outstanding
//! cfg.preload = true;
//! let res = run(&cfg).unwrap();
//! println!("{} req/s, p99 {} us", res.throughput, res.latency.p99_us);
//! ```
//!
//! Modules: [`config`] (what to run), [`workload`] (keys, values, the mix), [`zipf`], [`pacer`]
//! (open-loop schedule), [`udp`] and [`tcp`] (the engines), [`report`] (results),
//! [`sample`] (the latency sampler), [`admin`] (preload and server stats), [`plot`] (SVG).
//!
//! The load generator is a load generator: the consistency checker is `inkcheck`, the benchmark
//! scenarios `inklab`, the table model and hit-ratio simulation `inkmodel`.

pub mod admin;
pub mod config;
pub mod engine;
pub mod pacer;
pub mod plot;
pub mod report;
pub mod sample;
pub mod tcp;
pub mod udp;
pub mod workload;
pub mod zipf;

use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

pub use config::{parse_addr, parse_duration, Popularity, Proto, RunConfig, ValueSize};
pub use engine::RunControl;
pub use report::{Counters, LatencySummary, RunResults, ServerStats};
pub use sample::{sample, SampleConfig, SampleRecord, SampleResults};

/// Runs the load described by `cfg` and returns what it measured.
pub fn run(cfg: &RunConfig) -> Result<RunResults> {
    run_with(cfg, &RunControl::new())
}

/// [`run`], observable and stoppable through `ctl` from another thread.
pub fn run_with(cfg: &RunConfig, ctl: &RunControl) -> Result<RunResults> {
    cfg.validate()?;
    let preloaded = if cfg.preload {
        admin::preload(cfg).context("preload failed")?
    } else {
        0
    };
    let stats_timeout = Duration::from_millis(500);
    let before = if cfg.server_stats {
        admin::stats(cfg.admin_addr(), stats_timeout).ok()
    } else {
        None
    };

    let threads = cfg.effective_threads();
    let inflight = cfg.effective_inflight();
    // Start a little in the future so every thread has its sockets ready.
    let start = Instant::now() + Duration::from_millis(20);
    let win = engine::Window {
        start,
        measure_start: start + cfg.warmup,
        end: start + cfg.warmup + cfg.duration,
    };
    let plans: Vec<engine::ThreadPlan> = (0..threads)
        .map(|t| {
            let share = |n: usize| n / threads + usize::from(t < n % threads);
            engine::ThreadPlan {
                index: t,
                connections: share(cfg.connections),
                inflight: share(inflight).max(1),
                rate: cfg.rate.map(|r| {
                    let r_t = r / threads as f64;
                    // Interleave the threads' schedules.
                    let offset = Duration::from_secs_f64(t as f64 / r);
                    (r_t, start + offset)
                }),
                seed: cfg
                    .seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add(t as u64 + 1),
            }
        })
        .collect();

    let outs: Vec<Result<engine::ThreadOut>> = std::thread::scope(|sc| {
        let handles: Vec<_> = plans
            .iter()
            .map(|p| {
                sc.spawn(move || -> Result<engine::ThreadOut> {
                    let now = Instant::now();
                    if start > now {
                        std::thread::sleep(start - now);
                    }
                    match cfg.proto {
                        Proto::Udp => udp::run_thread(cfg, p, win, ctl),
                        Proto::Tcp => tcp::run_thread(cfg, p, win, ctl),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a load thread panicked")))
            })
            .collect()
    });
    let mut counters = Counters::default();
    let mut hist = report::new_histogram();
    for o in outs {
        let o = o?;
        counters += o.counters;
        hist.add(&o.histogram).context("merging histograms")?;
    }
    let end = match ctl.stopped_at() {
        Some(t) if t < win.end => t.max(win.measure_start),
        _ => win.end,
    };
    let duration_s = end.duration_since(win.measure_start).as_secs_f64();
    let mut res = RunResults::new(cfg.clone(), duration_s, counters, hist);
    res.preloaded = preloaded;
    if let Some(before) = before {
        if let Ok(after) = admin::stats(cfg.admin_addr(), stats_timeout) {
            res.server = Some(admin::stats_delta(&before, &after));
        }
    }
    Ok(res)
}
