//! Study orchestration over the store: create, lock, verify and show studies; queue a locked
//! study's work as job rows; execute them one at a time with [`StudyRunner::try_execute_next_job`];
//! and assemble, seal and store each candidate's selection record.
//!
//! The store is async (sqlx) and the engine's forward pass is CPU-bound: a [`StudyRunner`] owns a
//! current-thread tokio runtime and blocks on it for each store call only, so model work always
//! runs on the caller's own thread and never on a tokio worker.
//!
//! Resumability: every finished eval case is stored (`put_case_result`, idempotent per case)
//! before the next starts, and a job's heartbeat is refreshed after each case. A worker killed
//! mid-job leaves its job `running`; [`StudyRunner::requeue_stale`] hands it back, and the next
//! attempt skips every case already stored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};
use sha2::Digest as _;
use shortlist_evals::results::{CaseOutcome, RunResults};
use shortlist_evals::score::Outcome as CheckOutcome;
use shortlist_evals::score::judge::GateStatus;
use shortlist_evals::set::CheckKind;
use shortlist_evals::stats::McNemar;
use shortlist_evals::{EvalSet, FinishReason, Response};
use shortlist_measure::analyze::Report;
use shortlist_store::content::{ContentHash, WorkloadKind};
use shortlist_store::jobs::{Job, JobState};
use shortlist_store::runs::{
    CaseResult as StoredCase, LoadResult, RecordsRef, RunKind, RunSpec, RunState,
};
use shortlist_store::studies::StoredStudy;
use shortlist_store::{Store, StoreError};
use shortlist_study::StudyError;
use shortlist_study::cost::{CostInputs, NoCost, estimate};
use shortlist_study::memory::{FitInputs, MemoryFit, fit};
use shortlist_study::record::{
    Cost, Identity, Operations, PairedComparison, Performance, Quality, RECORD_FORMAT,
    RateWithInterval, SelectionRecord, StudyStamp, verdict_of,
};
use shortlist_study::rule::{Metric, MetricValues, Value};
use shortlist_study::study::{LockedStudy, Study, StudyFile};

use crate::candidate::{CandidateSpec, Decoding, open};
use crate::error::RunError;
use crate::identity::{GgufFacts, read_gguf};
use crate::judge::{Judges, score_with_judges};
use crate::load;
use crate::prompt::ChatRequest;

/// Why a study command could not go on.
#[derive(Debug, thiserror::Error)]
pub enum StudyRunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Study(#[from] StudyError),
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Eval(#[from] shortlist_evals::EvalError),
    /// A file the study names could not be read.
    #[error("{path}: {why}")]
    File { path: PathBuf, why: String },
    /// The study or a job is not usable as it stands.
    #[error("{what}: {why}")]
    Invalid { what: String, why: String },
    /// The async runtime could not be started.
    #[error("starting the store's runtime: {0}")]
    Runtime(std::io::Error),
}

impl StudyRunError {
    /// Whether this is a lock that no longer holds: stored content that does not hash to the
    /// stored lock hash (a verify failure, not bad input).
    pub fn is_tampered(&self) -> bool {
        matches!(
            self,
            StudyRunError::Study(StudyError::Tampered { .. })
                | StudyRunError::Store(StoreError::Study(StudyError::Tampered { .. }))
        )
    }
}

/// The job kinds a study run queues, per candidate, in the order they run.
pub const JOB_KINDS: [&str; 4] = ["fit", "quality", "load", "record"];

/// What every job of one study run carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPayload {
    pub study: String,
    pub version: u32,
    pub candidate: String,
    /// Most tokens generated per eval case (greedy decoding).
    pub max_tokens: usize,
}

/// What `create` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// A new study, or a new draft content for an unlocked version.
    Saved { name: String, version: u32 },
    /// The latest version is locked and the file changed: a new version was made.
    NewVersion {
        name: String,
        version: u32,
        previous: String,
    },
    /// The latest version is locked with exactly this content.
    Unchanged { name: String, version: u32 },
}

/// What one worker step did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The queue is empty.
    Idle,
    /// A job finished.
    Done {
        id: i64,
        kind: String,
        candidate: String,
    },
    /// A job failed; `state` says whether it was requeued or failed for good.
    Failed {
        id: i64,
        kind: String,
        candidate: String,
        why: String,
        state: JobState,
    },
}

/// Progress heard during a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    /// A case was answered, scored and stored (never for a case already stored).
    CaseDone {
        candidate: &'a str,
        case: &'a str,
        passed: Option<bool>,
        done: usize,
        total: usize,
    },
    /// A quality job found cases stored by an earlier attempt.
    Resumed {
        candidate: &'a str,
        done: usize,
        total: usize,
    },
    /// A note.
    Note(String),
}

/// The store, with a runtime to block on.
#[derive(Debug)]
pub struct StudyRunner {
    rt: tokio::runtime::Runtime,
    store: Store,
    worker: String,
}

