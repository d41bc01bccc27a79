//! The writers: one TCP connection each, mutating the hot keys in pipelined batches (and one
//! writer for the expiry keys), recording every write with its send and ack times.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use inkproto::client::{self, parse_response, Response, Store};
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::history::*;
use crate::report::Verdict;
use crate::{Shared, WriterOut};

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

    /// Hostile mode: a line memcached answers once but that changes nothing, before a real
    /// write: a storage line it refuses (it reads no data block, so the write after it, which
    /// the line announces as its data, is a command), `get` with `noreply` (still answered), or
    /// an unknown command.
    fn decoy(&mut self, req: &mut Vec<u8>, next_len: usize) {
        let k = self.rng.gen_range(0..self.sh.cfg.keys);
        let key = &self.sh.keys[k];
        let line = match self.rng.gen_range(0..4) {
            0 => format!("set {key} abc 0 {next_len}\r\n"),
            1 => format!("set {key} 0 0 -{next_len}\r\n"),
            2 => format!("get {key} noreply\r\n"),
            _ => format!("frobnicate {key}\r\n"),
        };
        req.extend_from_slice(line.as_bytes());
    }

    /// Hostile mode: the command line of the write at req[start..] with its spaces doubled
    /// (memcached's tokenizer skips empty tokens).
    fn double_spaces(req: &mut Vec<u8>, start: usize) {
        let Some(eol) = req[start..].windows(2).position(|w| w == b"\r\n") else {
            return;
        };
        let line: Vec<u8> = req[start..start + eol]
            .iter()
            .flat_map(|&b| if b == b' ' { vec![b' ', b' '] } else { vec![b] })
            .collect();
        req.splice(start..start + eol, line);
    }

    /// Sends one pipelined batch and records its outcomes.
    fn batch(&mut self, conn: &mut Conn) -> Result<()> {
        let n = self.rng.gen_range(1..=self.sh.cfg.batch);
        let mut req = Vec::new();
        let mut ops = Vec::with_capacity(n);
        // decoys[i]: a decoy line (one answer, no change) goes before op i
        let mut decoys = Vec::with_capacity(n);
        let hostile = self.sh.cfg.hostile;
        for i in 0..n {
            let mut one = Vec::new();
            ops.push(self.plan(&mut one, i + 1 < n));
            let decoy = hostile > 0.0 && self.rng.gen_bool(hostile);
            if decoy {
                self.decoy(&mut req, one.len());
            }
            decoys.push(decoy);
            if hostile > 0.0 && self.rng.gen_bool(hostile) {
                Self::double_spaces(&mut one, 0);
            }
            req.extend_from_slice(&one);
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
            if decoys[i] && err.is_none() {
                match conn.next(self.sh) {
                    Ok((_, at)) => {
                        for j in pending_noreply.drain(..) {
                            ops[j].ack = Some(at);
                        }
                    }
                    Err(e) => err = Some(e),
                }
            }
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
                            kind: Verdict::WrongKey,
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

/// Writes the expiry keys now and then: a set with TTL 3-4 s (70%), a touch with TTL 3 s (20%)
/// or a delete, one every 0.2-1.5 s, so a key often stays unwritten for longer than its TTL plus
/// the slack and a read may see a value that should have expired. (The kernel cache does not
/// cache TTLs of 1-2 s at all, bpf/coherence.h: shorter ones would not test its expiry.)
pub(crate) fn expiry_writer(sh: &Shared, id: u16) -> Result<WriterOut> {
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
            ttl: w.rng.gen_range(3..=4),
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
                op.ttl = 3;
                client::keyed(&mut req, "touch", key, Some("3"), false);
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

pub(crate) fn writer(sh: &Shared, id: u16) -> Result<WriterOut> {
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
