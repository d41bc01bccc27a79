//! Operating inkcache: however it is started (`ip netns exec`, `--netns`), with or without its
//! pins; its Prometheus metrics (parsed by the Prometheus project's own Python parser); `top`.
mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `inkcache ARGS` run through `ip netns exec` in the rig's server namespace.
fn via_ip_netns_exec(rig: &Rig, args: &[&str]) -> Output {
    rig.pair
        .server
        .cmd(bin())
        .args(args)
        .output()
        .expect("running ip netns exec inkcache")
}

/// `inkcache ARGS` run in the host's network namespace.
fn on_host(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("running inkcache")
}

fn status_rows(out: &Output) -> Vec<Value> {
    serde_json::from_str::<Value>(&ok(out, "status"))
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn tc_filters(rig: &Rig, at: &str) -> String {
    let out = Command::new("tc")
        .args(["-n", &rig.pair.server.name, "filter", "show", "dev"])
        .args([&rig.pair.srv_if, at])
        .output()
        .expect("tc");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn link(rig: &Rig) -> String {
    let out = Command::new("ip")
        .args([
            "-n",
            &rig.pair.server.name,
            "link",
            "show",
            "dev",
            &rig.pair.srv_if,
        ])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Caches `k` and checks the kernel answers it: two UDP gets, the second a hit (by `stats`).
fn kernel_hit(rig: &Rig, stats: impl Fn() -> Value, k: &str) {
    set(rig, k, 0, b"value");
    let req = format!("get {k}\r\n");
    rig.udp_get(1, req.as_bytes()).expect("reply");
    let before = stats()["hits"].as_u64().unwrap();
    let reply = rig.udp_get(2, req.as_bytes()).expect("reply");
    assert_eq!(values(&reply)[0].2, b"value");
    assert_eq!(
        stats()["hits"].as_u64().unwrap(),
        before + 1,
        "not a kernel hit"
    );
}

/// The case an operator met: attached through `ip netns exec`, the pins lived in the command's
/// private bpffs and vanished, so status, stats and detach said "not attached" while XDP served.
#[test]
fn ip_netns_exec_attach_status_stats_detach_leave_nothing() {
    let mut rig = Rig::new().unwrap();
    let ns = rig.pair.server.name.clone();
    let iface = rig.pair.srv_if.clone();
    ok(
        &via_ip_netns_exec(
            &rig,
            &[
                "attach",
                "--iface",
                &iface,
                "--cache-mb",
                "8",
                "--quarantine-ms",
                QUARANTINE_MS,
            ],
        ),
        "attach",
    );
    rig.attached = true; // detached by the rig (through --netns) if the test fails

    // status through ip netns exec: exactly this attachment, checked on the interface
    let rows = status_rows(&via_ip_netns_exec(&rig, &["status", "--json"]));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["iface"], iface.as_str());
    assert_eq!(rows[0]["netns"], ns.as_str());
    assert_eq!(rows[0]["xdp_attached"], true);
    assert_eq!(rows[0]["hooks_attached"], true);
    // the same one through --netns; none of it on the host, where --all-netns shows it
    let rows = status_rows(&rig.inkcache(&["status", "--json"]));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0]["pin_dir"]
        .as_str()
        .unwrap()
        .ends_with(&format!("{iface}@{ns}")));
    let host = status_rows(&on_host(&["status", "--json"]));
    assert!(host.iter().all(|r| r["netns"] != ns.as_str()), "{host:?}");
    let all = status_rows(&on_host(&["status", "--json", "--all-netns"]));
    let mine: Vec<_> = all.iter().filter(|r| r["netns"] == ns.as_str()).collect();
    assert_eq!(mine.len(), 1, "{all:?}");
    assert_eq!(mine[0]["checked"], true);
    assert_eq!(mine[0]["xdp_attached"], true);

    // stats through ip netns exec count the kernel's answers
    let stats = || -> Value {
        serde_json::from_str(&ok(
            &via_ip_netns_exec(&rig, &["stats", "--iface", &iface, "--json"]),
            "stats",
        ))
        .unwrap()
    };
    kernel_hit(&rig, stats, "nsk");

    ok(
        &via_ip_netns_exec(&rig, &["detach", "--iface", &iface]),
        "detach",
    );
    rig.attached = false;
    assert!(
        !link(&rig).contains("xdp"),
        "XDP left behind: {}",
        link(&rig)
    );
    for at in ["ingress", "egress"] {
        assert!(
            !tc_filters(&rig, at).contains("inkcache"),
            "TC {at} left behind"
        );
    }
    let dir = std::path::Path::new("/sys/fs/bpf/inkcache").join(format!("{iface}@{ns}"));
    assert!(!dir.exists(), "pins left behind");
    assert!(status_rows(&via_ip_netns_exec(&rig, &["status", "--json"])).is_empty());
}

