//! Schedules: a study run again at the instants of a cron expression in a time zone. Adding
//! checks everything first (the expression, the zone, the study and its candidates); a tick
//! ([`StudyService::tick`]) queues what is due at an instant — each due instant claimed by its
//! unique row, so several schedulers on one database never run it twice, and a tick missed while
//! nothing ran is caught up once (the others recorded as skipped).

use jiff::Timestamp;
use serde::Serialize;
use shortlist_store::schedules::{NewSchedule, ScheduleRow, ScheduleWhat, TickState};
use shortlist_study::schedule::{Cron, Schedule, due_at, next_due};

use shortlist_measure::interval::Interval;

pub use super::drift::Fingerprint;

use super::{RunParams, StudyService, Trigger};
use crate::error::ServiceError;
use crate::time::rfc3339_ms;

/// A schedule to add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleSpec {
    pub name: String,
    pub study: String,
    /// A pinned locked version (`None`: the latest locked version at each tick).
    pub version: Option<u32>,
    pub cron: String,
    /// IANA time zone (default `UTC`).
    pub tz: String,
    pub what: ScheduleWhat,
    /// Empty: all of the study's candidates.
    pub candidates: Vec<String>,
    /// Due only at instants after this (default: now).
    pub from: Option<Timestamp>,
}

/// A schedule as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduleView {
    pub name: String,
    pub study: String,
    /// `None`: the latest locked version.
    pub version: Option<u32>,
    pub cron: String,
    pub tz: String,
    pub what: String,
    pub candidates: Vec<String>,
    pub enabled: bool,
    /// RFC 3339: due only after this.
    pub from: String,
    /// RFC 3339: the last due instant handled (run, skipped or failed).
    pub last_due: Option<String>,
    /// RFC 3339: the next due instant after now (`None` when paused or never again).
    pub next_due: Option<String>,
}

/// One handled due instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TickView {
    pub schedule: String,
    /// RFC 3339.
    pub due: String,
    /// `started`, `skipped` or `failed`.
    pub state: String,
    pub study: String,
    pub version: Option<u32>,
    pub generation: Option<u32>,
    /// Why it failed, or which tick caught it up.
    pub detail: Option<String>,
}

/// One candidate's figures from one scheduled run (its record).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryPoint {
    /// RFC 3339: the due instant that started the run.
    pub due: String,
    pub candidate: String,
    pub version: u32,
    pub generation: u32,
    pub passed: u64,
    pub n: u64,
    pub pass_rate: f64,
    /// 95 % Wilson interval.
    pub lo: f64,
    pub hi: f64,
    pub ttft_p99_s: Option<f64>,
    pub attainment: Option<f64>,
    /// `None` when the run measured no load (a quality-only schedule).
    pub goodput_rps: Option<f64>,
    /// The 95 % intervals of attainment and goodput at the target rate and of TTFT p99 (`None`
    /// where the run has too few requests to bound them).
    pub attainment_interval: Option<Interval>,
    pub goodput_interval: Option<Interval>,
    pub ttft_p99_interval: Option<Interval>,
    pub verdict: shortlist_study::record::Verdict,
    /// The night's regression verdict against the previous night, once its run finished, and
    /// its evidence (counts, p, case ids, intervals, what changed).
    pub check: Option<String>,
    pub reasons: Vec<String>,
    /// What changed since the previous night (`nothing`, `machine`, `runtime`, `model`) and how.
    pub what_changed: Option<String>,
    pub changed: Vec<String>,
    /// The accepted baseline the night was also checked against, and what changed since it.
    pub baseline_generation: Option<u32>,
    pub baseline_changed: Option<Vec<String>>,
    /// The run's fingerprint.
    pub fingerprint: Fingerprint,
}

/// What a tick did: runs started and instants skipped (caught up by a later one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TickReport {
    pub started: Vec<TickView>,
    pub skipped: Vec<TickView>,
    pub failed: Vec<TickView>,
}

fn ms(t: Timestamp) -> i64 {
    t.as_millisecond()
}

fn at_ms(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH)
}

