//! inkcache next to other programs on the same interface: XDP through a libxdp dispatcher (as
//! xdp-loader and xdp-filter from Debian's xdp-tools see it), TC as tcx links or clsact filters;
//! each detach takes away inkcache's programs and nothing else.
mod common;

use std::{mem::MaybeUninit, os::fd::AsFd, os::fd::AsRawFd, process::Command};

use common::{cache_it, set, Rig};
use inkcache::{
    skel,
    tc::{self, Dir},
    xdp::{self, XdpMode},
};
use libbpf_rs::{
    skel::{OpenSkel, SkelBuilder},
    Program, ProgramType,
};

fn ifindex_in(rig: &Rig) -> u32 {
    let iface = rig.pair.srv_if.clone();
    rig.pair
        .server
        .run(move || nix::net::if_::if_nametoindex(iface.as_str()).expect("ifindex"))
}

/// A tool from Debian's xdp-tools, or None (SKIP; a failure under CI).
fn xdp_tool(name: &str) -> Option<&str> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if found {
        return Some(name);
    }
    testkit::skip(format!("{name} (Debian's xdp-tools) is missing"));
    None
}

/// Runs an xdp-tools command in the rig's server namespace (nsenter keeps the BPF filesystem,
/// which `ip netns exec` hides) and returns its stdout. xdp-tools take a lock file of their own
/// and fail rather than wait when it is held: one at a time here, and again while another
/// process holds it.
fn xdp_tools(rig: &Rig, args: &[&str]) -> String {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let mut tries = 0;
    loop {
        let out = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", rig.pair.server.name))
            .args(args)
            .output()
            .expect("running an xdp-tools command");
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && err.contains("lockfile") && tries < 50 {
            tries += 1;
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        assert!(out.status.success(), "{args:?}: {err}");
        return String::from_utf8_lossy(&out.stdout).into_owned();
    }
}

fn tc_show(rig: &Rig, dir: &str) -> String {
    let out = rig
        .pair
        .server
        .cmd("tc")
        .args(["filter", "show", "dev", &rig.pair.srv_if, dir])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tc_modes_are_recorded_and_serve() {
    let tcx = tc::tcx_supported(1);
    for mode in ["auto", "tcx", "clsact"] {
        let mut rig = Rig::new().unwrap();
        let r = rig.attach(&["--tc-mode", mode]);
        if mode == "tcx" && !tcx {
            let e = r.unwrap_err().to_string();
            assert!(e.contains("tcx"), "{e}");
            continue;
        }
        r.unwrap();
        let row = rig.status_row(&rig.pair.srv_if);
        let want = if mode == "clsact" || !tcx {
            "clsact"
        } else {
            "tcx"
        };
        assert_eq!(row["tc_mode"], want, "{row}");
        assert_eq!(row["hooks_attached"], true, "{row}");
        assert_eq!(row["tc_ingress_attached"], true, "{row}");
        // the egress program fills the cache from memcached's reply, XDP answers the next get
        set(&rig, "tcmode", 7, b"value");
        let reply = cache_it(&rig, "tcmode");
        assert!(reply.ends_with(b"VALUE tcmode 7 5\r\nvalue\r\nEND\r\n"));
        let filters = tc_show(&rig, "ingress");
        assert_eq!(
            filters.contains("inkcache_tc_in"),
            want == "clsact",
            "{filters}"
        );
        if want == "tcx" {
            let ifindex = ifindex_in(&rig);
            let ids = rig
                .pair
                .server
                .run(move || tc::tcx_programs(ifindex, Dir::Ingress).unwrap());
            assert_eq!(
                ids,
                vec![row["tc_ingress_prog_id"].as_u64().unwrap() as u32]
            );
        }
        rig.detach().unwrap();
        let ifindex = ifindex_in(&rig);
        if tcx {
            let left = rig.pair.server.run(move || {
                (
                    tc::tcx_programs(ifindex, Dir::Egress).unwrap(),
                    tc::tcx_programs(ifindex, Dir::Ingress).unwrap(),
                )
            });
            assert_eq!(left, (vec![], vec![]));
        }
        assert!(!tc_show(&rig, "ingress").contains("inkcache"));
    }
}

#[test]
fn clsact_detach_leaves_other_filters() {
    let mut rig = Rig::new().unwrap();
    let ns = &rig.pair.server;
    let dev = rig.pair.srv_if.clone();
    testkit::sh(ns.cmd("tc").args(["qdisc", "add", "dev", &dev, "clsact"])).unwrap();
    for d in ["ingress", "egress"] {
        // a u32 filter ahead of inkcache's that matches nothing (so it does not end the chain)
        testkit::sh(ns.cmd("tc").args([
            "filter",
            "add",
            "dev",
            &dev,
            d,
            "pref",
            "1",
            "protocol",
            "all",
            "u32",
            "match",
            "u32",
            "0xdeadbeef",
            "0xffffffff",
            "at",
            "0",
            "flowid",
            "1:1",
        ]))
        .unwrap();
    }
    rig.attach(&["--tc-mode", "clsact"]).unwrap();
    let f = tc_show(&rig, "ingress");
    assert!(f.contains("deadbeef") && f.contains("inkcache"), "{f}");
    // inkcache has nothing on egress (the server's answers are seen at its sockets)
    let f = tc_show(&rig, "egress");
    assert!(f.contains("deadbeef") && !f.contains("inkcache"), "{f}");
    set(&rig, "other", 1, b"v");
    cache_it(&rig, "other");
    rig.detach().unwrap();
    for d in ["ingress", "egress"] {
        let f = tc_show(&rig, d);
        assert!(f.contains("deadbeef") && !f.contains("inkcache"), "{f}");
    }
}

#[test]
fn tcx_detach_leaves_other_programs() {
    if !tc::tcx_supported(1) {
        eprintln!("this kernel has no tcx (Linux 6.6+): only clsact applies");
        return;
    }
    let mut rig = Rig::new().unwrap();
    let ifindex = ifindex_in(&rig);
    // another tcx program, first on both hooks: a TC program of inkcache's own object that this
    // test loads and attaches itself (not through the CLI)
    let (ours_before, theirs) = rig.pair.server.run(move || {
        let mut st = MaybeUninit::uninit();
        let open = skel::tc_ingress::InkcacheTcIngressSkelBuilder::default()
            .open(&mut st)
            .unwrap();
        let sk = open.load().unwrap();
        let p = sk.progs.inkcache_tc_ingress.as_fd();
        let id = Program::id_from_fd(p).unwrap();
        let links =
            [Dir::Ingress, Dir::Egress].map(|d| tc::attach(p, ifindex, "test", d, "tcx").unwrap());
        // keep the links (and so the program) alive for the rest of the test
        std::mem::forget(links);
        std::mem::forget(sk);
        (tc::tcx_programs(ifindex, Dir::Ingress).unwrap(), id)
    });
    assert_eq!(ours_before, vec![theirs]);
    rig.attach(&["--tc-mode", "tcx"]).unwrap();
    let row = rig.status_row(&rig.pair.srv_if);
    let ing = row["tc_ingress_prog_id"].as_u64().unwrap() as u32;
    let during = rig.pair.server.run(move || {
        (
            tc::tcx_programs(ifindex, Dir::Ingress).unwrap(),
            tc::tcx_programs(ifindex, Dir::Egress).unwrap(),
        )
    });
    // appended after what was there (inkcache has nothing on egress)
    assert_eq!(during, (vec![theirs, ing], vec![theirs]));
    rig.detach().unwrap();
    let after = rig.pair.server.run(move || {
        (
            tc::tcx_programs(ifindex, Dir::Ingress).unwrap(),
            tc::tcx_programs(ifindex, Dir::Egress).unwrap(),
        )
    });
    assert_eq!(after, (vec![theirs], vec![theirs]));
}

/// Adds the pass-through program to the interface's dispatcher the way inkcache adds its own
/// (through the same library code), in the server namespace; returns its id.
fn add_pass_component(rig: &Rig, priority: u32) -> u32 {
    let ifindex = ifindex_in(rig);
    let iface = rig.pair.srv_if.clone();
    rig.pair.server.run(move || {
        let _lock = xdp::Lock::acquire().unwrap();
        let cur = match xdp::read(ifindex).unwrap() {
            xdp::Current::Nothing => None,
            xdp::Current::Dispatcher(d) => Some(d),
            xdp::Current::Other { name, why, .. } => panic!("{name}: {why}"),
        };
        let mut st = MaybeUninit::uninit();
        let nd =
            xdp::NewDispatcher::adding(&mut st, ifindex, cur, "inkcache_pass", priority).unwrap();
        let (disp, func) = nd.target();
        let disp = disp.as_raw_fd();
        let mut pst = MaybeUninit::uninit();
        let mut open = skel::pass::InkcachePassSkelBuilder::default()
            .open(&mut pst)
            .unwrap();
        let p = &mut open.progs.inkcache_pass;
        p.set_prog_type(ProgramType::Ext);
        p.set_attach_type(libbpf_rs::ProgramAttachType::CgroupInetIngress);
        p.set_attach_target(disp, Some(func)).unwrap();
        let sk = open.load().unwrap();
        let prog = sk.progs.inkcache_pass.as_fd();
        xdp::attach_dispatched(nd, prog, &iface, XdpMode::Auto).unwrap();
        Program::id_from_fd(prog).unwrap()
    })
}

fn remove_component(rig: &Rig, id: u32) {
    let ifindex = ifindex_in(rig);
    rig.pair.server.run(move || {
        let Some((_, mode)) = xdp::current(ifindex).unwrap() else {
            panic!("no XDP program")
        };
        let fd = Program::fd_from_id(id).unwrap();
        xdp::detach(ifindex, "dispatcher", mode, fd.as_fd(), id).unwrap();
    });
}

/// What `xdp-loader status` lists for the rig's server interface: (priority, program name) of
/// each component, in run order.
fn loader_rows(rig: &Rig) -> Vec<(u32, String)> {
    let s = xdp_tools(rig, &["xdp-loader", "status", &rig.pair.srv_if]);
    s.lines()
        .filter_map(|l| l.trim_start().strip_prefix("=>"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().unwrap(), f[1].to_string())
        })
        .collect()
}

#[test]
fn dispatcher_protocol_interoperates_with_xdp_loader() {
    if !xdp::freplace_supported() {
        // these VMs' kernels refuse extension programs: libxdp itself falls back to one program
        // per interface there, and so does inkcache (`make kernel-matrix` runs this test on
        // kernels that have them)
        eprintln!("this kernel refuses freplace programs: XDP dispatchers cannot work here");
        return;
    }
    let (Some(_), Some(_)) = (xdp_tool("xdp-loader"), xdp_tool("xdp-filter")) else {
        return;
    };
    let rig = Rig::new().unwrap();
    let dev = rig.pair.srv_if.clone();
    // xdp-filter first (libxdp builds the dispatcher), then a component of ours joins it
    xdp_tools(&rig, &["xdp-filter", "load", &dev, "-m", "native"]);
    let id = add_pass_component(&rig, 50);
    let rows = loader_rows(&rig);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows[0].1.starts_with("xdpfilt") && rows[0].0 == 10,
        "{rows:?}"
    );
    assert_eq!(rows[1], (50, "inkcache_pass".to_string()));
    // ours goes, the filter stays, and libxdp can still take it away
    remove_component(&rig, id);
    let rows = loader_rows(&rig);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].1.starts_with("xdpfilt"), "{rows:?}");
    xdp_tools(&rig, &["xdp-filter", "unload", &dev]);
    assert!(loader_rows(&rig).is_empty());
    // ours first (our dispatcher), then xdp-filter joins it; a priority of 5 runs first
    let id = add_pass_component(&rig, 5);
    xdp_tools(&rig, &["xdp-filter", "load", &dev, "-m", "native"]);
    let rows = loader_rows(&rig);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0], (5, "inkcache_pass".to_string()));
    remove_component(&rig, id);
    assert_eq!(loader_rows(&rig).len(), 1);
    xdp_tools(&rig, &["xdp-filter", "unload", &dev]);
    let i = ifindex_in(&rig);
    assert!(rig
        .pair
        .server
        .run(move || xdp::current(i).unwrap().is_none()));
}

