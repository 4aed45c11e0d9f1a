//! Scoring a set of outputs into results (`shortlist.eval-results.v1`), the per-category table,
//! and the paired comparison of two result sets (`shortlist.eval-compare.v1`).
//!
//! A case passes when every check passes. It fails when any check fails. It is unscored when no
//! check failed but one could not be decided (a judge verdict not yet supplied); unscored cases are
//! reported and left out of n. A case with no output at all is `missing` and counts as a failure:
//! a candidate that did not answer did not pass.
//!
//! The results document is the same whether the outputs came from `eval score` (produced
//! elsewhere) or from a quality run, which fills the optional `candidate`, `tokens` and `latency_s`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::error::EvalError;
use crate::response::Response;
use crate::score::judge::{JudgeCheck, JudgeGate, parse_verdict};
use crate::score::{Outcome, Verdict};
use crate::set::{Case, CheckKind, EvalSet};
use crate::stats::{McNemar, PassRate, WeightedScore, holm};

/// The results format tag.
pub const RESULTS_FORMAT: &str = "shortlist.eval-results.v1";
/// The comparison format tag.
pub const COMPARE_FORMAT: &str = "shortlist.eval-compare.v1";

/// The outcome of a whole case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaseOutcome {
    /// Every check passed.
    Pass,
    /// At least one check failed.
    Fail,
    /// No failure, but at least one check undecided.
    Unscored,
    /// No output for this case (counts as a failure).
    Missing,
}

impl CaseOutcome {
    /// `Some(passed)` for decided cases (missing = failed), `None` when unscored.
    pub fn decided(self) -> Option<bool> {
        match self {
            Self::Pass => Some(true),
            Self::Fail | Self::Missing => Some(false),
            Self::Unscored => None,
        }
    }
}

/// One check's result within a case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check's name.
    pub name: String,
    /// The check's verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
}

/// A top-2 logit gap below this is a near-tie: measured on the held-out generations, SmolLM2's
/// and Gemma's first answer tokens had gaps of 0.008–0.04 on 3 of 6 prompts, and llama.cpp,
/// candle and this engine chose differently there.
pub const NEAR_TIE: f64 = 0.1;

/// One case's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    /// The case id.
    pub id: String,
    /// The category.
    pub category: String,
    /// The weight.
    pub weight: f64,
    /// Pass, fail, unscored or missing.
    pub outcome: CaseOutcome,
    /// Each check's verdict.
    pub checks: Vec<CheckResult>,
    /// The output text, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Names of the tools called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// The finish reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Output tokens (filled by quality runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Seconds the case took (filled by quality runs): wall time from sending it to its last
    /// token, shared with the other cases in flight beside it (see `concurrency`), so not a
    /// latency of the model alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_s: Option<f64>,
    /// The most cases its quality run kept in flight while this one ran (the run's
    /// concurrency; filled by quality runs): 1 means it ran alone and `latency_s` was its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// The smallest gap between the two most likely tokens' logits along the greedy answer
    /// (filled by quality runs when the candidate tells it): below [`NEAR_TIE`] the outcome rests
    /// on a near-tie that another engine, kernel or quantization may break the other way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_top2_gap: Option<f64>,
    /// One entry per judge check: what the judge said, what was read from it, and whether the
    /// check is advisory or may drive a disqualifier.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judgements: Vec<Judgement>,
}

/// The audit trail of one judge check on one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    /// The judge check's name.
    pub check: String,
    /// The judge candidate named by the check.
    pub judge: String,
    /// The rubric's SHA-256.
    pub rubric_sha256: String,
    /// The model that answered as judge (a runner fills it), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_model: Option<String>,
    /// The judge's raw output; absent when no judge answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_output: Option<String>,
    /// The verdict read from the judge's output: `pass`, `fail`, or `unscored` (no output, or
    /// neither PASS nor FAIL in it). The check's own result carries the reason.
    pub verdict: Outcome,
    /// Advisory or may disqualify, and why.
    pub gate: JudgeGate,
}

