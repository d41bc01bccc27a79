//! Ratios, goals and the markdown report of the paper scenario.

use std::fmt::Write as _;

use crate::rounds::median;
use crate::{Goal, PaperResults, Point, Setup, SetupResult};

fn find<'a>(res: &'a PaperResults, wl: &str, s: Setup) -> Option<&'a SetupResult> {
    res.results
        .iter()
        .find(|r| r.workload == wl && r.setup == s && r.max.is_some())
}

fn max_of<'a>(res: &'a PaperResults, wl: &str, s: Setup) -> Option<&'a Point> {
    find(res, wl, s).and_then(|r| r.max.as_ref())
}

/// The configurations compared, each against the second.
const PAIRS: [(Setup, Setup); 6] = [
    (Setup::MemcachedInkcache, Setup::Memcached),
    (Setup::MemcachedInkcache, Setup::XdpEcho),
    (Setup::Inkcached, Setup::Memcached),
    (Setup::InkcachedInkcache, Setup::Inkcached),
    (Setup::InkcachedInkcache, Setup::Memcached),
    (Setup::InkcachedInkcache, Setup::XdpEcho),
];

/// `a` against `b` as ratio keys name it: `memcachedinkcache/xdpecho`.
fn pair_name(a: Setup, b: Setup) -> String {
    format!("{a:?}/{b:?}").to_lowercase()
}

fn ratio_key(wl: &str, what: &str, a: Setup, b: Setup) -> String {
    format!("{wl}.{what}.{}", pair_name(a, b))
}

/// Which run of a round: the closed loop, or the open loop at the equal rate.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    Max,
    AtRate,
}

/// `setup`'s point in interleaved round `round`.
fn round_point(res: &PaperResults, round: u32, setup: Setup, run: Run) -> Option<&Point> {
    res.rounds
        .iter()
        .find(|r| r.round == round && r.setup == setup)
        .and_then(|r| match run {
            Run::Max => Some(&r.point),
            Run::AtRate => r.at_rate.as_ref(),
        })
        .filter(|p| p.responses > 0)
}

/// The rounds measured, in order.
fn round_numbers(res: &PaperResults) -> std::collections::BTreeSet<u32> {
    res.rounds.iter().map(|r| r.round).collect()
}

/// Capacity of `a` against `b` in interleaved round `round`, if both ran in it (`attributed`: on
/// the server tasks' own CPU time).
fn round_ratio(
    res: &PaperResults,
    round: u32,
    (a, b): (Setup, Setup),
    attributed: bool,
    run: Run,
) -> Option<f64> {
    let cost = |p: &Point| {
        if attributed {
            p.attributed_ns_per_req
        } else {
            p.server_ns_per_req
        }
    };
    let (ca, cb) = (
        cost(round_point(res, round, a, run)?),
        cost(round_point(res, round, b, run)?),
    );
    (ca > 0.0 && cb > 0.0).then(|| cb / ca)
}

/// [`round_ratio`] in each round where both ran.
fn round_ratios(res: &PaperResults, a: Setup, b: Setup, attributed: bool, run: Run) -> Vec<f64> {
    round_numbers(res)
        .into_iter()
        .filter_map(|r| round_ratio(res, r, (a, b), attributed, run))
        .collect()
}

/// Median, min and max of `v`; None if empty.
fn spread(v: &[f64]) -> Option<(f64, f64, f64)> {
    let m = median(v.to_vec())?;
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    Some((m, lo, hi))
}

