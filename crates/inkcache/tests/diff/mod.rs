//! The differential test's client (tests/differential.rs): the key set, the connections, the
//! operations' framing, and the run. Writes are generated in writes.rs, reads in reads.rs.

mod reads;
mod writes;

use std::{
    io::{Read, Write},
    net::{IpAddr, SocketAddr, TcpStream, UdpSocket},
    thread::sleep,
    time::{Duration, Instant},
};

use super::common::{join, settle, udp_exchange_on, PORT};
use inkproto::{binary, client::parse_response, udp::frame_request};
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use testkit::{SRV_V4, SRV_V6};

/// Operations shown before a difference, and before it on its keys.
const HISTORY: usize = 40;

/// How a key may be written: with no TTL that runs out during the run (mg's `t` compared), with
/// TTLs (reads near their expiry not compared), or holding a number (incr, decr, ma).
#[derive(Clone, Copy, PartialEq)]
enum Class {
    Plain,
    Ttl,
    Num,
}

struct Key {
    name: String,
    class: Class,
}

fn keys(prefix: &str) -> Vec<Key> {
    let mut v: Vec<Key> = (0..6)
        .map(|i| Key {
            name: format!("{prefix}k{i}"),
            class: Class::Plain,
        })
        .collect();
    // the longest key memcached takes
    v.push(Key {
        name: format!("{prefix}L{}", "x".repeat(249 - prefix.len())),
        class: Class::Plain,
    });
    v.extend((0..4).map(|i| Key {
        name: format!("{prefix}e{i}"),
        class: Class::Ttl,
    }));
    v.extend((0..3).map(|i| Key {
        name: format!("{prefix}n{i}"),
        class: Class::Num,
    }));
    v
}

/// The length of the item ("VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n") at the start
/// of `buf`, if it is all there.
fn item_len(buf: &[u8]) -> Option<usize> {
    let eol = buf.windows(2).position(|w| w == b"\r\n")?;
    let n = buf[..eol].split(|&b| b == b' ').nth(3)?;
    let end = eol + 2 + std::str::from_utf8(n).ok()?.parse::<usize>().ok()? + 2;
    (buf.len() >= end).then_some(end)
}

/// The end of the first complete answer in `buf` (inkproto's parse), or None until it is all
/// there.
pub fn reply_len(buf: &[u8]) -> Option<usize> {
    parse_response(buf).ok().flatten().map(|(_, n)| n)
}

/// Whether `buf` is one complete answer.
fn whole(buf: &[u8]) -> bool {
    reply_len(buf) == Some(buf.len())
}

/// A get's answer with its items in key order. A multi-key get some of whose keys hit in the
/// kernel is split (TC ingress answers the hits, memcached the rest), so its items may come in
/// another order than memcached's, as across UDP messages they may anyway.
pub fn in_key_order(reply: &[u8]) -> Vec<u8> {
    let mut items: Vec<&[u8]> = Vec::new();
    let mut at = 0;
    while reply[at..].starts_with(b"VALUE ") {
        let Some(n) = item_len(&reply[at..]) else {
            return reply.to_vec();
        };
        items.push(&reply[at..at + n]);
        at += n;
    }
    items.sort();
    let mut v: Vec<u8> = items.concat();
    v.extend_from_slice(&reply[at..]);
    v
}

/// Whether a meta get's answer carries a win token's flag (W or Z).
fn won(reply: &[u8]) -> bool {
    let line = reply.split(|&b| b == b'\r').next().unwrap_or_default();
    line.split(|&b| b == b' ').any(|t| t == b"W" || t == b"Z")
}

fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(300)])
        .escape_debug()
        .to_string();
    if b.len() > 300 {
        format!("{s}... ({} bytes)", b.len())
    } else {
        s
    }
}

/// The client: text writes, binary writes and reference reads each on a TCP connection of their
/// own (a connection speaks one protocol), reads over UDP.
pub struct Client {
    rng: StdRng,
    addr: SocketAddr,
    addr6: SocketAddr,
    text: TcpStream,
    text6: TcpStream,
    bin: TcpStream,
    reference: TcpStream,
    udp: UdpSocket,
    udp6: UdpSocket,
    id: u16,
    keys: Vec<Key>,
    /// when reads of a key are not compared (Instant ranges), by key index; usize::MAX: every key
    windows: Vec<(usize, Instant, Instant)>,
    /// every operation, described
    history: Vec<String>,
    pub stats: Stats,
    /// whether flush_all is sometimes delayed (runs of many operations)
    delayed_flush: bool,
    /// the only client: it may flush_all
    alone: bool,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub reads: u64,
    pub compared: u64,
    pub near_expiry: u64,
    pub won: u64,
    pub writes: u64,
    pub reconnects: u64,
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).expect("connecting");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    s
}

