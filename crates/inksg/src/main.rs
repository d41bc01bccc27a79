//! inksg: scatter-gather in the kernel, from the command line.
use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use inksg::{
    bench::{self, BenchOpts, Mode},
    ketama::Hash,
    mc::Pool,
    worker::{Behaviour, SocketWorker, XdpProg},
    AttachOpts, Client, ClientOpts, Delivery, Elem, Policy, Proto, Reducer, Sg, Status, XdpMode,
};

#[derive(Parser)]
#[command(
    version,
    about = "Scatter-gather in the kernel: one send fans out to N workers, XDP gathers the answers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Attach {
    /// Interface(s) the workers are reached through
    #[arg(long = "iface", required = true)]
    ifaces: Vec<String>,
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    xdp_mode: XdpMode,
    /// Bytes of concatenated answers one request may gather
    #[arg(long, default_value_t = 65536)]
    result_bytes: u32,
}

impl Attach {
    fn attach(&self) -> Result<Arc<Sg>> {
        Ok(Arc::new(Sg::attach(&AttachOpts {
            ifaces: self.ifaces.clone(),
            xdp_mode: self.xdp_mode,
            result_bytes: self.result_bytes,
            ..Default::default()
        })?))
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach to interfaces and print the counters every second until interrupted
    Attach {
        #[command(flatten)]
        attach: Attach,
    },
    /// Scatter requests to workers and print what the kernel gathered
    Run {
        #[command(flatten)]
        attach: Attach,
        /// Workers (ADDR:PORT), all IPv4 or all IPv6
        #[arg(long = "worker", required = true)]
        workers: Vec<SocketAddr>,
        /// all, any, or a number of answers
        #[arg(long, default_value = "all")]
        policy: String,
        /// sum|min|max|count:u32|u64:ELEMENTS, or concat
        #[arg(long, default_value = "concat")]
        reduce: String,
        /// Payload (text) sent to every worker
        #[arg(long, default_value = "")]
        payload: String,
        #[arg(long, default_value_t = 100)]
        timeout_ms: u64,
        #[arg(long, default_value_t = 1)]
        count: u32,
        /// Busy-poll instead of sleeping in epoll
        #[arg(long)]
        busy_poll: bool,
    },
    /// Multi-get over a pool of memcached servers (UDP), gathered in the kernel
    Mget {
        #[command(flatten)]
        attach: Attach,
        /// memcached servers (ADDR:PORT of their UDP port), in the pool's order
        #[arg(long = "server", required = true)]
        servers: Vec<SocketAddr>,
        /// ketama's hash: one-at-a-time (libmemcached's default) or md5
        #[arg(long, default_value = "one-at-a-time")]
        hash: String,
        #[arg(long, default_value_t = 200)]
        timeout_ms: u64,
        keys: Vec<String>,
    },
    /// Run workers until interrupted: the XDP worker on an interface, or socket workers
    Worker {
        /// XDP worker on this interface (answers ports --ports)
        #[arg(long)]
        iface: Option<String>,
        /// Port range LO-HI for the XDP worker
        #[arg(long, default_value = "7000-7999")]
        ports: String,
        /// Socket workers (echo) on these addresses
        #[arg(long = "listen")]
        listen: Vec<SocketAddr>,
    },
    /// Redraw the plots (and the table) of a benchmark's results.json
    Plot {
        /// Directory holding results.json
        dir: PathBuf,
    },
    /// The benchmark: scatter-gather against blocking, epoll and io_uring baselines
    Bench {
        #[arg(long, value_delimiter = ',', default_value = "1,8,32,128,512")]
        fanouts: Vec<usize>,
        #[arg(long, value_delimiter = ',', default_value = "8,64,1024")]
        payloads: Vec<usize>,
        #[arg(
            long,
            value_delimiter = ',',
            value_enum,
            default_value = "sg,sg-poll,blocking,epoll,io-uring"
        )]
        modes: Vec<Mode>,
        /// Seconds per point
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        #[arg(long, default_value_t = 4)]
        worker_ns: usize,
        /// Packets in flight (requests in flight = this / fan-out, 1-32)
        #[arg(long, default_value_t = 512)]
        window: usize,
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Directory for results.json, results.md and the plots
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn parse_reducer(s: &str) -> Result<Reducer> {
    if s == "concat" {
        return Ok(Reducer::Concat);
    }
    let p: Vec<&str> = s.split(':').collect();
    let [op, ty, n] = p[..] else {
        bail!("--reduce: sum|min|max|count:u32|u64:ELEMENTS, or concat");
    };
    let e = match ty {
        "u32" => Elem::U32,
        "u64" => Elem::U64,
        _ => bail!("--reduce: element type u32 or u64"),
    };
    let n: usize = n.parse().context("--reduce: elements")?;
    Ok(match op {
        "sum" => Reducer::Sum(e, n),
        "min" => Reducer::Min(e, n),
        "max" => Reducer::Max(e, n),
        "count" => Reducer::Count(e, n),
        _ => bail!("--reduce: unknown reducer {op}"),
    })
}

fn parse_policy(s: &str) -> Result<Policy> {
    Ok(match s {
        "all" => Policy::All,
        "any" => Policy::Any,
        n => Policy::N(n.parse().context("--policy: all, any or a number")?),
    })
}

fn until_interrupted() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let _ = ctrlc_handler(move || s.store(true, Ordering::Relaxed));
    stop
}

