//! Replies larger than the XDP frame can take (veth: 16 bytes of tailroom, ~200 of headroom) are
//! built by the TC ingress program in a grown skb and sent back out of the interface: answered by
//! the kernel (memcached never sees them), byte for byte what memcached would have sent. And the
//! amplification bound on sources outside the allowlist.

mod common;

use std::{net::SocketAddr, time::Duration};

use common::*;
use inkproto::udp::frame_request;

/// Gets `req` twice with the same request id: the first is memcached's answer (it fills the
/// cache), the second must be the kernel's, from TC ingress. Returns both (datagrams as received).
fn memcached_then_kernel(rig: &Rig, addr: SocketAddr, req: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let get = || rig.client(|| udp_exchange(addr, req, Duration::from_millis(500)).unwrap());
    let fills = rig.stat("fills");
    let from_memcached = get();
    assert!(
        rig.stat("fills") > fills,
        "memcached's reply fills: {}",
        rig.stats()
    );
    let (hits, tc_hits) = (rig.stat("hits"), rig.stat("tc_hits"));
    let mc_hits = rig.mc_stat("get_hits");
    let from_kernel = get();
    assert_eq!(
        rig.mc_stat("get_hits"),
        mc_hits,
        "memcached must not see the hit"
    );
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());
    assert_eq!(rig.stat("tc_hits"), tc_hits + 1, "{}", rig.stats());
    (from_memcached, from_kernel)
}

/// 1000- and 1350-byte values on veth: the kernel answers them from TC ingress with exactly the
/// datagram memcached sends, and the items stay cached (no `too_big`, no eviction).
#[test]
fn values_of_1000_and_1350_bytes_are_answered_by_the_kernel() {
    let rig = Rig::attached(&[]).unwrap();
    for (i, len) in [1000usize, 1350].into_iter().enumerate() {
        let key = format!("big{len}");
        let val: Vec<u8> = (0..len).map(|j| b'a' + (j % 26) as u8).collect();
        set(&rig, &key, 7, &val);
        let req = frame_request(0x5100 + i as u16, format!("get {key}\r\n").as_bytes());
        let (mc, kernel) = memcached_then_kernel(&rig, rig.server_addr(), &req);
        assert_eq!(mc.len(), 1);
        assert_eq!(kernel, mc, "{len}-byte value");
        assert_eq!(values(&assemble(&kernel).unwrap())[0].2, val);
        // and again: still cached, still from TC
        let again = rig.udp_raw(&req, Duration::from_millis(500));
        assert_eq!(again, mc);
    }
    assert_eq!(rig.stat("tc_hits"), 4, "{}", rig.stats());
    assert_eq!(rig.stat("tc_handoffs"), 4, "{}", rig.stats());
    assert_eq!(rig.stat("tc_passed"), 0, "{}", rig.stats());
    assert_eq!(rig.stat("too_big"), 0, "{}", rig.stats());
}

/// A multi-key get whose reply only fits via TC (four 300-byte values): one datagram from the
/// kernel with every item and END, the same items memcached returns.
#[test]
fn multi_key_get_answered_from_tc_ingress() {
    let rig = Rig::attached(&[]).unwrap();
    let keys = ["ma", "mb", "mc", "md"];
    for (i, k) in keys.iter().enumerate() {
        set(&rig, k, i as u32, &vec![b'0' + i as u8; 300]);
        rig.udp_get(i as u16, format!("get {k}\r\n").as_bytes())
            .unwrap(); // fill
    }
    let req = b"get ma mb mc md\r\n";
    let mc_hits = rig.mc_stat("get_hits");
    let (hits, tc_hits) = (rig.stat("hits"), rig.stat("tc_hits"));
    let dgrams = rig.udp_raw(&frame_request(77, req), Duration::from_millis(500));
    assert_eq!(dgrams.len(), 1, "one datagram");
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());
    assert_eq!(rig.stat("tc_hits"), tc_hits + 1, "{}", rig.stats());
    assert_eq!(rig.mc_stat("get_hits"), mc_hits);
    let got = values(&assemble(&dgrams).unwrap());
    let want: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_bytes().to_vec(), i as u32, vec![b'0' + i as u8; 300]))
        .collect();
    assert_eq!(got, want);
    assert!(dgrams[0].ends_with(b"\r\nEND\r\n"));
    // what memcached itself returns for the same request (over TCP: one reply)
    assert_eq!(
        inkproto::client::parse_response(&assemble(&dgrams).unwrap())
            .unwrap()
            .unwrap()
            .0,
        rig.tcp(req)
    );
}

