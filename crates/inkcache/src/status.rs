//! What is attached where (`inkcache status`), and how full each cache is.
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use libbpf_rs::{MapCore, MapFlags, MapHandle};
use serde::Serialize;

use crate::{pins, sys, AttachInfo};

/// One attachment, as `inkcache status --json` prints it.
#[derive(Serialize, Debug, Clone)]
pub struct StatusRow {
    #[serde(flatten)]
    pub info: AttachInfo,
    pub pin_dir: String,
    /// Whether the attachment's interface could be looked at: false for attachments of other
    /// network namespaces that have no name under /run/netns or are gone (then the attachment
    /// flags below are false too).
    pub checked: bool,
    /// Whether the XDP program recorded at attach is still the one on the interface.
    pub xdp_attached: bool,
    /// Whether the hooks on the server's sockets (cgroup, sockhash) are still in place: they walk
    /// its requests and answers.
    pub hooks_attached: bool,
    /// Whether the TC ingress program recorded at attach is still ours (it answers what XDP has no
    /// room for).
    pub tc_ingress_attached: bool,
    /// Map memory of the cache (index and log).
    pub cache_bytes: u64,
    #[serde(flatten)]
    pub fill: Fill,
}

/// What a cache holds now.
#[derive(Serialize, Default, Debug, Clone, Copy)]
pub struct Fill {
    /// Items the kernel can answer (ways holding an item the log has not overwritten).
    pub items: u64,
    /// Their bytes in the log.
    pub item_bytes_stored: u64,
    /// Cache memory per stored item (index and log), 0 if empty.
    pub bytes_per_item: u64,
}

/// Reads how full the cache pinned at `dir` (laid out as `layout`) is.
pub fn fill(dir: &Path, layout: &crate::Layout) -> Result<Fill> {
    use crate::skel::xdp::types::{ink_global, ink_set, ink_way};
    use std::mem::{offset_of, size_of};
    let total = layout.total_bytes();
    let log_units = layout.log_bytes() / 16;
    let g = MapHandle::from_pinned_path(dir.join("global")).context("opening the global map")?;
    let gv = g
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)?
        .context("empty global map")?;
    // pinned by another build of inkcache (an upgrade): its layout may differ from ours
    anyhow::ensure!(
        gv.len() == size_of::<ink_global>(),
        "attached by another version of inkcache"
    );
    let at = offset_of!(ink_global, head);
    let head = u64::from_ne_bytes(gv[at..at + 8].try_into()?);
    let m = MapHandle::from_pinned_path(dir.join("sets")).context("opening the sets map")?;
    anyhow::ensure!(
        m.value_size() as usize == size_of::<ink_set>(),
        "attached by another version of inkcache"
    );
    // the log positions of the live items (a way with a tag, not lapped)
    let mut live: Vec<u64> = Vec::new();
    for (_, v) in m.lookup_batch(1024, MapFlags::ANY, MapFlags::ANY)? {
        for w in v.chunks_exact(size_of::<ink_way>()) {
            let tag = u32::from_ne_bytes(w[offset_of!(ink_way, tag)..][..4].try_into()?);
            let pos = u32::from_ne_bytes(w[offset_of!(ink_way, pos)..][..4].try_into()?);
            let back = (head as u32).wrapping_sub(pos) as u64;
            if tag != 0 && back <= log_units {
                live.push(head - back);
            }
        }
    }
    // their lengths from their headers in the log, one segment read at a time
    live.sort_unstable();
    let arena = MapHandle::from_pinned_path(dir.join("arena")).context("opening the arena map")?;
    let seg_units = crate::abi::SEG_UNITS as u64;
    let mut f = Fill::default();
    for run in live.chunk_by(|a, b| a / seg_units == b / seg_units) {
        let segi = ((run[0] / seg_units) % layout.segs as u64) as u32;
        let Some(seg) = arena.lookup(&segi.to_ne_bytes(), MapFlags::ANY)? else {
            continue;
        };
        for p in run {
            let at = (p % seg_units) as usize * 16 + crate::abi::ITEM_LEN_OFF;
            let len = u16::from_ne_bytes(seg[at..at + 2].try_into()?);
            if len != 0 {
                f.items += 1;
                f.item_bytes_stored += len as u64;
            }
        }
    }
    f.bytes_per_item = total.checked_div(f.items).unwrap_or(0);
    Ok(f)
}

