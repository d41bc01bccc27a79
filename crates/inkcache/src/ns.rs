//! Where this process runs: which network namespace it is in (for naming and finding
//! attachments), and which mount namespace holds the BPF filesystem its pins belong in.
//!
//! `ip netns exec NS inkcache ...` runs inkcache in a mount namespace of its own with a fresh
//! `/sys` and no BPF filesystem: pins made there vanish with the command while the programs keep
//! serving. So when `/sys/fs/bpf` is not a BPF filesystem here, inkcache joins the mount namespace
//! of the nearest ancestor process that has one (the shell `ip netns exec` was started from), and
//! names the network namespace it runs in the way `--netns` would, so that attach, status, stats
//! and detach find the same pins however they are started.
use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use nix::sched::{setns, CloneFlags};

/// (device, inode) of a namespace file: equal for the same namespace.
fn ns_id(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The network namespace of the calling thread (namespaces are per thread).
fn current_netns() -> Option<(u64, u64)> {
    ns_id(Path::new("/proc/thread-self/ns/net"))
}

/// The name under /run/netns (as `ip netns` makes) of the calling thread's network namespace, if
/// it has one.
pub fn named_netns() -> Option<String> {
    let here = current_netns()?;
    let mut names: Vec<String> = fs::read_dir("/run/netns")
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| ns_id(&e.path()) == Some(here))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// Whether the calling thread runs in the host's initial network namespace: some `net.core`
/// sysctls (`netdev_max_backlog` among them) exist only there.
pub fn in_initial_netns() -> bool {
    Path::new("/proc/sys/net/core/netdev_max_backlog").exists()
}

/// How attachments made in the calling thread's network namespace are told apart in the shared
/// pin directory: its name under /run/netns; none in the host's initial namespace; otherwise
/// (a container's) `netns-COOKIE`, the namespace's cookie, unique while the system runs.
pub fn netns_label() -> Option<String> {
    named_netns().or_else(|| {
        if in_initial_netns() {
            return None;
        }
        crate::sys::netns_cookie().map(|c| format!("netns-{c}"))
    })
}

/// Whether `/sys/fs/bpf` is a BPF filesystem in the mount table `mountinfo` (the text of a
/// /proc/PID/mountinfo).
fn has_bpffs(mountinfo: &str) -> bool {
    mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let fstype = f.iter().position(|&x| x == "-").and_then(|i| f.get(i + 1));
        f.get(4) == Some(&crate::sys::BPFFS) && fstype == Some(&"bpf")
    })
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The nearest ancestor process (not init, whose namespaces are the host's own business) in
/// another mount namespace whose `/sys/fs/bpf` is a BPF filesystem.
fn ancestor_with_bpffs() -> Option<PathBuf> {
    let mine = ns_id(Path::new("/proc/self/ns/mnt"))?;
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..64 {
        if pid <= 1 {
            return None;
        }
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let ns = dir.join("ns/mnt");
        if ns_id(&ns).is_some_and(|id| id != mine)
            && fs::read_to_string(dir.join("mountinfo")).is_ok_and(|m| has_bpffs(&m))
        {
            return Some(ns);
        }
        pid = parent_of(pid)?;
    }
    None
}

/// Called when `/sys/fs/bpf` is not a BPF filesystem in this mount namespace: joins the mount
/// namespace of an ancestor that has one (true after `ip netns exec`, `unshare -m` and the like),
/// so pins outlive this command. Returns whether it did; false means this mount namespace is the
/// one to mount bpffs in.
pub fn join_pinning_mount_ns() -> Result<bool> {
    let Some(ns) = ancestor_with_bpffs() else {
        return Ok(false);
    };
    let f = fs::File::open(&ns).with_context(|| format!("opening {}", ns.display()))?;
    setns(f, CloneFlags::CLONE_NEWNS).with_context(|| {
        format!(
            "joining the mount namespace of {} to reach {} (a private mount namespace, as \
             `ip netns exec` makes, has no BPF filesystem of its own)",
            ns.display(),
            crate::sys::BPFFS
        )
    })?;
    Ok(true)
}

/// Runs `f` on a thread in the named network namespace (None if it cannot be joined).
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Option<T> {
    let path = Path::new("/run/netns").join(name);
    std::thread::scope(|s| {
        s.spawn(|| {
            let ns = std::fs::File::open(&path).ok()?;
            nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).ok()?;
            Some(f())
        })
        .join()
        .ok()
        .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::has_bpffs;

    #[test]
    fn finds_bpffs_in_mountinfo() {
        let with = "22 1 0:21 / /sys rw - sysfs sysfs rw\n\
                    35 22 0:30 / /sys/fs/bpf rw,relatime shared:9 - bpf bpf rw\n";
        let without = "49 46 0:40 / /sys rw,relatime - sysfs opx1 rw\n\
                       50 46 0:41 / /sys/fs/bpfx rw - bpf bpf rw\n";
        assert!(has_bpffs(with));
        assert!(!has_bpffs(without));
    }
}
