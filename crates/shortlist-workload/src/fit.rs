//! Synthesize a new trace that keeps a source trace's joint structure, by a moving-block
//! bootstrap over whole requests or whole sessions.
//!
//! The unit of resampling is a whole request (or, for traces made of conversations, a whole
//! session with its turns' relative timing). Units keep their input length, output length,
//! prefix, tenant and priority together, so length–length correlation survives (columns are never
//! sampled independently). Units are copied in blocks of consecutive units with the gaps between
//! their starts, so bursts and over-dispersion survive up to the block's time scale, and so do the
//! prefix relations between neighbours. Identities are handled so that reuse stays honest: a
//! prefix (group or hash block) used only inside the copied block gets a fresh identity in each
//! copy (a resampled conversation is a new conversation), while one also used elsewhere in the
//! source (a system prompt) keeps its identity. Sessions are renamed per copy.

use std::collections::{BinaryHeap, HashMap};

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::WorkloadError;
use crate::stats::{Quantization, detect_quantization};
use crate::trace::{Request, RequestFields, TraceHeader};

/// What to resample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FitMethod {
    /// Sessions when at least half of the source's requests belong to sessions of two or more
    /// turns on average, requests otherwise.
    #[default]
    Auto,
    /// Whole requests.
    Requests,
    /// Whole sessions (requests without a session are units of their own).
    Sessions,
}

/// What to synthesize.
#[derive(Debug, Clone, PartialEq)]
pub struct FitSpec {
    pub requests: u64,
    pub seed: u64,
    /// Spread quantized source timestamps uniformly within their bucket before fitting.
    pub spread: bool,
    /// Units per resampled block; `None` picks √(number of units), at least 1.
    pub block: Option<usize>,
    pub method: FitMethod,
}

/// What the fit found and did, for the side-by-side report.
#[derive(Debug, Clone, PartialEq)]
pub struct FitReport {
    /// The source's timestamps lie on this grid (e.g. Mooncake's 3 s buckets).
    pub quantization: Option<Quantization>,
    /// Whether they were spread within their buckets before resampling.
    pub spread: bool,
    /// `requests` or `sessions`: the unit that was resampled.
    pub method: &'static str,
    /// Units in the source.
    pub units: usize,
    /// Units per block.
    pub block: usize,
}

fn unusable(why: impl Into<String>) -> WorkloadError {
    WorkloadError::unusable("trace fit", why)
}

/// First and last unit that uses each identity.
fn spans<K: std::hash::Hash + Eq>(
    keys: impl Iterator<Item = (usize, K)>,
) -> HashMap<K, (usize, usize)> {
    let mut out: HashMap<K, (usize, usize)> = HashMap::new();
    for (u, k) in keys {
        out.entry(k)
            .and_modify(|s| *s = (s.0.min(u), s.1.max(u)))
            .or_insert((u, u));
    }
    out
}

