//! The in-kernel cache against real memcached in network namespaces: hits answered by XDP, fills,
//! invalidation, multi-key gets, traffic that is not ours, the allowlist, bad input (attach,
//! detach and the CLI: attach_cli.rs).

mod common;

use std::{net::UdpSocket, time::Duration};

use common::*;
use inkproto::udp::frame_request;
/// A hit is answered by the kernel: memcached's get_hits does not move, inkcache's hits does. The
/// value is written by a third-party client (the `memcache` crate, over TCP).
#[test]
fn hit_is_answered_by_the_kernel() {
    let rig = Rig::attached(&[]).unwrap();
    let addr = rig.server_addr();
    rig.client(move || {
        let url = format!("memcache://{addr}?protocol=ascii&timeout=2");
        let c = memcache::connect(url.as_str()).expect("memcache crate client");
        c.set("alpha", "hello kernel", 0).expect("set");
    });
    settle();
    // the first get misses in the kernel; memcached answers and its reply fills the cache
    let first = rig.udp_get(1, b"get alpha\r\n").expect("reply");
    assert_eq!(
        values(&first),
        vec![(b"alpha".to_vec(), 0, b"hello kernel".to_vec())]
    );
    assert_eq!(rig.stat("fills"), 1);

    let mc_hits = rig.mc_stat("get_hits");
    let k_hits = rig.stat("hits");
    for i in 0..5 {
        assert_eq!(rig.udp_get(10 + i, b"get alpha\r\n").unwrap(), first);
    }
    assert_eq!(
        rig.mc_stat("get_hits"),
        mc_hits,
        "memcached must not see the hits"
    );
    assert_eq!(rig.stat("hits"), k_hits + 5);
}

/// libmemcached's memcaslap over UDP (gets and sets, every value verified) through the cache: no
/// wrong value, and the kernel answers a share of the gets.
#[test]
fn memcaslap_udp_verifies_through_the_cache() {
    let rig = Rig::attached(&[]).unwrap();
    let server = format!("{}", rig.server_addr());
    let cmd = || {
        let mut cmd = rig.pair.client.cmd("memcaslap");
        cmd.args([
            "-s", &server, "-U", "-t", "3s", "-T", "1", "-c", "4", "-X", "64", "-v", "1.0", "-b",
        ]);
        cmd
    };
    let out = testkit::memcaslap::run(cmd, std::time::Duration::from_secs(60)).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "memcaslap failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let field = |name: &str| -> u64 {
        testkit::memcaslap::stat(&text, name)
            .unwrap_or_else(|| panic!("memcaslap printed no {name}: {text}"))
    };
    assert_eq!(field("verify_failed"), 0, "{text}");
    assert!(field("cmd_get") > 1000, "{text}");
    let hits = rig.stat("hits");
    assert!(
        hits > 0,
        "the kernel answered none of memcaslap's gets: {}",
        rig.stats()
    );
    assert!(
        rig.stat("invalidations") > 0,
        "memcaslap's UDP sets invalidate"
    );
}

/// The kernel's reply is byte-identical to memcached's (frame header included).
#[test]
fn reply_is_byte_identical_to_memcached() {
    let rig = Rig::attached(&[]).unwrap();
    for (i, (key, flags, val)) in [
        ("k", 0u32, &b"v"[..]),
        (
            "key:with:colons",
            4294967295,
            &b"value with spaces and \r\n inside"[..],
        ),
        ("empty", 7, &b""[..]),
        ("bin", 1, &[0u8, 255, 13, 10, 0, 1][..]),
    ]
    .into_iter()
    .enumerate()
    {
        set(&rig, key, flags, val);
        let req = frame_request(0x4242 + i as u16, format!("get {key}\r\n").as_bytes());
        let hits = rig.stat("hits");
        let from_memcached = rig.udp_raw(&req, Duration::from_millis(500));
        assert_eq!(rig.stat("hits"), hits, "first get must reach memcached");
        let from_kernel = rig.udp_raw(&req, Duration::from_millis(500));
        assert_eq!(
            rig.stat("hits"),
            hits + 1,
            "second get must be a kernel hit"
        );
        assert_eq!(from_memcached.len(), 1);
        assert_eq!(from_kernel, from_memcached, "key {key}");
    }
}

