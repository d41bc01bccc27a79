//! `inklab paper --quick` end to end: it sets up its own network namespaces, XDP
//! programs and CPU pinning, so it needs root and 2 CPUs (as CI has). It checks that the run
//! completes and that results.json, results.md and the plots are well-formed; never a speed.

use std::process::Command;

use serde_json::Value;

#[test]
fn paper_quick_completes_with_wellformed_results() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_inklab"))
        .args(["paper", "--quick", "--out"])
        .arg(dir.path())
        .output()
        .expect("running inklab");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "inklab paper --quick failed: {stderr}"
    );

    let text = std::fs::read_to_string(dir.path().join("results.json")).expect("results.json");
    let v: Value = serde_json::from_str(&text).expect("results.json is JSON");
    for k in [
        "meta",
        "workloads",
        "results",
        "ratios",
        "goals",
        "memcaslap",
    ] {
        assert!(v.get(k).is_some(), "results.json has no {k:?}");
    }
    assert_eq!(v["meta"]["quick"], Value::Bool(true));
    for k in [
        "kernel",
        "server_threads",
        "inflight",
        "topology",
        "latency_rates",
    ] {
        assert!(v["meta"].get(k).is_some(), "meta has no {k:?}");
    }
    let names: Vec<&str> = v["workloads"]
        .as_array()
        .expect("workloads array")
        .iter()
        .map(|w| w["name"].as_str().expect("workload name"))
        .collect();
    assert!(
        names.contains(&"target") && names.contains(&"nontarget"),
        "{names:?}"
    );

    let results = v["results"].as_array().expect("results array");
    let find = |wl: &str, setup: &str| {
        results
            .iter()
            .find(|r| r["workload"] == wl && r["setup"] == setup)
            .unwrap_or_else(|| panic!("no result for {wl}/{setup}"))
    };
    let point_keys = [
        "throughput",
        "requests",
        "responses",
        "lost",
        "loss_ratio",
        "server_cpu_busy",
        "server_ns_per_req",
        "capacity_per_core",
        "latency",
    ];
    // The baseline and the echo floor always run.
    for (wl, setup) in [
        ("target", "memcached"),
        ("target", "xdp_echo"),
        ("nontarget", "memcached"),
    ] {
        let r = find(wl, setup);
        assert!(r["error"].is_null(), "{wl}/{setup}: {}", r["error"]);
        for point in ["max", "latency"] {
            let p = &r[point];
            for k in point_keys {
                assert!(p.get(k).is_some(), "{wl}/{setup}/{point} has no {k:?}");
            }
            for k in ["p50_us", "p99_us", "p999_us"] {
                assert!(p["latency"][k].is_number(), "{wl}/{setup}/{point}: no {k}");
            }
        }
        assert!(
            r["max"]["responses"].as_u64().unwrap() > 0,
            "{wl}/{setup}: no answers"
        );
    }
    assert!(
        r_has_offered_rate(find("target", "memcached")),
        "the latency point has an offered rate"
    );
    // With the kernel cache: run (and with kernel counters), or skipped for want of the binary.
    for wl in ["target", "nontarget"] {
        let r = find(wl, "memcached_inkcache");
        if r["skipped"].is_string() {
            testkit::skip(format!("{wl}/memcached_inkcache skipped: {}", r["skipped"]));
            continue;
        }
        assert!(r["error"].is_null(), "{wl}: {}", r["error"]);
        let k = &r["max"]["kernel"];
        for c in ["hits", "misses", "too_big"] {
            assert!(k[c].is_u64(), "{wl}: kernel counters lack {c}: {k}");
        }
        assert!(r["max"]["kernel_hit_ratio"].is_number());
    }
    // The kernel cache learns every key before anything is measured: gets of stored keys, with
    // no write among them, then never miss. (The preload's writes are mostly settled by the
    // quarantine: a single touch of every key right after it left a quarter of the quick run's
    // gets missing.)
    for setup in ["memcached_inkcache", "inkcached_inkcache"] {
        let r = find("target", setup);
        if r["skipped"].is_string() {
            testkit::skip(format!("target/{setup} skipped: {}", r["skipped"]));
            continue;
        }
        let misses = &r["max"]["kernel"]["misses"];
        assert_eq!(
            misses.as_u64(),
            Some(0),
            "target/{setup}: the kernel cache missed {misses} gets in the measured run"
        );
    }
    for g in v["goals"].as_array().expect("goals") {
        for k in ["goal", "target", "measured", "met", "note"] {
            assert!(g.get(k).is_some(), "goal without {k}: {g}");
        }
    }

    let md = std::fs::read_to_string(dir.path().join("results.md")).expect("results.md");
    assert!(
        md.contains("| configuration |") && md.contains("## Goals"),
        "{md}"
    );
    for svg in ["throughput.svg", "cpu_per_request.svg", "latency.svg"] {
        let s = std::fs::read_to_string(dir.path().join(svg)).expect(svg);
        assert!(s.contains("<svg"), "{svg} is not an SVG");
    }
}

fn r_has_offered_rate(r: &Value) -> bool {
    r["latency"]["offered_rate"]
        .as_f64()
        .is_some_and(|x| x > 0.0)
}
