//! The record job: read what one generation's runs of a candidate stored — the memory fit, the
//! scored cases and the case errors, the load steps' raw records — recompute every figure from
//! them, and hand the typed inputs to `shortlist_study::assemble::assemble_record`. A stored row
//! that cannot be read back is an error naming the row, never left out.

use std::collections::BTreeMap;

use shortlist_evals::EvalSet;
use shortlist_evals::results::{CaseError, CaseResult};
use shortlist_evals::stats::McNemar;
use shortlist_store::Store;
use shortlist_store::runs::{Run, RunKind, RunState};
use shortlist_study::assemble::{QualityInput, RecordInputs, assemble_record};
use shortlist_study::memory::MemoryFit;
use shortlist_study::performance::{Measured, StepReport};
use shortlist_study::record::{PairedComparison, SelectionRecord};
use shortlist_study::study::{CandidateRef, LockedStudy};

use super::load::records_text;
use super::{Finished, JobContext, stored_set};
use crate::capacity::analyze_stored;
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::identity::GgufFacts;
use crate::progress::Phase;
use crate::time::now_rfc3339;
use crate::workload::{header_field, mean_output_tokens, ttft_samples};

pub(crate) fn run(ctx: &JobContext) -> Result<Finished, ServiceError> {
    let locked = ctx.locked()?;
    let c = ctx.candidate(&locked)?;
    let decoding = crate::candidate::Decoding {
        max_tokens: ctx.payload.max_tokens,
        sampling: None,
    }
    .describe();
    let record = ctx.block(assemble(
        &ctx.store,
        &locked,
        &c,
        ctx.payload.generation,
        &decoding,
    ))?;
    ctx.block(ctx.store.put_record(&record, ctx.payload.generation))?;
    let note = format!(
        "record of {}: {:?} ({})",
        c.name,
        record.verdict,
        &record.record_sha256[..12]
    );
    let mut event = ctx.progress.event(Phase::Running);
    event.message = Some(note.clone());
    ctx.progress.emit(event);
    Ok(Finished::Done(note))
}

fn corrupt(run: &Run, case: &str, why: impl std::fmt::Display) -> ServiceError {
    ServiceError::Corrupt {
        what: format!(
            "table `case_results`, run {} ({} of `{}`), case `{case}`",
            run.id, run.kind, run.candidate
        ),
        why: why.to_string(),
    }
}

/// The record of `candidate` from generation `generation` of the locked study.
pub(crate) async fn assemble(
    store: &Store,
    locked: &LockedStudy,
    c: &CandidateRef,
    generation: u32,
    decoding: &str,
) -> Result<SelectionRecord, ServiceError> {
    let study = &locked.study;
    let (study_name, version) = (study.name(), study.version());
    let set = stored_set(store, locked).await?;
    let runs = store
        .runs_of_generation(study_name, version, generation)
        .await?;
    let mine = |kind: RunKind| {
        runs.iter()
            .find(|r| r.candidate == c.name && r.kind == kind)
    };

    // Memory fit and identity.
    let (mut facts, mut memory): (Option<GgufFacts>, Option<MemoryFit>) = (None, None);
    if let Some(run) = mine(RunKind::Fit) {
        for case in store.case_results(run.id).await? {
            if !case.scores["facts"].is_null() {
                facts = Some(
                    serde_json::from_value(case.scores["facts"].clone())
                        .map_err(|e| corrupt(run, &case.case_id, e))?,
                );
            }
            if !case.scores["fit"].is_null() {
                memory = Some(
                    serde_json::from_value(case.scores["fit"].clone())
                        .map_err(|e| corrupt(run, &case.case_id, e))?,
                );
            }
        }
    }

    // Quality: the scored cases and the cases that failed outside the model.
    let quality = match mine(RunKind::Quality) {
        None => None,
        Some(run) => {
            let scored = scored_cases(store, run).await?;
            let errors = store
                .case_errors(run.id)
                .await?
                .into_iter()
                .map(|(id, attempts, error)| CaseError {
                    category: set
                        .case(&id)
                        .map_or_else(String::new, |k| k.category().as_string()),
                    id,
                    error,
                    attempts,
                })
                .collect();
            let order: Vec<&str> = study
                .file()
                .candidates
                .iter()
                .map(|k| k.name.as_str())
                .collect();
            let paired = paired_comparison(store, &set, &runs, &order, &c.name, &scored).await?;
            Some((scored, errors, paired))
        }
    };

    let measured = measured(store, locked, &runs, &c.name).await?;
    let machine = machine_of(&runs, &c.name);
    let inputs = RecordInputs {
        locked,
        candidate: c,
        generation,
        identity: facts.map(|f| f.identity),
        memory,
        quality: quality.map(|(scored, errors, paired)| QualityInput {
            set: &set,
            scored,
            errors,
            paired,
            decoding: decoding.to_owned(),
        }),
        measured,
        machine,
        code_version: env!("CARGO_PKG_VERSION").to_owned(),
        generated_at: now_rfc3339(),
    };
    Ok(assemble_record(inputs))
}