/// Misses reach memcached and later become hits; a set over TCP invalidates.
#[test]
fn miss_fill_hit_and_tcp_set_invalidates() {
    let rig = Rig::attached(&[]).unwrap();
    let nothing = rig.udp_get(1, b"get later\r\n").unwrap();
    assert_eq!(nothing, b"END\r\n");
    assert_eq!(rig.stat("misses"), 1);

    set(&rig, "later", 3, b"v1");
    assert_eq!(
        values(&rig.udp_get(2, b"get later\r\n").unwrap())[0].2,
        b"v1"
    );
    let hits = rig.stat("hits");
    assert_eq!(
        values(&rig.udp_get(3, b"get later\r\n").unwrap())[0].2,
        b"v1"
    );
    assert_eq!(rig.stat("hits"), hits + 1);

    let inv = rig.stat("invalidations");
    set(&rig, "later", 3, b"v2 is longer");
    assert!(rig.stat("invalidations") > inv);
    let mc_hits = rig.mc_stat("get_hits");
    assert_eq!(
        values(&rig.udp_get(4, b"get later\r\n").unwrap())[0].2,
        b"v2 is longer"
    );
    assert_eq!(
        rig.mc_stat("get_hits"),
        mc_hits + 1,
        "after the set, memcached answers"
    );
    let hits = rig.stat("hits");
    assert_eq!(
        values(&rig.udp_get(5, b"get later\r\n").unwrap())[0].2,
        b"v2 is longer"
    );
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "and the new value is cached again"
    );

    // delete over TCP also invalidates: the next get is memcached's miss
    assert_eq!(
        rig.tcp(b"delete later\r\n"),
        inkproto::client::Response::Deleted
    );
    assert_eq!(rig.udp_get(6, b"get later\r\n").unwrap(), b"END\r\n");
}

/// Multi-key gets: with every key cached the kernel answers all of them in one datagram; with any
/// miss the request goes whole to memcached and the client receives every key memcached has.
#[test]
fn multi_key_gets() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "a", 1, b"AAA");
    set(&rig, "b", 2, b"BB");
    let expect_ab = vec![
        (b"a".to_vec(), 1, b"AAA".to_vec()),
        (b"b".to_vec(), 2, b"BB".to_vec()),
    ];

    // a partial miss: c does not exist
    let r = rig.udp_get(1, b"get a b c\r\n").unwrap();
    assert_eq!(values(&r), expect_ab);
    // fill a and b through single gets, then the multi-get is a kernel hit
    rig.udp_get(2, b"get a\r\n").unwrap();
    rig.udp_get(3, b"get b\r\n").unwrap();
    let hits = rig.stat("hits");
    let mc_hits = rig.mc_stat("get_hits");
    let r = rig.udp_get(4, b"get a b\r\n").unwrap();
    assert_eq!(values(&r), expect_ab);
    assert_eq!(rig.stat("hits"), hits + 1);
    assert_eq!(rig.mc_stat("get_hits"), mc_hits);
    // still partial with one key cached and one missing: memcached answers, c absent
    let r = rig.udp_get(5, b"get a c b\r\n").unwrap();
    assert_eq!(values(&r), expect_ab);
    assert_eq!(rig.stat("hits"), hits + 1);
}

