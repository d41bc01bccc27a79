//! inkcheck: a consistency checker for a memcached-protocol server, alone or behind a
//! cache (inkcache) that answers some reads itself.
//!
//! Writer threads mutate a small hot key set over TCP (set, add, cas, append, delete, incr, touch,
//! flush_all, `noreply` variants, pipelined batches). Reader threads read it over UDP with `get`
//! (single and multi-key). Every write stores a value that names it, so each value read maps back
//! to the write(s) that produced it. After the run, every read that returned a value is checked
//! against the recorded history:
//!
//! * **stale**: the value was superseded by a write (or an observation that the key was absent,
//!   or a `flush_all`) that is known to come after it and was acknowledged before the read was
//!   sent;
//! * **expired**: the value's latest possible expiry (plus [`CheckConfig::expiry_slack`]) passed
//!   before the read was sent;
//! * **phantom**: the value was read before the write that produced it was sent;
//! * **unknown_value** / **wrong_key** / **impossible_value** / **bad_reply**: a value that no
//!   write produced, a value written to another key, a value whose write the server refused, or
//!   an unparsable reply.
//!
//! # Why it has no false positives against a correct server
//!
//! Times are taken from one monotonic clock shared by all threads. A write's *send* time is taken
//! before its bytes are written (a lower bound of when the server applied it), its *ack* time
//! after the reply was read (an upper bound). A read's send time is a lower bound of when the
//! server processed it, its receive time an upper bound. A `noreply` write has no reply of its
//! own: the server handles a connection in order, so it was applied before the next reply on the
//! same connection, whose ack time becomes its ack time ("settled"); a `noreply` write never
//! followed by a reply stays unsettled and can never supersede anything.
//!
//! memcached applies the operations on one key in a single order. A value read is the state just
//! after its *producer* (a set/add/cas for the base, an append for the last suffix, an incr for a
//! number). Its *chain* is the producer and every write already reflected in the value: the base
//! and the appends named in a string value, or the base and the acknowledged incrs with a result
//! up to the number read. Once the state moves away from a value it can never come back (values
//! are unique and numbers only grow within a chain). So a write `w` proves the value stale when
//! `w` is *effective* (it changes the value, or it observed the key absent: `DELETED`,
//! `NOT_FOUND`, `NOT_STORED` from append, a stored set...), is not in the chain, was sent after
//! some chain member was acknowledged (so it was applied after that member, and, because it is
//! not in the chain and would have broken the chain had it come earlier, after the producer), and
//! was acknowledged before the read was sent. An acknowledged incr with a larger result in the
//! same chain is after the producer by monotonicity. Writes whose effect is unknown (a `noreply`
//! incr or touch, a write cut off by a connection error) are never used as superseders; a
//! `noreply` set, append or delete is assumed to take effect (a set fails only when memcached
//! cannot allocate memory, which a 32-key working set does not hit).
//!
//! Expiry: memcached stores `exptime = current_time + ttl` where `current_time` is whole seconds,
//! refreshed by a timer once a second, so it lags the real clock by up to 1 s plus the rounding
//! of up to 1 s: an item with TTL `t` written at real time `T` is certainly expired by
//! `T + t + 2 s`. The latest possible expiry of a value is the largest of (ack of its base + the
//! base's TTL) and (ack of any touch that may have applied after the base was sent and before the
//! read + its TTL), TTL 0 meaning never. The read is flagged only when it was sent more than
//! `expiry_slack` (default 2.5 s: the 2 s above plus timer jitter) after that.
//!
//! Misses are not checked (a cache that drops values is correct, if useless).
//!
//! Files: this one (what to run, [`run`]), `writer.rs` and `reader.rs` (the TCP writers and UDP
//! readers), `history.rs` (what they record), `analyse.rs` (the verdicts), [`report`].
//! Depends on the protocol crate only.

mod analyse;
mod history;
mod reader;
pub mod report;
mod writer;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use history::{ms, EarlyViolation, Ns, Op, ReadRec};
pub use report::{CheckReport, OpDesc, Transport, Verdict, Violation};

