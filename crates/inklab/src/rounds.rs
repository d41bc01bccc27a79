//! Interleaved capacity rounds (`inklab paper --rounds N`). The main pass measures each
//! configuration once, a minute or more apart; on a noisy VM the host's speed moves that much
//! within an hour (the echo floor between 896 and 1,283 ns per request: hitcost.md, seventeenth
//! run), and a ratio of two such figures carries the drift. Here the target workload's
//! configurations are all set up at once, then measured in turn, N rounds over, each round in
//! another order: the ratios are taken within a round, and their median over the rounds is the
//! figure the goals use.
//!
//! While one configuration is measured, the others' server processes are stopped (SIGSTOP): their
//! timers and background threads cannot run on the server CPU and count as the measured one's.
//! With `--server-awake`, one busy loop serves every configuration in turn.
//!
//! The closed loop runs each configuration as fast as the one client can: the echo's replies are
//! the requests themselves, cheaper for the client than a value's, so the echo runs at a higher
//! rate, the server core wakes for larger batches, and its cost per request is lower for that
//! alone (the main pass's echo cost 2,411 ns per request at 57,000 requests/s and 1,182 at
//! 200,000). So each configuration answered in XDP (the echo and the kernel cache) is also run in
//! each round open loop at one rate for all ([`equal_rate`]: 0.9 of the slowest one's closed-loop
//! throughput in the main pass): their costs are then compared at the same batching.

use std::time::Duration;

use anyhow::{Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::topology::{Rig, Spinner};
use crate::{PaperOpts, Point, Setup, Timing, Workload, SERVER_CPU};

/// One configuration's closed-loop run in one round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundPoint {
    /// 1..=N.
    pub round: u32,
    pub setup: Setup,
    pub label: String,
    pub point: Point,
    /// The same configuration open loop at the rounds' equal rate (configurations answered in
    /// XDP only).
    #[serde(default)]
    pub at_rate: Option<Point>,
}

/// Whether `setup`'s answers all come from XDP (the echo, or the kernel cache on `target`).
pub(crate) fn answered_in_xdp(setup: Setup) -> bool {
    matches!(
        setup,
        Setup::XdpEcho | Setup::MemcachedInkcache | Setup::InkcachedInkcache
    )
}

/// The open-loop rate of the rounds' equal-rate runs: 0.9 of the lowest closed-loop throughput
/// among the configurations answered in XDP, from `max` (each configuration's main-pass
/// throughput), rounded down to a thousand. None if none of them ran.
pub(crate) fn equal_rate(max: &[(Setup, f64)]) -> Option<f64> {
    max.iter()
        .filter(|(s, t)| answered_in_xdp(*s) && *t > 0.0)
        .map(|(_, t)| *t)
        .min_by(f64::total_cmp)
        .map(|t| ((t * 0.9 / 1000.0).floor() * 1000.0).max(1000.0))
}

/// Warm-up of a configuration before each of its rounds (its server was stopped meanwhile, and
/// the others' runs took its lines out of the caches).
const ROUND_WARM: Duration = Duration::from_secs(1);

/// Stops (`true`) or resumes a server process.
fn pause(rig: &Rig, stop: bool) -> Result<()> {
    let Some(s) = &rig.server else {
        return Ok(());
    };
    let sig = if stop {
        Signal::SIGSTOP
    } else {
        Signal::SIGCONT
    };
    kill(Pid::from_raw(s.pid()), sig).with_context(|| format!("{sig} to {}", s.cmd))
}

/// The rigs, resumed whatever happens (a stopped server ignores everything but SIGKILL and
/// SIGCONT; the rigs' own drops kill them).
struct Rigs(Vec<(Setup, Rig)>);

impl Drop for Rigs {
    fn drop(&mut self) {
        for (_, r) in &self.0 {
            let _ = pause(r, false);
        }
    }
}

/// The order of the configurations in round `round` (1-based): rotated by one each round, so that
/// none is always measured first or right after the same one.
pub(crate) fn order(n: usize, round: u32) -> Vec<usize> {
    (0..n).map(|i| (i + round as usize - 1) % n).collect()
}

