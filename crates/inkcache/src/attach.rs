//! Loading, attaching and detaching.
use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    path::PathBuf,
};

use anyhow::{Context, Result};
use ipnet::IpNet;
use libbpf_rs::{
    libbpf_sys,
    skel::{OpenSkel, Skel, SkelBuilder},
    MapCore, MapFlags, Object, OpenObject, Program, ProgramType, Xdp, XdpFlags,
};

use crate::{
    abi::ITEM_MAX,
    pins::{self, AttachInfo},
    skel, sys,
    tc::{self, Dir},
    xdp, Error, Layout,
};
pub use crate::{
    opts::AttachOpts,
    reply_write::ReplyWrite,
    tc::{TcMode, TC_HANDLE, TC_PRIORITY},
    xdp::{XdpAttach, XdpMode},
};

fn probe_helper(prog_type: u32, helper: u32) -> bool {
    // SAFETY: libbpf_probe_bpf_helper only reads its scalar arguments; a null opts is allowed.
    unsafe { libbpf_sys::libbpf_probe_bpf_helper(prog_type, helper, std::ptr::null()) == 1 }
}

/// Names the first kernel feature inkcache needs that this kernel does not have.
pub fn check_kernel() -> Result<()> {
    let xdp = libbpf_sys::BPF_PROG_TYPE_XDP;
    let tc = libbpf_sys::BPF_PROG_TYPE_SCHED_CLS;
    let needs = [
        (
            xdp,
            libbpf_sys::BPF_FUNC_xdp_load_bytes,
            "bpf_xdp_load_bytes (Linux 5.18+)",
        ),
        (
            xdp,
            libbpf_sys::BPF_FUNC_xdp_store_bytes,
            "bpf_xdp_store_bytes (Linux 5.18+)",
        ),
        (
            xdp,
            libbpf_sys::BPF_FUNC_spin_lock,
            "bpf_spin_lock in XDP (Linux 5.1+)",
        ),
        (
            xdp,
            libbpf_sys::BPF_FUNC_xdp_adjust_tail,
            "bpf_xdp_adjust_tail (Linux 4.18+)",
        ),
        (
            xdp,
            libbpf_sys::BPF_FUNC_loop,
            "bpf_loop in XDP (Linux 5.17+)",
        ),
        (
            tc,
            libbpf_sys::BPF_FUNC_loop,
            "bpf_loop in TC (Linux 5.17+)",
        ),
        (
            tc,
            libbpf_sys::BPF_FUNC_skb_load_bytes,
            "bpf_skb_load_bytes in TC",
        ),
        (
            tc,
            libbpf_sys::BPF_FUNC_spin_lock,
            "bpf_spin_lock in TC (Linux 5.1+)",
        ),
        (
            xdp,
            libbpf_sys::BPF_FUNC_xdp_adjust_meta,
            "bpf_xdp_adjust_meta (Linux 4.15+)",
        ),
        (
            tc,
            libbpf_sys::BPF_FUNC_skb_change_tail,
            "bpf_skb_change_tail in TC (Linux 4.9+)",
        ),
        (
            tc,
            libbpf_sys::BPF_FUNC_skb_store_bytes,
            "bpf_skb_store_bytes in TC",
        ),
        (
            tc,
            libbpf_sys::BPF_FUNC_l4_csum_replace,
            "bpf_l4_csum_replace in TC",
        ),
        (tc, libbpf_sys::BPF_FUNC_csum_diff, "bpf_csum_diff in TC"),
        (tc, libbpf_sys::BPF_FUNC_redirect, "bpf_redirect in TC"),
    ];
    for (ty, helper, what) in needs {
        if !probe_helper(ty, helper) {
            return Err(Error::KernelLacks(what.into()).into());
        }
    }
    Ok(())
}

fn load_err(what: &str, e: libbpf_rs::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "loading the {what} program failed (verifier or kernel): {e} (INKCACHE_DEBUG=1 shows libbpf's log)"
    )
}

struct Target {
    iface: String,
    ifindex: u32,
    dir: PathBuf,
}

/// A secret seed for the key hash (so that nobody can pick keys that share an index set).
fn random_seed() -> Result<u64> {
    use std::io::Read;
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .context("reading /dev/urandom")?;
    Ok(u64::from_ne_bytes(b))
}

