//! The latency sampler: one get per interval (1 ms by default), each handed to a small pool of
//! blocking workers so a stalled request does not delay the next sample; every sample's timing
//! is kept (scheduled, sent, received, result) to show pauses and clusters on a timeline.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inkproto::client::{self, parse_response, Response};
use inkproto::udp::{frame_request, FrameHeader, Reassembly, HEADER_LEN};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::config::{secs_f64, Proto, RunConfig};
use crate::report::{new_histogram, LatencySummary, RunResults};
use crate::workload::key_name;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SampleConfig {
    pub server: SocketAddr,
    pub proto: Proto,
    /// Time between two samples.
    #[serde(with = "secs_f64")]
    pub interval: Duration,
    #[serde(with = "secs_f64")]
    pub duration: Duration,
    /// Blocking worker threads (each with its own socket / connection).
    pub workers: usize,
    #[serde(with = "secs_f64")]
    pub timeout: Duration,
    /// Keys sampled uniformly from `0..keys`, named as `run` names them.
    pub keys: u64,
    pub key_size: usize,
    pub key_prefix: String,
    pub seed: u64,
    /// Set every key once over TCP first (at `admin`, default `server`).
    pub preload: bool,
    pub admin: Option<SocketAddr>,
    /// A load run in the background while sampling (stopped when sampling ends).
    pub with_load: Option<RunConfig>,
}

impl SampleConfig {
    pub fn new(server: SocketAddr) -> Self {
        SampleConfig {
            server,
            proto: Proto::Udp,
            interval: Duration::from_millis(1),
            duration: Duration::from_secs(10),
            workers: 4,
            timeout: Duration::from_secs(1),
            keys: 10_000,
            key_size: 16,
            key_prefix: "k".into(),
            seed: 1,
            preload: false,
            admin: None,
            with_load: None,
        }
    }
}

/// The outcome of one sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Hit,
    Miss,
    Timeout,
    Error,
}

impl Outcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// One sample's timing, in microseconds since the sampler's start.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SampleRecord {
    pub seq: u64,
    pub worker: usize,
    pub key: u64,
    /// When the sample was due.
    pub scheduled_us: f64,
    /// When a worker sent it (later than scheduled if every worker was busy).
    pub send_us: f64,
    /// When the reply was complete (absent on timeout or error).
    pub recv_us: Option<f64>,
    /// `recv - scheduled`: what a client would have seen.
    pub latency_us: Option<f64>,
    pub result: Outcome,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SampleResults {
    pub config: SampleConfig,
    pub count: u64,
    pub hits: u64,
    pub misses: u64,
    pub timeouts: u64,
    pub errors: u64,
    /// Latency (from the scheduled time) of the answered samples.
    pub latency: LatencySummary,
    /// Samples sent more than one interval after their scheduled time (worker pool saturated).
    pub late_sends: u64,
    /// The background load's results, with `with_load`.
    pub load: Option<RunResults>,
    pub samples: Vec<SampleRecord>,
}

struct Job {
    seq: u64,
    key: u64,
    scheduled: Instant,
}

/// A blocking client for one get at a time.
enum Client {
    Udp(UdpSocket, Vec<u8>),
    Tcp(Option<TcpStream>, Vec<u8>),
}

impl Client {
    fn new(cfg: &SampleConfig) -> Result<Self> {
        Ok(match cfg.proto {
            Proto::Udp => {
                let s = crate::udp::connect(cfg.server)?;
                Client::Udp(s, vec![0u8; 9216])
            }
            Proto::Tcp => Client::Tcp(
                Some(crate::tcp::connect(cfg.server, cfg.timeout)?),
                Vec::new(),
            ),
        })
    }

