//! The Debian package and its systemd units: the package holds the binaries, units, environment
//! files and man pages; `systemd-analyze verify` accepts the units as installed; and the units'
//! ExecStart/ExecStop lines, expanded as systemd expands them (specifiers, environment files,
//! `$VAR` and `${VAR}`), do their job: inkcache@IFACE attaches, refreshes and detaches,
//! inkcache-follow@IFACE follows it until then, inkcached serves, inkcache-metrics exports.
mod common;

use std::{
    collections::HashMap,
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::*;
use testkit::TempDir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Where the workspace's binaries were built (inkcached and inkbench too), or None (SKIP; a
/// failure under CI).
fn bin_dir() -> Option<PathBuf> {
    let dir = testkit::workspace_bin("inkcache").parent()?.to_path_buf();
    if ["inkcache", "inkcached", "inkbench"]
        .iter()
        .all(|b| dir.join(b).exists())
    {
        return Some(dir);
    }
    testkit::skip(format!(
        "binaries not built in {} (make build)",
        dir.display()
    ));
    None
}

fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        testkit::skip(format!("{tool} missing (make deps installs it)"));
    }
    ok
}

/// What the package installs, laid out under a temporary root by packaging/stage.sh.
fn staged(bins: &Path) -> TempDir {
    let t = testkit::temp_dir("inkcache-stage-");
    testkit::sh(
        Command::new(repo().join("packaging/stage.sh"))
            .arg(t.path())
            .arg(bins)
            .current_dir(repo()),
    )
    .unwrap();
    t
}

