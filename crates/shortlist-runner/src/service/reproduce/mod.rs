//! Reproducing a quality run: a generation's stored cases asked again of the same candidate with
//! the same decoding, each answer compared with the stored one — its text, tool calls, finish
//! reason, token count, every check's verdict, the outcome, and (where the candidate tells it)
//! the smallest top-2 logit gap along the answer, to the bit.
//!
//! The engine's kernels are batch-invariant, so a local model on the same weights, code and
//! kind of machine gives the same answers whatever else it computes beside them; a difference
//! there is a finding, and the check says what changed since the run (weights, runtime, machine)
//! before it says what differs. An endpoint's server may batch without that guarantee: the
//! check then measures how many answers, and how many verdicts, move when the same cases are
//! asked again. Each check is stored and the record page shows the latest.

mod answers;
mod since;

use shortlist_evals::results::CaseResult;
use shortlist_evals::{Case, EvalSet};
use shortlist_store::runs::{CaseResult as StoredCase, Run, RunKind};
use shortlist_study::study::{CandidateRef, LockedStudy};

pub use answers::{CaseReproduction, ReproductionView, StoredReproductionView};

use super::StudyService;
use crate::candidate::{AskPolicy, Asked, CandidateSpec, Decoding, open};
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::judge::Judges;
use crate::prompt::ChatRequest;
use crate::time::{now_rfc3339, rfc3339_ms};

/// What to reproduce.
#[derive(Debug, Clone, Default)]
pub struct ReproduceParams {
    pub study: String,
    /// Default: the latest version.
    pub version: Option<u32>,
    pub candidate: String,
    /// Default: the newest generation with stored cases of this candidate.
    pub generation: Option<u32>,
    /// Ask only this many of the stored cases, chosen by `seed` (default: every one).
    pub cases: Option<usize>,
    pub seed: u64,
    /// Cases in flight (default: as the study's quality runs keep them): another number asks
    /// whether the answers depend on what they were batched with.
    pub concurrency: Option<usize>,
}

impl StudyService {
    /// Ask a generation's stored quality cases again (all, or a seeded sample) and compare each
    /// answer with the stored one; the check is stored. `on_case(heard, asked)` hears each case
    /// as it comes back, on the generating thread.
    pub async fn reproduce(
        &self,
        params: &ReproduceParams,
        on_case: Box<dyn FnMut(usize, usize) + Send>,
    ) -> Result<ReproductionView, ServiceError> {
        if params.cases == Some(0) {
            return Err(ServiceError::invalid("--cases", "ask at least one case"));
        }
        if params.concurrency == Some(0) {
            return Err(ServiceError::invalid(
                "--concurrency",
                "keep at least one case in flight",
            ));
        }
        let name = params.study.as_str();
        let version = self.version_of(name, params.version).await?;
        let locked = self.store.verify_study(name, version).await?;
        let c = candidate(&locked, &params.candidate)?;
        let runs = self.store.runs_of_study(name, version).await?;
        let (quality, generation) = quality_run(&runs, &c.name, params.generation)
            .ok_or_else(|| no_run(name, version, &c.name, params.generation))?;
        let stored = self.store.case_results(quality.id).await?;
        if stored.is_empty() {
            return Err(no_run(name, version, &c.name, Some(generation)));
        }
        let set = self.pinned_set(&locked).await?;
        let jobs = self.store.jobs_of_study(name, version).await?;
        let decoding = Decoding {
            max_tokens: super::max_tokens_of(&jobs, generation, &c.name).ok_or_else(|| {
                ServiceError::Corrupt {
                    what: format!("study `{name}` v{version} generation {generation}"),
                    why: format!(
                        "no job of `{}` says how many tokens its cases generated",
                        c.name
                    ),
                }
            })?,
            sampling: None,
        };
        let sample = params.cases.filter(|&n| n < stored.len());
        let cases = pick(&set, &stored, sample, params.seed, quality.id)?;

        // Where it runs now, and what changed since.
        let spec = CandidateSpec::parse(&self.config.expand_source(&c.source))?;
        let local = matches!(spec, CandidateSpec::Gguf(_));
        let placement = crate::jobs::place(&c, &spec, &self.config)?;
        let threads = self.config.quality_threads;
        let mut machine = MachineFingerprint::current(threads);
        if let Some(p) = &placement {
            machine = p.stamp(machine);
        }
        let then = since::then(&self.store, &runs, quality, &c.source).await?;
        let now = since::now(&spec, &c.name, &c.source, &machine)?;
        let threads_then = quality
            .executor
            .as_ref()
            .and_then(|e| e.machine["threads"].as_u64());
        let changed = since::changed(then.as_ref(), &now, local, threads_then, threads);

        let concurrency = match params.concurrency {
            Some(n) => n.min(crate::candidate::MAX_CONCURRENCY),
            None => crate::jobs::quality::quality_concurrency(&locked, &spec, &c.name, &c.source),
        };
        let requests: Vec<ChatRequest> = cases
            .iter()
            .map(|(k, _)| ChatRequest::from_case(k))
            .collect();
        let asked = requests.len();
        let in_flight = crate::quality::cases_in_flight(concurrency, asked);
        let device = placement.map_or(shortlist_engine::device::Device::Cpu, |p| p.device);
        let started = std::time::Instant::now();
        let answers = tokio::task::spawn_blocking({
            let decoding = decoding.clone();
            move || {
                shortlist_engine::pool::with_threads(threads, || {
                    ask_again(&spec, &device, &requests, &decoding, concurrency, on_case)
                })
            }
        })
        .await
        .map_err(|e| ServiceError::Panicked {
            what: format!("reproducing `{}` in study `{name}` v{version}", c.name),
            why: e.to_string(),
        })??;
        let seconds = started.elapsed().as_secs_f64();
        let out = compared(&cases, answers, in_flight, quality.id)?;

        let same = out.iter().filter(|r| r.same).count();
        let errors = out.iter().filter(|r| r.error.is_some()).count();
        let view = ReproductionView {
            study: name.to_owned(),
            version,
            generation,
            candidate: c.name.clone(),
            source: c.source.clone(),
            kind: if local { "local" } else { "endpoint" }.to_owned(),
            decoding: decoding.describe(),
            concurrency_then: stored
                .iter()
                .filter_map(|s| s.scores["concurrency"].as_u64())
                .max()
                .and_then(|n| u32::try_from(n).ok()),
            concurrency_now: in_flight,
            changed,
            machine: if local {
                format!(
                    "{}, {threads} compute thread{}",
                    machine.describe_host(),
                    if threads == 1 { "" } else { "s" }
                )
            } else {
                format!("the endpoint {}", c.source)
            },
            stored: stored.len(),
            asked,
            same,
            different: asked - same - errors,
            verdicts_changed: out.iter().filter(|r| r.verdict_changed()).count(),
            errors,
            ok: same == asked,
            seconds,
            at: now_rfc3339(),
            seed: sample.map(|_| params.seed),
            cases: out,
        };
        let document = serde_json::to_value(&view).unwrap_or_default();
        self.store
            .put_reproduction(name, version, generation, &c.name, view.ok, &document)
            .await?;
        Ok(view)
    }

