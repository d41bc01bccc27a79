//! The binary protocol, byte for byte against stock memcached 1.6 over TCP and UDP (issue 15),
//! and third-party binary clients: `memccapable -b`, pylibmc with `binary=True`.

mod common;
use common::*;
use inkproto::binary::{arith_extras, op, request, store_extras, HEADER_LEN};
use inkproto::udp::{frame_request, FrameHeader};
use std::io::{Read, Write};
use std::net::UdpSocket;
use std::time::Duration;
use testkit::memccapable::Protocol;

const SENTINEL: u32 = 0xfeed_f00d;

struct Req(Vec<u8>);

impl Req {
    fn new() -> Self {
        Req(Vec::new())
    }
    fn raw(mut self, op: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Self {
        request(&mut self.0, op, 0xabcd, cas, extras, key, value);
        self
    }
    fn op(self, op: u8, key: &[u8]) -> Self {
        self.raw(op, &[], key, &[], 0)
    }
    fn set(self, op: u8, key: &[u8], flags: u32, exp: u32, value: &[u8], cas: u64) -> Self {
        self.raw(op, &store_extras(flags, exp), key, value, cas)
    }
    fn arith(self, op: u8, key: &[u8], delta: u64, initial: u64, exp: u32) -> Self {
        self.raw(op, &arith_extras(delta, initial, exp), key, &[], 0)
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
}

/// Sends `req` then a noop with [`SENTINEL`] as opaque; reads up to that noop's answer (or
/// EOF), which is removed.
fn exchange(port: u16, req: &[u8]) -> Vec<u8> {
    let mut s = connect(port);
    let mut r = req.to_vec();
    request(&mut r, op::NOOP, SENTINEL, 0, &[], &[], &[]);
    s.write_all(&r).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        if out.len() >= HEADER_LEN {
            let t = &out[out.len() - HEADER_LEN..];
            if t[0] == 0x81 && t[1] == op::NOOP && t[12..16] == SENTINEL.to_be_bytes() {
                out.truncate(out.len() - HEADER_LEN);
                break;
            }
        }
        match s.read(&mut buf) {
            Ok(0) => {
                out.extend_from_slice(b"<EOF>");
                break;
            }
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no answer in time ({e}); so far {out:02x?}"),
        }
    }
    out
}

fn assert_same_binary(extra: &[&str], cases: &[(&str, Req)]) {
    let Some((mc, ink)) = pair(extra) else {
        return;
    };
    let mut failures = Vec::new();
    for (name, r) in cases {
        let a = exchange(mc.port, &r.0);
        let b = exchange(ink.port, &r.0);
        if a != b {
            failures.push(format!(
                "{name}\n  memcached: {a:02x?}\n  inkcached: {b:02x?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn binary_commands_match_memcached() {
    let r = Req::new;
    assert_same_binary(
        &[],
        &[
            (
                "get getk miss and hit",
                r().set(op::SET, b"k1", 5, 0, b"v1", 0)
                    .op(op::GET, b"k1")
                    .op(op::GETK, b"k1")
                    .op(op::GET, b"no")
                    .op(op::GETK, b"no"),
            ),
            (
                "quiet gets",
                r().set(op::SET, b"q1", 0, 0, b"x", 0)
                    .op(op::GETQ, b"no")
                    .op(op::GETKQ, b"no")
                    .op(op::GETQ, b"q1")
                    .op(op::GETKQ, b"q1"),
            ),
            (
                "quiet stores",
                r().set(op::SETQ, b"s1", 0, 0, b"a", 0)
                    .set(op::ADDQ, b"s1", 0, 0, b"b", 0)
                    .set(op::REPLACEQ, b"s2", 0, 0, b"b", 0)
                    .op(op::GET, b"s1"),
            ),
            (
                "add replace",
                r().set(op::ADD, b"a1", 0, 0, b"a", 0)
                    .set(op::ADD, b"a1", 0, 0, b"b", 0)
                    .set(op::REPLACE, b"a2", 0, 0, b"b", 0)
                    .set(op::REPLACE, b"a1", 3, 0, b"c", 0)
                    .op(op::GET, b"a1"),
            ),
            (
                "cas",
                r().set(op::SET, b"c1", 0, 0, b"a", 12345)
                    .set(op::SET, b"c1", 0, 0, b"a", 0)
                    .set(op::SET, b"c1", 0, 0, b"b", 1)
                    .set(op::ADD, b"c1", 0, 0, b"b", 3),
            ),
            (
                "delete",
                r().op(op::DELETE, b"d1")
                    .set(op::SET, b"d1", 0, 0, b"a", 0)
                    .raw(op::DELETE, &[], b"d1", &[], 99)
                    .op(op::DELETEQ, b"d1")
                    .op(op::DELETEQ, b"d1"),
            ),
            (
                "incr decr",
                r().arith(op::INCREMENT, b"n", 1, 10, 0)
                    .arith(op::INCREMENT, b"n", 5, 0, 0)
                    .arith(op::DECREMENT, b"n", 100, 0, 0)
                    .arith(op::INCREMENT, b"m", 1, 0, 0xffff_ffff)
                    .arith(op::INCREMENTQ, b"n", 1, 0, 0)
                    .arith(op::DECREMENTQ, b"n", 1, 0, 0)
                    .op(op::GET, b"n"),
            ),
            (
                "incr non-numeric",
                r().set(op::SET, b"t", 0, 0, b"abc", 0)
                    .arith(op::INCREMENT, b"t", 1, 0, 0)
                    .set(op::SET, b"z", 0, 0, b"", 0)
                    .arith(op::INCREMENT, b"z", 1, 0, 0),
            ),
            (
                "append prepend",
                r().raw(op::APPEND, &[], b"ap", b"x", 0)
                    .set(op::SET, b"ap", 3, 0, b"a", 0)
                    .raw(op::APPEND, &[], b"ap", b"b", 0)
                    .raw(op::PREPEND, &[], b"ap", b"c", 0)
                    .raw(op::APPENDQ, &[], b"ap", b"d", 0)
                    .raw(op::PREPENDQ, &[], b"nx", b"d", 0)
                    .op(op::GET, b"ap"),
            ),
            (
                "touch gat",
                r().raw(op::TOUCH, &100u32.to_be_bytes(), b"g", &[], 0)
                    .set(op::SET, b"g", 7, 0, b"val", 0)
                    .raw(op::TOUCH, &100u32.to_be_bytes(), b"g", &[], 0)
                    .raw(op::GAT, &100u32.to_be_bytes(), b"g", &[], 0)
                    .raw(op::GATK, &100u32.to_be_bytes(), b"g", &[], 0)
                    .raw(op::GATQ, &1u32.to_be_bytes(), b"no", &[], 0)
                    .raw(op::GATKQ, &1u32.to_be_bytes(), b"no", &[], 0)
                    .raw(op::GATK, &1u32.to_be_bytes(), b"no", &[], 0),
            ),
            (
                "expiry",
                r().set(op::SET, b"e", 0, 2_592_001, b"old", 0)
                    .op(op::GET, b"e")
                    .set(op::SET, b"e2", 0, 100, b"new", 0)
                    .op(op::GET, b"e2"),
            ),
            ("noop", r().op(op::NOOP, b"").op(op::NOOP, b"")),
            (
                "flush",
                r().set(op::SET, b"f", 0, 0, b"x", 0)
                    .op(op::FLUSH, b"")
                    .op(op::GET, b"f")
                    .raw(op::FLUSH, &0u32.to_be_bytes(), b"", &[], 0)
                    .op(op::FLUSHQ, b""),
            ),
            (
                "unknown opcodes",
                r().op(0x40, b"").op(0xff, b"").op(op::NOOP, b""),
            ),
            (
                "sasl without -S",
                r().op(op::SASL_LIST_MECHS, b"")
                    .raw(op::SASL_AUTH, &[], b"PLAIN", b"\0u\0p", 0),
            ),
            (
                "stat groups",
                r().op(op::STAT, b"detail on")
                    .op(op::STAT, b"detail x")
                    .op(op::STAT, b"nope")
                    .op(op::STAT, b"detail off")
                    .op(op::STAT, b"reset"),
            ),
            (
                "too large",
                r().set(op::SET, b"big", 0, 0, &vec![b'x'; 1 << 20], 0)
                    .op(op::GET, b"big"),
            ),
            ("quit", r().op(op::QUIT, b"").op(op::NOOP, b"")),
            ("quitq", r().op(op::QUITQ, b"").op(op::NOOP, b"")),
        ],
    );
}

#[test]
fn malformed_binary_requests_match_memcached() {
    let r = Req::new;
    // A header whose key is longer than its body.
    let mut short_body = Vec::new();
    request(&mut short_body, op::GET, 1, 0, &[], b"k", &[]);
    short_body[8..12].copy_from_slice(&0u32.to_be_bytes());
    assert_same_binary(
        &[],
        &[
            ("bad magic", r().op(op::NOOP, b"").bytes(&[0x81; 24])),
            ("get with extras", r().raw(op::GET, b"1234", b"k", &[], 0)),
            ("set without extras", r().raw(op::SET, &[], b"k", b"v", 0)),
            ("key over 250", r().op(op::GET, &[b'k'; 251])),
            ("key longer than body", r().bytes(&short_body)),
            ("noop with a body", r().raw(op::NOOP, &[], b"k", &[], 0)),
            (
                "incr short extras",
                r().raw(op::INCREMENT, &[0; 8], b"n", &[], 0),
            ),
            // verbosity is not a memcached 1.6 opcode: unknown, its body swallowed (with the
            // length memcached swallows, which eats into what follows)
            (
                "verbosity",
                r().raw(op::VERBOSITY, &1u32.to_be_bytes(), b"", &[], 0)
                    .op(op::NOOP, b"")
                    .op(op::NOOP, b""),
            ),
        ],
    );
}

/// Sends one UDP request and collects the reply datagrams' payloads (ordered by sequence).
fn udp_exchange(port: u16, id: u16, payload: &[u8]) -> Vec<(u16, u16, Vec<u8>)> {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    s.send(&frame_request(id, payload)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.recv(&mut buf) {
        let h = FrameHeader::decode(&buf[..n]).unwrap();
        out.push((h.seq, h.total, buf[8..n].to_vec()));
    }
    out.sort();
    out
}

#[test]
fn binary_over_udp_matches_memcached() {
    let Some((mc, ink)) = pair(&[]) else {
        return;
    };
    let cases = [
        Req::new().set(op::SET, b"u1", 1, 0, b"hello", 0),
        Req::new().op(op::GET, b"u1"),
        Req::new()
            .op(op::GETK, b"u1")
            .op(op::GETQ, b"nope")
            .op(op::NOOP, b""),
        Req::new().arith(op::INCREMENT, b"un", 1, 5, 0),
        Req::new().set(op::SET, b"big", 0, 0, &vec![b'v'; 5000], 0),
        Req::new().op(op::GET, b"big"),
        Req::new().op(op::DELETE, b"u1").op(op::GET, b"u1"),
        Req::new().op(0x40, b""),
    ];
    for (i, r) in cases.iter().enumerate() {
        let a = udp_exchange(mc.port, i as u16 + 1, &r.0);
        let b = udp_exchange(ink.port, i as u16 + 1, &r.0);
        assert_eq!(a, b, "case {i}");
        assert!(!a.is_empty() || i == 2, "case {i}: no answer");
    }
}

#[test]
fn memccapable_binary_all_pass() {
    memccapable_passes(Protocol::Binary);
}

#[test]
fn pylibmc_binary_client() {
    python_client_passes("pylibmc", "python3-pylibmc", "pylibmc_binary.py");
}
