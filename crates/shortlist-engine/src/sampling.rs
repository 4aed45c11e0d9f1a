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
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
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
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let lse = f64::from(max) + sum.ln();
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
    const CHUNK: usize = 64;
    let mut best: Vec<(u32, f32)> = Vec::with_capacity(top + 1);
    for (c, chunk) in logits.chunks(CHUNK).enumerate() {
        if let Some(&(_, kth)) = best.get(top - 1).filter(|k| !k.1.is_nan()) {
            let (mut m, mut nan) = (f32::NEG_INFINITY, false);
            for &x in chunk {
                m = if x > m { x } else { m };
                nan |= x.is_nan();
            }
            if !nan && m < kth {
                continue;
            }
        }
        for (j, &l) in chunk.iter().enumerate() {
            let x = ((c * CHUNK + j) as u32, l);
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

/// Most likely first: the larger logit, then the smaller id.
fn by_logit(a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Index of the largest logit outside `banned`; the first on ties. `None` when every id is
/// banned.
fn argmax_except(logits: &[f32], banned: &[u32]) -> Option<u32> {
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
        let mut zeros = vec![-0.0f32; 64];
        zeros.push(0.0);
        assert_eq!(logprobs(&zeros, 0, 1).top[0].0, 64);
        let mut nan = vec![1.0f32; 130];
        nan[129] = f32::NAN;
        assert_eq!(logprobs(&nan, 0, 1).top[0].0, 129);
        let mut low = vec![-f32::NAN; 64];
        low.push(f32::NEG_INFINITY);
        assert_eq!(logprobs(&low, 0, 1).top[0].0, 64);
        for logits in [zeros, nan, low] {
            let got: Vec<u32> = logprobs(&logits, 0, 3).top.iter().map(|t| t.0).collect();
            assert_eq!(got, top_by_sorting(&logits, 3));
        }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.0, 2.0, 2.0, 1.0]), 1);
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
