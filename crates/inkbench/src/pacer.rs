//! Open-loop pacing by absolute send times.
//!
//! Request `i` is due at `start + i / rate`, whatever happened before: a generator that fell
//! behind sends everything that is due at once (in one batch) and the latency of each request is
//! measured from its scheduled time, so a stalled server cannot hide its stall by slowing the
//! generator down (no coordinated omission).

use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Pacer {
    start: Instant,
    interval_ns: f64,
    next: u64,
}

impl Pacer {
    /// A pacer sending `rate` requests per second, the first one at `start`.
    pub fn new(start: Instant, rate: f64) -> Self {
        assert!(rate > 0.0 && rate.is_finite());
        Pacer {
            start,
            interval_ns: 1e9 / rate,
            next: 0,
        }
    }

    /// Scheduled time of request `i`.
    pub fn scheduled(&self, i: u64) -> Instant {
        self.start + Duration::from_nanos((i as f64 * self.interval_ns) as u64)
    }

    /// Scheduled time of the next request not yet taken.
    pub fn next_due(&self) -> Instant {
        self.scheduled(self.next)
    }

    /// Number of requests taken so far.
    pub fn taken(&self) -> u64 {
        self.next
    }

    /// Takes the next request if it is due at `now`, returning its scheduled time.
    pub fn take_due(&mut self, now: Instant) -> Option<Instant> {
        let t = self.next_due();
        if t <= now {
            self.next += 1;
            Some(t)
        } else {
            None
        }
    }

    /// Calls `issue` with the scheduled time of every request due at `now` and scheduled before
    /// `end`, at most `max` of them (one batch of a generator's loop).
    pub fn issue_due(
        &mut self,
        now: Instant,
        end: Instant,
        max: usize,
        mut issue: impl FnMut(Instant),
    ) {
        for _ in 0..max {
            match self.take_due(now) {
                Some(t) if t < end => issue(t),
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_counts_follow_absolute_schedule() {
        let t0 = Instant::now();
        let mut p = Pacer::new(t0, 1000.0); // one per ms
        let mut taken = 0;
        while p.take_due(t0 + Duration::from_micros(10_500)).is_some() {
            taken += 1;
        }
        // Requests 0..=10 are due by 10.5 ms.
        assert_eq!(taken, 11);
        assert_eq!(p.next_due(), t0 + Duration::from_millis(11));
        // Falling behind does not drop requests: all that became due are taken at once.
        let mut late = 0;
        while p.take_due(t0 + Duration::from_millis(100)).is_some() {
            late += 1;
        }
        assert_eq!(late, 90);
        assert_eq!(p.scheduled(5), t0 + Duration::from_millis(5));
    }
}
