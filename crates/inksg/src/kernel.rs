//! Loading and attaching the scatter-gather programs, and the maps they share with user space:
//! groups of workers, client registrations, custom aggregation programs, counters.
use std::{
    collections::HashSet,
    net::{IpAddr, SocketAddr},
    os::fd::{AsFd, AsRawFd},
    sync::Mutex,
};

use anyhow::{anyhow, bail, Context, Result};
use libbpf_rs::{
    MapCore, MapFlags, MapHandle, MapType, Object, ObjectBuilder, TcHookBuilder, Xdp, XdpFlags,
    TC_EGRESS,
};

use crate::skel::{self, sg::types};

/// The limits compiled into the eBPF programs (`bpf/sg/sg_common.h`).
pub const MAX_WORKERS: usize = types::sg_limits::SG_MAX_WORKERS.0 as usize;
pub const VEC_BYTES: usize = types::sg_limits::SG_VEC_BYTES.0 as usize;
pub const DGRAM_MAX: usize = types::sg_limits::SG_DGRAM_MAX.0 as usize;
pub const EVENT_HDR: usize = types::sg_limits::SG_EVENT_HDR.0 as usize;
pub const RING_BYTES: u32 = types::sg_limits::SG_RING_BYTES.0;
pub const MAX_CLIENTS: u32 = types::sg_limits::SG_MAX_CLIENTS.0;
pub const CUSTOM_MAX: u8 = types::sg_reducer::SG_CUSTOM_MAX.0 as u8;

/// TC filter handle and priority of the scatter program.
const TC_HANDLE: u32 = 0x5347;
const TC_PRIORITY: u32 = 0x5347;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpMode {
    /// Native (driver) mode if the driver supports it, generic otherwise.
    Auto,
    Native,
    Generic,
}

/// What to attach where, and how large the maps are.
#[derive(Clone, Debug)]
pub struct AttachOpts {
    /// Interfaces the client reaches its workers through (scatter on egress, gather on XDP).
    pub ifaces: Vec<String>,
    /// Client sockets at once (at most 64).
    pub clients: u32,
    /// Requests in flight per client (a power of two; at most 4096 for memcached's 16-bit ids).
    pub slots_per_client: u32,
    /// Groups of workers at once.
    pub groups: u32,
    /// Bytes of concatenated answers one request may gather (memcached replies, `Concat`).
    pub result_bytes: u32,
    pub xdp_mode: XdpMode,
}

impl Default for AttachOpts {
    fn default() -> Self {
        AttachOpts {
            ifaces: vec![],
            clients: 8,
            slots_per_client: 256,
            groups: 16,
            result_bytes: 16384,
            xdp_mode: XdpMode::Auto,
        }
    }
}

/// A group of workers registered in the kernel (index into the `workers` map).
#[derive(Clone, Debug)]
pub struct Group {
    pub id: u16,
    pub workers: Vec<SocketAddr>,
}

impl Group {
    pub fn len(&self) -> usize {
        self.workers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }
    pub fn is_v6(&self) -> bool {
        self.workers.first().is_some_and(|w| w.is_ipv6())
    }
}

/// Counters summed over CPUs (`enum sg_stat`).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    pub scatters: u64,
    pub clones: u64,
    pub clone_errors: u64,
    pub no_neigh: u64,
    pub busy: u64,
    pub answers: u64,
    pub duplicates: u64,
    pub late: u64,
    pub non_members: u64,
    pub malformed: u64,
    pub truncated: u64,
    pub completed: u64,
    pub timeouts: u64,
    pub ring_full: u64,
}

impl Stats {
    fn from_counters(c: &[u64]) -> Stats {
        let g = |i: types::sg_stat| c.get(i.0 as usize).copied().unwrap_or(0);
        Stats {
            scatters: g(types::sg_stat::ST_SCATTERS),
            clones: g(types::sg_stat::ST_CLONES),
            clone_errors: g(types::sg_stat::ST_CLONE_ERRORS),
            no_neigh: g(types::sg_stat::ST_NO_NEIGH),
            busy: g(types::sg_stat::ST_BUSY),
            answers: g(types::sg_stat::ST_ANSWERS),
            duplicates: g(types::sg_stat::ST_DUPLICATES),
            late: g(types::sg_stat::ST_LATE),
            non_members: g(types::sg_stat::ST_NON_MEMBERS),
            malformed: g(types::sg_stat::ST_MALFORMED),
            truncated: g(types::sg_stat::ST_TRUNCATED),
            completed: g(types::sg_stat::ST_COMPLETED),
            timeouts: g(types::sg_stat::ST_TIMEOUTS),
            ring_full: g(types::sg_stat::ST_RING_FULL),
        }
    }

