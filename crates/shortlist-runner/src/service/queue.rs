//! The job queue seen whole: the workers a database has seen (who is alive, what each holds)
//! and whether queued jobs have one to take them; cancelling a study version's unfinished run;
//! queueing again the failed jobs of its newest generation. Its views are re-exported from
//! [`super::views`] with the others.

use serde::Serialize;
use shortlist_store::jobs::{Job, JobState, Retry};

use super::StudyService;
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::jobs::JobKind;
use crate::progress::{JobRef, Phase};
use crate::time::rfc3339_ms;

/// The job queue as a whole: how many jobs in each state, how long the oldest queued one has
/// waited, and how many workers are alive to take them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueView {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    /// Failed for good, the cancelled ones apart.
    pub failed: u64,
    /// Ended by a cancel.
    pub cancelled: u64,
    /// RFC 3339: when the oldest queued job was queued.
    pub oldest_queued_at: Option<String>,
    /// Seconds the oldest queued job has waited.
    pub oldest_waiting_s: Option<u64>,
    /// Workers alive now: not stopped, and seen within three of their beats.
    pub live_workers: usize,
}

impl QueueView {
    /// Jobs are queued and no worker is alive to take them: they wait until one starts.
    pub fn stranded(&self) -> bool {
        self.queued > 0 && self.live_workers == 0
    }

    /// The queue in one line: "3 queued (oldest waiting 2 min) · 1 running · 2 workers alive".
    pub fn summary(&self) -> String {
        let waited = self.oldest_waiting_s.map_or_else(String::new, |s| {
            format!(
                " (oldest waiting {})",
                crate::time::duration_in_words(s as f64)
            )
        });
        format!(
            "{} queued{waited} · {} running · {} worker{} alive",
            self.queued,
            self.running,
            self.live_workers,
            if self.live_workers == 1 { "" } else { "s" }
        )
    }

    /// What a page or a terminal says when [`QueueView::stranded`]: what waits, since when, and
    /// what starts it.
    pub fn stranded_note(&self) -> Option<String> {
        self.no_worker_note(self.queued, self.oldest_waiting_s)
    }

    /// The same for `queued` jobs of one study (`oldest_waiting_s`: the oldest's wait, where
    /// known): `None` unless some are queued and no worker is alive.
    pub fn no_worker_note(&self, queued: u64, oldest_waiting_s: Option<u64>) -> Option<String> {
        if queued == 0 || self.live_workers > 0 {
            return None;
        }
        let jobs = if queued == 1 {
            "1 job is".to_owned()
        } else {
            format!("{queued} jobs are")
        };
        let waited = oldest_waiting_s.map_or_else(String::new, |s| {
            format!(
                " (the oldest for {})",
                crate::time::duration_in_words(s as f64)
            )
        });
        Some(format!(
            "{jobs} queued{waited} and no worker is alive to take them: they start when one does \
             — `shortlist serve` with workers, or `shortlist worker` on a host that reaches this \
             database."
        ))
    }
}

/// What a worker is doing, as far as the database can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Alive and holding a job.
    Working,
    /// Alive, waiting for a claimable job.
    Idle,
    /// It stopped cleanly.
    Stopped,
    /// It stopped saying it is alive without saying it stopped (killed, crashed, or cut off from
    /// the database); a job it held is handed to another worker once its heartbeat is stale.
    Gone,
}

impl WorkerState {
    /// Its name in JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Working => "working",
            WorkerState::Idle => "idle",
            WorkerState::Stopped => "stopped",
            WorkerState::Gone => "gone",
        }
    }

    /// Every state, in the order pages list them.
    pub const ALL: [WorkerState; 4] = [
        WorkerState::Working,
        WorkerState::Idle,
        WorkerState::Stopped,
        WorkerState::Gone,
    ];
}

/// The job a worker holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerJob {
    pub id: i64,
    pub kind: String,
    pub study: String,
    pub version: u32,
    pub generation: u32,
    pub candidate: String,
}

