//! What to send: keys, values, the get/set mix, and how to account for a reply.

use std::time::Instant;

use inkproto::client::{self, Response, Store};
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::config::{Popularity, RunConfig, ValueSize};
use crate::report::Counters;
use crate::zipf::Zipf;

/// The name of key `id`: the prefix, then the id zero-padded to `key_size` bytes in total.
pub fn key_name(prefix: &str, id: u64, key_size: usize) -> String {
    let width = key_size.saturating_sub(prefix.len());
    format!("{prefix}{id:0width$}")
}

/// The inverse of [`key_name`]: the id of a key, if it has the prefix and a numeric rest.
pub fn key_id(prefix: &str, key: &[u8]) -> Option<u64> {
    let rest = key.strip_prefix(prefix.as_bytes())?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

/// The bytes written for a value of `len` bytes: printable and recognisable (`inkbench` + a
/// repeating alphabet).
pub fn value_bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Get,
    Set,
}

/// What a request in flight asked for, to account for its reply.
#[derive(Clone, Debug)]
pub struct Op {
    pub kind: OpKind,
    /// Key ids: the keys of a get, or the one key of a set.
    pub keys: Vec<u64>,
    /// When the request was due (open loop) or sent (closed loop): latency starts here.
    pub start: Instant,
    /// Whether the request falls in the measured window.
    pub measured: bool,
}

/// Picks keys and builds requests, deterministically from a seed.
pub struct Workload {
    rng: StdRng,
    zipf: Option<Zipf>,
    keys: u64,
    key_size: usize,
    prefix: String,
    get_ratio: f64,
    multiget: usize,
    value_size: ValueSize,
    exptime: i64,
    value: Vec<u8>,
}

impl Workload {
    pub fn new(cfg: &RunConfig, seed: u64) -> Self {
        Workload {
            rng: StdRng::seed_from_u64(seed),
            zipf: match cfg.popularity {
                Popularity::Uniform => None,
                Popularity::Zipf { s } => Some(Zipf::new(cfg.keys, s)),
            },
            keys: cfg.keys,
            key_size: cfg.key_size,
            prefix: cfg.key_prefix.clone(),
            get_ratio: cfg.get_ratio,
            multiget: cfg.multiget,
            value_size: cfg.value_size,
            exptime: cfg.exptime,
            value: value_bytes(cfg.value_size.max()),
        }
    }

    pub fn pick_key(&mut self) -> u64 {
        match &self.zipf {
            Some(z) => z.sample(&mut self.rng),
            None => self.rng.gen_range(0..self.keys),
        }
    }

    pub fn pick_value_len(&mut self) -> usize {
        match self.value_size {
            ValueSize::Fixed { bytes } => bytes,
            ValueSize::Uniform { min, max } => self.rng.gen_range(min..=max),
        }
    }

    pub fn key(&self, id: u64) -> String {
        key_name(&self.prefix, id, self.key_size)
    }

    /// Appends `set <key> 0 <exptime> <len>\r\n<value>\r\n` for key `id` to `out`.
    pub fn encode_set(&mut self, id: u64, noreply: bool, out: &mut Vec<u8>) {
        let len = self.pick_value_len();
        let key = self.key(id);
        client::store(
            out,
            Store::Set,
            key.as_bytes(),
            0,
            self.exptime,
            &self.value[..len],
            noreply,
        );
    }

    /// Chooses the next request, appends it to `out` and returns what it asked for.
    pub fn next_request(&mut self, start: Instant, measured: bool, out: &mut Vec<u8>) -> Op {
        if self.rng.gen::<f64>() < self.get_ratio {
            let keys: Vec<u64> = (0..self.multiget).map(|_| self.pick_key()).collect();
            let names: Vec<String> = keys.iter().map(|&k| self.key(k)).collect();
            let refs: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
            client::get(out, &refs);
            Op {
                kind: OpKind::Get,
                keys,
                start,
                measured,
            }
        } else {
            let id = self.pick_key();
            self.encode_set(id, false, out);
            Op {
                kind: OpKind::Set,
                keys: vec![id],
                start,
                measured,
            }
        }
    }

    /// Accounts for the reply to `op` in `c` (only if the op is measured).
    pub fn account(&self, op: &Op, resp: &Response, c: &mut Counters) {
        if !op.measured {
            return;
        }
        c.responses += 1;
        match op.kind {
            OpKind::Get => {
                c.get_keys += op.keys.len() as u64;
                match resp {
                    Response::Values(items) => {
                        let mut hits = 0u64;
                        for it in items {
                            match key_id(&self.prefix, &it.key) {
                                Some(id) if op.keys.contains(&id) => hits += 1,
                                _ => c.mismatched += 1,
                            }
                        }
                        let hits = hits.min(op.keys.len() as u64);
                        c.hits += hits;
                        c.misses += op.keys.len() as u64 - hits;
                    }
                    _ => c.errors += 1,
                }
            }
            OpKind::Set => match resp {
                Response::Stored => {}
                _ => c.errors += 1,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_roundtrip() {
        let k = key_name("k", 42, 16);
        assert_eq!(k, "k000000000000042");
        assert_eq!(key_id("k", k.as_bytes()), Some(42));
        assert_eq!(key_id("k", b"x01"), None);
    }

    #[test]
    fn mix_and_accounting() {
        let mut cfg = RunConfig::new("127.0.0.1:1".parse().unwrap());
        cfg.get_ratio = 0.75;
        cfg.multiget = 3;
        let mut w = Workload::new(&cfg, 3);
        let now = Instant::now();
        let mut gets = 0;
        for _ in 0..4000 {
            let mut buf = Vec::new();
            let op = w.next_request(now, true, &mut buf);
            match op.kind {
                OpKind::Get => {
                    gets += 1;
                    assert_eq!(op.keys.len(), 3);
                    assert!(buf.starts_with(b"get k"));
                }
                OpKind::Set => assert!(buf.starts_with(b"set k")),
            }
        }
        assert!((2800..3200).contains(&gets), "gets {gets}");

        let op = Op {
            kind: OpKind::Get,
            keys: vec![1, 2, 3],
            start: now,
            measured: true,
        };
        let item = |id: u64| inkproto::client::Item {
            key: key_name("k", id, 16).into_bytes(),
            flags: 0,
            cas: None,
            data: vec![],
        };
        let mut c = Counters::default();
        w.account(
            &op,
            &Response::Values(vec![item(1), item(3), item(9)]),
            &mut c,
        );
        assert_eq!((c.hits, c.misses, c.mismatched, c.errors), (2, 1, 1, 0));
        w.account(&op, &Response::Error, &mut c);
        assert_eq!(c.errors, 1);
    }
}
