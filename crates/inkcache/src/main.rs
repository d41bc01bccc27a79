//! `inkcache`: attach the in-kernel memcached cache to interfaces, detach it, read its counters.
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use ipnet::IpNet;
use libbpf_rs::{MapCore, MapFlags, MapHandle};

use inkcache::{pins, sys, AttachOpts, Stats, XdpMode};

#[derive(Parser)]
#[command(
    name = "inkcache",
    version,
    about = "In-kernel cache for memcached: UDP gets answered by XDP"
)]
struct Cli {
    /// Run inside this network namespace (a name under /run/netns, as `ip netns` makes).
    #[arg(long, global = true)]
    netns: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load the cache and attach it to interfaces; it keeps serving after this command exits.
    Attach {
        /// Interface the server is reached on (repeat for several; they share one cache).
        #[arg(long = "iface", required = true)]
        ifaces: Vec<String>,
        /// memcached port, UDP and TCP (repeat for several).
        #[arg(long = "port", default_values_t = [11211u16], value_parser = parse_port)]
        ports: Vec<u16>,
        /// Sources the kernel may answer (repeat); default: the interfaces' connected subnets.
        #[arg(long = "allow", value_parser = parse_cidr)]
        allow: Vec<IpNet>,
        /// Memory for cached items and their index, in MiB.
        #[arg(long, default_value_t = 64)]
        cache_mb: u32,
        /// Expected average item size in bytes (VALUE line + data): splits --cache-mb between
        /// the item log and the index (`status` shows the split and the real average).
        #[arg(long, default_value_t = inkcache::layout::DEFAULT_ITEM_BYTES)]
        item_bytes: u32,
        #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
        xdp_mode: XdpMode,
        /// Seconds an item filled from a reply may be served (0 disables the kernel cache).
        #[arg(long, default_value_t = 60)]
        max_age: u64,
        /// Get requests remembered while their replies are awaited.
        #[arg(long, default_value_t = 65536)]
        pending: u32,
        /// Milliseconds a write the server does not answer (noreply, UDP, connections not
        /// followed) keeps its key from being filled (the server's time to apply a write).
        #[arg(long, default_value_t = 1000)]
        quarantine_ms: u64,
        /// TCP connections followed from their SYN, so that each write is settled by the
        /// server's answer to it (bounds the `conns` map, ~1 KiB each).
        #[arg(long, default_value_t = 4096)]
        max_conns: u32,
        /// Seconds after which a write the server has still not answered stops blocking fills.
        #[arg(long, default_value_t = 60)]
        settle_max: u64,
        /// Keys whose expiry (learned from mutations) the kernel remembers.
        #[arg(long, default_value_t = 262144)]
        ttl_hints: u32,
        /// Sources outside --allow are answered by the kernel too, but only with replies at most
        /// N times the size of their request (UDP payloads); 0: never (they reach the server).
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_amplification: u32,
        /// Debug: never invalidate (for proving the consistency checker can fail).
        #[arg(long, hide = true)]
        debug_no_invalidation: bool,
        /// Debug: settle every write by the quarantine only (what the exact settling adds).
        #[arg(long, hide = true)]
        debug_quarantine_only: bool,
        /// Debug: pass partly missing multi-key gets whole (what the split saves).
        #[arg(long, hide = true)]
        debug_no_split: bool,
        /// Cooperative mode: the server (inkcached --cooperative IFACE) installs and invalidates
        /// entries itself; XDP walks no mutations and TC egress fills nothing. Only for inkcached
        #[arg(long)]
        cooperative: bool,
    },
    /// Remove everything `attach` put on an interface (other programs stay).
    Detach {
        #[arg(long)]
        iface: String,
    },
    /// Counters of the cache attached to an interface, summed over CPUs.
    Stats {
        #[arg(long)]
        iface: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// What is attached where.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Put a pass-through XDP program on the peer of a veth pair, so XDP_TX replies get through.
    VethPeer {
        #[arg(long)]
        iface: String,
        /// Remove it instead.
        #[arg(long)]
        remove: bool,
    },
}

fn parse_port(s: &str) -> Result<u16, String> {
    match s.parse::<u32>() {
        Ok(p) if (1..=65535).contains(&p) => Ok(p as u16),
        _ => Err(format!("port out of range: {s} (1-65535)")),
    }
}

fn parse_cidr(s: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("bad CIDR: {s} (expected e.g. 198.18.0.0/15 or fd00::/8)"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            let _ = e.print(); // --help, --version
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // one line: clap's first line without its "error: " prefix
            let msg = e.to_string();
            let first = msg.lines().next().unwrap_or("invalid arguments");
            eprintln!("inkcache: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inkcache: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // libbpf's own messages (verifier logs) only on request: errors are one line.
    if std::env::var_os("INKCACHE_DEBUG").is_none() {
        libbpf_rs::set_print(None);
    }
    if let Some(ns) = &cli.netns {
        sys::require_root()?;
        let gone = !std::path::Path::new("/run/netns").join(ns).exists();
        if gone && matches!(cli.cmd, Cmd::Detach { .. }) {
            // the namespace was deleted: only our pins are left to remove
            sys::assume_netns(ns);
        } else {
            sys::enter_netns(ns)?;
        }
    }
    match cli.cmd {
        Cmd::Attach {
            ifaces,
            ports,
            allow,
            cache_mb,
            item_bytes,
            xdp_mode,
            max_age,
            pending,
            quarantine_ms,
            max_conns,
            settle_max,
            ttl_hints,
            max_amplification,
            debug_no_invalidation,
            debug_quarantine_only,
            debug_no_split,
            cooperative,
        } => {
            let opts = AttachOpts {
                ifaces,
                ports,
                allow,
                cache_mb,
                item_bytes,
                xdp_mode,
                max_age_secs: max_age,
                pending_entries: pending,
                quarantine_ms,
                max_conns,
                settle_max_secs: settle_max,
                ttl_hints,
                max_amplification,
                debug_no_invalidation,
                debug_quarantine_only,
                debug_no_split,
                cooperative,
            };
            for info in inkcache::attach(&opts)? {
                println!(
                    "attached to {} ({} XDP), ports {:?}, cache {} ways + {} KiB log, allow {}",
                    info.iface,
                    info.xdp_mode,
                    info.ports,
                    info.layout.ways(),
                    info.layout.log_bytes() / 1024,
                    info.allow.join(",")
                );
            }
        }
        Cmd::Detach { iface } => {
            inkcache::detach(&iface)?;
            println!("detached from {iface}");
        }
        Cmd::Stats { iface, json } => {
            sys::require_root()?;
            sys::ensure_bpffs()?;
            let dir = pins::dir_for(&iface)?;
            if !dir.exists() {
                return Err(inkcache::Error::NotAttached(iface).into());
            }
            let s = Stats::read(&dir)?;
            if json {
                println!("{}", serde_json::to_string(&s)?);
            } else {
                for (k, v) in s.fields() {
                    println!("{k:<18}{v}");
                }
            }
        }
        Cmd::Status { json } => status(json)?,
        Cmd::VethPeer { iface, remove } => inkcache::attach::veth_peer(&iface, remove)?,
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct StatusRow {
    #[serde(flatten)]
    info: inkcache::AttachInfo,
    pin_dir: String,
    /// Whether the XDP program recorded at attach is still the one on the interface.
    xdp_attached: bool,
    /// Whether the TC filters recorded at attach are still ours (egress fills, ingress answers
    /// what XDP has no room for).
    tc_egress_attached: bool,
    tc_ingress_attached: bool,
    /// Map memory of the cache (index and log).
    cache_bytes: u64,
    #[serde(flatten)]
    fill: Fill,
}

/// What the cache holds now.
#[derive(serde::Serialize, Default)]
struct Fill {
    /// Items the kernel can answer (ways holding an item the log has not overwritten).
    items: u64,
    /// Their bytes in the log.
    item_bytes_stored: u64,
    /// Cache memory per stored item (index and log), 0 if empty.
    bytes_per_item: u64,
}

fn fill(dir: &std::path::Path, total: u64, log_units: u64) -> Result<Fill> {
    use inkcache::skel::xdp::types::{ink_global, ink_set, ink_way};
    use std::mem::{offset_of, size_of};
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
    let mut f = Fill::default();
    let (w0, wsz) = (offset_of!(ink_set, way), size_of::<ink_way>());
    for (_, v) in m.lookup_batch(1024, MapFlags::ANY, MapFlags::ANY)? {
        for w in 0..inkcache::layout::WAYS as usize {
            let b = &v[w0 + w * wsz..w0 + (w + 1) * wsz];
            let field = |o: usize, n: usize| -> u64 {
                let mut x = [0u8; 8];
                x[..n].copy_from_slice(&b[o..o + n]);
                u64::from_ne_bytes(x)
            };
            let tag = field(offset_of!(ink_way, tag), 4);
            let pos = field(offset_of!(ink_way, pos), 4) as u32;
            let len = field(offset_of!(ink_way, len), 2);
            let lapped = (head as u32).wrapping_sub(pos) as u64 > log_units;
            if tag != 0 && len != 0 && !lapped {
                f.items += 1;
                f.item_bytes_stored += len;
            }
        }
    }
    f.bytes_per_item = total.checked_div(f.items).unwrap_or(0);
    Ok(f)
}

fn status(json: bool) -> Result<()> {
    sys::require_root()?;
    sys::ensure_bpffs()?;
    let mut rows = Vec::new();
    for dir in pins::list()? {
        // another inkcache may be attaching or detaching right now: skip what is incomplete
        let Ok(info) = pins::read_info(&dir) else {
            if dir.exists() {
                eprintln!(
                    "inkcache: {}: incomplete attachment (no readable record)",
                    dir.display()
                );
            }
            continue;
        };
        let xdp_attached = if sys::ifindex(&info.iface).ok() == Some(info.ifindex) {
            libbpf_rs::Program::fd_from_pinned_path(dir.join("xdp"))
                .and_then(|fd| {
                    libbpf_rs::Xdp::new(std::os::fd::AsFd::as_fd(&fd))
                        .query(info.ifindex as i32, libbpf_rs::XdpFlags::NONE)
                })
                .map(|q| [q.prog_id, q.drv_prog_id, q.skb_prog_id].contains(&info.xdp_prog_id))
                .unwrap_or(false)
        } else {
            false
        };
        let tc_attached = |pin: &str, at, prog_id: u32| -> bool {
            if prog_id == 0 || sys::ifindex(&info.iface).ok() != Some(info.ifindex) {
                return false;
            }
            let Ok(fd) = libbpf_rs::Program::fd_from_pinned_path(dir.join(pin)) else {
                return false;
            };
            libbpf_rs::TcHookBuilder::new(std::os::fd::AsFd::as_fd(&fd))
                .ifindex(info.ifindex as i32)
                .handle(info.tc_handle)
                .priority(info.tc_priority)
                .hook(at)
                .query()
                .ok()
                == Some(prog_id)
        };
        let tc_egress_attached = tc_attached("tc_egress", libbpf_rs::TC_EGRESS, info.tc_prog_id);
        let tc_ingress_attached =
            tc_attached("tc_ingress", libbpf_rs::TC_INGRESS, info.tc_ingress_prog_id);
        let total = info.layout.total_bytes();
        rows.push(StatusRow {
            tc_egress_attached,
            tc_ingress_attached,
            cache_bytes: total,
            fill: fill(&dir, total, info.layout.log_bytes() / 16).unwrap_or_default(),
            pin_dir: dir.display().to_string(),
            xdp_attached,
            info,
        });
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        println!("inkcache is not attached anywhere");
    }
    for r in rows {
        let i = &r.info;
        println!(
            "{} (ifindex {}{})",
            i.iface,
            i.ifindex,
            if r.xdp_attached {
                ""
            } else {
                ", XDP NOT ATTACHED"
            }
        );
        let missing = |ok: bool| if ok { "" } else { " (NOT ATTACHED)" };
        println!(
            "  mode        {} XDP, TC filters {:#x}/{:#x}: egress{}, ingress{}",
            i.xdp_mode,
            i.tc_handle,
            i.tc_priority,
            missing(r.tc_egress_attached),
            missing(r.tc_ingress_attached),
        );
        println!("  ports       {:?}", i.ports);
        println!("  allow       {}", i.allow.join(", "));
        if i.max_amplification > 0 {
            println!(
                "  others      answered if the reply is at most {}x the request",
                i.max_amplification
            );
        } else {
            println!("  others      never answered by the kernel");
        }
        let l = &i.layout;
        println!(
            "  cache       {:.1} MiB: index {} sets x {} ways ({:.1} MiB), log {} x 64 KiB (sized for {}-byte items; items up to {} bytes)",
            r.cache_bytes as f64 / 1048576.0,
            l.sets,
            inkcache::layout::WAYS,
            l.index_bytes() as f64 / 1048576.0,
            l.segs,
            i.item_bytes,
            i.item_max,
        );
        println!(
            "  holds       {} items ({:.1}% of the ways), {:.1} MiB of items, {} bytes of cache per item",
            r.fill.items,
            100.0 * r.fill.items as f64 / l.ways().max(1) as f64,
            r.fill.item_bytes_stored as f64 / 1048576.0,
            r.fill.bytes_per_item,
        );
        println!("  max age     {} s", i.max_age_secs);
        if i.group.len() > 1 {
            println!("  shared with {}", i.group.join(", "));
        }
        println!("  pinned at   {}", r.pin_dir);
    }
    Ok(())
}