/// One judge check across the cases of a result set, for the table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeCheckSummary {
    /// The judge check's name.
    pub check: String,
    /// The judge candidate.
    pub judge: String,
    /// The rubric's SHA-256.
    pub rubric_sha256: String,
    /// Cases judged PASS.
    pub passed: u64,
    /// Cases judged FAIL.
    pub failed: u64,
    /// Cases left unscored (no judge, no output, or no verdict in it).
    pub unscored: u64,
    /// Advisory or may disqualify (as on the cases; the most cautious when they differ).
    pub gate: JudgeGate,
}

/// One row of the per-category table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryRow {
    /// The category.
    pub category: String,
    /// Pass rate with n and interval (missing counts as failed).
    pub pass_rate: PassRate,
    /// Cases left undecided.
    pub unscored: u64,
    /// Weighted score over decided cases.
    pub weighted: WeightedScore,
}

/// Which eval set the results belong to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetRef {
    /// The set's name.
    pub name: String,
    /// Its version.
    pub sha256: String,
    /// Number of cases in the set.
    pub cases: usize,
}

/// The results of one candidate on one eval set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResults {
    /// `shortlist.eval-results.v1`.
    pub format: String,
    /// The eval set.
    pub evalset: SetRef,
    /// The candidate, when known (quality runs fill it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<String>,
    /// Per case, in set order.
    pub cases: Vec<CaseResult>,
    /// Per category, in first-appearance order.
    pub categories: Vec<CategoryRow>,
    /// All cases.
    pub overall: CategoryRow,
    /// Each judge check (by name, judge and rubric), with its counts and gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub judge_checks: Vec<JudgeCheckSummary>,
    /// Cases whose request failed for a reason outside the model (transport, HTTP status,
    /// timeout) after their retries: not scored, not in any pass rate, and asked again by a
    /// resumed run. A run with errors is incomplete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<CaseError>,
}

/// A case whose request failed outside the model: an infrastructure error, not a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseError {
    /// The case id.
    pub id: String,
    /// The category.
    pub category: String,
    /// What failed (the last attempt's error).
    pub error: String,
    /// Attempts made.
    pub attempts: u32,
}

/// Scores one case against one response (or a missing one).
pub fn score_case(case: &Case, response: Option<&Response>) -> CaseResult {
    let Some(r) = response else {
        return CaseResult {
            id: case.id().to_owned(),
            category: case.category().as_string(),
            weight: case.weight(),
            outcome: CaseOutcome::Missing,
            checks: Vec::new(),
            output: None,
            tool_calls: Vec::new(),
            finish_reason: None,
            tokens: None,
            latency_s: None,
            concurrency: None,
            min_top2_gap: None,
            judgements: Vec::new(),
        };
    };
    let checks: Vec<CheckResult> = case
        .checks()
        .iter()
        .map(|c| CheckResult {
            name: c.name().to_owned(),
            verdict: c.score(r),
        })
        .collect();
    let outcome = if checks.iter().any(|c| c.verdict.outcome == Outcome::Fail) {
        CaseOutcome::Fail
    } else if checks
        .iter()
        .any(|c| c.verdict.outcome == Outcome::Unscored)
    {
        CaseOutcome::Unscored
    } else {
        CaseOutcome::Pass
    };
    CaseResult {
        id: case.id().to_owned(),
        category: case.category().as_string(),
        weight: case.weight(),
        outcome,
        checks,
        output: Some(r.text().to_owned()),
        tool_calls: r.tool_calls().iter().map(|c| c.name().to_owned()).collect(),
        finish_reason: r.finish_reason().map(|f| f.as_str().to_owned()),
        tokens: None,
        latency_s: None,
        concurrency: None,
        min_top2_gap: None,
        judgements: case
            .checks()
            .iter()
            .filter_map(|c| match c.kind() {
                CheckKind::Judge(j) => Some(judgement(j, r)),
                _ => None,
            })
            .collect(),
    }
}