async fn scored_cases(store: &Store, run: &Run) -> Result<Vec<CaseResult>, ServiceError> {
    store
        .case_results(run.id)
        .await?
        .into_iter()
        .map(|case| {
            serde_json::from_value::<CaseResult>(case.scores)
                .map_err(|e| corrupt(run, &case.case_id, e))
        })
        .collect()
}

/// Where the candidate's runs were executed, in words (several machines are all named).
fn machine_of(runs: &[Run], candidate: &str) -> String {
    let mut seen: Vec<String> = Vec::new();
    for run in runs.iter().filter(|r| r.candidate == candidate) {
        let Some(executor) = &run.executor else {
            continue;
        };
        let described = serde_json::from_value::<MachineFingerprint>(executor.machine.clone())
            .map_or_else(|_| executor.machine.to_string(), |m| m.describe());
        if !seen.contains(&described) {
            seen.push(described);
        }
    }
    if seen.is_empty() {
        "not recorded (no run has started)".to_owned()
    } else {
        seen.join("; ")
    }
}

/// This candidate against the first other candidate, in the study's order, whose quality run of
/// the generation finished, on the cases both decided: the exact McNemar test on the discordant
/// pairs. The record job waits for every quality run of its generation, so which runs finished
/// first never changes the pairing.
async fn paired_comparison(
    store: &Store,
    set: &EvalSet,
    runs: &[Run],
    order: &[&str],
    candidate: &str,
    mine: &[CaseResult],
) -> Result<Option<PairedComparison>, ServiceError> {
    let Some(other) = order
        .iter()
        .filter(|name| **name != candidate)
        .find_map(|name| {
            runs.iter().find(|r| {
                r.kind == RunKind::Quality && r.candidate == *name && r.state == RunState::Done
            })
        })
    else {
        return Ok(None);
    };
    let theirs: BTreeMap<String, Option<bool>> = scored_cases(store, other)
        .await?
        .into_iter()
        .map(|r| (r.id.clone(), r.outcome.decided()))
        .collect();
    let pairs: Vec<(bool, bool)> = mine
        .iter()
        .filter(|r| set.case(&r.id).is_some())
        .filter_map(|r| Some((r.outcome.decided()?, (*theirs.get(&r.id)?)?)))
        .collect();
    if pairs.is_empty() {
        return Ok(None);
    }
    let t = McNemar::from_pairs(pairs);
    Ok(Some(PairedComparison {
        other: other.candidate.clone(),
        both_pass: t.both_pass,
        only_this: t.a_only,
        only_other: t.b_only,
        both_fail: t.both_fail,
        p_value: t.p_value,
    }))
}

/// The candidate's stored load run and sweep, analyzed again from their raw records; `None`
/// before its load run has been stored.
async fn measured(
    store: &Store,
    locked: &LockedStudy,
    runs: &[Run],
    candidate: &str,
) -> Result<Option<Measured>, ServiceError> {
    let mine = |kind: RunKind| {
        runs.iter()
            .find(|r| r.candidate == candidate && r.kind == kind)
    };
    let Some(load_run) = mine(RunKind::Load) else {
        return Ok(None);
    };
    let study = &locked.study;
    let slo = study.slo();
    let results = store.load_results(load_run.id).await?;
    let Some(target) = results.iter().find(|r| r.label == "target") else {
        return Ok(None);
    };
    let target_records = records_text(&target.records)?;
    let target_rps = target.offered_rps.unwrap_or(study.target_rps());
    let host = "record";
    let target_report = analyze_stored("target", &target_records, slo, host)?;
    let mut sweep = Vec::new();
    let mut swept = false;
    if let Some(run) = mine(RunKind::Sweep) {
        swept = run.state == RunState::Done;
        for r in store.load_results(run.id).await? {
            if let Some(rate) = r.offered_rps {
                let report = analyze_stored(&r.label, &records_text(&r.records)?, slo, host)?;
                sweep.push(StepReport {
                    offered_rps: rate,
                    report,
                });
            }
        }
    }
    Ok(Some(Measured::new(
        study.attainment_target(),
        StepReport {
            offered_rps: target_rps,
            report: target_report,
        },
        ttft_samples(&target_records),
        sweep,
        swept,
        header_field(&target_records, "backend").unwrap_or_else(|| "not recorded".to_owned()),
        mean_output_tokens(&target_records),
    )))
}
