//! Host facts the control plane needs: privileges, bpffs, network namespaces, interfaces.
use std::{fs, path::Path, sync::OnceLock};

use anyhow::{Context, Result};
use ipnet::IpNet;
use nix::{
    mount::{mount, MsFlags},
    sched::{setns, CloneFlags},
};

use crate::Error;

pub const BPFFS: &str = "/sys/fs/bpf";

pub fn require_root() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::NotRoot.into());
    }
    Ok(())
}

fn bpffs_mounted() -> Result<bool> {
    Ok(fs::read_to_string("/proc/self/mounts")
        .context("reading /proc/self/mounts")?
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 2 && f[1] == BPFFS && f[2] == "bpf"
        }))
}

/// Makes /sys/fs/bpf the BPF filesystem pins outlive this command in: the one here, else the one
/// of the mount namespace this command was started from (after `ip netns exec`, see
/// [`crate::ns`]), else a new mount.
pub fn ensure_bpffs() -> Result<()> {
    let here = bpffs_mounted()? || (crate::ns::join_pinning_mount_ns()? && bpffs_mounted()?);
    if !here {
        mount(
            Some("bpf"),
            BPFFS,
            Some("bpf"),
            MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| {
            Error::KernelLacks(format!("a BPF filesystem at {BPFFS} (mount failed: {e})"))
        })?;
    }
    Ok(())
}

/// Names the namespace of the pins without entering it: for cleaning up after a namespace that no
/// longer exists (its interfaces, and so their XDP and TC attachments, went with it).
pub fn assume_netns(name: &str) {
    let _ = NETNS.set(name.to_string());
    NETNS_GONE.store(true, std::sync::atomic::Ordering::Relaxed);
}

