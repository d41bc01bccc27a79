//! inkcached's kernel-bypass options in one place: the AF_XDP miss path (`--afxdp`), key
//! steering (`--steer`, `--steer-cpumap`) and cooperative mode (`--cooperative`). [`setup`]
//! wires them up after the sockets are bound; what it returns undoes it on drop (the XDP link
//! and the AF_XDP sockets close with the process in any case: nothing outlives it).

use crate::net::WorkerSockets;
use crate::{afxdp, steer};
use anyhow::{bail, Context, Result};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle};
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::os::fd::AsRawFd;

mod skel {
    #![allow(clippy::all, missing_docs, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/inkcached_xdp.skel.rs"));
}

/// Kernel-bypass options: inkcached's own long options (memcached has none of them), parsed
/// with memcached's command line (config.rs).
#[derive(Debug, Default, Clone)]
pub struct Opts {
    /// `--afxdp IFACE`: receive UDP requests through AF_XDP sockets on IFACE (inkcache's XDP
    /// program hands them over when it is attached there in cooperative mode, else inkcached
    /// attaches its own); falls back to sockets.
    pub afxdp: Option<String>,
    /// `--steer`: each worker owns the keys whose first-key hash maps to it (sk_reuseport for
    /// UDP sockets, the same owner for AF_XDP sockets).
    pub steer: bool,
    /// `--steer-cpumap IFACE`: XDP cpumap steering, each UDP request to the CPU of the worker
    /// owning its key (worker w pinned to CPU w; implies --steer; not with --afxdp or inkcache
    /// attached).
    pub steer_cpumap: Option<String>,
    /// `--cooperative IFACE`: install and invalidate the kernel cache of the inkcache attachment
    /// on IFACE from the server's own reads and writes (`inkcache attach --cooperative`).
    pub cooperative: Option<String>,
}

/// inkcached's own long options: (name, takes a value). `--name VALUE` or `--name=VALUE`.
pub const LONG: &[(&str, bool)] = &[
    ("afxdp", true),
    ("steer", false),
    ("steer-cpumap", true),
    ("cooperative", true),
];

impl Opts {
    /// Records one of [`LONG`].
    pub fn set(&mut self, name: &str, val: Option<String>) {
        match name {
            "afxdp" => self.afxdp = val,
            "steer" => self.steer = true,
            "steer-cpumap" => self.steer_cpumap = val,
            "cooperative" => self.cooperative = val,
            _ => {}
        }
    }

    /// Their lines in `-h`.
    pub const USAGE: &'static str = "\
--afxdp=<iface>           receive UDP requests through AF_XDP sockets on <iface>
--steer                   each worker owns the keys that hash to it (UDP)
--steer-cpumap=<iface>    XDP cpumap steering of UDP requests to their key's worker
--cooperative=<iface>     drive the kernel cache of `inkcache attach --cooperative`
";
}

/// What [`setup`] set up.
#[derive(Default)]
pub struct Bypass {
    link: Option<Link>,
    cfg: Option<MapHandle>,
    dsts: Vec<(MapHandle, [u8; 16])>,
    /// Worker w runs on CPU w (cpumap mode).
    pub pin_workers: bool,
}

impl Drop for Bypass {
    fn drop(&mut self) {
        // inkcache's XDP program stops handing requests over (its maps outlive us)
        if let Some(cfg) = &self.cfg {
            let _ = cfg.update(&0u32.to_ne_bytes(), &[0u8; 16], MapFlags::ANY);
        }
        for (m, k) in &self.dsts {
            let _ = m.delete(k);
        }
        self.link.take();
    }
}

fn ifindex(iface: &str) -> Result<u32> {
    let c = std::ffi::CString::new(iface).context("bad interface name")?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {iface}");
    }
    Ok(i)
}

/// The xsk_cfg value (layout of `struct xsk_cfg` in bpf/xsk.h, checked against the skeleton's).
fn cfg_bytes(port: u16, steer: bool, slots: u32) -> [u8; 16] {
    const _: () = assert!(std::mem::size_of::<skel::types::xsk_cfg>() == 16);
    let mut v = [0u8; 16];
    v[0..2].copy_from_slice(&port.to_ne_bytes());
    v[2..4].copy_from_slice(&u16::from(steer).to_ne_bytes());
    v[4..8].copy_from_slice(&slots.to_ne_bytes());
    v
}

/// Wires up the options: steering on the bound UDP sockets, AF_XDP sockets handed to workers
/// (`per_worker[w].xsk`). An AF_XDP path that cannot be set up falls back to the sockets with
/// one line on stderr.
pub fn setup(
    o: &Opts,
    workers: usize,
    udp_port: u16,
    addrs: &[IpAddr],
    per_worker: &mut [WorkerSockets],
    verbose: bool,
) -> Result<Bypass> {
    let mut b = Bypass::default();
    if let Some(iface) = &o.cooperative {
        crate::coop::enable(iface, workers)?;
    }
    let steer = o.steer || o.steer_cpumap.is_some();
    if (o.afxdp.is_some() || o.steer_cpumap.is_some()) && udp_port == 0 {
        bail!("--afxdp and --steer-cpumap need UDP (-U)");
    }
    if o.afxdp.is_some() && o.steer_cpumap.is_some() {
        bail!("--steer-cpumap and --afxdp exclude each other");
    }
    if steer && udp_port != 0 {
        let groups = per_worker.first().map_or(0, |p| p.udp.len());
        let g: Vec<Vec<&socket2::Socket>> = (0..groups)
            .map(|i| per_worker.iter().map(|p| &p.udp[i]).collect())
            .collect();
        steer::attach_reuseport(&g, workers)?;
    }
    if let Some(iface) = &o.steer_cpumap {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if workers > cpus || workers > 256 {
            bail!("--steer-cpumap needs at most one worker per CPU (-t {workers}, {cpus} CPUs)");
        }
        if inkcache::coop::find_attachment(iface).is_some() {
            bail!("--steer-cpumap needs inkcache not attached to {iface}");
        }
        let idx = ifindex(iface)?;
        let (link, cfg, dsts, _) = own_xdp(iface, idx, workers as u32, addrs)?;
        cfg.update(
            &0u32.to_ne_bytes(),
            &cfg_bytes(udp_port, true, 1),
            MapFlags::ANY,
        )?;
        b.link = Some(link);
        b.cfg = Some(cfg);
        b.dsts = dsts;
        b.pin_workers = true;
    }
    if let Some(iface) = &o.afxdp {
        if let Err(e) = afxdp_setup(
            &mut b, iface, workers, steer, udp_port, addrs, per_worker, verbose,
        ) {
            eprintln!("inkcached: AF_XDP unavailable on {iface} ({e:#}); serving UDP with sockets");
            for p in per_worker.iter_mut() {
                p.xsk.clear();
            }
            b.cfg.take();
            b.link.take();
        }
    }
    Ok(b)
}

