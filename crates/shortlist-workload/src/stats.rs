//! What a trace looks like: volume, rates, burstiness, lengths and their correlation, prefix
//! reuse, and whether its timestamps were quantized into buckets.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::trace::{Request, TraceHeader};

/// The format tag of `trace stats --json`.
pub const STATS_FORMAT: &str = "shortlist.trace-stats.v1";

/// Input tokens as sent (every request's full prompt) and distinct (shared prefixes once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InputTokens {
    pub sent: u64,
    pub distinct: u64,
}

/// Arrival rates in requests per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rates {
    /// Requests / duration.
    pub mean: Option<f64>,
    /// Most arrivals in any 1 s window (a window starts at an arrival), per second.
    pub peak_1s: f64,
    /// Most arrivals in any 10 s window, per second.
    pub peak_10s: f64,
}

/// Nearest-rank percentiles (the ⌈p·n⌉-th smallest), so each is a length that occurred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Percentiles {
    pub p50: Option<u64>,
    pub p90: Option<u64>,
    pub p99: Option<u64>,
}

/// Index of dispersion (variance / mean) of arrival counts in consecutive windows: 1 for Poisson,
/// 0 for evenly spaced, above 1 for bursty arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Dispersion {
    pub counts_1s: Option<f64>,
    pub counts_10s: Option<f64>,
}

/// Timestamps that only take values on a grid (e.g. Mooncake's conversation trace, 3 s buckets).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quantization {
    /// The grid step in seconds.
    pub bucket_s: f64,
    /// Where the grid starts (the earliest arrival).
    pub origin_s: f64,
    /// How many different arrival times occur.
    pub distinct_times: u64,
}

/// Everything `trace stats` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceStats {
    pub format: String,
    pub requests: u64,
    pub duration_s: f64,
    pub input_tokens: InputTokens,
    pub output_tokens: u64,
    pub rate_rps: Rates,
    /// Standard deviation / mean of the gaps between consecutive arrivals.
    pub interarrival_cv: Option<f64>,
    pub input_len: Percentiles,
    pub output_len: Percentiles,
    /// Distinct prefix groups (`prefix.group`), or, for `hash_ids` traces, distinct first blocks
    /// that more than one request starts with.
    pub prefix_groups: u64,
    pub dispersion: Dispersion,
    /// Spearman rank correlation of input and output lengths.
    pub length_spearman: Option<f64>,
    /// Share of sent input tokens that an infinite prefix cache would serve: 1 − distinct / sent.
    pub prefix_reuse: Option<f64>,
    /// Distinct sessions.
    pub sessions: u64,
    /// Requests that belong to a session, per session.
    pub turns_per_session: Option<f64>,
    /// Requests the source marked as failed (kept in the trace, counted here).
    pub failed: u64,
    pub quantization: Option<Quantization>,
}

impl TraceStats {
    /// Describe a trace held in memory (see [`StatsBuilder`] to describe one as it streams by).
    pub fn compute(header: &TraceHeader, requests: &[Request]) -> TraceStats {
        let mut builder = StatsBuilder::new(header);
        for r in requests {
            builder.push(r);
        }
        builder.finish()
    }
}

/// Accumulates a trace's statistics one request at a time, keeping only what they need (arrival
/// times and lengths, about 24 bytes a request, plus the prefix and session identities), not the
/// requests themselves.
#[derive(Debug, Clone)]
pub struct StatsBuilder {
    header_duration: Option<f64>,
    block_size: Option<u32>,
    times: Vec<f64>,
    inputs: Vec<u64>,
    outputs: Vec<u64>,
    /// Input tokens that no earlier request's prefix covers (shared prefixes are added at the end).
    unshared: u64,
    seen_blocks: HashSet<u64>,
    group_prefix: BTreeMap<String, u64>,
    roots: HashMap<u64, u32>,
    sessions: HashSet<String>,
    in_sessions: u64,
    failed: u64,
}

impl StatsBuilder {
    pub fn new(header: &TraceHeader) -> Self {
        StatsBuilder {
            header_duration: header.duration_s(),
            block_size: header.block_size(),
            times: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            unshared: 0,
            seen_blocks: HashSet::new(),
            group_prefix: BTreeMap::new(),
            roots: HashMap::new(),
            sessions: HashSet::new(),
            in_sessions: 0,
            failed: 0,
        }
    }