/// A `gets` reply fills the cache with its CAS unique: later `gets` are answered by the kernel
/// with memcached's exact CAS (a `cas` with it succeeds), and plain `get` from the same entry
/// without it. An entry filled from plain `get` has no CAS, so `gets` passes to the server.
#[test]
fn gets_is_answered_with_the_exact_cas() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "c", 0, b"cas me");
    set(&rig, "plain", 3, b"no cas");
    let first = rig.udp_get(1, b"gets c\r\n").unwrap();
    assert!(
        String::from_utf8_lossy(&first).starts_with("VALUE c 0 6 "),
        "{first:?}"
    );
    assert_eq!(rig.stat("fills"), 1);

    let hits = rig.stat("hits");
    let again = rig.udp_get(2, b"gets c\r\n").unwrap();
    assert_eq!(again, first, "the kernel's gets answer is memcached's");
    let plain = rig.udp_get(3, b"get c\r\n").unwrap();
    assert_eq!(plain, b"VALUE c 0 6\r\ncas me\r\nEND\r\n");
    assert_eq!(rig.stat("hits"), hits + 2, "{}", rig.stats());
    let via_tcp = rig.tcp(b"gets c\r\n");
    assert_eq!(
        inkproto::client::parse_response(&again).unwrap().unwrap().0,
        via_tcp,
        "same CAS as memcached's own"
    );

    // an entry filled by plain get has no CAS: gets passes, and its reply adds the CAS
    rig.udp_get(4, b"get plain\r\n").unwrap();
    let hits = rig.stat("hits");
    // (split: the kernel answers c, memcached plain; items come in another order than
    // memcached's own, and clients match them by key)
    let sorted = |payload: &[u8]| match inkproto::client::parse_response(payload) {
        Ok(Some((inkproto::client::Response::Values(mut v), _))) => {
            v.sort_by(|a, b| a.key.cmp(&b.key));
            v
        }
        other => panic!("{other:?}"),
    };
    let r = rig.udp_get(5, b"gets plain c\r\n").unwrap();
    assert_eq!(
        rig.stat("hits"),
        hits,
        "gets of a key without a known CAS is not a whole kernel hit"
    );
    let want = match rig.tcp(b"gets plain c\r\n") {
        inkproto::client::Response::Values(mut v) => {
            v.sort_by(|a, b| a.key.cmp(&b.key));
            v
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(sorted(&r), want);
    assert_eq!(sorted(&rig.udp_get(6, b"gets plain c\r\n").unwrap()), want);
    assert_eq!(rig.stat("hits"), hits + 1, "now both CAS are known");

    // the CAS the kernel served is the one memcached checks
    let cas = String::from_utf8_lossy(&again)
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    let req = format!("cas c 0 0 3 {cas}\r\nnew\r\n");
    assert_eq!(rig.tcp(req.as_bytes()), inkproto::client::Response::Stored);
    let after = rig.udp_get(7, b"gets c\r\n").unwrap();
    assert!(
        String::from_utf8_lossy(&after).starts_with("VALUE c 0 3 "),
        "{after:?}"
    );
    assert_ne!(after, first);
}

/// Traffic that is not memcached, and memcached on other ports, passes untouched.
#[test]
fn other_traffic_is_untouched() {
    let rig = Rig::attached(&[]).unwrap();
    // a UDP echo server on another port in the server namespace
    let echo = rig
        .pair
        .server
        .run(|| UdpSocket::bind("0.0.0.0:9999").unwrap());
    let t = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        for _ in 0..2 {
            let (n, from) = echo.recv_from(&mut buf).unwrap();
            echo.send_to(&buf[..n], from).unwrap();
        }
    });
    let passed = rig.stat("passed");
    let mut addr = rig.server_addr();
    addr.set_port(9999);
    // a datagram that looks like a memcached get, but to another port, and plain junk
    for payload in [frame_request(1, b"get a\r\n"), b"hello".to_vec()] {
        let got =
            rig.client(|| common::udp_exchange(addr, &payload, Duration::from_secs(1)).unwrap());
        assert_eq!(got, vec![payload.clone()]);
    }
    t.join().unwrap();
    assert!(rig.stat("passed") >= passed + 2);
    assert_eq!(rig.stat("hits"), 0);
    // a second memcached on another port keeps working, unseen by the cache
    let _other = testkit::Server::start(&rig.pair.server, 11311).unwrap();
    let mut addr = rig.server_addr();
    addr.set_port(11311);
    let r = rig.client(|| common::tcp_request(addr, b"set z 0 0 1\r\nz\r\n").unwrap());
    assert_eq!(r, inkproto::client::Response::Stored);
    let got = rig.client(|| {
        common::udp_exchange(
            addr,
            &frame_request(9, b"get z\r\n"),
            Duration::from_secs(1),
        )
        .unwrap()
    });
    assert_eq!(assemble(&got).unwrap(), b"VALUE z 0 1\r\nz\r\nEND\r\n");
    assert_eq!(rig.stat("fills"), 0);
}

/// A source outside the allowlist is never answered by the kernel.
#[test]
fn allowlist_refuses_other_sources() {
    let rig = Rig::attached(&["--allow", "198.19.0.0/16", "--allow", "fd01::/16"]).unwrap();
    set(&rig, "secret", 0, b"s");
    for i in 0..5 {
        assert_eq!(
            values(&rig.udp_get(i, b"get secret\r\n").unwrap())[0].2,
            b"s"
        );
    }
    assert_eq!(rig.stat("hits"), 0);
    assert_eq!(rig.stat("refused"), 5);
    assert!(rig.mc_stat("get_hits") >= 5);
}

