//! The writes of the differential test: text, meta and binary commands, over TCP and UDP, some
//! refused by memcached or read by it in unusual ways.

use super::{reply_len, Class, Client};
use inkproto::{
    binary,
    client::{parse_response, Response},
};
use rand::{seq::SliceRandom, Rng};
use std::io::Write;

/// A storage command: its line, then its data block.
fn with_data(line: String, data: &[u8]) -> Vec<u8> {
    let mut c = line.into_bytes();
    c.extend_from_slice(b"\r\n");
    c.extend_from_slice(data);
    c.extend_from_slice(b"\r\n");
    c
}

impl Client {
    pub(super) fn noreply(&mut self) -> &'static str {
        if self.rng.gen_bool(0.2) {
            " noreply"
        } else {
            ""
        }
    }

    /// A text command changing one key (or asking for its CAS first, for cas).
    pub(super) fn update_cmd(&mut self) -> Vec<u8> {
        let k = self.key();
        let key = self.keys[k].name.clone();
        let nr = self.noreply();
        let e = self.exptime(k);
        match self.rng.gen_range(0..12) {
            0..=5 => {
                let cmd = *["set", "set", "set", "add", "replace", "append", "prepend"]
                    .choose(&mut self.rng)
                    .unwrap();
                if !matches!(cmd, "append" | "prepend") {
                    self.expires(k, e);
                }
                let flags = *[0u32, 1, 42, u32::MAX].choose(&mut self.rng).unwrap();
                let v = self.value(k);
                with_data(format!("{cmd} {key} {flags} {e} {}{nr}", v.len()), &v)
            }
            6 => {
                let cas = self.cas_of(&key).unwrap_or(1);
                let cas = if self.rng.gen_bool(0.7) { cas } else { cas + 1 };
                self.expires(k, e);
                let v = self.value(k);
                with_data(format!("cas {key} 0 {e} {} {cas}{nr}", v.len()), &v)
            }
            7 => {
                let op = *["incr", "decr"].choose(&mut self.rng).unwrap();
                let d = *["1", "0", "7", "18446744073709551615", "abc", "-1"]
                    .choose(&mut self.rng)
                    .unwrap();
                format!("{op} {key} {d}{nr}\r\n").into_bytes()
            }
            8 => format!("delete {key}{nr}\r\n").into_bytes(),
            9 => {
                self.expires(k, e);
                format!("touch {key} {e}{nr}\r\n").into_bytes()
            }
            10 => {
                self.expires(k, e);
                let cmd = *["gat", "gats"].choose(&mut self.rng).unwrap();
                format!("{cmd} {e} {key}\r\n").into_bytes()
            }
            _ => self.odd_update(k),
        }
    }

    /// Writes memcached reads in unusual ways.
    pub(super) fn odd_update(&mut self, k: usize) -> Vec<u8> {
        let key = self.keys[k].name.clone();
        self.expires(k, 0);
        match self.rng.gen_range(0..8) {
            0 => format!("set {key} 0 0 3 \r\nabc\r\n").into_bytes(),
            1 => format!("set  {key} 0 0 3\r\nabc\r\n").into_bytes(),
            2 => format!("set {key} 0 0 3\nabd\r\n").into_bytes(),
            3 => format!("set {key} 0 0 2\r\nabcd\r\n").into_bytes(), // bad data chunk
            4 => format!("set {key} 0 0 3 noreply extra\r\nabe\r\n").into_bytes(),
            5 => format!("delete {key} 0\r\ndelete {key} 5\r\n").into_bytes(),
            6 => format!("set {key} x 0 3\r\nabf\r\nincr {key} 99999999999999999999\r\n")
                .into_bytes(),
            _ => {
                // larger than memcached's item size limit: refused, the key's old item unlinked
                // by a set, left by a replace
                let cmd = *["set", "replace"].choose(&mut self.rng).unwrap();
                with_data(format!("{cmd} {key} 0 0 1100000"), &[b'z'; 1_100_000])
            }
        }
    }

    /// A key's CAS, asked over the reference connection.
    pub(super) fn cas_of(&mut self, key: &str) -> Option<u64> {
        self.reference
            .write_all(format!("gets {key}\r\n").as_bytes())
            .ok()?;
        let r = Client::recv(&mut self.reference, reply_len).ok()?;
        match parse_response(&r) {
            Ok(Some((Response::Values(items), _))) => items.first()?.cas,
            _ => None,
        }
    }

    pub(super) fn text_store_or_update(&mut self) {
        let mut cmd = self.update_cmd();
        if self.rng.gen_bool(0.15) {
            cmd.extend(self.update_cmd()); // pipelined
        }
        self.text_write(cmd);
    }

    pub(super) fn udp_store_or_update(&mut self) {
        let mut cmd = self.update_cmd();
        // a datagram carries one answered command: noreply would leave nothing to wait for
        if let Some(at) = cmd.windows(8).position(|w| w == b" noreply") {
            cmd.drain(at..at + 8);
        }
        if cmd.len() > 1400 {
            self.text_write(cmd);
        } else {
            self.udp_write(cmd);
        }
    }

    pub(super) fn meta_write(&mut self) {
        let k = self.key();
        let key = self.keys[k].name.clone();
        let e = self.exptime(k);
        let q = if self.rng.gen_bool(0.2) { " q" } else { "" };
        let cmd = match self.rng.gen_range(0..6) {
            0 | 1 => {
                let mode = *["", " MS", " ME", " MA", " MP", " MR"]
                    .choose(&mut self.rng)
                    .unwrap();
                let inv = if self.rng.gen_bool(0.1) { " I" } else { "" };
                if matches!(mode, "" | " MS" | " ME" | " MR") {
                    self.expires(k, e);
                }
                let v = self.value(k);
                with_data(format!("ms {key} {} T{e} F5{mode}{inv}{q}", v.len()), &v)
            }
            2 => {
                // a TTL set only where reads of mg's `t` are not compared
                let ttl = self.keys[k].class == Class::Ttl;
                let how = *["", " I", if ttl { " I T30" } else { " I" }, " x", " C1"]
                    .choose(&mut self.rng)
                    .unwrap();
                format!("md {key}{how}{q}\r\n").into_bytes()
            }
            3 => {
                let how = *["", " MD", " M+ D5", " N0 J13", " N0 J13 MD D100"]
                    .choose(&mut self.rng)
                    .unwrap();
                format!("ma {key}{how}{q} v\r\n").into_bytes()
            }
            4 => {
                self.expires(k, e);
                format!("mg {key} T{e} v\r\n").into_bytes()
            }
            _ if self.keys[k].class == Class::Ttl => {
                // vivified on a miss: an empty item memcached then serves
                self.expires(k, 30);
                format!("mg {key} N30 v c\r\n").into_bytes()
            }
            _ => format!("mg {key} N0 v c\r\n").into_bytes(),
        };
        self.text_write(cmd);
    }

    pub(super) fn binary_write(&mut self) {
        use binary::op;
        let k = self.key();
        let key = self.keys[k].name.clone().into_bytes();
        let e = self.exptime(k);
        let ex = e as u32; // negative: far in the future as binary exptime is unsigned
        let quiet = self.rng.gen_bool(0.3);
        let q = |loud: u8, quiet_op: u8| if quiet { quiet_op } else { loud };
        let cas = if self.rng.gen_bool(0.1) {
            self.cas_of(&self.keys[k].name.clone()).unwrap_or(0)
        } else {
            0
        };
        let mut r = Vec::new();
        let what = match self.rng.gen_range(0..8) {
            0..=2 => {
                let (code, name) = *[
                    (q(op::SET, op::SETQ), "set"),
                    (q(op::ADD, op::ADDQ), "add"),
                    (q(op::REPLACE, op::REPLACEQ), "replace"),
                ]
                .choose(&mut self.rng)
                .unwrap();
                if (1..=30).contains(&(ex as i64)) {
                    self.expires(k, ex as i64);
                }
                // now and then too large for memcached: refused (the old item unlinked by a set)
                let v = if self.rng.gen_bool(0.03) {
                    vec![b'z'; 1_100_000]
                } else {
                    self.value(k)
                };
                binary::request(&mut r, code, 1, cas, &binary::store_extras(7, ex), &key, &v);
                format!("{name} exptime {ex} cas {cas} ({} bytes)", v.len())
            }
            3 => {
                let code = *[op::APPEND, op::PREPEND, op::APPENDQ, op::PREPENDQ]
                    .choose(&mut self.rng)
                    .unwrap();
                let v = self.value(k);
                binary::request(&mut r, code, 2, cas, &[], &key, &v);
                format!("append/prepend {code:#x}")
            }
            4 => {
                binary::request(&mut r, q(op::DELETE, op::DELETEQ), 3, cas, &[], &key, &[]);
                "delete".into()
            }
            5 => {
                let code = *[op::INCREMENT, op::DECREMENT, op::INCREMENTQ, op::DECREMENTQ]
                    .choose(&mut self.rng)
                    .unwrap();
                let vivify = *[0u32, u32::MAX].choose(&mut self.rng).unwrap();
                let x = binary::arith_extras(3, 40, vivify);
                binary::request(&mut r, code, 4, cas, &x, &key, &[]);
                format!("incr/decr {code:#x} exptime {vivify}")
            }
            _ => {
                let code = *[op::TOUCH, op::GAT, op::GATQ]
                    .choose(&mut self.rng)
                    .unwrap();
                if (1..=30).contains(&(ex as i64)) {
                    self.expires(k, ex as i64);
                }
                binary::request(&mut r, code, 5, 0, &ex.to_be_bytes(), &key, &[]);
                format!("touch/gat {code:#x} exptime {ex}")
            }
        };
        let what = format!("{} {what}", self.keys[k].name);
        // over UDP now and then, where an answer comes back (not the quiet ones)
        if !quiet && r.len() <= 1400 && self.rng.gen_bool(0.15) {
            self.note(format!("udp  binary {what}"));
            self.stats.writes += 1;
            if self.udp_exchange(&r, false, |b| !b.is_empty()).is_none() {
                self.note("     (no UDP answer)".into());
            }
        } else {
            self.bin_write(r, what);
        }
    }

    pub(super) fn junk(&mut self) {
        let n = self.rng.gen_range(1..60);
        let mut line: Vec<u8> = (0..n)
            .map(|_| b"abcxyz019 :;-_\t"[self.rng.gen_range(0..15)])
            .collect();
        line.extend_from_slice(b"\r\n");
        if self.rng.gen_bool(0.3) {
            self.udp_write(line);
        } else {
            self.text_write(line);
        }
    }

    pub(super) fn flush(&mut self) {
        // a delayed one leaves every read for 4 s uncompared: only in soaks (`delayed_flush`)
        let (cmd, delay) = *[
            ("flush_all\r\n", 0),
            ("flush_all 0\r\n", 0),
            ("flush_all noreply\r\n", 0),
            ("flush_all -1\r\n", 0),
            ("flush_all 2\r\n", 2),
        ]
        .choose_weighted(&mut self.rng, |c| match c.1 {
            0 => 20,
            _ => self.delayed_flush as u32,
        })
        .unwrap();
        self.expires(usize::MAX, delay);
        self.text_write(cmd.as_bytes().to_vec());
    }
}
