//! The topology of one configuration: a fresh pair of namespaces joined by a veth, XDP on both
//! ends, threaded NAPI and CPU pinning, the server process, the kernel cache; and the measured
//! runs on it.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use inkbench::{RunConfig, RunResults};
use inkcache::Stats;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use testkit::{Pair, SRV_V4};

use crate::cost::{prog_ids, prog_show, BpfStats, CpuSnap};
use crate::run::touch_all;
use crate::xdp::{self, XdpGuard, XdpProg};
use crate::{
    KernelStats, PaperOpts, Point, ProgProfile, ServerKind, Setup, Timing, Workload, CLIENT_CPU,
    PORT, SERVER_CPU,
};

pub(crate) fn ensure_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("inklab paper needs root (network namespaces, XDP, CPU pinning)");
    }
    Ok(())
}

pub(crate) fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn cpuset(cpu: usize) -> Result<CpuSet> {
    let mut s = CpuSet::new();
    s.set(cpu).context("CPU index")?;
    Ok(s)
}

/// Pins the calling thread (and what it later starts) to `cpu`.
pub(crate) fn pin_self(cpu: usize) -> Result<()> {
    sched_setaffinity(Pid::from_raw(0), &cpuset(cpu)?)
        .with_context(|| format!("pinning to CPU{cpu} (needs at least 2 CPUs)"))
}