/// Storage for the objects of an attachment (the skeletons borrow it while they live).
pub struct ObjStorage {
    xdp: MaybeUninit<OpenObject>,
    tc_ingress: MaybeUninit<OpenObject>,
    requests: MaybeUninit<OpenObject>,
    answers: MaybeUninit<OpenObject>,
    sock: MaybeUninit<OpenObject>,
    iter: MaybeUninit<OpenObject>,
}

impl Default for ObjStorage {
    fn default() -> Self {
        ObjStorage {
            xdp: MaybeUninit::uninit(),
            tc_ingress: MaybeUninit::uninit(),
            requests: MaybeUninit::uninit(),
            answers: MaybeUninit::uninit(),
            sock: MaybeUninit::uninit(),
            iter: MaybeUninit::uninit(),
        }
    }
}

/// The programs of one attachment, loaded and configured but attached nowhere: every object works
/// on the XDP object's maps (one cache). `attach` hooks them to interfaces; the eBPF unit tests
/// run them on crafted packets (`BPF_PROG_TEST_RUN`).
pub struct Loaded<'obj> {
    pub xdp: skel::xdp::InkcacheXdpSkel<'obj>,
    pub tc_ingress: skel::tc_ingress::InkcacheTcIngressSkel<'obj>,
    pub requests: skel::requests::InkcacheRequestsSkel<'obj>,
    pub answers: skel::answers::InkcacheAnswersSkel<'obj>,
    pub sock: skel::sock::InkcacheSockSkel<'obj>,
    pub iter: skel::iter::InkcacheIterSkel<'obj>,
    pub layout: Layout,
}

/// The `ports` map's value (bpf/maps.h `struct ink_ports`): bit `p % 64` of word `p / 64` set
/// for each port `p`, words in native byte order.
pub fn ports_bitmap(ports: &[u16]) -> Vec<u8> {
    let mut v = vec![0u8; 65536 / 8];
    for &p in ports {
        set_port(&mut v, p);
    }
    v
}

/// Sets port `p`'s bit in a `ports` map value (see [`ports_bitmap`]).
pub fn set_port(bitmap: &mut [u8], p: u16) {
    let w = usize::from(p / 64) * 8;
    let word = u64::from_ne_bytes(bitmap[w..w + 8].try_into().expect("8 bytes")) | 1 << (p % 64);
    bitmap[w..w + 8].copy_from_slice(&word.to_ne_bytes());
}

/// Loads and configures the programs for `opts` (which `validate` accepted): the constants of
/// bpf/config.h, the map sizes, the clock offset, the ports and the allowlist `allow`.
pub fn load<'obj>(
    opts: &AttachOpts,
    allow: &[IpNet],
    st: &'obj mut ObjStorage,
) -> Result<Loaded<'obj>> {
    load_as(opts, allow, st, None, 0)
}

