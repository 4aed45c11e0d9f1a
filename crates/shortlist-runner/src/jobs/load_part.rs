//! A `load_part` job: one worker's share of a load step sent from several workers at once. It
//! reaches the same endpoint as the load job that queued it, calibrates its own client for its
//! share, joins the step's gang, waits for the start instant the leading part fixes once every
//! part is ready, sends every `of`-th arrival of the step from that instant, and stores its raw
//! records on the gang for the leading part to merge. A part whose gang was called off (its
//! workers did not gather in time) sends nothing; one cancelled or stopped mid-step calls the
//! gang off, and every part then stops, storing nothing of the step.

use std::time::{Duration, Instant, SystemTime};

use shortlist_store::gangs::Gang;
use shortlist_store::jobs::JobState;
use std::sync::atomic::Ordering;

use super::load::{Lazy, step_progress};
use super::{Finished, JobContext};
use crate::capacity::StepPart;
use crate::error::ServiceError;
use crate::time::{at_ms, now_ms};
use crate::worker::HEARTBEAT;

/// How often a ready part looks for its start instant.
const START_POLL: Duration = Duration::from_millis(20);

pub(crate) fn run(ctx: &JobContext) -> Result<Finished, ServiceError> {
    let what = ctx.what();
    let part = ctx.payload.load_part.clone().ok_or_else(|| {
        ServiceError::invalid(&what, "a load part job names no part (`load_part`)")
    })?;
    let step = format!(
        "part {} of {} of load step `{}`",
        part.index + 1,
        part.of,
        part.label
    );
    let gang = ctx.block(ctx.store.gang(&part.gang))?;
    if let Some(why) = gang.cancelled {
        return Ok(Finished::Done(format!(
            "{step}: called off before it started ({why}); nothing sent"
        )));
    }
    if gang.start_at_ms.is_some() {
        return Err(ServiceError::invalid(
            &step,
            "the step started without this part: a part is sent once, from its start",
        ));
    }
    let mut lazy = Lazy::new(ctx, &ctx.locked()?)?;
    if !lazy.is_endpoint() {
        return Err(ServiceError::invalid(
            &step,
            "only an endpoint candidate's steps are split: a GGUF candidate is served by one worker",
        ));
    }
    let worker = ctx.config.worker.clone();
    let wait = Duration::from_secs(part.gather_wait_s.max(1)) * 2;
    let gather = || -> Result<Option<SystemTime>, ServiceError> {
        ctx.block(ctx.store.join_gang(&part.gang, part.index, &worker))?;
        let deadline = Instant::now() + wait;
        loop {
            let g = ctx.block(ctx.store.gang(&part.gang))?;
            if let Some(ms) = g.start_at_ms {
                return Ok(Some(at_ms(ms)));
            }
            if g.cancelled.is_some() {
                return Ok(None);
            }
            // A leader whose claim ended (its worker died or let go) never fixes the start.
            if let Some(why) = leader_lost(ctx, &g)? {
                if ctx.block(ctx.store.cancel_gang(&part.gang, &why))? {
                    return Ok(None);
                }
                continue;
            }
            if Instant::now() >= deadline {
                return Err(ServiceError::invalid(
                    &step,
                    format!(
                        "ready for {} s and no start instant came: the load job sending the step stopped answering",
                        wait.as_secs()
                    ),
                ));
            }
            std::thread::sleep(START_POLL);
        }
    };
    let (_served, sweep) = lazy.sweep()?;
    let mut event = ctx.progress.event(crate::progress::Phase::Running);
    event.message = Some(format!(
        "{}: {step} at {} req/s, ready once calibrated",
        ctx.payload.candidate, part.rate
    ));
    ctx.progress.emit(event);
    // Stops with the step when another part calls it off mid-way, or its leader is lost (its
    // records would be merged by no one, and this worker is wanted for the step's next try).
    let halted = || {
        ctx.block(ctx.store.gang(&part.gang)).is_ok_and(|g| {
            g.cancelled.is_some() || leader_lost(ctx, &g).is_ok_and(|lost| lost.is_some())
        })
    };
    let sent = ctx.with_stop_signal_or(halted, |stop| {
        sweep.step_part(
            part.rate,
            &part.label,
            StepPart {
                index: part.index,
                of: part.of,
                host: worker.clone(),
                gather: Box::new(gather),
            },
            stop,
            step_progress(ctx, &part.label, part.rate, 0, 1),
        )
    })?;
    let Some(sent) = sent else {
        return Ok(Finished::Done(format!(
            "{step}: called off before it started; nothing sent"
        )));
    };
    if ctx.stopping_now()? {
        // Cancelled, or this worker stops: the whole step is called off (its load job sends it
        // again, unless it was cancelled too). A part is sent once: it does not go back to the
        // queue.
        let cancelled = ctx.cancel.load(Ordering::Relaxed);
        let why = format!(
            "{step} {} mid-step",
            if cancelled {
                "was cancelled"
            } else {
                "stopped: its worker is stopping"
            }
        );
        ctx.block(ctx.store.halt_gang(&part.gang, &why))?;
        return if cancelled {
            Ok(Finished::Released)
        } else {
            Err(ServiceError::invalid(
                &step,
                "its worker stopped mid-step; the step was called off and its load job sends it again",
            ))
        };
    }
    if sent.stopped {
        let g = ctx.block(ctx.store.gang(&part.gang))?;
        let why = match (g.cancelled.clone(), leader_lost(ctx, &g)?) {
            (Some(why), _) => why,
            (None, Some(why)) => {
                ctx.block(ctx.store.halt_gang(&part.gang, &why))?;
                why
            }
            (None, None) => "no reason given".to_owned(),
        };
        return Ok(Finished::Done(format!(
            "{step}: called off mid-step ({why}); nothing stored"
        )));
    }
    ctx.block(
        ctx.store
            .store_gang_records(&part.gang, part.index, &worker, &sent.records),
    )?;
    Ok(Finished::Done(format!(
        "{step}: {} requests sent{}",
        sent.report.requests.scheduled,
        if sent.report.checks.client_bound {
            " — this worker's client fell behind (client-bound)"
        } else {
            ""
        }
    )))
}

/// Why the load job leading gang `g` can no longer merge its parts, if it cannot: its claim ended
/// (it let go, failed, or was taken over after its worker died), or it has not beaten for three
/// of the longest heartbeat intervals (its worker is gone, and no idle worker has noticed yet).
fn leader_lost(ctx: &JobContext, g: &Gang) -> Result<Option<String>, ServiceError> {
    let leader = ctx.block(ctx.store.job(g.leader_job))?;
    if leader.state != JobState::Running || leader.attempts != g.leader_try {
        return Ok(Some(format!(
            "its leading load job {} is no longer held by the claim that opened it",
            g.leader_job
        )));
    }
    let silent_ms = leader.heartbeat_ms.map_or(0, |beat| now_ms() - beat);
    let limit = 3 * HEARTBEAT.as_millis() as i64;
    Ok((silent_ms > limit).then(|| {
        format!(
            "its leading load job {} has not beaten for {} s: its worker is gone",
            g.leader_job,
            silent_ms / 1000
        )
    }))
}
