//! memcached's command line (issue 15): the same refusals (message and exit code) as stock
//! memcached 1.6, and the behaviour of -M -C -F -A -s -a -d -P -Y -B -R -c -p -1 -U, compared
//! with memcached where both can run; a production command line serves.

mod common;
use common::*;
use inkproto::binary::{self, op};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INK: &str = env!("CARGO_BIN_EXE_inkcached");
const MC: &str = "/usr/bin/memcached";

#[test]
fn refusals_match_memcached() {
    if !have(MC) {
        return;
    }
    let lines: &[&str] = &[
        "-c 0",
        "-c -5",
        "-t 0",
        "-t x",
        "-R 0",
        "-x",
        "-p",
        "--bogus",
        "--mem=1",
        "--daemon=1",
        "-B foo",
        "-I 100",
        "-I 5q",
        "-I 2g",
        "-I 100k",
        "-m 1 -I 1m",
        "-I 2048m -m 8192",
        "-p 70000",
        "-f 1",
        "-f x",
        "-n 0",
        "-D",
        "-N 9",
        "-o foo=1",
        "-o bar",
        "-o modern,nope",
        "-o hashpower=5",
        "-o hashpower=40",
        "-o hashpower",
        "-o slab_automove=5",
        "-o slab_automove_ratio=2",
        "-o slab_automove_window=2",
        "-o tail_repair_time=5",
        "-o hash_algorithm=foo",
        "-o hash_algorithm",
        "-o lru_crawler_sleep=2000000",
        "-o lru_crawler_tocrawl=x",
        "-o hot_lru_pct=90",
        "-o hot_lru_pct=50,warm_lru_pct=40",
        "-o hot_max_factor=0",
        "-o temporary_ttl=5,no_lru_maintainer",
        "-o idle_timeout",
        "-o worker_logbuf_size=5",
        "-o watcher_logbuf_size=x",
        "-o read_buf_mem_limit",
        "-o slab_chunk_max=100",
        "-o slab_sizes=100-50",
        "-o slab_sizes=100-104",
        "-o slab_sizes=10",
        "-B binary -Y /nonexistent",
        "-Y /nonexistent",
        "-Y /etc/hostname -U 11",
    ];
    let mut failures = Vec::new();
    for l in lines {
        let mut args: Vec<&str> = vec!["-u", "root", "-l", "127.0.0.1", "-p", "0", "-U", "0"];
        args.extend(l.split(' '));
        let (mc_code, _, mc_err) = run_to_end(MC, &args);
        let (ink_code, _, ink_err) = run_to_end(INK, &args);
        let mc_err = mc_err.replace(MC, INK);
        if (mc_code, &mc_err) != (ink_code, &ink_err) || mc_code == 124 {
            failures.push(format!(
                "{l}\n  memcached: {mc_code} {mc_err:?}\n  inkcached: {ink_code} {ink_err:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn help_and_version() {
    let (code, out, _) = run_to_end(INK, &["-h"]);
    assert_eq!(code, 0);
    for o in [
        "-p, --port",
        "-o, --extended",
        "-Y, --auth-file",
        "idle_timeout",
        "ext_",
    ] {
        assert!(out.contains(o), "{o} missing in -h:\n{out}");
    }
    let (code, out, _) = run_to_end(INK, &["-V"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("inkcached 1.6.18"), "{out}");
}

#[test]
fn production_command_line_serves() {
    let p = free_port().to_string();
    let line = [
        "-p",
        &p,
        "-l",
        "127.0.0.1",
        "-m",
        "1024",
        "-c",
        "4096",
        "-t",
        "4",
        "-U",
        &p,
        "-o",
        "modern,lru_crawler,slab_reassign",
        "-B",
        "auto",
        "-R",
        "20",
        "-v",
    ];
    let mut child = Command::new(INK)
        .args(line)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let port: u16 = p.parse().unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "exited");
        assert!(t.elapsed() < Duration::from_secs(10), "not serving");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        text(port, b"set k 0 0 2\r\nhi\r\nget k\r\n"),
        b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n"
    );
    let settings = String::from_utf8(text(port, b"stats settings\r\n")).unwrap();
    for want in [
        "maxbytes 1073741824",
        "maxconns 4096",
        "num_threads 4",
        "udpport ",
        "reqs_per_event 20",
        "binding_protocol auto-negotiate",
        "slab_reassign yes",
        "lru_crawler yes",
        "verbosity 1",
    ] {
        assert!(settings.contains(want), "{want} in {settings}");
    }
    // binary on the same port, and UDP
    let mut c = connect(port);
    let mut r = Vec::new();
    binary::request(&mut r, op::GET, 1, 0, &[], b"k", &[]);
    c.write_all(&r).unwrap();
    let mut resp = [0u8; 30];
    c.read_exact(&mut resp).unwrap();
    assert_eq!(&resp[28..], b"hi");
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    u.send_to(
        &inkproto::udp::frame_request(7, b"get k\r\n"),
        ("127.0.0.1", port),
    )
    .unwrap();
    let mut buf = [0u8; 1500];
    let n = u.recv(&mut buf).unwrap();
    assert_eq!(&buf[8..n], b"VALUE k 0 2\r\nhi\r\nEND\r\n");
    let _ = child.kill();
    let _ = child.wait();
}

/// Starts `prog args` with `MEMCACHED_PORT_FILENAME` set; returns it and the file's lines once
/// written.
// the caller kills and waits for the child it gets
#[allow(clippy::zombie_processes)]
fn with_port_file(prog: &str, args: &[&str], file: &Path) -> (std::process::Child, String) {
    let _ = std::fs::remove_file(file);
    let mut child = Command::new(prog)
        .args(args)
        .env("MEMCACHED_PORT_FILENAME", file)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            return (child, s);
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{prog}: no port file");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn any_free_port_is_reported_as_memcached_does() {
    if !have(MC) {
        return;
    }
    let dir = std::env::temp_dir();
    let mut shapes = Vec::new();
    for (prog, name) in [(MC, "mc"), (INK, "ink")] {
        let f = dir.join(format!("di-portfile-{}-{name}", std::process::id()));
        let (mut child, s) = with_port_file(
            prog,
            &[
                "-u",
                "root",
                "-p",
                "-1",
                "-U",
                "-1",
                "-l",
                "127.0.0.1",
                "-t",
                "2",
            ],
            &f,
        );
        // masked ports, and each port serves
        let mut shape = Vec::new();
        for l in s.lines() {
            let (kind, port) = l.rsplit_once(": ").unwrap();
            let port: u16 = port.parse().unwrap();
            assert_ne!(port, 0);
            if kind == "TCP INET" {
                assert!(text(port, b"version\r\n").len() > 8);
            }
            shape.push(kind.to_string());
        }
        shapes.push(shape);
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&f);
    }
    assert_eq!(shapes[0], shapes[1]);
    assert_eq!(shapes[0], ["TCP INET", "UDP INET"]);
}

#[test]
fn cas_disabled_flush_disabled_and_no_evictions_match_memcached() {
    assert_same(
        &["-C"],
        &[
            "set {}a 0 0 1\r\nx\r\ngets {}a\r\ncas {}a 0 0 1 0\r\ny\r\ncas {}a 0 0 1 1\r\ny\r\nmg {}a c\r\nms {}a 1 C0\r\nz\r\nms {}a 1 C5 c\r\nz\r\nmg {}a v c\r\nma {}b N0 J5 c\r\nme {}a\r\n",
        ],
    );
    assert_same(
        &["-F"],
        &["set {}a 0 0 1\r\nx\r\nflush_all\r\nflush_all 10\r\nflush_all noreply\r\nflush_all x\r\nget {}a\r\n"],
    );
    // -M: both fill the same memory, then refuse instead of evicting
    let Some((mc, ink)) = pair(&["-m", "8", "-M"]) else {
        return;
    };
    for port in [mc.port, ink.port] {
        let mut c = connect(port);
        let v = vec![b'x'; 100_000];
        let mut stored = 0;
        let mut last = Vec::new();
        for i in 0..200 {
            let mut req = format!("set k{i} 0 0 {}\r\n", v.len()).into_bytes();
            req.extend_from_slice(&v);
            req.extend_from_slice(b"\r\n");
            last = request_until(&mut c, &req, b"\r\n");
            if last != b"STORED\r\n" {
                break;
            }
            stored += 1;
        }
        assert_eq!(
            last, b"SERVER_ERROR out of memory storing object\r\n",
            "port {port}"
        );
        assert!(stored >= 40, "only {stored} stored on {port}");
        let r = text(port, b"get k0\r\nmg k1 s\r\nstats\r\n");
        let s = String::from_utf8_lossy(&r);
        assert!(
            s.starts_with("VALUE k0 0 100000\r\n"),
            "k0 evicted on {port}"
        );
        assert!(s.contains("HD s100000\r\n"), "{port}");
        assert!(s.contains("STAT evictions 0\r\n"), "{port}");
        assert!(s.contains("STAT store_no_memory 1\r\n"), "{port}");
    }
}

#[test]
fn protocol_choice_matches_memcached() {
    let mut bin_get = Vec::new();
    binary::request(&mut bin_get, op::GET, 1, 0, &[], b"k", &[]);
    let bin = String::from_utf8_lossy(&bin_get).into_owned();
    // -B ascii reads a binary request as text; -B binary closes on text
    for b in ["ascii", "binary"] {
        let Some((mc, ink)) = pair(&["-B", b]) else {
            return;
        };
        for req in [format!("{bin}\r\nmn\r\n"), "get k\r\n".to_string()] {
            let a = raw_exchange(mc.port, req.as_bytes());
            let i = raw_exchange(ink.port, req.as_bytes());
            assert_eq!(a, i, "-B {b}: {req:?}");
        }
    }
}

/// Sends `req` and reads until EOF or a quiet second.
fn raw_exchange(port: u16, req: &[u8]) -> Vec<u8> {
    roundtrip_quiet(&mut connect(port), req, Duration::from_millis(500))
}

#[test]
fn requests_per_event_and_connection_limit_match_memcached() {
    let Some((mc, ink)) = pair(&["-R", "1"]) else {
        return;
    };
    let gets: String = (0..200).map(|i| format!("get k{i}\r\n")).collect();
    for port in [mc.port, ink.port] {
        let r = text(port, gets.as_bytes());
        assert_eq!(r, b"END\r\n".repeat(200));
        let s = String::from_utf8(text(port, b"stats\r\n")).unwrap();
        let y = testkit::stat_value(&s, "conn_yields").expect("STAT conn_yields");
        assert!(y > 0, "no yields on {port}");
    }
    // -c: both refuse the connections whose descriptor reaches the limit, with memcached's line
    let Some((mc, ink)) = pair(&["-c", "40"]) else {
        return;
    };
    for port in [mc.port, ink.port] {
        let mut open = Vec::new();
        let refused = loop {
            let mut c = connect(port);
            let r = text_on(&mut c, b"version\r\n");
            if !r.starts_with(b"VERSION") {
                break r;
            }
            open.push(c);
            assert!(open.len() < 40, "no limit on {port}");
        };
        assert_eq!(
            refused, b"ERROR Too many open connections\r\n<EOF>",
            "{port}"
        );
        assert!(open.len() >= 5, "{port}: {}", open.len());
        drop(open);
    }
}

#[test]
fn ascii_authentication_matches_memcached() {
    let f = std::env::temp_dir().join(format!("di-auth-{}", std::process::id()));
    std::fs::write(&f, "u1:p1\nu2:pass two\n").unwrap();
    let path = f.to_str().unwrap().to_string();
    let Some((mc, ink)) = pair(&["-Y", &path, "-U", "0"]) else {
        return;
    };
    // (an unauthenticated connection answers once per read: a request at a time)
    let steps: &[&[&str]] = &[
        &[
            "get a\r\n",
            "get a\r\nmn\r\n",
            "set x 0 0 5\r\nu1 p2\r\n",
            "set x 0 0 5\r\nu1 p1\r\nset a 0 0 1\r\nz\r\nget a\r\n",
        ],
        &[
            "set x 0 0 5\r\nu1 p1xx\r\n",
            "set x\r\n",
            "set x 0 0 3\r\nabc\r\n",
            "set x 0 0 2\r\nu1\r\n",
        ],
        &[
            "set x 0 0 9\r\nu2 pass two\r\n",
            "set x 0 0 12\r\nu2 pass two\r\nmn\r\n",
        ],
        &["set x 0 0 5\r\n", "u1 p1\r\nget x\r\n"],
    ];
    for s in steps {
        let mut a = connect(mc.port);
        let mut b = connect(ink.port);
        for req in *s {
            let q = Duration::from_millis(200);
            let x = roundtrip_quiet(&mut a, req.as_bytes(), q);
            let y = roundtrip_quiet(&mut b, req.as_bytes(), q);
            assert_eq!(
                String::from_utf8_lossy(&x),
                String::from_utf8_lossy(&y),
                "{req:?} in {s:?}"
            );
        }
    }
    let st = String::from_utf8(text(ink.port, b"set x 0 0 5\r\nu1 p1\r\nstats\r\n")).unwrap();
    assert!(st.contains("STAT auth_cmds "), "{st}");
    let _ = std::fs::remove_file(&f);
}

#[test]
fn unix_socket_with_mask_as_memcached() {
    if !have(MC) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let mut modes = Vec::new();
    for (prog, name) in [(MC, "mc"), (INK, "ink")] {
        let path = std::env::temp_dir().join(format!("di-sock-{}-{name}", std::process::id()));
        let p = path.to_str().unwrap();
        let mut child = Command::new(prog)
            .args(["-u", "root", "-s", p, "-a", "640", "-t", "2"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        let mut s = loop {
            if let Ok(s) = std::os::unix::net::UnixStream::connect(&path) {
                break s;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{prog}: no socket");
            std::thread::sleep(Duration::from_millis(20));
        };
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(b"set a 0 0 1\r\nx\r\nget a\r\nstats settings\r\n")
            .unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        while !out.ends_with(b"END\r\nEND\r\n")
            && !out.ends_with(b"STAT memory_file (null)\r\nEND\r\n")
        {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0);
            out.extend_from_slice(&buf[..n]);
            if String::from_utf8_lossy(&out).matches("END\r\n").count() >= 2 {
                break;
            }
        }
        let o = String::from_utf8_lossy(&out);
        assert!(
            o.starts_with("STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n"),
            "{o}"
        );
        assert!(o.contains(&format!("STAT domain_socket {p}\r\n")), "{o}");
        assert!(o.contains("STAT umask 640\r\n"), "{o}");
        modes.push(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777);
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&path);
    }
    assert_eq!(modes[0], modes[1]);
    assert_eq!(modes[0], 0o640);
}

#[test]
fn daemon_writes_its_pid_file_and_removes_it() {
    let dir = std::env::temp_dir();
    let pidf = dir.join(format!("di-pid-{}", std::process::id()));
    let port = free_port();
    let p = port.to_string();
    let st = Command::new(INK)
        .args([
            "-d",
            "-P",
            pidf.to_str().unwrap(),
            "-p",
            &p,
            "-l",
            "127.0.0.1",
            "-t",
            "2",
        ])
        .status()
        .unwrap();
    assert!(st.success(), "the parent exits 0 once forked");
    let t = Instant::now();
    let pid = loop {
        if let Ok(s) = std::fs::read_to_string(&pidf) {
            if s.ends_with('\n') {
                break s.trim().parse::<i32>().unwrap();
            }
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no pid file");
        std::thread::sleep(Duration::from_millis(20));
    };
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(10), "daemon not serving");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(text(port, b"version\r\n").starts_with(b"VERSION "));
    let s = String::from_utf8(text(port, b"stats\r\n")).unwrap();
    assert!(s.contains(&format!("STAT pid {pid}\r\n")), "{s}");
    // SAFETY: kill sends a signal to the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    while pidf.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "pid file left behind"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_timeout_closes_idle_connections() {
    let srv = inkcached(&["-o", "idle_timeout=1"]);
    let mut c = connect(srv.port);
    assert!(text_on(&mut c, b"version\r\n").starts_with(b"VERSION"));
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut b = [0u8; 16];
    assert_eq!(c.read(&mut b).unwrap_or(0), 0, "closed");
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );
    let s = String::from_utf8(text(srv.port, b"stats\r\n")).unwrap();
    assert!(s.contains("STAT idle_kicks 1\r\n"), "{s}");
}
