//! `inkbench check`: a consistency checker for a memcached-protocol server, alone or behind a
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

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use inkproto::client::{self, parse_response, Response, Store};
use inkproto::udp::{frame_request, FrameHeader, Reassembly, HEADER_LEN};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct CheckConfig {
    /// TCP (writers) and UDP (readers) on the same address.
    pub server: SocketAddr,
    pub duration: Duration,
    pub seed: u64,
    /// Size of the hot key set (every 4th key holds numbers for incr).
    pub keys: usize,
    pub writers: usize,
    pub readers: usize,
    /// Keys written only every few seconds (by one extra writer, with TTLs of 1-2 s), so that
    /// reads can find values past their expiry; 10% of reads go to them.
    pub expiry_keys: usize,
    /// Writes per pipelined batch: 1 to this many.
    pub batch: usize,
    /// Share of writes sent with `noreply` (set, append, delete, touch, incr).
    pub noreply_ratio: f64,
    /// Share of set/add/cas/touch that carry a TTL of 1 or 2 s.
    pub ttl_ratio: f64,
    /// Chance per write of a `flush_all` instead.
    pub flush_ratio: f64,
    /// Share of reads that ask for 2 to 4 keys.
    pub multiget_ratio: f64,
    /// Share of sets whose value is padded to 1500..3000 bytes (several UDP datagrams).
    pub large_ratio: f64,
    /// Added to the latest possible expiry before a read of the value counts as expired.
    pub expiry_slack: Duration,
    /// UDP reply timeout (the read is dropped, not checked).
    pub timeout: Duration,
    /// Example violations kept per kind.
    pub examples: usize,
}

impl CheckConfig {
    pub fn new(server: SocketAddr) -> Self {
        CheckConfig {
            server,
            duration: Duration::from_secs(10),
            seed: 1,
            keys: 32,
            writers: 4,
            readers: 4,
            expiry_keys: 4,
            batch: 4,
            noreply_ratio: 0.15,
            ttl_ratio: 0.2,
            flush_ratio: 0.0002,
            multiget_ratio: 0.2,
            large_ratio: 0.03,
            expiry_slack: Duration::from_millis(2500),
            timeout: Duration::from_secs(1),
            examples: 5,
        }
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
        ] {
            if !(0.0..=1.0).contains(&v) {
                bail!("{n} must be within 0..1, not {v}");
            }
        }
        Ok(())
    }
}

/// One write as the checker saw it, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct OpDesc {
    pub op: String,
    pub writer: u16,
    pub noreply: bool,
    pub ttl: u32,
    /// Outcome: the reply (`STORED`, `NOT_FOUND`, a number...), `noreply`, or `unknown`.
    pub outcome: String,
    pub send_ms: f64,
    /// When its reply (or, for noreply, the next reply on its connection) was read.
    pub ack_ms: Option<f64>,
}

/// One violation, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub kind: String,
    pub key: String,
    pub transport: String,
    pub read_send_ms: f64,
    pub read_recv_ms: f64,
    pub value: String,
    /// The write that produced the value read (if known).
    pub producer: Option<OpDesc>,
    /// The write that proves it stale (for `stale`).
    pub superseded_by: Option<OpDesc>,
    pub detail: String,
}

/// What the checker saw and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    pub duration_s: f64,
    pub key_prefix: String,
    /// UDP gets sent (one per request, multi-key included).
    pub udp_reads: u64,
    pub udp_multigets: u64,
    pub udp_timeouts: u64,
    /// Values returned (UDP and the TCP `gets` before each cas), each checked.
    pub values_checked: u64,
    pub udp_hits: u64,
    pub udp_misses: u64,
    pub tcp_gets: u64,
    /// Values read from the expiry keys.
    pub expiry_key_values: u64,
    pub writes: u64,
    pub writes_by_op: BTreeMap<String, u64>,
    pub noreply_writes: u64,
    /// noreply writes never followed by a reply on their connection.
    pub unsettled: u64,
    pub batches: u64,
    pub tcp_reconnects: u64,
    pub violations: u64,
    pub violations_by_kind: BTreeMap<String, u64>,
    /// Stale reads by the kind of write that superseded the value.
    pub stale_by_superseder: BTreeMap<String, u64>,
    /// How long after the superseding write's ack stale reads were sent: median and max (ms).
    pub stale_gap_p50_ms: f64,
    pub stale_gap_max_ms: f64,
    pub examples: Vec<Violation>,
    pub config: Option<CheckConfig>,
}

impl CheckReport {
    /// Human summary.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "checked {} values ({} from expiry keys) in {:.1} s: {} UDP gets ({} multi-key, {} hits, {} misses, {} timeouts), {} TCP gets",
            self.values_checked,
            self.expiry_key_values,
            self.duration_s,
            self.udp_reads,
            self.udp_multigets,
            self.udp_hits,
            self.udp_misses,
            self.udp_timeouts,
            self.tcp_gets
        );
        let ops: Vec<String> = self
            .writes_by_op
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            s,
            "writes {} in {} batches ({}), noreply {} ({} unsettled), reconnects {}",
            self.writes,
            self.batches,
            ops.join(", "),
            self.noreply_writes,
            self.unsettled,
            self.tcp_reconnects
        );
        if self.violations == 0 {
            let _ = writeln!(s, "violations: 0");
            return s;
        }
        let kinds: Vec<String> = self
            .violations_by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(s, "VIOLATIONS: {} ({})", self.violations, kinds.join(", "));
        if !self.stale_by_superseder.is_empty() {
            let sup: Vec<String> = self
                .stale_by_superseder
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(
                s,
                "stale reads superseded by: {}; read sent after the superseding ack: median {:.3} ms, max {:.3} ms",
                sup.join(", "),
                self.stale_gap_p50_ms,
                self.stale_gap_max_ms
            );
        }
        for v in &self.examples {
            let _ = writeln!(
                s,
                "- {} key {} read over {} sent at {:.3} ms, answered at {:.3} ms: {:?}",
                v.kind, v.key, v.transport, v.read_send_ms, v.read_recv_ms, v.value
            );
            if let Some(p) = &v.producer {
                let _ = writeln!(s, "    written by   {}", desc(p));
            }
            if let Some(p) = &v.superseded_by {
                let _ = writeln!(s, "    superseded by {}", desc(p));
            }
            if !v.detail.is_empty() {
                let _ = writeln!(s, "    {}", v.detail);
            }
        }
        s
    }
}