    /// Add the next request (requests come in trace order).
    ///
    /// Distinct input tokens assume an infinite cache. With `hash_ids`, a request reuses the
    /// leading blocks that some earlier request already sent (Mooncake's ids hash the whole
    /// prefix, so a matching block implies a matching prefix). With `prefix`, each group's shared
    /// tokens count once (the longest prefix seen for the group).
    pub fn push(&mut self, r: &Request) {
        self.times.push(r.t());
        self.inputs.push(r.input_tokens());
        self.outputs.push(r.output_tokens());
        match (r.hash_ids(), self.block_size, r.prefix()) {
            (Some(ids), Some(bs), _) => {
                let reused_blocks = ids
                    .iter()
                    .take_while(|id| self.seen_blocks.contains(id))
                    .count() as u64;
                let hit = reused_blocks
                    .saturating_mul(u64::from(bs))
                    .min(r.input_tokens());
                self.unshared += r.input_tokens() - hit;
                self.seen_blocks.extend(ids.iter().copied());
                if let Some(first) = ids.first() {
                    *self.roots.entry(*first).or_default() += 1;
                }
            }
            (_, _, Some(p)) => {
                self.unshared += r.input_tokens() - p.tokens;
                if let Some(longest) = self.group_prefix.get_mut(&p.group) {
                    *longest = (*longest).max(p.tokens);
                } else {
                    self.group_prefix.insert(p.group.clone(), p.tokens);
                }
            }
            _ => self.unshared += r.input_tokens(),
        }
        if let Some(s) = r.session() {
            self.in_sessions += 1;
            if !self.sessions.contains(s) {
                self.sessions.insert(s.to_owned());
            }
        }
        self.failed += u64::from(r.failed());
    }

    /// The statistics. The duration is the header's `duration_s` when it covers every arrival,
    /// else the last arrival time.
    pub fn finish(mut self) -> TraceStats {
        let n = self.times.len();
        let times = &self.times;
        let last = times.last().copied().unwrap_or(0.0);
        let duration_s = self.header_duration.map_or(last, |d| d.max(last));
        let length_spearman = spearman(&self.inputs, &self.outputs);
        let sent: u64 = self.inputs.iter().sum();
        let distinct = self.unshared + self.group_prefix.values().sum::<u64>();
        let prefix_groups = if self.group_prefix.is_empty() {
            self.roots.values().filter(|&&c| c > 1).count()
        } else {
            self.group_prefix.len()
        };
        self.inputs.sort_unstable();
        self.outputs.sort_unstable();
        TraceStats {
            format: STATS_FORMAT.to_owned(),
            requests: n as u64,
            duration_s,
            input_tokens: InputTokens { sent, distinct },
            output_tokens: self.outputs.iter().sum(),
            rate_rps: Rates {
                mean: (duration_s > 0.0).then(|| n as f64 / duration_s),
                peak_1s: peak_count(times, 1.0) as f64,
                peak_10s: peak_count(times, 10.0) as f64 / 10.0,
            },
            interarrival_cv: interarrival_cv(times),
            input_len: percentiles(&self.inputs),
            output_len: percentiles(&self.outputs),
            prefix_groups: prefix_groups as u64,
            dispersion: Dispersion {
                counts_1s: dispersion(times, duration_s, 1.0),
                counts_10s: dispersion(times, duration_s, 10.0),
            },
            length_spearman,
            prefix_reuse: (sent > 0).then(|| 1.0 - distinct as f64 / sent as f64),
            sessions: self.sessions.len() as u64,
            turns_per_session: (!self.sessions.is_empty())
                .then(|| self.in_sessions as f64 / self.sessions.len() as f64),
            failed: self.failed,
            quantization: detect_quantization(times),
        }
    }
}

/// The ⌈p·n⌉-th smallest of sorted values, with `p` in thousandths so that the rank is computed in
/// integers (⌈0.9·100⌉ must be 90, not 91 through rounding).
pub fn nearest_rank(sorted: &[u64], per_mille: u64) -> Option<u64> {
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    let rank = (per_mille * n).div_ceil(1000).clamp(1, n);
    sorted.get((rank - 1) as usize).copied()
}

