//! The analysis: every value read, checked against the recorded history of its key (see the
//! crate documentation for the rules and why they have no false positives).

use std::collections::{BTreeMap, HashMap};

use crate::history::*;
use crate::report::{Transport, Verdict, Violation};
use crate::Shared;

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

pub(crate) fn analyse(sh: &Shared, ops: &[Op], reads: &[ReadRec]) -> Vec<Violation> {
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
        let viol = |kind: Verdict, producer: Option<usize>, sup: Option<usize>, detail: String| {
            Violation {
                kind,
                key: sh.keys[key].clone(),
                transport: if r.tcp {
                    Transport::Tcp
                } else {
                    Transport::Udp
                },
                read_send_ms: ms(r.send),
                read_recv_ms: ms(r.recv),
                value: val_text(key, &r.val),
                producer: producer.map(|i| ops[i].desc()),
                superseded_by: sup.map(|i| ops[i].desc()),
                detail,
            }
        };
        // The chain: op indices reflected in the value; the producer; the base.
        let mut chain: Vec<usize> = Vec::new();
        let producer: Option<usize>;
        let base: usize;
        let mut num_range: Option<(u64, u64)> = None;
        match &r.val {
            ReadVal::Bad(_) => {
                out.push(viol(
                    Verdict::UnknownValue,
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
                                Verdict::UnknownValue,
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
                                    Verdict::WrongKey,
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
                                    Verdict::UnknownValue,
                                    Some(i),
                                    None,
                                    "token in the wrong place".into(),
                                ));
                                break;
                            }
                            if !o.may_produce() {
                                bad = Some(viol(
                                    Verdict::ImpossibleValue,
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
                        Verdict::UnknownValue,
                        None,
                        None,
                        "no set wrote this number's base".into(),
                    ));
                    continue;
                };
                if ops[bi].key != r.key {
                    out.push(viol(
                        Verdict::WrongKey,
                        Some(bi),
                        None,
                        format!("written to {}", sh.keys[ops[bi].key as usize]),
                    ));
                    continue;
                }
                if !ops[bi].may_produce() {
                    out.push(viol(
                        Verdict::ImpossibleValue,
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
                        Verdict::UnknownValue,
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
                Verdict::Phantom,
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
                Verdict::Stale,
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
                    Verdict::Expired,
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
    use crate::CheckConfig;
    use std::time::Instant;

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

    fn kinds(ops: &[Op], reads: &[ReadRec]) -> Vec<Verdict> {
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
        assert_eq!(kinds(&ops, &[read(0, 40, s(1, &[]))]), [Verdict::Stale]);
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
        assert_eq!(kinds(&settled, &[read(0, 40, s(1, &[]))]), [Verdict::Stale]);
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
        assert_eq!(kinds(&ops, &[read(0, 40, s(1, &[2]))]), [Verdict::Stale]);
        assert!(kinds(&ops, &[read(0, 40, s(1, &[2, 3]))]).is_empty());
        // Observed absence supersedes.
        let gone = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Touch, 0, 20, Some(30), Absent),
        ];
        assert_eq!(kinds(&gone, &[read(0, 40, s(1, &[]))]), [Verdict::Stale]);
        // So does an acknowledged flush_all, on every key, but only for writes acknowledged more
        // than the expiry slack (2.5 s by default) before it: memcached's flush spares items
        // written within the current second of its clock.
        let sec = 1000; // op() and read() take milliseconds
        let mut flush = op(2, Flush, u32::MAX, 5 * sec, Some(5 * sec + 30), Flushed);
        flush.key = u32::MAX;
        let ops = [op(1, Set, 0, 0, Some(10), Stored), flush.clone()];
        assert_eq!(
            kinds(&ops, &[read(0, 6 * sec, s(1, &[]))]),
            [Verdict::Stale]
        );
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
        assert_eq!(
            kinds(&ops, &[read(3, 40, ReadVal::Num(b))]),
            [Verdict::Stale]
        );
        assert!(kinds(&ops, &[read(3, 40, ReadVal::Num(b + 5))]).is_empty());
        assert!(kinds(&ops, &[read(3, 25, ReadVal::Num(b))]).is_empty());
        assert_eq!(
            kinds(&ops, &[read(3, 40, ReadVal::Num(b + 3))]),
            [Verdict::UnknownValue]
        );
        // With a noreply incr around, b + 3 may be its result; b + 5 (acked) still supersedes.
        let mut blind = ops.to_vec();
        blind.push(op(3, Incr, 3, 12, Some(14), Noreply));
        assert_eq!(
            kinds(&blind, &[read(3, 40, ReadVal::Num(b + 3))]),
            [Verdict::Stale]
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
        assert_eq!(kinds(&ops, &[read(0, 3520, s(1, &[]))]), [Verdict::Expired]);
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
            [Verdict::Expired]
        );
        // Values nobody wrote, values of other keys, refused writes, reads before writes.
        assert_eq!(
            kinds(&ops, &[read(0, 40, s(9, &[]))]),
            [Verdict::UnknownValue]
        );
        assert_eq!(kinds(&ops, &[read(1, 40, s(1, &[]))]), [Verdict::WrongKey]);
        let refused = [
            op(1, Set, 0, 0, Some(10), Stored),
            op(2, Append, 0, 0, Some(10), Absent),
        ];
        assert_eq!(
            kinds(&refused, &[read(0, 40, s(1, &[2]))]),
            [Verdict::ImpossibleValue]
        );
        assert_eq!(
            kinds(
                &[op(1, Set, 0, 50, Some(60), Stored)],
                &[read(0, 40, s(1, &[]))]
            ),
            [Verdict::Phantom]
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
