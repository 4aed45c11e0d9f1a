//! The load job: the candidate served on loopback HTTP (or its endpoint), the study's workload
//! replayed open loop at the target rate (run kind `load`, result `target`), then the capacity
//! sweep (run kind `sweep`, one result per offered rate) through the one capacity policy: the
//! study's `sweep_rps`, or a search from the target rate that doubles and then bisects. Each
//! finished step is stored with its raw records before the next starts; a resumed job skips the
//! stored steps and makes the same choices (the plan is a pure function of the steps so far).

use sha2::Digest as _;
use shortlist_loadgen::http::OpenAiTarget;
use shortlist_measure::analyze::Report;
use shortlist_store::runs::{LoadResult, RecordsRef, RunKind};
use shortlist_study::performance::CAPACITY_CONFIDENCE;
use shortlist_study::study::{LockedStudy, WorkloadKind};

use super::split::split_step;
use super::{Finished, JobContext};
use crate::candidate::CandidateSpec;
use crate::capacity::{
    LoadTarget, Plan, StepOptions, StepResult, StepVerdict, Sweep, analyze_stored, next_rate,
};
use crate::error::ServiceError;
use crate::placement::Placement;
use crate::progress::{LoadStepProgress, Phase};
use crate::serving::Served;
use crate::workload::study_workload;

/// Longest one request may take from its send to its last byte in a study's load steps. An
/// overloaded step ends in bounded time: what the server could not serve by then is a timeout,
/// counted against attainment like any other miss.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Bisection steps of a study's default capacity search, once the target is bracketed.
pub const STUDY_BISECTIONS: u32 = 2;

/// The stored label of a sweep step.
pub fn sweep_label(rate: f64) -> String {
    format!("rate-{rate}")
}

/// The text of stored records, inline or at the path they were written to.
pub(crate) fn records_text(records: &RecordsRef) -> Result<String, ServiceError> {
    match records {
        RecordsRef::Inline(text) => Ok(text.clone()),
        RecordsRef::Path(path) => std::fs::read_to_string(path).map_err(|e| ServiceError::File {
            path: path.into(),
            why: e.to_string(),
        }),
    }
}

/// The plan of a study's sweep.
pub fn study_plan(study: &shortlist_study::study::Study) -> Plan {
    match study.sweep_rps() {
        Some(rates) => Plan::Rates(rates),
        None => Plan::Search {
            start: study.target_rps(),
            bisections: STUDY_BISECTIONS,
        },
    }
}

/// The candidate's server and the sweep over it, started on first use: a job whose steps are
/// all stored starts none.
pub(super) struct Lazy<'a> {
    ctx: &'a JobContext,
    spec: CandidateSpec,
    source: String,
    workload: shortlist_loadgen::workload::Workload,
    slo: shortlist_measure::slo::Slo,
    host: String,
    /// Where a GGUF candidate runs; `None` for an endpoint.
    placement: Option<Placement>,
    state: Option<(Served, Sweep)>,
}