fn timing(row: &ScheduleRow) -> Result<Schedule, ServiceError> {
    let cron = Cron::parse(&row.cron).map_err(|e| ServiceError::Corrupt {
        what: format!("schedule `{}`", row.name),
        why: e.to_string(),
    })?;
    Schedule::new(cron, &row.tz).map_err(|e| ServiceError::Corrupt {
        what: format!("schedule `{}`", row.name),
        why: e.to_string(),
    })
}

impl StudyService {
    /// Add a schedule after checking it whole: the expression, the zone, the study (and the
    /// pinned version, which must be locked) and the candidates named.
    pub async fn add_schedule(&self, spec: &ScheduleSpec) -> Result<ScheduleView, ServiceError> {
        let cron = Cron::parse(&spec.cron)
            .map_err(|e| ServiceError::invalid("the cron expression", e.to_string()))?;
        Schedule::new(cron, &spec.tz)
            .map_err(|e| ServiceError::invalid("the time zone", e.to_string()))?;
        let version = self.version_of(&spec.study, spec.version).await?;
        let locked = match spec.version {
            Some(v) => self.store.verify_study(&spec.study, v).await?,
            None => match self.store.verify_study(&spec.study, version).await {
                Ok(l) => l,
                // The latest version may be a draft: an earlier locked one will run until it is
                // locked; a study never locked cannot be scheduled.
                Err(_) => self.latest_locked(&spec.study).await?,
            },
        };
        for c in &spec.candidates {
            crate::jobs::candidate_ref(&locked, c)?;
        }
        let from = spec.from.unwrap_or_else(Timestamp::now);
        self.store
            .add_schedule(&NewSchedule {
                name: &spec.name,
                study: &spec.study,
                study_version: spec.version,
                cron: &spec.cron,
                tz: &spec.tz,
                what: spec.what,
                candidates: &spec.candidates,
                from_ms: ms(from),
            })
            .await?;
        self.schedule_view(&spec.name).await
    }

    /// The latest locked version of a study.
    async fn latest_locked(
        &self,
        study: &str,
    ) -> Result<shortlist_study::study::LockedStudy, ServiceError> {
        let mut versions: Vec<u32> = self
            .store
            .list_studies()
            .await?
            .into_iter()
            .filter(|s| s.name == study && s.sha256.is_some())
            .map(|s| s.version)
            .collect();
        versions.sort_unstable();
        match versions.last() {
            Some(v) => Ok(self.store.verify_study(study, *v).await?),
            None => Err(ServiceError::invalid(
                format!("study `{study}`"),
                "no version is locked; lock one before scheduling it",
            )),
        }
    }

    /// A schedule with its last and next due instants.
    pub async fn schedule_view(&self, name: &str) -> Result<ScheduleView, ServiceError> {
        let row = self.store.schedule(name).await?;
        self.view_of(row).await
    }

    async fn view_of(&self, row: ScheduleRow) -> Result<ScheduleView, ServiceError> {
        let last = self.store.last_tick_ms(row.id).await?;
        let t = timing(&row)?;
        let after = Timestamp::now().max(at_ms(row.from_ms));
        let next = if row.enabled {
            next_due(&t, after)
        } else {
            None
        };
        Ok(ScheduleView {
            name: row.name,
            study: row.study,
            version: row.study_version,
            cron: row.cron,
            tz: row.tz,
            what: row.what.as_str().to_owned(),
            candidates: row.candidates,
            enabled: row.enabled,
            from: rfc3339_ms(row.from_ms),
            last_due: last.map(rfc3339_ms),
            next_due: next.map(|n| rfc3339_ms(ms(n))),
        })
    }

    /// Every schedule.
    pub async fn list_schedules(&self) -> Result<Vec<ScheduleView>, ServiceError> {
        let mut out = Vec::new();
        for row in self.store.schedules().await? {
            out.push(self.view_of(row).await?);
        }
        Ok(out)
    }

    /// Pause (`false`) or resume (`true`) a schedule. A resumed schedule catches up at most one
    /// missed instant, like any other.
    pub async fn set_schedule_enabled(
        &self,
        name: &str,
        enabled: bool,
    ) -> Result<ScheduleView, ServiceError> {
        self.store.set_schedule_enabled(name, enabled).await?;
        self.schedule_view(name).await
    }

