//! Token sampling: greedy, or seeded temperature / top-k / top-p, with validated parameters.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{EngineError, Result};

/// How the next token is chosen and when generation stops. Built through [`SamplingParams::new`],
/// so a value always holds parameters in range.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    temperature: f32,
    top_p: f32,
    top_k: usize,
    seed: u64,
    max_tokens: usize,
    stop: Vec<String>,
    min_tokens: usize,
    ignore_eos: bool,
    logprobs: Option<usize>,
    prompt_logprobs: Option<usize>,
}

/// The most alternatives a token's log-probabilities list (OpenAI's limit for `top_logprobs`).
pub const MAX_TOP_LOGPROBS: usize = 20;

impl SamplingParams {
    /// Greedy decoding for at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
            max_tokens,
            stop: Vec::new(),
            min_tokens: 0,
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
        }
    }

    /// Validated parameters. `temperature` 0 means greedy; `top_k` 0 means no cut; `top_p` in
    /// (0, 1]; the seed makes sampling reproducible.
    pub fn new(
        temperature: f32,
        top_p: f32,
        top_k: usize,
        seed: u64,
        max_tokens: usize,
        stop: Vec<String>,
    ) -> Result<Self> {
        if !temperature.is_finite() || !(0.0..=10.0).contains(&temperature) {
            return Err(EngineError::InvalidParameter {
                field: "temperature",
                message: format!("{temperature} is not in [0, 10]"),
            });
        }
        if !top_p.is_finite() || top_p <= 0.0 || top_p > 1.0 {
            return Err(EngineError::InvalidParameter {
                field: "top_p",
                message: format!("{top_p} is not in (0, 1]"),
            });
        }
        if max_tokens == 0 {
            return Err(EngineError::InvalidParameter {
                field: "max_tokens",
                message: "must be at least 1".into(),
            });
        }
        if stop.iter().any(String::is_empty) {
            return Err(EngineError::InvalidParameter {
                field: "stop",
                message: "stop sequences must not be empty".into(),
            });
        }
        Ok(Self {
            temperature,
            top_p,
            top_k,
            seed,
            max_tokens,
            stop,
            min_tokens: 0,
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
        })
    }

    /// The same, reporting each generated token's log-probability and those of the `top` most
    /// likely tokens at its position (`None`: no log-probabilities). Refused above
    /// [`MAX_TOP_LOGPROBS`].
    pub fn with_logprobs(mut self, top: Option<usize>) -> Result<Self> {
        self.logprobs = alternatives(top, "top_logprobs")?;
        Ok(self)
    }

    /// How many alternatives each token's log-probabilities list, when asked for.
    pub fn logprobs(&self) -> Option<usize> {
        self.logprobs
    }

    /// The same, also reporting the log-probability of every prompt token after the first
    /// (given the tokens before it) and the `top` most likely tokens at its position
    /// (`None`: none; vLLM's `prompt_logprobs`, OpenAI's `echo` with `logprobs`). Every prompt
    /// position is then computed: the prefix cache does not serve such a request. Refused
    /// above [`MAX_TOP_LOGPROBS`].
    pub fn with_prompt_logprobs(mut self, top: Option<usize>) -> Result<Self> {
        self.prompt_logprobs = alternatives(top, "logprobs")?;
        Ok(self)
    }

    /// How many alternatives each prompt token's log-probabilities list, when asked for.
    pub fn prompt_logprobs(&self) -> Option<usize> {
        self.prompt_logprobs
    }

    /// The same with the seed moved on by `offset`: choice `offset` of a request asking for
    /// several (`n`) samples each draws its own reproducible stream.
    pub fn with_seed_offset(mut self, offset: u64) -> Self {
        self.seed = self.seed.wrapping_add(offset);
        self
    }

    /// The same, generating at least `min_tokens` before anything may end the answer (vLLM's
    /// `min_tokens`): until then no end-of-generation token is chosen and no stop sequence
    /// ends it. Refused above `max_tokens`.
    pub fn with_min_tokens(mut self, min_tokens: usize) -> Result<Self> {
        if min_tokens > self.max_tokens {
            return Err(EngineError::InvalidParameter {
                field: "min_tokens",
                message: format!(
                    "{min_tokens} is above max_tokens ({}); at most max_tokens tokens are generated",
                    self.max_tokens
                ),
            });
        }
        self.min_tokens = min_tokens;
        Ok(self)
    }

    /// The same, never ending on an end-of-generation token (vLLM's `ignore_eos`): those tokens
    /// are not chosen, so the answer runs to `max_tokens` unless a stop sequence ends it. Load
    /// runs ask for it, so that each request generates the output length its trace names.
    pub fn with_ignore_eos(mut self, ignore_eos: bool) -> Self {
        self.ignore_eos = ignore_eos;
        self
    }

    /// Whether the answer may end after `generated` tokens: on an end-of-generation token
    /// (unless `ignore_eos`) or a stop sequence; `max_tokens` ends it regardless.
    pub fn may_end(&self, generated: usize) -> bool {
        generated >= self.min_tokens
    }

    /// Whether end-of-generation tokens may be chosen after `generated` tokens.
    pub fn may_choose_end(&self, generated: usize) -> bool {
        !self.ignore_eos && self.may_end(generated)
    }

    /// The fewest new tokens (0 unless asked).
    pub fn min_tokens(&self) -> usize {
        self.min_tokens
    }

    /// Whether end-of-generation tokens are never chosen.
    pub fn ignore_eos(&self) -> bool {
        self.ignore_eos
    }

    /// Maximum new tokens.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// Stop sequences (text that ends the output, excluded from it).
    pub fn stop(&self) -> &[String] {
        &self.stop
    }

    /// Whether decoding is greedy.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// A sampler with its own seeded random stream.
    pub fn sampler(&self) -> Sampler {
        Sampler {
            params: self.clone(),
            rng: ChaCha8Rng::seed_from_u64(self.seed),
        }
    }
}