    /// Every counter minus `earlier`'s.
    pub fn since(&self, earlier: &Stats) -> Stats {
        let a = serde_json::to_value(self).unwrap_or_default();
        let b = serde_json::to_value(earlier).unwrap_or_default();
        let mut out = serde_json::Map::new();
        if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
            for (k, v) in a {
                let d = v.as_u64().unwrap_or(0) - b.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
                out.insert(k.clone(), d.into());
            }
        }
        serde_json::from_value(out.into()).unwrap_or_default()
    }
}

impl<'de> serde::Deserialize<'de> for Stats {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let m: std::collections::HashMap<String, u64> = serde::Deserialize::deserialize(d)?;
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        Ok(Stats {
            scatters: g("scatters"),
            clones: g("clones"),
            clone_errors: g("clone_errors"),
            no_neigh: g("no_neigh"),
            busy: g("busy"),
            answers: g("answers"),
            duplicates: g("duplicates"),
            late: g("late"),
            non_members: g("non_members"),
            malformed: g("malformed"),
            truncated: g("truncated"),
            completed: g("completed"),
            timeouts: g("timeouts"),
            ring_full: g("ring_full"),
        })
    }
}

struct Attached {
    ifindex: i32,
    iface: String,
    native: bool,
}

#[derive(Default)]
struct Alloc {
    clients: HashSet<u32>,
    groups: HashSet<u16>,
}

/// The scatter-gather programs, loaded and attached to the client's interfaces; detached when
/// dropped. Share it (`Arc<Sg>`) between the clients of a process.
pub struct Sg {
    obj: Object,
    netns: std::fs::File,
    attached: Vec<Attached>,
    alloc: Mutex<Alloc>,
    pub opts: AttachOpts,
    pub(crate) slots_per_client: u32,
    result_bytes: u32,
}

fn ifindex(iface: &str) -> Result<i32> {
    let c = std::ffi::CString::new(iface)?;
    // SAFETY: if_nametoindex reads a NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        bail!("no interface {iface} in this network namespace");
    }
    Ok(i as i32)
}

fn map<'a>(obj: &'a Object, name: &str) -> Result<libbpf_rs::Map<'a>> {
    obj.maps()
        .find(|m| m.name() == name)
        .ok_or_else(|| anyhow!("the scatter-gather object has no map {name}"))
}