fn desc(o: &OpDesc) -> String {
    format!(
        "{}{} (writer {}, ttl {}) -> {}, sent {:.3} ms, acked {}",
        o.op,
        if o.noreply { " noreply" } else { "" },
        o.writer,
        o.ttl,
        o.outcome,
        o.send_ms,
        o.ack_ms
            .map_or("never".to_string(), |a| format!("{a:.3} ms"))
    )
}

// ---------------------------------------------------------------------------------------------
// Records.

/// Nanoseconds since the run's start.
type Ns = u64;
const NEVER: Ns = u64::MAX;
const NUM_OFFSET_BITS: u32 = 20;
const NUM_OFFSET_MASK: u64 = (1 << NUM_OFFSET_BITS) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Set,
    Add,
    Cas,
    Append,
    Delete,
    Incr,
    Touch,
    Flush,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Set => "set",
            Kind::Add => "add",
            Kind::Cas => "cas",
            Kind::Append => "append",
            Kind::Delete => "delete",
            Kind::Incr => "incr",
            Kind::Touch => "touch",
            Kind::Flush => "flush_all",
        }
    }
    fn is_base(self) -> bool {
        matches!(self, Kind::Set | Kind::Add | Kind::Cas)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// STORED (set/add/cas/append).
    Stored,
    /// The key is absent after it: DELETED, or NOT_FOUND / NOT_STORED(append) observed absence.
    Absent,
    Touched,
    Number(u64),
    Flushed,
    /// EXISTS (cas), NOT_STORED (add): nothing changed.
    NoEffect,
    /// noreply: no answer of its own.
    Noreply,
    /// No answer (connection error) or an error answer: effect unknown.
    Unknown,
}

#[derive(Clone, Debug)]
struct Op {
    /// writer << 40 | sequence: named in the value.
    token: u64,
    writer: u16,
    kind: Kind,
    /// Key index; `u32::MAX` for flush_all.
    key: u32,
    noreply: bool,
    ttl: u32,
    send: Ns,
    ack: Option<Ns>,
    outcome: Outcome,
    /// For number keys: the value of a set, the delta of an incr.
    num: u64,
}

impl Op {
    /// Could have produced a value (its token may appear in a value read).
    fn may_produce(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Stored | Outcome::Noreply | Outcome::Unknown | Outcome::Number(_)
        )
    }

    /// Known to have changed the key's value or to have found it absent (a superseder, once
    /// settled).
    fn effective(&self) -> bool {
        match self.outcome {
            Outcome::Stored | Outcome::Absent | Outcome::Number(_) | Outcome::Flushed => true,
            Outcome::Noreply => matches!(self.kind, Kind::Set | Kind::Append | Kind::Delete),
            _ => false,
        }
    }

    fn outcome_text(&self) -> String {
        match self.outcome {
            Outcome::Stored => "STORED".into(),
            Outcome::Absent => match self.kind {
                Kind::Delete => "DELETED or NOT_FOUND".into(),
                Kind::Append => "NOT_STORED".into(),
                _ => "NOT_FOUND".into(),
            },
            Outcome::Touched => "TOUCHED".into(),
            Outcome::Number(n) => n.to_string(),
            Outcome::Flushed => "OK".into(),
            Outcome::NoEffect => "no effect".into(),
            Outcome::Noreply => "noreply".into(),
            Outcome::Unknown => "unknown".into(),
        }
    }

    fn desc(&self) -> OpDesc {
        OpDesc {
            op: self.kind.name().into(),
            writer: self.writer,
            noreply: self.noreply,
            ttl: self.ttl,
            outcome: self.outcome_text(),
            send_ms: ms(self.send),
            ack_ms: self.ack.map(ms),
        }
    }
}

fn ms(ns: Ns) -> f64 {
    ns as f64 / 1e6
}

/// A value as read, parsed.
#[derive(Clone, Debug)]
enum ReadVal {
    /// `<base token>[~padding](|a<token>)*`
    Str {
        base: u64,
        appends: Vec<u64>,
    },
    Num(u64),
    /// Not a value any writer writes.
    Bad(Vec<u8>),
}

#[derive(Clone, Debug)]
struct ReadRec {
    key: u32,
    tcp: bool,
    send: Ns,
    recv: Ns,
    val: ReadVal,
}

/// A violation seen while reading (before the analysis).
#[derive(Clone, Debug)]
struct EarlyViolation {
    kind: &'static str,
    key: String,
    send: Ns,
    recv: Ns,
    detail: String,
}

fn token(writer: u16, seq: u64) -> u64 {
    (u64::from(writer) << 40) | seq
}

fn token_text(t: u64) -> String {
    format!("{}.{}", t >> 40, t & ((1 << 40) - 1))
}

fn parse_token(s: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(s).ok()?;
    let (w, n) = s.split_once('.')?;
    let w: u16 = w.parse().ok()?;
    let n: u64 = n.parse().ok()?;
    if n >= 1 << 40 {
        return None;
    }
    Some(token(w, n))
}

/// Number keys hold `(writer+1) << 52 | seq << 20` after a set, plus the incrs since.
fn num_base(writer: u16, seq: u64) -> u64 {
    ((u64::from(writer) + 1) << 52) | ((seq & 0xffff_ffff) << NUM_OFFSET_BITS)
}

/// Every 4th hot key holds numbers (the expiry keys after the hot ones hold strings).
fn is_num_key(k: usize, hot: usize) -> bool {
    k < hot && k % 4 == 3
}

fn parse_value(num: bool, data: &[u8]) -> ReadVal {
    let bad = || ReadVal::Bad(data.iter().take(200).copied().collect());
    if num {
        return match std::str::from_utf8(data).ok().and_then(|s| s.parse().ok()) {
            Some(n) => ReadVal::Num(n),
            None => bad(),
        };
    }
    let mut parts = data.split(|&b| b == b'|');
    let Some(first) = parts.next() else {
        return bad();
    };
    let first = first.split(|&b| b == b'~').next().unwrap_or(first);
    if first.is_empty() || !matches!(first[0], b's' | b'd' | b'c') {
        return bad();
    }
    let Some(base) = parse_token(&first[1..]) else {
        return bad();
    };
    let mut appends = Vec::new();
    for p in parts {
        match p.strip_prefix(b"a").and_then(parse_token) {
            Some(t) => appends.push(t),
            None => return bad(),
        }
    }
    ReadVal::Str { base, appends }
}

