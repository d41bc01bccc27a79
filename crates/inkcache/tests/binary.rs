//! Coherence for memcached's binary protocol (requests start with 0x80) against real memcached:
//! every binary mutation invalidates its key before the server answers, over TCP and UDP, IPv4 and
//! IPv6, quiet variants and pipelines included, with the expiry it sets learned; a mutation of one
//! key leaves other cached keys cached; anything unparsable voids the whole cache.
//!
//! Real clients where they exist: pylibmc (libmemcached, `binary=True`, `tests/bin_client.py`),
//! libmemcached's `memccp --udp --binary` and `memccapable -b`. Frames are built by hand for what
//! no client sends (pipelines of every quiet opcode, gat, requests split across segments, junk).
//!
//! Long file: the cases share ~270 lines of binary request builders, response parsers and client
//! runners that exist for them alone; a split would scatter one protocol's cases over two files
//! with a third holding their helpers.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream, UdpSocket},
    thread::sleep,
    time::{Duration, Instant},
};

use common::*;
use inkproto::{client::Response, udp::frame_request};
use testkit::memccapable::{self, Protocol};

const BIN_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/bin_client.py");

// Opcodes (memcached's protocol_binary.h).
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const DECR: u8 = 0x06;
const FLUSH: u8 = 0x08;
const GET: u8 = 0x00;
const NOOP: u8 = 0x0a;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCRQ: u8 = 0x15;
const DECRQ: u8 = 0x16;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const PREPENDQ: u8 = 0x1a;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

/// An absolute exptime long past (1970 + 30 days + 1 s): memcached expires the item at once.
const PAST: u32 = 2_592_001;

/// One binary request: header, extras, key, value.
fn req(op: u8, key: &str, extras: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let key = key.as_bytes();
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut v = vec![0x80, op];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.extend_from_slice(&[extras.len() as u8, 0, 0, 0]);
    v.extend_from_slice(&body.to_be_bytes());
    v.extend_from_slice(&0x1234_5678u32.to_be_bytes()); // opaque
    v.extend_from_slice(&cas.to_be_bytes());
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

fn store(op: u8, key: &str, value: &[u8], exptime: u32) -> Vec<u8> {
    let mut ext = 0u32.to_be_bytes().to_vec(); // flags
    ext.extend_from_slice(&exptime.to_be_bytes());
    req(op, key, &ext, value, 0)
}

fn arith(op: u8, key: &str, delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    let mut ext = delta.to_be_bytes().to_vec();
    ext.extend_from_slice(&initial.to_be_bytes());
    ext.extend_from_slice(&exptime.to_be_bytes());
    req(op, key, &ext, b"", 0)
}

fn touch(op: u8, key: &str, exptime: u32) -> Vec<u8> {
    req(op, key, &exptime.to_be_bytes(), b"", 0)
}

fn noop() -> Vec<u8> {
    req(NOOP, "", b"", b"", 0)
}

/// Binary responses in `buf` (magic 0x81): (opcode, status, value) each, and the bytes used.
fn responses(buf: &[u8]) -> (Vec<(u8, u16, Vec<u8>)>, usize) {
    let mut out = Vec::new();
    let mut pos = 0;
    while buf.len() >= pos + 24 {
        let h = &buf[pos..pos + 24];
        assert_eq!(h[0], 0x81, "not a binary response: {:02x?}", &buf[pos..]);
        let (klen, elen) = (u16::from_be_bytes([h[2], h[3]]) as usize, h[4] as usize);
        let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if buf.len() < pos + 24 + body {
            break;
        }
        let value = buf[pos + 24 + elen + klen..pos + 24 + body].to_vec();
        out.push((h[1], u16::from_be_bytes([h[6], h[7]]), value));
        pos += 24 + body;
    }
    (out, pos)
}

/// Sends `bytes` and a NOOP on a new TCP connection, in one write, and returns memcached's
/// responses up to the NOOP's (every request before it has been executed then), or up to the
/// connection's end if memcached closes it.
fn bin_tcp(addr: SocketAddr, bytes: &[u8]) -> Vec<(u8, u16, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut all = bytes.to_vec();
    all.extend_from_slice(&noop());
    s.write_all(&all).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let (rs, _) = responses(&buf);
        if rs.iter().any(|r| r.0 == NOOP) {
            return rs;
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return rs,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Sends `bytes` and a NOOP in one UDP datagram and returns the binary responses of every
/// datagram answering it, up to the NOOP's (or after `wait` without one).
fn bin_udp(addr: SocketAddr, req_id: u16, bytes: &[u8], wait: Duration) -> Vec<(u8, u16, Vec<u8>)> {
    let bind = if addr.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let s = UdpSocket::bind(bind).unwrap();
    let mut payload = bytes.to_vec();
    payload.extend_from_slice(&noop());
    s.send_to(&frame_request(req_id, &payload), addr).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 65536];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let Ok(n) = s.recv(&mut buf) else { break };
        if n < 8 || u16::from_be_bytes([buf[0], buf[1]]) != req_id {
            continue;
        }
        out.extend(responses(&buf[8..n]).0);
        if out.iter().any(|r| r.0 == NOOP) {
            break;
        }
    }
    out
}

fn v6_addr() -> SocketAddr {
    SocketAddr::new(testkit::SRV_V6.into(), PORT)
}

/// The server as pylibmc names it.
fn client_server(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    }
}

