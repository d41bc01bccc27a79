//! One configuration from start to finish: warm-up, the max-throughput run, the latency run at
//! the fixed rate, the per-program profile; and the memcaslap cross-check.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use inkbench::workload::key_name;
use testkit::SRV_V4;

use crate::topology::{stats_delta, Rig};
use crate::{
    Memcaslap, PaperOpts, ServerKind, Setup, SetupResult, Timing, Workload, CLIENT_CPU, PORT,
};

/// Sends one UDP get for every key `0..keys` (16 in flight) so that the kernel cache sees each
/// miss and learns the item from the server's reply. Answers are not checked.
pub(crate) fn touch_all(server: SocketAddr, keys: u64, key_size: usize) -> Result<()> {
    const WINDOW: u64 = 16;
    let s = UdpSocket::bind("0.0.0.0:0").context("binding a UDP socket")?;
    s.connect(server)?;
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut buf = [0u8; 2048];
    let mut id = 0u16;
    let mut k = 0;
    while k < keys {
        let end = (k + WINDOW).min(keys);
        for key in k..end {
            let mut d = inkproto::udp::FrameHeader::request(id).encode().to_vec();
            id = id.wrapping_add(1);
            d.extend_from_slice(format!("get {}\r\n", key_name("k", key, key_size)).as_bytes());
            s.send(&d).context("sending a get")?;
        }
        for _ in k..end {
            if s.recv(&mut buf).is_err() {
                break;
            }
        }
        k = end;
    }
    Ok(())
}

/// Why `setup` cannot run (a binary it needs was not found), if so.
pub(crate) fn missing(opts: &PaperOpts, setup: Setup) -> Option<&'static str> {
    if setup.with_inkcache() && opts.inkcache.is_none() {
        Some("inkcache binary not found (build it: cargo build --release -p inkcache)")
    } else if setup.server() == Some(ServerKind::Inkcached) && opts.inkcached.is_none() {
        Some("inkcached binary not found")
    } else {
        None
    }
}

/// Sets up `setup`, warms it, and measures max throughput, latency at the workload's fixed rate
/// (set from the first setup's max throughput) and, where XDP answers, per-program cost.
pub(crate) fn run_setup(
    opts: &PaperOpts,
    timing: &Timing,
    wl: &Workload,
    setup: Setup,
    rate: &mut Option<f64>,
) -> Result<SetupResult> {
    let mut r = SetupResult::empty(wl, setup);
    if let Some(why) = missing(opts, setup) {
        r.skipped = Some(why.into());
        return Ok(r);
    }
    let rig = Rig::new(opts, setup)?;
    r.server_cmd = rig.server.as_ref().map(|s| s.cmd.clone());
    r.xdp_mode = Some(rig.xdp_mode.clone());
    let mut cfg = wl.run_config(opts.inflight);
    rig.warm(wl, &cfg, timing)?;

    cfg.duration = Duration::from_secs_f64(timing.measure_s);
    let max = rig.measure(&cfg).context("max throughput run")?;
    let r_lat = *rate.get_or_insert_with(|| {
        // Half the baseline's max, rounded down to a thousand.
        ((max.throughput * 0.5 / 1000.0).floor() * 1000.0).max(1000.0)
    });
    r.max = Some(max);

    let mut lc = cfg.clone();
    lc.rate = Some(r_lat);
    r.latency = Some(rig.measure(&lc).context("latency run")?);

    if setup.with_inkcache() || setup == Setup::XdpEcho {
        let mut pc = cfg.clone();
        pc.duration = Duration::from_secs_f64(timing.profile_s);
        match rig.profile(&pc) {
            Ok((progs, ns)) => {
                r.bpf_profile = progs;
                r.profile_server_ns_per_req = Some(ns);
            }
            Err(e) => eprintln!("inklab: profiling {}: {e:#}", setup.label()),
        }
    }
    Ok(r)
}

/// `memcaslap -U` from the client namespace (pinned to the client CPU) against `setup`.
pub(crate) fn run_memcaslap(opts: &PaperOpts, timing: &Timing, setup: Setup) -> Memcaslap {
    let server = format!("{SRV_V4}:{PORT}");
    let secs = format!("{}s", timing.memcaslap_s);
    let args = [
        "-s", &server, "-U", "-t", &secs, "-T", "1", "-c", "16", "-X", "64",
    ];
    let mut m = Memcaslap {
        setup,
        label: setup.label().into(),
        command: format!("memcaslap {}", args.join(" ")),
        tps: None,
        cmd_get: None,
        get_misses: None,
        kernel: None,
        error: None,
        output_tail: String::new(),
    };
    let r = (|| -> Result<()> {
        let rig = Rig::new(opts, setup)?;
        let k0 = match &rig.inkcache {
            Some(k) => Some(k.stats()?),
            None => None,
        };
        // `ip netns exec` and taskset exec memcaslap: its sockets can be watched (testkit's
        // memcaslap module: a run with two sockets on one port is void and made again)
        let cmd = || {
            let mut c = rig.pair.client.cmd("taskset");
            c.arg("-c")
                .arg(CLIENT_CPU.to_string())
                .arg("memcaslap")
                .args(args);
            c
        };
        let limit = Duration::from_secs(timing.memcaslap_s + 60);
        let out = testkit::memcaslap::run(cmd, limit)
            .context("running memcaslap (Debian package libmemcached-tools)")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let lines: Vec<&str> = text.lines().collect();
        m.output_tail = lines[lines.len().saturating_sub(6)..].join("\n");
        if !out.status.success() {
            bail!(
                "memcaslap failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        if let (Some(k), Some(k0)) = (&rig.inkcache, k0) {
            m.kernel = Some(stats_delta(&k0, &k.stats()?));
        }
        m.cmd_get = testkit::memcaslap::stat(&text, "cmd_get");
        m.get_misses = testkit::memcaslap::stat(&text, "get_misses");
        // "Run time: 5.0s Ops: 443013 TPS: 88572 Net_rate: 10.3M/s"
        m.tps = text
            .lines()
            .rev()
            .find_map(|l| l.split("TPS:").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok());
        if m.tps.is_none() {
            bail!("no TPS in memcaslap's output");
        }
        Ok(())
    })();
    if let Err(e) = r {
        eprintln!("inklab: memcaslap / {}: {e:#}", setup.label());
        m.error = Some(format!("{e:#}"));
    }
    m
}
