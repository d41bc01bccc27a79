//! The reads of the differential test: get, gets and mg over UDP (IPv4 or IPv6), each compared
//! with memcached's answer over TCP.

use super::{in_key_order, reply_len, show, whole, won, Class, Client};
use rand::{seq::SliceRandom, Rng};
use std::io::Write;

impl Client {
    /// A UDP read of 1-4 keys (or 36, or a key one byte too long; odd spacing now and then),
    /// sometimes twice (the first may fill the cache), each compared with the same over TCP.
    pub(super) fn read(&mut self, op: usize) -> Result<(), String> {
        let n = *[1, 1, 1, 2, 3, 4].choose(&mut self.rng).unwrap();
        let ks: Vec<usize> = (0..n).map(|_| self.key()).collect();
        let names: Vec<String> = ks.iter().map(|&k| self.keys[k].name.clone()).collect();
        let meta = self.rng.gen_bool(0.25);
        let req = if meta {
            let k = ks[0];
            let mut flags: Vec<&str> = vec!["v", "f", "k", "c", "s", "O77"]
                .into_iter()
                .filter(|_| self.rng.gen_bool(0.5))
                .collect();
            if self.keys[k].class != Class::Ttl && self.rng.gen_bool(0.3) {
                flags.push("t"); // a remaining TTL is compared only where it is "-1"
            }
            flags.shuffle(&mut self.rng);
            let sp = if flags.is_empty() { "" } else { " " };
            format!("mg {}{sp}{}\r\n", names[0], flags.join(" "))
        } else {
            let cmd = *["get", "get", "gets"].choose(&mut self.rng).unwrap();
            match self.rng.gen_range(0..30) {
                0 => format!("{cmd}  {}\r\n", names.join(" ")),
                1 => format!("{cmd} {} \r\n", names.join(" ")),
                2 => format!("{cmd} {}\n", names.join(" ")),
                3 => format!("{cmd} {}x\r\n", names.join(" ")), // 251 bytes if the last is L
                4 => {
                    // more keys than the kernel answers (24)
                    let many = vec![names.join(" "); 9];
                    format!("{cmd} {}\r\n", many.join(" "))
                }
                5 => format!("{cmd}\t{}\r\n", names.join(" ")),
                6 => format!("{cmd} {}\0\r\n", names.join(" ")),
                _ => format!("{cmd} {}\r\n", names.join(" ")),
            }
        };
        let ks = if meta { vec![ks[0]] } else { ks };
        let times = if self.rng.gen_bool(0.5) { 2 } else { 1 };
        for _ in 0..times {
            self.compare(op, &req, &ks, meta)?;
        }
        Ok(())
    }

    /// A get or gets of key k, twice: the first may fill the cache, the second find it there.
    pub(super) fn read_one(&mut self, op: usize, k: usize) -> Result<(), String> {
        let cmd = *["get", "gets"].choose(&mut self.rng).unwrap();
        let req = format!("{cmd} {}\r\n", self.keys[k].name);
        self.compare(op, &req, &[k], false)?;
        self.compare(op, &req, &[k], false)
    }

    /// Asks `req` (a read of keys `ks`; `meta`: an mg) over UDP, then over TCP, and compares.
    pub(super) fn compare(
        &mut self,
        op: usize,
        req: &str,
        ks: &[usize],
        meta: bool,
    ) -> Result<(), String> {
        let v6 = self.rng.gen_bool(0.2);
        self.note(format!(
            "read {}{}",
            if v6 { "(v6) " } else { "" },
            show(req.as_bytes())
        ));
        self.stats.reads += 1;
        let udp = self.udp_exchange(req.as_bytes(), v6, whole);
        let tcp = self
            .reference
            .write_all(req.as_bytes())
            .and_then(|_| Client::recv(&mut self.reference, reply_len))
            .map_err(|e| format!("reference read: {e}"))?;
        if ks.iter().any(|&k| self.near_expiry(k)) {
            self.stats.near_expiry += 1;
            return Ok(());
        }
        // a stale item's win token goes to its first reader (W, then Z): memcached answered
        // (the kernel never serves an item with meta state), and a second read differs
        if meta && udp.as_deref().is_some_and(won) {
            self.stats.won += 1;
            return Ok(());
        }
        self.stats.compared += 1;
        let same = match &udp {
            Some(u) if meta => *u == tcp,
            Some(u) => in_key_order(u) == in_key_order(&tcp),
            None => false,
        };
        if !same {
            return Err(format!(
                "operation {op}: {}\n  over UDP: {}\n  over TCP: {}\n{}",
                show(req.as_bytes()),
                udp.as_deref()
                    .map(show)
                    .unwrap_or_else(|| "(no answer)".into()),
                show(&tcp),
                self.recent(ks)
            ));
        }
        Ok(())
    }
}