/// Bad input passes to memcached untouched: memcached's own answer, never the kernel's.
#[test]
fn bad_input_passes_untouched() {
    let rig = Rig::new().unwrap();
    set(&rig, "foo", 0, b"bar");
    let long_key = "k".repeat(251);
    let cases: Vec<Vec<u8>> = vec![
        b"\x00\x01\x00".to_vec(),       // truncated frame header
        frame_request(2, b"get foo"),   // missing \r\n
        frame_request(3, b"get foo\n"), // bare \n (memcached accepts it)
        frame_request(4, format!("get {long_key}\r\n").as_bytes()), // 251-byte key
        frame_request(5, b"get \r\n"),  // 0-length key
        frame_request(6, b"get  foo\r\n"), // empty token
        frame_request(7, b"get f\xc3\xa9o\r\n"), // non-ASCII key
        frame_request(8, b"get foo\x01\r\n"), // control byte
        {
            let mut d = frame_request(9, b"get foo\r\n");
            d[5] = 2; // claims two datagrams
            d
        },
        {
            let mut d = frame_request(10, b"get foo\r\n");
            d[3] = 1; // sequence 1
            d
        },
        frame_request(11, b"\x80\x00\x00\x03foo"), // binary junk
    ];
    let wait = Duration::from_millis(300);
    let before: Vec<_> = cases.iter().map(|c| rig.udp_raw(c, wait)).collect();
    // attach, make sure foo is cached, then replay
    let mut rig = rig;
    rig.attach(&[]).unwrap();
    rig.udp_get(100, b"get foo\r\n").unwrap();
    assert_eq!(
        rig.udp_get(101, b"get foo\r\n").unwrap(),
        b"VALUE foo 0 3\r\nbar\r\nEND\r\n"
    );
    let hits = rig.stat("hits");
    let after: Vec<_> = cases.iter().map(|c| rig.udp_raw(c, wait)).collect();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert_eq!(a, b, "case {i}: {:?}", String::from_utf8_lossy(&cases[i]));
    }
    assert_eq!(
        rig.stat("hits"),
        hits,
        "no bad input may be answered by the kernel"
    );
}

/// IPv6 gets hit and the reply is the same as memcached's.
#[test]
fn ipv6_gets_hit() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "six", 6, b"over v6");
    let addr = std::net::SocketAddr::new(testkit::SRV_V6.into(), PORT);
    let req = frame_request(0x0606, b"get six\r\n");
    let get =
        || rig.client(|| common::udp_exchange(addr, &req, Duration::from_millis(500)).unwrap());
    let from_memcached = get();
    assert_eq!(rig.stat("fills"), 1, "{}", rig.stats());
    let hits = rig.stat("hits");
    let from_kernel = get();
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());
    assert_eq!(from_kernel, from_memcached);
    assert_eq!(
        assemble(&from_kernel).unwrap(),
        b"VALUE six 6 7\r\nover v6\r\nEND\r\n"
    );
}

/// Tagged requests are answered as the host would deliver them. The server's stack has no VLAN
/// device (this kernel may have no VLAN support at all), so it drops frames tagged with a VLAN id
/// and takes those with priority tags only (VLAN id 0) as its interface's own: the kernel cache
/// does the same, and its reply keeps the tags. (Frames are crafted on a raw socket.)
#[test]
fn tagged_gets_are_answered_only_where_the_host_takes_them() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "tagged", 1, b"in a vlan");
    rig.udp_get(1, b"get tagged\r\n").unwrap(); // fill over plain IPv4
    for tags in ["42", "100,42", "0,42"] {
        let (hits, not_host) = (rig.stat("hits"), rig.stat("not_host"));
        let v = vlan_get(&rig, "tagged", tags);
        assert!(v["payload"].is_null(), "tags {tags}: answered: {v}");
        assert_eq!(rig.stat("hits"), hits, "tags {tags}: {}", rig.stats());
        assert_eq!(
            rig.stat("not_host"),
            not_host + 1,
            "tags {tags}: {}",
            rig.stats()
        );
    }
    for tags in ["0", "0,0"] {
        let hits = rig.stat("hits");
        let v = vlan_get(&rig, "tagged", tags);
        // request id 0x7777 echoed, sequence 0, one datagram
        let want = "ww\u{0}\u{0}\u{0}\u{1}\u{0}\u{0}VALUE tagged 1 9\r\nin a vlan\r\nEND\r\n";
        assert_eq!(v["payload"], want, "tags {tags}: {v}");
        assert_eq!(v["udp_csum_ok"], true, "tags {tags}: {v}");
        assert_eq!(vlan_tags_seen(&v), tags, "the reply keeps the tags: {v}");
        assert_eq!(rig.stat("hits"), hits + 1, "tags {tags}: {}", rig.stats());
    }
}