/// [`load`], with the XDP program loaded as an extension (freplace) of function `ext.1` of the
/// XDP dispatcher `ext.0` when `ext` is given, and `server_tgid` (0: none yet) the process whose
/// sockets the iterators will find: the socket hooks take a bind by another while those are open
/// for a second server's (bpf/inkcache_sock.bpf.c).
fn load_as<'obj>(
    opts: &AttachOpts,
    allow: &[IpNet],
    st: &'obj mut ObjStorage,
    ext: Option<(BorrowedFd<'_>, String)>,
    server_tgid: u32,
) -> Result<Loaded<'obj>> {
    let layout = Layout::for_budget(opts.cache_mb, opts.item_bytes);
    let seed = opts.hash_seed.map_or_else(random_seed, Ok)?;
    // 0 would keep the socket-side programs to no namespace: they would take the server
    // sockets of every namespace on the host
    let netns_cookie = if opts.any_netns {
        0
    } else {
        sys::netns_cookie().context(
            "reading this network namespace's cookie (SO_NETNS_COOKIE, Linux 5.14+) failed",
        )?
    };
    // cgroup_skb programs got bpf_get_netns_cookie in 2025 (not in 6.12); before, they tell the
    // server's packets by their sockets (bpf/maps.h server_netns_skb)
    let netns_by_sock = opts.debug_netns_by_sock
        || !probe_helper(
            libbpf_sys::BPF_PROG_TYPE_CGROUP_SKB,
            libbpf_sys::BPF_FUNC_get_netns_cookie,
        );
    let reply_inline = opts.reply_write.inline();
    // Every object compiles bpf/config.h (each has its own generated rodata type, hence a macro).
    macro_rules! set_config {
        ($open:ident, $what:literal) => {{
            let ro = $open
                .maps
                .rodata_data
                .as_deref_mut()
                .context(concat!($what, " object has no rodata"))?;
            ro.n_sets = layout.sets;
            ro.n_segs = layout.segs;
            ro.n_slots = layout.slots();
            ro.max_age_ns = opts.max_age_secs.saturating_mul(1_000_000_000);
            ro.invalidation_off = opts.debug_no_invalidation as u32;
            ro.settle_off = opts.debug_quarantine_only as u32;
            ro.quarantine_ns = opts.quarantine_ms.saturating_mul(1_000_000);
            ro.settle_max_ns = opts.settle_max_secs.saturating_mul(1_000_000_000);
            ro.max_amplification = opts.max_amplification;
            ro.no_split = opts.debug_no_split as u32;
            ro.stop_stage = opts.debug_stop_stage;
            ro.reply_inline = reply_inline as u32;
            ro.coop_mode = opts.cooperative as u32;
            ro.hash_seed = seed;
            ro.netns_cookie = netns_cookie;
            ro.netns_by_sock = netns_by_sock as u32;
        }};
    }

    let mut xopen = skel::xdp::InkcacheXdpSkelBuilder::default()
        .open(&mut st.xdp)
        .context("opening the XDP object")?;
    set_config!(xopen, "XDP");
    let m = &mut xopen.maps;
    m.sets.set_max_entries(layout.sets)?;
    m.set_state.set_max_entries(layout.sets)?;
    m.arena.set_max_entries(layout.arena_entries())?;
    m.ttl_hints.set_max_entries(opts.ttl_hints.max(1024))?;
    m.pending.set_max_entries(opts.pending_entries.max(1024))?;
    m.conns.set_max_entries(opts.max_conns.max(16))?;
    m.conn_socks
        .set_max_entries(opts.max_sockets.max(opts.max_conns).max(16))?;
    m.udp_writes
        .set_max_entries(opts.pending_entries.max(1024))?;
    if let Some((disp, func)) = ext {
        let p = &mut xopen.progs.inkcache_xdp;
        p.set_prog_type(ProgramType::Ext);
        p.set_attach_type(libbpf_rs::ProgramAttachType::CgroupInetIngress); // 0: none
        p.set_attach_target(disp.as_raw_fd(), Some(func))?;
    }
    let xdp = xopen.load().map_err(|e| load_err("XDP", e))?;

    // the other objects work on the XDP object's maps (one cache), each with its own scratch
    macro_rules! load_shared {
        ($builder:ty, $store:expr, $what:literal) => {{
            let mut open = <$builder>::default().open($store).context(concat!(
                "opening the ",
                $what,
                " object"
            ))?;
            set_config!(open, $what);
            share_maps(xdp.object(), open.open_object_mut(), &[])?;
            open.load().map_err(|e| load_err($what, e))?
        }};
    }
    let tc_ingress = load_shared!(
        skel::tc_ingress::InkcacheTcIngressSkelBuilder,
        &mut st.tc_ingress,
        "TC ingress"
    );
    let requests = load_shared!(
        skel::requests::InkcacheRequestsSkelBuilder,
        &mut st.requests,
        "requests"
    );
    let answers = load_shared!(
        skel::answers::InkcacheAnswersSkelBuilder,
        &mut st.answers,
        "answers"
    );
    let sock = load_shared!(
        skel::sock::InkcacheSockSkelBuilder,
        &mut st.sock,
        "socket-hook"
    );
    let iter = load_shared!(
        skel::iter::InkcacheIterSkelBuilder,
        &mut st.iter,
        "iterator"
    );

    // Absolute exptimes are unix times; the programs keep time with CLOCK_MONOTONIC.
    {
        use nix::time::{clock_gettime, ClockId};
        let rt = clock_gettime(ClockId::CLOCK_REALTIME)?;
        let mono = clock_gettime(ClockId::CLOCK_MONOTONIC)?;
        let ns =
            |t: nix::sys::time::TimeSpec| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128;
        let g = skel::xdp::types::ink_global {
            realtime_off_ns: (ns(rt) - ns(mono)) as i64,
            server_tgid,
            ..Default::default()
        };
        xdp.maps
            .global
            .update(&0u32.to_ne_bytes(), crate::abi::bytes_of(&g), MapFlags::ANY)?;
    }
    xdp.maps.ports.update(
        &0u32.to_ne_bytes(),
        &ports_bitmap(&opts.ports),
        MapFlags::ANY,
    )?;
    for net in allow {
        xdp.maps.allow.update(&lpm_key(net), &[1], MapFlags::ANY)?;
    }
    Ok(Loaded {
        xdp,
        tc_ingress,
        requests,
        answers,
        sock,
        iter,
        layout,
    })
}

