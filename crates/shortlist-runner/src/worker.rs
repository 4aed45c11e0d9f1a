//! The one worker loop. [`Worker::try_execute_next_job`] is the single step: claim the next
//! claimable job, run its body on a thread of its own while this task keeps the job's heartbeat
//! fresh, then complete it, release it (asked to stop), or fail it by the error's class — a
//! transient failure goes back to the queue after a backoff while attempts are left, bad input
//! fails for good. `shortlist study run`, `shortlist serve` and `shortlist worker` call it in a
//! loop; tests call it until [`Outcome::Idle`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shortlist_store::jobs::{Job, Retry};
use shortlist_store::runs::Executor;

use crate::error::{ErrorClass, ServiceError};
use crate::fingerprint::MachineFingerprint;
use crate::jobs::{Finished, JobContext, JobKind, JobPayload, execute};
use crate::progress::{JobRef, Phase, ProgressSink};
use crate::service::StudyService;

/// How often a running job's heartbeat is refreshed.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Nothing was claimable.
    Idle,
    /// A job finished.
    Done {
        id: i64,
        kind: JobKind,
        candidate: String,
        note: String,
    },
    /// A job failed; `requeued` says whether it goes back to the queue (after its backoff).
    Failed {
        id: i64,
        kind: Option<JobKind>,
        candidate: String,
        why: String,
        class: ErrorClass,
        requeued: bool,
    },
    /// The worker was asked to stop: the job went back to the queue as it was.
    Released { id: i64 },
    /// The job was cancelled while it ran: it stopped and failed with the reason (what it
    /// stored so far stays stored).
    Cancelled { id: i64, reason: String },
}

/// A worker over the service.
#[derive(Debug, Clone)]
pub struct Worker {
    service: StudyService,
    name: String,
    executor: Executor,
    stop: Arc<AtomicBool>,
    /// The first retry's wait; doubled per attempt, at most [`MAX_BACKOFF`].
    backoff: Duration,
    /// How often the job in hand says it is alive, and the worker itself, idle or busy.
    heartbeat: Duration,
    /// When another worker's job counts as stale (its worker died): known once
    /// [`Worker::with_stale_after`] said it, and then such jobs are handed back while this
    /// worker is busy too.
    stale_after: Option<Duration>,
    /// When this worker last said it was alive (`None`: not yet announced).
    seen: Arc<Mutex<Option<Instant>>>,
    /// How long its loop sleeps while nothing is claimable.
    poll: Duration,
}

