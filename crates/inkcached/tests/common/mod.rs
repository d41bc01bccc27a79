//! Test helpers: start inkcached (and stock memcached) on a free 127.0.0.1 port, killed on drop.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Server {
    pub child: Child,
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free for both TCP and UDP on 127.0.0.1 right now, found without listening on it
/// (`testkit::ports`: a listener there would be inherited by any child spawned meanwhile, and
/// could answer `wait_ready`'s probe for a server that failed to bind the port).
pub fn free_port() -> u16 {
    testkit::ports::free_port(std::net::Ipv4Addr::LOCALHOST.into())
}

fn wait_ready(child: &mut Child, port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        // and still running after it: a connect alone could reach another listener that took
        // the port while this server failed to bind it
        if TcpStream::connect(("127.0.0.1", port)).is_ok_and(|s| !self_connected(&s))
            && matches!(child.try_wait(), Ok(None))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Whether a connection is the socket's own: a connect to a port nothing listens on can pick that
/// port as its source and meet itself (TCP's simultaneous open), since free ports are ephemeral
/// ones. A readiness probe that took that for the server returned before the server listened,
/// and the test's first connect was refused (seen in CI: robustness's
/// random_input_fuzz_keeps_server_healthy).
pub fn self_connected(s: &TcpStream) -> bool {
    matches!((s.local_addr(), s.peer_addr()), (Ok(l), Ok(p)) if l == p)
}

/// Servers start one at a time: the tests of a binary run in parallel, and two of them could
/// otherwise pick the same free port before either server had bound it. One test then talked to
/// the other's server, and met "connection refused" once that test ended (seen in CI:
/// dropin_meta's http_requests_close_the_connection).
static STARTING: Mutex<()> = Mutex::new(());

fn start_with(program: &str, extra: &[&str]) -> Server {
    let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..20 {
        let port = free_port();
        let p = port.to_string();
        let mut args = vec!["-p", &p, "-U", &p, "-l", "127.0.0.1"];
        args.extend_from_slice(extra);
        let mut child = Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
        if wait_ready(&mut child, port) {
            return Server { child, port };
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("could not start {program}");
}

/// inkcached with `-t 2` and the given extra flags.
pub fn inkcached(extra: &[&str]) -> Server {
    let mut a = if extra.contains(&"-t") {
        vec![]
    } else {
        vec!["-t", "2"]
    };
    a.extend_from_slice(extra);
    start_with(env!("CARGO_BIN_EXE_inkcached"), &a)
}

/// Stock memcached, if installed.
pub fn memcached() -> Option<Server> {
    if !Path::new("/usr/bin/memcached").exists() {
        return None;
    }
    // memcached refuses to run as root without -u.
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let extra: &[&str] = if root { &["-u", "root"] } else { &[] };
    Some(start_with("/usr/bin/memcached", extra))
}

/// True if `tool` exists; otherwise declares the skip (`testkit::skip`: a failure under CI) and
/// the test returns.
pub fn have(tool: &str) -> bool {
    testkit::tool_or_skip(tool)
}

/// libmemcached's memccapable, a full check of `proto` against a fresh inkcached, passes (without
/// it: a declared skip).
pub fn memccapable_passes(proto: testkit::memccapable::Protocol) {
    testkit::require_tool!(testkit::memccapable::BIN);
    let srv = inkcached(&[]);
    testkit::memccapable::check(Command::new("timeout"), "127.0.0.1", srv.port, proto);
}

/// Runs the Python client script tests/py/`script` against a fresh inkcached (its port as the
/// argument) and asserts that it exited 0 and printed `ALL OK`. Without python3 or its module
/// `module` (Debian's `package`), declares the skip (a failure under CI).
pub fn python_client_passes(module: &str, package: &str, script: &str) {
    testkit::require_tool!("/usr/bin/python3");
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    testkit::skip_unless!(ok, "{module} is not installed ({package})");
    let srv = inkcached(&[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/py")
        .join(script);
    let out = Command::new("timeout")
        .arg("60")
        .arg("/usr/bin/python3")
        .arg(&script)
        .arg(srv.port.to_string())
        .output()
        .expect("running timeout python3");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{} failed:\n{text}", script.display());
    assert!(text.contains("ALL OK"), "{text}");
}

pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `req` and reads until the answer stops arriving (quiet for `quiet`) or EOF.
pub fn roundtrip_quiet(s: &mut TcpStream, req: &[u8], quiet: Duration) -> Vec<u8> {
    s.write_all(req).unwrap();
    s.set_read_timeout(Some(quiet)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) => {
                out.extend_from_slice(b"<EOF>");
                break;
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    out
}

/// Sends `req` and reads until the reply ends with `end`.
pub fn request_until(s: &mut TcpStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).expect("reply in time");
        assert!(n > 0, "EOF; got so far {:?}", String::from_utf8_lossy(&out));
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Stock memcached and inkcached, both started with `extra`; None (SKIP, or a failure under
/// CI) without memcached.
pub fn pair(extra: &[&str]) -> Option<(Server, Server)> {
    if !have("/usr/bin/memcached") {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut m: Vec<&str> = if root { vec!["-u", "root"] } else { vec![] };
    m.extend_from_slice(extra);
    if !extra.contains(&"-t") {
        m.extend_from_slice(&["-t", "2"]);
    }
    let mc = start_with("/usr/bin/memcached", &m);
    let ink = inkcached(extra);
    Some((mc, ink))
}

/// Sends `req` plus `mn\r\n` and reads up to its `MN\r\n` (or EOF, shown as `<EOF>`): the whole
/// answer to `req`, however slowly it comes. The sentinel's answer is removed.
pub fn text(port: u16, req: &[u8]) -> Vec<u8> {
    let mut s = connect(port);
    text_on(&mut s, req)
}

/// As [`text`], on an open connection.
pub fn text_on(s: &mut TcpStream, req: &[u8]) -> Vec<u8> {
    let mut r = req.to_vec();
    r.extend_from_slice(b"mn\r\n");
    s.write_all(&r).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if out.ends_with(b"MN\r\n") {
            out.truncate(out.len() - 4);
            break;
        }
        match s.read(&mut buf) {
            Ok(0) => {
                out.extend_from_slice(b"<EOF>");
                break;
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                out.extend_from_slice(b"<EOF>");
                break;
            }
            Err(e) => panic!(
                "no answer in time ({e}); so far {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    out
}

/// Runs each script (`{}` replaced by a per-script prefix) on a fresh connection to both
/// servers and lists every difference.
pub fn differences(mc: u16, ink: u16, scripts: &[&str]) -> Vec<String> {
    let mut failures = Vec::new();
    for (i, s) in scripts.iter().enumerate() {
        let s = s.replace("{}", &format!("s{i}_")).into_bytes();
        let a = text(mc, &s);
        let b = text(ink, &s);
        if a != b {
            failures.push(format!(
                "request {:?}\n  memcached: {:?}\n  inkcached: {:?}",
                String::from_utf8_lossy(&s),
                String::from_utf8_lossy(&a),
                String::from_utf8_lossy(&b)
            ));
        }
    }
    failures
}

/// Asserts that every script gets the same bytes from stock memcached and inkcached started
/// with `extra` (fresh servers: CAS values line up).
pub fn assert_same(extra: &[&str], scripts: &[&str]) {
    let Some((mc, ink)) = pair(extra) else {
        return;
    };
    let f = differences(mc.port, ink.port, scripts);
    assert!(
        f.is_empty(),
        "{} of {} differ:\n{}",
        f.len(),
        scripts.len(),
        f.join("\n")
    );
}

/// Runs `program args` to completion: (exit code, stdout, stderr).
pub fn run_to_end(program: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("timeout")
        .arg("10")
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
