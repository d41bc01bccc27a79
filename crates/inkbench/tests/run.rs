//! `run` against a real memcached (and misbehaving proxies in front of it).

mod common;

use std::time::Duration;

use common::{Memcached, Misbehave, UdpProxy};
use inkbench::{run, Proto, RunConfig, ValueSize};

fn base(server: std::net::SocketAddr) -> RunConfig {
    let mut c = RunConfig::new(server);
    c.duration = Duration::from_millis(800);
    c.warmup = Duration::from_millis(100);
    c.keys = 500;
    c.inflight = Some(8);
    c
}

#[test]
fn udp_closed_loop_all_replies_match() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = base(mc.addr);
    c.preload = true;
    c.get_ratio = 0.8;
    let r = run(&c).unwrap();
    let k = r.counters;
    assert!(k.requests > 100, "{k:?}");
    assert_eq!(k.responses, k.requests, "{k:?}");
    assert_eq!(k.gets + k.sets, k.requests);
    assert_eq!((k.lost, k.unmatched, k.mismatched, k.errors), (0, 0, 0, 0));
    assert_eq!(k.hits, k.get_keys, "preloaded keys must all hit");
    assert_eq!(k.misses, 0);
    assert!(k.sets > 0 && k.gets > k.sets);
    assert_eq!(r.latency.count, k.responses);
    assert!(r.latency.p50_us > 0.0 && r.latency.p50_us <= r.latency.max_us);
    assert_eq!(r.preloaded, 500);
    let s = r.server.expect("server stats");
    assert!(s.get_hits >= k.hits, "{s:?}");
}

#[test]
fn udp_without_preload_counts_misses() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = base(mc.addr);
    c.get_ratio = 1.0;
    c.keys = 1_000_000;
    let r = run(&c).unwrap();
    let k = r.counters;
    assert!(k.gets > 0);
    assert_eq!(k.hits, 0);
    assert_eq!(k.misses, k.get_keys);
    assert_eq!(k.lost + k.errors + k.unmatched, 0);
}

#[test]
fn udp_multiget_multi_datagram_values_reassembled() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = base(mc.addr);
    c.preload = true;
    c.keys = 100;
    c.get_ratio = 1.0;
    c.multiget = 4;
    c.value_size = ValueSize::Uniform {
        min: 1000,
        max: 4000,
    };
    c.connections = 2;
    let r = run(&c).unwrap();
    let k = r.counters;
    assert!(k.gets > 20, "{k:?}");
    assert_eq!(k.get_keys, k.gets * 4);
    assert_eq!(k.hits, k.get_keys, "{k:?}");
    assert_eq!((k.errors, k.mismatched, k.unmatched), (0, 0, 0), "{k:?}");
}

#[test]
fn tcp_pipelined_multiget() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = base(mc.addr);
    c.proto = Proto::Tcp;
    c.preload = true;
    c.connections = 3;
    c.pipeline = 4;
    c.inflight = None;
    c.multiget = 3;
    c.threads = 2;
    c.value_size = ValueSize::Uniform { min: 10, max: 3000 };
    let r = run(&c).unwrap();
    let k = r.counters;
    assert!(k.requests > 100, "{k:?}");
    assert_eq!(k.responses, k.requests);
    assert_eq!(k.hits, k.get_keys);
    assert_eq!(
        (k.lost, k.errors, k.mismatched, k.conn_errors),
        (0, 0, 0, 0)
    );
}

#[test]
fn stray_datagrams_counted_as_unmatched_not_answers() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let proxy = UdpProxy::start(mc.addr, Misbehave::InjectStrays(50));
    let mut c = base(proxy.addr);
    c.admin = Some(mc.addr);
    c.preload = true;
    c.get_ratio = 1.0;
    c.warmup = Duration::ZERO;
    let r = run(&c).unwrap();
    let k = r.counters;
    assert_eq!(
        proxy.injected.load(std::sync::atomic::Ordering::Relaxed),
        100
    );
    assert_eq!(k.unmatched, 100, "{k:?}");
    assert_eq!(k.responses, k.requests, "{k:?}");
    assert_eq!(
        k.hits, k.get_keys,
        "a stray must not count as an answer: {k:?}"
    );
    assert_eq!((k.errors, k.lost, k.mismatched), (0, 0, 0), "{k:?}");
    assert_eq!(r.latency.count, k.responses);
}