#[test]
fn debian_package_holds_everything_and_its_units_verify() {
    let Some(bins) = bin_dir() else { return };
    if !have("dpkg-deb") || !have("systemd-analyze") || !have("man") {
        return;
    }
    let out = testkit::temp_dir("inkcache-deb-");
    let built = testkit::sh(
        Command::new(repo().join("packaging/deb.sh"))
            .arg(out.path())
            .arg(&bins)
            .current_dir(repo()),
    )
    .unwrap();
    let deb = String::from_utf8(built.stdout).unwrap().trim().to_string();
    let field = |f: &str| {
        let o = testkit::sh(Command::new("dpkg-deb").args(["-f", &deb, f])).unwrap();
        String::from_utf8(o.stdout).unwrap().trim().to_string()
    };
    assert_eq!(field("Package"), "inkcache");
    assert_eq!(field("Version"), env!("CARGO_PKG_VERSION"));
    let list = testkit::sh(Command::new("dpkg-deb").args(["-c", &deb])).unwrap();
    let list = String::from_utf8(list.stdout).unwrap();
    let mut want = vec![
        "./usr/bin/inkcache".to_string(),
        "./usr/bin/inkcached".into(),
        "./usr/bin/inkbench".into(),
        "./lib/systemd/system/inkcache@.service".into(),
        "./lib/systemd/system/inkcached.service".into(),
        "./lib/systemd/system/inkcache-metrics.service".into(),
        "./lib/systemd/system/inkcache-follow@.service".into(),
        "./etc/default/inkcache".into(),
        "./etc/default/inkcached".into(),
        "./usr/share/man/man1/inkcache.1.gz".into(),
    ];
    for sub in [
        "attach",
        "detach",
        "refresh",
        "stats",
        "status",
        "metrics",
        "top",
        "veth-peer",
    ] {
        want.push(format!("./usr/share/man/man1/inkcache-{sub}.1.gz"));
    }
    for f in &want {
        assert!(
            list.lines().any(|l| l.ends_with(&format!(" {f}"))),
            "{f} not in the package:\n{list}"
        );
    }
    let conf = testkit::sh(Command::new("dpkg-deb").args(["--ctrl-tarfile", &deb])).unwrap();
    assert!(!conf.stdout.is_empty());

    // verify the units as installed: the package's files plus the host's targets as the root
    let root = out.path().join("x");
    testkit::sh(Command::new("dpkg-deb").args(["-x", &deb]).arg(&root)).unwrap();
    let units = root.join("lib/systemd/system");
    for t in std::fs::read_dir("/lib/systemd/system").unwrap() {
        let p = t.unwrap().path();
        if p.extension().is_some_and(|e| e == "target") {
            let _ = std::fs::copy(&p, units.join(p.file_name().unwrap()));
        }
    }
    for unit in ["inkcache@", "inkcache-follow@"] {
        std::fs::copy(
            units.join(format!("{unit}.service")),
            units.join(format!("{unit}eth0.service")),
        )
        .unwrap();
    }
    let v = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .args([
            "/lib/systemd/system/inkcache@eth0.service",
            "/lib/systemd/system/inkcache-follow@eth0.service",
            "/lib/systemd/system/inkcached.service",
            "/lib/systemd/system/inkcache-metrics.service",
        ])
        .env("MANPATH", root.join("usr/share/man"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&v.stderr);
    assert!(
        v.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
    // and it can fail: a unit naming a binary the package lacks
    let bad = std::fs::read_to_string(units.join("inkcached.service"))
        .unwrap()
        .replace("/usr/bin/inkcached", "/usr/bin/inkcachedx");
    std::fs::write(units.join("inkbad.service"), bad).unwrap();
    let v = Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--root={}", root.display()))
        .arg("/lib/systemd/system/inkbad.service")
        .env("MANPATH", root.join("usr/share/man"))
        .output()
        .unwrap();
    assert!(!v.status.success());
}

/// A unit's [Service] settings (repeated keys kept in order).
fn service(unit: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(unit).unwrap();
    let mut in_service = false;
    let mut v = Vec::new();
    for l in text.lines().map(str::trim) {
        if l.starts_with('[') {
            in_service = l == "[Service]";
        } else if in_service && !l.starts_with('#') && !l.starts_with(';') {
            if let Some((k, val)) = l.split_once('=') {
                v.push((k.trim().to_string(), val.trim().to_string()));
            }
        }
    }
    v
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    for q in ['"', '\''] {
        if v.len() >= 2 && v.starts_with(q) && v.ends_with(q) {
            return &v[1..v.len() - 1];
        }
    }
    v
}

/// The command lines systemd would run for `key` (ExecStart, ExecStop) of `unit` instantiated with
/// `instance`: specifiers, Environment= and EnvironmentFile= (read under `root`, `-` optional)
/// applied, `$VAR` split into words, `${VAR}` kept as one; /usr/bin/ programs taken from `root`.
fn exec_lines(root: &Path, unit: &str, instance: &str, key: &str) -> Vec<Vec<String>> {
    let s = service(&root.join("lib/systemd/system").join(unit));
    let spec = |x: &str| x.replace("%i", instance).replace("%I", instance);
    let mut env: HashMap<String, String> = HashMap::new();
    for (k, v) in &s {
        match k.as_str() {
            "Environment" => {
                let (n, val) = v.split_once('=').unwrap();
                env.insert(n.into(), unquote(val).into());
            }
            "EnvironmentFile" => {
                let (optional, path) = match v.strip_prefix('-') {
                    Some(p) => (true, p),
                    None => (false, v.as_str()),
                };
                let file = root.join(spec(path).trim_start_matches('/'));
                let Ok(text) = std::fs::read_to_string(&file) else {
                    assert!(optional, "{unit}: {} missing", file.display());
                    continue;
                };
                for l in text.lines().map(str::trim) {
                    if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
                        continue;
                    }
                    let (n, val) = l.split_once('=').unwrap();
                    env.insert(n.trim().into(), unquote(val).into());
                }
            }
            _ => {}
        }
    }
    s.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| {
            let v = spec(v.trim_start_matches(['-', '@', '+', '!']));
            let mut words = Vec::new();
            for w in v.split_whitespace() {
                if let Some(name) = w.strip_prefix('$').filter(|n| !n.starts_with('{')) {
                    let val = env.get(name).cloned().unwrap_or_default();
                    words.extend(val.split_whitespace().map(String::from));
                } else {
                    let mut w = w.to_string();
                    for (n, val) in &env {
                        w = w.replace(&format!("${{{n}}}"), val);
                    }
                    words.push(w);
                }
            }
            if let Some(p) = words.first_mut() {
                if let Some(rest) = p.strip_prefix("/usr/bin/") {
                    *p = root.join("usr/bin").join(rest).display().to_string();
                }
            }
            words
        })
        .collect()
}