fn use_sessions(source: &[&Request]) -> bool {
    let with_session = source.iter().filter(|r| r.session().is_some()).count();
    let sessions = source
        .iter()
        .filter_map(|r| r.session())
        .collect::<std::collections::HashSet<_>>()
        .len();
    with_session * 2 >= source.len() && sessions > 0 && with_session >= 2 * sessions
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
    if spec.block == Some(0) {
        return Err(unusable("--block must be at least 1"));
    }
    let n_out = usize::try_from(spec.requests)
        .map_err(|_| unusable("--requests does not fit in memory"))?;
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
    let mean_request_gap = (t_src[n_src - 1] - t_src[0]) / (n_src - 1) as f64;

    let by_sessions = match spec.method {
        FitMethod::Auto => use_sessions(&src),
        FitMethod::Requests => false,
        FitMethod::Sessions => true,
    };
    // Units in order of their first request, which is their start time since `src` is sorted.
    let mut units: Vec<Vec<usize>> = Vec::new();
    let mut unit_of: Vec<usize> = Vec::with_capacity(n_src);
    let mut session_unit: HashMap<&str, usize> = HashMap::new();
    for (i, r) in src.iter().enumerate() {
        let u = match (by_sessions, r.session()) {
            (true, Some(s)) => *session_unit.entry(s).or_insert_with(|| {
                units.push(Vec::new());
                units.len() - 1
            }),
            _ => {
                units.push(Vec::new());
                units.len() - 1
            }
        };
        units[u].push(i);
        unit_of.push(u);
    }
    let m = units.len();
    if m < 2 {
        return Err(unusable(
            "the source is a single session; fit by requests (--by requests) instead",
        ));
    }
    let starts: Vec<f64> = units.iter().map(|u| t_src[u[0]]).collect();
    let mean_unit_gap = (starts[m - 1] - starts[0]) / (m - 1) as f64;
    // gaps[k]: the wait before unit k starts; the first has none in the source, so it gets the mean.
    let gaps: Vec<f64> = std::iter::once(mean_unit_gap)
        .chain(starts.windows(2).map(|w| w[1] - w[0]))
        .collect();
    let block = spec
        .block
        .unwrap_or_else(|| (m as f64).sqrt().round() as usize)
        .clamp(1, m);

    let group_span = spans(
        src.iter()
            .enumerate()
            .filter_map(|(i, r)| r.prefix().map(|p| (unit_of[i], p.group.clone()))),
    );
    let hash_span = spans(
        src.iter()
            .enumerate()
            .flat_map(|(i, r)| r.hash_ids().unwrap_or(&[]).iter().map(move |&h| (i, h)))
            .map(|(i, h)| (unit_of[i], h)),
    );
    let mut next_hash = hash_span
        .keys()
        .copied()
        .max()
        .map_or(0, |m| m.saturating_add(1));

    // Units are placed until no further unit can start before the n-th earliest request placed so
    // far; `earliest` holds the n earliest times (as bits: for t ≥ 0 they order like the floats).
    let mut placed: Vec<(f64, RequestFields)> = Vec::new();
    let mut earliest: BinaryHeap<u64> = BinaryHeap::new();
    let mut t_unit = 0.0_f64;
    let mut first = true;
    let mut copy = 0u64;
    'blocks: loop {
        let start = rng.random_range(0..=m - block);
        let end = start + block;
        let local = |span: &(usize, usize)| span.0 >= start && span.1 < end;
        let mut fresh_hash: HashMap<u64, u64> = HashMap::new();
        for k in start..end {
            if !first {
                t_unit += gaps[k];
            }
            first = false;
            if placed.len() >= n_out
                && earliest
                    .peek()
                    .is_some_and(|&top| t_unit >= f64::from_bits(top))
            {
                break 'blocks;
            }
            for &i in &units[k] {
                let t = t_unit + (t_src[i] - starts[k]);
                let mut f = src[i].fields().clone();
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
                placed.push((t, f));
                earliest.push(t.to_bits());
                if earliest.len() > n_out {
                    earliest.pop();
                }
            }
        }
        copy += 1;
    }
    // Stable: equal times keep the order in which they were placed.
    placed.sort_by(|a, b| a.0.total_cmp(&b.0));
    placed.truncate(n_out);
    let mut out = Vec::with_capacity(n_out);
    for (k, (_, mut f)) in placed.into_iter().enumerate() {
        f.id = format!("r{k}");
        out.push(Request::new(f).map_err(|e| unusable(e.to_string()))?);
    }

    let last = out.last().map_or(0.0, Request::t);
    let method = if by_sessions { "sessions" } else { "requests" };
    let mut fitted = TraceHeader::new(format!("fit-{}", header.name()), header.mode())
        .with_duration_s(last + mean_request_gap.max(0.0))
        .map_err(|e| unusable(e.to_string()))?
        .with_source(format!(
            "shortlist trace fit of `{}` (moving-block bootstrap of {method}, {block} per block{})",
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
            method,
            units: m,
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
            method: FitMethod::Auto,
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
                method: FitMethod::Auto,
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

    /// Conversations that interleave: 60 sessions of 2–8 turns, sessions starting about every 10 s,
    /// turns 5–30 s apart, and turn lengths that grow with the conversation.
    fn conversations(seed: u64) -> (TraceHeader, Vec<Request>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut rows = Vec::new();
        let mut start = 0.0;
        for s in 0..60 {
            start += rng.random::<f64>() * 20.0;
            let turns = rng.random_range(2..=8u32);
            let mut t = start;
            for turn in 1..=turns {
                rows.push((t, s, turn));
                t += 5.0 + rng.random::<f64>() * 25.0;
            }
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let reqs = rows
            .iter()
            .enumerate()
            .map(|(i, &(t, s, turn))| {
                Request::new(RequestFields {
                    id: format!("r{i}"),
                    t,
                    input_tokens: 500 * u64::from(turn),
                    output_tokens: 100,
                    session: Some(format!("s{s}")),
                    turn: Some(turn),
                    prefix: Some(crate::trace::PrefixFields {
                        group: format!("s{s}"),
                        tokens: 500 * u64::from(turn - 1),
                    }),
                    ..Default::default()
                })
                .unwrap()
            })
            .collect();
        (TraceHeader::new("conversations", Mode::Online), reqs)
    }

    #[test]
    fn sessions_are_resampled_whole() {
        let (h, src) = conversations(5);
        let a = TraceStats::compute(&h, &src);
        let (fh, out, report) = fit(&h, &src, &spec(600, 1)).unwrap();
        assert_eq!(report.method, "sessions");
        assert_eq!(out.len(), 600);
        let b = TraceStats::compute(&fh, &out);
        let turns = |s: &TraceStats| s.turns_per_session.unwrap();
        // Only the sessions cut by the end of the synthetic trace lose turns.
        assert!(
            (turns(&a) - turns(&b)).abs() / turns(&a) < 0.1,
            "{} {}",
            turns(&a),
            turns(&b)
        );
        // Each resampled conversation is new: its prefix group is fresh, so reuse stays put.
        let reuse = |s: &TraceStats| s.prefix_reuse.unwrap();
        assert!(
            (reuse(&a) - reuse(&b)).abs() < 0.05,
            "{} {}",
            reuse(&a),
            reuse(&b)
        );
        // Turn numbers inside a synthetic session are still 1, 2, 3, … in time order.
        let mut by_session: HashMap<&str, Vec<u32>> = HashMap::new();
        for r in &out {
            by_session
                .entry(r.session().unwrap())
                .or_default()
                .push(r.fields().turn.unwrap());
        }
        assert!(by_session.values().all(|t| {
            t.iter()
                .enumerate()
                .all(|(k, &turn)| turn as usize == k + 1)
        }));
        // By requests instead, small blocks cut conversations apart.
        let by_requests = FitSpec {
            method: FitMethod::Requests,
            ..spec(600, 1)
        };
        let (fh, out, report) = fit(&h, &src, &by_requests).unwrap();
        assert_eq!(report.method, "requests");
        assert!(turns(&TraceStats::compute(&fh, &out)) < turns(&a) * 0.8);
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
                let spec = FitSpec { requests, seed, spread, block, method: FitMethod::Auto };
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
