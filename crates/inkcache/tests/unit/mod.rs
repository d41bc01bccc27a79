//! eBPF unit tests: each program run on crafted frames with BPF_PROG_TEST_RUN (no namespaces).
//! `fixture` loads the programs, `packet` builds and checks frames; this module has the steps
//! most cases share (fill a key, get it, follow a TCP connection).
#![allow(dead_code)]

pub mod fixture;
pub mod packet;

mod binary;
mod gets;
mod mutations;

use std::sync::atomic::{AtomicU16, Ordering};

pub use fixture::{fx, Fx, QUARANTINE_MS, TC_ACT_OK, XDP_PASS, XDP_TX};
pub use packet::{reply_payload, Flow};

static REQ_ID: AtomicU16 = AtomicU16::new(1);

pub fn next_id() -> u16 {
    REQ_ID.fetch_add(1, Ordering::Relaxed)
}

/// memcached's answer to `get key` holding (flags, value).
pub fn value_reply(key: &str, flags: u32, value: &[u8]) -> Vec<u8> {
    let mut v = format!("VALUE {key} {flags} {}\r\n", value.len()).into_bytes();
    v.extend_from_slice(value);
    v.extend_from_slice(b"\r\nEND\r\n");
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

    /// A get that misses (passes, remembered), then the server's answer through TC egress.
    /// Returns whether the item was installed.
    pub fn fill_with(&self, flow: &Flow, request: &str, answer: &[u8]) -> bool {
        let id = next_id();
        let before = self.stats().fills;
        let r = self.xdp(&flow.udp(id, request.as_bytes()));
        assert_eq!(r.action, XDP_PASS, "{request:?} should miss");
        let e = self.egress(&flow.udp_reply(id, answer));
        assert_eq!(e.action, TC_ACT_OK);
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

/// A TCP connection from a client, followed from its SYN (the server's side sent through TC
/// egress). Sequence numbers advance as bytes are sent.
pub struct Conn {
    pub flow: Flow,
    pub cseq: u32,
    pub sseq: u32,
}

impl Conn {
    /// SYN, SYN-ACK: a connection the kernel follows.
    pub fn open(f: &Fx, flow: Flow) -> Conn {
        let (cseq, sseq) = (1000, 50000);
        assert_eq!(f.xdp(&flow.tcp(cseq, 0, "S", b"")).action, XDP_PASS);
        assert_eq!(
            f.egress(&flow.tcp_reply(sseq, cseq + 1, "SA", b"")).action,
            TC_ACT_OK
        );
        Conn {
            flow,
            cseq: cseq + 1,
            sseq: sseq + 1,
        }
    }

    /// A connection the kernel did not see open (as if opened before attach).
    pub fn midstream(flow: Flow) -> Conn {
        Conn {
            flow,
            cseq: 7000,
            sseq: 90000,
        }
    }

    /// The client sends `bytes` in one segment; XDP must pass it.
    pub fn send(&mut self, f: &Fx, bytes: &[u8]) {
        let r = f.xdp(&self.flow.tcp(self.cseq, self.sseq, "PA", bytes));
        assert_eq!(r.action, XDP_PASS, "a client segment must pass");
        self.cseq = self.cseq.wrapping_add(bytes.len() as u32);
    }

    /// The server answers `bytes` in one segment, through TC egress.
    pub fn answer(&mut self, f: &Fx, bytes: &[u8]) {
        let r = f.egress(&self.flow.tcp_reply(self.sseq, self.cseq, "PA", bytes));
        assert_eq!(r.action, TC_ACT_OK);
        self.sseq = self.sseq.wrapping_add(bytes.len() as u32);
    }
}

/// Waits out the fixture's quarantine.
pub fn after_quarantine() {
    std::thread::sleep(std::time::Duration::from_millis(QUARANTINE_MS + 10));
}