/// Runs pylibmc operations (see tests/bin_client.py) from the client namespace.
fn bin_client(rig: &Rig, addr: SocketAddr, ops: &[String]) -> serde_json::Value {
    let out = rig
        .pair
        .client
        .cmd("/usr/bin/python3")
        .arg(BIN_CLIENT)
        .arg(client_server(addr))
        .args(ops)
        .output()
        .expect("running python3");
    assert!(
        out.status.success(),
        "bin_client.py {ops:?} failed (python3-pylibmc is installed by `make deps`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bin_client.py output")
}

/// Text-stores every key with its value, waits out the quarantine and caches each in the kernel.
fn cache_all(rig: &Rig, items: &[(String, &str)]) {
    for (k, v) in items {
        let mut req = Vec::new();
        inkproto::client::store(
            &mut req,
            inkproto::client::Store::Set,
            k.as_bytes(),
            0,
            0,
            v.as_bytes(),
            false,
        );
        assert_eq!(rig.tcp(&req), Response::Stored);
    }
    settle();
    for (k, _) in items {
        cache_it(rig, k);
    }
}

/// `key` is still answered by the kernel.
fn assert_still_cached(rig: &Rig, key: &str, what: &str) {
    let hits = rig.stat("hits");
    rig.udp_get(4, format!("get {key}\r\n").as_bytes())
        .expect("reply");
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "after {what}: {key} is no longer cached, so the mutation voided more than its key: {}",
        rig.stats()
    );
}

struct Counters {
    command: u64,
    unparsable: u64,
    flush: u64,
}

fn counters(rig: &Rig) -> Counters {
    let s = rig.stats();
    let get = |n: &str| s[n].as_u64().unwrap();
    Counters {
        command: get("inval_command"),
        unparsable: get("inval_unparsable"),
        flush: get("inval_flush"),
    }
}

/// The binary requests since `before` were parsed one by one: nothing was voided, at least
/// `mutations` keys were invalidated, and the unrelated `bystander` is still a kernel hit.
fn assert_precise(rig: &Rig, before: &Counters, mutations: usize, bystander: &str, what: &str) {
    let after = counters(rig);
    assert_eq!(
        after.unparsable,
        before.unparsable,
        "{what}: the requests voided the cache: {}",
        rig.stats()
    );
    assert!(
        after.command >= before.command + mutations as u64,
        "{what}: {} key invalidations for {mutations} mutations: {}",
        after.command - before.command,
        rig.stats()
    );
    assert_still_cached(rig, bystander, what);
}

