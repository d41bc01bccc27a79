//! The sampler and the CLI (JSON output, errors) against a real memcached.

mod common;

use std::process::Command;
use std::time::Duration;

use common::Memcached;
use inkbench::sample::{write_outputs, Outcome};
use inkbench::{Proto, SampleConfig};

const BIN: &str = env!("CARGO_BIN_EXE_inkbench");

#[test]
fn sampler_records_every_sample_and_plots() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    for proto in [Proto::Udp, Proto::Tcp] {
        let mut c = SampleConfig::new(mc.addr);
        c.proto = proto;
        c.interval = Duration::from_millis(2);
        c.duration = Duration::from_millis(400);
        c.keys = 50;
        c.preload = true;
        let r = inkbench::sample(&c).unwrap();
        // The schedule is absolute: exactly duration / interval samples.
        assert_eq!(r.count, 200, "{proto}");
        assert_eq!(r.samples.len(), 200);
        assert_eq!(r.hits, 200, "{proto}: all keys preloaded");
        for (i, s) in r.samples.iter().enumerate() {
            assert_eq!(s.seq, i as u64);
            assert_eq!(s.result, Outcome::Hit);
            assert!((s.scheduled_us - i as f64 * 2000.0).abs() < 1.0);
            assert!(s.send_us >= s.scheduled_us);
            assert!(s.recv_us.unwrap() >= s.send_us);
        }
        let dir =
            std::env::temp_dir().join(format!("inkbench-sample-{}-{proto}", std::process::id()));
        let files = write_outputs(&r, &dir).unwrap();
        let csv = std::fs::read_to_string(&files[0]).unwrap();
        assert_eq!(csv.lines().count(), 201);
        assert!(csv.starts_with("seq,worker,key,scheduled_us,send_us,recv_us,latency_us,result"));
        let svg = std::fs::read_to_string(&files[2]).unwrap();
        assert!(svg.contains("<svg") && svg.contains("<circle"));
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn sampler_timeouts_on_silent_port() {
    let port = common::free_port("127.0.0.1");
    let mut c = SampleConfig::new(format!("127.0.0.1:{port}").parse().unwrap());
    c.interval = Duration::from_millis(10);
    c.duration = Duration::from_millis(200);
    c.timeout = Duration::from_millis(30);
    c.workers = 2;
    let r = inkbench::sample(&c).unwrap();
    assert_eq!(r.count, 20);
    assert_eq!(r.timeouts, 20);
    assert!(r.samples.iter().all(|s| s.latency_us.is_none()));
}

#[test]
fn sampler_with_background_load() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let mut c = SampleConfig::new(mc.addr);
    c.duration = Duration::from_millis(300);
    c.keys = 100;
    let mut l = inkbench::RunConfig::new(mc.addr);
    l.keys = 100;
    l.rate = Some(2000.0);
    l.warmup = Duration::ZERO;
    l.duration = Duration::from_secs(20); // stopped when sampling ends
    c.with_load = Some(l);
    let t0 = std::time::Instant::now();
    let r = inkbench::sample(&c).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(r.count, 300);
    let load = r.load.expect("load results");
    assert!(load.counters.requests > 100, "{:?}", load.counters);
}

#[test]
fn cli_json_has_documented_fields() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let out = Command::new(BIN)
        .args([
            "run",
            "--server",
            &mc.addr.to_string(),
            "--duration",
            "300ms",
        ])
        .args(["--warmup", "100ms", "--keys", "100", "--preload", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.trim().lines().count(),
        1,
        "one JSON object on one line"
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    for f in [
        "duration_s",
        "throughput",
        "send_rate",
        "hit_ratio",
        "requests",
        "responses",
        "gets",
        "sets",
        "get_keys",
        "hits",
        "misses",
        "errors",
        "lost",
        "unmatched",
        "mismatched",
        "send_errors",
        "conn_errors",
        "preloaded",
    ] {
        assert!(v[f].is_number(), "field {f} missing in {v}");
    }
    for f in [
        "count", "min_us", "mean_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us",
    ] {
        assert!(v["latency"][f].is_number(), "latency.{f} missing in {v}");
    }
    for f in ["cmd_get", "cmd_set", "get_hits", "get_misses"] {
        assert!(v["server"][f].is_number(), "server.{f} missing in {v}");
    }
    assert_eq!(v["config"]["proto"], "udp");
    assert_eq!(v["config"]["server"], mc.addr.to_string());
    assert!(v["responses"].as_u64().unwrap() > 0);
    assert_eq!(v["lost"], 0);
    // The JSON reads back into the library's type.
    let r: inkbench::RunResults = serde_json::from_value(v).unwrap();
    assert_eq!(r.config.keys, 100);
}

#[test]
fn cli_table_and_errors() {
    testkit::require_tool!(common::MEMCACHED);
    let mc = Memcached::start();
    let out = Command::new(BIN)
        .args(["run", "--server", &mc.addr.to_string(), "--proto", "tcp"])
        .args(["--duration", "200ms", "--warmup", "0s", "--pipeline", "2"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let t = String::from_utf8(out.stdout).unwrap();
    for w in ["throughput", "hits", "misses", "errors", "lost", "p99.9"] {
        assert!(t.contains(w), "{w} missing in\n{t}");
    }
    assert!(
        out.stderr.is_empty(),
        "no progress bar when stderr is not a terminal"
    );

    // A TCP run against a closed port: one clear line, non-zero exit.
    let port = common::free_port("127.0.0.1");
    let out = Command::new(BIN)
        .args([
            "run",
            "--server",
            &format!("127.0.0.1:{port}"),
            "--proto",
            "tcp",
        ])
        .args(["--duration", "200ms"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("inkbench: error:") && err.contains("connecting"),
        "{err}"
    );

    // Invalid settings are refused before sending anything.
    let out = Command::new(BIN)
        .args(["run", "--server", "127.0.0.1:1", "--get-ratio", "1.5"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("get ratio"));
}