impl Sg {
    /// Loads the programs and attaches them: XDP (gather) and TC egress (scatter) on every
    /// interface of `opts`. Needs root. Fails with nothing attached.
    pub fn attach(opts: &AttachOpts) -> Result<Sg> {
        if opts.ifaces.is_empty() {
            bail!("no interface given (--iface)");
        }
        if !opts.slots_per_client.is_power_of_two() || opts.slots_per_client > 4096 {
            bail!("slots per client must be a power of two, at most 4096");
        }
        if opts.clients == 0 || opts.clients > MAX_CLIENTS {
            bail!("clients must be 1-{MAX_CLIENTS}");
        }
        if opts.groups == 0 || opts.groups > 4096 {
            bail!("groups must be 1-4096");
        }
        let result_bytes = opts.result_bytes.max(VEC_BYTES as u32);
        if result_bytes > 1 << 22 {
            bail!("result bytes must be at most 4 MiB");
        }
        if !std::path::Path::new("/sys/fs/bpf").exists() {
            bail!("/sys/fs/bpf is missing (mount -t bpf bpf /sys/fs/bpf)");
        }
        let mut open = ObjectBuilder::default()
            .name("inksg")
            .context("naming the object")?
            .open_memory(skel::SG_OBJ)
            .context("opening the scatter-gather object")?;
        let slots = opts.clients * opts.slots_per_client;
        for mut m in open.maps_mut() {
            let name = m.name().to_string_lossy().into_owned();
            match name.as_str() {
                "slots" => m.set_max_entries(slots)?,
                "results" => {
                    m.set_max_entries(slots)?;
                    m.set_value_size(EVENT_HDR as u32 + result_bytes + DGRAM_MAX as u32)?;
                }
                "workers" | "members" => m.set_max_entries(opts.groups * MAX_WORKERS as u32)?,
                "groups" => m.set_max_entries(opts.groups)?,
                n if n.ends_with(".rodata") => {
                    let v = m
                        .initial_value_mut()
                        .context("the object's constants are not writable")?;
                    let off = std::mem::offset_of!(types::rodata, result_cap);
                    v[off..off + 4].copy_from_slice(&result_bytes.to_ne_bytes());
                }
                _ => {}
            }
        }
        let obj = open.load().map_err(|e| {
            anyhow!("loading the scatter-gather programs failed (verifier or kernel): {e}")
        })?;
        let mut sg = Sg {
            obj,
            netns: crate::topo::current_netns()?,
            attached: vec![],
            alloc: Mutex::new(Alloc::default()),
            opts: opts.clone(),
            slots_per_client: opts.slots_per_client,
            result_bytes,
        };
        for iface in &opts.ifaces {
            sg.attach_one(iface)?; // on error, Drop detaches what is attached
        }
        Ok(sg)
    }

