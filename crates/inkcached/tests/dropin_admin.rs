//! Admin commands against stock memcached 1.6 (issue 15): `stats` groups, `stats detail`,
//! `stats cachedump`, `stats conns`, `cache_memlimit`, `slabs`, `lru_crawler`, `watch`,
//! `shutdown`. Byte for byte where both servers hold the same data; where memcached's figures
//! depend on its own allocator or clock (descriptors, timestamps), the same lines once those
//! fields are masked.

mod common;
use common::*;
use std::io::{Read, Write};
use std::time::Duration;

/// memcached without its LRU maintainer keeps one flat LRU per class, as inkcached does, and
/// `-m 2` makes inkcached keep one shard: both then list items in the same order.
const FLAT: &[&str] = &["-o", "no_lru_maintainer", "-m", "2"];

#[test]
fn admin_answers_match_memcached() {
    assert_same(
        &[],
        &[
            "stats detail on\r\nset a:{}k 0 0 1\r\nx\r\nget a:{}k\r\nget a:{}z\r\nget nodelim\r\ndelete a:{}k\r\nstats detail dump\r\nstats detail off\r\nstats detail\r\nstats detail foo\r\n",
            "stats cachedump 1 1\r\nstats cachedump\r\nstats cachedump x 1\r\nstats cachedump 100 1\r\nstats cachedump 63 0\r\n",
            "cache_memlimit 5\r\ncache_memlimit 2000000000\r\ncache_memlimit x\r\ncache_memlimit 100\r\ncache_memlimit 100 noreply\r\ncache_memlimit\r\ncache_memlimit 64\r\n",
            "slabs automove 1\r\nslabs automove 3\r\nslabs automove x\r\nslabs automove ratio 0.5\r\nslabs automove ratio\r\nslabs automove 2 noreply\r\nslabs reassign 1 1\r\nslabs reassign 1 200\r\nslabs reassign x 1\r\nslabs foo\r\nslabs\r\nslabs automove 1\r\n",
            "lru_crawler tocrawl 10\r\nlru_crawler tocrawl x\r\nlru_crawler sleep 2000000\r\nlru_crawler sleep 10\r\nlru_crawler crawl 100\r\nlru_crawler crawl 0\r\nlru_crawler crawl x\r\nlru_crawler crawl hash\r\nlru_crawler foo\r\nlru_crawler enable\r\nlru_crawler\r\n",
            "lru_crawler crawl all\r\n",
            "set {}x 0 0 1\r\nx\r\nlru_crawler metadump all\r\n",
            "watch foo\r\nwatch fetchers bogus\r\n",
            "stats sizes\r\nstats sizes_disable\r\n",
            "stats bogus\r\nstats reset\r\n",
            "lru tune 10 20 0.1 2.0\r\nlru tune 50 50 0.1 2\r\nlru tune 10 20 0 1\r\nlru tune x\r\nlru foo\r\n",
        ],
    );
}

