//! The chapter's three practice traces — uniform, five bursts, ten prefix groups — with exact
//! token totals for any seed.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use crate::arrival::{ArrivalProcess, Rate};
use crate::error::WorkloadError;
use crate::trace::{Mode, PrefixFields, Request, RequestFields, TraceHeader};

/// Which practice trace to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Evenly spaced, equally sized requests.
    Uniform,
    /// The same mean rate, arriving in bursts, with mixed (heavy-tailed, correlated) lengths.
    Bursts,
    /// Conversation groups that share a long prefix and arrive together.
    PrefixGroups,
}

impl Shape {
    pub fn name(self) -> &'static str {
        match self {
            Shape::Uniform => "uniform",
            Shape::Bursts => "bursts",
            Shape::PrefixGroups => "prefix-groups",
        }
    }
}

/// What to synthesize, as given by the user; [`synthesize`] checks that it is feasible.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub shape: Shape,
    pub requests: u64,
    /// Input tokens in total. For prefix groups these are *distinct* tokens: each group's shared
    /// prefix counts once (docs/metrics.md, "Workload accounting").
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Mean arrival rate (requests per second); the trace lasts `requests / rate` seconds.
    pub rate: f64,
    /// Number of bursts (shape `bursts`).
    pub bursts: u64,
    /// Number of conversation groups (shape `prefix-groups`).
    pub groups: u64,
    /// Tokens of each group's shared prefix (shape `prefix-groups`).
    pub prefix_tokens: u64,
    /// Replace the evenly spaced arrivals of `uniform` and `prefix-groups` with gamma-distributed
    /// gaps of this coefficient of variation at the same mean rate (1 = Poisson). `bursts` has its
    /// own arrival pattern and refuses it.
    pub arrival_cv: Option<f64>,
}

impl SynthSpec {
    /// The chapter's practice trace: 100 requests, 100,000 input and 20,000 output tokens, 8 req/s,
    /// five bursts, ten groups sharing 8,000-token prefixes.
    pub fn practice(shape: Shape) -> Self {
        SynthSpec {
            shape,
            requests: 100,
            input_tokens: 100_000,
            output_tokens: 20_000,
            rate: 8.0,
            bursts: 5,
            groups: 10,
            prefix_tokens: 8_000,
            arrival_cv: None,
        }
    }
}

/// Per request: arrival time, input tokens, output tokens, and (group, turn) for prefix groups.
type Columns = (Vec<f64>, Vec<u64>, Vec<u64>, Option<Vec<(u64, u32)>>);

/// Seeds the arrival stream apart from the length stream.
const ARRIVAL_STREAM: u64 = 0xA77A_5EED_0000_0001;

/// Share of each burst's slot in which its requests arrive: a tenth, so a burst at 8 req/s mean
/// arrives at about 80 req/s.
const BURST_SPAN: f64 = 0.1;

fn infeasible(why: String) -> WorkloadError {
    WorkloadError::unusable("trace synth", why)
}

