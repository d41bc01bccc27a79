//! `inklab pagewalk` end to end (root: it loads eBPF programs and runs them with
//! BPF_PROG_TEST_RUN): both chains are followed read by read (the command fails if a chain breaks
//! or stops anywhere but where its reads lead) and the table has a row per sleep time with both
//! costs; never a speed.

use std::process::Command;

#[test]
fn pagewalk_follows_both_chains_and_prints_a_row_per_sleep_time() {
    let cpu = inklab::SERVER_CPU;
    testkit::skip_unless!(
        std::path::Path::new(&format!("/sys/devices/system/cpu/cpu{cpu}")).exists(),
        "no CPU{cpu} (inklab pagewalk runs there by default)"
    );
    // 199 lines: the 1,600 reads of each chain (2 sleep times, 50 runs each, 16 reads a run) do
    // not come round to its start, so a chain stuck on one line could not end where it should
    let out = Command::new(env!("CARGO_BIN_EXE_inklab"))
        .args([
            "pagewalk",
            "--lines",
            "199",
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
        stdout.starts_with("199 lines a chain, median of 30 runs"),
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
