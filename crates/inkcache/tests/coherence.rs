//! Coherence of the kernel cache against real memcached: every mutation invalidates (TCP and UDP,
//! pipelined, split across segments), expiry learned from mutations, flush_all (with delay), and
//! the server restarting.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    thread::sleep,
    time::{Duration, Instant},
};

use common::*;
use inkproto::udp::frame_request;

#[test]
fn every_text_and_meta_mutation_invalidates_over_tcp() {
    let rig = Rig::attached(&[]).unwrap();
    let cases: &[(&str, &[u8])] = &[
        ("set", b"set K 1 0 3\r\nnew\r\n"),
        ("set noreply", b"set K 1 0 3 noreply\r\nnew\r\nmn\r\n"),
        ("add (fails, no change)", b"add K 1 0 3\r\nnew\r\n"),
        ("replace", b"replace K 2 0 4\r\nrepl\r\n"),
        ("append", b"append K 0 0 2\r\n++\r\n"),
        ("prepend", b"prepend K 0 0 2\r\n--\r\n"),
        ("incr", b"incr K 5\r\n"),
        ("decr noreply", b"decr K 2 noreply\r\nmn\r\n"),
        ("touch", b"touch K 100\r\n"),
        ("gat", b"gat 100 K\r\n"),
        ("gats", b"gats 100 K\r\n"),
        ("delete", b"delete K\r\n"),
        ("delete noreply", b"delete K noreply\r\nmn\r\n"),
        ("ms", b"ms K 2 F7\r\nms\r\n"),
        ("ma", b"ma K D3\r\n"),
        ("mg with T", b"mg K v T100\r\n"),
        ("md", b"md K\r\n"),
        (
            "pipelined",
            b"get K\r\nset other 0 0 1\r\nx\r\nset K 9 0 5\r\npipes\r\n",
        ),
    ];
    for (i, (what, cmd)) in cases.iter().enumerate() {
        let key = format!("tk{i}");
        // incr/decr need a number
        let initial: &[u8] = if what.starts_with("incr") || what.starts_with("decr") {
            b"10"
        } else {
            b"old"
        };
        set(&rig, &key, 0, initial);
        cache_it(&rig, &key);
        let cmd = String::from_utf8_lossy(cmd).replace('K', &key);
        let addr = rig.server_addr();
        rig.client(|| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(cmd.as_bytes()).unwrap();
            sleep(Duration::from_millis(50)); // let memcached answer before the check
        });
        assert_fresh(&rig, &key, what);
    }
}

#[test]
fn mutations_over_udp_invalidate() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "uk", 0, b"old");
    cache_it(&rig, "uk");
    let r = rig.udp_raw(
        &frame_request(7, b"set uk 0 0 3\r\nnew\r\n"),
        Duration::from_millis(500),
    );
    assert_eq!(assemble(&r).unwrap(), b"STORED\r\n");
    assert_fresh(&rig, "uk", "set over UDP");
    cache_it_after_quarantine(&rig, "uk");
    rig.udp_raw(
        &frame_request(8, b"delete uk\r\n"),
        Duration::from_millis(500),
    );
    assert_fresh(&rig, "uk", "delete over UDP");
}

/// A UDP request that is one write is settled by memcached's answer, which echoes its request
/// id: the key fills again as soon as the answer has passed, with no quarantine (here an hour).
/// Without an answer to wait for (noreply, or several commands in one datagram), the quarantine
/// applies.
#[test]
fn udp_writes_are_settled_by_their_answers() {
    let rig = Rig::attached(&["--quarantine-ms", "3600000"]).unwrap();
    for (i, cmd, answer) in [
        (0u16, "set uk0 0 0 3\r\nnew\r\n", &b"STORED\r\n"[..]),
        (1, "incr un1 1\r\n", b"2\r\n"),
        (2, "touch uk2 100\r\n", b"TOUCHED\r\n"),
        (3, "ms uk3 3 T0\r\nnew\r\n", b"HD\r\n"),
    ] {
        let key = cmd.split(' ').nth(1).unwrap();
        let old: &[u8] = if key.starts_with("un") { b"1" } else { b"old" };
        set_now(&rig, key, 0, old);
        cache_it(&rig, key);
        let settled = rig.stat("settled");
        let r = rig.udp_raw(
            &frame_request(40 + i, cmd.as_bytes()),
            Duration::from_millis(500),
        );
        assert_eq!(assemble(&r).unwrap(), answer, "{cmd}");
        assert_eq!(rig.stat("settled"), settled + 1, "{cmd}: {}", rig.stats());
        assert_fresh(&rig, key, cmd);
        cache_it(&rig, key); // fills at once: no quarantine
    }
    // noreply: no answer to wait for, the hour-long quarantine applies
    set_now(&rig, "unr", 0, b"old");
    cache_it(&rig, "unr");
    rig.udp_raw(
        &frame_request(50, b"set unr 0 0 3 noreply\r\nnew\r\n"),
        Duration::from_millis(200),
    );
    assert_fresh(&rig, "unr", "noreply set over UDP");
    let fills = rig.stat("fills");
    rig.udp_get(51, b"get unr\r\n").unwrap();
    assert_eq!(
        rig.stat("fills"),
        fills,
        "a noreply write keeps its quarantine"
    );
}

