//! The quality job: the candidate answers every eval case not yet stored for this generation,
//! each scored and stored before the next starts (the unit of resumption is a case).
//!
//! Every attempt has one of three fates, kept apart: the model answered (scored and stored), the
//! request failed outside the model (retried per [`AskPolicy`], then recorded as a case error —
//! never scored, never stored as done, asked again when the job is retried), or the job was
//! stopped. A job that ends with case errors fails as transient, so the worker retries it with
//! backoff; three failures in a row that never reached the server end it at once (the endpoint
//! is down).
//!
//! A sharded run splits the cases among several such jobs (case `i` to shard `i % of`), which
//! idle workers claim side by side; they share one run row, each case is stored once, and the
//! run is finished by the shard that stores its last case.

use serde_json::Value as Json;
use shortlist_evals::results::CaseOutcome;
use shortlist_evals::{FinishReason, Response};
use shortlist_store::runs::{CaseResult as StoredCase, RunKind};

use super::{Finished, JobContext, stored_set};
use crate::candidate::{AskPolicy, Asked, CandidateSpec, Decoding, ask, open};
use crate::error::ServiceError;
use crate::judge::{Judges, score_with_judges};
use crate::progress::{CaseCounts, Phase};
use crate::prompt::ChatRequest;

/// Consecutive transport failures (no HTTP answer) that mean the endpoint is down.
const UNREACHABLE_AFTER: u32 = 3;

