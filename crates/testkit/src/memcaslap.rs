//! libmemcached's memcaslap, run so that a defect of its own cannot pass for a server's.
//!
//! memcaslap's UDP sockets are unconnected and set SO_REUSEADDR before their first send binds them
//! to an ephemeral port. The kernel does not count sockets that both set SO_REUSEADDR as a
//! conflict when it picks that port, so two of them can be given the same one: every reply to
//! either then reaches one of them, and memcaslap aborts ("ms_sort_udp_packet: Assertion `req_id
//! == c->request_id % (1 << 16)' failed") or waits for a reply that went to the other. With 32
//! sockets (`-T 2 -c 16`) and Linux's 28,232 ephemeral ports this happens in ~1.8% of runs, with
//! stock memcached as with any server (32 such sockets shared a port in 37 of 2,000 tries here).
//!
//! [`run`] therefore makes again a run that shows this defect: one in which two of memcaslap's
//! sockets were seen on one port (they are watched while it runs), or one that ended on that
//! assertion (memcaslap usually aborts within a millisecond of its first sends, before a socket
//! could be seen). Any other run is returned as it ended, failure or not: the caller judges it.
//! Three void runs in a row fail. A server that answered twice or late in most runs fails so;
//! one that did it in fewer than one run in three would be taken for this defect here.

use std::{
    collections::{HashMap, HashSet},
    fs,
    io::Read,
    process::{Command, Output, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// Runs in a row at most: a void run repeats with fresh random ports, so three void runs in a row
/// (~6 in a million) say something else is wrong.
const TRIES: u32 = 3;

/// What memcaslap prints when a datagram answers a request other than the one its socket awaits.
const FOREIGN_REPLY: &str = "ms_sort_udp_packet: Assertion `req_id == c->request_id";

/// How often memcaslap's sockets are looked at: they bind at their first send, just after start,
/// and keep their port until memcaslap exits.
const SAMPLE: Duration = Duration::from_millis(20);

/// Runs the command `make` builds, which must become memcaslap itself (`memcaslap ...`, or
/// `ip netns exec NS ...` and `taskset ...`, which exec it, but not `timeout`, which forks), killing
/// it past `limit`. Returns its output; a run that shows memcaslap's port defect is made again
/// (module docs), up to [`TRIES`] times.
pub fn run(make: impl Fn() -> Command, limit: Duration) -> Result<Output> {
    for attempt in 1..=TRIES {
        let (out, shared) = run_once(make(), limit)?;
        let why = match shared {
            Some(port) => format!("two of its UDP sockets were given local port {port}"),
            None if !out.status.success()
                && String::from_utf8_lossy(&out.stderr).contains(FOREIGN_REPLY) =>
            {
                "it aborted on a reply to another socket's request".to_string()
            }
            None => return Ok(out),
        };
        eprintln!(
            "memcaslap: {why} (its own SO_REUSEADDR defect, see testkit::memcaslap): run \
             {attempt} of {TRIES} is void"
        );
    }
    bail!("memcaslap: {TRIES} runs in a row showed its port defect (testkit::memcaslap)")
}

/// One run: its output, and a local port two of its UDP sockets shared, if any did.
fn run_once(mut cmd: Command, limit: Duration) -> Result<(Output, Option<u16>)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let start = Instant::now();
    let mut shared = None;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for memcaslap")? {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{cmd:?} still ran after {limit:?}: killed");
        }
        shared = shared.or_else(|| shared_udp_port(child.id()));
        thread::sleep(SAMPLE);
    };
    let out = Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    Ok((out, shared))
}

/// Reads a child's pipe to its end on a thread of its own (a pipe left unread could fill and stall
/// the child while it is being polled).
fn drain(pipe: Option<impl Read + Send + 'static>) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// The arguments of the tests' verifying run against `server` ("ADDR:PORT"): 3 seconds, 2 threads
/// of 16 connections, 10% of gets checked against what was set, over UDP if `udp`.
pub fn verify_args(server: &str, udp: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "-s",
        server,
        "-t",
        "3s",
        "-T",
        "2",
        "-c",
        "16",
        "--verify=0.1",
        "-b",
    ]
    .map(String::from)
    .into();
    if udp {
        a.push("-U".into());
    }
    a
}

