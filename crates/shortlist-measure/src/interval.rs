//! Two-sided confidence intervals for the figures a night is compared by: a proportion
//! (attainment: exact Clopper–Pearson), a quantile of raw samples (TTFT p99: distribution-free,
//! from order statistics), and a rate of counted events (goodput: exact Poisson, Garwood).
//!
//! Each returns `None` where the data cannot bound the figure at the confidence asked — a p99 of
//! 120 samples has no upper bound at 95 % — rather than an interval that only looks like one.

use statrs::distribution::{Beta, Binomial, ContinuousCDF, DiscreteCDF, Gamma};

use crate::percentile::Quantile;

/// A two-sided interval: the estimate and its bounds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Interval {
    pub value: f64,
    pub lo: f64,
    pub hi: f64,
}

fn alpha(confidence: f64) -> Option<f64> {
    (confidence > 0.0 && confidence < 1.0).then_some(1.0 - confidence)
}

/// The exact (Clopper–Pearson) two-sided interval of a proportion with `k` successes in `n`.
pub fn proportion(k: u64, n: u64, confidence: f64) -> Option<Interval> {
    let a = alpha(confidence)?;
    if n == 0 || k > n {
        return None;
    }
    let lo = if k == 0 {
        0.0
    } else {
        Beta::new(k as f64, (n - k + 1) as f64)
            .ok()?
            .inverse_cdf(a / 2.0)
    };
    let hi = if k == n {
        1.0
    } else {
        Beta::new((k + 1) as f64, (n - k) as f64)
            .ok()?
            .inverse_cdf(1.0 - a / 2.0)
    };
    Some(Interval {
        value: k as f64 / n as f64,
        lo,
        hi,
    })
}

/// The distribution-free interval of quantile `q` from ascending samples: the order statistics
/// `x(l) ≤ x(u)` with P(x(l) ≤ true quantile ≤ x(u)) ≥ `confidence`, the count of samples below
/// the true quantile being Binomial(n, q). The estimate is the nearest-rank quantile. `None`
/// when there are too few samples for either bound (p99 at 95 % needs 368).
pub fn quantile(sorted: &[f64], q: Quantile, confidence: f64) -> Option<Interval> {
    let a = alpha(confidence)?;
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    let b = Binomial::new(q.fraction(), n).ok()?;
    // The largest l with P(B ≤ l − 1) ≤ α/2, and the smallest u with P(B ≤ u − 1) ≥ 1 − α/2.
    let l = (0..=n)
        .take_while(|&j| j == 0 || b.cdf(j - 1) <= a / 2.0)
        .last()?;
    let u = (1..=n).find(|&j| b.cdf(j - 1) >= 1.0 - a / 2.0)?;
    if l == 0 {
        return None;
    }
    let at = |rank: u64| sorted[(rank - 1) as usize];
    Some(Interval {
        value: at(q.rank(n)),
        lo: at(l),
        hi: at(u),
    })
}

/// The exact (Garwood) interval of a rate from `k` events counted over `seconds`.
pub fn poisson_rate(k: u64, seconds: f64, confidence: f64) -> Option<Interval> {
    let a = alpha(confidence)?;
    if !(seconds > 0.0 && seconds.is_finite()) {
        return None;
    }
    let lo = if k == 0 {
        0.0
    } else {
        Gamma::new(k as f64, 1.0).ok()?.inverse_cdf(a / 2.0)
    };
    let hi = Gamma::new((k + 1) as f64, 1.0)
        .ok()?
        .inverse_cdf(1.0 - a / 2.0);
    Some(Interval {
        value: k as f64 / seconds,
        lo: lo / seconds,
        hi: hi / seconds,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn known_values() {
        // Clopper–Pearson 95 % for 8 of 10: [0.4439, 0.9748].
        let i = proportion(8, 10, 0.95).unwrap();
        assert!(
            (i.lo - 0.4439).abs() < 1e-3 && (i.hi - 0.9748).abs() < 1e-3,
            "{i:?}"
        );
        // Garwood 95 % for 10 events: [4.795, 18.39].
        let r = poisson_rate(10, 1.0, 0.95).unwrap();
        assert!(
            (r.lo - 4.795).abs() < 1e-2 && (r.hi - 18.39).abs() < 1e-2,
            "{r:?}"
        );
        // The median of 1..=100 at 95 %: ranks 40 and 61.
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let m = quantile(&s, Quantile::P50, 0.95).unwrap();
        assert_eq!((m.lo, m.value, m.hi), (40.0, 50.0, 61.0));
    }

    #[test]
    fn a_tail_quantile_of_few_samples_has_no_interval() {
        let s: Vec<f64> = (1..=367).map(f64::from).collect();
        assert!(quantile(&s, Quantile::P99, 0.95).is_none());
        let s: Vec<f64> = (1..=368).map(f64::from).collect();
        let i = quantile(&s, Quantile::P99, 0.95).unwrap();
        assert!(i.lo <= i.value && i.value <= i.hi && i.hi == 368.0, "{i:?}");
    }

    proptest! {
        #[test]
        fn intervals_hold_their_estimate(k in 0u64..500, extra in 0u64..500, secs in 0.1f64..1000.0) {
            let n = k + extra;
            if let Some(i) = proportion(k, n, 0.95) {
                prop_assert!(0.0 <= i.lo && i.lo <= i.value && i.value <= i.hi && i.hi <= 1.0, "{i:?}");
            } else {
                prop_assert_eq!(n, 0);
            }
            let r = poisson_rate(k, secs, 0.95).unwrap();
            prop_assert!(0.0 <= r.lo && r.lo <= r.value && r.value <= r.hi, "{r:?}");
        }

        #[test]
        fn a_quantile_interval_brackets_the_estimate_and_narrows_with_confidence(
            mut s in proptest::collection::vec(0.0f64..10.0, 1..600),
            q in 0.05f64..0.99,
        ) {
            s.sort_by(f64::total_cmp);
            let q = Quantile::new(q).unwrap();
            if let Some(wide) = quantile(&s, q, 0.99) {
                prop_assert!(wide.lo <= wide.value && wide.value <= wide.hi, "{wide:?}");
                let narrow = quantile(&s, q, 0.8).unwrap();
                prop_assert!(wide.lo <= narrow.lo && narrow.hi <= wide.hi);
            }
        }
    }
}