/// What to run. The command line's options are these fields (`inkcheck --help`), so the defaults
/// are declared once, here.
#[derive(Clone, Debug, Serialize, clap::Args)]
pub struct CheckConfig {
    /// Server address, HOST:PORT: TCP for the writers, UDP for the readers.
    #[arg(long, value_parser = parse_addr)]
    pub server: SocketAddr,
    /// How long to run, in seconds.
    #[arg(long = "seconds", default_value = "10", value_parser = parse_seconds)]
    pub duration: Duration,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Hot keys (every 4th holds a number for incr).
    #[arg(long, default_value_t = 32)]
    pub keys: usize,
    /// Writer threads (one TCP connection each).
    #[arg(long, default_value_t = 4)]
    pub writers: usize,
    /// Reader threads (one UDP socket each, one get outstanding).
    #[arg(long, default_value_t = 4)]
    pub readers: usize,
    /// Keys written only every few seconds (by one extra writer, with TTLs of 3-4 s), so that
    /// reads can find values past their expiry; 10% of reads go to them.
    #[arg(long, default_value_t = 4)]
    pub expiry_keys: usize,
    /// Writes per pipelined batch: 1 to N.
    #[arg(long, default_value_t = 4)]
    pub batch: usize,
    /// Share of writes sent with `noreply` (set, append, delete, touch, incr).
    #[arg(long, default_value_t = 0.15)]
    pub noreply_ratio: f64,
    /// Share of set/add/cas/touch with a TTL of 1 or 2 s.
    #[arg(long, default_value_t = 0.2)]
    pub ttl_ratio: f64,
    /// Chance per write of a flush_all instead.
    #[arg(long, default_value_t = 0.0002)]
    pub flush_ratio: f64,
    /// Share of gets asking for 2 to 4 keys.
    #[arg(long, default_value_t = 0.2)]
    pub multiget_ratio: f64,
    /// Share of sets with 1500-3000 byte values (multi-datagram replies).
    #[arg(long, default_value_t = 0.03)]
    pub large_ratio: f64,
    /// Hostile mode: the writers' pipelines also carry lines memcached answers but that change
    /// nothing (storage lines it refuses, whose announced data is the next real write; `get`
    /// with `noreply`; unknown commands) and real writes with doubled spaces, at this share of
    /// writes (0: off).
    #[arg(long, default_value_t = 0.0)]
    pub hostile: f64,
    /// Slack past the latest possible expiry before a read counts as expired (memcached's
    /// clock has whole-second ticks).
    #[arg(long, default_value = "2500ms", value_parser = parse_duration)]
    pub expiry_slack: Duration,
    /// UDP reply timeout (the read is dropped, not checked).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Example violations shown per kind.
    #[arg(long, default_value_t = 5)]
    pub examples: usize,
}

impl CheckConfig {
    /// The command line's defaults, against `server`.
    pub fn new(server: SocketAddr) -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            cfg: CheckConfig,
        }
        <Defaults as clap::Parser>::parse_from(["inkcheck", "--server", &server.to_string()]).cfg
    }

    pub fn validate(&self) -> Result<()> {
        if self.keys < 4 {
            bail!("--keys must be at least 4");
        }
        if self.writers == 0 || self.readers == 0 {
            bail!("need at least one writer and one reader");
        }
        if self.writers > 2000 {
            bail!("at most 2000 writers");
        }
        if self.batch == 0 {
            bail!("--batch must be at least 1");
        }
        for (n, v) in [
            ("noreply ratio", self.noreply_ratio),
            ("ttl ratio", self.ttl_ratio),
            ("flush ratio", self.flush_ratio),
            ("multiget ratio", self.multiget_ratio),
            ("large ratio", self.large_ratio),
            ("hostile", self.hostile),
        ] {
            if !(0.0..=1.0).contains(&v) {
                bail!("{n} must be within 0..1, not {v}");
            }
        }
        Ok(())
    }
}

fn parse_addr(s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .with_context(|| format!("bad address {s:?} (expected HOST:PORT, [::1]:PORT for IPv6)"))?
        .next()
        .with_context(|| format!("{s:?} resolves to no address"))
}

fn parse_seconds(s: &str) -> Result<Duration> {
    let v: f64 = s
        .parse()
        .with_context(|| format!("bad number of seconds {s:?}"))?;
    if !(v > 0.0 && v <= 86_400.0) {
        bail!("--seconds must be within (0, 86400]");
    }
    Ok(Duration::from_secs_f64(v))
}

/// `2500ms`, `1s`, `1.5s` or `250us` (a bare number is seconds).
fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("bad duration {s:?} (examples: 1s, 2500ms)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        _ => bail!("bad duration unit in {s:?} (use us, ms or s)"),
    };
    if !(secs.is_finite() && secs >= 0.0) {
        bail!("bad duration {s:?}");
    }
    Ok(Duration::from_secs_f64(secs))
}

struct Shared {
    cfg: CheckConfig,
    t0: Instant,
    end: Instant,
    keys: Vec<String>,
}

impl Shared {
    fn now(&self) -> Ns {
        self.t0.elapsed().as_nanos() as Ns
    }
}

#[derive(Default)]
struct WriterOut {
    ops: Vec<Op>,
    reads: Vec<ReadRec>,
    early: Vec<EarlyViolation>,
    batches: u64,
    reconnects: u64,
    tcp_gets: u64,
}

#[derive(Default)]
struct ReaderOut {
    reads: Vec<ReadRec>,
    early: Vec<EarlyViolation>,
    requests: u64,
    multigets: u64,
    timeouts: u64,
    hits: u64,
    misses: u64,
}