    /// Sends `get key` and waits for its answer until `deadline`.
    fn get(&mut self, cfg: &SampleConfig, seq: u64, key: &str, deadline: Instant) -> Outcome {
        let mut req = Vec::new();
        client::get(&mut req, &[key.as_bytes()]);
        let resp = match self {
            Client::Udp(s, buf) => udp_get(s, buf, seq as u16, &req, deadline),
            Client::Tcp(s, rbuf) => {
                if s.is_none() {
                    *s = crate::tcp::connect(cfg.server, cfg.timeout).ok();
                }
                let Some(stream) = s.as_mut() else {
                    return Outcome::Error;
                };
                let r = tcp_get(stream, rbuf, &req, deadline);
                if r.is_none() {
                    // Timed out or failed: the stream is out of step, start afresh.
                    *s = None;
                    rbuf.clear();
                }
                r
            }
        };
        match resp {
            None => Outcome::Timeout,
            Some(Response::Values(items)) if items.is_empty() => Outcome::Miss,
            Some(Response::Values(items)) if items.iter().all(|i| i.key == key.as_bytes()) => {
                Outcome::Hit
            }
            Some(_) => Outcome::Error,
        }
    }
}

fn udp_get(
    s: &UdpSocket,
    buf: &mut [u8],
    id: u16,
    req: &[u8],
    deadline: Instant,
) -> Option<Response> {
    s.send(&frame_request(id, req)).ok()?;
    let mut cur = Reassembly::new();
    let mut payload = Vec::new();
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_micros(1))))
            .ok()?;
        let n = match s.recv(buf) {
            Ok(n) => n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return None
            }
            Err(_) => continue, // ICMP errors and the like: keep waiting until the deadline
        };
        let Some(h) = FrameHeader::decode(&buf[..n]) else {
            continue;
        };
        if h.request_id != id || h.total == 0 {
            continue; // a late answer to an earlier sample
        }
        if !cur.push(h, &buf[HEADER_LEN..n]) {
            cur = Reassembly::new();
            cur.push(h, &buf[HEADER_LEN..n]);
        }
        if cur.is_complete() {
            payload.extend_from_slice(&std::mem::take(&mut cur).finish()?);
            match parse_response(&payload) {
                Ok(Some((r, _))) => return Some(r),
                Ok(None) => {}
                Err(_) => return Some(Response::Error),
            }
        }
    }
}

fn tcp_get(
    s: &mut TcpStream,
    rbuf: &mut Vec<u8>,
    req: &[u8],
    deadline: Instant,
) -> Option<Response> {
    let left = deadline.checked_duration_since(Instant::now())?;
    s.set_write_timeout(Some(left)).ok()?;
    s.write_all(req).ok()?;
    let mut tmp = [0u8; 16 * 1024];
    loop {
        match parse_response(rbuf) {
            Ok(Some((r, used))) => {
                rbuf.drain(..used);
                return Some(r);
            }
            Ok(None) => {}
            Err(_) => return Some(Response::Error),
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_micros(1))))
            .ok()?;
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => rbuf.extend_from_slice(&tmp[..n]),
        }
    }
}

