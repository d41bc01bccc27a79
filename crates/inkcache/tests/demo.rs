//! `make demo` (scripts/demo.sh), the main job end to end: it runs, the kernel answers most of
//! its gets, and it leaves no namespace or file behind, also when it fails midway.
use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use testkit::TempDir;

/// The directory of the built binaries the demo runs (inkcache, inkbench).
fn bin_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_inkcache"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// What is left in `dir`.
fn entries(dir: &TempDir) -> Vec<String> {
    fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Runs scripts/demo.sh with `bin` as its BIN for one second a phase; its exit, and all it printed.
fn demo(bin: &Path, tmp: &TempDir) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo.sh");
    let out = Command::new("bash")
        .arg(script)
        .env("BIN", bin)
        .env("DEMO_SECONDS", "1")
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The namespaces the demo said it made: "== namespaces SRV (server, ...) and CLI (client, ...)".
fn namespaces(text: &str) -> Vec<String> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("== namespaces "))
        .unwrap_or_else(|| panic!("the demo named no namespaces:\n{text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let and = words.iter().position(|w| *w == "and").unwrap();
    vec![words[0].to_string(), words[and + 1].to_string()]
}

/// Asserts that none of the demo's namespaces and none of its files remain.
fn assert_left_nothing(text: &str, tmp: &TempDir) {
    for ns in namespaces(text) {
        assert!(
            !testkit::netns_exists(&ns),
            "namespace {ns} left behind:\n{text}"
        );
    }
    let left = entries(tmp);
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}

/// The figures of a row of the demo's table, after its label (commas dropped).
fn row(text: &str, label: &str) -> Vec<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with(label) && l[label.len()..].starts_with("  "))
        .unwrap_or_else(|| panic!("no row {label:?}:\n{text}"));
    line[label.len()..]
        .split_whitespace()
        .map(|v| v.replace(',', "").parse().unwrap())
        .collect()
}

/// The kernel counters the demo printed last ("kernel counters: hits=N, misses=N, ...").
fn counters(text: &str) -> HashMap<String, u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("kernel counters: "))
        .unwrap_or_else(|| panic!("no kernel counters:\n{text}"));
    line.split(", ")
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn demo_shows_the_kernel_answering_and_leaves_nothing() {
    testkit::require_tool!("/usr/bin/memcached");
    let bin = bin_dir();
    testkit::skip_unless!(
        bin.join("inkbench").exists(),
        "inkbench is not built in {} (make build)",
        bin.display()
    );
    let tmp = testkit::temp_dir("inkdemo-t");
    let (ok, text) = demo(&bin, &tmp);
    assert!(ok, "the demo failed:\n{text}");
    // requests/s, p99 us, kernel hits, memcached get_hits
    let plain = row(&text, "memcached");
    let ink = row(&text, "memcached + inkcache");
    assert_eq!(plain.len(), 4, "{text}");
    assert_eq!(ink.len(), 4, "{text}");
    assert!(plain[0] > 0.0 && ink[0] > 0.0, "{text}");
    assert_eq!(plain[2], 0.0, "no kernel hits without inkcache: {text}");
    assert!(
        ink[2] > ink[3],
        "the kernel answered fewer gets than memcached did:\n{text}"
    );
    let c = counters(&text);
    assert_eq!(c["hits"] as f64, ink[2], "{text}");
    assert!(c["fills"] > 0, "{text}");
    assert_eq!(c["errors"], 0, "{text}");
    assert_left_nothing(&text, &tmp);
}

#[test]
fn demo_cleans_up_when_it_fails() {
    testkit::require_tool!("/usr/bin/memcached");
    // a BIN with inkcache but no inkbench: the demo fails at its first load, after its
    // namespaces, memcached and its scratch directory exist
    let tmp = testkit::temp_dir("inkdemo-t");
    let bin = testkit::temp_dir("inkdemo-b");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_inkcache"), bin.path().join("inkcache"))
        .unwrap();
    let (ok, text) = demo(bin.path(), &tmp);
    assert!(!ok, "the demo ran without inkbench:\n{text}");
    assert!(text.contains("inkbench"), "{text}");
    assert_left_nothing(&text, &tmp);
}
