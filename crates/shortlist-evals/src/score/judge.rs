//! LLM-judge checks and the rule that governs them.
//!
//! A judge check names the candidate that judges and the rubric it judges by; the rubric is pinned
//! by its SHA-256 so that a quietly edited rubric is a different check. This crate runs no model:
//! [`JudgeCheck::prompt`] builds the judge's prompt, the runner obtains the judge's text, and
//! [`parse_verdict`] reads it (the last standalone `PASS` or `FAIL` wins; neither leaves the check
//! unscored, never passed).
//!
//! A judge verdict may drive a disqualifier only when a [`JudgeCalibration`] for the same judge and
//! rubric hash is on record and meets the [`GatePolicy`] (by default at least 20 human-labelled
//! cases and Cohen's κ ≥ 0.6 between judge and humans). Without that, judge results are reported
//! but advisory.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Scorer, Verdict};
use crate::response::Response;

/// SHA-256 of a rubric's exact text, as lowercase hex.
pub fn rubric_hash(rubric: &str) -> String {
    hex::encode(Sha256::digest(rubric.as_bytes()))
}

/// A judge check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgeCheck {
    name: String,
    judge: String,
    rubric: String,
    rubric_sha256: String,
}

impl JudgeCheck {
    /// A judge check named `name`; `pinned`, when given, must equal the rubric's hash.
    pub fn new(
        name: &str,
        judge: &str,
        rubric: &str,
        pinned: Option<&str>,
    ) -> Result<Self, String> {
        if judge.trim().is_empty() {
            return Err("the judge candidate must be named".into());
        }
        if rubric.trim().is_empty() {
            return Err("the rubric must not be empty".into());
        }
        let hash = rubric_hash(rubric);
        if let Some(p) = pinned
            && !p.eq_ignore_ascii_case(&hash)
        {
            return Err(format!(
                "rubric_sha256 {p} does not match the rubric (its SHA-256 is {hash})"
            ));
        }
        Ok(Self {
            name: name.to_owned(),
            judge: judge.to_owned(),
            rubric: rubric.to_owned(),
            rubric_sha256: hash,
        })
    }

    /// The judge candidate's name.
    pub fn judge(&self) -> &str {
        &self.judge
    }

    /// The rubric's SHA-256.
    pub fn rubric_sha256(&self) -> &str {
        &self.rubric_sha256
    }

    /// The prompt the judge receives for one case.
    pub fn prompt(&self, case_input: &str, output: &str) -> String {
        format!(
            "You are grading a support assistant's reply against a rubric.\n\n\
             Rubric:\n{}\n\nConversation given to the assistant:\n{}\n\nAssistant's reply:\n{}\n\n\
             Think briefly, then end with one line: PASS if the reply meets the rubric, FAIL otherwise.",
            self.rubric, case_input, output
        )
    }
}

static VERDICT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(PASS|FAIL)\b").expect("static regex"));

/// Reads a judge's output: the last standalone `PASS` or `FAIL` (upper case) decides.
pub fn parse_verdict(judge_output: &str) -> Option<bool> {
    VERDICT
        .find_iter(judge_output)
        .last()
        .map(|m| m.as_str() == "PASS")
}

impl Scorer for JudgeCheck {
    fn score(&self, response: &Response) -> Verdict {
        match response.judgement(&self.name).map(parse_verdict) {
            None => Verdict::unscored(format!("no verdict from judge {} supplied", self.judge)),
            Some(None) => Verdict {
                outcome: super::Outcome::Unscored,
                code: Some("judge_unparseable".into()),
                reason: Some("the judge's output has no PASS or FAIL".into()),
            },
            Some(Some(true)) => Verdict::pass(),
            Some(Some(false)) => {
                Verdict::fail_code("judge_fail", format!("judge {} says FAIL", self.judge))
            }
        }
    }
}

/// One human-labelled calibration item: what a person decided and what the judge decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrationLabel {
    /// The case (or item) id.
    pub case: String,
    /// The human verdict (true = pass).
    pub human: bool,
    /// The judge verdict (true = pass).
    pub judge: bool,
}

