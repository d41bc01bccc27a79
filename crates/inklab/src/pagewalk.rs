//! `inklab pagewalk`: what a cache miss costs an XDP program by the pages its map lives in, on a
//! CPU that has just slept or not (docs/results/hitcost.md, nineteenth run).
//!
//! `bpf/lab/pagewalk.bpf.c` follows chains of dependent reads through a large array map (vmalloc,
//! 4 KiB pages: how the kernel cache's sets and log are allocated) and through an array of small
//! array maps (kmalloc, the direct map's 1 GiB or 2 MiB pages). Each chain visits `lines` lines
//! drawn at random from its map's 60-64 MiB, in random order. The two programs run in turn with
//! `BPF_PROG_TEST_RUN` on one CPU (the calling thread is pinned there), each run after the CPU
//! slept for the given time (a VM's vCPU halts then) or at once.

use std::collections::BTreeSet;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType, ProgramInput, ProgramMut};
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};

use crate::skel::pagewalk;

/// Runs dropped before the medians (the chains' first pass).
const WARM_RUNS: usize = 20;
const LINE_BYTES: usize = 64;
const XDP_PASS: u32 = 2;

/// What to measure.
#[derive(Clone, Debug)]
pub struct PagewalkOpts {
    /// Lines in each chain (at most the smaller map's).
    pub lines: usize,
    /// How long the CPU sleeps before each run, in microseconds; 0: it does not.
    pub sleeps_us: Vec<u64>,
    /// Runs of each program per sleep time (after [`WARM_RUNS`]).
    pub runs: usize,
    /// The CPU the calling thread is pinned to, where the programs run.
    pub cpu: usize,
}

/// One sleep time's result: the median ns per read of each map's chain.
#[derive(Clone, Debug)]
pub struct PagewalkRow {
    pub sleep_us: u64,
    /// Through the large array map (4 KiB pages).
    pub vmalloc_ns: f64,
    /// Through the small inner maps (the direct map's pages).
    pub kmalloc_ns: f64,
}

/// `n` distinct indices below `below`, 0 first (where the programs start), the rest shuffled.
fn chain(rng: &mut StdRng, below: u32, n: usize) -> Vec<u32> {
    let mut set = BTreeSet::from([0u32]);
    while set.len() < n {
        set.insert(rng.gen_range(0..below));
    }
    let mut v: Vec<u32> = set.into_iter().collect();
    v[1..].shuffle(rng);
    v
}

/// Each line of chain `c` with the one after it (the last with the first): the cycle the
/// programs follow.
fn links(c: &[u32]) -> impl Iterator<Item = (u32, u32)> + '_ {
    c.iter()
        .zip(c.iter().cycle().skip(1))
        .map(|(&a, &b)| (a, b))
}

/// Where a chain's program must stand after `runs` runs of `loads` reads from `c[0]`.
fn end_of(c: &[u32], runs: usize, loads: u32) -> u32 {
    c[(runs * loads as usize) % c.len()]
}

/// A line of the chain pointing at `next`.
fn line(next: u32) -> [u8; LINE_BYTES] {
    let mut l = [0u8; LINE_BYTES];
    l[..4].copy_from_slice(&next.to_ne_bytes());
    l
}

/// Median ns of `prog`'s runs in `ns`, per read.
fn median_per_read(ns: &mut [u64], loads: u32) -> f64 {
    ns.sort_unstable();
    ns[ns.len() / 2] as f64 / f64::from(loads)
}

fn run(prog: &ProgramMut) -> Result<u64> {
    let data = [0u8; 64];
    let out = prog
        .test_run(ProgramInput {
            data_in: Some(&data),
            repeat: 1,
            ..Default::default()
        })
        .context("BPF_PROG_TEST_RUN")?;
    if out.return_value != XDP_PASS {
        return Err(anyhow!(
            "a chain broke (the program returned {})",
            out.return_value
        ));
    }
    Ok(out.duration.as_nanos() as u64)
}