    /// Remove a schedule (the runs it started stay).
    pub async fn remove_schedule(&self, name: &str) -> Result<(), ServiceError> {
        Ok(self.store.remove_schedule(name).await?)
    }

    /// A schedule's handled instants, newest first.
    pub async fn schedule_history(
        &self,
        name: &str,
        limit: u32,
    ) -> Result<Vec<TickView>, ServiceError> {
        let row = self.store.schedule(name).await?;
        Ok(self
            .store
            .ticks(row.id, limit)
            .await?
            .into_iter()
            .map(|t| TickView {
                schedule: row.name.clone(),
                due: rfc3339_ms(t.due_ms),
                state: t.state.as_str().to_owned(),
                study: row.study.clone(),
                version: t.study_version,
                generation: t.generation,
                detail: t.detail,
            })
            .collect())
    }

    /// The figures of every run a schedule started that has records, oldest first (one point
    /// per candidate and run; a run resumed by several ticks counts once), with each night's
    /// check once its run finished.
    pub async fn schedule_timeline(&self, name: &str) -> Result<Vec<HistoryPoint>, ServiceError> {
        let row = self.store.schedule(name).await?;
        // One read of all the ticks (a year of nights is a few hundred rows): each carries its
        // night's check once it was filed.
        let mut ticks = self.store.ticks(row.id, u32::MAX).await?;
        ticks.reverse();
        let mut seen = std::collections::BTreeSet::new();
        // A study version's records, read once however many runs it had.
        let mut by_version = std::collections::BTreeMap::new();
        let mut out = Vec::new();
        for t in ticks {
            let (Some(v), Some(g)) = (t.study_version, t.generation) else {
                continue;
            };
            if !seen.insert((v, g)) {
                continue;
            }
            if let std::collections::btree_map::Entry::Vacant(slot) = by_version.entry(v) {
                slot.insert(self.store.records_of_study(&row.study, v).await?);
            }
            let records = &by_version[&v];
            let due = rfc3339_ms(t.due_ms);
            let night: Option<serde_json::Value> = t
                .report
                .as_deref()
                .and_then(|report| serde_json::from_str(report).ok());
            for r in records.iter().filter(|r| r.generation == g) {
                let rec = &r.record;
                // The latest record of a candidate in this run (a refreshed one replaces).
                if records
                    .iter()
                    .any(|o| o.generation == g && o.candidate == r.candidate && o.id > r.id)
                {
                    continue;
                }
                let [attainment_interval, ttft_p99_interval, goodput_interval] =
                    super::drift::figures(rec).map(|f| f.3);
                let checked = night.as_ref().and_then(|n| {
                    n["previous"]["candidates"]
                        .as_array()?
                        .iter()
                        .find(|c| c["candidate"] == r.candidate.as_str())
                        .cloned()
                });
                let against_baseline = night.as_ref().and_then(|n| {
                    n["baseline"]["candidates"]
                        .as_array()?
                        .iter()
                        .find(|c| c["candidate"] == r.candidate.as_str())
                        .cloned()
                });
                let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
                out.push(HistoryPoint {
                    due: due.clone(),
                    candidate: r.candidate.clone(),
                    version: v,
                    generation: g,
                    passed: rec.quality.overall.passed,
                    n: rec.quality.overall.n,
                    pass_rate: rec.quality.overall.rate,
                    lo: rec.quality.overall.lo,
                    hi: rec.quality.overall.hi,
                    ttft_p99_s: rec
                        .performance
                        .latencies
                        .iter()
                        .find(|l| l.metric == "TTFT")
                        .and_then(|l| l.p99_s),
                    attainment: rec.performance.attainment,
                    goodput_rps: (rec.performance.attainment.is_some()
                        || !rec.performance.sweep.is_empty())
                    .then_some(rec.performance.goodput_rps),
                    attainment_interval,
                    goodput_interval,
                    ttft_p99_interval,
                    verdict: rec.verdict,
                    check: checked.as_ref().and_then(|c| text(&c["verdict"])),
                    reasons: checked
                        .as_ref()
                        .and_then(|c| c["reasons"].as_array().cloned())
                        .unwrap_or_default()
                        .iter()
                        .filter_map(text)
                        .collect(),
                    what_changed: checked.as_ref().and_then(|c| text(&c["what_changed"])),
                    changed: checked
                        .as_ref()
                        .and_then(|c| c["changed"].as_array().cloned())
                        .unwrap_or_default()
                        .iter()
                        .filter_map(text)
                        .collect(),
                    baseline_generation: against_baseline.as_ref().and_then(|c| {
                        c["reference_generation"]
                            .as_u64()
                            .and_then(|g| u32::try_from(g).ok())
                    }),
                    baseline_changed: against_baseline.as_ref().and_then(|c| {
                        Some(c["changed"].as_array()?.iter().filter_map(text).collect())
                    }),
                    fingerprint: Fingerprint::of(rec),
                });
            }
        }
        Ok(out)
    }