/// Runs a unit's command line inside the network namespace `ns`, to completion.
fn run_in(ns: &str, line: &[String]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(line)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{line:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts a unit's (long-running) command line inside `ns`.
fn spawn_in(ns: &str, line: &[String]) -> Child {
    Command::new("ip")
        .args(["netns", "exec", ns])
        .args(line)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Stops a service the way systemd does by default: SIGTERM, and it must exit.
fn stop(mut c: Child, what: &str) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    exits_within(&mut c, 5, &format!("{what} did not exit on SIGTERM"));
}

#[test]
fn inkcache_unit_attaches_on_start_and_detaches_on_stop() {
    let Some(bins) = bin_dir() else { return };
    let root = staged(&bins);
    let mut rig = Rig::new().unwrap();
    let (ns, iface) = (rig.pair.server.name.clone(), rig.pair.srv_if.clone());
    let start = exec_lines(root.path(), "inkcache@.service", &iface, "ExecStart");
    let stop_ = exec_lines(root.path(), "inkcache@.service", &iface, "ExecStop");
    assert_eq!((start.len(), stop_.len()), (1, 1));
    // the environment file's options reached the command line
    assert!(
        start[0].windows(2).any(|w| w == ["--cache-mb", "64"]),
        "{start:?}"
    );
    assert!(start[0]
        .windows(2)
        .any(|w| w[0] == "--iface" && w[1] == iface));

    run_in(&ns, &start[0]);
    rig.attached = true;
    let row = rig.status_row(&iface);
    assert_eq!(row["xdp_attached"], true);
    assert_eq!(row["cache_mb"], 64);
    set(&rig, "uk", 0, b"unit");
    rig.udp_get(1, b"get uk\r\n").expect("reply");
    let hits = rig.stat("hits");
    let v = rig.udp_get(2, b"get uk\r\n").expect("reply");
    assert_eq!(values(&v)[0].2, b"unit");
    assert_eq!(rig.stat("hits"), hits + 1);
    // reload refreshes; inkcache-follow@ follows until the interface is detached
    let reload = exec_lines(root.path(), "inkcache@.service", &iface, "ExecReload");
    assert!(run_in(&ns, &reload[0]).starts_with(&format!("refreshed {iface}")));
    let follow = exec_lines(root.path(), "inkcache-follow@.service", &iface, "ExecStart");
    let mut follower = spawn_in(&ns, &follow[0]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(follower.try_wait().unwrap().is_none(), "{follow:?} ended");

    run_in(&ns, &stop_[0]);
    rig.attached = false;
    let ended = exits_within(
        &mut follower,
        5,
        &format!("{follow:?} outlived the attachment"),
    );
    assert!(ended.success());
    let out = rig.inkcache(&["status", "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 0, "{rows}");
}

#[test]
fn inkcached_and_metrics_units_serve_and_stop() {
    let Some(bins) = bin_dir() else { return };
    let root = staged(&bins);
    let ns = testkit::Netns::new("iku").unwrap();
    let srv = exec_lines(root.path(), "inkcached.service", "", "ExecStart");
    assert_eq!(srv.len(), 1);
    let server = spawn_in(&ns.name, &srv[0]);
    let addr: SocketAddr = "127.0.0.1:11211".parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ns.run(|| TcpStream::connect(addr).is_ok()) {
        assert!(
            Instant::now() < deadline,
            "inkcached.service's ExecStart did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // TCP and UDP, as the environment file says (-p 11211 -U 11211)
    let r = ns
        .run(|| tcp_request(addr, b"set k 0 0 2\r\nhi\r\n"))
        .unwrap();
    assert_eq!(r, inkproto::client::Response::Stored);
    let d = ns
        .run(|| {
            udp_exchange(
                addr,
                &inkproto::udp::frame_request(7, b"get k\r\n"),
                Duration::from_secs(1),
            )
        })
        .unwrap();
    assert_eq!(values(&assemble(&d).expect("UDP reply"))[0].2, b"hi");

    let m = exec_lines(root.path(), "inkcache-metrics.service", "", "ExecStart");
    assert_eq!(m.len(), 1);
    let listen = m[0]
        .windows(2)
        .find(|w| w[0] == "--listen")
        .map(|w| w[1].clone())
        .expect("the environment file gives --listen");
    let metrics = spawn_in(&ns.name, &m[0]);
    let at: SocketAddr = listen.parse().unwrap();
    let body = ns.run(|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut s) = TcpStream::connect(at) {
                s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
                let mut r = String::new();
                s.read_to_string(&mut r).unwrap();
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "inkcache-metrics.service did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(
        body.contains("memcached_up{server=\"127.0.0.1:11211\",netns=\"\"} 1"),
        "{body}"
    );
    assert!(body.contains("memcached_current_items{server=\"127.0.0.1:11211\",netns=\"\"} 1"));
    stop(metrics, "inkcache metrics");
    stop(server, "inkcached");
    // nothing answers any more
    assert!(ns.run(|| TcpStream::connect(addr).is_err()));
}