/// A worker the database has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerView {
    pub name: String,
    pub host: String,
    /// Its machine in words ("Intel(R) Xeon(R) Processor, 2 cores (avx2, …), CPU backend"; the
    /// compute threads are each run's), or the host where the stored fingerprint is not one this
    /// version reads.
    pub machine: String,
    pub code_version: Option<String>,
    pub state: WorkerState,
    /// RFC 3339.
    pub started_at: String,
    pub seen_at: String,
    /// Seconds since it was last seen.
    pub seen_ago_s: u64,
    /// How often it says it is alive, in milliseconds.
    pub beat_ms: u64,
    pub job: Option<WorkerJob>,
}

/// The workers seen lately and the queue they take jobs from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkersView {
    /// RFC 3339: when this was read.
    pub at: String,
    pub queue: QueueView,
    /// Workers seen within [`WorkersView::WINDOW_HOURS`], alive ones first, then by when they
    /// were last seen.
    pub workers: Vec<WorkerView>,
}

impl WorkersView {
    /// How far back the list of workers reaches.
    pub const WINDOW_HOURS: u64 = 24;
}

/// What retrying a run's failed jobs did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRetried {
    pub study: String,
    pub version: u32,
    pub generation: u32,
    /// Jobs queued again: the failed (or cancelled) ones, and the generation's records, made
    /// again once they finish.
    pub requeued: usize,
}

/// What cancelling a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunCancelled {
    pub study: String,
    pub version: u32,
    pub generation: u32,
    /// What each cancelled job's error says.
    pub reason: String,
    /// Jobs failed at once: the queued ones, and running ones whose worker is gone or stopped.
    pub failed: usize,
    /// Running jobs: each stops at its worker's next heartbeat and fails with the reason; what
    /// it stored so far stays stored.
    pub stopping: usize,
}

impl StudyService {
    /// The queue as a whole and the workers seen lately: who is alive, what each holds, and
    /// whether queued jobs wait for a worker that is not there.
    pub async fn workers(&self) -> Result<WorkersView, ServiceError> {
        let now = crate::time::now_ms();
        let window_ms = i64::try_from(WorkersView::WINDOW_HOURS * 3_600_000).unwrap_or(i64::MAX);
        let rows = self
            .store
            .workers_seen_since(now.saturating_sub(window_ms))
            .await?;
        let counts = self.store.queue_counts().await?;
        let running = if counts.running > 0 {
            self.store.jobs_in_state(JobState::Running).await?
        } else {
            Vec::new()
        };
        let mut workers: Vec<WorkerView> = rows
            .iter()
            .map(|row| {
                let job = running
                    .iter()
                    .find(|j| j.claimed_by.as_deref() == Some(row.name.as_str()))
                    .map(|j| WorkerJob {
                        id: j.id,
                        kind: j.kind.clone(),
                        study: j.study.clone().unwrap_or_default(),
                        version: j.study_version.unwrap_or(0),
                        generation: j.generation.unwrap_or(0),
                        candidate: j.candidate.clone().unwrap_or_default(),
                    });
                let state = match (row.stopped_at_ms, row.alive_at(now), &job) {
                    (Some(_), _, _) => WorkerState::Stopped,
                    (None, false, _) => WorkerState::Gone,
                    (None, true, Some(_)) => WorkerState::Working,
                    (None, true, None) => WorkerState::Idle,
                };
                let machine: Option<MachineFingerprint> =
                    serde_json::from_value(row.machine.clone()).ok();
                WorkerView {
                    name: row.name.clone(),
                    host: row.host.clone(),
                    machine: machine
                        .as_ref()
                        .map_or_else(|| row.host.clone(), MachineFingerprint::describe_host),
                    code_version: machine.map(|m| m.code_version),
                    state,
                    started_at: rfc3339_ms(row.started_at_ms),
                    seen_at: rfc3339_ms(row.seen_at_ms),
                    seen_ago_s: u64::try_from(now.saturating_sub(row.seen_at_ms) / 1000)
                        .unwrap_or(0),
                    beat_ms: u64::try_from(row.beat_ms).unwrap_or(0),
                    job,
                }
            })
            .collect();
        let alive = |w: &WorkerView| matches!(w.state, WorkerState::Working | WorkerState::Idle);
        workers.sort_by_key(|w| !alive(w));
        let live_workers = workers.iter().filter(|w| alive(w)).count();
        Ok(WorkersView {
            at: rfc3339_ms(now),
            queue: QueueView {
                queued: counts.queued,
                running: counts.running,
                done: counts.done,
                failed: counts.failed,
                cancelled: counts.cancelled,
                oldest_queued_at: counts.oldest_queued_at_ms.map(rfc3339_ms),
                oldest_waiting_s: counts
                    .oldest_queued_at_ms
                    .map(|t| u64::try_from(now.saturating_sub(t) / 1000).unwrap_or(0)),
                live_workers,
            },
            workers,
        })
    }