    /// Queue what is due at `now` for every enabled schedule: per schedule, the latest due
    /// instant since the last one handled is run and the earlier ones are recorded as skipped.
    /// Each instant is claimed first; one another scheduler claimed is left to it.
    pub async fn tick(&self, now: Timestamp, claimed_by: &str) -> Result<TickReport, ServiceError> {
        let mut report = TickReport::default();
        for row in self.store.schedules().await? {
            if !row.enabled {
                continue;
            }
            let t = timing(&row)?;
            let last = self.store.last_tick_ms(row.id).await?;
            let since = at_ms(last.unwrap_or(row.from_ms).max(row.from_ms));
            let due = due_at(&t, since, now);
            let Some(run_at) = due.run else { continue };
            let view = |due: Timestamp,
                        state: TickState,
                        run: Option<(u32, u32)>,
                        detail: Option<String>| TickView {
                schedule: row.name.clone(),
                due: rfc3339_ms(ms(due)),
                state: state.as_str().to_owned(),
                study: row.study.clone(),
                version: run.map(|(v, _)| v),
                generation: run.map(|(_, g)| g),
                detail,
            };
            for skipped in &due.skipped {
                if self
                    .store
                    .claim_tick(row.id, ms(*skipped), TickState::Skipped, claimed_by)
                    .await?
                {
                    // To the minute, in UTC, like every due instant the pages show.
                    let run_due = rfc3339_ms(ms(run_at));
                    let detail = format!(
                        "caught up by the run due {} UTC",
                        run_due.get(..16).unwrap_or(&run_due).replace('T', " ")
                    );
                    self.store
                        .finish_tick(
                            row.id,
                            ms(*skipped),
                            TickState::Skipped,
                            None,
                            Some(&detail),
                        )
                        .await?;
                    report
                        .skipped
                        .push(view(*skipped, TickState::Skipped, None, Some(detail)));
                }
            }
            if !self
                .store
                .claim_tick(row.id, ms(run_at), TickState::Started, claimed_by)
                .await?
            {
                continue;
            }
            let params = RunParams {
                trigger: Trigger::Schedule,
                again: true,
                what: row.what,
                candidates: row.candidates.clone(),
                ..RunParams::default()
            };
            let version = match row.study_version {
                Some(v) => Ok(v),
                None => self
                    .latest_locked(&row.study)
                    .await
                    .map(|l| l.study.version()),
            };
            let requested = match version {
                Ok(v) => self.request_run(&row.study, Some(v), &params).await,
                Err(e) => Err(e),
            };
            match requested {
                Ok(r) => {
                    let run = Some((r.version, r.generation));
                    let detail = r.resumed.then(|| {
                        "the previous generation was unfinished: resumed instead of a new one"
                            .to_owned()
                    });
                    self.store
                        .finish_tick(
                            row.id,
                            ms(run_at),
                            TickState::Started,
                            run,
                            detail.as_deref(),
                        )
                        .await?;
                    report
                        .started
                        .push(view(run_at, TickState::Started, run, detail));
                }
                Err(e) => {
                    let why = e.to_string();
                    self.store
                        .finish_tick(row.id, ms(run_at), TickState::Failed, None, Some(&why))
                        .await?;
                    report
                        .failed
                        .push(view(run_at, TickState::Failed, None, Some(why)));
                }
            }
        }
        Ok(report)
    }
}
