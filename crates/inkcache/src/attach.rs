//! Loading, attaching and detaching.
use std::{
    mem::MaybeUninit,
    os::fd::{AsFd, AsRawFd},
    path::PathBuf,
};

use anyhow::{Context, Result};
use ipnet::IpNet;
use libbpf_rs::{
    libbpf_sys,
    skel::{OpenSkel, Skel, SkelBuilder},
    MapCore, MapFlags, Object, OpenObject, Program, TcHookBuilder, Xdp, XdpFlags, TC_EGRESS,
    TC_INGRESS,
};

use crate::{
    abi::{ITEM_CAP, ITEM_MAX},
    pins::{self, AttachInfo},
    skel, sys, Error, Layout,
};

/// TC filter handle and priority of the egress and the ingress program (what detach looks for).
pub const TC_HANDLE: u32 = 0x1c4c;
pub const TC_PRIORITY: u32 = 0x1c4c;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpMode {
    /// Native (driver) mode if the driver supports it, generic otherwise.
    Auto,
    Native,
    Generic,
}

#[derive(Clone, Debug)]
pub struct AttachOpts {
    pub ifaces: Vec<String>,
    pub ports: Vec<u16>,
    /// Sources the kernel may answer; empty means each interface's connected subnets.
    pub allow: Vec<IpNet>,
    pub cache_mb: u32,
    /// Expected average item size: splits `cache_mb` between the index and the log.
    pub item_bytes: u32,
    pub xdp_mode: XdpMode,
    /// Oldest fill the kernel serves, in seconds (items whose expiry it cannot know).
    pub max_age_secs: u64,
    /// Get requests remembered while waiting for their replies (bounds the `pending` map).
    pub pending_entries: u32,
    /// Milliseconds a write the server does not answer (noreply, UDP, connections not followed)
    /// keeps its key's set from filling (the server's time to apply a write).
    pub quarantine_ms: u64,
    /// TCP connections followed so that writes are settled by the server's answers.
    pub max_conns: u32,
    /// Seconds after which a write still unanswered no longer blocks fills.
    pub settle_max_secs: u64,
    /// Keys whose expiry the kernel remembers (bounds the `ttl_hints` map).
    pub ttl_hints: u32,
    /// Sources outside `allow` are answered by the kernel only with replies at most this many
    /// times the request (UDP payloads); 0: never.
    pub max_amplification: u32,
    /// Debug only: never invalidate (lets the consistency checker prove it can fail).
    pub debug_no_invalidation: bool,
    /// Debug only: settle every write by the quarantine, never by the server's answer (shows
    /// what the exact settling adds).
    pub debug_quarantine_only: bool,
    /// Debug only: pass partly missing multi-key gets whole instead of splitting them (to
    /// measure what the split saves).
    pub debug_no_split: bool,
    /// Cooperative mode (see crate::coop): the server installs and invalidates; XDP walks no
    /// mutations, TC egress fills nothing.
    pub cooperative: bool,
}

impl Default for AttachOpts {
    fn default() -> Self {
        AttachOpts {
            ifaces: vec![],
            ports: vec![11211],
            allow: vec![],
            cache_mb: 64,
            item_bytes: crate::layout::DEFAULT_ITEM_BYTES,
            xdp_mode: XdpMode::Auto,
            max_age_secs: 60,
            pending_entries: 65536,
            quarantine_ms: 1000,
            max_conns: 4096,
            settle_max_secs: 60,
            ttl_hints: 262144,
            max_amplification: 0,
            debug_no_invalidation: false,
            debug_quarantine_only: false,
            debug_no_split: false,
            cooperative: false,
        }
    }
}

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

