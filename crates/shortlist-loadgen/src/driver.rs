//! The load loops: open loop on an absolute schedule, open loop with a concurrency cap, and closed
//! loop with think time. Each attempt becomes one [`RecordLine`] sent to the caller as it ends.
//!
//! Latency is measured from the scheduled instant, and a request is dispatched at its scheduled
//! instant however the earlier ones are doing: a slow server can make the client late (recorded
//! as schedule lag, D − S), never make it skip or postpone work (no coordinated omission).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp};
use shortlist_measure::record::{Attempt, LoadLoop, Status, TokenSource};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::clock::RunClock;
use crate::error::LoadgenError;
use crate::records::RecordLine;
use crate::target::{Observation, Target};
use crate::workload::{RequestSpec, Workload};

/// Time a closed-loop client waits between an answer and its next request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThinkTime {
    /// Send again at once.
    None,
    /// Always this many seconds.
    Constant(f64),
    /// Exponentially distributed with this mean in seconds.
    Exponential(f64),
}

impl ThinkTime {
    /// Parse `0`, `2.5` (constant seconds) or `exp:2.5` (exponential, mean seconds).
    pub fn parse(text: &str) -> Result<Self, LoadgenError> {
        let bad = || {
            LoadgenError::option(
                "--think",
                format!("`{text}` is not seconds (`2.5`) or `exp:MEAN`"),
            )
        };
        let (exponential, number) = match text.strip_prefix("exp:") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let seconds: f64 = number.parse().map_err(|_| bad())?;
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(bad());
        }
        Ok(match (exponential, seconds) {
            (_, 0.0) => ThinkTime::None,
            (true, mean) => ThinkTime::Exponential(mean),
            (false, s) => ThinkTime::Constant(s),
        })
    }

    fn sample(self, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            ThinkTime::None => 0.0,
            ThinkTime::Constant(s) => s,
            ThinkTime::Exponential(mean) => Exp::new(1.0 / mean).map_or(mean, |d| d.sample(rng)),
        }
    }
}

/// Which loop drives the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoadSpec {
    /// Arrivals at the trace's times; with `cap`, at most that many requests in flight and the
    /// rest wait (the wait is recorded as `cap_queue_s`).
    Open { cap: Option<u32> },
    /// `clients` clients each send one request, wait for its end, think, and send the next;
    /// the trace's times are ignored, its requests are taken in order.
    Closed { clients: u32, think: ThinkTime },
}

impl LoadSpec {
    /// The loop label of the records header.
    pub fn load_loop(self) -> LoadLoop {
        match self {
            LoadSpec::Open { .. } => LoadLoop::Open,
            LoadSpec::Closed { .. } => LoadLoop::Closed,
        }
    }
}

/// How the dispatcher waits for a scheduled instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// Wall clock: sleep to within 2 ms, then yield to other tasks until the instant (tokio's
    /// timer has millisecond granularity, which alone would add up to 1 ms of schedule lag).
    Precise,
    /// Virtual clock (paused runtime): sleep exactly.
    Virtual,
}

/// Options of one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The loop.
    pub load: LoadSpec,
    /// Longest an attempt may take from its send to its last byte.
    pub timeout: Duration,
    /// Attempts after the first one for a request that errs or times out.
    pub retries: u32,
    /// Wait before a retry.
    pub retry_backoff: Duration,
    /// Seed of the think-time generators (ChaCha8, one stream per client).
    pub seed: u64,
    /// How to wait for scheduled instants.
    pub pacing: Pacing,
    /// One part of a step split across load workers: the run's clock starts at the agreed
    /// instant (not when this process got there) and its records say which part they hold.
    pub split: Option<Split>,
}

/// This worker's share of a split load step.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// This part, from 0, of `of`.
    pub index: u32,
    pub of: u32,
    /// The instant every part's clock starts at.
    pub start_at: std::time::SystemTime,
    /// This host, as the records name it.
    pub host: String,
}