fn cache_it_after_quarantine(rig: &Rig, key: &str) {
    settle();
    cache_it(rig, key);
}

#[test]
fn mutations_over_ipv6_invalidate() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "v6k", 0, b"old");
    cache_it(&rig, "v6k");
    let addr = std::net::SocketAddr::new(testkit::SRV_V6.into(), PORT);
    let r = rig.client(|| common::tcp_request(addr, b"set v6k 0 0 3\r\nnew\r\n").unwrap());
    assert_eq!(r, inkproto::client::Response::Stored);
    assert_fresh(&rig, "v6k", "set over IPv6");
}

/// A command cut across two TCP segments (here inside its key) is carried over to the next
/// segment: its key is invalidated precisely (other cached keys stay cached) and the write is
/// settled by memcached's answer, not by the quarantine.
#[test]
fn key_split_across_segments_invalidates_precisely() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "splitkey", 0, b"old");
    set(&rig, "bystander", 0, b"stays");
    cache_it(&rig, "splitkey");
    cache_it(&rig, "bystander");
    let settled = rig.stat("settled");
    let addr = rig.server_addr();
    rig.client(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(b"set spli").unwrap();
        sleep(Duration::from_millis(100));
        s.write_all(b"tkey 0 0 3\r\nnew\r\n").unwrap();
        let mut answer = [0u8; 8];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"STORED\r\n");
    });
    assert_eq!(rig.stat("inval_unparsable"), 0, "{}", rig.stats());
    assert_eq!(rig.stat("settled"), settled + 1, "{}", rig.stats());
    assert_fresh(&rig, "splitkey", "a set split across segments");
    let hits = rig.stat("hits");
    rig.udp_get(9, b"get bystander\r\n").unwrap();
    assert_eq!(rig.stat("hits"), hits + 1, "bystander still cached");
}

/// Values larger than a TCP segment are skipped by their length over as many segments as they
/// span, even when their bytes look like commands: nothing is voided, only the key written.
#[test]
fn large_values_over_tcp_are_followed_by_length() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "bystander", 0, b"stays");
    cache_it(&rig, "bystander");
    // 300 KB of data that reads like commands touching the bystander
    let mut value = Vec::new();
    while value.len() < 300_000 {
        value.extend_from_slice(b"delete bystander\r\nflush_all\r\nset bystander 0 0 1\r\n");
    }
    let mut req = format!("set big 0 0 {}\r\n", value.len()).into_bytes();
    req.extend_from_slice(&value);
    req.extend_from_slice(b"\r\nget big\r\n");
    let addr = rig.server_addr();
    let got = rig.client(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&req).unwrap();
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 65536];
        while !buf.ends_with(b"END\r\n") {
            let n = s.read(&mut chunk).unwrap();
            assert!(n > 0, "connection closed");
            buf.extend_from_slice(&chunk[..n]);
        }
        buf
    });
    assert!(
        got.starts_with(b"STORED\r\nVALUE big 0 300"),
        "{:?}",
        &got[..40]
    );
    let st = rig.stats();
    assert_eq!(rig.stat("inval_unparsable"), 0, "{st}");
    assert_eq!(rig.stat("inval_flush"), 0, "{st}");
    assert_eq!(rig.stat("conn_desync"), 0, "{st}");
    let hits = rig.stat("hits");
    rig.udp_get(9, b"get bystander\r\n").unwrap();
    assert_eq!(rig.stat("hits"), hits + 1, "bystander still cached: {st}");
}

