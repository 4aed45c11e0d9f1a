//! Typed progress of a job, persisted: every job writes [`ProgressEvent`]s to the store at a
//! bounded rate (phase changes always, counts at most every [`MIN_INTERVAL`]), so any process —
//! a page served by another process, another host's worker, the command line — follows a run
//! from the database alone. The same events go to in-process subscribers (the CLI's bars).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shortlist_store::Store;
use tokio::runtime::Handle;
use tokio::sync::broadcast;

use crate::jobs::JobKind;
use crate::time::now_ms;

/// The shortest gap between two stored count updates of one job.
pub const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Claimed by a worker, starting.
    Started,
    /// Working (counts below).
    Running,
    /// Finished.
    Done,
    /// Failed; `retry` says whether it goes back to the queue.
    Failed,
}

/// Cases of a quality run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaseCounts {
    /// Cases finished (stored), this attempt's and earlier ones'.
    pub done: u64,
    pub total: u64,
    pub passed: u64,
    pub failed: u64,
    /// Cases that failed outside the model (not scored).
    pub errors: u64,
}

/// The load step running now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadStepProgress {
    /// `target` or `rate-R`.
    pub label: String,
    pub offered_rps: f64,
    /// Steps finished before this one, and all steps planned (the sweep may add bisection
    /// steps).
    pub index: u64,
    pub steps: u64,
    /// Requests of this step finished (any status), failed, and in all.
    pub finished: u64,
    pub failed: u64,
    pub total: u64,
}

/// One progress event of one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    pub job: i64,
    /// The job's attempt (1 for the first claim; a retried or taken-over job counts on).
    #[serde(default)]
    pub attempt: u32,
    pub study: String,
    pub version: u32,
    pub generation: u32,
    pub candidate: String,
    pub kind: JobKind,
    pub phase: Phase,
    /// Unix milliseconds.
    pub at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cases: Option<CaseCounts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadStepProgress>,
    /// Estimated seconds to the end of the job, from its pace so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_s: Option<f64>,
    /// A sentence for people (a finished step's figures, a failure's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a failed job: whether it was requeued for another attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// For a failed job: it was cancelled (`message` says by whom and when), not broken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled: Option<bool>,
}

impl ProgressEvent {
    /// The share of the job done, where it can be told (cases or load step requests).
    pub fn fraction(&self) -> Option<f64> {
        if self.phase == Phase::Done {
            return Some(1.0);
        }
        if let Some(c) = &self.cases {
            return (c.total > 0).then(|| c.done as f64 / c.total as f64);
        }
        self.load.as_ref().map(|l| {
            let steps = l.steps.max(1) as f64;
            let within = if l.total > 0 {
                l.finished as f64 / l.total as f64
            } else {
                0.0
            };
            ((l.index as f64 + within) / steps).min(1.0)
        })
    }
}

/// The job a sink reports for.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRef {
    pub job: i64,
    pub attempt: u32,
    pub study: String,
    pub version: u32,
    pub generation: u32,
    pub candidate: String,
    pub kind: JobKind,
}

impl JobRef {
    /// An event of this job in `phase`, now, with nothing filled in.
    pub fn event(&self, phase: Phase) -> ProgressEvent {
        ProgressEvent {
            job: self.job,
            attempt: self.attempt,
            study: self.study.clone(),
            version: self.version,
            generation: self.generation,
            candidate: self.candidate.clone(),
            kind: self.kind,
            phase,
            at_ms: now_ms(),
            cases: None,
            load: None,
            eta_s: None,
            message: None,
            retry: None,
            cancelled: None,
        }
    }
}

/// Writes one job's events to the store (rate-limited) and to in-process subscribers.
#[derive(Debug)]
pub struct ProgressSink {
    store: Store,
    rt: Handle,
    job: JobRef,
    local: Option<broadcast::Sender<ProgressEvent>>,
    state: Mutex<SinkState>,
}

