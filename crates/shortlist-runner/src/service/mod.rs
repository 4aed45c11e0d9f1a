//! The application service: one async facade over one [`Store`] (one connection pool) that the
//! command line, the web app, the scheduler and workers all call. Typed commands (create, lock,
//! verify, run) and queries (a study, its runs' progress, a record, a comparison) return view
//! structs; front ends render them and hold no policy of their own.

mod catalog;
pub mod check;
mod compare;
mod create;
pub mod drift;
pub mod evalset_diff;
pub mod guided;
mod listing;
pub mod near;
pub mod night;
mod query;
mod queue;
mod register;
pub mod reproduce;
pub mod schedule;
pub mod study_diff;
pub mod traces;
pub mod views;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use shortlist_store::jobs::{DEFAULT_MAX_ATTEMPTS, Job, JobState, NewJob};
use shortlist_store::studies::StoredStudy;
use shortlist_store::{Store, StoreError};
use shortlist_study::study::LockedStudy;
use tokio::sync::broadcast;

pub use catalog::ImportFormat;
pub use compare::Pick;
pub use shortlist_store::generations::Trigger;
pub use shortlist_store::schedules::ScheduleWhat;

use crate::config::Config;
use crate::error::ServiceError;
use crate::jobs::{JobKind, JobPayload, LoadSplit, Shard};
use crate::progress::ProgressEvent;
use views::{LockView, RunRequested};

/// What a run is asked with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunParams {
    /// Most tokens generated per eval case (greedy decoding).
    pub max_tokens: usize,
    /// What asked for it.
    pub trigger: Trigger,
    /// Start a new generation even when the latest one is complete (a rerun); without it a
    /// complete study version is left as it is.
    pub again: bool,
    /// Queue a fresh record per candidate of the latest generation (records assembled again from
    /// its stored runs; earlier records stay stored).
    pub refresh_records: bool,
    /// Which measurements a new generation takes: the quality run, the load run, or both (the
    /// memory fit and the record always). A record without one says it was not measured.
    pub what: ScheduleWhat,
    /// Only these candidates (empty: all of the study's).
    pub candidates: Vec<String>,
    /// Quality shards per candidate: the cases split into this many jobs that idle workers
    /// claim side by side (1: one job).
    pub shards: u32,
    /// Workers that send each load step of an endpoint candidate together, each its share of
    /// the arrival schedule from one agreed start instant (1: the load job's worker alone). A
    /// GGUF candidate's steps are sent whole: it is served by the load job's own worker.
    pub load_workers: u32,
    /// How long a split step waits for its workers to gather before it is sent whole.
    pub gather_wait: Duration,
}

/// The most shards a quality run is split into.
pub const MAX_SHARDS: u32 = 64;

/// The most workers one load step is split across.
pub const MAX_LOAD_WORKERS: u32 = 16;

/// How long a split load step waits for its workers by default.
pub const GATHER_WAIT: Duration = Duration::from_secs(300);

impl Default for RunParams {
    fn default() -> Self {
        RunParams {
            max_tokens: 128,
            trigger: Trigger::Manual,
            again: false,
            refresh_records: false,
            what: ScheduleWhat::All,
            candidates: Vec::new(),
            shards: 1,
            load_workers: 1,
            gather_wait: GATHER_WAIT,
        }
    }
}

/// The service. Cheap to clone: clones share the pool.
#[derive(Debug, Clone)]
pub struct StudyService {
    store: Store,
    config: Arc<Config>,
    events: broadcast::Sender<ProgressEvent>,
    /// Serializes run requests in this process: two clicks at once must not both see "nothing
    /// queued" and queue a generation each.
    requests: Arc<tokio::sync::Mutex<()>>,
    /// Comparisons of sealed records, built once.
    comparisons: Arc<compare::CompareCache>,
    /// Stored traces described, by the SHA-256 of their bytes (a version's bytes never change).
    trace_facts: Arc<traces::FactsCache>,
    /// Stored eval sets read through, by the hash of their text (a version's text never changes).
    eval_sets: Arc<catalog::EvalSetCache>,
}