impl<'a> Lazy<'a> {
    /// The job's candidate and the study's workload and SLO (of `locked`, the job's study with
    /// its lock checked), nothing started yet.
    pub(super) fn new(ctx: &'a JobContext, locked: &LockedStudy) -> Result<Lazy<'a>, ServiceError> {
        let file = locked.study.file();
        let c = ctx.candidate(locked)?;
        let trace = if file.workload.kind == WorkloadKind::Trace {
            // By the hash the study pins: the study's own copy or the same trace stored under
            // another name. (By name, a later version of the study with another trace would
            // have replaced this one's.)
            let stored = match file
                .workload
                .sha256
                .as_deref()
                .and_then(shortlist_store::content::ContentHash::parse)
            {
                Some(hash) => ctx.block(ctx.store.trace_by_hash(&hash))?,
                None => ctx.block(ctx.store.workload(&format!("{}-workload", file.name), None))?,
            };
            let got = hex::encode(sha2::Sha256::digest(stored.body.as_bytes()));
            if let Some(pinned) = &file.workload.sha256
                && !pinned.eq_ignore_ascii_case(&got)
            {
                return Err(ServiceError::Corrupt {
                    what: format!("study `{}`: the stored workload trace", file.name),
                    why: format!("it hashes to {got}, the study pins {pinned}"),
                });
            }
            Some(stored.body)
        } else {
            None
        };
        let spec = CandidateSpec::parse(&ctx.config.expand_source(&c.source))?;
        let placement = ctx.place(&c, &spec)?;
        Ok(Lazy {
            ctx,
            spec,
            placement,
            source: c.source.clone(),
            workload: study_workload(&file.workload, trace.as_deref())?,
            slo: locked.study.slo().clone(),
            host: ctx.executor.machine["host"]
                .as_str()
                .unwrap_or("localhost")
                .to_owned(),
            state: None,
        })
    }

    /// Whether the candidate is an endpoint (every worker reaches the same server), so that its
    /// steps can be sent from several workers.
    pub(super) fn is_endpoint(&self) -> bool {
        matches!(self.spec, CandidateSpec::Endpoint { .. })
    }

    pub(super) fn sweep(&mut self) -> Result<(&Served, &mut Sweep), ServiceError> {
        if self.state.is_none() {
            let served = Served::start(
                &self.spec,
                &self.source,
                self.ctx.config.threads,
                self.placement.as_ref(),
            )?;
            // `ignore_eos`: each request generates the output length the workload names, as
            // vLLM-style servers (and ours) honour it; a model that would stop early must not
            // make the load lighter than the product's.
            let target = OpenAiTarget::new(&served.url, &served.model, true)
                .map_err(|e| ServiceError::invalid(&self.source, format!("the served URL: {e}")))?;
            let sweep = Sweep::new(
                LoadTarget::Http(target),
                self.workload.clone(),
                self.slo.clone(),
                StepOptions {
                    timeout: REQUEST_TIMEOUT,
                    retries: 0,
                    calibrate: true,
                    allow_client_bound: true,
                    host: self.host.clone(),
                    backend: Some(served.backend.clone()),
                },
            );
            self.state = Some((served, sweep));
        }
        let (served, sweep) = self.state.as_mut().expect("just started");
        Ok((served, sweep))
    }

    /// Run one step of run `run` with progress events: whole, or split across the payload's
    /// workers when the candidate is an endpoint. `None`: the job gave way to another, or was
    /// cancelled or asked to stop mid-step, and goes back to the queue (or fails, cancelled)
    /// with the step not stored.
    fn step(
        &mut self,
        run: i64,
        rate: f64,
        label: &str,
        index: u64,
        steps: u64,
    ) -> Result<Option<StepResult>, ServiceError> {
        let ctx = self.ctx;
        let split = ctx.payload.load_split.filter(|_| self.is_endpoint());
        let (served, sweep) = self.sweep()?;
        let backend = served.backend.clone();
        let mut event = ctx.progress.event(Phase::Running);
        event.message = Some(format!(
            "{}: load step `{label}`, {} requests at {rate} req/s, open loop{}",
            ctx.payload.candidate,
            sweep.workload().arrivals().len(),
            split.map_or_else(String::new, |s| format!(
                ", sent from {} workers",
                s.workers
            ))
        ));
        ctx.progress.emit(event);
        let observe = step_progress(ctx, label, rate, index, steps);
        let step = match split {
            Some(split) => match split_step(ctx, sweep, run, rate, label, split, observe)? {
                Some(step) => step,
                None => return Ok(None),
            },
            None => {
                let step = ctx.with_stop_signal(|stop| sweep.step(rate, label, stop, observe))?;
                // Cut short by a cancel or a stopping worker: not a measurement of the step,
                // which a resumed job sends again from its start.
                if step.stopped {
                    return Ok(None);
                }
                step
            }
        };
        if step.report.checks.unreachable.is_some() {
            let why = step.report.warnings.first().cloned().unwrap_or_default();
            return Err(ServiceError::Unreachable {
                what: format!("candidate `{}` ({backend})", ctx.payload.candidate),
                why,
            });
        }
        Ok(Some(step))
    }
}

/// Progress events of a step as it runs.
pub(super) fn step_progress<'a>(
    ctx: &'a JobContext,
    label: &'a str,
    rate: f64,
    index: u64,
    steps: u64,
) -> impl FnMut(shortlist_loadgen::run::RunProgress) + Send + 'a {
    move |p| {
        let mut event = ctx.progress.event(Phase::Running);
        event.load = Some(LoadStepProgress {
            label: label.to_owned(),
            offered_rps: rate,
            index,
            steps,
            finished: p.finished,
            failed: p.failed,
            total: p.total,
        });
        // Called inside the step's own runtime: the store write goes to the app's.
        ctx.progress.emit_detached(event);
    }
}

