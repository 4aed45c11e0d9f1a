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

use serde::{Deserialize, Serialize};
use shortlist_evals::results::CaseResult;
use shortlist_store::runs::{Run, RunKind};

use super::StudyService;
use super::drift::Fingerprint;
use crate::candidate::{AskPolicy, Asked, CandidateSpec, Decoding, open};
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::identity::read_gguf;
use crate::judge::Judges;
use crate::placement::Placement;
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

/// One case asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseReproduction {
    pub id: String,
    pub category: String,
    /// Every compared field equal.
    pub same: bool,
    /// The stored outcome and the new one (`None`: undecided, e.g. a judge check unscored).
    pub passed_then: Option<bool>,
    pub passed_now: Option<bool>,
    /// What differs, in words (`output`, `tool calls`, `finish reason`, `tokens`, `check
    /// NAME`, `top-2 gap`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differs: Vec<String>,
    /// The stored answer and the new one, when their texts differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// The smallest top-2 gap of the stored answer, when known: a difference after a near-tie
    /// is what such a gap predicts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_top2_gap: Option<f64>,
    /// The request failed outside the model: nothing to compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CaseReproduction {
    /// Whether the verdict moved (an error is not a verdict).
    pub fn verdict_changed(&self) -> bool {
        self.error.is_none() && self.passed_then != self.passed_now
    }
}

/// A quality run asked again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReproductionView {
    pub study: String,
    pub version: u32,
    pub generation: u32,
    pub candidate: String,
    pub source: String,
    /// `local` (this process's engine) or `endpoint`.
    pub kind: String,
    /// The decoding of the stored run, used again.
    pub decoding: String,
    /// Cases in flight then (the stored run's) and now.
    pub concurrency_then: Option<u32>,
    pub concurrency_now: usize,
    /// What changed since the stored run: model hashes, runtime, machine, in words; empty when
    /// nothing did.
    pub changed: Vec<String>,
    /// The machine that answered now, in words.
    pub machine: String,
    /// Cases the run stored, and how many were asked again.
    pub stored: usize,
    pub asked: usize,
    pub same: usize,
    pub different: usize,
    pub verdicts_changed: usize,
    pub errors: usize,
    /// Every answer the same, no verdict changed, no error.
    pub ok: bool,
    /// Seconds the cases took.
    pub seconds: f64,
    pub at: String,
    /// The sample's seed, when not every case was asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    pub cases: Vec<CaseReproduction>,
}

