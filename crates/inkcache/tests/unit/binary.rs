//! The binary protocol (first byte 0x80): every request that may change a key invalidates it,
//! parsed request by request (nothing voided), over TCP and UDP; writes are settled by the
//! quarantine (quiet variants leave answers out, so the answers cannot be counted).
use super::*;

const BYSTANDER: &str = "bystander";

/// A binary request: header (magic 0x80, opcode, key length, extras length, body length, opaque)
/// then extras, key and value.
pub fn bin(op: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut v = vec![0x80, op];
    v.extend_from_slice(&(key.len() as u16).to_be_bytes());
    v.push(extras.len() as u8);
    v.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    v.extend_from_slice(&body.to_be_bytes());
    v.extend_from_slice(&0x1234u32.to_be_bytes()); // opaque
    v.extend_from_slice(&[0u8; 8]); // cas
    v.extend_from_slice(extras);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v
}

fn store_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

/// incr/decr extras: delta, initial value, exptime (0xffffffff: no vivify).
fn arith_extras() -> Vec<u8> {
    [
        &1u64.to_be_bytes()[..],
        &0u64.to_be_bytes(),
        &u32::MAX.to_be_bytes(),
    ]
    .concat()
}

fn check(udp: bool, req: &[u8], keys: &[&str]) {
    let f = fx();
    let fl = Flow::v4();
    for k in keys.iter().chain([&BYSTANDER]) {
        f.fill(&fl, k, 0, b"old");
    }
    if udp {
        assert_eq!(f.udp_in(&fl.udp(next_id(), req)), XDP_PASS);
    } else {
        Conn::open(&f, fl.clone()).send(&f, req);
    }
    for k in keys {
        f.assert_miss(&fl, k);
    }
    let st = f.stats();
    assert_eq!(st.inval_unparsable, 0, "voided: {st:?}");
    f.assert_hit(&fl, BYSTANDER, 0, b"old");
    after_quarantine();
    for k in keys {
        f.fill(&fl, k, 0, b"new");
    }
}

macro_rules! binary {
    ($($name:ident: $req:expr, [$($key:expr),+];)*) => {
        mod tcp { use super::*; $(#[test] fn $name() { check(false, &$req, &[$($key),+]) })* }
        mod udp { use super::*; $(#[test] fn $name() { check(true, &$req, &[$($key),+]) })* }
    };
}

binary! {
    set: bin(0x01, &store_extras(0, 0), b"a", b"x"), ["a"];
    setq: bin(0x11, &store_extras(0, 0), b"a", b"x"), ["a"];
    add: bin(0x02, &store_extras(0, 0), b"a", b"x"), ["a"];
    replace: bin(0x03, &store_extras(0, 0), b"a", b"x"), ["a"];
    delete: bin(0x04, &[], b"a", b""), ["a"];
    deleteq: bin(0x14, &[], b"a", b""), ["a"];
    incr: bin(0x05, &arith_extras(), b"a", b""), ["a"];
    decr: bin(0x06, &arith_extras(), b"a", b""), ["a"];
    append: bin(0x0e, &[], b"a", b"x"), ["a"];
    prepend: bin(0x0f, &[], b"a", b"x"), ["a"];
    touch: bin(0x1c, &100u32.to_be_bytes(), b"a", b""), ["a"];
    gat: bin(0x1d, &100u32.to_be_bytes(), b"a", b""), ["a"];
    gatkq: bin(0x24, &100u32.to_be_bytes(), b"a", b""), ["a"];
    pipelined: [
        bin(0x11, &store_extras(0, 0), b"a", b"x"),
        bin(0x14, &[], b"b", b""),
        bin(0x0a, &[], b"", b""),
    ].concat(), ["a", "b"];
}

#[test]
fn binary_reads_invalidate_nothing() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "a", 0, b"1");
    let reads = [
        bin(0x00, &[], b"a", b""),
        bin(0x0c, &[], b"a", b""),
        bin(0x0a, &[], b"", b""),
        bin(0x0b, &[], b"", b""),
        bin(0x10, &[], b"", b""),
    ]
    .concat();
    Conn::open(&f, fl.clone()).send(&f, &reads);
    f.assert_hit(&fl, "a", 0, b"1");
    assert_eq!(f.stats().invalidations, 0);
}

#[test]
fn binary_flush_voids_everything() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "a", 0, b"1");
    Conn::open(&f, fl.clone()).send(&f, &bin(0x08, &[], b"", b""));
    f.assert_miss(&fl, "a");
    assert_eq!(f.stats().inval_flush, 1);
}

#[test]
fn binary_value_split_across_segments_is_skipped_by_length() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "a", 0, b"1");
    f.fill(&fl, "b", 0, b"2");
    // a set of "a" whose value holds what looks like a delete of "b", in two segments
    let req = bin(0x01, &store_extras(0, 0), b"a", &bin(0x04, &[], b"b", b""));
    let mut c = Conn::open(&f, fl.clone());
    c.send(&f, &req[..40]);
    c.send(&f, &req[40..]);
    f.assert_miss(&fl, "a");
    f.assert_hit(&fl, "b", 0, b"2");
    assert_eq!(f.stats().inval_unparsable, 0);
}
