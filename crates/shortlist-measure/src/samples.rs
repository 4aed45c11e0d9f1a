//! Raw sample stores sized for million-request runs, with exact nearest-rank selection.
//!
//! Chunk gaps are the largest population (one per streamed chunk), so they are kept as `f32`
//! seconds in fixed-size blocks: no reallocation doubles the footprint, and percentiles are found
//! by a two-pass radix selection on the bit patterns instead of a sort. For non-negative floats the
//! bit patterns order exactly like the values, so the selected value is an observed sample.

use crate::percentile::Quantile;

const BLOCK: usize = 1 << 20;

/// Non-negative `f32` samples in blocks.
#[derive(Debug, Default, Clone)]
pub struct GapSamples {
    blocks: Vec<Vec<u32>>,
    len: u64,
    sum: f64,
    max: u32,
}

impl GapSamples {
    /// Record one non-negative sample (seconds). Negative inputs are clamped to zero: gaps are
    /// differences of checked, non-decreasing chunk times, so only `-0.0` can occur.
    pub fn push(&mut self, value: f64) {
        let v = (value.max(0.0) as f32).to_bits();
        if self.blocks.last().is_none_or(|b| b.len() == BLOCK) {
            self.blocks.push(Vec::with_capacity(BLOCK));
        }
        if let Some(block) = self.blocks.last_mut() {
            block.push(v);
        }
        self.len += 1;
        self.sum += f64::from(f32::from_bits(v));
        self.max = self.max.max(v);
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Arithmetic mean (every sample weighs the same: for gaps, the token-weighted mean).
    pub fn mean(&self) -> Option<f64> {
        (self.len > 0).then(|| self.sum / self.len as f64)
    }

    /// Largest sample.
    pub fn max(&self) -> Option<f64> {
        (self.len > 0).then(|| f64::from(f32::from_bits(self.max)))
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.blocks.iter().flat_map(|b| b.iter().copied())
    }

    /// The nearest-rank quantiles, each an observed sample, in the order asked.
    pub fn quantiles(&self, qs: &[Quantile]) -> Vec<Option<f64>> {
        if self.len == 0 {
            return vec![None; qs.len()];
        }
        let mut high = vec![0u64; 1 << 16];
        for v in self.iter() {
            high[(v >> 16) as usize] += 1;
        }
        qs.iter()
            .map(|q| {
                let rank = q.rank(self.len);
                let (bucket, before) = locate(&high, rank);
                let mut low = vec![0u64; 1 << 16];
                for v in self.iter().filter(|v| (v >> 16) as usize == bucket) {
                    low[(v & 0xffff) as usize] += 1;
                }
                let (offset, _) = locate(&low, rank - before);
                let bits = ((bucket as u32) << 16) | offset as u32;
                Some(f64::from(f32::from_bits(bits)))
            })
            .collect()
    }
}

/// The bucket holding the `rank`-th (1-based) sample and how many samples lie before it.
fn locate(counts: &[u64], rank: u64) -> (usize, u64) {
    let mut before = 0;
    for (index, &count) in counts.iter().enumerate() {
        if before + count >= rank {
            return (index, before);
        }
        before += count;
    }
    (counts.len() - 1, before)
}

/// Per-request samples (one per attempt at most), kept as `f64`.
#[derive(Debug, Default, Clone)]
pub struct RequestSamples {
    values: Vec<f64>,
}

impl RequestSamples {
    /// Record one sample.
    pub fn push(&mut self, value: f64) {
        self.values.push(value);
    }

    /// The samples, for sorting and selection.
    pub fn into_vec(self) -> Vec<f64> {
        self.values
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_selection_matches_sorting() {
        let mut samples = GapSamples::default();
        let mut plain = Vec::new();
        let mut x: u64 = 12345;
        for _ in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = (x >> 40) as f64 / 1e4;
            samples.push(v);
            plain.push(v as f32);
        }
        plain.sort_by(f32::total_cmp);
        let qs = [
            Quantile::P50,
            Quantile::P90,
            Quantile::P99,
            Quantile::P999,
            Quantile::new(1.0).unwrap(),
        ];
        let got = samples.quantiles(&qs);
        for (q, g) in qs.iter().zip(got) {
            let want = plain[(q.rank(5000) - 1) as usize];
            assert_eq!(g, Some(f64::from(want)), "{}", q.label());
        }
    }
}
