//! The jobs a study generation queues per candidate, in the order they run — memory fit, quality
//! run, load run with its capacity sweep, record — and what each job's body needs. A body runs on
//! a thread of its own (model work never runs on an async runtime's workers) and reaches the store
//! through the runtime's handle.

pub(crate) mod fit;
pub(crate) mod load;
pub(crate) mod load_part;
pub(crate) mod quality;
pub(crate) mod record;
mod split;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use shortlist_evals::EvalSet;
use shortlist_store::Store;
use shortlist_store::content::ContentHash;
use shortlist_store::jobs::Job;
use shortlist_store::runs::{Executor, Run, RunKind, RunSpec};
use shortlist_study::study::{CandidateRef, LockedStudy};
use tokio::runtime::Handle;

use crate::candidate::CandidateSpec;
use crate::config::Config;
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::placement::Placement;
use crate::progress::ProgressSink;

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// Weights + KV cache at the study's context and concurrency against the memory budget.
    Fit,
    /// The eval set, case by case.
    Quality,
    /// The load run at the target rate, then the capacity sweep.
    Load,
    /// The sealed selection record from what the others stored.
    Record,
    /// One worker's share of a load step sent from several workers at once: queued by the load
    /// job for each split step, never by a run request.
    LoadPart,
}

impl JobKind {
    /// Every kind a run request queues, in the order a candidate's jobs run.
    pub const ALL: [JobKind; 4] = [
        JobKind::Fit,
        JobKind::Quality,
        JobKind::Load,
        JobKind::Record,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Fit => "fit",
            JobKind::Quality => "quality",
            JobKind::Load => "load",
            JobKind::Record => "record",
            JobKind::LoadPart => "load_part",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(s: &str) -> Option<JobKind> {
        JobKind::ALL
            .into_iter()
            .chain([JobKind::LoadPart])
            .find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn first_generation() -> u32 {
    1
}

/// What every job of one study generation carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPayload {
    pub study: String,
    pub version: u32,
    /// Jobs queued before generations existed belong to generation 1.
    #[serde(default = "first_generation")]
    pub generation: u32,
    pub candidate: String,
    /// Most tokens generated per eval case (greedy decoding).
    pub max_tokens: usize,
    /// The part of the eval set a quality job answers, when the run is split (case `i` belongs
    /// to shard `i % of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// A load job whose steps are each sent from several workers at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_split: Option<LoadSplit>,
    /// A `load_part` job: its share of one split step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_part: Option<LoadPart>,
}

/// How a load job sends each of its steps: from `workers` workers at once, each its share of the
/// arrival schedule (arrival `i` from worker `i mod workers`), from one agreed start instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadSplit {
    pub workers: u32,
    /// How long the load job waits for the other parts' workers to gather before it sends the
    /// step alone.
    pub gather_wait_s: u64,
}

/// One part of one split load step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPart {
    /// The gang (one try of the step) this part joins.
    pub gang: String,
    pub index: u32,
    pub of: u32,
    /// The step's offered rate (requests per second) and label.
    pub rate: f64,
    pub label: String,
    /// How long this part waits, once ready, for the step's start instant.
    pub gather_wait_s: u64,
}

/// One of `of` parts of a quality run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub of: u32,
}

impl Shard {
    /// Whether case number `i` (0-based, in the eval set's order) is this shard's.
    pub fn has(self, i: usize) -> bool {
        i % self.of.max(1) as usize == self.index as usize
    }
}

/// How a job body ended without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// Its work is done.
    Done(String),
    /// It was asked to stop between units of work: the job goes back to the queue as it is.
    Released,
}

/// Everything a job body needs.
#[derive(Debug)]
pub(crate) struct JobContext {
    pub store: Store,
    pub rt: Handle,
    pub config: Arc<Config>,
    pub job: Job,
    pub kind: JobKind,
    pub payload: JobPayload,
    pub executor: Executor,
    pub progress: ProgressSink,
    /// Set when the worker is asked to stop: drop what is under way (cases a local model has in
    /// flight, a load step), then release the job.
    pub stop: Arc<AtomicBool>,
    /// Set when the job was cancelled: stop the same way (the worker fails the job with the
    /// reason instead of releasing it).
    pub cancel: Arc<AtomicBool>,
}

