//! One reproduction check's answers: each case's stored answer against the new one, and the
//! check as it is printed, stored and shown.

use serde::{Deserialize, Serialize};
use shortlist_evals::results::CaseResult;

/// One case asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseReproduction {
    pub id: String,
    pub category: String,
    /// Every compared field equal.
    pub same: bool,
    /// The stored outcome and the new one (`None`: undecided, e.g. a judge check unscored).
    pub passed_then: Option<bool>,
    pub passed_now: Option<bool>,
    /// What differs, in words (`output`, `tool calls`, `finish reason`, `tokens`, `check
    /// NAME`, `top-2 gap`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differs: Vec<String>,
    /// The stored answer and the new one, when their texts differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// The smallest top-2 gap of the stored answer, when known: a difference after a near-tie
    /// is what such a gap predicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_top2_gap: Option<f64>,
    /// The request failed outside the model: nothing to compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CaseReproduction {
    /// Whether the verdict moved (an error is not a verdict).
    pub fn verdict_changed(&self) -> bool {
        self.error.is_none() && self.passed_then != self.passed_now
    }
}

/// A quality run asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReproductionView {
    pub study: String,
    pub version: u32,
    pub generation: u32,
    pub candidate: String,
    pub source: String,
    /// `local` (this process's engine) or `endpoint`.
    pub kind: String,
    /// The decoding of the stored run, used again.
    pub decoding: String,
    /// Cases in flight then (the stored run's) and now.
    pub concurrency_then: Option<u32>,
    pub concurrency_now: usize,
    /// What changed since the stored run: model hashes, runtime, machine, in words; empty when
    /// nothing did.
    pub changed: Vec<String>,
    /// The machine that answered now, in words.
    pub machine: String,
    /// Cases the run stored, and how many were asked again.
    pub stored: usize,
    pub asked: usize,
    pub same: usize,
    pub different: usize,
    pub verdicts_changed: usize,
    pub errors: usize,
    /// Every answer the same, no verdict changed, no error.
    pub ok: bool,
    /// Seconds the cases took.
    pub seconds: f64,
    pub at: String,
    /// The sample's seed, when not every case was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    pub cases: Vec<CaseReproduction>,
}

/// A stored check, as the record page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredReproductionView {
    pub stored_at: String,
    #[serde(flatten)]
    pub check: ReproductionView,
}

/// A case that got no answer to compare (`error` says why).
pub(super) fn unanswered(before: &CaseResult) -> CaseReproduction {
    CaseReproduction {
        id: before.id.clone(),
        category: before.category.clone(),
        same: false,
        passed_then: before.outcome.decided(),
        passed_now: None,
        differs: Vec::new(),
        then: None,
        now: None,
        min_top2_gap: before.min_top2_gap,
        error: None,
    }
}

/// The stored answer (`then_text`, scored as `before`) against the new one.
pub(super) fn compare(
    before: &CaseResult,
    then_text: &str,
    after: &CaseResult,
    now_text: &str,
) -> CaseReproduction {
    let mut differs = Vec::new();
    if then_text != now_text {
        differs.push("output".to_owned());
    }
    if before.tool_calls != after.tool_calls {
        differs.push("tool calls".to_owned());
    }
    if before.finish_reason != after.finish_reason {
        differs.push("finish reason".to_owned());
    }
    if before.tokens != after.tokens {
        differs.push("tokens".to_owned());
    }
    for check in &before.checks {
        let now = after.checks.iter().find(|k| k.name == check.name);
        if now.is_none_or(|k| k.verdict != check.verdict) {
            differs.push(format!("check {}", check.name));
        }
    }
    // The gap is compared to the bit: equal logits give equal gaps.
    if before.min_top2_gap.map(f64::to_bits) != after.min_top2_gap.map(f64::to_bits) {
        differs.push("top-2 gap".to_owned());
    }
    let passed_then = before.outcome.decided();
    let passed_now = after.outcome.decided();
    if passed_then != passed_now && !differs.iter().any(|d| d.starts_with("check")) {
        differs.push("outcome".to_owned());
    }
    let texts = then_text != now_text;
    CaseReproduction {
        id: before.id.clone(),
        category: before.category.clone(),
        same: differs.is_empty(),
        passed_then,
        passed_now,
        differs,
        then: texts.then(|| then_text.to_owned()),
        now: texts.then(|| now_text.to_owned()),
        min_top2_gap: before.min_top2_gap,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use shortlist_evals::results::CaseOutcome;

    use super::*;

    fn result(outcome: CaseOutcome, verdict: bool, gap: Option<f64>) -> CaseResult {
        serde_json::from_value(serde_json::json!({
            "id": "c1", "category": "billing", "weight": 1.0,
            "outcome": outcome, "checks": [{"name": "contains", "outcome": if verdict {"pass"} else {"fail"}}],
            "tokens": 12, "min_top2_gap": gap,
        }))
        .unwrap()
    }

    #[test]
    fn the_same_answer_is_the_same_to_the_bit() {
        let a = result(CaseOutcome::Pass, true, Some(0.25));
        let same = compare(&a, "Paris.", &a, "Paris.");
        assert!(same.same && !same.verdict_changed(), "{same:?}");
        assert_eq!(same.then, None);
        // A gap one unit in the last place apart is a difference: other logits.
        let mut b = a.clone();
        b.min_top2_gap = Some(f64::from_bits(0.25f64.to_bits() + 1));
        let moved = compare(&a, "Paris.", &b, "Paris.");
        assert_eq!(moved.differs, ["top-2 gap"]);
        assert!(!moved.same && !moved.verdict_changed());
    }

    #[test]
    fn another_answer_names_what_differs_and_whether_the_verdict_moved() {
        let a = result(CaseOutcome::Pass, true, Some(0.05));
        let b = result(CaseOutcome::Fail, false, Some(0.05));
        let r = compare(&a, "Paris.", &b, "Lyon.");
        assert_eq!(r.differs, ["output", "check contains"]);
        assert!(r.verdict_changed());
        assert_eq!(
            (r.then.as_deref(), r.now.as_deref()),
            (Some("Paris."), Some("Lyon."))
        );
        assert_eq!((r.passed_then, r.passed_now), (Some(true), Some(false)));
    }
}