/// Fills `ratios` and `goals` from the results.
pub fn derive(res: &mut PaperResults) {
    let mut ratios = std::collections::BTreeMap::new();
    let kinds = [
        ("capacity", false, Run::Max),
        ("capacity_attributed", true, Run::Max),
        ("capacity_equal_rate", false, Run::AtRate),
        ("capacity_attributed_equal_rate", true, Run::AtRate),
    ];
    for (a, b) in PAIRS {
        for (what, attributed, run) in kinds {
            if let Some((m, lo, hi)) = spread(&round_ratios(res, a, b, attributed, run)) {
                ratios.insert(
                    ratio_key("target", &format!("{what}_rounds_median"), a, b),
                    m,
                );
                ratios.insert(ratio_key("target", &format!("{what}_rounds_min"), a, b), lo);
                ratios.insert(ratio_key("target", &format!("{what}_rounds_max"), a, b), hi);
            }
        }
    }
    for wl in res.workloads.iter().map(|w| w.name.clone()) {
        for (a, b) in PAIRS {
            let (Some(pa), Some(pb)) = (max_of(res, &wl, a), max_of(res, &wl, b)) else {
                continue;
            };
            if pa.responses == 0 || pb.responses == 0 {
                continue;
            }
            let key = |what: &str| ratio_key(&wl, what, a, b);
            if pb.throughput > 0.0 {
                ratios.insert(key("throughput"), pa.throughput / pb.throughput);
            }
            if pa.server_ns_per_req > 0.0 {
                // capacity of one server core: the inverse ratio of the costs
                ratios.insert(key("capacity"), pb.server_ns_per_req / pa.server_ns_per_req);
                ratios.insert(
                    key("ns_per_req"),
                    pa.server_ns_per_req / pb.server_ns_per_req,
                );
            }
            if pa.attributed_ns_per_req > 0.0 && pb.attributed_ns_per_req > 0.0 {
                ratios.insert(
                    key("capacity_attributed"),
                    pb.attributed_ns_per_req / pa.attributed_ns_per_req,
                );
            }
        }
    }
    let g = |k: &str| ratios.get(k).copied();
    // If other jobs ran on the server CPU (a shared machine), its busy time is not the server's:
    // then the cost basis is the server tasks' own CPU time instead.
    let other = [
        ("target", Setup::Memcached),
        ("target", Setup::MemcachedInkcache),
        ("target", Setup::XdpEcho),
        ("nontarget", Setup::Memcached),
        ("nontarget", Setup::MemcachedInkcache),
    ]
    .iter()
    .filter_map(|(w, s)| max_of(res, w, *s))
    .chain(res.rounds.iter().map(|r| &r.point))
    .map(Point::cpu_other_share)
    .fold(0.0, f64::max);
    let attributed = other > 0.25;
    let basis = if attributed {
        format!(
            "cost basis: the server tasks' own CPU time, because up to {:.0}% of CPU1's busy \
             time belonged to other jobs",
            other * 100.0
        )
    } else {
        "cost basis: CPU1 busy time".to_string()
    };
    let basis = if res.meta.server_awake {
        format!("{basis}, less a busy loop's that kept CPU1 from halting (`--server-awake`)")
    } else {
        basis
    };
    let what = if attributed {
        "capacity_attributed"
    } else {
        "capacity"
    };
    let cap = |wl: &str, pair: &str| g(&format!("{wl}.{what}.{pair}"));
    // the target's capacity: the median of the interleaved rounds where there are some
    let target_cap = |a: Setup, b: Setup| {
        let pair = &pair_name(a, b);
        let v = round_ratios(res, a, b, attributed, Run::Max);
        let n = v.len();
        match spread(&v) {
            Some((m, lo, hi)) => (
                Some(m),
                format!(
                    "median of {n} interleaved round{} (range {lo:.2}-{hi:.2}; the main pass \
                     alone: {}); ",
                    if n == 1 { "" } else { "s" },
                    cap("target", pair).map_or("n/a".into(), |v| format!("{v:.2}"))
                ),
            ),
            None => (cap("target", pair), String::new()),
        }
    };
    let tput_x = g("target.throughput.memcachedinkcache/memcached");
    let (cap_x, rounds_x) = target_cap(Setup::MemcachedInkcache, Setup::Memcached);
    let (cap_floor, rounds_floor) = target_cap(Setup::MemcachedInkcache, Setup::XdpEcho);
    let equal_floor = median(round_ratios(
        res,
        Setup::MemcachedInkcache,
        Setup::XdpEcho,
        attributed,
        Run::AtRate,
    ))
    .map_or(String::new(), |v| {
        format!("; at one rate for both (rounds' open-loop runs), the median is {v:.2}")
    });
    let tput_floor = g("target.throughput.memcachedinkcache/xdpecho");
    let nt_tput = g("nontarget.throughput.memcachedinkcache/memcached");
    let nt_cap = cap("nontarget", "memcachedinkcache/memcached");
    let nt_lost = max_of(res, "nontarget", Setup::MemcachedInkcache).map(|p| p.loss_ratio);
    let f = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.2}"));
    res.goals = vec![
        Goal {
            goal: "target workload: memcached+inkcache serves >= 5x memcached's requests on one \
                   server core"
                .into(),
            target: ">= 5.0x".into(),
            measured: cap_x,
            met: cap_x.map(|v| v >= 5.0),
            note: format!(
                "per-core capacity ratio (inverse ratio of server ns/request); {rounds_x}{basis}; \
                 measured closed-loop throughput ratio {} (the client on CPU0 can be the limit)",
                f(tput_x)
            ),
        },
        Goal {
            goal: "target workload: memcached+inkcache within 20% of the XDP echo floor".into(),
            target: ">= 0.80".into(),
            measured: cap_floor,
            met: cap_floor.map(|v| v >= 0.8),
            note: format!(
                "per-core capacity ratio inkcache/echo; {rounds_floor}{basis}; throughput ratio \
                 {}{equal_floor}",
                f(tput_floor)
            ),
        },
        Goal {
            goal: "non-target workload: memcached+inkcache loses <= 3% of memcached's capacity"
                .into(),
            target: "<= 0.03".into(),
            measured: nt_cap.map(|v| 1.0 - v),
            met: nt_cap.map(|v| 1.0 - v <= 0.03),
            note: format!(
                "1 - per-core capacity ratio; {basis}; measured throughput ratio {}; packets \
                 lost {}",
                f(nt_tput),
                nt_lost.map_or("n/a".into(), |v| format!("{:.3}%", v * 100.0))
            ),
        },
    ];
    res.ratios = ratios;
}

