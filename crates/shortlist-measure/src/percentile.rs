//! Percentiles from raw samples (nearest rank) and the statement every percentile travels with.

use serde::Serialize;

use crate::samples::GapSamples;

/// A quantile in parts per million, so that rank arithmetic is exact (no `0.99 * 100 = 98.999…`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantile {
    ppm: u32,
}

impl Quantile {
    pub const P50: Quantile = Quantile { ppm: 500_000 };
    pub const P90: Quantile = Quantile { ppm: 900_000 };
    pub const P99: Quantile = Quantile { ppm: 990_000 };
    pub const P999: Quantile = Quantile { ppm: 999_000 };

    /// A quantile from a fraction in (0, 1], rounded to parts per million.
    pub fn new(q: f64) -> Option<Quantile> {
        if !(q > 0.0 && q <= 1.0) {
            return None;
        }
        let ppm = (q * 1_000_000.0).round() as u32;
        (ppm > 0).then_some(Quantile { ppm })
    }

    /// The quantile as a fraction.
    pub fn fraction(self) -> f64 {
        f64::from(self.ppm) / 1_000_000.0
    }

    /// The 1-based nearest rank among `n` ordered samples: ⌈q·n⌉, at least 1.
    pub fn rank(self, n: u64) -> u64 {
        let product = u128::from(self.ppm) * u128::from(n);
        (product.div_ceil(1_000_000) as u64).max(1)
    }

    /// The fewest samples for which this quantile is not simply the maximum: p99 needs 100,
    /// p99.9 needs 1,000 (docs/metrics.md).
    pub fn samples_needed(self) -> u64 {
        let tail = 1_000_000 - u64::from(self.ppm);
        if tail == 0 {
            u64::MAX
        } else {
            1_000_000u64.div_ceil(tail)
        }
    }

    /// A label such as `p99` or `p99.9`.
    pub fn label(self) -> String {
        let pct = f64::from(self.ppm) / 10_000.0;
        let mut text = format!("{pct}");
        if text.ends_with(".0") {
            text.truncate(text.len() - 2);
        }
        format!("p{text}")
    }
}

/// The nearest-rank percentile of **sorted** samples: always a value that was observed.
pub fn nearest_rank<T: Copy>(sorted: &[T], q: Quantile) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = q.rank(sorted.len() as u64);
    Some(sorted[(rank - 1) as usize])
}

/// What a set of latency samples is, stated in full: no percentile leaves this crate without it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Population {
    /// What one sample is: "request attempt", "chunk gap", …
    pub observed: String,
    /// Which traffic went in: tenants, retries, warm-up.
    pub included: String,
    /// The window, by scheduled arrival.
    pub window: String,
    /// How errors, timeouts and cancellations were handled.
    pub errors: String,
}

impl Population {
    /// The one-line statement, e.g. for a table's population column.
    pub fn sentence(&self) -> String {
        format!(
            "{}; {}; {}; {}",
            self.observed, self.included, self.window, self.errors
        )
    }
}

/// Percentiles of one metric over one stated population, computed from raw samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Distribution {
    /// The statement of what was measured, in one sentence.
    pub population: String,
    /// The same statement, clause by clause.
    pub statement: Population,
    /// Number of samples.
    pub count: u64,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    #[serde(rename = "p99_9")]
    pub p999: Option<f64>,
    pub mean: Option<f64>,
    pub max: Option<f64>,
    /// Warnings such as "p99 from 40 samples".
    pub warnings: Vec<String>,
}

impl Distribution {
    /// Percentiles of per-request `samples` (seconds), by nearest rank.
    pub fn from_samples(statement: Population, mut samples: Vec<f64>) -> Distribution {
        let count = samples.len() as u64;
        let mean = (count > 0).then(|| samples.iter().sum::<f64>() / count as f64);
        let max = samples.iter().copied().max_by(f64::total_cmp);
        // One selection per quantile (linear time each) instead of a full sort.
        let mut at = |q: Quantile| -> Option<f64> {
            if samples.is_empty() {
                return None;
            }
            let index = (q.rank(count) - 1) as usize;
            let (_, value, _) = samples.select_nth_unstable_by(index, f64::total_cmp);
            Some(*value)
        };
        let (p50, p90, p99, p999) = (
            at(Quantile::P50),
            at(Quantile::P90),
            at(Quantile::P99),
            at(Quantile::P999),
        );
        Self::assemble(statement, count, [p50, p90, p99, p999], mean, max)
    }

    /// Percentiles of pooled chunk gaps, reported to the microsecond (gaps are stored as `f32`).
    pub fn from_gaps(statement: Population, gaps: &GapSamples) -> Distribution {
        let qs = gaps.quantiles(&[Quantile::P50, Quantile::P90, Quantile::P99, Quantile::P999]);
        let round = |v: Option<f64>| v.map(round_micro);
        Self::assemble(
            statement,
            gaps.len(),
            [round(qs[0]), round(qs[1]), round(qs[2]), round(qs[3])],
            gaps.mean(),
            round(gaps.max()),
        )
    }

    fn assemble(
        statement: Population,
        count: u64,
        [p50, p90, p99, p999]: [Option<f64>; 4],
        mean: Option<f64>,
        max: Option<f64>,
    ) -> Distribution {
        let mut warnings = Vec::new();
        for q in [Quantile::P99, Quantile::P999] {
            if count > 0 && count < q.samples_needed() {
                warnings.push(format!(
                    "{} from {count} samples (needs ≥ {}): it is the maximum or near it, not a tail estimate",
                    q.label(),
                    q.samples_needed()
                ));
            }
        }
        Distribution {
            population: statement.sentence(),
            statement,
            count,
            p50,
            p90,
            p99,
            p999,
            mean,
            max,
            warnings,
        }
    }
}

/// Gaps are stored as `f32` seconds to halve memory on million-request runs; they are reported to
/// the microsecond, which is finer than any chunk clock we record.
fn round_micro(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_are_exact() {
        assert_eq!(Quantile::P99.rank(100), 99);
        assert_eq!(Quantile::P99.rank(200), 198);
        assert_eq!(Quantile::P50.rank(200), 100);
        assert_eq!(Quantile::P90.rank(11), 10);
        assert_eq!(Quantile::P50.rank(1), 1);
        assert_eq!(Quantile::P999.samples_needed(), 1000);
        assert_eq!(Quantile::P99.samples_needed(), 100);
        assert_eq!(Quantile::P999.label(), "p99.9");
        assert_eq!(Quantile::P50.label(), "p50");
    }
}