pub(crate) fn run(ctx: &JobContext) -> Result<Finished, ServiceError> {
    let locked = ctx.locked()?;
    let study = &locked.study;
    let c = ctx.candidate(&locked)?;
    let slo = study.slo().clone();
    let mut lazy = Lazy::new(ctx, &locked)?;
    let host = lazy.host.clone();
    if let Some(split) = ctx.payload.load_split
        && !lazy.is_endpoint()
    {
        let mut event = ctx.progress.event(Phase::Running);
        event.message = Some(format!(
            "{}: a GGUF candidate is served by this worker, so its load steps are sent whole (not from {} workers: each would load a server of its own)",
            c.name, split.workers
        ));
        ctx.progress.emit(event);
    }
    let target = study.target_rps();
    let attainment = study.attainment_target();
    let plan = study_plan(study);
    let planned = match &plan {
        Plan::Rates(r) => r.len() as u64 + 1,
        Plan::Search { bisections, .. } => 3 + u64::from(*bisections),
    };

    let load_run = ctx.start_run_on(RunKind::Load, "target", lazy.placement.as_ref())?;
    let stored = ctx.block(ctx.store.load_results(load_run.id))?;
    let target_report: Report = match stored.iter().find(|r| r.label == "target") {
        Some(r) => analyze_stored("target", &records_text(&r.records)?, &slo, &host)?,
        None => {
            let Some(step) = lazy.step(load_run.id, target, "target", 0, planned)? else {
                return Ok(Finished::Released);
            };
            store_step(ctx, load_run.id, "target", &step)?;
            step.report
        }
    };
    ctx.block(ctx.store.finish_run(load_run.id, Ok(())))?;
    if ctx.stopping() {
        return Ok(Finished::Released);
    }

    let sweep_run = ctx.start_run_on(RunKind::Sweep, "sweep", lazy.placement.as_ref())?;
    let stored = ctx.block(ctx.store.load_results(sweep_run.id))?;
    let verdict = |report: &Report, rate: f64| {
        let step = StepResult {
            offered_rps: rate,
            records: String::new(),
            report: report.clone(),
            histograms: serde_json::Value::Null,
            flagged_by_calibration: false,
            stopped: false,
        };
        StepVerdict::of(&step, attainment, CAPACITY_CONFIDENCE)
    };
    // The search starts from the load run at the target rate; given rates stand alone.
    let mut measured: Vec<(f64, StepVerdict)> = match plan {
        Plan::Search { .. } => vec![(target, verdict(&target_report, target))],
        Plan::Rates(_) => Vec::new(),
    };
    while let Some(rate) = next_rate(&plan, &measured) {
        let label = sweep_label(rate);
        let report = match stored.iter().find(|r| r.label == label) {
            Some(r) => analyze_stored(&label, &records_text(&r.records)?, &slo, &host)?,
            None => {
                if ctx.stopping() {
                    return Ok(Finished::Released);
                }
                let Some(step) =
                    lazy.step(sweep_run.id, rate, &label, measured.len() as u64, planned)?
                else {
                    return Ok(Finished::Released);
                };
                store_step(ctx, sweep_run.id, &label, &step)?;
                let mut event = ctx.progress.event(Phase::Running);
                event.message = Some(step_note(&c.name, &step.report, rate));
                ctx.progress.emit(event);
                step.report
            }
        };
        measured.push((rate, verdict(&report, rate)));
    }
    ctx.block(ctx.store.finish_run(sweep_run.id, Ok(())))?;
    Ok(Finished::Done(format!(
        "{}: load run and {} sweep step{} stored",
        c.name,
        measured.len(),
        if measured.len() == 1 { "" } else { "s" }
    )))
}

fn store_step(
    ctx: &JobContext,
    run: i64,
    label: &str,
    step: &StepResult,
) -> Result<(), ServiceError> {
    ctx.block(ctx.store.put_load_result(
        run,
        &LoadResult {
            label: label.to_owned(),
            offered_rps: Some(step.offered_rps),
            histograms: step.histograms.clone(),
            records: RecordsRef::Inline(step.records.clone()),
        },
    ))?;
    Ok(())
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
        "{candidate}: at {rate} req/s offered: goodput {:.3} req/s of throughput {:.3} req/s, attainment {attainment}, TTFT p99 {ttft} ({} of {} requests completed){}",
        report.goodput.requests_per_s,
        report.throughput.requests_per_s,
        report.requests.completed,
        report.requests.scheduled,
        if report.checks.client_bound {
            " — client-bound, excluded"
        } else {
            ""
        }
    )
}