/// `~/` and `${SHORTLIST_MODELS_DIR}` in a path or `gguf:` source, expanded. The models folder
/// defaults to `~/.cache/shortlist/models`, where `shortlist models fetch` puts the models.
pub fn expand_source(source: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let models = std::env::var("SHORTLIST_MODELS_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| format!("{home}/.cache/shortlist/models"));
    let (prefix, rest) = match source.strip_prefix("gguf:") {
        Some(rest) => ("gguf:", rest),
        None => ("", source),
    };
    let rest = rest.replace("${SHORTLIST_MODELS_DIR}", &models);
    let rest = match rest.strip_prefix("~/") {
        Some(tail) => format!("{home}/{tail}"),
        None => rest,
    };
    format!("{prefix}{rest}")
}

/// Now, as RFC 3339 UTC with seconds (the store and records keep times as text).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn read(path: &Path) -> Result<String, StudyRunError> {
    std::fs::read_to_string(path).map_err(|e| StudyRunError::File {
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

/// The machine a measurement was taken on, in words.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    format!("{model}, {cores} cores, CPU backend")
}

impl StudyRunner {
    /// Open the store at `url` (see `Store::url_from_env`).
    pub fn connect(url: &str) -> Result<StudyRunner, StudyRunError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(StudyRunError::Runtime)?;
        let store = rt.block_on(Store::connect(url))?;
        let worker = format!("worker-{}", std::process::id());
        Ok(StudyRunner { rt, store, worker })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The given version, or the latest.
    pub fn version_of(&self, name: &str, version: Option<u32>) -> Result<u32, StudyRunError> {
        match version {
            Some(v) => Ok(v),
            None => Ok(self.block(self.store.latest_study_version(name))?),
        }
    }

    /// Store a study file with its eval set version, SLO, workload and candidates (with what the
    /// GGUF files say about themselves). A changed file over a locked version makes a new one.
    pub fn create(&self, path: &Path) -> Result<Created, StudyRunError> {
        let source = path.display().to_string();
        let text = read(path)?;
        let study = Study::from_toml(&source, &text)?;
        let file = study.file().clone();

        // The eval set must be the version the study pins.
        let set_path = PathBuf::from(&file.evalset.path);
        let yaml = read(&set_path)?;
        let set = EvalSet::from_yaml(&file.evalset.path, &yaml)?;
        if set.sha256() != file.evalset.sha256 {
            return Err(StudyRunError::Invalid {
                what: format!("{source}: evalset.sha256"),
                why: format!(
                    "the study pins {} but {} hashes to {} (pin the version you mean)",
                    file.evalset.sha256,
                    file.evalset.path,
                    set.sha256()
                ),
            });
        }
        let hash = ContentHash::parse(set.sha256()).ok_or_else(|| StudyRunError::Invalid {
            what: file.evalset.path.clone(),
            why: "the eval set's hash is not a SHA-256".to_owned(),
        })?;
        self.block(self.store.put_eval_set(set.name(), &hash, &yaml))?;

        let slo_name = file
            .slo
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or(&file.name)
            .to_owned();
        let slo_text = toml::to_string(&file.slo).map_err(|e| StudyRunError::Invalid {
            what: format!("{source}: slo"),
            why: e.to_string(),
        })?;
        self.block(self.store.put_slo(&slo_name, &slo_text))?;

        let workload_name = format!("{}-workload", file.name);
        match (&file.workload.kind[..], &file.workload.path) {
            ("trace", Some(p)) => {
                let body = read(Path::new(p))?;
                self.block(
                    self.store
                        .put_workload(&workload_name, WorkloadKind::Trace, &body),
                )?;
            }
            _ => {
                let body = serde_json::to_string(&file.workload).unwrap_or_default();
                self.block(
                    self.store
                        .put_workload(&workload_name, WorkloadKind::Spec, &body),
                )?;
            }
        }

        for c in &file.candidates {
            let config = candidate_config(c)?;
            self.block(self.store.put_candidate(&c.name, &config))?;
        }

        let latest = match self.block(self.store.latest_study_version(&file.name)) {
            Ok(v) => Some(v),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let Some(latest) = latest else {
            self.block(self.store.save_study(&study))?;
            return Ok(Created::Saved {
                name: file.name,
                version: study.version(),
            });
        };
        match self.block(self.store.study(&file.name, latest))? {
            StoredStudy::Draft(_) => {
                let mut f = file;
                f.version = latest;
                let s = Study::from_file(&source, f)?;
                self.block(self.store.save_study(&s))?;
                Ok(Created::Saved {
                    name: s.name().to_owned(),
                    version: latest,
                })
            }
            StoredStudy::Locked(locked) => {
                let normalize = |f: &StudyFile| {
                    let mut f = f.clone();
                    f.version = 0;
                    f.previous = None;
                    f
                };
                if normalize(locked.study.file()) == normalize(&file) {
                    return Ok(Created::Unchanged {
                        name: file.name,
                        version: latest,
                    });
                }
                let mut f = file;
                f.version = latest + 1;
                f.previous = Some(locked.sha256.clone());
                let s = Study::from_file(&source, f)?;
                self.block(self.store.save_study(&s))?;
                Ok(Created::NewVersion {
                    name: s.name().to_owned(),
                    version: latest + 1,
                    previous: locked.sha256,
                })
            }
        }
    }

    /// Lock a draft at `locked_at` (a locked one is returned as it is). The second value says
    /// whether this call locked it.
    pub fn lock(
        &self,
        name: &str,
        version: Option<u32>,
        locked_at: &str,
    ) -> Result<(LockedStudy, bool), StudyRunError> {
        let version = self.version_of(name, version)?;
        match self.block(self.store.study(name, version))? {
            StoredStudy::Locked(l) => Ok((l, false)),
            StoredStudy::Draft(s) => {
                let locked = s.lock(locked_at);
                self.block(self.store.lock_study(&locked))?;
                Ok((locked, true))
            }
        }
    }

    /// Recompute a locked study's hash from its stored content.
    pub fn verify(&self, name: &str, version: Option<u32>) -> Result<LockedStudy, StudyRunError> {
        let version = self.version_of(name, version)?;
        Ok(self.block(self.store.verify_study(name, version))?)
    }

    /// A study as stored, with its candidates' stored configurations.
    pub fn show(&self, name: &str, version: Option<u32>) -> Result<Json, StudyRunError> {
        let version = self.version_of(name, version)?;
        let stored = self.block(self.store.study(name, version))?;
        let (state, sha, at) = match &stored {
            StoredStudy::Draft(_) => ("draft", None, None),
            StoredStudy::Locked(l) => ("locked", Some(l.sha256.clone()), Some(l.locked_at.clone())),
        };
        let mut candidates = Vec::new();
        for c in &stored.study().file().candidates {
            let config = self
                .block(self.store.candidate(&c.name, None))
                .map(|v| v.config)
                .unwrap_or(Json::Null);
            candidates.push(json!({"name": c.name, "stored": config}));
        }
        Ok(json!({
            "name": name,
            "version": version,
            "state": state,
            "lock_sha256": sha,
            "locked_at": at,
            "study": stored.study().file(),
            "candidates": candidates,
        }))
    }

    /// Queue the jobs of a locked study (per candidate: fit, quality, load, record). Returns how
    /// many were queued; 0 when this study version already has all its jobs (a resumed run).
    ///
    /// A study version whose queue lacks a kind of step (queued by an older build) gets the
    /// missing steps for each candidate, followed by a fresh record job: work already done is
    /// kept, and the newer record (the one `record` shows) includes the new steps.
    pub fn enqueue(
        &self,
        name: &str,
        version: u32,
        max_tokens: usize,
    ) -> Result<usize, StudyRunError> {
        self.enqueue_with(name, version, max_tokens, false)
    }

    /// [`StudyRunner::enqueue`]; with `refresh_records`, also a fresh record job per candidate
    /// whose steps are all queued already (a record assembled again from the stored runs, e.g.
    /// by a newer build; earlier records stay stored).
    pub fn enqueue_with(
        &self,
        name: &str,
        version: u32,
        max_tokens: usize,
        refresh_records: bool,
    ) -> Result<usize, StudyRunError> {
        // Runs start only on locked studies, whose lock still holds.
        let locked = self.verify(name, Some(version))?;
        let existing = self.jobs_of(name, version)?;
        let mut queued = 0;
        for c in &locked.study.file().candidates {
            let mine: Vec<&Job> = existing
                .iter()
                .filter(|j| j.payload["candidate"] == c.name.as_str())
                .collect();
            let max_tokens = mine
                .first()
                .and_then(|j| j.payload["max_tokens"].as_u64())
                .map_or(max_tokens, |m| m as usize);
            let payload = JobPayload {
                study: name.to_owned(),
                version,
                candidate: c.name.clone(),
                max_tokens,
            };
            let payload = serde_json::to_value(&payload).unwrap_or(Json::Null);
            let missing: Vec<&str> = JOB_KINDS
                .iter()
                .copied()
                .filter(|kind| *kind != "record" && !mine.iter().any(|j| j.kind == *kind))
                .collect();
            if !mine.is_empty() && missing.is_empty() {
                if refresh_records {
                    self.block(self.store.enqueue_job("record", &payload))?;
                    queued += 1;
                }
                continue;
            }
            for kind in missing.iter().chain(std::iter::once(&"record")) {
                self.block(self.store.enqueue_job(kind, &payload))?;
                queued += 1;
            }
        }
        Ok(queued)
    }

    /// Every job of a study version, any state.
    pub fn jobs_of(&self, name: &str, version: u32) -> Result<Vec<Job>, StudyRunError> {
        let mut jobs = Vec::new();
        for state in [
            JobState::Queued,
            JobState::Running,
            JobState::Done,
            JobState::Failed,
        ] {
            for job in self.block(self.store.jobs_in_state(state))? {
                if job.payload["study"] == name && job.payload["version"] == version {
                    jobs.push(job);
                }
            }
        }
        jobs.sort_by_key(|j| j.id);
        Ok(jobs)
    }

    /// Hand back jobs whose worker stopped answering `after` ago.
    pub fn requeue_stale(&self, after: Duration) -> Result<(u64, u64), StudyRunError> {
        Ok(self.block(self.store.requeue_stale_jobs(after))?)
    }

    /// Claim the next queued job and run it to the end. Call in a loop until [`Outcome::Idle`].
    pub fn try_execute_next_job(
        &self,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<Outcome, StudyRunError> {
        let Some(job) = self.block(self.store.claim_next_job(&self.worker))? else {
            return Ok(Outcome::Idle);
        };
        let payload: Result<JobPayload, _> = serde_json::from_value(job.payload.clone());
        let result = match payload {
            Err(e) => Err(StudyRunError::Invalid {
                what: format!("job {}", job.id),
                why: format!("payload: {e}"),
            }),
            Ok(p) => self.execute(&job, &p, on_event).map(|()| p.candidate),
        };
        match result {
            Ok(candidate) => {
                self.block(self.store.complete_job(job.id, &self.worker))?;
                Ok(Outcome::Done {
                    id: job.id,
                    kind: job.kind,
                    candidate,
                })
            }
            Err(e) => {
                let why = e.to_string();
                // Bad input does not get better on retry; a failed step might (a busy database).
                let retry = !matches!(e, StudyRunError::Invalid { .. } | StudyRunError::Study(_));
                let state = self.block(self.store.fail_job(job.id, &self.worker, &why, retry))?;
                Ok(Outcome::Failed {
                    id: job.id,
                    kind: job.kind,
                    candidate: job.payload["candidate"].as_str().unwrap_or("?").to_owned(),
                    why,
                    state,
                })
            }
        }
    }

    fn execute(
        &self,
        job: &Job,
        p: &JobPayload,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), StudyRunError> {
        match job.kind.as_str() {
            "fit" => self.run_fit(p, on_event),
            "quality" => self.run_quality_job(job, p, on_event),
            "load" => self.run_load_job(job, p, on_event),
            "record" => {
                let record = self.assemble_record(p)?;
                self.block(self.store.put_record(&record))?;
                on_event(Event::Note(format!(
                    "record of {}: {:?} ({})",
                    p.candidate,
                    record.verdict,
                    &record.record_sha256[..12]
                )));
                Ok(())
            }
            other => Err(StudyRunError::Invalid {
                what: format!("job {}", job.id),
                why: format!("unknown job kind `{other}`"),
            }),
        }
    }

    fn spec(&self, p: &JobPayload, kind: RunKind, label: &str) -> RunSpec {
        RunSpec {
            study: p.study.clone(),
            study_version: p.version,
            candidate: p.candidate.clone(),
            kind,
            label: label.to_owned(),
        }
    }

    fn candidate_ref(
        locked: &LockedStudy,
        name: &str,
    ) -> Result<shortlist_study::study::CandidateRef, StudyRunError> {
        locked
            .study
            .file()
            .candidates
            .iter()
            .find(|c| c.name == name)
            .cloned()
            .ok_or_else(|| StudyRunError::Invalid {
                what: format!("study `{}`", locked.study.name()),
                why: format!("no candidate `{name}`"),
            })
    }

    /// The memory fit: stored as the one "case" `memory-fit` of the candidate's fit run, with the
    /// GGUF facts and the fit's arithmetic in its scores.
    fn run_fit(
        &self,
        p: &JobPayload,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), StudyRunError> {
        let locked = self.verify(&p.study, Some(p.version))?;
        let c = Self::candidate_ref(&locked, &p.candidate)?;
        let run = self.block(self.store.open_run(&self.spec(p, RunKind::Fit, "memory")))?;
        self.block(self.store.start_run(run.id))?;
        let source = expand_source(&c.source);
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
        on_event(Event::Note(format!("{}: memory {summary}", p.candidate)));
        let stored = StoredCase {
            case_id: "memory-fit".to_owned(),
            passed: fit.as_ref().is_some_and(|f| f.fits),
            output: summary,
            scores: json!({"facts": facts, "fit": fit}),
            input_tokens: 0,
            output_tokens: 0,
            latency_s: 0.0,
        };
        self.block(self.store.put_case_result(run.id, &stored))?;
        self.block(self.store.finish_run(run.id, Ok(())))?;
        Ok(())
    }

    fn run_quality_job(
        &self,
        job: &Job,
        p: &JobPayload,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), StudyRunError> {
        let locked = self.verify(&p.study, Some(p.version))?;
        let c = Self::candidate_ref(&locked, &p.candidate)?;
        let set = self.stored_set(&locked)?;
        let run = self.block(
            self.store
                .open_run(&self.spec(p, RunKind::Quality, "quality")),
        )?;
        self.block(self.store.start_run(run.id))?;
        let done = self.block(self.store.finished_cases(run.id))?;
        let total = set.cases().len();
        if !done.is_empty() {
            on_event(Event::Resumed {
                candidate: &p.candidate,
                done: done.len(),
                total,
            });
        }
        if done.len() < total {
            let spec = CandidateSpec::parse(&expand_source(&c.source))?;
            let mut generator = open(&spec)?;
            let decoding = decoding_of(p);
            let mut judges = Judges::default();
            let mut finished = done.len();
            for case in set.cases() {
                if done.contains(case.id()) {
                    continue;
                }
                let request = ChatRequest::from_case(case);
                let generated = generator.generate(&request, &decoding)?;
                let finish = generated.finish_reason.as_deref().map(FinishReason::parse);
                let response =
                    Response::new(generated.text.clone(), generated.tool_calls.clone(), finish);
                // Judge checks: a study names no judge models, so they stay unscored with that
                // reason (never passed); `eval run --judge` runs them.
                let mut result = score_with_judges(case, &response, &mut judges)?;
                result.finish_reason = generated.finish_reason.clone();
                result.tokens = generated.output_tokens;
                result.latency_s = Some(generated.latency_s);
                let stored = StoredCase {
                    case_id: case.id().to_owned(),
                    passed: result.outcome == CaseOutcome::Pass,
                    output: generated.text,
                    scores: serde_json::to_value(&result).unwrap_or(Json::Null),
                    input_tokens: generated.prompt_tokens.unwrap_or(0),
                    output_tokens: generated.output_tokens.unwrap_or(0),
                    latency_s: generated.latency_s,
                };
                self.block(self.store.put_case_result(run.id, &stored))?;
                self.block(self.store.heartbeat_job(job.id, &self.worker))?;
                finished += 1;
                on_event(Event::CaseDone {
                    candidate: &p.candidate,
                    case: case.id(),
                    passed: result.outcome.decided(),
                    done: finished,
                    total,
                });
            }
        }
        self.block(self.store.finish_run(run.id, Ok(())))?;
        Ok(())
    }

    /// The performance steps of one candidate: the load run at the target rate (run kind
    /// `load`, result `target`), then the capacity sweep (run kind `sweep`, one result per offered
    /// rate). Each finished step is stored before the next starts; a resumed job skips them.
    fn run_load_job(
        &self,
        job: &Job,
        p: &JobPayload,
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), StudyRunError> {
        let locked = self.verify(&p.study, Some(p.version))?;
        let study = &locked.study;
        let file = study.file();
        let c = Self::candidate_ref(&locked, &p.candidate)?;
        if file.workload.load_loop != "open" {
            return Err(StudyRunError::Invalid {
                what: format!("study `{}`: workload.load_loop", p.study),
                why: format!(
                    "`{}`: a study's load run and capacity sweep are open loop (a closed loop's offered load falls as the server slows, so it cannot measure goodput at a target rate)",
                    file.workload.load_loop
                ),
            });
        }
        let trace = if file.workload.kind == "trace" {
            let stored = self.block(
                self.store
                    .workload(&format!("{}-workload", file.name), None),
            )?;
            let got = hex::encode(sha2::Sha256::digest(stored.body.as_bytes()));
            if let Some(pinned) = &file.workload.sha256
                && !pinned.eq_ignore_ascii_case(&got)
            {
                return Err(StudyRunError::Invalid {
                    what: format!("study `{}`: workload", p.study),
                    why: format!("the stored trace hashes to {got}, the study pins {pinned}"),
                });
            }
            Some(stored.body)
        } else {
            None
        };
        let slo = load::study_slo(file)?;
        let workload = load::study_workload(&file.workload, trace.as_deref())?;
        let target = study.target_rps();
        let spec = CandidateSpec::parse(&expand_source(&c.source))?;
        let mut served: Option<load::Served> = None;

        let load_run = self.block(self.store.open_run(&self.spec(p, RunKind::Load, "target")))?;
        self.block(self.store.start_run(load_run.id))?;
        let stored = self.block(self.store.load_results(load_run.id))?;
        let target_records = match stored.into_iter().find(|r| r.label == "target") {
            Some(r) => records_text(&r.records)?,
            None => {
                let server = serve_once(&mut served, &spec, &c.source)?;
                on_event(Event::Note(format!(
                    "{}: load run, {} requests at {target} req/s, open loop",
                    p.candidate,
                    workload.arrivals().len()
                )));
                let label = format!("{}-{}-target", p.study, p.candidate);
                let step = self.with_heartbeat(job, || {
                    load::run_step(server, &workload, target, &slo, &label)
                })?;
                on_event(Event::Note(step_note(&p.candidate, &step.report, target)));
                self.block(self.store.put_load_result(
                    load_run.id,
                    &LoadResult {
                        label: "target".to_owned(),
                        offered_rps: Some(target),
                        histograms: step.histograms,
                        records: RecordsRef::Inline(step.records.clone()),
                    },
                ))?;
                step.records
            }
        };
        self.block(self.store.finish_run(load_run.id, Ok(())))?;

        let rates = match study.sweep_rps() {
            Some(rates) => rates,
            None => {
                let (report, _) = load::analyze_text("target", &target_records, &slo, false)?;
                let missed = report
                    .goodput
                    .attainment
                    .is_none_or(|a| a < study.attainment_target());
                let mut rates: Vec<f64> = load::DEFAULT_SWEEP
                    .iter()
                    .map(|m| m * target)
                    .filter(|r| *r != target)
                    .collect();
                if missed {
                    rates.insert(0, target / 2.0);
                }
                rates
            }
        };
        let sweep_run = self.block(self.store.open_run(&self.spec(p, RunKind::Sweep, "sweep")))?;
        self.block(self.store.start_run(sweep_run.id))?;
        let done: Vec<String> = self
            .block(self.store.load_results(sweep_run.id))?
            .into_iter()
            .map(|r| r.label)
            .collect();
        for rate in rates {
            let label = sweep_label(rate);
            if done.contains(&label) {
                continue;
            }
            let server = serve_once(&mut served, &spec, &c.source)?;
            on_event(Event::Note(format!(
                "{}: sweep step at {rate} req/s",
                p.candidate
            )));
            let name = format!("{}-{}-{label}", p.study, p.candidate);
            let step =
                self.with_heartbeat(job, || load::run_step(server, &workload, rate, &slo, &name))?;
            on_event(Event::Note(step_note(&p.candidate, &step.report, rate)));
            self.block(self.store.put_load_result(
                sweep_run.id,
                &LoadResult {
                    label,
                    offered_rps: Some(rate),
                    histograms: step.histograms,
                    records: RecordsRef::Inline(step.records),
                },
            ))?;
        }
        self.block(self.store.finish_run(sweep_run.id, Ok(())))?;
        Ok(())
    }

    /// This candidate against the first other candidate whose quality run finished, on the
    /// cases both decided: the exact McNemar test on the discordant pairs.
    fn paired_comparison(
        &self,
        set: &EvalSet,
        runs: &[shortlist_store::runs::Run],
        candidate: &str,
        mine: &RunResults,
    ) -> Result<Option<PairedComparison>, StudyRunError> {
        let Some(other) = runs.iter().find(|r| {
            r.kind == RunKind::Quality && r.candidate != candidate && r.state == RunState::Done
        }) else {
            return Ok(None);
        };
        let theirs: BTreeMap<String, Option<bool>> = self
            .block(self.store.case_results(other.id))?
            .into_iter()
            .filter_map(|c| {
                serde_json::from_value::<shortlist_evals::results::CaseResult>(c.scores)
                    .ok()
                    .map(|r| (c.case_id, r.outcome.decided()))
            })
            .collect();
        let pairs: Vec<(bool, bool)> = mine
            .cases
            .iter()
            .filter(|r| set.cases().iter().any(|c| c.id() == r.id))
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

    /// The candidate's stored load run and sweep, measured again from their raw records; `None`
    /// before its load run has been stored.
    fn measured_performance(
        &self,
        p: &JobPayload,
        locked: &LockedStudy,
        runs: &[shortlist_store::runs::Run],
    ) -> Result<Option<load::Measured>, StudyRunError> {
        let mine = |kind: RunKind| {
            runs.iter()
                .find(|r| r.candidate == p.candidate && r.kind == kind)
        };
        let Some(load_run) = mine(RunKind::Load) else {
            return Ok(None);
        };
        let results = self.block(self.store.load_results(load_run.id))?;
        let Some(target) = results.iter().find(|r| r.label == "target") else {
            return Ok(None);
        };
        let target_records = records_text(&target.records)?;
        let mut sweep = Vec::new();
        let mut swept = false;
        if let Some(run) = mine(RunKind::Sweep) {
            swept = run.state == RunState::Done;
            for r in self.block(self.store.load_results(run.id))? {
                if let Some(rate) = r.offered_rps {
                    sweep.push((rate, records_text(&r.records)?));
                }
            }
        }
        let study = &locked.study;
        let slo = load::study_slo(study.file())?;
        Ok(Some(load::Measured::from_records(
            &slo,
            study.attainment_target(),
            target.offered_rps.unwrap_or(study.target_rps()),
            &target_records,
            &sweep,
            swept,
        )?))
    }

    /// Run `work` on its own thread while this one keeps the job's heartbeat fresh, so that a
    /// long load step is not mistaken for a dead worker.
    fn with_heartbeat<T: Send>(
        &self,
        job: &Job,
        work: impl FnOnce() -> Result<T, StudyRunError> + Send,
    ) -> Result<T, StudyRunError> {
        std::thread::scope(|scope| {
            let handle = scope.spawn(work);
            let mut last = std::time::Instant::now();
            while !handle.is_finished() {
                std::thread::sleep(Duration::from_millis(200));
                if last.elapsed() >= Duration::from_secs(10) {
                    self.block(self.store.heartbeat_job(job.id, &self.worker))?;
                    last = std::time::Instant::now();
                }
            }
            handle.join().map_err(|_| StudyRunError::Invalid {
                what: format!("job {}", job.id),
                why: "the load step panicked".to_owned(),
            })?
        })
    }

    /// The eval set version the locked study pins, from the store (not from the working tree,
    /// which may have moved on).
    fn stored_set(&self, locked: &LockedStudy) -> Result<EvalSet, StudyRunError> {
        let pinned = &locked.study.file().evalset;
        let hash = ContentHash::parse(&pinned.sha256).ok_or_else(|| StudyRunError::Invalid {
            what: "evalset.sha256".to_owned(),
            why: "not a SHA-256".to_owned(),
        })?;
        let stored = self.block(self.store.eval_set_by_hash(&hash))?;
        Ok(EvalSet::from_yaml(&pinned.path, &stored.yaml)?)
    }

    /// The stored record of a candidate (latest), checked against its own hash.
    pub fn stored_record(
        &self,
        study: &str,
        version: Option<u32>,
        candidate: &str,
    ) -> Result<SelectionRecord, StudyRunError> {
        let version = self.version_of(study, version)?;
        let stored = self.block(self.store.latest_record(study, version, candidate))?;
        Ok(stored.record)
    }

    /// Assemble and seal the selection record of one candidate from what its runs stored.
    pub fn assemble_record(&self, p: &JobPayload) -> Result<SelectionRecord, StudyRunError> {
        let locked = self.verify(&p.study, Some(p.version))?;
        let study = &locked.study;
        let file = study.file();
        let c = Self::candidate_ref(&locked, &p.candidate)?;
        let set = self.stored_set(&locked)?;
        let runs = self.block(self.store.runs_of_study(&p.study, p.version))?;
        let mine = |kind: RunKind| {
            runs.iter()
                .find(|r| r.candidate == p.candidate && r.kind == kind)
        };

        // Memory fit and identity.
        let mut facts: Option<GgufFacts> = None;
        let mut memory: Option<MemoryFit> = None;
        if let Some(run) = mine(RunKind::Fit) {
            for case in self.block(self.store.case_results(run.id))? {
                facts = serde_json::from_value(case.scores["facts"].clone()).ok();
                memory = serde_json::from_value(case.scores["fit"].clone()).ok();
            }
        }

        // Quality, in the eval set's order.
        let mut by_id: BTreeMap<String, shortlist_evals::results::CaseResult> = BTreeMap::new();
        if let Some(run) = mine(RunKind::Quality) {
            for case in self.block(self.store.case_results(run.id))? {
                if let Ok(r) = serde_json::from_value(case.scores.clone()) {
                    by_id.insert(case.case_id, r);
                }
            }
        }
        let cases: Vec<_> = set
            .cases()
            .iter()
            .filter_map(|k| by_id.remove(k.id()))
            .collect();
        let answered = cases.len();
        let results = RunResults::new(&set, Some(p.candidate.clone()), cases);

        let mut values = MetricValues::default();
        if answered == set.cases().len() {
            quality_metrics(&set, &results, &mut values);
        }
        if let Some(f) = &memory {
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
        if let Some(f) = &facts {
            values.set(
                Metric::License,
                Value::Text(f.identity.license.clone()),
                vec!["general.license in the GGUF metadata".to_owned()],
            );
            if let Some(limit) = f.identity.context_limit {
                values.set(
                    Metric::ContextLimitTokens,
                    Value::Number(limit as f64),
                    vec![],
                );
            }
        }
        let hardware = machine();
        let measured = self.measured_performance(p, &locked, &runs)?;
        if let Some(m) = &measured {
            let r = &m.target;
            if let Some(a) = r.goodput.attainment {
                values.set(
                    Metric::AttainmentAtTarget,
                    Value::Number(a),
                    vec![format!(
                        "{} of {} requests met the SLO at {} req/s offered",
                        r.requests.qualified,
                        r.requests.scheduled,
                        study.target_rps()
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
        let mean_output = if answered == 0 {
            0.0
        } else {
            results.cases.iter().filter_map(|r| r.tokens).sum::<u64>() as f64 / answered as f64
        };
        // Cost is per request of the study's workload: its output length, not the eval set's.
        let workload_output = measured
            .as_ref()
            .map(|m| m.mean_output_tokens)
            .filter(|t| *t > 0.0)
            .unwrap_or(mean_output);
        let cost = match &measured {
            None => Cost::Unavailable(NoCost {
                why: "no load run or capacity sweep has run for this candidate yet, so there is no measured capacity to size replicas by".to_owned(),
            }),
            Some(m) if !m.swept => Cost::Unavailable(NoCost {
                why: "no capacity sweep has run for this candidate yet".to_owned(),
            }),
            Some(m) => match estimate(&CostInputs {
                capacity_rps_per_replica: m.finding.max_rate_meeting_target_rps.unwrap_or(0.0),
                devices_per_replica: memory.as_ref().map(|m| m.devices_needed).unwrap_or(1).max(1),
                price_per_device_hour: c.price_per_device_hour,
                currency: file
                    .cost
                    .currency
                    .clone()
                    .unwrap_or_else(|| "USD".to_owned()),
                mean_output_tokens: workload_output,
                ordinary_rps: file.traffic.ordinary_rps,
                peak_rps: file.traffic.peak_rps,
                hardware: hardware.clone(),
                capacity_context: format!(
                    "capacity measured on {hardware} with {}, {} workload, SLO `{}`, open loop",
                    m.backend,
                    file.workload.kind,
                    file.slo.get("name").and_then(|v| v.as_str()).unwrap_or("slo")
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
            },
        };
        let verdicts: Vec<_> = study.rules().iter().map(|r| r.judge(&values)).collect();
        let verdict = verdict_of(&verdicts, measured.as_ref().is_some_and(|m| m.client_bound));

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
        let quality = Quality {
            evalset: format!(
                "{} ({answered} of {} cases answered)",
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
            paired: self.paired_comparison(&set, &runs, &p.candidate, &results)?,
            decoding: decoding_of(p).describe(),
        };

        let slo_name = file
            .slo
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or("slo")
            .to_owned();
        let workload_label = format!(
            "{} (seed {})",
            file.workload.kind,
            file.workload
                .seed
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".to_owned())
        );
        let performance = match &measured {
            Some(m) => m.performance(&workload_label, &slo_name, study.target_rps(), &hardware),
            None => Performance {
                loop_label: format!("{} loop (not run yet)", file.workload.load_loop),
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
            },
        };

        let errors = results
            .cases
            .iter()
            .filter(|r| {
                r.finish_reason
                    .as_deref()
                    .is_some_and(|f| f.starts_with("error"))
            })
            .map(|r| r.id.clone())
            .collect::<Vec<_>>();
        let operations = Operations {
            backend: measured.as_ref().map_or_else(
                || "shortlist-engine in-process (candle, CPU)".to_owned(),
                |m| m.backend.clone(),
            ),
            versions: vec![format!("shortlist {}", env!("CARGO_PKG_VERSION"))],
            overload_behaviour: measured.as_ref().map_or_else(
                || "not measured: no load run or sweep in this record".to_owned(),
                |m| m.overload.clone(),
            ),
            error_behaviour: if errors.is_empty() {
                format!("no per-case errors in {answered} quality cases")
            } else {
                format!(
                    "{} quality cases ended in an error finish reason ({})",
                    errors.len(),
                    errors.join(", ")
                )
            },
            fallback: c
                .fallback
                .clone()
                .unwrap_or_else(|| "none declared".to_owned()),
        };

        let identity = facts.map(|f| f.identity).unwrap_or_else(|| Identity {
            candidate: c.name.clone(),
            source: c.source.clone(),
            ..Identity::default()
        });
        let memory = memory.unwrap_or_else(|| MemoryFit {
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

        Ok(SelectionRecord {
            format: RECORD_FORMAT.to_owned(),
            study: StudyStamp::of(&locked),
            identity,
            quality,
            disqualifiers: verdicts,
            memory,
            performance,
            operations,
            cost,
            verdict,
            generated_at: now_rfc3339(),
            code_version: env!("CARGO_PKG_VERSION").to_owned(),
            machine: machine(),
            record_sha256: String::new(),
        }
        .seal())
    }
}

/// The candidate's server, started on first use: a job whose steps are all stored starts none.
fn serve_once<'a>(
    served: &'a mut Option<load::Served>,
    spec: &CandidateSpec,
    source: &str,
) -> Result<&'a load::Served, StudyRunError> {
    if served.is_none() {
        *served = Some(load::Served::start(spec, source)?);
    }
    served.as_ref().ok_or_else(|| StudyRunError::Invalid {
        what: source.to_owned(),
        why: "the server did not start".to_owned(),
    })
}

/// The stored label of a sweep step.
fn sweep_label(rate: f64) -> String {
    format!("rate-{rate}")
}

/// The text of stored records, inline or at the path they were written to.
fn records_text(records: &RecordsRef) -> Result<String, StudyRunError> {
    match records {
        RecordsRef::Inline(text) => Ok(text.clone()),
        RecordsRef::Path(path) => read(Path::new(path)),
    }
}

/// One line on a finished load step.
fn step_note(candidate: &str, report: &Report, rate: f64) -> String {
    let attainment = report
        .goodput
        .attainment
        .map_or_else(|| "-".to_owned(), |a| format!("{:.1} %", a * 100.0));
    let ttft = report
        .latency
        .ttft
        .p99
        .map_or_else(|| "-".to_owned(), |t| format!("{t:.2} s"));
    format!(
        "{candidate}: at {rate} req/s offered: goodput {:.3} req/s of throughput {:.3} req/s, attainment {attainment}, TTFT p99 {ttft} ({} of {} requests completed)",
        report.goodput.requests_per_s,
        report.throughput.requests_per_s,
        report.requests.completed,
        report.requests.scheduled
    )
}

fn decoding_of(p: &JobPayload) -> Decoding {
    Decoding {
        max_tokens: p.max_tokens,
        sampling: None,
    }
}

/// The stored configuration of a candidate: its study entry plus, for a GGUF file, what the
/// file says about itself.
fn candidate_config(c: &shortlist_study::study::CandidateRef) -> Result<Json, StudyRunError> {
    let source = expand_source(&c.source);
    let facts = match CandidateSpec::parse(&source)? {
        CandidateSpec::Gguf(path) => Some(read_gguf(&path, &c.name, &c.source)?),
        CandidateSpec::Endpoint { .. } => None,
    };
    Ok(json!({
        "name": c.name,
        "source": c.source,
        "price_per_device_hour": c.price_per_device_hour,
        "fallback": c.fallback,
        "device": "cpu",
        "gguf": facts,
    }))
}

fn fit_of(locked: &LockedStudy, facts: &GgufFacts) -> MemoryFit {
    let m = &locked.study.file().memory;
    fit(&FitInputs {
        weights_bytes: facts.weights_bytes,
        kv: facts.kv,
        context_tokens: m.context_tokens,
        concurrency: m.concurrency,
        device: m.device.clone(),
        device_memory_bytes: (m.device_memory_gib * 1024.0 * 1024.0 * 1024.0) as u64,
        usable_fraction: m.usable_fraction.unwrap_or(0.9),
        overhead_fraction: m.overhead_fraction.unwrap_or(0.1),
        max_devices: m.max_devices.unwrap_or(8),
        model_context_limit: facts.identity.context_limit,
    })
}

/// The quality metrics the disqualifiers may name, with the failing case ids as evidence.
fn quality_metrics(set: &EvalSet, results: &RunResults, values: &mut MetricValues) {
    let by_id: BTreeMap<&str, &shortlist_evals::results::CaseResult> =
        results.cases.iter().map(|r| (r.id.as_str(), r)).collect();
    // A disqualifier may rest on a judge check only once the judge's calibration is on record:
    // a case counts as failed here when a check other than an advisory judge check failed.
    let failed = |r: &shortlist_evals::results::CaseResult| {
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
                CheckKind::Refusal(r) => {
                    // The expected direction is private to shortlist-evals; its Debug form is
                    // the one public view of it.
                    if format!("{r:?}").contains("Answer") {
                        must_answer += 1;
                        if check_failed {
                            over.push(result.id.clone());
                        }
                    } else {
                        must_refuse += 1;
                        if check_failed {
                            under.push(result.id.clone());
                        }
                    }
                }
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

    #[test]
    fn rfc3339_of_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_950_000), "2026-11-29T11:00:00Z");
    }

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
                let r = shortlist_evals::results::score_case(case, Some(&response));
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

    #[test]
    fn sources_expand_home_and_models_dir() {
        let home = std::env::var("HOME").unwrap_or_default();
        assert_eq!(
            expand_source("gguf:~/m.gguf"),
            format!("gguf:{home}/m.gguf")
        );
        assert_eq!(expand_source("http://x:1#m"), "http://x:1#m");
        assert!(expand_source("gguf:${SHORTLIST_MODELS_DIR}/a.gguf").ends_with("/a.gguf"));
        assert!(!expand_source("gguf:${SHORTLIST_MODELS_DIR}/a.gguf").contains('$'));
    }
}