/// Multi-key gets of 1, 2, 10 and 24 keys return exactly what memcached returns; the kernel answers
/// those whose keys all hit (in XDP if the reply fits the frame, else from TC ingress), the rest
/// pass.
#[test]
fn multi_key_gets_up_to_24_keys() {
    let rig = Rig::attached(&[]).unwrap();
    let keys: Vec<String> = (0..25).map(|i| format!("m{i:02}")).collect();
    for (i, k) in keys.iter().enumerate() {
        if i % 5 != 4 {
            set(&rig, k, i as u32, format!("v{i}").as_bytes()); // every 5th key stays missing
        }
    }
    // fill every stored key through single gets
    for (i, k) in keys.iter().enumerate() {
        rig.udp_get(100 + i as u16, format!("get {k}\r\n").as_bytes())
            .unwrap();
    }
    let expect = |n: usize| -> Vec<(Vec<u8>, u32, Vec<u8>)> {
        keys[..n]
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 5 != 4)
            .map(|(i, k)| {
                (
                    k.as_bytes().to_vec(),
                    i as u32,
                    format!("v{i}").into_bytes(),
                )
            })
            .collect()
    };
    for (n, all_hit_in_kernel) in [
        (1, true),
        (2, true),
        (4, true),
        (10, false),
        (24, false),
        (25, false),
    ] {
        let req = format!("get {}\r\n", keys[..n].join(" "));
        let hits = rig.stat("hits");
        let r = rig.udp_get(200 + n as u16, req.as_bytes()).unwrap();
        assert_eq!(values(&r), expect(n), "{n} keys");
        assert_eq!(
            rig.stat("hits") - hits,
            all_hit_in_kernel as u64,
            "{n} keys: {}",
            rig.stats()
        );
    }
    // ten keys that all exist: one kernel reply
    let present: Vec<&String> = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 5 != 4)
        .map(|(_, k)| k)
        .take(10)
        .collect();
    let req = format!(
        "get {}\r\n",
        present
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let hits = rig.stat("hits");
    let r = rig.udp_get(300, req.as_bytes()).unwrap();
    assert_eq!(values(&r).len(), 10);
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());
}

/// A hit whose reply cannot fit the XDP frame (1000 bytes on veth) is handed to the TC ingress
/// program, which answers it from the skb: memcached never sees it, the item stays cached (no
/// eviction, no "too big" marker, its replies still fill), and small items keep hitting in XDP.
#[test]
fn replies_too_big_for_the_frame_are_answered_from_tc_ingress() {
    let rig = Rig::attached(&[]).unwrap();
    let big = vec![b'x'; 1000];
    set(&rig, "big", 0, &big);
    set(&rig, "small", 0, b"s");
    rig.udp_get(1, b"get big\r\n").unwrap(); // miss, fills
    assert_eq!(rig.stat("fills"), 1, "{}", rig.stats());
    let mc_hits = rig.mc_stat("get_hits");
    for i in 0..4 {
        let r = rig.udp_get(2 + i, b"get big\r\n").unwrap(); // hit, built by TC ingress
        assert_eq!(values(&r), vec![(b"big".to_vec(), 0, big.clone())]);
    }
    assert_eq!(rig.mc_stat("get_hits"), mc_hits, "memcached saw none");
    assert_eq!(rig.stat("hits"), 4, "{}", rig.stats());
    assert_eq!(rig.stat("tc_handoffs"), 4, "{}", rig.stats());
    assert_eq!(rig.stat("tc_hits"), 4, "{}", rig.stats());
    assert_eq!(rig.stat("too_big"), 0, "{}", rig.stats());
    assert_eq!(rig.stat("fill_skipped"), 0, "{}", rig.stats());
    // a write to the key invalidates it; its next value is small and hits in XDP
    set(&rig, "big", 0, b"now small");
    rig.udp_get(7, b"get big\r\n").unwrap();
    assert_eq!(rig.stat("fills"), 2, "{}", rig.stats());
    assert_eq!(
        values(&rig.udp_get(8, b"get big\r\n").unwrap())[0].2,
        b"now small"
    );
    assert_eq!(rig.stat("hits"), 5, "{}", rig.stats());
    assert_eq!(rig.stat("tc_hits"), 4, "{}", rig.stats());
    rig.udp_get(9, b"get small\r\n").unwrap();
    let hits = rig.stat("hits");
    assert_eq!(
        values(&rig.udp_get(6, b"get small\r\n").unwrap())[0].2,
        b"s"
    );
    assert_eq!(rig.stat("hits"), hits + 1);
    assert_eq!(rig.stat("tc_hits"), 4, "{}", rig.stats());
}