pub(crate) fn run(ctx: &JobContext) -> Result<Finished, ServiceError> {
    let locked = ctx.locked()?;
    let c = ctx.candidate(&locked)?;
    let set = ctx.block(stored_set(&ctx.store, &locked))?;
    let run = ctx.start_run(RunKind::Quality, "quality")?;
    let shard = ctx.payload.shard;
    let mine: std::collections::BTreeSet<&str> = set
        .cases()
        .iter()
        .enumerate()
        .filter(|(i, _)| shard.is_none_or(|s| s.has(*i)))
        .map(|(_, case)| case.id())
        .collect();
    let stored: Vec<_> = ctx
        .block(ctx.store.case_results(run.id))?
        .into_iter()
        .filter(|c| mine.contains(c.case_id.as_str()))
        .collect();
    let mut counts = CaseCounts {
        total: mine.len() as u64,
        ..CaseCounts::default()
    };
    let part = shard.map_or_else(String::new, |s| {
        format!(" (shard {} of {})", s.index + 1, s.of)
    });
    for case in &stored {
        counts.done += 1;
        match outcome_of(&case.scores) {
            Some(true) => counts.passed += 1,
            Some(false) => counts.failed += 1,
            None => {}
        }
    }
    let done: std::collections::BTreeSet<String> = stored.into_iter().map(|c| c.case_id).collect();
    let report = |counts: CaseCounts, message: Option<String>| {
        let mut event = ctx.progress.event(Phase::Running);
        event.cases = Some(counts);
        event.message = message;
        ctx.progress.emit(event);
    };
    // The starting counts are always stored: a resumed attempt says what it found.
    report(
        counts,
        Some(if counts.done > 0 {
            format!(
                "{}{part}: resuming, {} of {} cases already stored",
                c.name, counts.done, counts.total
            )
        } else {
            format!("{}{part}: quality run of {} cases", c.name, counts.total)
        }),
    );

    let pending: Vec<_> = set
        .cases()
        .iter()
        .filter(|case| mine.contains(case.id()) && !done.contains(case.id()))
        .collect();
    let mut errors = Vec::new();
    if !pending.is_empty() {
        let spec = CandidateSpec::parse(&ctx.config.expand_source(&c.source))?;
        let mut generator = open(&spec)?;
        let decoding = Decoding {
            max_tokens: ctx.payload.max_tokens,
            sampling: None,
        };
        let mut judges = Judges::default();
        let mut transport_in_a_row = 0;
        for case in pending {
            if ctx.stopping() {
                return Ok(Finished::Released);
            }
            let request = ChatRequest::from_case(case);
            match ask(
                generator.as_mut(),
                &request,
                &decoding,
                AskPolicy::default(),
            )? {
                Asked::Answered(generated) => {
                    transport_in_a_row = 0;
                    let finish = generated.finish_reason.as_deref().map(FinishReason::parse);
                    let response =
                        Response::new(generated.text.clone(), generated.tool_calls.clone(), finish);
                    // Judge checks: a study names no judge models, so they stay unscored with
                    // that reason (never passed); `eval run --judge` runs them.
                    let mut result = score_with_judges(case, &response, &mut judges)?;
                    result.finish_reason = generated.finish_reason.clone();
                    result.tokens = generated.output_tokens;
                    result.latency_s = Some(generated.latency_s);
                    result.min_top2_gap = generated.min_top2_gap.map(f64::from);
                    let stored = StoredCase {
                        case_id: case.id().to_owned(),
                        passed: result.outcome == CaseOutcome::Pass,
                        output: generated.text,
                        scores: serde_json::to_value(&result).unwrap_or(Json::Null),
                        input_tokens: generated.prompt_tokens.unwrap_or(0),
                        output_tokens: generated.output_tokens.unwrap_or(0),
                        latency_s: generated.latency_s,
                    };
                    ctx.block(ctx.store.put_case_result(run.id, &stored))?;
                    ctx.block(ctx.store.clear_case_error(run.id, case.id()))?;
                    counts.done += 1;
                    match result.outcome.decided() {
                        Some(true) => counts.passed += 1,
                        Some(false) => counts.failed += 1,
                        None => {}
                    }
                    report(counts, None);
                }
                Asked::Failed {
                    error,
                    attempts,
                    transport,
                } => {
                    ctx.block(
                        ctx.store
                            .put_case_error(run.id, case.id(), attempts, &error),
                    )?;
                    counts.errors += 1;
                    report(
                        counts,
                        Some(format!(
                            "case {} failed outside the model after {attempts} attempts: {error}",
                            case.id()
                        )),
                    );
                    transport_in_a_row = if transport { transport_in_a_row + 1 } else { 0 };
                    errors.push(error);
                    if transport_in_a_row >= UNREACHABLE_AFTER {
                        let why = format!(
                            "{UNREACHABLE_AFTER} cases in a row could not reach it; the last: {}",
                            errors.last().cloned().unwrap_or_default()
                        );
                        ctx.block(ctx.store.finish_run(run.id, Err(&why)))?;
                        return Err(ServiceError::Unreachable {
                            what: format!("candidate `{}`", c.name),
                            why,
                        });
                    }
                }
            }
        }
    }
    if let Some(first) = errors.first() {
        let why = format!(
            "{} cases failed outside the model; the first: {first}",
            errors.len()
        );
        ctx.block(ctx.store.finish_run(run.id, Err(&why)))?;
        return Err(ServiceError::CaseErrors {
            what: ctx.what(),
            count: errors.len(),
            first: first.clone(),
        });
    }
    // The run is finished when every case of the set is stored: by this job, or by the shard
    // that stores the last case.
    let all = ctx.block(ctx.store.case_results(run.id))?.len();
    if shard.is_none() || all >= set.cases().len() {
        ctx.block(ctx.store.finish_run(run.id, Ok(())))?;
    }
    Ok(Finished::Done(format!(
        "{}{part}: {} of {} cases passed",
        c.name, counts.passed, counts.total
    )))
}

/// Whether a stored case passed (`None` when undecided), from its stored scores.
pub(crate) fn outcome_of(scores: &Json) -> Option<bool> {
    serde_json::from_value::<shortlist_evals::results::CaseResult>(scores.clone())
        .ok()
        .and_then(|r| r.outcome.decided())
}