/// Chooses tokens from logits; owns the random stream of one request.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

/// Index of the largest logit; the first on ties (as llama.cpp's greedy sampler).
pub fn argmax(logits: &[f32]) -> u32 {
    match first_max(logits) {
        Some(i) => i as u32,
        None => argmax_scalar(logits),
    }
}

/// [`argmax`] one logit after another: the reference, and the way where a logit is NaN.
fn argmax_scalar(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The largest of `logits` (NaN-free) and whether any is NaN, in eight lanes that the compiler
/// keeps in a register: a vocabulary-long pass at register speed instead of a compare and a
/// branch per logit (Gemma 3: 262,144 logits per token for every sequence of a step).
fn max_and_nan(logits: &[f32]) -> (f32, bool) {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut nan = [false; 8];
    let chunks = logits.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            lanes[j] = if c[j] > lanes[j] { c[j] } else { lanes[j] };
            nan[j] |= c[j].is_nan();
        }
    }
    let mut max = f32::NEG_INFINITY;
    let mut any_nan = nan.iter().any(|&n| n);
    for &x in lanes.iter().chain(rest) {
        max = if x > max { x } else { max };
        any_nan |= x.is_nan();
    }
    (max, any_nan)
}

/// The first index holding the largest logit, where no logit is NaN (`None` where one is, or
/// `logits` is empty): what [`argmax_scalar`] returns, since it moves only to a strictly larger
/// logit and `==` holds between the zeros of either sign as `>` does not.
fn first_max(logits: &[f32]) -> Option<usize> {
    let (max, nan) = max_and_nan(logits);
    if nan {
        return None;
    }
    logits.iter().position(|&l| l == max)
}

/// `ln Σ e^l` over `logits`: the largest logit `m` plus the log of `Σ e^(l - m)`, each term taken
/// by the engine's f32 exponential ([`crate::activation::exp`], within 4e-7 of the exact value,
/// the same bits on every instruction set, and vectorized, where `f64::exp` is a library call
/// per logit) and summed in f64 in eight lanes (lane `j` adds the terms at `j`, `j + 8`, ...,
/// then the lanes in order, then the terms past the last multiple of eight), so the sum's
/// rounding stays far below the terms' own error. NaN where a logit is NaN; `+inf` where one is.
pub fn log_sum_exp(logits: &[f32]) -> f64 {
    let (max, nan) = max_and_nan(logits);
    if nan {
        return f64::NAN;
    }
    if max.is_infinite() {
        // All -inf (no probability anywhere) or a +inf (all of it there): the limit.
        return f64::from(max);
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512 F (checked just above).
        return f64::from(max) + unsafe { sum_exp_avx512(logits, max) }.ln();
    }
    f64::from(max) + sum_exp(logits, max).ln()
}

