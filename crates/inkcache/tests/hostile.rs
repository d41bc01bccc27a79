//! Hostile and unusual traffic against real memcached with inkcache attached (issue 10): crafted
//! packets the host's stack would drop get no answer from the kernel either (memcached, asked the
//! same before attach, gives none); writes memcached reads in unusual ways leave the kernel
//! serving exactly what memcached holds; one datagram of nonsense voids nothing. The packet-level
//! cases in detail are the eBPF unit tests (tests/unit/hostile.rs, host.rs).

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    time::{Duration, Instant},
};

use common::*;

/// A crafted get of `key` from the client's interface (tests/craft_get.py): the reply's payload,
/// if anything answered.
fn craft(
    rig: &Rig,
    key: &str,
    src: &str,
    dst: &str,
    mac: Option<&str>,
    flags: &[&str],
) -> Option<String> {
    let srv_mac = testkit::sh(
        rig.pair
            .server
            .cmd("cat")
            .arg(format!("/sys/class/net/{}/address", rig.pair.srv_if)),
    )
    .unwrap();
    let srv_mac = String::from_utf8_lossy(&srv_mac.stdout).trim().to_string();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/craft_get.py");
    let out = testkit::sh(
        rig.pair
            .client
            .cmd("python3")
            .args([
                script,
                &rig.pair.cli_if,
                mac.unwrap_or(&srv_mac),
                src,
                dst,
                key,
            ])
            .args(flags),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["payload"].as_str().map(str::to_string)
}

/// (what, source, destination, destination MAC, flags): gets the kernel must leave to the host's
/// stack, which drops all but the broadcast (memcached, listening on any address, answers that).
type Case = (
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
);

const NOT_THE_KERNELS: &[Case] = &[
    (
        "a bad UDP checksum",
        "198.18.0.2",
        "198.18.0.1",
        None,
        &["--bad-udp-csum"],
    ),
    (
        "a bad IPv4 header checksum",
        "198.18.0.2",
        "198.18.0.1",
        None,
        &["--bad-ip-csum"],
    ),
    (
        "a foreign destination",
        "198.18.0.2",
        "198.18.0.77",
        None,
        &[],
    ),
    (
        "the subnet's broadcast",
        "198.18.0.2",
        "198.18.0.255",
        Some("ff:ff:ff:ff:ff:ff"),
        &[],
    ),
    (
        "another host's MAC",
        "198.18.0.2",
        "198.18.0.1",
        Some("02:00:00:00:77:77"),
        &[],
    ),
    ("a loopback source", "127.0.0.1", "198.18.0.1", None, &[]),
    (
        "the server's own address as source",
        "198.18.0.1",
        "198.18.0.1",
        None,
        &[],
    ),
    ("a multicast source", "224.0.0.9", "198.18.0.1", None, &[]),
];

/// Each crafted get is answered with inkcache attached exactly as memcached alone answered it
/// before attach (mostly: not at all, the stack drops it), and never by the kernel. A well-formed
/// crafted get is a kernel hit (the cases are not refused for being crafted).
#[test]
fn gets_the_host_would_drop_are_not_answered() {
    testkit::require_tool!("/usr/bin/python3");
    let mut rig = Rig::new().unwrap();
    set(&rig, "hk", 0, b"value");
    let value = "VALUE hk 0 5\r\nvalue\r\nEND\r\n";
    assert_eq!(
        craft(&rig, "hk", "198.18.0.2", "198.18.0.1", None, &[]).as_deref(),
        Some(value),
        "memcached answers a well-formed crafted get"
    );
    let alone: Vec<Option<String>> = NOT_THE_KERNELS
        .iter()
        .map(|(_, src, dst, mac, flags)| craft(&rig, "hk", src, dst, *mac, flags))
        .collect();
    rig.attach(&[]).unwrap();
    cache_it(&rig, "hk");
    let hits = rig.stat("hits");
    assert_eq!(
        craft(&rig, "hk", "198.18.0.2", "198.18.0.1", None, &[]).as_deref(),
        Some(value)
    );
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "the well-formed crafted get is a kernel hit"
    );
    for ((what, src, dst, mac, flags), before) in NOT_THE_KERNELS.iter().zip(alone) {
        let (hits, not_host) = (rig.stat("hits"), rig.stat("not_host"));
        let now = craft(&rig, "hk", src, dst, *mac, flags);
        assert_eq!(
            now, before,
            "{what}: answered otherwise than by memcached alone"
        );
        assert_eq!(rig.stat("hits"), hits, "{what}: the kernel answered it");
        assert_eq!(
            rig.stat("not_host"),
            not_host + 1,
            "{what}: not counted: {}",
            rig.stats()
        );
    }
}

