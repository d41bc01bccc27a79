//! Ketama consistent hashing as libmemcached does it (`MEMCACHED_DISTRIBUTION_CONSISTENT_KETAMA`,
//! what pylibmc's `ketama` behaviour selects): each server gets 100 points on a circle, the hash
//! of `"<host>:<port>-<i>"` (`"<host>-<i>"` on port 11211), and a key belongs to the server of the
//! first point at or after the key's hash (wrapping around). The hash is libmemcached's default
//! (one-at-a-time) unless the client also sets `hash: md5`. Both are checked against pylibmc by
//! the tests.
use std::net::SocketAddr;

use md5::{Digest, Md5};

/// The hash of keys and points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Hash {
    /// libmemcached's default (Jenkins one-at-a-time), what `{"ketama": True}` uses.
    #[default]
    OneAtATime,
    /// `{"ketama": True, "hash": "md5"}`: the first 4 bytes of the MD5, little-endian.
    Md5,
}

impl Hash {
    pub fn of(self, data: &[u8]) -> u32 {
        match self {
            Hash::OneAtATime => {
                let mut v: u32 = 0;
                for &b in data {
                    // libmemcached reads the bytes as (signed) char
                    v = v.wrapping_add(b as i8 as i32 as u32);
                    v = v.wrapping_add(v << 10);
                    v ^= v >> 6;
                }
                v = v.wrapping_add(v << 3);
                v ^= v >> 11;
                v.wrapping_add(v << 15)
            }
            Hash::Md5 => {
                let d = Md5::digest(data);
                u32::from_le_bytes([d[0], d[1], d[2], d[3]])
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct Ketama {
    hash: Hash,
    /// (point, server index), sorted.
    points: Vec<(u32, usize)>,
}

/// How libmemcached writes a server into its point names.
fn host_key(s: &SocketAddr, i: u32) -> String {
    let host = s.ip().to_string();
    if s.port() == 11211 {
        format!("{host}-{i}")
    } else {
        format!("{host}:{}-{i}", s.port())
    }
}

impl Ketama {
    /// libmemcached's ketama over `servers` (in this order), with `hash`.
    pub fn new(servers: &[SocketAddr], hash: Hash) -> Ketama {
        let mut points = vec![];
        for (idx, s) in servers.iter().enumerate() {
            for i in 0..100 {
                points.push((hash.of(host_key(s, i).as_bytes()), idx));
            }
        }
        points.sort_unstable();
        Ketama { hash, points }
    }

    /// The server (index) a key belongs to.
    pub fn server(&self, key: &[u8]) -> usize {
        if self.points.is_empty() {
            return 0;
        }
        let h = self.hash.of(key);
        let i = self.points.partition_point(|p| p.0 < h);
        self.points[if i == self.points.len() { 0 } else { i }].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_at_a_time_of_known_strings() {
        assert_eq!(Hash::OneAtATime.of(b""), 0);
        assert_eq!(Hash::OneAtATime.of(b"a"), 0xca2e9442);
    }

    #[test]
    fn keys_spread_and_move_little_when_a_server_is_added() {
        let servers: Vec<SocketAddr> = (1..=4)
            .map(|i| format!("198.19.0.{i}:11211").parse().unwrap())
            .collect();
        let k4 = Ketama::new(&servers, Hash::default());
        let more = [servers.clone(), vec!["198.19.0.9:11211".parse().unwrap()]].concat();
        let k5 = Ketama::new(&more, Hash::default());
        let mut count = [0usize; 4];
        let mut moved = 0;
        for i in 0..4000 {
            let key = format!("key:{i}");
            let a = k4.server(key.as_bytes());
            count[a] += 1;
            if k5.server(key.as_bytes()) != a {
                moved += 1;
            }
        }
        assert!(count.iter().all(|&c| c > 500), "{count:?}");
        assert!(moved < 1400, "{moved} of 4000 keys moved");
    }
}