/// Every binary mutation family from a real client (pylibmc, binary protocol, with and without
/// noreply: the quiet opcodes) over TCP, IPv4 and IPv6: each key fresh afterwards, each mutation
/// counted as a key invalidation, nothing voided, and an unrelated key still cached.
#[test]
fn binary_mutations_from_a_real_client_over_tcp() {
    let rig = Rig::attached(&[]).unwrap();
    let cases: &[(&str, &str, &str)] = &[
        // (what, initial value, operation with K for the key)
        ("set", "old", "set:K:new"),
        ("setq", "old", "setq:K:newq"),
        ("add of an existing key", "old", "add:K:added"),
        ("addq", "old", "addq:K:added"),
        ("replace", "old", "replace:K:repl"),
        ("replaceq", "old", "replaceq:K:replq"),
        ("cas", "old", "cas:K:casv"),
        ("append", "old", "append:K:++"),
        ("appendq", "old", "appendq:K:++"),
        ("prepend", "old", "prepend:K:--"),
        ("prependq", "old", "prependq:K:--"),
        ("incr", "10", "incr:K:5"),
        ("incrq", "10", "incrq:K:5"),
        ("decr", "10", "decr:K:3"),
        ("decrq", "10", "decrq:K:3"),
        ("delete", "old", "delete:K"),
        ("deleteq", "old", "deleteq:K"),
        // an absolute time long past: memcached expires the item at once
        ("touch", "old", "touch:K:2592001"),
    ];
    for (fam, addr) in [("v4", rig.server_addr()), ("v6", v6_addr())] {
        let key = |i: usize| format!("bt{fam}{i}");
        let bystander = format!("bystander{fam}");
        let mut items: Vec<(String, &str)> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| (key(i), c.1))
            .collect();
        items.push((bystander.clone(), "untouched"));
        cache_all(&rig, &items);
        let before = counters(&rig);
        let ops: Vec<String> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| c.2.replace('K', &key(i)))
            .collect();
        let out = bin_client(&rig, addr, &ops);
        for (i, (what, _, _)) in cases.iter().enumerate() {
            assert_fresh(
                &rig,
                &key(i),
                &format!("binary {what} over TCP {fam} ({out})"),
            );
        }
        let what = format!("binary mutations over TCP {fam}");
        assert_precise(&rig, &before, cases.len(), &bystander, &what);
    }
}

/// Every family of binary mutation pipelined in one segment (TCP) or datagram (UDP), quiet
/// variants and gat/gatk included, then two read-only gets: the bytes and (key, initial value,
/// what) of each mutated key.
fn pipeline(fam: &str) -> (Vec<u8>, Vec<(String, &'static str, &'static str)>) {
    let k = |n: &str| format!("bp{fam}{n}");
    let keys: Vec<(String, &'static str, &'static str)> = vec![
        (k("setq"), "old", "setq"),
        (k("addq"), "old", "addq of an existing key"),
        (k("replaceq"), "old", "replaceq"),
        (k("appendq"), "old", "appendq"),
        (k("prependq"), "old", "prependq"),
        (k("incrq"), "10", "incrq"),
        (k("decrq"), "10", "decrq"),
        (k("deleteq"), "old", "deleteq"),
        (k("touch"), "old", "touch (expires it)"),
        (k("gatq"), "old", "gatq (expires it)"),
        (k("gatkq"), "old", "gatkq (expires it)"),
        (k("gat"), "old", "gat (expires it)"),
        (k("gatk"), "old", "gatk (expires it)"),
        (k("set"), "old", "set"),
        (k("append"), "old", "append"),
        (k("incr"), "10", "incr"),
        (k("delete"), "old", "delete"),
    ];
    let mut b = Vec::new();
    b.extend(store(SETQ, &keys[0].0, b"new", 0));
    b.extend(store(ADDQ, &keys[1].0, b"added", 0));
    b.extend(store(REPLACEQ, &keys[2].0, b"repl", 0));
    b.extend(req(APPENDQ, &keys[3].0, b"", b"++", 0));
    b.extend(req(PREPENDQ, &keys[4].0, b"", b"--", 0));
    b.extend(arith(INCRQ, &keys[5].0, 5, 0, u32::MAX));
    b.extend(arith(DECRQ, &keys[6].0, 3, 0, u32::MAX));
    b.extend(req(DELETEQ, &keys[7].0, b"", b"", 0));
    b.extend(touch(TOUCH, &keys[8].0, PAST));
    b.extend(touch(GATQ, &keys[9].0, PAST));
    b.extend(touch(GATKQ, &keys[10].0, PAST));
    b.extend(touch(GAT, &keys[11].0, PAST));
    b.extend(touch(GATK, &keys[12].0, PAST));
    b.extend(store(SET, &keys[13].0, b"new", 0));
    b.extend(req(APPEND, &keys[14].0, b"", b"!!", 0));
    b.extend(arith(INCR, &keys[15].0, 1, 0, u32::MAX));
    b.extend(req(DELETE, &keys[16].0, b"", b"", 0));
    // read-only requests change nothing
    b.extend(req(GETKQ, &format!("bystander{fam}"), b"", b"", 0));
    b.extend(req(GET, &format!("bystander{fam}"), b"", b"", 0));
    (b, keys)
}

