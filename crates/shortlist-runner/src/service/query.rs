//! The service's queries: a study as stored, where a study's runs stand
//! (generations, jobs and their latest progress, runs with who executed them), progress events
//! and progress events after a point.

use std::collections::BTreeMap;

use shortlist_store::generations::GenerationSpan;
use shortlist_store::jobs::{Job, JobState};
use shortlist_store::progress::ProgressRow;
use shortlist_store::runs::{Run, RunKind};
use shortlist_store::studies::StoredStudy;
use shortlist_study::record::Verdict;
use shortlist_study::study::CandidateRef;

use super::views::{
    BaselineView, CandidateView, Ended, GenerationSummary, GenerationView, JobView, RunProgress,
    RunView, Shown, StudyState, StudyView,
};
use super::{StudyService, not_found};
use crate::error::ServiceError;
use crate::fingerprint::MachineFingerprint;
use crate::jobs::JobKind;
use crate::progress::{Phase, ProgressEvent};
use crate::time::rfc3339_ms;

/// Whether a stored candidate configuration is the one a study's candidate makes: the same
/// source as written, price, fallback and device (its GGUF facts are read from that source).
fn is_config_of(stored: &serde_json::Value, c: &CandidateRef) -> bool {
    stored["source"].as_str() == Some(c.source.as_str())
        && stored["price_per_device_hour"].as_f64() == Some(c.price_per_device_hour)
        && stored["fallback"].as_str() == c.fallback.as_deref()
        && stored.get("device").and_then(|d| d.as_str()) == c.device.as_deref()
}

pub(super) fn state_of(locked: bool, jobs: &[Job]) -> StudyState {
    if !locked {
        return StudyState::Draft;
    }
    let Some(latest) = jobs.iter().filter_map(|j| j.generation).max() else {
        return StudyState::Locked;
    };
    let running = jobs.iter().any(|j| {
        j.generation == Some(latest) && matches!(j.state, JobState::Queued | JobState::Running)
    });
    if running {
        StudyState::Running
    } else {
        StudyState::Done
    }
}

/// How the latest generation's jobs that failed for good ended: cancelled or failed.
pub(super) fn ended_of(jobs: &[Job]) -> Ended {
    let latest = jobs.iter().filter_map(|j| j.generation).max();
    let mut ended = Ended::default();
    for j in jobs
        .iter()
        .filter(|j| j.generation == latest && j.state == JobState::Failed)
    {
        if j.cancel_reason.is_some() {
            ended.cancelled += 1;
        } else {
            ended.failed += 1;
        }
    }
    ended
}

fn event_of(row: &ProgressRow) -> Result<ProgressEvent, ServiceError> {
    serde_json::from_value(row.event.clone()).map_err(|e| ServiceError::Corrupt {
        what: format!("table `progress_events`, row {}", row.id),
        why: e.to_string(),
    })
}

fn job_view(job: &Job, progress: Option<ProgressEvent>) -> Result<JobView, ServiceError> {
    let kind = JobKind::parse(&job.kind).ok_or_else(|| ServiceError::Corrupt {
        what: format!("table `jobs`, row {}", job.id),
        why: format!("unknown job kind `{}`", job.kind),
    })?;
    // A queued job whose latest event says it ended for good was queued again since (`study
    // retry`): that event is its earlier attempt's, not its progress now. (A failure that was
    // requeued for another attempt says so, `retry`, and stays: it is why the job waits.)
    let progress = progress.filter(|p| {
        !(job.state.as_str() == "queued" && p.phase == Phase::Failed && p.retry != Some(true))
    });
    Ok(JobView {
        id: job.id,
        kind,
        candidate: job.candidate.clone().unwrap_or_default(),
        state: job.state.as_str().to_owned(),
        attempts: job.attempts,
        max_attempts: job.max_attempts,
        last_error: job.last_error.clone(),
        worker: job.claimed_by.clone(),
        progress,
        cancel_reason: job.cancel_reason.clone(),
    })
}

