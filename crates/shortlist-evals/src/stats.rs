//! Statistics for pass/fail evaluations: Wilson score intervals for pass rates and the exact
//! McNemar test for two candidates on the same cases, with Holm's adjustment across categories.
//!
//! No pass rate travels without its n and interval: [`PassRate`] carries all three.

use serde::{Deserialize, Serialize};
use statrs::distribution::{Binomial, DiscreteCDF};

/// The 0.975 quantile of the standard normal distribution (95 % two-sided).
pub const Z95: f64 = 1.959_963_984_540_054;

/// The Wilson score interval for `k` successes in `n` trials at normal quantile `z`
/// (no continuity correction). `None` when `n` is 0 or `k > n`.
pub fn wilson(k: u64, n: u64, z: f64) -> Option<(f64, f64)> {
    if n == 0 || k > n {
        return None;
    }
    let n = n as f64;
    let p = k as f64 / n;
    let z2 = z * z;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = z / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // Clamp rounding noise at the ends (k = 0 or k = n give exactly 0 or 1 in exact arithmetic).
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// A pass rate with its sample size and 95 % Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PassRate {
    /// Cases that passed.
    pub passed: u64,
    /// Cases decided (pass or fail).
    pub n: u64,
    /// `passed / n`, or `null` when n = 0.
    pub rate: Option<f64>,
    /// The 95 % Wilson interval, or `null` when n = 0.
    pub ci95: Option<(f64, f64)>,
}

impl PassRate {
    /// `passed` of `n`; `passed` must not exceed `n`.
    pub fn new(passed: u64, n: u64) -> Self {
        let passed = passed.min(n);
        Self {
            passed,
            n,
            rate: (n > 0).then(|| passed as f64 / n as f64),
            ci95: wilson(passed, n, Z95),
        }
    }

    /// `"17/20 = 85.0 % [64.0, 94.8]"`, or `"0/0 (no cases)"`.
    pub fn display(&self) -> String {
        match (self.rate, self.ci95) {
            (Some(r), Some((lo, hi))) => format!(
                "{}/{} = {:.1} % [{:.1}, {:.1}]",
                self.passed,
                self.n,
                100.0 * r,
                100.0 * lo,
                100.0 * hi
            ),
            _ => format!("{}/{} (no cases)", self.passed, self.n),
        }
    }
}

/// The exact McNemar test on paired pass/fail outcomes, with its 2×2 table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct McNemar {
    /// Both passed.
    pub both_pass: u64,
    /// A passed, B failed (discordant).
    pub a_only: u64,
    /// B passed, A failed (discordant).
    pub b_only: u64,
    /// Both failed.
    pub both_fail: u64,
    /// The two-sided exact p-value: `min(1, 2·P(X ≤ min(a_only, b_only)))` with
    /// `X ~ Binomial(a_only + b_only, 1/2)`; 1 when there are no discordant pairs.
    pub p_value: f64,
}

impl McNemar {
    /// Runs the test on a 2×2 table.
    pub fn from_table(both_pass: u64, a_only: u64, b_only: u64, both_fail: u64) -> Self {
        Self {
            both_pass,
            a_only,
            b_only,
            both_fail,
            p_value: mcnemar_exact_p(a_only, b_only),
        }
    }

    /// Runs the test on paired outcomes `(a_passed, b_passed)`.
    pub fn from_pairs(pairs: impl IntoIterator<Item = (bool, bool)>) -> Self {
        let (mut pp, mut pf, mut fp, mut ff) = (0, 0, 0, 0);
        for pair in pairs {
            match pair {
                (true, true) => pp += 1,
                (true, false) => pf += 1,
                (false, true) => fp += 1,
                (false, false) => ff += 1,
            }
        }
        Self::from_table(pp, pf, fp, ff)
    }

    /// Pairs compared.
    pub fn n(&self) -> u64 {
        self.both_pass + self.a_only + self.b_only + self.both_fail
    }
}

/// The two-sided exact McNemar p-value for discordant counts `b` and `c`.
pub fn mcnemar_exact_p(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let Ok(binom) = Binomial::new(0.5, n) else {
        return 1.0;
    };
    (2.0 * binom.cdf(b.min(c))).min(1.0)
}

/// Holm's step-down adjustment of p-values for testing several hypotheses at once (e.g. one
/// McNemar test per category): controls the family-wise error rate without assuming independence.
/// Returns the adjusted p-values in the input order.
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 0.0_f64;
    for (rank, &i) in order.iter().enumerate() {
        let p = ((m - rank) as f64 * p_values[i]).min(1.0);
        // Adjusted values never decrease along the sorted order.
        running = running.max(p);
        adjusted[i] = running;
    }
    adjusted
}