/// The audit entry of judge check `j` on response `r`, advisory until [`RunResults::regate`]
/// (or a runner) applies calibrations.
fn judgement(j: &JudgeCheck, r: &Response) -> Judgement {
    let output = r.judgement(j.name());
    Judgement {
        check: j.name().to_owned(),
        judge: j.judge().to_owned(),
        rubric_sha256: j.rubric_sha256().to_owned(),
        judge_model: None,
        judge_output: output.map(str::to_owned),
        verdict: match output.map(parse_verdict) {
            Some(Some(true)) => Outcome::Pass,
            Some(Some(false)) => Outcome::Fail,
            _ => Outcome::Unscored,
        },
        gate: JudgeGate::advisory(format!(
            "no calibration recorded for judge {} with rubric {}",
            j.judge(),
            j.rubric_sha256()
        )),
    }
}

fn judge_summaries(cases: &[CaseResult]) -> Vec<JudgeCheckSummary> {
    let mut out: Vec<JudgeCheckSummary> = Vec::new();
    for j in cases.iter().flat_map(|c| &c.judgements) {
        let i = match out.iter().position(|s| {
            s.check == j.check && s.judge == j.judge && s.rubric_sha256 == j.rubric_sha256
        }) {
            Some(i) => i,
            None => {
                out.push(JudgeCheckSummary {
                    check: j.check.clone(),
                    judge: j.judge.clone(),
                    rubric_sha256: j.rubric_sha256.clone(),
                    passed: 0,
                    failed: 0,
                    unscored: 0,
                    gate: j.gate.clone(),
                });
                out.len() - 1
            }
        };
        let s = &mut out[i];
        match j.verdict {
            Outcome::Pass => s.passed += 1,
            Outcome::Fail => s.failed += 1,
            Outcome::Unscored => s.unscored += 1,
        }
        // Cases scored under different calibrations: the summary claims no more than the weakest.
        if j.gate.status == crate::score::judge::GateStatus::Advisory
            && s.gate.status != crate::score::judge::GateStatus::Advisory
        {
            s.gate = j.gate.clone();
        }
    }
    out
}

fn row(category: String, cases: &[&CaseResult]) -> CategoryRow {
    let decided: Vec<(f64, bool)> = cases
        .iter()
        .filter_map(|c| c.outcome.decided().map(|ok| (c.weight, ok)))
        .collect();
    let passed = decided.iter().filter(|(_, ok)| *ok).count() as u64;
    CategoryRow {
        category,
        pass_rate: PassRate::new(passed, decided.len() as u64),
        unscored: cases
            .iter()
            .filter(|c| c.outcome == CaseOutcome::Unscored)
            .count() as u64,
        weighted: WeightedScore::from_cases(decided),
    }
}

impl RunResults {
    /// Builds results from per-case results (in set order), computing the tables.
    pub fn new(set: &EvalSet, candidate: Option<String>, cases: Vec<CaseResult>) -> Self {
        let mut order: Vec<String> = Vec::new();
        let mut by_cat: BTreeMap<String, Vec<&CaseResult>> = BTreeMap::new();
        for c in &cases {
            if !by_cat.contains_key(&c.category) {
                order.push(c.category.clone());
            }
            by_cat.entry(c.category.clone()).or_default().push(c);
        }
        let categories = order.iter().map(|k| row(k.clone(), &by_cat[k])).collect();
        let overall = row("all".into(), &cases.iter().collect::<Vec<_>>());
        Self {
            format: RESULTS_FORMAT.into(),
            evalset: SetRef {
                name: set.name().into(),
                sha256: set.sha256().into(),
                cases: set.cases().len(),
            },
            candidate,
            judge_checks: judge_summaries(&cases),
            cases,
            categories,
            overall,
            errors: Vec::new(),
        }
    }

    /// These results with the cases that ended in an error outside the model.
    pub fn with_errors(mut self, errors: Vec<CaseError>) -> Self {
        self.errors = errors;
        self
    }

