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
}

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
        })
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

impl Sampler {
    /// The next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        if p.temperature == 0.0 || logits.len() < 2 {
            return argmax(logits);
        }
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
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
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.0, 2.0, 2.0, 1.0]), 1);
    }

    proptest! {
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