impl Client {
    /// A client of its own seed; with a key `prefix`, one of several at once: its keys are its
    /// own, and it sends no flush_all (which would reach the others' keys).
    pub fn new(seed: u64, prefix: &str) -> Client {
        let addr = SocketAddr::new(IpAddr::V4(SRV_V4), PORT);
        let addr6 = SocketAddr::new(IpAddr::V6(SRV_V6), PORT);
        let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
        let udp6 = UdpSocket::bind("[::]:0").unwrap();
        Client {
            rng: StdRng::seed_from_u64(seed),
            addr,
            addr6,
            text: connect(addr),
            text6: connect(addr6),
            bin: connect(addr),
            reference: connect(addr),
            udp,
            udp6,
            id: (seed as u16).wrapping_mul(7919),
            keys: keys(prefix),
            alone: prefix.is_empty(),
            windows: Vec::new(),
            history: Vec::new(),
            stats: Stats::default(),
            delayed_flush: false,
        }
    }

    fn note(&mut self, what: String) {
        self.history.push(what);
    }

    /// The last operations, and the last ones naming any of keys `ks`.
    fn recent(&self, ks: &[usize]) -> String {
        let names: Vec<&str> = ks.iter().map(|&k| self.keys[k].name.as_str()).collect();
        let names_it = |op: &&String| op.split([' ', '\\']).any(|t| names.contains(&t));
        let last = |v: Vec<&String>| {
            let from = v.len().saturating_sub(HISTORY);
            v[from..]
                .iter()
                .map(|s| format!("\n  {s}"))
                .collect::<String>()
        };
        format!(
            "last operations:{}\nlast operations on {}:{}",
            last(self.history.iter().collect()),
            names.join(" "),
            last(self.history.iter().filter(names_it).collect())
        )
    }

    /// Writes `bytes`, now and then in two to four segments.
    fn send(rng: &mut StdRng, s: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
        if bytes.len() < 4 || !rng.gen_bool(0.15) {
            return s.write_all(bytes);
        }
        let mut cuts: Vec<usize> = (0..rng.gen_range(1..4))
            .map(|_| rng.gen_range(1..bytes.len()))
            .collect();
        cuts.sort_unstable();
        cuts.dedup();
        let mut at = 0;
        for c in cuts.into_iter().chain([bytes.len()]) {
            s.write_all(&bytes[at..c])?;
            sleep(Duration::from_micros(300));
            at = c;
        }
        Ok(())
    }

    /// Reads from `s` until `done` finds a complete reply; returns it.
    fn recv(s: &mut TcpStream, done: impl Fn(&[u8]) -> Option<usize>) -> std::io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            if let Some(n) = done(&buf) {
                buf.truncate(n);
                return Ok(buf);
            }
            let n = s.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// A text write (one or more commands), finished when the meta no-op behind it is answered.
    /// memcached closes the connection after some errors: a new one is opened.
    fn text_write(&mut self, cmd: Vec<u8>) {
        let v6 = self.rng.gen_bool(0.2);
        self.note(format!("tcp{} {}", if v6 { "6" } else { " " }, show(&cmd)));
        self.stats.writes += 1;
        let mut bytes = cmd;
        bytes.extend_from_slice(b"mn\r\n");
        let conn = if v6 { &mut self.text6 } else { &mut self.text };
        let r = Client::send(&mut self.rng, conn, &bytes)
            .and_then(|_| Client::recv(conn, |b| b.ends_with(b"MN\r\n").then_some(b.len())));
        if let Err(e) = r {
            *conn = connect(if v6 { self.addr6 } else { self.addr });
            self.note(format!("     (text connection: {e}; reconnected)"));
            self.stats.reconnects += 1;
        }
    }

    /// Binary requests, finished when the NOOP behind them is answered.
    fn bin_write(&mut self, reqs: Vec<u8>, what: String) {
        self.note(format!("bin  {what}"));
        self.stats.writes += 1;
        let mut bytes = reqs;
        binary::request(&mut bytes, binary::op::NOOP, 0xabcd, 0, &[], &[], &[]);
        let done = |b: &[u8]| {
            let mut at = 0;
            while let Some((p, n)) = binary::packet(&b[at..]) {
                at += n;
                if p.header.opcode == binary::op::NOOP {
                    return Some(at);
                }
            }
            None
        };
        let r = Client::send(&mut self.rng, &mut self.bin, &bytes)
            .and_then(|_| Client::recv(&mut self.bin, done));
        if let Err(e) = r {
            self.note(format!("     (binary connection: {e}; reconnected)"));
            self.stats.reconnects += 1;
            self.bin = connect(self.addr);
        }
    }