    /// Sets every judge check's gate with `gate` (given the check as the set defines it) and
    /// recomputes the judge summaries. Cases whose id is not in `set` keep their gates.
    pub fn regate(&mut self, set: &EvalSet, gate: impl Fn(&JudgeCheck) -> JudgeGate) {
        for c in &mut self.cases {
            let Some(case) = set.case(&c.id) else {
                continue;
            };
            for j in &mut c.judgements {
                let check = case.checks().iter().find_map(|k| match k.kind() {
                    CheckKind::Judge(jc) if jc.name() == j.check => Some(jc),
                    _ => None,
                });
                if let Some(check) = check {
                    j.gate = gate(check);
                }
            }
        }
        self.judge_checks = judge_summaries(&self.cases);
    }

    /// Parses a results document; `file` names it in errors.
    pub fn from_json(file: &str, text: &str) -> Result<Self, EvalError> {
        let probe: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| EvalError::invalid(file, e.line(), "", format!("not valid JSON: {e}")))?;
        match probe.get("format").and_then(serde_json::Value::as_str) {
            Some(RESULTS_FORMAT) => {}
            other => {
                return Err(EvalError::UnsupportedFormat {
                    at: crate::error::Location {
                        file: file.into(),
                        line: 0,
                        field: "format".into(),
                    },
                    found: other.unwrap_or("(none)").into(),
                    expected: RESULTS_FORMAT.into(),
                });
            }
        }
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let line = e.inner().line();
            EvalError::from_json_line(file, line, &e)
        })
    }

    /// Number of cases that failed or are missing.
    pub fn failed(&self) -> usize {
        self.cases
            .iter()
            .filter(|c| c.outcome.decided() == Some(false))
            .count()
    }

    /// The readable per-category table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "eval set {} ({} cases, sha256 {})\n",
            self.evalset.name,
            self.evalset.cases,
            &self.evalset.sha256[..self.evalset.sha256.len().min(12)]
        );
        if let Some(c) = &self.candidate {
            out.push_str(&format!("candidate {c}\n"));
        }
        out.push_str(&format!(
            "{:<22} {:>7} {:>7} {:>9} {:>17} {:>9} {:>9}\n",
            "category", "passed", "n", "rate", "95% Wilson", "unscored", "weighted"
        ));
        for r in self.categories.iter().chain(std::iter::once(&self.overall)) {
            let rate = r
                .pass_rate
                .rate
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x));
            let ci = r.pass_rate.ci95.map_or("-".into(), |(lo, hi)| {
                format!("[{:.1}, {:.1}]", 100.0 * lo, 100.0 * hi)
            });
            let w = r
                .weighted
                .score
                .map_or("-".into(), |x| format!("{:.1}%", 100.0 * x));
            out.push_str(&format!(
                "{:<22} {:>7} {:>7} {:>9} {:>17} {:>9} {:>9}\n",
                r.category, r.pass_rate.passed, r.pass_rate.n, rate, ci, r.unscored, w
            ));
        }
        let missing = self
            .cases
            .iter()
            .filter(|c| c.outcome == CaseOutcome::Missing)
            .count();
        if missing > 0 {
            let (cases, count) = if missing == 1 {
                ("case", "counts")
            } else {
                ("cases", "count")
            };
            out.push_str(&format!(
                "{missing} {cases} had no output and {count} as failed\n"
            ));
        }
        if !self.judge_checks.is_empty() {
            out.push_str("\njudge checks (an advisory check may not drive a disqualifier):\n");
            for j in &self.judge_checks {
                out.push_str(&format!(
                    "  {} (judge {}, rubric {}): {} pass, {} fail, {} unscored; {}: {}\n",
                    j.check,
                    j.judge,
                    &j.rubric_sha256[..j.rubric_sha256.len().min(12)],
                    j.passed,
                    j.failed,
                    j.unscored,
                    j.gate.label(),
                    j.gate.reason
                ));
            }
        }
        out
    }
}