    /// The stored reproduction checks of a candidate (newest first; of one generation or all).
    pub async fn reproductions(
        &self,
        study: &str,
        version: Option<u32>,
        candidate: &str,
        generation: Option<u32>,
    ) -> Result<Vec<StoredReproductionView>, ServiceError> {
        let version = self.version_of(study, version).await?;
        self.store
            .reproductions(study, version, candidate, generation)
            .await?
            .into_iter()
            .map(|r| {
                Ok(StoredReproductionView {
                    stored_at: rfc3339_ms(r.created_at_ms),
                    check: serde_json::from_value(r.document).map_err(|e| {
                        ServiceError::Corrupt {
                            what: format!("table `reproductions`, row {}", r.id),
                            why: e.to_string(),
                        }
                    })?,
                })
            })
            .collect()
    }
}

/// The candidate's quality run of `generation` (default: the newest that has one).
fn quality_run<'a>(
    runs: &'a [Run],
    candidate: &str,
    generation: Option<u32>,
) -> Option<(&'a Run, u32)> {
    runs.iter()
        .filter(|r| r.candidate == candidate && r.kind == RunKind::Quality)
        .filter(|r| generation.is_none_or(|g| r.generation == g))
        .max_by_key(|r| r.generation)
        .map(|r| (r, r.generation))
}

fn no_run(study: &str, version: u32, candidate: &str, generation: Option<u32>) -> ServiceError {
    ServiceError::Store(shortlist_store::StoreError::NotFound {
        what: match generation {
            Some(g) => format!(
                "stored quality cases of `{candidate}` in study `{study}` v{version} generation {g}"
            ),
            None => format!("stored quality cases of `{candidate}` in study `{study}` v{version}"),
        },
    })
}

/// The candidate `name` of the locked study, or why not (its candidates named, the closest
/// offered).
fn candidate(locked: &LockedStudy, name: &str) -> Result<CandidateRef, ServiceError> {
    let names: Vec<&str> = locked
        .study
        .file()
        .candidates
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    if !names.contains(&name) {
        let near = super::near::closest(name, names.iter().copied());
        return Err(ServiceError::invalid(
            "--candidate",
            format!(
                "study `{}` v{} has no candidate `{name}` (its candidates: {}){}",
                locked.study.name(),
                locked.study.version(),
                names.join(", "),
                super::near::did_you_mean(&near)
            ),
        ));
    }
    crate::jobs::candidate_ref(locked, name)
}

