//! The hit-ratio simulation: one Zipf trace, every value mix and budget, each policy.

use std::io::Write as _;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use inkbench::workload::key_name;
use inkbench::zipf::Zipf;
use inkcache::Layout;
use rand::{rngs::StdRng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::policy::{DirectMapped, Lru};
use crate::table::{self as model, Table};

/// Largest item the kernel stores and sends in one datagram (`ITEM_MAX`).
pub const ITEM_MAX: u32 = inkcache::abi::ITEM_MAX as u32;
/// Scale and shape of the generalized Pareto distribution of value sizes in Facebook's ETC pool
/// (location 0): Atikoglu et al., "Workload Analysis of a Large-Scale Key-Value Store",
/// SIGMETRICS 2012, section 5 (the same parameters as mutilate's `fb_value`).
pub const ETC_SCALE: f64 = 214.476;
pub const ETC_SHAPE: f64 = 0.348238;

/// The bytes memcached sends for an item: `VALUE <key> 0 <bytes>\r\n<data>\r\n` (flags 0).
pub fn item_len(key_len: usize, value_len: u32) -> u32 {
    let digits = value_len.checked_ilog10().unwrap_or(0) + 1;
    6 + key_len as u32 + 3 + digits + 2 + value_len + 2
}

/// The largest value whose item (with a key of `key_len` bytes) fits one datagram.
pub fn max_value_len(key_len: usize) -> u32 {
    let mut v = ITEM_MAX;
    while v > 0 && item_len(key_len, v) > ITEM_MAX {
        v -= 1;
    }
    v
}

/// How large each key's value is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mix {
    /// Every value this many bytes (`fixed:N`).
    Fixed(u32),
    /// Facebook ETC-like (`etc` or `etc:MAX`): generalized Pareto (location 0, scale
    /// [`ETC_SCALE`], shape [`ETC_SHAPE`]) truncated to at most `MAX` bytes (by default the
    /// largest value whose item fits one datagram): sampled by inverting the CDF on a uniform
    /// draw scaled to the CDF at the cap, rounded down.
    Etc { max: Option<u32> },
}

impl FromStr for Mix {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Mix> {
        let num = |t: &str| -> Result<u32> {
            t.parse()
                .with_context(|| format!("bad size {t:?} in value mix {s:?}"))
        };
        if let Some(n) = s.strip_prefix("fixed:") {
            return Ok(Mix::Fixed(num(n)?));
        }
        if s == "etc" {
            return Ok(Mix::Etc { max: None });
        }
        if let Some(n) = s.strip_prefix("etc:") {
            return Ok(Mix::Etc { max: Some(num(n)?) });
        }
        bail!("unknown value mix {s:?} (expected fixed:N, etc or etc:MAX)")
    }
}

impl std::fmt::Display for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mix::Fixed(n) => write!(f, "fixed:{n}"),
            Mix::Etc { max: None } => f.write_str("etc"),
            Mix::Etc { max: Some(m) } => write!(f, "etc:{m}"),
        }
    }
}

/// SplitMix64: the per-key draw (a key's value size depends only on its id and the seed).
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Mix {
    /// The value size of key `id` (deterministic in `id` and `seed`).
    pub fn value_len(&self, id: u64, seed: u64, key_len: usize) -> Result<u32> {
        let cap = max_value_len(key_len);
        match *self {
            Mix::Fixed(n) => {
                ensure!(
                    n <= cap,
                    "fixed:{n}: the item would not fit one datagram (at most {cap} bytes)"
                );
                Ok(n)
            }
            Mix::Etc { max } => {
                let max = max.unwrap_or(cap);
                ensure!(
                    max <= cap,
                    "etc:{max}: items would not fit one datagram (at most {cap} bytes)"
                );
                let u = (splitmix(seed ^ splitmix(id)) >> 11) as f64 / (1u64 << 53) as f64;
                // CDF F(x) = 1 - (1 + k x / s)^(-1/k); truncated at max + 1 (floor keeps <= max)
                let (s, k) = (ETC_SCALE, ETC_SHAPE);
                let f_cap = 1.0 - (1.0 + k * (max as f64 + 1.0) / s).powf(-1.0 / k);
                let x = s / k * ((1.0 - u * f_cap).powf(-k) - 1.0);
                Ok((x.floor() as u32).min(max))
            }
        }
    }
}

