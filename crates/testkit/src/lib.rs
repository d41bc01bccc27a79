//! Test harness for inkcache: network namespaces joined by a veth pair, stock memcached (or
//! inkcached) inside the server namespace, and clients run inside the client namespace.
//!
//! Every object cleans up on drop, so a failing (panicking) test leaves nothing behind, and names
//! are unique per process and object, so tests run in parallel. Addresses come from the
//! benchmarking ranges (198.18.0.0/15, fd00::/8) and live only inside the namespaces.
//!
//! A test whose prerequisite is missing declares a skip ([`skip`], [`skip_unless!`],
//! [`require_tool!`]) that fails under CI instead of passing in silence.

use std::{
    fs::File,
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use nix::sched::{setns, CloneFlags};

pub mod memcaslap;
pub mod memccapable;
pub mod ports;
mod skip;
pub use skip::{have_tool, skip, skips_fail, tool_or_skip, Skipped};
pub use tempfile::TempDir;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A short name unique to this process and call: `<prefix><pid%10000>x<seq>` (fits IFNAMSIZ).
pub fn unique(prefix: &str) -> String {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 10000)
}

/// A fresh directory under the system's temporary directory (`TMPDIR`), its name starting with
/// `prefix`, removed with everything in it when dropped (also when the test panics).
pub fn temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("creating a temporary directory")
}

/// Whether a named network namespace (`ip netns add NAME`) exists.
pub fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// Runs a command, failing with its stderr if it exits non-zero.
pub fn sh(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

fn ip(args: &[&str]) -> Result<()> {
    sh(Command::new("ip").args(args)).map(|_| ())
}

/// A network namespace (`ip netns add`), deleted on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(prefix: &str) -> Result<Self> {
        let name = unique(prefix);
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// A command run inside the namespace (`ip netns exec`).
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// Runs `f` on a thread that has joined this namespace: sockets it opens live there.
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> T {
        in_netns(&self.name, f).expect("joining the network namespace")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Runs `f` on a thread that has joined the network namespace `name` (under /run/netns); fails if
/// the namespace cannot be joined. A panic in `f` propagates.
pub fn in_netns<T: Send>(name: &str, f: impl FnOnce() -> T + Send) -> Result<T> {
    let path = PathBuf::from("/run/netns").join(name);
    thread::scope(|s| {
        s.spawn(|| {
            let fd = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
            setns(fd, CloneFlags::CLONE_NEWNET)
                .with_context(|| format!("joining network namespace {name}"))?;
            Ok(f())
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

/// Two namespaces joined by a veth pair, with IPv4 and IPv6 addresses on both ends.
pub struct Pair {
    pub server: Netns,
    pub client: Netns,
    pub srv_if: String,
    pub cli_if: String,
}

pub const SRV_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const CLI_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
pub const SRV_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
pub const CLI_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

impl Pair {
    pub fn new() -> Result<Self> {
        let server = Netns::new("iks")?;
        let client = Netns::new("ikc")?;
        let srv_if = unique("ks");
        let cli_if = unique("kc");
        ip(&[
            "link",
            "add",
            &srv_if,
            "netns",
            &server.name,
            "type",
            "veth",
            "peer",
            "name",
            &cli_if,
            "netns",
            &client.name,
        ])?;
        for (ns, ifname, v4, v6) in [
            (&server, &srv_if, SRV_V4, SRV_V6),
            (&client, &cli_if, CLI_V4, CLI_V6),
        ] {
            ip(&[
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("{v4}/24"),
                "dev",
                ifname,
            ])?;
            ip(&[
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                ifname,
                "nodad",
            ])?;
            ip(&["-n", &ns.name, "link", "set", ifname, "up"])?;
        }
        Ok(Pair {
            server,
            client,
            srv_if,
            cli_if,
        })
    }
}

/// Which memcached-protocol server to run: stock memcached by default, or inkcached when the
/// environment says `INKCACHE_TEST_SERVER=inkcached` (and `INKCACHED_BIN` points at it).
pub fn server_program() -> PathBuf {
    match std::env::var("INKCACHE_TEST_SERVER").as_deref() {
        Ok("inkcached") => std::env::var_os("INKCACHED_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/release/inkcached")),
        _ => PathBuf::from("/usr/bin/memcached"),
    }
}

/// Waits up to 10 s until a TCP connection to `addr` from namespace `ns` is accepted: a server
/// `what` started there is listening.
pub fn wait_listening(ns: &Netns, addr: SocketAddr, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ns.run(|| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()) {
        if Instant::now() > deadline {
            bail!("{what} did not start listening on {addr}");
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A memcached-protocol server (UDP and TCP on one port) inside a namespace; killed on drop.
pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub ns_name: String,
    extra: Vec<String>,
}

impl Server {
    pub fn start(ns: &Netns, port: u16) -> Result<Self> {
        Self::start_with(ns, port, &[])
    }

    pub fn start_with(ns: &Netns, port: u16, extra: &[&str]) -> Result<Self> {
        let mut s = Server {
            child: None,
            port,
            ns_name: ns.name.clone(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        s.spawn(ns)?;
        Ok(s)
    }

    fn spawn(&mut self, ns: &Netns) -> Result<()> {
        let prog = server_program();
        let port = self.port.to_string();
        let mut cmd = ns.cmd(&prog);
        cmd.args([
            "-u", "root", "-p", &port, "-U", &port, "-t", "2", "-m", "64",
        ])
        .args(&self.extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", prog.display()))?;
        self.child = Some(child);
        // Ready when TCP accepts.
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.port);
        wait_listening(ns, addr, &prog.display().to_string())
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills and starts the server again on the same port (an empty cache).
    pub fn restart(&mut self, ns: &Netns) -> Result<()> {
        self.kill();
        self.spawn(ns)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Path of a binary built by this workspace (`target/<profile>/<name>`), for crates whose tests
/// need another crate's binary.
/// The value of `STAT <name> <value>` in the text of a `stats` answer, if it has the line and the
/// value is a number.
pub fn stat_value(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix("STAT ")?
            .strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test> -> target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    dir.join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_value_reads_one_stat_line() {
        let text = "STAT pid 7\r\nSTAT get_hits_total x\r\nSTAT get_hits 42\r\nEND\r\n";
        assert_eq!(stat_value(text, "get_hits"), Some(42));
        assert_eq!(stat_value(text, "pid"), Some(7));
        assert_eq!(stat_value(text, "get_hits_total"), None); // not a number
        assert_eq!(stat_value(text, "get"), None); // only whole names
        assert_eq!(stat_value(text, "uptime"), None);
    }
}