/// The stored cases to ask again with their eval cases: every one, or `sample` of them chosen by
/// `seed`; in the set's order.
fn pick<'a>(
    set: &'a EvalSet,
    stored: &'a [StoredCase],
    sample: Option<usize>,
    seed: u64,
    run: i64,
) -> Result<Vec<(&'a Case, &'a StoredCase)>, ServiceError> {
    let mut picked: Vec<&StoredCase> = stored.iter().collect();
    if let Some(n) = sample {
        picked.sort_by_key(|s| sample_key(seed, &s.case_id));
        picked.truncate(n);
    }
    let order = |id: &str| set.cases().iter().position(|k| k.id() == id);
    picked.sort_by_key(|s| order(&s.case_id));
    picked
        .into_iter()
        .map(|s| {
            set.case(&s.case_id)
                .map(|k| (k, s))
                .ok_or_else(|| ServiceError::Corrupt {
                    what: format!("table `case_results`, run {run}"),
                    why: format!("case `{}` is not in the eval set the study pins", s.case_id),
                })
        })
        .collect()
}

/// Ask `requests` of the candidate, up to `concurrency` in flight, on this thread; each answer
/// at its request's place. An endpoint that is down is not asked every case: as a quality job,
/// three cases in a row that never reached it end the asking (the rest stay `None`).
fn ask_again(
    spec: &CandidateSpec,
    device: &shortlist_engine::device::Device,
    requests: &[ChatRequest],
    decoding: &Decoding,
    concurrency: usize,
    mut on_case: Box<dyn FnMut(usize, usize) + Send>,
) -> Result<Vec<Option<Asked>>, ServiceError> {
    let mut generator = open(spec, device)?;
    let mut answers: Vec<Option<Asked>> = (0..requests.len()).map(|_| None).collect();
    let (mut heard, mut unreached) = (0, 0);
    generator.ask_all(
        requests,
        decoding,
        concurrency,
        AskPolicy::default(),
        &|| false,
        &mut |k, a| {
            heard += 1;
            on_case(heard, requests.len());
            unreached = match &a {
                Asked::Failed {
                    transport: true, ..
                } => unreached + 1,
                _ => 0,
            };
            answers[k] = Some(a);
            Ok(unreached < crate::jobs::quality::UNREACHABLE_AFTER)
        },
    )?;
    Ok(answers)
}

/// Each case's new answer (scored as its quality run scored it) against the stored one.
fn compared(
    cases: &[(&Case, &StoredCase)],
    answers: Vec<Option<Asked>>,
    in_flight: usize,
    run: i64,
) -> Result<Vec<CaseReproduction>, ServiceError> {
    let mut judges = Judges::default();
    cases
        .iter()
        .zip(answers)
        .map(|((case, stored), answer)| {
            let before: CaseResult =
                serde_json::from_value(stored.scores.clone()).map_err(|e| {
                    ServiceError::Corrupt {
                        what: format!("table `case_results`, run {run}, case `{}`", stored.case_id),
                        why: e.to_string(),
                    }
                })?;
            Ok(match answer {
                Some(Asked::Answered(generated)) => {
                    let text = generated.text.clone();
                    let after = crate::quality::scored(case, generated, &mut judges, in_flight)?;
                    answers::compare(&before, &stored.output, &after, &text)
                }
                Some(Asked::Failed {
                    error, attempts, ..
                }) => CaseReproduction {
                    error: Some(format!("{error} (after {attempts} attempts)")),
                    ..answers::unanswered(&before)
                },
                None => CaseReproduction {
                    error: Some("not asked: the endpoint could not be reached".to_owned()),
                    ..answers::unanswered(&before)
                },
            })
        })
        .collect()
}

/// A case's place in a seeded sample: the first bytes of SHA-256 of `seed:id`.
fn sample_key(seed: u64, id: &str) -> [u8; 8] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{seed}:{id}").as_bytes());
    let mut key = [0; 8];
    key.copy_from_slice(&digest[..8]);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_fixed_by_its_seed() {
        let ids: Vec<String> = (0..50).map(|i| format!("case-{i}")).collect();
        let pick = |seed| {
            let mut v: Vec<&String> = ids.iter().collect();
            v.sort_by_key(|id| sample_key(seed, id));
            v.truncate(10);
            v.sort();
            v
        };
        assert_eq!(pick(1), pick(1));
        assert_ne!(pick(1), pick(2));
    }

    #[test]
    fn the_newest_quality_run_unless_a_generation_is_named() {
        let run = |g: u32, kind: RunKind| Run {
            id: i64::from(g) * 10,
            study_id: 1,
            generation: g,
            trigger: shortlist_store::generations::Trigger::Manual,
            candidate: "a".to_owned(),
            kind,
            label: kind.as_str().to_owned(),
            state: shortlist_store::runs::RunState::Done,
            error: None,
            cancelled_at_ms: None,
            executor: None,
            created_at_ms: 0,
            started_at_ms: None,
            finished_at_ms: None,
        };
        let runs = [
            run(1, RunKind::Quality),
            run(2, RunKind::Quality),
            run(3, RunKind::Load),
        ];
        assert_eq!(quality_run(&runs, "a", None).map(|r| r.1), Some(2));
        assert_eq!(quality_run(&runs, "a", Some(1)).map(|r| r.1), Some(1));
        assert_eq!(quality_run(&runs, "a", Some(3)).map(|r| r.1), None);
        assert_eq!(quality_run(&runs, "b", None).map(|r| r.1), None);
    }
}