/// A cache budget: a share of the total item bytes, or an absolute size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Budget {
    Percent(f64),
    Bytes(u64),
}

impl Budget {
    pub fn bytes(&self, total_item_bytes: u64) -> u64 {
        match *self {
            Budget::Percent(p) => (total_item_bytes as f64 * p / 100.0) as u64,
            Budget::Bytes(b) => b,
        }
    }

    pub fn label(&self) -> String {
        match *self {
            Budget::Percent(p) => format!("{p}%"),
            Budget::Bytes(b) if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
            Budget::Bytes(b) => format!("{b} B"),
        }
    }
}

/// What to simulate.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HitRatioConfig {
    pub keys: u64,
    pub key_size: usize,
    pub zipf: f64,
    /// Requests before the measured window (not counted).
    pub warmup: u64,
    /// Measured requests.
    pub requests: u64,
    #[serde(with = "mix_strings")]
    pub mixes: Vec<Mix>,
    pub budgets: Vec<Budget>,
    /// The `--item-bytes` the kernel table is split for; default: the mix's mean item, rounded.
    pub item_bytes: Option<u32>,
    pub seed: u64,
}

mod mix_strings {
    use super::Mix;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &[Mix], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter().map(|m| m.to_string()))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Mix>, D::Error> {
        let v: Vec<String> = Vec::deserialize(d)?;
        v.iter()
            .map(|s| s.parse().map_err(serde::de::Error::custom))
            .collect()
    }
}

impl HitRatioConfig {
    pub fn new() -> HitRatioConfig {
        HitRatioConfig {
            keys: 1_000_000,
            key_size: 16,
            zipf: 0.99,
            warmup: 5_000_000,
            requests: 10_000_000,
            mixes: vec![Mix::Fixed(32), Mix::Etc { max: None }],
            budgets: vec![Budget::Percent(1.0), Budget::Percent(10.0)],
            item_bytes: None,
            seed: 1,
        }
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(
            (1..=u32::MAX as u64 - 1).contains(&self.keys),
            "--keys must be 1..2^32-1"
        );
        let digits = (self.keys - 1).checked_ilog10().unwrap_or(0) as usize + 1;
        ensure!(
            self.key_size > digits && self.key_size <= 250,
            "--key-size must be more than 1 + the digits of the largest key id, at most 250"
        );
        ensure!(
            self.zipf > 0.0 && self.zipf.is_finite(),
            "--zipf must be > 0"
        );
        ensure!(self.requests > 0, "--requests must be > 0");
        ensure!(!self.mixes.is_empty(), "no value mix");
        ensure!(!self.budgets.is_empty(), "no budget");
        for b in &self.budgets {
            if let Budget::Percent(p) = b {
                ensure!(*p > 0.0 && *p <= 100.0, "budget {p}% not in (0, 100]");
            }
        }
        if let Some(i) = self.item_bytes {
            ensure!(
                (16..=ITEM_MAX).contains(&i),
                "--item-bytes must be 16..={ITEM_MAX}"
            );
        }
        Ok(())
    }
}

impl Default for HitRatioConfig {
    fn default() -> Self {
        HitRatioConfig::new()
    }
}

/// The keys of one mix: what every policy needs to know about key `id`.
pub struct Keys {
    pub hash: Vec<u64>,
    pub item_len: Vec<u16>,
    pub key_len: u8,
}

impl Keys {
    pub fn new(cfg: &HitRatioConfig, mix: Mix) -> Result<Keys> {
        let mut hash = Vec::with_capacity(cfg.keys as usize);
        let mut item = Vec::with_capacity(cfg.keys as usize);
        for id in 0..cfg.keys {
            let name = key_name("k", id, cfg.key_size);
            hash.push(inkcache::key_hash(0, name.as_bytes()));
            let v = mix.value_len(id, cfg.seed, cfg.key_size)?;
            item.push(item_len(cfg.key_size, v) as u16);
        }
        Ok(Keys {
            hash,
            item_len: item,
            key_len: cfg.key_size as u8,
        })
    }

