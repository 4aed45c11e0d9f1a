//! One load step sent by several workers at once (`--load-workers N`), from the load job's side:
//! it sends part 0, queues the other parts as `load_part` jobs, fixes the start once every part
//! is ready, merges their raw records, and calls the step off for every part when it is
//! cancelled or its worker stops.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use shortlist_store::jobs::{JobState, NewJob};

use super::load::REQUEST_TIMEOUT;
use super::{JobContext, JobKind, LoadPart, LoadSplit};
use crate::capacity::{StepPart, StepResult, Sweep, analyze_step, flagged_by_calibration};
use crate::error::ServiceError;
use crate::progress::Phase;
use crate::time::{at_ms, now_ms};

/// From the instant every part is ready to the start they agree on: time for each worker to see
/// it before it passes.
const START_LEAD: Duration = Duration::from_millis(1500);

/// Tries of a split step whose parts did not all come back (a worker died mid-step).
const SPLIT_TRIES: u32 = 3;

/// How often a waiting part looks at its gang.
const GANG_POLL: Duration = Duration::from_millis(25);

/// How long a load job gathers its workers before it gives way to an older one that gathers too.
const GIVE_WAY_AFTER: Duration = Duration::from_secs(1);

/// One step sent by `split.workers` workers: this job sends part 0 and queues the others as
/// `load_part` jobs, claimed ahead of other work; the step starts once every part is ready, and
/// their raw records are merged into the step (stored as the parts' files one after another).
/// When the other workers do not gather within the wait, the step is sent whole by this worker;
/// when a part does not come back or another part called it off mid-step, the step is tried
/// again. `None`: this job gave way to an older one gathering its workers, or was cancelled or
/// asked to stop (the step then called off for every part), and goes back to the queue.
pub(super) fn split_step(
    ctx: &JobContext,
    sweep: &mut Sweep,
    run: i64,
    rate: f64,
    label: &str,
    split: LoadSplit,
    mut observe: impl FnMut(shortlist_loadgen::run::RunProgress) + Send,
) -> Result<Option<StepResult>, ServiceError> {
    let of = split.workers;
    let wait = Duration::from_secs(split.gather_wait_s);
    let worker = ctx.config.worker.clone();
    let candidate = &ctx.payload.candidate;
    for attempt in 1..=SPLIT_TRIES {
        // One gang per try, named by its job, claim and instant: a resumed job never joins an
        // old one.
        let gang = format!(
            "job {} attempt {} run {run} step {label} try {attempt} at {}",
            ctx.job.id,
            ctx.job.attempts,
            now_ms()
        );
        ctx.block(
            ctx.store
                .open_gang(&gang, run, label, of, (ctx.job.id, ctx.job.attempts)),
        )?;
        let mut parts = Vec::with_capacity(of as usize - 1);
        for index in 1..of {
            let mut payload = ctx.payload.clone();
            payload.load_split = None;
            payload.load_part = Some(LoadPart {
                gang: gang.clone(),
                index,
                of,
                rate,
                label: label.to_owned(),
                gather_wait_s: split.gather_wait_s,
            });
            parts.push(
                ctx.block(
                    ctx.store.enqueue(&NewJob {
                        kind: JobKind::LoadPart.as_str().to_owned(),
                        payload: serde_json::to_value(&payload)
                            .map_err(|e| ServiceError::invalid("job payload", e.to_string()))?,
                        study: payload.study.clone(),
                        study_version: payload.version,
                        generation: payload.generation,
                        candidate: payload.candidate.clone(),
                        depends_on: None,
                        // A part cannot resume: the step is tried again instead.
                        max_attempts: 1,
                        group: Some(gang.clone()),
                        waits_for_group: None,
                        priority: 1,
                    }),
                )?,
            );
        }
        // Why the gathering ended without a start, when it did.
        let gave_way = std::cell::Cell::new(false);
        let gather = || -> Result<Option<SystemTime>, ServiceError> {
            ctx.block(ctx.store.join_gang(&gang, 0, &worker))?;
            let since = Instant::now();
            loop {
                let g = ctx.block(ctx.store.gang(&gang))?;
                // Called off by a part that took this job's claim for lost: sent whole.
                if g.cancelled.is_some() {
                    return Ok(None);
                }
                if g.gathered() {
                    let start_ms = now_ms() + START_LEAD.as_millis() as i64;
                    if ctx.block(ctx.store.start_gang(&gang, start_ms))? {
                        return Ok(Some(at_ms(start_ms)));
                    }
                }
                // Another load job gathering for its step with a part unclaimed, led from
                // an older job: give way, or each would wait for a worker the other holds.
                let give_way = since.elapsed() >= GIVE_WAY_AFTER
                    && ctx.block(ctx.store.older_gang_gathering(ctx.job.id))?;
                let why = if ctx.stopping() {
                    "the worker is stopping: the job goes back to the queue".to_owned()
                } else if give_way {
                    "gave way to an older load job gathering its workers".to_owned()
                } else if since.elapsed() >= wait {
                    format!(
                        "only {} of {of} parts' workers gathered within {} s; this worker sends the step whole",
                        g.members.len(),
                        wait.as_secs()
                    )
                } else {
                    std::thread::sleep(GANG_POLL);
                    continue;
                };
                if ctx.block(ctx.store.cancel_gang(&gang, &why))? {
                    gave_way.set(give_way || ctx.stopping());
                    let mut event = ctx.progress.event(Phase::Running);
                    event.message = Some(format!("{candidate}: load step `{label}`: {why}"));
                    ctx.progress.emit(event);
                    return Ok(None);
                }
            }
        };
        let part = StepPart {
            index: 0,
            of,
            host: worker.clone(),
            gather: Box::new(gather),
        };
        // Every part stops when one of them calls the step off mid-way (its job cancelled, its
        // worker stopping), this one included.
        let halted = || {
            ctx.block(ctx.store.gang(&gang))
                .is_ok_and(|g| g.cancelled.is_some())
        };
        let sent = ctx.with_stop_signal_or(halted, |stop| {
            sweep.step_part(rate, label, part, stop, &mut observe)
        })?;
        let Some(mine) = sent else {
            if gave_way.get() {
                return Ok(None);
            }
            let step = ctx.with_stop_signal(|stop| sweep.step(rate, label, stop, &mut observe))?;
            return Ok((!step.stopped).then_some(step));
        };
        if halt_if_stopping(ctx, &gang)? {
            return Ok(None);
        }
        let others = if mine.stopped {
            let why = ctx.block(ctx.store.gang(&gang))?.cancelled;
            Err(format!(
                "called off mid-step ({})",
                why.as_deref().unwrap_or("no reason given")
            ))
        } else {
            // Its own records beside the others' (the gang then holds the whole step), then
            // every other part's, or why the try is lost.
            ctx.block(
                ctx.store
                    .store_gang_records(&gang, 0, &worker, &mine.records),
            )?;
            let whole = sweep.workload();
            let span_s = whole.duration_s() * whole.mean_rate() / rate;
            let deadline = Instant::now()
                + Duration::from_secs_f64(if span_s.is_finite() {
                    span_s.max(0.0)
                } else {
                    0.0
                })
                + REQUEST_TIMEOUT
                + Duration::from_secs(60);
            loop {
                if halt_if_stopping(ctx, &gang)? {
                    return Ok(None);
                }
                let g = ctx.block(ctx.store.gang(&gang))?;
                if let Some(all) = g.all_records() {
                    break Ok(all
                        .iter()
                        .skip(1)
                        .map(|r| (*r).to_owned())
                        .collect::<Vec<_>>());
                }
                let mut lost = g
                    .cancelled
                    .map(|why| format!("called off mid-step ({why})"));
                for id in &parts {
                    let job = ctx.block(ctx.store.job(*id))?;
                    if job.state == JobState::Failed {
                        lost = Some(format!(
                            "its part job {id} failed: {}",
                            job.last_error.unwrap_or_default()
                        ));
                    }
                }
                if lost.is_none() && Instant::now() >= deadline {
                    lost = Some("a part did not come back in time".to_owned());
                }
                if let Some(why) = lost {
                    break Err(why);
                }
                std::thread::sleep(GANG_POLL * 8);
            }
        };
        match others {
            Ok(others) => {
                let mut records = mine.records;
                for r in &others {
                    if !records.ends_with('\n') {
                        records.push('\n');
                    }
                    records.push_str(r);
                }
                let (report, histograms) = analyze_step(label, &records, sweep.slo(), &worker)?;
                return Ok(Some(StepResult {
                    offered_rps: rate,
                    flagged_by_calibration: flagged_by_calibration(&records),
                    stopped: mine.stopped,
                    records,
                    report,
                    histograms,
                }));
            }
            Err(why) => {
                let mut event = ctx.progress.event(Phase::Running);
                event.message = Some(format!(
                    "{candidate}: load step `{label}` sent from {of} workers, try {attempt} of {SPLIT_TRIES}: {why}; the step is sent again"
                ));
                ctx.progress.emit(event);
            }
        }
    }
    Err(ServiceError::LoadGenerator {
        what: format!("load step `{label}` of `{candidate}` sent from {of} workers"),
        why: format!("no try of {SPLIT_TRIES} brought every part back"),
    })
}

/// When the load job leading a split step was cancelled or its worker asked to stop (read from
/// the job's row too, ahead of the next heartbeat): the step is called off for every part, and
/// `true`, the job going back to the queue (or failing, cancelled) with the step not stored.
fn halt_if_stopping(ctx: &JobContext, gang: &str) -> Result<bool, ServiceError> {
    if !ctx.stopping_now()? {
        return Ok(false);
    }
    let why = if ctx.cancel.load(Ordering::Relaxed) {
        format!("its load job {} was cancelled", ctx.job.id)
    } else {
        format!("the worker of its load job {} is stopping", ctx.job.id)
    };
    ctx.block(ctx.store.halt_gang(gang, &why))?;
    Ok(true)
}
