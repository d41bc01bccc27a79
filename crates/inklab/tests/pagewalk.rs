//! `inklab pagewalk` end to end (root: it loads eBPF programs and runs them with
//! BPF_PROG_TEST_RUN): both chains are followed to the end of every run (a broken chain fails the
//! command) and the table has a row per sleep time with both costs; never a speed.

use std::process::Command;

#[test]
fn pagewalk_follows_both_chains_and_prints_a_row_per_sleep_time() {
    testkit::skip_unless!(
        std::path::Path::new("/sys/devices/system/cpu/cpu1").exists(),
        "no CPU1 (inklab pagewalk runs there by default)"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_inklab"))
        .args([
            "pagewalk",
            "--lines",
            "200",
            "--runs",
            "30",
            "--sleeps-us",
            "0,5",
        ])
        .output()
        .expect("running inklab");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "inklab pagewalk failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("200 lines a chain, median of 30 runs"),
        "{stdout}"
    );
    for slept in ["no", "5 us"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {slept} |")))
            .unwrap_or_else(|| panic!("no row for {slept}:\n{stdout}"));
        let cells: Vec<f64> = row
            .split('|')
            .skip(2)
            .filter_map(|c| c.trim().parse().ok())
            .collect();
        assert_eq!(cells.len(), 3, "{row}");
        assert!(cells.iter().all(|&c| c > 0.0), "{row}");
    }
}

#[test]
fn pagewalk_refuses_a_chain_longer_than_its_maps() {
    let out = Command::new(env!("CARGO_BIN_EXE_inklab"))
        .args(["pagewalk", "--lines", "100000000", "--runs", "1"])
        .output()
        .expect("running inklab");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("inklab: error: at most"), "{stderr}");
}
