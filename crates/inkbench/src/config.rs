//! The configuration of a run: what to send, where, how fast and for how long.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

/// Transport used for the measured requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Udp,
    Tcp,
}

impl FromStr for Proto {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "udp" => Ok(Proto::Udp),
            "tcp" => Ok(Proto::Tcp),
            _ => bail!("unknown protocol {s:?} (expected udp or tcp)"),
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        })
    }
}

/// Size of the values written by sets (and by the preload).
///
/// Parsed from `N` (fixed) or `uniform:MIN:MAX` (inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum ValueSize {
    Fixed { bytes: usize },
    Uniform { min: usize, max: usize },
}

impl ValueSize {
    pub fn max(&self) -> usize {
        match *self {
            ValueSize::Fixed { bytes } => bytes,
            ValueSize::Uniform { max, .. } => max,
        }
    }
}

impl FromStr for ValueSize {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let num = |t: &str| -> Result<usize> {
            t.trim()
                .parse()
                .with_context(|| format!("bad value size {t:?} in {s:?}"))
        };
        if let Some(rest) = s.strip_prefix("uniform:") {
            let (a, b) = rest
                .split_once(':')
                .with_context(|| format!("expected uniform:MIN:MAX, got {s:?}"))?;
            let (min, max) = (num(a)?, num(b)?);
            ensure!(min <= max, "uniform value size: MIN > MAX in {s:?}");
            Ok(ValueSize::Uniform { min, max })
        } else {
            Ok(ValueSize::Fixed { bytes: num(s)? })
        }
    }
}

impl fmt::Display for ValueSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueSize::Fixed { bytes } => write!(f, "{bytes}"),
            ValueSize::Uniform { min, max } => write!(f, "uniform:{min}:{max}"),
        }
    }
}

/// How keys are picked: `uniform` or `zipf:S` (rank 0 = key 0 is the most popular).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Popularity {
    Uniform,
    Zipf { s: f64 },
}

impl FromStr for Popularity {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        if s == "uniform" {
            return Ok(Popularity::Uniform);
        }
        if let Some(e) = s.strip_prefix("zipf:") {
            let s_: f64 = e
                .parse()
                .with_context(|| format!("bad zipf exponent in {s:?}"))?;
            ensure!(
                s_.is_finite() && s_ > 0.0,
                "zipf exponent must be > 0, got {s_}"
            );
            return Ok(Popularity::Zipf { s: s_ });
        }
        bail!("unknown popularity {s:?} (expected uniform or zipf:S)")
    }
}

impl fmt::Display for Popularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Popularity::Uniform => f.write_str("uniform"),
            Popularity::Zipf { s } => write!(f, "zipf:{s}"),
        }
    }
}

/// Parses `10s`, `500ms`, `250us`, `2m` or a plain number of seconds (`1.5`).
pub fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .with_context(|| format!("bad duration {s:?} (examples: 10s, 500ms, 2m)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        _ => bail!("bad duration unit in {s:?} (use us, ms, s or m)"),
    };
    ensure!(secs.is_finite() && secs >= 0.0, "bad duration {s:?}");
    Ok(Duration::from_secs_f64(secs))
}

/// Serializes a [`Duration`] as a float number of seconds.
pub(crate) mod secs_f64 {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}

/// Everything a run needs. Build one with [`RunConfig::new`] and adjust the fields. The fields
/// are also `inkbench run`'s options (`clap::Args`), so the defaults are declared once, here.
#[derive(Clone, Debug, Serialize, Deserialize, clap::Args)]
pub struct RunConfig {
    /// Server address, HOST:PORT (IPv6: [::1]:11211).
    #[arg(long, value_parser = parse_addr)]
    pub server: SocketAddr,
    /// Transport: udp or tcp.
    #[arg(long, default_value = "udp")]
    pub proto: Proto,
    /// Fraction of requests that are gets; the rest are sets.
    #[arg(long, default_value_t = 0.9)]
    pub get_ratio: f64,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// Key length in bytes (prefix "k" + zero-padded id).
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    /// Keys are `<prefix><zero-padded id>`.
    #[arg(skip = String::from("k"))]
    pub key_prefix: String,
    /// Value size of sets: N or uniform:MIN:MAX.
    #[arg(long, default_value = "100")]
    pub value_size: ValueSize,
    /// Key popularity: uniform or zipf:S.
    #[arg(long, default_value = "uniform")]
    pub popularity: Popularity,
    /// Keys per get.
    #[arg(long, default_value_t = 1)]
    pub multiget: usize,
    /// TCP: requests outstanding per connection.
    #[arg(long, default_value_t = 1)]
    pub pipeline: usize,
    /// TCP connections or UDP sockets.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Closed loop: requests outstanding in total [default: connections x pipeline for TCP,
    /// 32 for UDP]. Ignored when `rate` is set.
    #[arg(long, conflicts_with = "rate")]
    pub inflight: Option<usize>,
    /// Open loop: requests per second in total, paced by absolute send times (latency is
    /// measured from the scheduled time).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Measured time (10s, 500ms, 2m).
    #[serde(with = "secs_f64")]
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Unmeasured time before the measurement.
    #[serde(with = "secs_f64")]
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Per-request timeout (UDP requests unanswered after it are lost).
    #[serde(with = "secs_f64")]
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub timeout: Duration,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Set every key once over TCP before the run.
    #[arg(long)]
    pub preload: bool,
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// TCP address for the preload and stats [default: --server].
    #[arg(long, value_parser = parse_addr)]
    pub admin: Option<SocketAddr>,
    /// Read the server's `stats` over TCP before and after the run (best effort);
    /// `--no-server-stats` does not.
    #[arg(long = "no-server-stats", action = clap::ArgAction::SetFalse)]
    pub server_stats: bool,
    /// Exptime of the sets.
    #[arg(skip)]
    pub exptime: i64,
}

