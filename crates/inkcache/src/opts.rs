//! `inkcache attach`'s options, declared (with their defaults) once for the CLI and for library
//! users alike, and their checks.
use anyhow::Result;
use ipnet::IpNet;

use crate::{
    abi::ITEM_CAP, pins, reply_write::ReplyWrite, tc::TcMode, xdp, xdp::XdpAttach, xdp::XdpMode,
    Error,
};

/// What `inkcache attach` does: its command-line options, declared (with their defaults) once
/// here for the CLI and for library users alike.
#[derive(Clone, Debug, clap::Args)]
pub struct AttachOpts {
    /// Interface the server is reached on (repeat for several; they share one cache).
    #[arg(long = "iface", required = true)]
    pub ifaces: Vec<String>,
    /// memcached port, UDP and TCP (repeat for several, of one server: attach refuses ports
    /// whose UDP sockets two servers hold, as they would share one cache).
    #[arg(long = "port", default_values_t = [11211u16], value_parser = parse_port)]
    pub ports: Vec<u16>,
    /// Sources the kernel may answer (repeat); default: the interfaces' connected subnets.
    #[arg(long = "allow", value_parser = parse_cidr)]
    pub allow: Vec<IpNet>,
    /// Memory for cached items and their index, in MiB.
    #[arg(long, default_value_t = 64)]
    pub cache_mb: u32,
    /// Expected average item size in bytes (VALUE line + data): splits --cache-mb between the
    /// item log and the index (`status` shows the split and the real average).
    #[arg(long, default_value_t = crate::layout::DEFAULT_ITEM_BYTES)]
    pub item_bytes: u32,
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    pub xdp_mode: XdpMode,
    /// Alone on the interface, or through a libxdp dispatcher shared with other XDP programs
    /// (what xdp-loader does; auto: when the kernel loads freplace programs).
    #[arg(long, value_enum, default_value_t = XdpAttach::Auto)]
    pub xdp_attach: XdpAttach,
    /// How XDP writes a reply into the frame: one helper call or inline stores (auto: inline
    /// where the kernel returns through a thunk, e.g. AMD's Safe RET).
    #[arg(long, value_enum, default_value_t = ReplyWrite::Auto)]
    pub reply_write: ReplyWrite,
    /// Run priority in an XDP dispatcher (lower runs first; xdp-filter uses 10).
    #[arg(long, default_value_t = xdp::DEFAULT_PRIORITY)]
    pub xdp_priority: u32,
    /// TC programs as tcx links (Linux 6.6+) or clsact filters (auto: tcx where the kernel has
    /// it).
    #[arg(long, value_enum, default_value_t = TcMode::Auto)]
    pub tc_mode: TcMode,
    /// Seconds an item filled from a reply may be served when its expiry is unknown (0
    /// disables the kernel cache).
    #[arg(long = "max-age", default_value_t = 60)]
    pub max_age_secs: u64,
    /// Get requests remembered while their replies are awaited (bounds the `pending` map).
    #[arg(long = "pending", default_value_t = 65536)]
    pub pending_entries: u32,
    /// Milliseconds a write the server does not answer (noreply, UDP, connections not
    /// followed) keeps its key from being filled (the server's time to apply a write).
    #[arg(long, default_value_t = 1000)]
    pub quarantine_ms: u64,
    /// TCP connections followed from their first byte, so that each write is settled by the
    /// server's answer to it (bounds the `conns` map, ~1 KiB each).
    #[arg(long, default_value_t = 4096)]
    pub max_conns: u32,
    /// Connections to the server whose bytes can be walked at all (those beyond --max-conns
    /// byte run by byte run): set it above memcached's -c. While more are open the kernel
    /// answers and fills nothing (counted conn_blind).
    #[arg(long, default_value_t = 65536)]
    pub max_sockets: u32,
    /// Seconds after which a write the server has still not answered stops blocking fills.
    #[arg(long = "settle-max", default_value_t = 60)]
    pub settle_max_secs: u64,
    /// Keys whose expiry (learned from mutations) the kernel remembers.
    #[arg(long, default_value_t = 262144)]
    pub ttl_hints: u32,
    /// Sources outside --allow are answered by the kernel too, but only with replies at most N
    /// times the size of their request (UDP payloads); 0: never (they reach the server).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_amplification: u32,
    /// Debug: never invalidate (lets the consistency checker prove it can fail).
    #[arg(long, hide = true)]
    pub debug_no_invalidation: bool,
    /// Debug: settle every write by the quarantine, never by the server's answer (shows what
    /// the exact settling adds).
    #[arg(long, hide = true)]
    pub debug_quarantine_only: bool,
    /// Debug: pass partly missing multi-key gets whole instead of splitting them (what the
    /// split saves).
    #[arg(long, hide = true)]
    pub debug_no_split: bool,
    /// Cooperative mode: the server (inkcached --cooperative IFACE) installs and invalidates
    /// entries itself; the socket-side programs walk no writes and fill nothing, and XDP hands
    /// what it passes to inkcached's AF_XDP sockets if it has any. Only for inkcached.
    #[arg(long)]
    pub cooperative: bool,
    /// The key hash's seed; None: random (tests fix it to craft colliding keys).
    #[arg(skip)]
    pub hash_seed: Option<u64>,
    /// Debug: tell the server's packets in the cgroup_skb programs by their sockets' marks, as on
    /// kernels without bpf_get_netns_cookie there (the tests of that path on newer kernels).
    #[arg(long, hide = true)]
    pub debug_netns_by_sock: bool,
    /// Tests: the socket-side programs keep to no network namespace (BPF_PROG_TEST_RUN's
    /// packets have no server socket to tell it by).
    #[arg(skip)]
    pub any_netns: bool,
    /// Measurement only: XDP passes a get after this stage of its path (bpf/inkcache_xdp.bpf.c
    /// STAGE_*); 0: never. Hidden: for timing the stages live (docs/results/hitcost.md).
    #[arg(long, hide = true, default_value_t = 0)]
    pub debug_stop_stage: u32,
}

impl Default for AttachOpts {
    /// The CLI's defaults, no interface.
    fn default() -> Self {
        use clap::{Args, FromArgMatches};
        let cmd = AttachOpts::augment_args(clap::Command::new("inkcache"))
            .mut_arg("ifaces", |a| a.required(false));
        AttachOpts::from_arg_matches(&cmd.get_matches_from(["inkcache"]))
            .expect("the declared defaults parse")
    }
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
