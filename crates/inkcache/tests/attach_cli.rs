//! The control plane around a real memcached in network namespaces: attach and detach leave
//! nothing behind and respect programs that are not ours, status reports what is attached, the
//! CLI's errors are one line.

mod common;

use common::*;

/// Detach removes our programs and pins and nothing else; memcached keeps serving.
#[test]
fn detach_leaves_nothing_behind() {
    let mut rig = Rig::attached(&[]).unwrap();
    set(&rig, "d", 0, b"x");
    rig.udp_get(1, b"get d\r\n").unwrap();
    rig.udp_get(2, b"get d\r\n").unwrap();
    assert_eq!(rig.stat("hits"), 1);
    let pin_dir = format!(
        "/sys/fs/bpf/inkcache/{}@{}",
        rig.pair.srv_if, rig.pair.server.name
    );
    assert!(std::path::Path::new(&pin_dir).exists());
    rig.detach().unwrap();
    assert!(!std::path::Path::new(&pin_dir).exists(), "pins must go");
    let link =
        testkit::sh(
            rig.pair
                .server
                .cmd("ip")
                .args(["-d", "link", "show", &rig.pair.srv_if]),
        )
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&link.stdout).contains("prog/xdp"),
        "XDP must go"
    );
    for dir in ["egress", "ingress"] {
        let tc = testkit::sh(rig.pair.server.cmd("tc").args([
            "filter",
            "show",
            "dev",
            &rig.pair.srv_if,
            dir,
        ]))
        .unwrap();
        assert!(
            String::from_utf8_lossy(&tc.stdout).trim().is_empty(),
            "TC {dir} filter must go: {:?}",
            String::from_utf8_lossy(&tc.stdout)
        );
    }
    let mc = rig.mc_stat("get_hits");
    assert_eq!(values(&rig.udp_get(3, b"get d\r\n").unwrap())[0].2, b"x");
    assert_eq!(rig.mc_stat("get_hits"), mc + 1);
    // the peer's pass-through program (not ours to remove) is still there
    let peer =
        testkit::sh(
            rig.pair
                .client
                .cmd("ip")
                .args(["-d", "link", "show", &rig.pair.cli_if]),
        )
        .unwrap();
    assert!(String::from_utf8_lossy(&peer.stdout).contains("xdp"));
}

/// Detach does not remove an XDP program that is not ours, and attach refuses to replace one.
#[test]
fn foreign_xdp_program_is_respected() {
    let rig = Rig::new().unwrap();
    // the pass program on the server side stands in for somebody else's XDP program
    let out = std::process::Command::new(bin())
        .args([
            "--netns",
            &rig.pair.server.name,
            "veth-peer",
            "--iface",
            &rig.pair.srv_if,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = rig.inkcache(&["attach", "--iface", &rig.pair.srv_if]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already has an XDP program"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// The CLI's errors: one line, non-zero exit.
#[test]
fn cli_errors_are_one_line() {
    let rig = Rig::attached(&[]).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["attach", "--iface", "nosuchif0"], "no such interface"),
        (
            vec!["attach", "--iface", &rig.pair.srv_if],
            "already attached",
        ),
        (
            vec!["attach", "--iface", "lo", "--port", "70000"],
            "port out of range",
        ),
        (
            vec!["attach", "--iface", "lo", "--port", "0"],
            "port out of range",
        ),
        (
            vec!["attach", "--iface", "lo", "--allow", "10.0.0.0/33"],
            "bad CIDR",
        ),
        (vec!["detach", "--iface", "lo"], "not attached"),
        (vec!["stats", "--iface", "lo"], "not attached"),
    ];
    for (args, want) in cases {
        let out = rig.inkcache(&args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(err.trim().lines().count() <= 2, "{args:?}: {err}"); // clap may add a usage hint
    }
    // not root
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            bin(),
            "status",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "inkcache: must run as root (needs CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    );
}

/// Status reports what is attached, in JSON too.
#[test]
fn status_reports_attachment() {
    let rig = Rig::attached(&[]).unwrap();
    let row = rig.status_row(&rig.pair.srv_if);
    assert_eq!(row["iface"], rig.pair.srv_if.as_str());
    assert_eq!(row["xdp_attached"], true);
    assert_eq!(row["hooks_attached"], true);
    assert_eq!(row["tc_ingress_attached"], true);
    assert_eq!(row["max_amplification"], 0);
    assert_eq!(row["xdp_mode"], "native");
    assert_eq!(row["ports"][0], 11211);
    assert!(row["layout"]["sets"].as_u64().unwrap() >= 16, "{row}");
    assert!(row["layout"]["segs"].as_u64().unwrap() >= 2, "{row}");
    assert_eq!(row["items"], 0, "{row}");

    set(&rig, "st", 0, b"status");
    rig.udp_get(1, b"get st\r\n").unwrap();
    let row = rig.status_row(&rig.pair.srv_if);
    assert_eq!(row["items"], 1, "{row}");
    let item = "VALUE st 0 6\r\nstatus\r\n".len() as u64;
    assert_eq!(row["item_bytes_stored"], item, "{row}");
    assert_eq!(row["bytes_per_item"], row["cache_bytes"], "{row}");
    let text = rig.inkcache(&["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("holds       1 items"), "{text}");
}

/// When the server's namespace is deleted (its interfaces and their programs go with it), detach
/// still removes the pins.
#[test]
fn detach_after_the_namespace_is_gone_removes_the_pins() {
    let mut rig = Rig::attached(&[]).unwrap();
    let pin_dir = format!(
        "/sys/fs/bpf/inkcache/{}@{}",
        rig.pair.srv_if, rig.pair.server.name
    );
    assert!(std::path::Path::new(&pin_dir).exists());
    rig.server.kill();
    testkit::sh(std::process::Command::new("ip").args(["netns", "del", &rig.pair.server.name]))
        .unwrap();
    let out = rig.inkcache(&["detach", "--iface", &rig.pair.srv_if]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!std::path::Path::new(&pin_dir).exists());
    rig.attached = false;
}