/// Loads the programs once and attaches them to every interface of `opts`; the interfaces share
/// one cache. On failure nothing stays attached or pinned.
pub fn attach(opts: &AttachOpts) -> Result<Vec<AttachInfo>> {
    sys::require_root()?;
    opts.validate()?;
    if opts.ifaces.is_empty() {
        return Err(Error::Usage("no interface given (--iface)".into()).into());
    }
    let mut targets = Vec::new();
    for iface in &opts.ifaces {
        let ifindex = sys::ifindex(iface)?;
        let dir = pins::dir_for(iface)?;
        if dir.exists() || targets.iter().any(|t: &Target| t.iface == *iface) {
            return Err(Error::AlreadyAttached(iface.clone()).into());
        }
        targets.push(Target {
            iface: iface.clone(),
            ifindex,
            dir,
        });
    }
    sys::ensure_bpffs()?;
    check_kernel()?;
    let server = crate::servers::the_server(&opts.ports)?;
    let mut allow = opts.allow.clone();
    if allow.is_empty() {
        for t in &targets {
            for n in sys::connected_subnets(&t.iface)? {
                if !allow.contains(&n) {
                    allow.push(n); // two addresses of one subnet: listed once
                }
            }
        }
    }
    // Alone, or through a libxdp dispatcher per interface (built now, with a slot for inkcache:
    // the XDP program is loaded as an extension of the first one and linked to the others).
    let shared = match opts.xdp_attach {
        XdpAttach::Single => false,
        XdpAttach::Dispatcher => {
            if !xdp::freplace_supported() {
                return Err(Error::KernelLacks(
                    "extension (freplace) programs, which an XDP dispatcher needs".into(),
                )
                .into());
            }
            true
        }
        XdpAttach::Auto => xdp::freplace_supported(),
    };
    let _lock = if shared {
        Some(xdp::Lock::acquire()?)
    } else {
        None
    };
    let mut dstore: Vec<MaybeUninit<OpenObject>> =
        targets.iter().map(|_| MaybeUninit::uninit()).collect();
    let mut plans: Vec<Option<xdp::NewDispatcher<'_>>> = Vec::new();
    for (t, st) in targets.iter().zip(dstore.iter_mut()) {
        if !shared {
            plans.push(None);
            continue;
        }
        let cur = match xdp::read(t.ifindex)? {
            xdp::Current::Nothing => None,
            xdp::Current::Dispatcher(d) => Some(d),
            xdp::Current::Other { id, name, why } => {
                return Err(Error::Usage(format!(
                    "{} already has an XDP program ({name}, id {id}: {why}); inkcache shares an interface only through a libxdp dispatcher (load the other program with xdp-loader)",
                    t.iface
                ))
                .into())
            }
        };
        plans.push(Some(xdp::NewDispatcher::adding(
            st,
            t.ifindex,
            cur,
            "inkcache_xdp",
            opts.xdp_priority,
        )?));
    }
    let mut storage = ObjStorage::default();
    let ext = plans.iter().flatten().next().map(|d| d.target());
    let loaded = load_as(opts, &allow, &mut storage, ext, server.unwrap_or(0))?;

    // what each interface is (MAC, addresses), for "would the host deliver this?" (bpf/host.h):
    // every one before any VLAN device (attach_one), which then finds the interfaces' slots
    // taken, and before anything is attached, so that two interfaces sharing a slot are refused
    // at once
    for t in &targets {
        crate::host::publish(&loaded.xdp.maps.ifaces, t.ifindex, &t.iface)?;
    }
    let cg_links = attach_server_hooks(&loaded)?;

    let group: Vec<String> = targets.iter().map(|t| t.iface.clone()).collect();
    let mut done: Vec<AttachInfo> = Vec::new();
    for (t, plan) in targets.iter().zip(plans) {
        let progs = Progs {
            xdp: &loaded.xdp.progs.inkcache_xdp,
            tc_ingress: &loaded.tc_ingress.progs.inkcache_tc_ingress,
            requests: &loaded.requests.progs.inkcache_stream,
            answers: &loaded.answers.progs.inkcache_answers,
        };
        let r = attach_one(
            opts,
            t,
            plan,
            &loaded.xdp,
            &progs,
            &cg_links,
            loaded.layout,
            &allow,
            &group,
        );
        match r {
            Ok(info) => done.push(info),
            Err(e) => {
                for info in &done {
                    let _ = detach_info(info, &pins::dir_for(&info.iface)?);
                }
                let _ = pins::remove_dir(&t.dir);
                return Err(e);
            }
        }
    }
    Ok(done)
}