/// memcached's own answer to one request over TCP, bytes as sent (a meta no-op marks the end).
fn tcp_raw(rig: &Rig, req: &str) -> Vec<u8> {
    let addr = rig.server_addr();
    let req = format!("{req}\r\nmn\r\n");
    let mut got = rig.client(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"MN\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "connection closed");
            got.extend_from_slice(&buf[..n]);
        }
        got
    });
    got.truncate(got.len() - 4);
    got
}

/// Meta get over UDP is answered by the kernel byte for byte as memcached answers it when every
/// flag asked for is known (v f k c s t O q); anything else passes to memcached.
#[test]
fn meta_get_is_answered_like_memcached() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "m", 7, b"meta!");
    set(&rig, "nocas", 3, b"plain");
    rig.udp_get(1, b"gets m\r\n").unwrap(); // fills with the CAS
    rig.udp_get(2, b"get nocas\r\n").unwrap(); // fills without
    let mut id = 10u16;
    let mut via_udp = |req: &str| {
        id += 1;
        let dgrams = rig.udp_raw(
            &frame_request(id, format!("{req}\r\n").as_bytes()),
            Duration::from_millis(300),
        );
        assert_eq!(dgrams.len(), 1, "{req}: {dgrams:?}");
        dgrams[0][8..].to_vec()
    };
    for req in [
        "mg m v",
        "mg m",
        "mg m s v f",
        "mg m v f k c s t",
        "mg m q v",
        "mg m Oabc v",
        "mg m O v",
        "mg m k",
        "mg m t",
        "mg m c",
        "mg nocas f v s",
    ] {
        let want = tcp_raw(&rig, req);
        let hits = rig.stat("hits");
        let got = via_udp(req);
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&want),
            "{req}"
        );
        assert_eq!(rig.stat("hits"), hits + 1, "{req} answered by the kernel");
    }
    // asked for what the kernel does not know, or not in the form it answers: memcached answers
    let get_hits = rig.mc_stat("get_hits");
    for req in [
        "mg m h v",
        "mg m l",
        "mg m v v",
        "mg m vf",
        "mg m  v",
        "mg nocas c v",
        "mg missing v",
    ] {
        let hits = rig.stat("hits");
        let got = via_udp(req);
        assert_eq!(rig.stat("hits"), hits, "{req} passed");
        if !req.contains(" h") && !req.contains(" l") {
            assert_eq!(got, tcp_raw(&rig, req), "{req}");
        }
    }
    assert!(rig.mc_stat("get_hits") > get_hits);
    // an item that expires: t is not known exactly, so it passes; without t it hits
    assert_eq!(
        rig.tcp(b"set e 0 100 1\r\nx\r\n"),
        inkproto::client::Response::Stored
    );
    settle();
    rig.udp_get(3, b"get e\r\n").unwrap();
    let hits = rig.stat("hits");
    assert!(via_udp("mg e t v").starts_with(b"VA 1 t"));
    assert_eq!(rig.stat("hits"), hits);
    assert_eq!(via_udp("mg e v"), b"VA 1\r\nx\r\n");
    assert_eq!(rig.stat("hits"), hits + 1);
    // mg with T writes (a touch): it invalidates, and memcached answers
    let got = via_udp("mg m T30 v");
    assert_eq!(got, b"VA 5\r\nmeta!\r\n");
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "a writing mg is never answered here"
    );
    let hits = rig.stat("hits");
    via_udp("mg m v");
    assert_eq!(rig.stat("hits"), hits, "the touch invalidated m");
}

