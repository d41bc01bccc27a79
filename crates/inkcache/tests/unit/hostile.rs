//! Requests walked exactly as memcached 1.6 reads them (proto_text.c, util.c, proto_bin.c): lines
//! it refuses read no data block, oddities it accepts do, answers are counted as it counts them,
//! lines that change nothing invalidate nothing, and a connection it closes executes nothing more.
//! Each case sends one segment (or datagram) and checks which cached keys it invalidated.
use super::binary::bin;
use super::*;

/// Cached keys the cases below may touch.
const KEYS: [&str; 4] = ["k", "b", "x", "bystander"];

#[derive(Clone, Copy, Debug)]
enum Via {
    Tcp,
    Udp,
}

/// Caches KEYS, sends `bytes` on a followed TCP connection or as one UDP datagram, and checks
/// that exactly the keys in `gone` were invalidated (the others still hit), with nothing voided.
fn effects(via: Via, bytes: &[u8], gone: &[&str]) {
    let f = fx();
    let fl = Flow::v4();
    for k in KEYS {
        f.fill(&fl, k, 0, b"old");
    }
    match via {
        Via::Tcp => Conn::open(&f, fl.clone()).send(&f, bytes),
        Via::Udp => {
            // a get of cached keys is answered by the kernel; everything else passes
            let a = f.udp_in(&fl.udp(next_id(), bytes));
            assert!(a == XDP_PASS || a == XDP_TX, "action {a}");
        }
    }
    let what = format!("{via:?} {:?}", String::from_utf8_lossy(bytes));
    for k in KEYS {
        if gone.contains(&k) {
            assert!(f.get(&fl, k).is_none(), "{what}: {k} should be invalidated");
        } else {
            assert!(
                f.get(&fl, k).is_some(),
                "{what}: {k} should still be cached"
            );
        }
    }
    let st = f.stats();
    assert_eq!(st.inval_unparsable, 0, "{what}: voided: {st:?}");
}

fn both(bytes: &[u8], gone: &[&str]) {
    effects(Via::Tcp, bytes, gone);
    effects(Via::Udp, bytes, gone);
}

/// Lines memcached refuses read no data block: the bytes after them are commands. Each line
/// announces 8 bytes of data, exactly "delete k" (+ CRLF), which memcached then executes.
#[test]
fn refused_storage_lines_read_no_data() {
    let long_key = "x".repeat(251);
    for line in [
        "set x abc 0 8",                  // flags not a number
        "set x -1 0 8",                   // negative flags
        "set x 1.5 0 8",                  // junk after the digits
        "set x 0 abc 8",                  // exptime not a number
        "set x 0 0 -1",                   // negative length
        "set x 0 0 abc",                  // length not a number
        "set x 0 0 2147483646",           // longer than memcached takes
        "set x 0 0 99999999999999999999", // out of range
        "set x 0 0 8 6 7",                // too many tokens: ERROR
        "set x 0 0",                      // too few tokens: ERROR
        &format!("set {long_key} 0 0 8"), // key too long
        "cas x 0 0 8",                    // cas without its unique: ERROR
        "cas x 0 0 8 abc",                // bad cas unique
        "cas x 0 0 8 -5",                 // negative cas unique
        "set x\0 0 0 8",                  // the line ends at a NUL: "set x" is an ERROR
        "SET x 0 0 8",                    // unknown command
        "set\tx 0 0 8",                   // tabs do not separate tokens
        "sets x 0 0 8",
        "prepend x 0 0 8 y z",
    ] {
        let mut req = format!("{line}\r\ndelete k\r\n").into_bytes();
        // an unknown command or a refused line answers an error and changes nothing
        both(&req, &["k"]);
        req.extend_from_slice(b"delete b\r\n");
        both(&req, &["k", "b"]);
    }
}