#[derive(Debug)]
struct SinkState {
    last_write: Option<Instant>,
    started: Instant,
    /// The fraction done when this attempt started (resumed work is not pace).
    start_fraction: Option<f64>,
    /// The last counts reported, carried into the final event.
    last_cases: Option<CaseCounts>,
    /// The last load step reported, carried into a failure's event (where it stopped).
    last_load: Option<LoadStepProgress>,
}

impl ProgressSink {
    /// A sink for `job`; `local` also receives every event.
    pub fn new(
        store: Store,
        rt: Handle,
        job: JobRef,
        local: Option<broadcast::Sender<ProgressEvent>>,
    ) -> ProgressSink {
        ProgressSink {
            store,
            rt,
            job,
            local,
            state: Mutex::new(SinkState {
                last_write: None,
                started: Instant::now(),
                start_fraction: None,
                last_cases: None,
                last_load: None,
            }),
        }
    }

    /// An event of this job in `phase`, to fill in and [`ProgressSink::emit`].
    pub fn event(&self, phase: Phase) -> ProgressEvent {
        self.job.event(phase)
    }

    /// Report `event` from a job's own thread (not from async code: see
    /// [`ProgressSink::emit_async`]): always to in-process subscribers; to the store when it is a
    /// phase change or carries a message, or when [`MIN_INTERVAL`] has passed since the last
    /// write. A store that cannot take it is logged, not fatal: progress is not a result.
    pub fn emit(&self, event: ProgressEvent) {
        if let Some((job, at_ms, json)) = self.prepare(event) {
            self.store_event(self.rt.block_on(self.store.put_progress(job, at_ms, &json)));
        }
    }

    /// [`ProgressSink::emit`] from code running inside another runtime (a load step's
    /// observer), where blocking on the application's runtime is not allowed: the write is made
    /// from a short-lived thread of its own and waited for, so events stay in order.
    pub fn emit_detached(&self, event: ProgressEvent) {
        if let Some((job, at_ms, json)) = self.prepare(event) {
            let stored = std::thread::scope(|scope| {
                scope
                    .spawn(|| self.rt.block_on(self.store.put_progress(job, at_ms, &json)))
                    .join()
            });
            match stored {
                Ok(result) => self.store_event(result),
                Err(_) => tracing::warn!(job, "the progress writer panicked"),
            }
        }
    }

    /// [`ProgressSink::emit`] from async code.
    pub async fn emit_async(&self, event: ProgressEvent) {
        if let Some((job, at_ms, json)) = self.prepare(event) {
            self.store_event(self.store.put_progress(job, at_ms, &json).await);
        }
    }

    fn store_event(&self, stored: Result<i64, shortlist_store::StoreError>) {
        if let Err(e) = stored {
            tracing::warn!(job = self.job.job, error = %e, "progress event not stored");
        }
    }