/// A multi-key get whose keys partly hit is split: the kernel answers the keys that hit (a
/// message of its own, without END), memcached gets a get for the others only (its answer brings
/// the END), and the client receives every key memcached has, with its flags and value.
#[test]
fn partial_multi_key_gets_are_split() {
    let rig = Rig::attached(&[]).unwrap();
    let mut expect = Vec::new();
    for i in 0..10u32 {
        let (k, v) = (format!("k{i}"), format!("value-{i}"));
        set(&rig, &k, i, v.as_bytes());
        expect.push((k.into_bytes(), i, v.into_bytes()));
    }
    for i in (0..10).step_by(2) {
        rig.udp_get(100 + i, format!("get k{i}\r\n").as_bytes())
            .unwrap(); // cached
    }
    let (get_hits, get_misses) = (rig.mc_stat("get_hits"), rig.mc_stat("get_misses"));
    let splits = rig.stat("splits");
    let dgrams = rig.udp_raw(
        &frame_request(7, b"get k0 k1 k2 k3 k4 k5 k6 k7 k8 k9 nokey\r\n"),
        Duration::from_millis(500),
    );
    // the kernel's message comes first: the cached keys, no END
    let first = String::from_utf8_lossy(&dgrams[0][8..]).to_string();
    assert!(
        first.starts_with("VALUE k0 0 7\r\nvalue-0\r\nVALUE k2 "),
        "{first}"
    );
    assert!(!first.contains("END"), "{first}");
    let mut got = values(&assemble(&dgrams).expect("a complete reply"));
    got.sort();
    assert_eq!(got, expect);
    assert_eq!(rig.stat("splits"), splits + 1, "{}", rig.stats());
    assert_eq!(
        rig.mc_stat("get_hits"),
        get_hits + 5,
        "only the odd keys reach memcached"
    );
    assert_eq!(rig.mc_stat("get_misses"), get_misses + 1);
    // memcached's answer filled the others: the same get is now split between the kernel
    // (all ten) and memcached (nokey)
    let dgrams = rig.udp_raw(
        &frame_request(8, b"get k0 k1 k2 k3 k4 k5 k6 k7 k8 k9 nokey\r\n"),
        Duration::from_millis(500),
    );
    let mut got = values(&assemble(&dgrams).unwrap());
    got.sort();
    assert_eq!(got, expect);
    assert_eq!(rig.mc_stat("get_hits"), get_hits + 5);
    // gets: the CAS of each key is memcached's, whoever answers it
    rig.udp_get(9, b"gets k1 k3\r\n").unwrap(); // k1 and k3 now cached with their CAS
    let r = rig.udp_get(10, b"gets k1 k2 k3\r\n").unwrap(); // k2 has no CAS cached: split
    assert_eq!(
        inkproto::client::parse_response(&r).unwrap().unwrap().0,
        rig.tcp(b"gets k1 k3 k2\r\n")
    );
}

/// A burst of gets from one client fills every key it misses, however the server sends its
/// replies: inkcached answers such a burst with one UDP_SEGMENT send (one skb of several
/// datagrams at TC egress), which TC egress walks datagram by datagram.
#[test]
fn a_burst_of_misses_fills_every_key() {
    let rig = Rig::attached(&[]).unwrap();
    let value = vec![b'v'; 1000];
    for i in 0..16 {
        set(&rig, &format!("burst{i}"), 0, &value);
    }
    let fills = rig.stat("fills");
    let addr = rig.server_addr();
    let answered = rig.client(move || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        for i in 0..16u16 {
            let req = format!("get burst{i}\r\n");
            s.send_to(&frame_request(i, req.as_bytes()), addr).unwrap();
        }
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 2048];
        let mut n = 0;
        while n < 16 && s.recv_from(&mut buf).is_ok() {
            n += 1;
        }
        n
    });
    assert_eq!(answered, 16);
    assert_eq!(rig.stat("fills"), fills + 16, "{}", rig.stats());
}
