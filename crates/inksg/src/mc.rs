//! Multi-get over a pool of memcached servers (UDP), sent once and gathered in the kernel: keys
//! are sharded with ketama as libmemcached does; each server gets one `get` of its keys in a
//! memcached UDP frame; the XDP program gathers every reply datagram (stock memcached answers
//! one message per key, the kernel cache of inkcache answers hits on its own) until each server
//! has sent its `END`, then the client wakes once. A server that does not answer in time is
//! reported, with the items the others returned.
use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    time::Duration,
};

use anyhow::{bail, Result};

use crate::{
    client::{Client, Completion, Policy, Status},
    kernel::{Group, Sg},
    ketama::{Hash, Ketama},
};

/// A memcached pool: its servers (UDP ports), their ketama ring and their group.
pub struct Pool {
    pub servers: Vec<SocketAddr>,
    ring: Ketama,
    group: Group,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    pub value: Vec<u8>,
}

/// What a multi-get returned.
#[derive(Clone, Debug, Default)]
pub struct MultiGet {
    /// Hits.
    pub items: HashMap<Vec<u8>, Item>,
    /// Servers that did not answer completely in time (their keys count as misses).
    pub missing: Vec<SocketAddr>,
    /// Replies did not all fit the result buffer (raise `AttachOpts::result_bytes`).
    pub truncated: bool,
}

impl MultiGet {
    /// Every server answered.
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && !self.truncated
    }
}

fn valid_key(k: &[u8]) -> bool {
    !k.is_empty() && k.len() <= 250 && k.iter().all(|&c| c > b' ' && c != 0x7f)
}

impl Pool {
    /// Registers the servers (memcached UDP ports) as a group of `sg`; keys are placed as
    /// libmemcached's ketama with `hash` places them.
    pub fn new(sg: &Sg, servers: &[SocketAddr], hash: Hash) -> Result<Pool> {
        Ok(Pool {
            servers: servers.to_vec(),
            ring: Ketama::new(servers, hash),
            group: sg.group(servers)?,
        })
    }

    pub fn group(&self) -> &Group {
        &self.group
    }

    /// The server (index) a key lives on.
    pub fn server_of(&self, key: &[u8]) -> usize {
        self.ring.server(key)
    }

    /// Sends the multi-get (one datagram, or a few for large pools); returns its request id.
    /// `client` must use `Proto::Memcached`.
    pub fn send(&self, client: &mut Client, keys: &[&[u8]], timeout: Duration) -> Result<u32> {
        let mut per: Vec<Vec<&[u8]>> = vec![vec![]; self.servers.len()];
        let mut seen = HashSet::new();
        for k in keys {
            if !valid_key(k) {
                bail!("invalid memcached key {:?}", String::from_utf8_lossy(k));
            }
            if seen.insert(*k) {
                per[self.server_of(k)].push(k);
            }
        }
        let workers: Vec<u16> = (0..self.servers.len() as u16)
            .filter(|&s| !per[s as usize].is_empty())
            .collect();
        if workers.is_empty() {
            bail!("no key to get");
        }
        client.scatter_raw(&self.group, &workers, Policy::All, timeout, |rid| {
            workers
                .iter()
                .map(|&s| {
                    let mut b = Vec::new();
                    b.extend_from_slice(&(rid as u16).to_be_bytes());
                    b.extend_from_slice(&[0, 0, 0, 1, 0, 0]);
                    b.extend_from_slice(b"get");
                    for k in &per[s as usize] {
                        b.push(b' ');
                        b.extend_from_slice(k);
                    }
                    b.extend_from_slice(b"\r\n");
                    (s, b)
                })
                .collect()
        })
    }