/// Loads the programs, builds both chains and measures each sleep time in turn.
pub fn pagewalk(o: &PagewalkOpts) -> Result<Vec<PagewalkRow>> {
    if o.lines < 2 || o.runs == 0 || o.sleeps_us.is_empty() {
        return Err(anyhow!(
            "pagewalk needs at least 2 lines, 1 run and 1 sleep time"
        ));
    }
    crate::topology::pin_self(o.cpu)?;
    // each run's time is the kernel's: with the statistics on it includes their clock reads
    let _stats_off = crate::cost::StatsSysctlOff::new()?;
    let mut obj = MaybeUninit::uninit();
    let open = pagewalk::PagewalkSkelBuilder::default()
        .open(&mut obj)
        .context("opening the pagewalk BPF object")?;
    let skel = open
        .load()
        .map_err(|e| anyhow!("loading the pagewalk BPF object (verifier or kernel): {e}"))?;
    let ro = skel.maps.rodata_data.context("no rodata")?;
    let (loads, inner_lines) = (ro.walk_loads, ro.inner_lines);
    let flat_lines = skel.maps.flat.max_entries();
    let inner_maps = skel.maps.outer.max_entries();
    let outer_lines = inner_lines * inner_maps;
    if o.lines > flat_lines.min(outer_lines) as usize {
        return Err(anyhow!("at most {} lines", flat_lines.min(outer_lines)));
    }
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let mut inner = Vec::with_capacity(inner_maps as usize);
    let (mut keys, mut fds) = (Vec::new(), Vec::new());
    for m in 0..inner_maps {
        let h = MapHandle::create(
            MapType::Array,
            Some("pagewalk_in"),
            4,
            LINE_BYTES as u32,
            inner_lines,
            &opts,
        )
        .context("creating an inner map")?;
        keys.extend_from_slice(&m.to_ne_bytes());
        fds.extend_from_slice(&h.as_fd().as_raw_fd().to_ne_bytes());
        inner.push(h);
    }
    // in one batch: the kernel waits for an RCU grace period after each update of a map of maps
    // (~8 ms), once after a batch
    skel.maps
        .outer
        .update_batch(&keys, &fds, inner_maps, MapFlags::ANY, MapFlags::ANY)
        .context("filling the outer map")?;
    let mut rng = StdRng::seed_from_u64(1);
    let flat_chain = chain(&mut rng, flat_lines, o.lines);
    for (at, next) in links(&flat_chain) {
        skel.maps
            .flat
            .update(&at.to_ne_bytes(), &line(next), MapFlags::ANY)
            .context("writing the flat chain")?;
    }
    let outer_chain = chain(&mut rng, outer_lines, o.lines);
    for (at, next) in links(&outer_chain) {
        let (m, e) = (at / inner_lines, at % inner_lines);
        inner[m as usize]
            .update(&e.to_ne_bytes(), &line(next), MapFlags::ANY)
            .context("writing the inner maps' chain")?;
    }
    let mut rows = Vec::new();
    for &s in &o.sleeps_us {
        let (mut flat, mut outer) = (Vec::new(), Vec::new());
        for r in 0..WARM_RUNS + o.runs {
            for (prog, out) in [
                (&skel.progs.walk_flat, &mut flat),
                (&skel.progs.walk_outer, &mut outer),
            ] {
                if s > 0 {
                    std::thread::sleep(Duration::from_micros(s));
                }
                let ns = run(prog)?;
                if r >= WARM_RUNS {
                    out.push(ns);
                }
            }
        }
        rows.push(PagewalkRow {
            sleep_us: s,
            vmalloc_ns: median_per_read(&mut flat, loads),
            kmalloc_ns: median_per_read(&mut outer, loads),
        });
    }
    // every read went where the chain leads: what was timed were the chains' misses
    let bss = skel.maps.bss_data.as_deref().context("no .bss")?;
    let runs = o.sleeps_us.len() * (WARM_RUNS + o.runs);
    for (name, stopped, c) in [
        ("flat", bss.at_flat, &flat_chain),
        ("outer", bss.at_outer, &outer_chain),
    ] {
        let end = end_of(c, runs, loads);
        if stopped != end {
            return Err(anyhow!(
                "the {name} chain stopped at line {stopped}, not {end}"
            ));
        }
    }
    Ok(rows)
}

/// The rows as a markdown table.
pub fn table(o: &PagewalkOpts, rows: &[PagewalkRow]) -> String {
    let mut t = format!(
        "{} lines a chain, median of {} runs, ns per read\n\n\
         | CPU asleep before each run | 4 KiB pages (one vmalloc'd array) | direct map (kmalloc'd inner maps) | direct map / 4 KiB |\n\
         | ---: | ---: | ---: | ---: |\n",
        o.lines, o.runs
    );
    for r in rows {
        let slept = if r.sleep_us == 0 {
            "no".to_string()
        } else {
            format!("{} us", r.sleep_us)
        };
        t += &format!(
            "| {slept} | {:.1} | {:.1} | {:.2} |\n",
            r.vmalloc_ns,
            r.kmalloc_ns,
            r.kmalloc_ns / r.vmalloc_ns
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_starts_at_zero_and_visits_distinct_lines() {
        let mut rng = StdRng::seed_from_u64(7);
        let c = chain(&mut rng, 1000, 300);
        assert_eq!(c[0], 0);
        assert_eq!(c.len(), 300);
        assert_eq!(c.iter().collect::<BTreeSet<_>>().len(), 300);
        assert!(c.iter().all(|&i| i < 1000));
    }

    #[test]
    fn the_links_close_the_cycle_and_the_end_is_counted_in_reads() {
        let c = [0, 7, 3];
        assert_eq!(links(&c).collect::<Vec<_>>(), [(0, 7), (7, 3), (3, 0)]);
        assert_eq!(end_of(&c, 0, 16), 0);
        assert_eq!(end_of(&c, 1, 16), 7); // 16 reads: 5 times round, one line on
        assert_eq!(end_of(&c, 2, 16), 3);
    }

    #[test]
    fn the_median_is_per_read() {
        assert_eq!(median_per_read(&mut [160, 16, 320], 16), 10.0);
    }
}
