//! Greedy generation held to llama.cpp's pinned token ids (`tests/data/engine/greedy_ref_*.jsonl`):
//! the check the CPU tests run, and `shortlist engine check-greedy` runs on any device (the GPU
//! check script among them).
//!
//! Two engines' logits on these quantized models differ by up to about 0.5, so where the top two
//! candidates are closer than that, either may win. A case passes when its free-running tokens
//! equal llama.cpp's, or diverge only at a near-tie or after [`MUST_MATCH`] equal tokens; and
//! when, fed llama.cpp's own tokens (teacher forcing), every position's argmax is llama.cpp's
//! token or within [`NEAR_TIE`] of it.

use std::path::Path;

use serde::Serialize;

use crate::engine::{FinishReason, LoadedModel};
use crate::error::{EngineError, Result};
use crate::model::{KvCache, SeqStep};
use crate::sampling::{SamplingParams, argmax};

/// Logit gap under which two candidates count as tied.
pub const NEAR_TIE: f32 = 0.5;
/// Tokens that must match before a divergence is acceptable at all without a near-tie.
pub const MUST_MATCH: usize = 32;

/// One pinned prompt: its ids, llama.cpp's greedy ids and top-2 gaps.
#[derive(Debug, Clone, PartialEq)]
pub struct GreedyReference {
    pub name: String,
    pub prompt: Vec<u32>,
    pub want: Vec<u32>,
    pub margins: Vec<f32>,
}

/// Read a reference file: one JSON object per line with `name`, `prompt_ids`, `ids`, `margins`.
pub fn read_greedy_reference(path: &Path) -> Result<Vec<GreedyReference>> {
    let text = std::fs::read_to_string(path).map_err(|error| EngineError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let bad = |line: usize, why: String| EngineError::InvalidParameter {
        field: "reference",
        message: format!("{}:{line}: {why}", path.display()),
    };
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(i + 1, e.to_string()))?;
        let ids = |key: &str| -> Result<Vec<u32>> {
            v[key]
                .as_array()
                .ok_or_else(|| bad(i + 1, format!("`{key}` is not an array")))?
                .iter()
                .map(|x| {
                    x.as_u64()
                        .and_then(|x| u32::try_from(x).ok())
                        .ok_or_else(|| bad(i + 1, format!("`{key}` holds a non-id {x}")))
                })
                .collect()
        };
        let margins = v["margins"]
            .as_array()
            .ok_or_else(|| bad(i + 1, "`margins` is not an array".to_owned()))?
            .iter()
            .map(|x| x.as_f64().map(|x| x as f32))
            .collect::<Option<Vec<f32>>>()
            .ok_or_else(|| bad(i + 1, "`margins` holds a non-number".to_owned()))?;
        out.push(GreedyReference {
            name: v["name"]
                .as_str()
                .ok_or_else(|| bad(i + 1, "`name` is not a string".to_owned()))?
                .to_owned(),
            prompt: ids("prompt_ids")?,
            want: ids("ids")?,
            margins,
        });
    }
    if out.is_empty() {
        return Err(bad(0, "no reference lines".to_owned()));
    }
    Ok(out)
}

/// Where free running left llama.cpp's tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// Our token and llama.cpp's at the first difference (`None`: our generation had ended).
    pub ours: Option<u32>,
    pub theirs: u32,
    /// Top-2 logit gaps there, ours and llama.cpp's.
    pub gap_ours: f32,
    pub gap_theirs: f32,
    /// Whether either gap is under [`NEAR_TIE`].
    pub near_tie: bool,
}

/// One prompt's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GreedyCase {
    pub name: String,
    pub prompt_tokens: usize,
    pub reference_tokens: usize,
    /// Leading generated tokens equal to llama.cpp's.
    pub equal_tokens: usize,
    pub divergence: Option<Divergence>,
    /// Teacher-forced positions whose argmax is llama.cpp's token.
    pub forced_same: usize,
    /// Teacher-forced positions where it is not, within [`NEAR_TIE`].
    pub forced_near_ties: usize,
    /// The largest gap by which our argmax beat llama.cpp's token.
    pub forced_largest_gap: f32,
    /// Why the case fails; empty when it passes.
    pub failures: Vec<String>,
}

/// All prompts of a reference file on one model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GreedyReport {
    pub cases: Vec<GreedyCase>,
    pub near_tie: f32,
    pub must_match: usize,
    pub passed: bool,
}

