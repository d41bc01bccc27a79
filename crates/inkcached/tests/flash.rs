//! The flash tier: values evicted from RAM come back byte-identical over TCP and UDP, every
//! command keeps its meaning on a flash item, bad or missing storage never gives a wrong answer.
//!
//! The storage file lives in a temp dir (removed on drop). `ext_item_age=0` with one shard
//! (`-m 2`) moves every value but the newest to flash at each store, which puts a given key on
//! flash deterministically.

mod common;
use common::*;
use inkproto::client::{parse_response, Response};
use inkproto::udp::{frame_request, FrameHeader, Reassembly, HEADER_LEN};
use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::TempDir;

/// The flash tier's file in `dir`.
fn store(dir: &TempDir) -> String {
    dir.path().join("store").display().to_string()
}

/// A deterministic value of 1-16 KB for key number `i` (`round` changes it).
fn value(i: u64, round: u64) -> Vec<u8> {
    let mut x =
        (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ round.wrapping_mul(0xd1b5_4a32_d192_ed03);
    let len = 1024 + (x % (15 * 1024)) as usize;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Tcp(TcpStream, Vec<u8>);

impl Tcp {
    fn new(port: u16) -> Tcp {
        Tcp(connect(port), Vec::new())
    }
    fn req(&mut self, r: &[u8]) -> Response {
        self.0.write_all(r).unwrap();
        self.read()
    }
    fn read(&mut self) -> Response {
        let mut buf = [0u8; 65536];
        loop {
            if let Some((resp, used)) = parse_response(&self.1).unwrap() {
                self.1.drain(..used);
                return resp;
            }
            let n = self.0.read(&mut buf).expect("reply in time");
            assert!(n > 0, "EOF");
            self.1.extend_from_slice(&buf[..n]);
        }
    }
    fn set(&mut self, key: &str, flags: u32, exp: i64, v: &[u8]) {
        let mut r = format!("set {key} {flags} {exp} {}\r\n", v.len()).into_bytes();
        r.extend_from_slice(v);
        r.extend_from_slice(b"\r\n");
        assert_eq!(self.req(&r), Response::Stored);
    }
    fn get(&mut self, key: &str) -> Option<Vec<u8>> {
        match self.req(format!("get {key}\r\n").as_bytes()) {
            Response::Values(mut v) => v.pop().map(|i| i.data),
            r => panic!("get {key}: {r:?}"),
        }
    }
    fn stats(&mut self) -> HashMap<String, u64> {
        match self.req(b"stats\r\n") {
            Response::Stats(s) => s
                .into_iter()
                .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
                .collect(),
            r => panic!("stats: {r:?}"),
        }
    }
}

fn ext_opts(file: &str, size: &str, extra: &str) -> String {
    format!("ext_page_size=1,ext_wbuf_size=1,ext_path={file}:{size}{extra}")
}

/// inkcached with one shard and every value but the newest on flash.
fn all_on_flash(dir: &TempDir) -> Server {
    let o = ext_opts(&store(dir), "64m", ",ext_item_size=1,ext_item_age=0");
    inkcached(&["-m", "2", "-o", &o])
}

/// inkcached with 4 MB of RAM, items up to 64 KB, and a flash tier of `size` in `dir`.
fn small_ram(dir: &TempDir, size: &str) -> Server {
    let o = ext_opts(&store(dir), size, "");
    inkcached(&[
        "-m",
        "4",
        "-I",
        "64k",
        "-o",
        "slab_chunk_max=65536",
        "-o",
        &o,
    ])
}

/// Stores 1.4 MB of filler: every value stored before is on flash, its write buffer (1 MB)
/// full and written out, so reading it back goes to the disk.
fn push(c: &mut Tcp) {
    let f = vec![b'f'; 700 * 1024];
    c.set("fillerA", 0, 0, &f);
    c.set("fillerB", 0, 0, &f);
    c.set("fillerC", 0, 0, b"c");
    std::thread::sleep(Duration::from_millis(50));
}

#[test]
fn evicted_values_come_back_identical() {
    let dir = testkit::temp_dir("inkfl-tcp-");
    // 4 MB of RAM, 64 MB of flash, ~25 MB of values: most of them on flash
    let srv = small_ram(&dir, "64m");
    let mut c = Tcp::new(srv.port);
    let n = 3000u64;
    for i in 0..n {
        c.set(&format!("k{i}"), i as u32, 0, &value(i, 0));
        if i % 128 == 127 {
            // a breath per write buffer's worth (1 MB) for the disk, which the other tests of
            // this binary share: without it, one CI run wrote only 1,195 values and dropped
            // 1,347 (memcached drops values when every write buffer waits for the disk)
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let s = c.stats();
    // most values go to flash on a disk that keeps up; at least a sixth on a slow one
    assert!(s["extstore_objects_written"] > 500, "{s:?}");
    assert!(s["bytes"] <= 4 << 20);
    // Values evicted while every write buffer waited for the disk are dropped, as memcached
    // drops them: exactly those miss.
    assert_eq!(s["evictions"], s["extstore_write_skipped"]);
    // every key, in random-ish order, byte for byte, with its flags
    let mut dropped = HashSet::new();
    for j in 0..n {
        let i = (j * 7919) % n;
        match c.req(format!("get k{i}\r\n").as_bytes()) {
            Response::Values(v) if v.is_empty() => {
                dropped.insert(format!("k{i}").into_bytes());
            }
            Response::Values(v) => {
                assert_eq!(v.len(), 1);
                assert_eq!(v[0].flags, i as u32);
                assert!(v[0].data == value(i, 0), "k{i} differs");
            }
            r => panic!("{r:?}"),
        }
    }
    let misses = dropped.len() as u64; // each key is got once: 7919 is prime to n
    let s2 = c.stats();
    assert_eq!(misses, s["evictions"], "{s2:?}");
    assert!(s2["get_extstore"] > 500, "{s2:?}");
    assert_eq!(s2["get_hits"] - s["get_hits"], n - misses);
    assert_eq!(s2["badcrc_from_extstore"], 0);
    // multi-gets mixing RAM and flash keys, pipelined on two connections at once: every key is
    // there but those dropped above and any dropped since (a flash hit can bring its item back
    // to RAM and push another out: counted as evictions below)
    let port = srv.port;
    let dropped = Arc::new(dropped);
    let threads: Vec<_> = (0..2u64)
        .map(|t| {
            let dropped = Arc::clone(&dropped);
            std::thread::spawn(move || {
                let mut unexpected = HashSet::new();
                let mut c = Tcp::new(port);
                let mut req = Vec::new();
                for b in 0..20u64 {
                    let keys: Vec<String> = (0..10)
                        .map(|k| format!("k{}", (t * 1000 + b * 37 + k * 101) % n))
                        .collect();
                    req.extend_from_slice(format!("get {}\r\n", keys.join(" ")).as_bytes());
                }
                c.0.write_all(&req).unwrap();
                for b in 0..20u64 {
                    let Response::Values(v) = c.read() else {
                        panic!()
                    };
                    for it in &v {
                        let i: u64 = std::str::from_utf8(&it.key[1..]).unwrap().parse().unwrap();
                        assert!(it.data == value(i, 0), "k{i} differs in a multi-get");
                    }
                    let keys: Vec<Vec<u8>> = v.into_iter().map(|i| i.key).collect();
                    let asked: Vec<Vec<u8>> = (0..10u64)
                        .map(|k| format!("k{}", (t * 1000 + b * 37 + k * 101) % n).into_bytes())
                        .collect();
                    let want: Vec<Vec<u8>> =
                        asked.iter().filter(|k| keys.contains(k)).cloned().collect();
                    assert_eq!(keys, want, "multi-get order");
                    unexpected.extend(
                        asked
                            .into_iter()
                            .filter(|k| !keys.contains(k) && !dropped.contains(k)),
                    );
                }
                unexpected
            })
        })
        .collect();
    let mut unexpected = HashSet::new();
    for t in threads {
        unexpected.extend(t.join().unwrap());
    }
    let s3 = c.stats();
    assert!(
        unexpected.len() as u64 <= s3["evictions"] - s2["evictions"],
        "{} keys missing from multi-gets that were neither dropped before nor since: {s3:?}",
        unexpected.len()
    );
}

#[test]
fn flash_smaller_than_data_misses_but_never_lies() {
    let dir = testkit::temp_dir("inkfl-small-");
    // 4 MB of RAM, 8 MB of flash, ~25 MB written twice: pages are reclaimed and compacted
    let srv = small_ram(&dir, "8m");
    let mut c = Tcp::new(srv.port);
    let n = 3000u64;
    let mut hits = 0;
    for round in 0..2 {
        for i in 0..n {
            c.set(&format!("k{i}"), 0, 0, &value(i, round));
            // read some recent keys back so compaction has read items to keep
            if i % 3 == 0 && i > 200 {
                let k = i - 200;
                if let Some(v) = c.get(&format!("k{k}")) {
                    assert!(v == value(k, round), "k{k} differs");
                }
            }
        }
        for i in 0..n {
            if let Some(v) = c.get(&format!("k{i}")) {
                assert!(v == value(i, round), "k{i} differs in round {round}");
                hits += 1;
            }
        }
    }
    let s = c.stats();
    assert!(
        s["extstore_page_evictions"] + s["extstore_page_reclaims"] > 0,
        "{s:?}"
    );
    assert!(s["extstore_compact_rescues"] > 0, "{s:?}");
    assert!(hits > 500, "{hits} hits");
    assert_eq!(s["badcrc_from_extstore"], 0);
}

fn udp_sock(port: u16) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

fn udp_request(s: &UdpSocket, id: u16, payload: &[u8]) -> Response {
    s.send(&frame_request(id, payload)).unwrap();
    let mut r = Reassembly::new();
    let mut buf = [0u8; 65536];
    while !r.is_complete() {
        let len = s.recv(&mut buf).expect("udp reply in time");
        let h = FrameHeader::decode(&buf[..len]).unwrap();
        assert_eq!(h.request_id, id);
        assert!(r.push(h, &buf[HEADER_LEN..len]));
    }
    let msg = r.finish().unwrap();
    let (resp, used) = parse_response(&msg).unwrap().expect("complete reply");
    assert_eq!(used, msg.len());
    resp
}

#[test]
fn udp_gets_of_flash_items() {
    let dir = testkit::temp_dir("inkfl-udp-");
    let srv = all_on_flash(&dir);
    let mut c = Tcp::new(srv.port);
    for i in 0..40u64 {
        c.set(&format!("u{i}"), 7, 0, &value(i, 3));
    }
    push(&mut c);
    let before = c.stats()["get_extstore"];
    let s = udp_sock(srv.port);
    for i in 0..40u64 {
        let Response::Values(v) = udp_request(&s, i as u16, format!("get u{i}\r\n").as_bytes())
        else {
            panic!()
        };
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].flags, 7);
        assert!(v[0].data == value(i, 3), "u{i} differs over UDP");
    }
    // several keys in one datagram, and several requests in one datagram
    let Response::Values(v) = udp_request(&s, 100, b"get u1 u2 nope u3\r\n") else {
        panic!()
    };
    let keys: Vec<&[u8]> = v.iter().map(|i| i.key.as_slice()).collect();
    assert_eq!(keys, [b"u1".as_slice(), b"u2", b"u3"]);
    assert!(v[2].data == value(3, 3));
    let after = c.stats()["get_extstore"];
    assert!(
        after - before >= 40,
        "gets did not go to flash ({before} -> {after})"
    );
}

#[test]
fn commands_on_flash_items() {
    let dir = testkit::temp_dir("inkfl-cmds-");
    let srv = all_on_flash(&dir);
    let mut c = Tcp::new(srv.port);
    let big = value(1, 9);

    // gets / cas
    c.set("a", 5, 0, &big);
    push(&mut c);
    let Response::Values(v) = c.req(b"gets a\r\n") else {
        panic!()
    };
    let cas = v[0].cas.unwrap();
    assert!(v[0].data == big);
    push(&mut c);
    let mut r = format!("cas a 6 0 3 {}\r\nnew\r\n", cas + 1000).into_bytes();
    assert_eq!(c.req(&r), Response::Exists);
    r = format!("cas a 6 0 3 {cas}\r\nnew\r\n").into_bytes();
    assert_eq!(c.req(&r), Response::Stored);
    push(&mut c);
    assert_eq!(c.get("a").unwrap(), b"new");

    // append / prepend
    c.set("b", 0, 0, &big);
    push(&mut c);
    assert_eq!(c.req(b"append b 0 0 3\r\nEND\r\n"), Response::Stored);
    push(&mut c);
    assert_eq!(c.req(b"prepend b 0 0 5\r\nSTART\r\n"), Response::Stored);
    push(&mut c);
    let mut want = b"START".to_vec();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"END");
    assert!(c.get("b").unwrap() == want);

    // incr / decr (a short result is padded with spaces, as in RAM)
    c.set("n", 0, 0, b"100");
    push(&mut c);
    assert_eq!(c.req(b"incr n 5\r\n"), Response::Number(105));
    push(&mut c);
    assert_eq!(c.req(b"decr n 100\r\n"), Response::Number(5));
    push(&mut c);
    assert_eq!(c.get("n").unwrap(), b"5  ");
    c.set("t", 0, 0, b"text");
    push(&mut c);
    assert!(matches!(c.req(b"incr t 1\r\n"), Response::ClientError(_)));

    // touch, gat, delete
    c.set("d", 0, 0, &big);
    push(&mut c);
    assert_eq!(c.req(b"touch d 100\r\n"), Response::Touched);
    let Response::Values(v) = c.req(b"gat 200 d\r\n") else {
        panic!()
    };
    assert!(v[0].data == big);
    push(&mut c);
    assert_eq!(c.req(b"delete d\r\n"), Response::Deleted);
    assert_eq!(c.get("d"), None);
    assert_eq!(c.req(b"delete d\r\n"), Response::NotFound);

    // meta: mg with value, size, flags, cas; ms; md
    c.set("m", 33, 0, &big);
    push(&mut c);
    match c.req(b"mg m v s f c k\r\n") {
        Response::Meta { code, flags, value } => {
            assert_eq!(&code, b"VA");
            assert!(value.unwrap() == big);
            assert!(flags.contains(&format!("s{}", big.len()).into_bytes()));
            assert!(flags.contains(&b"f33".to_vec()));
            assert!(flags.contains(&b"km".to_vec()));
        }
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        c.req(b"mg m\r\n"),
        Response::Meta {
            code: [b'H', b'D'],
            ..
        }
    ));
    let mut ms = format!("ms m {} MA\r\n", 2).into_bytes();
    ms.extend_from_slice(b"zz\r\n");
    assert!(matches!(
        c.req(&ms),
        Response::Meta {
            code: [b'H', b'D'],
            ..
        }
    ));
    push(&mut c);
    let mut want = big.clone();
    want.extend_from_slice(b"zz");
    assert!(c.get("m").unwrap() == want);
    assert!(matches!(
        c.req(b"md m\r\n"),
        Response::Meta {
            code: [b'H', b'D'],
            ..
        }
    ));
    assert_eq!(c.get("m"), None);

    // expiry and flush_all
    c.set("e", 0, 2, &big);
    push(&mut c);
    assert!(c.get("e").is_some());
    std::thread::sleep(Duration::from_millis(3100));
    assert_eq!(c.get("e"), None);
    c.set("f", 0, 0, &big);
    push(&mut c);
    assert_eq!(c.req(b"flush_all\r\n"), Response::Ok);
    assert_eq!(c.get("f"), None);

    let s = c.stats();
    assert!(s["get_extstore"] >= 8, "{s:?}");
    assert_eq!(s["badcrc_from_extstore"], 0);
}

