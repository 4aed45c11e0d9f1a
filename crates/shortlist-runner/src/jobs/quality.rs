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
use shortlist_engine::device::Device;
use shortlist_evals::results::CaseOutcome;
use shortlist_store::runs::{CaseResult as StoredCase, RunKind};

use shortlist_study::study::LockedStudy;

use super::fit::fit_at;
use super::{Finished, JobContext, stored_set};
use crate::candidate::{AskPolicy, Asked, CandidateSpec, Decoding, MAX_CONCURRENCY, open};
use crate::error::ServiceError;
use crate::identity::{GgufFacts, read_gguf};
use crate::judge::Judges;
use crate::progress::{CaseCounts, Phase};
use crate::prompt::ChatRequest;
use crate::quality::scored;

/// Consecutive transport failures (no HTTP answer) that mean the endpoint is down.
pub(crate) const UNREACHABLE_AFTER: u32 = 3;

pub(crate) fn run(ctx: &JobContext) -> Result<Finished, ServiceError> {
    let locked = ctx.locked()?;
    let c = ctx.candidate(&locked)?;
    let set = ctx.block(stored_set(&ctx.store, &locked))?;
    let spec = CandidateSpec::parse(&ctx.config.expand_source(&c.source))?;
    let placement = ctx.place(&c, &spec)?;
    let run = ctx.start_run_on(RunKind::Quality, "quality", placement.as_ref())?;
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
        let concurrency = quality_concurrency(&locked, &spec, &c.name, &c.source);
        let device = placement.map_or(Device::Cpu, |p| p.device);
        let mut generator = open(&spec, &device)?;
        let decoding = Decoding {
            max_tokens: ctx.payload.max_tokens,
            sampling: None,
        };
        let requests: Vec<ChatRequest> =
            pending.iter().map(|c| ChatRequest::from_case(c)).collect();
        let in_flight = crate::quality::cases_in_flight(concurrency, requests.len());
        // Judge checks: a study names no judge models, so they stay unscored with that reason
        // (never passed); `eval run --judge` runs them.
        let mut judges = Judges::default();
        let mut transport_in_a_row = 0;
        let mut unreachable = None;
        let mut store_failed = None;
        // A quality run has no load generator beside it: the engine computes on the threads
        // `Config::quality_threads` gives it (both cores of two), as its run's fingerprint says.
        let threads = ctx.config.quality_threads;
        // Cases heard, answered or failed: fewer than asked when the job stopped for a cancel or
        // a stopping worker.
        let mut heard = 0;
        let outcome = shortlist_engine::pool::with_threads(threads, || {
            generator.ask_all(
                &requests,
                &decoding,
                concurrency,
                AskPolicy::default(),
                // Cancelled or stopping: a local engine drops the cases in flight at once
                // instead of finishing up to `concurrency` of them (a resumed run asks them
                // again).
                &|| ctx.stopping(),
                &mut |k, asked| {
                    heard += 1;
                    let case = pending[k];
                    match asked {
                        Asked::Answered(generated) => {
                            transport_in_a_row = 0;
                            let output = generated.text.clone();
                            let (input_tokens, output_tokens, latency_s) = (
                                generated.prompt_tokens.unwrap_or(0),
                                generated.output_tokens.unwrap_or(0),
                                generated.latency_s,
                            );
                            let result = scored(case, generated, &mut judges, in_flight)?;
                            let stored = StoredCase {
                                case_id: case.id().to_owned(),
                                passed: result.outcome == CaseOutcome::Pass,
                                output,
                                scores: serde_json::to_value(&result).unwrap_or(Json::Null),
                                input_tokens,
                                output_tokens,
                                latency_s,
                            };
                            if let Err(e) = ctx
                                .block(ctx.store.put_case_result(run.id, &stored))
                                .and_then(|_| ctx.block(ctx.store.clear_case_error(run.id, case.id())))
                            {
                                store_failed = Some(e);
                                return Ok(false);
                            }
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
                            if let Err(e) = ctx.block(
                                ctx.store
                                    .put_case_error(run.id, case.id(), attempts, &error),
                            ) {
                                store_failed = Some(e);
                                return Ok(false);
                            }
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
                                unreachable = Some(format!(
                                    "{UNREACHABLE_AFTER} cases in a row could not reach it; the last: {}",
                                    errors.last().cloned().unwrap_or_default()
                                ));
                                return Ok(false);
                            }
                        }
                    }
                    Ok(!ctx.stopping())
                },
            )
        });
        if let Some(e) = store_failed {
            return Err(e.into());
        }
        outcome?;
        // Stopped before every case was heard; one that heard them all finishes as any other.
        let released = heard < requests.len() && unreachable.is_none() && ctx.stopping();
        if let Some(why) = unreachable {
            ctx.block(ctx.store.finish_run(run.id, Err(&why)))?;
            return Err(ServiceError::Unreachable {
                what: format!("candidate `{}`", c.name),
                why,
            });
        }
        if released {
            return Ok(Finished::Released);
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

/// Cases a study's quality run keeps in flight: the study's `quality.concurrency`, or else
/// [`DEFAULT_CONCURRENCY`] for a local model, fewer when its memory fit at the study's context
/// holds fewer sequences, and the study's serving concurrency (at most the default) for an
/// endpoint, whose memory cannot be read.
pub(crate) fn quality_concurrency(
    locked: &LockedStudy,
    spec: &CandidateSpec,
    name: &str,
    source: &str,
) -> usize {
    let file = locked.study.file();
    if let Some(n) = file.quality.as_ref().and_then(|q| q.concurrency) {
        return (n as usize).clamp(1, MAX_CONCURRENCY);
    }
    match spec {
        CandidateSpec::Gguf(path) => match read_gguf(path, name, source) {
            Ok(facts) => local_concurrency(locked, &facts),
            Err(_) => 1,
        },
        CandidateSpec::Endpoint { .. } => {
            (file.memory.concurrency as usize).clamp(1, DEFAULT_CONCURRENCY)
        }
    }
}

/// Cases in flight when the study does not say and the memory allows: on the demo study's
/// quality stage 32 ran 1.15x faster than 8 on both models (`benches/RESULTS.md`, 2026-12-05).
pub(crate) const DEFAULT_CONCURRENCY: usize = 32;

/// [`DEFAULT_CONCURRENCY`] for a local model, or the most sequences of the study's context its
/// memory fit holds (at least 1).
fn local_concurrency(locked: &LockedStudy, facts: &GgufFacts) -> usize {
    (1..=DEFAULT_CONCURRENCY)
        .rev()
        .find(|&n| fit_at(locked, facts, n as u64).fits)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use shortlist_study::memory::KvLayout;
    use shortlist_study::study::Study;

    use super::*;

    /// The demo study (16 GiB, 4,096-token context, serving concurrency 4), locked.
    fn demo(extra: &str) -> LockedStudy {
        let text = include_str!("../../../../studies/support-assistant.study.toml");
        Study::from_toml("support-assistant.study.toml", &format!("{extra}{text}"))
            .unwrap()
            .lock("2026-12-05T00:00:00Z")
    }

    /// A model of `weights` bytes whose every layer caches `kv_heads` heads of 64 f16 values.
    fn facts(weights: u64, layers: u32, kv_heads: u32) -> GgufFacts {
        GgufFacts {
            identity: Default::default(),
            weights_bytes: weights,
            kv: KvLayout {
                full_layers: layers,
                sliding_layers: 0,
                sliding_window: 0,
                kv_heads,
                head_dim: 64,
                bytes_per_element: 2,
            },
            dtypes: Default::default(),
        }
    }

    #[test]
    fn a_local_model_gets_the_default_or_what_its_memory_holds() {
        let locked = demo("");
        // SmolLM2's shape: 32 sequences of 4,096 tokens are ~3 GB of the 16 GiB.
        assert_eq!(local_concurrency(&locked, &facts(100 << 20, 30, 3)), 32);
        // A cache of 640 KiB per token (2.5 GiB a sequence): a few sequences fit, and exactly as
        // many as the fit says.
        let wide = facts(1 << 30, 80, 32);
        let n = local_concurrency(&locked, &wide);
        assert!((2..DEFAULT_CONCURRENCY).contains(&n), "{n}");
        assert!(fit_at(&locked, &wide, n as u64).fits);
        assert!(!fit_at(&locked, &wide, n as u64 + 1).fits);
        // Weights beyond the device: one case at a time (the fit job reports the misfit).
        assert_eq!(local_concurrency(&locked, &facts(64 << 30, 30, 3)), 1);
    }

    #[test]
    fn the_study_or_the_endpoint_can_say_fewer() {
        let no_file = CandidateSpec::Gguf("/nonexistent/model.gguf".into());
        let endpoint = CandidateSpec::parse("http://127.0.0.1:9/v1#m").unwrap();
        let said = demo("");
        // An endpoint's memory cannot be read: the study's serving concurrency (4 here).
        assert_eq!(quality_concurrency(&said, &endpoint, "e", "http://…"), 4);
        // A file that cannot be read: one at a time (the fit job says why).
        assert_eq!(quality_concurrency(&said, &no_file, "m", "gguf:…"), 1);
        // The study's own `quality.concurrency` wins, for a file or an endpoint alike.
        let five = demo("quality = { concurrency = 5 }\n");
        assert_eq!(quality_concurrency(&five, &no_file, "m", "gguf:…"), 5);
        assert_eq!(quality_concurrency(&five, &endpoint, "e", "http://…"), 5);
    }
}
