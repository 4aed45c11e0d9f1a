//! Whether a device's forward pass is batch-invariant, measured: each prompt's logits computed
//! alone against the same prompts, several copies of each, in one batch that they join two at a
//! step (so each prefill shares its step with others' decoding, and every copy decodes beside
//! batches of other sizes at other positions — past the row counts where GPU libraries switch
//! from matrix-vector kernels to matrix-matrix ones). The batch is fed the tokens the lone runs chose
//! (teacher forcing), so every step stays comparable even where a choice would flip. The lone
//! runs go twice: a device whose results change from one run to the next (atomics in a
//! reduction) would make any batch look different, and the report says which it is.
//!
//! Our CPU kernels are batch-invariant by construction (one order of sums per output element;
//! `tests/batch_invariance.rs`). On a GPU candle's kernels run, and they may pick another
//! algorithm by row count: `shortlist engine check-batch` measures it there (the GPU check
//! script runs it), and a quality run's answers on such a device may change with its
//! concurrency wherever two tokens were nearly tied, as on an endpoint.

use serde::Serialize;

use crate::engine::{LoadedModel, top2_margin};
use crate::error::{EngineError, Result};
use crate::model::{KvCache, Logits, SeqStep};
use crate::sampling::argmax;

/// One prompt: the steps compared and how the batched logits differed from the lone ones.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvarianceCase {
    pub name: String,
    pub prompt_tokens: usize,
    /// Steps of one run: the prompt's prefill, then one per decoded token.
    pub steps: usize,
    /// Steps compared: every step of every copy of the prompt in the batch.
    pub compared_steps: usize,
    /// Compared steps whose whole logit row was the same bits as alone.
    pub identical_steps: usize,
    /// Steps whose logits were the same bits in the second lone run as in the first.
    pub repeated_identical_steps: usize,
    /// The first step (of a run) that was not, in any copy (0: the prefill).
    pub first_difference: Option<usize>,
    /// The largest difference of one logit between the two runs, over all steps.
    pub largest_difference: f32,
    /// Steps where the batch's greedy choice differed from the lone run's.
    pub argmax_changed: usize,
    /// The lone run's top-2 gap at the steps where the choice changed (smallest first).
    pub gaps_where_changed: Vec<f32>,
}

/// All prompts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InvarianceReport {
    pub cases: Vec<InvarianceCase>,
    /// The most sequences in one step of the batched run.
    pub largest_batch: usize,
    /// Whether every step of every prompt was the same bits.
    pub identical: bool,
    /// Whether running each prompt alone again gave the same bits at every step.
    pub repeatable: bool,
}

/// Sequences that join the batched run at each step.
const JOIN_PER_STEP: usize = 2;