static NETNS_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// False when the namespace was only named with [`assume_netns`] (it is gone: this process runs
/// elsewhere).
pub fn in_named_netns() -> bool {
    !NETNS_GONE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Moves this process into the named network namespace (as `ip netns exec` would, but keeping the
/// mount namespace so pins land in the host's bpffs).
pub fn enter_netns(name: &str) -> Result<()> {
    let path = Path::new("/run/netns").join(name);
    let f = fs::File::open(&path).map_err(|e| {
        Error::Usage(format!(
            "no such network namespace: {name} ({}: {e})",
            path.display()
        ))
    })?;
    setns(f, CloneFlags::CLONE_NEWNET).with_context(|| format!("entering netns {name}"))?;
    let _ = NETNS.set(name.to_string());
    Ok(())
}

static NETNS: OnceLock<String> = OnceLock::new();

/// The network namespace this runs in, as attachments are named by: the one entered with
/// [`enter_netns`] (or named with [`assume_netns`]), else the calling thread's own: its name if
/// `ip netns` named it (`ip netns exec`), None in the host's, `netns-COOKIE` in another unnamed
/// one (a container's); see [`crate::ns::netns_label`].
pub fn netns_name() -> Option<String> {
    NETNS.get().cloned().or_else(crate::ns::netns_label)
}

pub fn ifindex(iface: &str) -> Result<u32> {
    nix::net::if_::if_nametoindex(iface).map_err(|_| Error::NoSuchInterface(iface.into()).into())
}

/// The prefixes of the addresses configured on `iface` (its connected subnets).
pub fn connected_subnets(iface: &str) -> Result<Vec<IpNet>> {
    let mut nets = Vec::new();
    for ifa in nix::ifaddrs::getifaddrs().context("listing interface addresses")? {
        if ifa.interface_name != iface {
            continue;
        }
        let (Some(addr), Some(mask)) = (ifa.address, ifa.netmask) else {
            continue;
        };
        let net = if let (Some(a), Some(m)) = (addr.as_sockaddr_in(), mask.as_sockaddr_in()) {
            let prefix = u32::from(m.ip()).count_ones() as u8;
            IpNet::new(a.ip().into(), prefix).ok()
        } else if let (Some(a), Some(m)) = (addr.as_sockaddr_in6(), mask.as_sockaddr_in6()) {
            let prefix = u128::from(m.ip()).count_ones() as u8;
            IpNet::new(a.ip().into(), prefix).ok()
        } else {
            None
        };
        if let Some(n) = net {
            nets.push(n.trunc());
        }
    }
    Ok(nets)
}

/// The network namespace cookie of the current namespace (SO_NETNS_COOKIE, Linux 5.14+). The
/// socket it asks is bound to the wildcard address, which every namespace has (a namespace whose
/// loopback is down has no 127.0.0.1 to bind).
pub fn netns_cookie() -> Option<u64> {
    use std::os::fd::AsRawFd;
    let sock = std::net::UdpSocket::bind("0.0.0.0:0")
        .or_else(|_| std::net::UdpSocket::bind("[::]:0"))
        .ok()?;
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cookie`, a live u64 on our stack, and
    // the socket fd is open for the duration of the call.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            71, // SO_NETNS_COOKIE
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    (r == 0 && cookie != 0).then_some(cookie)
}

/// Where the cgroup v2 hierarchy is mounted; mounts one under /run/inkcache if there is none.
pub fn cgroup2_root() -> Result<std::path::PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() > 2 && f[2] == "cgroup2" {
            return Ok(f[1].into());
        }
    }
    let dir = Path::new("/run/inkcache/cgroup2");
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    mount(
        Some("cgroup2"),
        dir,
        Some("cgroup2"),
        MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| Error::KernelLacks(format!("cgroup v2 (mount failed: {e})")))?;
    Ok(dir.into())
}

/// The sysctl that turns the kernel's BPF run-time statistics on for every program.
pub const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Turns on the kernel's BPF run-time statistics (each program's run_cnt and run_time_ns) for as
/// long as the returned fd is open (BPF_ENABLE_STATS). Unlike `kernel.bpf_stats_enabled`, they go
/// off when the process ends, however it ends, and two holders cannot undo each other: a run
/// that saved and restored the sysctl around another's could leave it on, and every BPF program
/// on the host then pays two clock reads per run (~70 ns on the AMD VM of
/// docs/results/hitcost.md, twenty-third run).
pub fn bpf_stats_hold() -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: bpf_enable_stats takes an enum value and returns a new fd or a negative errno.
    let fd = unsafe {
        libbpf_rs::libbpf_sys::bpf_enable_stats(libbpf_rs::libbpf_sys::BPF_STATS_RUN_TIME)
    };
    if fd < 0 {
        return Err(std::io::Error::from_raw_os_error(-fd))
            .context("turning on BPF run-time statistics (BPF_ENABLE_STATS)");
    }
    // SAFETY: the fd was just created for us and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether `kernel.bpf_stats_enabled` is on (the statistics held by an fd do not show there).
pub fn bpf_stats_sysctl_on() -> bool {
    fs::read_to_string(BPF_STATS_SYSCTL).is_ok_and(|v| v.trim() == "1")
}

#[cfg(test)]
mod tests {
    /// A namespace whose loopback is down (as `ip netns add` makes it) and with an address still
    /// has a cookie, its own. attach used to read none there (it bound 127.0.0.1, which is not
    /// local then) and kept the socket-side programs to no namespace: they took the server
    /// sockets of every namespace on the host, and another attachment's connections went blind.
    #[test]
    fn a_namespace_without_loopback_has_its_own_cookie() {
        if !nix::unistd::geteuid().is_root() {
            testkit::skip("needs root (a new network namespace)");
            return;
        }
        let name = format!("ink-cookie-{}", std::process::id());
        let ip = |args: &[&str]| std::process::Command::new("ip").args(args).status();
        // an address on an interface, as a server's namespace has: with one, 127.0.0.1 is not
        // local while the loopback is down
        let made = [
            &["netns", "add", &name][..],
            &[
                "-n", &name, "link", "add", "ck0", "type", "veth", "peer", "name", "ck1",
            ],
            &["-n", &name, "addr", "add", "198.18.250.1/24", "dev", "ck0"],
            &["-n", &name, "link", "set", "ck0", "up"],
        ]
        .iter()
        .all(|a| ip(a).is_ok_and(|st| st.success()));
        if !made {
            let _ = ip(&["netns", "del", &name]);
            testkit::skip("`ip` could not make the namespace (iproute2 missing?)");
            return;
        }
        let here = super::netns_cookie();
        let path = std::path::Path::new("/run/netns").join(&name);
        let there = std::thread::spawn(move || {
            let f = std::fs::File::open(path).expect("the namespace's file");
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            super::netns_cookie()
        })
        .join();
        let _ = ip(&["netns", "del", &name]);
        let there = there
            .unwrap()
            .expect("a namespace with its loopback down has a cookie");
        assert_ne!(Some(there), here);
    }
}
