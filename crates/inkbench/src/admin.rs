//! Blocking TCP helpers around a run: the preload (set every key once) and `stats`.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use inkproto::client::{parse_response, Response};

use crate::config::RunConfig;
use crate::report::ServerStats;
use crate::workload::Workload;

/// Sets per round trip during the preload.
const PRELOAD_BATCH: u64 = 128;

/// Reads complete responses from `s` into `out` until `n` have arrived.
pub fn read_responses(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    n: usize,
    out: &mut Vec<Response>,
) -> Result<()> {
    let mut tmp = [0u8; 16 * 1024];
    let mut got = 0;
    while got < n {
        match parse_response(buf).context("unparsable reply")? {
            Some((r, used)) => {
                buf.drain(..used);
                out.push(r);
                got += 1;
            }
            None => {
                let k = s.read(&mut tmp).context("reading from the server")?;
                if k == 0 {
                    bail!("the server closed the connection");
                }
                buf.extend_from_slice(&tmp[..k]);
            }
        }
    }
    Ok(())
}

/// A TCP connection for admin traffic (preload, stats), with a read timeout of at least 2 s.
pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream> {
    let s = crate::tcp::connect(addr, timeout)?;
    s.set_read_timeout(Some(timeout.max(Duration::from_secs(2))))?;
    s.set_write_timeout(Some(timeout.max(Duration::from_secs(2))))?;
    Ok(s)
}

/// Sets every key `0..keys` once over TCP (pipelined), with values sized as the run's sets.
/// Returns the number of keys written.
pub fn preload(cfg: &RunConfig) -> Result<u64> {
    let addr = cfg.admin_addr();
    let mut s = connect(addr, cfg.timeout).with_context(|| format!("preload via {addr}"))?;
    let mut w = Workload::new(cfg, cfg.seed ^ 0x5eed_0f00);
    let mut req = Vec::new();
    let mut buf = Vec::new();
    let mut resps = Vec::new();
    let mut id = 0u64;
    while id < cfg.keys {
        let end = (id + PRELOAD_BATCH).min(cfg.keys);
        req.clear();
        for k in id..end {
            w.encode_set(k, false, &mut req);
        }
        s.write_all(&req).context("preload: writing sets")?;
        resps.clear();
        read_responses(&mut s, &mut buf, (end - id) as usize, &mut resps)
            .context("preload: reading replies")?;
        if let Some(bad) = resps.iter().find(|r| **r != Response::Stored) {
            bail!("preload: the server answered {bad:?} to a set");
        }
        id = end;
    }
    Ok(cfg.keys)
}

/// The server's `stats` as name → value (numeric ones only).
pub fn stats(addr: SocketAddr, timeout: Duration) -> Result<HashMap<String, u64>> {
    let mut s = connect(addr, timeout)?;
    s.write_all(b"stats\r\n")?;
    let mut buf = Vec::new();
    let mut out = Vec::new();
    read_responses(&mut s, &mut buf, 1, &mut out)?;
    match out.pop() {
        Some(Response::Stats(st)) => Ok(st
            .into_iter()
            .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
            .collect()),
        other => bail!("unexpected reply to stats: {other:?}"),
    }
}

/// `after - before` for the counters a run reports.
pub fn stats_delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> ServerStats {
    let d = |k: &str| {
        after
            .get(k)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(k).copied().unwrap_or(0))
    };
    ServerStats {
        cmd_get: d("cmd_get"),
        cmd_set: d("cmd_set"),
        get_hits: d("get_hits"),
        get_misses: d("get_misses"),
    }
}
