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

    /// The check's name (judge outputs are supplied under it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rubric, verbatim.
    pub fn rubric(&self) -> &str {
        &self.rubric
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
    /// The reply that was judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The judge's raw output, kept so a reader can audit the verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_output: Option<String>,
}

/// A labelled item on which the judge gave neither PASS nor FAIL. Such items are kept out of κ
/// (an undecided judge leaves a check unscored, never passed) but recorded, so a reader sees how
/// often the judge failed to decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UndecidedLabel {
    /// The case (or item) id.
    pub case: String,
    /// The human verdict (true = pass).
    pub human: bool,
    /// The reply that was judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The judge's raw output.
    pub judge_output: String,
}

/// What a calibration shows, written beside the labels for readers. It is derived: the gate
/// ([`may_disqualify`]) always recomputes from `labels` and never trusts these numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationSummary {
    /// Items where the judge decided (the κ population).
    pub items: usize,
    /// Items where the judge gave neither PASS nor FAIL.
    pub undecided: usize,
    /// Fraction of decided items where judge and human agree.
    pub agreement: f64,
    /// Cohen's κ over the decided items.
    pub kappa: f64,
    /// The bar applied.
    pub min_items: usize,
    /// The bar applied.
    pub min_kappa: f64,
    /// Whether the bar is met, so the judge's verdicts may drive a disqualifier.
    pub meets_gate: bool,
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
    /// The model that acted as judge when the labels were judged (a GGUF model's name or an
    /// endpoint's `URL#MODEL`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_model: Option<String>,
    /// The labelled items the judge decided.
    pub labels: Vec<CalibrationLabel>,
    /// The labelled items the judge did not decide.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecided: Vec<UndecidedLabel>,
    /// Agreement, κ and the gate, for readers (see [`CalibrationSummary`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<CalibrationSummary>,
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
        if rec.labels.is_empty() && rec.undecided.is_empty() {
            return Err(crate::error::EvalError::invalid(
                file,
                0,
                "labels",
                "a calibration needs labelled items",
            ));
        }
        Ok(rec)
    }

    /// A calibration from judged items: `(case, reply judged, human verdict, judge's raw output)`.
    /// The verdict is read from the judge's output as in scoring; items with neither PASS nor FAIL
    /// go to `undecided`. The summary is filled against `policy`.
    pub fn from_judged(
        check: &JudgeCheck,
        judge_model: Option<String>,
        items: Vec<(String, String, bool, String)>,
        policy: GatePolicy,
    ) -> Self {
        let mut rec = Self {
            format: CALIBRATION_FORMAT.to_owned(),
            judge: check.judge.clone(),
            rubric_sha256: check.rubric_sha256.clone(),
            judge_model,
            labels: Vec::new(),
            undecided: Vec::new(),
            summary: None,
        };
        for (case, output, human, judge_output) in items {
            match parse_verdict(&judge_output) {
                Some(judge) => rec.labels.push(CalibrationLabel {
                    case,
                    human,
                    judge,
                    output: Some(output),
                    judge_output: Some(judge_output),
                }),
                None => rec.undecided.push(UndecidedLabel {
                    case,
                    human,
                    output: Some(output),
                    judge_output,
                }),
            }
        }
        rec.summary = Some(rec.summarize(policy));
        rec
    }

    /// Agreement, κ and whether `policy` is met, computed from the labels.
    pub fn summarize(&self, policy: GatePolicy) -> CalibrationSummary {
        let kappa = self.kappa();
        CalibrationSummary {
            items: self.labels.len(),
            undecided: self.undecided.len(),
            agreement: self.agreement(),
            kappa,
            min_items: policy.min_items,
            min_kappa: policy.min_kappa,
            meets_gate: self.labels.len() >= policy.min_items && kappa >= policy.min_kappa,
        }
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

/// Whether a judge check's verdicts may drive a disqualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GateStatus {
    /// Reported, but no disqualifier may rest on it.
    Advisory,
    /// A calibration on record meets the bar.
    MayDisqualify,
}

/// A judge check's standing under the [`GatePolicy`], with the reason, for results and tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeGate {
    /// Advisory or may disqualify.
    pub status: GateStatus,
    /// Why, in words.
    pub reason: String,
    /// Items of the qualifying calibration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<usize>,
    /// κ of the qualifying calibration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kappa: Option<f64>,
}

impl JudgeGate {
    /// Advisory, for `reason`.
    pub fn advisory(reason: impl Into<String>) -> Self {
        Self {
            status: GateStatus::Advisory,
            reason: reason.into(),
            items: None,
            kappa: None,
        }
    }