/// Runs the sampler (and the background load, if any) and returns every sample.
pub fn sample(cfg: &SampleConfig) -> Result<SampleResults> {
    anyhow::ensure!(cfg.workers >= 1, "need at least one worker");
    anyhow::ensure!(!cfg.interval.is_zero(), "interval must be > 0");
    anyhow::ensure!(cfg.keys >= 1, "need at least one key");
    if cfg.preload {
        let mut rc = RunConfig::new(cfg.server);
        rc.admin = Some(cfg.admin.unwrap_or(cfg.server));
        rc.keys = cfg.keys;
        rc.key_size = cfg.key_size;
        rc.key_prefix = cfg.key_prefix.clone();
        rc.timeout = cfg.timeout;
        rc.seed = cfg.seed;
        crate::admin::preload(&rc).context("preload failed")?;
    }
    let clients = (0..cfg.workers)
        .map(|_| Client::new(cfg))
        .collect::<Result<Vec<_>>>()
        .context("sampler: connecting the workers")?;

    let ctl = crate::RunControl::new();
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (rec_tx, rec_rx) = mpsc::channel::<SampleRecord>();
    let start = Instant::now() + Duration::from_millis(10);
    let us = |t: Instant| t.saturating_duration_since(start).as_nanos() as f64 / 1e3;

    let load = std::thread::scope(|sc| -> Result<Option<RunResults>> {
        let load = cfg
            .with_load
            .as_ref()
            .map(|lc| sc.spawn(|| crate::run_with(lc, &ctl)));
        for (w, mut c) in clients.into_iter().enumerate() {
            let rx = job_rx.clone();
            let tx = rec_tx.clone();
            sc.spawn(move || loop {
                let job = {
                    let Ok(rx) = rx.lock() else { return };
                    match rx.recv() {
                        Ok(j) => j,
                        Err(_) => return,
                    }
                };
                let key = key_name(&cfg.key_prefix, job.key, cfg.key_size);
                let sent = Instant::now();
                let result = c.get(cfg, job.seq, &key, sent + cfg.timeout);
                let recv = Instant::now();
                let answered = matches!(result, Outcome::Hit | Outcome::Miss);
                let _ = tx.send(SampleRecord {
                    seq: job.seq,
                    worker: w,
                    key: job.key,
                    scheduled_us: us(job.scheduled),
                    send_us: us(sent),
                    recv_us: answered.then(|| us(recv)),
                    latency_us: answered.then(|| us(recv) - us(job.scheduled)),
                    result,
                });
            });
        }
        drop(rec_tx);
        // The pacer: absolute schedule, one job per interval.
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let end = start + cfg.duration;
        let mut seq = 0u64;
        loop {
            let t = start + cfg.interval * seq as u32;
            if t >= end {
                break;
            }
            let now = Instant::now();
            if t > now {
                std::thread::sleep(t - now);
            }
            let key = rng.gen_range(0..cfg.keys);
            if job_tx
                .send(Job {
                    seq,
                    key,
                    scheduled: t,
                })
                .is_err()
            {
                break;
            }
            seq += 1;
        }
        drop(job_tx);
        ctl.stop();
        match load {
            Some(h) => Ok(Some(
                h.join()
                    .map_err(|_| anyhow::anyhow!("the load thread panicked"))?
                    .context("background load")?,
            )),
            None => Ok(None),
        }
    })?;

    let mut samples: Vec<SampleRecord> = rec_rx.into_iter().collect();
    samples.sort_by_key(|s| s.seq);
    let mut hist = new_histogram();
    let (mut hits, mut misses, mut timeouts, mut errors, mut late) = (0, 0, 0, 0, 0);
    let interval_us = cfg.interval.as_nanos() as f64 / 1e3;
    for s in &samples {
        match s.result {
            Outcome::Hit => hits += 1,
            Outcome::Miss => misses += 1,
            Outcome::Timeout => timeouts += 1,
            Outcome::Error => errors += 1,
        }
        if let Some(l) = s.latency_us {
            hist.saturating_record(((l * 1e3) as u64).max(1));
        }
        if s.send_us - s.scheduled_us > interval_us {
            late += 1;
        }
    }
    Ok(SampleResults {
        config: cfg.clone(),
        count: samples.len() as u64,
        hits,
        misses,
        timeouts,
        errors,
        latency: LatencySummary::from_histogram(&hist),
        late_sends: late,
        load,
        samples,
    })
}

/// Writes `samples.csv`, `samples.json` and `timeline.svg` into `dir` (created if needed);
/// returns their paths.
pub fn write_outputs(res: &SampleResults, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let csv = dir.join("samples.csv");
    let mut out = String::from("seq,worker,key,scheduled_us,send_us,recv_us,latency_us,result\n");
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.1}")).unwrap_or_default();
    for s in &res.samples {
        out.push_str(&format!(
            "{},{},{},{:.1},{:.1},{},{},{}\n",
            s.seq,
            s.worker,
            s.key,
            s.scheduled_us,
            s.send_us,
            opt(s.recv_us),
            opt(s.latency_us),
            s.result.as_str()
        ));
    }
    std::fs::write(&csv, out).with_context(|| format!("writing {}", csv.display()))?;
    let json = dir.join("samples.json");
    std::fs::write(&json, serde_json::to_vec(res)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let svg = dir.join("timeline.svg");
    crate::plot::timeline(res, &svg)?;
    Ok(vec![csv, json, svg])
}
