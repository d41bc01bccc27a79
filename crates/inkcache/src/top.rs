//! `inkcache top`: the kernel cache's counters as rates, refreshed in the terminal.
use std::{
    fmt::Write as _,
    io::{IsTerminal, Write},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::Result;

use crate::{status, Error, Stats};

/// One attachment watched by `top` (interfaces attached together are one).
struct Watched {
    name: String,
    dir: PathBuf,
    layout: crate::Layout,
}

fn watched(iface: Option<&str>, all_netns: bool) -> Result<Vec<Watched>> {
    let mut v: Vec<Watched> = Vec::new();
    for r in status::rows(all_netns)? {
        let i = &r.info;
        if iface.is_some_and(|f| !i.group.iter().any(|g| g == f)) {
            continue;
        }
        let mut name = i.group.join(",");
        if all_netns {
            if let Some(ns) = &i.netns {
                name = format!("{name}@{ns}");
            }
        }
        if v.iter().any(|w| w.name == name) {
            continue;
        }
        v.push(Watched {
            name,
            dir: r.pin_dir.into(),
            layout: i.layout,
        });
    }
    if v.is_empty() {
        return Err(match iface {
            Some(f) => Error::NotAttached(f.into()).into(),
            None => {
                Error::Usage("inkcache is not attached in this network namespace".into()).into()
            }
        });
    }
    Ok(v)
}

/// One frame: a line per attachment with the rates between `before` and `now`.
fn frame(rows: &[(String, Stats, Stats, u64, u64)], secs: f64) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<16} {:>9} {:>9} {:>6} {:>8} {:>8} {:>8} {:>6} {:>7} {:>6} {:>8} {:>9} {:>6}",
        "IFACE",
        "HITS/s",
        "MISSES/s",
        "HIT%",
        "FILLS/s",
        "INVAL/s",
        "command",
        "flush",
        "restart",
        "unpars",
        "REFUSED/s",
        "ITEMS",
        "FULL%"
    );
    for (name, a, b, items, ways) in rows {
        let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
        let (hits, misses) = (
            b.hits.saturating_sub(a.hits),
            b.misses.saturating_sub(a.misses),
        );
        let ratio = if hits + misses == 0 {
            "-".to_string()
        } else {
            format!("{:.1}", 100.0 * hits as f64 / (hits + misses) as f64)
        };
        let refused = (b.refused + b.amp_refused).saturating_sub(a.refused + a.amp_refused);
        let _ = writeln!(
            o,
            "{:<16} {:>9.0} {:>9.0} {:>6} {:>8.0} {:>8.0} {:>8.0} {:>6.0} {:>7.0} {:>6.0} {:>8.0} {:>9} {:>6.1}",
            name,
            rate(a.hits, b.hits),
            rate(a.misses, b.misses),
            ratio,
            rate(a.fills, b.fills),
            rate(a.invalidations, b.invalidations),
            rate(a.inval_command, b.inval_command),
            rate(a.inval_flush, b.inval_flush),
            rate(a.inval_restart, b.inval_restart),
            rate(a.inval_unparsable, b.inval_unparsable),
            refused as f64 / secs,
            items,
            100.0 * *items as f64 / (*ways).max(1) as f64,
        );
    }
    o
}

/// Refreshes every `interval` until interrupted, or `count` frames. On a terminal each frame
/// replaces the last; otherwise (or with `batch`) frames follow each other, stamped with the
/// seconds since the start.
pub fn run(
    iface: Option<&str>,
    all_netns: bool,
    interval: Duration,
    count: Option<u64>,
    batch: bool,
) -> Result<()> {
    let w = watched(iface, all_netns)?;
    let read = || -> Result<Vec<Stats>> { w.iter().map(|x| Stats::read(&x.dir)).collect() };
    let tty = !batch && std::io::stdout().is_terminal();
    let start = Instant::now();
    let mut before = read()?;
    let mut t0 = Instant::now();
    let mut n = 0u64;
    while count.is_none_or(|c| n < c) {
        std::thread::sleep(interval);
        let now = read()?;
        let secs = t0.elapsed().as_secs_f64().max(1e-3);
        t0 = Instant::now();
        let mut rows = Vec::new();
        for ((x, a), b) in w.iter().zip(&before).zip(&now) {
            let items = status::fill(&x.dir, &x.layout)
                .map(|f| f.items)
                .unwrap_or(0);
            rows.push((x.name.clone(), *a, *b, items, x.layout.ways()));
        }
        let body = frame(&rows, secs);
        let mut out = std::io::stdout().lock();
        if tty {
            // home, clear; the header says how to leave
            write!(
                out,
                "\x1b[H\x1b[2Jinkcache top: per second over {:.1} s (Ctrl-C quits)\n\n{body}",
                secs
            )?;
        } else {
            writeln!(out, "--- {:.1} s\n{body}", start.elapsed().as_secs_f64())?;
        }
        out.flush()?;
        before = now;
        n += 1;
    }
    Ok(())
}