/// Lines memcached accepts, however odd, read their data block: the "delete b" inside it is data.
#[test]
fn accepted_oddities_read_their_data() {
    for line in [
        "set x 0 0 +8",
        "set x 0 0 08",
        "set x 0 0 000000000000000000000000000008",
        "set x 0 0 \t8",
        "set x 0 0 8\tjunk",
        "set  x  0   0 8",
        "set x 0 0 4294967304", // 2^32 + 8: memcached truncates it to 8
        "set x -0 0 8",
        "set x 4294967296 0 8", // flags truncated
        "set x 18446744073709551615 0 8",
        "set x 0 0 8 junk", // a sixth token that is not noreply: ignored
        "set x 0 -1 8",
        "set x 0 +5 8",
        "add x 0 0 8 noreply",
        "replace x 0 0 8",
        "append x 0 0 8",
        "prepend x 0 0 8",
        "cas x 0 0 8 123",
        "cas x 0 0 8 +123 noreply",
    ] {
        let req = format!("{line}\r\ndelete b\r\ndelete k\r\n");
        both(req.as_bytes(), &["x", "k"]);
    }
}

#[test]
fn meta_set_reads_its_data_even_when_refused() {
    // the length parses: memcached swallows the data even though the flags are refused
    both(b"ms x 8 Z\r\ndelete b\r\ndelete k\r\n", &["k"]);
    both(b"ms x 8 T1 T2\r\ndelete b\r\ndelete k\r\n", &["k"]);
    both(b"ms x 8 MX\r\ndelete b\r\ndelete k\r\n", &["k"]);
    both(b"ms x 8 T30 F5\r\ndelete b\r\ndelete k\r\n", &["x", "k"]);
    // the length does not parse: no data, the next line is a command
    both(b"ms x abc\r\ndelete k\r\n", &["k"]);
    both(b"ms x\r\ndelete k\r\n", &["k"]);
    both(b"ms x -3\r\ndelete k\r\n", &["k"]);
}

#[test]
fn lines_that_change_nothing_invalidate_nothing() {
    for line in [
        &b"bogus k\r\n"[..],
        b"delete\tk\r\n",
        b"\r\n",
        b"\r\n\r\n",
        b"\n",
        b"GET k\r\n",
        b"x\r\n",
        b"ms\r\n",
        b"mz k\r\n",
        b"incr k abc\r\n",
        b"incr k -1\r\n",
        b"touch k abc\r\n",
        b"delete k 5\r\n",
        b"delete k 0 0\r\n",
        b"delete k junk noreply\r\n",
        b"mg k Z\r\n",
        b"mg k T1 T2\r\n",
        b"mg k Tabc\r\n",
        b"md k q q\r\n",
        b"ma k MX\r\n",
        b"flush_all abc\r\n",
        b"flush_all 1 2 3\r\n",
        b"verbosity 1\r\n",
        b"stats\r\n",
        b"version\r\n",
        b"mn\r\n",
        b"me k\r\n",
        b"gat abc k\r\n",
        b"get k\r\n",
        b"gets k b\r\n",
        b"bget k\r\n",
        b"mg k v f t\r\n",
        b"incomplete delete k",
    ] {
        both(line, &[]);
    }
}

#[test]
fn keys_end_at_a_nul_and_base64_keys_are_decoded() {
    both(b"delete k\0junk\r\n", &["k"]);
    both(b"incr k\0 5\r\n", &[]); // "incr k": too few tokens, ERROR
                                  // meta commands with b: the key is what the base64 decodes to ("k" is "aw==")
    both(b"md aw== b\r\n", &["k"]);
    both(b"ma aw== b\r\n", &["k"]);
    both(b"mg aw== b T30\r\n", &["k"]);
    both(b"ms aw== 1 b\r\nz\r\n", &["k"]);
    both(b"md a!w== b\r\n", &["k"]); // memcached skips bytes outside the alphabet
    both(b"md aw= b\r\n", &[]); // not a multiple of four digits: CLIENT_ERROR
}

#[test]
fn gat_touches_every_key_until_one_is_too_long() {
    both(b"gat 100 k b\r\n", &["k", "b"]);
    let long = "y".repeat(251);
    both(format!("gat 100 k {long} b\r\n").as_bytes(), &["k"]);
    // more keys than memcached tokenizes at once: it reads the rest too
    let many: Vec<String> = (0..30).map(|i| format!("z{i}")).collect();
    both(
        format!("gats 100 {} b\r\n", many.join(" ")).as_bytes(),
        &["b"],
    );
}

