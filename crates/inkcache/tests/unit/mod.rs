//! eBPF unit tests: each program run on crafted frames with BPF_PROG_TEST_RUN (no namespaces).
//! `fixture` loads the programs, `packet` builds and checks frames; this module has the steps
//! most cases share (fill a key, get it, follow a TCP connection).
#![allow(dead_code)]

pub mod fixture;
pub mod packet;

mod binary;
mod cost;
mod cost_timing;
mod gets;
mod host;
mod hostile;
mod model;
mod mutations;

use std::sync::atomic::{AtomicU16, Ordering};

pub use fixture::{fx, Fx, CG_PASS, QUARANTINE_MS, XDP_PASS, XDP_TX};
pub use packet::{reply_payload, Flow};

static REQ_ID: AtomicU16 = AtomicU16::new(1);

pub fn next_id() -> u16 {
    REQ_ID.fetch_add(1, Ordering::Relaxed)
}

/// memcached's answer to `get key` holding (flags, value).
pub fn value_reply(key: &str, flags: u32, value: &[u8]) -> Vec<u8> {
    values_reply(&[(key, flags, value)])
}

/// memcached's answer to a get of several keys, each holding (flags, value): their VALUE lines
/// and data in order, then one END.
pub fn values_reply(items: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut v = Vec::new();
    for (key, flags, value) in items {
        v.extend_from_slice(format!("VALUE {key} {flags} {}\r\n", value.len()).as_bytes());
        v.extend_from_slice(value);
        v.extend_from_slice(b"\r\n");
    }
    v.extend_from_slice(b"END\r\n");
    v
}

impl Fx {
    /// A UDP request from `flow`: returns what XDP did and, for XDP_TX, the checked payload.
    pub fn request(&self, flow: &Flow, req: &[u8]) -> (u32, Option<Vec<u8>>) {
        let id = next_id();
        let r = self.xdp(&flow.udp(id, req));
        let p = (r.action == XDP_TX).then(|| reply_payload(flow, id, &r.data));
        (r.action, p)
    }

    /// `get <key>` over UDP: the kernel's reply payload, or None if the request passed.
    pub fn get(&self, flow: &Flow, key: &str) -> Option<Vec<u8>> {
        let (a, p) = self.request(flow, format!("get {key}\r\n").as_bytes());
        assert!(a == XDP_PASS || a == XDP_TX, "get {key}: action {a}");
        p
    }

    /// A get that misses (passes, remembered), then the server's answer through cgroup egress.
    /// Returns whether the item was installed.
    pub fn fill_with(&self, flow: &Flow, request: &str, answer: &[u8]) -> bool {
        let id = next_id();
        let before = self.stats().fills;
        let r = self.udp_in(&flow.udp(id, request.as_bytes()));
        assert_eq!(r, XDP_PASS, "{request:?} should miss");
        let e = self.egress(&flow.udp_reply(id, answer));
        assert_eq!(e.action, CG_PASS);
        self.stats().fills > before
    }

    /// Fills `key` = (flags, value) from memcached's answer to a UDP get; asserts it took.
    pub fn fill(&self, flow: &Flow, key: &str, flags: u32, value: &[u8]) {
        let ok = self.fill_with(
            flow,
            &format!("get {key}\r\n"),
            &value_reply(key, flags, value),
        );
        assert!(ok, "fill of {key} refused: {:?}", self.stats());
    }

    /// The kernel answers `get key` with exactly memcached's reply for (flags, value).
    pub fn assert_hit(&self, flow: &Flow, key: &str, flags: u32, value: &[u8]) {
        let p = self
            .get(flow, key)
            .unwrap_or_else(|| panic!("{key}: not a kernel hit"));
        assert_eq!(
            String::from_utf8_lossy(&p),
            String::from_utf8_lossy(&value_reply(key, flags, value)),
            "{key}: reply"
        );
    }

    /// The kernel does not answer `get key`.
    pub fn assert_miss(&self, flow: &Flow, key: &str) {
        if let Some(p) = self.get(flow, key) {
            panic!("{key}: served {:?}", String::from_utf8_lossy(&p));
        }
    }
}

/// A real TCP connection over loopback whose server side is in the conn_socks sockhash, as the
/// socket-ops program puts a connection the server accepts: the client's bytes reach the stream
/// verdict program exactly as the stack delivers them. The server's answers are crafted segments
/// run through the answers program (cgroup egress) with the connection's addresses.
pub struct Conn {
    /// The connection's addresses, as the server's answers carry them.
    pub flow: Flow,
    pub client: std::net::TcpStream,
    pub server: std::net::TcpStream,
    pub sseq: u32,
}

/// The server's initial sequence number as the followed connections record it.
const SERVER_ISN: u32 = 50000;

impl Conn {
    /// A connection the kernel follows from its first byte (`flow` only chooses IPv4 or IPv6).
    pub fn open(f: &Fx, flow: Flow) -> Conn {
        Conn::connect(f, flow, true)
    }

    /// A connection whose position the kernel does not know (accepted before attach): in the
    /// sockhash, with no state in `conns`.
    pub fn midstream(f: &Fx, flow: Flow) -> Conn {
        Conn::connect(f, flow, false)
    }

    fn connect(f: &Fx, flow: Flow, followed: bool) -> Conn {
        use std::net::{TcpListener, TcpStream};
        let lo: std::net::IpAddr = if flow.client.is_ipv4() {
            "127.0.0.1".parse().unwrap()
        } else {
            "::1".parse().unwrap()
        };
        let l = TcpListener::bind((lo, 0)).unwrap();
        let sport = l.local_addr().unwrap().port();
        f.add_port(sport);
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        client.set_nodelay(true).unwrap();
        let (server, peer) = l.accept().unwrap();
        let flow = Flow {
            client: peer.ip(),
            server: lo,
            cport: peer.port(),
            sport,
            vlans: vec![],
        };
        f.follow(&flow, &server, followed.then_some(SERVER_ISN));
        Conn {
            flow,
            client,
            server,
            sseq: SERVER_ISN,
        }
    }

    /// The client sends `bytes`; returns once the server's socket has them (so the stream
    /// verdict has walked them, in segments of their own).
    pub fn send(&mut self, _f: &Fx, bytes: &[u8]) {
        use std::io::{Read, Write};
        self.client.write_all(bytes).unwrap();
        let mut got = vec![0u8; bytes.len()];
        self.server.read_exact(&mut got).unwrap();
        assert_eq!(got, bytes);
    }

    /// The server answers `bytes` in one segment, through the answers program.
    pub fn answer(&mut self, f: &Fx, bytes: &[u8]) {
        let r = f.egress(&self.flow.tcp_reply(self.sseq, 1, "PA", bytes));
        assert_eq!(r.action, CG_PASS);
        self.sseq = self.sseq.wrapping_add(bytes.len() as u32);
    }
}

/// Waits out the fixture's quarantine.
pub fn after_quarantine() {
    std::thread::sleep(std::time::Duration::from_millis(QUARANTINE_MS + 10));
}
