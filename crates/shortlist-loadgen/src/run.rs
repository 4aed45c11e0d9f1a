//! One run end to end: drive the loop, write records as they come, keep live figures, and close
//! the records file with its final header, also when the run is stopped early.

use std::path::PathBuf;
use std::sync::Arc;

use shortlist_measure::record::{LoadLoop, RECORDS_FORMAT, RecordsHeader, RecordsPart};
use shortlist_measure::slo::Slo;
use tokio::sync::{mpsc, watch};

use crate::clock::RunClock;
use crate::driver::{DriveOutcome, LoadSpec, RunOptions, drive};
use crate::error::LoadgenError;
use crate::live::LiveStats;
use crate::records::{HeaderLine, RecordLine, RecordsFile};
use crate::target::Target;
use crate::workload::Workload;

/// Where the records go.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// Write them to this file as the run goes.
    pub path: Option<PathBuf>,
    /// Also keep them in memory (sweeps and tests).
    pub keep: bool,
    /// Show a progress bar on stderr.
    pub progress: bool,
}

/// A finished (or stopped) run.
#[derive(Debug)]
pub struct RunResult {
    /// The final header, as written.
    pub header: HeaderLine,
    /// The records, when `keep` was asked for.
    pub records: Vec<RecordLine>,
    /// What the driver reported.
    pub outcome: DriveOutcome,
    /// Live figures at the end.
    pub live: LiveStats,
}

/// Build the header a run starts with (window from the workload, final values come at the end).
pub fn initial_header(
    target: &str,
    workload: &Workload,
    options: &RunOptions,
    extra: serde_json::Map<String, serde_json::Value>,
) -> HeaderLine {
    let (load_loop, clients, cap) = match options.load {
        LoadSpec::Open { cap } => (LoadLoop::Open, None, cap),
        LoadSpec::Closed { clients, .. } => (LoadLoop::Closed, Some(clients), None),
    };
    let mut extra = extra;
    extra.insert("loop_label".to_owned(), load_loop.label(cap).into());
    extra.insert("timeout_s".to_owned(), options.timeout.as_secs_f64().into());
    extra.insert("retries".to_owned(), options.retries.into());
    if let LoadSpec::Closed { think, .. } = options.load {
        extra.insert("think".to_owned(), format!("{think:?}").into());
    }
    HeaderLine {
        header: RecordsHeader {
            format: RECORDS_FORMAT.to_owned(),
            load_loop,
            window_s: [0.0, workload.duration_s()],
            target: target.into(),
            trace: workload.name().into(),
            started_at: Some(
                humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            ),
            concurrency_cap: cap,
            clients,
            part: None,
        },
        extra,
    }
}

/// A run clock whose origin is the wall-clock instant `start_at`: in the future, the run waits
/// for it; in the past (this worker got there late), the origin is that past instant, so every
/// request of this part is as late as the worker was, and its schedule lag says so.
fn agreed_clock(start_at: std::time::SystemTime) -> RunClock {
    let now_wall = std::time::SystemTime::now();
    let now = tokio::time::Instant::now();
    let origin = match start_at.duration_since(now_wall) {
        Ok(ahead) => now + ahead,
        Err(late) => now.checked_sub(late.duration()).unwrap_or(now),
    };
    RunClock::starting_at(origin)
}

/// Run `workload` against `target`. `stop` turning true ends the run early, keeping everything
/// measured (the records file is flushed and valid).
pub async fn run<T: Target>(
    target: Arc<T>,
    workload: Arc<Workload>,
    options: RunOptions,
    slo: Slo,
    output: RunOutput,
    extra: serde_json::Map<String, serde_json::Value>,
    stop: watch::Receiver<bool>,
) -> Result<RunResult, LoadgenError> {
    run_observed(target, workload, options, slo, output, extra, stop, |_| {}).await
}

/// How far a run has come, as [`run_observed`] reports it after each batch of records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunProgress {
    /// Attempts finished (one record each, retries included).
    pub finished: u64,
    /// Requests in the workload.
    pub total: u64,
    /// Attempts that did not end `ok`.
    pub failed: u64,
    /// Seconds since the run started, and the workload's own length.
    pub elapsed_s: f64,
    pub duration_s: f64,
}