    /// One UDP request; the reply's payload (its messages joined: `join`), or None if nothing
    /// came. `done` says when the payload is whole.
    fn udp_exchange(
        &mut self,
        payload: &[u8],
        v6: bool,
        done: fn(&[u8]) -> bool,
    ) -> Option<Vec<u8>> {
        self.id = self.id.wrapping_add(1);
        let (sock, addr) = if v6 {
            (&self.udp6, self.addr6)
        } else {
            (&self.udp, self.addr)
        };
        let dgram = frame_request(self.id, payload);
        let got = udp_exchange_on(sock, addr, &dgram, Duration::from_secs(1), |d| {
            join(d).is_some_and(|p| done(&p))
        })
        .unwrap();
        if got.is_empty() {
            None
        } else {
            join(&got)
        }
    }

    fn udp_write(&mut self, cmd: Vec<u8>) {
        self.note(format!("udp  {}", show(&cmd)));
        self.stats.writes += 1;
        if self.udp_exchange(&cmd, false, whole).is_none() {
            self.note("     (no UDP answer)".into());
        }
    }

    /// Whether a read of key `k` now is near an expiry (not compared).
    fn near_expiry(&self, k: usize) -> bool {
        let now = Instant::now();
        self.windows
            .iter()
            .any(|&(i, lo, hi)| (i == k || i == usize::MAX) && lo <= now && now <= hi)
    }

    /// Remembers when an exptime written to key `k` (usize::MAX: a flush_all delay) expires.
    fn expires(&mut self, k: usize, exptime: i64) {
        if (1..=30).contains(&exptime) {
            let at = Instant::now() + Duration::from_secs(exptime as u64);
            let (lo, hi) = (
                at - Duration::from_millis(2500),
                at + Duration::from_millis(1500),
            );
            self.windows.push((k, lo, hi));
        }
        let now = Instant::now();
        self.windows.retain(|w| w.2 > now);
    }

    fn exptime(&mut self, k: usize) -> i64 {
        let choices: &[i64] = match self.keys[k].class {
            Class::Plain => &[0, 0, 0, 0, -1, 1_000_000_000],
            Class::Ttl => &[0, 1, 2, 3, 4, 5, 100, -1, 2_000_000_000],
            Class::Num => &[0],
        };
        *choices.choose(&mut self.rng).unwrap()
    }

    fn value(&mut self, k: usize) -> Vec<u8> {
        if self.keys[k].class == Class::Num && self.rng.gen_bool(0.8) {
            let n: u64 = *[0, 1, 9, 41, u64::MAX - 1, u64::MAX]
                .choose(&mut self.rng)
                .unwrap();
            return n.to_string().into_bytes();
        }
        let len = match self.rng.gen_range(0..100) {
            0..=79 => self.rng.gen_range(0..40),
            80..=96 => self.rng.gen_range(40..1300),
            _ => self.rng.gen_range(1300..3000),
        };
        // no capital letters: "MN\r\n" ends a text write, and no value may hold it
        let mut v: Vec<u8> = (0..len)
            .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789 -"[self.rng.gen_range(0..38)])
            .collect();
        if len >= 12 && self.rng.gen_bool(0.1) {
            let at = self.rng.gen_range(0..len - 11);
            v[at..at + 11].copy_from_slice(b"\r\nvalue x\r\n");
        }
        v
    }

    fn key(&mut self) -> usize {
        self.rng.gen_range(0..self.keys.len())
    }

    /// `ops` operations; every 40th, a pause past the write quarantine (`settle`), a get of
    /// every key and a run of reads, which the kernel then answers where it holds the keys.
    pub fn run(&mut self, ops: usize) -> Result<(), String> {
        self.delayed_flush = ops >= 5000;
        for op in 0..ops {
            if op % 40 == 39 {
                settle();
                for k in 0..self.keys.len() {
                    self.read_one(op, k)?; // fills what the kernel may hold
                }
                for _ in 0..10 {
                    self.read(op)?;
                }
                continue;
            }
            match self.rng.gen_range(0..200) {
                0..=79 => self.read(op)?,
                80..=139 => self.text_store_or_update(),
                140..=157 => self.meta_write(),
                158..=170 => self.udp_store_or_update(),
                171..=191 => self.binary_write(),
                192..=197 => self.junk(),
                _ if self.alone => self.flush(),
                _ => self.text_store_or_update(),
            }
        }
        Ok(())
    }
}
