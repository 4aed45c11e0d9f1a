//! Raw speed of the forward pass on its device, below the scheduler: prefill of one prompt of N
//! tokens, and decode steps of B sequences together, each step one forward pass over all B
//! (`shortlist engine speed`). Throughput here is tokens per second of compute, not goodput:
//! no requests, no SLO (docs/metrics.md keeps the two apart).

use std::time::Instant;

use serde::Serialize;

use crate::device::{GpuInfo, gpu_info};
use crate::engine::LoadedModel;
use crate::error::{EngineError, Result};
use crate::model::{KvCache, SeqStep};
use crate::sampling::argmax;

/// Text the prompts are cut from: ordinary prose, so that the tokens are a real mix.
const FILLER: &str = "The history of the city is long and varied. Merchants came from the coast to \
trade salt, cloth and iron, and the markets grew around the river crossing. Over the centuries the \
town walls were rebuilt three times, each time wider, as new quarters filled with workshops, \
schools and gardens. ";

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedPlan {
    /// Prompt lengths to prefill, one prompt each, in chunks of `prefill_chunk`.
    pub prefill: Vec<usize>,
    pub prefill_chunk: usize,
    /// Sequence counts decoded together.
    pub batches: Vec<usize>,
    /// Prompt tokens each decoding sequence holds before the timed steps.
    pub decode_context: usize,
    /// Timed decode steps per batch size (after two untimed ones).
    pub decode_steps: usize,
}

/// One prefill.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillSpeed {
    pub tokens: usize,
    pub seconds: f64,
    pub tokens_per_s: f64,
}

/// Decode steps of `batch` sequences.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecodeSpeed {
    pub batch: usize,
    pub steps: usize,
    pub seconds: f64,
    /// Tokens of all sequences per second.
    pub tokens_per_s: f64,
    /// Mean time of one step (one token for each of the `batch` sequences).
    pub step_ms: f64,
}

/// A whole measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpeedReport {
    pub model: String,
    /// `cpu` or `cuda:N`.
    pub device: String,
    pub gpu: Option<GpuInfo>,
    /// CPU compute threads the engine's pools ran with (what the CPU's figures depend on).
    pub threads: usize,
    /// Bytes of weights held: what one decode step at batch 1 must read at least once.
    pub weight_bytes: u64,
    /// Bytes of keys and values per cached token, all layers.
    pub kv_bytes_per_token: u64,
    pub prefill: Vec<PrefillSpeed>,
    pub decode: Vec<DecodeSpeed>,
}

/// Run `plan` on `m`, calling `progress` with a line before each measurement.
pub fn measure(
    m: &LoadedModel,
    device_name: &str,
    plan: &SpeedPlan,
    mut progress: impl FnMut(&str),
) -> Result<SpeedReport> {
    let context = m.context();
    if let Some(&n) = plan.prefill.iter().find(|&&n| n == 0 || n > context) {
        return Err(EngineError::InvalidParameter {
            field: "prefill",
            message: format!("{n} tokens: must be 1 to the context of {context}"),
        });
    }
    let decode_tokens = plan.decode_context.max(1) + plan.decode_steps + 2;
    if let Some(&b) = plan.batches.iter().find(|&&b| b == 0 || b > 4096) {
        return Err(EngineError::InvalidParameter {
            field: "batch",
            message: format!("{b} sequences: must be 1 to 4096"),
        });
    }
    if decode_tokens > context {
        return Err(EngineError::InvalidParameter {
            field: "decode_context",
            message: format!(
                "{} + {} tokens per decoding sequence exceed the context of {context}",
                plan.decode_context.max(1),
                plan.decode_steps + 2
            ),
        });
    }
    // Sequence i of a decode batch takes the prompt starting 7 tokens after sequence i - 1's.
    let longest = plan
        .prefill
        .iter()
        .copied()
        .chain(
            plan.batches
                .iter()
                .map(|b| plan.decode_context.max(1) + b * 7),
        )
        .max()
        .unwrap_or(1);
    // Enough filler for `longest` tokens: sized from one copy's count, then doubled if short.
    let per_copy = m.encode_prompt(FILLER)?.len().max(1);
    let mut copies = longest / per_copy + 2;
    let all = loop {
        let all = m.encode_prompt(&FILLER.repeat(copies))?;
        if all.len() > longest {
            break all;
        }
        copies *= 2;
    };
    let (cfg, dev) = (m.model().config(), m.model().device());
    let mut prefill = Vec::new();
    for &n in &plan.prefill {
        progress(&format!("prefill of {n} tokens"));
        let prompt = &all[..n];
        let mut cache = KvCache::new(cfg, n, dev)?;
        let t = Instant::now();
        // Reading the logits back waits for the device to finish.
        if let Some(l) = m.model().prefill(prompt, &mut cache, plan.prefill_chunk)? {
            argmax(&l);
        }
        let seconds = t.elapsed().as_secs_f64();
        prefill.push(PrefillSpeed {
            tokens: n,
            seconds,
            tokens_per_s: n as f64 / seconds,
        });
    }
    let mut decode = Vec::new();
    for &b in &plan.batches {
        progress(&if b == 1 {
            "decode of 1 sequence".to_owned()
        } else {
            format!("decode of {b} sequences together")
        });
        let cap = decode_tokens;
        let mut caches = (0..b)
            .map(|_| KvCache::new(cfg, cap, dev))
            .collect::<Result<Vec<_>>>()?;
        // Each sequence its own prompt (shifted by 7 tokens), prefilled alone.
        let mut next = Vec::with_capacity(b);
        for (i, cache) in caches.iter_mut().enumerate() {
            let prompt = &all[i * 7..i * 7 + plan.decode_context.max(1)];
            let mut step = [SeqStep {
                tokens: prompt,
                cache,
                want_logits: true,
                all_logits: false,
            }];
            let l = m.model().forward(&mut step)?.pop().flatten();
            next.push(l.map_or(0, |l| argmax(&l)));
        }
        let run = |caches: &mut [KvCache], next: &mut Vec<u32>| -> Result<()> {
            let toks: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
            let mut steps: Vec<SeqStep<'_>> = caches
                .iter_mut()
                .zip(&toks)
                .map(|(cache, t)| SeqStep {
                    tokens: t,
                    cache,
                    want_logits: true,
                    all_logits: false,
                })
                .collect();
            let logits = m.model().forward(&mut steps)?;
            for (n, l) in next.iter_mut().zip(logits) {
                *n = l.map_or(0, |l| argmax(&l));
            }
            Ok(())
        };
        for _ in 0..2 {
            run(&mut caches, &mut next)?;
        }
        let t = Instant::now();
        for _ in 0..plan.decode_steps {
            run(&mut caches, &mut next)?;
        }
        let seconds = t.elapsed().as_secs_f64();
        decode.push(DecodeSpeed {
            batch: b,
            steps: plan.decode_steps,
            seconds,
            tokens_per_s: (b * plan.decode_steps) as f64 / seconds,
            step_ms: seconds * 1e3 / plan.decode_steps.max(1) as f64,
        });
    }
    Ok(SpeedReport {
        model: m.name().to_owned(),
        device: device_name.to_owned(),
        gpu: gpu_info(dev)?,
        threads: crate::pool::threads(),
        weight_bytes: m.model().weight_bytes() as u64,
        kv_bytes_per_token: m.model().config().kv_bytes_per_token() as u64,
        prefill,
        decode,
    })
}