    /// The gate of `check` given the calibration records on file ([`may_disqualify`]).
    pub fn of(check: &JudgeCheck, records: &[JudgeCalibration], policy: GatePolicy) -> Self {
        match may_disqualify(check, records, policy) {
            Ok(r) => Self {
                status: GateStatus::MayDisqualify,
                reason: format!(
                    "calibrated: κ = {:.2} on {} human-labelled items (bar: ≥ {} items, κ ≥ {})",
                    r.kappa(),
                    r.labels.len(),
                    policy.min_items,
                    policy.min_kappa
                ),
                items: Some(r.labels.len()),
                kappa: Some(r.kappa()),
            },
            Err(why) => Self::advisory(why),
        }
    }

    /// `advisory` or `may disqualify`.
    pub fn label(&self) -> &'static str {
        match self.status {
            GateStatus::Advisory => "advisory",
            GateStatus::MayDisqualify => "may disqualify",
        }
    }
}

/// A human's verdict in a labels file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum HumanVerdict {
    Pass,
    Fail,
}

/// One line of a labels file (`*.labels.jsonl`), on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireLabel {
    id: String,
    output: String,
    human: HumanVerdict,
    #[serde(default)]
    check: Option<String>,
}

/// One human-labelled reply: a case of the set, the reply a person judged, and their verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HumanLabel {
    /// The case id.
    pub id: String,
    /// The reply judged.
    pub output: String,
    /// The human verdict (true = pass).
    pub human: bool,
    /// The judge check meant, when the case has several.
    pub check: Option<String>,
    /// The line in the labels file.
    pub line: usize,
}

/// Parses a labels file: one JSON object per line, `{"id", "output", "human": "pass"|"fail"}`
/// with an optional `"check"` (the judge check's name). Blank lines are skipped. The same case
/// may appear on several lines, with different replies.
pub fn parse_labels(file: &str, text: &str) -> Result<Vec<HumanLabel>, crate::error::EvalError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut de = serde_json::Deserializer::from_str(line);
        let wire: WireLabel = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| crate::error::EvalError::from_json_line(file, lineno, &e))?;
        out.push(HumanLabel {
            id: wire.id,
            output: wire.output,
            human: wire.human == HumanVerdict::Pass,
            check: wire.check,
            line: lineno,
        });
    }
    if out.is_empty() {
        return Err(crate::error::EvalError::invalid(
            file,
            0,
            "",
            "no labelled items (one JSON object per line: id, output, human)",
        ));
    }
    Ok(out)
}

/// Finds, for every label, the case and its judge check judged by `judge`, and checks that all
/// labels share one rubric (a calibration covers one judge and one rubric). Errors name the
/// labels file's line and field.
pub fn calibration_items<'a>(
    set: &'a crate::set::EvalSet,
    file: &str,
    labels: &[HumanLabel],
    judge: &str,
) -> Result<(JudgeCheck, Vec<&'a crate::set::Case>), crate::error::EvalError> {
    use crate::error::EvalError;
    use crate::set::CheckKind;
    let mut first: Option<(JudgeCheck, usize)> = None;
    let mut cases = Vec::with_capacity(labels.len());
    for l in labels {
        let case = set.case(&l.id).ok_or_else(|| {
            EvalError::invalid(
                file,
                l.line,
                "id",
                format!("no case {:?} in eval set {}", l.id, set.name()),
            )
        })?;
        let mine: Vec<&JudgeCheck> = case
            .checks()
            .iter()
            .filter_map(|c| match c.kind() {
                CheckKind::Judge(j) if j.judge() == judge => Some(j),
                _ => None,
            })
            .filter(|j| l.check.as_deref().is_none_or(|n| n == j.name()))
            .collect();
        let check = match (mine.as_slice(), &l.check) {
            ([one], _) => (*one).clone(),
            ([], Some(name)) => {
                return Err(EvalError::invalid(
                    file,
                    l.line,
                    "check",
                    format!(
                        "case {:?} has no judge check named {name:?} judged by `{judge}`",
                        l.id
                    ),
                ));
            }
            ([], None) => {
                return Err(EvalError::invalid(
                    file,
                    l.line,
                    "id",
                    format!("case {:?} has no judge check judged by `{judge}`", l.id),
                ));
            }
            (many, _) => {
                return Err(EvalError::invalid(
                    file,
                    l.line,
                    "check",
                    format!(
                        "case {:?} has {} judge checks judged by `{judge}`; name one with \"check\"",
                        l.id,
                        many.len()
                    ),
                ));
            }
        };
        match &first {
            None => first = Some((check, l.line)),
            Some((f, line)) if f.rubric_sha256 != check.rubric_sha256 => {
                return Err(EvalError::invalid(
                    file,
                    l.line,
                    "id",
                    format!(
                        "case {:?}'s rubric (sha256 {}) differs from the one on line {line} ({}); a calibration covers one rubric: split the labels",
                        l.id,
                        &check.rubric_sha256[..12],
                        &f.rubric_sha256[..12]
                    ),
                ));
            }
            Some(_) => {}
        }
        cases.push(case);
    }
    let (check, _) = first.ok_or_else(|| EvalError::invalid(file, 0, "", "no labelled items"))?;
    Ok((check, cases))
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
                    output: None,
                    judge_output: None,
                })
                .collect(),
            judge_model: None,
            undecided: Vec::new(),
            summary: None,
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

    const SET: &str = r#"