impl AttachOpts {
    /// Refuses options out of range, with the one-line message the CLI prints.
    pub fn validate(&self) -> Result<()> {
        if self.ifaces.len() > pins::MAX_GROUP {
            return Err(Error::Usage(format!(
                "at most {} interfaces in one attach",
                pins::MAX_GROUP
            ))
            .into());
        }
        if self.ports.is_empty() || self.ports.contains(&0) {
            return Err(Error::Usage("port out of range: ports are 1-65535".into()).into());
        }
        if self.cache_mb == 0 || self.cache_mb > crate::layout::CACHE_MB_MAX {
            return Err(Error::Usage(format!(
                "--cache-mb must be 1-{}",
                crate::layout::CACHE_MB_MAX
            ))
            .into());
        }
        if !(16..=ITEM_CAP as u32).contains(&self.item_bytes) {
            return Err(Error::Usage(format!("--item-bytes must be 16-{ITEM_CAP}")).into());
        }
        Ok(())
    }
}

/// Storage for the four objects of an attachment (the skeletons borrow it while they live).
pub struct ObjStorage {
    xdp: MaybeUninit<OpenObject>,
    tc: MaybeUninit<OpenObject>,
    tc_ingress: MaybeUninit<OpenObject>,
    sock: MaybeUninit<OpenObject>,
}

impl Default for ObjStorage {
    fn default() -> Self {
        ObjStorage {
            xdp: MaybeUninit::uninit(),
            tc: MaybeUninit::uninit(),
            tc_ingress: MaybeUninit::uninit(),
            sock: MaybeUninit::uninit(),
        }
    }
}

/// The programs of one attachment, loaded and configured but attached nowhere: every object works
/// on the XDP object's maps (one cache). `attach` hooks them to interfaces; the eBPF unit tests
/// run them on crafted packets (`BPF_PROG_TEST_RUN`).
pub struct Loaded<'obj> {
    pub xdp: skel::xdp::InkcacheXdpSkel<'obj>,
    pub tc_egress: skel::tc::InkcacheTcSkel<'obj>,
    pub tc_ingress: skel::tc_ingress::InkcacheTcIngressSkel<'obj>,
    pub sock: skel::sock::InkcacheSockSkel<'obj>,
    pub layout: Layout,
}