/// Run `prompts` alone, greedily for `steps` steps each (the prefill and `steps - 1` decoded
/// tokens), then `copies` of each all together, sequence `s` (prompt `s % prompts.len()`)
/// joining at step `s / 2`, and compare the logits bit for bit.
pub fn check_batch_invariance(
    m: &LoadedModel,
    prompts: &[(String, Vec<u32>)],
    steps: usize,
    copies: usize,
) -> Result<InvarianceReport> {
    if steps == 0 || copies == 0 || prompts.is_empty() || prompts.iter().any(|(_, p)| p.is_empty())
    {
        return Err(EngineError::InvalidParameter {
            field: "steps",
            message: "at least one step of one copy of a non-empty prompt is needed".into(),
        });
    }
    let model = m.model();
    let (cfg, device) = (model.config(), model.device());
    let no_logits = || EngineError::Compute("a step gave no logits".into());
    // Alone, twice: every step's logits and the token chosen after it.
    let alone = prompts
        .iter()
        .map(|(_, p)| alone_run(m, p, steps))
        .collect::<Result<Vec<_>>>()?;
    let mut repeated = Vec::with_capacity(prompts.len());
    for ((_, p), (rows, _)) in prompts.iter().zip(&alone) {
        let (again, _) = alone_run(m, p, steps)?;
        repeated.push(
            rows.iter()
                .zip(&again)
                .filter(|(a, b)| same_bits(a, b))
                .count(),
        );
    }
    // Together: at global step `g`, sequence `s` that joined at `j <= g` takes its step `g - j`
    // (its prefill when `g == j`), fed the token its prompt's lone run chose.
    let n = prompts.len() * copies;
    let prompt_of = |s: usize| s % prompts.len();
    let joins = |s: usize| s / JOIN_PER_STEP;
    let mut caches = (0..n)
        .map(|s| KvCache::new(cfg, prompts[prompt_of(s)].1.len() + steps, device))
        .collect::<Result<Vec<_>>>()?;
    let mut cases: Vec<InvarianceCase> = prompts
        .iter()
        .zip(repeated)
        .map(|((name, p), repeated)| InvarianceCase {
            name: name.clone(),
            prompt_tokens: p.len(),
            steps,
            compared_steps: steps * copies,
            identical_steps: 0,
            repeated_identical_steps: repeated,
            first_difference: None,
            largest_difference: 0.0,
            argmax_changed: 0,
            gaps_where_changed: Vec::new(),
        })
        .collect();
    let mut largest_batch = 0;
    for g in 0..joins(n - 1) + steps {
        let active: Vec<usize> = (0..n)
            .filter(|&s| joins(s) <= g && g - joins(s) < steps)
            .collect();
        largest_batch = largest_batch.max(active.len());
        let fed: Vec<[u32; 1]> = active
            .iter()
            .map(|&s| [alone[prompt_of(s)].1[(g - joins(s)).saturating_sub(1)]])
            .collect();
        let mut batch: Vec<SeqStep<'_>> = Vec::with_capacity(active.len());
        let mut next = active.iter().zip(&fed).peekable();
        for (s, cache) in caches.iter_mut().enumerate() {
            let Some((_, one)) = next.next_if(|&(&a, _)| a == s) else {
                continue;
            };
            batch.push(SeqStep {
                tokens: if g == joins(s) {
                    &prompts[prompt_of(s)].1
                } else {
                    one
                },
                cache,
                want_logits: true,
                all_logits: false,
            });
        }
        let out = model.forward(&mut batch)?;
        for (&s, got) in active.iter().zip(out) {
            let got = got.ok_or_else(no_logits)?;
            let (p, step) = (prompt_of(s), g - joins(s));
            compare(&mut cases[p], step, &alone[p].0[step], &got);
        }
    }
    let identical = cases.iter().all(|c| c.identical_steps == c.compared_steps);
    let repeatable = cases.iter().all(|c| c.repeated_identical_steps == c.steps);
    Ok(InvarianceReport {
        cases,
        largest_batch,
        identical,
        repeatable,
    })
}

