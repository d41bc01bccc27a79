//! Namespaces for tests and benchmarks: a client namespace joined to `n` worker namespaces by
//! one veth pair each ("other hosts" over a real interface). Worker namespace `k` has
//! 198.19.k.2/24 and fd00:5347:k::2/64 on its end; the client has .1 / ::1 on the other end.
//! Everything is deleted on drop.
use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

use anyhow::{bail, Context, Result};
use nix::sched::{setns, CloneFlags};

static SEQ: AtomicU32 = AtomicU32::new(0);

fn unique(prefix: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 10000)
}

/// Runs `ip` with `args`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip")?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs `f` on a thread inside network namespace `name`.
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    let path = format!("/run/netns/{name}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let fd = File::open(&path).with_context(|| format!("opening {path}"))?;
            setns(fd, CloneFlags::CLONE_NEWNET).with_context(|| format!("joining {name}"))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// The calling thread's network namespace, to come back to (`in_netns_fd`).
pub fn current_netns() -> Result<File> {
    File::open("/proc/thread-self/ns/net").context("opening this thread's network namespace")
}

/// Runs `f` on a thread inside the network namespace `ns` (from `current_netns`).
pub fn in_netns_fd<T: Send>(ns: &File, f: impl FnOnce() -> T + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            setns(ns, CloneFlags::CLONE_NEWNET).context("joining a network namespace")?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Joins network namespace `name` for the rest of this thread's life.
pub fn enter_netns(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let fd = File::open(&path).with_context(|| format!("opening {path}"))?;
    setns(fd, CloneFlags::CLONE_NEWNET).with_context(|| format!("joining {name}"))?;
    Ok(())
}

pub struct WorkerNs {
    pub ns: String,
    /// The worker's end of the veth (in `ns`).
    pub iface: String,
    /// The client's end (in the client namespace).
    pub peer: String,
    pub v4: Ipv4Addr,
    pub v6: Ipv6Addr,
    pub client_v4: Ipv4Addr,
    pub client_v6: Ipv6Addr,
}

impl WorkerNs {
    pub fn addr(&self, v6: bool) -> IpAddr {
        if v6 {
            self.v6.into()
        } else {
            self.v4.into()
        }
    }
}

pub struct Topology {
    pub client: String,
    pub workers: Vec<WorkerNs>,
}

impl Topology {
    /// `n` worker namespaces (1-200) named from `prefix` (short: interface names are
    /// `<prefix>c<pid>x<n>`).
    pub fn new(prefix: &str, n: usize) -> Result<Topology> {
        if n == 0 || n > 200 {
            bail!("1-200 worker namespaces");
        }
        let client = unique(&format!("{prefix}c"));
        ip(&["netns", "add", &client])?;
        let mut t = Topology {
            client,
            workers: vec![],
        };
        ip(&["-n", &t.client, "link", "set", "lo", "up"])?;
        for k in 0..n {
            let ns = unique(&format!("{prefix}w"));
            ip(&["netns", "add", &ns])?;
            let iface = unique(&format!("{prefix}v"));
            let peer = unique(&format!("{prefix}p"));
            let w = WorkerNs {
                ns,
                iface,
                peer,
                v4: Ipv4Addr::new(198, 19, k as u8, 2),
                v6: format!("fd00:5347:{k}::2").parse().unwrap(),
                client_v4: Ipv4Addr::new(198, 19, k as u8, 1),
                client_v6: format!("fd00:5347:{k}::1").parse().unwrap(),
            };
            t.workers.push(w);
            let w = t.workers.last().unwrap();
            ip(&["-n", &w.ns, "link", "set", "lo", "up"])?;
            ip(&[
                "link", "add", &w.iface, "netns", &w.ns, "type", "veth", "peer", "name", &w.peer,
                "netns", &t.client,
            ])?;
            for (ns, ifc, a4, a6) in [
                (&w.ns, &w.iface, w.v4, w.v6),
                (&t.client, &w.peer, w.client_v4, w.client_v6),
            ] {
                ip(&["-n", ns, "addr", "add", &format!("{a4}/24"), "dev", ifc])?;
                ip(&[
                    "-n",
                    ns,
                    "addr",
                    "add",
                    &format!("{a6}/64"),
                    "dev",
                    ifc,
                    "nodad",
                ])?;
                ip(&["-n", ns, "link", "set", ifc, "up"])?;
            }
            ip(&[
                "-n",
                &w.ns,
                "route",
                "add",
                "default",
                "via",
                &w.client_v4.to_string(),
            ])?;
            ip(&[
                "-n",
                &w.ns,
                "-6",
                "route",
                "add",
                "default",
                "via",
                &w.client_v6.to_string(),
            ])?;
        }
        Ok(t)
    }

    /// The client-side interfaces (attach scatter-gather there).
    pub fn client_ifaces(&self) -> Vec<String> {
        self.workers.iter().map(|w| w.peer.clone()).collect()
    }

    /// Runs a command in a namespace.
    pub fn cmd(ns: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, program]);
        c
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for w in &self.workers {
            let _ = Command::new("ip").args(["netns", "del", &w.ns]).status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.client])
            .status();
    }
}