/// memcached listening on some of the host's addresses only (`-l`): a get to another address of
/// its interface reaches no socket (the host answers it with an ICMP error), so the kernel must
/// not answer it either, even with the key cached.
#[test]
fn gets_to_an_address_the_server_does_not_listen_on_are_not_answered() {
    testkit::require_tool!("/usr/bin/python3");
    // 127.0.0.1 too: the rig waits for the server there
    let mut rig = Rig::with_server(&["-l", "198.18.0.1,127.0.0.1"]).unwrap();
    testkit::sh(rig.pair.server.cmd("ip").args([
        "addr",
        "add",
        "198.18.0.5/24",
        "dev",
        &rig.pair.srv_if,
    ]))
    .unwrap();
    set(&rig, "hk", 0, b"value");
    let value = "VALUE hk 0 5\r\nvalue\r\nEND\r\n";
    let get = |rig: &Rig, dst| craft(rig, "hk", "198.18.0.2", dst, None, &[]);
    assert_eq!(get(&rig, "198.18.0.1").as_deref(), Some(value));
    assert_eq!(
        get(&rig, "198.18.0.5"),
        None,
        "memcached does not listen there"
    );
    rig.attach(&[]).unwrap();
    cache_it(&rig, "hk");
    let (hits, not_host) = (rig.stat("hits"), rig.stat("not_host"));
    assert_eq!(get(&rig, "198.18.0.1").as_deref(), Some(value));
    assert_eq!(rig.stat("hits"), hits + 1, "a kernel hit where it listens");
    assert_eq!(
        get(&rig, "198.18.0.5"),
        None,
        "answered where no socket listens"
    );
    assert_eq!(rig.stat("hits"), hits + 1, "the kernel answered it");
    assert_eq!(rig.stat("not_host"), not_host + 1, "not counted");
}

/// A second memcached in the server's namespace, on the rig's port and `addr` only (added to the
/// server's interface); killed on drop.
struct Second(std::process::Child);