/// `gets` on the TC path: the kernel answers with memcached's exact CAS, and plain `get` of the
/// same entry without it; both byte-identical to memcached's replies.
#[test]
fn gets_with_cas_on_the_tc_path() {
    let rig = Rig::attached(&[]).unwrap();
    let val = vec![b'c'; 1100];
    set(&rig, "bigcas", 3, &val);
    let gets = frame_request(0x0c01, b"gets bigcas\r\n");
    let (mc, kernel) = memcached_then_kernel(&rig, rig.server_addr(), &gets);
    assert_eq!(kernel, mc);
    let text = String::from_utf8_lossy(&kernel[0][8..]).to_string();
    assert!(text.starts_with("VALUE bigcas 3 1100 "), "{text:?}");
    assert_eq!(
        inkproto::client::parse_response(&kernel[0][8..])
            .unwrap()
            .unwrap()
            .0,
        rig.tcp(b"gets bigcas\r\n"),
        "same CAS as memcached's"
    );
    // plain get from the same entry: the kernel's reply equals memcached's plain get reply
    let get = frame_request(0x0c02, b"get bigcas\r\n");
    let tc_hits = rig.stat("tc_hits");
    let from_kernel = rig.udp_raw(&get, Duration::from_millis(500));
    assert_eq!(rig.stat("tc_hits"), tc_hits + 1, "{}", rig.stats());
    let mut want = get[..8].to_vec();
    want.extend_from_slice(b"VALUE bigcas 3 1100\r\n");
    want.extend_from_slice(&val);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(from_kernel, vec![want]);
}

/// IPv6 on the TC path: byte-identical to memcached's reply.
#[test]
fn ipv6_on_the_tc_path() {
    let rig = Rig::attached(&[]).unwrap();
    let val = vec![b'6'; 1200];
    set(&rig, "big6", 6, &val);
    let addr = SocketAddr::new(testkit::SRV_V6.into(), PORT);
    let req = frame_request(0x0666, b"get big6\r\n");
    let (mc, kernel) = memcached_then_kernel(&rig, addr, &req);
    assert_eq!(kernel, mc);
    assert_eq!(values(&assemble(&kernel).unwrap())[0].2, val);
}

/// A get whose items exceed one datagram passes whole to memcached (counted `too_big`), which
/// answers it in several messages; the items stay cached and single gets of them still hit.
#[test]
fn replies_over_one_datagram_pass_to_the_server() {
    let rig = Rig::attached(&[]).unwrap();
    let (a, b) = (vec![b'a'; 1000], vec![b'b'; 1000]);
    set(&rig, "ka", 0, &a);
    set(&rig, "kb", 0, &b);
    rig.udp_get(1, b"get ka\r\n").unwrap();
    rig.udp_get(2, b"get kb\r\n").unwrap();
    let mc_hits = rig.mc_stat("get_hits");
    let r = rig.udp_get(3, b"get ka kb\r\n").unwrap();
    assert_eq!(
        values(&r),
        vec![
            (b"ka".to_vec(), 0, a.clone()),
            (b"kb".to_vec(), 0, b.clone())
        ]
    );
    assert_eq!(rig.mc_stat("get_hits"), mc_hits + 2, "memcached answered");
    assert_eq!(rig.stat("too_big"), 1, "{}", rig.stats());
    let hits = rig.stat("hits");
    assert_eq!(values(&rig.udp_get(4, b"get kb\r\n").unwrap())[0].2, b);
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());
}