/// Sends `write` on a connection whose memcached worker is held up: the connection first asks for
/// 16 MB of big values and does not read them, so memcached waits to send them and reads nothing
/// more from it. Returns the connection; reading it to the end lets memcached go on.
fn held_back_write(rig: &Rig, write: &[u8]) -> TcpStream {
    let addr = rig.server_addr();
    let writer = rig.client(|| {
        let s = TcpStream::connect(addr).unwrap();
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &4096).unwrap();
        s
    });
    let mut w = &writer;
    w.write_all(&b"get big\r\n".repeat(32)).unwrap();
    sleep(Duration::from_millis(300)); // memcached is now stuck sending 16 MB
    w.write_all(write).unwrap();
    sleep(Duration::from_millis(400)); // far past the quarantine (50 ms in the tests)
    writer
}

/// Reads the held-back connection until `last` ends the stream of answers. The client's buffer
/// grows first. Held at 4 KiB, it dropped the server's segments and the server's retransmission
/// timer backed off (`ss` showed `backoff:2`, `lost:7`), a wait that doubles with each further
/// drop. Grown, the answers come as fast as the server writes them, which showed inkcached
/// stalling with 4 MiB of answers queued (net_conn.rs `drive`). A read that waits 30 s fails with
/// both sides' socket states.
fn release(rig: &Rig, mut w: &TcpStream, last: &[u8]) {
    nix::sys::socket::setsockopt(w, nix::sys::socket::sockopt::RcvBuf, &(4 << 20)).unwrap();
    w.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut all = Vec::new();
    let mut chunk = vec![0u8; 1 << 20];
    while !all.ends_with(last) {
        let n = w.read(&mut chunk).unwrap_or_else(|e| {
            panic!(
                "reading the held-back answers after {} bytes: {e}\n{}",
                all.len(),
                rig.tcp_sockets()
            )
        });
        assert!(n > 0, "connection closed");
        all.extend_from_slice(&chunk[..n]);
    }
}

/// The refill race, made deterministic: a write memcached has received but not applied (its
/// worker is held up, see held_back_write) for far longer than the quarantine. A UDP get of the
/// key meanwhile is answered by memcached with the old value; that reply must not be installed,
/// or the kernel would serve the old value after the write. The write blocks fills until
/// memcached's answer to it passes egress. Checked for set, delete and flush_all.
#[test]
fn a_write_not_yet_applied_blocks_fills_beyond_the_quarantine() {
    // INKCACHE_TEST_QUARANTINE_ONLY=1 runs it against the quarantine alone: it then fails, which
    // shows the test can fail.
    let extra: &[&str] = if std::env::var_os("INKCACHE_TEST_QUARANTINE_ONLY").is_some() {
        &["--debug-quarantine-only"]
    } else {
        &[]
    };
    let rig = Rig::attached(extra).unwrap();
    set(&rig, "big", 0, &vec![b'x'; 512 * 1024]);
    let cases: &[(&str, &[u8], &[u8])] = &[
        ("set", b"set K 0 0 3\r\nnew\r\n", b"STORED\r\n"),
        ("delete", b"delete K\r\n", b"DELETED\r\n"),
        ("flush_all", b"flush_all\r\n", b"OK\r\n"),
    ];
    for (i, (what, cmd, answer)) in cases.iter().enumerate() {
        let key = format!("held{i}");
        set(&rig, &key, 0, b"old");
        let cmd = String::from_utf8_lossy(cmd).replace('K', &key);
        let writer = held_back_write(&rig, cmd.as_bytes());
        assert_eq!(
            rig.tcp(format!("get {key}\r\n").as_bytes()),
            inkproto::client::Response::Values(vec![inkproto::client::Item {
                key: key.as_bytes().to_vec(),
                flags: 0,
                data: b"old".to_vec(),
                cas: None,
            }]),
            "precondition: memcached has not applied the {what} yet"
        );
        let fills = rig.stat("fills");
        let first = rig.udp_get(1, format!("get {key}\r\n").as_bytes()).unwrap();
        assert_eq!(
            first,
            format!("VALUE {key} 0 3\r\nold\r\nEND\r\n").as_bytes()
        );
        assert_eq!(
            rig.stat("fills"),
            fills,
            "{what}: the old value must not be installed"
        );
        release(&rig, &writer, answer);
        assert_fresh(&rig, &key, what);
        if *what == "flush_all" {
            set(&rig, "big", 0, &vec![b'x'; 512 * 1024]);
        }
    }
    // settled by the answer: a written key fills again at once
    set(&rig, "again", 0, b"v");
    cache_it(&rig, "again");
}

