//! Regression checks: a candidate's latest run against a reference run of the same locked study
//! version — the baseline a person accepted, or the previous run — told apart from noise by the
//! paired exact McNemar test on the same cases (overall, and per category with Holm's
//! correction), with the changes that are regressions whatever the test says: a high-value case
//! that passed and now fails, a disqualifier that passed and now trips. A missing or unscored
//! case counts as a failure, never a pass. Load figures are not compared yet: the check says so.

use serde::Serialize;
use shortlist_evals::stats::{McNemar, holm};
use shortlist_study::record::SelectionRecord;
use shortlist_study::rule::Outcome;

use super::StudyService;
use super::compare::Pick;
use super::views::Comparison;
use crate::error::ServiceError;

/// What a run is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Against {
    /// The latest generation a person accepted (`study accept`).
    Baseline,
    /// The run before the latest.
    Previous,
}

/// A check's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    Improved,
    Ok,
    InsufficientData,
    Regression,
}

/// The paired table of the reference and the current run on the same cases.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedTable {
    pub label: String,
    pub both_pass: u64,
    /// Passed in the reference only (got worse).
    pub only_reference: u64,
    /// Passes now only (got better).
    pub only_current: u64,
    pub both_fail: u64,
    pub p_value: f64,
    /// Holm-adjusted p over the categories (the overall table has none).
    pub p_holm: Option<f64>,
}

/// One candidate's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateCheck {
    pub candidate: String,
    pub reference_generation: Option<u32>,
    pub current_generation: Option<u32>,
    pub verdict: CheckVerdict,
    /// Why, one line each (the evidence: counts, p, case ids, rules).
    pub reasons: Vec<String>,
    pub overall: Option<PairedTable>,
    pub categories: Vec<PairedTable>,
    /// What changed between the two runs' identities and machines.
    pub changed: Vec<String>,
    /// Load figures are not compared yet.
    pub load: String,
}

/// A study version's check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckView {
    pub study: String,
    pub version: u32,
    pub against: Against,
    pub alpha: f64,
    /// The worst of the candidates' verdicts.
    pub verdict: CheckVerdict,
    pub candidates: Vec<CandidateCheck>,
}

fn table(label: &str, pairs: &[(bool, bool)]) -> PairedTable {
    let t = McNemar::from_pairs(pairs.iter().copied());
    PairedTable {
        label: label.to_owned(),
        both_pass: t.both_pass,
        only_reference: t.a_only,
        only_current: t.b_only,
        both_fail: t.both_fail,
        p_value: t.p_value,
        p_holm: None,
    }
}

/// What changed between two records' identities and machines, in words.
fn changes(a: &SelectionRecord, b: &SelectionRecord) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |what: &str, x: &str, y: &str| {
        if x != y {
            out.push(format!("{what}: {x} → {y}"));
        }
    };
    let (ia, ib) = (&a.identity, &b.identity);
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".to_owned());
    field("source", &ia.source, &ib.source);
    field(
        "weights sha256",
        &opt(&ia.weights_sha256),
        &opt(&ib.weights_sha256),
    );
    field(
        "tokenizer sha256",
        &opt(&ia.tokenizer_sha256),
        &opt(&ib.tokenizer_sha256),
    );
    field(
        "chat template sha256",
        &opt(&ia.chat_template_sha256),
        &opt(&ib.chat_template_sha256),
    );
    field(
        "runtime",
        &format!("{} {}", ia.runtime, ia.runtime_version),
        &format!("{} {}", ib.runtime, ib.runtime_version),
    );
    field("code version", &a.code_version, &b.code_version);
    field("machine", &a.machine, &b.machine);
    out
}

/// The verdict of one candidate from the comparison of its reference (column 0) and current
/// (column 1) runs.
fn judge(
    cmp: &Comparison,
    alpha: f64,
) -> (CheckVerdict, Vec<String>, PairedTable, Vec<PairedTable>) {
    // Missing or unscored counts as failed, in both runs.
    let pass = |o: Option<bool>| o == Some(true);
    let pairs: Vec<(bool, bool)> = cmp
        .cases
        .iter()
        .map(|r| (pass(r.outcomes[0]), pass(r.outcomes[1])))
        .collect();
    let overall = table("overall", &pairs);
    let mut reasons = Vec::new();
    let mut verdict = CheckVerdict::Ok;
    if pairs.is_empty() {
        return (
            CheckVerdict::InsufficientData,
            vec!["no case of the eval set was run in both".to_owned()],
            overall,
            Vec::new(),
        );
    }
    let worse = overall.only_reference > overall.only_current;
    if overall.p_value < alpha {
        if worse {
            verdict = CheckVerdict::Regression;
        } else if overall.only_current > overall.only_reference {
            verdict = CheckVerdict::Improved;
        }
    }
    reasons.push(format!(
        "overall: {} passed only before, {} only now, {} both, {} neither; exact McNemar p = {:.4}{}",
        overall.only_reference,
        overall.only_current,
        overall.both_pass,
        overall.both_fail,
        overall.p_value,
        if overall.p_value < alpha { format!(" < α = {alpha}") } else { format!(" ≥ α = {alpha}: no significant change") }
    ));
    // Per category, Holm-corrected.
    let mut cats: Vec<String> = Vec::new();
    for r in &cmp.cases {
        if !cats.contains(&r.category) {
            cats.push(r.category.clone());
        }
    }
    let mut tables: Vec<PairedTable> = cats
        .iter()
        .map(|c| {
            let p: Vec<(bool, bool)> = cmp
                .cases
                .iter()
                .filter(|r| &r.category == c)
                .map(|r| (pass(r.outcomes[0]), pass(r.outcomes[1])))
                .collect();
            table(c, &p)
        })
        .collect();
    let adjusted = holm(&tables.iter().map(|t| t.p_value).collect::<Vec<_>>());
    for (t, p) in tables.iter_mut().zip(adjusted) {
        t.p_holm = Some(p);
        if p < alpha && t.only_reference > t.only_current {
            verdict = CheckVerdict::Regression;
            reasons.push(format!(
                "category {}: {} passed only before, {} only now; Holm-adjusted p = {p:.4} < α",
                t.label, t.only_reference, t.only_current
            ));
        }
    }
    // A high-value case that passed and no longer does is a regression, whatever the test says.
    let lost: Vec<&str> = cmp
        .cases
        .iter()
        .filter(|r| r.category == "high-value" && pass(r.outcomes[0]) && !pass(r.outcomes[1]))
        .map(|r| r.id.as_str())
        .collect();
    if !lost.is_empty() {
        verdict = CheckVerdict::Regression;
        reasons.push(format!(
            "high-value cases that passed and now fail: {}",
            lost.join(", ")
        ));
    }
    // So is a disqualifier that passed and now trips.
    let (before, now) = (&cmp.records[0], &cmp.records[1]);
    for rule in &now.disqualifiers {
        let was = before.disqualifiers.iter().find(|r| r.rule == rule.rule);
        if rule.outcome == Outcome::Trip && was.is_some_and(|r| r.outcome == Outcome::Pass) {
            verdict = CheckVerdict::Regression;
            reasons.push(format!(
                "disqualifier `{}` passed and now trips (observed {})",
                rule.rule,
                rule.observed.clone().unwrap_or_else(|| "–".to_owned())
            ));
        }
    }
    (verdict, reasons, overall, tables)
}

