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
use crate::fingerprint::{MachineFingerprint, threads_in_words};
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

/// What a memory fit run stored: the GGUF's facts (its identity among them) and the fit, each
/// when it was measured.
pub(crate) async fn stored_fit(
    store: &Store,
    run: &Run,
) -> Result<(Option<GgufFacts>, Option<MemoryFit>), ServiceError> {
    let (mut facts, mut memory) = (None, None);
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
    Ok((facts, memory))
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
    let (facts, memory) = match mine(RunKind::Fit) {
        Some(run) => stored_fit(store, run).await?,
        None => (None, None),
    };

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

/// Where the candidate's runs were executed, in words (several machines are all named). Runs on
/// one host that differ only in their compute threads name the host once: "…, CPU backend, 2
/// compute threads for quality, 1 for load and sweep" (a study's quality jobs may use a core its
/// load runs leave to the load generator). The memory fit computes nothing; its threads are not
/// listed.
fn machine_of(runs: &[Run], candidate: &str) -> String {
    // Each host in the order its first run names it, with its thread counts and their runs' kinds.
    type Threads = Vec<(usize, Vec<&'static str>)>;
    let mut hosts: Vec<(String, Threads)> = Vec::new();
    for run in runs.iter().filter(|r| r.candidate == candidate) {
        let Some(executor) = &run.executor else {
            continue;
        };
        let (host, threads) =
            match serde_json::from_value::<MachineFingerprint>(executor.machine.clone()) {
                Ok(m) => (m.describe_host(), Some(m.threads)),
                Err(_) => (executor.machine.to_string(), None),
            };
        let at = match hosts.iter().position(|(h, _)| *h == host) {
            Some(at) => at,
            None => {
                hosts.push((host, Vec::new()));
                hosts.len() - 1
            }
        };
        let Some(threads) = threads.filter(|_| run.kind != RunKind::Fit) else {
            continue;
        };
        let counts = &mut hosts[at].1;
        let kind = run.kind.as_str();
        match counts.iter_mut().find(|(n, _)| *n == threads) {
            Some((_, kinds)) if kinds.contains(&kind) => {}
            Some((_, kinds)) => kinds.push(kind),
            None => counts.push((threads, vec![kind])),
        }
    }
    if hosts.is_empty() {
        return "not recorded (no run has started)".to_owned();
    }
    hosts
        .into_iter()
        .map(|(host, counts)| match counts.as_slice() {
            [] => host,
            [(threads, _)] => format!("{host}, {}", threads_in_words(*threads)),
            several => {
                let each: Vec<String> = several
                    .iter()
                    .enumerate()
                    .map(|(i, (threads, kinds))| {
                        let count = if i == 0 {
                            threads_in_words(*threads)
                        } else {
                            threads.to_string()
                        };
                        format!("{count} for {}", and_list(kinds))
                    })
                    .collect();
                format!("{host}, {}", each.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// "quality", "load and sweep", "fit, load and sweep".
fn and_list(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
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

#[cfg(test)]
mod tests {
    use shortlist_store::generations::Trigger;
    use shortlist_store::runs::Executor;

    use super::*;

    fn run(candidate: &str, kind: RunKind, machine: Option<serde_json::Value>) -> Run {
        Run {
            id: 1,
            study_id: 1,
            generation: 1,
            trigger: Trigger::Manual,
            candidate: candidate.to_owned(),
            kind,
            label: String::new(),
            state: RunState::Done,
            error: None,
            cancelled_at_ms: None,
            executor: machine.map(|machine| Executor {
                worker: "w".to_owned(),
                machine,
                code_version: "0.1.0".to_owned(),
            }),
            created_at_ms: 0,
            started_at_ms: None,
            finished_at_ms: None,
        }
    }

    fn machine(cpu: &str, threads: usize) -> serde_json::Value {
        let mut m = MachineFingerprint::current(threads);
        m.cpu_model = cpu.to_owned();
        m.cores = 2;
        m.cpu_features = vec!["avx2".to_owned()];
        serde_json::to_value(m).unwrap()
    }

    #[test]
    fn one_host_is_named_once_with_each_kind_of_runs_threads() {
        let runs = [
            run("a", RunKind::Fit, Some(machine("X", 1))),
            run("a", RunKind::Quality, Some(machine("X", 2))),
            run("a", RunKind::Load, Some(machine("X", 1))),
            run("a", RunKind::Sweep, Some(machine("X", 1))),
            run("b", RunKind::Quality, Some(machine("Y", 4))),
        ];
        assert_eq!(
            machine_of(&runs, "a"),
            "X, 2 cores (avx2), CPU backend, 2 compute threads for quality, 1 for load and sweep"
        );
        // One thread count: said once, as before.
        assert_eq!(
            machine_of(&runs[2..], "a"),
            "X, 2 cores (avx2), CPU backend, 1 compute thread"
        );
        // Only the fit has started: the host, no threads.
        assert_eq!(
            machine_of(&runs[..1], "a"),
            "X, 2 cores (avx2), CPU backend"
        );
        assert_eq!(
            machine_of(&runs[..1], "b"),
            "not recorded (no run has started)"
        );
    }

    #[test]
    fn other_hosts_and_unreadable_fingerprints_are_all_named() {
        let runs = [
            run("a", RunKind::Quality, Some(machine("X", 2))),
            run("a", RunKind::Load, Some(machine("Y", 1))),
            run("a", RunKind::Sweep, Some(serde_json::json!({"cpu": "old"}))),
            run("a", RunKind::Sweep, None),
        ];
        assert_eq!(
            machine_of(&runs, "a"),
            "X, 2 cores (avx2), CPU backend, 2 compute threads; \
             Y, 2 cores (avx2), CPU backend, 1 compute thread; {\"cpu\":\"old\"}"
        );
        assert_eq!(and_list(&["fit", "load", "sweep"]), "fit, load and sweep");
    }
}