    pub fn key(&self, id: u32) -> model::Key {
        model::Key {
            id,
            hash: self.hash[id as usize],
            len: self.key_len,
            item_len: self.item_len[id as usize],
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.item_len.iter().map(|&l| l as u64).sum()
    }
}

/// Hits of one policy over the measured window.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct PolicyResult {
    pub hit_ratio: f64,
    pub hits: u64,
    pub requests: u64,
    /// Hit ratio over the first and the second half of the window (steady state: close).
    pub halves: [f64; 2],
}

/// The kernel table's layout and log accounting for one budget.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct KernelDetail {
    pub item_bytes: u32,
    pub sets: u32,
    pub segs: u32,
    pub ways: u64,
    pub index_bytes: u64,
    pub log_bytes: u64,
    pub total_bytes: u64,
    /// Over the measured window, per request.
    pub promoted_per_request: f64,
    pub lapped_per_request: f64,
    pub fills_per_request: f64,
    /// Share of the log left unused at segment ends (abandoned reservations).
    pub abandoned_share: f64,
    /// At the end: items a lookup would find, and their log bytes.
    pub resident_items: u64,
    pub resident_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub mix: String,
    pub budget: String,
    pub budget_bytes: u64,
    /// The budget as a share of the total item bytes (%).
    pub budget_pct: f64,
    pub kernel: PolicyResult,
    pub direct: PolicyResult,
    pub lru: PolicyResult,
    pub lru_log: PolicyResult,
    pub kernel_detail: KernelDetail,
    pub direct_slots: u64,
    pub lru_items: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MixSummary {
    pub mix: String,
    pub total_item_bytes: u64,
    pub mean_item_bytes: f64,
    pub min_item_bytes: u32,
    pub max_item_bytes: u32,
    /// Median and 99th percentile of item sizes over the keys.
    pub p50_item_bytes: u32,
    pub p99_item_bytes: u32,
    /// The `--item-bytes` the kernel table was split for.
    pub split_item_bytes: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HitRatioResults {
    pub config: HitRatioConfig,
    pub mixes: Vec<MixSummary>,
    pub rows: Vec<Row>,
}

/// Ids of the trace in chunks (the same trace for every policy of a mix).
const CHUNK: usize = 1 << 16;

/// The three policies at one budget.
struct Sims {
    table: Table,
    direct: DirectMapped,
    lru: Lru,
    lru_log: Lru,
    /// hits per policy (kernel, direct, lru, lru_log) in [warm-up, first half, second half]
    hits: [[u64; 3]; 4],
    base: model::Counters,
}

/// Runs the trace of `cfg` for one mix against every budget.
fn run_mix(cfg: &HitRatioConfig, mix: Mix) -> Result<(MixSummary, Vec<Row>)> {
    let keys = Keys::new(cfg, mix)?;
    let total = keys.total_bytes();
    let mut sorted: Vec<u16> = keys.item_len.clone();
    sorted.sort_unstable();
    let mean = total as f64 / cfg.keys as f64;
    let split = cfg
        .item_bytes
        .unwrap_or_else(|| (mean.round() as u32).clamp(16, 1392));
    let summary = MixSummary {
        mix: mix.to_string(),
        total_item_bytes: total,
        mean_item_bytes: mean,
        min_item_bytes: sorted[0] as u32,
        max_item_bytes: sorted[sorted.len() - 1] as u32,
        p50_item_bytes: sorted[sorted.len() / 2] as u32,
        p99_item_bytes: sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)] as u32,
        split_item_bytes: split,
    };
    drop(sorted);

    let mut sims = Vec::new();
    for b in &cfg.budgets {
        let bytes = b.bytes(total);
        let layout = Layout::for_bytes(bytes, split);
        ensure!(
            layout.total_bytes() <= bytes,
            "{mix} at {}: {bytes} bytes are less than the smallest kernel table ({} bytes); \
             use more keys or a larger budget",
            b.label(),
            layout.total_bytes()
        );
        sims.push(Sims {
            table: Table::new(layout),
            direct: DirectMapped::new(bytes),
            lru: Lru::new(cfg.keys as usize, bytes),
            lru_log: Lru::new(cfg.keys as usize, layout.log_bytes()),
            hits: [[0; 3]; 4],
            base: model::Counters::default(),
        });
    }

    let zipf = Zipf::new(cfg.keys, cfg.zipf);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let half = cfg.requests / 2;
    // phases: warm-up, first half, second half
    let phases = [cfg.warmup, half, cfg.requests - half];
    let mut ids = Vec::with_capacity(CHUNK);
    for (ph, &n) in phases.iter().enumerate() {
        if ph == 1 {
            for s in &mut sims {
                s.base = s.table.counters;
            }
        }
        let mut left = n;
        while left > 0 {
            let c = left.min(CHUNK as u64) as usize;
            left -= c as u64;
            ids.clear();
            ids.extend((0..c).map(|_| zipf.sample(&mut rng) as u32));
            for s in &mut sims {
                let mut h = [0u64; 4];
                for &id in &ids {
                    let k = keys.key(id);
                    h[0] += s.table.get(&k) as u64;
                    h[1] += s.direct.get(id, k.hash, k.item_len) as u64;
                    h[2] += s.lru.get(id, k.item_len) as u64;
                    h[3] += s.lru_log.get(id, k.item_len.next_multiple_of(16)) as u64;
                }
                for (acc, n) in s.hits.iter_mut().zip(h) {
                    acc[ph] += n;
                }
            }
        }
    }

    let rows = cfg
        .budgets
        .iter()
        .zip(sims)
        .map(|(b, s)| {
            let bytes = b.bytes(total);
            let res = |p: usize| {
                let hits = s.hits[p][1] + s.hits[p][2];
                let ratio = |h: u64, n: u64| if n == 0 { 0.0 } else { h as f64 / n as f64 };
                PolicyResult {
                    hit_ratio: ratio(hits, cfg.requests),
                    hits,
                    requests: cfg.requests,
                    halves: [
                        ratio(s.hits[p][1], half),
                        ratio(s.hits[p][2], cfg.requests - half),
                    ],
                }
            };
            let l = s.table.layout();
            let c = s.table.counters;
            let per = |v: u64| v as f64 / cfg.requests as f64;
            let units = (c.item_units + c.abandoned_units).max(1);
            let (resident_items, resident_bytes) = s.table.resident();
            Row {
                mix: mix.to_string(),
                budget: b.label(),
                budget_bytes: bytes,
                budget_pct: bytes as f64 * 100.0 / total as f64,
                kernel: res(0),
                direct: res(1),
                lru: res(2),
                lru_log: res(3),
                kernel_detail: KernelDetail {
                    item_bytes: split,
                    sets: l.sets,
                    segs: l.segs,
                    ways: l.ways(),
                    index_bytes: l.index_bytes(),
                    log_bytes: l.log_bytes(),
                    total_bytes: l.total_bytes(),
                    promoted_per_request: per(c.promoted - s.base.promoted),
                    lapped_per_request: per(c.lapped - s.base.lapped),
                    fills_per_request: per(c.fills - s.base.fills),
                    abandoned_share: c.abandoned_units as f64 / units as f64,
                    resident_items,
                    resident_bytes,
                },
                direct_slots: s.direct.slots(),
                lru_items: s.lru.held().0,
            }
        })
        .collect();
    Ok((summary, rows))
}