/// A stored check, as the record page lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredReproductionView {
    pub stored_at: String,
    #[serde(flatten)]
    pub check: ReproductionView,
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
        let names: Vec<&str> = locked
            .study
            .file()
            .candidates
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        if !names.contains(&params.candidate.as_str()) {
            let near = super::near::closest(&params.candidate, names.iter().copied());
            return Err(ServiceError::invalid(
                "--candidate",
                format!(
                    "study `{name}` v{version} has no candidate `{}` (its candidates: {}){}",
                    params.candidate,
                    names.join(", "),
                    super::near::did_you_mean(&near)
                ),
            ));
        }
        let c = crate::jobs::candidate_ref(&locked, &params.candidate)?;
        let runs = self.store.runs_of_study(name, version).await?;
        let (quality, generation) = quality_run(&runs, &params.candidate, params.generation)
            .ok_or_else(|| no_run(name, version, &params.candidate, params.generation))?;
        let stored = self.store.case_results(quality.id).await?;
        if stored.is_empty() {
            return Err(no_run(name, version, &params.candidate, Some(generation)));
        }
        let set = self.pinned_set(&locked).await?;
        let decoding = Decoding {
            max_tokens: self
                .max_tokens_of(name, version, generation, &c.name)
                .await?,
            sampling: None,
        };
        let then = self
            .fingerprint_then(&runs, quality, &c.name, &c.source)
            .await?;

        // The cases: every stored one, or a sample chosen by the seed; asked in the set's order.
        let mut picked: Vec<&shortlist_store::runs::CaseResult> = stored.iter().collect();
        if let Some(n) = params.cases.filter(|&n| n < stored.len()) {
            picked.sort_by_key(|s| sample_key(params.seed, &s.case_id));
            picked.truncate(n);
        }
        let order = |id: &str| set.cases().iter().position(|k| k.id() == id);
        picked.sort_by_key(|s| order(&s.case_id));
        let cases: Vec<(&shortlist_evals::Case, &shortlist_store::runs::CaseResult)> = picked
            .into_iter()
            .map(|s| {
                set.case(&s.case_id)
                    .map(|k| (k, s))
                    .ok_or_else(|| ServiceError::Corrupt {
                        what: format!("table `case_results`, run {}", quality.id),
                        why: format!("case `{}` is not in the eval set the study pins", s.case_id),
                    })
            })
            .collect::<Result<_, _>>()?;

        // Where it runs now, and what changed since.
        let spec = CandidateSpec::parse(&self.config.expand_source(&c.source))?;
        let local = matches!(spec, CandidateSpec::Gguf(_));
        let placement = if local {
            Some(Placement::resolve(&[
                (
                    &format!("candidate `{}` device", c.name),
                    c.device.as_deref(),
                ),
                ("SHORTLIST_DEVICE", self.config.device.as_deref()),
            ])?)
        } else {
            None
        };
        let threads = self.config.quality_threads;
        let mut machine = MachineFingerprint::current(threads);
        if let Some(p) = &placement {
            machine = p.stamp(machine);
        }
        let now = fingerprint_now(&spec, &c.name, &c.source, &machine)?;
        let changed = match &then {
            Some(then) if local => {
                // A run without a memory fit recorded no model hashes: said once, not as three
                // changes.
                let mut then = then.clone();
                let mut c = Vec::new();
                if then.weights_sha256.is_none() && then.runtime.is_empty() {
                    then.weights_sha256.clone_from(&now.weights_sha256);
                    then.tokenizer_sha256.clone_from(&now.tokenizer_sha256);
                    then.chat_template_sha256
                        .clone_from(&now.chat_template_sha256);
                    then.runtime.clone_from(&now.runtime);
                    c.push(
                        "the run recorded no model hashes to compare the file's with".to_owned(),
                    );
                }
                c.extend(now.changes_since(&then).1);
                // Threads apart: batch-invariant kernels give the same answers on any number.
                let threads_then = quality
                    .executor
                    .as_ref()
                    .and_then(|e| e.machine["threads"].as_u64());
                if let Some(t) = threads_then.filter(|&t| t != threads as u64) {
                    c.push(format!("compute threads: {t} → {threads}"));
                }
                c
            }
            Some(then) => {
                // An endpoint is fingerprinted by its address only: the asking machine is not
                // what answers.
                let mut c = Vec::new();
                if then.source != now.source {
                    c.push(format!("source: {} → {}", then.source, now.source));
                }
                c
            }
            None => vec!["the stored run names no model or machine to compare with".to_owned()],
        };

        let concurrency = match params.concurrency {
            Some(n) => n.min(crate::candidate::MAX_CONCURRENCY),
            None => crate::jobs::quality::quality_concurrency(&locked, &spec, &c.name, &c.source),
        };
        let requests: Vec<ChatRequest> = cases
            .iter()
            .map(|(k, _)| ChatRequest::from_case(k))
            .collect();
        let in_flight = crate::quality::cases_in_flight(concurrency, requests.len());
        let device = placement.map_or(shortlist_engine::device::Device::Cpu, |p| p.device);
        let started = std::time::Instant::now();
        let asked = requests.len();
        let answers = tokio::task::spawn_blocking({
            let decoding = decoding.clone();
            let mut on_case = on_case;
            move || -> Result<Vec<Option<Asked>>, ServiceError> {
                let mut generator = open(&spec, &device)?;
                let mut answers: Vec<Option<Asked>> = (0..requests.len()).map(|_| None).collect();
                let mut heard = 0;
                // An endpoint that is down is not asked every case: as a quality job, three
                // cases in a row that never reached it end the check (the rest: not answered).
                let mut unreached = 0;
                shortlist_engine::pool::with_threads(threads, || {
                    generator.ask_all(
                        &requests,
                        &decoding,
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
                    )
                })?;
                Ok(answers)
            }
        })
        .await
        .map_err(|e| ServiceError::Panicked {
            what: format!("reproducing `{}` in study `{name}` v{version}", c.name),
            why: e.to_string(),
        })??;
        let seconds = started.elapsed().as_secs_f64();

        let mut judges = Judges::default();
        let mut out = Vec::with_capacity(asked);
        for ((case, stored), answer) in cases.iter().zip(answers) {
            let before: CaseResult =
                serde_json::from_value(stored.scores.clone()).map_err(|e| {
                    ServiceError::Corrupt {
                        what: format!(
                            "table `case_results`, run {}, case `{}`",
                            quality.id, stored.case_id
                        ),
                        why: e.to_string(),
                    }
                })?;
            let row = match answer {
                Some(Asked::Answered(generated)) => {
                    let text = generated.text.clone();
                    let after = crate::quality::scored(case, generated, &mut judges, in_flight)?;
                    compare(&before, &stored.output, &after, &text)
                }
                Some(Asked::Failed {
                    error, attempts, ..
                }) => CaseReproduction {
                    error: Some(format!("{error} (after {attempts} attempts)")),
                    ..unanswered(&before)
                },
                None => CaseReproduction {
                    error: Some("not asked: the endpoint could not be reached".to_owned()),
                    ..unanswered(&before)
                },
            };
            out.push(row);
        }
        let same = out.iter().filter(|r| r.same).count();
        let errors = out.iter().filter(|r| r.error.is_some()).count();
        let verdicts_changed = out.iter().filter(|r| r.verdict_changed()).count();
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
            verdicts_changed,
            errors,
            ok: same == asked,
            seconds,
            at: now_rfc3339(),
            seed: params
                .cases
                .filter(|&n| n < stored.len())
                .map(|_| params.seed),
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

    /// The most tokens a generation's quality job of `candidate` generated per case.
    async fn max_tokens_of(
        &self,
        study: &str,
        version: u32,
        generation: u32,
        candidate: &str,
    ) -> Result<usize, ServiceError> {
        let jobs = self.store.jobs_of_study(study, version).await?;
        jobs.iter()
            .filter(|j| {
                j.generation == Some(generation) && j.candidate.as_deref() == Some(candidate)
            })
            .find_map(|j| j.payload["max_tokens"].as_u64())
            .map(|m| m as usize)
            .ok_or_else(|| ServiceError::Corrupt {
                what: format!("study `{study}` v{version} generation {generation}"),
                why: format!("no job of `{candidate}` says how many tokens its cases generated"),
            })
    }

    /// What the stored run ran: the model's hashes from the generation's memory fit (a local
    /// model), the runtime and the machine from the quality run's executor.
    async fn fingerprint_then(
        &self,
        runs: &[Run],
        quality: &Run,
        candidate: &str,
        source: &str,
    ) -> Result<Option<Fingerprint>, ServiceError> {
        let Some(executor) = &quality.executor else {
            return Ok(None);
        };
        let machine: Option<MachineFingerprint> =
            serde_json::from_value(executor.machine.clone()).ok();
        let fit = runs.iter().find(|r| {
            r.generation == quality.generation && r.candidate == candidate && r.kind == RunKind::Fit
        });
        let mut identity = None;
        if let Some(fit) = fit {
            for case in self.store.case_results(fit.id).await? {
                if let Ok(facts) = serde_json::from_value::<crate::identity::GgufFacts>(
                    case.scores["facts"].clone(),
                ) {
                    identity = Some(facts.identity);
                }
            }
        }
        Ok(Some(fingerprint(
            source,
            identity.as_ref(),
            machine
                .as_ref()
                .map_or_else(String::new, |m| m.backend.clone()),
            executor.code_version.clone(),
            machine
                .as_ref()
                .map_or_else(|| executor.machine.to_string(), |m| m.describe_host()),
        )))
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

/// A case's place in a seeded sample: the first bytes of SHA-256 of `seed:id`.
fn sample_key(seed: u64, id: &str) -> [u8; 8] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{seed}:{id}").as_bytes());
    let mut key = [0; 8];
    key.copy_from_slice(&digest[..8]);
    key
}