format: shortlist.evalset.v1
name: j
cases:
  - id: a
    category: ordinary
    input: q
    checks: [{type: judge, name: tone, judge: big, rubric: "Be polite."}]
  - id: b
    category: ordinary
    input: q
    checks:
      - {type: judge, name: tone, judge: big, rubric: "Be polite."}
      - {type: judge, name: tone2, judge: big, rubric: "Be brief."}
  - id: c
    category: ordinary
    input: q
    checks: [{type: judge, name: tone, judge: big, rubric: "Be brief."}]
"#;

    #[test]
    fn labels_resolve_to_one_judge_and_rubric() {
        let set = crate::set::EvalSet::from_yaml("j.yaml", SET).unwrap();
        let labels = parse_labels(
            "l.jsonl",
            "{\"id\": \"a\", \"output\": \"Hi.\", \"human\": \"pass\"}\n\n\
             {\"id\": \"b\", \"output\": \"Go away.\", \"human\": \"fail\", \"check\": \"tone\"}\n",
        )
        .unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!((labels[1].line, labels[1].human), (3, false));
        let (check, cases) = calibration_items(&set, "l.jsonl", &labels, "big").unwrap();
        assert_eq!(check.name(), "tone");
        assert_eq!(cases.len(), 2);

        let e = parse_labels(
            "l.jsonl",
            "{\"id\": \"a\", \"output\": \"x\", \"human\": \"yes\"}",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("l.jsonl:1: field `human`"), "{e}");
        assert!(parse_labels("l.jsonl", "\n").is_err());
        let bad = |line: &str| {
            let labels = parse_labels("l.jsonl", line).unwrap();
            calibration_items(&set, "l.jsonl", &labels, "big")
                .unwrap_err()
                .to_string()
        };
        let e = bad("{\"id\": \"zz\", \"output\": \"x\", \"human\": \"pass\"}");
        assert!(
            e.contains("l.jsonl:1: field `id`") && e.contains("no case"),
            "{e}"
        );
        let e = bad("{\"id\": \"b\", \"output\": \"x\", \"human\": \"pass\"}");
        assert!(e.contains("2 judge checks"), "{e}");
        let e = bad("{\"id\": \"a\", \"output\": \"x\", \"human\": \"pass\", \"check\": \"nope\"}");
        assert!(e.contains("no judge check named"), "{e}");
        let e = bad(
            "{\"id\": \"a\", \"output\": \"x\", \"human\": \"pass\"}\n{\"id\": \"c\", \"output\": \"x\", \"human\": \"pass\"}",
        );
        assert!(e.contains("l.jsonl:2") && e.contains("one rubric"), "{e}");
        let labels = parse_labels(
            "l.jsonl",
            "{\"id\": \"a\", \"output\": \"x\", \"human\": \"pass\"}",
        )
        .unwrap();
        let e = calibration_items(&set, "l.jsonl", &labels, "small")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no judge check judged by `small`"), "{e}");
    }

    #[test]
    fn a_calibration_from_judged_items_keeps_undecided_ones_out_of_kappa() {
        let c = check();
        let items = vec![
            (
                "a".to_owned(),
                "r1".to_owned(),
                true,
                "fine\nPASS".to_owned(),
            ),
            ("b".to_owned(), "r2".to_owned(), false, "FAIL".to_owned()),
            ("c".to_owned(), "r3".to_owned(), false, "hmm".to_owned()),
        ];
        let rec = JudgeCalibration::from_judged(&c, Some("m".into()), items, GatePolicy::default());
        assert_eq!(rec.labels.len(), 2);
        assert_eq!(rec.undecided.len(), 1);
        assert_eq!(rec.undecided[0].judge_output, "hmm");
        let s = rec.summary.clone().unwrap();
        assert_eq!(
            (s.items, s.undecided, s.agreement, s.kappa),
            (2, 1, 1.0, 1.0)
        );
        assert!(!s.meets_gate, "2 items are below the 20-item bar");
        let text = serde_json::to_string(&rec).unwrap();
        assert_eq!(JudgeCalibration::from_json("c.json", &text).unwrap(), rec);
        let gate = JudgeGate::of(&c, &[rec], GatePolicy::default());
        assert_eq!(gate.status, GateStatus::Advisory);
        assert_eq!(gate.label(), "advisory");
    }
}
