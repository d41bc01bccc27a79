//! Coherence of the kernel cache against real memcached: every mutation invalidates (TCP and UDP,
//! pipelined, split across segments), expiry learned from mutations, flush_all (with delay), and
//! the server restarting.

mod common;

use std::{
    io::Write,
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

/// A command whose key is cut across two TCP segments still invalidates (the whole cache, since
/// the second segment starts mid-command).
#[test]
fn key_split_across_segments_invalidates() {
    let rig = Rig::attached(&[]).unwrap();
    set(&rig, "splitkey", 0, b"old");
    cache_it(&rig, "splitkey");
    let addr = rig.server_addr();
    rig.client(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.write_all(b"set spli").unwrap();
        sleep(Duration::from_millis(100));
        s.write_all(b"tkey 0 0 3\r\nnew\r\n").unwrap();
        sleep(Duration::from_millis(100));
    });
    assert!(rig.stat("inval_unparsable") >= 1, "{}", rig.stats());
    assert_fresh(&rig, "splitkey", "a set split across segments");
}

/// Items are not served after the expiry a mutation set (relative and absolute exptime, touch).
#[test]
fn expiry_learned_from_mutations() {
    let rig = Rig::attached(&[]).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let abs = format!("set abs 0 {} 1\r\na\r\n", now + 3);
    for cmd in [
        &b"set rel 0 3 1\r\nr\r\n"[..],
        abs.as_bytes(),
        b"set tch 0 0 1\r\nt\r\n",
    ] {
        assert_eq!(rig.tcp(cmd), inkproto::client::Response::Stored);
    }
    assert_eq!(
        rig.tcp(b"touch tch 3\r\n"),
        inkproto::client::Response::Touched
    );
    settle();
    for k in ["rel", "abs", "tch"] {
        cache_it(&rig, k);
    }
    // wait until memcached has expired them, then the kernel must not answer
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        if rig.tcp(b"get rel\r\n") == inkproto::client::Response::Values(vec![]) {
            break;
        }
        assert!(Instant::now() < deadline, "memcached never expired rel");
        sleep(Duration::from_millis(100));
    }
    let hits = rig.stat("hits");
    for k in ["rel", "abs", "tch"] {
        assert_fresh(&rig, k, "expiry");
    }
    assert_eq!(
        rig.stat("hits"),
        hits,
        "expired items served: {}",
        rig.stats()
    );
    // a negative exptime never gets cached
    assert_eq!(
        rig.tcp(b"set neg 0 -1 1\r\nn\r\n"),
        inkproto::client::Response::Stored
    );
    settle();
    assert_eq!(rig.udp_get(9, b"get neg\r\n").unwrap(), b"END\r\n");
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
}
