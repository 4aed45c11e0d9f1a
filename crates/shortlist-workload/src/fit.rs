//! Synthesize a new trace that keeps a source trace's joint structure, by a moving-block
//! bootstrap over whole requests.
//!
//! Why blocks of whole requests: a request keeps its input length, output length, prefix, tenant
//! and priority together, so length–length correlation survives (columns are never sampled
//! independently); a block keeps its run of inter-arrival gaps, so bursts and over-dispersion
//! survive up to the block's time scale; and it keeps the prefix and session structure between
//! neighbouring requests. Identities are handled so that reuse stays honest: a prefix (group or
//! hash block) used only inside the copied block is private to it and gets a fresh identity in
//! each copy (a resampled conversation is a new conversation), while one also used elsewhere in
//! the source (a system prompt) keeps its identity. Sessions are always renamed per copy.

use std::collections::HashMap;

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::WorkloadError;
use crate::stats::{Quantization, detect_quantization};
use crate::trace::{Request, TraceHeader};

/// What to synthesize.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSpec {
    pub requests: u64,
    pub seed: u64,
    /// Spread quantized source timestamps uniformly within their bucket before fitting.
    pub spread: bool,
    /// Requests per resampled block; `None` picks √n of the source (at least 1).
    pub block: Option<usize>,
}

/// What the fit found and did, for the side-by-side report.
#[derive(Debug, Clone, PartialEq)]
pub struct FitReport {
    /// The source's timestamps lie on this grid (e.g. Mooncake's 3 s buckets).
    pub quantization: Option<Quantization>,
    /// Whether they were spread within their buckets before resampling.
    pub spread: bool,
    pub block: usize,
}

fn unusable(why: impl Into<String>) -> WorkloadError {
    WorkloadError::unusable("trace fit", why)
}

/// First and last source index at which each identity is used.
fn spans<K: std::hash::Hash + Eq>(
    keys: impl Iterator<Item = (usize, K)>,
) -> HashMap<K, (usize, usize)> {
    let mut out: HashMap<K, (usize, usize)> = HashMap::new();
    for (i, k) in keys {
        out.entry(k).and_modify(|s| s.1 = i).or_insert((i, i));
    }
    out
}