/// Every readable attachment record under the pin root, with its directory. Directories another
/// inkcache is creating or removing right now (no readable record) are reported on stderr.
pub fn records() -> Result<Vec<(PathBuf, AttachInfo)>> {
    let mut v = Vec::new();
    for dir in pins::list()? {
        match pins::read_info(&dir) {
            Ok(info) => v.push((dir, info)),
            Err(_) if dir.exists() => eprintln!(
                "inkcache: {}: incomplete attachment (no readable record)",
                dir.display()
            ),
            Err(_) => {}
        }
    }
    Ok(v)
}

/// The attachments of the network namespace this runs in, or of every namespace with
/// `all_netns` (those of other namespaces are checked from inside them when they have a name
/// under /run/netns).
pub fn rows(all_netns: bool) -> Result<Vec<StatusRow>> {
    sys::require_root()?;
    sys::ensure_bpffs()?;
    let mut rows = Vec::new();
    for (dir, mut info) in records()? {
        info.coop_seed = None; // a secret
        let here = pins::in_this_netns(&info);
        if !here && !all_netns {
            continue;
        }
        let check = || pins::in_this_netns(&info).then(|| crate::attach::attached(&info, &dir));
        let seen = if here {
            check()
        } else {
            info.netns
                .as_deref()
                .and_then(|ns| crate::ns::in_netns(ns, check))
                .flatten()
        };
        let (xdp_attached, hooks_attached, tc_ingress_attached) =
            seen.unwrap_or((false, false, false));
        rows.push(StatusRow {
            checked: seen.is_some(),
            xdp_attached,
            hooks_attached,
            tc_ingress_attached,
            cache_bytes: info.layout.total_bytes(),
            fill: fill(&dir, &info.layout).unwrap_or_default(),
            pin_dir: dir.display().to_string(),
            info,
        });
    }
    Ok(rows)
}

/// `inkcache status` as text.
pub fn render(rows: &[StatusRow]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    if rows.is_empty() {
        o.push_str("inkcache is not attached anywhere in this network namespace\n");
    }
    for r in rows {
        let i = &r.info;
        let state = if !r.checked {
            ", NOT CHECKED: its network namespace is gone or has no name"
        } else if !r.xdp_attached {
            ", XDP NOT ATTACHED"
        } else {
            ""
        };
        let _ = writeln!(o, "{} (ifindex {}{state})", i.iface, i.ifindex);
        if let Some(ns) = &i.netns {
            let _ = writeln!(o, "  netns       {ns}");
        }
        let missing = |ok: bool| if ok { "" } else { " (NOT ATTACHED)" };
        let _ = writeln!(
            o,
            "  mode        {} XDP, TC filters {:#x}/{:#x}: egress{}, ingress{}",
            i.xdp_mode,
            i.tc_handle,
            i.tc_priority,
            missing(r.hooks_attached),
            missing(r.tc_ingress_attached),
        );
        if !i.reply_write.is_empty() {
            let _ = writeln!(o, "  replies     written in XDP by {}", i.reply_write);
        }
        let _ = writeln!(o, "  ports       {:?}", i.ports);
        if !i.vlans.is_empty() {
            // tagged requests through these only: the host drops other VLAN ids
            let _ = writeln!(o, "  vlans       {}", i.vlans.join(", "));
        }
        let _ = writeln!(o, "  allow       {}", i.allow.join(", "));
        if i.max_amplification > 0 {
            let _ = writeln!(
                o,
                "  others      answered if the reply is at most {}x the request",
                i.max_amplification
            );
        } else {
            let _ = writeln!(o, "  others      never answered by the kernel");
        }
        let l = &i.layout;
        let _ = writeln!(
            o,
            "  cache       {:.1} MiB: index {} sets x {} ways and {} hot slots ({:.1} MiB), log {} x 64 KiB (sized for {}-byte items; items up to {} bytes)",
            r.cache_bytes as f64 / 1048576.0,
            l.sets,
            crate::layout::WAYS,
            l.slots(),
            l.index_bytes() as f64 / 1048576.0,
            l.segs,
            i.item_bytes,
            i.item_max,
        );
        let _ = writeln!(
            o,
            "  holds       {} items ({:.1}% of the ways), {:.1} MiB of items, {} bytes of cache per item",
            r.fill.items,
            100.0 * r.fill.items as f64 / l.ways().max(1) as f64,
            r.fill.item_bytes_stored as f64 / 1048576.0,
            r.fill.bytes_per_item,
        );
        let _ = writeln!(o, "  max age     {} s", i.max_age_secs);
        if i.group.len() > 1 {
            let _ = writeln!(o, "  shared with {}", i.group.join(", "));
        }
        let _ = writeln!(o, "  pinned at   {}", r.pin_dir);
    }
    o
}