/// What a local model or an endpoint is now.
fn fingerprint_now(
    spec: &CandidateSpec,
    name: &str,
    source: &str,
    machine: &MachineFingerprint,
) -> Result<Fingerprint, ServiceError> {
    let identity = match spec {
        CandidateSpec::Gguf(path) => Some(read_gguf(path, name, source)?.identity),
        CandidateSpec::Endpoint { .. } => None,
    };
    Ok(fingerprint(
        source,
        identity.as_ref(),
        machine.backend.clone(),
        env!("CARGO_PKG_VERSION").to_owned(),
        machine.describe_host(),
    ))
}

/// A fingerprint of `source`, its model's hashes and runtime from `identity` (none: not known).
fn fingerprint(
    source: &str,
    identity: Option<&shortlist_study::record::Identity>,
    backend: String,
    code_version: String,
    machine: String,
) -> Fingerprint {
    Fingerprint {
        source: source.to_owned(),
        weights_sha256: identity.and_then(|i| i.weights_sha256.clone()),
        tokenizer_sha256: identity.and_then(|i| i.tokenizer_sha256.clone()),
        chat_template_sha256: identity.and_then(|i| i.chat_template_sha256.clone()),
        runtime: identity.map_or_else(String::new, |i| {
            format!("{} {}", i.runtime, i.runtime_version)
        }),
        backend,
        code_version,
        machine,
    }
}