/// The figure memcaslap printed on its first line `<name>: <number>` (cmd_get, verify_failed,
/// udp_timeout, ...), if any.
pub fn stat(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let v = l.trim().strip_prefix(name)?.strip_prefix(':')?;
        v.trim().parse().ok()
    })
}

/// A local port that two UDP sockets (IPv4 or IPv6) of process `pid` are bound to, if any: read
/// from its descriptors and its network namespace's socket tables (`/proc/<pid>/net/udp*`).
/// `None` also if the process is gone.
pub fn shared_udp_port(pid: u32) -> Option<u16> {
    let inodes: HashSet<u64> = fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| {
            let link = fs::read_link(e.ok()?.path()).ok()?;
            let link = link.to_str()?;
            link.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    let mut by_port: HashMap<u16, u32> = HashMap::new();
    for table in ["udp", "udp6"] {
        let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for (port, inode) in text.lines().skip(1).filter_map(udp_line) {
            if inodes.contains(&inode) {
                let n = by_port.entry(port).or_default();
                *n += 1;
                if *n > 1 {
                    return Some(port);
                }
            }
        }
    }
    None
}

/// The local port and inode of a line of /proc/net/udp or udp6
/// ("sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...",
/// the address as hex "ADDR:PORT").
fn udp_line(line: &str) -> Option<(u16, u64)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
    let inode = f.get(9)?.parse().ok()?;
    Some((port, inode))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::socket::{
        bind, getsockname, setsockopt, socket, sockopt::ReuseAddr, AddressFamily, SockFlag,
        SockType, SockaddrIn,
    };
    use std::os::fd::{AsRawFd, OwnedFd};

    fn udp(reuse: bool, port: u16) -> (OwnedFd, u16) {
        let fd = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        setsockopt(&fd, ReuseAddr, &reuse).unwrap();
        bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port)).unwrap();
        let at: SockaddrIn = getsockname(fd.as_raw_fd()).unwrap();
        (fd, at.port())
    }

    /// What memcaslap's sockets may come to: two SO_REUSEADDR sockets on one port are found, and
    /// sockets on ports of their own are not.
    #[test]
    fn finds_two_udp_sockets_on_one_port() {
        let me = std::process::id();
        let (a, pa) = udp(true, 0);
        let (b, pb) = udp(true, 0);
        assert_ne!(pa, pb);
        assert_eq!(shared_udp_port(me), None, "ports {pa} and {pb}");
        let (c, pc) = udp(true, pa);
        assert_eq!(
            pc, pa,
            "SO_REUSEADDR lets a second UDP socket bind the port"
        );
        assert_eq!(shared_udp_port(me), Some(pa));
        drop((a, b, c));
        assert_eq!(shared_udp_port(me), None);
    }

    #[test]
    fn reads_stat_lines() {
        let text = "cmd_get_x: 9\ncmd_get: 1234\n  verify_failed: 0\nTPS: 88572 Net_rate: 1M/s";
        assert_eq!(stat(text, "cmd_get"), Some(1234));
        assert_eq!(stat(text, "verify_failed"), Some(0));
        assert_eq!(stat(text, "udp_timeout"), None);
        assert_eq!(stat(text, "TPS"), None, "not a lone number");
    }

    #[test]
    fn reads_proc_net_udp_lines() {
        let v4 = "  740: 0100007F:9C40 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 51234 2 0000000000000000 0";
        assert_eq!(udp_line(v4), Some((0x9c40, 51234)));
        let v6 = "  740: 00000000000000000000000000000000:2AF8 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 777 2 0000000000000000 0";
        assert_eq!(udp_line(v6), Some((0x2af8, 777)));
        assert_eq!(udp_line("  sl  local_address rem_address   st"), None);
    }
}