/// A connection may have 32 writes awaiting their answers (CONN_FIFO): a client that pipelines
/// more gets each write beyond them settled by the quarantine, and nothing else changes: the
/// connection stays followed (its next write is settled by its answer again) and every written
/// key is fresh. (inkbench's preload pipelines 128 sets, so three quarters of them took the
/// quarantine; the docs had said a full FIFO made the whole connection uncountable.)
#[test]
fn writes_beyond_a_full_fifo_are_quarantined_alone() {
    const N: usize = 40; // 32 followed + 8 beyond
    let rig = Rig::attached(&[]).unwrap();
    for i in 0..N {
        set(&rig, &format!("ff{i}"), 0, b"old");
    }
    cache_it(&rig, "ff0");
    cache_it(&rig, &format!("ff{}", N - 1));
    let stat = |n: &str| rig.stat(n);
    let (settled, quarantined, desync) =
        (stat("settled"), stat("quarantined"), stat("conn_desync"));
    let batch: String = (0..N)
        .map(|i| format!("set ff{i} 0 0 3\r\nnew\r\n"))
        .collect();
    let addr = rig.server_addr();
    let conn = rig.client(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(batch.as_bytes()).unwrap(); // one segment: walked before any answer
        let mut answers = vec![0u8; N * 8];
        s.read_exact(&mut answers).unwrap();
        assert_eq!(answers, b"STORED\r\n".repeat(N));
        s
    });
    assert_eq!(stat("settled"), settled + 32, "{}", rig.stats());
    assert_eq!(
        stat("quarantined"),
        quarantined + (N as u64 - 32),
        "{}",
        rig.stats()
    );
    assert_eq!(stat("conn_desync"), desync, "{}", rig.stats());
    assert_fresh(&rig, "ff0", "a pipelined set the FIFO held");
    assert_fresh(
        &rig,
        &format!("ff{}", N - 1),
        "a pipelined set beyond the FIFO",
    );
    // the connection is still counted: its next write is settled by the answer
    let settled = stat("settled");
    rig.client(|| {
        let mut s = &conn;
        s.write_all(b"set ff0 0 0 5\r\nnewer\r\n").unwrap();
        let mut answer = [0u8; 8];
        s.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"STORED\r\n");
    });
    assert_eq!(stat("settled"), settled + 1, "{}", rig.stats());
    assert_fresh(&rig, "ff0", "a set after the pipelined batch");
}