fn percentiles(sorted: &[u64]) -> Percentiles {
    Percentiles {
        p50: nearest_rank(sorted, 500),
        p90: nearest_rank(sorted, 900),
        p99: nearest_rank(sorted, 990),
    }
}

/// Most arrivals in a window `[t_i, t_i + width)` over all arrivals `i` (two pointers).
fn peak_count(times: &[f64], width: f64) -> u64 {
    let mut best = 0usize;
    let mut end = 0usize;
    for (start, &t) in times.iter().enumerate() {
        end = end.max(start);
        while end < times.len() && times[end] < t + width {
            end += 1;
        }
        best = best.max(end - start);
    }
    best as u64
}

fn mean_var(xs: impl Iterator<Item = f64> + Clone) -> Option<(f64, f64)> {
    let n = xs.clone().count();
    if n == 0 {
        return None;
    }
    let mean = xs.clone().sum::<f64>() / n as f64;
    let var = xs.map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
    Some((mean, var))
}

fn interarrival_cv(times: &[f64]) -> Option<f64> {
    if times.len() < 3 {
        return None;
    }
    let gaps = times.windows(2).map(|w| w[1] - w[0]);
    let (mean, var) = mean_var(gaps)?;
    (mean > 0.0).then(|| var.sqrt() / mean)
}

/// Variance / mean of arrival counts in the whole windows of `width` that fit in
/// `[0, duration)` (a partial last window would look like a lull); `None` with fewer than two.
/// Only the occupied windows are counted one by one, the empty ones in closed form: a trace's
/// duration may be any length (an arrival at 10^19 s once asked for 10^19 counters).
fn dispersion(times: &[f64], duration: f64, width: f64) -> Option<f64> {
    let bins = (duration / width).floor();
    // A NaN duration has no windows either.
    if bins.is_nan() || bins < 2.0 {
        return None;
    }
    let mut occupied: Vec<f64> = times
        .iter()
        .map(|&t| (t / width).floor())
        .filter(|&b| b >= 0.0 && b < bins)
        .collect();
    occupied.sort_unstable_by(f64::total_cmp);
    let counts: Vec<f64> = occupied
        .chunk_by(|a, b| a == b)
        .map(|run| run.len() as f64)
        .collect();
    let mean = counts.iter().sum::<f64>() / bins;
    if mean <= 0.0 {
        return None;
    }
    let empty = bins - counts.len() as f64;
    let squares = counts.iter().map(|&c| (c - mean).powi(2)).sum::<f64>() + empty * mean * mean;
    Some(squares / bins / mean)
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(xs: &[u64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by_key(|&i| xs[i]);
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        let avg = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            r[k] = avg;
        }
        i = j + 1;
    }
    r
}