/// memcached closes the connection after quit or an HTTP request line: nothing after runs.
#[test]
fn nothing_after_quit_or_an_http_request_line_runs() {
    effects(Via::Tcp, b"quit\r\ndelete k\r\n", &[]);
    effects(Via::Tcp, b"GET / HTTP/1.1\r\ndelete k\r\n", &[]);
    effects(
        Via::Tcp,
        b"delete b\r\nHEAD /x HTTP/1.0\r\ndelete k\r\n",
        &["b"],
    );
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "k", 0, b"old");
    let mut c = Conn::open(&f, fl.clone());
    c.send(&f, b"quit\r\n");
    c.send(&f, b"delete k\r\n"); // a later segment: never executed either
    f.assert_hit(&fl, "k", 0, b"old");
}

/// `get k noreply` is still answered (only storage, delete, incr/decr, touch, flush_all and
/// verbosity honour noreply): counting it as silent would settle the next write by the get's
/// END, before memcached applied it.
#[test]
fn get_with_noreply_is_still_answered() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "k", 0, b"old");
    let mut c = Conn::open(&f, fl.clone());
    c.send(&f, b"get a noreply\r\nset k 0 0 3\r\nnew\r\n");
    c.answer(&f, b"END\r\n");
    assert!(
        !f.fill_with(&fl, "get k\r\n", &value_reply("k", 0, b"old")),
        "the set is settled only by its own STORED"
    );
    c.answer(&f, b"STORED\r\n");
    f.fill(&fl, "k", 0, b"new");
}

#[test]
fn delete_with_a_zero_hold_time_and_noreply_is_silent() {
    let f = fx();
    let fl = Flow::v4();
    let mut c = Conn::open(&f, fl.clone());
    // delete k 0 noreply: valid and silent; the set after it gets the first answer
    c.send(&f, b"delete b 0 noreply\r\nset k 0 0 3\r\nnew\r\n");
    c.answer(&f, b"STORED\r\n");
    f.fill(&fl, "k", 0, b"new");
}

/// memcached executes a datagram whatever its sequence number; it drops one announcing several.
#[test]
fn udp_sequence_numbers() {
    let f = fx();
    let fl = Flow::v4();
    for k in ["k", "b"] {
        f.fill(&fl, k, 0, b"old");
    }
    let frame = fl.udp_raw(&packet::mc_frame(next_id(), 3, 1, b"delete k\r\n"));
    assert_eq!(f.udp_in(&frame), XDP_PASS);
    f.assert_miss(&fl, "k");
    let frame = fl.udp_raw(&packet::mc_frame(next_id(), 0, 2, b"delete b\r\n"));
    assert_eq!(f.udp_in(&frame), XDP_PASS);
    f.assert_hit(&fl, "b", 0, b"old");
}

/// A UDP set whose data goes on in later datagrams: memcached applies it (and answers) only once
/// the rest arrives, however late; its key refuses fills until that answer passes.
#[test]
fn a_udp_set_cut_by_the_datagram_end_is_settled_by_its_answer() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "k", 0, b"old");
    let id = next_id();
    assert_eq!(
        f.udp_in(&fl.udp(id, b"set k 0 0 100\r\n0123456789")),
        XDP_PASS
    );
    f.assert_miss(&fl, "k");
    after_quarantine();
    assert!(
        !f.fill_with(&fl, "get k\r\n", &value_reply("k", 0, b"old")),
        "filled while memcached was still reading the set"
    );
    f.egress(&fl.udp_reply(id, b"STORED\r\n"));
    f.fill(&fl, "k", 0, b"new");
}

/// memcached's clock may expire an item up to ~2 s before its write + exptime (its timer moves the
/// clock on by two seconds now and then: bpf/coherence.h): exptimes of 1 and 2 s are never cached,
/// 3 s is (for 1 s). Cached with 2 s before (served 1 s), which a CI run caught as a stale hit.
#[test]
fn exptimes_of_two_seconds_or_less_are_not_cached() {
    let f = fx();
    let fl = Flow::v4();
    for (key, exptime, cached) in [("ttl1", 1, false), ("ttl2", 2, false), ("ttl3", 3, true)] {
        let mut c = Conn::open(&f, fl.clone());
        c.send(&f, format!("set {key} 0 {exptime} 1\r\nx\r\n").as_bytes());
        c.answer(&f, b"STORED\r\n");
        let filled = f.fill_with(&fl, &format!("get {key}\r\n"), &value_reply(key, 0, b"x"));
        assert_eq!(filled, cached, "exptime {exptime}: {:?}", f.stats());
    }
}

