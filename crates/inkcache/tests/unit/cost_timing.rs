//! How the cost measurements (cost.rs) time a program under BPF_PROG_TEST_RUN: one round of runs,
//! the best of several rounds, rows that take turns round by round, and two test processes that
//! take turns so (scripts/cost-ab.sh).
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::*;

/// Two test processes taking turns round by round (scripts/cost-ab.sh compares two builds so):
/// with `COST_LOCKSTEP=IN,OUT` (two FIFOs), each round of [`time_runs`] starts once a byte can be
/// read from IN and writes one to OUT when done; two processes whose FIFOs are crossed then
/// measure alternately, a round (milliseconds) apart, and the host's drift between their rounds
/// is small. With `COST_ROUND_LOG=FILE`, each round's mean is appended to FILE as
/// "<measurement> <round> <ns per run>" (the measurement: time_runs' calls counted from 0).
pub(super) struct Lockstep {
    turn: Option<(File, File)>,
    log: Option<File>,
    pub calls: u32,
}

impl Lockstep {
    pub fn get() -> MutexGuard<'static, Lockstep> {
        static L: OnceLock<Mutex<Lockstep>> = OnceLock::new();
        let l = L.get_or_init(|| {
            // read and write: opening a FIFO so never waits for the other end
            let open = |p: &str| {
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(p)
                    .unwrap_or_else(|e| panic!("COST_LOCKSTEP: opening {p}: {e}"))
            };
            let turn = std::env::var("COST_LOCKSTEP").ok().map(|v| {
                let (i, o) = v.split_once(',').expect("COST_LOCKSTEP=IN,OUT");
                (open(i), open(o))
            });
            let log = std::env::var("COST_ROUND_LOG").ok().map(|p| {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                    .unwrap_or_else(|e| panic!("COST_ROUND_LOG: opening {p}: {e}"))
            });
            Mutex::new(Lockstep {
                turn,
                log,
                calls: 0,
            })
        });
        l.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wait(&mut self) {
        if let Some((i, _)) = &mut self.turn {
            let mut b = [0u8];
            i.read_exact(&mut b)
                .expect("COST_LOCKSTEP: waiting for the turn");
        }
    }

    pub fn done(&mut self, round: u32, ns: u128) {
        if let Some(f) = &mut self.log {
            writeln!(f, "{} {round} {ns}", self.calls).expect("COST_ROUND_LOG: writing");
        }
        if let Some((_, o)) = &mut self.turn {
            o.write_all(b"t").expect("COST_LOCKSTEP: passing the turn");
        }
    }
}

/// Says once, on stderr, if `kernel.bpf_stats_enabled` is on: every run then includes the
/// statistics' two clock reads (~70 ns on the AMD VM of docs/results/hitcost.md, twenty-third run,
/// where an earlier run had left it on).
pub(super) fn stats_warning() {
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| {
        if inkcache::sys::bpf_stats_sysctl_on() {
            eprintln!(
                "WARNING: kernel.bpf_stats_enabled is 1: each run's time includes the BPF \
                 statistics' clock reads (sysctl -w kernel.bpf_stats_enabled=0 to measure)"
            )
        }
    });
}

/// Runs `prog` on `frames`, each `runs_each` times: the mean ns per run and how many runs
/// returned XDP_TX. With `want`, asserts every run returned it (`ctx` says what the state was).
/// `before` is called before each run, outside its timing (the kernel's).
pub(super) fn round_mean(
    prog: &libbpf_rs::ProgramMut,
    frames: &[&[u8]],
    runs_each: u32,
    want: Option<u32>,
    ctx: &dyn Fn() -> String,
    before: Option<&dyn Fn()>,
) -> (u128, usize) {
    let (mut total, mut tx) = (0u128, 0);
    for frame in frames {
        for _ in 0..runs_each {
            if let Some(before) = before {
                before();
            }
            let input = libbpf_rs::ProgramInput {
                data_in: Some(frame),
                repeat: 1,
                ..Default::default()
            };
            let o = prog.test_run(input).unwrap();
            if let Some(want) = want {
                assert_eq!(o.return_value, want, "{}", ctx());
            }
            tx += usize::from(o.return_value == XDP_TX);
            total += o.duration.as_nanos();
        }
    }
    (total / (frames.len() as u128 * u128::from(runs_each)), tx)
}

