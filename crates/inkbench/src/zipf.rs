//! Zipf-distributed ranks by rejection-inversion (W. Hörmann and G. Derflinger, "Rejection-inversion
//! to generate variates from monotone discrete distributions", 1996): O(1) memory and time per
//! sample for any number of elements and any exponent `s > 0`.
//!
//! `P(rank = k) ∝ 1 / (k + 1)^s` for `k` in `0..n`.

use rand::Rng;

#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    threshold: f64,
}

impl Zipf {
    /// A sampler over `n >= 1` ranks with exponent `s > 0`.
    pub fn new(n: u64, s: f64) -> Self {
        assert!(n >= 1, "zipf needs at least one element");
        assert!(s > 0.0 && s.is_finite(), "zipf exponent must be > 0");
        let mut z = Zipf {
            n: n as f64,
            s,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            threshold: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.threshold = 2.0 - z.h_integral_inv(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// A rank in `0..n`; 0 is the most frequent.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        loop {
            let u: f64 =
                self.h_integral_n + rng.gen::<f64>() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inv(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.threshold || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64 - 1;
            }
        }
    }

    /// The exact probability of `rank` (computed by summing: for tests and reports).
    pub fn probability(&self, rank: u64) -> f64 {
        let norm: f64 = (1..=self.n as u64).map(|k| (k as f64).powf(-self.s)).sum();
        ((rank + 1) as f64).powf(-self.s) / norm
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// Integral of `h` with `H(1) = 0`-style normalisation: `((x^(1-s)) - 1) / (1 - s)`,
    /// continuous at `s = 1` (where it is `ln x`).
    fn h_integral(&self, x: f64) -> f64 {
        let lx = x.ln();
        helper2((1.0 - self.s) * lx) * lx
    }

    fn h_integral_inv(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    /// Chi-square of the empirical distribution against theory over the first `bins` ranks
    /// plus one tail bin.
    fn chi_square(n: u64, s: f64, samples: usize, bins: u64, seed: u64) -> f64 {
        let z = Zipf::new(n, s);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut counts = vec![0u64; bins as usize + 1];
        for _ in 0..samples {
            let r = z.sample(&mut rng);
            assert!(r < n);
            counts[r.min(bins) as usize] += 1;
        }
        let norm: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        let mut chi = 0.0;
        let mut head = 0.0;
        for (r, &c) in counts.iter().enumerate().take(bins as usize) {
            let p = ((r + 1) as f64).powf(-s) / norm;
            head += p;
            let e = p * samples as f64;
            chi += (c as f64 - e).powi(2) / e;
        }
        let e_tail = (1.0 - head) * samples as f64;
        if e_tail > 5.0 {
            chi += (counts[bins as usize] as f64 - e_tail).powi(2) / e_tail;
        }
        chi
    }

    #[test]
    fn matches_theory_chi_square() {
        // 50 bins + tail = 50 degrees of freedom; the 0.1% critical value is 86.66.
        for &(n, s) in &[(1000u64, 0.99), (100, 1.0), (10_000, 1.2), (500, 0.5)] {
            let chi = chi_square(n, s, 200_000, 50, 7);
            assert!(chi < 86.66, "n={n} s={s}: chi-square {chi}");
        }
    }

    #[test]
    fn top_ranks_frequencies() {
        let z = Zipf::new(1000, 0.99);
        let mut rng = StdRng::seed_from_u64(42);
        let n = 500_000;
        let mut counts = [0u64; 5];
        for _ in 0..n {
            let r = z.sample(&mut rng);
            if r < 5 {
                counts[r as usize] += 1;
            }
        }
        for (r, &c) in counts.iter().enumerate() {
            let p = z.probability(r as u64);
            let got = c as f64 / n as f64;
            assert!((got - p).abs() / p < 0.03, "rank {r}: got {got}, want {p}");
        }
    }

    #[test]
    fn single_element() {
        let z = Zipf::new(1, 1.0);
        let mut rng = StdRng::seed_from_u64(1);
        assert!((0..100).all(|_| z.sample(&mut rng) == 0));
    }
}