/// The pipeline above over TCP and UDP, IPv4 and IPv6: every key invalidated, nothing voided.
#[test]
fn pipelined_binary_mutations_in_one_segment_or_datagram() {
    let rig = Rig::attached(&[]).unwrap();
    let transports = [
        ("tcp4", rig.server_addr(), false),
        ("tcp6", v6_addr(), false),
        ("udp4", rig.server_addr(), true),
        ("udp6", v6_addr(), true),
    ];
    for (n, (fam, addr, udp)) in transports.into_iter().enumerate() {
        let (bytes, keys) = pipeline(fam);
        let bystander = format!("bystander{fam}");
        let mut items: Vec<(String, &str)> = keys.iter().map(|k| (k.0.clone(), k.1)).collect();
        items.push((bystander.clone(), "untouched"));
        cache_all(&rig, &items);
        let before = counters(&rig);
        let rs = rig.client(|| {
            if udp {
                bin_udp(addr, 100 + n as u16, &bytes, Duration::from_secs(1))
            } else {
                bin_tcp(addr, &bytes)
            }
        });
        assert!(
            rs.iter().any(|r| r.0 == NOOP),
            "{fam}: memcached did not answer the whole pipeline: {rs:?}"
        );
        for (key, _, what) in &keys {
            assert_fresh(&rig, key, &format!("pipelined binary {what} over {fam}"));
        }
        let what = format!("a binary pipeline over {fam}");
        assert_precise(&rig, &before, keys.len(), &bystander, &what);
    }
}

/// A segment (or datagram) full of small quiet requests, 44 of them, is walked to its end: the
/// first, a middle and the last key are invalidated, nothing is voided.
#[test]
fn a_full_segment_of_pipelined_requests_is_walked() {
    let rig = Rig::attached(&[]).unwrap();
    for (n, udp) in [false, true].into_iter().enumerate() {
        let key = |i: usize| format!("m{n}{i:02}");
        let bytes: Vec<u8> = (0..44)
            .flat_map(|i| req(DELETEQ, &key(i), b"", b"", 0))
            .collect();
        assert!(bytes.len() + 24 <= 1392, "one datagram, one segment");
        let watched = [key(0), key(21), key(43)];
        let bystander = format!("bystander{n}");
        let mut items: Vec<(String, &str)> = watched.iter().map(|k| (k.clone(), "old")).collect();
        items.push((bystander.clone(), "untouched"));
        cache_all(&rig, &items);
        let before = counters(&rig);
        let addr = rig.server_addr();
        let rs = rig.client(|| {
            if udp {
                bin_udp(addr, 600, &bytes, Duration::from_secs(1))
            } else {
                bin_tcp(addr, &bytes)
            }
        });
        assert!(rs.iter().any(|r| r.0 == NOOP), "{rs:?}");
        for k in &watched {
            assert_fresh(&rig, k, &format!("the 44-request pipeline (udp {udp})"));
        }
        let after = counters(&rig);
        assert_eq!(
            after.unparsable,
            before.unparsable,
            "udp {udp}: {}",
            rig.stats()
        );
        assert_eq!(
            after.command,
            before.command + 44,
            "udp {udp}: {}",
            rig.stats()
        );
        assert_still_cached(&rig, &bystander, "the 44-request pipeline");
    }
}

