//! Interleaved capacity rounds (`inklab paper --rounds N`). The main pass measures each
//! configuration once, 20-50 s after the one it is compared with; on a noisy VM the host's speed
//! can move by a quarter in that time (the echo at 977 and 1,204 ns per request in two rounds
//! under a minute apart: hitcost.md, eighteenth run), and a ratio of two such figures carries the
//! drift. Here the target workload's
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
//! rate, and its core wakes for larger batches. Whether that alone lowers its cost per request
//! (in one run the echo cost 2,411 ns per request at 57,000 requests/s and 1,182 at 200,000) is
//! measured too: after the closed-loop rounds, the configurations answered in XDP (the echo and
//! the kernel cache) run as many rounds again open loop, at one rate for all ([`equal_rate`]: 0.9
//! of the slowest one's median closed-loop throughput in the rounds), and their costs compare at
//! the same rate. (On the Intel VM that moved the kernel cache's median ratio to the echo by
//! 0.01-0.06: hitcost.md, eighteenth run.)

use std::collections::BTreeSet;
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

/// The open-loop rate of the rounds' equal-rate runs: 0.9 of the lowest median closed-loop
/// throughput among the configurations answered in XDP in `points`, rounded down to a thousand
/// (a median: one slow run of one configuration would set a rate far below the others'). None if
/// none of them ran.
pub(crate) fn equal_rate(points: &[RoundPoint]) -> Option<f64> {
    let setups: BTreeSet<Setup> = points
        .iter()
        .map(|p| p.setup)
        .filter(|&s| answered_in_xdp(s))
        .collect();
    setups
        .into_iter()
        .filter_map(|s| {
            median(
                points
                    .iter()
                    .filter(|p| p.setup == s && p.point.throughput > 0.0)
                    .map(|p| p.point.throughput)
                    .collect(),
            )
        })
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
/// none is always measured first (each still follows the same one, one round in n aside).
pub(crate) fn order(n: usize, round: u32) -> Vec<usize> {
    (0..n).map(|i| (i + round as usize - 1) % n).collect()
}

/// Sets up every configuration of `wl` that can run, warms each, and measures each in turn for
/// `timing.round_s` closed loop, `rounds` times over; then those answered in XDP as many times
/// again open loop at their [`equal_rate`]. Appends each point to `points` as it is measured, so
/// that an error keeps what was measured before it.
pub(crate) fn capacity_rounds(
    opts: &PaperOpts,
    timing: &Timing,
    wl: &Workload,
    rounds: u32,
    points: &mut Vec<RoundPoint>,
) -> Result<()> {
    let mut rigs = Rigs(Vec::new());
    let cfg = wl.run_config(opts.inflight);
    // no busy loop per rig: one serves them all (below), or each would run while another is
    // measured
    let rig_opts = PaperOpts {
        server_awake: false,
        ..opts.clone()
    };
    for &setup in &wl.setups {
        if crate::run::missing(opts, setup).is_some() {
            continue;
        }
        eprintln!("inklab: rounds: setting up {} ...", setup.label());
        let rig = Rig::new(&rig_opts, setup).with_context(|| setup.label().to_string())?;
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
    let setups: Vec<Setup> = rigs.0.iter().map(|(s, _)| *s).collect();
    // One configuration's run: its server resumed, 1 s of warm-up, the measurement.
    let mut run = |i: usize, rate: Option<f64>| -> Result<Point> {
        let (setup, rig) = &mut rigs.0[i];
        pause(rig, false)?;
        rig.spinner = spinner.take();
        let r = (|| {
            let mut c = cfg.clone();
            c.duration = ROUND_WARM;
            rig.load(&c).context("warm-up")?;
            c.duration = Duration::from_secs_f64(timing.round_s);
            c.rate = rate;
            rig.measure(&c)
        })();
        spinner = rig.spinner.take();
        pause(rig, true)?;
        let p = r.with_context(|| setup.label().to_string())?;
        eprintln!(
            "  {}: {:.0} ns/req on CPU{SERVER_CPU} at {:.0} req/s{}",
            setup.label(),
            p.server_ns_per_req,
            p.throughput,
            if rate.is_some() { " (open loop)" } else { "" }
        );
        Ok(p)
    };
    for round in 1..=rounds {
        eprintln!("inklab: round {round} of {rounds}, closed loop");
        for i in order(setups.len(), round) {
            let point = run(i, None).with_context(|| format!("round {round}"))?;
            points.push(RoundPoint {
                round,
                setup: setups[i],
                label: setups[i].label().into(),
                point,
                at_rate: None,
            });
        }
    }
    let Some(rate) = equal_rate(points) else {
        return Ok(());
    };
    for round in 1..=rounds {
        eprintln!("inklab: round {round} of {rounds}, open loop at {rate:.0} req/s");
        for i in order(setups.len(), round) {
            if !answered_in_xdp(setups[i]) {
                continue;
            }
            let p = run(i, Some(rate)).with_context(|| format!("round {round} at one rate"))?;
            if let Some(rp) = points
                .iter_mut()
                .find(|p| p.round == round && p.setup == setups[i])
            {
                rp.at_rate = Some(p);
            }
        }
    }
    Ok(())
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

    /// A round's point of `setup` whose only figure is its closed-loop throughput.
    fn at(round: u32, setup: Setup, throughput: f64) -> RoundPoint {
        let mut point: Point = serde_json::from_value(serde_json::json!({
            "offered_rate": null, "inflight": 32, "duration_s": 4.0, "throughput": 0.0,
            "requests": 0, "responses": 0, "lost": 0, "loss_ratio": 0.0, "errors": 0, "hits": 0,
            "latency": serde_json::to_value(inkbench::LatencySummary::default()).unwrap(),
            "server_cpu_busy": 0.0, "server_cpu_steal": 0.0, "server_ns_per_req": 0.0,
            "attributed_ns_per_req": 0.0, "capacity_per_core": 0.0, "kernel": null,
            "kernel_hit_ratio": null
        }))
        .unwrap();
        point.throughput = throughput;
        RoundPoint {
            round,
            setup,
            label: setup.label().into(),
            point,
            at_rate: None,
        }
    }

    #[test]
    fn equal_rate_is_below_the_slowest_xdp_configurations_median() {
        let mut points = Vec::new();
        for (round, mi) in [(1, 176_883.0), (2, 74_891.0), (3, 180_000.0)] {
            points.push(at(round, Setup::Memcached, 115_000.0));
            points.push(at(round, Setup::MemcachedInkcache, mi));
            points.push(at(round, Setup::XdpEcho, 260_000.0));
            points.push(at(round, Setup::InkcachedInkcache, 220_000.0));
        }
        // memcached+inkcache's median is 176,883 (its one slow round does not set the rate):
        // 0.9 of it, down to a thousand; the server alone does not count
        assert_eq!(equal_rate(&points), Some(159_000.0));
        let servers: Vec<_> = points
            .iter()
            .filter(|p| p.setup == Setup::Memcached)
            .cloned()
            .collect();
        assert_eq!(equal_rate(&servers), None);
        assert_eq!(equal_rate(&[at(1, Setup::XdpEcho, 0.0)]), None);
        assert_eq!(equal_rate(&[at(1, Setup::XdpEcho, 500.0)]), Some(1000.0));
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }
}