    /// Cancel the unfinished generation of study `name` v`version` (default: the latest
    /// version): its queued jobs fail now, its running ones stop at their worker's next
    /// heartbeat and fail (those whose worker is gone or stopped fail now); every one's error is
    /// `cancelled {by} at {now}` (`by`: "from the workbench", "through the API", …). What was
    /// stored stays; records already made stay.
    /// Refused when nothing of it is queued or running.
    pub async fn cancel_run(
        &self,
        name: &str,
        version: Option<u32>,
        by: &str,
    ) -> Result<RunCancelled, ServiceError> {
        let version = self.version_of(name, version).await?;
        let jobs = self.store.jobs_of_study(name, version).await?;
        let open: Vec<&Job> = jobs
            .iter()
            .filter(|j| matches!(j.state, JobState::Queued | JobState::Running))
            .collect();
        if open.is_empty() {
            return Err(ServiceError::invalid(
                "run",
                format!(
                    "study `{name}` v{version} has no run to cancel: none of its jobs is queued or running"
                ),
            ));
        }
        let Some(generation) = open
            .iter()
            .filter(|j| j.cancel_reason.is_none())
            .filter_map(|j| j.generation)
            .max()
        else {
            return Err(ServiceError::invalid(
                "run",
                format!(
                    "the run of study `{name}` v{version} is being cancelled already: {} at its worker's next heartbeat",
                    if open.len() == 1 {
                        "its running job stops".to_owned()
                    } else {
                        format!("its {} running jobs stop", open.len())
                    }
                ),
            ));
        };
        let reason = format!("cancelled {by} at {}", crate::time::now_rfc3339());
        let mut done = self
            .store
            .cancel_jobs(name, version, generation, &reason)
            .await?;
        // A running job whose worker is gone (or stopped) has nobody to hear of it until another
        // worker hands stale jobs back: it fails now, in that worker's name.
        let workers = self.workers().await?.workers;
        let mut held_by_nobody = Vec::new();
        for id in &done.stopping {
            let Some(holder) = jobs
                .iter()
                .find(|j| j.id == *id)
                .and_then(|j| j.claimed_by.as_deref())
            else {
                continue;
            };
            let dead = workers.iter().any(|w| {
                w.name == holder && matches!(w.state, WorkerState::Gone | WorkerState::Stopped)
            });
            if dead
                && self
                    .store
                    .fail_job(*id, holder, &reason, Retry::Never)
                    .await
                    .is_ok()
            {
                held_by_nobody.push(*id);
            }
        }
        done.stopping.retain(|id| !held_by_nobody.contains(id));
        done.failed.extend(held_by_nobody);
        // The jobs failed now say so in their progress, as a worker's failure would: pages
        // following the run see them end.
        for job in jobs.iter().filter(|j| done.failed.contains(&j.id)) {
            let Some(kind) = JobKind::parse(&job.kind) else {
                continue;
            };
            let mut event = JobRef {
                job: job.id,
                attempt: job.attempts,
                study: name.to_owned(),
                version,
                generation,
                candidate: job.candidate.clone().unwrap_or_default(),
                kind,
            }
            .event(Phase::Failed);
            event.message = Some(reason.clone());
            event.retry = Some(false);
            event.cancelled = Some(true);
            let json = serde_json::to_value(&event)
                .map_err(|e| ServiceError::invalid("progress event", e.to_string()))?;
            self.store.put_progress(job.id, event.at_ms, &json).await?;
            let _ = self.events.send(event);
        }
        Ok(RunCancelled {
            study: name.to_owned(),
            version,
            generation,
            reason,
            failed: done.failed.len(),
            stopping: done.stopping.len(),
        })
    }