fn num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn pct(v: f64) -> String {
    format!("{:.2}%", v * 100.0)
}

/// The interleaved rounds (`--rounds`): each configuration's server ns/request and the kernel
/// cache's capacity ratios, per round and their median; closed loop, then at the equal rate.
fn rounds_table(s: &mut String, res: &PaperResults) {
    if res.rounds.is_empty() && res.rounds_error.is_none() {
        return;
    }
    let _ = writeln!(s, "## Capacity in interleaved rounds (`target`)\n");
    let _ = writeln!(
        s,
        "Every configuration set up at once, then each measured in turn ({:.0} s closed loop \
         after 1 s of warm-up; the others' servers stopped meanwhile), the order rotated each \
         round: two configurations' runs start seconds apart, not the main pass's 20-50 s. Server \
         ns/request on CPU1, then the capacity ratios (the inverse ratio of those costs).\n",
        res.meta.timing.round_s
    );
    if let Some(e) = &res.rounds_error {
        let _ = writeln!(s, "**The rounds failed:** {}\n", e.replace('|', "/"));
    }
    rounds_run_table(s, res, Run::Max);
    let rate = res
        .rounds
        .iter()
        .find_map(|r| r.at_rate.as_ref()?.offered_rate);
    if let Some(rate) = rate {
        let _ = writeln!(
            s,
            "Then the configurations answered in XDP, as many rounds again, each run open loop \
             for {:.0} s at {rate:.0} req/s (0.9 of the slowest one's median closed-loop \
             throughput above). The closed loop runs the echo faster than the kernel cache (its \
             replies cost the client less), so its core wakes for larger batches; at one rate, \
             the costs compare at the same load.\n",
            res.meta.timing.round_s
        );
        rounds_run_table(s, res, Run::AtRate);
    }
}