    fn prog(&self, name: &str) -> Result<libbpf_rs::Program<'_>> {
        self.obj
            .progs()
            .find(|p| p.name() == name)
            .ok_or_else(|| anyhow!("the scatter-gather object has no program {name}"))
    }

    fn attach_one(&mut self, iface: &str) -> Result<()> {
        let ifindex = ifindex(iface)?;
        let gather = self.prog("sg_gather")?;
        let x = Xdp::new(gather.as_fd());
        let q = x.query(ifindex, XdpFlags::NONE).context("querying XDP")?;
        if [q.prog_id, q.drv_prog_id, q.skb_prog_id, q.hw_prog_id]
            .iter()
            .any(|&id| id != 0)
        {
            bail!("{iface} already has an XDP program (detach it first)");
        }
        let try_mode = |f: XdpFlags| x.attach(ifindex, f | XdpFlags::UPDATE_IF_NOEXIST);
        let flags = match self.opts.xdp_mode {
            XdpMode::Native => try_mode(XdpFlags::DRV_MODE)
                .map(|_| XdpFlags::DRV_MODE)
                .map_err(|e| anyhow!("{iface}: native XDP attach failed: {e}"))?,
            XdpMode::Generic => try_mode(XdpFlags::SKB_MODE)
                .map(|_| XdpFlags::SKB_MODE)
                .map_err(|e| anyhow!("{iface}: generic XDP attach failed: {e}"))?,
            XdpMode::Auto => match try_mode(XdpFlags::DRV_MODE) {
                Ok(()) => XdpFlags::DRV_MODE,
                Err(_) => try_mode(XdpFlags::SKB_MODE)
                    .map(|_| XdpFlags::SKB_MODE)
                    .map_err(|e| anyhow!("{iface}: XDP attach failed: {e}"))?,
            },
        };
        let scatter = self.prog("sg_scatter")?;
        let mut hook = TcHookBuilder::new(scatter.as_fd())
            .ifindex(ifindex)
            .replace(true)
            .handle(TC_HANDLE)
            .priority(TC_PRIORITY)
            .hook(TC_EGRESS);
        let _ = hook.create(); // the clsact qdisc may exist already
        match hook.attach() {
            Ok(_) => {}
            Err(e) => {
                let _ = x.detach(ifindex, flags);
                bail!("{iface}: attaching TC egress failed: {e}");
            }
        };
        self.attached.push(Attached {
            ifindex,
            iface: iface.to_string(),
            native: flags.bits() == XdpFlags::DRV_MODE.bits(),
        });
        Ok(())
    }

    /// Bytes of concatenated answers a request may gather.
    pub fn result_bytes(&self) -> u32 {
        self.result_bytes
    }

    /// Interfaces attached, with their XDP mode.
    pub fn interfaces(&self) -> Vec<(String, &'static str)> {
        self.attached
            .iter()
            .map(|a| {
                let mode = if a.native { "native" } else { "generic" };
                (a.iface.clone(), mode)
            })
            .collect()
    }

    pub(crate) fn map(&self, name: &str) -> Result<libbpf_rs::Map<'_>> {
        map(&self.obj, name)
    }

    /// Registers a group of workers (IPv4 or IPv6, not mixed; at most 1024). Workers may share
    /// an address (different ports).
    pub fn group(&self, workers: &[SocketAddr]) -> Result<Group> {
        if workers.is_empty() || workers.len() > MAX_WORKERS {
            bail!(
                "a group has 1-{MAX_WORKERS} workers (got {})",
                workers.len()
            );
        }
        let v6 = workers[0].is_ipv6();
        if workers.iter().any(|w| w.is_ipv6() != v6) {
            bail!("a group's workers are all IPv4 or all IPv6");
        }
        let mut seen = HashSet::new();
        for w in workers {
            if !seen.insert(*w) {
                bail!("worker {w} is listed twice");
            }
        }
        let id = {
            let mut a = self.alloc.lock().unwrap();
            let id = (0..self.opts.groups as u16)
                .find(|i| !a.groups.contains(i))
                .ok_or_else(|| anyhow!("all {} groups are in use", self.opts.groups))?;
            a.groups.insert(id);
            id
        };
        let r = self.write_group(id, workers);
        if r.is_err() {
            self.alloc.lock().unwrap().groups.remove(&id);
        }
        r?;
        Ok(Group {
            id,
            workers: workers.to_vec(),
        })
    }

    fn write_group(&self, id: u16, workers: &[SocketAddr]) -> Result<()> {
        let wmap = self.map("workers")?;
        let members = self.map("members")?;
        let hops = resolve_next_hops(workers);
        for (i, w) in workers.iter().enumerate() {
            let (addr, family) = addr_bytes(w.ip());
            type W = types::sg_worker;
            let mut v = [0u8; std::mem::size_of::<W>()];
            v[..16].copy_from_slice(&addr);
            v[16..18].copy_from_slice(&w.port().to_ne_bytes());
            v[18] = family;
            if let Some(h) = hops[i] {
                use std::mem::offset_of;
                let o = offset_of!(W, ifindex);
                v[o..o + 4].copy_from_slice(&h.ifindex.to_ne_bytes());
                let o = offset_of!(W, dmac);
                v[o..o + 6].copy_from_slice(&h.dmac);
                let o = offset_of!(W, smac);
                v[o..o + 6].copy_from_slice(&h.smac);
            }
            let key = (id as u32 * MAX_WORKERS as u32 + i as u32).to_ne_bytes();
            wmap.update(&key, &v, MapFlags::ANY)?;
            members.update(&member_key(w, id), &(i as u32).to_ne_bytes(), MapFlags::ANY)?;
        }
        self.map("groups")?.update(
            &(id as u32).to_ne_bytes(),
            &(workers.len() as u32).to_ne_bytes(),
            MapFlags::ANY,
        )?;
        Ok(())
    }

    /// Unregisters a group (its requests in flight end by their timeouts).
    pub fn remove_group(&self, g: &Group) -> Result<()> {
        self.map("groups")?.update(
            &(g.id as u32).to_ne_bytes(),
            &0u32.to_ne_bytes(),
            MapFlags::ANY,
        )?;
        let members = self.map("members")?;
        for w in &g.workers {
            let _ = members.delete(&member_key(w, g.id));
        }
        self.alloc.lock().unwrap().groups.remove(&g.id);
        Ok(())
    }

    /// Claims a client index (its ring buffer and range of slots).
    pub(crate) fn claim_client(&self) -> Result<u32> {
        let mut a = self.alloc.lock().unwrap();
        let i = (0..self.opts.clients)
            .find(|i| !a.clients.contains(i))
            .ok_or_else(|| anyhow!("all {} clients are in use", self.opts.clients))?;
        a.clients.insert(i);
        Ok(i)
    }

    pub(crate) fn release_client(&self, i: u32) {
        self.alloc.lock().unwrap().clients.remove(&i);
    }

    /// Makes an aggregation program of the application's (an XDP program built with
    /// `bpf/sg/sg_plugin.h`, in an object file's bytes) usable as `Reducer::Custom(id, ..)`;
    /// returns the id. The program shares this attachment's maps.
    pub fn add_aggregator(&self, object: &[u8], program: &str) -> Result<u8> {
        let aggs = self.map("aggregators")?;
        let id = (0..CUSTOM_MAX)
            .find(|i| {
                aggs.lookup(&(*i as u32).to_ne_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten()
                    .is_none()
            })
            .ok_or_else(|| anyhow!("all {CUSTOM_MAX} aggregation programs are in use"))?;
        let mut open = ObjectBuilder::default()
            .open_memory(object)
            .context("opening the aggregation program's object")?;
        for mut m in open.maps_mut() {
            let name = m.name().to_string_lossy().into_owned();
            if name.contains('.') {
                continue;
            }
            let src = map(&self.obj, &name)
                .with_context(|| format!("the aggregation program's map {name}"))?;
            m.reuse_fd(src.as_fd())?;
        }
        let obj = open
            .load()
            .map_err(|e| anyhow!("loading aggregation program {program} failed: {e}"))?;
        let prog = obj
            .progs()
            .find(|p| p.name() == program)
            .ok_or_else(|| anyhow!("the object has no program {program}"))?;
        let fd = prog.as_fd().as_raw_fd();
        self.map("aggregators")?.update(
            &(id as u32).to_ne_bytes(),
            &(fd as u32).to_ne_bytes(),
            MapFlags::ANY,
        )?;
        // The program array holds its own reference: the object may go.
        Ok(id)
    }

    /// Counters summed over CPUs.
    pub fn stats(&self) -> Result<Stats> {
        let m = self.map("stats")?;
        let mut c = vec![0u64; types::sg_stat::ST_MAX.0 as usize];
        for (i, v) in c.iter_mut().enumerate() {
            if let Some(per_cpu) = m.lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)? {
                *v = per_cpu
                    .iter()
                    .map(|b| u64::from_ne_bytes(b[..8].try_into().unwrap()))
                    .sum();
            }
        }
        Ok(Stats::from_counters(&c))
    }

    /// Creates a ring buffer for client `index` and installs it.
    pub(crate) fn install_ring(&self, index: u32) -> Result<MapHandle> {
        let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
            sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
            ..Default::default()
        };
        let ring = MapHandle::create(
            MapType::RingBuf,
            Some("inksg_ring"),
            0,
            0,
            RING_BYTES,
            &opts,
        )
        .context("creating a ring buffer")?;
        let fd = ring.as_fd().as_raw_fd() as u32;
        self.map("rings")?
            .update(&index.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .context("installing the ring buffer")?;
        Ok(ring)
    }
}