/// `--max-amplification N`: a source outside the allowlist gets kernel replies only up to N times
/// its request (UDP payloads); bigger replies come from memcached, counted `amp_refused`.
#[test]
fn amplification_bound_for_sources_outside_the_allowlist() {
    // the client (198.18.0.2, fd00::2) is outside the allowlist
    let rig = Rig::attached(&["--allow", "198.19.0.0/16", "--max-amplification", "4"]).unwrap();
    // "get small\r\n" is 11 bytes + 8 of frame header = 19; a reply of up to 76 bytes passes
    set(&rig, "small", 0, b"tiny"); // 8 + 17 + 6 + 5 = 36 bytes: within 4x
    set(&rig, "large", 0, &[b'L'; 200]); // 8 + 19 + 202 + 5 = 234 bytes: over 4x
    rig.udp_get(1, b"get small\r\n").unwrap();
    rig.udp_get(2, b"get large\r\n").unwrap();
    assert_eq!(rig.stat("fills"), 2, "{}", rig.stats());

    let (hits, mc_hits) = (rig.stat("hits"), rig.mc_stat("get_hits"));
    assert_eq!(
        rig.udp_get(3, b"get small\r\n").unwrap(),
        b"VALUE small 0 4\r\ntiny\r\nEND\r\n"
    );
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "within the bound: {}",
        rig.stats()
    );
    assert_eq!(rig.mc_stat("get_hits"), mc_hits);

    let r = rig.udp_get(4, b"get large\r\n").unwrap();
    assert_eq!(values(&r)[0].2, vec![b'L'; 200]);
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "over the bound: {}",
        rig.stats()
    );
    assert_eq!(rig.stat("amp_refused"), 1, "{}", rig.stats());
    assert_eq!(rig.mc_stat("get_hits"), mc_hits + 1, "memcached answered");
    assert_eq!(rig.stat("refused"), 0, "{}", rig.stats());

    // the same over the TC path (1000 bytes: the XDP frame has no room) and over IPv6
    set(&rig, "huge", 0, &[b'H'; 1000]);
    rig.udp_get(5, b"get huge\r\n").unwrap();
    let r = rig.udp_get(6, b"get huge\r\n").unwrap();
    assert_eq!(values(&r)[0].2, vec![b'H'; 1000]);
    assert_eq!(rig.stat("amp_refused"), 2, "{}", rig.stats());
    assert_eq!(rig.stat("tc_hits"), 0, "{}", rig.stats());
    let v6 = SocketAddr::new(testkit::SRV_V6.into(), PORT);
    let req = frame_request(7, b"get small\r\n");
    let got = rig.client(|| udp_exchange(v6, &req, Duration::from_millis(500)).unwrap());
    assert_eq!(
        assemble(&got).unwrap(),
        b"VALUE small 0 4\r\ntiny\r\nEND\r\n"
    );
    assert_eq!(rig.stat("hits"), hits + 2, "{}", rig.stats());

    // the record and status show the bound
    let out = rig.inkcache(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("at most 4x the request"), "{text}");
}

/// An allowlisted source is not bounded: a 1350-byte reply to a 19-byte request (70x) is sent
/// even with `--max-amplification 2`.
#[test]
fn allowlisted_sources_are_not_bounded() {
    let rig = Rig::attached(&["--max-amplification", "2"]).unwrap();
    set(&rig, "k", 0, &[b'k'; 1350]);
    rig.udp_get(1, b"get k\r\n").unwrap();
    let hits = rig.stat("hits");
    assert_eq!(
        values(&rig.udp_get(2, b"get k\r\n").unwrap())[0].2,
        vec![b'k'; 1350]
    );
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());
    assert_eq!(rig.stat("amp_refused"), 0, "{}", rig.stats());
}

