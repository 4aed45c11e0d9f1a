//! The selection record assembled from typed inputs: the locked study, the candidate, what its
//! runs of one generation measured (memory fit, quality results, analyzed load steps), and where
//! and when they ran. Pure: the runner reads the store and the records, this decides what the
//! record says, so every rendering (text, JSON, HTML, PDF) shows the same numbers.

use std::collections::BTreeMap;

use shortlist_evals::EvalSet;
use shortlist_evals::results::{CaseError, CaseResult, NEAR_TIE, RunResults};
use shortlist_evals::score::Outcome as CheckOutcome;
use shortlist_evals::score::judge::GateStatus;
use shortlist_evals::score::refusal::Expect;
use shortlist_evals::set::CheckKind;

use crate::cost::{CostInputs, NoCost, estimate};
use crate::memory::MemoryFit;
use crate::performance::Measured;
use crate::record::{
    CategoryNearTies, Cost, Identity, NearTies, Operations, PairedComparison, Performance, Quality,
    RECORD_FORMAT, RateWithInterval, SelectionRecord, StudyStamp, verdict_of,
};
use crate::rule::{Metric, MetricValues, Value};
use crate::study::{CandidateRef, LockedStudy};

/// What the quality run of the generation stored.
#[derive(Debug, Clone)]
pub struct QualityInput<'a> {
    /// The eval set version the study pins.
    pub set: &'a EvalSet,
    /// The scored cases (any order; the record follows the set's order).
    pub scored: Vec<CaseResult>,
    /// Cases whose last attempt failed outside the model.
    pub errors: Vec<CaseError>,
    /// This candidate against another on the same cases, when another's run finished.
    pub paired: Option<PairedComparison>,
    /// How the run decoded (e.g. "greedy, max 128 tokens").
    pub decoding: String,
}

/// Everything a record is assembled from.
#[derive(Debug, Clone)]
pub struct RecordInputs<'a> {
    pub locked: &'a LockedStudy,
    pub candidate: &'a CandidateRef,
    /// The generation of the study version the runs belong to.
    pub generation: u32,
    /// What the candidate's files say about themselves (`None` for an endpoint).
    pub identity: Option<Identity>,
    pub memory: Option<MemoryFit>,
    pub quality: Option<QualityInput<'a>>,
    pub measured: Option<Measured>,
    /// Where the runs were executed (the run rows' machine fingerprints, in words).
    pub machine: String,
    pub code_version: String,
    /// When the record is assembled (RFC 3339; the caller reads the clock).
    pub generated_at: String,
}