/// Simulates every mix (one thread each) and budget of `cfg`.
pub fn run(cfg: &HitRatioConfig) -> Result<HitRatioResults> {
    cfg.validate()?;
    let outs: Vec<Result<(MixSummary, Vec<Row>)>> = std::thread::scope(|sc| {
        let hs: Vec<_> = cfg
            .mixes
            .iter()
            .map(|&m| sc.spawn(move || run_mix(cfg, m)))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a simulation thread panicked")))
            })
            .collect()
    });
    let mut res = HitRatioResults {
        config: cfg.clone(),
        mixes: Vec::new(),
        rows: Vec::new(),
    };
    for o in outs {
        let (m, rows) = o?;
        res.mixes.push(m);
        res.rows.extend(rows);
    }
    Ok(res)
}

/// Sets every key `0..keys` over TCP at `addr` with a value of its size in `mix` (pipelined, 128
/// sets per round trip). Returns the item bytes written.
pub fn preload(cfg: &HitRatioConfig, mix: Mix, addr: SocketAddr) -> Result<u64> {
    cfg.validate()?;
    let timeout = Duration::from_secs(5);
    let mut s =
        inkbench::admin::connect(addr, timeout).with_context(|| format!("preload via {addr}"))?;
    let data = inkbench::workload::value_bytes(max_value_len(cfg.key_size) as usize);
    let (mut req, mut buf, mut resps) = (Vec::new(), Vec::new(), Vec::new());
    let mut total = 0u64;
    let mut id = 0u64;
    while id < cfg.keys {
        let end = (id + 128).min(cfg.keys);
        req.clear();
        for k in id..end {
            let v = mix.value_len(k, cfg.seed, cfg.key_size)?;
            total += item_len(cfg.key_size, v) as u64;
            let key = key_name("k", k, cfg.key_size);
            inkproto::client::store(
                &mut req,
                inkproto::client::Store::Set,
                key.as_bytes(),
                0,
                0,
                &data[..v as usize],
                false,
            );
        }
        s.write_all(&req).context("preload: writing sets")?;
        resps.clear();
        inkbench::admin::read_responses(&mut s, &mut buf, (end - id) as usize, &mut resps)
            .context("preload: reading replies")?;
        if let Some(bad) = resps
            .iter()
            .find(|r| **r != inkproto::client::Response::Stored)
        {
            bail!("preload: the server answered {bad:?} to a set");
        }
        id = end;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_len_is_memcacheds_value_line() {
        // "VALUE k000000000000042 0 32\r\n" + 32 + "\r\n"
        assert_eq!(item_len(16, 32), 63);
        assert_eq!(item_len(16, 0), 30);
        assert_eq!(item_len(16, 9), 39);
        assert_eq!(item_len(16, 10), 41);
        assert_eq!(max_value_len(16), 1354);
        assert_eq!(item_len(16, 1354), ITEM_MAX);
        assert!(item_len(16, 1355) > ITEM_MAX);
    }

    #[test]
    fn mixes_parse_and_etc_is_heavy_tailed_and_capped() {
        assert_eq!("fixed:32".parse::<Mix>().unwrap(), Mix::Fixed(32));
        assert_eq!("etc".parse::<Mix>().unwrap(), Mix::Etc { max: None });
        assert_eq!("etc:150".parse::<Mix>().unwrap().to_string(), "etc:150");
        assert!("pareto".parse::<Mix>().is_err());
        assert!(Mix::Fixed(2000).value_len(0, 1, 16).is_err());
        let m = Mix::Etc { max: None };
        let n = 200_000u64;
        let v: Vec<u32> = (0..n).map(|i| m.value_len(i, 1, 16).unwrap()).collect();
        assert!(v.iter().all(|&x| x <= 1354));
        assert_eq!(
            v[7],
            m.value_len(7, 1, 16).unwrap(),
            "deterministic per key"
        );
        let mut s = v.clone();
        s.sort_unstable();
        // truncated GPD: median s/k ((1 - F(c)/2)^-k - 1) = 158.7 bytes, mean 252.2 (floored)
        let median = s[s.len() / 2] as f64;
        assert!((150.0..168.0).contains(&median), "median {median}");
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        assert!((245.0..260.0).contains(&mean), "mean {mean}");
        assert!(s[s.len() * 99 / 100] > 1000, "heavy tail");
        let c: Vec<u32> = (0..1000)
            .map(|i| Mix::Etc { max: Some(150) }.value_len(i, 1, 16).unwrap())
            .collect();
        assert!(c.iter().all(|&x| x <= 150) && c.contains(&150) && c.contains(&0));
    }

    #[test]
    fn small_run_orders_policies() {
        let mut c = HitRatioConfig::new();
        c.keys = 50_000;
        c.warmup = 100_000;
        c.requests = 200_000;
        c.budgets = vec![Budget::Percent(10.0), Budget::Percent(30.0)];
        let r = run(&c).unwrap();
        assert_eq!(r.rows.len(), 4);
        for row in &r.rows {
            assert!(row.lru.hit_ratio >= row.direct.hit_ratio, "{row:?}");
            assert!(row.kernel.hit_ratio > row.direct.hit_ratio, "{row:?}");
            assert!(row.kernel_detail.total_bytes <= row.budget_bytes);
        }
        // deterministic
        let r2 = run(&c).unwrap();
        assert_eq!(r.rows[0].kernel.hits, r2.rows[0].kernel.hits);
        assert!(r.table().contains("direct-mapped"));
    }
}