#[test]
fn udp_losses_counted() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let proxy = UdpProxy::start(mc.addr, Misbehave::DropEveryOther);
    let mut c = base(proxy.addr);
    c.admin = Some(mc.addr);
    // generous: a reply later than the timeout would count as unmatched on a loaded machine;
    // lost requests hold their slot for the whole timeout, so run longer with more in flight
    c.timeout = Duration::from_millis(300);
    c.duration = Duration::from_secs(3);
    c.inflight = Some(32);
    c.warmup = Duration::ZERO;
    let r = run(&c).unwrap();
    let k = r.counters;
    assert!(k.requests > 50, "{k:?}");
    assert_eq!(k.responses + k.lost, k.requests, "{k:?}");
    let frac = k.lost as f64 / k.requests as f64;
    assert!((0.4..=0.6).contains(&frac), "lost {frac}: {k:?}");
    assert_eq!(k.unmatched, 0, "{k:?}");
}

#[test]
fn udp_closed_port_all_lost() {
    let port = common::free_port("127.0.0.1");
    let mut c = base(format!("127.0.0.1:{port}").parse().unwrap());
    c.timeout = Duration::from_millis(50);
    c.duration = Duration::from_millis(400);
    c.server_stats = false;
    let r = run(&c).unwrap();
    let k = r.counters;
    assert!(k.requests > 0, "{k:?}");
    assert_eq!(k.responses, 0);
    assert_eq!(k.lost, k.requests, "{k:?}");
    assert_eq!(r.throughput, 0.0);
    assert!(r.server.is_none());
}

#[test]
fn open_loop_holds_its_rate() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    for proto in [Proto::Udp, Proto::Tcp] {
        let mut c = base(mc.addr);
        c.proto = proto;
        c.rate = Some(2000.0);
        c.duration = Duration::from_secs(1);
        c.warmup = Duration::from_millis(200);
        let r = run(&c).unwrap();
        let k = r.counters;
        // The schedule is absolute: 2000 requests fall in the 1 s window whatever the speed.
        assert!(
            (1800..=2200).contains(&k.requests),
            "{proto}: {} sent for 2000 scheduled",
            k.requests
        );
        assert!((r.send_rate - 2000.0).abs() < 200.0);
        assert_eq!(k.responses + k.lost, k.requests);
    }
}

#[test]
fn open_loop_two_threads() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = base(mc.addr);
    c.rate = Some(3000.0);
    c.threads = 2;
    c.connections = 2;
    c.duration = Duration::from_secs(1);
    let r = run(&c).unwrap();
    assert!(
        (2700..=3300).contains(&r.counters.requests),
        "{:?}",
        r.counters
    );
}

#[test]
fn ipv6_udp_and_tcp() {
    testkit::require_tool!(common::MEMCACHED);
    testkit::skip_unless!(
        std::net::UdpSocket::bind("[::1]:0").is_ok(),
        "no IPv6 loopback here"
    );
    let mc = Memcached::start_on("::1");
    for proto in [Proto::Udp, Proto::Tcp] {
        let mut c = base(mc.addr);
        c.proto = proto;
        c.preload = true;
        let r = run(&c).unwrap();
        let k = r.counters;
        assert!(k.responses > 50, "{proto}: {k:?}");
        assert_eq!(k.hits, k.get_keys);
        assert_eq!(k.lost + k.errors + k.unmatched, 0);
    }
}

#[test]
fn stop_ends_the_run_early() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = base(mc.addr);
    c.duration = Duration::from_secs(30);
    c.warmup = Duration::ZERO;
    let ctl = inkbench::RunControl::new();
    let t0 = std::time::Instant::now();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            ctl.stop();
        });
        inkbench::run_with(&c, &ctl).unwrap()
    });
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(r.duration_s < 5.0, "{}", r.duration_s);
    assert!(r.counters.responses > 0);
    assert!(ctl.completed.load(std::sync::atomic::Ordering::Relaxed) > 0);
}