/// Writes whose answers cannot be counted still invalidate, and fall back to the quarantine: a
/// connection opened before attach (seen mid-stream), a quiet meta command (its answer may be
/// left out), and connections beyond --max-conns.
#[test]
fn writes_on_connections_not_followed_fall_back_to_the_quarantine() {
    let mut rig = Rig::new().unwrap();
    let addr = rig.server_addr();
    let old = rig.client(|| TcpStream::connect(addr).unwrap());
    rig.attach(&["--max-conns", "16"]).unwrap();
    let mut old = &old;
    let one_write = |conn: &mut &TcpStream, key: &str, cmd: String, answer: &[u8]| {
        set(&rig, key, 0, b"old");
        cache_it(&rig, key);
        let (settled, quarantined) = (rig.stat("settled"), rig.stat("quarantined"));
        conn.write_all(cmd.as_bytes()).unwrap();
        let mut got = vec![0u8; answer.len()];
        conn.read_exact(&mut got).unwrap();
        assert_eq!(got, answer);
        assert_fresh(&rig, key, &cmd);
        assert_eq!(rig.stat("settled"), settled, "{cmd}: {}", rig.stats());
        assert!(
            rig.stat("quarantined") > quarantined,
            "{cmd}: {}",
            rig.stats()
        );
    };
    // opened before attach
    one_write(
        &mut old,
        "pre",
        "set pre 0 0 3\r\nnew\r\n".into(),
        b"STORED\r\n",
    );

    // a quiet meta command: the connection's answers can no longer be counted
    let quiet = rig.client(|| TcpStream::connect(addr).unwrap());
    let mut quiet = &quiet;
    let desync = rig.stat("conn_desync");
    one_write(
        &mut quiet,
        "q1",
        "ms q1 3 q\r\nnew\r\nmn\r\n".into(),
        b"MN\r\n",
    );
    assert_eq!(rig.stat("conn_desync"), desync + 1, "{}", rig.stats());
    one_write(
        &mut quiet,
        "q2",
        "set q2 0 0 3\r\nnew\r\n".into(),
        b"STORED\r\n",
    );

    // more connections than --max-conns
    let untracked = rig.stat("conn_untracked");
    let many: Vec<TcpStream> =
        rig.client(|| (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect());
    assert!(
        rig.stat("conn_untracked") >= untracked + 3,
        "{}",
        rig.stats()
    );
    let mut last = many.last().unwrap();
    one_write(
        &mut last,
        "many",
        "set many 0 0 3\r\nnew\r\n".into(),
        b"STORED\r\n",
    );
}

/// Items are not served after the expiry a mutation set (relative and absolute exptime, touch).
#[test]
fn expiry_learned_from_mutations() {
    let rig = Rig::attached(&[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let abs = format!("set abs 0 {} 1\r\na\r\n", now + 4);
    for cmd in [
        &b"set rel 0 4 1\r\nr\r\n"[..],
        abs.as_bytes(),
        b"set tch 0 0 1\r\nt\r\n",
    ] {
        assert_eq!(rig.tcp(cmd), inkproto::client::Response::Stored);
    }
    assert_eq!(
        rig.tcp(b"touch tch 4\r\n"),
        inkproto::client::Response::Touched
    );
    settle();
    for k in ["rel", "abs", "tch"] {
        cache_it(&rig, k);
    }
    // wait until memcached has expired them, then the kernel must not answer
    assert_expired_not_served(&rig, &["rel", "abs", "tch"]);
    // a negative exptime never gets cached
    assert_eq!(
        rig.tcp(b"set neg 0 -1 1\r\nn\r\n"),
        inkproto::client::Response::Stored
    );
    settle();
    assert_eq!(rig.udp_get(9, b"get neg\r\n").unwrap(), b"END\r\n");
}

/// A write that may leave the old item in place (a failed `add`, a `cas` with a wrong unique, a
/// meta set in add mode) does not lengthen the expiry the kernel keeps for the key; and after a
/// segment that could not be parsed (it may have changed any key's expiry) earlier expiries are
/// no longer trusted: items are served at most --max-age after their fill, as for keys written
/// before attach.
#[test]
fn expiry_survives_failed_writes_and_unparsable_segments() {
    let rig = Rig::attached(&["--max-age", "2"]).unwrap();
    for k in ["add", "cas", "msadd"] {
        let req = format!("set {k} 0 4 3\r\nold\r\n");
        assert_eq!(rig.tcp(req.as_bytes()), inkproto::client::Response::Stored);
    }
    assert_eq!(
        rig.tcp(b"add add 0 0 3\r\nnew\r\n"),
        inkproto::client::Response::NotStored
    );
    assert_eq!(
        rig.tcp(b"cas cas 0 0 3 987654321\r\nnew\r\n"),
        inkproto::client::Response::Exists
    );
    assert!(matches!(
        rig.tcp(b"ms msadd 3 ME\r\nnew\r\n"),
        inkproto::client::Response::Meta {
            code: [b'N', b'S'],
            ..
        }
    ));
    // a key with no expiry, then a segment the walker cannot parse that gives it one
    assert_eq!(
        rig.tcp(b"set hidden 0 0 3\r\nold\r\n"),
        inkproto::client::Response::Stored
    );
    settle();
    let unparsable = rig.stat("inval_unparsable");
    let addr = rig.server_addr();
    rig.client(|| {
        // a touch whose line (spaces between tokens are legal) is cut by a segment end after
        // more bytes than the walker carries over: it cannot be parsed with certainty
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_nodelay(true).unwrap();
        c.write_all(format!("touch hidden{}", " ".repeat(500)).as_bytes())
            .unwrap();
        sleep(Duration::from_millis(100));
        c.write_all(b"3\r\n").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while !got.ends_with(b"TOUCHED\r\n") {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
    });
    assert_eq!(rig.stat("inval_unparsable"), unparsable + 1);
    settle();
    for k in ["add", "cas", "msadd", "hidden"] {
        cache_it(&rig, k);
    }
    // once memcached has expired them (a fixed sleep could end before it had, and the answer
    // then came from either), the kernel must not answer
    assert_expired_not_served(&rig, &["add", "cas", "msadd", "hidden"]);
}

/// A storage command memcached reads but refuses leaves the item as it was, its expiry and meta
/// state included: a data block not followed by "\r\n" (CLIENT_ERROR bad data chunk, found by
/// tests/differential.rs), or a replace of a value too large for memcached (SERVER_ERROR: only a
/// set unlinks the old item then). The kernel serves the item no longer than memcached does, and
/// answers a meta get of it as memcached does.
#[test]
fn a_refused_data_block_leaves_the_item_as_it_was() {
    use inkproto::{
        binary,
        client::{parse_response, Response},
    };
    let rig = Rig::attached(&[]).unwrap();
    let bad_chunk = Response::ClientError("bad data chunk".into());
    let too_large = Response::ServerError("object too large for cache".into());
    let keys = ["ttl_set", "ttl_ms", "ttl_replace", "ttl_bin"];
    for k in keys {
        let req = format!("set {k} 0 4 3\r\nold\r\n");
        assert_eq!(rig.tcp(req.as_bytes()), Response::Stored);
    }
    // exptime 0 (never) refused: the items keep their TTL
    assert_eq!(rig.tcp(b"set ttl_set 0 0 2\r\nabcd\r\n"), bad_chunk);
    assert_eq!(rig.tcp(b"ms ttl_ms 2 T0\r\nabcd\r\n"), bad_chunk);
    let big = vec![b'z'; 1_100_000];
    let mut req = b"replace ttl_replace 0 0 1100000\r\n".to_vec();
    req.extend_from_slice(&big);
    req.extend_from_slice(b"\r\n");
    assert_eq!(rig.tcp(&req), too_large);
    let mut req = Vec::new();
    let extras = binary::store_extras(0, 0);
    binary::request(
        &mut req,
        binary::op::REPLACE,
        1,
        0,
        &extras,
        b"ttl_bin",
        &big,
    );
    let addr = rig.server_addr();
    let status = rig.client(move || {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&req).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while binary::packet(&got).is_none() {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0, "closed");
            got.extend_from_slice(&buf[..n]);
        }
        binary::packet(&got).unwrap().0.header.status
    });
    assert_eq!(status, binary::status::E2BIG);
    // an item vivified by a meta get (its win token handed out), then a set refused: memcached
    // still flags it (Z: the token is out), so the kernel must not answer mg for it
    rig.tcp(b"mg viv N30 v\r\n");
    assert_eq!(rig.tcp(b"set viv 0 0 2\r\nabcd\r\n"), bad_chunk);
    settle();
    for k in keys.iter().chain(&["viv"]) {
        cache_it(&rig, k);
    }
    let want = rig.tcp(b"mg viv v\r\n");
    let got = rig.udp_get(7, b"mg viv v\r\n").expect("an answer");
    assert_eq!(parse_response(&got).unwrap().map(|r| r.0), Some(want));
    assert_expired_not_served(&rig, &keys);
}

/// Items whose expiry is unknown (written before attach) are served at most --max-age.
#[test]
fn max_age_bounds_items_written_before_attach() {
    let mut rig = Rig::new().unwrap();
    set(&rig, "before", 0, b"b");
    rig.attach(&["--max-age", "2"]).unwrap();
    cache_it(&rig, "before");
    sleep(Duration::from_millis(2300));
    let hits = rig.stat("hits");
    assert_eq!(
        values(&rig.udp_get(5, b"get before\r\n").unwrap())[0].2,
        b"b"
    );
    assert_eq!(rig.stat("hits"), hits, "served past --max-age");
    assert!(rig.stat("expired") >= 1);
}

#[test]
fn flush_all_now_and_with_delay() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "f1", 0, b"1");
    cache_it(&rig, "f1");
    assert_eq!(rig.tcp(b"flush_all\r\n"), inkproto::client::Response::Ok);
    assert_fresh(&rig, "f1", "flush_all");
    assert!(rig.stat("inval_flush") >= 1);

    set(&rig, "f2", 0, b"2");
    cache_it(&rig, "f2");
    assert_eq!(rig.tcp(b"flush_all 2\r\n"), inkproto::client::Response::Ok);
    // until the delay passes memcached still has f2; after it, the kernel must not serve it
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(4) {
        assert_fresh(&rig, "f2", "flush_all 2");
        sleep(Duration::from_millis(250));
    }
    assert_eq!(
        rig.tcp(b"get f2\r\n"),
        inkproto::client::Response::Values(vec![])
    );
}