/// Hooks the programs that follow the server's sockets, on the root cgroup v2 (they see every
/// socket of the host and keep to the server's namespace and ports), before any interface is
/// attached: the server (re)starting or stopping empties the cache, each TCP connection it accepts
/// is followed (socket ops put it in conn_socks, whose stream verdict walks its bytes), UDP
/// requests are walked at cgroup ingress and the server's answers at cgroup egress. Then the
/// iterators take in what already exists: the server's sockets, and its established connections.
/// Returns the cgroup links (pinned by `attach_one`: they live as long as any attachment of the
/// group).
fn attach_server_hooks(loaded: &Loaded<'_>) -> Result<Vec<(&'static str, libbpf_rs::Link)>> {
    let cgroup = sys::cgroup2_root()?;
    let cg = std::fs::File::open(&cgroup)
        .with_context(|| format!("opening cgroup {}", cgroup.display()))?;
    let fd = cg.as_raw_fd();
    // the stream verdict first: every socket put in the sockhash is walked from its first byte
    loaded
        .requests
        .progs
        .inkcache_stream
        .attach_sockmap(loaded.xdp.maps.conn_socks.as_fd().as_raw_fd())
        .map_err(|e| Error::KernelLacks(format!("a sockhash stream verdict ({e})")))?;
    let sp = &loaded.sock.progs;
    let links = [
        ("link_bind4", sp.inkcache_bind4.attach_cgroup(fd)),
        ("link_bind6", sp.inkcache_bind6.attach_cgroup(fd)),
        ("link_release", sp.inkcache_release.attach_cgroup(fd)),
        ("link_sockops", sp.inkcache_sockops.attach_cgroup(fd)),
        (
            "link_requests",
            loaded
                .requests
                .progs
                .inkcache_udp_requests
                .attach_cgroup(fd),
        ),
        (
            "link_answers",
            loaded.answers.progs.inkcache_answers.attach_cgroup(fd),
        ),
    ];
    let mut cg_links = Vec::new();
    for (name, l) in links {
        let l = l.map_err(|e| {
            Error::KernelLacks(format!("cgroup hooks ({name}: {e}; needs Linux 5.9+)"))
        })?;
        cg_links.push((name, l));
    }
    for (what, prog) in [
        ("TCP", &loaded.iter.progs.inkcache_iter_tcp),
        ("UDP", &loaded.iter.progs.inkcache_iter_udp),
    ] {
        let link = prog
            .attach_iter_with_opts(libbpf_rs::IterOpts::None)
            .with_context(|| format!("the {what} socket iterator"))?;
        let mut it = libbpf_rs::Iter::new(&link)?;
        std::io::copy(&mut it, &mut std::io::sink())
            .with_context(|| format!("running the {what} socket iterator"))?;
    }
    Ok(cg_links)
}

/// Hands `to` every map of `from` it also defines (same name), so that both objects work on one
/// cache; the per-CPU scratch buffer, the constants and the maps named in `own` stay `to`'s own.
fn share_maps(from: &Object, to: &mut OpenObject, own: &[&str]) -> Result<()> {
    for mut m in to.maps_mut() {
        let name = m.name().to_string_lossy().into_owned();
        if name.contains('.') || name == "scratch" || own.contains(&name.as_str()) {
            continue;
        }
        let src = from
            .maps()
            .find(|x| x.name().to_string_lossy() == name)
            .with_context(|| format!("the XDP object has no map {name}"))?;
        m.reuse_fd(src.as_fd())?;
    }
    Ok(())
}