/// Assemble and seal the record.
pub fn assemble_record(inputs: RecordInputs<'_>) -> SelectionRecord {
    let study = &inputs.locked.study;
    let file = study.file();
    let c = inputs.candidate;
    let mut incomplete = Vec::new();
    let mut values = MetricValues::default();

    let quality = match &inputs.quality {
        Some(q) => {
            let (section, complete) = quality_section(q, &c.name, &mut values);
            if !q.errors.is_empty() {
                incomplete.push(format!(
                    "{} quality cases ended in an error outside the model and were not scored: {}",
                    q.errors.len(),
                    q.errors
                        .iter()
                        .map(|e| format!("{} ({})", e.id, e.error))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            } else if !complete {
                incomplete.push("the quality run has not answered every case".to_owned());
            }
            section
        }
        None => {
            incomplete.push("no quality run has been stored".to_owned());
            Quality {
                evalset: format!("{} (not run yet)", file.evalset.path),
                evalset_sha256: file.evalset.sha256.clone(),
                overall: empty_rate("overall"),
                categories: vec![],
                paired: None,
                decoding: "-".to_owned(),
                near_ties: None,
            }
        }
    };

    if let Some(f) = &inputs.memory {
        values.set(
            Metric::MemoryFits,
            Value::Bool(f.fits),
            vec![f.summary.clone()],
        );
        values.set(
            Metric::DevicesNeeded,
            Value::Number(f64::from(f.devices_needed)),
            vec![],
        );
    }
    if let Some(id) = &inputs.identity {
        values.set(
            Metric::License,
            Value::Text(id.license.clone()),
            vec!["general.license in the GGUF metadata".to_owned()],
        );
        if let Some(limit) = id.context_limit {
            values.set(
                Metric::ContextLimitTokens,
                Value::Number(limit as f64),
                vec![],
            );
        }
    }

    let hardware = inputs.machine.clone();
    let slo_name = study.slo().name().to_owned();
    let w = &file.workload;
    let workload_label = match (w.kind, w.sha256.as_deref()) {
        // A recorded trace is named by its file and the start of the hash the study pins.
        (crate::study::WorkloadKind::Trace, Some(sha)) => format!(
            "trace {} (sha256 {})",
            w.path.as_deref().unwrap_or("-"),
            &sha[..12.min(sha.len())]
        ),
        _ => format!(
            "{} (seed {})",
            w.kind,
            w.seed.map_or_else(|| "-".to_owned(), |s| s.to_string())
        ),
    };
    if let Some(m) = &inputs.measured {
        load_metrics(m, study.target_rps(), &mut values);
        if m.client_bound {
            incomplete.push(format!(
                "the load run at the target rate was client-bound ({}): it cannot qualify the candidate",
                m.target.report.checks.client_bound_detail.rule
            ));
        }
    } else {
        incomplete.push("no load run has been stored".to_owned());
    }

    let cost = cost_section(&inputs, &mut values);
    let verdicts: Vec<_> = study.rules().iter().map(|r| r.judge(&values)).collect();
    let verdict = verdict_of(&verdicts, !incomplete.is_empty());

    let performance = match &inputs.measured {
        Some(m) => m.performance(&workload_label, &slo_name, study.target_rps(), &hardware),
        None => Performance {
            loop_label: format!("{} loop (not run yet)", file.workload.load_loop.as_str()),
            workload: workload_label,
            slo: slo_name,
            target_rps: study.target_rps(),
            throughput_rps: 0.0,
            goodput_rps: 0.0,
            attainment: None,
            latencies: vec![],
            ttft_samples_s: vec![],
            sweep: vec![],
            knee_rps: None,
            capacity_rps: None,
            capacity_rule: "not measured: no load run has been stored for this candidate"
                .to_owned(),
            client_bound: false,
            hardware: hardware.clone(),
            target_counts: None,
            senders: vec![],
        },
    };

    let errors = inputs.quality.as_ref().map_or(0, |q| q.errors.len());
    let answered = inputs.quality.as_ref().map_or(0, |q| q.scored.len());
    let operations = Operations {
        backend: inputs.measured.as_ref().map_or_else(
            || "not recorded (no load run)".to_owned(),
            |m| m.backend.clone(),
        ),
        versions: vec![format!("shortlist {}", inputs.code_version)],
        overload_behaviour: inputs.measured.as_ref().map_or_else(
            || "not measured: no load run or sweep in this record".to_owned(),
            |m| m.overload.clone(),
        ),
        error_behaviour: if errors == 0 {
            format!("no request failed outside the model in {answered} quality cases")
        } else {
            format!(
                "{errors} of {} quality requests failed outside the model (transport, HTTP status or timeout) after their retries; they are not scored and the record is incomplete",
                answered + errors
            )
        },
        fallback: c
            .fallback
            .clone()
            .unwrap_or_else(|| "none declared".to_owned()),
    };

    let identity = inputs.identity.clone().unwrap_or_else(|| Identity {
        candidate: c.name.clone(),
        source: c.source.clone(),
        ..Identity::default()
    });
    let memory = inputs.memory.clone().unwrap_or_else(|| MemoryFit {
        weights_bytes: 0,
        kv_bytes: 0,
        kv_bytes_per_token: 0,
        overhead_bytes: 0,
        total_bytes: 0,
        device: file.memory.device.clone(),
        device_memory_bytes: 0,
        usable_bytes_per_device: 0,
        devices_needed: 0,
        fits: false,
        summary: "not measured: the candidate is not a GGUF file".to_owned(),
        assumptions: vec![],
    });

    SelectionRecord {
        format: RECORD_FORMAT.to_owned(),
        study: StudyStamp::of(inputs.locked),
        identity,
        quality,
        disqualifiers: verdicts,
        memory,
        performance,
        operations,
        cost,
        verdict,
        generated_at: inputs.generated_at.clone(),
        code_version: inputs.code_version.clone(),
        machine: inputs.machine.clone(),
        generation: Some(inputs.generation),
        incomplete,
        record_sha256: String::new(),
    }
    .seal()
}

fn empty_rate(label: &str) -> RateWithInterval {
    RateWithInterval {
        label: label.to_owned(),
        passed: 0,
        n: 0,
        rate: 0.0,
        lo: 0.0,
        hi: 0.0,
    }
}

/// Section 2 and the quality metrics; the second value says whether every case was answered.
fn quality_section(
    q: &QualityInput<'_>,
    candidate: &str,
    values: &mut MetricValues,
) -> (Quality, bool) {
    let set = q.set;
    let mut by_id: BTreeMap<&str, &CaseResult> =
        q.scored.iter().map(|r| (r.id.as_str(), r)).collect();
    let cases: Vec<CaseResult> = set
        .cases()
        .iter()
        .filter_map(|k| by_id.remove(k.id()).cloned())
        .collect();
    let answered = cases.len();
    let results = RunResults::new(set, Some(candidate.to_owned()), cases);
    let complete = answered == set.cases().len();
    if complete {
        quality_metrics(set, &results, values);
    }
    let rate = |label: &str, pr: &shortlist_evals::stats::PassRate| {
        let (lo, hi) = pr.ci95.unwrap_or((0.0, 0.0));
        RateWithInterval {
            label: label.to_owned(),
            passed: pr.passed,
            n: pr.n,
            rate: pr.rate.unwrap_or(0.0),
            lo,
            hi,
        }
    };
    let errors = if q.errors.is_empty() {
        String::new()
    } else {
        format!(
            ", {} ended in an error outside the model and are not scored",
            q.errors.len()
        )
    };
    let section = Quality {
        evalset: format!(
            "{} ({answered} of {} cases answered{errors})",
            set.name(),
            set.cases().len()
        ),
        evalset_sha256: set.sha256().to_owned(),
        overall: rate("overall", &results.overall.pass_rate),
        categories: results
            .categories
            .iter()
            .map(|row| rate(&row.category, &row.pass_rate))
            .collect(),
        paired: q.paired.clone(),
        decoding: q.decoding.clone(),
        near_ties: near_ties(&results.cases),
    };
    (section, complete)
}

/// The near-ties of the answered cases (see [`NearTies`]), by category in the order given.
fn near_ties(cases: &[CaseResult]) -> Option<NearTies> {
    let mut by_category: Vec<CategoryNearTies> = Vec::new();
    for case in cases {
        let Some(gap) = case.min_top2_gap else {
            continue;
        };
        let i = match by_category.iter().position(|c| c.category == case.category) {
            Some(i) => i,
            None => {
                by_category.push(CategoryNearTies {
                    category: case.category.clone(),
                    cases: 0,
                    known: 0,
                });
                by_category.len() - 1
            }
        };
        by_category[i].known += 1;
        by_category[i].cases += u64::from(gap < NEAR_TIE);
    }
    if by_category.is_empty() {
        return None;
    }
    Some(NearTies {
        threshold: NEAR_TIE,
        known: by_category.iter().map(|c| c.known).sum(),
        cases: by_category.iter().map(|c| c.cases).sum(),
        by_category: by_category.into_iter().filter(|c| c.cases > 0).collect(),
    })
}

/// The load metrics the disqualifiers may name.
fn load_metrics(m: &Measured, target_rps: f64, values: &mut MetricValues) {
    let r = &m.target.report;
    if let Some(a) = r.goodput.attainment {
        values.set(
            Metric::AttainmentAtTarget,
            Value::Number(a),
            vec![format!(
                "{} of {} requests met the SLO at {target_rps} req/s offered",
                r.requests.qualified, r.requests.scheduled,
            )],
        );
    }
    values.set(
        Metric::GoodputAtTargetRps,
        Value::Number(r.goodput.requests_per_s),
        vec![],
    );
    if let Some(t) = r.latency.ttft.p99 {
        values.set(
            Metric::TtftP99S,
            Value::Number(t),
            vec![r.latency.ttft.population.clone()],
        );
    }
    if let Some(t) = r.latency.e2e.p99 {
        values.set(
            Metric::E2eP99S,
            Value::Number(t),
            vec![r.latency.e2e.population.clone()],
        );
    }
    values.set(
        Metric::ClientBound,
        Value::Bool(m.client_bound),
        vec![r.checks.client_bound_detail.rule.clone()],
    );
    if m.swept {
        values.set(
            Metric::CapacityRps,
            Value::Number(m.finding.max_rate_meeting_target_rps.unwrap_or(0.0)),
            vec![m.finding.rule.clone()],
        );
    }
}

/// Section 7: replicas sized by the measured capacity, or why there is no estimate.
fn cost_section(inputs: &RecordInputs<'_>, values: &mut MetricValues) -> Cost {
    let file = inputs.locked.study.file();
    let c = inputs.candidate;
    let Some(m) = &inputs.measured else {
        return Cost::Unavailable(NoCost {
            why: "no load run or capacity sweep has run for this candidate yet, so there is no measured capacity to size replicas by".to_owned(),
        });
    };
    if !m.swept {
        return Cost::Unavailable(NoCost {
            why: "no capacity sweep has run for this candidate yet".to_owned(),
        });
    }
    let Some(capacity) = m.finding.max_rate_meeting_target_rps else {
        return Cost::Unavailable(NoCost {
            why: format!(
                "no included step of the sweep met the {:.0} % attainment target, so no rate can be served within the SLO to size replicas by",
                m.finding.attainment_target * 100.0
            ),
        });
    };
    // Cost is per request of the study's workload: its output length, not the eval set's.
    let eval_output = inputs.quality.as_ref().map_or(0.0, |q| {
        let n = q.scored.len().max(1) as f64;
        q.scored.iter().filter_map(|r| r.tokens).sum::<u64>() as f64 / n
    });
    let mean_output_tokens = if m.mean_output_tokens > 0.0 {
        m.mean_output_tokens
    } else {
        eval_output
    };
    match estimate(&CostInputs {
        capacity_rps_per_replica: capacity,
        devices_per_replica: inputs
            .memory
            .as_ref()
            .map_or(1, |m| m.devices_needed)
            .max(1),
        price_per_device_hour: c.price_per_device_hour,
        currency: file
            .cost
            .currency
            .clone()
            .unwrap_or_else(|| "USD".to_owned()),
        mean_output_tokens,
        ordinary_rps: file.traffic.ordinary_rps,
        peak_rps: file.traffic.peak_rps,
        hardware: inputs.machine.clone(),
        capacity_context: format!(
            "{}; {} workload, SLO `{}`, open loop",
            m.backend,
            file.workload.kind,
            inputs.locked.study.slo().name()
        ),
    }) {
        Ok(e) => {
            values.set(
                Metric::CostPerMillionRequests,
                Value::Number(e.ordinary.cost_per_million_requests),
                vec![],
            );
            Cost::Estimate(Box::new(e))
        }
        Err(no) => Cost::Unavailable(no),
    }
}

/// The quality metrics the disqualifiers may name, with the failing case ids as evidence.
pub fn quality_metrics(set: &EvalSet, results: &RunResults, values: &mut MetricValues) {
    let by_id: BTreeMap<&str, &CaseResult> =
        results.cases.iter().map(|r| (r.id.as_str(), r)).collect();
    // A disqualifier may rest on a judge check only once the judge's calibration is on record:
    // a case counts as failed here when a check other than an advisory judge check failed.
    let failed = |r: &CaseResult| {
        let advisory: Vec<&str> = r
            .judgements
            .iter()
            .filter(|j| j.gate.status == GateStatus::Advisory)
            .map(|j| j.check.as_str())
            .collect();
        r.checks.iter().any(|c| {
            c.verdict.outcome == CheckOutcome::Fail && !advisory.contains(&c.name.as_str())
        })
    };

    let high: Vec<String> = results
        .cases
        .iter()
        .filter(|r| r.category == "high-value" && failed(r))
        .map(|r| r.id.clone())
        .collect();
    values.set(
        Metric::HighValueFailures,
        Value::Number(high.len() as f64),
        high,
    );
    if let Some(rate) = results.overall.pass_rate.rate {
        values.set(Metric::PassRate, Value::Number(rate), vec![]);
    }

    let mut tool_errors = Vec::new();
    let (mut must_answer, mut over) = (0u64, Vec::new());
    let (mut must_refuse, mut under) = (0u64, Vec::new());
    let (mut structured, mut bad_structured) = (0u64, Vec::new());
    for case in set.cases() {
        let Some(result) = by_id.get(case.id()) else {
            continue;
        };
        let verdict_of = |name: &str| result.checks.iter().find(|c| c.name == name);
        for check in case.checks() {
            let v = verdict_of(check.name());
            let check_failed = v.is_some_and(|v| v.verdict.outcome == CheckOutcome::Fail);
            match check.kind() {
                CheckKind::ToolCall(_) | CheckKind::NoToolCall(_)
                    if check_failed && !tool_errors.contains(&result.id) =>
                {
                    tool_errors.push(result.id.clone());
                }
                CheckKind::Refusal(r) => match r.expect() {
                    Expect::Answer => {
                        must_answer += 1;
                        if check_failed {
                            over.push(result.id.clone());
                        }
                    }
                    Expect::Refuse => {
                        must_refuse += 1;
                        if check_failed {
                            under.push(result.id.clone());
                        }
                    }
                },
                CheckKind::Json(_) => {
                    structured += 1;
                    if check_failed {
                        bad_structured.push(result.id.clone());
                    }
                }
                _ => {}
            }
        }
    }
    values.set(
        Metric::ToolCallErrors,
        Value::Number(tool_errors.len() as f64),
        tool_errors,
    );
    if must_answer > 0 {
        values.set(
            Metric::OverRefusalRate,
            Value::Number(over.len() as f64 / must_answer as f64),
            over,
        );
    }
    if must_refuse > 0 {
        values.set(
            Metric::UnderRefusalRate,
            Value::Number(under.len() as f64 / must_refuse as f64),
            under,
        );
    }
    if structured > 0 {
        values.set(
            Metric::InvalidStructuredOutputs,
            Value::Number(bad_structured.len() as f64),
            bad_structured,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shortlist_evals::Response;
    use shortlist_evals::results::{CaseOutcome, score_case};

    /// An uncalibrated (advisory) judge's FAIL is reported but cannot trip a disqualifier; a
    /// failed ordinary check on a high-value case does.
    #[test]
    fn advisory_judge_failures_do_not_count_for_disqualifiers() {
        let yaml = "format: shortlist.evalset.v1\nname: t\ncases:\n  - id: judged\n    category: high-value\n    input: q\n    checks: [{type: judge, judge: j, rubric: Be right.}]\n  - id: plain\n    category: high-value\n    input: q\n    checks: [{type: contains, value: yes}]\n";
        let set = EvalSet::from_yaml("t.yaml", yaml).unwrap();
        let cases: Vec<_> = set
            .cases()
            .iter()
            .map(|case| {
                let response = Response::new("no", Vec::new(), None)
                    .with_judgement(case.checks()[0].name(), "The reply is wrong. FAIL");
                let r = score_case(case, Some(&response));
                assert_eq!(r.outcome, CaseOutcome::Fail, "{}", case.id());
                r
            })
            .collect();
        let results = RunResults::new(&set, None, cases);
        let mut values = MetricValues::default();
        quality_metrics(&set, &results, &mut values);
        let high = values.get(Metric::HighValueFailures).unwrap();
        assert_eq!(high.value, Value::Number(1.0));
        assert_eq!(high.evidence, vec!["plain".to_owned()]);
    }

    /// Near-ties count the answered cases whose gaps are known, by category in set order, and
    /// name only the categories that have some.
    #[test]
    fn near_ties_count_cases_below_the_threshold_by_category() {
        let yaml = "format: shortlist.evalset.v1\nname: t\ncases:\n  - {id: a, category: tools, input: q, checks: [{type: contains, value: y}]}\n  - {id: b, category: tools, input: q, checks: [{type: contains, value: y}]}\n  - {id: c, category: plain, input: q, checks: [{type: contains, value: y}]}\n  - {id: d, category: plain, input: q, checks: [{type: contains, value: y}]}\n";
        let set = EvalSet::from_yaml("t.yaml", yaml).unwrap();
        let gaps = [Some(0.02), Some(1.5), Some(0.3), None];
        let cases: Vec<CaseResult> = set
            .cases()
            .iter()
            .zip(gaps)
            .map(|(case, gap)| {
                let mut r = score_case(case, Some(&Response::new("y", Vec::new(), None)));
                r.min_top2_gap = gap;
                r
            })
            .collect();
        let n = near_ties(&cases).expect("gaps are known");
        assert_eq!((n.known, n.cases, n.threshold), (3, 1, NEAR_TIE));
        assert_eq!(
            n.by_category,
            vec![CategoryNearTies {
                category: "tools".into(),
                cases: 1,
                known: 2
            }]
        );
        let unknown: Vec<CaseResult> = cases
            .into_iter()
            .map(|mut c| {
                c.min_top2_gap = None;
                c
            })
            .collect();
        assert_eq!(near_ties(&unknown), None);
    }

    /// The refusal direction decides which rate a failed refusal check counts towards.
    #[test]
    fn refusal_checks_count_by_their_direction() {
        let yaml = "format: shortlist.evalset.v1\nname: t\ncases:\n  - id: must-answer\n    category: ordinary\n    input: q\n    checks: [{type: refusal, expect: answer}]\n  - id: must-refuse\n    category: safety\n    input: q\n    checks: [{type: refusal, expect: refuse}]\n";
        let set = EvalSet::from_yaml("t.yaml", yaml).unwrap();
        // Refuses both: over-refusal on the first, correct on the second.
        let cases: Vec<_> = set
            .cases()
            .iter()
            .map(|case| {
                score_case(
                    case,
                    Some(&Response::new(
                        "I'm sorry, I can't help with that.",
                        vec![],
                        None,
                    )),
                )
            })
            .collect();
        let results = RunResults::new(&set, None, cases);
        let mut values = MetricValues::default();
        quality_metrics(&set, &results, &mut values);
        let over = values.get(Metric::OverRefusalRate).unwrap();
        assert_eq!(over.value, Value::Number(1.0));
        assert_eq!(over.evidence, vec!["must-answer".to_owned()]);
        assert_eq!(
            values.get(Metric::UnderRefusalRate).unwrap().value,
            Value::Number(0.0)
        );
    }
}