impl Drop for Sg {
    fn drop(&mut self) {
        // Detached in the namespace it was attached in, wherever this runs.
        let prog = self.obj.progs().find(|p| p.name() == "sg_gather");
        let fd = prog.as_ref().map(|p| p.as_fd());
        let scatter = self.obj.progs().find(|p| p.name() == "sg_scatter");
        let sfd = scatter.as_ref().map(|p| p.as_fd());
        let attached: Vec<(i32, bool)> = self
            .attached
            .iter()
            .map(|a| (a.ifindex, a.native))
            .collect();
        let _ = crate::topo::in_netns_fd(&self.netns, || {
            for (ifindex, native) in attached {
                if let Some(sfd) = sfd {
                    let _ = TcHookBuilder::new(sfd)
                        .ifindex(ifindex)
                        .handle(TC_HANDLE)
                        .priority(TC_PRIORITY)
                        .hook(TC_EGRESS)
                        .detach();
                }
                if let Some(fd) = fd {
                    let flags = if native {
                        XdpFlags::DRV_MODE
                    } else {
                        XdpFlags::SKB_MODE
                    };
                    let _ = Xdp::new(fd).detach(ifindex, flags);
                }
            }
        });
    }
}

/// Where packets to a worker go: output interface and MAC addresses (from the routing and
/// neighbour tables of the calling thread's namespace).
#[derive(Clone, Copy, Debug, Default)]
pub struct NextHop {
    pub ifindex: u32,
    pub dmac: [u8; 6],
    pub smac: [u8; 6],
}