    /// Queue again the failed (or cancelled) jobs of the newest generation of study `name`
    /// v`version`, in the same generation: a quality run goes on from the cases it stored, and
    /// the generation's records are made again once the jobs finish. Refused while the
    /// generation still runs, and when none of its jobs failed.
    pub async fn retry_run(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<RunRetried, ServiceError> {
        let version = self.version_of(name, version).await?;
        // Runs start only on locked studies whose lock still holds.
        self.store.verify_study(name, version).await?;
        let jobs = self.store.jobs_of_study(name, version).await?;
        let Some(generation) = jobs.iter().filter_map(|j| j.generation).max() else {
            return Err(ServiceError::invalid(
                "run",
                format!("study `{name}` v{version} has not run yet: nothing to retry"),
            ));
        };
        let mine = || jobs.iter().filter(|j| j.generation == Some(generation));
        if mine().any(|j| matches!(j.state, JobState::Queued | JobState::Running)) {
            return Err(ServiceError::invalid(
                "run",
                format!(
                    "generation {generation} of study `{name}` v{version} is still running: let it finish, or cancel it first"
                ),
            ));
        }
        let requeued = self
            .store
            .retry_failed_jobs(name, version, generation, &[JobKind::Record.as_str()])
            .await?;
        if requeued.is_empty() {
            return Err(ServiceError::invalid(
                "run",
                format!(
                    "no job of generation {generation} of study `{name}` v{version} failed: nothing to retry (Run again starts a new generation)"
                ),
            ));
        }
        Ok(RunRetried {
            study: name.to_owned(),
            version,
            generation,
            requeued: requeued.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(queued: u64, live_workers: usize) -> QueueView {
        QueueView {
            queued,
            running: 0,
            done: 0,
            failed: 0,
            cancelled: 0,
            oldest_queued_at: None,
            oldest_waiting_s: (queued > 0).then_some(420),
            live_workers,
        }
    }

    #[test]
    fn queued_jobs_are_stranded_only_without_a_live_worker() {
        assert!(queue(3, 0).stranded());
        assert!(!queue(3, 1).stranded());
        assert!(!queue(0, 0).stranded());
        assert_eq!(queue(0, 0).stranded_note(), None);
        assert_eq!(queue(3, 2).stranded_note(), None);
        assert_eq!(
            queue(3, 1).summary(),
            "3 queued (oldest waiting 7 min) · 0 running · 1 worker alive"
        );
        assert_eq!(
            queue(0, 2).summary(),
            "0 queued · 0 running · 2 workers alive"
        );
        let note = queue(3, 0).stranded_note().unwrap();
        assert!(
            note.starts_with("3 jobs are queued (the oldest for 7 min) and no worker is alive"),
            "{note}"
        );
        // One study's share of the queue, without a wait it does not know.
        let note = queue(3, 0).no_worker_note(1, None).unwrap();
        assert!(note.starts_with("1 job is queued and no worker"), "{note}");
        assert_eq!(queue(3, 1).no_worker_note(1, None), None);
        assert_eq!(queue(3, 0).no_worker_note(0, None), None);
    }
}