#[test]
fn corrupted_items_are_misses_and_counted() {
    let dir = testkit::temp_dir("inkfl-crc-");
    let srv = all_on_flash(&dir);
    let mut c = Tcp::new(srv.port);
    let n = 300u64; // ~2.5 MB on flash, written out
    for i in 0..n {
        c.set(&format!("c{i}"), 0, 0, &value(i, 5));
    }
    push(&mut c);
    // flip one byte in every 2 KB of the first 6 MB
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(store(&dir))
        .unwrap();
    use std::os::unix::fs::FileExt;
    for off in (1000..6 << 20).step_by(2048) {
        let mut b = [0u8; 1];
        f.read_exact_at(&mut b, off).unwrap();
        b[0] ^= 0x5a;
        f.write_all_at(&b, off).unwrap();
    }
    f.sync_all().unwrap();
    let mut misses = 0;
    for i in 0..n {
        match c.get(&format!("c{i}")) {
            Some(v) => assert!(v == value(i, 5), "c{i}: corrupted bytes served"),
            None => misses += 1,
        }
    }
    let s = c.stats();
    assert!(misses > 200, "{misses} misses");
    assert!(s["badcrc_from_extstore"] > 200, "{s:?}");
    assert!(s["miss_from_extstore"] >= s["badcrc_from_extstore"]);
    // the server goes on: new values are stored and served
    c.set("after", 0, 0, &value(1, 1));
    push(&mut c);
    assert!(c.get("after").unwrap() == value(1, 1));
}