/// `Σ e^(l - max)` for [`log_sum_exp`].
#[inline(always)]
fn sum_exp(logits: &[f32], max: f32) -> f64 {
    let exp = crate::activation::exp;
    let mut lanes = [0f64; 8];
    let chunks = logits.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            lanes[j] += f64::from(exp(c[j] - max));
        }
    }
    let mut sum: f64 = lanes.iter().sum();
    for &l in rest {
        sum += f64::from(exp(l - max));
    }
    sum
}

/// [`sum_exp`] compiled for 512-bit registers: each value's operations and each lane's order
/// are the same, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_exp_avx512(logits: &[f32], max: f32) -> f64 {
    sum_exp(logits, max)
}

/// A generated token's log-probability under the model's distribution (softmax of the logits,
/// before temperature or cuts), and the `top` most likely tokens at its position, most likely
/// first (ties by id).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    /// The chosen token's log-probability.
    pub logprob: f32,
    /// `(id, log-probability)` of the most likely tokens.
    pub top: Vec<(u32, f32)>,
}

/// `top` alternatives asked for in `field`, refused above [`MAX_TOP_LOGPROBS`].
fn alternatives(top: Option<usize>, field: &'static str) -> Result<Option<usize>> {
    match top {
        Some(n) if n > MAX_TOP_LOGPROBS => Err(EngineError::InvalidParameter {
            field,
            message: format!("{n} is above {MAX_TOP_LOGPROBS}"),
        }),
        _ => Ok(top),
    }
}

/// The log-probabilities of `token` and of the `top` most likely tokens, from `logits`.
pub fn logprobs(logits: &[f32], token: u32, top: usize) -> TokenLogprobs {
    let lse = log_sum_exp(logits);
    let lp = |l: f32| (f64::from(l) - lse) as f32;
    let logprob = logits
        .get(token as usize)
        .map_or(f32::NEG_INFINITY, |&l| lp(l));
    if top == 0 {
        return TokenLogprobs {
            logprob,
            top: Vec::new(),
        };
    }
    // The `top` most likely in one pass, kept in order (a vocabulary-long list of ids to select
    // from cost Gemma 3's 262,144-token vocabulary a megabyte and a sort per token). A chunk
    // whose largest value is below the `top`-th kept one, with no NaN on either side (a NaN's
    // place in the total order shows in no comparison), holds nothing to keep: ids only grow,
    // so no later value wins a tie.
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
    for (c, chunk) in logits.chunks(TOP_CHUNK).enumerate() {
        if let Some(&(_, kth)) = best.get(top - 1).filter(|k| !k.1.is_nan()) {
            let (m, nan) = max_and_nan(chunk);
            if !nan && m < kth {
                continue;
            }
        }
        for (j, &l) in chunk.iter().enumerate() {
            let x = ((c * TOP_CHUNK + j) as u32, l);
            if best.len() == top && best.last().is_some_and(|last| by_logit(&x, last).is_ge()) {
                continue;
            }
            let at = best.partition_point(|y| by_logit(y, &x).is_lt());
            best.insert(at, x);
            best.truncate(top);
        }
    }
    TokenLogprobs {
        logprob,
        top: best.into_iter().map(|(i, l)| (i, lp(l))).collect(),
    }
}

/// Logits per chunk that [`logprobs`] skips whole when its largest is below the alternatives kept.
const TOP_CHUNK: usize = 256;