/// The server restarting under load empties the cache before the new server answers: once the new
/// (empty) server has answered, no old value is ever served again.
#[test]
fn server_restart_under_load_empties_the_cache() {
    let mut rig = Rig::attached(&[]).unwrap();
    set(&rig, "r", 0, b"old");
    cache_it(&rig, "r");
    let before = rig.stat("inval_restart");
    let addr = rig.server_addr();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let Rig { pair, server, .. } = &mut rig;
    let (pair, server) = (&*pair, server);
    let replies = std::thread::scope(|sc| {
        let load = sc.spawn(|| {
            pair.client.run(|| {
                let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                let mut seen = Vec::new();
                let mut buf = [0u8; 2048];
                let mut id = 0u16;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    id = id.wrapping_add(1);
                    s.send_to(&frame_request(id, b"get r\r\n"), addr).unwrap();
                    if let Ok((n, _)) = s.recv_from(&mut buf) {
                        seen.push(buf[8..n].to_vec());
                    }
                }
                seen
            })
        });
        sleep(Duration::from_millis(300));
        server.restart(&pair.server).unwrap();
        sleep(Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        load.join().unwrap()
    });
    assert!(rig.stat("inval_restart") > before, "{}", rig.stats());
    let first_new = replies
        .iter()
        .position(|r| r == b"END\r\n")
        .expect("the new server answered");
    assert!(first_new > 0, "the old value was served before the restart");
    assert!(
        replies[first_new..].iter().all(|r| r == b"END\r\n"),
        "an old value was served after the new server answered"
    );
}

