//! `inkmodel hitratio` end to end with small parameters: output shape and sane orderings (never a
//! speed).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_inkmodel");

fn inkmodel(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("hitratio")
        .args(args)
        .output()
        .expect("run inkmodel")
}

const SMALL: &[&str] = &[
    "--keys",
    "50000",
    "--warmup",
    "100000",
    "--requests",
    "200000",
    "--budget-pct",
    "10",
    "--budget-pct",
    "30",
];

#[test]
fn json_has_every_mix_and_budget_and_policies_are_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("hitratio.svg");
    let mut args = SMALL.to_vec();
    args.extend(["--json", "--plot", svg.to_str().unwrap()]);
    let out = inkmodel(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["config"]["keys"], 50000);
    assert_eq!(v["config"]["zipf"], 0.99);
    let mixes: Vec<&str> = v["mixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mix"].as_str().unwrap())
        .collect();
    assert_eq!(mixes, ["fixed:32", "etc"]);
    for m in v["mixes"].as_array().unwrap() {
        assert!(m["total_item_bytes"].as_u64().unwrap() > 0);
        assert!(m["max_item_bytes"].as_u64().unwrap() <= 1387);
    }
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let ratio = |r: &serde_json::Value, p: &str| r[p]["hit_ratio"].as_f64().unwrap();
    for r in rows {
        for p in ["kernel", "direct", "lru", "lru_log"] {
            let h = ratio(r, p);
            assert!((0.0..=1.0).contains(&h), "{p}: {h}");
            assert_eq!(r[p]["requests"], 200000);
        }
        // Zipf trace: an exact LRU of the same memory beats a direct-mapped table, and so does
        // the set-associative log; LRU with all the memory beats LRU with the log's bytes
        assert!(ratio(r, "lru") >= ratio(r, "direct"), "{r}");
        assert!(ratio(r, "kernel") > ratio(r, "direct"), "{r}");
        assert!(ratio(r, "lru") >= ratio(r, "lru_log"), "{r}");
        let d = &r["kernel_detail"];
        assert!(d["total_bytes"].as_u64().unwrap() <= r["budget_bytes"].as_u64().unwrap());
        assert!(d["sets"].as_u64().unwrap() >= 16 && d["segs"].as_u64().unwrap() >= 2);
    }
    // a larger budget never hurts any policy on the same trace
    for pair in rows.chunks(2) {
        assert_eq!(pair[0]["mix"], pair[1]["mix"]);
        assert_eq!(pair[0]["budget"], "10%");
        assert_eq!(pair[1]["budget"], "30%");
        for p in ["kernel", "direct", "lru"] {
            assert!(ratio(&pair[1], p) >= ratio(&pair[0], p), "{p}: {pair:?}");
        }
    }
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("<svg") && plot.contains("<rect"));
    assert!(plot.contains("values etc"));
}

#[test]
fn table_output_and_errors() {
    let out = inkmodel(SMALL);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("50000 keys of 16 bytes, Zipf 0.99"),
        "{text}"
    );
    assert!(text.contains("direct-mapped") && text.contains("LRU"));
    // two mixes x two budgets in each of the two tables
    assert_eq!(
        text.lines().filter(|l| l.starts_with("fixed:32 ")).count(),
        4
    );
    assert_eq!(text.lines().filter(|l| l.starts_with("etc ")).count(), 4);

    // a budget below the smallest kernel table, a bad mix, --preload with two mixes: one line
    for args in [
        &["--keys", "1000", "--budget-pct", "1"][..],
        &["--mix", "lognormal"][..],
        &["--preload", "127.0.0.1:1"][..],
    ] {
        let out = inkmodel(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}