/// `prompt` alone, greedily: each step's logits and the token chosen after it.
fn alone_run(m: &LoadedModel, prompt: &[u32], steps: usize) -> Result<(Vec<Logits>, Vec<u32>)> {
    let model = m.model();
    let mut cache = KvCache::new(model.config(), prompt.len() + steps, model.device())?;
    let mut rows = Vec::with_capacity(steps);
    let mut chosen = Vec::with_capacity(steps);
    let mut last = model.prefill(prompt, &mut cache, prompt.len())?;
    for s in 0..steps {
        let l = last
            .take()
            .ok_or_else(|| EngineError::Compute("a step gave no logits".into()))?;
        let t = argmax(&l);
        rows.push(l);
        chosen.push(t);
        if s + 1 < steps {
            let one = [t];
            let mut step = [SeqStep {
                tokens: &one,
                cache: &mut cache,
                want_logits: true,
                all_logits: false,
            }];
            last = model.forward(&mut step)?.pop().flatten();
        }
    }
    Ok((rows, chosen))
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Fold step `step`'s logits, alone and batched, into `case`.
fn compare(case: &mut InvarianceCase, step: usize, alone: &[f32], batched: &[f32]) {
    if same_bits(alone, batched) {
        case.identical_steps += 1;
        return;
    }
    case.first_difference = Some(case.first_difference.map_or(step, |f| f.min(step)));
    let largest = alone
        .iter()
        .zip(batched)
        .map(|(a, b)| (a - b).abs())
        .fold(
            0f32,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        );
    case.largest_difference = case.largest_difference.max(largest);
    if argmax(alone) != argmax(batched) {
        case.argmax_changed += 1;
        case.gaps_where_changed.push(top2_margin(alone));
        case.gaps_where_changed.sort_by(f32::total_cmp);
    }
}

impl InvarianceCase {
    /// One line for a terminal.
    pub fn describe(&self) -> String {
        let repeat = if self.repeated_identical_steps == self.steps {
            String::new()
        } else {
            format!(
                " — and alone twice, only {} of {} steps were the same bits: this device's \
                 results change from run to run",
                self.repeated_identical_steps, self.steps
            )
        };
        let batch = match self.first_difference {
            None => format!(
                "{}: all {} steps the same bits alone and batched",
                self.name, self.compared_steps
            ),
            Some(first) => format!(
                "{}: {} of {} steps the same bits; first difference at step {first}, largest \
                 logit difference {:.3e}; greedy choice changed at {} step{}{}",
                self.name,
                self.identical_steps,
                self.compared_steps,
                self.largest_difference,
                self.argmax_changed,
                if self.argmax_changed == 1 { "" } else { "s" },
                if self.gaps_where_changed.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (top-2 gaps there {})",
                        self.gaps_where_changed
                            .iter()
                            .map(|g| format!("{g:.3}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ),
        };
        batch + &repeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case() -> InvarianceCase {
        InvarianceCase {
            name: "p".into(),
            prompt_tokens: 3,
            steps: 3,
            compared_steps: 3,
            identical_steps: 0,
            repeated_identical_steps: 3,
            first_difference: None,
            largest_difference: 0.0,
            argmax_changed: 0,
            gaps_where_changed: Vec::new(),
        }
    }

    #[test]
    fn differences_are_found_and_measured() {
        let mut c = case();
        compare(&mut c, 0, &[1.0, 2.0, 0.5], &[1.0, 2.0, 0.5]);
        assert_eq!((c.identical_steps, c.first_difference), (1, None));
        // One bit off in a logit that decides nothing.
        compare(
            &mut c,
            1,
            &[1.0, 2.0, 0.5],
            &[1.0, 2.0, f32::from_bits(0.5f32.to_bits() + 1)],
        );
        assert_eq!(
            (c.identical_steps, c.first_difference, c.argmax_changed),
            (1, Some(1), 0)
        );
        assert!(c.largest_difference > 0.0 && c.largest_difference < 1e-6);
        // A near-tie that flips.
        compare(&mut c, 2, &[1.0, 1.02, 0.5], &[1.03, 1.02, 0.5]);
        assert_eq!((c.first_difference, c.argmax_changed), (Some(1), 1));
        assert!((c.gaps_where_changed[0] - 0.02).abs() < 1e-6);
        assert!((c.largest_difference - 0.03).abs() < 1e-6);
        assert!(
            c.describe().contains("changed at 1 step"),
            "{}",
            c.describe()
        );
        // A device whose lone runs differ from each other says so.
        let mut r = case();
        r.repeated_identical_steps = 2;
        assert!(r.describe().contains("run to run"), "{}", r.describe());
        assert!(!case().describe().contains("run to run"));
        // -0.0 and 0.0 are equal numbers but not the same bits.
        let mut z = case();
        compare(&mut z, 0, &[0.0, 1.0], &[-0.0, 1.0]);
        assert_eq!(z.first_difference, Some(0));
    }
}
