//! `inkcache`: attach the in-kernel memcached cache to interfaces, detach it, read its counters.
use std::process::ExitCode;

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use inkcache::{lost::Detached, metrics, pins, status, sys, AttachOpts, Stats};

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
    Attach(AttachOpts),
    /// Remove everything `attach` put on an interface (other programs stay), also when its pins
    /// are gone.
    Detach {
        #[arg(long)]
        iface: String,
    },
    /// Describe an attached interface again (its MAC, addresses and VLAN devices) after they
    /// changed: until then the kernel answers as the host delivered at attach.
    Refresh {
        #[arg(long)]
        iface: String,
        /// Then again after every change of the namespace's links or addresses, until the
        /// interface is detached (for a service).
        #[arg(long)]
        follow: bool,
    },
    /// Counters of the cache attached to an interface, summed over CPUs.
    Stats {
        #[arg(long)]
        iface: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// What is attached where (in this network namespace).
    Status {
        #[arg(long)]
        json: bool,
        /// Every network namespace's attachments.
        #[arg(long)]
        all_netns: bool,
    },
    /// Prometheus metrics: the cache's counters and fill level, and the `stats` of servers.
    Metrics {
        /// Serve them over HTTP at ADDR/metrics (e.g. 127.0.0.1:9150); without it, print once.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// A memcached-protocol server whose `stats` to export too (HOST:PORT, or
        /// HOST:PORT@NETNS to reach it from a network namespace; repeat for several).
        #[arg(long = "server", value_name = "HOST:PORT[@NETNS]")]
        servers: Vec<inkcache::metrics::Server>,
        /// The attachments of every network namespace.
        #[arg(long)]
        all_netns: bool,
        /// Milliseconds to wait for a server's stats.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
    },
    /// A live view of hits, misses, fills, invalidations and refusals per second.
    Top {
        /// Only the attachment of this interface (default: all in this network namespace).
        #[arg(long)]
        iface: Option<String>,
        /// The attachments of every network namespace.
        #[arg(long)]
        all_netns: bool,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0, value_parser = parse_interval)]
        interval: f64,
        /// Stop after this many refreshes.
        #[arg(long, short = 'n')]
        count: Option<u64>,
        /// Print frames one after another instead of redrawing the terminal.
        #[arg(long, short = 'b')]
        batch: bool,
    },
    /// Put a pass-through XDP program on the peer of a veth pair, so XDP_TX replies get through.
    VethPeer {
        #[arg(long)]
        iface: String,
        /// Remove it instead.
        #[arg(long)]
        remove: bool,
    },
    /// Write the manual pages (inkcache.1 and one per command) into a directory.
    #[command(hide = true)]
    Man {
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
}

/// ", VLAN devices a, b" for the VLAN devices an attachment answers through, or nothing.
fn vlans_said(vlans: &[String]) -> String {
    if vlans.is_empty() {
        String::new()
    } else {
        format!(", VLAN devices {}", vlans.join(", "))
    }
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.05..=3600.0).contains(&v) => Ok(v),
        _ => Err(format!("bad interval: {s} (seconds, 0.05-3600)")),
    }
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
        Cmd::Attach(opts) => {
            for info in inkcache::attach(&opts)? {
                println!(
                    "attached to {} ({} XDP), ports {:?}, cache {} ways + {} KiB log, allow {}{}",
                    info.iface,
                    info.xdp_mode,
                    info.ports,
                    info.layout.ways(),
                    info.layout.log_bytes() / 1024,
                    info.allow.join(","),
                    vlans_said(&info.vlans)
                );
            }
        }
        Cmd::Refresh { iface, follow } => {
            sys::require_root()?;
            sys::ensure_bpffs()?;
            let dir = pins::dir_for(&iface)?;
            if !dir.exists() {
                return Err(inkcache::Error::NotAttached(iface).into());
            }
            let said = |vlans: &[String]| println!("refreshed {iface}{}", vlans_said(vlans));
            if follow {
                inkcache::host::follow(&dir, said)?;
            } else {
                said(&inkcache::host::refresh(&dir)?);
            }
        }
        Cmd::Detach { iface } => match inkcache::lost::detach(&iface)? {
            Detached::Pinned => println!("detached from {iface}"),
            Detached::Unpinned(what) => println!(
                "detached from {iface}: its pins were gone; removed {}",
                what.join(", ")
            ),
        },
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
        Cmd::Status { json, all_netns } => {
            let rows = status::rows(all_netns)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", status::render(&rows));
            }
        }
        Cmd::Metrics {
            listen,
            servers,
            all_netns,
            timeout_ms,
        } => {
            sys::require_root()?;
            sys::ensure_bpffs()?;
            let timeout = Duration::from_millis(timeout_ms.max(1));
            match listen {
                Some(addr) => metrics::serve(addr, all_netns, &servers, timeout)?,
                None => print!("{}", metrics::gather(all_netns, &servers, timeout)?),
            }
        }
        Cmd::Top {
            iface,
            all_netns,
            interval,
            count,
            batch,
        } => {
            sys::require_root()?;
            sys::ensure_bpffs()?;
            let every = Duration::from_secs_f64(interval);
            inkcache::top::run(iface.as_deref(), all_netns, every, count, batch)?;
        }
        Cmd::VethPeer { iface, remove } => inkcache::attach::veth_peer(&iface, remove)?,
        Cmd::Man { out } => man(&out)?,
    }
    Ok(())
}

/// inkcache.1 and inkcache-COMMAND.1 for each visible command, from the clap definitions.
fn man(out: &std::path::Path) -> Result<()> {
    use clap::CommandFactory;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let top = Cli::command();
    let mut pages = vec![("inkcache".to_string(), top.clone())];
    for sub in top.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("inkcache-{}", sub.get_name());
        let version = top.get_version().unwrap_or("").to_string();
        let bin = format!("inkcache {}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .bin_name(bin)
            .version(version);
        pages.push((name, page));
    }
    for (name, cmd) in pages {
        let path = out.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut buf)?;
        std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
