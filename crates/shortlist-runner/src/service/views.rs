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

/// A draft removed, and what is left of its study.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DraftDeleted {
    pub name: String,
    pub version: u32,
    /// The study's latest version left (`None`: the study is gone with its only draft).
    pub remaining: Option<u32>,
}

/// A candidate removed: every version of its configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CandidateRemoved {
    pub name: String,
    /// The versions removed, oldest first.
    pub versions: Vec<u32>,
}

/// One version of a stored eval set or trace removed, and what is left of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionRemoved {
    pub name: String,
    pub version: u32,
    pub sha256: String,
    /// The latest version left (`None`: the name is gone with it).
    pub remaining: Option<u32>,
}

impl VersionRemoved {
    /// "eval set `x` v2 removed; its latest version is now v1", with `what` the kind of thing.
    pub fn sentence(&self, what: &str) -> String {
        let left = match self.remaining {
            Some(v) => format!("its latest version is now v{v}"),
            None => format!("the {what} is gone with it"),
        };
        format!("{what} {} v{} removed; {left}", self.name, self.version)
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

/// How the latest generation's jobs that did not finish ended: a study `done` with failed or
/// cancelled jobs must not read as a clean finish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Ended {
    /// Jobs that failed for good, the cancelled ones apart.
    pub failed: u32,
    /// Jobs that were cancelled.
    pub cancelled: u32,
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
    /// The generation that latest record was made from.
    pub record_generation: Option<u32>,
}

/// A study as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyView {
    pub name: String,
    pub version: u32,
    pub state: StudyState,
    /// How the latest generation's unfinished jobs ended.
    pub ended: Ended,
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
    /// How the latest generation's unfinished jobs ended.
    pub ended: Ended,
    pub lock_sha256: Option<String>,
    /// Each candidate with the verdict of its latest record.
    pub verdicts: Vec<(String, Option<Verdict>)>,
}

/// A study on the studies list: its latest version, its number of versions, and the newest
/// earlier version that ran to the end while the latest has not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StudyListing {
    pub latest: StudySummaryView,
    pub versions: u32,
    pub standing: Option<StudySummaryView>,
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

impl JobView {
    /// The state in a person's words: a failed job that was cancelled is `cancelled` (stored as
    /// failed: it ended without its result), the others as stored.
    pub fn state_in_words(&self) -> &str {
        if self.state == "failed" && self.cancel_reason.is_some() {
            "cancelled"
        } else {
            &self.state
        }
    }
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
    /// Whether it ended because its job was cancelled (`state` is then `failed`, `error` the
    /// reason).
    pub cancelled: bool,
    pub error: Option<String>,
    pub worker: Option<String>,
    /// The machine fingerprint, in words.
    pub machine: Option<String>,
    pub code_version: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

impl RunView {
    /// The state in a person's words: a run that ended with its cancelled job is `cancelled`,
    /// the others as stored.
    pub fn state_in_words(&self) -> &str {
        if self.cancelled {
            "cancelled"
        } else {
            &self.state
        }
    }
}

/// Where a study version's runs stand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunProgress {
    pub study: String,
    pub version: u32,
    pub state: StudyState,
    /// How the latest generation's unfinished jobs ended.
    pub ended: Ended,
    /// The newest stored progress event when this was read: a follower asks for what came after.
    pub last_event_id: i64,
    /// Newest first: every generation, or those asked for in full ([`Shown`]).
    pub generations: Vec<GenerationView>,
    /// The other generations in a line each, newest first (only when some were not asked for
    /// in full).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub earlier: Vec<GenerationSummary>,
    /// The generation accepted as this version's baseline, if one is.
    pub baseline: Option<BaselineView>,
}

/// Which generations a view of a study's runs shows in full. A study run nightly has a
/// generation a day; its page shows the newest few with their jobs and runs, the others a line
/// each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// Every generation in full.
    All,
    /// The newest `count` in full, and `also` (any generation) with them.
    Newest { count: usize, also: Option<u32> },
}

/// A generation in a line: when and why it ran, how its jobs ended, its records' verdicts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationSummary {
    pub number: u32,
    /// `manual`, `schedule` or `api`.
    pub trigger: String,
    /// RFC 3339.
    pub created_at: String,
    /// How many of its jobs are in each state, in a person's words (`queued`, `running`,
    /// `done`, `failed`, `cancelled`); states with none are left out.
    pub jobs: std::collections::BTreeMap<String, usize>,
    /// Jobs a cancel would still stop: queued, or running and not yet told to stop.
    pub cancellable: usize,
    /// Each stored record's verdict, by candidate.
    pub verdicts: std::collections::BTreeMap<String, Verdict>,
}

impl GenerationSummary {
    /// Its jobs' counts in the order a person reads them: what still runs or waits, then how
    /// the others ended.
    pub fn job_counts(&self) -> Vec<(&str, usize)> {
        const ORDER: [&str; 5] = ["running", "queued", "done", "failed", "cancelled"];
        let mut counts: Vec<(&str, usize)> = ORDER
            .iter()
            .filter_map(|&state| Some((state, *self.jobs.get(state)?)))
            .collect();
        // A state this list does not know still counts.
        counts.extend(
            self.jobs
                .iter()
                .filter(|(state, _)| !ORDER.contains(&state.as_str()))
                .map(|(state, n)| (state.as_str(), *n)),
        );
        counts
    }
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
    /// What it changes in the stored set of its name: against the latest version stored
    /// before it (`None`: no set of that name was stored).
    pub changes: Option<super::evalset_diff::EvalSetDiffView>,
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

impl CandidateDetail {
    /// The latest configuration's source (`gguf:PATH`, `http://HOST:PORT#MODEL`, …); empty when
    /// it has none.
    pub fn source(&self) -> &str {
        self.versions
            .last()
            .and_then(|v| v.config["source"].as_str())
            .unwrap_or_default()
    }
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
    /// Whether it ended because its job was cancelled (`state` is then `failed`, `error` the
    /// reason).
    pub cancelled: bool,
    pub error: Option<String>,
    /// RFC 3339, when finished.
    pub finished_at: Option<String>,
}

pub use super::queue::{
    QueueView, RunCancelled, RunRetried, WorkerJob, WorkerState, WorkerView, WorkersView,
};