/// Build a practice trace. Its token totals are exactly those of the spec for every seed; a spec
/// that cannot be met (fewer tokens than requests, prefixes longer than the input) is an error.
pub fn synthesize(
    spec: &SynthSpec,
    seed: u64,
) -> Result<(TraceHeader, Vec<Request>), WorkloadError> {
    let n = spec.requests;
    if n == 0 {
        return Err(infeasible("--requests must be at least 1".into()));
    }
    if !(spec.rate.is_finite() && spec.rate > 0.0) {
        return Err(infeasible(format!(
            "--rate must be a finite number > 0, found {}",
            spec.rate
        )));
    }
    if spec.output_tokens < n {
        return Err(infeasible(format!(
            "{} output tokens cannot be spread over {n} requests (each needs at least 1)",
            spec.output_tokens
        )));
    }
    let len =
        usize::try_from(n).map_err(|_| infeasible(format!("{n} requests do not fit in memory")))?;
    let nominal = n as f64 / spec.rate;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let process = match (spec.arrival_cv, spec.shape) {
        (None, _) => None,
        (Some(_), Shape::Bursts) => {
            return Err(infeasible("the bursts shape has its own arrival pattern; --cv applies to uniform and prefix-groups".into()));
        }
        (Some(cv), _) => {
            let rate = Rate::new(spec.rate).map_err(|e| infeasible(e.to_string()))?;
            Some(
                ArrivalProcess::gamma(rate, cv)
                    .map_err(|e| infeasible(format!("--cv: {}", e.why)))?,
            )
        }
    };
    // Evenly spaced by default; from the gamma process when asked, on its own seeded stream so that
    // the lengths drawn below do not depend on it.
    let spaced = || -> Vec<f64> {
        match &process {
            None => (0..n).map(|i| i as f64 / spec.rate).collect(),
            Some(p) => {
                let mut times: Vec<f64> = p.arrivals(seed ^ ARRIVAL_STREAM).take(len).collect();
                // Start at 0 like the evenly spaced trace, so the first request is not delayed.
                let first = times.first().copied().unwrap_or(0.0);
                times.iter_mut().for_each(|t| *t -= first);
                times
            }
        }
    };

    let (times, inputs, outputs, groups): Columns = match spec.shape {
        Shape::Uniform => {
            need_input(spec.input_tokens, n)?;
            let times = spaced();
            (
                times,
                even_split(spec.input_tokens, len),
                even_split(spec.output_tokens, len),
                None,
            )
        }
        Shape::Bursts => {
            need_input(spec.input_tokens, n)?;
            if spec.bursts == 0 || spec.bursts > n {
                return Err(infeasible(format!(
                    "--bursts must be within 1..={n}, found {}",
                    spec.bursts
                )));
            }
            let slot = nominal / spec.bursts as f64;
            let sizes = even_split(n, spec.bursts as usize);
            let mut times = Vec::with_capacity(len);
            for (b, &size) in sizes.iter().enumerate() {
                let start = b as f64 * slot;
                let mut burst: Vec<f64> = (0..size)
                    .map(|_| start + rng.random::<f64>() * slot * BURST_SPAN)
                    .collect();
                burst.sort_by(f64::total_cmp);
                times.extend(burst);
            }
            let (w_in, w_out) = correlated_weights(&mut rng, len, 1.0);
            (
                times,
                apportion(spec.input_tokens, &w_in),
                apportion(spec.output_tokens, &w_out),
                None,
            )
        }
        Shape::PrefixGroups => {
            let g = spec.groups;
            if g == 0 || g > n {
                return Err(infeasible(format!(
                    "--groups must be within 1..={n}, found {}",
                    g
                )));
            }
            let shared = g
                .checked_mul(spec.prefix_tokens)
                .ok_or_else(|| infeasible("--groups × --prefix-tokens overflows".into()))?;
            let unique = spec.input_tokens.checked_sub(shared).filter(|u| *u >= n).ok_or_else(|| {
                infeasible(format!(
                    "{} distinct input tokens cannot hold {g} shared prefixes of {} tokens plus at least one \
                     unique token for each of {n} requests (needs {} or more)",
                    spec.input_tokens,
                    spec.prefix_tokens,
                    shared.saturating_add(n)
                ))
            })?;
            // Each group is one conversation whose turns arrive back to back, so its prefix is
            // reused while it is hot; arrivals are evenly spaced as in the uniform trace.
            let times = spaced();
            let sizes = even_split(n, g as usize);
            let mut groups = Vec::with_capacity(len);
            for (gi, &size) in sizes.iter().enumerate() {
                for turn in 0..size {
                    groups.push((gi as u64, u32::try_from(turn + 1).unwrap_or(u32::MAX)));
                }
            }
            let (w_in, w_out) = correlated_weights(&mut rng, len, 0.75);
            let inputs = apportion(unique, &w_in)
                .into_iter()
                .map(|u| u + spec.prefix_tokens)
                .collect();
            (
                times,
                inputs,
                apportion(spec.output_tokens, &w_out),
                Some(groups),
            )
        }
    };

    // The nominal `requests / rate`, unless random gaps ran past it: then one mean gap after the
    // last arrival, so that every arrival lies inside the trace.
    let last = times.last().copied().unwrap_or(0.0);
    let duration = if last < nominal {
        nominal
    } else {
        last + 1.0 / spec.rate
    };
    let mut requests = Vec::with_capacity(len);
    for i in 0..len {
        let mut fields = RequestFields {
            id: format!("r{i}"),
            t: times[i],
            input_tokens: inputs[i],
            output_tokens: outputs[i],
            modality: Some("text".into()),
            ..Default::default()
        };
        if let Some(groups) = &groups {
            let (g, turn) = groups[i];
            fields.prefix = Some(PrefixFields {
                group: format!("g{g}"),
                tokens: spec.prefix_tokens,
            });
            fields.session = Some(format!("s{g}"));
            fields.turn = Some(turn);
        }
        requests.push(Request::new(fields).map_err(|e| infeasible(e.to_string()))?);
    }
    let header = TraceHeader::new(format!("practice-{}", spec.shape.name()), Mode::Online)
        .with_duration_s(duration)
        .map_err(|e| infeasible(e.to_string()))?
        .with_source(format!(
            "shortlist trace synth --shape {}",
            spec.shape.name()
        ))
        .with_seed(seed);
    Ok((header, requests))
}