/// Pins removed behind inkcache's back: detach still finds and removes its programs (and only
/// its programs); with nothing of inkcache's on an interface it says "not attached".
#[test]
fn detach_removes_our_programs_when_the_pins_are_gone() {
    // clsact: a filter (not a tcx link) outlives its pins
    let mut rig = Rig::attached(&["--tc-mode", "clsact"]).unwrap();
    let ns = rig.pair.server.name.clone();
    let iface = rig.pair.srv_if.clone();
    // somebody else's filter on the same clsact qdisc
    testkit::sh(Command::new("tc").args([
        "-n", &ns, "filter", "add", "dev", &iface, "ingress", "pref", "1", "u32", "match", "u32",
        "0", "0", "flowid", "1:1",
    ]))
    .unwrap();
    let dir = std::path::Path::new("/sys/fs/bpf/inkcache").join(format!("{iface}@{ns}"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(link(&rig).contains("xdp"));
    assert!(rig.inkcache(&["stats", "--iface", &iface]).status.code() == Some(1));

    let out = ok(&rig.inkcache(&["detach", "--iface", &iface]), "detach");
    rig.attached = false;
    assert!(out.contains("pins were gone"), "{out}");
    for what in ["XDP program", "TC ingress program"] {
        assert!(out.contains(what), "{what} not removed: {out}");
    }
    assert!(
        !link(&rig).contains("xdp"),
        "XDP left behind: {}",
        link(&rig)
    );
    assert!(!tc_filters(&rig, "egress").contains("inkcache"));
    let ingress = tc_filters(&rig, "ingress");
    assert!(!ingress.contains("inkcache"), "{ingress}");
    assert!(
        ingress.contains("u32"),
        "somebody else's filter went: {ingress}"
    );

    let again = rig.inkcache(&["detach", "--iface", &iface]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not attached"));
    // the client's pass-through XDP program (veth-peer) is not detach's to remove
    let peer = Command::new(bin())
        .args([
            "--netns",
            &rig.pair.client.name,
            "detach",
            "--iface",
            &rig.pair.cli_if,
        ])
        .output()
        .unwrap();
    assert!(!peer.status.success());
    let cli_link = testkit::sh(Command::new("ip").args([
        "-n",
        &rig.pair.client.name,
        "link",
        "show",
        &rig.pair.cli_if,
    ]))
    .unwrap();
    assert!(String::from_utf8_lossy(&cli_link.stdout).contains("xdp"));
}

/// A network namespace without a name (a container's): its attachments are named by the
/// namespace's cookie, so they cannot be mistaken for the host's interface of the same name.
#[test]
fn unnamed_netns_attachment_is_kept_apart() {
    let script = format!(
        "set -e; ip link set lo up; B={bin}; \
         $B attach --iface lo --cache-mb 4 >/dev/null; \
         $B status --json; echo ===; $B stats --iface lo --json; echo ===; \
         $B detach --iface lo; ls /sys/fs/bpf/inkcache",
        bin = bin()
    );
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", &script])
        .output()
        .expect("unshare");
    let text = ok(&out, "attach/status/stats/detach in an unnamed namespace");
    let parts: Vec<&str> = text.split("===\n").collect();
    let rows: Vec<Value> = serde_json::from_str(parts[0]).unwrap();
    assert_eq!(rows.len(), 1, "{text}");
    let label = rows[0]["netns"].as_str().unwrap().to_string();
    assert!(label.starts_with("netns-"), "{label}");
    assert!(rows[0]["pin_dir"]
        .as_str()
        .unwrap()
        .ends_with(&format!("/lo@{label}")));
    assert_eq!(rows[0]["xdp_attached"], true);
    let _: Value = serde_json::from_str(parts[1].trim()).unwrap();
    assert!(
        !parts[2].contains(&format!("lo@{label}")),
        "pins left: {text}"
    );
    // the host's own view never listed it
    let host = status_rows(&on_host(&["status", "--json"]));
    assert!(host.iter().all(|r| r["netns"].as_str() != Some(&label)));
}

/// Runs the Prometheus project's text-format parser (python3-prometheus-client) over `text`:
/// {family: {"type", "help", "samples": [[name, labels, value]]}}. Fails if it does not parse.
fn prometheus_parse(text: &str) -> Value {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = {"type": f.type, "help": f.documentation,
                   "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
"#;
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("No module named 'prometheus_client'") {
        testkit::skip("python3-prometheus-client missing (make deps installs it)");
        return Value::Null;
    }
    assert!(
        out.status.success(),
        "not valid exposition text: {stderr}\n{text}"
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of `name`'s sample whose labels include all of `labels`.
fn sample(m: &Value, family: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m[family]["samples"].as_array()?.iter().find_map(|s| {
        let l = &s[1];
        (s[0] == name && labels.iter().all(|(k, v)| l[*k] == *v)).then(|| s[2].as_f64().unwrap())
    })
}

#[test]
fn metrics_export_every_counter_fill_and_server_stats() {
    let rig = Rig::attached(&[]).unwrap();
    let ns = rig.pair.server.name.clone();
    let iface = rig.pair.srv_if.clone();
    kernel_hit(&rig, || rig.stats(), "mk");
    let server = format!("{}:{PORT}", testkit::SRV_V4);
    let text = ok(
        &rig.inkcache(&["metrics", "--server", &server, "--server", "198.18.0.1:1"]),
        "metrics",
    );
    let m = prometheus_parse(&text);
    if m.is_null() {
        return;
    }
    let me = [("iface", iface.as_str()), ("netns", ns.as_str())];
    // every counter `stats` has, with its help text, as a counter family
    let stats = rig.stats();
    for (name, v) in stats.as_object().unwrap() {
        let fam = format!("inkcache_{name}");
        assert_eq!(m[&fam]["type"], "counter", "{fam} missing: {text}");
        assert!(
            m[&fam]["help"].as_str().unwrap().len() > 10,
            "{fam} has no help"
        );
        let got = sample(&m, &fam, &format!("{fam}_total"), &me).unwrap();
        // counters only grow between the two reads
        assert!(got <= v.as_u64().unwrap() as f64, "{fam}: {got} > {v}");
    }
    assert!(sample(&m, "inkcache_hits", "inkcache_hits_total", &me).unwrap() >= 1.0);
    assert!(sample(&m, "inkcache_current_items", "inkcache_current_items", &me).unwrap() >= 1.0);
    assert!(sample(&m, "inkcache_limit_bytes", "inkcache_limit_bytes", &me).unwrap() > 1e6);
    let xdp = [("iface", iface.as_str()), ("program", "xdp")];
    assert_eq!(
        sample(&m, "inkcache_attached", "inkcache_attached", &xdp),
        Some(1.0)
    );
    // the server, read as memcached_exporter reads it; the port nobody listens on is down
    let srv = [("server", server.as_str())];
    assert_eq!(sample(&m, "memcached_up", "memcached_up", &srv), Some(1.0));
    let dead = [("server", "198.18.0.1:1")];
    assert_eq!(sample(&m, "memcached_up", "memcached_up", &dead), Some(0.0));
    let get_hits = [
        ("server", server.as_str()),
        ("command", "get"),
        ("status", "hit"),
    ];
    assert!(
        sample(
            &m,
            "memcached_commands",
            "memcached_commands_total",
            &get_hits
        )
        .unwrap()
            >= 1.0
    );
    assert!(
        sample(
            &m,
            "memcached_current_items",
            "memcached_current_items",
            &srv
        )
        .unwrap()
            >= 1.0
    );
    assert!(sample(&m, "memcached_limit_bytes", "memcached_limit_bytes", &srv).unwrap() > 1e6);
    assert_eq!(m["memcached_connections"]["type"], "counter");

    // the Grafana dashboard asks only for what is exported
    let dash = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/grafana/inkcache.json"
    ))
    .unwrap();
    let dash: Value = serde_json::from_str(&dash).unwrap();
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() > 10);
    for e in &exprs {
        for (i, _) in e
            .match_indices("inkcache_")
            .chain(e.match_indices("memcached_"))
        {
            let name: String = e[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "the dashboard uses {name}, which is not exported"
            );
        }
    }

    // the same over HTTP, from the server namespace
    let port = 19150 + (std::process::id() % 500) as u16;
    let listen = format!("127.0.0.1:{port}");
    let mut child = Command::new(bin())
        .args([
            "--netns", &ns, "metrics", "--listen", &listen, "--server", &server,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = listen.parse().unwrap();
    let body = rig.pair.server.run(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut s) = TcpStream::connect(addr) {
                s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
                let mut r = String::new();
                s.read_to_string(&mut r).unwrap();
                return r;
            }
            assert!(Instant::now() < deadline, "metrics endpoint never listened");
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        body.starts_with("HTTP/1.1 200") || body.starts_with("HTTP/1.0 200"),
        "{body}"
    );
    assert!(body.contains("text/plain; version=0.0.4"), "{body}");
    let (_, text) = body.split_once("\r\n\r\n").unwrap();
    let m = prometheus_parse(text);
    assert!(sample(&m, "inkcache_hits", "inkcache_hits_total", &me).unwrap() >= 1.0);
    assert_eq!(sample(&m, "memcached_up", "memcached_up", &srv), Some(1.0));
}

/// inkcached's `stats` exported the same way (no change to the server).
#[test]
fn metrics_read_inkcached_stats() {
    let inkcached = testkit::workspace_bin("inkcached");
    if !inkcached.exists() {
        testkit::skip(format!("{} not built (make build)", inkcached.display()));
        return;
    }
    let ns = testkit::Netns::new("iko").unwrap();
    let mut child = ns
        .cmd(&inkcached)
        .args(["-p", "11311", "-U", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let addr: SocketAddr = "127.0.0.1:11311".parse().unwrap();
    while !ns.run(|| TcpStream::connect(addr).is_ok()) {
        assert!(Instant::now() < deadline, "inkcached did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    ns.run(|| {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"set a 0 0 1\r\nx\r\nget a\r\n").unwrap();
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf).unwrap();
    });
    let spec = format!("127.0.0.1:11311@{}", ns.name);
    let out = Command::new(bin())
        .args(["metrics", "--server", &spec])
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let m = prometheus_parse(&ok(&out, "metrics"));
    if m.is_null() {
        return;
    }
    let srv = [("server", "127.0.0.1:11311"), ("netns", ns.name.as_str())];
    assert_eq!(sample(&m, "memcached_up", "memcached_up", &srv), Some(1.0));
    assert!(
        sample(
            &m,
            "memcached_current_items",
            "memcached_current_items",
            &srv
        )
        .unwrap()
            >= 1.0
    );
    assert!(
        sample(
            &m,
            "memcached_uptime_seconds",
            "memcached_uptime_seconds_total",
            &srv
        )
        .is_some()
            || sample(
                &m,
                "memcached_uptime_seconds",
                "memcached_uptime_seconds",
                &srv
            )
            .is_some()
    );
}

/// `inkcache top --batch`: frames with per-second hits, hit ratio and invalidations by cause.
#[test]
fn top_shows_rates() {
    let rig = Rig::attached(&[]).unwrap();
    let iface = rig.pair.srv_if.clone();
    set(&rig, "tk", 0, b"v");
    rig.udp_get(1, b"get tk\r\n").expect("reply"); // fills
    let top = rig
        .pair
        .server
        .cmd(bin())
        .args([
            "top",
            "--iface",
            &iface,
            "--interval",
            "0.4",
            "--count",
            "4",
            "--batch",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(1800);
    let mut id = 10u16;
    while Instant::now() < deadline {
        rig.udp_get(id, b"get tk\r\n").expect("reply");
        id = id.wrapping_add(1);
        if id & 15 == 0 {
            set_now(&rig, "other", 0, b"x"); // a command invalidation
        }
    }
    let out = top.wait_with_output().unwrap();
    let text = ok(&out, "top");
    let frames: Vec<&str> = text.split("--- ").filter(|f| !f.is_empty()).collect();
    assert_eq!(frames.len(), 4, "{text}");
    let mut saw = (false, false);
    for f in frames {
        assert!(f.contains("HITS/s") && f.contains("REFUSED/s"), "{f}");
        let row: Vec<&str> = f
            .lines()
            .find(|l| l.starts_with(&iface))
            .unwrap_or_else(|| panic!("no row for {iface}: {f}"))
            .split_whitespace()
            .collect();
        let hits: f64 = row[1].parse().unwrap();
        let command: f64 = row[6].parse().unwrap();
        if hits > 0.0 {
            saw.0 = true;
            let ratio: f64 = row[3].parse().unwrap();
            assert!(ratio > 50.0 && ratio <= 100.0, "{f}");
        }
        saw.1 |= command > 0.0;
    }
    assert!(saw.0, "no hits per second shown: {text}");
    assert!(saw.1, "no command invalidations shown: {text}");
}
