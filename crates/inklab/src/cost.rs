//! What a run cost the server: the server CPU's busy time (/proc/stat) and the server tasks'
//! times, and the per-program run time of the eBPF programs (bpf_stats).

use std::process::Command;

use anyhow::{Context, Result};

/// CPU counters at one instant: the server CPU's line of /proc/stat and the server tasks' times.
pub(crate) struct CpuSnap {
    pub(crate) busy_ns: u64,
    pub(crate) total_ns: u64,
    pub(crate) steal_ns: u64,
    pub(crate) tasks_ns: u64,
    /// CPU time of the thread that keeps the server CPU awake (`--server-awake`), else 0.
    pub(crate) spin_ns: u64,
}

/// Fields `ns` (1-based, as proc(5) numbers them) of a stat file of /proc, as numbers (0 where a
/// field is not one); None if the task is gone. /proc/PID/stat sums a process's threads;
/// /proc/self/task/TID/stat is one thread of this process.
pub(crate) fn stat_fields<const N: usize>(stat: &str, ns: [usize; N]) -> Option<[u64; N]> {
    let s = std::fs::read_to_string(stat).ok()?;
    // the fields after the command (field 2, which may hold spaces and parentheses)
    let (_, rest) = s.rsplit_once(") ")?;
    let v: Vec<&str> = rest.split_whitespace().collect();
    Some(ns.map(|n| {
        n.checked_sub(3)
            .and_then(|i| v.get(i))
            .and_then(|x| x.parse().ok())
            .unwrap_or(0)
    }))
}

/// CPU time (utime + stime) from a stat file of /proc, in USER_HZ ticks; 0 if the task is gone.
fn task_ticks(stat: &str) -> u64 {
    stat_fields(stat, [14, 15]).map_or(0, |[ut, st]| ut + st)
}

pub(crate) fn clk_tck() -> u64 {
    // /proc/stat and /proc/PID/stat count in USER_HZ, 100 on every architecture Linux exports.
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

impl CpuSnap {
    /// `tasks`: processes (their threads summed); `spinner`: a thread of this process.
    pub(crate) fn take(cpu: usize, tasks: &[i32], spinner: Option<i32>) -> Result<Self> {
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
        let tasks_ticks: u64 = tasks
            .iter()
            .map(|p| task_ticks(&format!("/proc/{p}/stat")))
            .sum();
        Ok(CpuSnap {
            busy_ns: to_ns(busy),
            total_ns: to_ns(total),
            steal_ns: to_ns(g(7)),
            tasks_ns: to_ns(tasks_ticks),
            spin_ns: to_ns(spinner.map_or(0, |t| task_ticks(&format!("/proc/self/task/{t}/stat")))),
        })
    }
}

/// The kernel's BPF run-time statistics, on while alive (an fd: `inkcache::sys::bpf_stats_hold`).
pub(crate) struct BpfStats {
    _fd: std::os::fd::OwnedFd,
}

impl BpfStats {
    pub(crate) fn enable() -> Result<Self> {
        Ok(BpfStats {
            _fd: inkcache::sys::bpf_stats_hold()?,
        })
    }
}

/// `kernel.bpf_stats_enabled` off while alive if it was on (left on by an earlier run, most
/// likely: every BPF program then pays two clock reads per run, the echo floor's and the kernel
/// cache's alike), said on stderr; the value restored on drop.
pub(crate) struct StatsSysctlOff {
    was_on: bool,
}

impl StatsSysctlOff {
    pub(crate) fn new() -> Result<Self> {
        let was_on = inkcache::sys::bpf_stats_sysctl_on();
        if was_on {
            eprintln!(
                "inklab: kernel.bpf_stats_enabled was 1 (every BPF program pays two clock reads a \
                 run); turned off while measuring, set again after"
            );
            std::fs::write(inkcache::sys::BPF_STATS_SYSCTL, "0")
                .context("turning kernel.bpf_stats_enabled off")?;
        }
        Ok(StatsSysctlOff { was_on })
    }
}

impl Drop for StatsSysctlOff {
    fn drop(&mut self) {
        if self.was_on {
            let _ = std::fs::write(inkcache::sys::BPF_STATS_SYSCTL, "1");
        }
    }
}

/// IDs of the BPF programs attached to `iface` (XDP and TC), from `bpftool net show`.
pub(crate) fn prog_ids(netns: &str, iface: &str) -> Result<Vec<u64>> {
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

pub(crate) struct ProgShow {
    pub(crate) name: String,
    pub(crate) prog_type: String,
    pub(crate) run_cnt: u64,
    pub(crate) run_time_ns: u64,
}

pub(crate) fn prog_show(id: u64) -> Result<ProgShow> {
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