/// Binary mutations over UDP: a real client (libmemcached's memccp --udp --binary sends setq,
/// addq, replaceq) and one datagram per family, IPv4 and IPv6. A binary get over UDP is never
/// answered by the kernel, even for a cached key: memcached answers it.
#[test]
fn binary_mutations_over_udp() {
    let rig = Rig::attached(&[]).unwrap();
    let dir = std::env::temp_dir().join(testkit::unique("ikbin"));
    std::fs::create_dir_all(&dir).unwrap();
    struct Rm(std::path::PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = Rm(dir.clone());
    for (fam, addr) in [("v4", rig.server_addr()), ("v6", v6_addr())] {
        // memccp stores each file under its name
        let k = |n: &str| format!("bu{fam}{n}");
        let memccp: Vec<(String, &str)> = vec![
            (k("cpset"), "--set"),
            (k("cpadd"), "--add"),
            (k("cprepl"), "--replace"),
        ];
        // (key, initial value, what, datagram)
        let frames: Vec<(String, &str, &str, Vec<u8>)> = vec![
            (
                k("delete"),
                "old",
                "delete",
                req(DELETE, &k("delete"), b"", b"", 0),
            ),
            (
                k("deleteq"),
                "old",
                "deleteq",
                req(DELETEQ, &k("deleteq"), b"", b"", 0),
            ),
            (
                k("incr"),
                "10",
                "incr",
                arith(INCR, &k("incr"), 7, 0, u32::MAX),
            ),
            (
                k("decr"),
                "10",
                "decr",
                arith(DECR, &k("decr"), 2, 0, u32::MAX),
            ),
            (
                k("decrq"),
                "10",
                "decrq",
                arith(DECRQ, &k("decrq"), 2, 0, u32::MAX),
            ),
            (
                k("append"),
                "old",
                "append",
                req(APPEND, &k("append"), b"", b"++", 0),
            ),
            (
                k("prepend"),
                "old",
                "prepend",
                req(PREPEND, &k("prepend"), b"", b"--", 0),
            ),
            (
                k("replace"),
                "old",
                "replace",
                store(REPLACE, &k("replace"), b"r", 0),
            ),
            (
                k("add"),
                "old",
                "add of an existing key",
                store(ADD, &k("add"), b"a", 0),
            ),
            (
                k("touch"),
                "old",
                "touch (expires it)",
                touch(TOUCH, &k("touch"), PAST),
            ),
            (
                k("gat"),
                "old",
                "gat (expires it)",
                touch(GAT, &k("gat"), PAST),
            ),
            (
                k("gatk"),
                "old",
                "gatk (expires it)",
                touch(GATK, &k("gatk"), PAST),
            ),
        ];
        let bystander = format!("bystander{fam}");
        let mut items: Vec<(String, &str)> = memccp.iter().map(|m| (m.0.clone(), "old")).collect();
        items.extend(frames.iter().map(|f| (f.0.clone(), f.1)));
        items.push((bystander.clone(), "untouched"));
        cache_all(&rig, &items);
        let before = counters(&rig);

        for (key, mode) in &memccp {
            let path = dir.join(key);
            std::fs::write(&path, format!("via memccp {mode}")).unwrap();
            testkit::sh(rig.pair.client.cmd("memccp").args([
                "--udp",
                "--binary",
                mode,
                &format!("--servers={}", client_server(addr)),
                path.to_str().unwrap(),
            ]))
            .unwrap();
        }
        sleep(Duration::from_millis(100)); // quiet over UDP: nothing says when memcached is done
        for (key, mode) in &memccp {
            assert_fresh(
                &rig,
                key,
                &format!("memccp --udp --binary {mode} over {fam}"),
            );
            assert!(
                rig.tcp(format!("get {key}\r\n").as_bytes()) != Response::Values(vec![]),
                "memccp {mode} did not store {key}"
            );
        }
        for (i, (key, _, what, frame)) in frames.iter().enumerate() {
            let rs = rig.client(|| bin_udp(addr, 200 + i as u16, frame, Duration::from_secs(1)));
            assert!(rs.iter().any(|r| r.0 == NOOP), "{what}: {rs:?}");
            assert_fresh(&rig, key, &format!("binary {what} over UDP {fam}"));
        }
        let what = format!("binary mutations over UDP {fam}");
        assert_precise(
            &rig,
            &before,
            memccp.len() + frames.len(),
            &bystander,
            &what,
        );

        // a binary get (and getk) of the cached bystander: memcached answers, not the kernel
        let hits = rig.stat("hits");
        for (i, op) in [GET, GETK].into_iter().enumerate() {
            let rs = rig.client(|| {
                bin_udp(
                    addr,
                    300 + i as u16,
                    &req(op, &bystander, b"", b"", 0),
                    Duration::from_secs(1),
                )
            });
            assert_eq!(rs.len(), 2, "{fam}: {rs:?}");
            assert_eq!((rs[0].0, rs[0].1), (op, 0), "{fam}: {rs:?}");
            assert!(rs[0].2.ends_with(b"untouched"), "{fam}: {rs:?}");
        }
        assert_eq!(rig.stat("hits"), hits, "the kernel answered a binary get");
    }
}

/// Binary flush (flush, flushq) voids the whole cache, now or after its delay, from a real client
/// over TCP (pylibmc flush_all) and from frames over UDP.
#[test]
fn binary_flush_now_and_with_delay() {
    let rig = Rig::attached(&[]).unwrap();
    type Flush<'a> = (&'a str, Box<dyn Fn(&Rig, u32)>);
    let via: Vec<Flush> = vec![
        (
            "pylibmc flush_all over TCP v4",
            Box::new(|rig: &Rig, delay| {
                bin_client(rig, rig.server_addr(), &[format!("flush:{delay}")]);
            }),
        ),
        (
            "flushq over UDP v6",
            Box::new(|rig: &Rig, delay| {
                let ext = if delay == 0 {
                    vec![]
                } else {
                    delay.to_be_bytes().to_vec()
                };
                let rs = rig.client(|| {
                    bin_udp(
                        v6_addr(),
                        400,
                        &req(FLUSHQ, "", &ext, b"", 0),
                        Duration::from_secs(1),
                    )
                });
                assert!(rs.iter().any(|r| r.0 == NOOP), "{rs:?}");
            }),
        ),
        (
            "flush over UDP v4",
            Box::new(|rig: &Rig, delay| {
                let ext = if delay == 0 {
                    vec![]
                } else {
                    delay.to_be_bytes().to_vec()
                };
                let addr = rig.server_addr();
                let rs = rig.client(|| {
                    bin_udp(
                        addr,
                        401,
                        &req(FLUSH, "", &ext, b"", 0),
                        Duration::from_secs(1),
                    )
                });
                assert!(rs.iter().any(|r| r.0 == FLUSH && r.1 == 0), "{rs:?}");
            }),
        ),
    ];
    for (i, (what, flush)) in via.iter().enumerate() {
        let key = format!("bf{i}");
        cache_all(&rig, &[(key.clone(), "before flush")]);
        let before = counters(&rig);
        flush(&rig, 0);
        assert_fresh(&rig, &key, what);
        assert_eq!(
            rig.tcp(format!("get {key}\r\n").as_bytes()),
            Response::Values(vec![]),
            "{what}: memcached did not flush"
        );
        assert!(
            counters(&rig).flush > before.flush,
            "{what}: {}",
            rig.stats()
        );
    }
    // with a delay: memcached keeps the items until it passes, the kernel must not serve after
    // (and refuses fills until then: wait that out before the next round)
    for (i, (what, flush)) in via.iter().enumerate().take(2) {
        let key = format!("bfd{i}");
        cache_all(&rig, &[(key.clone(), "before delayed flush")]);
        let before = counters(&rig);
        flush(&rig, 2);
        assert!(
            counters(&rig).flush > before.flush,
            "{what}: {}",
            rig.stats()
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(5500) {
            assert_fresh(&rig, &key, &format!("{what} with a 2 s delay"));
            sleep(Duration::from_millis(250));
        }
        assert_eq!(
            rig.tcp(format!("get {key}\r\n").as_bytes()),
            Response::Values(vec![]),
            "{what}: memcached did not flush after the delay"
        );
    }
}

/// A binary request split across TCP segments: a key complete in the first segment is
/// invalidated from it (the value's rest then arrives as a segment the text parser cannot parse,
/// which voids everything); a key cut by the segment end voids everything at once.
#[test]
fn binary_request_split_across_segments() {
    let rig = Rig::attached(&[]).unwrap();
    let addr = rig.server_addr();
    cache_all(
        &rig,
        &[("bsplit1".into(), "old"), ("bsplit2".into(), "old")],
    );

    // header, extras and key in the first segment, the value in the second
    let frame = store(SET, "bsplit1", b"new value", 0);
    let cut = frame.len() - 9;
    let before = counters(&rig);
    let (mid, rs) = rig.client(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(&frame[..cut]).unwrap();
        sleep(Duration::from_millis(100));
        let mid = counters(&rig); // the first segment alone has been seen
        s.write_all(&frame[cut..]).unwrap();
        s.write_all(&noop()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        (mid, responses(&buf[..n]).0)
    });
    assert_eq!((rs[0].0, rs[0].1), (SET, 0), "{rs:?}");
    assert_eq!(
        mid.command,
        before.command + 1,
        "key not invalidated: {}",
        rig.stats()
    );
    assert_eq!(mid.unparsable, before.unparsable, "{}", rig.stats());
    assert_fresh(
        &rig,
        "bsplit1",
        "a binary set whose value continues in the next segment",
    );

    // the key itself cut by the segment end
    settle();
    cache_it(&rig, "bsplit2");
    let frame = store(SET, "bsplit2", b"newer", 0);
    let cut = 24 + 8 + 3; // header, extras, "bsp"
    let before = counters(&rig);
    rig.client(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(&frame[..cut]).unwrap();
        sleep(Duration::from_millis(100));
        s.write_all(&frame[cut..]).unwrap();
        s.write_all(&noop()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = vec![0u8; 4096];
        let _ = s.read(&mut buf).unwrap();
    });
    // carried over to the next segment, as memcached waits for the rest: only bsplit2 goes
    let after = counters(&rig);
    assert_eq!(after.unparsable, before.unparsable, "{}", rig.stats());
    assert!(after.command > before.command, "{}", rig.stats());
    assert_fresh(
        &rig,
        "bsplit2",
        "a binary set whose key is cut by the segment end",
    );
}

/// Binary junk (0x80, then lengths memcached refuses, or an opcode nobody knows) changes nothing
/// in memcached (it answers an error, closes or swallows the body), so it invalidates nothing: the
/// cached key stays a kernel hit with memcached's own value, over TCP and UDP.
#[test]
fn binary_junk_changes_nothing() {
    let rig = Rig::attached(&[]).unwrap();
    let mut bad_lengths = req(SET, "bj", &[0; 8], b"", 0);
    bad_lengths[2..4].copy_from_slice(&0xffffu16.to_be_bytes()); // key longer than the body
    let junk: Vec<(&str, Vec<u8>, bool)> = vec![
        ("bad lengths over TCP", bad_lengths.clone(), false),
        (
            "an unknown opcode over TCP",
            req(0x55, "bj", b"", b"xyz", 0),
            false,
        ),
        ("bad lengths over UDP", bad_lengths, true),
        (
            "garbage after the magic over UDP",
            vec![0x80, 0x01, 0xff, 0x13, 0x77],
            true,
        ),
    ];
    for (i, (what, bytes, udp)) in junk.iter().enumerate() {
        let key = format!("bjunk{i}");
        cache_all(&rig, &[(key.clone(), "kept")]);
        let memcached_before = rig.tcp(format!("get {key}\r\n").as_bytes());
        let before = counters(&rig);
        let addr = rig.server_addr();
        rig.client(|| {
            if *udp {
                let s = UdpSocket::bind("0.0.0.0:0").unwrap();
                s.send_to(&frame_request(500 + i as u16, bytes), addr)
                    .unwrap();
                sleep(Duration::from_millis(100));
            } else {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(bytes).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf); // memcached's error, or nothing
            }
        });
        assert_eq!(
            counters(&rig).unparsable,
            before.unparsable,
            "{what}: voided: {}",
            rig.stats()
        );
        // the next get is a kernel hit, and memcached still has the same value
        let hits = rig.stat("hits");
        let via_udp = rig.udp_get(6, format!("get {key}\r\n").as_bytes()).unwrap();
        assert_eq!(
            rig.stat("hits"),
            hits + 1,
            "{what}: the kernel no longer serves {key}"
        );
        let memcached_after = rig.tcp(format!("get {key}\r\n").as_bytes());
        assert_eq!(
            memcached_after, memcached_before,
            "{what}: memcached's data changed"
        );
        assert_eq!(values(&via_udp)[0].2, b"kept");
    }
}