/// Keys written since attach carry their expiry; writes that keep the item keep it too. Each case
/// writes its own key (`K` in the commands) on its own connection; one wait covers them all.
#[test]
fn expiry_is_kept_by_writes_that_keep_the_item() {
    // exptime 3 is served at most 1 s; each later write leaves the item's expiry as it was
    let cases: &[&[&str]] = &[
        &["set K 0 3 1\r\nv\r\n", "append K 0 0 1\r\nw\r\n"],
        &["set K 0 3 1\r\nv\r\n", "prepend K 0 0 1\r\nw\r\n"],
        &["set K 0 3 1\r\nv\r\n", "mg K N1000\r\n"],
        &["set K 0 3 1\r\nv\r\n", "ma K N1000\r\n"],
        &["set K 0 3 1\r\nv\r\n", "md K I\r\n"],
        &["set K 0 3 1\r\nv\r\n", "md K I T1000\r\n"],
        &["set K 0 3 1\r\nv\r\n", "ms K 1 MA\r\nw\r\n"],
        &["set K 0 3 1\r\nv\r\n", "touch K abc\r\n"],
        &["set K 0 3 1\r\nv\r\n", "incr K 1\r\n"],
        &["set K 0 3 1\r\nv\r\n", "add K 0 0 1\r\nw\r\n"],
        &["set K 0 3 1\r\nv\r\n", "cas K 0 0 1 99\r\nw\r\n"],
        &["set  K  0  3  1\r\nv\r\n"],
        &["set K 0 +3 1\r\nv\r\n"],
        &["ms K 1 T3\r\nv\r\n"],
        &["set K 0 0 1\r\nv\r\n", "touch K 3\r\n"],
        &["set K 0 0 1\r\nv\r\n", "gat 3 K\r\n"],
        &["set K 0 0 1\r\nv\r\n", "mg K T3\r\n"],
    ];
    let f = fx();
    let fl = Flow::v4();
    let key = |i: usize| format!("exp{i}");
    for (i, cmds) in cases.iter().enumerate() {
        let mut c = Conn::open(&f, fl.clone().cport(41000 + i as u16));
        for cmd in *cmds {
            c.send(&f, cmd.replace('K', &key(i)).as_bytes());
        }
        for _ in *cmds {
            c.answer(&f, b"OK\r\n"); // each command's one answer
        }
    }
    after_quarantine(); // for the lines memcached refuses: the count falls back to it
    for i in 0..cases.len() {
        f.fill(&fl, &key(i), 0, b"v");
        f.assert_hit(&fl, &key(i), 0, b"v");
    }
    std::thread::sleep(std::time::Duration::from_millis(1050));
    for (i, cmds) in cases.iter().enumerate() {
        assert!(
            f.get(&fl, &key(i)).is_none(),
            "served past its expiry after {cmds:?}"
        );
    }
}

/// The per-word step of the key hash (as bpf/proto.h): multiply, xorshift.
fn mix(h: u64) -> u64 {
    let h = h.wrapping_mul(0xff51afd7ed558ccd);
    h ^ (h >> 33)
}

/// Two 16-byte printable keys whose hashes collide under `seed`: the hash state after the first
/// word differs, and the second words cancel the difference.
fn colliding_keys(seed: u64) -> (String, String) {
    let h0 = 0x9E3779B97F4A7C15u64 ^ seed ^ 16;
    let printable = |w: u64| w.to_le_bytes().iter().all(|b| (0x21..0x7f).contains(b));
    let a = u64::from_le_bytes(*b"collide1");
    // a second first word whose state differs from a's only in bits printable bytes can cancel
    let (c, diff) = (0u64..)
        .map(|n| u64::from_le_bytes(*b"collide2") + (n << 8))
        .map(|c| (c, mix(h0 ^ a) ^ mix(h0 ^ c)))
        .find(|&(c, d)| printable(c) && d & 0x8080_8080_8080_8080 == 0)
        .unwrap();
    for i in 0u64.. {
        let mut bytes = [0u8; 8];
        for (j, b) in bytes.iter_mut().enumerate() {
            *b = 0x21 + ((i >> (j * 6)) & 0x3f) as u8 + ((i * 7 + j as u64) % 30) as u8;
        }
        let b = u64::from_le_bytes(bytes);
        let d = b ^ diff;
        if printable(b) && printable(d) {
            let k1 = [a.to_le_bytes(), b.to_le_bytes()].concat();
            let k2 = [c.to_le_bytes(), d.to_le_bytes()].concat();
            return (
                String::from_utf8(k1).unwrap(),
                String::from_utf8(k2).unwrap(),
            );
        }
    }
    unreachable!()
}

