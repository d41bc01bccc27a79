//! The readers: one UDP socket each, one get (single or multi-key) outstanding, recording every
//! value read with the get's send and receive times.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use inkproto::client::{self, parse_response, Response};
use inkproto::udp::{frame_request, FrameHeader, Reassembly, HEADER_LEN};
use rand::{rngs::StdRng, Rng, SeedableRng};

use crate::history::*;
use crate::report::Verdict;
use crate::{CheckConfig, ReaderOut, Shared};

pub(crate) fn reader(sh: &Shared, idx: usize) -> Result<ReaderOut> {
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
                                    kind: Verdict::WrongKey,
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
                        kind: Verdict::BadReply,
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
    let local: std::net::SocketAddr = if cfg.server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = UdpSocket::bind(local).context("binding a UDP socket")?;
    s.connect(cfg.server)
        .with_context(|| format!("connecting a UDP socket to {}", cfg.server))?;
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