/// Loads and configures the programs for `opts` (which `validate` accepted): the constants of
/// bpf/config.h, the map sizes, the clock offset, the ports and the allowlist `allow`.
pub fn load<'obj>(
    opts: &AttachOpts,
    allow: &[IpNet],
    st: &'obj mut ObjStorage,
) -> Result<Loaded<'obj>> {
    let layout = Layout::for_budget(opts.cache_mb, opts.item_bytes);
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
            ro.max_age_ns = opts.max_age_secs.saturating_mul(1_000_000_000);
            ro.invalidation_off = opts.debug_no_invalidation as u32;
            ro.settle_off = opts.debug_quarantine_only as u32;
            ro.quarantine_ns = opts.quarantine_ms.saturating_mul(1_000_000);
            ro.settle_max_ns = opts.settle_max_secs.saturating_mul(1_000_000_000);
            ro.max_amplification = opts.max_amplification;
            ro.no_split = opts.debug_no_split as u32;
            ro.coop_mode = opts.cooperative as u32;
        }};
    }

    let mut xopen = skel::xdp::InkcacheXdpSkelBuilder::default()
        .open(&mut st.xdp)
        .context("opening the XDP object")?;
    set_config!(xopen, "XDP");
    let m = &mut xopen.maps;
    m.sets.set_max_entries(layout.sets)?;
    m.arena.set_max_entries(layout.segs)?;
    m.ttl_hints.set_max_entries(opts.ttl_hints.max(1024))?;
    m.pending.set_max_entries(opts.pending_entries.max(1024))?;
    m.conns.set_max_entries(opts.max_conns.max(16))?;
    m.udp_writes
        .set_max_entries(opts.pending_entries.max(1024))?;
    let xdp = xopen.load().map_err(|e| load_err("XDP", e))?;

    let mut topen = skel::tc::InkcacheTcSkelBuilder::default()
        .open(&mut st.tc)
        .context("opening the TC object")?;
    set_config!(topen, "TC");
    share_maps(xdp.object(), topen.open_object_mut(), &[])?;
    let tc_egress = topen.load().map_err(|e| load_err("TC", e))?;

    let mut iopen = skel::tc_ingress::InkcacheTcIngressSkelBuilder::default()
        .open(&mut st.tc_ingress)
        .context("opening the TC ingress object")?;
    set_config!(iopen, "TC ingress");
    share_maps(xdp.object(), iopen.open_object_mut(), &[])?;
    let tc_ingress = iopen.load().map_err(|e| load_err("TC ingress", e))?;

    let mut sopen = skel::sock::InkcacheSockSkelBuilder::default()
        .open(&mut st.sock)
        .context("opening the socket-hook object")?;
    set_config!(sopen, "socket-hook");
    sopen
        .maps
        .rodata_data
        .as_deref_mut()
        .context("socket-hook object has no rodata")?
        .netns_cookie = sys::netns_cookie().unwrap_or(0);
    share_maps(xdp.object(), sopen.open_object_mut(), &["server_socks"])?;
    let sock = sopen.load().map_err(|e| load_err("socket-hook", e))?;

    // Absolute exptimes are unix times; the programs keep time with CLOCK_MONOTONIC.
    {
        use nix::time::{clock_gettime, ClockId};
        let rt = clock_gettime(ClockId::CLOCK_REALTIME)?;
        let mono = clock_gettime(ClockId::CLOCK_MONOTONIC)?;
        let ns =
            |t: nix::sys::time::TimeSpec| t.tv_sec() as i128 * 1_000_000_000 + t.tv_nsec() as i128;
        let g = skel::xdp::types::ink_global {
            realtime_off_ns: (ns(rt) - ns(mono)) as i64,
            ..Default::default()
        };
        xdp.maps
            .global
            .update(&0u32.to_ne_bytes(), crate::abi::bytes_of(&g), MapFlags::ANY)?;
    }
    for p in &opts.ports {
        xdp.maps
            .ports
            .update(&p.to_ne_bytes(), &[1], MapFlags::ANY)?;
    }
    for net in allow {
        xdp.maps.allow.update(&lpm_key(net), &[1], MapFlags::ANY)?;
    }
    Ok(Loaded {
        xdp,
        tc_egress,
        tc_ingress,
        sock,
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
    let mut allow = opts.allow.clone();
    if allow.is_empty() {
        for t in &targets {
            allow.extend(sys::connected_subnets(&t.iface)?);
        }
    }
    let mut storage = ObjStorage::default();
    let loaded = load(opts, &allow, &mut storage)?;

    // The server (re)starting or stopping empties the cache: hooks on the root cgroup v2 see every
    // bind and release on the host; the programs keep to the server's namespace and ports.
    let cgroup = sys::cgroup2_root()?;
    let cg = std::fs::File::open(&cgroup)
        .with_context(|| format!("opening cgroup {}", cgroup.display()))?;
    let sp = &loaded.sock.progs;
    let links = [
        (
            "link_bind4",
            sp.inkcache_bind4.attach_cgroup(cg.as_raw_fd()),
        ),
        (
            "link_bind6",
            sp.inkcache_bind6.attach_cgroup(cg.as_raw_fd()),
        ),
        (
            "link_release",
            sp.inkcache_release.attach_cgroup(cg.as_raw_fd()),
        ),
    ];
    let mut cg_links = Vec::new();
    for (name, l) in links {
        let l = l.map_err(|e| {
            Error::KernelLacks(format!(
                "cgroup socket hooks ({name}: {e}; needs Linux 5.9+)"
            ))
        })?;
        cg_links.push((name, l));
    }

    let group: Vec<String> = targets.iter().map(|t| t.iface.clone()).collect();
    let mut done: Vec<AttachInfo> = Vec::new();
    for t in &targets {
        let progs = Progs {
            xdp: &loaded.xdp.progs.inkcache_xdp,
            tc_egress: &loaded.tc_egress.progs.inkcache_tc_egress,
            tc_ingress: &loaded.tc_ingress.progs.inkcache_tc_ingress,
        };
        let r = attach_one(
            opts,
            t,
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

fn xdp_attach(prog: &Program<'_>, t: &Target, mode: XdpMode) -> Result<&'static str> {
    let x = Xdp::new(prog.as_fd());
    let q = x
        .query(t.ifindex as i32, XdpFlags::NONE)
        .context("querying XDP programs")?;
    let existing = [q.prog_id, q.drv_prog_id, q.skb_prog_id, q.hw_prog_id];
    if let Some(&id) = existing.iter().find(|&&id| id != 0) {
        return Err(Error::XdpBusy {
            iface: t.iface.clone(),
            id,
        }
        .into());
    }
    let try_mode =
        |flags: XdpFlags| x.attach(t.ifindex as i32, flags | XdpFlags::UPDATE_IF_NOEXIST);
    match mode {
        XdpMode::Native => try_mode(XdpFlags::DRV_MODE)
            .map(|_| "native")
            .map_err(|e| anyhow::anyhow!("{}: native XDP attach failed: {e}", t.iface)),
        XdpMode::Generic => try_mode(XdpFlags::SKB_MODE)
            .map(|_| "generic")
            .map_err(|e| anyhow::anyhow!("{}: generic XDP attach failed: {e}", t.iface)),
        XdpMode::Auto => match try_mode(XdpFlags::DRV_MODE) {
            Ok(()) => Ok("native"),
            Err(_) => try_mode(XdpFlags::SKB_MODE)
                .map(|_| "generic")
                .map_err(|e| anyhow::anyhow!("{}: XDP attach failed: {e}", t.iface)),
        },
    }
}

/// The programs attached to each interface.
struct Progs<'a, 'obj> {
    xdp: &'a Program<'obj>,
    tc_egress: &'a Program<'obj>,
    tc_ingress: &'a Program<'obj>,
}

/// Our clsact filter (fixed handle and priority) on one interface's ingress or egress.
fn tc_hook(
    fd: std::os::fd::BorrowedFd<'_>,
    ifindex: u32,
    handle: u32,
    priority: u32,
    at: libbpf_rs::TcAttachPoint,
) -> libbpf_rs::TcHook {
    TcHookBuilder::new(fd)
        .ifindex(ifindex as i32)
        .replace(false)
        .handle(handle)
        .priority(priority)
        .hook(at)
}

#[allow(clippy::too_many_arguments)]
fn attach_one(
    opts: &AttachOpts,
    t: &Target,
    xskel: &skel::xdp::InkcacheXdpSkel<'_>,
    progs: &Progs<'_, '_>,
    cg_links: &[(&str, libbpf_rs::Link)],
    layout: Layout,
    allow: &[IpNet],
    group: &[String],
) -> Result<AttachInfo> {
    let (xprog, tprog, iprog) = (progs.xdp, progs.tc_egress, progs.tc_ingress);
    // TC ingress first: it only answers what XDP hands over, so it must be there when XDP starts.
    let mut ingress = tc_hook(iprog.as_fd(), t.ifindex, TC_HANDLE, TC_PRIORITY, TC_INGRESS);
    ingress
        .create()
        .with_context(|| format!("{}: creating the clsact qdisc", t.iface))?;
    ingress
        .attach()
        .map_err(|e| anyhow::anyhow!("{}: attaching the TC ingress program: {e}", t.iface))?;
    let mode = match xdp_attach(xprog, t, opts.xdp_mode) {
        Ok(m) => m,
        Err(e) => {
            let _ = ingress.detach();
            return Err(e);
        }
    };
    let mut egress = tc_hook(tprog.as_fd(), t.ifindex, TC_HANDLE, TC_PRIORITY, TC_EGRESS);
    if let Err(e) = egress.attach() {
        let _ = Xdp::new(xprog.as_fd()).detach(t.ifindex as i32, XdpFlags::NONE);
        let _ = ingress.detach();
        return Err(anyhow::anyhow!(
            "{}: attaching the TC egress program: {e}",
            t.iface
        ));
    }

    let info = AttachInfo {
        iface: t.iface.clone(),
        ifindex: t.ifindex,
        netns: sys::netns_name().map(str::to_string),
        xdp_mode: mode.into(),
        xdp_prog_id: Program::id_from_fd(xprog.as_fd())?,
        tc_prog_id: Program::id_from_fd(tprog.as_fd())?,
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
        group: group.to_vec(),
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
        pin_fd(tprog.as_fd(), &t.dir.join("tc_egress"))?;
        pin_fd(iprog.as_fd(), &t.dir.join("tc_ingress"))?;
        let slot = group.iter().position(|g| *g == t.iface).unwrap_or(0);
        pins::write_info(&m.meta, slot, &info)
    };
    if let Err(e) = pin() {
        let _ = detach_info(&info, &t.dir);
        // the pins did not all make it: detach_info cannot find what it has no pin for
        let _ = ingress.detach();
        return Err(e);
    }
    Ok(info)
}

/// Pins a map or program fd at `path` in bpffs.
fn pin_fd(fd: std::os::fd::BorrowedFd<'_>, path: &std::path::Path) -> Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: `fd` is a live BPF object fd for the duration of the borrow, and `c` is a
    // NUL-terminated path that outlives the call.
    let r = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), c.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(-r))
            .with_context(|| format!("pinning {}", path.display()));
    }
    Ok(())
}

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
    let here = sys::netns_name().is_none() || info.netns.as_deref() == sys::netns_name();
    let ns_alive =
        sys::netns_name().is_none_or(|n| std::path::Path::new("/run/netns").join(n).exists());
    if here && ns_alive && sys::ifindex(&info.iface).ok() == Some(info.ifindex) {
        let ifindex = info.ifindex as i32;
        if let Ok(fd) = Program::fd_from_pinned_path(dir.join("xdp")) {
            let x = Xdp::new(fd.as_fd());
            let q = x.query(ifindex, XdpFlags::NONE)?;
            let flags = if info.xdp_mode == "generic" {
                XdpFlags::SKB_MODE
            } else {
                XdpFlags::DRV_MODE
            };
            let current = if info.xdp_mode == "generic" {
                q.skb_prog_id
            } else {
                q.drv_prog_id
            };
            if current == info.xdp_prog_id {
                // Detach only if ours is still the one attached (XDP_FLAGS_REPLACE with old fd).
                let opts = libbpf_sys::bpf_xdp_attach_opts {
                    sz: std::mem::size_of::<libbpf_sys::bpf_xdp_attach_opts>() as _,
                    old_prog_fd: fd.as_raw_fd(),
                    ..Default::default()
                };
                // SAFETY: plain syscall wrapper; `opts` is a valid, sized struct living across the
                // call and `old_prog_fd` is an open fd owned by `fd`.
                let r = unsafe {
                    libbpf_sys::bpf_xdp_detach(ifindex, (flags | XdpFlags::REPLACE).bits(), &opts)
                };
                if r != 0 {
                    return Err(std::io::Error::from_raw_os_error(-r))
                        .with_context(|| format!("{}: detaching the XDP program", info.iface));
                }
            }
        }
        for (pin, prog_id, at, what) in [
            ("tc_egress", info.tc_prog_id, TC_EGRESS, "egress"),
            ("tc_ingress", info.tc_ingress_prog_id, TC_INGRESS, "ingress"),
        ] {
            let Ok(fd) = Program::fd_from_pinned_path(dir.join(pin)) else {
                continue;
            };
            let mut hook = tc_hook(
                fd.as_fd(),
                info.ifindex,
                info.tc_handle,
                info.tc_priority,
                at,
            );
            // only if the filter there is still ours
            if prog_id != 0 && hook.query().ok() == Some(prog_id) {
                hook.detach()
                    .with_context(|| format!("{}: detaching the TC {what} program", info.iface))?;
            }
        }
    }
    pins::remove_dir(dir)
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
