//! The memory-fit job: what the candidate's GGUF file says about itself (identity, weights, KV
//! layout) and the fit of weights + KV cache at the study's context and concurrency, stored as
//! the one "case" `memory-fit` of the candidate's fit run.

use serde_json::json;
use shortlist_store::runs::{CaseResult as StoredCase, RunKind};
use shortlist_study::memory::{FitInputs, MemoryFit, fit};
use shortlist_study::study::LockedStudy;

use super::{Finished, JobContext};
use crate::candidate::CandidateSpec;
use crate::error::ServiceError;
use crate::identity::{GgufFacts, read_gguf};
use crate::progress::Phase;

pub(crate) fn run(ctx: &JobContext) -> Result<Finished, ServiceError> {
    let locked = ctx.locked()?;
    let c = ctx.candidate(&locked)?;
    let run = ctx.start_run(RunKind::Fit, "memory")?;
    let source = ctx.config.expand_source(&c.source);
    let (facts, fit) = match CandidateSpec::parse(&source)? {
        CandidateSpec::Gguf(path) => {
            let facts = read_gguf(&path, &c.name, &c.source)?;
            let fit = fit_of(&locked, &facts);
            (Some(facts), Some(fit))
        }
        CandidateSpec::Endpoint { .. } => (None, None),
    };
    let summary = fit
        .as_ref()
        .map(|f| f.summary.clone())
        .unwrap_or_else(|| "an endpoint: weights and KV layout cannot be read".to_owned());
    let stored = StoredCase {
        case_id: "memory-fit".to_owned(),
        passed: fit.as_ref().is_some_and(|f| f.fits),
        output: summary.clone(),
        scores: json!({"facts": facts, "fit": fit}),
        input_tokens: 0,
        output_tokens: 0,
        latency_s: 0.0,
    };
    ctx.block(ctx.store.put_case_result(run.id, &stored))?;
    ctx.block(ctx.store.finish_run(run.id, Ok(())))?;
    let mut event = ctx.progress.event(Phase::Running);
    event.message = Some(format!("memory: {summary}"));
    ctx.progress.emit(event);
    Ok(Finished::Done(format!("memory: {summary}")))
}

/// The fit of a GGUF candidate at the study's memory budget.
pub(crate) fn fit_of(locked: &LockedStudy, facts: &GgufFacts) -> MemoryFit {
    fit_at(locked, facts, locked.study.file().memory.concurrency)
}

/// The fit of a GGUF candidate at the study's memory budget with `concurrency` sequences of the
/// study's context.
pub(crate) fn fit_at(locked: &LockedStudy, facts: &GgufFacts, concurrency: u64) -> MemoryFit {
    let m = &locked.study.file().memory;
    fit(&FitInputs {
        weights_bytes: facts.weights_bytes,
        kv: facts.kv,
        context_tokens: m.context_tokens,
        concurrency,
        device: m.device.clone(),
        device_memory_bytes: (m.device_memory_gib * 1024.0 * 1024.0 * 1024.0) as u64,
        usable_fraction: m.usable_fraction.unwrap_or(0.9),
        overhead_fraction: m.overhead_fraction.unwrap_or(0.1),
        max_devices: m.max_devices.unwrap_or(8),
        model_context_limit: facts.identity.context_limit,
    })
}