fn ctrlc_handler(f: impl Fn() + Send + 'static) -> Result<()> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block()?;
    std::thread::spawn(move || {
        let _ = set.wait();
        f();
    });
    Ok(())
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("inksg: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.cmd {
        Cmd::Attach { attach } => {
            let stop = until_interrupted();
            let sg = attach.attach()?;
            for (i, m) in sg.interfaces() {
                println!("attached to {i} (XDP {m}); Ctrl-C detaches");
            }
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_secs(1));
                println!("{}", serde_json::to_string(&sg.stats()?)?);
            }
        }
        Cmd::Run {
            attach,
            workers,
            policy,
            reduce,
            payload,
            timeout_ms,
            count,
            busy_poll,
        } => {
            let sg = attach.attach()?;
            let g = sg.group(&workers)?;
            let mut c = Client::new(
                sg.clone(),
                workers[0].is_ipv6(),
                ClientOpts {
                    delivery: if busy_poll {
                        Delivery::BusyPoll
                    } else {
                        Delivery::Epoll
                    },
                    ..Default::default()
                },
            )?;
            let r = parse_reducer(&reduce)?;
            let p = parse_policy(&policy)?;
            for _ in 0..count {
                c.scatter(
                    &g,
                    payload.as_bytes(),
                    p,
                    r,
                    Duration::from_millis(timeout_ms),
                )?;
                let d = c
                    .wait(Duration::from_millis(timeout_ms) + Duration::from_secs(2))?
                    .context("no completion")?;
                let missing: Vec<String> = d
                    .missing
                    .iter()
                    .map(|&w| g.workers[w as usize].to_string())
                    .collect();
                print!(
                    "request {}: {:?} in {:?}, {} of {} answered",
                    d.req_id, d.status, d.elapsed, d.answered, d.asked
                );
                if !missing.is_empty() {
                    print!(", missing {}", missing.join(" "));
                }
                println!();
                match r {
                    Reducer::Concat => {
                        for rec in d.records() {
                            println!(
                                "  {}: {}",
                                g.workers[rec.worker as usize],
                                String::from_utf8_lossy(rec.data)
                            );
                        }
                    }
                    _ if d.elem == Some(Elem::U32) => println!("  {:?}", d.u32s()),
                    _ => println!("  {:?}", d.u64s()),
                }
            }
            println!("{}", serde_json::to_string(&sg.stats()?)?);
        }
        Cmd::Mget {
            attach,
            servers,
            hash,
            timeout_ms,
            keys,
        } => {
            let hash = match hash.as_str() {
                "one-at-a-time" => Hash::OneAtATime,
                "md5" => Hash::Md5,
                _ => bail!("--hash: one-at-a-time or md5"),
            };
            let sg = attach.attach()?;
            let pool = Pool::new(&sg, &servers, hash)?;
            let mut c = Client::new(
                sg.clone(),
                servers[0].is_ipv6(),
                ClientOpts {
                    proto: Proto::Memcached,
                    ..Default::default()
                },
            )?;
            let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let got = pool.get_multi(&mut c, &refs, Duration::from_millis(timeout_ms))?;
            for k in &keys {
                match got.items.get(k.as_bytes()) {
                    Some(it) => println!(
                        "{k} (flags {}, {} bytes): {}",
                        it.flags,
                        it.value.len(),
                        String::from_utf8_lossy(&it.value)
                    ),
                    None => println!("{k}: miss"),
                }
            }
            for s in &got.missing {
                println!("server {s} did not answer in time");
            }
            if got.truncated {
                println!("replies were cut: raise --result-bytes");
            }
        }
        Cmd::Worker {
            iface,
            ports,
            listen,
        } => {
            let stop = until_interrupted();
            let (lo, hi) = ports
                .split_once('-')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                .context("--ports LO-HI")?;
            let _x = match &iface {
                Some(i) => Some(XdpProg::worker(i, lo, hi)?),
                None => None,
            };
            let _s: Vec<SocketWorker> = listen
                .iter()
                .map(|a| SocketWorker::spawn(*a, Behaviour::Echo))
                .collect::<Result<_>>()?;
            if iface.is_none() && listen.is_empty() {
                bail!("give --iface (XDP worker) or --listen (socket workers)");
            }
            println!("workers running; Ctrl-C stops them");
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Cmd::Plot { dir } => {
            let raw = std::fs::read(dir.join("results.json")).context("reading results.json")?;
            let points: Vec<bench::Point> = serde_json::from_slice(&raw)?;
            std::fs::write(dir.join("results.md"), bench::table(&points))?;
            bench::plots(&points, &dir)?;
        }
        Cmd::Bench {
            fanouts,
            payloads,
            modes,
            seconds,
            worker_ns,
            window,
            timeout_ms,
            out,
        } => {
            let o = BenchOpts {
                fanouts,
                payloads,
                modes,
                seconds,
                worker_ns,
                window,
                timeout: Duration::from_millis(timeout_ms),
            };
            let points = bench::run(&o, |p| {
                eprintln!(
                    "{:?} fan-out {} payload {}: {:.0} req/s p50 {:.0} µs p99 {:.0} µs client {:.1} µs/req (CPU0 {:.0}%, CPU1 {:.0}%) incomplete {}",
                    p.mode, p.fanout, p.payload, p.rps, p.p50_us, p.p99_us, p.client_us_per_req,
                    p.client_cpu_pct, p.worker_cpu_pct, p.incomplete
                )
            })?;
            let table = bench::table(&points);
            println!("{table}");
            if let Some(dir) = out {
                std::fs::create_dir_all(&dir)?;
                std::fs::write(
                    dir.join("results.json"),
                    serde_json::to_string_pretty(&points)?,
                )?;
                std::fs::write(dir.join("results.md"), &table)?;
                bench::plots(&points, &dir)?;
            }
            let _ = Status::Done;
        }
    }
    Ok(())
}
