//! What the service answers with: view structs that every front end renders as it likes (text,
//! JSON, HTML) without computing figures of its own.

use serde::Serialize;
use shortlist_study::record::{SelectionRecord, Verdict};
use shortlist_study::study::StudyFile;

use crate::jobs::JobKind;
use crate::progress::ProgressEvent;

/// What `create` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "kebab-case")]
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

impl Created {
    /// The study's name and version.
    pub fn name_version(&self) -> (&str, u32) {
        match self {
            Created::Saved { name, version }
            | Created::NewVersion { name, version, .. }
            | Created::Unchanged { name, version } => (name, *version),
        }
    }
}

/// A lock, made now or found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockView {
    pub name: String,
    pub version: u32,
    pub sha256: String,
    pub locked_at: String,
    /// Whether this call locked it.
    pub locked_now: bool,
}

/// Whether a study version is a draft or locked, and how far its runs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StudyState {
    Draft,
    /// Locked, never run.
    Locked,
    /// Jobs queued or running.
    Running,
    /// Every job of the latest generation finished (some may have failed).
    Done,
}

/// A stored candidate configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateView {
    pub name: String,
    /// The stored configuration (source, price, fallback, what its GGUF says about itself).
    pub stored: serde_json::Value,
    /// The latest record's verdict, if there is one.
    pub verdict: Option<Verdict>,
}

/// A study as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyView {
    pub name: String,
    pub version: u32,
    pub state: StudyState,
    pub lock_sha256: Option<String>,
    pub locked_at: Option<String>,
    pub study: StudyFile,
    pub candidates: Vec<CandidateView>,
    /// The newest generation, if it has been run.
    pub latest_generation: Option<u32>,
}

/// One version of a study, as the versions of a study are listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyVersionView {
    pub version: u32,
    /// The lock hash and time (RFC 3339); `None` for a draft.
    pub lock_sha256: Option<String>,
    pub locked_at: Option<String>,
}

/// One line of the study list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudySummaryView {
    pub name: String,
    pub version: u32,
    pub question: String,
    pub state: StudyState,
    pub lock_sha256: Option<String>,
    /// Each candidate with the verdict of its latest record.
    pub verdicts: Vec<(String, Option<Verdict>)>,
}

/// A job with its latest progress.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    pub id: i64,
    pub kind: JobKind,
    pub candidate: String,
    /// `queued`, `running`, `done`, `failed`.
    pub state: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub last_error: Option<String>,
    pub worker: Option<String>,
    pub progress: Option<ProgressEvent>,
    /// Why the job was cancelled, once it was (a running one stops at the end of its current
    /// case or load step).
    pub cancel_reason: Option<String>,
}

/// One generation of a study version: its jobs and the records made from it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationView {
    pub number: u32,
    /// `manual`, `schedule` or `api`.
    pub trigger: String,
    /// RFC 3339.
    pub created_at: String,
    pub jobs: Vec<JobView>,
    /// Candidates whose record of this generation is stored.
    pub records: Vec<String>,
    /// Each stored record's verdict, by candidate.
    pub verdicts: std::collections::BTreeMap<String, Verdict>,
    /// Runs of this generation with who executed them.
    pub runs: Vec<RunView>,
}

/// A run row with its executor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunView {
    pub id: i64,
    pub candidate: String,
    pub kind: String,
    pub label: String,
    pub state: String,
    pub error: Option<String>,
    pub worker: Option<String>,
    /// The machine fingerprint, in words.
    pub machine: Option<String>,
    pub code_version: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// Where a study version's runs stand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunProgress {
    pub study: String,
    pub version: u32,
    pub state: StudyState,
    /// The newest stored progress event when this was read: a follower asks for what came after.
    pub last_event_id: i64,
    /// Newest first.
    pub generations: Vec<GenerationView>,
    /// The generation accepted as this version's baseline, if one is.
    pub baseline: Option<BaselineView>,
}

/// An accepted baseline: the run later runs are checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BaselineView {
    pub generation: u32,
    /// Who accepted it (the worker or user name; `workbench` from the web).
    pub accepted_by: String,
    /// RFC 3339.
    pub accepted_at: String,
}

/// What asking for a run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRequested {
    pub study: String,
    pub version: u32,
    pub generation: u32,
    /// Jobs queued by this call.
    pub queued: usize,
    /// Whether an unfinished generation was found and is resumed instead of a new one.
    pub resumed: bool,
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
    /// Running jobs: each stops at the end of its current case or load step and fails with the
    /// reason; what it stored so far stays stored.
    pub stopping: usize,
}

/// A stored record with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordView {
    pub generation: u32,
    /// RFC 3339.
    pub stored_at: String,
    pub record: SelectionRecord,
}

/// Two candidates on the same cases.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairView {
    pub a: String,
    pub b: String,
    pub both_pass: u64,
    pub only_a: u64,
    pub only_b: u64,
    pub both_fail: u64,
    /// Exact two-sided McNemar p on the discordant pairs.
    pub p_value: f64,
}

/// One case across candidates.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseRow {
    pub id: String,
    pub category: String,
    /// Per candidate (in the comparison's order): `Some(passed)`, or `None` when not decided
    /// or not answered.
    pub outcomes: Vec<Option<bool>>,
    /// Per candidate: the case's wall time in its quality run, shared with the cases in flight
    /// beside it (`concurrency`).
    pub latencies_s: Vec<Option<f64>>,
    /// Per candidate: the most cases its quality run kept in flight while this one ran.
    pub concurrency: Vec<Option<u32>>,
    pub tokens: Vec<Option<u64>>,
    /// Per candidate: the smallest top-2 logit gap along its greedy answer, when told; below
    /// [`shortlist_evals::results::NEAR_TIE`] the outcome rests on a near-tie.
    pub gaps: Vec<Option<f64>>,
    /// Whether some candidate passed and another failed.
    pub disagreement: bool,
}

