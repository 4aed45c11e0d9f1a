//! Regression checks: a candidate's latest run against a reference run of the same locked study
//! version — the baseline a person accepted, or the previous run — told apart from noise by the
//! paired exact McNemar test on the same cases (overall, and per category with Holm's
//! correction), with the changes that are regressions whatever the test says: a high-value case
//! that passed and now fails, a disqualifier that passed and now trips. A missing or unscored
//! case counts as a failure, never a pass. Load figures (attainment, TTFT p99, goodput) are
//! compared by their intervals and the spread of the earlier nights (`drift.rs`); what changed
//! between the two runs' fingerprints is named, and a night where only the machine changed is
//! said to be one. A reference from another study version judged by other criteria is *not
//! comparable*, naming what differs.

use serde::Serialize;
use shortlist_evals::stats::{McNemar, holm};
use shortlist_store::generations::GenerationSpan;
use shortlist_study::drift::{FigureCheck, FigureVerdict};
use shortlist_study::record::SelectionRecord;
use shortlist_study::rule::Outcome;

use super::StudyService;
use super::compare::Pick;
use super::drift::{WhatChanged, load_checks, measured_load, what_changed};
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

/// A check's verdict, mildest first (a study's verdict is its candidates' worst).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckVerdict {
    Improved,
    Ok,
    InsufficientData,
    /// A load figure's interval straddles the line: more requests would tell.
    Indeterminate,
    /// The reference was judged by other criteria (eval set, workload or SLO).
    NotComparable,
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
    /// The reference's study version (another version when the current run is the first of
    /// its own).
    pub reference_version: Option<u32>,
    pub reference_generation: Option<u32>,
    pub current_generation: Option<u32>,
    pub verdict: CheckVerdict,
    /// Why, one line each (the evidence: counts, p, case ids, rules).
    pub reasons: Vec<String>,
    pub overall: Option<PairedTable>,
    pub categories: Vec<PairedTable>,
    /// What changed between the two runs' identities and machines.
    pub changed: Vec<String>,
    /// The most significant change: `nothing`, `machine` (only), `runtime` or `model`.
    pub what_changed: WhatChanged,
    /// The load figures compared (empty when neither run measured load).
    pub load: Vec<FigureCheck>,
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
        let has = !self
            .store
            .records_of_study_in(name, version, GenerationSpan::only(generation))
            .await?
            .is_empty();
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
        self.check_at(name, version, against, alpha, None).await
    }

    /// Check each candidate's run of generation `at` (default: its latest) against the
    /// reference: the accepted baseline (of this version, or else of the latest earlier version
    /// that has one), or the run before it (in this version, or else the latest of an earlier
    /// version).
    pub async fn check_at(
        &self,
        name: &str,
        version: Option<u32>,
        against: Against,
        alpha: f64,
        at: Option<u32>,
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
            Against::Baseline => Some(self.baseline_of(name, version).await?.ok_or_else(|| {
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
                .filter(|r| r.candidate == c.name && at.is_none_or(|g| r.generation <= g))
                .map(|r| r.generation)
                .collect();
            gens.sort_unstable();
            gens.dedup();
            let current = gens.last().copied();
            let reference = match (baseline, current) {
                (Some(b), _) => Some(b),
                (None, Some(n)) => match gens.iter().rev().nth(1) {
                    Some(&g) => Some((version, g)),
                    None => self.previous_version_run(name, version, &c.name).await?,
                }
                .filter(|&r| r != (version, n)),
                (None, None) => None,
            };
            let mut check = CandidateCheck {
                candidate: c.name.clone(),
                reference_version: reference.map(|(v, _)| v),
                reference_generation: reference.map(|(_, g)| g),
                current_generation: current,
                verdict: CheckVerdict::InsufficientData,
                reasons: Vec::new(),
                overall: None,
                categories: Vec::new(),
                changed: Vec::new(),
                what_changed: WhatChanged::Nothing,
                load: Vec::new(),
            };
            match (reference, current) {
                (Some((rv, r)), Some(n)) if (rv, r) != (version, n) => {
                    let picks = [
                        Pick {
                            candidate: c.name.clone(),
                            version: Some(rv),
                            generation: Some(r),
                        },
                        Pick {
                            candidate: c.name.clone(),
                            version: Some(version),
                            generation: Some(n),
                        },
                    ];
                    match self.compare(name, Some(version), &picks, None).await {
                        Ok(cmp) => {
                            let earlier = nights_before(&records, &c.name, n);
                            judge_candidate(&mut check, &cmp, alpha, &earlier);
                        }
                        Err(ServiceError::Incomparable { differs, .. }) => {
                            check.verdict = CheckVerdict::NotComparable;
                            check.reasons.push(format!(
                                "the reference (v{rv} generation {r}) was judged by other criteria: {}",
                                differs.join("; ")
                            ));
                        }
                        Err(e) => return Err(e),
                    }
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

    /// The latest accepted baseline of this version, or else of the latest earlier version
    /// that has one: `(version, generation)`.
    async fn baseline_of(
        &self,
        name: &str,
        version: u32,
    ) -> Result<Option<(u32, u32)>, ServiceError> {
        for v in (1..=version).rev() {
            if let Some((g, _, _)) = self.store.baseline(name, v).await? {
                return Ok(Some((v, g)));
            }
        }
        Ok(None)
    }

    /// A candidate's latest run in an earlier version of the study: `(version, generation)`.
    async fn previous_version_run(
        &self,
        name: &str,
        version: u32,
        candidate: &str,
    ) -> Result<Option<(u32, u32)>, ServiceError> {
        for v in (1..version).rev() {
            let g = self
                .store
                .records_of_study(name, v)
                .await?
                .iter()
                .filter(|r| r.candidate == candidate)
                .map(|r| r.generation)
                .max();
            if let Some(g) = g {
                return Ok(Some((v, g)));
            }
        }
        Ok(None)
    }
}

/// A candidate's records of the generations before `current`, oldest first (the latest
/// record of each generation).
fn nights_before<'a>(
    records: &'a [shortlist_store::records::StoredRecord],
    candidate: &str,
    current: u32,
) -> Vec<&'a SelectionRecord> {
    let mut by_gen = std::collections::BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.candidate == candidate && r.generation < current)
    {
        let slot = by_gen.entry(r.generation).or_insert(r);
        if r.id > slot.id {
            *slot = r;
        }
    }
    by_gen.into_values().map(|r| &r.record).collect()
}

/// Fill a candidate's check from the comparison of its reference (column 0) and current
/// (column 1) runs: quality by the paired test, load by the figures' intervals, and what
/// changed.
fn judge_candidate(
    check: &mut CandidateCheck,
    cmp: &Comparison,
    alpha: f64,
    earlier: &[&SelectionRecord],
) {
    let (verdict, mut reasons, overall, categories) = judge(cmp, alpha);
    let (before, now) = (&cmp.records[0], &cmp.records[1]);
    let (kind, changed) = what_changed(before, now);
    let mut verdict = verdict;
    if measured_load(before) || measured_load(now) {
        check.load = load_checks(before, now, earlier);
        for f in &check.load {
            if f.verdict != FigureVerdict::Ok {
                reasons.push(f.why.clone());
            }
            verdict = match f.verdict {
                FigureVerdict::Regression => CheckVerdict::Regression,
                FigureVerdict::Indeterminate => verdict.max(CheckVerdict::Indeterminate),
                FigureVerdict::Improved if verdict == CheckVerdict::Ok => CheckVerdict::Improved,
                _ => verdict,
            };
        }
    }
    match kind {
        WhatChanged::Nothing => {}
        WhatChanged::Machine => reasons.push(format!(
            "only the machine changed ({}): differences are the machine's, not the model's",
            changed.join("; ")
        )),
        WhatChanged::Runtime => {
            reasons.push(format!("the runtime changed: {}", changed.join("; ")))
        }
        WhatChanged::Model => reasons.push(format!("the model changed: {}", changed.join("; "))),
    }
    check.verdict = verdict;
    check.reasons = reasons;
    check.overall = Some(overall);
    check.categories = categories;
    check.changed = changed;
    check.what_changed = kind;
}