fn lpm_key(net: &IpNet) -> Vec<u8> {
    let (prefix, addr) = match net {
        IpNet::V4(n) => (
            96 + n.prefix_len() as u32,
            n.network().to_ipv6_mapped().octets(),
        ),
        IpNet::V6(n) => (n.prefix_len() as u32, n.network().octets()),
    };
    let mut k = prefix.to_ne_bytes().to_vec();
    k.extend_from_slice(&addr);
    k
}

/// The programs attached to each interface.
struct Progs<'a, 'obj> {
    xdp: &'a Program<'obj>,
    tc_ingress: &'a Program<'obj>,
    requests: &'a Program<'obj>,
    answers: &'a Program<'obj>,
}

#[allow(clippy::too_many_arguments)]
fn attach_one(
    opts: &AttachOpts,
    t: &Target,
    plan: Option<xdp::NewDispatcher<'_>>,
    xskel: &skel::xdp::InkcacheXdpSkel<'_>,
    progs: &Progs<'_, '_>,
    cg_links: &[(&str, libbpf_rs::Link)],
    layout: Layout,
    allow: &[IpNet],
    group: &[String],
) -> Result<AttachInfo> {
    let (xprog, iprog) = (progs.xdp, progs.tc_ingress);
    let tc_mode = tc::resolve(opts.tc_mode, t.ifindex)?;
    let ro = xskel.maps.rodata_data.context("XDP object has no rodata")?;
    // the interface's VLAN devices (the interface itself is described already, as are the
    // others of the group): a tagged frame is the host's only through one of them
    let vlans =
        crate::host::record_vlans(&xskel.maps.ifaces, &xskel.maps.vlans, t.ifindex, &t.iface)?;
    // TC ingress first: it only answers what XDP hands over, so it must be there when XDP starts.
    let ingress = tc::attach(iprog.as_fd(), t.ifindex, &t.iface, Dir::Ingress, tc_mode)?;
    let shared = plan.is_some();
    let xdp_id = Program::id_from_fd(xprog.as_fd())?;
    let xdp_how = if shared { "dispatcher" } else { "single" };
    let attached = match plan {
        Some(nd) => xdp::attach_dispatched(nd, xprog.as_fd(), &t.iface, opts.xdp_mode),
        None => xdp::attach_single(xprog.as_fd(), t.ifindex, &t.iface, opts.xdp_mode),
    };
    let mode = match attached {
        Ok(m) => m,
        Err(e) => {
            ingress.undo();
            return Err(e);
        }
    };

    let info = AttachInfo {
        iface: t.iface.clone(),
        ifindex: t.ifindex,
        netns: sys::netns_name(),
        netns_cookie: sys::netns_cookie().unwrap_or(0),
        xdp_mode: mode.into(),
        // what the loaded program does, not the option again (auto read the CPU's mitigations)
        reply_write: if ro.reply_inline != 0 {
            "inline"
        } else {
            "helper"
        }
        .into(),
        xdp_attach: xdp_how.into(),
        xdp_priority: if shared { opts.xdp_priority } else { 0 },
        tc_mode: tc_mode.into(),
        xdp_prog_id: xdp_id,
        requests_prog_id: Program::id_from_fd(progs.requests.as_fd())?,
        answers_prog_id: Program::id_from_fd(progs.answers.as_fd())?,
        tc_ingress_prog_id: Program::id_from_fd(iprog.as_fd())?,
        tc_handle: TC_HANDLE,
        tc_priority: TC_PRIORITY,
        ports: opts.ports.clone(),
        allow: allow.iter().map(|n| n.to_string()).collect(),
        max_amplification: opts.max_amplification,
        cache_mb: opts.cache_mb,
        item_bytes: opts.item_bytes,
        layout,
        item_max: ITEM_MAX as u32,
        max_age_secs: opts.max_age_secs,
        quarantine_ms: opts.quarantine_ms,
        max_conns: opts.max_conns,
        settle_max_secs: opts.settle_max_secs,
        cooperative: opts.cooperative,
        coop_seed: if opts.cooperative {
            Some(ro.hash_seed)
        } else {
            None
        },
        group: group.to_vec(),
        vlans,
    };
    let pin = || -> Result<()> {
        std::fs::create_dir_all(&t.dir).with_context(|| format!("creating {}", t.dir.display()))?;
        let m = &xskel.maps;
        for (name, link) in cg_links {
            pin_fd(link.as_fd(), &t.dir.join(name))?;
        }
        for name in pins::MAPS {
            let map = xskel
                .object()
                .maps()
                .find(|m| m.name().to_string_lossy() == *name)
                .with_context(|| format!("the XDP object has no map {name}"))?;
            pin_fd(map.as_fd(), &t.dir.join(name))?;
        }
        pin_fd(xprog.as_fd(), &t.dir.join("xdp"))?;
        pin_fd(iprog.as_fd(), &t.dir.join("tc_ingress"))?;
        ingress.pin(&t.dir, Dir::Ingress)?;
        let slot = group.iter().position(|g| *g == t.iface).unwrap_or(0);
        pins::write_info(&m.meta, slot, &info)
    };
    if let Err(e) = pin() {
        let _ = xdp::detach(t.ifindex, xdp_how, mode, xprog.as_fd(), xdp_id);
        ingress.undo();
        let _ = pins::remove_dir(&t.dir);
        return Err(e);
    }
    // pinned: the links live on in bpffs
    drop(ingress);
    Ok(info)
}