impl StudyService {
    /// Accept a generation as the baseline of its study version.
    pub async fn accept_baseline(
        &self,
        name: &str,
        version: Option<u32>,
        generation: u32,
        by: &str,
    ) -> Result<(), ServiceError> {
        let version = self.version_of(name, version).await?;
        self.store.verify_study(name, version).await?;
        let has = self
            .store
            .records_of_study(name, version)
            .await?
            .iter()
            .any(|r| r.generation == generation);
        if !has {
            return Err(ServiceError::invalid(
                format!("study `{name}` v{version} generation {generation}"),
                "has no record: only a finished run can be a baseline",
            ));
        }
        Ok(self
            .store
            .accept_baseline(name, version, generation, by)
            .await?)
    }

    /// Check each candidate's latest run against the reference run.
    pub async fn check(
        &self,
        name: &str,
        version: Option<u32>,
        against: Against,
        alpha: f64,
    ) -> Result<CheckView, ServiceError> {
        if !(alpha > 0.0 && alpha < 1.0) {
            return Err(ServiceError::invalid(
                "alpha",
                format!("{alpha}: use a level between 0 and 1"),
            ));
        }
        let version = self.version_of(name, version).await?;
        let locked = self.store.verify_study(name, version).await?;
        let records = self.store.records_of_study(name, version).await?;
        let baseline = match against {
            Against::Baseline => Some(self.store.baseline(name, version).await?.ok_or_else(|| {
                ServiceError::invalid(
                    format!("study `{name}` v{version}"),
                    "no baseline was accepted (`shortlist study accept NAME --generation G`); or check --against previous",
                )
            })?),
            Against::Previous => None,
        };
        let mut out = Vec::new();
        for c in &locked.study.file().candidates {
            let mut gens: Vec<u32> = records
                .iter()
                .filter(|r| r.candidate == c.name)
                .map(|r| r.generation)
                .collect();
            gens.sort_unstable();
            gens.dedup();
            let current = gens.last().copied();
            let reference = match &baseline {
                Some((g, _, _)) => gens.contains(g).then_some(*g),
                None => gens.iter().rev().nth(1).copied(),
            };
            let mut check = CandidateCheck {
                candidate: c.name.clone(),
                reference_generation: reference,
                current_generation: current,
                verdict: CheckVerdict::InsufficientData,
                reasons: Vec::new(),
                overall: None,
                categories: Vec::new(),
                changed: Vec::new(),
                load: "not compared: load regressions are not judged yet".to_owned(),
            };
            match (reference, current) {
                (Some(r), Some(n)) if r != n => {
                    let picks = [
                        Pick {
                            candidate: c.name.clone(),
                            version: Some(version),
                            generation: Some(r),
                        },
                        Pick {
                            candidate: c.name.clone(),
                            version: Some(version),
                            generation: Some(n),
                        },
                    ];
                    let cmp = self.compare(name, Some(version), &picks, None).await?;
                    let (verdict, reasons, overall, categories) = judge(&cmp, alpha);
                    check.changed = changes(&cmp.records[0], &cmp.records[1]);
                    check.verdict = verdict;
                    check.reasons = reasons;
                    check.overall = Some(overall);
                    check.categories = categories;
                }
                (Some(_), Some(_)) => check.reasons.push(
                    "the latest run is the reference itself: nothing newer to check".to_owned(),
                ),
                (None, Some(_)) => check.reasons.push(match against {
                    Against::Baseline => {
                        "the baseline generation has no record of this candidate".to_owned()
                    }
                    Against::Previous => "only one run has a record of this candidate".to_owned(),
                }),
                _ => check
                    .reasons
                    .push("no run has a record of this candidate".to_owned()),
            }
            out.push(check);
        }
        let verdict = out
            .iter()
            .map(|c| c.verdict)
            .max()
            .unwrap_or(CheckVerdict::InsufficientData);
        Ok(CheckView {
            study: name.to_owned(),
            version,
            against,
            alpha,
            verdict,
            candidates: out,
        })
    }
}