fn val_text(key: usize, v: &ReadVal) -> String {
    let s = match v {
        ReadVal::Num(n) => n.to_string(),
        ReadVal::Bad(b) => String::from_utf8_lossy(b).into_owned(),
        ReadVal::Str { base, appends } => {
            let mut s = format!("<{}>", token_text(*base));
            for a in appends {
                s.push_str(&format!("|a{}", token_text(*a)));
            }
            s
        }
    };
    let _ = key;
    if s.len() > 200 {
        format!("{}...", &s[..200])
    } else {
        s
    }
}

// ---------------------------------------------------------------------------------------------
// Run.

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
                sc.spawn(move || writer(sh, w as u16))
            })
            .collect();
        let ex = (cfg.expiry_keys > 0).then(|| {
            let sh = &sh;
            sc.spawn(move || expiry_writer(sh, cfg.writers as u16))
        });
        let rs: Vec<_> = (0..cfg.readers)
            .map(|r| {
                let sh = &sh;
                sc.spawn(move || reader(sh, r))
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
    let found = analyse(&sh, &ops, &reads);
    rep.values_checked = reads.len() as u64;
    rep.expiry_key_values = reads.iter().filter(|r| r.key as usize >= cfg.keys).count() as u64;
    let mut per_kind: BTreeMap<String, usize> = BTreeMap::new();
    for e in early {
        *rep.violations_by_kind.entry(e.kind.into()).or_default() += 1;
        rep.violations += 1;
        let n = per_kind.entry(e.kind.into()).or_default();
        if *n < cfg.examples {
            *n += 1;
            rep.examples.push(Violation {
                kind: e.kind.into(),
                key: e.key,
                transport: "udp".into(),
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
        if let (Some(sup), "stale") = (&v.superseded_by, v.kind.as_str()) {
            let name = format!("{}{}", sup.op, if sup.noreply { " noreply" } else { "" });
            *rep.stale_by_superseder.entry(name).or_default() += 1;
            gaps.push(v.read_send_ms - sup.ack_ms.unwrap_or(v.read_send_ms));
        }
        *rep.violations_by_kind.entry(v.kind.clone()).or_default() += 1;
        rep.violations += 1;
        let n = per_kind.entry(v.kind.clone()).or_default();
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

// ---------------------------------------------------------------------------------------------
// Writers.

struct Conn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Result<Conn> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .with_context(|| format!("connecting to {addr}"))?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(3)))?;
        Ok(Conn {
            s,
            buf: Vec::with_capacity(16 << 10),
        })
    }

    /// Reads the next response, returning it and the time it was complete.
    fn next(&mut self, sh: &Shared) -> Result<(Response, Ns)> {
        let mut chunk = [0u8; 16 << 10];
        loop {
            if let Some((r, used)) =
                parse_response(&self.buf).map_err(|e| anyhow!("bad TCP reply: {e}"))?
            {
                self.buf.drain(..used);
                return Ok((r, sh.now()));
            }
            let n = self.s.read(&mut chunk).context("reading a TCP reply")?;
            if n == 0 {
                bail!("server closed the connection");
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

struct Writer<'a> {
    sh: &'a Shared,
    id: u16,
    seq: u64,
    rng: StdRng,
    out: WriterOut,
}

impl Writer<'_> {
    fn next_token(&mut self) -> (u64, u64) {
        self.seq += 1;
        (token(self.id, self.seq), self.seq)
    }

    fn ttl(&mut self) -> u32 {
        if self.rng.gen_bool(self.sh.cfg.ttl_ratio) {
            self.rng.gen_range(1..=2)
        } else {
            0
        }
    }

    fn padding(&mut self) -> usize {
        if self.rng.gen_bool(self.sh.cfg.large_ratio) {
            self.rng.gen_range(1500..3000)
        } else {
            self.rng.gen_range(0..48)
        }
    }

    /// Plans one write (not cas) and appends its request to `req`.
    fn plan(&mut self, req: &mut Vec<u8>, noreply_ok: bool) -> Op {
        let cfg = &self.sh.cfg;
        let nr = noreply_ok && self.rng.gen_bool(cfg.noreply_ratio);
        let (tok, seq) = self.next_token();
        let mut op = Op {
            token: tok,
            writer: self.id,
            kind: Kind::Set,
            key: 0,
            noreply: false,
            ttl: 0,
            send: 0,
            ack: None,
            outcome: Outcome::Unknown,
            num: 0,
        };
        if self.rng.gen_bool(cfg.flush_ratio) {
            op.kind = Kind::Flush;
            op.key = u32::MAX;
            req.extend_from_slice(b"flush_all\r\n");
            return op;
        }
        let k = self.rng.gen_range(0..cfg.keys);
        op.key = k as u32;
        let key = self.sh.keys[k].as_bytes();
        let roll = self.rng.gen_range(0..100);
        let w = self.id;
        if is_num_key(k, cfg.keys) {
            match roll {
                0..=24 => {
                    op.kind = Kind::Set;
                    op.ttl = self.ttl();
                    op.num = num_base(w, seq);
                    op.noreply = nr;
                    let v = op.num.to_string();
                    client::store(req, Store::Set, key, 0, op.ttl.into(), v.as_bytes(), nr);
                }
                25..=79 => {
                    op.kind = Kind::Incr;
                    op.num = self.rng.gen_range(1..=9);
                    op.noreply = nr;
                    client::keyed(req, "incr", key, Some(&op.num.to_string()), nr);
                }
                80..=89 => {
                    op.kind = Kind::Delete;
                    op.noreply = nr;
                    client::keyed(req, "delete", key, None, nr);
                }
                _ => {
                    op.kind = Kind::Touch;
                    op.ttl = self.ttl();
                    op.noreply = nr;
                    client::keyed(req, "touch", key, Some(&op.ttl.to_string()), nr);
                }
            }
            return op;
        }
        match roll {
            0..=34 => {
                op.kind = Kind::Set;
                op.ttl = self.ttl();
                op.noreply = nr;
                let pad = self.padding();
                let v = value_with_padding(&format!("s{w}.{seq}"), pad);
                client::store(req, Store::Set, key, 0, op.ttl.into(), &v, nr);
            }
            35..=41 => {
                op.kind = Kind::Add;
                op.ttl = self.ttl();
                let v = format!("d{w}.{seq}");
                client::store(req, Store::Add, key, 0, op.ttl.into(), v.as_bytes(), false);
            }
            42..=71 => {
                op.kind = Kind::Append;
                op.noreply = nr;
                let v = format!("|a{w}.{seq}");
                client::store(req, Store::Append, key, 0, 0, v.as_bytes(), nr);
            }
            72..=84 => {
                op.kind = Kind::Delete;
                op.noreply = nr;
                client::keyed(req, "delete", key, None, nr);
            }
            _ => {
                op.kind = Kind::Touch;
                op.ttl = self.ttl();
                op.noreply = nr;
                client::keyed(req, "touch", key, Some(&op.ttl.to_string()), nr);
            }
        }
        op
    }

    /// Sends one pipelined batch and records its outcomes.
    fn batch(&mut self, conn: &mut Conn) -> Result<()> {
        let n = self.rng.gen_range(1..=self.sh.cfg.batch);
        let mut req = Vec::new();
        let mut ops = Vec::with_capacity(n);
        for i in 0..n {
            ops.push(self.plan(&mut req, i + 1 < n));
        }
        let send = self.sh.now();
        for o in &mut ops {
            o.send = send;
        }
        self.out.batches += 1;
        let res = conn.s.write_all(&req).context("writing a batch");
        let mut pending_noreply: Vec<usize> = Vec::new();
        let mut err = res.err();
        for i in 0..ops.len() {
            if ops[i].noreply {
                ops[i].outcome = Outcome::Noreply;
                pending_noreply.push(i);
                continue;
            }
            if err.is_some() {
                break;
            }
            match conn.next(self.sh) {
                Ok((r, at)) => {
                    ops[i].ack = Some(at);
                    ops[i].outcome = outcome(ops[i].kind, &r);
                    for j in pending_noreply.drain(..) {
                        ops[j].ack = Some(at);
                    }
                }
                Err(e) => err = Some(e),
            }
        }
        self.out.ops.extend(ops);
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// gets, then cas with the unique it returned.
    fn cas(&mut self, conn: &mut Conn) -> Result<()> {
        let k = loop {
            let k = self.rng.gen_range(0..self.sh.cfg.keys);
            if !is_num_key(k, self.sh.cfg.keys) {
                break k;
            }
        };
        let key = self.sh.keys[k].clone();
        let mut req = Vec::new();
        client::gets(&mut req, &[key.as_bytes()]);
        let send = self.sh.now();
        conn.s.write_all(&req).context("writing gets")?;
        let (r, recv) = conn.next(self.sh)?;
        self.out.tcp_gets += 1;
        let unique = match r {
            Response::Values(items) => {
                let mut unique = None;
                for it in items {
                    if it.key != key.as_bytes() {
                        self.out.early.push(EarlyViolation {
                            kind: "wrong_key",
                            key: key.clone(),
                            send,
                            recv,
                            detail: format!(
                                "TCP gets {key} answered a value for {}",
                                String::from_utf8_lossy(&it.key)
                            ),
                        });
                        continue;
                    }
                    unique = it.cas;
                    self.out.reads.push(ReadRec {
                        key: k as u32,
                        tcp: true,
                        send,
                        recv,
                        val: parse_value(is_num_key(k, self.sh.cfg.keys), &it.data),
                    });
                }
                unique
            }
            other => bail!("gets answered {other:?}"),
        };
        let Some(unique) = unique else {
            return Ok(());
        };
        let (tok, seq) = self.next_token();
        let ttl = self.ttl();
        let v = value_with_padding(&format!("c{}.{seq}", self.id), 0);
        let mut req = Vec::new();
        client::store(
            &mut req,
            Store::Cas(unique),
            key.as_bytes(),
            0,
            ttl.into(),
            &v,
            false,
        );
        let mut op = Op {
            token: tok,
            writer: self.id,
            kind: Kind::Cas,
            key: k as u32,
            noreply: false,
            ttl,
            send: self.sh.now(),
            ack: None,
            outcome: Outcome::Unknown,
            num: 0,
        };
        let r = conn
            .s
            .write_all(&req)
            .context("writing cas")
            .and_then(|_| conn.next(self.sh));
        if let Ok((r, at)) = &r {
            op.ack = Some(*at);
            op.outcome = outcome(Kind::Cas, r);
        }
        self.out.ops.push(op);
        r.map(|_| ())
    }
}

fn value_with_padding(base: &str, pad: usize) -> Vec<u8> {
    let mut v = base.as_bytes().to_vec();
    if pad > 0 {
        v.push(b'~');
        v.resize(v.len() + pad, b'x');
    }
    v
}

fn outcome(kind: Kind, r: &Response) -> Outcome {
    match (kind, r) {
        (Kind::Set | Kind::Add | Kind::Cas | Kind::Append, Response::Stored) => Outcome::Stored,
        (Kind::Append, Response::NotStored) => Outcome::Absent,
        (Kind::Add, Response::NotStored) => Outcome::NoEffect,
        (Kind::Cas, Response::Exists) => Outcome::NoEffect,
        (Kind::Delete, Response::Deleted | Response::NotFound) => Outcome::Absent,
        (Kind::Cas | Kind::Incr | Kind::Touch, Response::NotFound) => Outcome::Absent,
        (Kind::Touch, Response::Touched) => Outcome::Touched,
        (Kind::Incr, Response::Number(n)) => Outcome::Number(*n),
        (Kind::Flush, Response::Ok) => Outcome::Flushed,
        _ => Outcome::Unknown,
    }
}

/// Writes the expiry keys now and then: a set with TTL 1-2 s (70%), a touch with TTL 1 s (20%)
/// or a delete, one every 0.2-1.5 s, so a key often stays unwritten for longer than its TTL plus
/// the slack and a read may see a value that should have expired.
fn expiry_writer(sh: &Shared, id: u16) -> Result<WriterOut> {
    let cfg = &sh.cfg;
    let mut w = Writer {
        sh,
        id,
        seq: 0,
        rng: StdRng::seed_from_u64(cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xe4),
        out: WriterOut::default(),
    };
    let mut conn = Conn::open(cfg.server)?;
    loop {
        let pause = Duration::from_millis(w.rng.gen_range(200..1500));
        if Instant::now() + pause >= sh.end {
            break;
        }
        std::thread::sleep(pause);
        let (tok, seq) = w.next_token();
        let k = cfg.keys + w.rng.gen_range(0..cfg.expiry_keys);
        let key = sh.keys[k].as_bytes();
        let mut op = Op {
            token: tok,
            writer: id,
            kind: Kind::Set,
            key: k as u32,
            noreply: false,
            ttl: w.rng.gen_range(1..=2),
            send: 0,
            ack: None,
            outcome: Outcome::Unknown,
            num: 0,
        };
        let mut req = Vec::new();
        match w.rng.gen_range(0..10) {
            0..=6 => {
                let v = value_with_padding(&format!("s{id}.{seq}"), 0);
                client::store(&mut req, Store::Set, key, 0, op.ttl.into(), &v, false);
            }
            7..=8 => {
                op.kind = Kind::Touch;
                op.ttl = 1;
                client::keyed(&mut req, "touch", key, Some("1"), false);
            }
            _ => {
                op.kind = Kind::Delete;
                op.ttl = 0;
                client::keyed(&mut req, "delete", key, None, false);
            }
        }
        op.send = sh.now();
        w.out.batches += 1;
        let r = conn
            .s
            .write_all(&req)
            .context("writing to an expiry key")
            .and_then(|_| conn.next(sh));
        if let Ok((r, at)) = &r {
            op.ack = Some(*at);
            op.outcome = outcome(op.kind, r);
        }
        w.out.ops.push(op);
        if r.is_err() {
            w.out.reconnects += 1;
            conn = Conn::open(cfg.server)?;
        }
    }
    Ok(w.out)
}

fn writer(sh: &Shared, id: u16) -> Result<WriterOut> {
    let mut w = Writer {
        sh,
        id,
        seq: 0,
        rng: StdRng::seed_from_u64(
            sh.cfg
                .seed
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(u64::from(id) * 2 + 1),
        ),
        out: WriterOut::default(),
    };
    let mut conn = Conn::open(sh.cfg.server)?;
    let mut failures = 0;
    while Instant::now() < sh.end {
        let r = if w.rng.gen_bool(0.06) {
            w.cas(&mut conn)
        } else {
            w.batch(&mut conn)
        };
        if let Err(e) = r {
            failures += 1;
            if failures > 20 {
                return Err(e.context(format!("writer {id}: too many connection failures")));
            }
            w.out.reconnects += 1;
            std::thread::sleep(Duration::from_millis(10));
            conn = Conn::open(sh.cfg.server)?;
        }
    }
    Ok(w.out)
}

// ---------------------------------------------------------------------------------------------
// Readers.

fn reader(sh: &Shared, idx: usize) -> Result<ReaderOut> {
    let cfg = &sh.cfg;
    let mut rng = StdRng::seed_from_u64(
        cfg.seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(idx as u64 * 2 + 2),
    );
    let mut out = ReaderOut::default();
    let mut sock = udp_sock(cfg)?;
    let mut id: u16 = rng.gen();
    let mut buf = vec![0u8; 65536];
    while Instant::now() < sh.end {
        id = id.wrapping_add(1);
        let n = if rng.gen_bool(cfg.multiget_ratio) {
            rng.gen_range(2..=4)
        } else {
            1
        };
        let mut ks: Vec<usize> = Vec::with_capacity(n);
        while ks.len() < n {
            let k = if cfg.expiry_keys > 0 && rng.gen_bool(0.1) {
                cfg.keys + rng.gen_range(0..cfg.expiry_keys)
            } else {
                rng.gen_range(0..cfg.keys)
            };
            if !ks.contains(&k) {
                ks.push(k);
            }
        }
        let names: Vec<&[u8]> = ks.iter().map(|&k| sh.keys[k].as_bytes()).collect();
        let mut payload = Vec::new();
        client::get(&mut payload, &names);
        let dgram = frame_request(id, &payload);
        out.requests += 1;
        if n > 1 {
            out.multigets += 1;
        }
        let send = sh.now();
        if let Err(e) = sock.send(&dgram) {
            return Err(anyhow!(e).context("sending a UDP get"));
        }
        match udp_reply(&sock, id, &mut buf, cfg.timeout) {
            Ok(Some(reply)) => {
                let recv = sh.now();
                match parse_response(&reply) {
                    Ok(Some((Response::Values(items), used))) if used == reply.len() => {
                        let mut seen = Vec::new();
                        for it in items {
                            let Some(pos) = names.iter().position(|n| *n == &it.key[..]) else {
                                out.early.push(EarlyViolation {
                                    kind: "wrong_key",
                                    key: String::from_utf8_lossy(&it.key).into_owned(),
                                    send,
                                    recv,
                                    detail: format!(
                                        "get {} answered a value for {}",
                                        String::from_utf8_lossy(&payload).trim_end(),
                                        String::from_utf8_lossy(&it.key)
                                    ),
                                });
                                continue;
                            };
                            let k = ks[pos];
                            seen.push(k);
                            out.reads.push(ReadRec {
                                key: k as u32,
                                tcp: false,
                                send,
                                recv,
                                val: parse_value(is_num_key(k, cfg.keys), &it.data),
                            });
                        }
                        out.hits += seen.len() as u64;
                        out.misses += (ks.len() - seen.len().min(ks.len())) as u64;
                    }
                    other => out.early.push(EarlyViolation {
                        kind: "bad_reply",
                        key: sh.keys[ks[0]].clone(),
                        send,
                        recv,
                        detail: format!(
                            "reply {:?} parsed as {other:?}",
                            String::from_utf8_lossy(&reply[..reply.len().min(200)])
                        ),
                    }),
                }
            }
            Ok(None) => {
                out.timeouts += 1;
                // A fresh socket, so a late answer can never be taken for a later request's.
                sock = udp_sock(cfg)?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn udp_sock(cfg: &CheckConfig) -> Result<UdpSocket> {
    let s = crate::udp::connect(cfg.server)?;
    s.set_read_timeout(Some(cfg.timeout))?;
    Ok(s)
}

/// Collects the reply to request `id`: every message (memcached sends one per key of a
/// multi-get) until the payload parses as one complete response. `None` on timeout.
fn udp_reply(
    sock: &UdpSocket,
    id: u16,
    buf: &mut [u8],
    timeout: Duration,
) -> Result<Option<Vec<u8>>> {
    let deadline = Instant::now() + timeout;
    let mut cur = Reassembly::new();
    let mut payload = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        sock.set_read_timeout(Some(left))?;
        let n = match sock.recv(buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(None),
            Err(e) => return Err(anyhow!(e).context("receiving a UDP reply")),
        };
        let d = &buf[..n];
        let Some(hdr) = FrameHeader::decode(d) else {
            continue;
        };
        if hdr.request_id != id || hdr.total == 0 {
            continue;
        }
        let data = &d[HEADER_LEN..];
        if !cur.push(hdr, data) {
            cur = Reassembly::new();
            if !cur.push(hdr, data) {
                continue;
            }
        }
        if !cur.is_complete() {
            continue;
        }
        let msg = std::mem::take(&mut cur).finish().expect("complete");
        payload.extend_from_slice(&msg);
        match parse_response(&payload) {
            Ok(None) => continue,
            _ => return Ok(Some(payload)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Analysis.

struct KeyHist {
    /// Effective, settled writes: (ack, send, op index), by ack.
    supers: Vec<(Ns, Ns, usize)>,
    /// Touches that may have set an expiry: (send, op index), by send.
    touches: Vec<(Ns, usize)>,
    /// Acknowledged incr results.
    incrs: BTreeMap<u64, usize>,
    /// Number of noreply or unknown-outcome incrs (values nobody saw acknowledged).
    blind_incrs: usize,
}

fn analyse(sh: &Shared, ops: &[Op], reads: &[ReadRec]) -> Vec<Violation> {
    let nkeys = sh.keys.len();
    let mut hist: Vec<KeyHist> = (0..nkeys)
        .map(|_| KeyHist {
            supers: Vec::new(),
            touches: Vec::new(),
            incrs: BTreeMap::new(),
            blind_incrs: 0,
        })
        .collect();
    let mut flushes: Vec<(Ns, Ns, usize)> = Vec::new();
    let mut by_token: HashMap<u64, usize> = HashMap::with_capacity(ops.len());
    let mut by_num: HashMap<u64, usize> = HashMap::new();
    let mut max_latency: Ns = 0;
    for (i, o) in ops.iter().enumerate() {
        by_token.insert(o.token, i);
        if let Some(a) = o.ack {
            max_latency = max_latency.max(a - o.send.min(a));
        }
        if o.kind == Kind::Flush {
            if let (Some(a), true) = (o.ack, o.effective()) {
                flushes.push((a, o.send, i));
            }
            continue;
        }
        let h = &mut hist[o.key as usize];
        if o.kind == Kind::Set && is_num_key(o.key as usize, sh.cfg.keys) {
            by_num.insert(o.num, i);
        }
        if let (Some(a), true) = (o.ack, o.effective()) {
            h.supers.push((a, o.send, i));
        }
        match (o.kind, o.outcome) {
            (Kind::Touch, Outcome::Touched | Outcome::Noreply | Outcome::Unknown) => {
                h.touches.push((o.send, i))
            }
            (Kind::Incr, Outcome::Number(n)) => {
                h.incrs.insert(n, i);
            }
            (Kind::Incr, Outcome::Noreply | Outcome::Unknown) => h.blind_incrs += 1,
            _ => {}
        }
    }
    for h in &mut hist {
        h.supers.sort_unstable();
        h.touches.sort_unstable();
    }
    flushes.sort_unstable();
    let slack = sh.cfg.expiry_slack.as_nanos() as Ns;

    let mut out = Vec::new();
    for r in reads {
        let key = r.key as usize;
        let h = &hist[key];
        let viol =
            |kind: &str, producer: Option<usize>, sup: Option<usize>, detail: String| Violation {
                kind: kind.into(),
                key: sh.keys[key].clone(),
                transport: if r.tcp { "tcp" } else { "udp" }.into(),
                read_send_ms: ms(r.send),
                read_recv_ms: ms(r.recv),
                value: val_text(key, &r.val),
                producer: producer.map(|i| ops[i].desc()),
                superseded_by: sup.map(|i| ops[i].desc()),
                detail,
            };
        // The chain: op indices reflected in the value; the producer; the base.
        let mut chain: Vec<usize> = Vec::new();
        let producer: Option<usize>;
        let base: usize;
        let mut num_range: Option<(u64, u64)> = None;
        match &r.val {
            ReadVal::Bad(_) => {
                out.push(viol(
                    "unknown_value",
                    None,
                    None,
                    "not a value any writer wrote".into(),
                ));
                continue;
            }
            ReadVal::Str { base: b, appends } => {
                let mut bad = None;
                for (pos, t) in std::iter::once(b).chain(appends.iter()).enumerate() {
                    match by_token.get(t) {
                        None => {
                            bad = Some(viol(
                                "unknown_value",
                                None,
                                None,
                                format!("token {} was never written", token_text(*t)),
                            ));
                            break;
                        }
                        Some(&i) => {
                            let o = &ops[i];
                            if o.key != r.key {
                                bad = Some(viol(
                                    "wrong_key",
                                    Some(i),
                                    None,
                                    format!("written to {}", sh.keys[o.key as usize]),
                                ));
                                break;
                            }
                            let kind_ok = if pos == 0 {
                                o.kind.is_base()
                            } else {
                                o.kind == Kind::Append
                            };
                            if !kind_ok {
                                bad = Some(viol(
                                    "unknown_value",
                                    Some(i),
                                    None,
                                    "token in the wrong place".into(),
                                ));
                                break;
                            }
                            if !o.may_produce() {
                                bad = Some(viol(
                                    "impossible_value",
                                    Some(i),
                                    None,
                                    format!("the server answered {} to it", o.outcome_text()),
                                ));
                                break;
                            }
                            chain.push(i);
                        }
                    }
                }
                if let Some(v) = bad {
                    out.push(v);
                    continue;
                }
                base = chain[0];
                producer = chain.last().copied();
            }
            ReadVal::Num(v) => {
                let b = v & !NUM_OFFSET_MASK;
                let Some(&bi) = by_num.get(&b) else {
                    out.push(viol(
                        "unknown_value",
                        None,
                        None,
                        "no set wrote this number's base".into(),
                    ));
                    continue;
                };
                if ops[bi].key != r.key {
                    out.push(viol(
                        "wrong_key",
                        Some(bi),
                        None,
                        format!("written to {}", sh.keys[ops[bi].key as usize]),
                    ));
                    continue;
                }
                if !ops[bi].may_produce() {
                    out.push(viol(
                        "impossible_value",
                        Some(bi),
                        None,
                        format!("the server answered {} to it", ops[bi].outcome_text()),
                    ));
                    continue;
                }
                base = bi;
                chain.push(bi);
                chain.extend(h.incrs.range(b..=*v).map(|(_, &i)| i));
                producer = if *v == b {
                    Some(bi)
                } else if let Some(&i) = h.incrs.get(v) {
                    Some(i)
                } else if h.blind_incrs > 0 {
                    None // some noreply incr: which one is unknown
                } else {
                    out.push(viol(
                        "unknown_value",
                        Some(bi),
                        None,
                        "no incr produced this number".into(),
                    ));
                    continue;
                };
                num_range = Some((b, *v));
            }
        }
        // Phantom: read before it was written.
        if let Some(&i) = chain.iter().find(|&&i| ops[i].send > r.recv) {
            out.push(viol(
                "phantom",
                Some(i),
                None,
                "the value was read before its write was sent".into(),
            ));
            continue;
        }
        // Stale.
        let t = chain
            .iter()
            .filter_map(|&i| ops[i].ack)
            .min()
            .unwrap_or(NEVER);
        let in_chain = |i: usize| -> bool {
            if let Some((b, v)) = num_range {
                let o = &ops[i];
                if let (Kind::Incr, Outcome::Number(n)) = (o.kind, o.outcome) {
                    return n & !NUM_OFFSET_MASK == b && n <= v;
                }
                i == base
            } else {
                chain.contains(&i)
            }
        };
        // `after`: how long after the reflected write's ack a superseding write must have been sent.
        // memcached's flush_all voids only items last written before the current second of its
        // clock, so items written within about a second of a flush survive it: a flush supersedes
        // a write only when sent more than the expiry slack after the write's ack.
        let find = |list: &[(Ns, Ns, usize)], after: Ns| -> Option<usize> {
            if t == NEVER {
                return None;
            }
            let end = list.partition_point(|&(a, _, _)| a < r.send);
            for &(a, s, i) in list[..end].iter().rev() {
                if a <= t {
                    break;
                }
                if s > t.saturating_add(after) && !in_chain(i) {
                    return Some(i);
                }
            }
            None
        };
        if let Some(w) = find(&h.supers, 0).or_else(|| find(&flushes, slack)) {
            let gap = ms(r.send) - ops[w].ack.map_or(0.0, ms);
            out.push(viol(
                "stale",
                producer,
                Some(w),
                format!(
                    "the superseding write was acknowledged {gap:.3} ms before the read was sent"
                ),
            ));
            continue;
        }
        // Expired.
        let b = &ops[base];
        let deadline = |ack: Option<Ns>, ttl: u32| -> Ns {
            match (ack, ttl) {
                (_, 0) | (None, _) => NEVER,
                (Some(a), t) => a + u64::from(t) * 1_000_000_000,
            }
        };
        let mut latest = deadline(b.ack, b.ttl);
        if latest != NEVER && r.send > latest.saturating_add(slack) {
            let from = b.send.saturating_sub(max_latency);
            let lo = h.touches.partition_point(|&(s, _)| s < from);
            let hi = h.touches.partition_point(|&(s, _)| s < r.recv);
            for &(_, i) in &h.touches[lo..hi] {
                let o = &ops[i];
                if o.ack.is_some_and(|a| a <= b.send) {
                    continue; // applied before the base
                }
                latest = latest.max(deadline(o.ack, o.ttl));
                if latest == NEVER {
                    break;
                }
            }
            if latest != NEVER && r.send > latest.saturating_add(slack) {
                out.push(viol(
                    "expired",
                    producer.or(Some(base)),
                    None,
                    format!(
                        "the value expired at the latest at {:.3} ms (base {} ttl {} s, touches included), read sent {:.3} ms later, slack {:.1} s",
                        ms(latest),
                        b.kind.name(),
                        b.ttl,
                        ms(r.send - latest),
                        sh.cfg.expiry_slack.as_secs_f64()
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Ns = 1_000_000;

    fn shared() -> Shared {
        let t0 = Instant::now();
        Shared {
            cfg: CheckConfig::new("127.0.0.1:1".parse().unwrap()),
            t0,
            end: t0,
            keys: (0..4).map(|i| format!("k:{i}")).collect(),
        }
    }

    /// An op on key `key` with token (0, seq), sent and acked at the given ms.
    fn op(seq: u64, kind: Kind, key: u32, send: u64, ack: Option<u64>, outcome: Outcome) -> Op {
        Op {
            token: token(0, seq),
            writer: 0,
            kind,
            key,
            noreply: outcome == Outcome::Noreply,
            ttl: 0,
            send: send * MS,
            ack: ack.map(|a| a * MS),
            outcome,
            num: if kind == Kind::Set && key == 3 {
                num_base(0, seq)
            } else {
                0
            },
        }
    }

    fn read(key: u32, send: u64, val: ReadVal) -> ReadRec {
        ReadRec {
            key,
            tcp: false,
            send: send * MS,
            recv: send * MS + MS / 10,
            val,
        }
    }

    fn s(base: u64, appends: &[u64]) -> ReadVal {
        ReadVal::Str {
            base: token(0, base),
            appends: appends.iter().map(|&a| token(0, a)).collect(),
        }
    }

    fn kinds(ops: &[Op], reads: &[ReadRec]) -> Vec<String> {
        analyse(&shared(), ops, reads)
            .into_iter()
            .map(|v| v.kind)
            .collect()
    }

    use Kind::*;
    use Outcome::*;

    #[test]
    fn stale_needs_a_later_acknowledged_write() {
        let ops = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Set, 0, 20, Some(30), Stored),
        ];
        assert_eq!(kinds(&ops, &[read(0, 40, s(1, &[]))]), ["stale"]);
        assert!(
            kinds(&ops, &[read(0, 25, s(1, &[]))]).is_empty(),
            "not acked yet"
        );
        assert!(kinds(&ops, &[read(0, 40, s(2, &[]))]).is_empty());
        // Sent before the first one's ack: may have been applied first.
        let conc = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Set, 0, 5, Some(30), Stored),
        ];
        assert!(kinds(&conc, &[read(0, 40, s(1, &[]))]).is_empty());
        // Other keys don't matter.
        let other = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Set, 1, 20, Some(30), Stored),
        ];
        assert!(kinds(&other, &[read(0, 40, s(1, &[]))]).is_empty());
    }

    #[test]
    fn noreply_counts_once_settled() {
        let settled = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Delete, 0, 20, Some(30), Noreply),
        ];
        assert_eq!(kinds(&settled, &[read(0, 40, s(1, &[]))]), ["stale"]);
        let unsettled = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Delete, 0, 20, None, Noreply),
        ];
        assert!(kinds(&unsettled, &[read(0, 40, s(1, &[]))]).is_empty());
        // A noreply touch changes no value; a noreply incr's chain is unknown.
        let touch = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Touch, 0, 20, Some(30), Noreply),
        ];
        assert!(kinds(&touch, &[read(0, 40, s(1, &[]))]).is_empty());
    }

    #[test]
    fn appends_and_absence() {
        let ops = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Append, 0, 5, Some(12), Stored),
            op(3, Append, 0, 20, Some(25), Stored),
        ];
        // Append 2 was concurrent with the set: "1" alone may have been current.
        assert!(kinds(&ops, &[read(0, 15, s(1, &[]))]).is_empty());
        assert!(kinds(&ops, &[read(0, 15, s(1, &[2]))]).is_empty());
        // Append 3 was sent after the set's ack and acked before the read: missing it is stale.
        assert_eq!(kinds(&ops, &[read(0, 40, s(1, &[2]))]), ["stale"]);
        assert!(kinds(&ops, &[read(0, 40, s(1, &[2, 3]))]).is_empty());
        // Observed absence supersedes.
        let gone = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Touch, 0, 20, Some(30), Absent),
        ];
        assert_eq!(kinds(&gone, &[read(0, 40, s(1, &[]))]), ["stale"]);
        // So does an acknowledged flush_all, on every key, but only for writes acknowledged more
        // than the expiry slack (2.5 s by default) before it: memcached's flush spares items
        // written within the current second of its clock.
        let sec = 1000; // op() and read() take milliseconds
        let mut flush = op(2, Flush, u32::MAX, 5 * sec, Some(5 * sec + 30), Flushed);
        flush.key = u32::MAX;
        let ops = [op(1, Set, 0, 0, Some(10), Stored), flush.clone()];
        assert_eq!(kinds(&ops, &[read(0, 6 * sec, s(1, &[]))]), ["stale"]);
        assert!(kinds(&ops, &[read(0, 5 * sec + 29, s(1, &[]))]).is_empty());
        let close = [op(1, Set, 0, 4 * sec, Some(4 * sec + 10), Stored), flush];
        let k = kinds(&close, &[read(0, 6 * sec, s(1, &[]))]);
        assert!(k.is_empty(), "{k:?}");
    }

    #[test]
    fn numbers() {
        let b = num_base(0, 1);
        let ops = [
            op(1, Set, 3, 0, Some(10), Stored),
            op(2, Incr, 3, 20, Some(30), Number(b + 5)),
        ];
        assert_eq!(kinds(&ops, &[read(3, 40, ReadVal::Num(b))]), ["stale"]);
        assert!(kinds(&ops, &[read(3, 40, ReadVal::Num(b + 5))]).is_empty());
        assert!(kinds(&ops, &[read(3, 25, ReadVal::Num(b))]).is_empty());
        assert_eq!(
            kinds(&ops, &[read(3, 40, ReadVal::Num(b + 3))]),
            ["unknown_value"]
        );
        // With a noreply incr around, b + 3 may be its result; b + 5 (acked) still supersedes.
        let mut blind = ops.to_vec();
        blind.push(op(3, Incr, 3, 12, Some(14), Noreply));
        assert_eq!(
            kinds(&blind, &[read(3, 40, ReadVal::Num(b + 3))]),
            ["stale"]
        );
        assert!(kinds(&blind, &[read(3, 25, ReadVal::Num(b + 3))]).is_empty());
    }

    #[test]
    fn expiry_and_oddities() {
        let mut set = op(1, Set, 0, 0, Some(10), Stored);
        set.ttl = 1;
        let ops = [set.clone()];
        // Expires by 1010 ms at the latest; 2.5 s of slack.
        assert!(kinds(&ops, &[read(0, 3500, s(1, &[]))]).is_empty());
        assert_eq!(kinds(&ops, &[read(0, 3520, s(1, &[]))]), ["expired"]);
        // A touch to 0 (never) that may have come after the set.
        let mut touch = op(2, Touch, 0, 500, Some(600), Touched);
        touch.ttl = 0;
        assert!(kinds(&[set.clone(), touch], &[read(0, 9000, s(1, &[]))]).is_empty());
        // A touch acknowledged before the set was sent cannot extend it.
        let mut early = op(2, Touch, 0, 0, Some(0), Touched);
        early.ttl = 0;
        let mut set2 = set.clone();
        set2.send = MS;
        assert_eq!(
            kinds(&[set2, early], &[read(0, 9000, s(1, &[]))]),
            ["expired"]
        );
        // Values nobody wrote, values of other keys, refused writes, reads before writes.
        assert_eq!(kinds(&ops, &[read(0, 40, s(9, &[]))]), ["unknown_value"]);
        assert_eq!(kinds(&ops, &[read(1, 40, s(1, &[]))]), ["wrong_key"]);
        let refused = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Append, 0, 0, Some(10), Absent),
        ];
        assert_eq!(
            kinds(&refused, &[read(0, 40, s(1, &[2]))]),
            ["impossible_value"]
        );
        assert_eq!(
            kinds(
                &[op(1, Set, 0, 50, Some(60), Stored)],
                &[read(0, 40, s(1, &[]))]
            ),
            ["phantom"]
        );
    }

    #[test]
    fn values_parse() {
        match parse_value(false, b"s3.17~xxxx|a1.5|a2.9") {
            ReadVal::Str { base, appends } => {
                assert_eq!(base, token(3, 17));
                assert_eq!(appends, vec![token(1, 5), token(2, 9)]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse_value(false, b"zz"), ReadVal::Bad(_)));
        assert!(matches!(parse_value(false, b"s1.2|b"), ReadVal::Bad(_)));
        assert!(matches!(parse_value(true, b"123"), ReadVal::Num(123)));
        let b = num_base(5, 77);
        assert_eq!((b + 30) & !NUM_OFFSET_MASK, b);
        assert_ne!(num_base(5, 78), b);
        assert_ne!(num_base(6, 77), b);
    }
}