    /// Fill in the ETA, send to subscribers, and say whether (and what) to store.
    fn prepare(&self, mut event: ProgressEvent) -> Option<(i64, i64, serde_json::Value)> {
        let force = event.phase != Phase::Running || event.message.is_some();
        let write = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match event.cases {
                Some(c) => state.last_cases = Some(c),
                None if event.phase != Phase::Running => event.cases = state.last_cases,
                None => {}
            }
            // A finished load job's closing message says what it did; a failed (or cancelled)
            // one keeps the step it stopped in.
            match &event.load {
                Some(l) => state.last_load = Some(l.clone()),
                None if event.phase == Phase::Failed => event.load = state.last_load.clone(),
                None => {}
            }
            if let Some(fraction) = event.fraction() {
                let start = *state.start_fraction.get_or_insert(fraction);
                let elapsed = state.started.elapsed().as_secs_f64();
                // An estimate of the time left, while there is time left: not on a job that
                // ended.
                let going = matches!(event.phase, Phase::Started | Phase::Running);
                if going
                    && event.eta_s.is_none()
                    && fraction > start
                    && fraction < 1.0
                    && elapsed > 1.0
                {
                    event.eta_s = Some(elapsed * (1.0 - fraction) / (fraction - start));
                }
            }
            let due = state.last_write.is_none_or(|t| t.elapsed() >= MIN_INTERVAL);
            if force || due {
                state.last_write = Some(Instant::now());
                true
            } else {
                false
            }
        };
        if let Some(local) = &self.local {
            let _ = local.send(event.clone());
        }
        write.then(|| {
            let json = serde_json::to_value(&event).unwrap_or(serde_json::Value::Null);
            (event.job, event.at_ms, json)
        })
    }

    /// The job this sink reports for.
    pub fn job(&self) -> &JobRef {
        &self.job
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(kind: JobKind) -> JobRef {
        JobRef {
            job: 1,
            attempt: 1,
            study: "s".into(),
            version: 1,
            generation: 1,
            candidate: "c".into(),
            kind,
        }
    }

    fn event() -> ProgressEvent {
        let mut e = job(JobKind::Quality).event(Phase::Running);
        e.at_ms = 0;
        e.cases = Some(CaseCounts {
            done: 3,
            total: 4,
            ..CaseCounts::default()
        });
        e
    }

    #[test]
    fn events_round_trip_and_tell_their_fraction() {
        let e = event();
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "quality");
        assert_eq!(json["phase"], "running");
        let back: ProgressEvent = serde_json::from_value(json).unwrap();
        assert_eq!(back, e);
        assert_eq!(e.fraction(), Some(0.75));
        let mut load = event();
        load.cases = None;
        load.load = Some(LoadStepProgress {
            label: "rate-1".into(),
            offered_rps: 1.0,
            index: 1,
            steps: 4,
            finished: 20,
            failed: 0,
            total: 40,
        });
        assert_eq!(load.fraction(), Some(0.375));
    }

    /// A job that ends says where it stopped and estimates no time left: a failed quality run
    /// keeps its counts, a failed (or cancelled) load run its step, and neither an ETA.
    #[test]
    fn an_ended_job_keeps_where_it_stopped_and_no_estimate() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("p.db").display());
        let store = rt.block_on(Store::connect(&url)).unwrap();
        let sink = |kind| {
            let sink = ProgressSink::new(store.clone(), rt.handle().clone(), job(kind), None);
            // The attempt started a while ago, so that an estimate can be made.
            sink.state.lock().unwrap().started = Instant::now() - Duration::from_secs(10);
            sink
        };
        let json_of = |sink: &ProgressSink, e: ProgressEvent| sink.prepare(e).unwrap().2;

        let quality = sink(JobKind::Quality);
        let mut first = quality.event(Phase::Running);
        first.cases = Some(CaseCounts {
            done: 1,
            total: 4,
            ..CaseCounts::default()
        });
        json_of(&quality, first);
        let mut later = quality.event(Phase::Running);
        later.cases = Some(CaseCounts {
            done: 2,
            total: 4,
            ..CaseCounts::default()
        });
        later.message = Some("stored".into());
        let running = json_of(&quality, later);
        assert!(running["eta_s"].as_f64().unwrap() > 0.0, "{running}");
        let failed = json_of(&quality, quality.event(Phase::Failed));
        assert_eq!(failed["cases"]["done"], 2, "{failed}");
        assert!(failed.get("eta_s").is_none(), "{failed}");

        let load = sink(JobKind::Load);
        let step = |finished| LoadStepProgress {
            label: "target".into(),
            offered_rps: 0.25,
            index: 0,
            steps: 2,
            finished,
            failed: 0,
            total: 40,
        };
        for finished in [4, 12] {
            let mut e = load.event(Phase::Running);
            e.load = Some(step(finished));
            e.message = Some("step".into());
            json_of(&load, e);
        }
        let mut cancelled = load.event(Phase::Failed);
        cancelled.cancelled = Some(true);
        let stopped = json_of(&load, cancelled);
        assert_eq!(stopped["load"]["finished"], 12, "{stopped}");
        assert_eq!(stopped["cancelled"], true, "{stopped}");
        assert!(stopped.get("eta_s").is_none(), "{stopped}");
        // A finished load job says what it did in its message, not its last step's counts.
        let done = json_of(&load, load.event(Phase::Done));
        assert!(done.get("load").is_none(), "{done}");
    }
}