/// Spearman's ρ: Pearson correlation of the ranks; `None` when either side is constant.
pub fn spearman(a: &[u64], b: &[u64]) -> Option<f64> {
    if a.len() < 2 || a.len() != b.len() {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let (ma, va) = mean_var(ra.iter().copied())?;
    let (mb, vb) = mean_var(rb.iter().copied())?;
    if va <= 0.0 || vb <= 0.0 {
        return None;
    }
    let cov = ra
        .iter()
        .zip(&rb)
        .map(|(x, y)| (x - ma) * (y - mb))
        .sum::<f64>()
        / a.len() as f64;
    Some(cov / (va.sqrt() * vb.sqrt()))
}

/// Timestamps on a grid: at least half the arrivals share a time with another, and every distinct
/// time is the earliest plus a whole number of the smallest step between distinct times.
pub fn detect_quantization(times: &[f64]) -> Option<Quantization> {
    if times.len() < 10 {
        return None;
    }
    let mut distinct: Vec<f64> = times.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    if distinct.len() < 2 || distinct.len() * 2 > times.len() {
        return None;
    }
    let step = distinct
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::INFINITY, f64::min);
    if !(step.is_finite() && step > 0.0) {
        return None;
    }
    let origin = distinct[0];
    let on_grid = distinct.iter().all(|&t| {
        let k = (t - origin) / step;
        (k - k.round()).abs() <= 1e-6 * k.max(1.0)
    });
    on_grid.then_some(Quantization {
        bucket_s: step,
        origin_s: origin,
        distinct_times: distinct.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Shape, SynthSpec, synthesize};
    use crate::trace::{Mode, RequestFields};

    fn req(i: usize, t: f64, input: u64, output: u64) -> Request {
        Request::new(RequestFields {
            id: format!("r{i}"),
            t,
            input_tokens: input,
            output_tokens: output,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn nearest_rank_is_exact() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(nearest_rank(&v, 900), Some(90));
        assert_eq!(nearest_rank(&v, 990), Some(99));
        assert_eq!(nearest_rank(&v, 500), Some(50));
        assert_eq!(nearest_rank(&[7], 990), Some(7));
        assert_eq!(nearest_rank(&[], 500), None);
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank(&v, 990), Some(10));
    }

    #[test]
    fn practice_traces_differ_where_they_should() {
        let stats = |shape| {
            let (h, r) = synthesize(&SynthSpec::practice(shape), 1).unwrap();
            TraceStats::compute(&h, &r)
        };
        let uni = stats(Shape::Uniform);
        let bursts = stats(Shape::Bursts);
        let groups = stats(Shape::PrefixGroups);
        assert_eq!(uni.rate_rps.mean, Some(8.0));
        assert_eq!(uni.rate_rps.peak_1s, 8.0);
        assert_eq!(uni.interarrival_cv.map(|c| c < 1e-9), Some(true));
        assert_eq!(uni.input_len.p99, Some(1000));
        assert_eq!(uni.dispersion.counts_1s.map(|d| d < 0.1), Some(true));
        assert_eq!(uni.length_spearman, None);
        assert!(bursts.rate_rps.peak_1s >= 20.0, "{:?}", bursts.rate_rps);
        assert!(bursts.dispersion.counts_1s.unwrap() > 5.0);
        assert!(bursts.length_spearman.unwrap() > 0.3);
        assert_eq!(
            bursts.input_tokens,
            InputTokens {
                sent: 100_000,
                distinct: 100_000
            }
        );
        assert_eq!(
            groups.input_tokens,
            InputTokens {
                sent: 820_000,
                distinct: 100_000
            }
        );
        assert_eq!(groups.prefix_groups, 10);
        assert_eq!(groups.sessions, 10);
        let reuse = groups.prefix_reuse.unwrap();
        assert!((reuse - 720.0 / 820.0).abs() < 1e-12, "{reuse}");
    }

    #[test]
    fn dispersion_counts_empty_windows_without_storing_them() {
        // Windows: [2, 0, 1, 0] → mean 0.75, variance (1.5625 + 0.5625 + 0.0625 + 0.5625) / 4.
        let d = dispersion(&[0.1, 0.5, 2.2], 4.0, 1.0).unwrap();
        assert!((d - 0.6875 / 0.75).abs() < 1e-12, "{d}");
        // A partial last window is left out; so are arrivals after the duration.
        assert_eq!(dispersion(&[0.1, 0.5, 2.2, 9.0], 4.5, 1.0), Some(d));
        assert_eq!(dispersion(&[0.1], 1.5, 1.0), None);
    }

    #[test]
    fn an_arrival_at_ten_to_the_nineteen_seconds_is_summarised_in_bounded_memory() {
        // Found by the fuzzer (fuzz/corpus/trace/crash-arrival-at-1e19-s.jsonl): the windows
        // of the dispersion were a vector of 10^19 counters.
        let times = [0.0, 2.0, 1.1e19];
        let d = dispersion(&times, 1.1e19, 1.0).unwrap();
        assert!(d.is_finite() && d > 0.0, "{d}");
        assert_eq!(
            dispersion(&times, f64::MAX, 10.0).map(f64::is_finite),
            Some(true)
        );
    }

    #[test]
    fn hash_ids_give_reuse_with_an_infinite_cache() {
        let h = TraceHeader::new("m", Mode::Online)
            .with_block_size(512)
            .unwrap();
        let mk = |i: usize, input: u64, ids: Vec<u64>| {
            Request::new(RequestFields {
                id: format!("r{i}"),
                t: i as f64,
                input_tokens: input,
                output_tokens: 1,
                hash_ids: Some(ids),
                ..Default::default()
            })
            .unwrap()
        };
        // The second request shares the first two blocks, then diverges; block 3 matches by
        // accident later but is not a prefix hit.
        let reqs = vec![
            mk(0, 1500, vec![1, 2, 3]),
            mk(1, 1300, vec![1, 2, 4]),
            mk(2, 600, vec![9, 3]),
        ];
        let s = TraceStats::compute(&h, &reqs);
        assert_eq!(s.input_tokens.sent, 3400);
        assert_eq!(s.input_tokens.distinct, 1500 + (1300 - 1024) + 600);
        assert_eq!(s.prefix_groups, 1);
    }

    #[test]
    fn quantized_times_are_detected() {
        let times: Vec<f64> = (0..100).map(|i| (i / 7) as f64 * 3.0).collect();
        let q = detect_quantization(&times).unwrap();
        assert_eq!(q.bucket_s, 3.0);
        let spread: Vec<f64> = (0..100).map(|i| i as f64 * 0.37).collect();
        assert_eq!(detect_quantization(&spread), None);
    }

    #[test]
    fn tiny_and_empty_traces_do_not_panic() {
        let h = TraceHeader::new("x", Mode::Online);
        let s = TraceStats::compute(&h, &[]);
        assert_eq!(s.requests, 0);
        assert_eq!(s.rate_rps.mean, None);
        let s = TraceStats::compute(&h, &[req(0, 0.0, 5, 5)]);
        assert_eq!(s.input_len.p50, Some(5));
        assert_eq!(s.interarrival_cv, None);
    }

    #[test]
    fn spearman_sees_monotone_relations() {
        let close = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 1e-12);
        assert!(close(spearman(&[1, 2, 3, 4], &[10, 20, 30, 400]), 1.0));
        assert!(close(spearman(&[1, 2, 3, 4], &[4, 3, 2, 1]), -1.0));
        assert!(close(spearman(&[1, 2, 2, 3], &[1, 5, 5, 9]), 1.0));
        assert_eq!(spearman(&[1, 1, 1], &[1, 2, 3]), None);
    }

    mod props {
        use super::*;
        use crate::trace::{PrefixFields, RequestFields};
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn invariants_hold_for_any_trace(
                rows in proptest::collection::vec((0.0f64..100.0, 0u64..5000, 0u64..500, proptest::option::of(0u64..4)), 0..200),
            ) {
                let mut rows = rows;
                rows.sort_by(|a, b| a.0.total_cmp(&b.0));
                let reqs: Vec<Request> = rows
                    .iter()
                    .enumerate()
                    .map(|(i, &(t, input, output, group))| {
                        Request::new(RequestFields {
                            id: format!("r{i}"),
                            t,
                            input_tokens: input + 100,
                            output_tokens: output,
                            prefix: group.map(|g| PrefixFields { group: format!("g{g}"), tokens: 100 }),
                            ..Default::default()
                        })
                        .unwrap()
                    })
                    .collect();
                let s = TraceStats::compute(&TraceHeader::new("p", Mode::Online), &reqs);
                prop_assert_eq!(s.requests as usize, reqs.len());
                prop_assert!(s.input_tokens.distinct <= s.input_tokens.sent);
                prop_assert!(s.input_len.p50 <= s.input_len.p90 && s.input_len.p90 <= s.input_len.p99);
                prop_assert!(s.output_len.p50 <= s.output_len.p90 && s.output_len.p90 <= s.output_len.p99);
                prop_assert!(s.rate_rps.peak_1s <= s.requests as f64);
                prop_assert!(s.rate_rps.peak_10s * 10.0 >= s.rate_rps.peak_1s);
                if let Some(r) = s.prefix_reuse { prop_assert!((0.0..=1.0).contains(&r)); }
                if let Some(r) = s.length_spearman { prop_assert!((-1.0 - 1e-9..=1.0 + 1e-9).contains(&r)); }
            }
        }
    }
}