/// How long a run request holds its lease at most (a holder that died loses it then).
const REQUEST_LEASE_MS: i64 = 30_000;
/// How long a run request waits for another process's to finish.
const REQUEST_LEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl StudyService {
    /// Open the database the configuration names (migrating it) and serve over it.
    pub async fn connect(config: Config) -> Result<StudyService, ServiceError> {
        let store = Store::connect(&config.database_url).await?;
        Ok(StudyService::new(store, config))
    }

    /// The service over an open store.
    pub fn new(store: Store, config: Config) -> StudyService {
        let (events, _) = broadcast::channel(1024);
        StudyService {
            store,
            config: Arc::new(config),
            events,
            requests: Arc::new(tokio::sync::Mutex::new(())),
            comparisons: Arc::default(),
            trace_facts: Arc::default(),
            eval_sets: Arc::default(),
        }
    }

    /// The store (for front ends' own reads of what the service does not shape, e.g. health).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn config_arc(&self) -> Arc<Config> {
        Arc::clone(&self.config)
    }

    /// Progress events of jobs executed in this process, as they happen (the same events are
    /// stored at a bounded rate for other processes).
    pub fn subscribe(&self) -> broadcast::Receiver<ProgressEvent> {
        self.events.subscribe()
    }

    pub(crate) fn events(&self) -> broadcast::Sender<ProgressEvent> {
        self.events.clone()
    }

    /// The given version, or the latest.
    pub async fn version_of(&self, name: &str, version: Option<u32>) -> Result<u32, ServiceError> {
        match version {
            Some(v) => Ok(v),
            None => Ok(self.store.latest_study_version(name).await?),
        }
    }

    /// Lock a draft at `locked_at` (a locked one is returned as it is). What cannot run is
    /// refused here: a GGUF candidate whose file is gone.
    pub async fn lock(
        &self,
        name: &str,
        version: Option<u32>,
        locked_at: &str,
    ) -> Result<LockView, ServiceError> {
        let version = self.version_of(name, version).await?;
        match self.store.study(name, version).await? {
            StoredStudy::Locked(l) => Ok(LockView {
                name: name.to_owned(),
                version,
                sha256: l.sha256,
                locked_at: l.locked_at,
                locked_now: false,
            }),
            StoredStudy::Draft(s) => {
                create::check_candidates_exist(&self.config, &s)?;
                let locked = s.lock(locked_at);
                self.store.lock_study(&locked).await?;
                Ok(LockView {
                    name: name.to_owned(),
                    version,
                    sha256: locked.sha256,
                    locked_at: locked.locked_at,
                    locked_now: true,
                })
            }
        }
    }

    /// Recompute a locked study's hash from its stored content.
    pub async fn verify(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<LockedStudy, ServiceError> {
        let version = self.version_of(name, version).await?;
        Ok(self.store.verify_study(name, version).await?)
    }

    /// Ask for a run of a locked study version: the latest generation's missing jobs are queued
    /// (a resumed run), or, when it is complete and `again` is asked, a new generation. Two calls
    /// while a generation is unfinished queue nothing twice.
    pub async fn request_run(
        &self,
        name: &str,
        version: Option<u32>,
        params: &RunParams,
    ) -> Result<RunRequested, ServiceError> {
        if params.max_tokens == 0 {
            return Err(ServiceError::invalid(
                "max_tokens",
                "0: a case needs at least one generated token",
            ));
        }
        if !(1..=MAX_SHARDS).contains(&params.shards) {
            return Err(ServiceError::invalid(
                "shards",
                format!("{}: use 1 to {MAX_SHARDS}", params.shards),
            ));
        }
        if !(1..=MAX_LOAD_WORKERS).contains(&params.load_workers) {
            return Err(ServiceError::invalid(
                "load_workers",
                format!("{}: use 1 to {MAX_LOAD_WORKERS}", params.load_workers),
            ));
        }
        let version = self.version_of(name, version).await?;
        // One request at a time: in this process by the mutex, across processes (two
        // workbenches, a workbench and a scheduler) by a lease in the database.
        let _one_at_a_time = self.requests.lock().await;
        let lease = format!("run-request {name} v{version}");
        let holder = self.config.worker.clone();
        let deadline = std::time::Instant::now() + REQUEST_LEASE_WAIT;
        while !self
            .store
            .try_lease(&lease, &holder, REQUEST_LEASE_MS)
            .await?
        {
            if std::time::Instant::now() > deadline {
                return Err(ServiceError::Busy {
                    what: format!("study `{name}` v{version}"),
                    why: "another process has been requesting a run of it for 30 s".to_owned(),
                });
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let requested = self.request_run_leased(name, version, params).await;
        self.store.release_lease(&lease, &holder).await?;
        requested
    }

    async fn request_run_leased(
        &self,
        name: &str,
        version: u32,
        params: &RunParams,
    ) -> Result<RunRequested, ServiceError> {
        // Runs start only on locked studies whose lock still holds.
        let locked = self.store.verify_study(name, version).await?;
        for c in &params.candidates {
            crate::jobs::candidate_ref(&locked, c)?;
        }
        let jobs = self.store.jobs_of_study(name, version).await?;
        let mut generations = self.store.generations(name, version).await?;
        // Jobs queued before generations existed belong to generation 1.
        let latest_jobs = jobs.iter().filter_map(|j| j.generation).max();
        let latest = generations.iter().map(|g| g.number).max().max(latest_jobs);
        let unfinished = |g: u32| {
            jobs.iter().any(|j| {
                j.generation == Some(g) && matches!(j.state, JobState::Queued | JobState::Running)
            })
        };
        let (generation, resumed) = match latest {
            Some(g) if unfinished(g) || !params.again => (g, true),
            _ => {
                let g = self
                    .store
                    .new_generation(
                        name,
                        version,
                        params.trigger,
                        &json!({
                            "max_tokens": params.max_tokens,
                            "what": params.what.as_str(),
                            "candidates": params.candidates,
                        }),
                    )
                    .await?;
                generations.push(g.clone());
                (g.number, false)
            }
        };
        // A generation keeps what it was started with: which measurements, which candidates.
        let started = generations
            .iter()
            .find(|g| g.number == generation)
            .map(|g| g.params.clone())
            .unwrap_or_default();
        let mut effective = params.clone();
        if let Some(what) = started["what"].as_str().and_then(ScheduleWhat::parse) {
            effective.what = what;
        }
        if let Some(list) = started["candidates"].as_array() {
            effective.candidates = list
                .iter()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect();
        }
        let queued = self
            .queue_generation(&locked, generation, &jobs, &effective)
            .await?;
        Ok(RunRequested {
            study: name.to_owned(),
            version,
            generation,
            queued,
            resumed,
        })
    }

    /// Queue what generation `generation` lacks: per candidate, the missing kinds of job, each
    /// waiting for the one before it, then a record. With `refresh_records`, a fresh record for
    /// candidates whose jobs are all queued already.
    async fn queue_generation(
        &self,
        locked: &LockedStudy,
        generation: u32,
        jobs: &[Job],
        params: &RunParams,
    ) -> Result<usize, ServiceError> {
        let (name, version) = (locked.study.name(), locked.study.version());
        let mut queued = 0;
        let wanted = |k: JobKind| {
            !matches!(
                (params.what, k),
                (ScheduleWhat::Quality, JobKind::Load) | (ScheduleWhat::Load, JobKind::Quality)
            )
        };
        // Every quality job of the generation, of every candidate and every shard.
        let quality_group = format!("{name} v{version} g{generation} quality");
        for c in &locked.study.file().candidates {
            if !params.candidates.is_empty() && !params.candidates.contains(&c.name) {
                continue;
            }
            let mine: Vec<&Job> = jobs
                .iter()
                .filter(|j| {
                    j.generation == Some(generation) && j.candidate.as_deref() == Some(&c.name)
                })
                .collect();
            // A resumed generation keeps the parameters it was started with.
            let max_tokens = max_tokens_of(jobs, generation, &c.name).unwrap_or(params.max_tokens);
            let payload = JobPayload {
                study: name.to_owned(),
                version,
                generation,
                candidate: c.name.clone(),
                max_tokens,
                shard: None,
                load_split: None,
                load_part: None,
            };
            let missing: Vec<JobKind> = JobKind::ALL
                .into_iter()
                .filter(|k| *k != JobKind::Record && !mine.iter().any(|j| j.kind == k.as_str()))
                .filter(|k| wanted(*k))
                .collect();
            let kinds: Vec<JobKind> = if !mine.is_empty() && missing.is_empty() {
                if params.refresh_records {
                    vec![JobKind::Record]
                } else {
                    continue;
                }
            } else {
                missing
                    .into_iter()
                    .chain(std::iter::once(JobKind::Record))
                    .collect()
            };
            let mut previous = mine.last().map(|j| j.id);
            // The job after a sharded quality run waits for all of its shards.
            let mut waits_for_group = None;
            for kind in kinds {
                let shards = if kind == JobKind::Quality {
                    params.shards.max(1)
                } else {
                    1
                };
                let group = (kind == JobKind::Quality).then(|| quality_group.clone());
                if kind == JobKind::Record {
                    // A record pairs its candidate's cases with another candidate's: it waits
                    // for every quality run of the generation, whichever worker finishes first.
                    waits_for_group = Some(quality_group.clone());
                }
                let mut last = previous;
                for index in 0..shards {
                    let mut payload = payload.clone();
                    payload.shard = (shards > 1).then_some(Shard { index, of: shards });
                    if kind == JobKind::Load && params.load_workers > 1 {
                        payload.load_split = Some(LoadSplit {
                            workers: params.load_workers,
                            gather_wait_s: params.gather_wait.as_secs().max(1),
                        });
                    }
                    let id = self
                        .store
                        .enqueue(&NewJob {
                            kind: kind.as_str().to_owned(),
                            payload: serde_json::to_value(&payload)
                                .map_err(|e| ServiceError::invalid("job payload", e.to_string()))?,
                            study: name.to_owned(),
                            study_version: version,
                            generation,
                            candidate: c.name.clone(),
                            depends_on: previous,
                            max_attempts: DEFAULT_MAX_ATTEMPTS,
                            group: group.clone(),
                            waits_for_group: waits_for_group.clone(),
                            priority: 0,
                        })
                        .await?;
                    last = Some(id);
                    queued += 1;
                }
                previous = last;
                waits_for_group = group.filter(|_| shards > 1);
            }
        }
        Ok(queued)
    }

    /// Hand back jobs whose worker stopped answering `after` ago: `(requeued, failed)`.
    pub async fn requeue_stale(&self, after: Duration) -> Result<(u64, u64), ServiceError> {
        Ok(self.store.requeue_stale_jobs(after).await?)
    }

    /// Assemble (without storing) the record of `candidate` from generation `generation` of a
    /// locked study version: what the record job stores.
    pub async fn assemble_record(
        &self,
        name: &str,
        version: Option<u32>,
        candidate: &str,
        generation: u32,
        max_tokens: usize,
    ) -> Result<shortlist_study::record::SelectionRecord, ServiceError> {
        let version = self.version_of(name, version).await?;
        let locked = self.store.verify_study(name, version).await?;
        let c = crate::jobs::candidate_ref(&locked, candidate)?;
        let decoding = crate::candidate::Decoding {
            max_tokens,
            sampling: None,
        }
        .describe();
        crate::jobs::record::assemble(&self.store, &locked, &c, generation, &decoding).await
    }

    /// The latest stored record of a candidate (of `generation`, or the newest).
    pub async fn record(
        &self,
        study: &str,
        version: Option<u32>,
        candidate: &str,
        generation: Option<u32>,
    ) -> Result<views::RecordView, ServiceError> {
        let version = self.version_of(study, version).await?;
        let stored = match generation {
            Some(g) => {
                self.store
                    .record_of_generation(study, version, candidate, g)
                    .await
            }
            None => self.store.latest_record(study, version, candidate).await,
        };
        let stored = match stored {
            Ok(s) => s,
            Err(e) if not_found(&e) => {
                return Err(self.why_no_record(study, version, candidate, e).await);
            }
            Err(e) => return Err(e.into()),
        };
        Ok(views::RecordView {
            generation: stored.generation,
            stored_at: crate::time::rfc3339_ms(stored.created_at_ms),
            record: stored.record,
        })
    }
}

impl StudyService {
    /// Why no record was found, in the user's terms: no such study version, no such candidate
    /// in it (naming its candidates), a draft (runs start on locked versions), or — the
    /// store's own answer — no run has made one yet.
    async fn why_no_record(
        &self,
        study: &str,
        version: u32,
        candidate: &str,
        missing: StoreError,
    ) -> ServiceError {
        let stored = match self.store.study(study, version).await {
            Ok(s) => s,
            Err(e) => return e.into(),
        };
        let file = stored.study().file();
        if !file.candidates.iter().any(|c| c.name == candidate) {
            let names: Vec<&str> = file.candidates.iter().map(|c| c.name.as_str()).collect();
            return ServiceError::invalid(
                format!("study `{study}` v{version}"),
                format!(
                    "`{candidate}` is not one of its candidates ({})",
                    names.join(", ")
                ),
            );
        }
        if matches!(stored, StoredStudy::Draft(_)) {
            return ServiceError::invalid(
                format!("study `{study}` v{version}"),
                "a draft has no records: runs start only on locked versions",
            );
        }
        missing.into()
    }
}

/// Whether a store error says the row does not exist (never stored, or removed).
pub(crate) fn not_found(e: &StoreError) -> bool {
    matches!(e, StoreError::NotFound { .. } | StoreError::Removed { .. })
}

/// The most tokens a generation's jobs of `candidate` generate per case, as they were queued.
pub(super) fn max_tokens_of(jobs: &[Job], generation: u32, candidate: &str) -> Option<usize> {
    jobs.iter()
        .filter(|j| j.generation == Some(generation) && j.candidate.as_deref() == Some(candidate))
        .find_map(|j| j.payload["max_tokens"].as_u64())
        .map(|m| m as usize)
}