/// The record of a judge's agreement with human labels on a calibration set
/// (`shortlist.judge-calibration.v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeCalibration {
    /// `shortlist.judge-calibration.v1`.
    pub format: String,
    /// The judge candidate.
    pub judge: String,
    /// The rubric's SHA-256.
    pub rubric_sha256: String,
    /// The labelled items.
    pub labels: Vec<CalibrationLabel>,
}

/// The calibration record's format tag.
pub const CALIBRATION_FORMAT: &str = "shortlist.judge-calibration.v1";

impl JudgeCalibration {
    /// Parses a calibration record (JSON); `file` names it in errors.
    pub fn from_json(file: &str, text: &str) -> Result<Self, crate::error::EvalError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let rec: Self = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let line = e.inner().line();
            crate::error::EvalError::from_json_line(file, line, &e)
        })?;
        if rec.format != CALIBRATION_FORMAT {
            return Err(crate::error::EvalError::UnsupportedFormat {
                at: crate::error::Location {
                    file: file.into(),
                    line: 0,
                    field: "format".into(),
                },
                found: rec.format,
                expected: CALIBRATION_FORMAT.into(),
            });
        }
        if rec.labels.is_empty() {
            return Err(crate::error::EvalError::invalid(
                file,
                0,
                "labels",
                "a calibration needs labelled items",
            ));
        }
        Ok(rec)
    }

    /// The fraction of items where judge and human agree.
    pub fn agreement(&self) -> f64 {
        if self.labels.is_empty() {
            return 0.0;
        }
        let agree = self.labels.iter().filter(|l| l.human == l.judge).count();
        agree as f64 / self.labels.len() as f64
    }

    /// Cohen's κ between judge and human (chance-corrected agreement). When chance agreement is
    /// already 1 (everyone always said the same thing), κ is undefined and reported as 0: such a
    /// calibration set shows nothing about the judge's discrimination.
    pub fn kappa(&self) -> f64 {
        let n = self.labels.len() as f64;
        if n == 0.0 {
            return 0.0;
        }
        let po = self.agreement();
        let h = self.labels.iter().filter(|l| l.human).count() as f64 / n;
        let j = self.labels.iter().filter(|l| l.judge).count() as f64 / n;
        let pe = h * j + (1.0 - h) * (1.0 - j);
        if (1.0 - pe).abs() < 1e-12 {
            0.0
        } else {
            (po - pe) / (1.0 - pe)
        }
    }
}

/// When a calibrated judge may drive a disqualifier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GatePolicy {
    /// Minimum number of human-labelled items.
    pub min_items: usize,
    /// Minimum Cohen's κ.
    pub min_kappa: f64,
}

impl Default for GatePolicy {
    fn default() -> Self {
        Self {
            min_items: 20,
            min_kappa: 0.6,
        }
    }
}