/// A weighted score: Σ weight·passed / Σ weight over decided cases.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WeightedScore {
    /// Σ weight of passed cases.
    pub passed_weight: f64,
    /// Σ weight of decided cases.
    pub total_weight: f64,
    /// The ratio, or `null` when the total weight is 0.
    pub score: Option<f64>,
}

impl WeightedScore {
    /// From `(weight, passed)` pairs.
    pub fn from_cases(cases: impl IntoIterator<Item = (f64, bool)>) -> Self {
        let (mut p, mut t) = (0.0, 0.0);
        for (w, ok) in cases {
            t += w;
            if ok {
                p += w;
            }
        }
        Self {
            passed_weight: p,
            total_weight: t,
            score: (t > 0.0).then(|| p / t),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn close(a: (f64, f64), b: (f64, f64)) {
        assert!(
            (a.0 - b.0).abs() < 5e-5 && (a.1 - b.1).abs() < 5e-5,
            "{a:?} vs {b:?}"
        );
    }

    #[test]
    fn wilson_reference_values() {
        // Newcombe (1998), Statistics in Medicine 17:857–872, Table I, method 3 (score, no CC).
        close(wilson(81, 263, Z95).unwrap(), (0.2553, 0.3662));
        close(wilson(15, 148, Z95).unwrap(), (0.0624, 0.1605));
        close(wilson(0, 20, Z95).unwrap(), (0.0, 0.1611));
        close(wilson(1, 29, Z95).unwrap(), (0.0061, 0.1718));
        // Commonly tabulated values.
        close(wilson(8, 10, Z95).unwrap(), (0.4902, 0.9433));
        close(wilson(0, 10, Z95).unwrap(), (0.0, 0.2775));
        close(wilson(95, 100, Z95).unwrap(), (0.8882, 0.9785));
        close(wilson(10, 10, Z95).unwrap(), (0.7225, 1.0));
        assert_eq!(wilson(0, 0, Z95), None);
        assert_eq!(wilson(3, 2, Z95), None);
    }

    #[test]
    fn mcnemar_reference_values() {
        // Fagerland, Lydersen & Laake (2013), BMC Med Res Methodol 13:91: b = 1, c = 7 → 0.070.
        assert!((mcnemar_exact_p(1, 7) - 0.0703125).abs() < 1e-12);
        // 2·(1 + 10)/1024.
        assert!((mcnemar_exact_p(1, 9) - 0.021484375).abs() < 1e-12);
        assert!((mcnemar_exact_p(9, 1) - 0.021484375).abs() < 1e-12);
        // 2·(1/32) for 0 vs 5.
        assert!((mcnemar_exact_p(0, 5) - 0.0625).abs() < 1e-12);
        assert_eq!(mcnemar_exact_p(4, 4), 1.0);
        assert_eq!(mcnemar_exact_p(0, 0), 1.0);
        let t = McNemar::from_pairs([
            (true, true),
            (true, false),
            (false, true),
            (false, false),
            (true, false),
        ]);
        assert_eq!((t.both_pass, t.a_only, t.b_only, t.both_fail), (1, 2, 1, 1));
        assert_eq!(t.n(), 5);
    }

    #[test]
    fn holm_reference() {
        // Holm (1979) procedure by hand: sorted 0.01, 0.02, 0.03, 0.04 with m = 4 give
        // 0.04, 0.06, 0.06 (monotone), 0.06.
        let adj = holm(&[0.03, 0.01, 0.04, 0.02]);
        let want = [0.06, 0.04, 0.06, 0.06];
        for (a, w) in adj.iter().zip(want) {
            assert!((a - w).abs() < 1e-12, "{adj:?}");
        }
        assert_eq!(holm(&[0.9, 0.8]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn display_and_weights() {
        assert_eq!(
            PassRate::new(17, 20).display(),
            "17/20 = 85.0 % [64.0, 94.8]"
        );
        assert_eq!(PassRate::new(0, 0).display(), "0/0 (no cases)");
        let w = WeightedScore::from_cases([(1.0, true), (3.0, false)]);
        assert_eq!(w.score, Some(0.25));
        assert_eq!(WeightedScore::from_cases([(0.0, true)]).score, None);
    }

    proptest! {
        #[test]
        fn wilson_contains_the_estimate(n in 1u64..2000, k_frac in 0.0f64..=1.0) {
            let k = ((n as f64) * k_frac).floor() as u64;
            let (lo, hi) = wilson(k, n, Z95).unwrap();
            let p = k as f64 / n as f64;
            prop_assert!(0.0 <= lo && lo <= p + 1e-12 && p <= hi + 1e-12 && hi <= 1.0);
        }

        #[test]
        fn mcnemar_is_symmetric_and_a_probability(b in 0u64..300, c in 0u64..300) {
            let p = mcnemar_exact_p(b, c);
            prop_assert!((0.0..=1.0).contains(&p));
            prop_assert!((p - mcnemar_exact_p(c, b)).abs() < 1e-12);
        }
    }
}