impl JobContext {
    /// Run a store call (or any future) to its end from this job's thread.
    pub fn block<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Whether the worker was asked to stop, or the job was cancelled.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.cancel.load(Ordering::Relaxed)
    }

    /// Whether the worker was asked to stop or the job was cancelled, reading the job's row for a
    /// cancel its next heartbeat would bring (and keeping it): for a decision that must not wait
    /// for the heartbeat, such as whether a load step called off mid-way is sent again.
    pub fn stopping_now(&self) -> Result<bool, ServiceError> {
        if !self.stopping()
            && self
                .block(self.store.job(self.job.id))?
                .cancel_reason
                .is_some()
        {
            self.cancel.store(true, Ordering::Relaxed);
        }
        Ok(self.stopping())
    }

    /// Run `f` with a load generator's stop signal that turns true once the job is cancelled or
    /// its worker asked to stop (looked at every 100 ms): a load step ends then, not minutes
    /// later at its last arrival.
    pub fn with_stop_signal<T>(
        &self,
        f: impl FnOnce(shortlist_loadgen::run::StopReceiver) -> T,
    ) -> T {
        self.with_stop_signal_or(|| false, f)
    }

    /// As [`Self::with_stop_signal`], and the signal also turns true once `also()` does (asked
    /// every 500 ms, so that it may read the store): a part of a split load step stops when
    /// another part called the step off.
    pub fn with_stop_signal_or<T>(
        &self,
        also: impl Fn() -> bool + Sync,
        f: impl FnOnce(shortlist_loadgen::run::StopReceiver) -> T,
    ) -> T {
        const TICK: std::time::Duration = std::time::Duration::from_millis(100);
        const ALSO_EVERY: u32 = 5;
        let (send, stop) = shortlist_loadgen::run::stop_signal();
        let (worker_stop, cancel) = (Arc::clone(&self.stop), Arc::clone(&self.cancel));
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut tick = 0u32;
                while !done.load(Ordering::Relaxed) {
                    tick = tick.wrapping_add(1);
                    if worker_stop.load(Ordering::Relaxed)
                        || cancel.load(Ordering::Relaxed)
                        || (tick.is_multiple_of(ALSO_EVERY) && also())
                    {
                        let _ = send.send(true);
                        return;
                    }
                    std::thread::sleep(TICK);
                }
            });
            let out = f(stop);
            done.store(true, Ordering::Relaxed);
            out
        })
    }

    /// A name for messages: "quality job 12 of smollm2 (study s v1 generation 2)".
    pub fn what(&self) -> String {
        format!(
            "{} job {} of `{}` (study `{}` v{} generation {})",
            self.kind,
            self.job.id,
            self.payload.candidate,
            self.payload.study,
            self.payload.version,
            self.payload.generation
        )
    }

    /// The study, with its lock checked again (it must still hash to its lock).
    pub fn locked(&self) -> Result<LockedStudy, ServiceError> {
        Ok(self.block(
            self.store
                .verify_study(&self.payload.study, self.payload.version),
        )?)
    }

    /// The job's candidate in the study.
    pub fn candidate(&self, locked: &LockedStudy) -> Result<CandidateRef, ServiceError> {
        candidate_ref(locked, &self.payload.candidate)
    }

    /// The run of this job's generation and candidate of `kind` and `label`, created if new and
    /// marked running by this worker.
    pub fn start_run(&self, kind: RunKind, label: &str) -> Result<Run, ServiceError> {
        self.start_run_on(kind, label, None)
    }

    /// Where candidate `c` (parsed as `spec`) runs: `None` for an endpoint (it runs where it is
    /// served), else its `device`, the worker's `SHORTLIST_DEVICE`, or the default, opened.
    pub fn place(
        &self,
        c: &CandidateRef,
        spec: &CandidateSpec,
    ) -> Result<Option<Placement>, ServiceError> {
        place(c, spec, &self.config)
    }

    /// [`JobContext::start_run`], the run stamped with the device its local candidate runs on
    /// (the worker's fingerprint with the backend and GPU of `placement`, and for a quality run
    /// the compute threads quality runs use).
    pub fn start_run_on(
        &self,
        kind: RunKind,
        label: &str,
        placement: Option<&Placement>,
    ) -> Result<Run, ServiceError> {
        let mut executor = self.executor.clone();
        if let Some(placement) = placement
            && let Ok(mut machine) =
                serde_json::from_value::<MachineFingerprint>(executor.machine.clone())
        {
            if kind == RunKind::Quality {
                machine.threads = self.config.quality_threads;
            }
            executor.machine =
                serde_json::to_value(placement.stamp(machine)).unwrap_or(executor.machine);
        }
        let run = self.block(self.store.open_run(&RunSpec {
            study: self.payload.study.clone(),
            study_version: self.payload.version,
            generation: self.payload.generation,
            candidate: self.payload.candidate.clone(),
            kind,
            label: label.to_owned(),
        }))?;
        self.block(self.store.start_run(run.id, &executor))?;
        Ok(run)
    }
}

