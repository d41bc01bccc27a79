//! Which servers hold the cached ports. The kernel cache is one per attachment, keyed by key
//! alone: two servers on one cached port (memcached `-l A` beside another `-l B`) would share it,
//! and a get to one could be answered with a value the other replied. Attach refuses that, and
//! tells the socket hooks which process the server is (bpf/inkcache_sock.bpf.c: a second server
//! binding later stops the kernel's answers while its sockets are open).
//!
//! A server is the processes holding a set of UDP sockets: sockets held by a common process
//! (one memcached's, or a socket a supervisor bound and handed down) are one server's. Found from
//! this namespace's `/proc/net/udp{,6}` (the sockets on each port, by inode) and every process's
//! open files (`/proc/PID/fd`, `socket:[INODE]`).
use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};

/// The sockets bound to `ports` in `/proc/net/udp`-format `text`: (port, inode), inode 0 (no
/// file: a socket being torn down) left out.
pub fn udp_sockets(text: &str, ports: &[u16]) -> Vec<(u16, u64)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
        let (Some(local), Some(inode)) = (f.get(1), f.get(9)) else {
            continue;
        };
        let Some(port) = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        else {
            continue;
        };
        match inode.parse::<u64>() {
            Ok(i) if i != 0 && ports.contains(&port) => out.push((port, i)),
            _ => {}
        }
    }
    out
}

/// The servers on each port: `sockets` (port, inode) grouped by the processes holding them
/// (`holders`: inode -> the processes with it open), sockets with a process in common in one
/// group; for each port with sockets, its groups' processes.
pub fn servers_by_port(
    sockets: &[(u16, u64)],
    holders: &BTreeMap<u64, BTreeSet<u32>>,
) -> BTreeMap<u16, Vec<BTreeSet<u32>>> {
    let mut by_port: BTreeMap<u16, Vec<BTreeSet<u32>>> = BTreeMap::new();
    for (port, inode) in sockets {
        let Some(pids) = holders.get(inode) else {
            continue; // held by no process we can see: nothing to tell it by
        };
        let groups = by_port.entry(*port).or_default();
        let mut merged = pids.clone();
        groups.retain(|g| {
            if g.is_disjoint(&merged) {
                return true;
            }
            merged.extend(g.iter().copied());
            false
        });
        groups.push(merged);
    }
    by_port
}

/// Every process's open sockets: inode -> the processes (thread group ids) holding it.
fn socket_holders() -> Result<BTreeMap<u64, BTreeSet<u32>>> {
    let mut holders: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for e in std::fs::read_dir("/proc").context("listing /proc")? {
        let Ok(e) = e else { continue };
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // a process may exit while it is read: what cannot be read is skipped
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:["))
                .and_then(|t| t.strip_suffix(']'))
                .and_then(|t| t.parse::<u64>().ok());
            if let Some(i) = inode {
                holders.entry(i).or_default().insert(pid);
            }
        }
    }
    Ok(holders)
}

/// The server holding the cached ports' UDP sockets in this namespace: its process (of a group,
/// the highest PID: usually the one a supervisor started), or None if no process holds one. Fails if a port
/// has sockets of more than one server, or two ports of different servers, naming them.
pub fn the_server(ports: &[u16]) -> Result<Option<u32>> {
    let mut sockets = Vec::new();
    for f in ["/proc/self/net/udp", "/proc/self/net/udp6"] {
        // an IPv6-less kernel has no udp6
        if let Ok(text) = std::fs::read_to_string(f) {
            sockets.extend(udp_sockets(&text, ports));
        }
    }
    if sockets.is_empty() {
        return Ok(None);
    }
    // every port's sockets as one port's: one server for them all
    let all: Vec<(u16, u64)> = sockets.iter().map(|(_, i)| (0, *i)).collect();
    let holders = socket_holders()?;
    let by_port = servers_by_port(&sockets, &holders);
    let one = servers_by_port(&all, &holders);
    let shared = by_port
        .iter()
        .find(|(_, g)| g.len() > 1)
        .map(|(p, g)| (format!("UDP port {p} is"), g))
        .or_else(|| {
            one.get(&0)
                .filter(|g| g.len() > 1)
                .map(|g| ("the cached UDP ports are".to_string(), g))
        });
    let Some((what, groups)) = shared else {
        return Ok(one
            .get(&0)
            .and_then(|g| g.first())
            .and_then(|g| g.last())
            .copied());
    };
    let name = |pid: &u32| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        format!("{} ({pid})", comm.trim())
    };
    let said: Vec<String> = groups
        .iter()
        .map(|g| g.iter().map(name).collect::<Vec<_>>().join(", "))
        .collect();
    anyhow::bail!(
        "{what} held by {} servers in this namespace: {}; they would share one kernel cache, \
         and a get to one could be answered with another's value (give each server its own \
         port or namespace)",
        groups.len(),
        said.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/net/udp` as Linux 6.x prints it (two sockets on 11211, one on 53, one without a file).
    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  120: 0100C6C6:2BCB 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 31337 2 0000000000000000 0
  121: 0200C6C6:2BCB 00000000:0000 07 00000000:00000000 00:00000000 00000000   101        0 31338 2 0000000000000000 0
  122: 0100007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0
  123: 0300C6C6:2BCB 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 0 2 0000000000000000 0
";

    #[test]
    fn sockets_are_found_by_port() {
        assert_eq!(
            udp_sockets(UDP, &[11211]),
            vec![(11211, 31337), (11211, 31338)]
        );
        assert_eq!(udp_sockets(UDP, &[53, 11212]), vec![(53, 4242)]);
        assert!(udp_sockets("header only\n", &[11211]).is_empty());
    }

    #[test]
    fn sockets_with_a_process_in_common_are_one_server() {
        let set = |p: &[u32]| p.iter().copied().collect::<BTreeSet<u32>>();
        let holders: BTreeMap<u64, BTreeSet<u32>> = [
            (1, set(&[100])),
            (2, set(&[100])),
            (3, set(&[1, 200])), // bound by a supervisor, handed to 200
            (4, set(&[200])),
            (5, set(&[300])),
        ]
        .into();
        let servers = |s: &[(u16, u64)], h: &BTreeMap<u64, BTreeSet<u32>>| {
            servers_by_port(s, h)
                .into_iter()
                .map(|(p, g)| (p, g.len()))
                .collect::<Vec<_>>()
        };
        // one memcached's sockets (two addresses, say): one server
        assert_eq!(servers(&[(11211, 1), (11211, 2)], &holders), [(11211, 1)]);
        // a handed-down socket and the server's own: one server
        assert_eq!(servers(&[(11211, 3), (11211, 4)], &holders), [(11211, 1)]);
        // two servers on one port; another port's socket is its port's alone
        let two = servers_by_port(&[(11211, 1), (11211, 5), (11212, 4)], &holders);
        assert_eq!(two[&11211], vec![set(&[100]), set(&[300])]);
        assert_eq!(two[&11212], vec![set(&[200])]);
        // groups joined by a socket that two of them hold
        let joined: BTreeMap<u64, BTreeSet<u32>> = [
            (1, set(&[100])),
            (2, set(&[100])),
            (3, set(&[100, 200])),
            (4, set(&[200])),
        ]
        .into();
        assert_eq!(
            servers(&[(11211, 1), (11211, 4), (11211, 3), (11211, 2)], &joined),
            [(11211, 1)]
        );
        // a socket no visible process holds is not a server of its own
        assert_eq!(servers(&[(11211, 1), (11211, 9)], &holders), [(11211, 1)]);
    }
}