#[test]
fn per_class_stats_and_dumps_match_memcached() {
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    let big = "v".repeat(300);
    let setup = format!(
        "set a 0 0 2\r\nhi\r\nset bb 5 0 300\r\n{big}\r\nset c%20d 0 0 1\r\nx\r\nget a\r\nget a bb\r\ntouch c%20d 0\r\nincr nope 1\r\nset n 0 0 1\r\n5\r\nincr n 1\r\ncas a 0 0 1 999\r\ny\r\n"
    );
    let checks = [
        setup.as_str(),
        "stats items\r\n",
        "stats slabs\r\n",
        "stats cachedump 1 0\r\nstats cachedump 1 2\r\nstats cachedump 4 0\r\nstats cachedump 5 0\r\n",
        "me a\r\nme bb\r\nme c%20d\r\nme n\r\n",
    ];
    let f = differences(mc.port, ink.port, &checks);
    assert!(f.is_empty(), "{}", f.join("\n"));
    // metadump: the same lines once the access times (the servers' clocks) are masked
    let mask = |b: Vec<u8>| {
        let s = String::from_utf8(b).unwrap();
        s.split('\n')
            .map(|l| {
                l.split(' ')
                    .map(|w| if w.starts_with("la=") { "la=T" } else { w })
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let dump = |p: u16| request_until(&mut connect(p), b"lru_crawler metadump all\r\n", b"END\r\n");
    let a = mask(dump(mc.port));
    let b = mask(dump(ink.port));
    assert_eq!(a, b);
    assert!(
        a.contains("key=c%2520d exp=-1 la=T cas=3 fetch=yes cls=1"),
        "{a}"
    );
}

/// `STAT <fd>:<field> <value>` lines as records per descriptor, with descriptors, ports and
/// times masked; listeners and UDP sockets left out (inkcached has one per worker).
fn conn_records(b: &[u8], server_port: u16) -> Vec<String> {
    let s = String::from_utf8_lossy(b);
    let mut recs: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
    for l in s.lines().filter_map(|l| l.strip_prefix("STAT ")) {
        let (k, v) = l.split_once(' ').unwrap();
        let (fd, field) = k.split_once(':').unwrap();
        let v = if field.ends_with("addr") {
            // ports: the client's own, the server's own
            let p = v.rsplit_once(':').map_or("", |(_, p)| p);
            let p = if p == server_port.to_string() {
                "S"
            } else {
                "P"
            };
            v.rsplit_once(':')
                .map_or(v.to_string(), |(a, _)| format!("{a}:{p}"))
        } else if field == "secs_since_last_cmd" {
            "S".into()
        } else if field == "state" && v != "conn_parse_cmd" {
            // an idle connection's state depends on timing (conn_read, conn_waiting, ...)
            "idle".into()
        } else {
            v.to_string()
        };
        recs.entry(fd.parse().unwrap())
            .or_default()
            .push(format!("{field}={v}"));
    }
    let mut out: Vec<String> = recs
        .into_values()
        .map(|r| r.join(" "))
        .filter(|r| r.contains("listen_addr="))
        .collect();
    out.sort();
    out
}

#[test]
fn stats_conns_lists_connections_as_memcached() {
    let Some((mc, ink)) = pair(&[]) else {
        return;
    };
    let mut recs = Vec::new();
    for port in [mc.port, ink.port] {
        let mut idle = connect(port);
        assert!(text_on(&mut idle, b"version\r\n").len() > 8);
        let r = text(port, b"stats conns\r\n");
        let s = String::from_utf8_lossy(&r).into_owned();
        assert!(s.contains(":state conn_listening\r\n"), "{s}");
        assert!(
            s.contains(&format!(":addr tcp:127.0.0.1:{port}\r\n")),
            "{s}"
        );
        recs.push(conn_records(&r, port));
        drop(idle);
    }
    assert_eq!(recs[0], recs[1]);
    assert_eq!(recs[0].len(), 2, "{:?}", recs[0]);
    assert!(recs[0].iter().any(|r| r.contains("state=conn_parse_cmd")));
    assert!(recs[0].iter().any(|r| r.contains("state=idle")));
}

#[test]
fn stats_conns_shows_a_value_on_its_way_as_memcached() {
    // memcached's t/stats-conns.t: a connection whose storage command came without its data
    // block is in conn_nread (inkcached said conn_waiting)
    let Some((mc, ink)) = pair(&[]) else {
        return;
    };
    for port in [mc.port, ink.port] {
        let mut c = connect(port);
        c.write_all(b"set foo 0 0 6\r\n").unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let s = String::from_utf8_lossy(&text(port, b"stats conns\r\n")).into_owned();
        assert_eq!(
            s.matches(":state conn_nread\r\n").count(),
            1,
            "port {port}: {s}"
        );
        assert_eq!(text_on(&mut c, b"fooval\r\n"), b"STORED\r\n");
        let s = String::from_utf8_lossy(&text(port, b"stats conns\r\n")).into_owned();
        assert!(!s.contains("conn_nread"), "port {port}: {s}");
    }
}

#[test]
fn stats_conns_shows_a_binary_value_on_its_way_as_memcached() {
    // The same for the binary protocol: its header and key in, its value not. inkcached
    // looked for a '\n' in what had come (a text command line's end), scanning a binary
    // request whole on every read, and said conn_waiting unless it held one.
    let Some((mc, ink)) = pair(&[]) else {
        return;
    };
    let mut set = vec![0x80, 0x01, 0, 3, 8, 0, 0, 0, 0, 0, 0, 17];
    set.extend_from_slice(&[0; 12]); // opaque, cas
    set.extend_from_slice(&[0; 8]); // flags, exptime
    set.extend_from_slice(b"foo");
    for port in [mc.port, ink.port] {
        let mut c = connect(port);
        c.write_all(&set).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let s = String::from_utf8_lossy(&text(port, b"stats conns\r\n")).into_owned();
        assert_eq!(
            s.matches(":state conn_nread\r\n").count(),
            1,
            "port {port}: {s}"
        );
        c.write_all(b"fooval").unwrap();
        let mut head = [0u8; 24];
        c.read_exact(&mut head).unwrap();
        assert_eq!((head[0], head[1], head[7]), (0x81, 0x01, 0), "port {port}");
        let s = String::from_utf8_lossy(&text(port, b"stats conns\r\n")).into_owned();
        assert!(!s.contains("conn_nread"), "port {port}: {s}");
    }
}

#[test]
fn metadump_detaches_like_memcached() {
    let Some((mc, ink)) = pair(&[]) else {
        return;
    };
    for port in [mc.port, ink.port] {
        // an empty dump is END; what was pipelined after it waits for the next read
        let mut c = connect(port);
        let r = request_until(
            &mut c,
            b"lru_crawler metadump hash\r\nversion\r\n",
            b"END\r\n",
        );
        assert_eq!(r, b"END\r\n");
        let r = roundtrip_quiet(&mut c, b"", Duration::from_millis(300));
        assert_eq!(r, b"", "{port}");
        let r = request_until(&mut c, b"mn\r\n", b"MN\r\n");
        assert!(r.starts_with(b"VERSION 1.6.18"), "{port}: {r:?}");
        let mut c = connect(port);
        let r = request_until(&mut c, b"lru_crawler metadump 1\r\n", b"END\r\n");
        assert_eq!(r, b"END\r\n");
    }
}

/// The `stats` lines named, as the server at `port` gives them now.
fn stat_lines(port: u16, names: &[&str]) -> Vec<String> {
    String::from_utf8_lossy(&text(port, b"stats\r\n"))
        .lines()
        .filter(|l| names.iter().any(|n| l.split(' ').nth(1) == Some(*n)))
        .map(String::from)
        .collect()
}

/// A `stats` figure, as the server at `port` gives it now.
fn stat_u64(port: u16, name: &str) -> Option<u64> {
    stat_lines(port, &[name])
        .first()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// A connection to `port` turned into a log watcher (`watch <kinds>`, answered OK).
fn watcher(port: u16, kinds: &str) -> std::net::TcpStream {
    let mut w = connect(port);
    let cmd = if kinds.is_empty() {
        "watch\r\n".to_string()
    } else {
        format!("watch {kinds}\r\n")
    };
    w.write_all(cmd.as_bytes()).unwrap();
    let mut ok = [0u8; 4];
    w.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"OK\r\n");
    w
}

/// What a watcher has been sent, read until it has been quiet for 300 ms.
fn drain(w: &mut std::net::TcpStream) -> String {
    w.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = w.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The lines a `watch <kinds>` watcher is sent while `script` runs on another connection, with
/// what is each server's own masked: timestamps and sequence numbers left out, descriptors
/// written `cfd=N`.
fn logged(port: u16, kinds: &str, script: &[u8]) -> Vec<String> {
    let mut w = watcher(port, kinds);
    text(port, script);
    std::thread::sleep(Duration::from_millis(300));
    drain(&mut w)
        .lines()
        .map(|l| {
            l.split(' ')
                .filter(|f| !f.starts_with("ts=") && !f.starts_with("gid="))
                .map(|f| if f.starts_with("cfd=") { "cfd=N" } else { f })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

#[test]
fn stats_reset_and_gone_items_count_as_memcached() {
    // Found by memcached's own t/stats.t and t/stats-detail.t, run against inkcached.
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    // `stats reset` empties `stats detail dump` too (memcached's stats_prefix_clear)
    let f = differences(
        mc.port,
        ink.port,
        &["stats detail on\r\nset a:{}k 0 0 1\r\nx\r\nget a:{}k\r\ndelete a:{}k\r\nstats reset\r\nstats detail dump\r\nstats detail off\r\n"],
    );
    assert!(f.is_empty(), "{}", f.join("\n"));
    // A lookup that finds its item expired (an absolute time long past, a negative one) or
    // flushed counts get_expired or get_flushed, whatever the command, and not reclaimed (the
    // LRU tail's count); `stats reset` zeroes total_items and the item counters.
    let names = [
        "get_misses",
        "get_expired",
        "get_flushed",
        "delete_misses",
        "total_items",
        "expired_unfetched",
        "reclaimed",
    ];
    let script = b"set old 0 2678400 1\r\nx\r\nget old\r\nset neg 0 -1 1\r\nx\r\ndelete neg\r\nset fl 0 0 1\r\nx\r\nflush_all\r\nget fl\r\n";
    for p in [mc.port, ink.port] {
        text(p, script);
    }
    let before = stat_lines(mc.port, &names);
    assert_eq!(before.len(), names.len(), "{before:?}");
    assert!(
        before.contains(&"STAT get_expired 2".to_string()),
        "{before:?}"
    );
    assert_eq!(stat_lines(ink.port, &names), before);
    for p in [mc.port, ink.port] {
        assert_eq!(
            text(p, b"stats reset\r\nset k 0 0 1\r\nx\r\n"),
            b"RESET\r\nSTORED\r\n"
        );
    }
    let after = stat_lines(mc.port, &names);
    assert!(
        after.contains(&"STAT total_items 1".to_string()),
        "{after:?}"
    );
    assert_eq!(stat_lines(ink.port, &names), after);
}

#[test]
fn a_store_reclaims_dead_items_at_the_lru_tail_as_memcached() {
    // Found by memcached's t/issue_163.t and t/issue_183.t: before it allocates for a store,
    // memcached reclaims expired and flushed items at its LRU tail (up to five), counted as
    // reclaimed, and expired_unfetched when never fetched, in the item's class too. inkcached
    // had only counted them when it needed their room.
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    let names = [
        "get_expired",
        "get_flushed",
        "reclaimed",
        "expired_unfetched",
        "curr_items",
    ];
    // one expired (a negative exptime) and fetched never; then two flushed, one of them
    // fetched. All in one slab class: memcached pulls the tail of the class it allocates in.
    let steps: [&[u8]; 3] = [
        b"set gone 0 -1 1\r\nx\r\nset a 0 0 1\r\nx\r\n",
        b"set b 0 0 1\r\nx\r\nget b\r\nflush_all\r\n",
        b"set c 0 0 1\r\nx\r\n",
    ];
    let mut seen = Vec::new();
    for port in [mc.port, ink.port] {
        let mut after = Vec::new();
        for step in steps {
            text(port, step);
            let items: Vec<String> = String::from_utf8_lossy(&text(port, b"stats items\r\n"))
                .lines()
                .filter(|l| l.contains(":reclaimed ") || l.contains(":expired_unfetched "))
                .map(String::from)
                .collect();
            after.push((stat_lines(port, &names), items));
        }
        seen.push(after);
    }
    let last = &seen[0][2].0;
    assert!(
        last.contains(&"STAT reclaimed 3".to_string()),
        "memcached: {last:?}"
    );
    assert!(
        last.contains(&"STAT expired_unfetched 2".to_string()),
        "memcached: {last:?}"
    );
    assert_eq!(seen[1], seen[0]);
}

#[test]
fn an_incr_that_needs_a_new_item_reclaims_dead_items_at_the_lru_tail_as_memcached() {
    // memcached's incr allocates a new item when the number grows past the old value's room
    // (do_add_delta), and pulls the LRU tail first as a store does; inkcached did so for
    // stores only. "gone" expires while it is the oldest item, then "9" becomes "10".
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    let names = ["reclaimed", "expired_unfetched", "curr_items"];
    for port in [mc.port, ink.port] {
        text(port, b"set gone 0 2 1\r\nx\r\nset n 0 0 1\r\n9\r\n");
    }
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let mut seen = Vec::new();
    for port in [mc.port, ink.port] {
        let before = stat_lines(port, &names);
        assert_eq!(text(port, b"incr n 1\r\n"), b"10\r\n");
        seen.push((before, stat_lines(port, &names)));
    }
    assert!(
        seen[0].1.contains(&"STAT reclaimed 1".to_string())
            && seen[0].0.contains(&"STAT reclaimed 0".to_string()),
        "memcached: {:?}",
        seen[0]
    );
    assert_eq!(seen[1], seen[0]);
}

#[test]
fn stats_shapes_match_memcached() {
    // The general and settings groups: inkcached's names are memcached's, in memcached's order
    // (memcached has more of them, about its own threads and allocator).
    let Some((mc, ink)) = pair(&[]) else {
        return;
    };
    for group in ["stats\r\n", "stats settings\r\n"] {
        let names = |p: u16| -> Vec<String> {
            String::from_utf8_lossy(&text(p, group.as_bytes()))
                .lines()
                .filter_map(|l| l.split(' ').nth(1).map(String::from))
                .collect()
        };
        let (a, b) = (names(mc.port), names(ink.port));
        let ours: Vec<&String> = b.iter().filter(|n| a.contains(n)).collect();
        let theirs: Vec<&String> = a.iter().filter(|n| b.contains(n)).collect();
        assert_eq!(ours, theirs, "{group}: order");
        assert!(
            ours.len() * 10 >= a.len() * 6,
            "{group}: only {} of {:?}",
            ours.len(),
            a
        );
    }
}

#[test]
fn watch_streams_memcached_log_lines() {
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    let script = b"set abc 0 0 2\r\nhi\r\nset x%20y 5 100 3\r\nabc\r\nget abc nope\r\nadd abc 0 0 1\r\nx\r\nappend abc 0 0 1\r\nx\r\ndelete abc\r\n";
    let logs = [mc.port, ink.port].map(|p| logged(p, "fetchers mutations", script));
    assert_eq!(logs[0], logs[1]);
    assert!(logs[0].len() >= 10, "{:?}", logs[0]);
    assert!(
        logs[0].contains(
            &"type=item_store key=x%2520y status=stored cmd=set ttl=100 clsid=1 cfd=N size=3"
                .to_string()
        ),
        "{:?}",
        logs[0]
    );
}

#[test]
fn watch_fetchers_logs_an_item_both_flushed_and_expired_as_flushed() {
    // memcached's do_item_get checks flushed before expired, and logs what it found; inkcached
    // counted such an item as flushed but logged it `status=expired`
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    // a negative exptime: expired as soon as stored; then flushed too
    let script = b"set both 0 -1 1\r\nx\r\nflush_all\r\nget both\r\n";
    let logs = [mc.port, ink.port].map(|p| logged(p, "fetchers", script));
    // the set's own lookup of the key (not_found), then the get's
    assert_eq!(
        logs[0].last().map(String::as_str),
        Some("type=item_get key=both status=flushed clsid=0 cfd=N size=0"),
        "memcached: {:?}",
        logs[0]
    );
    assert_eq!(logs[1], logs[0]);
}

/// inkcached alone, with an 8 KB watcher buffer; a watcher on it that reads nothing yet, and a
/// client connection.
fn small_buffer_watcher() -> (Server, std::net::TcpStream, std::net::TcpStream) {
    let ink = inkcached(&["-o", "watcher_logbuf_size=8"]);
    let w = watcher(ink.port, "");
    let c = connect(ink.port);
    (ink, w, c)
}

#[test]
fn watcher_that_falls_behind_is_told_what_it_skipped() {
    // memcached's t/watcher.t, which waited forever on inkcached: lines that did not fit in a
    // slow watcher's buffer were dropped without the `skipped=N` line memcached sends first.
    // inkcached only: memcached drops lines at its workers' own log buffers too, before they
    // reach the watcher, and then sends no notice (its test calls itself flaky for it).
    let (ink, w, mut c) = small_buffer_watcher();
    let port = ink.port;
    let spacer = "X".repeat(180);
    // far more log lines than the watcher's socket and 8 KB buffer hold while it reads
    // nothing
    for batch in 0..40 {
        let req: String = (0..1000)
            .map(|i| format!("get k{batch}_{i}{spacer}\r\n"))
            .collect();
        text_on(&mut c, req.as_bytes());
    }
    w.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut r = std::io::BufReader::new(w);
    let mut line = String::new();
    let mut seen = false;
    for n in 0..200_000 {
        line.clear();
        if std::io::BufRead::read_line(&mut r, &mut line).unwrap_or(0) == 0 {
            break;
        }
        if line.starts_with("skipped=") {
            seen = true;
            break;
        }
        if n % 100 == 0 {
            // new lines free the notice (memcached sends it before a line that fits)
            text_on(&mut c, b"get foo\r\n");
        }
    }
    assert!(seen, "no skipped= line");
    text_on(&mut c, b"get foob\r\n");
    line.clear();
    std::io::BufRead::read_line(&mut r, &mut line).unwrap();
    assert!(
        line.starts_with("ts=") && line.contains(" type=item_get "),
        "{line:?}"
    );
    let skipped = stat_u64(port, "log_watcher_skipped");
    assert!(skipped.is_some_and(|n| n > 0), "{skipped:?}");
}

#[test]
fn watcher_that_reads_nothing_holds_no_more_than_its_buffer() {
    // memcached's t/watcher.t sends its gets one at a time: between two of them the watcher's
    // worker ran, and moved the bounded buffer's lines into the connection's own output,
    // which grew without bound while the watcher read nothing (nothing was ever skipped)
    let (ink, w, mut c) = small_buffer_watcher();
    let port = ink.port;
    let spacer = "X".repeat(180);
    // ~10 MB of log lines, more than the watcher's socket holds
    for i in 0..40_000 {
        let r = text_on(&mut c, format!("get k{i}{spacer}\r\n").as_bytes());
        assert_eq!(r, b"END\r\n");
    }
    let skipped = stat_u64(port, "log_watcher_skipped");
    assert!(skipped.is_some_and(|n| n > 10_000), "{skipped:?}");
    drop(w);
}

#[test]
fn watch_evictions_logs_each_eviction_as_memcached() {
    // memcached's t/watcher.t waited for a `type=eviction` line that inkcached never wrote
    let Some((mc, ink)) = pair(FLAT) else {
        return;
    };
    let mut firsts = Vec::new();
    for port in [mc.port, ink.port] {
        let w = watcher(port, "evictions");
        let value = "v".repeat(100_000);
        let mut c = connect(port);
        for i in 0..40 {
            let r = text_on(
                &mut c,
                format!("set key{i} 0 0 100000\r\n{value}\r\n").as_bytes(),
            );
            assert_eq!(r, b"STORED\r\n");
        }
        w.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut r = std::io::BufReader::new(w);
        let mut line = String::new();
        std::io::BufRead::read_line(&mut r, &mut line).unwrap();
        // the time, sequence number and last access are each server's own
        let masked: Vec<&str> = line
            .trim_end()
            .split(' ')
            .filter(|f| !f.starts_with("ts=") && !f.starts_with("gid=") && !f.starts_with("la="))
            .collect();
        firsts.push(masked.join(" "));
    }
    assert!(
        firsts[0].starts_with("type=eviction key=key0 fetch=no ttl=-1 "),
        "{firsts:?}"
    );
    assert_eq!(firsts[1], firsts[0]);
}

#[test]
fn watch_connevents_says_why_a_connection_closed() {
    // memcached's t/watcher.t: every close was logged `reason=normal`; memcached says normal
    // only when the client ended it (`quit`, or closing its end), idle_timeout for an idle
    // kick and error otherwise (here: a request that looks like HTTP)
    let Some((mc, ink)) = pair(&["-o", "idle_timeout=1"]) else {
        return;
    };
    let mut logs = Vec::new();
    for port in [mc.port, ink.port] {
        let mut w = watcher(port, "connevents");
        let pause = || std::thread::sleep(Duration::from_millis(300));
        let mut c = connect(port);
        c.write_all(b"quit\r\n").unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        pause();
        drop(connect(port));
        pause();
        let mut c = connect(port);
        c.write_all(b"GET / HTTP/1.1\r\n").unwrap();
        let _ = c.read_to_end(&mut rest);
        pause();
        let mut c = connect(port);
        // memcached checks for idle connections about once a second
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.read_to_end(&mut rest);
        pause();
        let reasons: Vec<String> = drain(&mut w)
            .lines()
            .filter_map(|l| l.split(' ').find(|f| f.starts_with("reason=")))
            .map(String::from)
            .collect();
        logs.push(reasons);
    }
    assert_eq!(
        logs[0],
        [
            "reason=normal",
            "reason=normal",
            "reason=error",
            "reason=idle_timeout"
        ]
    );
    assert_eq!(logs[1], logs[0]);
}

#[test]
fn shutdown_needs_dash_a_and_then_stops_the_server() {
    let Some((mut mc, mut ink)) = pair(&["-A"]) else {
        return;
    };
    for s in [&mut mc, &mut ink] {
        let r = text(s.port, b"shutdown foo\r\nshutdown\r\n");
        // the second shutdown closes at once: the first one's answer is never written
        assert_eq!(r, b"<EOF>");
        let t = std::time::Instant::now();
        loop {
            if let Ok(Some(st)) = s.child.try_wait() {
                assert!(st.success(), "{st:?}");
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "still running");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