fn need_input(input: u64, n: u64) -> Result<(), WorkloadError> {
    if input < n {
        return Err(infeasible(format!(
            "{input} input tokens cannot be spread over {n} requests (each needs at least 1)"
        )));
    }
    Ok(())
}

/// `total` split into `parts` counts that differ by at most one, larger ones first.
fn even_split(total: u64, parts: usize) -> Vec<u64> {
    let parts_u = parts as u64;
    let (base, extra) = (total / parts_u, total % parts_u);
    (0..parts_u).map(|i| base + u64::from(i < extra)).collect()
}

/// Heavy-tailed (log-normal) input weights and output weights that grow with them (long
/// documents tend to get long answers), so lengths are mixed and correlated rather than
/// independent columns.
fn correlated_weights(rng: &mut ChaCha8Rng, n: usize, sigma: f64) -> (Vec<f64>, Vec<f64>) {
    let mut w_in = Vec::with_capacity(n);
    let mut w_out = Vec::with_capacity(n);
    for _ in 0..n {
        let z: f64 = StandardNormal.sample(rng);
        let noise: f64 = StandardNormal.sample(rng);
        let a = (sigma * z).exp();
        w_in.push(a);
        w_out.push(a.powf(0.6) * (0.5 * noise).exp());
    }
    (w_in, w_out)
}