#[test]
fn file_truncated_while_running() {
    let dir = testkit::temp_dir("inkfl-trunc-");
    let srv = all_on_flash(&dir);
    let mut c = Tcp::new(srv.port);
    for i in 0..200u64 {
        c.set(&format!("t{i}"), 0, 0, &value(i, 2));
    }
    push(&mut c);
    std::fs::OpenOptions::new()
        .write(true)
        .open(store(&dir))
        .unwrap()
        .set_len(0)
        .unwrap();
    for i in 0..200u64 {
        if let Some(v) = c.get(&format!("t{i}")) {
            assert!(v == value(i, 2), "t{i} differs after truncation");
        }
    }
    c.set("after", 0, 0, &value(1, 1));
    c.set("newest", 0, 0, b"x");
    assert!(c.get("after").unwrap() == value(1, 1));
}

/// Starts inkcached with `args` (plus -p/-U/-l) through `wrap`, returns it and a reader of its
/// stderr lines.
fn spawn_logged(wrap: &[&str], args: &[&str]) -> (Server, std::sync::mpsc::Receiver<String>) {
    let port = free_port();
    let p = port.to_string();
    let mut cmd = Command::new(
        wrap.first()
            .copied()
            .unwrap_or(env!("CARGO_BIN_EXE_inkcached")),
    );
    if !wrap.is_empty() {
        cmd.args(&wrap[1..]).arg(env!("CARGO_BIN_EXE_inkcached"));
    }
    let mut child = cmd
        .args(["-p", &p, "-U", &p, "-l", "127.0.0.1", "-t", "2"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        assert!(child.try_wait().unwrap().is_none(), "server exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Server { child, port }, rx)
}

/// The server logs one line about its flash tier and serves from RAM.
fn serves_from_ram(srv: &Server, log: &std::sync::mpsc::Receiver<String>, why: &str) {
    let mut c = Tcp::new(srv.port);
    for i in 0..50u64 {
        c.set(&format!("r{i}"), 0, 0, &value(i, 4));
    }
    for i in 0..50u64 {
        assert!(c.get(&format!("r{i}")).unwrap() == value(i, 4));
    }
    let s = c.stats();
    assert!(
        !s.contains_key("extstore_objects_written"),
        "tier should be off"
    );
    let lines: Vec<String> = log.try_iter().collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("flash tier disabled") && lines[0].contains(why),
        "{lines:?}"
    );
}

#[test]
fn missing_directory_serves_from_ram() {
    let (srv, log) = spawn_logged(
        &[],
        &["-o", "ext_page_size=1,ext_path=/nonexistent-inkfl/dir/f:8m"],
    );
    serves_from_ram(&srv, &log, "No such file");
}

#[test]
fn full_file_serves_from_ram() {
    if !have("/usr/bin/prlimit") {
        return;
    }
    // a file size limit of 1 MB: the 8 MB storage file cannot be reserved
    let dir = testkit::temp_dir("inkfl-full-");
    let o = ext_opts(&store(&dir), "8m", "");
    let (srv, log) = spawn_logged(&["/usr/bin/prlimit", "--fsize=1048576", "--"], &["-o", &o]);
    serves_from_ram(&srv, &log, "reserving");
}

#[test]
fn filesystem_without_o_direct_serves_from_ram() {
    if !have("/usr/bin/unshare") {
        return;
    }
    // ramfs has no O_DIRECT (tmpfs has since 6.6): mount one in a private mount namespace
    let dir = testkit::temp_dir("inkfl-ramfs-");
    let mnt = dir.path().display().to_string();
    let script = format!("mount -t ramfs none {mnt} && exec \"$0\" \"$@\"");
    let o = ext_opts(&format!("{mnt}/f"), "8m", "");
    let (srv, log) = spawn_logged(
        &[
            "/usr/bin/unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ],
        &["-o", &o],
    );
    serves_from_ram(&srv, &log, "O_DIRECT");
}

/// The consistency checker's binary (crates/inkcheck), built beside this test's.
fn inkcheck_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("inkcheck");
    if p.exists() {
        return Some(p);
    }
    testkit::skip(format!(
        "{} not built (build the workspace first)",
        p.display()
    ));
    None
}

/// The consistency checker (writers over TCP, readers over UDP) against a tiny flash tier that
/// takes every value at once and cycles its pages: compaction and reclaim under concurrent
/// sets, appends, deletes and flushes never give a wrong or stale value.
#[test]
fn consistency_checker_with_compaction() {
    let Some(check) = inkcheck_bin() else { return };
    let dir = testkit::temp_dir("inkfl-check-");
    let o = ext_opts(&store(&dir), "4m", ",ext_item_size=1,ext_item_age=0");
    let srv = inkcached(&["-m", "2", "-o", &o]);
    let out = Command::new(&check)
        .args([
            "--server",
            &format!("127.0.0.1:{}", srv.port),
            "--seconds",
            "5",
        ])
        .args(["--large-ratio", "0.3", "--json"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "checker: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = Tcp::new(srv.port);
    let s = c.stats();
    assert!(s["get_extstore"] > 100, "reads did not go to flash: {s:?}");
    assert!(
        s["extstore_page_evictions"] + s["extstore_page_reclaims"] > 0,
        "{s:?}"
    );
}

/// Gets pipelined behind a parked one are read ahead; writes pipelined between them still
/// apply in order (a get after a set or delete sees it).
#[test]
fn pipelined_gets_and_writes_on_flash_items() {
    let dir = testkit::temp_dir("inkfl-pipe-");
    let srv = all_on_flash(&dir);
    let mut c = Tcp::new(srv.port);
    for i in 0..20u64 {
        c.set(&format!("p{i}"), 0, 0, &value(i, 6));
    }
    push(&mut c);
    let before = c.stats()["get_extstore"];
    let mut req = Vec::new();
    for i in 0..20u64 {
        req.extend_from_slice(format!("get p{i}\r\n").as_bytes());
    }
    req.extend_from_slice(
        b"set p3 0 0 3\r\nnew\r\ndelete p4\r\nget p3 p4 p5\r\nappend p6 0 0 1\r\nZ\r\nget p6\r\n",
    );
    c.0.write_all(&req).unwrap();
    for i in 0..20u64 {
        let Response::Values(v) = c.read() else {
            panic!()
        };
        assert!(v.len() == 1 && v[0].data == value(i, 6), "p{i}");
    }
    assert_eq!(c.read(), Response::Stored);
    assert_eq!(c.read(), Response::Deleted);
    let Response::Values(v) = c.read() else {
        panic!()
    };
    assert_eq!(v.len(), 2);
    assert_eq!(
        (v[0].key.as_slice(), v[0].data.as_slice()),
        (b"p3".as_slice(), b"new".as_slice())
    );
    assert!(v[1].key == b"p5" && v[1].data == value(5, 6));
    assert_eq!(c.read(), Response::Stored);
    let Response::Values(v) = c.read() else {
        panic!()
    };
    let mut want = value(6, 6);
    want.push(b'Z');
    assert!(v[0].data == want);
    assert!(c.stats()["get_extstore"] - before >= 20);
}