/// One table of [`rounds_table`]: the configurations that have `run` in some round.
fn rounds_run_table(s: &mut String, res: &PaperResults, run: Run) {
    let rounds = round_numbers(res);
    let setups: Vec<Setup> = res
        .workloads
        .iter()
        .find(|w| w.name == "target")
        .map(|w| w.setups.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|&st| {
            rounds
                .iter()
                .any(|&r| round_point(res, r, st, run).is_some())
        })
        .collect();
    let pairs: Vec<(Setup, Setup)> = PAIRS
        .into_iter()
        .filter(|(a, b)| setups.contains(a) && setups.contains(b))
        .collect();
    if setups.is_empty() {
        return;
    }
    let mut head = "| round |".to_string();
    let mut rule = "|---|".to_string();
    for st in &setups {
        let _ = write!(head, " {} |", st.label());
        rule.push_str("---:|");
    }
    for (a, b) in &pairs {
        let _ = write!(head, " {} / {} |", a.label(), b.label());
        rule.push_str("---:|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    for &r in &rounds {
        let mut line = format!("| {r} |");
        for &st in &setups {
            let c = round_point(res, r, st, run).map_or("-".into(), |p| num(p.server_ns_per_req));
            let _ = write!(line, " {c} |");
        }
        for &pair in &pairs {
            let v = round_ratio(res, r, pair, false, run).map_or("-".into(), |v| format!("{v:.3}"));
            let _ = write!(line, " {v} |");
        }
        let _ = writeln!(s, "{line}");
    }
    let mut line = "| median |".to_string();
    for &st in &setups {
        let v: Vec<f64> = rounds
            .iter()
            .filter_map(|&r| round_point(res, r, st, run))
            .map(|p| p.server_ns_per_req)
            .collect();
        let _ = write!(line, " {} |", median(v).map_or("-".into(), num));
    }
    for &(a, b) in &pairs {
        let m = median(round_ratios(res, a, b, false, run));
        let _ = write!(
            line,
            " **{}** |",
            m.map_or("-".into(), |v| format!("{v:.3}"))
        );
    }
    let _ = writeln!(s, "{line}\n");
}

/// The markdown report.
pub fn markdown(res: &PaperResults) -> String {
    let mut s = String::new();
    let m = &res.meta;
    let _ = writeln!(
        s,
        "# inkcache paper scenario{}\n",
        if m.quick { " (quick)" } else { "" }
    );
    if m.stop_stage != 0 {
        let _ = writeln!(
            s,
            "**A stage measurement, not a paper run**: inkcache was attached with \
             `--debug-stop-stage {}` (XDP passes every get after that stage of the hit), so \
             only its per-program cost means anything (docs/results/hitcost.md).\n",
            m.stop_stage
        );
    }
    let default_keys = crate::default_keys(m.quick);
    if let Some(w) = res.workloads.iter().find(|w| w.keys != default_keys) {
        let _ = writeln!(
            s,
            "**Not a paper run**: the workloads ran over {} keys (`--keys`), not {default_keys}.\n",
            w.keys
        );
    }
    let _ = writeln!(
        s,
        "Kernel {}, {} CPUs ({}), {}; server threads `-t {}`; closed loop with {} UDP requests in \
         flight; {:.0} s per measurement; whole run {:.0} s.\n",
        m.kernel,
        m.cpus,
        m.cpu_model,
        m.memcached_version,
        m.server_threads,
        m.inflight,
        m.timing.measure_s,
        m.elapsed_s
    );
    if m.server_awake {
        let _ = writeln!(
            s,
            "**CPU1 kept awake** (`--server-awake`): a `SCHED_IDLE` thread yielding in a \
             loop ran on CPU1 throughout, so it never halted between packets, and its CPU time \
             is not counted as the server's. Costs are those of a core that a load saturates; \
             the default run measures a core that idles between the client's batches. A server \
             process can still wait behind the loop now and then: read the cost columns, not \
             its latency.\n"
        );
    }
    let _ = writeln!(s, "Topology: {}.\n", m.topology);
    for wl in &res.workloads {
        let rate = m.latency_rates.get(&wl.name).copied();
        let _ = writeln!(s, "## Workload `{}`\n\n{}.\n", wl.name, wl.description);
        let _ = writeln!(
            s,
            "| configuration | max req/s | CPU1 busy | server ns/req | req/s per core | \
             attributed ns/req | kernel hits | lost (max) | p50 us | p99 us | p99.9 us | \
             lost (latency) |"
        );
        let _ = writeln!(
            s,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for r in res.results.iter().filter(|r| r.workload == wl.name) {
            let Some(p) = &r.max else {
                let why = r
                    .skipped
                    .as_deref()
                    .or(r.error.as_deref())
                    .unwrap_or("not run");
                let _ = writeln!(
                    s,
                    "| {} | {} | | | | | | | | | | |",
                    r.label,
                    why.replace('|', "/")
                );
                continue;
            };
            let l = r.latency.as_ref();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label,
                num(p.throughput),
                pct(p.server_cpu_busy),
                num(p.server_ns_per_req),
                num(p.capacity_per_core),
                num(p.attributed_ns_per_req),
                p.kernel_hit_ratio.map_or("-".into(), pct),
                pct(p.loss_ratio),
                l.map_or("-".into(), |l| num(l.latency.p50_us)),
                l.map_or("-".into(), |l| num(l.latency.p99_us)),
                l.map_or("-".into(), |l| num(l.latency.p999_us)),
                l.map_or("-".into(), |l| pct(l.loss_ratio)),
            );
        }
        if let Some(rate) = rate {
            let _ = writeln!(
                s,
                "\nLatency columns: open loop at {rate:.0} req/s (half of memcached's max), \
                 measured from each request's scheduled send time."
            );
        }
        let _ = writeln!(s);
    }
    rounds_table(&mut s, res);
    let _ = writeln!(s, "## Ratios\n");
    let _ = writeln!(
        s,
        "`throughput` = measured max req/s ratio; `capacity` = req/s one server core would \
         answer (inverse ratio of server ns/request); `ns_per_req` = server CPU per request ratio.\n"
    );
    let _ = writeln!(s, "| ratio | value |\n|---|---:|");
    for (k, v) in &res.ratios {
        let _ = writeln!(s, "| {k} | {v:.3} |");
    }
    let _ = writeln!(s, "\n## Goals\n");
    let _ = writeln!(
        s,
        "| goal | target | measured | met | note |\n|---|---|---:|---|---|"
    );
    for g in &res.goals {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            g.goal,
            g.target,
            g.measured.map_or("n/a".into(), |v| format!("{v:.3}")),
            match g.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "n/a",
            },
            g.note
        );
    }
    let profiled: Vec<_> = res
        .results
        .iter()
        .filter(|r| !r.bpf_profile.is_empty())
        .collect();
    if !profiled.is_empty() {
        let _ = writeln!(
            s,
            "\n## Per-program cost (BPF run-time statistics on, separate closed-loop run)\n"
        );
        let _ = writeln!(
            s,
            "| workload | configuration | program | type | ns/run | runs/request | server ns/req in that run |\n|---|---|---|---|---:|---:|---:|"
        );
        for r in profiled {
            for p in &r.bpf_profile {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {:.0} | {:.2} | {} |",
                    r.workload,
                    r.label,
                    p.name,
                    p.prog_type,
                    p.ns_per_run,
                    p.runs_per_req,
                    r.profile_server_ns_per_req.map_or("-".into(), num)
                );
            }
        }
    }
    if !res.memcaslap.is_empty() {
        let _ = writeln!(s, "\n## Cross-check with memcaslap -U\n");
        let _ = writeln!(
            s,
            "| configuration | command | TPS | kernel hits | error |\n|---|---|---:|---:|---|"
        );
        for c in &res.memcaslap {
            let _ = writeln!(
                s,
                "| {} | `{}` | {} | {} | {} |",
                c.label,
                c.command,
                c.tps.map_or("-".into(), num),
                c.kernel
                    .as_ref()
                    .and_then(|k| k.get("hits"))
                    .map_or("-".into(), |h| h.to_string()),
                c.error.as_deref().unwrap_or("")
            );
        }
        let _ = writeln!(
            s,
            "\nmemcaslap's own mix (90% gets, 10% sets, 64-byte values, its own keys) differs from \
             inkbench's `target` workload; compare orders of magnitude, not exact values."
        );
    }
    s
}