/// Whether `check`'s verdicts may drive a disqualifier, given the calibration records on file.
/// `Ok` carries the record that qualifies it; `Err` says why not.
pub fn may_disqualify<'a>(
    check: &JudgeCheck,
    records: &'a [JudgeCalibration],
    policy: GatePolicy,
) -> Result<&'a JudgeCalibration, String> {
    let mine: Vec<&JudgeCalibration> = records
        .iter()
        .filter(|r| {
            r.judge == check.judge && r.rubric_sha256.eq_ignore_ascii_case(&check.rubric_sha256)
        })
        .collect();
    if mine.is_empty() {
        return Err(format!(
            "no calibration recorded for judge {} with rubric {}",
            check.judge, check.rubric_sha256
        ));
    }
    mine.iter()
        .copied()
        .find(|r| r.labels.len() >= policy.min_items && r.kappa() >= policy.min_kappa)
        .ok_or_else(|| {
            format!(
                "calibration below the bar (need ≥ {} items and κ ≥ {}; best has {} items, κ = {:.2})",
                policy.min_items,
                policy.min_kappa,
                mine.iter().map(|r| r.labels.len()).max().unwrap_or(0),
                mine.iter().map(|r| r.kappa()).fold(f64::NEG_INFINITY, f64::max)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check() -> JudgeCheck {
        JudgeCheck::new(
            "tone",
            "big-model",
            "Polite and does not promise refunds.",
            None,
        )
        .unwrap()
    }

    #[test]
    fn rubric_is_pinned() {
        let c = check();
        assert!(
            JudgeCheck::new(
                "t",
                "j",
                "Polite and does not promise refunds.",
                Some(c.rubric_sha256())
            )
            .is_ok()
        );
        assert!(JudgeCheck::new("t", "j", "Polite.", Some(c.rubric_sha256())).is_err());
        assert_eq!(
            rubric_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn verdicts_from_judge_text() {
        assert_eq!(parse_verdict("It is polite. PASS"), Some(true));
        assert_eq!(
            parse_verdict("Would PASS on tone but promises a refund.\nFAIL"),
            Some(false)
        );
        assert_eq!(parse_verdict("passable"), None);
        let c = check();
        let r = Response::text_only("Hello").with_judgement("tone", "Looks fine.\nPASS");
        assert!(c.score(&r).passed());
        assert_eq!(
            c.score(&Response::text_only("Hello")).outcome,
            super::super::Outcome::Unscored
        );
        let r = Response::text_only("Hello").with_judgement("tone", "hmm");
        assert_eq!(c.score(&r).outcome, super::super::Outcome::Unscored);
    }

    fn calib(pairs: &[(bool, bool)], c: &JudgeCheck) -> JudgeCalibration {
        JudgeCalibration {
            format: "shortlist.judge-calibration.v1".into(),
            judge: c.judge().into(),
            rubric_sha256: c.rubric_sha256().into(),
            labels: pairs
                .iter()
                .enumerate()
                .map(|(i, (h, j))| CalibrationLabel {
                    case: format!("c{i}"),
                    human: *h,
                    judge: *j,
                })
                .collect(),
        }
    }

    #[test]
    fn calibration_records_parse_with_format_check() {
        let text = r#"{"format": "shortlist.judge-calibration.v1", "judge": "j", "rubric_sha256": "ab",
                       "labels": [{"case": "c1", "human": true, "judge": true}]}"#;
        assert_eq!(
            JudgeCalibration::from_json("c.json", text)
                .unwrap()
                .labels
                .len(),
            1
        );
        let e = JudgeCalibration::from_json("c.json", &text.replace("v1", "v2")).unwrap_err();
        assert!(e.to_string().contains("unsupported format"), "{e}");
        let e = JudgeCalibration::from_json(
            "c.json",
            &text.replace("true, \"judge\": true", "\"yes\", \"judge\": true"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("labels[0].human"), "{e}");
    }

    #[test]
    fn kappa_reference() {
        // 2x2 table a=20 (both pass), b=5, c=10, d=15: po = 0.7, pe = 0.5, κ = 0.4.
        let c = check();
        let mut pairs = vec![(true, true); 20];
        pairs.extend(vec![(true, false); 5]);
        pairs.extend(vec![(false, true); 10]);
        pairs.extend(vec![(false, false); 15]);
        let k = calib(&pairs, &c).kappa();
        assert!((k - 0.4).abs() < 1e-12, "{k}");
    }

    #[test]
    fn gate_requires_a_matching_good_calibration() {
        let c = check();
        let good: Vec<(bool, bool)> = (0..30).map(|i| (i % 2 == 0, i % 2 == 0)).collect();
        let few: Vec<(bool, bool)> = (0..10).map(|i| (i % 2 == 0, i % 2 == 0)).collect();
        let noisy: Vec<(bool, bool)> = (0..30).map(|i| (i % 2 == 0, i % 3 == 0)).collect();
        assert!(may_disqualify(&c, &[], GatePolicy::default()).is_err());
        assert!(may_disqualify(&c, &[calib(&few, &c)], GatePolicy::default()).is_err());
        assert!(may_disqualify(&c, &[calib(&noisy, &c)], GatePolicy::default()).is_err());
        assert!(may_disqualify(&c, &[calib(&good, &c)], GatePolicy::default()).is_ok());
        let other = JudgeCheck::new("tone", "big-model", "Different rubric.", None).unwrap();
        assert!(may_disqualify(&other, &[calib(&good, &c)], GatePolicy::default()).is_err());
    }
}
