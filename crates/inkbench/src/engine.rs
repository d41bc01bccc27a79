//! What the per-thread engines (UDP and TCP) share: the time window, the control handle, the
//! per-thread share of the load and its output.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use crate::report::{new_histogram, Counters};
use crate::workload::Op;

/// Shared with a running [`crate::run_with`]: progress, and a way to stop it early.
#[derive(Debug, Default)]
pub struct RunControl {
    /// Requests answered so far (all, warmup included).
    pub completed: AtomicU64,
    stop: AtomicBool,
    stopped_at: Mutex<Option<Instant>>,
}

impl RunControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// Ends the run early: no new requests; those in flight are still waited for.
    pub fn stop(&self) {
        let mut at = self.stopped_at.lock().unwrap_or_else(|e| e.into_inner());
        if at.is_none() {
            *at = Some(Instant::now());
        }
        self.stop.store(true, Ordering::Release);
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    pub fn stopped_at(&self) -> Option<Instant> {
        *self.stopped_at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The run's timeline: requests scheduled in `[measure_start, end)` are measured.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub start: Instant,
    pub measure_start: Instant,
    pub end: Instant,
}

impl Window {
    pub fn measured(&self, t: Instant) -> bool {
        t >= self.measure_start && t < self.end
    }
}

/// One thread's share of the load.
#[derive(Clone, Debug)]
pub struct ThreadPlan {
    pub index: usize,
    pub connections: usize,
    /// Closed loop: requests outstanding at most in this thread.
    pub inflight: usize,
    /// Open loop: this thread's rate and the time of its first request.
    pub rate: Option<(f64, Instant)>,
    pub seed: u64,
}

/// What one thread measured.
pub struct ThreadOut {
    pub counters: Counters,
    pub histogram: Histogram<u64>,
}

impl ThreadOut {
    pub fn new() -> Self {
        ThreadOut {
            counters: Counters::default(),
            histogram: new_histogram(),
        }
    }

    /// Records the latency of a measured op answered at `now`.
    pub fn record(&mut self, op: &Op, now: Instant) {
        if op.measured {
            let ns = now.saturating_duration_since(op.start).as_nanos() as u64;
            self.histogram.saturating_record(ns.max(1));
        }
    }
}

impl Default for ThreadOut {
    fn default() -> Self {
        Self::new()
    }
}

/// Waits until one of `fds` is ready (`events[i]`) or `until`; returns the ready flags.
pub fn wait(
    fds: &[BorrowedFd<'_>],
    events: &[PollFlags],
    until: Option<Instant>,
) -> Result<Vec<PollFlags>> {
    let mut pfds: Vec<PollFd> = fds
        .iter()
        .zip(events)
        .map(|(fd, ev)| PollFd::new(*fd, *ev))
        .collect();
    let timeout = until.map(|t| {
        let d = t.saturating_duration_since(Instant::now());
        TimeSpec::from_duration(d.min(Duration::from_secs(1)))
    });
    match ppoll(&mut pfds, timeout, None) {
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(e).context("ppoll"),
    }
    Ok(pfds
        .iter()
        .map(|p| p.revents().unwrap_or(PollFlags::empty()))
        .collect())
}
