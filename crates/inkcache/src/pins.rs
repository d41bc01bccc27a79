//! Where an attachment lives in bpffs and the record the control plane keeps of it.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde::{Deserialize, Serialize};

use crate::sys::{self, BPFFS};

/// The maps every attachment pins (shared by all interfaces attached in one command); `attach`
/// pins exactly these.
pub const MAPS: &[&str] = &[
    "sets",
    "set_state",
    "arena",
    "ttl_hints",
    "conns",
    "conn_socks",
    "udp_writes",
    "stats",
    "ports",
    "allow",
    "pending",
    "global",
    "ifaces",
    "vlans",
    "meta",
    // the AF_XDP hand-off to inkcached (bpf/xsk.h)
    "xsks",
    "xsk_cfg",
    "xsk_dsts",
];

/// What `attach` did to one interface; stored as JSON in the pinned `meta` map.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AttachInfo {
    pub iface: String,
    pub ifindex: u32,
    /// Network namespace (a name under /run/netns): given with `--netns`, or the one `ip netns
    /// exec` ran inkcache in.
    pub netns: Option<String>,
    /// The network namespace's cookie (unique while the system runs; 0 if unknown): tells
    /// attachments of unnamed namespaces apart.
    #[serde(default)]
    pub netns_cookie: u64,
    /// "native" or "generic".
    pub xdp_mode: String,
    /// How XDP writes replies: "helper" or "inline" (empty in records from before the choice).
    #[serde(default)]
    pub reply_write: String,
    pub xdp_prog_id: u32,
    /// The program that walks the requests the server receives (its TCP stream verdict; the UDP
    /// one is in the same object).
    #[serde(default)]
    pub requests_prog_id: u32,
    /// The program that follows the server's answers (cgroup egress: fills, settling).
    #[serde(default)]
    pub answers_prog_id: u32,
    /// The TC ingress program (answers what XDP had no room for); 0 in records from before it.
    #[serde(default)]
    pub tc_ingress_prog_id: u32,
    /// Handle and priority of both TC filters (clsact egress and ingress).
    pub tc_handle: u32,
    pub tc_priority: u32,
    /// How the XDP program is attached: "single" (alone) or "dispatcher" (a libxdp dispatcher,
    /// shared with other programs).
    #[serde(default = "single")]
    pub xdp_attach: String,
    /// Run priority in the dispatcher (0 when alone).
    #[serde(default)]
    pub xdp_priority: u32,
    /// How the TC programs are attached: "tcx" (links) or "clsact" (filters).
    #[serde(default = "clsact")]
    pub tc_mode: String,
    pub ports: Vec<u16>,
    pub allow: Vec<String>,
    /// Sources outside `allow` get kernel replies of at most this many times their request (0:
    /// none).
    #[serde(default)]
    pub max_amplification: u32,
    pub cache_mb: u32,
    /// Expected average item size the split of `cache_mb` was made for.
    pub item_bytes: u32,
    pub layout: crate::Layout,
    pub item_max: u32,
    pub max_age_secs: u64,
    #[serde(default)]
    pub quarantine_ms: u64,
    #[serde(default)]
    pub max_conns: u32,
    #[serde(default)]
    pub settle_max_secs: u64,
    /// Interfaces attached by the same command: they share the cache and the counters.
    pub group: Vec<String>,
    /// The VLAN devices on the interface, as attach or the last refresh found them, whose tagged
    /// requests are answered ("eth0.42 (802.1Q 42)"); requests with other VLAN tags pass, as the
    /// host drops them.
    #[serde(default)]
    pub vlans: Vec<String>,
    /// Cooperative mode (the server installs and invalidates entries itself).
    #[serde(default)]
    pub cooperative: bool,
    /// Cooperative mode only: the key hash's secret seed, for the server's own program (see
    /// crate::coop). Stored with the pins (root only); `status` leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coop_seed: Option<u64>,
}

/// Whether `info` was attached in the network namespace the calling thread runs in.
pub fn in_this_netns(info: &AttachInfo) -> bool {
    match sys::netns_cookie() {
        Some(here) if info.netns_cookie != 0 => info.netns_cookie == here,
        _ => info.netns == sys::netns_name() && sys::in_named_netns(),
    }
}

fn single() -> String {
    "single".into()
}

fn clsact() -> String {
    "clsact".into()
}

pub fn root() -> PathBuf {
    Path::new(BPFFS).join("inkcache")
}

/// `/sys/fs/bpf/inkcache/<iface>`, or `<iface>@<netns>` when run with `--netns` (interface names
/// are per namespace, bpffs is not).
pub fn dir_for(iface: &str) -> Result<PathBuf> {
    Ok(dir_in(iface, sys::netns_name().as_deref()))
}

/// The pin directory of `iface` in the network namespace `netns` (a name under /run/netns, as
/// given to `--netns`; `None`: this process's own), for readers that do not enter it.
pub fn dir_in(iface: &str, netns: Option<&str>) -> PathBuf {
    root().join(match netns {
        None => iface.to_string(),
        Some(ns) => format!("{iface}@{ns}"),
    })
}

/// Interfaces attached by one command (they share the maps, `meta` among them: one record each).
pub const MAX_GROUP: usize = 64;

/// The record of the attachment pinned at `dir` (`<iface>` or `<iface>@<netns>`). The interfaces
/// attached together share the `meta` map, one record each: the one for this directory's
/// interface is picked by name.
pub fn read_info(dir: &Path) -> Result<AttachInfo> {
    let meta = MapHandle::from_pinned_path(dir.join("meta"))
        .with_context(|| format!("opening {}/meta", dir.display()))?;
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let iface = name.split('@').next().unwrap_or_default();
    let slots = (meta.max_entries() as usize).min(MAX_GROUP);
    for i in 0..slots {
        let Some(raw) = meta.lookup(&(i as u32).to_ne_bytes(), MapFlags::ANY)? else {
            continue;
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        if end == 0 {
            continue;
        }
        let info: AttachInfo =
            serde_json::from_slice(&raw[..end]).context("attachment record is not valid JSON")?;
        if info.iface == iface {
            return Ok(info);
        }
    }
    anyhow::bail!("no attachment record for {iface} in {}", dir.display())
}

/// Stores `info` as record `slot` of the group's `meta` map.
pub fn write_info(meta: &dyn MapCore, slot: usize, info: &AttachInfo) -> Result<()> {
    anyhow::ensure!(slot < MAX_GROUP, "too many interfaces in one attach");
    let mut buf = serde_json::to_vec(info)?;
    anyhow::ensure!(buf.len() < 4096, "attachment record too large");
    buf.resize(4096, 0);
    meta.update(&(slot as u32).to_ne_bytes(), &buf, MapFlags::ANY)
        .context("writing attachment record")
}

/// Every attachment directory under /sys/fs/bpf/inkcache.
pub fn list() -> Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    match fs::read_dir(root()) {
        Ok(rd) => {
            for e in rd {
                let e = e?;
                if e.file_type()?.is_dir() {
                    v.push(e.path());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context("reading /sys/fs/bpf/inkcache"),
    }
    v.sort();
    Ok(v)
}

/// Unpins everything in an attachment directory and removes it.
pub fn remove_dir(dir: &Path) -> Result<()> {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd {
            let p = e?.path();
            fs::remove_file(&p).with_context(|| format!("unpinning {}", p.display()))?;
        }
        fs::remove_dir(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    // The root directory stays: removing it when empty would race with a concurrent attach that
    // has just created it.
    Ok(())
}