/// Sets up every configuration of `wl` that can run, warms each, and measures each in turn for
/// `timing.round_s` closed loop (and, with `rate`, open loop at that rate if it is answered in
/// XDP), `rounds` times over.
pub(crate) fn capacity_rounds(
    opts: &PaperOpts,
    timing: &Timing,
    wl: &Workload,
    rounds: u32,
    rate: Option<f64>,
) -> Result<Vec<RoundPoint>> {
    let mut rigs = Rigs(Vec::new());
    let cfg = wl.run_config(opts.inflight);
    for &setup in &wl.setups {
        if crate::run::missing(opts, setup).is_some() {
            continue;
        }
        eprintln!("inklab: rounds: setting up {} ...", setup.label());
        let mut rig = Rig::new(opts, setup).with_context(|| setup.label().to_string())?;
        // one busy loop for all (below): each rig's own would run while another is measured
        rig.spinner = None;
        rig.warm(wl, &cfg, timing)
            .with_context(|| format!("warming {}", setup.label()))?;
        pause(&rig, true)?;
        rigs.0.push((setup, rig));
    }
    let mut spinner = if opts.server_awake {
        Some(Spinner::start(SERVER_CPU)?)
    } else {
        None
    };
    let mut points = Vec::new();
    for round in 1..=rounds {
        for i in order(rigs.0.len(), round) {
            let (setup, rig) = &mut rigs.0[i];
            pause(rig, false)?;
            rig.spinner = spinner.take();
            let r = (|| {
                let mut c = cfg.clone();
                c.duration = ROUND_WARM;
                rig.load(&c).context("warm-up")?;
                c.duration = Duration::from_secs_f64(timing.round_s);
                let max = rig.measure(&c)?;
                let at_rate = match rate {
                    Some(r) if answered_in_xdp(*setup) => {
                        c.rate = Some(r);
                        Some(rig.measure(&c).context("the equal-rate run")?)
                    }
                    _ => None,
                };
                Ok::<_, anyhow::Error>((max, at_rate))
            })();
            spinner = rig.spinner.take();
            pause(rig, true)?;
            let (point, at_rate) =
                r.with_context(|| format!("round {round}, {}", setup.label()))?;
            eprintln!(
                "  round {round} {}: {:.0} ns/req on CPU{SERVER_CPU}{}",
                setup.label(),
                point.server_ns_per_req,
                at_rate.as_ref().map_or(String::new(), |p| format!(
                    "; {:.0} at {:.0} req/s",
                    p.server_ns_per_req,
                    p.offered_rate.unwrap_or(0.0)
                ))
            );
            points.push(RoundPoint {
                round,
                setup: *setup,
                label: setup.label().into(),
                point,
                at_rate,
            });
        }
    }
    Ok(points)
}

/// The median of `v` (the mean of the middle two for an even count); None if empty.
pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_starts_elsewhere_and_measures_all() {
        let rounds: Vec<_> = (1..=5).map(|r| order(5, r)).collect();
        assert_eq!(rounds[0], [0, 1, 2, 3, 4]);
        assert_eq!(rounds[1], [1, 2, 3, 4, 0]);
        for r in &rounds {
            let mut s = r.clone();
            s.sort();
            assert_eq!(s, [0, 1, 2, 3, 4]);
        }
        let firsts: std::collections::BTreeSet<_> = rounds.iter().map(|r| r[0]).collect();
        assert_eq!(
            firsts.len(),
            5,
            "every configuration is first once in 5 rounds"
        );
        assert!(order(0, 3).is_empty());
    }

    #[test]
    fn equal_rate_is_below_the_slowest_xdp_configuration() {
        let max = [
            (Setup::Memcached, 115_000.0),
            (Setup::MemcachedInkcache, 176_883.0),
            (Setup::XdpEcho, 199_852.0),
            (Setup::Inkcached, 122_524.0),
            (Setup::InkcachedInkcache, 220_086.0),
        ];
        // 0.9 of memcached+inkcache's 176,883, down to a thousand; the servers alone don't count
        assert_eq!(equal_rate(&max), Some(159_000.0));
        assert_eq!(equal_rate(&max[..1]), None);
        assert_eq!(equal_rate(&[(Setup::XdpEcho, 0.0)]), None);
        assert_eq!(equal_rate(&[(Setup::XdpEcho, 500.0)]), Some(1000.0));
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