/// Scores an outputs file against a set. Every output must name a case of the set; cases without
/// an output are `missing`.
pub fn score_outputs(
    set: &EvalSet,
    outputs_file: &str,
    outputs: &[(String, usize, Response)],
) -> Result<RunResults, EvalError> {
    let mut by_id: BTreeMap<&str, &Response> = BTreeMap::new();
    for (id, line, r) in outputs {
        if set.case(id).is_none() {
            return Err(EvalError::invalid(
                outputs_file,
                *line,
                "id",
                format!(
                    "no case {id:?} in eval set {} ({})",
                    set.name(),
                    &set.sha256()[..12]
                ),
            ));
        }
        by_id.insert(id, r);
    }
    let cases = set
        .cases()
        .iter()
        .map(|c| score_case(c, by_id.get(c.id()).copied()))
        .collect();
    Ok(RunResults::new(set, None, cases))
}

/// Which side of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// The label (file name or candidate).
    pub label: String,
    /// The eval set it was scored on.
    pub evalset: SetRef,
    /// Pass rate on the shared cases.
    pub pass_rate: PassRate,
}

/// A McNemar table for one category.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CategoryComparison {
    /// The category.
    pub category: String,
    /// The test.
    pub mcnemar: McNemar,
    /// The p-value after Holm's adjustment across all categories of the comparison.
    pub p_holm: f64,
}

/// Two result sets compared on their shared, decided cases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// `shortlist.eval-compare.v1`.
    pub format: String,
    /// Candidate A.
    pub a: Side,
    /// Candidate B.
    pub b: Side,
    /// Whether both were scored on the same eval-set version.
    pub same_evalset: bool,
    /// Case ids paired.
    pub shared: usize,
    /// Ids decided only in A (not paired).
    pub only_a: Vec<String>,
    /// Ids decided only in B (not paired).
    pub only_b: Vec<String>,
    /// The overall test.
    pub mcnemar: McNemar,
    /// Per category.
    pub categories: Vec<CategoryComparison>,
    /// Cases A passed and B failed.
    pub a_only_cases: Vec<String>,
    /// Cases B passed and A failed.
    pub b_only_cases: Vec<String>,
}

/// Pairs two result sets on the cases both decided (missing counts as failed; unscored cases are
/// left out on both sides).
pub fn compare(a_label: &str, a: &RunResults, b_label: &str, b: &RunResults) -> Comparison {
    let decided = |r: &RunResults| -> BTreeMap<String, (String, bool)> {
        r.cases
            .iter()
            .filter_map(|c| {
                c.outcome
                    .decided()
                    .map(|ok| (c.id.clone(), (c.category.clone(), ok)))
            })
            .collect()
    };
    let (da, db) = (decided(a), decided(b));
    let ka: BTreeSet<&String> = da.keys().collect();
    let kb: BTreeSet<&String> = db.keys().collect();
    // Pair in A's case order so tables list categories as the set does.
    let shared: Vec<&CaseResult> = a
        .cases
        .iter()
        .filter(|c| ka.contains(&c.id) && kb.contains(&c.id))
        .collect();
    let mut cats: Vec<String> = Vec::new();
    let mut per_cat: BTreeMap<String, Vec<(bool, bool)>> = BTreeMap::new();
    let (mut a_only_cases, mut b_only_cases) = (Vec::new(), Vec::new());
    let mut pairs = Vec::new();
    for c in &shared {
        let pa = da[&c.id].1;
        let pb = db[&c.id].1;
        pairs.push((pa, pb));
        if !per_cat.contains_key(&c.category) {
            cats.push(c.category.clone());
        }
        per_cat
            .entry(c.category.clone())
            .or_default()
            .push((pa, pb));
        match (pa, pb) {
            (true, false) => a_only_cases.push(c.id.clone()),
            (false, true) => b_only_cases.push(c.id.clone()),
            _ => {}
        }
    }
    let mcnemar = McNemar::from_pairs(pairs.iter().copied());
    let n = pairs.len() as u64;
    Comparison {
        format: COMPARE_FORMAT.into(),
        a: Side {
            label: a_label.into(),
            evalset: a.evalset.clone(),
            pass_rate: PassRate::new(pairs.iter().filter(|p| p.0).count() as u64, n),
        },
        b: Side {
            label: b_label.into(),
            evalset: b.evalset.clone(),
            pass_rate: PassRate::new(pairs.iter().filter(|p| p.1).count() as u64, n),
        },
        same_evalset: a.evalset.sha256 == b.evalset.sha256,
        shared: shared.len(),
        only_a: ka.difference(&kb).map(|s| (*s).clone()).collect(),
        only_b: kb.difference(&ka).map(|s| (*s).clone()).collect(),
        mcnemar,
        categories: {
            let tests: Vec<(String, McNemar)> = cats
                .into_iter()
                .map(|k| {
                    let m = McNemar::from_pairs(per_cat[&k].iter().copied());
                    (k, m)
                })
                .collect();
            let adjusted = holm(&tests.iter().map(|(_, m)| m.p_value).collect::<Vec<_>>());
            tests
                .into_iter()
                .zip(adjusted)
                .map(|((category, mcnemar), p_holm)| CategoryComparison {
                    category,
                    mcnemar,
                    p_holm,
                })
                .collect()
        },
        a_only_cases,
        b_only_cases,
    }
}