/// Pins every thread of process (or kernel thread) `pid` to `cpu`.
pub(crate) fn pin_pid(pid: i32, cpu: usize) -> Result<()> {
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
pub(crate) fn napi_threads(iface: &str) -> Vec<i32> {
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
pub(crate) fn threaded_napi(netns: &str, iface: &str, cpu: usize) -> Result<Vec<i32>> {
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
pub(crate) struct ServerProc {
    pub(crate) child: Child,
    pub(crate) cmd: String,
}

impl ServerProc {
    pub(crate) fn start(opts: &PaperOpts, netns: &str, kind: ServerKind) -> Result<Self> {
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
            let ok = xdp::in_netns(netns, move || {
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

    pub(crate) fn pid(&self) -> i32 {
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
pub(crate) struct Inkcache {
    pub(crate) bin: PathBuf,
    pub(crate) netns: String,
    pub(crate) iface: String,
}

impl Inkcache {
    /// `stop_stage`: see [`PaperOpts::stop_stage`] (0: a production attach).
    pub(crate) fn attach(bin: &Path, netns: &str, iface: &str, stop_stage: u32) -> Result<Self> {
        let me = Inkcache {
            bin: bin.to_path_buf(),
            netns: netns.into(),
            iface: iface.into(),
        };
        let port = PORT.to_string();
        let stage = stop_stage.to_string();
        let mut args = vec![
            "attach",
            "--iface",
            iface,
            "--port",
            &port,
            "--cache-mb",
            "256",
        ];
        if stop_stage != 0 {
            args.extend(["--debug-stop-stage", &stage]);
        }
        me.cli(&args).context("inkcache attach")?;
        Ok(me)
    }

    pub(crate) fn cli(&self, args: &[&str]) -> Result<String> {
        let out = testkit::sh(
            Command::new(&self.bin)
                .args(["--netns", &self.netns])
                .args(args),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub(crate) fn stats_or_warn(&self) -> Option<Stats> {
        self.stats()
            .map_err(|e| eprintln!("inklab: inkcache stats: {e:#}"))
            .ok()
    }

    /// The kernel's counters, read through the pins with the inkcache library.
    pub(crate) fn stats(&self) -> Result<Stats> {
        let dir = inkcache::pins::dir_in(&self.iface, Some(&self.netns));
        Stats::read(&dir).context("inkcache counters")
    }
}

impl Drop for Inkcache {
    fn drop(&mut self) {
        if let Err(e) = self.cli(&["detach", "--iface", &self.iface]) {
            eprintln!("inklab: inkcache detach: {e:#}");
        }
    }
}

/// The counters' change from `a` to `b`, by name (as results.json keeps them).
pub(crate) fn stats_delta(a: &Stats, b: &Stats) -> KernelStats {
    a.fields()
        .into_iter()
        .zip(b.fields())
        .map(|((name, x), (_, y))| (name.to_string(), y.saturating_sub(x)))
        .collect()
}

/// A busy loop on the server CPU (`--server-awake`): the CPU never halts between packets, as
/// under a load that saturates it. It is a thread of this process at `SCHED_IDLE` that yields in
/// a loop, so a runnable server task mostly gets the CPU within a yield; not always: inkcached's
/// median latency rose to ~0.9 ms in two of four paper runs (hitcost.md, seventeenth run), so
/// the mode is for the cost columns, which leave the loop's time out. `SCHED_IDLE` alone was
/// not enough: a loop that never yielded starved memcached (27K requests/s and a 2.2 ms
/// median instead of ~120K and ~50 us; memcached is woken by the NAPI kthread, not by an
/// interrupt, and EEVDF can then pick the eligible idle-class loop and let it run out its slice).
/// Its CPU time is measured and not counted as the server's. Stopped on drop.
pub(crate) struct Spinner {
    tid: i32,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    pub(crate) fn start(cpu: usize) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("inklab-spin".into())
            .spawn(move || {
                let _ = tx.send((nix::unistd::gettid().as_raw(), pin_self(cpu)));
                while !flag.load(Ordering::Relaxed) {
                    std::thread::yield_now();
                }
            })
            .context("starting the server CPU's busy loop")?;
        let (tid, pinned) = rx.recv().context("the busy loop's thread")?;
        // from here on, an error drops it, which stops the thread
        let s = Spinner {
            tid,
            stop,
            thread: Some(thread),
        };
        pinned.with_context(|| format!("pinning the busy loop to CPU{cpu}"))?;
        testkit::sh(Command::new("chrt").args(["-i", "-p", "0", &tid.to_string()]))
            .context("making the busy loop SCHED_IDLE (chrt)")?;
        Ok(s)
    }

    pub(crate) fn tid(&self) -> i32 {
        self.tid
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One configuration set up: namespaces, XDP on both ends, threaded NAPI, pinning, the server.
/// Fields drop in order: server and attachments before the namespaces.
pub(crate) struct Rig {
    pub(crate) spinner: Option<Spinner>,
    pub(crate) server: Option<ServerProc>,
    pub(crate) inkcache: Option<Inkcache>,
    pub(crate) _srv_xdp: Option<XdpGuard>,
    pub(crate) _cli_xdp: XdpGuard,
    pub(crate) srv_napi: Vec<i32>,
    pub(crate) xdp_mode: String,
    pub(crate) pair: Pair,
}

impl Rig {
    pub(crate) fn new(opts: &PaperOpts, setup: Setup) -> Result<Self> {
        let pair = Pair::new().context("creating the namespaces")?;
        let cli_xdp = xdp::attach(&pair.client.name, &pair.cli_if, XdpProg::Pass, PORT)
            .context("XDP_PASS on the client veth")?;
        let mut srv_xdp = None;
        let mut inkcache = None;
        let xdp_mode;
        if setup.with_inkcache() {
            let bin = opts
                .inkcache
                .as_ref()
                .context("inkcache binary not found")?;
            inkcache = Some(Inkcache::attach(
                bin,
                &pair.server.name,
                &pair.srv_if,
                opts.stop_stage,
            )?);
            xdp_mode = "inkcache (auto)".to_string();
        } else {
            let prog = if setup == Setup::XdpEcho {
                XdpProg::Echo
            } else {
                XdpProg::Pass
            };
            let g = xdp::attach(&pair.server.name, &pair.srv_if, prog, PORT)
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
        xdp::in_netns(&pair.client.name, move || {
            let _ = TcpStream::connect_timeout(&addr, Duration::from_secs(2));
            Ok(())
        })?;
        let spinner = if opts.server_awake {
            Some(Spinner::start(SERVER_CPU)?)
        } else {
            None
        };
        Ok(Rig {
            spinner,
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
    pub(crate) fn load(&self, cfg: &RunConfig) -> Result<RunResults> {
        self.pair.client.run(|| {
            pin_self(CLIENT_CPU)?;
            inkbench::run(cfg)
        })
    }

    /// Tasks whose CPU time is the server's (process and NAPI kthreads).
    pub(crate) fn server_tasks(&self) -> Vec<i32> {
        let mut v = self.srv_napi.clone();
        if let Some(s) = &self.server {
            v.push(s.pid());
        }
        v
    }

    /// Preloads every key over TCP (if there is a server) and touches every key with a UDP get,
    /// so the kernel cache learns them all before anything is measured.
    pub(crate) fn warm(&self, wl: &Workload, cfg: &RunConfig, timing: &Timing) -> Result<()> {
        if self.server.is_some() {
            let mut c = cfg.clone();
            c.preload = true;
            c.timeout = Duration::from_secs(5);
            self.pair
                .client
                .run(|| inkbench::admin::preload(&c))
                .context("preload")?;
            self.learn_all(wl, cfg.server)?;
        }
        let mut c = cfg.clone();
        c.duration = Duration::from_secs_f64(timing.warm_s);
        self.load(&c).context("warmup run")?;
        Ok(())
    }

    /// Touches every key until the kernel cache answers them all (one pass without inkcache).
    /// One pass is not always enough: the preload pipelines more writes per connection than
    /// inkcache follows (CONN_FIFO), so most of them are settled by the quarantine (1 s by
    /// default), and a reply to a get sent before that refills nothing (counted `fill_skipped`).
    /// Measured before the kernel had learned them, 1-2% of the first run's requests missed and
    /// its server cost came out 24-45% above the same run again on `target` (hitcost.md, tenth
    /// run). Passes stop when one sees no miss, or nothing filled nor skipped (keys the kernel
    /// does not cache), or after `LEARN_PASSES`; the kernel's counters say how far it got.
    fn learn_all(&self, wl: &Workload, server: SocketAddr) -> Result<()> {
        const LEARN_PASSES: u32 = 8;
        let (keys, ks) = (wl.keys, wl.key_size);
        let touch = || {
            self.pair
                .client
                .run(move || touch_all(server, keys, ks))
                .context("touching every key over UDP")
        };
        // best effort, as in `measure`: without the counters (or inkcache), one touch is all
        let counters = || self.inkcache.as_ref().and_then(Inkcache::stats_or_warn);
        let Some(mut a) = counters() else {
            return touch();
        };
        for pass in 1..=LEARN_PASSES {
            touch()?;
            // nothing counts between passes: each pass's end is the next one's start
            let Some(b) = counters() else {
                return Ok(());
            };
            let misses = b.misses.saturating_sub(a.misses);
            let filled = b.fills.saturating_sub(a.fills);
            let skipped = b.fill_skipped.saturating_sub(a.fill_skipped);
            if misses == 0 || (filled == 0 && skipped == 0) {
                return Ok(());
            }
            a = b;
            if pass == LEARN_PASSES {
                eprintln!(
                    "inklab: the kernel cache still missed {misses} of {keys} keys after \
                     {pass} passes ({filled} filled, {skipped} fills skipped in the last)"
                );
            } else if skipped > 0 {
                // writes still settling: their keys fill once the quarantine runs out
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        Ok(())
    }

    /// One measured run: the load plus the server CPU and the kernel counters around it.
    pub(crate) fn measure(&self, cfg: &RunConfig) -> Result<Point> {
        // Best effort: the counters are read through the pins, which a cleanup elsewhere on a
        // shared machine may remove; the programs keep running without them.
        let k0 = self.inkcache.as_ref().and_then(|k| k.stats_or_warn());
        let tasks = self.server_tasks();
        let spinner = self.spinner.as_ref().map(Spinner::tid);
        let (res, cpu) = std::thread::scope(|s| {
            let dur = cfg.duration;
            let tasks = &tasks;
            let mon = s.spawn(move || {
                // inkbench::run starts sending 20 ms after it is called.
                std::thread::sleep(Duration::from_millis(20));
                let a = CpuSnap::take(SERVER_CPU, tasks, spinner);
                std::thread::sleep(dur);
                let b = CpuSnap::take(SERVER_CPU, tasks, spinner);
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
        // with a spinner, what it ran is not the server's (it only has the CPU when nothing else
        // wants it)
        let spin_ns = b.spin_ns.saturating_sub(a.spin_ns);
        let busy_ns = b.busy_ns.saturating_sub(a.busy_ns).saturating_sub(spin_ns) as f64;
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
    pub(crate) fn profile(&self, cfg: &RunConfig) -> Result<(Vec<ProgProfile>, f64)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::stat_fields;

    /// `--server-awake`'s loop: a SCHED_IDLE thread on the CPU asked for, its time counted apart
    /// from the server's, and gone once dropped.
    #[test]
    fn spinner_is_an_idle_class_loop_counted_apart() {
        if !Path::new(&format!("/sys/devices/system/cpu/cpu{SERVER_CPU}")).exists() {
            testkit::skip(format!("no CPU{SERVER_CPU}"));
            return;
        }
        let s = Spinner::start(SERVER_CPU).expect("starting the spinner");
        let pid = s.tid();
        let stat = format!("/proc/self/task/{pid}/stat");
        assert_eq!(
            stat_fields(&stat, [41]),
            Some([5]),
            "policy: SCHED_IDLE is 5"
        );
        let status =
            std::fs::read_to_string(format!("/proc/self/task/{pid}/status")).expect("status");
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(str::trim);
        assert_eq!(cpus, Some(SERVER_CPU.to_string().as_str()), "{status}");

        // this thread busy on the other CPU meanwhile: the loop's count must be its own
        // thread's, not the process's
        pin_self(CLIENT_CPU).expect("pinning the test thread");
        let a = CpuSnap::take(SERVER_CPU, &[], Some(pid)).expect("snapshot");
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(600) {
            std::hint::spin_loop();
        }
        let b = CpuSnap::take(SERVER_CPU, &[], Some(pid)).expect("snapshot");
        let (spun, wall) = (b.spin_ns - a.spin_ns, t0.elapsed().as_nanos() as u64);
        assert!(spun > 0, "the loop did not run in {wall} ns");
        // (the counts are in 10 ms ticks)
        assert!(
            spun <= wall + 30_000_000,
            "the loop counted {spun} ns in {wall} ns: more than its own thread's time"
        );
        drop(s);
        // joined, the thread is gone; the kernel may take a moment more to unlist its task
        let task = format!("/proc/self/task/{pid}");
        let t0 = Instant::now();
        while Path::new(&task).exists() && t0.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!Path::new(&task).exists(), "the spinner outlived its guard");
    }
}
