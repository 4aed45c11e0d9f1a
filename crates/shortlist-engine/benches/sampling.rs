//! A greedy token's choice with its log-probabilities, as a quality run asks for every token
//! (`top_logprobs` 2, for the smallest top-2 gap): the largest logit and the vocabulary's
//! log-sum-exp, on the two real models' vocabulary sizes. The way before (a compare and a branch
//! per logit for the maximum, f64's library exponential per logit for the sum) is kept here as
//! the baseline. Interleaved rounds, medians; one JSON line per case.
//!
//! `cargo bench -p shortlist-engine --bench sampling`

mod common;

use common::{median, time};
use shortlist_engine::sampling::{argmax, log_sum_exp, logprobs};

const ROUNDS: usize = 7;

/// The argmax before: one logit after another.
fn argmax_before(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The log-sum-exp before: f64's exponential per logit, summed in turn.
fn log_sum_exp_before(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    f64::from(max) + sum.ln()
}

/// Logits shaped like a model's: most far below the top, a few near it (a fixed generator, so
/// every round sees the same values).
fn logits(n: usize) -> Vec<f32> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 40) as f32 / (1u64 << 24) as f32;
            -12.0 + 20.0 * u * u * u
        })
        .collect()
}

fn main() {
    for (name, vocab) in [("smollm2", 49_152), ("gemma3", 262_144)] {
        let l = logits(vocab);
        assert_eq!(argmax(&l), argmax_before(&l));
        assert!((log_sum_exp(&l) - log_sum_exp_before(&l)).abs() < 1e-6);
        let (mut before, mut after, mut with_top) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            before.push(time(0.2, &mut || {
                std::hint::black_box((argmax_before(&l), log_sum_exp_before(&l)));
            }));
            after.push(time(0.2, &mut || {
                std::hint::black_box((argmax(&l), log_sum_exp(&l)));
            }));
            with_top.push(time(0.2, &mut || {
                let t = argmax(&l);
                std::hint::black_box(logprobs(&l, t, 2));
            }));
        }
        let (before, after, with_top) = (median(before), median(after), median(with_top));
        println!(
            "{}",
            serde_json::json!({
                "case": format!("{name}-greedy-token-logprobs"), "vocab": vocab,
                "before_us": before * 1e6, "after_us": after * 1e6,
                "after_with_top2_us": with_top * 1e6, "speedup": before / after,
            })
        );
    }
}