fn unanswered(before: &CaseResult) -> CaseReproduction {
    CaseReproduction {
        id: before.id.clone(),
        category: before.category.clone(),
        same: false,
        passed_then: before.outcome.decided(),
        passed_now: None,
        differs: Vec::new(),
        then: None,
        now: None,
        min_top2_gap: before.min_top2_gap,
        error: None,
    }
}

/// The stored answer (`then_text`, scored as `before`) against the new one.
fn compare(
    before: &CaseResult,
    then_text: &str,
    after: &CaseResult,
    now_text: &str,
) -> CaseReproduction {
    let mut differs = Vec::new();
    if then_text != now_text {
        differs.push("output".to_owned());
    }
    if before.tool_calls != after.tool_calls {
        differs.push("tool calls".to_owned());
    }
    if before.finish_reason != after.finish_reason {
        differs.push("finish reason".to_owned());
    }
    if before.tokens != after.tokens {
        differs.push("tokens".to_owned());
    }
    for check in &before.checks {
        let now = after.checks.iter().find(|k| k.name == check.name);
        if now.is_none_or(|k| k.verdict != check.verdict) {
            differs.push(format!("check {}", check.name));
        }
    }
    // The gap is compared to the bit: equal logits give equal gaps.
    if before.min_top2_gap.map(f64::to_bits) != after.min_top2_gap.map(f64::to_bits) {
        differs.push("top-2 gap".to_owned());
    }
    let passed_then = before.outcome.decided();
    let passed_now = after.outcome.decided();
    if passed_then != passed_now && !differs.iter().any(|d| d.starts_with("check")) {
        differs.push("outcome".to_owned());
    }
    let texts = then_text != now_text;
    CaseReproduction {
        id: before.id.clone(),
        category: before.category.clone(),
        same: differs.is_empty(),
        passed_then,
        passed_now,
        differs,
        then: texts.then(|| then_text.to_owned()),
        now: texts.then(|| now_text.to_owned()),
        min_top2_gap: before.min_top2_gap,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use shortlist_evals::results::CaseOutcome;

    use super::*;

    fn result(outcome: CaseOutcome, verdict: bool, gap: Option<f64>) -> CaseResult {
        serde_json::from_value(serde_json::json!({
            "id": "c1", "category": "billing", "weight": 1.0,
            "outcome": outcome, "checks": [{"name": "contains", "outcome": if verdict {"pass"} else {"fail"}}],
            "tokens": 12, "min_top2_gap": gap,
        }))
        .unwrap()
    }

    #[test]
    fn the_same_answer_is_the_same_to_the_bit() {
        let a = result(CaseOutcome::Pass, true, Some(0.25));
        let same = compare(&a, "Paris.", &a, "Paris.");
        assert!(same.same && !same.verdict_changed(), "{same:?}");
        assert_eq!(same.then, None);
        // A gap one unit in the last place apart is a difference: other logits.
        let mut b = a.clone();
        b.min_top2_gap = Some(f64::from_bits(0.25f64.to_bits() + 1));
        let moved = compare(&a, "Paris.", &b, "Paris.");
        assert_eq!(moved.differs, ["top-2 gap"]);
        assert!(!moved.same && !moved.verdict_changed());
    }

    #[test]
    fn another_answer_names_what_differs_and_whether_the_verdict_moved() {
        let a = result(CaseOutcome::Pass, true, Some(0.05));
        let b = result(CaseOutcome::Fail, false, Some(0.05));
        let r = compare(&a, "Paris.", &b, "Lyon.");
        assert_eq!(r.differs, ["output", "check contains"]);
        assert!(r.verdict_changed());
        assert_eq!(
            (r.then.as_deref(), r.now.as_deref()),
            (Some("Paris."), Some("Lyon."))
        );
        assert_eq!((r.passed_then, r.passed_now), (Some(true), Some(false)));
    }

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
