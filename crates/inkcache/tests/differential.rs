//! The kernel against the memcached it fronts, over seeded random traffic. One client writes in
//! every form memcached takes (text, meta and binary commands; TCP and UDP; noreply and quiet;
//! odd spacing, bare line feeds, bad arguments, junk lines, values too large, commands split
//! across segments) and reads over UDP (get, gets, mg: the kernel answers them when it can). Each
//! read is then asked again over TCP, which the kernel never answers. One operation at a time,
//! each write finished (a no-op answered behind it) before the next, so memcached's answer over
//! TCP is what the kernel's must be: the same bytes. Reads near an expiry (a TTL's or a delayed
//! flush_all's, within memcached's one-second clock and its drift) are not compared.
//!
//! `DIFF_SEED=<n>` runs that seed alone; `DIFF_OPS=<n>` sets the operations per seed (a soak;
//! from 5000 on, flush_all is sometimes delayed); `DIFF_DEBUG=1` prints inkcache's counters after
//! each seed. A failure names the seed and shows the operations before it, and those on its keys.
//! The client is in tests/diff/.

mod common;
mod diff;

use common::*;
use diff::{Client, Stats};

const SEEDS: [u64; 3] = [11, 12, 13];
const OPS: usize = 1200;

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| {
        v.parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {v:?}"))
    })
}

/// One seed's run against a fresh memcached with inkcache attached (`attach`: its extra
/// options): the first difference, if any, the run's counts, and how many reads the kernel
/// answered.
fn run_seed(seed: u64, ops: usize, attach: &[&str]) -> (Result<(), String>, Stats, u64) {
    let rig = Rig::attached(attach).unwrap();
    let (result, stats) = rig.client(move || {
        let mut c = Client::new(seed, "");
        (c.run(ops), c.stats)
    });
    let hits = rig.stat("hits") + rig.stat("tc_hits");
    eprintln!("seed {seed}: {stats:?}, {hits} answered by the kernel");
    if std::env::var("DIFF_DEBUG").is_ok() {
        eprintln!("{}", rig.stats());
    }
    (result, stats, hits)
}

#[test]
fn the_kernel_answers_what_memcached_would() {
    let seeds: Vec<u64> = match env_num("DIFF_SEED") {
        Some(s) => vec![s],
        None => SEEDS.to_vec(),
    };
    let ops = env_num("DIFF_OPS").map_or(OPS, |n| n as usize);
    for seed in seeds {
        let (result, stats, hits) = run_seed(seed, ops, &[]);
        if let Err(e) = result {
            panic!("seed {seed} (DIFF_SEED={seed} replays it): {e}");
        }
        // the kernel answered a fair share: the comparison was of its answers, not memcached's
        assert!(
            hits * 10 >= stats.compared,
            "seed {seed}: the kernel answered {hits} of {} reads compared: {stats:?}",
            stats.compared
        );
    }
}

/// The comparison finds a kernel cache that serves what memcached no longer holds: the writes
/// are seen but nothing is invalidated.
#[test]
fn a_kernel_cache_blind_to_writes_is_caught() {
    let (result, stats, hits) = run_seed(SEEDS[0], OPS, &["--debug-no-invalidation"]);
    let e = result.expect_err("a cache that invalidates nothing went unnoticed");
    assert!(hits > 0, "{stats:?}");
    eprintln!(
        "caught, as it should be: {}",
        e.lines().take(3).collect::<Vec<_>>().join(" / ")
    );
}

/// Two clients at once, each on keys of its own (and no flush_all, which would reach the other's
/// keys): each still reads what memcached holds, the kernel answering both, on both CPUs.
/// `DIFF_SEED=<n>` runs seeds n and n + 1.
#[test]
fn two_clients_at_once_each_read_what_memcached_holds() {
    let first = env_num("DIFF_SEED").unwrap_or(21);
    let ops = env_num("DIFF_OPS").map_or(OPS, |n| n as usize);
    let rig = Rig::attached(&[]).unwrap();
    let runs = rig.client(|| {
        std::thread::scope(|sc| {
            let clients: Vec<_> = [first, first + 1]
                .into_iter()
                .map(|seed| {
                    sc.spawn(move || {
                        let mut c = Client::new(seed, &format!("c{seed}-"));
                        (seed, c.run(ops), c.stats)
                    })
                })
                .collect();
            clients
                .into_iter()
                .map(|c| c.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    let hits = rig.stat("hits") + rig.stat("tc_hits");
    let mut compared = 0;
    for (seed, result, stats) in runs {
        eprintln!("seed {seed} (with the other): {stats:?}");
        if let Err(e) = result {
            panic!("seed {seed} (beside the other client): {e}");
        }
        compared += stats.compared;
    }
    eprintln!("{hits} answered by the kernel");
    assert!(
        hits * 10 >= compared,
        "the kernel answered {hits} of {compared}"
    );
}