/// Synthesize `spec.requests` requests from `source`, seeded.
pub fn fit(
    header: &TraceHeader,
    source: &[Request],
    spec: &FitSpec,
) -> Result<(TraceHeader, Vec<Request>, FitReport), WorkloadError> {
    let n_src = source.len();
    if n_src < 2 {
        return Err(unusable(format!(
            "the source has {n_src} request(s); fitting needs at least 2"
        )));
    }
    if spec.requests == 0 {
        return Err(unusable("--requests must be at least 1"));
    }
    let n_out = usize::try_from(spec.requests)
        .map_err(|_| unusable("--requests does not fit in memory"))?;
    let block = spec
        .block
        .unwrap_or_else(|| (n_src as f64).sqrt().round() as usize)
        .clamp(1, n_src);
    if spec.block == Some(0) {
        return Err(unusable("--block must be at least 1"));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);

    let times: Vec<f64> = source.iter().map(Request::t).collect();
    let quantization = detect_quantization(&times);
    let mut order: Vec<(f64, usize)> = times.iter().copied().zip(0..).collect();
    let spread = spec.spread && quantization.is_some();
    if let (true, Some(q)) = (spread, quantization) {
        // A grid time stands for any instant in its bucket [t, t + step): draw one uniformly.
        for (t, _) in &mut order {
            *t += rng.random::<f64>() * q.bucket_s;
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    }
    let src: Vec<&Request> = order.iter().map(|&(_, i)| &source[i]).collect();
    let t_src: Vec<f64> = order.iter().map(|&(t, _)| t).collect();
    let mean_gap = (t_src[n_src - 1] - t_src[0]) / (n_src - 1) as f64;
    // gaps[i]: the wait before source request i; the first has none in the source, so it gets the
    // mean gap.
    let gaps: Vec<f64> = std::iter::once(mean_gap)
        .chain(t_src.windows(2).map(|w| w[1] - w[0]))
        .collect();

    let group_span = spans(
        src.iter()
            .enumerate()
            .filter_map(|(i, r)| r.prefix().map(|p| (i, p.group.clone()))),
    );
    let hash_span = spans(
        src.iter()
            .enumerate()
            .flat_map(|(i, r)| r.hash_ids().unwrap_or(&[]).iter().map(move |&h| (i, h))),
    );
    let mut next_hash = hash_span
        .keys()
        .copied()
        .max()
        .map_or(0, |m| m.saturating_add(1));

    let mut out = Vec::with_capacity(n_out);
    let mut t = 0.0_f64;
    let mut copy = 0u64;
    while out.len() < n_out {
        let start = rng.random_range(0..=n_src - block);
        let end = start + block;
        let local = |span: &(usize, usize)| span.0 >= start && span.1 < end;
        let mut fresh_hash: HashMap<u64, u64> = HashMap::new();
        for i in start..end {
            if out.len() == n_out {
                break;
            }
            if !out.is_empty() {
                t += gaps[i];
            }
            let mut f = src[i].fields().clone();
            f.id = format!("r{}", out.len());
            f.t = t;
            if let Some(p) = &mut f.prefix
                && group_span.get(&p.group).is_some_and(local)
            {
                p.group = format!("{}~{copy}", p.group);
            }
            if let Some(ids) = &mut f.hash_ids {
                for h in ids.iter_mut() {
                    if hash_span.get(h).is_some_and(local) {
                        *h = *fresh_hash.entry(*h).or_insert_with(|| {
                            next_hash = next_hash.wrapping_add(1);
                            next_hash
                        });
                    }
                }
            }
            if let Some(s) = &mut f.session {
                *s = format!("{s}~{copy}");
            }
            out.push(Request::new(f).map_err(|e| unusable(e.to_string()))?);
        }
        copy += 1;
    }

    let mut fitted = TraceHeader::new(format!("fit-{}", header.name()), header.mode())
        .with_duration_s(t + mean_gap.max(0.0))
        .map_err(|e| unusable(e.to_string()))?
        .with_source(format!(
            "shortlist trace fit of `{}` (moving-block bootstrap, {block} requests per block{})",
            header.name(),
            if spread {
                ", timestamps spread within their buckets"
            } else {
                ""
            }
        ))
        .with_seed(spec.seed);
    if let Some(bs) = header.block_size() {
        fitted = fitted
            .with_block_size(bs)
            .map_err(|e| unusable(e.to_string()))?;
    }
    Ok((
        fitted,
        out,
        FitReport {
            quantization,
            spread,
            block,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::TraceStats;
    use crate::synth::{Shape, SynthSpec, synthesize};
    use crate::trace::{Mode, RequestFields};

    fn spec(requests: u64, seed: u64) -> FitSpec {
        FitSpec {
            requests,
            seed,
            spread: false,
            block: None,
        }
    }

    #[test]
    fn keeps_burstiness_and_length_correlation() {
        let mut s = SynthSpec::practice(Shape::Bursts);
        s.requests = 2000;
        s.input_tokens = 2_000_000;
        s.output_tokens = 400_000;
        // Many bursts, so that a few thousand requests sample the on/off pattern well.
        s.bursts = 100;
        let (h, src) = synthesize(&s, 3).unwrap();
        let (fh, out, report) = fit(&h, &src, &spec(3000, 9)).unwrap();
        assert_eq!(out.len(), 3000);
        assert!(out.windows(2).all(|w| w[0].t() <= w[1].t()));
        let a = TraceStats::compute(&h, &src);
        let b = TraceStats::compute(&fh, &out);
        assert!(report.quantization.is_none());
        let rel = |x: f64, y: f64| (x - y).abs() / x;
        assert!(
            rel(a.rate_rps.mean.unwrap(), b.rate_rps.mean.unwrap()) < 0.15,
            "{:?} {:?}",
            a.rate_rps,
            b.rate_rps
        );
        assert!(b.dispersion.counts_1s.unwrap() > 5.0, "{:?}", b.dispersion);
        assert!((a.length_spearman.unwrap() - b.length_spearman.unwrap()).abs() < 0.1);
        assert!(rel(a.interarrival_cv.unwrap(), b.interarrival_cv.unwrap()) < 0.3);
    }

    #[test]
    fn keeps_prefix_reuse_honest() {
        let (h, src) = synthesize(&SynthSpec::practice(Shape::PrefixGroups), 1).unwrap();
        let (fh, out, _) = fit(&h, &src, &spec(100, 2)).unwrap();
        let a = TraceStats::compute(&h, &src).prefix_reuse.unwrap();
        let b = TraceStats::compute(&fh, &out).prefix_reuse.unwrap();
        // Groups span 10 requests; blocks of 10 cut some of them, so reuse can only drop a little.
        assert!(b > 0.7 && b <= a + 1e-9, "{a} {b}");
    }

    #[test]
    fn same_seed_same_trace() {
        let (h, src) = synthesize(&SynthSpec::practice(Shape::Bursts), 1).unwrap();
        let x = fit(&h, &src, &spec(250, 5)).unwrap().1;
        assert_eq!(x, fit(&h, &src, &spec(250, 5)).unwrap().1);
        assert_ne!(x, fit(&h, &src, &spec(250, 6)).unwrap().1);
    }

    #[test]
    fn quantized_sources_are_detected_and_spread_on_request() {
        let h = TraceHeader::new("mooncake-like", Mode::Online)
            .with_block_size(512)
            .unwrap();
        let src: Vec<Request> = (0..300)
            .map(|i| {
                Request::new(RequestFields {
                    id: format!("r{i}"),
                    t: (i / 6) as f64 * 3.0,
                    input_tokens: 600,
                    output_tokens: 10,
                    hash_ids: Some(vec![1, 1000 + i as u64]),
                    ..Default::default()
                })
                .unwrap()
            })
            .collect();
        let (fh, out, report) = fit(
            &h,
            &src,
            &FitSpec {
                requests: 300,
                seed: 1,
                spread: true,
                block: None,
            },
        )
        .unwrap();
        assert_eq!(report.quantization.map(|q| q.bucket_s), Some(3.0));
        assert!(report.spread);
        assert_eq!(
            detect_quantization(&out.iter().map(Request::t).collect::<Vec<_>>()),
            None
        );
        // Block 1 is the shared root of every request; the second blocks are private to one
        // request, so every copy gets a fresh one and reuse stays at the source's level.
        let reuse = TraceStats::compute(&fh, &out).prefix_reuse.unwrap();
        let src_reuse = TraceStats::compute(&h, &src).prefix_reuse.unwrap();
        assert!((reuse - src_reuse).abs() < 0.01, "{reuse} {src_reuse}");
        let (_, kept, report) = fit(&h, &src, &spec(300, 1)).unwrap();
        assert!(!report.spread);
        assert!(detect_quantization(&kept.iter().map(Request::t).collect::<Vec<_>>()).is_some());
    }

    #[test]
    fn too_small_sources_are_errors() {
        let h = TraceHeader::new("x", Mode::Online);
        assert!(fit(&h, &[], &spec(10, 0)).is_err());
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn shape() -> impl Strategy<Value = Shape> {
            prop_oneof![
                Just(Shape::Uniform),
                Just(Shape::Bursts),
                Just(Shape::PrefixGroups)
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn fitted_traces_are_sorted_exact_in_count_and_reproducible(
                shape in shape(),
                src_seed in any::<u64>(),
                seed in any::<u64>(),
                requests in 1u64..500,
                block in proptest::option::of(1usize..40),
                spread in any::<bool>(),
            ) {
                let (h, src) = synthesize(&SynthSpec::practice(shape), src_seed).unwrap();
                let spec = FitSpec { requests, seed, spread, block };
                let (fh, a, _) = fit(&h, &src, &spec).unwrap();
                let (_, b, _) = fit(&h, &src, &spec).unwrap();
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(a.len() as u64, requests);
                prop_assert!(a.windows(2).all(|w| w[0].t() <= w[1].t()));
                prop_assert!(a.iter().all(|r| r.t() <= fh.duration_s().unwrap()));
                // Every synthetic request is some source request's lengths, jointly.
                let pairs: std::collections::HashSet<(u64, u64)> =
                    src.iter().map(|r| (r.input_tokens(), r.output_tokens())).collect();
                prop_assert!(a.iter().all(|r| pairs.contains(&(r.input_tokens(), r.output_tokens()))));
                // And it survives its own writer and reader.
                let bytes = crate::trace::write_all(Vec::new(), &fh, &a, "out").unwrap();
                prop_assert!(crate::trace::read_all(&bytes[..], "out").is_ok());
            }
        }
    }
}