/// Clients on the server's own host reach it over loopback: attaching `lo` as well makes their
/// mutations invalidate (and their gets hit).
#[test]
fn loopback_mutations_invalidate_when_lo_is_attached() {
    let rig = Rig::attached(&["--iface", "lo"]).unwrap();
    struct DetachLo<'a>(&'a Rig);
    impl Drop for DetachLo<'_> {
        fn drop(&mut self) {
            let _ = self.0.inkcache(&["detach", "--iface", "lo"]);
        }
    }
    let _lo = DetachLo(&rig);
    set(&rig, "lk", 0, b"old");
    cache_it(&rig, "lk");
    // a client inside the server's namespace: its traffic to 198.18.0.1 goes over lo
    let addr = rig.server_addr();
    let r = rig
        .pair
        .server
        .run(|| common::tcp_request(addr, b"set lk 0 0 3\r\nnew\r\n").unwrap());
    assert_eq!(r, inkproto::client::Response::Stored);
    assert_fresh(&rig, "lk", "a set over loopback");
    // and the local client's own gets are answered by the kernel too
    settle();
    rig.udp_get(30, b"get lk\r\n").unwrap();
    let hits = rig.stat("hits");
    let local = rig.pair.server.run(|| {
        common::udp_exchange(
            addr,
            &frame_request(31, b"get lk\r\n"),
            Duration::from_millis(500),
        )
        .unwrap()
    });
    assert_eq!(assemble(&local).unwrap(), b"VALUE lk 0 3\r\nnew\r\nEND\r\n");
    assert_eq!(rig.stat("hits"), hits + 1, "{}", rig.stats());

    // each interface attached together keeps its own record: status shows both, and detaching
    // lo leaves the veth attached and serving
    for ifc in [rig.pair.srv_if.as_str(), "lo"] {
        let row = rig.status_row(ifc);
        assert_eq!(row["iface"], ifc, "{row}");
        assert_eq!(row["xdp_attached"], true, "{row}");
    }
    assert!(rig.inkcache(&["detach", "--iface", "lo"]).status.success());
    let hits = rig.stat("hits");
    rig.udp_get(32, b"get lk\r\n").unwrap();
    assert_eq!(
        rig.stat("hits"),
        hits + 1,
        "the veth still serves after lo is detached"
    );
    let lo = rig.pair.server.run(|| {
        std::process::Command::new("ip")
            .args(["-d", "link", "show", "lo"])
            .output()
            .unwrap()
    });
    assert!(
        !String::from_utf8_lossy(&lo.stdout).contains("prog/xdp"),
        "lo still has an XDP program"
    );
}