#[test]
fn inkcache_attaches_next_to_xdp_filter() {
    let mut rig = Rig::new().unwrap();
    if !xdp::freplace_supported() {
        // alone, and asking for a dispatcher says why not
        let e = rig
            .attach(&["--xdp-attach", "dispatcher"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("freplace"), "{e}");
        rig.attach(&[]).unwrap();
        assert_eq!(rig.status_row(&rig.pair.srv_if)["xdp_attach"], "single");
        return;
    }
    let Some(_) = xdp_tool("xdp-filter") else {
        return;
    };
    let dev = rig.pair.srv_if.clone();
    xdp_tools(&rig, &["xdp-filter", "load", &dev, "-m", "native"]);
    rig.attach(&[]).unwrap();
    let row = rig.status_row(&dev);
    assert_eq!(row["xdp_attach"], "dispatcher", "{row}");
    assert_eq!(row["xdp_attached"], true, "{row}");
    let rows = loader_rows(&rig);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[1], (50, "inkcache_xdp".to_string()));
    // the filter (allow-all by default) passes the gets on; inkcache answers them
    set(&rig, "shared", 3, b"xyz");
    cache_it(&rig, "shared");
    rig.detach().unwrap();
    let rows = loader_rows(&rig);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].1.starts_with("xdpfilt"), "{rows:?}");
    xdp_tools(&rig, &["xdp-filter", "unload", &dev]);
}