/// `rounds`, or `COST_ROUNDS` if set.
pub(super) fn cost_rounds(rounds: u32) -> u32 {
    std::env::var("COST_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(rounds)
}

/// Times `prog` on `frames`, each run `runs_each` times a round: the mean ns per run of the best
/// of `rounds` rounds (`COST_ROUNDS` if set), and how many runs of the last round returned
/// XDP_TX. With `want`, asserts every run returned it (`ctx` says what the state was). `before`
/// is called before each run, outside its timing (the kernel's).
pub(super) fn time_runs(
    prog: &libbpf_rs::ProgramMut,
    frames: &[&[u8]],
    runs_each: u32,
    rounds: u32,
    want: Option<u32>,
    ctx: &dyn Fn() -> String,
    before: Option<&dyn Fn()>,
) -> (u128, usize) {
    let mut best = u128::MAX;
    let mut tx = 0;
    let mut step = Lockstep::get();
    stats_warning();
    for round in 0..cost_rounds(rounds) {
        step.wait();
        let (mean, t) = round_mean(prog, frames, runs_each, want, ctx, before);
        tx = t;
        step.done(round, mean);
        best = best.min(mean);
    }
    step.calls += 1;
    (best, tx)
}

/// One row of a stage table: a program, the frames it runs, the action each must return.
pub(super) struct StageRow<'a> {
    pub name: String,
    pub prog: &'a libbpf_rs::ProgramMut<'a>,
    pub frames: Vec<&'a [u8]>,
    pub want: Option<u32>,
}

/// The rows measured in turns: `rounds` rounds (`COST_ROUNDS` if set), each timing every row once
/// (`runs_each` runs of each of its frames), the rows' order rotated from one round to the next.
/// The host's speed drifts within a sitting (docs/results/hitcost.md, twenty-ninth and
/// thirty-ninth runs: a later stage measured cheaper than an earlier one when each was measured
/// in a stretch of its own); in turns, a drift moves every row alike, and a stage's cost is the
/// difference of two rows in the same round. Returns each row's round means.
pub(super) fn rows_in_turns(rows: &[StageRow], runs_each: u32, rounds: u32) -> Vec<Vec<u128>> {
    stats_warning();
    let mut means = vec![Vec::new(); rows.len()];
    for round in 0..cost_rounds(rounds) as usize {
        for k in 0..rows.len() {
            let i = (k + round) % rows.len();
            let r = &rows[i];
            let ctx = || format!("{}: the action of every run", r.name);
            means[i].push(round_mean(r.prog, &r.frames, runs_each, r.want, &ctx, None).0);
        }
    }
    means
}

/// The `q`-quantile (0..=1) of `v`, by rank.
pub(super) fn quantile<T: Copy + Ord>(v: &[T], q: f64) -> T {
    let mut s = v.to_vec();
    s.sort_unstable();
    s[((s.len() - 1) as f64 * q).round() as usize]
}

/// Prints [`rows_in_turns`]' means as a table: each row's median and best round, and what it adds
/// to the row before it, from the two rows' differences round by round (median, quartiles, and in
/// how many rounds it came out cheaper than the row before: a stage cannot cost less than none,
/// so many such rounds say the host moved faster than the rows took turns).
pub(super) fn print_rows_in_turns(rows: &[StageRow], means: &[Vec<u128>]) {
    let n = means[0].len();
    println!(
        "{n} rounds, the rows in turns; a row's cost over the one before from their difference in \
         each round"
    );
    println!(
        "| stage | median ns | best ns | this stage ns, median | quartiles | rounds below 0 |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for (i, r) in rows.iter().enumerate() {
        let m = &means[i];
        let (med, best) = (quantile(m, 0.5), *m.iter().min().unwrap());
        if i == 0 {
            println!("| {} | {med} | {best} | | | |", r.name);
            continue;
        }
        let d: Vec<i128> = m
            .iter()
            .zip(&means[i - 1])
            .map(|(&a, &b)| a as i128 - b as i128)
            .collect();
        println!(
            "| {} | {med} | {best} | {} | {}..{} | {} of {n} |",
            r.name,
            quantile(&d, 0.5),
            quantile(&d, 0.25),
            quantile(&d, 0.75),
            d.iter().filter(|&&x| x < 0).count()
        );
    }
}