impl Comparison {
    /// True when B is significantly worse than A at the 5 % level (more A-only passes than
    /// B-only passes, exact McNemar p < 0.05): a regression from A to B.
    pub fn b_significantly_worse(&self) -> bool {
        self.mcnemar.p_value < 0.05 && self.mcnemar.a_only > self.mcnemar.b_only
    }

    /// The readable comparison.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if !self.same_evalset {
            out.push_str("warning: the two results were scored on different eval-set versions; only shared case ids are paired\n");
        }
        out.push_str(&format!(
            "A = {}: {}\n",
            self.a.label,
            self.a.pass_rate.display()
        ));
        out.push_str(&format!(
            "B = {}: {}\n",
            self.b.label,
            self.b.pass_rate.display()
        ));
        out.push_str(&format!(
            "paired cases {} (only in A: {}, only in B: {})\n\n",
            self.shared,
            self.only_a.len(),
            self.only_b.len()
        ));
        out.push_str(&format!(
            "{:<22} {:>6} {:>7} {:>7} {:>6} {:>6} {:>9} {:>9}\n",
            "category", "n", "A only", "B only", "both", "none", "exact p", "Holm p"
        ));
        let all = CategoryComparison {
            category: "all".into(),
            mcnemar: self.mcnemar,
            p_holm: self.mcnemar.p_value,
        };
        for c in self.categories.iter().chain(std::iter::once(&all)) {
            let m = &c.mcnemar;
            let holm = if c.category == "all" {
                "-".to_owned()
            } else {
                format!("{:.4}", c.p_holm)
            };
            out.push_str(&format!(
                "{:<22} {:>6} {:>7} {:>7} {:>6} {:>6} {:>9.4} {:>9}\n",
                c.category,
                m.n(),
                m.a_only,
                m.b_only,
                m.both_pass,
                m.both_fail,
                m.p_value,
                holm
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::parse_outputs;

    const SET: &str = r#"
format: shortlist.evalset.v1
name: t
cases:
  - {id: a, category: ordinary, input: q, checks: [{type: contains, value: yes}]}
  - {id: b, category: ordinary, input: q, checks: [{type: contains, value: yes}], weight: 3}
  - {id: c, category: refusal, input: q, checks: [{type: refusal, expect: refuse}]}
  - {id: d, category: refusal, input: q, checks: [{type: judge, judge: j, rubric: r}]}
"#;

    #[test]
    fn scores_outputs_into_tables() {
        let set = EvalSet::from_yaml("t.yaml", SET).unwrap();
        let outs = parse_outputs(
            "o.jsonl",
            "{\"id\":\"a\",\"output\":\"yes\"}\n{\"id\":\"b\",\"output\":\"no\"}\n{\"id\":\"d\",\"output\":\"hm\"}\n",
        )
        .unwrap();
        let r = score_outputs(&set, "o.jsonl", &outs).unwrap();
        let out: Vec<CaseOutcome> = r.cases.iter().map(|c| c.outcome).collect();
        assert_eq!(
            out,
            vec![
                CaseOutcome::Pass,
                CaseOutcome::Fail,
                CaseOutcome::Missing,
                CaseOutcome::Unscored
            ]
        );
        assert_eq!(r.categories[0].pass_rate.n, 2);
        assert_eq!(r.categories[0].weighted.score, Some(0.25));
        assert_eq!(r.categories[1].pass_rate.n, 1);
        assert_eq!(r.categories[1].unscored, 1);
        assert_eq!(r.overall.pass_rate.passed, 1);
        assert_eq!(r.failed(), 2);
        assert!(
            r.table()
                .contains("1 case had no output and counts as failed")
        );
        let back = RunResults::from_json("r.json", &serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn judge_checks_are_audited_and_gated_in_results() {
        use crate::score::judge::{GateStatus, JudgeGate};
        let set = EvalSet::from_yaml("t.yaml", SET).unwrap();
        let outs = parse_outputs(
            "o.jsonl",
            "{\"id\":\"d\",\"output\":\"hm\",\"judgements\":{\"judge\":\"Rude.\\nFAIL\"}}\n",
        )
        .unwrap();
        let mut r = score_outputs(&set, "o.jsonl", &outs).unwrap();
        let d = r.cases.iter().find(|c| c.id == "d").unwrap();
        assert_eq!(d.outcome, CaseOutcome::Fail);
        assert_eq!(d.judgements.len(), 1);
        assert_eq!(d.judgements[0].judge_output.as_deref(), Some("Rude.\nFAIL"));
        assert_eq!(d.judgements[0].verdict, Outcome::Fail);
        assert_eq!(d.judgements[0].gate.status, GateStatus::Advisory);
        assert_eq!(r.judge_checks.len(), 1);
        assert_eq!(r.judge_checks[0].failed, 1);
        assert!(
            r.table().contains("judge (judge j, rubric"),
            "{}",
            r.table()
        );
        assert!(
            r.table().contains("advisory: no calibration"),
            "{}",
            r.table()
        );
        r.regate(&set, |_| JudgeGate {
            status: GateStatus::MayDisqualify,
            reason: "calibrated".into(),
            items: Some(30),
            kappa: Some(0.8),
        });
        assert_eq!(r.judge_checks[0].gate.status, GateStatus::MayDisqualify);
        assert!(
            r.table().contains("may disqualify: calibrated"),
            "{}",
            r.table()
        );
        let back = RunResults::from_json("r.json", &serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn unknown_output_ids_are_errors() {
        let set = EvalSet::from_yaml("t.yaml", SET).unwrap();
        let outs = parse_outputs(
            "o.jsonl",
            "{\"id\":\"a\",\"output\":\"yes\"}\n{\"id\":\"zz\",\"output\":\"no\"}\n",
        )
        .unwrap();
        let e = score_outputs(&set, "o.jsonl", &outs)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("o.jsonl:2: field `id`"), "{e}");
    }

    #[test]
    fn compares_on_shared_cases() {
        let set = EvalSet::from_yaml("t.yaml", SET).unwrap();
        let ra = score_outputs(
            &set,
            "a",
            &parse_outputs(
                "a",
                "{\"id\":\"a\",\"output\":\"yes\"}\n{\"id\":\"b\",\"output\":\"yes\"}\n",
            )
            .unwrap(),
        )
        .unwrap();
        let rb = score_outputs(&set, "b", &parse_outputs("b", "{\"id\":\"a\",\"output\":\"no\"}\n{\"id\":\"b\",\"output\":\"yes\"}\n{\"id\":\"c\",\"output\":\"I can't help with that.\"}\n").unwrap()).unwrap();
        let c = compare("A", &ra, "B", &rb);
        assert!(c.same_evalset);
        // Missing outputs count as failed: c (missing in A) and d (missing in both) are paired.
        assert_eq!(c.shared, 4);
        assert_eq!(
            (
                c.mcnemar.both_pass,
                c.mcnemar.a_only,
                c.mcnemar.b_only,
                c.mcnemar.both_fail
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(c.a_only_cases, vec!["a"]);
        assert_eq!(c.b_only_cases, vec!["c"]);
        assert!(!c.b_significantly_worse());
        assert!(c.table().contains("all"));
    }
}