/// The longest wait before a retried job runs again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Worker {
    /// A worker named by the service's configuration.
    pub fn new(service: StudyService) -> Worker {
        let name = service.config().worker.clone();
        let machine = MachineFingerprint::current(service.config().threads);
        Worker {
            executor: Executor {
                worker: name.clone(),
                machine: serde_json::to_value(&machine).unwrap_or_default(),
                code_version: machine.code_version.clone(),
            },
            name,
            service,
            stop: Arc::new(AtomicBool::new(false)),
            backoff: Duration::from_secs(5),
            heartbeat: HEARTBEAT,
            stale_after: None,
            seen: Arc::new(Mutex::new(None)),
            poll: Duration::from_secs(1),
        }
    }

    /// This worker's loop sleeping `poll` while nothing is claimable (default 1 s): it says it
    /// is alive that seldom when idle, and pages wait three times that before calling it gone.
    pub fn with_poll(mut self, poll: Duration) -> Worker {
        self.poll = poll;
        self
    }

    /// This worker beating often enough for jobs to be judged stale after `stale_after` (a
    /// quarter of it, between 50 ms and [`HEARTBEAT`]): a live worker's job is never handed to
    /// another worker because its heartbeat came too seldom. While it runs a job, it hands back
    /// the stale jobs of dead workers every half `stale_after`, as its loop does when idle: a
    /// dead worker's job reads queued, not running, while every live worker is busy.
    pub fn with_stale_after(mut self, stale_after: Duration) -> Worker {
        self.heartbeat = (stale_after / 4).clamp(Duration::from_millis(50), HEARTBEAT);
        self.stale_after = Some(stale_after);
        self
    }

    /// This worker under another name (several workers in one process).
    pub fn with_name(mut self, name: impl Into<String>) -> Worker {
        self.name = name.into();
        self.executor.worker = self.name.clone();
        self.seen = Arc::new(Mutex::new(None));
        self
    }

    /// This worker with another first-retry backoff (tests use a short one).
    pub fn with_backoff(mut self, backoff: Duration) -> Worker {
        self.backoff = backoff;
        self
    }

    /// The worker's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The service it works for.
    pub fn service(&self) -> &StudyService {
        &self.service
    }

    /// Ask the worker to stop: the job in hand stops — the cases a local model has in flight and
    /// a load step under way are dropped, an endpoint's requests in flight awaited — and goes
    /// back to the queue; no new job is claimed.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether [`Worker::stop`] was called.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Say that this worker is alive, at most every half heartbeat (so that a heartbeat tick
    /// that comes a little early never skips one): announced with its host, machine and beat
    /// the first time (and again if its row was dropped), a beat afterwards. A database that
    /// refuses is logged, not fatal: the jobs' own heartbeats decide who holds a job.
    async fn beat(&self) {
        let last = *self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|at| at.elapsed() < self.heartbeat / 2) {
            return;
        }
        let store = self.service.store();
        let known = match last {
            Some(_) => store.worker_seen(&self.name).await,
            None => Ok(false),
        };
        let result = match known {
            Ok(true) => Ok(()),
            // Retired (or retiring): a job still finishing its unit does not bring it back.
            Ok(false) if self.stopping() => Ok(()),
            Ok(false) => {
                let host = self.executor.machine["host"]
                    .as_str()
                    .map_or_else(crate::config::hostname, str::to_owned);
                // Idle, it beats once a poll; busy, once a heartbeat.
                let beat = self.heartbeat.max(self.poll);
                store
                    .worker_started(&self.name, &host, &self.executor.machine, beat)
                    .await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now()),
            Err(e) => tracing::warn!(worker = %self.name, error = %e, "saying the worker is alive"),
        }
    }

    /// Say that this worker stopped for good (its process is ending): pages no longer count
    /// it among the workers that will take queued jobs.
    pub async fn retire(&self) {
        self.stop();
        if let Err(e) = self.service.store().worker_stopped(&self.name).await {
            tracing::warn!(worker = %self.name, error = %e, "saying the worker stopped");
        }
    }

    fn backoff_for(&self, attempts: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(16));
        (self.backoff * factor).min(MAX_BACKOFF)
    }

    /// Claim the next claimable job and run it to its end.
    pub async fn try_execute_next_job(&self) -> Result<Outcome, ServiceError> {
        if self.stopping() {
            return Ok(Outcome::Idle);
        }
        self.beat().await;
        let store = self.service.store().clone();
        let Some(job) = store.claim_next_job(&self.name).await? else {
            return Ok(Outcome::Idle);
        };
        let candidate = job.candidate.clone().unwrap_or_default();
        let kind = JobKind::parse(&job.kind);
        let payload: Result<JobPayload, _> = serde_json::from_value(job.payload.clone());
        let (kind, payload) = match (kind, payload) {
            (Some(kind), Ok(payload)) => (kind, payload),
            (kind, payload) => {
                let why = match (kind, payload) {
                    (None, _) => {
                        format!("table `jobs`, row {}: unknown kind `{}`", job.id, job.kind)
                    }
                    (_, Err(e)) => format!("table `jobs`, row {}: payload: {e}", job.id),
                    _ => unreachable!("both parsed"),
                };
                store
                    .fail_job(job.id, &self.name, &why, Retry::Never)
                    .await?;
                return Ok(Outcome::Failed {
                    id: job.id,
                    kind,
                    candidate,
                    why,
                    class: ErrorClass::Corrupt,
                    requeued: false,
                });
            }
        };
        let sink = ProgressSink::new(
            store.clone(),
            tokio::runtime::Handle::current(),
            JobRef {
                job: job.id,
                attempt: job.attempts,
                study: payload.study.clone(),
                version: payload.version,
                generation: payload.generation,
                candidate: payload.candidate.clone(),
                kind,
            },
            Some(self.service.events()),
        );
        sink.emit_async(sink.event(Phase::Started)).await;
        let ctx = JobContext {
            store: store.clone(),
            rt: tokio::runtime::Handle::current(),
            config: self.service.config_arc(),
            job: job.clone(),
            kind,
            payload,
            executor: self.executor.clone(),
            progress: sink,
            stop: Arc::clone(&self.stop),
            cancel: Arc::new(AtomicBool::new(false)),
        };
        let (result, ctx) = self.run_body(ctx, &job).await?;
        let progress = &ctx.progress;
        // Cancelled while it ran and stopped for it (not finished, not failed on its own): it
        // fails with the reason, and never goes back to the queue.
        let cancelled =
            ctx.cancel.load(Ordering::Relaxed) && matches!(result, Ok(Finished::Released));
        if cancelled {
            let reason = store
                .job(job.id)
                .await?
                .cancel_reason
                .unwrap_or_else(|| "cancelled".to_owned());
            store
                .fail_job(job.id, &self.name, &reason, Retry::Never)
                .await?;
            let mut event = progress.event(Phase::Failed);
            event.message = Some(reason.clone());
            event.retry = Some(false);
            event.cancelled = Some(true);
            progress.emit_async(event).await;
            return Ok(Outcome::Cancelled { id: job.id, reason });
        }
        match result {
            Ok(Finished::Done(note)) => {
                store.complete_job(job.id, &self.name).await?;
                let mut event = progress.event(Phase::Done);
                event.message = Some(note.clone());
                progress.emit_async(event).await;
                Ok(Outcome::Done {
                    id: job.id,
                    kind,
                    candidate,
                    note,
                })
            }
            Ok(Finished::Released) => {
                // Back to the queue — or failed with its reason, had it been cancelled meanwhile.
                store.release_job(job.id, &self.name).await?;
                Ok(Outcome::Released { id: job.id })
            }
            Err(e) => {
                let class = e.class();
                let why = e.to_string();
                let retry = if class.retried() {
                    Retry::After(self.backoff_for(job.attempts))
                } else {
                    Retry::Never
                };
                let state = store.fail_job(job.id, &self.name, &why, retry).await?;
                let requeued = state == shortlist_store::jobs::JobState::Queued;
                let mut event = progress.event(Phase::Failed);
                event.message = Some(why.clone());
                event.retry = Some(requeued);
                progress.emit_async(event).await;
                Ok(Outcome::Failed {
                    id: job.id,
                    kind: Some(kind),
                    candidate,
                    why,
                    class,
                    requeued,
                })
            }
        }
    }

    /// Run the job's body on its own thread, refreshing the heartbeat meanwhile. A panic in the
    /// body is caught and reported as an internal error (retried: it may not recur).
    async fn run_body(
        &self,
        ctx: JobContext,
        job: &Job,
    ) -> Result<(Result<Finished, ServiceError>, JobContext), ServiceError> {
        let (done, mut finished) = tokio::sync::oneshot::channel();
        let what = ctx.what();
        let cancel = Arc::clone(&ctx.cancel);
        std::thread::Builder::new()
            .name(format!("shortlist-job-{}", job.id))
            .spawn(move || {
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| execute(&ctx)))
                    .unwrap_or_else(|panic| {
                        let why = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                            .unwrap_or_else(|| "no message".to_owned());
                        Err(ServiceError::Panicked {
                            what: ctx.what(),
                            why,
                        })
                    });
                let _ = done.send((result, ctx));
            })
            .map_err(|source| ServiceError::Os {
                what: format!("starting the thread of {what}"),
                source,
            })?;
        let store = self.service.store();
        let mut beat = tokio::time::interval(self.heartbeat);
        beat.tick().await;
        let mut swept = Instant::now();
        loop {
            tokio::select! {
                result = &mut finished => {
                    return result.map_err(|_| ServiceError::Panicked {
                        what,
                        why: "the job's thread ended without an answer".to_owned(),
                    });
                }
                _ = beat.tick() => {
                    self.beat().await;
                    match store.heartbeat_job(job.id, &self.name).await {
                        Ok(None) => {}
                        // Cancelled: stop now.
                        Ok(Some(_)) => cancel.store(true, Ordering::Relaxed),
                        Err(e) => {
                            // Another worker took the job over (our heartbeat went stale):
                            // stop and let go.
                            tracing::warn!(job = job.id, error = %e, "heartbeat refused");
                            self.stop.store(true, Ordering::Relaxed);
                        }
                    }
                    if let Some(after) = self.stale_after
                        && swept.elapsed() >= after / 2
                    {
                        swept = Instant::now();
                        if let Err(e) = self.service.requeue_stale(after).await {
                            tracing::warn!(error = %e, "requeueing stale jobs");
                        }
                    }
                }
            }
        }
    }

    /// Execute jobs until none is claimable (or `max_jobs` have run, or a stop was asked),
    /// calling `on_outcome` after each. Returns the outcomes.
    pub async fn run_until_idle(
        &self,
        max_jobs: Option<usize>,
        mut on_outcome: impl FnMut(&Outcome),
    ) -> Result<Vec<Outcome>, ServiceError> {
        let mut outcomes = Vec::new();
        loop {
            if max_jobs.is_some_and(|m| outcomes.len() >= m) || self.stopping() {
                break;
            }
            let outcome = self.try_execute_next_job().await?;
            if outcome == Outcome::Idle {
                break;
            }
            on_outcome(&outcome);
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }

    /// Execute jobs until stopped, polling the queue every [`Worker::with_poll`] when it is
    /// empty and handing back stale jobs of dead workers (no heartbeat for `stale_after`). A
    /// database that is briefly unreachable is waited out.
    pub async fn run_forever(&self, stale_after: Duration) {
        let poll = self.poll;
        while !self.stopping() {
            if let Err(e) = self.service.requeue_stale(stale_after).await {
                tracing::warn!(error = %e, "requeueing stale jobs");
            }
            match self.try_execute_next_job().await {
                Ok(Outcome::Idle) => tokio::time::sleep(poll).await,
                Ok(outcome) => tracing::info!(?outcome, "job finished"),
                Err(e) => {
                    tracing::warn!(error = %e, "worker step failed");
                    tokio::time::sleep(poll).await;
                }
            }
        }
    }
}
