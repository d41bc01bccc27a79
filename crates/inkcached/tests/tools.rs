//! Third-party clients against inkcached: memccapable (libmemcached's protocol checker),
//! memcaslap with --verify over TCP and UDP, and pymemcache exercising every command.

mod common;
use common::*;
use std::{process::Command, time::Duration};
use testkit::{memcaslap, memccapable::Protocol};

#[test]
fn memccapable_ascii_all_pass() {
    memccapable_passes(Protocol::Ascii);
}

fn memcaslap(port: u16, udp: bool) -> String {
    let args = memcaslap::verify_args(&format!("127.0.0.1:{port}"), udp);
    let cmd = || {
        let mut cmd = Command::new("/usr/bin/memcaslap");
        cmd.args(&args);
        cmd
    };
    let out = memcaslap::run(cmd, Duration::from_secs(60)).unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "memcaslap failed:\n{text}");
    text
}

fn stat_line(text: &str, name: &str) -> u64 {
    memcaslap::stat(text, name).unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[test]
fn memcaslap_verify_tcp_and_udp() {
    if !have("/usr/bin/memcaslap") {
        return;
    }
    // room for every value both runs set: at the default 64 MB a fast pair of runs evicts, and
    // memcaslap counts the evicted keys as verify misses
    let srv = inkcached(&["-m", "1024"]);
    for udp in [false, true] {
        let text = memcaslap(srv.port, udp);
        assert_eq!(stat_line(&text, "verify_failed"), 0, "udp={udp}\n{text}");
        assert_eq!(stat_line(&text, "verify_misses"), 0, "udp={udp}\n{text}");
        assert!(stat_line(&text, "cmd_get") > 1000, "udp={udp}\n{text}");
        if udp {
            assert_eq!(stat_line(&text, "udp_timeout"), 0, "{text}");
        }
    }
}

#[test]
fn pymemcache_exercises_every_command() {
    python_client_passes("pymemcache", "python3-pymemcache", "exercise.py");
}