/// Two keys whose hashes collide never share an expiry: the hint compares keys, and once two keys
/// meet in one entry, neither is served from it.
#[test]
fn keys_whose_hashes_collide_never_share_a_hint() {
    let (k1, k2) = colliding_keys(fixture::HASH_SEED);
    assert_ne!(k1, k2);
    assert_eq!(
        inkcache::key_hash(fixture::HASH_SEED, k1.as_bytes()),
        inkcache::key_hash(fixture::HASH_SEED, k2.as_bytes())
    );
    let f = fx();
    let fl = Flow::v4();
    let mut c = Conn::open(&f, fl.clone());
    c.send(
        &f,
        format!("set {k1} 0 3 1\r\nv\r\nset {k2} 0 0 1\r\nv\r\n").as_bytes(),
    );
    c.answer(&f, b"STORED\r\nSTORED\r\n");
    // k2 never expires, k1 in a second: sharing one hint would serve one of them wrongly
    for k in [&k1, &k2] {
        assert!(
            !f.fill_with(&fl, &format!("get {k}\r\n"), &value_reply(k, 0, b"v")),
            "{k} filled from a shared hint"
        );
    }
}

/// A key whose hash collides with a cached key's finds that key's way (same set, same tag) but is
/// never served its item: the key is compared in full, whether the item is read from the log or
/// from the key's hot slot (written by the cached key's first hit).
#[test]
fn a_key_whose_hash_collides_with_a_cached_one_is_a_miss() {
    let (k1, k2) = colliding_keys(fixture::HASH_SEED);
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, &k1, 0, b"v1");
    f.assert_miss(&fl, &k2); // the item read from the log
    f.assert_hit(&fl, &k1, 0, b"v1"); // writes the hot slot
    f.assert_hit(&fl, &k1, 0, b"v1"); // read from it
    let slot_hits = f.stats().slot_hits;
    assert!(slot_hits > 0, "the hot slot was never read");
    f.assert_miss(&fl, &k2); // the item read from the slot
    f.assert_hit(&fl, &k1, 0, b"v1");
    assert!(
        f.stats().slot_hits > slot_hits,
        "the slot was not read again"
    );
}

#[test]
fn binary_header_cut_by_a_segment_end_is_carried_over() {
    for cut in [10usize, 24, 30, 33] {
        let f = fx();
        let fl = Flow::v4();
        f.fill(&fl, "a", 0, b"1");
        f.fill(&fl, "b", 0, b"2");
        let req = [bin(0x01, &[0; 8], b"a", b"x"), bin(0x04, &[], b"zz", b"")].concat();
        let mut c = Conn::open(&f, fl.clone());
        c.send(&f, &req[..cut]);
        c.send(&f, &req[cut..]);
        f.assert_miss(&fl, "a");
        f.assert_hit(&fl, "b", 0, b"2");
        assert_eq!(f.stats().inval_unparsable, 0, "cut at {cut}");
    }
}