/// Tagged requests the host takes (priority tags only, in one 802.1Q tag or 802.1ad outside
/// 802.1Q: the server's stack has no VLAN device) on the TC path: answered, tags kept, and (the
/// request carried no UDP checksum) with a complete, valid UDP checksum.
#[test]
fn vlan_tagged_gets_on_the_tc_path() {
    let rig = Rig::attached(&[]).unwrap();
    let val = vec![b'v'; 1000];
    set(&rig, "bigtag", 2, &val);
    rig.udp_get(1, b"get bigtag\r\n").unwrap(); // fill over plain IPv4
    for tags in ["0", "0,0"] {
        let tc_hits = rig.stat("tc_hits");
        let v = vlan_get(&rig, "bigtag", tags);
        let mut want = String::from("ww\u{0}\u{0}\u{0}\u{1}\u{0}\u{0}VALUE bigtag 2 1000\r\n");
        want.push_str(&"v".repeat(1000));
        want.push_str("\r\nEND\r\n");
        assert_eq!(v["payload"], want.as_str(), "tags {tags}: {v}");
        assert_eq!(v["udp_csum_ok"], true, "tags {tags}: {v}");
        assert_eq!(vlan_tags_seen(&v), tags, "the reply keeps the tags: {v}");
        assert_eq!(
            rig.stat("tc_hits"),
            tc_hits + 1,
            "tags {tags}: {}",
            rig.stats()
        );
    }
}

/// UDP checksums on the TC path, whatever the request's checksum state. A local socket on veth
/// sends with checksum offload (CHECKSUM_PARTIAL): the reply keeps that state and its checksum
/// field holds the pseudo header's sum for the device (or the peer) to complete. With offload off
/// on the client, requests carry complete checksums and so must the replies: the client's stack
/// verifies them and drops a bad one (InCsumErrors).
#[test]
fn udp_checksums_on_the_tc_path() {
    let rig = Rig::attached(&[]).unwrap();
    let val = vec![b'z'; 1000];
    set(&rig, "ck", 0, &val);
    rig.udp_get(1, b"get ck\r\n").unwrap();
    let v6 = SocketAddr::new(testkit::SRV_V6.into(), PORT);
    let get6 = |id: u16| {
        let req = frame_request(id, b"get ck\r\n");
        assemble(&rig.client(|| udp_exchange(v6, &req, Duration::from_millis(500)).unwrap()))
    };
    get6(2).unwrap(); // fill over IPv6 too (same item)
    for offload in ["on", "off"] {
        testkit::sh(
            rig.pair
                .client
                .cmd("ethtool")
                .args(["-K", &rig.pair.cli_if, "tx", offload]),
        )
        .unwrap();
        let tc_hits = rig.stat("tc_hits");
        let r = rig.udp_get(3, b"get ck\r\n").expect("IPv4 reply");
        assert_eq!(values(&r)[0].2, val, "offload {offload}");
        let r = get6(4).expect("IPv6 reply");
        assert_eq!(values(&r)[0].2, val, "offload {offload}");
        assert_eq!(rig.stat("tc_hits"), tc_hits + 2, "{}", rig.stats());
    }
    for (file, field) in [
        ("/proc/net/snmp", "InCsumErrors"),
        ("/proc/net/snmp6", "Udp6InCsumErrors"),
    ] {
        let out = testkit::sh(rig.pair.client.cmd("cat").arg(file)).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert_eq!(snmp(&text, field), 0, "{file}: {text}");
    }
}

/// A counter from /proc/net/snmp ("Udp: names" / "Udp: values" lines) or /proc/net/snmp6
/// ("name value" lines).
fn snmp(text: &str, field: &str) -> u64 {
    let lines: Vec<&str> = text.lines().collect();
    for w in lines.windows(2) {
        if w[0].starts_with("Udp:") && w[1].starts_with("Udp:") {
            let names: Vec<&str> = w[0].split_whitespace().collect();
            let vals: Vec<&str> = w[1].split_whitespace().collect();
            if let Some(i) = names.iter().position(|n| *n == field) {
                return vals[i].parse().unwrap();
            }
        }
    }
    lines
        .iter()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(field)).then(|| it.next().unwrap().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {field}"))
}
