//! `inklab paper --quick` end to end: it sets up its own network namespaces, XDP
//! programs and CPU pinning, so it needs root and 2 CPUs (as CI has). It checks that the run
//! completes and that results.json, results.md and the plots are well-formed; never a speed.
//! It also runs two interleaved capacity rounds (`--rounds 2`) and checks that the goals are
//! derived from their median (with costs set by the test, through `--from-json`).

use std::process::Command;

use serde_json::Value;

#[test]
fn paper_quick_completes_with_wellformed_results() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_inklab"))
        .args(["paper", "--quick", "--rounds", "2", "--out"])
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
    rounds_measured_and_derived(&v, dir.path());
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

/// Every configuration of `target` that ran in the main pass ran once in each of the two rounds,
/// with the kernel cache missing nothing (its servers were stopped between their turns, and
/// nothing they had learnt was lost); then the goals follow the rounds' median ratios.
fn rounds_measured_and_derived(v: &Value, dir: &std::path::Path) {
    assert!(v["rounds_error"].is_null(), "rounds: {}", v["rounds_error"]);
    assert_eq!(v["meta"]["rounds"], 2);
    let rounds = v["rounds"].as_array().expect("rounds array");
    let ran: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["workload"] == "target" && r["max"].is_object())
        .map(|r| r["setup"].as_str().unwrap())
        .collect();
    assert!(
        ran.contains(&"xdp_echo") && ran.contains(&"memcached"),
        "{ran:?}"
    );
    assert_eq!(
        rounds.len(),
        2 * ran.len(),
        "one point per configuration and round"
    );
    for round in 1..=2u64 {
        for setup in &ran {
            let p = rounds
                .iter()
                .find(|r| r["round"] == round && r["setup"] == *setup)
                .unwrap_or_else(|| panic!("round {round} has no {setup}"));
            let pt = &p["point"];
            assert!(
                pt["responses"].as_u64().unwrap() > 0,
                "round {round} {setup}: no answers"
            );
            assert!(
                pt["server_ns_per_req"].as_f64().unwrap() > 0.0,
                "{round} {setup}"
            );
            if setup.ends_with("inkcache") {
                assert_eq!(
                    pt["kernel"]["misses"].as_u64(),
                    Some(0),
                    "round {round} {setup}: the kernel cache missed"
                );
            }
            // the configurations answered in XDP run open loop at one rate too; the servers not
            let at = &p["at_rate"];
            if *setup == "xdp_echo" || setup.ends_with("_inkcache") {
                assert!(
                    at["responses"].as_u64().unwrap() > 0,
                    "{round} {setup}: {at}"
                );
                assert!(at["offered_rate"].as_f64().unwrap() >= 1000.0, "{at}");
            } else {
                assert!(at.is_null(), "{round} {setup}: {at}");
            }
        }
    }
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap();
    assert!(md.contains("## Capacity in interleaved rounds"), "{md}");
    if !ran.contains(&"memcached_inkcache") {
        testkit::skip("target/memcached_inkcache did not run: no rounds to derive goals from");
        return;
    }

    // Costs chosen here: memcached+inkcache at 0.8 and 1.0 of the echo floor, 4x and 8x
    // memcached: the medians are 0.9 and 6; at the equal rate, 1,100 against the echo's 1,000.
    let mut doctored = v.clone();
    let cost = |round: u64, setup: &str| match (round, setup) {
        (1, "xdp_echo") | (2, "xdp_echo") | (2, "memcached_inkcache") => 1000.0,
        (1, "memcached_inkcache") => 1250.0,
        (1, "memcached") => 5000.0,
        (2, "memcached") => 8000.0,
        _ => 3000.0,
    };
    for r in doctored["rounds"].as_array_mut().unwrap() {
        let c = cost(r["round"].as_u64().unwrap(), r["setup"].as_str().unwrap());
        r["point"]["server_ns_per_req"] = c.into();
        r["point"]["attributed_ns_per_req"] = c.into();
        let at = if r["setup"] == "xdp_echo" {
            1000.0
        } else {
            1100.0
        };
        if r["at_rate"].is_object() {
            r["at_rate"]["server_ns_per_req"] = at.into();
            r["at_rate"]["attributed_ns_per_req"] = at.into();
        }
    }
    let w = rederive(&doctored, dir, "rederived");
    let close = |x: &Value, want: f64| x.as_f64().is_some_and(|x| (x - want).abs() < 1e-9);
    let ratio = |k: &str| &w["ratios"][k];
    assert!(close(
        ratio("target.capacity_rounds_median.memcachedinkcache/xdpecho"),
        0.9
    ));
    assert!(close(
        ratio("target.capacity_rounds_min.memcachedinkcache/xdpecho"),
        0.8
    ));
    assert!(close(
        ratio("target.capacity_rounds_max.memcachedinkcache/xdpecho"),
        1.0
    ));
    assert!(close(
        ratio("target.capacity_rounds_median.memcachedinkcache/memcached"),
        6.0
    ));
    let eq = "target.capacity_equal_rate_rounds_median.memcachedinkcache/xdpecho";
    assert!(close(ratio(eq), 1000.0 / 1100.0), "{}", ratio(eq));
    let x = goal(&w, "memcached's requests");
    assert!(close(&x["measured"], 6.0), "{x}");
    assert!(note(x).contains("median of 2 interleaved rounds"), "{x}");
    let floor = goal(&w, "echo floor");
    assert!(close(&floor["measured"], 0.9), "{floor}");
    assert_eq!(floor["met"], true, "{floor}");
    assert!(
        note(floor).contains("at one rate for both (rounds' open-loop runs), the median is 0.91"),
        "{floor}"
    );

    // Rounds that stopped early (rounds_error): memcached missing from round 2, so the ratio to it
    // has one round, and its note says so.
    let mut partial = doctored.clone();
    partial["rounds"]
        .as_array_mut()
        .unwrap()
        .retain(|r| !(r["round"] == 2 && r["setup"] == "memcached"));
    partial["rounds_error"] = "round 2: stopped here by the test".into();
    let w = rederive(&partial, dir, "partial");
    let x = goal(&w, "memcached's requests");
    assert!(close(&x["measured"], 4.0), "{x}");
    assert!(note(x).contains("median of 1 interleaved round "), "{x}");
    let md = std::fs::read_to_string(dir.join("partial/results.md")).unwrap();
    assert!(
        md.contains("**The rounds failed:** round 2: stopped here"),
        "{md}"
    );
}

/// The goal of results `w` whose text contains `what`.
fn goal<'a>(w: &'a Value, what: &str) -> &'a Value {
    w["goals"]
        .as_array()
        .expect("goals")
        .iter()
        .find(|g| g["goal"].as_str().unwrap().contains(what))
        .unwrap_or_else(|| panic!("no goal {what}"))
}

fn note(goal: &Value) -> &str {
    goal["note"].as_str().expect("a goal's note")
}

/// `inklab paper --from-json` on `v`, into `dir/name`; returns the results.json it wrote.
fn rederive(v: &Value, dir: &std::path::Path, name: &str) -> Value {
    let json = dir.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_string(v).unwrap()).unwrap();
    let out = dir.join(name);
    let o = Command::new(env!("CARGO_BIN_EXE_inklab"))
        .args(["paper", "--from-json"])
        .arg(&json)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("running inklab --from-json");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap()
}
