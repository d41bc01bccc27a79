//! The AF_XDP path and key steering, in network namespaces over a veth pair: third-party clients
//! over AF_XDP, other traffic untouched, clean exit and restart, per-worker key ownership.
//! Run as root (namespaces, XDP); a missing tool says SKIP and fails under CI.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{
    memcaslap,
    memccapable::{self, Protocol},
    Netns, Pair, SRV_V4, SRV_V6,
};

struct Srv {
    child: Child,
    port: u16,
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// inkcached in `ns` on `port` (TCP and UDP) with `extra` flags; waits until TCP answers.
fn start(ns: &Netns, port: u16, extra: &[&str]) -> Srv {
    let p = port.to_string();
    let child = ns
        .cmd(env!("CARGO_BIN_EXE_inkcached"))
        .args(["-p", &p, "-U", &p, "-t", "2"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn inkcached");
    let mut s = Srv { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr = SocketAddr::from((SRV_V4, port));
    loop {
        assert!(
            s.child.try_wait().unwrap().is_none(),
            "inkcached exited at start"
        );
        if ns.run(|| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()) {
            return s;
        }
        assert!(Instant::now() < deadline, "inkcached did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn udp_request(sock: &UdpSocket, to: SocketAddr, id: u16, body: &[u8]) -> Vec<u8> {
    let mut req = vec![(id >> 8) as u8, id as u8, 0, 0, 0, 1, 0, 0];
    req.extend_from_slice(body);
    sock.send_to(&req, to).unwrap();
    let mut parts: Vec<(u16, Vec<u8>)> = Vec::new();
    let mut total = 1;
    let mut buf = [0u8; 2048];
    while parts.len() < total {
        let (n, _) = sock.recv_from(&mut buf).expect("UDP answer");
        assert!(n >= 8);
        if u16::from_be_bytes([buf[0], buf[1]]) != id {
            continue;
        }
        total = u16::from_be_bytes([buf[4], buf[5]]) as usize;
        parts.push((u16::from_be_bytes([buf[2], buf[3]]), buf[8..n].to_vec()));
    }
    parts.sort();
    parts.into_iter().flat_map(|(_, d)| d).collect()
}

fn tcp_roundtrip(s: &mut TcpStream, req: &[u8], end: &[u8]) -> Vec<u8> {
    s.write_all(req).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn stat(ns: &Netns, port: u16, name: &str) -> u64 {
    let text = ns.run(|| {
        let mut s = TcpStream::connect((SRV_V4, port)).unwrap();
        tcp_roundtrip(&mut s, b"stats\r\n", b"END\r\n")
    });
    let text = String::from_utf8_lossy(&text).into_owned();
    testkit::stat_value(&text, name).unwrap_or_else(|| panic!("no stat {name} in {text}"))
}

fn port() -> u16 {
    // a namespace of our own: any port is free
    11211
}

/// The XDP program id on `iface` in `ns` (0: none).
fn xdp_prog(ns: &Netns, iface: &str) -> u32 {
    let out = Command::new("ip")
        .args(["-n", &ns.name, "-d", "link", "show", iface])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .skip_while(|w| *w != "prog/xdp")
        .nth(2)
        .and_then(|id| id.parse().ok())
        .unwrap_or(0)
}

#[test]
fn afxdp_answers_udp_and_third_party_clients_pass() {
    let pair = Pair::new().unwrap();
    // room for every value memcaslap sets below: at the default 64 MB, a fast run (~63,000 sets
    // of 1 KiB in 3 s) evicted, and memcaslap counted the evicted keys as verify misses
    let srv = start(
        &pair.server,
        port(),
        &["--afxdp", &pair.srv_if, "-m", "1024"],
    );
    assert_ne!(
        xdp_prog(&pair.server, &pair.srv_if),
        0,
        "no XDP program attached"
    );
    let to4 = SocketAddr::from((SRV_V4, srv.port));
    let to6 = SocketAddr::from((SRV_V6, srv.port));
    pair.client.run(|| {
        let mut t = TcpStream::connect(to4).unwrap();
        let big = "x".repeat(5000);
        let set = format!(
            "set big 7 0 {}\r\n{big}\r\nset k 3 0 2\r\nhi\r\n",
            big.len()
        );
        assert_eq!(
            tcp_roundtrip(&mut t, set.as_bytes(), b"STORED\r\nSTORED\r\n"),
            b"STORED\r\nSTORED\r\n"
        );
        for to in [to4, to6] {
            let u = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
            u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            assert_eq!(
                udp_request(&u, to, 1, b"get k\r\n"),
                b"VALUE k 3 2\r\nhi\r\nEND\r\n"
            );
            assert_eq!(udp_request(&u, to, 2, b"get nope\r\n"), b"END\r\n");
            // an answer of several datagrams, each built by inkcached
            let want = format!("VALUE big 7 {}\r\n{big}\r\nEND\r\n", big.len());
            assert_eq!(udp_request(&u, to, 3, b"get big\r\n"), want.as_bytes());
            assert_eq!(udp_request(&u, to, 4, b"bogus\r\n"), b"ERROR\r\n");
            assert_eq!(
                udp_request(&u, to, 5, b"set u 0 0 1\r\nz\r\nget u k\r\n"),
                b"STORED\r\nVALUE u 0 1\r\nz\r\nVALUE k 3 2\r\nhi\r\nEND\r\n"
            );
            assert_eq!(
                udp_request(&u, to, 6, b"mg k v f\r\n"),
                b"VA 2 f3\r\nhi\r\n"
            );
        }
    });
    let rx = stat(&pair.client, srv.port, "afxdp_rx_packets");
    assert_eq!(rx, 12, "every UDP request went through AF_XDP");
    assert!(stat(&pair.client, srv.port, "afxdp_tx_packets") >= 14);

    if testkit::tool_or_skip("/usr/bin/memcaslap") {
        let args = memcaslap::verify_args(&to4.to_string(), true);
        let cmd = || {
            let mut cmd = pair.client.cmd("/usr/bin/memcaslap");
            cmd.args(&args);
            cmd
        };
        let out = memcaslap::run(cmd, Duration::from_secs(60)).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "memcaslap failed:\n{text}");
        let stat_line = |name: &str| -> u64 {
            memcaslap::stat(&text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        assert_eq!(stat_line("verify_failed"), 0, "{text}");
        assert_eq!(stat_line("verify_misses"), 0, "{text}");
        assert_eq!(stat_line("udp_timeout"), 0, "{text}");
        assert!(stat_line("cmd_get") > 1000, "{text}");
        assert!(stat(&pair.client, srv.port, "afxdp_rx_packets") > rx + 1000);
    }
    if testkit::tool_or_skip(memccapable::BIN) {
        memccapable::check(
            pair.client.cmd("timeout"),
            &SRV_V4.to_string(),
            srv.port,
            Protocol::Ascii,
        );
    }
}

#[test]
fn afxdp_leaves_other_traffic_alone() {
    if !testkit::tool_or_skip("/usr/bin/ping") {
        return;
    }
    let pair = Pair::new().unwrap();
    let srv = start(&pair.server, port(), &["--afxdp", &pair.srv_if]);
    // forget the neighbours: ARP and NDP must flow again through the attached interface
    for ns in [&pair.server, &pair.client] {
        let _ = Command::new("ip")
            .args(["-n", &ns.name, "neigh", "flush", "all"])
            .status();
    }
    for (v, dst) in [("-4", SRV_V4.to_string()), ("-6", SRV_V6.to_string())] {
        let st = pair
            .client
            .cmd("ping")
            .args([v, "-c", "2", "-W", "2", "-i", "0.2", &dst])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "ping {v} failed with AF_XDP attached");
    }
    // TCP and UDP on other ports reach their own sockets in the server namespace
    let (tl, ul) = pair.server.run(|| {
        (
            TcpListener::bind((SRV_V4, 9100)).unwrap(),
            UdpSocket::bind((SRV_V4, 9101)).unwrap(),
        )
    });
    let acceptor = std::thread::spawn(move || {
        let (mut c, _) = tl.accept().unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).unwrap();
        c.write_all(&b).unwrap();
    });
    pair.client.run(|| {
        let mut c = TcpStream::connect((SRV_V4, 9100)).unwrap();
        c.write_all(b"hello").unwrap();
        let mut b = [0u8; 5];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"hello");
        let u = UdpSocket::bind("0.0.0.0:0").unwrap();
        u.send_to(b"\0\x01\0\0\0\x01\0\0get k\r\n", (SRV_V4, 9101))
            .unwrap();
    });
    acceptor.join().unwrap();
    ul.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut b = [0u8; 64];
    let (n, _) = ul
        .recv_from(&mut b)
        .expect("UDP to another port reaches its socket");
    assert_eq!(&b[8..n], b"get k\r\n");
    assert_eq!(stat(&pair.client, srv.port, "afxdp_rx_packets"), 0);
}

#[test]
fn afxdp_exits_and_restarts_cleanly() {
    let pair = Pair::new().unwrap();
    let to = SocketAddr::from((SRV_V4, port()));
    for round in 0..2 {
        let mut srv = start(&pair.server, port(), &["--afxdp", &pair.srv_if]);
        let prog = xdp_prog(&pair.server, &pair.srv_if);
        assert_ne!(prog, 0, "round {round}: no XDP program");
        pair.client.run(|| {
            let u = UdpSocket::bind("0.0.0.0:0").unwrap();
            u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            assert_eq!(udp_request(&u, to, 9, b"get a\r\n"), b"END\r\n");
        });
        assert_eq!(stat(&pair.client, srv.port, "afxdp_rx_packets"), 1);
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(srv.child.id() as i32, libc::SIGTERM) };
        let st = srv.child.wait().unwrap();
        assert!(st.success(), "round {round}: exit status {st}");
        assert_eq!(
            xdp_prog(&pair.server, &pair.srv_if),
            0,
            "XDP program left attached"
        );
        let gone = Command::new("bpftool")
            .args(["prog", "show", "id", &prog.to_string()])
            .stderr(Stdio::null())
            .output()
            .unwrap();
        assert!(
            !gone.status.success(),
            "round {round}: program {prog} leaked"
        );
    }
}

/// Many clients (source ports) and keys: every request handled by its key's owner.
fn steered_gets(ns: &Netns, to: SocketAddr) {
    ns.run(|| {
        let mut t = TcpStream::connect(to).unwrap();
        let mut sets = Vec::new();
        for k in 0..40 {
            sets.extend_from_slice(format!("set key{k} 0 0 2\r\nv{}\r\n", k % 10).as_bytes());
        }
        let want = b"STORED\r\n".repeat(40);
        assert_eq!(tcp_roundtrip(&mut t, &sets, &want), want);
        for c in 0..20 {
            let u = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
            u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            for k in 0..40 {
                let id = (c * 40 + k) as u16;
                let want = format!("VALUE key{k} 0 2\r\nv{}\r\nEND\r\n", k % 10);
                let got = udp_request(&u, to, id, format!("get key{k}\r\n").as_bytes());
                assert_eq!(got, want.as_bytes());
            }
        }
        // a multi-key get whose keys belong to both workers still returns every key
        let u = UdpSocket::bind(if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let keys: Vec<String> = (0..40).map(|k| format!("key{k}")).collect();
        let got = udp_request(
            &u,
            to,
            7777,
            format!("get {}\r\n", keys.join(" ")).as_bytes(),
        );
        let got = String::from_utf8(got).unwrap();
        for k in 0..40 {
            assert!(got.contains(&format!("VALUE key{k} 0 2\r\n")), "{got}");
        }
    });
}

#[test]
fn steering_keeps_each_key_on_its_worker() {
    let pair = Pair::new().unwrap();
    for (v6, extra) in [
        (false, vec![]),
        (false, vec!["--steer"]),
        (true, vec!["--steer"]),
        (false, vec!["--steer", "--afxdp", pair.srv_if.as_str()]),
    ] {
        let srv = start(&pair.server, port(), &extra);
        let to = if v6 {
            SocketAddr::from((SRV_V6, srv.port))
        } else {
            SocketAddr::from((SRV_V4, srv.port))
        };
        steered_gets(&pair.client, to);
        let owned = stat(&pair.client, srv.port, "steer_owned");
        let foreign = stat(&pair.client, srv.port, "steer_foreign");
        assert_eq!(owned + foreign, 801, "{extra:?}");
        if extra.is_empty() {
            // the 4-tuple hash spreads 20 clients over both workers regardless of keys
            assert!(
                foreign > 0,
                "without steering every request was on its owner?"
            );
        } else {
            // the one multi-key get is owned by its first key's worker too
            assert_eq!(
                foreign, 0,
                "{extra:?} v6={v6}: requests handled off their owner"
            );
        }
        if extra.contains(&"--afxdp") {
            assert_eq!(stat(&pair.client, srv.port, "afxdp_rx_packets"), 801);
        }
        drop(srv);
    }
}