/// Where candidate `c` (parsed as `spec`) runs under `config`: `None` for an endpoint, else its
/// `device`, the worker's `SHORTLIST_DEVICE`, or the default, opened.
pub(crate) fn place(
    c: &CandidateRef,
    spec: &CandidateSpec,
    config: &Config,
) -> Result<Option<Placement>, ServiceError> {
    if matches!(spec, CandidateSpec::Endpoint { .. }) {
        return Ok(None);
    }
    let placement = Placement::resolve(&[
        (
            &format!("candidate `{}` device", c.name),
            c.device.as_deref(),
        ),
        ("SHORTLIST_DEVICE", config.device.as_deref()),
    ])?;
    Ok(Some(placement))
}

/// A candidate of a locked study by name.
pub(crate) fn candidate_ref(
    locked: &LockedStudy,
    name: &str,
) -> Result<CandidateRef, ServiceError> {
    locked
        .study
        .file()
        .candidates
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| {
            ServiceError::invalid(
                format!("study `{}`", locked.study.name()),
                format!("no candidate `{name}`"),
            )
        })
}

/// The eval set version a locked study pins, from the store (not from the working tree, which
/// may have moved on).
pub(crate) async fn stored_set(
    store: &Store,
    locked: &LockedStudy,
) -> Result<EvalSet, ServiceError> {
    let (what, yaml) = pinned_yaml(store, locked).await?;
    EvalSet::from_yaml(&locked.study.file().evalset.path, &yaml).map_err(|e| {
        ServiceError::Corrupt {
            what,
            why: e.to_string(),
        }
    })
}

/// The stored text of the eval set version a locked study pins, with what to call it in an
/// error (`the stored eval set SHA256`).
pub(crate) async fn pinned_yaml(
    store: &Store,
    locked: &LockedStudy,
) -> Result<(String, String), ServiceError> {
    let pinned = &locked.study.file().evalset;
    let hash = ContentHash::parse(&pinned.sha256)
        .ok_or_else(|| ServiceError::invalid("evalset.sha256", "not a SHA-256"))?;
    let stored = store.eval_set_by_hash(&hash).await?;
    Ok((
        format!("the stored eval set {}", pinned.sha256),
        stored.yaml,
    ))
}

/// Run the body of the job in `ctx`.
pub(crate) fn execute(ctx: &JobContext) -> Result<Finished, ServiceError> {
    match ctx.kind {
        JobKind::Fit => fit::run(ctx),
        JobKind::Quality => quality::run(ctx),
        JobKind::Load => load::run(ctx),
        JobKind::Record => record::run(ctx),
        JobKind::LoadPart => load_part::run(ctx),
    }
}