fn run_view(run: &Run) -> RunView {
    let executor = run.executor.as_ref();
    RunView {
        id: run.id,
        candidate: run.candidate.clone(),
        kind: run.kind.as_str().to_owned(),
        label: run.label.clone(),
        state: run.state.as_str().to_owned(),
        cancelled: run.cancelled_at_ms.is_some(),
        error: run.error.clone(),
        worker: executor.map(|e| e.worker.clone()),
        machine: executor.map(|e| {
            serde_json::from_value::<MachineFingerprint>(e.machine.clone())
                .map_or_else(|_| e.machine.to_string(), |m| m.describe())
        }),
        code_version: executor.map(|e| e.code_version.clone()),
        started_at: run.started_at_ms.map(rfc3339_ms),
        finished_at: run.finished_at_ms.map(rfc3339_ms),
    }
}

impl StudyService {
    pub(super) async fn latest_verdict(
        &self,
        study: &str,
        version: u32,
        candidate: &str,
    ) -> Result<Option<Verdict>, ServiceError> {
        Ok(self
            .latest_record_verdict(study, version, candidate)
            .await?
            .map(|(verdict, _)| verdict))
    }

    /// The latest record's verdict and the generation it was made from.
    pub(super) async fn latest_record_verdict(
        &self,
        study: &str,
        version: u32,
        candidate: &str,
    ) -> Result<Option<(Verdict, u32)>, ServiceError> {
        match self.store.latest_record(study, version, candidate).await {
            Ok(r) => Ok(Some((r.record.verdict, r.generation))),
            Err(e) if not_found(&e) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A study version as stored, with each candidate's stored configuration (the version the
    /// study's candidate is) and latest verdict.
    pub async fn show(&self, name: &str, version: Option<u32>) -> Result<StudyView, ServiceError> {
        let version = self.version_of(name, version).await?;
        let stored = self.store.study(name, version).await?;
        let (latest_generation, jobs) = self.newest_jobs(name, version).await?;
        let (sha, at) = match &stored {
            StoredStudy::Draft(_) => (None, None),
            StoredStudy::Locked(l) => (Some(l.sha256.clone()), Some(l.locked_at.clone())),
        };
        let registered = self.store.list_candidates().await?;
        let mut candidates = Vec::new();
        for c in &stored.study().file().candidates {
            // The version the study's own candidate is, not the name's latest: registering the
            // name again with another source or price makes a version this study does not run.
            let mut config = serde_json::Value::Null;
            for v in registered.iter().rev().filter(|v| v.name == c.name) {
                let stored = match self.store.candidate(&c.name, Some(v.version)).await {
                    Ok(v) => v.config,
                    // Removed since the listing: not this study's version, then.
                    Err(e) if not_found(&e) => continue,
                    Err(e) => return Err(e.into()),
                };
                if is_config_of(&stored, c) {
                    config = stored;
                    break;
                }
            }
            let latest = self.latest_record_verdict(name, version, &c.name).await?;
            candidates.push(CandidateView {
                name: c.name.clone(),
                stored: config,
                verdict: latest.map(|(verdict, _)| verdict),
                record_generation: latest.map(|(_, generation)| generation),
            });
        }
        Ok(StudyView {
            name: name.to_owned(),
            version,
            state: state_of(sha.is_some(), &jobs),
            ended: ended_of(&jobs),
            lock_sha256: sha,
            locked_at: at,
            study: stored.study().file().clone(),
            candidates,
            latest_generation,
        })
    }

    /// A study version's newest generation that has jobs, and its jobs: all that its state
    /// ([`state_of`], [`ended_of`]) depends on.
    pub(super) async fn newest_jobs(
        &self,
        name: &str,
        version: u32,
    ) -> Result<(Option<u32>, Vec<Job>), ServiceError> {
        let latest = self.store.latest_job_generation(name, version).await?;
        let jobs = match latest {
            Some(latest) => {
                self.store
                    .jobs_of_study_in(name, version, GenerationSpan::only(latest))
                    .await?
            }
            None => Vec::new(),
        };
        Ok((latest, jobs))
    }

    /// The versions of study `name`, oldest first (a store read of the study rows alone).
    pub async fn study_versions(
        &self,
        name: &str,
    ) -> Result<Vec<super::views::StudyVersionView>, ServiceError> {
        let versions: Vec<_> = self
            .store
            .list_studies()
            .await?
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| super::views::StudyVersionView {
                version: s.version,
                lock_sha256: s.sha256,
                locked_at: s.locked_at,
            })
            .collect();
        if versions.is_empty() {
            return Err(shortlist_store::StoreError::NotFound {
                what: format!("study `{name}`"),
            }
            .into());
        }
        Ok(versions)
    }

    /// Each study's name and latest version, by name (a store read of the study rows alone).
    pub async fn latest_study_versions(&self) -> Result<Vec<(String, u32)>, ServiceError> {
        let mut latest: Vec<(String, u32)> = Vec::new();
        // Listed by name, then version: a name's last row is its latest version.
        for s in self.store.list_studies().await? {
            match latest.last_mut() {
                Some((name, version)) if *name == s.name => *version = s.version,
                _ => latest.push((s.name, s.version)),
            }
        }
        Ok(latest)
    }

    /// The names of the studies with at least one locked version, in order.
    pub async fn locked_study_names(&self) -> Result<Vec<String>, ServiceError> {
        let mut names: Vec<String> = self
            .store
            .list_studies()
            .await?
            .into_iter()
            .filter(|s| s.sha256.is_some())
            .map(|s| s.name)
            .collect();
        names.dedup();
        Ok(names)
    }

    /// Where a study version's runs stand: every generation (newest first) with its jobs and
    /// their latest progress, its runs and who executed them, and its stored records.
    pub async fn run_progress(
        &self,
        name: &str,
        version: Option<u32>,
    ) -> Result<RunProgress, ServiceError> {
        self.run_progress_shown(name, version, Shown::All).await
    }

    /// Where a study version's runs stand, the generations `shown` asks for in full (their
    /// jobs' progress and their runs read for those alone) and the others a line each.
    pub async fn run_progress_shown(
        &self,
        name: &str,
        version: Option<u32>,
        shown: Shown,
    ) -> Result<RunProgress, ServiceError> {
        let version = self.version_of(name, version).await?;
        // Read first: every event after it is news to whoever renders this view.
        let last_event_id = self.store.last_progress_id().await?;
        let stored = self.store.study(name, version).await?;
        let locked = matches!(stored, StoredStudy::Locked(_));
        let jobs = self.store.jobs_of_study(name, version).await?;
        let stored_generations = if locked {
            self.store.generations(name, version).await?
        } else {
            Vec::new()
        };
        let mut numbers: Vec<u32> = stored_generations.iter().map(|g| g.number).collect();
        numbers.extend(jobs.iter().filter_map(|j| j.generation));
        numbers.sort_unstable();
        numbers.dedup();
        numbers.reverse();
        // The generations read in full: the newest ones as one span, and one more alone.
        let spans: Vec<GenerationSpan> = match shown {
            Shown::All => vec![GenerationSpan::ALL],
            Shown::Newest { count, also } => {
                let newest = &numbers[..count.min(numbers.len())];
                let mut spans: Vec<GenerationSpan> = newest
                    .last()
                    .map(|&first| GenerationSpan {
                        first,
                        last: u32::MAX,
                    })
                    .into_iter()
                    .collect();
                if let Some(g) = also.filter(|g| !newest.contains(g)) {
                    spans.push(GenerationSpan::only(g));
                }
                spans
            }
        };
        let in_full = |g: u32| spans.iter().any(|s| s.first <= g && g <= s.last);
        let mut latest: BTreeMap<i64, ProgressEvent> = BTreeMap::new();
        let mut runs = Vec::new();
        for &span in &spans {
            for row in self.store.latest_progress_in(name, version, span).await? {
                latest.insert(row.job_id, event_of(&row)?);
            }
            if locked {
                runs.extend(self.store.runs_of_study_in(name, version, span).await?);
            }
        }
        let records = if locked {
            self.store.records_of_study(name, version).await?
        } else {
            Vec::new()
        };
        let mut generations: Vec<GenerationView> = Vec::new();
        let mut earlier: Vec<GenerationSummary> = Vec::new();
        for number in numbers {
            let g = stored_generations.iter().find(|g| g.number == number);
            let trigger = g.map_or("manual", |g| g.trigger.as_str()).to_owned();
            let created_at = g.map_or_else(String::new, |g| rfc3339_ms(g.created_at_ms));
            // Records are listed oldest first: a candidate's newest record of the generation wins.
            let verdicts: BTreeMap<String, Verdict> = records
                .iter()
                .filter(|r| r.generation == number)
                .map(|r| (r.candidate.clone(), r.record.verdict))
                .collect();
            let its_jobs = jobs.iter().filter(|j| j.generation == Some(number));
            if !in_full(number) {
                let mut counts: BTreeMap<String, usize> = BTreeMap::new();
                let mut cancellable = 0;
                for j in its_jobs {
                    let word = if j.state == JobState::Failed && j.cancel_reason.is_some() {
                        "cancelled"
                    } else {
                        j.state.as_str()
                    };
                    *counts.entry(word.to_owned()).or_default() += 1;
                    if j.state == JobState::Queued
                        || (j.state == JobState::Running && j.cancel_reason.is_none())
                    {
                        cancellable += 1;
                    }
                }
                earlier.push(GenerationSummary {
                    number,
                    trigger,
                    created_at,
                    jobs: counts,
                    cancellable,
                    verdicts,
                });
                continue;
            }
            let mut candidates: Vec<String> = records
                .iter()
                .filter(|r| r.generation == number)
                .map(|r| r.candidate.clone())
                .collect();
            let mut seen = std::collections::BTreeSet::new();
            candidates.retain(|c| seen.insert(c.clone()));
            generations.push(GenerationView {
                number,
                trigger,
                created_at,
                jobs: its_jobs
                    .map(|j| job_view(j, latest.get(&j.id).cloned()))
                    .collect::<Result<_, _>>()?,
                records: candidates,
                verdicts,
                runs: runs
                    .iter()
                    .filter(|r| r.generation == number)
                    .map(run_view)
                    .collect(),
            });
        }
        let baseline =
            self.store
                .baseline(name, version)
                .await?
                .map(|(generation, accepted_by, at_ms)| BaselineView {
                    generation,
                    accepted_by,
                    accepted_at: rfc3339_ms(at_ms),
                });
        Ok(RunProgress {
            study: name.to_owned(),
            version,
            state: state_of(locked, &jobs),
            ended: ended_of(&jobs),
            last_event_id,
            generations,
            earlier,
            baseline,
        })
    }

    /// How many of a study version's jobs wait in the queue, by generation (generations with
    /// none left out): from the jobs alone, without the records and progress a view reads.
    pub async fn queued_jobs(
        &self,
        name: &str,
        version: u32,
    ) -> Result<BTreeMap<u32, usize>, ServiceError> {
        let mut queued = BTreeMap::new();
        for j in self.store.jobs_of_study(name, version).await? {
            if let (JobState::Queued, Some(g)) = (j.state, j.generation) {
                *queued.entry(g).or_default() += 1;
            }
        }
        Ok(queued)
    }

    /// A study version's state and how its newest generation's unfinished jobs ended, from the
    /// study row and that generation's jobs alone: what a page following a run asks for every
    /// half second, whatever the study's history.
    pub async fn study_state(
        &self,
        name: &str,
        version: u32,
    ) -> Result<(StudyState, Ended), ServiceError> {
        let locked = matches!(
            self.store.study(name, version).await?,
            StoredStudy::Locked(_)
        );
        let (_, jobs) = self.newest_jobs(name, version).await?;
        Ok((state_of(locked, &jobs), ended_of(&jobs)))
    }

    /// A case of the study's eval set with every candidate's stored answer from the newest
    /// generation (or `generation`).
    pub async fn case(
        &self,
        name: &str,
        version: Option<u32>,
        case_id: &str,
        generation: Option<u32>,
    ) -> Result<super::views::CaseView, ServiceError> {
        let version = self.version_of(name, version).await?;
        let locked = self.store.verify_study(name, version).await?;
        let set = self.pinned_set(&locked).await?;
        let case = set.case(case_id).ok_or_else(|| {
            ServiceError::Store(shortlist_store::StoreError::NotFound {
                what: format!("case `{case_id}` in the eval set of study `{name}`"),
            })
        })?;
        let runs = self.store.runs_of_study(name, version).await?;
        let generation = generation.or_else(|| runs.iter().map(|r| r.generation).max());
        let request = crate::prompt::ChatRequest::from_case(case);
        let mut answers = Vec::new();
        for c in &locked.study.file().candidates {
            let run = runs.iter().find(|r| {
                Some(r.generation) == generation
                    && r.candidate == c.name
                    && r.kind == RunKind::Quality
            });
            let mut answer = super::views::CaseAnswer {
                candidate: c.name.clone(),
                result: None,
                output: None,
                error: None,
            };
            if let Some(run) = run {
                if let Some(stored) = self.store.case_result(run.id, case_id).await? {
                    answer.result = Some(serde_json::from_value(stored.scores).map_err(|e| {
                        ServiceError::Corrupt {
                            what: format!("table `case_results`, run {}, case `{case_id}`", run.id),
                            why: e.to_string(),
                        }
                    })?);
                    answer.output = Some(stored.output);
                }
                answer.error = self
                    .store
                    .case_error(run.id, case_id)
                    .await?
                    .map(|(attempts, error)| format!("{error} (after {attempts} attempts)"));
            }
            answers.push(answer);
        }
        Ok(super::views::CaseView {
            study: name.to_owned(),
            version,
            generation,
            id: case_id.to_owned(),
            category: case.category().as_string(),
            system: request.system,
            messages: request.messages,
            tools: request.tools,
            checks: case
                .checks()
                .iter()
                .map(|k| {
                    (
                        k.name().to_owned(),
                        format!("{:?}", k.kind())
                            .split('(')
                            .next()
                            .unwrap_or("")
                            .to_lowercase(),
                    )
                })
                .collect(),
            answers,
        })
    }

    /// The jobs running now, with their study, version and latest progress.
    pub async fn running_jobs(&self) -> Result<Vec<(String, u32, JobView)>, ServiceError> {
        let mut out = Vec::new();
        for job in self.store.jobs_in_state(JobState::Running).await? {
            let (Some(study), Some(version)) = (job.study.clone(), job.study_version) else {
                continue;
            };
            let latest = self.store.latest_progress(&study, version).await?;
            let progress = latest
                .iter()
                .find(|row| row.job_id == job.id)
                .map(event_of)
                .transpose()?;
            out.push((study, version, job_view(&job, progress)?));
        }
        Ok(out)
    }

    /// Progress events of a study version's jobs stored after event `after`, with their ids.
    pub async fn progress_after(
        &self,
        name: &str,
        version: u32,
        after: i64,
    ) -> Result<Vec<(i64, ProgressEvent)>, ServiceError> {
        self.store
            .progress_after(name, version, after, 500)
            .await?
            .iter()
            .map(|row| Ok((row.id, event_of(row)?)))
            .collect()
    }
}