#[test]
fn binary_framing_follows_memcached() {
    let f = fx();
    let fl = Flow::v4();
    for k in ["a", "b", "c"] {
        f.fill(&fl, k, 0, b"old");
    }
    let mut c = Conn::open(&f, fl.clone());
    let req = [
        // an opcode memcached does not know: it swallows the body length counted after the key
        // it already read (one byte more than the request holds here: a filler byte follows),
        // so the delete of "b" inside is not a request
        bin(0x50, &[], b"k", &bin(0x04, &[], b"b", b"")),
        b"F".to_vec(),
        // touch with a body longer than extras + key: the rest is read as the next request
        {
            let mut t = bin(0x1c, &100u32.to_be_bytes(), b"a", b"");
            let extra = bin(0x04, &[], b"c", b"");
            let body = (4 + 1 + extra.len()) as u32;
            t[8..12].copy_from_slice(&body.to_be_bytes());
            t.extend_from_slice(&extra);
            t
        },
    ]
    .concat();
    c.send(&f, &req);
    f.assert_miss(&fl, "a");
    f.assert_hit(&fl, "b", 0, b"old");
    f.assert_miss(&fl, "c");
    assert_eq!(f.stats().inval_unparsable, 0);
    // a protocol error: memcached closes the connection, nothing after it runs
    drop(f);
    let f = fx();
    f.fill(&fl, "a", 0, b"old");
    let mut c = Conn::open(&f, fl.clone());
    let mut bad = bin(0x00, &[1, 2, 3, 4], b"x", b""); // get with extras: protocol error
    bad.extend_from_slice(&bin(0x04, &[], b"a", b""));
    c.send(&f, &bad);
    f.assert_hit(&fl, "a", 0, b"old");
}

/// The protocol is the connection's, chosen by its first byte: on a text connection a line that
/// starts with 0x80 is an unknown command, not a binary request with a body to skip.
#[test]
fn the_first_byte_of_the_connection_chooses_the_protocol() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "k", 0, b"old");
    let mut c = Conn::open(&f, fl.clone());
    c.send(&f, b"version\r\n");
    let mut req = bin(0x01, &[0; 8], b"zz", &[b'v'; 200]); // would swallow 200 bytes
    req.truncate(40);
    req.extend_from_slice(b"\r\ndelete k\r\n");
    c.send(&f, &req);
    f.assert_miss(&fl, "k");
}

/// A multi-get line of any length is one get to memcached (it reads a line over 2 KB whole when
/// it starts with "get " or "gets "): it changes nothing and is answered once, however many
/// segments it spans; the commands after it are walked as usual. (Before: a line longer than the
/// 320 bytes carried over voided the whole cache, so every big TCP multi-get did.)
#[test]
fn long_multi_get_lines_change_nothing() {
    for (verb, pieces) in [("get", 1usize), ("gets", 3), ("get", 7)] {
        let f = fx();
        let fl = Flow::v4();
        for k in ["k", "bystander"] {
            f.fill(&fl, k, 0, b"old");
        }
        let keys: Vec<String> = (0..400).map(|i| format!("key:{i:05}")).collect();
        let line = format!("{verb} {} k\r\n", keys.join(" "));
        assert!(line.len() > 4000);
        let mut c = Conn::open(&f, fl.clone());
        let step = line.len().div_ceil(pieces);
        let bytes = line.as_bytes();
        for (i, piece) in bytes.chunks(step).enumerate() {
            if i + 1 == bytes.len().div_ceil(step) {
                // the line's end and a write in one segment
                let mut last = piece.to_vec();
                last.extend_from_slice(b"set k 0 0 3\r\nnew\r\n");
                c.send(&f, &last);
            } else {
                c.send(&f, piece);
            }
        }
        let st = f.stats();
        assert_eq!(st.inval_unparsable, 0, "{verb} in {pieces}: voided: {st:?}");
        f.assert_hit(&fl, "bystander", 0, b"old");
        f.assert_miss(&fl, "k");
        // the get's END is its one answer: the set is settled only by its own STORED
        c.answer(&f, b"END\r\n");
        assert!(
            !f.fill_with(&fl, "get k\r\n", &value_reply("k", 0, b"old")),
            "{verb} in {pieces}: settled by the get's answer"
        );
        c.answer(&f, b"STORED\r\n");
        f.fill(&fl, "k", 0, b"new");
    }
}

/// Any other line too long to carry cannot be walked: the cache is voided, and counted.
#[test]
fn other_lines_too_long_to_carry_void_and_count() {
    let f = fx();
    let fl = Flow::v4();
    f.fill(&fl, "bystander", 0, b"old");
    let mut c = Conn::open(&f, fl.clone());
    // memcached reads exptime "000...0" as 0: a valid set whose line is 900 bytes long
    let line = format!("set k 0 {}0 3\r\nnew\r\n", "0".repeat(880));
    c.send(&f, &line.as_bytes()[..600]);
    c.send(&f, &line.as_bytes()[600..]);
    assert!(f.stats().inval_unparsable > 0);
    f.assert_miss(&fl, "bystander");
}