/// The link, xsk_cfg, the xsk_dsts entries and xsks of inkcached's own XDP object.
type Own = (Link, MapHandle, Vec<(MapHandle, [u8; 16])>, MapHandle);

/// Loads and attaches inkcached's own XDP program (cpumap mode when `cpumap` > 0).
fn own_xdp(iface: &str, ifindex: u32, cpumap: u32, addrs: &[IpAddr]) -> Result<Own> {
    let storage = Box::leak(Box::new(MaybeUninit::uninit()));
    let mut open = skel::InkcachedXdpSkelBuilder::default()
        .open(storage)
        .context("opening inkcached's XDP object")?;
    open.maps
        .rodata_data
        .as_deref_mut()
        .context("XDP object has no rodata")?
        .n_cpus = cpumap;
    let sk = open.load().context("loading inkcached's XDP program")?;
    for c in 0..cpumap {
        // struct bpf_cpumap_val: queue size, then no program
        let mut v = [0u8; 8];
        v[0..4].copy_from_slice(&2048u32.to_ne_bytes());
        sk.maps
            .cpus
            .update(&c.to_ne_bytes(), &v, MapFlags::ANY)
            .context("setting up the cpumap")?;
    }
    let link = sk
        .progs
        .inkcached_xdp
        .attach_xdp(ifindex as i32)
        .with_context(|| format!("attaching XDP to {iface} (another XDP program there?)"))?;
    let handle = |m: &libbpf_rs::Map| MapHandle::try_from(m).context("map handle");
    let cfg = handle(&sk.maps.xsk_cfg)?;
    let dm = handle(&sk.maps.xsk_dsts)?;
    let mut dsts = Vec::new();
    for a in afxdp::dst_addrs(iface, addrs) {
        dm.update(&a, &[1], MapFlags::ANY)?;
        dsts.push((handle(&sk.maps.xsk_dsts)?, a));
    }
    let xsks = handle(&sk.maps.xsks)?;
    // the maps and the program stay referenced by the handles and the link
    drop(sk);
    Ok((link, cfg, dsts, xsks))
}

#[allow(clippy::too_many_arguments)]
fn afxdp_setup(
    b: &mut Bypass,
    iface: &str,
    workers: usize,
    steer: bool,
    port: u16,
    addrs: &[IpAddr],
    per_worker: &mut [WorkerSockets],
    verbose: bool,
) -> Result<()> {
    let idx = ifindex(iface)?;
    let (xsks, cfg) = match inkcache::coop::find_attachment(iface) {
        Some(dir) => {
            // a transparent attachment must see every request at the server's sockets (its
            // socket-side programs walk the writes and fill from the answers)
            let info = inkcache::pins::read_info(&dir)?;
            if !info.cooperative {
                bail!(
                    "inkcache on {iface} is not in cooperative mode (attach it with \
                     --cooperative and start inkcached with --cooperative {iface})"
                );
            }
            let open = |n: &str| {
                MapHandle::from_pinned_path(dir.join(n)).with_context(|| {
                    format!("inkcache's pinned map {n} (attached before AF_XDP support?)")
                })
            };
            let (xsks, cfg, dm) = (open("xsks")?, open("xsk_cfg")?, open("xsk_dsts")?);
            for a in afxdp::dst_addrs(iface, addrs) {
                dm.update(&a, &[1], MapFlags::ANY)?;
                b.dsts.push((open("xsk_dsts")?, a));
            }
            (xsks, cfg)
        }
        None => {
            let (link, cfg, dsts, xsks) = own_xdp(iface, idx, 0, addrs)?;
            b.link = Some(link);
            b.dsts = dsts;
            (xsks, cfg)
        }
    };
    let socks = afxdp::open(idx, afxdp::rx_queues(iface), workers, steer)?;
    for (key, s, _) in &socks.sockets {
        xsks.update(
            &key.to_ne_bytes(),
            &(s.as_raw_fd() as u32).to_ne_bytes(),
            MapFlags::ANY,
        )
        .context("adding an AF_XDP socket to the xsks map")?;
    }
    cfg.update(
        &0u32.to_ne_bytes(),
        &cfg_bytes(port, steer, socks.slots),
        MapFlags::ANY,
    )?;
    b.cfg = Some(cfg);
    if verbose {
        eprintln!(
            "inkcached: AF_XDP on {iface}: {} queue(s), {} socket(s), {} mode",
            socks.queues,
            socks.sockets.len(),
            if socks.zero_copy { "zero-copy" } else { "copy" }
        );
    }
    for (_, s, w) in socks.sockets {
        per_worker[w].xsk.push(s);
    }
    Ok(())
}