/// Most likely first: the larger logit, then the smaller id.
fn by_logit(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Index of the largest logit outside `banned`; the first on ties. `None` when every id is
/// banned.
fn argmax_except(logits: &[f32], banned: &[u32]) -> Option<u32> {
    // The first maximum overall, where it is not banned, is the first among the others too.
    if let Some(i) = first_max(logits).filter(|&i| !banned.contains(&(i as u32))) {
        return Some(i as u32);
    }
    argmax_except_scalar(logits, banned)
}

/// [`argmax_except`] one logit after another.
fn argmax_except_scalar(logits: &[f32], banned: &[u32]) -> Option<u32> {
    let mut best: Option<usize> = None;
    for (i, &l) in logits.iter().enumerate() {
        if banned.contains(&(i as u32)) {
            continue;
        }
        if best.is_none_or(|b| l > logits[b]) {
            best = Some(i);
        }
    }
    best.map(|b| b as u32)
}

impl Sampler {
    /// The next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_except(logits, &[])
    }

    /// The next token, never one of `banned` (the end-of-generation tokens while the answer may
    /// not end) unless every token is banned. Greedy takes the largest logit left; sampling
    /// draws among the rest as if the banned tokens had a logit of −∞.
    pub fn sample_except(&mut self, logits: &[f32], banned: &[u32]) -> u32 {
        let p = &self.params;
        if p.temperature == 0.0 || logits.len() < 2 {
            return argmax_except(logits, banned).unwrap_or_else(|| argmax(logits));
        }
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .filter(|(i, _)| !banned.contains(i))
            .collect();
        if cand.is_empty() {
            return argmax(logits);
        }
        // Descending logits, ties by id, so that the cut-offs are deterministic.
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if p.top_k > 0 && p.top_k < cand.len() {
            cand.truncate(p.top_k);
        }
        let max = cand[0].1;
        let inv_t = 1.0 / p.temperature;
        let mut probs: Vec<f32> = cand
            .iter()
            .map(|&(_, l)| ((l - max) * inv_t).exp())
            .collect();
        let sum: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (i, &pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= p.top_p {
                    keep = i + 1;
                    break;
                }
            }
            probs.truncate(keep);
            let s: f32 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= s);
        }
        let r: f32 = self.rng.random::<f32>();
        let mut acc = 0.0;
        for (i, &pr) in probs.iter().enumerate() {
            acc += pr;
            if r < acc {
                return cand[i].0;
            }
        }
        cand[probs.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rejects_out_of_range_parameters() {
        assert!(SamplingParams::new(-1.0, 1.0, 0, 0, 8, vec![]).is_err());
        assert!(SamplingParams::new(1.0, 0.0, 0, 0, 8, vec![]).is_err());
        assert!(SamplingParams::new(1.0, 1.0, 0, 0, 0, vec![]).is_err());
        assert!(SamplingParams::new(1.0, 1.0, 0, 0, 8, vec![String::new()]).is_err());
    }

    #[test]
    fn min_tokens_above_max_tokens_is_refused() {
        let p = SamplingParams::new(0.0, 1.0, 0, 0, 8, vec![]).unwrap();
        assert!(p.clone().with_min_tokens(9).is_err());
        let p = p.with_min_tokens(8).unwrap();
        assert!(!p.may_end(7) && p.may_end(8));
        let p = p.with_ignore_eos(true);
        assert!(!p.may_choose_end(100));
    }

    #[test]
    fn a_banned_token_is_never_chosen() {
        let logits = [0.0, 5.0, 1.0, 4.0];
        let mut greedy = SamplingParams::greedy(4).sampler();
        assert_eq!(greedy.sample_except(&logits, &[1]), 3);
        assert_eq!(greedy.sample_except(&logits, &[0, 1, 2, 3]), 1);
        let mut hot = SamplingParams::new(2.0, 1.0, 0, 7, 4, vec![])
            .unwrap()
            .sampler();
        for _ in 0..200 {
            assert_ne!(hot.sample_except(&logits, &[1, 3]), 1);
        }
    }

    #[test]
    fn logprobs_are_a_normalized_log_softmax_with_the_top_first() {
        let logits = [1.0, 3.0, 2.0, 3.0];
        let lp = logprobs(&logits, 2, 3);
        let total: f32 = [0, 1, 2, 3]
            .iter()
            .map(|&i| logprobs(&logits, i, 0).logprob.exp())
            .sum();
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        assert_eq!(
            lp.top.iter().map(|t| t.0).collect::<Vec<_>>(),
            vec![1, 3, 2]
        );
        assert!((lp.logprob - lp.top[2].1).abs() < 1e-7);
        assert!((lp.top[0].1 - lp.top[1].1).abs() < 1e-7);
        assert!(SamplingParams::greedy(4).with_logprobs(Some(21)).is_err());
    }

    /// [`logprobs`]' alternatives as they were found before the one-pass selection: every id
    /// sorted by logit (then id), the first `top` kept.
    fn top_by_sorting(logits: &[f32], top: usize) -> Vec<u32> {
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        order.sort_unstable_by(|a, b| {
            by_logit(&(*a, logits[*a as usize]), &(*b, logits[*b as usize]))
        });
        order.truncate(top);
        order
    }

    /// The total order's corners where a chunk is skipped: +0 above -0 (equal to an IEEE
    /// comparison), a NaN in a later chunk above everything, a negative NaN below everything.
    #[test]
    fn top_logprobs_keep_the_total_order_across_chunks() {
        let c = TOP_CHUNK;
        let mut zeros = vec![-0.0f32; c];
        zeros.push(0.0);
        assert_eq!(logprobs(&zeros, 0, 1).top[0].0, c as u32);
        let mut nan = vec![1.0f32; 2 * c + 2];
        nan[2 * c + 1] = f32::NAN;
        assert_eq!(logprobs(&nan, 0, 1).top[0].0, 2 * c as u32 + 1);
        let mut low = vec![-f32::NAN; c];
        low.push(f32::NEG_INFINITY);
        assert_eq!(logprobs(&low, 0, 1).top[0].0, c as u32);
        for logits in [zeros, nan, low] {
            let got: Vec<u32> = logprobs(&logits, 0, 3).top.iter().map(|t| t.0).collect();
            assert_eq!(got, top_by_sorting(&logits, 3));
        }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.0, 2.0, 2.0, 1.0]), 1);
        // Past the eight lanes, and the zeros of either sign equal.
        let mut zeros = vec![-1.0f32; 19];
        zeros[11] = -0.0;
        zeros[17] = 0.0;
        assert_eq!(argmax(&zeros), 11);
        assert_eq!(argmax(&[]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 9]), 0);
    }

    /// `ln Σ e^l` the slow way: f64's exponential of each logit's distance to the largest, summed
    /// one after another (how [`logprobs`] normalized before).
    fn log_sum_exp_f64(logits: &[f32]) -> f64 {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
        f64::from(max) + sum.ln()
    }

    #[test]
    fn log_sum_exp_at_the_edges() {
        assert!(log_sum_exp(&[1.0, f32::NAN, 2.0]).is_nan());
        assert_eq!(log_sum_exp(&[1.0, f32::INFINITY]), f64::INFINITY);
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY; 3]), f64::NEG_INFINITY);
        assert_eq!(log_sum_exp(&[]), f64::NEG_INFINITY);
        // One certain token: its log-probability is 0 (to the f32 it is reported in).
        let lp = logprobs(&[0.0, -200.0, -300.0, f32::NEG_INFINITY], 0, 1);
        assert_eq!(lp.logprob, 0.0);
        // A uniform vocabulary of Gemma 3's size.
        let flat = vec![0.5f32; 262_144];
        assert!((log_sum_exp(&flat) - (0.5 + (262_144f64).ln())).abs() < 1e-9);
    }

    proptest! {
        /// The one-pass selection finds the ids a full sort puts first, in its order: ties
        /// (logits drawn from a few values), infinities and NaNs included.
        #[test]
        fn top_logprobs_are_the_sorted_first(
            picks in prop::collection::vec(0usize..8, 1..300),
            top in 0usize..=MAX_TOP_LOGPROBS,
        ) {
            let values =
                [-1.5f32, 0.0, 2.25, 2.25, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -0.0];
            let logits: Vec<f32> = picks.iter().map(|&i| values[i]).collect();
            let got: Vec<u32> = logprobs(&logits, 0, top).top.iter().map(|t| t.0).collect();
            prop_assert_eq!(got, top_by_sorting(&logits, top));
        }

        #[test]
        fn top_logprobs_of_distinct_logits_are_the_sorted_first(
            logits in prop::collection::vec(-30f32..30.0, 1..3000),
            top in 1usize..=MAX_TOP_LOGPROBS,
        ) {
            let got: Vec<u32> = logprobs(&logits, 0, top).top.iter().map(|t| t.0).collect();
            prop_assert_eq!(got, top_by_sorting(&logits, top));
        }

        /// The lane-wise argmax is the one-by-one one: ties, zeros of both signs, infinities
        /// and NaNs (where it falls back) included; and so with banned ids.
        #[test]
        fn argmax_in_lanes_is_the_first_maximum(
            picks in prop::collection::vec(0usize..9, 0..80),
            banned in prop::collection::vec(0u32..80, 0..4),
        ) {
            let values = [-1.5f32, 0.0, -0.0, 2.25, 2.25, f32::INFINITY, f32::NEG_INFINITY,
                f32::NAN, 7.0];
            let logits: Vec<f32> = picks.iter().map(|&i| values[i]).collect();
            prop_assert_eq!(argmax(&logits), argmax_scalar(&logits));
            prop_assert_eq!(
                argmax_except(&logits, &banned),
                argmax_except_scalar(&logits, &banned)
            );
        }

        /// The f32 exponentials summed in f64 lanes stay within 1e-6 of f64 exponentials summed
        /// in turn, over vocabularies of up to 3,000 logits spread over 60 (most terms
        /// vanishing) or close together (every term counting).
        #[test]
        fn log_sum_exp_is_within_a_millionth_of_f64(
            logits in prop::collection::vec(-30f32..30.0, 1..3000),
            spread in prop_oneof![Just(1.0f32), Just(0.01f32)],
        ) {
            let logits: Vec<f32> = logits.iter().map(|l| l * spread).collect();
            let (got, want) = (log_sum_exp(&logits), log_sum_exp_f64(&logits));
            prop_assert!((got - want).abs() < 1e-6, "{} against {}", got, want);
        }

        /// The 512-bit build of the sum gives the 256-bit build's bits (where the CPU has
        /// AVX-512), so a log-probability is the same on either kind of machine.
        #[test]
        fn log_sum_exp_has_the_same_bits_on_either_register_width(
            logits in prop::collection::vec(-30f32..30.0, 1..3000),
        ) {
            #[cfg(target_arch = "x86_64")]
            if std::is_x86_feature_detected!("avx512f") {
                let max = max_and_nan(&logits).0;
                // SAFETY: the CPU has AVX-512 F (checked just above).
                let wide = unsafe { sum_exp_avx512(&logits, max) };
                prop_assert_eq!(wide.to_bits(), sum_exp(&logits, max).to_bits());
            }
        }

        #[test]
        fn same_seed_same_tokens(logits in prop::collection::vec(-10f32..10.0, 2..50), seed in any::<u64>()) {
            let p = SamplingParams::new(0.8, 0.9, 10, seed, 8, vec![]).unwrap();
            let (mut a, mut b) = (p.sampler(), p.sampler());
            for _ in 0..5 {
                prop_assert_eq!(a.sample(&logits), b.sample(&logits));
            }
        }

        #[test]
        fn top_k_one_is_greedy(logits in prop::collection::vec(-10f32..10.0, 2..50), seed in any::<u64>()) {
            let p = SamplingParams::new(1.5, 1.0, 1, seed, 8, vec![]).unwrap();
            prop_assert_eq!(p.sampler().sample(&logits), argmax(&logits));
        }

        #[test]
        fn sampled_token_is_within_top_k(logits in prop::collection::vec(-10f32..10.0, 5..50), seed in any::<u64>()) {
            let p = SamplingParams::new(1.0, 1.0, 3, seed, 8, vec![]).unwrap();
            let tok = p.sampler().sample(&logits);
            let higher = logits.iter().filter(|&&l| l > logits[tok as usize]).count();
            prop_assert!(higher < 3);
        }
    }
}