fn ip_json(args: &[&str]) -> Option<serde_json::Value> {
    let o = std::process::Command::new("ip")
        .arg("-j")
        .args(args)
        .output()
        .ok()?;
    serde_json::from_slice(&o.stdout).ok()
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .filter_map(|x| u8::from_str_radix(x, 16).ok())
        .collect();
    v.try_into().ok()
}

/// Resolves the next hop of every distinct worker address: the route's interface and gateway,
/// and the neighbour entry (ARP/NDP) of the gateway or the worker, which is created by sending
/// it an empty datagram (ignored by memcached and by inksg workers) and waiting up to a second.
/// The scatter program uses these (it cannot resolve neighbours itself); addresses that do not
/// resolve are left to the FIB (which needs forwarding enabled on the interface).
pub fn resolve_next_hops(workers: &[SocketAddr]) -> Vec<Option<NextHop>> {
    let mut cache: std::collections::HashMap<IpAddr, Option<NextHop>> = Default::default();
    let v4 = std::net::UdpSocket::bind("0.0.0.0:0").ok();
    let v6 = std::net::UdpSocket::bind("[::]:0").ok();
    for w in workers {
        if cache.contains_key(&w.ip()) {
            continue;
        }
        let s = if w.is_ipv6() { &v6 } else { &v4 };
        if let Some(s) = s {
            // to the discard port, not the worker's: a server may answer even an empty datagram
            let _ = s.send_to(&[], SocketAddr::new(w.ip(), 9));
        }
        cache.insert(w.ip(), None);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let ips: Vec<IpAddr> = cache.keys().copied().collect();
    for ip in ips {
        let Some(route) = ip_json(&["route", "get", &ip.to_string()]) else {
            continue;
        };
        let r = &route[0];
        let Some(dev) = r["dev"].as_str() else {
            continue;
        };
        let via = r["gateway"]
            .as_str()
            .map(str::to_string)
            .unwrap_or(ip.to_string());
        // (not /sys/class/net: sysfs shows the namespace it was mounted in)
        let link = ip_json(&["link", "show", "dev", dev]);
        let link = link.as_ref().map(|l| &l[0]);
        let smac = link.and_then(|l| parse_mac(l["address"].as_str()?));
        let ifindex = link.and_then(|l| l["ifindex"].as_u64()).map(|i| i as u32);
        let (Some(smac), Some(ifindex)) = (smac, ifindex) else {
            continue;
        };
        loop {
            let n = ip_json(&["neigh", "show", "to", &via, "dev", dev]);
            let entry = n.as_ref().and_then(|n| n.as_array()?.first().cloned());
            let ok = entry.as_ref().and_then(|e| {
                let states = e["state"].as_array()?;
                let good = states.iter().any(|s| {
                    matches!(
                        s.as_str(),
                        Some("REACHABLE" | "STALE" | "DELAY" | "PROBE" | "PERMANENT" | "NOARP")
                    )
                });
                if !good {
                    return None;
                }
                parse_mac(e["lladdr"].as_str()?)
            });
            if let Some(dmac) = ok {
                cache.insert(
                    ip,
                    Some(NextHop {
                        ifindex,
                        dmac,
                        smac,
                    }),
                );
                break;
            }
            if std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    workers.iter().map(|w| cache[&w.ip()]).collect()
}

pub(crate) fn addr_bytes(ip: IpAddr) -> ([u8; 16], u8) {
    let mut a = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => {
            a[..4].copy_from_slice(&v4.octets());
            (a, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 6),
    }
}

fn member_key(w: &SocketAddr, group: u16) -> Vec<u8> {
    let (addr, _) = addr_bytes(w.ip());
    let mut k = addr.to_vec();
    k.extend_from_slice(&w.port().to_ne_bytes());
    k.extend_from_slice(&group.to_ne_bytes());
    k
}