/// `HOST:PORT`, resolved (IPv6: `[::1]:PORT`).
pub fn parse_addr(s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs()
        .with_context(|| format!("bad address {s:?} (expected HOST:PORT, [::1]:PORT for IPv6)"))?
        .next()
        .with_context(|| format!("{s:?} resolves to no address"))
}

impl RunConfig {
    /// The command line's defaults against `server`: UDP, 90% gets, 10,000 keys of 16 bytes,
    /// 100-byte values, uniform popularity, closed loop, 1 connection, 1 thread, 5 s, 1 s
    /// warmup, 1 s timeout.
    pub fn new(server: SocketAddr) -> Self {
        #[derive(clap::Parser)]
        struct Defaults {
            #[command(flatten)]
            cfg: RunConfig,
        }
        <Defaults as clap::Parser>::parse_from(["inkbench", "--server", &server.to_string()]).cfg
    }

    /// TCP address for preload and stats.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin.unwrap_or(self.server)
    }

    /// Requests outstanding in total in closed loop.
    pub fn effective_inflight(&self) -> usize {
        self.inflight.unwrap_or(match self.proto {
            Proto::Tcp => self.connections * self.pipeline,
            Proto::Udp => 32,
        })
    }

    /// Threads actually used: never more than connections.
    pub fn effective_threads(&self) -> usize {
        self.threads.clamp(1, self.connections.max(1))
    }

    pub fn validate(&self) -> Result<()> {
        ensure!(
            (0.0..=1.0).contains(&self.get_ratio),
            "get ratio must be within 0..=1, got {}",
            self.get_ratio
        );
        ensure!(self.keys >= 1, "need at least one key");
        let digits = (self.keys - 1).to_string().len();
        ensure!(
            self.key_size >= self.key_prefix.len() + digits,
            "key size {} too small for {} keys with prefix {:?} (need {})",
            self.key_size,
            self.keys,
            self.key_prefix,
            self.key_prefix.len() + digits
        );
        ensure!(
            inkproto::valid_key(self.key_prefix.as_bytes()) || self.key_prefix.is_empty(),
            "key prefix {:?} is not a valid memcached key",
            self.key_prefix
        );
        ensure!(
            self.key_size <= inkproto::KEY_MAX_LEN,
            "key size {} over memcached's limit of {}",
            self.key_size,
            inkproto::KEY_MAX_LEN
        );
        ensure!(self.multiget >= 1, "multiget must be >= 1");
        ensure!(self.pipeline >= 1, "pipeline must be >= 1");
        ensure!(self.connections >= 1, "need at least one connection");
        ensure!(self.threads >= 1, "need at least one thread");
        ensure!(self.effective_inflight() >= 1, "inflight must be >= 1");
        if let Some(r) = self.rate {
            ensure!(r.is_finite() && r > 0.0, "rate must be > 0, got {r}");
        }
        ensure!(!self.duration.is_zero(), "duration must be > 0");
        ensure!(!self.timeout.is_zero(), "timeout must be > 0");
        if self.proto == Proto::Udp {
            // A request must fit one datagram.
            let get_len = 4 + self.multiget * (self.key_size + 1) + 2;
            let set_len = if self.get_ratio < 1.0 {
                self.key_size + self.value_size.max() + 64
            } else {
                0
            };
            let need = get_len.max(set_len);
            ensure!(
                need <= inkproto::udp::MAX_PAYLOAD,
                "a request of about {need} bytes does not fit one UDP datagram ({} bytes): \
                 reduce --value-size/--multiget or use --proto tcp (or --get-ratio 1)",
                inkproto::udp::MAX_PAYLOAD
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!(
            "uniform:10:20".parse::<ValueSize>().unwrap(),
            ValueSize::Uniform { min: 10, max: 20 }
        );
        assert_eq!(
            "64".parse::<ValueSize>().unwrap(),
            ValueSize::Fixed { bytes: 64 }
        );
        assert!("uniform:20:10".parse::<ValueSize>().is_err());
        assert_eq!(
            "zipf:0.99".parse::<Popularity>().unwrap(),
            Popularity::Zipf { s: 0.99 }
        );
        assert!("zipf:-1".parse::<Popularity>().is_err());
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("5x").is_err());
    }

    #[test]
    fn validation() {
        let mut c = RunConfig::new("127.0.0.1:1".parse().unwrap());
        c.validate().unwrap();
        c.keys = 1_000_000_000;
        c.key_size = 5;
        assert!(c.validate().is_err());
        let mut c = RunConfig::new("127.0.0.1:1".parse().unwrap());
        c.value_size = ValueSize::Fixed { bytes: 5000 };
        assert!(c.validate().is_err());
        c.proto = Proto::Tcp;
        c.validate().unwrap();
    }
}
