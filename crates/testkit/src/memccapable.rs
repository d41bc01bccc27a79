//! libmemcached's protocol checker, memccapable: the arguments of a full check and the verdict
//! on what it printed, in one place for every test that runs it.

use std::process::{Command, Output};

/// Where Debian's libmemcached-tools installs it.
pub const BIN: &str = "/usr/bin/memccapable";

/// Seconds a whole check may take before `timeout` stops it.
const TIMEOUT_SECS: &str = "120";

/// The protocol memccapable checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Ascii,
    Binary,
}

/// The fewest tests a full check passes (libmemcached 1.1's memccapable has at least this many
/// of each protocol): fewer means some did not run.
pub const MIN_PASSED: usize = 27;

/// memccapable's arguments for a full check of `proto` against `host`:`port`, each operation
/// given 5 seconds (`-t 5`).
pub fn args(host: &str, port: u16, proto: Protocol) -> Vec<String> {
    let mode = match proto {
        Protocol::Ascii => "-a",
        Protocol::Binary => "-b",
    };
    let port = port.to_string();
    [mode, "-t", "5", "-h", host, "-p", &port]
        .iter()
        .map(|a| a.to_string())
        .collect()
}

/// Ok if a run passed: it exited 0, said so, failed no test and passed at least [`MIN_PASSED`].
/// Else why not, with all it printed.
pub fn verdict(success: bool, text: &str) -> Result<(), String> {
    let passed = text.matches("[pass]").count();
    let why = if !success {
        "it exited with a failure".to_string()
    } else if text.contains("[fail]") {
        "a test failed".to_string()
    } else if !text.contains("All tests passed") {
        "it did not say that all tests passed".to_string()
    } else if passed < MIN_PASSED {
        format!("only {passed} tests passed (at least {MIN_PASSED} run)")
    } else {
        return Ok(());
    };
    Err(format!("memccapable: {why}:\n{text}"))
}

/// Runs a full check of `proto` against `host`:`port` under `timeout`, the command given (a plain
/// `Command::new("timeout")`, or one that runs it in a namespace), and panics unless it passed.
pub fn check(mut timeout: Command, host: &str, port: u16, proto: Protocol) {
    let out = timeout
        .args([TIMEOUT_SECS, BIN])
        .args(args(host, port, proto))
        .output()
        .expect("running memccapable under timeout");
    assert_passed(&out);
}

/// Panics unless `out` (memccapable's output) is a passing run ([`verdict`]).
pub fn assert_passed(out: &Output) {
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if let Err(why) = verdict(out.status.success(), &text) {
        panic!("{why}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_text(passes: usize, fails: usize, end: &str) -> String {
        let mut t = String::new();
        for i in 0..passes {
            t += &format!("test_{i}                                   [pass]\n");
        }
        for i in 0..fails {
            t += &format!("test_f{i}                                  [fail]\n");
        }
        t + end
    }

    #[test]
    fn builds_the_arguments() {
        assert_eq!(
            args("198.18.0.1", 11211, Protocol::Binary),
            ["-b", "-t", "5", "-h", "198.18.0.1", "-p", "11211"]
        );
        assert_eq!(args("::1", 7, Protocol::Ascii)[0], "-a");
    }

    #[test]
    fn judges_a_run() {
        let ok = run_text(MIN_PASSED, 0, "All tests passed\n");
        assert_eq!(verdict(true, &ok), Ok(()));
        assert!(verdict(false, &ok).unwrap_err().contains("exited"));
        let failed = run_text(MIN_PASSED, 1, "All tests passed\n");
        assert!(verdict(true, &failed)
            .unwrap_err()
            .contains("a test failed"));
        let unsaid = run_text(MIN_PASSED, 0, "");
        assert!(verdict(true, &unsaid).unwrap_err().contains("did not say"));
        let short = run_text(MIN_PASSED - 1, 0, "All tests passed\n");
        let why = verdict(true, &short).unwrap_err();
        assert!(why.contains("only 26 tests passed"), "{why}");
        assert!(why.contains("test_0"), "the output is shown: {why}");
    }
}