/// Run every reference prompt greedily, free running and teacher forced.
pub fn check_greedy(m: &LoadedModel, refs: &[GreedyReference]) -> Result<GreedyReport> {
    let eos = m.tokenizer().end_of_generation().to_vec();
    let mut cases = Vec::with_capacity(refs.len());
    for r in refs {
        // Generate only as far as needed: to the first divergence, or the whole reference.
        let mut produced = Vec::new();
        let out = m.generate(&r.prompt, &SamplingParams::greedy(r.want.len()), |t| {
            produced.push(t);
            r.want.get(produced.len() - 1) == Some(&t)
        })?;
        let mut case = teacher_forced(m, r)?;
        let mut got = out.tokens.clone();
        if out.finish == FinishReason::Stop && got.len() < r.want.len() {
            // The end-of-generation token is not part of the text but ends llama.cpp's list.
            got.push(
                r.want
                    .get(got.len())
                    .copied()
                    .filter(|t| eos.contains(t))
                    .unwrap_or(u32::MAX),
            );
        }
        let same = got.iter().zip(&r.want).take_while(|(a, b)| a == b).count();
        case.equal_tokens = same;
        if same < r.want.len() {
            let gap_ours = out.margins.get(same).copied().unwrap_or(f32::INFINITY);
            let gap_theirs = r.margins.get(same).copied().unwrap_or(f32::INFINITY);
            let near_tie = gap_ours.min(gap_theirs) < NEAR_TIE;
            if same < MUST_MATCH && !near_tie {
                case.failures.push(format!(
                    "diverged at token {same} without a near-tie (gaps ours {gap_ours:.3}, \
                     llama.cpp {gap_theirs:.3})"
                ));
            }
            case.divergence = Some(Divergence {
                ours: got.get(same).copied().filter(|&t| t != u32::MAX),
                theirs: r.want[same],
                gap_ours,
                gap_theirs,
                near_tie,
            });
        }
        cases.push(case);
    }
    let passed = cases.iter().all(|c| c.failures.is_empty());
    Ok(GreedyReport {
        cases,
        near_tie: NEAR_TIE,
        must_match: MUST_MATCH,
        passed,
    })
}

/// Feed llama.cpp's own tokens and compare the argmax at every position: a divergence in free
/// running hides everything after it, this checks all positions. A different argmax is
/// accepted only when llama.cpp's choice is within `NEAR_TIE` of our best logit.
fn teacher_forced(m: &LoadedModel, r: &GreedyReference) -> Result<GreedyCase> {
    let cfg = m.model().config();
    let mut cache = KvCache::new(cfg, r.prompt.len() + r.want.len(), m.model().device())?;
    let mut logits = m.model().prefill(&r.prompt, &mut cache, 256)?;
    let mut case = GreedyCase {
        name: r.name.clone(),
        prompt_tokens: r.prompt.len(),
        reference_tokens: r.want.len(),
        equal_tokens: 0,
        divergence: None,
        forced_same: 0,
        forced_near_ties: 0,
        forced_largest_gap: 0.0,
        failures: Vec::new(),
    };
    for (i, &t) in r.want.iter().enumerate() {
        let l = logits
            .take()
            .ok_or_else(|| EngineError::Compute("a step gave no logits".into()))?;
        let top = argmax(&l);
        if top == t {
            case.forced_same += 1;
        } else {
            let gap = l[top as usize] - l.get(t as usize).copied().unwrap_or(f32::NEG_INFINITY);
            case.forced_largest_gap = case.forced_largest_gap.max(gap);
            if gap < NEAR_TIE {
                case.forced_near_ties += 1;
            } else {
                case.failures.push(format!(
                    "position {i}: our argmax {top} beats llama.cpp's {t} by {gap:.3}"
                ));
            }
        }
        if i + 1 < r.want.len() {
            let one = [t];
            let mut step = [SeqStep {
                tokens: &one,
                cache: &mut cache,
                want_logits: true,
                all_logits: false,
            }];
            logits = m.model().forward(&mut step)?.pop().flatten();
        }
    }
    Ok(case)
}

impl GreedyCase {
    /// One line for a terminal.
    pub fn describe(&self) -> String {
        let free = match &self.divergence {
            None => format!("all {} tokens equal llama.cpp's", self.equal_tokens),
            Some(d) => format!(
                "{} tokens equal llama.cpp's, then diverge ({} vs {}) with top-2 gaps ours {:.3}, \
                 llama.cpp {:.3}: {}",
                self.equal_tokens,
                d.ours.map_or_else(|| "end".to_owned(), |t| t.to_string()),
                d.theirs,
                d.gap_ours,
                d.gap_theirs,
                if d.near_tie {
                    "near-tie"
                } else {
                    "NOT a near-tie"
                }
            ),
        };
        format!(
            "{}: {free}; teacher-forced on {} tokens: {} same argmax, {} near-ties (largest gap \
             {:.3}){}",
            self.name,
            self.reference_tokens,
            self.forced_same,
            self.forced_near_ties,
            self.forced_largest_gap,
            if self.failures.is_empty() {
                String::new()
            } else {
                format!(" — FAILS: {}", self.failures.join("; "))
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_lines_are_read_and_bad_ones_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.jsonl");
        std::fs::write(
            &p,
            "{\"name\":\"a\",\"prompt_ids\":[1,2],\"ids\":[3],\"margins\":[0.25]}\n",
        )
        .unwrap();
        let r = read_greedy_reference(&p).unwrap();
        assert_eq!(
            r,
            vec![GreedyReference {
                name: "a".into(),
                prompt: vec![1, 2],
                want: vec![3],
                margins: vec![0.25],
            }]
        );
        std::fs::write(
            &p,
            "{\"name\":\"a\",\"prompt_ids\":[1,-2],\"ids\":[3],\"margins\":[0.25]}\n",
        )
        .unwrap();
        let e = read_greedy_reference(&p).unwrap_err().to_string();
        assert!(e.contains("r.jsonl:1") && e.contains("prompt_ids"), "{e}");
        std::fs::write(&p, "\n").unwrap();
        assert!(read_greedy_reference(&p).is_err());
    }
}