    /// The items of a completed multi-get. Only keys asked of a server are taken from its
    /// replies (each key once).
    pub fn parse(&self, keys: &[&[u8]], c: &Completion) -> MultiGet {
        let asked: HashSet<&[u8]> = keys.iter().copied().collect();
        let mut out = MultiGet {
            truncated: c.truncated,
            ..Default::default()
        };
        // each server's replies, in arrival order, reassembled into messages
        let mut msgs: HashMap<u16, Vec<Vec<u8>>> = HashMap::new();
        let mut partial: HashMap<u16, (u16, Vec<u8>)> = HashMap::new();
        for r in c.records() {
            if r.total <= 1 {
                msgs.entry(r.worker).or_default().push(r.data.to_vec());
                continue;
            }
            let p = partial.entry(r.worker).or_insert((0, vec![]));
            if r.seq == 0 {
                *p = (0, vec![]);
            } else if r.seq != p.0 + 1 {
                continue; // out of order: this message is dropped (its keys are misses)
            }
            p.0 = r.seq;
            p.1.extend_from_slice(r.data);
            if r.seq + 1 == r.total {
                msgs.entry(r.worker)
                    .or_default()
                    .push(std::mem::take(&mut p.1));
            }
        }
        for (w, list) in msgs {
            for m in list {
                parse_items(&m, |key, item| {
                    if asked.contains(key)
                        && self.server_of(key) == w as usize
                        && !out.items.contains_key(key)
                    {
                        out.items.insert(key.to_vec(), item);
                    }
                });
            }
        }
        if c.status != Status::Done {
            out.missing = c
                .missing
                .iter()
                .filter_map(|&w| self.servers.get(w as usize).copied())
                .collect();
        }
        out
    }

    /// Sends a multi-get and waits for it (the client must have nothing else in flight).
    pub fn get_multi(
        &self,
        client: &mut Client,
        keys: &[&[u8]],
        timeout: Duration,
    ) -> Result<MultiGet> {
        if client.in_flight() > 0 {
            bail!("get_multi needs a client with no other request in flight");
        }
        let id = self.send(client, keys, timeout)?;
        loop {
            let Some(c) = client.wait(timeout + Duration::from_secs(2))? else {
                bail!("no report for the multi-get");
            };
            if c.req_id == id {
                if c.status == Status::Lost {
                    bail!("the multi-get was not seen by the scatter program");
                }
                return Ok(self.parse(keys, &c));
            }
        }
    }
}

/// Calls `f` for each `VALUE` item of a reply message (stops at END, an error or garbage).
pub fn parse_items(mut m: &[u8], mut f: impl FnMut(&[u8], Item)) {
    loop {
        let Some(eol) = m.windows(2).position(|w| w == b"\r\n") else {
            return;
        };
        let line = &m[..eol];
        let mut tok = line.split(|&c| c == b' ');
        if tok.next() != Some(b"VALUE") {
            return;
        }
        let (Some(key), Some(flags), Some(bytes)) = (tok.next(), tok.next(), tok.next()) else {
            return;
        };
        let parse = |b: &[u8]| std::str::from_utf8(b).ok()?.parse::<u64>().ok();
        let (Some(flags), Some(n)) = (parse(flags), parse(bytes)) else {
            return;
        };
        let n = n as usize;
        let start = eol + 2;
        if m.len() < start + n + 2 || &m[start + n..start + n + 2] != b"\r\n" {
            return;
        }
        f(
            key,
            Item {
                flags: flags as u32,
                value: m[start..start + n].to_vec(),
            },
        );
        m = &m[start + n + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_parsed_until_end() {
        let m = b"VALUE a 5 3\r\nabc\r\nVALUE bb 0 0 77\r\n\r\nEND\r\n";
        let mut got = vec![];
        parse_items(m, |k, i| got.push((k.to_vec(), i)));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].0, b"a");
        assert_eq!(
            got[0].1,
            Item {
                flags: 5,
                value: b"abc".to_vec()
            }
        );
        assert_eq!(got[1].1.value, b"");
        let mut n = 0;
        parse_items(b"VALUE a 0 10\r\nshort\r\n", |_, _| n += 1);
        parse_items(b"SERVER_ERROR out of memory\r\n", |_, _| n += 1);
        assert_eq!(n, 0);
    }
}