/// Runs the check described by `cfg` and analyses what it saw.
pub fn run(cfg: &CheckConfig) -> Result<CheckReport> {
    cfg.validate()?;
    // A prefix unique to this run, so values left by earlier runs are never read.
    let tag = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        (t ^ u64::from(std::process::id()).rotate_left(32) ^ cfg.seed.wrapping_mul(0x9e37_79b9))
            & 0xffff_ffff
    };
    let prefix = format!("ck{tag:08x}");
    // The hot keys, then the expiry keys (written rarely, so values get old enough to expire).
    let keys: Vec<String> = (0..cfg.keys + cfg.expiry_keys)
        .map(|i| format!("{prefix}:{i}"))
        .collect();
    // Reachability first, for a clear error.
    TcpStream::connect_timeout(&cfg.server, Duration::from_secs(2))
        .with_context(|| format!("connecting to {} over TCP", cfg.server))?;
    let t0 = Instant::now();
    let sh = Shared {
        cfg: cfg.clone(),
        t0,
        end: t0 + cfg.duration,
        keys,
    };
    let (wouts, routs) = std::thread::scope(|sc| {
        let ws: Vec<_> = (0..cfg.writers)
            .map(|w| {
                let sh = &sh;
                sc.spawn(move || writer::writer(sh, w as u16))
            })
            .collect();
        let ex = (cfg.expiry_keys > 0).then(|| {
            let sh = &sh;
            sc.spawn(move || writer::expiry_writer(sh, cfg.writers as u16))
        });
        let rs: Vec<_> = (0..cfg.readers)
            .map(|r| {
                let sh = &sh;
                sc.spawn(move || reader::reader(sh, r))
            })
            .collect();
        let ws: Vec<Result<WriterOut>> = ws
            .into_iter()
            .chain(ex)
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a writer panicked")))
            })
            .collect();
        let rs: Vec<Result<ReaderOut>> = rs
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow!("a reader panicked")))
            })
            .collect();
        (ws, rs)
    });
    let duration_s = t0.elapsed().as_secs_f64();
    let mut rep = CheckReport {
        duration_s,
        key_prefix: prefix,
        config: Some(cfg.clone()),
        ..Default::default()
    };
    let mut ops = Vec::new();
    let mut reads = Vec::new();
    let mut early = Vec::new();
    for w in wouts {
        let w = w?;
        rep.batches += w.batches;
        rep.tcp_reconnects += w.reconnects;
        rep.tcp_gets += w.tcp_gets;
        ops.extend(w.ops);
        reads.extend(w.reads);
        early.extend(w.early);
    }
    for r in routs {
        let r = r?;
        rep.udp_reads += r.requests;
        rep.udp_multigets += r.multigets;
        rep.udp_timeouts += r.timeouts;
        rep.udp_hits += r.hits;
        rep.udp_misses += r.misses;
        reads.extend(r.reads);
        early.extend(r.early);
    }
    if rep.udp_hits == 0 {
        bail!(
            "no UDP get returned a value ({} sent, {} timed out): nothing was checked (is UDP enabled on {}?)",
            rep.udp_reads,
            rep.udp_timeouts,
            cfg.server
        );
    }
    rep.writes = ops.len() as u64;
    for o in &ops {
        *rep.writes_by_op.entry(o.kind.name().into()).or_default() += 1;
        if o.noreply {
            rep.noreply_writes += 1;
            if o.ack.is_none() {
                rep.unsettled += 1;
            }
        }
    }
    let found = analyse::analyse(&sh, &ops, &reads);
    rep.values_checked = reads.len() as u64;
    rep.expiry_key_values = reads.iter().filter(|r| r.key as usize >= cfg.keys).count() as u64;
    let mut per_kind: BTreeMap<Verdict, usize> = BTreeMap::new();
    for e in early {
        *rep.violations_by_kind.entry(e.kind).or_default() += 1;
        rep.violations += 1;
        let n = per_kind.entry(e.kind).or_default();
        if *n < cfg.examples {
            *n += 1;
            rep.examples.push(Violation {
                kind: e.kind,
                key: e.key,
                transport: Transport::Udp,
                read_send_ms: ms(e.send),
                read_recv_ms: ms(e.recv),
                value: String::new(),
                producer: None,
                superseded_by: None,
                detail: e.detail,
            });
        }
    }
    let mut gaps = Vec::new();
    for v in found {
        if let (Some(sup), Verdict::Stale) = (&v.superseded_by, v.kind) {
            let name = format!("{}{}", sup.op, if sup.noreply { " noreply" } else { "" });
            *rep.stale_by_superseder.entry(name).or_default() += 1;
            gaps.push(v.read_send_ms - sup.ack_ms.unwrap_or(v.read_send_ms));
        }
        *rep.violations_by_kind.entry(v.kind).or_default() += 1;
        rep.violations += 1;
        let n = per_kind.entry(v.kind).or_default();
        if *n < cfg.examples {
            *n += 1;
            rep.examples.push(v);
        }
    }
    if !gaps.is_empty() {
        gaps.sort_by(f64::total_cmp);
        rep.stale_gap_p50_ms = gaps[gaps.len() / 2];
        rep.stale_gap_max_ms = gaps[gaps.len() - 1];
    }
    Ok(rep)
}
