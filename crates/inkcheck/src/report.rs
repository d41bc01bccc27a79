//! What the checker found: the verdicts ([`Verdict`]) on the reads that broke the rules, with
//! examples, and the counts of everything it did.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::CheckConfig;

/// The checker's verdict on a read that broke the rules (the `kind` of a [`Violation`]). In
/// the JSON report and the summary, by its snake_case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A reply that does not parse as an answer to the get sent.
    BadReply,
    /// Read after the value's latest possible expiry (plus the slack).
    Expired,
    /// A value whose write the server refused (`NOT_STORED`, `EXISTS`, ...).
    ImpossibleValue,
    /// Read before the write that produced it was sent.
    Phantom,
    /// Superseded by a write acknowledged before the read was sent.
    Stale,
    /// A value no write produced.
    UnknownValue,
    /// A value written to another key (or returned for a key not asked for).
    WrongKey,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::BadReply => "bad_reply",
            Verdict::Expired => "expired",
            Verdict::ImpossibleValue => "impossible_value",
            Verdict::Phantom => "phantom",
            Verdict::Stale => "stale",
            Verdict::UnknownValue => "unknown_value",
            Verdict::WrongKey => "wrong_key",
        }
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a value was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// A UDP get of a reader.
    Udp,
    /// The TCP `gets` of a writer before a cas.
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        })
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
    pub kind: Verdict,
    pub key: String,
    pub transport: Transport,
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
    pub violations_by_kind: BTreeMap<Verdict, u64>,
    /// Stale reads by the kind of write that superseded the value.
    pub stale_by_superseder: BTreeMap<String, u64>,
    /// How long after the superseding write's ack stale reads were sent: median and max (ms).
    pub stale_gap_p50_ms: f64,
    pub stale_gap_max_ms: f64,
    pub examples: Vec<Violation>,
    pub config: Option<CheckConfig>,
}

impl CheckReport {
    /// No violation found.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }

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