/// [`run`], calling `observe` with the run's progress after each batch of finished records.
#[allow(clippy::too_many_arguments)] // `run`'s arguments and the observer.
pub async fn run_observed<T: Target>(
    target: Arc<T>,
    workload: Arc<Workload>,
    options: RunOptions,
    slo: Slo,
    output: RunOutput,
    extra: serde_json::Map<String, serde_json::Value>,
    stop: watch::Receiver<bool>,
    mut observe: impl FnMut(RunProgress) + Send,
) -> Result<RunResult, LoadgenError> {
    let mut header = initial_header(&target.describe(), &workload, &options, extra);
    if let Some(split) = &options.split {
        let start_at = humantime::format_rfc3339_millis(split.start_at).to_string();
        header.header.started_at = Some(start_at.clone());
        header.header.part = Some(RecordsPart {
            index: split.index,
            of: split.of,
            start_at,
            host: split.host.clone(),
        });
    }
    let mut file = match &output.path {
        Some(path) => Some(RecordsFile::create(path, &header)?),
        None => None,
    };
    let (sender, mut receiver) = mpsc::unbounded_channel::<RecordLine>();
    let clock = match &options.split {
        Some(split) => {
            let clock = agreed_clock(split.start_at);
            tokio::time::sleep_until(clock.instant_at(0.0)).await;
            clock
        }
        None => RunClock::start(),
    };
    let driver = tokio::spawn(drive(
        Arc::clone(&target),
        Arc::clone(&workload),
        options.clone(),
        clock,
        stop,
        sender,
    ));

    let mut live = LiveStats::new(slo, workload.arrivals().len() as u64, output.progress);
    let mut kept = Vec::new();
    let mut write_error = None;
    while let Some(record) = receiver.recv().await {
        let mut next = Some(record);
        // Write everything that is ready, then flush once: a stopped run loses nothing, and a
        // fast run does not pay one system call per record.
        while let Some(record) = next {
            live.observe(&record, clock.now_s());
            if let Some(file) = file.as_mut()
                && write_error.is_none()
                && let Err(e) = file.append(&record)
            {
                write_error = Some(e);
            }
            if output.keep {
                kept.push(record);
            }
            next = receiver.try_recv().ok();
        }
        if let Some(file) = file.as_mut()
            && write_error.is_none()
            && let Err(e) = file.flush()
        {
            write_error = Some(e);
        }
        observe(RunProgress {
            finished: live.attempts(),
            total: workload.arrivals().len() as u64,
            failed: live.attempts() - live.ok(),
            elapsed_s: clock.now_s(),
            duration_s: workload.duration_s(),
        });
    }
    let outcome = driver
        .await
        .map_err(|e| LoadgenError::option("run", format!("the load driver failed: {e}")))?;
    live.finish();

    let end = match (options.load, outcome.stopped_at_s) {
        (LoadSpec::Open { .. }, Some(stopped)) => stopped.min(workload.duration_s()),
        (LoadSpec::Open { .. }, None) => workload.duration_s(),
        (LoadSpec::Closed { .. }, Some(stopped)) => stopped,
        (LoadSpec::Closed { .. }, None) => outcome.ended_s,
    };
    header.header.window_s = [0.0, end.max(1e-6)];
    if let Some(stopped) = outcome.stopped_at_s {
        header
            .extra
            .insert("stopped_at_s".to_owned(), stopped.into());
    }
    header
        .extra
        .insert("drive_ended_s".to_owned(), outcome.ended_s.into());
    if let Some(e) = write_error {
        return Err(e);
    }
    if let Some(file) = file {
        file.finish(&header)?;
    }
    Ok(RunResult {
        header,
        records: kept,
        outcome,
        live,
    })
}

/// A tokio runtime on a paused (virtual) clock, for simulated targets: timers fire in order
/// without waiting, so runs are instant and reproducible.
pub fn virtual_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
}

/// The measurement core's report of records kept in memory (sweeps, tests): the same figures
/// `shortlist analyze` gives for the written file.
pub fn analyze_records(
    header: &HeaderLine,
    records: &[RecordLine],
    slo: Slo,
) -> Result<shortlist_measure::analyze::Report, shortlist_measure::MeasureError> {
    use shortlist_measure::analyze::{AnalyzeOptions, Analyzer};
    let mut analyzer = Analyzer::new(header.header.clone(), AnalyzeOptions::new(slo))?;
    for record in records {
        analyzer.observe(&record.attempt);
    }
    Ok(analyzer.finish())
}

/// A multi-threaded tokio runtime on the wall clock, for real targets.
pub fn real_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// A stop signal that turns true on Ctrl-C (SIGINT). Call inside a runtime with I/O enabled.
pub fn stop_on_ctrl_c() -> watch::Receiver<bool> {
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::warn!(
                "Ctrl-C: stopping; attempts in flight end as cancelled, the records file keeps everything"
            );
            let _ = sender.send(true);
        }
        // Keep the sender alive: a dropped sender must not read as a stop.
        std::future::pending::<()>().await;
    });
    receiver
}

/// The sending half of a stop signal.
pub type StopSender = watch::Sender<bool>;
/// The receiving half of a stop signal: the run stops when it turns true.
pub type StopReceiver = watch::Receiver<bool>;

/// A stop signal to trigger by hand (keep the sender alive: dropping it is not a stop).
pub fn stop_signal() -> (StopSender, StopReceiver) {
    watch::channel(false)
}

/// A multi-threaded runtime with `threads` workers (all cores when `None`).
pub fn real_runtime_with_threads(
    threads: Option<usize>,
) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        builder.worker_threads(threads.max(1));
    }
    builder.enable_all().build()
}

/// Resolves on Ctrl-C, or after `limit` when one is given.
pub async fn ctrl_c_or_after(limit: Option<std::time::Duration>) {
    let timer = async {
        match limit {
            Some(limit) => tokio::time::sleep(limit).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = timer => {}
    }
}

/// The async runtime runs execute on (re-exported so callers need no tokio dependency).
pub type Runtime = tokio::runtime::Runtime;