impl RunOptions {
    /// Open loop, 60 s timeout, no retries, precise pacing.
    pub fn open() -> Self {
        RunOptions {
            load: LoadSpec::Open { cap: None },
            timeout: Duration::from_secs(60),
            retries: 0,
            retry_backoff: Duration::from_millis(100),
            seed: 0,
            pacing: Pacing::Precise,
            split: None,
        }
    }
}

/// What the driver reports when the loop is over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DriveOutcome {
    /// When the run was stopped (Ctrl-C), if it was.
    pub stopped_at_s: Option<f64>,
    /// The last scheduled instant of a request that was started.
    pub last_scheduled_s: f64,
    /// Requests started (first attempts).
    pub started: usize,
    /// When the last attempt ended.
    pub ended_s: f64,
}

struct Ctx<T> {
    target: Arc<T>,
    clock: RunClock,
    options: RunOptions,
    stop: watch::Receiver<bool>,
    records: mpsc::UnboundedSender<RecordLine>,
}

impl<T> Clone for Ctx<T> {
    fn clone(&self) -> Self {
        Ctx {
            target: Arc::clone(&self.target),
            clock: self.clock,
            options: self.options.clone(),
            stop: self.stop.clone(),
            records: self.records.clone(),
        }
    }
}

/// Resolve when `stop` turns true (or its sender is gone, which never resolves).
pub(crate) async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn pace_until(due: Instant, pacing: Pacing) {
    match pacing {
        Pacing::Virtual => tokio::time::sleep_until(due).await,
        Pacing::Precise => {
            let coarse = Duration::from_millis(2);
            if due > Instant::now() + coarse {
                tokio::time::sleep_until(due - coarse).await;
            }
            while Instant::now() < due {
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Run `workload` against `target` on `clock`, sending each finished attempt to `records`. Stops
/// dispatching when `stop` turns true; attempts in flight then end as `cancelled` with what they
/// measured.
pub async fn drive<T: Target>(
    target: Arc<T>,
    workload: Arc<Workload>,
    options: RunOptions,
    clock: RunClock,
    stop: watch::Receiver<bool>,
    records: mpsc::UnboundedSender<RecordLine>,
) -> DriveOutcome {
    let ctx = Ctx {
        target,
        clock,
        options: options.clone(),
        stop: stop.clone(),
        records,
    };
    let mut outcome = match options.load {
        LoadSpec::Open { cap } => {
            open_loop(
                ctx,
                &workload,
                cap.map(|c| Arc::new(Semaphore::new(c as usize))),
            )
            .await
        }
        LoadSpec::Closed { clients, think } => closed_loop(ctx, workload, clients, think).await,
    };
    outcome.ended_s = clock.now_s();
    outcome
}

async fn open_loop<T: Target>(
    ctx: Ctx<T>,
    workload: &Workload,
    cap: Option<Arc<Semaphore>>,
) -> DriveOutcome {
    let mut tasks = JoinSet::new();
    let mut outcome = DriveOutcome {
        stopped_at_s: None,
        last_scheduled_s: 0.0,
        started: 0,
        ended_s: 0.0,
    };
    for arrival in workload.arrivals() {
        let due = ctx.clock.instant_at(arrival.t);
        tokio::select! {
            biased;
            () = stopped(ctx.stop.clone()) => break,
            () = pace_until(due, ctx.options.pacing) => {}
        }
        let ctx = ctx.clone();
        let request = arrival.request.clone();
        let cap = cap.clone();
        let scheduled_s = arrival.t;
        tasks.spawn(async move { with_retries(&ctx, &request, scheduled_s, cap.as_deref()).await });
        outcome.started += 1;
        outcome.last_scheduled_s = scheduled_s;
        // Reap finished tasks as we go so a long trace does not keep them all.
        while tasks.try_join_next().is_some() {}
    }
    if *ctx.stop.borrow() {
        outcome.stopped_at_s = Some(ctx.clock.now_s());
    }
    while tasks.join_next().await.is_some() {}
    if outcome.stopped_at_s.is_none() && *ctx.stop.borrow() {
        outcome.stopped_at_s = Some(ctx.clock.now_s());
    }
    outcome
}

async fn closed_loop<T: Target>(
    ctx: Ctx<T>,
    workload: Arc<Workload>,
    clients: u32,
    think: ThinkTime,
) -> DriveOutcome {
    let next = Arc::new(AtomicUsize::new(0));
    let last_scheduled = Arc::new(std::sync::Mutex::new(0.0_f64));
    let mut tasks = JoinSet::new();
    for client in 0..clients {
        let ctx = ctx.clone();
        let next = Arc::clone(&next);
        let workload = Arc::clone(&workload);
        let last_scheduled = Arc::clone(&last_scheduled);
        tasks.spawn(async move {
            // One named, seeded stream per client: the same seed gives the same think times.
            let mut rng =
                ChaCha8Rng::seed_from_u64(ctx.options.seed.wrapping_add(u64::from(client)));
            let mut free_at = 0.0;
            loop {
                if *ctx.stop.borrow() {
                    return;
                }
                let index = next.fetch_add(1, Ordering::Relaxed);
                let Some(arrival) = workload.arrivals().get(index) else {
                    return;
                };
                let scheduled_s = free_at + think.sample(&mut rng);
                tokio::select! {
                    biased;
                    () = stopped(ctx.stop.clone()) => return,
                    () = pace_until(ctx.clock.instant_at(scheduled_s), ctx.options.pacing) => {}
                }
                {
                    let mut last = last_scheduled.lock().expect("no panics while held");
                    *last = last.max(scheduled_s);
                }
                with_retries(&ctx, &arrival.request, scheduled_s, None).await;
                free_at = ctx.clock.now_s();
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    let started = next.load(Ordering::Relaxed).min(workload.arrivals().len());
    let last_scheduled_s = *last_scheduled.lock().expect("no panics while held");
    let stopped_at_s = (*ctx.stop.borrow()).then(|| ctx.clock.now_s());
    DriveOutcome {
        stopped_at_s,
        last_scheduled_s,
        started,
        ended_s: 0.0,
    }
}

/// Send one request, retrying errors and timeouts; every attempt is recorded.
async fn with_retries<T: Target>(
    ctx: &Ctx<T>,
    request: &RequestSpec,
    scheduled_s: f64,
    cap: Option<&Semaphore>,
) {
    let mut scheduled_s = scheduled_s;
    for number in 1..=ctx.options.retries + 1 {
        let record = attempt(ctx, request, scheduled_s, number, cap).await;
        let retry = matches!(record.attempt.status, Status::Error | Status::Timeout)
            && number <= ctx.options.retries
            && !*ctx.stop.borrow();
        let ended = record.attempt.end_s.unwrap_or_else(|| ctx.clock.now_s());
        let _ = ctx.records.send(record);
        if !retry {
            return;
        }
        scheduled_s = ended + ctx.options.retry_backoff.as_secs_f64();
        tokio::select! {
            biased;
            () = stopped(ctx.stop.clone()) => return,
            () = pace_until(ctx.clock.instant_at(scheduled_s), ctx.options.pacing) => {}
        }
    }
}

enum Ended {
    Done(Result<(), crate::error::TargetError>),
    TimedOut,
    Cancelled,
}

async fn attempt<T: Target>(
    ctx: &Ctx<T>,
    request: &RequestSpec,
    scheduled_s: f64,
    number: u32,
    cap: Option<&Semaphore>,
) -> RecordLine {
    let clock = ctx.clock;
    let mut cap_queue_s = None;
    let mut permit = None;
    let mut ended = None;
    if let Some(semaphore) = cap {
        tokio::select! {
            biased;
            () = stopped(ctx.stop.clone()) => ended = Some(Ended::Cancelled),
            acquired = semaphore.acquire() => {
                cap_queue_s = Some((clock.now_s() - scheduled_s).max(0.0));
                permit = acquired.ok();
            }
        }
    }
    let mut observation = Observation::new(clock);
    if ended.is_none() {
        let send = tokio::time::timeout(
            ctx.options.timeout,
            ctx.target.send(request, &mut observation),
        );
        ended = Some(tokio::select! {
            biased;
            result = send => match result {
                Ok(done) => Ended::Done(done),
                Err(_) => Ended::TimedOut,
            },
            () = stopped(ctx.stop.clone()) => Ended::Cancelled,
        });
    }
    drop(permit);
    let end_s = clock.now_s();
    let (status, error) = match ended.expect("set above") {
        Ended::Done(Ok(())) => (Status::Ok, None),
        Ended::Done(Err(e)) => (Status::Error, Some(e.to_string())),
        Ended::TimedOut => (
            Status::Timeout,
            Some(format!(
                "no complete answer within {} s",
                ctx.options.timeout.as_secs_f64()
            )),
        ),
        Ended::Cancelled => (Status::Cancelled, Some("the run was stopped".to_owned())),
    };
    build_record(
        request,
        scheduled_s,
        number,
        &observation,
        status,
        error,
        end_s,
        cap_queue_s,
    )
}

#[allow(clippy::too_many_arguments)] // One call site; a struct would only rename the arguments.
fn build_record(
    request: &RequestSpec,
    scheduled_s: f64,
    number: u32,
    observation: &Observation,
    status: Status,
    error: Option<String>,
    end_s: f64,
    cap_queue_s: Option<f64>,
) -> RecordLine {
    // Float round trips through `Duration` can put a stamp a nanosecond before the instant it
    // was taken at; the record's order invariants are kept by clamping, never more than that.
    let sent_s = observation.sent_s().map(|s| s.max(scheduled_s));
    let floor = sent_s.unwrap_or(scheduled_s);
    let chunks: Vec<_> = observation
        .chunks()
        .iter()
        .map(|c| shortlist_measure::record::Chunk(c.at().max(floor), c.tokens()))
        .collect();
    let last_token_s = chunks.last().map(|c| c.at());
    let (output_tokens, output_tokens_source) = match observation.server_output_tokens() {
        Some(n) => (n, TokenSource::Server),
        None => (
            chunks.iter().map(|c| u64::from(c.tokens())).sum(),
            TokenSource::Client,
        ),
    };
    let input_tokens = observation
        .server_input_tokens()
        .unwrap_or(u64::from(request.input_tokens()));
    let end_s = end_s.max(last_token_s.unwrap_or(floor)).max(floor);
    let (id, retry_of) = if number == 1 {
        (request.id().to_owned(), None)
    } else {
        (
            format!("{}#{number}", request.id()),
            Some(Cow::Owned(request.id().to_owned())),
        )
    };
    RecordLine {
        attempt: Attempt {
            id: Cow::Owned(id),
            attempt: number,
            retry_of,
            tenant: request.tenant().map(|t| Cow::Owned(t.to_owned())),
            prefix_group: request.prefix().map(|p| Cow::Owned(p.group().to_owned())),
            scheduled_s,
            sent_s,
            chunks,
            last_token_s,
            end_s: Some(end_s),
            input_tokens: Some(input_tokens),
            output_tokens,
            output_tokens_source,
            max_tokens: Some(u64::from(request.max_tokens())),
            status,
            error: error.map(Cow::Owned),
            valid: None,
            prefix_hit_tokens: observation.prefix_hit_tokens().map(|h| h.min(input_tokens)),
            stages: observation.stage_times(),
            // Written once, by `RecordLine::cap_queue_s` beside the attempt.
            cap_queue_s: None,
            // Written once, by `RecordLine::first_output_s` beside the attempt.
            first_output_s: None,
            warmup: false,
        },
        first_output_s: observation.first_output_s().map(|s| s.max(floor)),
        cap_queue_s,
    }
}