use xdp::pin_fd;

/// Removes what `attach` put on `iface` (its XDP program, its TC filter, its pins) and nothing else.
pub fn detach(iface: &str) -> Result<AttachInfo> {
    sys::require_root()?;
    sys::ensure_bpffs()?;
    let dir = pins::dir_for(iface)?;
    if !dir.exists() {
        return Err(Error::NotAttached(iface.into()).into());
    }
    let info = pins::read_info(&dir)?;
    detach_info(&info, &dir)?;
    Ok(info)
}

fn detach_info(info: &AttachInfo, dir: &std::path::Path) -> Result<()> {
    // The interface may be gone (then the kernel already removed the attachments) or renumbered,
    // or its namespace may be gone (then we are not in it).
    if pins::in_this_netns(info) && sys::ifindex(&info.iface).ok() == Some(info.ifindex) {
        if let Ok(fd) = Program::fd_from_pinned_path(dir.join("xdp")) {
            xdp::detach(
                info.ifindex,
                &info.xdp_attach,
                &info.xdp_mode,
                fd.as_fd(),
                info.xdp_prog_id,
            )
            .with_context(|| format!("{}: detaching the XDP program", info.iface))?;
        }
        tc::detach(
            dir,
            "tc_ingress",
            info.ifindex,
            &info.iface,
            Dir::Ingress,
            &info.tc_mode,
            info.tc_ingress_prog_id,
        )?;
    }
    pins::remove_dir(dir)
}

/// Whether each part of the attachment pinned at `dir` is still in place: (XDP on the interface,
/// the hooks on the server's sockets, TC ingress on the interface).
pub fn attached(info: &AttachInfo, dir: &std::path::Path) -> (bool, bool, bool) {
    if sys::ifindex(&info.iface).ok() != Some(info.ifindex) {
        return (false, false, false);
    }
    let i = info.ifindex;
    // the hooks on the server's sockets live as long as their pinned links
    let hooks = ["link_sockops", "link_requests", "link_answers"]
        .iter()
        .all(|l| dir.join(l).exists());
    (
        xdp::is_attached(i, &info.xdp_attach, info.xdp_prog_id),
        hooks,
        tc::is_attached(
            dir,
            "tc_ingress",
            i,
            Dir::Ingress,
            &info.tc_mode,
            info.tc_ingress_prog_id,
        ),
    )
}

/// Attaches a pass-through XDP program to the peer end of a veth pair (needed for XDP_TX replies
/// to be delivered), or removes it.
pub fn veth_peer(iface: &str, remove: bool) -> Result<()> {
    sys::require_root()?;
    let ifindex = sys::ifindex(iface)? as i32;
    let mut obj = MaybeUninit::uninit();
    let open = skel::pass::InkcachePassSkelBuilder::default().open(&mut obj)?;
    let sk = open.load().map_err(|e| load_err("pass", e))?;
    let x = Xdp::new(sk.progs.inkcache_pass.as_fd());
    if remove {
        x.detach(ifindex, XdpFlags::DRV_MODE)
            .with_context(|| format!("{iface}: removing the XDP program"))?;
        return Ok(());
    }
    let q = x.query(ifindex, XdpFlags::NONE)?;
    if q.prog_id != 0 {
        return Ok(()); // any XDP program on the peer is enough
    }
    x.attach(ifindex, XdpFlags::DRV_MODE | XdpFlags::UPDATE_IF_NOEXIST)
        .with_context(|| format!("{iface}: attaching the pass-through XDP program"))
}
