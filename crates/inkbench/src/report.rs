//! Results of a run: counters, latency percentiles, and how they are printed.

use std::fmt::Write as _;
use std::ops::AddAssign;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::config::RunConfig;

/// Counters of one run. Everything except `unmatched`, `send_errors` and `conn_errors` counts
/// only the requests of the measured window (scheduled after the warmup and before the end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Requests sent.
    pub requests: u64,
    /// Requests answered (with any answer, errors included).
    pub responses: u64,
    pub gets: u64,
    pub sets: u64,
    /// Keys asked for by gets (gets × multiget).
    pub get_keys: u64,
    /// Keys returned by gets (a `VALUE` for a key of the request).
    pub hits: u64,
    /// Keys of gets not returned.
    pub misses: u64,
    /// Answers that are not the expected kind (`ERROR`, `SERVER_ERROR`, `NOT_STORED`, an
    /// unparsable reply...).
    pub errors: u64,
    /// Requests never answered: UDP requests not answered within the timeout, TCP requests
    /// still unanswered when the run ended (after waiting up to the timeout).
    pub lost: u64,
    /// Datagrams (whole run) whose request id matched no request in flight: stray, stale
    /// (answered already or timed out) or malformed.
    pub unmatched: u64,
    /// `VALUE`s in a reply for a key the request did not ask for.
    pub mismatched: u64,
    /// Failed sends (whole run), not counted as requests.
    pub send_errors: u64,
    /// TCP connections that failed during the run.
    pub conn_errors: u64,
}

impl AddAssign for Counters {
    fn add_assign(&mut self, o: Self) {
        self.requests += o.requests;
        self.responses += o.responses;
        self.gets += o.gets;
        self.sets += o.sets;
        self.get_keys += o.get_keys;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors += o.errors;
        self.lost += o.lost;
        self.unmatched += o.unmatched;
        self.mismatched += o.mismatched;
        self.send_errors += o.send_errors;
        self.conn_errors += o.conn_errors;
    }
}

/// Latency percentiles in microseconds, from the HDR histogram (3 significant digits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_us: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// A latency histogram in nanoseconds (1 ns to 1 hour, 3 significant digits).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl LatencySummary {
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        LatencySummary {
            count: h.len(),
            min_us: us(h.min()),
            mean_us: h.mean() / 1e3,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// The server's own counters (from `stats` over TCP), as differences between the end and the
/// start of the run (preload excluded, warmup and drain included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerStats {
    pub cmd_get: u64,
    pub cmd_set: u64,
    pub get_hits: u64,
    pub get_misses: u64,
}

/// Everything a run measured. Serialized as the `--json` output.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunResults {
    pub config: RunConfig,
    /// Length of the measured window in seconds.
    pub duration_s: f64,
    /// Answered requests per second in the measured window.
    pub throughput: f64,
    /// Open loop: requests sent per second in the measured window (the offered load).
    pub send_rate: f64,
    /// Fraction of get keys that hit.
    pub hit_ratio: f64,
    #[serde(flatten)]
    pub counters: Counters,
    pub latency: LatencySummary,
    /// Server counters, if `stats` could be read over TCP.
    pub server: Option<ServerStats>,
    /// Keys written by the preload (0 without `--preload`).
    pub preloaded: u64,
    /// The full latency histogram (ns); not serialized.
    #[serde(skip, default = "new_histogram")]
    pub histogram: Histogram<u64>,
}

impl RunResults {
    pub fn new(
        config: RunConfig,
        duration_s: f64,
        counters: Counters,
        histogram: Histogram<u64>,
    ) -> Self {
        let d = duration_s.max(1e-9);
        RunResults {
            throughput: counters.responses as f64 / d,
            send_rate: counters.requests as f64 / d,
            hit_ratio: if counters.get_keys > 0 {
                counters.hits as f64 / counters.get_keys as f64
            } else {
                0.0
            },
            latency: LatencySummary::from_histogram(&histogram),
            config,
            duration_s,
            counters,
            server: None,
            preloaded: 0,
            histogram,
        }
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let c = &self.counters;
        let cfg = &self.config;
        let mut s = String::new();
        let mode = match cfg.rate {
            Some(r) => format!("open loop {r:.0} req/s"),
            None => format!("closed loop, {} in flight", cfg.effective_inflight()),
        };
        let _ = writeln!(
            s,
            "inkbench {} {} | {} | {} conn, {} thread(s) | get ratio {} x{} | {} keys {} | values {}",
            cfg.proto,
            cfg.server,
            mode,
            cfg.connections,
            cfg.effective_threads(),
            cfg.get_ratio,
            cfg.multiget,
            cfg.keys,
            cfg.popularity,
            cfg.value_size
        );
        let _ = writeln!(s, "{:<12} {:>14.3} s", "duration", self.duration_s);
        let _ = writeln!(s, "{:<12} {:>14.0} req/s", "throughput", self.throughput);
        if cfg.rate.is_some() {
            let _ = writeln!(s, "{:<12} {:>14.0} req/s", "sent", self.send_rate);
        }
        let rows: [(&str, u64); 10] = [
            ("requests", c.requests),
            ("responses", c.responses),
            ("gets", c.gets),
            ("sets", c.sets),
            ("hits", c.hits),
            ("misses", c.misses),
            ("errors", c.errors),
            ("lost", c.lost),
            ("unmatched", c.unmatched),
            ("mismatched", c.mismatched),
        ];
        for (name, v) in rows {
            let _ = writeln!(s, "{name:<12} {v:>14}");
        }
        if c.send_errors > 0 || c.conn_errors > 0 {
            let _ = writeln!(
                s,
                "{:<12} {:>14}\n{:<12} {:>14}",
                "send errors", c.send_errors, "conn errors", c.conn_errors
            );
        }
        let _ = writeln!(s, "{:<12} {:>14.2} %", "hit ratio", self.hit_ratio * 100.0);
        let l = &self.latency;
        let _ = writeln!(
            s,
            "latency us   min {:.1}  p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  mean {:.1}",
            l.min_us, l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us, l.mean_us
        );
        if let Some(sv) = &self.server {
            let _ = writeln!(
                s,
                "server       cmd_get {}  cmd_set {}  get_hits {}  get_misses {}",
                sv.cmd_get, sv.cmd_set, sv.get_hits, sv.get_misses
            );
        }
        if self.preloaded > 0 {
            let _ = writeln!(s, "{:<12} {:>14} keys", "preloaded", self.preloaded);
        }
        s
    }
}