impl Drop for Second {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn second_server(rig: &Rig, addr: &str) -> Second {
    testkit::sh(rig.pair.server.cmd("ip").args([
        "addr",
        "add",
        &format!("{addr}/24"),
        "dev",
        &rig.pair.srv_if,
    ]))
    .unwrap();
    let port = PORT.to_string();
    let second = Second(
        rig.pair
            .server
            .cmd("/usr/bin/memcached")
            .args(["-u", "root", "-l", addr, "-p", &port, "-U", &port])
            .args(["-t", "1", "-m", "8"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting a second memcached"),
    );
    let to = std::net::SocketAddr::new(addr.parse().unwrap(), PORT);
    testkit::wait_listening(&rig.pair.server, to, "the second memcached").unwrap();
    second
}

/// Two servers on one cached port (memcached `-l A` beside another `-l B`) would share one kernel
/// cache, and a get to one could be answered with a value the other replied (seen before this
/// check: a get to A answered with B's value). Attach refuses, naming both; with one gone, it
/// attaches (and lists the subnet both addresses are in once in its default allowlist).
#[test]
fn attach_refuses_two_servers_on_one_port() {
    let mut rig = Rig::with_server(&["-l", "198.18.0.1,127.0.0.1"]).unwrap();
    let other = second_server(&rig, "198.18.0.5");
    let err = rig.attach(&[]).expect_err("attached over two servers");
    let said = err.to_string();
    assert!(
        said.contains("UDP port 11211 is held by 2 servers")
            && said.contains(&other.0.id().to_string()),
        "{said}"
    );
    drop(other);
    rig.attach(&[]).expect("one server left");
    // the interface's two addresses share a subnet: the default allowlist names it once
    let row = rig.status_row(&rig.pair.srv_if);
    let nets: Vec<&str> = row["allow"]
        .as_array()
        .expect("the allowlist")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    let once: std::collections::BTreeSet<&str> = nets.iter().copied().collect();
    assert!(!nets.is_empty() && nets.len() == once.len(), "{row}");
}

/// A second server binding the cached port after attach would share the kernel cache too: while
/// its sockets are open the kernel answers and fills nothing (counted `shared_port`), and each get
/// is answered by the server it was sent to, with that server's value; once it is gone, the
/// kernel answers again.
#[test]
fn a_second_server_on_the_port_stops_the_kernel_answering() {
    testkit::require_tool!("/usr/bin/python3");
    let mut rig = Rig::with_server(&["-l", "198.18.0.1,127.0.0.1"]).unwrap();
    rig.attach(&[]).unwrap();
    set(&rig, "two", 0, b"first");
    cache_it(&rig, "two");
    let other = second_server(&rig, "198.18.0.5");
    assert!(rig.stat("shared_port") >= 1, "{}", rig.stats());
    let stored = rig.client(|| {
        let mut s = TcpStream::connect(("198.18.0.5", PORT)).unwrap();
        s.write_all(b"set two 0 0 6\r\nsecond\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    assert_eq!(stored, "STORED\r\n");
    let hits = rig.stat("hits");
    for _ in 0..2 {
        for (to, value) in [("198.18.0.5", "second"), ("198.18.0.1", "first")] {
            let want = format!("VALUE two 0 {}\r\n{value}\r\nEND\r\n", value.len());
            let got = craft(&rig, "two", "198.18.0.2", to, None, &[]);
            assert_eq!(got.as_deref(), Some(want.as_str()), "a get to {to}");
        }
    }
    assert_eq!(
        rig.stat("hits"),
        hits,
        "the kernel answered with two servers"
    );
    drop(other);
    cache_it(&rig, "two"); // a kernel hit again
}

/// The interface's addresses are read at attach. One removed later is no longer the host's: a
/// get to it gets no answer from memcached, but the kernel still answered it, until `inkcache
/// refresh` describes the interface again. One added is answered by memcached, and by the kernel
/// after the refresh.
#[test]
fn refresh_follows_the_interfaces_addresses() {
    testkit::require_tool!("/usr/bin/python3");
    let mut rig = Rig::new().unwrap();
    let addr = |rig: &Rig, op: &str, a: &str| {
        testkit::sh(
            rig.pair
                .server
                .cmd("ip")
                .args(["addr", op, a, "dev", &rig.pair.srv_if]),
        )
        .unwrap();
    };
    addr(&rig, "add", "198.18.0.5/24");
    set(&rig, "rf", 0, b"value");
    rig.attach(&[]).unwrap();
    cache_it(&rig, "rf");
    let value = "VALUE rf 0 5\r\nvalue\r\nEND\r\n";
    let get = |rig: &Rig, dst| craft(rig, "rf", "198.18.0.2", dst, None, &[]);
    let refresh = |rig: &Rig| {
        let out = rig.inkcache(&["refresh", "--iface", &rig.pair.srv_if]);
        assert!(
            out.status.success(),
            "refresh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let hits = rig.stat("hits");
    assert_eq!(get(&rig, "198.18.0.5").as_deref(), Some(value));
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "a kernel hit on an address of the interface"
    );
    addr(&rig, "del", "198.18.0.5/24");
    assert_eq!(
        get(&rig, "198.18.0.5").as_deref(),
        Some(value),
        "read at attach"
    );
    assert_eq!(rig.stat("hits"), hits + 2);
    refresh(&rig);
    let not_host = rig.stat("not_host");
    assert_eq!(
        get(&rig, "198.18.0.5"),
        None,
        "answered for an address removed"
    );
    assert_eq!(rig.stat("not_host"), not_host + 1);
    addr(&rig, "add", "198.18.0.6/24");
    assert_eq!(
        get(&rig, "198.18.0.6").as_deref(),
        Some(value),
        "memcached's answer"
    );
    assert_eq!(
        rig.stat("hits"),
        hits + 2,
        "a kernel hit before the refresh"
    );
    refresh(&rig);
    assert_eq!(get(&rig, "198.18.0.6").as_deref(), Some(value));
    assert_eq!(
        rig.stat("hits"),
        hits + 3,
        "no kernel hit after the refresh"
    );
    let s = rig.inkcache(&["refresh", "--iface", "nosuchif0"]);
    assert!(!s.status.success());
    assert!(
        String::from_utf8_lossy(&s.stderr).contains("not attached to nosuchif0"),
        "{}",
        String::from_utf8_lossy(&s.stderr)
    );
}

/// `inkcache refresh --follow` refreshes on its own when an address is added, and ends when the
/// interface is detached.
#[test]
fn refresh_follow_takes_in_an_address_as_it_is_added() {
    testkit::require_tool!("/usr/bin/python3");
    let mut rig = Rig::attached(&[]).unwrap();
    set(&rig, "rw", 0, b"value");
    cache_it(&rig, "rw");
    let mut follower = std::process::Command::new(bin())
        .args([
            "--netns",
            &rig.pair.server.name,
            "refresh",
            "--follow",
            "--iface",
        ])
        .arg(&rig.pair.srv_if)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300)); // subscribed
    testkit::sh(rig.pair.server.cmd("ip").args([
        "addr",
        "add",
        "198.18.0.7/24",
        "dev",
        &rig.pair.srv_if,
    ]))
    .unwrap();
    let hits = rig.stat("hits");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = craft(&rig, "rw", "198.18.0.2", "198.18.0.7", None, &[]);
        assert_eq!(r.as_deref(), Some("VALUE rw 0 5\r\nvalue\r\nEND\r\n"));
        if rig.stat("hits") > hits {
            break; // the kernel's answer
        }
        assert!(
            Instant::now() < deadline,
            "the new address never answered by the kernel"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    rig.detach().unwrap();
    assert!(exits_within(&mut follower, 5, "the follower outlived the attachment").success());
}

/// Sends `bytes` on one TCP connection and reads what memcached answers for a moment.
fn tcp_send(rig: &Rig, bytes: &[u8]) {
    let addr = rig.server_addr();
    let b = bytes.to_vec();
    rig.client(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        s.write_all(&b).unwrap();
        let mut buf = [0u8; 4096];
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
        }
    });
}

/// Writes memcached reads in unusual ways: each leaves the kernel serving what memcached holds
/// (compared with memcached's own TCP answer), and none voids the whole cache.
#[test]
fn unusual_writes_leave_the_kernel_serving_what_memcached_holds() {
    let rig = Rig::attached(&[]).unwrap();
    let long_get = format!(
        "get {} k\r\n",
        (0..300)
            .map(|i| format!("lk{i:04}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // memcached refuses the line, reads no data block: "delete k" is a command
        (
            "a refused storage line",
            b"set x abc 0 8\r\ndelete k\r\n".to_vec(),
        ),
        (
            "a negative byte count",
            b"set x 0 0 -1\r\ndelete k\r\n".to_vec(),
        ),
        ("double spaces", b"set  k  0  0  3\r\nnew\r\n".to_vec()),
        (
            "get with noreply, then a set",
            b"get k noreply\r\nset k 0 0 4\r\nnew2\r\n".to_vec(),
        ),
        ("a multi-get line of 2 KB, then a set", {
            let mut v = long_get.into_bytes();
            v.extend_from_slice(b"set k 0 0 4\r\nnew3\r\n");
            v
        }),
        ("append", b"append k 0 0 4\r\nmore\r\n".to_vec()),
        (
            "a meta set with odd spacing",
            b"ms  k  3 T0\r\nnew\r\n".to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        set(&rig, "k", 0, b"old");
        cache_it(&rig, "k");
        tcp_send(&rig, &bytes);
        assert_fresh(&rig, "k", what);
    }
    assert_eq!(rig.stat("inval_unparsable"), 0, "{}", rig.stats());
}

/// UDP writes the fast path cannot see whole: a set larger than a frame (IP fragments), a write
/// with a sequence number other than 0 (memcached executes it). Neither voids the cache.
#[test]
fn udp_writes_in_fragments_or_with_odd_sequence_numbers_invalidate() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "bystander", 0, b"still");
    cache_it(&rig, "bystander");

    set(&rig, "k", 0, b"old");
    cache_it(&rig, "k");
    let value = vec![b'f'; 3000];
    let mut req = format!("set k 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\n");
    let answers = rig.udp_raw(&frame(11, 0, 1, &req), Duration::from_millis(500));
    assert!(
        !answers.is_empty(),
        "memcached did not answer the fragmented set"
    );
    assert_fresh(&rig, "k", "a UDP set in IP fragments");

    set(&rig, "k", 0, b"old");
    cache_it(&rig, "k");
    rig.udp_raw(
        &frame(12, 3, 1, b"delete k\r\n"),
        Duration::from_millis(300),
    );
    assert_fresh(&rig, "k", "a UDP delete with sequence number 3");

    assert_eq!(rig.stat("inval_unparsable"), 0, "{}", rig.stats());
    let hits = rig.stat("hits");
    rig.udp_get(13, b"get bystander\r\n").unwrap();
    assert_eq!(rig.stat("hits"), hits + 1, "the bystander was voided");
}

/// One datagram of nonsense (an unknown command, a malformed line) changes nothing in memcached,
/// and voids nothing in the kernel.
#[test]
fn one_datagram_of_nonsense_voids_nothing() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "k", 0, b"v");
    cache_it(&rig, "k");
    for junk in [
        &b"frobnicate k\r\n"[..],
        b"\x00\x01\x02 garbage\r\n",
        b"set k\r\n",
        b"delete\r\n",
        b"GET / HTTP/1.1\r\n\r\n",
    ] {
        rig.udp_raw(&frame(20, 0, 1, junk), Duration::from_millis(200));
        tcp_send(&rig, junk);
    }
    assert_eq!(rig.stat("inval_unparsable"), 0, "{}", rig.stats());
    let hits = rig.stat("hits");
    assert_eq!(
        rig.udp_get(21, b"get k\r\n").unwrap(),
        b"VALUE k 0 1\r\nv\r\nEND\r\n"
    );
    assert_eq!(rig.stat("hits"), hits + 1, "k is still a kernel hit");
}

/// A memcached UDP frame: header (id, sequence, total, 0), then `body`.
fn frame(id: u16, seq: u16, total: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + body.len());
    for x in [id, seq, total, 0] {
        v.extend_from_slice(&x.to_be_bytes());
    }
    v.extend_from_slice(body);
    v
}