/// One column of a comparison: a candidate's record from one study version and generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Column {
    /// The candidate's name, with version and generation where the columns differ in them.
    pub label: String,
    pub candidate: String,
    pub version: u32,
    pub generation: u32,
}

/// What every column of a comparison was judged by (equal for all, or it is refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CriteriaView {
    /// The eval set's path and hash.
    pub evalset: String,
    /// The workload section, as canonical JSON (what columns must share to be compared).
    pub workload: String,
    /// The SLO, as canonical JSON.
    pub slo: String,
    /// The workload in words, for people (`WorkloadRef::describe`).
    pub workload_words: String,
    /// The SLO in words, for people (`Slo::describe`).
    pub slo_words: String,
}

/// Candidates side by side, from their records and their stored cases.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub study: String,
    /// The first column's version and generation.
    pub version: u32,
    pub generation: u32,
    pub lock_sha256: String,
    /// The columns' labels, in order.
    pub candidates: Vec<String>,
    pub columns: Vec<Column>,
    pub criteria: CriteriaView,
    /// The study's attainment target (the attainment line of the goodput chart: goodput =
    /// target × offered); `None` only where no study stands behind the view.
    pub attainment_target: Option<f64>,
    pub records: Vec<SelectionRecord>,
    pub pairs: Vec<PairView>,
    pub cases: Vec<CaseRow>,
}

/// One candidate's answer to a case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseAnswer {
    pub candidate: String,
    /// The stored result (output, outcome, every check's verdict and reason, judge transcripts),
    /// or `None` when the candidate has not answered it.
    pub result: Option<shortlist_evals::results::CaseResult>,
    /// The stored output text.
    pub output: Option<String>,
    /// The error outside the model, when the case failed that way.
    pub error: Option<String>,
}

/// A case with every candidate's answer, from one generation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseView {
    pub study: String,
    pub version: u32,
    pub generation: Option<u32>,
    pub id: String,
    pub category: String,
    pub system: Option<String>,
    /// `(role, content)` in order.
    pub messages: Vec<(String, String)>,
    pub tools: Vec<serde_json::Value>,
    /// The checks by name and kind.
    pub checks: Vec<(String, String)>,
    pub answers: Vec<CaseAnswer>,
}

/// A study version that uses an eval set or a candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyUse {
    pub study: String,
    pub version: u32,
    pub locked: bool,
    /// For a candidate: the verdict of its latest record in this study version.
    pub verdict: Option<Verdict>,
    /// For a candidate: the generation of that record.
    pub record_generation: Option<u32>,
}

/// One version of an eval set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalSetVersionView {
    pub version: u32,
    pub sha256: String,
    pub cases: usize,
    /// Cases per category, in the set's order.
    pub categories: Vec<(String, usize)>,
    pub description: Option<String>,
}

/// An eval set with its versions (oldest first).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalSetSummary {
    pub name: String,
    pub versions: Vec<EvalSetVersionView>,
    pub used_by: Vec<StudyUse>,
}

/// One case of an eval set as stored: its text and its checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalCaseView {
    pub id: String,
    pub category: String,
    pub system: Option<String>,
    /// `(role, content)` in order.
    pub messages: Vec<(String, String)>,
    /// The names of the tools offered.
    pub tools: Vec<String>,
    /// `(name, the check as canonical JSON)`.
    pub checks: Vec<(String, String)>,
}

/// One eval set version in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalSetView {
    pub name: String,
    pub version: u32,
    pub sha256: String,
    pub description: Option<String>,
    pub categories: Vec<(String, usize)>,
    /// Every version of this name: `(version, sha256)`.
    pub versions: Vec<(u32, String)>,
    pub used_by: Vec<StudyUse>,
    pub cases: Vec<EvalCaseView>,
}

/// What an import would store (or stored).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImportPreview {
    pub name: String,
    pub format: super::catalog::ImportFormat,
    pub sha256: String,
    pub cases: usize,
    pub categories: Vec<(String, usize)>,
    /// What had no faithful equivalent, item by item.
    pub unmapped: Vec<shortlist_evals::import::Unmapped>,
    /// Close but not identical mappings.
    pub notes: Vec<String>,
    /// The eval set as `shortlist.evalset.v1` YAML.
    pub yaml: String,
    /// `(version, newly stored)` once stored; `None` for a preview.
    pub stored: Option<(u32, bool)>,
}

/// A stored candidate in one line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateSummary {
    pub name: String,
    pub versions: u32,
    pub source: String,
    pub identity: String,
    pub used_by: Vec<StudyUse>,
}

/// One version of a candidate's configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateVersionView {
    pub version: u32,
    pub sha256: String,
    pub config: serde_json::Value,
}

/// A stored candidate in full.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateDetail {
    pub name: String,
    /// The latest configuration's identity, as labelled rows.
    pub identity: Vec<(String, String)>,
    pub versions: Vec<CandidateVersionView>,
    pub used_by: Vec<StudyUse>,
}

/// A run of some study, for the home page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecentRun {
    pub study: String,
    pub version: u32,
    pub generation: u32,
    pub candidate: String,
    pub kind: String,
    pub state: String,
    pub error: Option<String>,
    /// RFC 3339, when finished.
    pub finished_at: Option<String>,
}

/// The job queue as a whole: how many jobs in each state, how long the oldest queued one has
/// waited, and how many workers are alive to take them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueueView {
    pub queued: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(queued: u64, live_workers: usize) -> QueueView {
        QueueView {
            queued,
            running: 0,
            done: 0,
            failed: 0,
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
