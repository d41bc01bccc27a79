//! Cooperative mode: inkcached behind `inkcache attach --cooperative` installs and invalidates
//! the kernel cache itself. In namespaces over a veth pair; run as root.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{workspace_bin, Pair, SRV_V4};

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Attached<'a>(&'a Pair);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        let _ = Command::new(workspace_bin("inkcache"))
            .args([
                "--netns",
                &self.0.server.name,
                "detach",
                "--iface",
                &self.0.srv_if,
            ])
            .output();
    }
}

fn inkcache(args: &[&str]) {
    let out = Command::new(workspace_bin("inkcache"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "inkcache {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn attach(pair: &Pair) -> Attached<'_> {
    attach_as(pair, true)
}

fn attach_as(pair: &Pair, cooperative: bool) -> Attached<'_> {
    inkcache(&[
        "--netns",
        &pair.client.name,
        "veth-peer",
        "--iface",
        &pair.cli_if,
    ]);
    inkcache(&[
        "--netns",
        &pair.server.name,
        "attach",
        "--iface",
        &pair.srv_if,
        if cooperative {
            "--cooperative"
        } else {
            "--max-age=60"
        },
    ]);
    Attached(pair)
}

/// inkcached in the server namespace (nsenter: /sys/fs/bpf stays visible), ready when TCP is.
fn inkcached(pair: &Pair, extra: &[&str]) -> Proc {
    let child = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", pair.server.name))
        .arg(env!("CARGO_BIN_EXE_inkcached"))
        .args(["-p", "11211", "-U", "11211", "-t", "2"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut p = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let to = SocketAddr::from((SRV_V4, 11211));
    while !pair
        .client
        .run(|| TcpStream::connect_timeout(&to, Duration::from_millis(200)).is_ok())
    {
        assert!(p.0.try_wait().unwrap().is_none(), "inkcached exited");
        assert!(Instant::now() < deadline, "inkcached did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

fn kernel_stat(pair: &Pair, name: &str) -> u64 {
    let out = Command::new(workspace_bin("inkcache"))
        .args([
            "--netns",
            &pair.server.name,
            "stats",
            "--iface",
            &pair.srv_if,
            "--json",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    v[name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} in {v}"))
}

struct Client {
    t: TcpStream,
    u: UdpSocket,
    id: u16,
}

impl Client {
    fn new() -> Client {
        let t = TcpStream::connect((SRV_V4, 11211)).unwrap();
        let u = UdpSocket::bind("0.0.0.0:0").unwrap();
        u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        Client { t, u, id: 0 }
    }
    fn tcp(&mut self, req: &str) -> String {
        self.t.write_all(req.as_bytes()).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.t.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
    fn get(&mut self, key: &str) -> String {
        self.id += 1;
        let mut req = vec![(self.id >> 8) as u8, self.id as u8, 0, 0, 0, 1, 0, 0];
        req.extend_from_slice(format!("get {key}\r\n").as_bytes());
        self.u.send_to(&req, (SRV_V4, 11211)).unwrap();
        let mut buf = [0u8; 2048];
        loop {
            let (n, _) = self.u.recv_from(&mut buf).unwrap();
            if u16::from_be_bytes([buf[0], buf[1]]) == self.id {
                return String::from_utf8_lossy(&buf[8..n]).into_owned();
            }
        }
    }
    /// Gets `key` twice; the second must come from the kernel.
    fn get_twice(&mut self, pair: &Pair, key: &str) -> String {
        let first = self.get(key);
        let hits = kernel_stat(pair, "hits");
        let second = self.get(key);
        assert_eq!(first, second);
        if first != "END\r\n" {
            assert_eq!(
                kernel_stat(pair, "hits"),
                hits + 1,
                "{key}: not a kernel hit"
            );
        }
        second
    }
}

#[test]
fn cooperative_mode_installs_and_invalidates() {
    let pair = Pair::new().unwrap();
    let _a = attach(&pair);

    // Control: a server that does not cooperate leaves the kernel stale after a write (XDP no
    // longer walks writes in cooperative mode), so what follows shows inkcached's doing.
    {
        let _srv = inkcached(&pair, &[]);
        pair.client.run(|| {
            let mut c = Client::new();
            assert_eq!(c.tcp("set k 0 0 1\r\na\r\n"), "STORED\r\n");
            let fills = kernel_stat(&pair, "fills");
            c.get("k");
            assert_eq!(
                kernel_stat(&pair, "fills"),
                fills,
                "TC egress filled in coop mode"
            );
        });
    }
    let _srv = inkcached(&pair, &["--cooperative", &pair.srv_if]);
    pair.client.run(|| {
        let mut c = Client::new();
        assert_eq!(c.tcp("set k 5 0 3\r\nold\r\n"), "STORED\r\n");
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 5 3\r\nold\r\nEND\r\n");
        // every kind of write is seen at once, and the new value is cached again
        let steps: &[(&str, &str, &str)] = &[
            (
                "set k 5 0 3\r\nnew\r\n",
                "STORED\r\n",
                "VALUE k 5 3\r\nnew\r\nEND\r\n",
            ),
            (
                "append k 0 0 1\r\n!\r\n",
                "STORED\r\n",
                "VALUE k 5 4\r\nnew!\r\nEND\r\n",
            ),
            (
                "prepend k 0 0 1\r\n<\r\n",
                "STORED\r\n",
                "VALUE k 5 5\r\n<new!\r\nEND\r\n",
            ),
            ("set n 0 0 1\r\n7\r\n", "STORED\r\n", ""),
            ("incr n 5\r\n", "12\r\n", ""),
            ("delete k\r\n", "DELETED\r\n", "END\r\n"),
            (
                "add k 1 0 1\r\nx\r\n",
                "STORED\r\n",
                "VALUE k 1 1\r\nx\r\nEND\r\n",
            ),
            (
                "replace k 2 0 1\r\ny\r\n",
                "STORED\r\n",
                "VALUE k 2 1\r\ny\r\nEND\r\n",
            ),
            (
                "ms k 1 F3\r\nz\r\n",
                "HD\r\n",
                "VALUE k 3 1\r\nz\r\nEND\r\n",
            ),
            ("md k\r\n", "HD\r\n", "END\r\n"),
            (
                "set k 0 0 1\r\nq\r\n",
                "STORED\r\n",
                "VALUE k 0 1\r\nq\r\nEND\r\n",
            ),
            ("flush_all\r\n", "OK\r\n", "END\r\n"),
        ];
        for (write, ack, want) in steps {
            assert_eq!(c.tcp(write), *ack, "{write:?}");
            if !want.is_empty() {
                assert_eq!(c.get_twice(&pair, "k"), *want, "after {write:?}");
            }
        }
        assert_eq!(c.get_twice(&pair, "n"), "END\r\n", "flushed");
        assert_eq!(c.tcp("set n 0 0 1\r\n7\r\n"), "STORED\r\n");
        c.get_twice(&pair, "n");
        assert_eq!(c.tcp("incr n 5\r\n"), "12\r\n");
        assert_eq!(c.get_twice(&pair, "n"), "VALUE n 0 2\r\n12\r\nEND\r\n");
        // a too large set deletes the key in memcached: the kernel's copy goes too
        assert_eq!(c.tcp("set k 0 0 1\r\nv\r\n"), "STORED\r\n");
        c.get_twice(&pair, "k");
        let big = format!("set k 0 0 {}\r\n{}\r\n", 2 << 20, "b".repeat(2 << 20));
        let ans = c.tcp(&big);
        assert!(ans.starts_with("SERVER_ERROR"), "{ans}");
        assert_eq!(c.get("k"), "END\r\n");
        // a TTL: the kernel entry never outlives the item
        assert_eq!(c.tcp("set t 0 2 1\r\nt\r\n"), "STORED\r\n");
        c.get_twice(&pair, "t");
        std::thread::sleep(Duration::from_millis(2100));
        assert_eq!(c.get("t"), "END\r\n");
    });

    // the consistency checker, briefly: 0 violations with kernel hits
    let out = pair
        .client
        .cmd(workspace_bin("inkcheck"))
        .args(["--server", "198.18.0.1:11211", "--seconds", "5"])
        .args(["--keys", "512", "--writers", "2", "--large-ratio", "0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "checker failed:\n{text}");
    assert!(text.contains("violations: 0"), "{text}");
    assert!(
        kernel_stat(&pair, "hits") > 1000,
        "few kernel hits:\n{text}"
    );
}

/// A binary protocol request (memcached's protocol_binary.h layout).
fn bin_req(opcode: u8, key: &[u8], extras: &[u8], value: &[u8]) -> Vec<u8> {
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut r = vec![0x80, opcode];
    r.extend_from_slice(&(key.len() as u16).to_be_bytes());
    r.push(extras.len() as u8);
    r.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    r.extend_from_slice(&body.to_be_bytes());
    r.extend_from_slice(&[0; 12]); // opaque, cas
    r.extend_from_slice(extras);
    r.extend_from_slice(key);
    r.extend_from_slice(value);
    r
}

/// Sends `req` and reads `answers` binary answers; returns their statuses.
fn bin_roundtrip(t: &mut TcpStream, req: &[u8], answers: usize) -> Vec<u16> {
    t.write_all(req).unwrap();
    let mut out = Vec::new();
    for _ in 0..answers {
        let mut h = [0u8; 24];
        t.read_exact(&mut h).unwrap();
        assert_eq!(h[0], 0x81, "not a binary answer");
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let mut b = vec![0; body];
        t.read_exact(&mut b).unwrap();
        out.push(u16::from_be_bytes([h[6], h[7]]));
    }
    out
}

/// Writes in the binary protocol (TCP) and text writes over UDP invalidate the kernel's entry
/// before they are acknowledged, as text writes over TCP do.
#[test]
fn cooperative_mode_binary_and_udp_writes() {
    let pair = Pair::new().unwrap();
    let _a = attach(&pair);
    let _srv = inkcached(&pair, &["--cooperative", &pair.srv_if]);
    pair.client.run(|| {
        let mut c = Client::new();
        let mut b = TcpStream::connect((SRV_V4, 11211)).unwrap();
        b.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let set = |v: &[u8]| bin_req(0x01, b"k", &[0, 0, 0, 7, 0, 0, 0, 0], v);
        assert_eq!(c.tcp("set k 0 0 3\r\nold\r\n"), "STORED\r\n");
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 0 3\r\nold\r\nEND\r\n");
        assert_eq!(bin_roundtrip(&mut b, &set(b"bin"), 1), [0]);
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 7 3\r\nbin\r\nEND\r\n");
        // quiet set: no answer until the noop, the entry is gone by then
        let mut q = bin_req(0x11, b"k", &[0, 0, 0, 8, 0, 0, 0, 0], b"qq");
        q.extend_from_slice(&bin_req(0x0a, b"", &[], b""));
        assert_eq!(bin_roundtrip(&mut b, &q, 1), [0]);
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 8 2\r\nqq\r\nEND\r\n");
        // append, increment, delete, flush
        assert_eq!(
            bin_roundtrip(&mut b, &bin_req(0x0e, b"k", &[], b"!"), 1),
            [0]
        );
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 8 3\r\nqq!\r\nEND\r\n");
        assert_eq!(
            bin_roundtrip(&mut b, &bin_req(0x04, b"k", &[], b""), 1),
            [0]
        );
        assert_eq!(c.get_twice(&pair, "k"), "END\r\n");
        assert_eq!(bin_roundtrip(&mut b, &set(b"again"), 1), [0]);
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 7 5\r\nagain\r\nEND\r\n");
        assert_eq!(bin_roundtrip(&mut b, &bin_req(0x08, b"", &[], b""), 1), [0]);
        assert_eq!(c.get_twice(&pair, "k"), "END\r\n");
        // a text write over UDP
        assert_eq!(c.tcp("set u 0 0 1\r\na\r\n"), "STORED\r\n");
        assert_eq!(c.get_twice(&pair, "u"), "VALUE u 0 1\r\na\r\nEND\r\n");
        c.id += 1;
        let mut req = vec![(c.id >> 8) as u8, c.id as u8, 0, 0, 0, 1, 0, 0];
        req.extend_from_slice(b"set u 0 0 1\r\nb\r\n");
        c.u.send_to(&req, (SRV_V4, 11211)).unwrap();
        let mut buf = [0u8; 256];
        let (n, _) = c.u.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[8..n], b"STORED\r\n");
        assert_eq!(c.get_twice(&pair, "u"), "VALUE u 0 1\r\nb\r\nEND\r\n");
    });
    assert!(
        kernel_stat(&pair, "hits") >= 7,
        "seven values served by the kernel"
    );
    // the server's connections are not followed (no stream parser on their receive path)
    assert_eq!(kernel_stat(&pair, "conn_tracked"), 0);
}

/// inkcached's own counter `name` (`stats` over TCP).
fn server_stat(name: &str) -> u64 {
    let mut t = TcpStream::connect((SRV_V4, 11211)).unwrap();
    t.write_all(b"stats\r\n").unwrap();
    let mut text = Vec::new();
    let mut buf = [0u8; 8192];
    while !text.ends_with(b"END\r\n") {
        let n = t.read(&mut buf).unwrap();
        assert!(n > 0);
        text.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&text).into_owned();
    testkit::stat_value(&text, name).unwrap_or_else(|| panic!("no stat {name} in {text}"))
}

/// AF_XDP behind inkcache: in cooperative mode inkcache's XDP program hands the requests it
/// does not answer to inkcached's sockets, writes over UDP included; behind a transparent
/// attachment (whose socket-side programs must see every request) inkcached uses sockets.
#[test]
fn afxdp_behind_inkcache() {
    let pair = Pair::new().unwrap();
    {
        let _a = attach_as(&pair, false);
        let _srv = inkcached(&pair, &["--afxdp", &pair.srv_if]);
        pair.client.run(|| {
            let mut c = Client::new();
            assert_eq!(c.tcp("set k 0 0 1\r\na\r\n"), "STORED\r\n");
            assert_eq!(c.get("k"), "VALUE k 0 1\r\na\r\nEND\r\n");
            assert_eq!(
                server_stat("afxdp_rx_packets"),
                0,
                "AF_XDP behind transparent"
            );
        });
    }
    let _a = attach(&pair);
    let _srv = inkcached(
        &pair,
        &["--cooperative", &pair.srv_if, "--afxdp", &pair.srv_if],
    );
    pair.client.run(|| {
        let mut c = Client::new();
        assert_eq!(c.get("k"), "END\r\n");
        assert_eq!(server_stat("afxdp_rx_packets"), 1);
        assert_eq!(c.tcp("set k 0 0 1\r\na\r\n"), "STORED\r\n");
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 0 1\r\na\r\nEND\r\n");
        // a write over UDP goes to AF_XDP too, and invalidates before its answer
        c.id += 1;
        let mut req = vec![(c.id >> 8) as u8, c.id as u8, 0, 0, 0, 1, 0, 0];
        req.extend_from_slice(b"set k 0 0 1\r\nb\r\n");
        c.u.send_to(&req, (SRV_V4, 11211)).unwrap();
        let mut buf = [0u8; 256];
        let (n, _) = c.u.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[8..n], b"STORED\r\n");
        assert_eq!(c.get_twice(&pair, "k"), "VALUE k 0 1\r\nb\r\nEND\r\n");
        // the first get, the UDP set, and the kernel misses of both get_twice
        assert_eq!(server_stat("afxdp_rx_packets"), 4);
        // binary over UDP through AF_XDP: one answer datagram per answer (getkq, getk)
        c.id += 1;
        let mut req = vec![(c.id >> 8) as u8, c.id as u8, 0, 0, 0, 1, 0, 0];
        req.extend_from_slice(&bin_req(0x0d, b"nope", &[], b""));
        req.extend_from_slice(&bin_req(0x0c, b"k", &[], b""));
        req.extend_from_slice(&bin_req(0x0c, b"k", &[], b""));
        c.u.send_to(&req, (SRV_V4, 11211)).unwrap();
        for _ in 0..2 {
            let (n, _) = c.u.recv_from(&mut buf).unwrap();
            assert_eq!(u16::from_be_bytes([buf[0], buf[1]]), c.id);
            assert_eq!(&buf[4..6], &[0, 1], "one datagram per answer");
            assert_eq!(buf[8], 0x81);
            assert_eq!(&buf[n - 2..n], b"kb", "GETK answer: key and value");
        }
    });
}
