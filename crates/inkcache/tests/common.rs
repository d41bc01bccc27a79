//! Shared rig for the kernel-cache integration tests: a server namespace with a memcached-protocol
//! server and inkcache attached to its veth, a client namespace, and helpers that talk to the
//! server from the client side.
#![allow(dead_code)]

use std::{
    io::{Read, Write},
    net::{IpAddr, SocketAddr, TcpStream, UdpSocket},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use inkproto::{
    client::{parse_response, Response},
    udp::{frame_request, FrameHeader},
};
use testkit::{Pair, Server, SRV_V4};

pub const PORT: u16 = 11211;

/// Waits for `c` to exit, at most `secs` seconds (else kills it and fails, saying `what`), and
/// returns how it exited.
pub fn exits_within(
    c: &mut std::process::Child,
    secs: u64,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            let _ = c.wait();
            panic!("{what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
/// Write quarantine used by the tests (see `inkcache attach --quarantine-ms`).
pub const QUARANTINE_MS: &str = "50";

/// Waits until a write's quarantine is over, so that the next get may fill.
pub fn settle() {
    std::thread::sleep(Duration::from_millis(
        QUARANTINE_MS.parse::<u64>().unwrap() + 20,
    ));
}

pub struct Rig {
    pub pair: Pair,
    pub server: Server,
    pub attached: bool,
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_inkcache")
}

impl Rig {
    /// Namespaces + server, nothing attached yet.
    pub fn new() -> Result<Rig> {
        Rig::with_server(&[])
    }

    /// As `new`, the server started with `extra` options too.
    pub fn with_server(extra: &[&str]) -> Result<Rig> {
        let pair = Pair::new()?;
        let server = Server::start_with(&pair.server, PORT, extra)?;
        // XDP_TX on veth needs an XDP program on the peer end.
        testkit::sh(Command::new(bin()).args([
            "--netns",
            &pair.client.name,
            "veth-peer",
            "--iface",
            &pair.cli_if,
        ]))?;
        Ok(Rig {
            pair,
            server,
            attached: false,
        })
    }

    /// Namespaces + server + inkcache attached with default options plus `extra`.
    pub fn attached(extra: &[&str]) -> Result<Rig> {
        let mut r = Rig::new()?;
        r.attach(extra)?;
        Ok(r)
    }

    pub fn inkcache(&self, args: &[&str]) -> std::process::Output {
        Command::new(bin())
            .args(["--netns", &self.pair.server.name])
            .args(args)
            .output()
            .expect("running inkcache")
    }

    pub fn attach(&mut self, extra: &[&str]) -> Result<()> {
        let port = PORT.to_string();
        let mut args = vec![
            "attach",
            "--iface",
            &self.pair.srv_if,
            "--port",
            &port,
            "--cache-mb",
            "8",
        ];
        if !extra.contains(&"--quarantine-ms") {
            // a short write quarantine keeps the tests quick: `set()` waits it out
            args.extend_from_slice(&["--quarantine-ms", QUARANTINE_MS]);
        }
        args.extend_from_slice(extra);
        let out = self.inkcache(&args);
        if !out.status.success() {
            bail!("attach failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        self.attached = true;
        Ok(())
    }

    pub fn detach(&mut self) -> Result<()> {
        let out = self.inkcache(&["detach", "--iface", &self.pair.srv_if]);
        if !out.status.success() {
            bail!("detach failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        self.attached = false;
        Ok(())
    }

    pub fn stats(&self) -> serde_json::Value {
        let out = self.inkcache(&["stats", "--iface", &self.pair.srv_if, "--json"]);
        assert!(
            out.status.success(),
            "stats: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("stats JSON")
    }

    pub fn stat(&self, name: &str) -> u64 {
        self.stats()[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {name}"))
    }

    pub fn server_addr(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(SRV_V4), PORT)
    }

    /// The row of `inkcache status --json` for this rig's attachment to `iface` (in the server
    /// namespace).
    pub fn status_row(&self, iface: &str) -> serde_json::Value {
        let out = self.inkcache(&["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let dir = format!("{iface}@{}", self.pair.server.name);
        v.as_array()
            .unwrap()
            .iter()
            .find(|r| r["pin_dir"].as_str().unwrap().ends_with(&dir))
            .unwrap_or_else(|| panic!("no status row for {dir}"))
            .clone()
    }

    /// Both namespaces' TCP sockets with their timers and windows (`ss -tnio`), for a failure
    /// message: a stalled transfer says there whether a side waits on a window or a timer.
    pub fn tcp_sockets(&self) -> String {
        [&self.pair.server.name, &self.pair.client.name]
            .iter()
            .map(|ns| {
                let out = Command::new("ip")
                    .args(["netns", "exec", ns, "ss", "-tnio"])
                    .output();
                let text = out.map_or_else(
                    |e| e.to_string(),
                    |o| String::from_utf8_lossy(&o.stdout).into_owned(),
                );
                format!("{ns}:\n{text}")
            })
            .collect()
    }

    /// Runs `f` in the client namespace.
    pub fn client<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.pair.client.run(f)
    }

    /// A memcached `stats` counter, read over TCP from the client side.
    pub fn mc_stat(&self, name: &str) -> u64 {
        let addr = self.server_addr();
        let r = self
            .client(|| tcp_request(addr, b"stats\r\n"))
            .expect("stats over TCP");
        match r {
            Response::Stats(v) => v
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or_else(|| panic!("memcached has no stat {name}")),
            other => panic!("stats answered {other:?}"),
        }
    }

    /// Sends a raw request over TCP from the client side and returns the parsed response.
    pub fn tcp(&self, req: &[u8]) -> Response {
        let addr = self.server_addr();
        let req = req.to_vec();
        self.client(move || tcp_request(addr, &req))
            .expect("TCP request")
    }

    /// Sends a raw UDP datagram (frame header included) and collects every datagram that answers
    /// the request id within `wait`.
    pub fn udp_raw(&self, dgram: &[u8], wait: Duration) -> Vec<Vec<u8>> {
        let addr = self.server_addr();
        let d = dgram.to_vec();
        self.client(move || udp_exchange(addr, &d, wait))
            .expect("UDP exchange")
    }

    /// A UDP get from the client side: the concatenated payload of the reply (all datagrams of all
    /// messages until END), or None on timeout.
    pub fn udp_get(&self, req_id: u16, payload: &[u8]) -> Option<Vec<u8>> {
        let dgrams = self.udp_raw(&frame_request(req_id, payload), Duration::from_millis(500));
        assemble(&dgrams)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        if self.attached {
            let _ = self.detach();
        }
    }
}

pub fn tcp_request(addr: SocketAddr, req: &[u8]) -> Result<Response> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(req)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((r, _)) = parse_response(&buf)? {
            return Ok(r);
        }
        let n = s.read(&mut chunk).context("reading TCP response")?;
        if n == 0 {
            bail!(
                "connection closed after {:?}",
                String::from_utf8_lossy(&buf)
            );
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends one datagram and gathers the replies with the same request id until `wait` has passed
/// since it was sent, or a reply ending in END/EN arrives complete.
pub fn udp_exchange(addr: SocketAddr, dgram: &[u8], wait: Duration) -> Result<Vec<Vec<u8>>> {
    let bind: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()?;
    let s = UdpSocket::bind(bind)?;
    udp_exchange_on(&s, addr, dgram, wait, |d| assemble(d).is_some())
}

/// `udp_exchange` from socket `s`, gathering until `done` finds the datagrams gathered whole.
pub fn udp_exchange_on(
    s: &UdpSocket,
    addr: SocketAddr,
    dgram: &[u8],
    wait: Duration,
    done: impl Fn(&[Vec<u8>]) -> bool,
) -> Result<Vec<Vec<u8>>> {
    s.send_to(dgram, addr)?;
    let want = FrameHeader::decode(dgram).map(|h| h.request_id);
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left))?;
        match s.recv_from(&mut buf) {
            Ok((n, _)) => {
                let d = buf[..n].to_vec();
                if FrameHeader::decode(&d).map(|h| h.request_id) != want {
                    continue; // a late answer to an earlier request
                }
                out.push(d);
                if done(&out) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    Ok(out)
}

/// Joins datagrams into the reply payload: each message (a run of datagrams starting at sequence
/// 0; memcached 1.6 sends each part of a reply as a message, an empty one, "total" 0, for a missed
/// key) is put in order. None if a datagram has no frame header.
pub fn join(dgrams: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut msgs: Vec<Vec<(u16, Vec<u8>)>> = Vec::new();
    for d in dgrams {
        let h = FrameHeader::decode(d)?;
        if h.seq == 0 || msgs.is_empty() {
            msgs.push(Vec::new());
        }
        msgs.last_mut()?.push((h.seq, d[8..].to_vec()));
    }
    let mut payload = Vec::new();
    for mut m in msgs {
        m.sort_by_key(|(s, _)| *s);
        for (_, p) in m {
            payload.extend_from_slice(&p);
        }
    }
    Some(payload)
}

/// The reply payload the datagrams make (`join`), if it is one complete answer (END closing the
/// values, or a single-line answer).
pub fn assemble(dgrams: &[Vec<u8>]) -> Option<Vec<u8>> {
    let payload = join(dgrams)?;
    matches!(parse_response(&payload), Ok(Some((_, n))) if n == payload.len()).then_some(payload)
}

pub fn values(payload: &[u8]) -> Vec<(Vec<u8>, u32, Vec<u8>)> {
    match parse_response(payload) {
        Ok(Some((Response::Values(items), _))) => items
            .into_iter()
            .map(|i| (i.key, i.flags, i.data))
            .collect(),
        other => panic!(
            "not a retrieval reply: {other:?} from {:?}",
            String::from_utf8_lossy(payload)
        ),
    }
}

/// Stores key=value over TCP (memcached answers STORED), and waits out the write quarantine in
/// case the write is not settled by the answer (e.g. with --debug-quarantine-only).
pub fn set(rig: &Rig, key: &str, flags: u32, value: &[u8]) {
    set_now(rig, key, flags, value);
    settle();
}

/// Stores key=value over a new, followed TCP connection: the write is settled by memcached's
/// STORED, so the key may be filled again at once.
pub fn set_now(rig: &Rig, key: &str, flags: u32, value: &[u8]) {
    let mut req = Vec::new();
    inkproto::client::store(
        &mut req,
        inkproto::client::Store::Set,
        key.as_bytes(),
        flags,
        0,
        value,
        false,
    );
    assert_eq!(rig.tcp(&req), Response::Stored);
}

/// Caches `key` in the kernel (value must already be stored) and checks the kernel answers it.
pub fn cache_it(rig: &Rig, key: &str) -> Vec<u8> {
    let req = format!("get {key}\r\n");
    let first = rig.udp_get(1, req.as_bytes()).expect("reply");
    let hits = rig.stat("hits");
    let second = rig.udp_get(2, req.as_bytes()).expect("reply");
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "{key} should now be a kernel hit: {}",
        rig.stats()
    );
    assert_eq!(first, second);
    second
}

/// After a mutation, the next UDP get must return what memcached now holds: its answer must equal
/// memcached's own (TCP) answer just before or just after it (the value may change in between,
/// e.g. when a delayed flush_all fires).
pub fn assert_fresh(rig: &Rig, key: &str, what: &str) {
    let req = format!("get {key}\r\n");
    let before = rig.tcp(req.as_bytes());
    let via_udp = rig.udp_get(3, req.as_bytes()).expect("reply");
    let after = rig.tcp(req.as_bytes());
    let udp_parsed = inkproto::client::parse_response(&via_udp)
        .unwrap()
        .unwrap()
        .0;
    assert!(
        udp_parsed == before || udp_parsed == after,
        "after {what}: kernel served a stale value {udp_parsed:?}; memcached has {after:?}"
    );
}

/// Sends a get of `key` carried in the VLAN tags `tags` ("42", or "100,42" for 802.1ad outside
/// 802.1Q) as a raw frame from the client side (tests/vlan_get.py) and returns what the script saw
/// of the reply: JSON with `payload` (null if none came), `udp_csum_ok` and `vlan_tags`.
pub fn vlan_get(rig: &Rig, key: &str, tags: &str) -> serde_json::Value {
    let mac = testkit::sh(
        rig.pair
            .server
            .cmd("cat")
            .arg(format!("/sys/class/net/{}/address", rig.pair.srv_if)),
    )
    .unwrap();
    let mac = String::from_utf8_lossy(&mac.stdout).trim().to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/vlan_get.py");
    let out = testkit::sh(rig.pair.client.cmd("python3").args([
        script,
        &rig.pair.cli_if,
        &mac,
        "198.18.0.2",
        "198.18.0.1",
        key,
        tags,
    ]))
    .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The VLAN tags a vlan_get reply carried, as given to it ("100,42").
pub fn vlan_tags_seen(v: &serde_json::Value) -> String {
    let seen: Vec<String> = v["vlan_tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.to_string())
        .collect();
    seen.join(",")
}

/// Waits until memcached has expired every one of `keys` (at most 6 s), then checks that none is
/// answered by the kernel any more: each UDP get returns what memcached holds, and no hit. (Each
/// key is waited for: memcached's clock is whole seconds, so keys written a moment apart can
/// expire a second apart, and a fixed sleep can end before memcached has expired them.)
pub fn assert_expired_not_served(rig: &Rig, keys: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(6);
    for k in keys {
        while rig.tcp(format!("get {k}\r\n").as_bytes()) != Response::Values(vec![]) {
            assert!(Instant::now() < deadline, "memcached never expired {k}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let hits = rig.stat("hits");
    for k in keys {
        assert_fresh(rig, k, "expiry");
    }
    assert_eq!(
        rig.stat("hits"),
        hits,
        "expired items served: {}",
        rig.stats()
    );
}