/// Split `total` into one count per weight, each at least 1, proportional to the weights, summing
/// to `total` exactly (largest-remainder method; ties go to the earlier index). Needs
/// `total ≥ weights.len()` and positive finite weights.
pub fn apportion(total: u64, weights: &[f64]) -> Vec<u64> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let rest = total.saturating_sub(n as u64);
    let sum: f64 = weights.iter().sum();
    let share = |w: f64| {
        if sum > 0.0 && sum.is_finite() {
            w / sum
        } else {
            1.0 / n as f64
        }
    };
    let exact: Vec<f64> = weights.iter().map(|&w| rest as f64 * share(w)).collect();
    let mut counts: Vec<u64> = exact.iter().map(|e| e.floor() as u64).collect();
    let assigned: u64 = counts.iter().sum();
    let mut order: Vec<usize> = (0..n).collect();
    if assigned <= rest {
        // Hand out what flooring left over, largest fractional part first.
        order.sort_by(|&a, &b| {
            (exact[b] - exact[b].floor())
                .total_cmp(&(exact[a] - exact[a].floor()))
                .then(a.cmp(&b))
        });
        let mut left = rest - assigned;
        let mut k = 0;
        while left > 0 {
            counts[order[k % n]] += 1;
            left -= 1;
            k += 1;
        }
    } else {
        // Rounding in floating point overshot; take the excess back from the largest counts.
        order.sort_by(|&a, &b| counts[b].cmp(&counts[a]).then(a.cmp(&b)));
        let mut excess = assigned - rest;
        let mut k = 0;
        while excess > 0 {
            let i = order[k % n];
            if counts[i] > 0 {
                counts[i] -= 1;
                excess -= 1;
            }
            k += 1;
        }
    }
    counts.iter().map(|c| c + 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn totals(reqs: &[Request]) -> (u64, u64) {
        (
            reqs.iter().map(Request::input_tokens).sum(),
            reqs.iter().map(Request::output_tokens).sum(),
        )
    }

    fn distinct_input(reqs: &[Request]) -> u64 {
        let mut groups = std::collections::BTreeMap::new();
        let mut unique = 0;
        for r in reqs {
            let p = r.prefix().map_or(0, |p| p.tokens);
            if let Some(p) = r.prefix() {
                groups.insert(p.group.clone(), p.tokens);
            }
            unique += r.input_tokens() - p;
        }
        unique + groups.values().sum::<u64>()
    }

    #[test]
    fn the_chapters_three_traces() {
        for shape in [Shape::Uniform, Shape::Bursts, Shape::PrefixGroups] {
            let (h, reqs) = synthesize(&SynthSpec::practice(shape), 0).unwrap();
            assert_eq!(reqs.len(), 100);
            assert_eq!(h.duration_s(), Some(12.5));
            let (sent, out) = totals(&reqs);
            assert_eq!(out, 20_000);
            assert_eq!(distinct_input(&reqs), 100_000);
            match shape {
                Shape::PrefixGroups => assert_eq!(sent, 820_000),
                _ => assert_eq!(sent, 100_000),
            }
        }
        let (_, uni) = synthesize(&SynthSpec::practice(Shape::Uniform), 0).unwrap();
        assert!(
            uni.iter()
                .all(|r| r.input_tokens() == 1000 && r.output_tokens() == 200)
        );
        assert_eq!(uni[1].t(), 0.125);
    }

    #[test]
    fn infeasible_specs_are_clear_errors() {
        let mut spec = SynthSpec::practice(Shape::PrefixGroups);
        spec.input_tokens = 80_050;
        let err = synthesize(&spec, 0).unwrap_err().to_string();
        assert!(err.contains("needs 80100 or more"), "{err}");
        let mut spec = SynthSpec::practice(Shape::Uniform);
        spec.output_tokens = 10;
        assert!(synthesize(&spec, 0).is_err());
        spec = SynthSpec::practice(Shape::Bursts);
        spec.rate = 0.0;
        assert!(synthesize(&spec, 0).is_err());
    }

    #[test]
    fn poisson_arrivals_on_request() {
        let mut spec = SynthSpec::practice(Shape::PrefixGroups);
        spec.arrival_cv = Some(1.0);
        let (h, reqs) = synthesize(&spec, 4).unwrap();
        assert_eq!(reqs[0].t(), 0.0);
        assert!(
            reqs.windows(2)
                .any(|w| (w[1].t() - w[0].t() - 0.125).abs() > 1e-3)
        );
        assert!(reqs.iter().all(|r| r.t() < h.duration_s().unwrap()));
        assert_eq!(distinct_input(&reqs), 100_000);
        let mut spec = SynthSpec::practice(Shape::Bursts);
        spec.arrival_cv = Some(1.0);
        assert!(synthesize(&spec, 0).is_err());
    }

    #[test]
    fn apportion_is_exact_and_at_least_one() {
        assert_eq!(apportion(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(apportion(3, &[5.0, 1.0, 1.0]), vec![1, 1, 1]);
        assert_eq!(apportion(7, &[0.0, 0.0]), vec![4, 3]);
    }

    fn shape() -> impl Strategy<Value = Shape> {
        prop_oneof![
            Just(Shape::Uniform),
            Just(Shape::Bursts),
            Just(Shape::PrefixGroups)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn practice_traces_hold_for_any_seed(shape in shape(), seed in any::<u64>()) {
            let spec = SynthSpec::practice(shape);
            let (_, a) = synthesize(&spec, seed).unwrap();
            let (_, b) = synthesize(&spec, seed).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert!(a.windows(2).all(|w| w[0].t() <= w[1].t()));
            prop_assert!(a.iter().all(|r| r.t() < 12.5));
            prop_assert_eq!(distinct_input(&a), 100_000);
            prop_assert_eq!(totals(&a).1, 20_000);
        }

        #[test]
        fn totals_hold_for_other_feasible_specs(
            shape in shape(),
            seed in any::<u64>(),
            requests in 1u64..400,
            extra_in in 0u64..1_000_000,
            extra_out in 0u64..100_000,
            rate in 0.1f64..500.0,
            groups in 1u64..20,
            prefix in 0u64..5000,
            cv in proptest::option::of(0.0f64..4.0),
        ) {
            let groups = groups.min(requests);
            let bursts = groups;
            let input_tokens = requests + extra_in + if shape == Shape::PrefixGroups { groups * prefix } else { 0 };
            let spec = SynthSpec {
                shape, requests, input_tokens, output_tokens: requests + extra_out, rate, bursts, groups, prefix_tokens: prefix,
                arrival_cv: if shape == Shape::Bursts { None } else { cv },
            };
            let (h, reqs) = synthesize(&spec, seed).unwrap();
            prop_assert_eq!(reqs.len() as u64, requests);
            prop_assert_eq!(distinct_input(&reqs), input_tokens);
            prop_assert_eq!(totals(&reqs).1, spec.output_tokens);
            prop_assert!(reqs.iter().all(|r| r.output_tokens() >= 1 && r.input_tokens() >= 1));
            let d = h.duration_s().unwrap();
            prop_assert!(reqs.windows(2).all(|w| w[0].t() <= w[1].t()));
            prop_assert!(reqs.iter().all(|r| r.t() < d));
        }
    }
}
