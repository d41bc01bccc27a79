//! The timing scripts of docs/results (issue 11's measurements) run to the end, print their
//! tables, and leave the kernel's BPF statistics as they found them: off, with no holder left
//! (scripts/bpf-stats-hold.py). Each runs briefly; the numbers are not checked, only that there
//! are numbers.
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

use inkcache::sys::bpf_stats_sysctl_on;

/// One script at a time: each checks that no statistics holder is left, and the other's would be.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The directory of the built binaries the scripts run (inkcache, inkbench).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_inkcache"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs scripts/`name` with `env`, its lock in a temporary directory (no other measurement is
/// waited for or disturbed); its exit and all it printed.
fn run(name: &str, env: &[(&str, &str)]) -> (bool, String) {
    run_with(name, env, &[])
}

/// [`run`] with arguments.
fn run_with(name: &str, env: &[(&str, &str)], args: &[&str]) -> (bool, String) {
    let tmp = testkit::temp_dir("ink-timing");
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name);
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .env("BIN", bin_dir())
        .env("BENCH_LOCK", tmp.path().join("bench.lock"))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// No scripts/bpf-stats-hold.py left running.
fn no_holder_left() -> bool {
    let out = Command::new("pgrep")
        .args(["-f", "bpf-stats-hold.py"])
        .output()
        .unwrap();
    out.stdout.is_empty()
}

/// A table row's cells after its label.
fn cells<'a>(text: &'a str, label: &str) -> Vec<&'a str> {
    let row = text
        .lines()
        .find(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no row {label:?}:\n{text}"));
    row.split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .skip(1)
        .collect()
}

#[test]
fn tc_path_cost_prints_every_case_and_leaves_the_statistics_off() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = bpf_stats_sysctl_on();
    let (ok, text) = run("tc-path-cost.sh", &[("ROUNDS", "1"), ("N", "300")]);
    assert!(ok, "tc-path-cost.sh failed:\n{text}");
    // its columns: xdp, tc_ingress, answers, total
    for (label, runs) in [
        ("1 KB hit, XDP path (padded frame)", ["xdp"].as_slice()),
        ("1 KB hit, TC path (veth)", &["xdp", "tc_ingress"]),
        ("48 B hit, XDP path", &["xdp"]),
        (
            "miss (memcached answers)",
            &["xdp", "tc_ingress", "answers"],
        ),
    ] {
        let c = cells(&text, label);
        assert_eq!(c.len(), 4, "{label}: {c:?}");
        for (i, prog) in ["xdp", "tc_ingress", "answers"].iter().enumerate() {
            if runs.contains(prog) {
                assert!(
                    c[i].parse::<u64>().is_ok_and(|ns| ns > 0),
                    "{label} {prog}: {c:?}"
                );
            }
        }
    }
    assert_eq!(bpf_stats_sysctl_on(), before, "the sysctl changed");
    assert!(no_holder_left(), "a statistics holder was left running");
}

/// One short round of hit-cost-live.sh (2,000 keys, 1-key and 4-key gets) on the built inkcache,
/// with `stages` (hit-cost-live.sh's STAGES, if any), which must succeed; the first round line.
fn hit_cost_live_round(stages: Option<&str>) -> String {
    let mut env = vec![
        ("ROUNDS", "1"),
        ("SECS", "1"),
        ("KEYS", "2000"),
        ("CACHE_MB", "16"),
        ("MULTIGET", "4"),
    ];
    env.extend(stages.map(|s| ("STAGES", s)));
    let (ok, text) = run_with("hit-cost-live.sh", &env, &[]);
    assert!(ok, "hit-cost-live.sh failed:\n{text}");
    text.lines()
        .find(|l| l.contains(" round 1: 1-key get "))
        .unwrap_or_else(|| panic!("no round printed:\n{text}"))
        .to_string()
}

#[test]
fn hit_cost_live_prints_both_gets_and_leaves_the_statistics_off() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = bpf_stats_sysctl_on();
    let line = hit_cost_live_round(None);
    let ns = |what: &str| -> u64 {
        let at = line
            .find(what)
            .unwrap_or_else(|| panic!("{what:?}: {line}"))
            + what.len();
        line[at..].split(' ').next().unwrap().parse().unwrap()
    };
    assert!(ns("1-key get ") > 0 && ns("4-key get ") > 0, "{line}");
    assert_eq!(bpf_stats_sysctl_on(), before, "the sysctl changed");
    assert!(no_holder_left(), "a statistics holder was left running");
}

/// Under `attach --debug-stop-stage 6` XDP composes every reply and passes the get: its lookups
/// count slot hits, and it counts no hit. The share of hits a slot served is then none to give
/// (the script once printed slot hits over one hit: "(84606000.0%)"). STAGES attaches so, and
/// says which stage each line is.
#[test]
fn hit_cost_live_gives_no_slot_share_where_xdp_sent_no_hit() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let line = hit_cost_live_round(Some("6"));
    assert!(line.contains(" stage 6 round 1: "), "{line}");
    assert!(
        line.contains("1-key gets: hits 0,"),
        "XDP sent hits: {line}"
    );
    assert!(line.contains(" (no hits),"), "{line}");
}

/// Runs live-access.sh on `variants` and checks that each printed its line.
fn live_access_prints(variants: &[&str]) {
    let (ok, text) = run(
        "live-access.sh",
        &[
            ("ROUNDS", "1"),
            ("SECS", "1"),
            ("KEYS", "2000"),
            ("VARIANTS", &variants.join(" ")),
        ],
    );
    assert!(ok, "live-access.sh failed:\n{text}");
    for v in variants {
        // "round 1: <variant>: <ns> ns per packet (<packets> packets)"
        let rest = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("round 1: {v}: ")))
            .unwrap_or_else(|| panic!("no line for {v}:\n{text}"));
        let numbers: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        assert!(
            numbers.len() == 2 && numbers.iter().all(|&n| n > 0),
            "{v}: {rest}"
        );
    }
}

#[test]
fn live_access_prints_each_variant_and_leaves_the_statistics_off() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = bpf_stats_sysctl_on();
    live_access_prints(&["echo", "fixed-16-pages", "pick-of-100-pages", "key-24mb"]);
    // without the echo among them (the client end's program is the echo object's); a -direct
    // variant, whose hash map the script fills after each attach; the frame moved (after the
    // reads, before them, or only its helper calls made), code run, and a compact table's line
    live_access_prints(&[
        "key-24mb-direct",
        "echo-moved",
        "key-24mb-moved-early",
        "echo-head-calls",
        "code-4kb",
        "key-compact-2mb",
    ]);
    assert_eq!(bpf_stats_sysctl_on(), before, "the sysctl changed");
    assert!(no_holder_left(), "a statistics holder was left running");
}
