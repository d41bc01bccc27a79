//! What the writers and readers record: the writes (with their send and ack times and
//! outcomes), the values read, and how values name the writes that produced them.

use crate::report::{OpDesc, Verdict};

/// Nanoseconds since the run's start.
pub(crate) type Ns = u64;
pub(crate) const NEVER: Ns = u64::MAX;
pub(crate) const NUM_OFFSET_BITS: u32 = 20;
pub(crate) const NUM_OFFSET_MASK: u64 = (1 << NUM_OFFSET_BITS) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
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
    pub(crate) fn name(self) -> &'static str {
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
    pub(crate) fn is_base(self) -> bool {
        matches!(self, Kind::Set | Kind::Add | Kind::Cas)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
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
pub(crate) struct Op {
    /// writer << 40 | sequence: named in the value.
    pub(crate) token: u64,
    pub(crate) writer: u16,
    pub(crate) kind: Kind,
    /// Key index; `u32::MAX` for flush_all.
    pub(crate) key: u32,
    pub(crate) noreply: bool,
    pub(crate) ttl: u32,
    pub(crate) send: Ns,
    pub(crate) ack: Option<Ns>,
    pub(crate) outcome: Outcome,
    /// For number keys: the value of a set, the delta of an incr.
    pub(crate) num: u64,
}

impl Op {
    /// Could have produced a value (its token may appear in a value read).
    pub(crate) fn may_produce(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Stored | Outcome::Noreply | Outcome::Unknown | Outcome::Number(_)
        )
    }

    /// Known to have changed the key's value or to have found it absent (a superseder, once
    /// settled).
    pub(crate) fn effective(&self) -> bool {
        match self.outcome {
            Outcome::Stored | Outcome::Absent | Outcome::Number(_) | Outcome::Flushed => true,
            Outcome::Noreply => matches!(self.kind, Kind::Set | Kind::Append | Kind::Delete),
            _ => false,
        }
    }

    pub(crate) fn outcome_text(&self) -> String {
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

    pub(crate) fn desc(&self) -> OpDesc {
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

pub(crate) fn ms(ns: Ns) -> f64 {
    ns as f64 / 1e6
}

/// A value as read, parsed.
#[derive(Clone, Debug)]
pub(crate) enum ReadVal {
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
pub(crate) struct ReadRec {
    pub(crate) key: u32,
    pub(crate) tcp: bool,
    pub(crate) send: Ns,
    pub(crate) recv: Ns,
    pub(crate) val: ReadVal,
}

/// A violation seen while reading (before the analysis).
#[derive(Clone, Debug)]
pub(crate) struct EarlyViolation {
    pub(crate) kind: Verdict,
    pub(crate) key: String,
    pub(crate) send: Ns,
    pub(crate) recv: Ns,
    pub(crate) detail: String,
}

pub(crate) fn token(writer: u16, seq: u64) -> u64 {
    (u64::from(writer) << 40) | seq
}

pub(crate) fn token_text(t: u64) -> String {
    format!("{}.{}", t >> 40, t & ((1 << 40) - 1))
}

pub(crate) fn parse_token(s: &[u8]) -> Option<u64> {
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
pub(crate) fn num_base(writer: u16, seq: u64) -> u64 {
    ((u64::from(writer) + 1) << 52) | ((seq & 0xffff_ffff) << NUM_OFFSET_BITS)
}

/// Every 4th hot key holds numbers (the expiry keys after the hot ones hold strings).
pub(crate) fn is_num_key(k: usize, hot: usize) -> bool {
    k < hot && k % 4 == 3
}

pub(crate) fn parse_value(num: bool, data: &[u8]) -> ReadVal {
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

pub(crate) fn val_text(key: usize, v: &ReadVal) -> String {
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