/// Expiry learned from binary mutations: set with an exptime (pylibmc), touch (pylibmc), gat, and
/// incr creating a missing key with its initial value and exptime. Once memcached has expired
/// them, the kernel must not answer them.
#[test]
fn expiry_learned_from_binary_mutations() {
    let rig = Rig::attached(&[]).unwrap();
    let addr = rig.server_addr();
    cache_all(&rig, &[("bxtouch".into(), "t"), ("bxgat".into(), "g")]);
    bin_client(
        &rig,
        addr,
        &["set:bxset:s:4".to_string(), "touch:bxtouch:4".to_string()],
    );
    let mut b = touch(GAT, "bxgat", 4);
    b.extend(arith(INCR, "bxincr", 1, 42, 4));
    let rs = rig.client(|| bin_tcp(addr, &b));
    assert_eq!((rs[1].0, rs[1].1), (INCR, 0), "{rs:?}");
    settle();
    for k in ["bxset", "bxtouch", "bxgat", "bxincr"] {
        cache_it(&rig, k);
    }
    assert_expired_not_served(&rig, &["bxset", "bxtouch", "bxgat", "bxincr"]);
}

/// libmemcached's binary protocol checker passes with the kernel cache attached (every binary
/// command, quiet variants, pipelines), and its mutations are parsed key by key.
#[test]
fn memccapable_binary_passes_through_the_kernel_cache() {
    let rig = Rig::attached(&[]).unwrap();
    let before = counters(&rig);
    let out = rig
        .pair
        .client
        .cmd("memccapable")
        .args(memccapable::args(
            &testkit::SRV_V4.to_string(),
            PORT,
            Protocol::Binary,
        ))
        .output()
        .unwrap();
    memccapable::assert_passed(&out);
    let after = counters(&rig);
    assert!(after.command > before.command + 20, "{}", rig.stats());
    assert!(after.flush > before.flush, "{}", rig.stats());
}
