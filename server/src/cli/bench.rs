//! `shortlist bench`: replay a trace against a target (open or closed loop), write the records as
//! the run goes, and print the report of docs/metrics.md for them.
//!
//! Before a run against a real target, a short self-calibration against an in-process mock
//! measures this client's ceiling on this host; a trace that peaks beyond it is refused (or, with
//! `--allow-client-bound`, run and flagged), so a client limit is never reported as the server's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};

use shortlist_loadgen::driver::{LoadSpec, Pacing, RunOptions, ThinkTime};
use shortlist_loadgen::http::{OpenAiTarget, RequestIds};
use shortlist_loadgen::run::{
    RunOutput, RunResult, real_runtime, run as run_load, stop_on_ctrl_c, stop_signal,
    virtual_runtime,
};
use shortlist_loadgen::sim::{SimConfig, SimTarget};
use shortlist_loadgen::workload::Workload;
use shortlist_measure::analyze::{AnalyzeOptions, analyze};
use shortlist_measure::slo::Slo;
use shortlist_runner::candidate::CandidateSpec;
use shortlist_runner::capacity::{
    LoadTarget, calibrate_for, calibration_tokens, describe_calibration, refuses,
};
use shortlist_runner::config::Config;
use shortlist_runner::serving::Served;

use super::Outcome;
use super::output::{open, print_json, read_text};

/// The load loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LoopArg {
    /// Arrivals at the trace's times, whatever the server does.
    Open,
    /// A fixed client population, each waiting for its answer (the trace's times are ignored).
    Closed,
}

/// How to reach a target and how hard to push it (shared with `shortlist capacity`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TargetArgs {
    /// `http://HOST:PORT[/v1/chat/completions|/v1/completions]`, `sim:KEY=VALUE,...` (the simulated
    /// batching server on virtual time) or `engine:MODEL`.
    #[arg(long)]
    pub target: String,
    /// Model name sent in every request (HTTP targets).
    #[arg(long, default_value = "default")]
    pub model: String,
    /// Ask the server to ignore end-of-sequence so answers have the trace's lengths (vLLM, SGLang).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Longest an attempt may take, in seconds; a slower one ends as `timeout`.
    #[arg(long, default_value_t = 60.0)]
    pub timeout_s: f64,
    /// Retries of an attempt that errs or times out (each recorded, with `retry_of`).
    #[arg(long, default_value_t = 0)]
    pub retries: u32,
    /// Skip the self-calibration against the in-process mock.
    #[arg(long)]
    pub no_calibrate: bool,
    /// Run even beyond the calibrated client ceiling; the records are flagged client-bound.
    #[arg(long)]
    pub allow_client_bound: bool,
    /// What each request's `x-request-id` header carries: `id` (the trace's request id), `uuid`
    /// (a UUID derived from it, for servers that accept nothing else, e.g. llama-cpp-python's),
    /// or `none`.
    #[arg(long, default_value = "id", value_parser = RequestIds::parse)]
    pub request_ids: RequestIds,
    /// Where an `engine:MODEL` target runs.
    #[command(flatten)]
    pub device: super::engine::DeviceArg,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// The workload (`shortlist.trace.v1`).
    #[arg(long)]
    trace: PathBuf,
    /// Open or closed loop.
    #[arg(long = "loop", value_enum, default_value = "open")]
    load_loop: LoopArg,
    /// Closed loop: the number of clients.
    #[arg(long)]
    clients: Option<u32>,
    /// Closed loop: think time between an answer and the next request: seconds, or `exp:MEAN`.
    #[arg(long, default_value = "0")]
    think: String,
    /// Open loop: at most this many requests in flight; the others wait (cap-queue time recorded).
    #[arg(long)]
    max_concurrency: Option<u32>,
    /// Replay the trace at this mean rate (req/s), keeping its shape.
    #[arg(long)]
    rate: Option<f64>,
    /// The SLO (`*.slo.toml`); without it a request qualifies when it succeeds.
    #[arg(long)]
    slo: Option<PathBuf>,
    /// Where the records go (`shortlist.records.v1`).
    #[arg(short = 'o', long)]
    output: PathBuf,
    /// Seed of the think-time generators.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Send only part I of N of the schedule (arrival i goes to part i mod N; parts count from 0),
    /// as one of N load workers of one step: `--part 0/2` here, `--part 1/2` on another host,
    /// the same `--start-at`; then `shortlist analyze` with every part's records.
    #[arg(long, value_parser = parse_part, requires = "start_at")]
    part: Option<(u32, u32)>,
    /// The agreed instant every part starts at (RFC 3339, e.g. 2026-12-01T03:00:00Z); a part
    /// that gets there late is as late as its schedule lag says.
    #[arg(long, value_parser = parse_instant, requires = "part")]
    start_at: Option<std::time::SystemTime>,
    /// This host's name in a part's records (default: the machine's host name).
    #[arg(long)]
    host: Option<String>,
    /// Print the report as one JSON document (`shortlist.report.v1`).
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn parse_part(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{text}` is not a part: write I/N with 0 ≤ I < N, e.g. 0/2");
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (u32, u32) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n || n > 1024 {
        return Err(bad());
    }
    Ok((i, n))
}

fn parse_instant(text: &str) -> Result<std::time::SystemTime, String> {
    text.parse::<jiff::Timestamp>()
        .map(std::time::SystemTime::from)
        .map_err(|e| {
            format!("`{text}` is not an RFC 3339 instant (e.g. 2026-12-01T03:00:00Z): {e}")
        })
}

/// The target a `--target` names, and the in-process server of `engine:MODEL` (kept alive as
/// long as the returned value).
pub(crate) fn load_target(
    args: &TargetArgs,
    config: &Config,
) -> anyhow::Result<(LoadTarget, Option<Served>)> {
    let threads = config.threads;
    let spec = args.target.as_str();
    if spec == "sim" || spec.starts_with("sim:") {
        return Ok((LoadTarget::Sim(SimConfig::parse(spec)?), None));
    }
    if let Some(model) = spec.strip_prefix("engine:") {
        if model.is_empty() {
            bail!(
                "target `{spec}`: name a model (a GGUF path or a docs/models.md name) after `engine:`"
            );
        }
        let path = super::engine::resolve_model(model)?;
        // The engine's errors name the file themselves.
        let placement = args.device.place(config)?;
        let served = Served::start(
            &CandidateSpec::Gguf(path.clone()),
            model,
            threads,
            Some(&placement),
        )?;
        eprintln!("loaded {} in {:.2} s", served.model, served.load_s);
        let target = OpenAiTarget::new(&served.url, &args.model, args.ignore_eos)?
            .with_request_ids(args.request_ids);
        return Ok((LoadTarget::Http(target), Some(served)));
    }
    Ok((
        LoadTarget::Http(
            OpenAiTarget::new(spec, &args.model, args.ignore_eos)?
                .with_request_ids(args.request_ids),
        ),
        None,
    ))
}

/// `--timeout-s` as a duration.
pub(crate) fn step_timeout(args: &TargetArgs) -> anyhow::Result<Duration> {
    if !(args.timeout_s.is_finite() && args.timeout_s > 0.0) {
        bail!(
            "--timeout-s {}: needs a positive number of seconds",
            args.timeout_s
        );
    }
    Ok(Duration::from_secs_f64(args.timeout_s))
}

pub(crate) fn read_slo(path: Option<&Path>) -> anyhow::Result<Slo> {
    Ok(match path {
        Some(path) => Slo::from_toml(&path.display().to_string(), &read_text(path)?)?,
        None => Slo::success_only(),
    })
}

pub(crate) fn run_options(
    args: &TargetArgs,
    load: LoadSpec,
    seed: u64,
    pacing: Pacing,
) -> anyhow::Result<RunOptions> {
    Ok(RunOptions {
        load,
        timeout: step_timeout(args)?,
        retries: args.retries,
        retry_backoff: Duration::from_millis(100),
        seed,
        pacing,
        split: None,
    })
}

pub(crate) fn run(
    args: Args,
    config: &shortlist_runner::config::Config,
) -> anyhow::Result<Outcome> {
    let mut inputs = vec![("trace", args.trace.as_path())];
    if let Some(slo) = &args.slo {
        inputs.push(("SLO", slo.as_path()));
    }
    super::output::refuse_overwriting_input("-o", &args.output, &inputs)?;
    let slo = read_slo(args.slo.as_deref())?;
    let mut workload = Workload::from_path(&args.trace)?;
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate {rate}: needs a positive number of requests per second");
        }
        workload = workload.at_rate(rate);
    }
    if workload.arrivals().is_empty() {
        bail!("{}: the trace has no requests", args.trace.display());
    }
    let split = match (args.part, args.start_at) {
        (Some((index, of)), Some(start_at)) => {
            if args.load_loop == LoopArg::Closed {
                bail!("--part splits an open loop's schedule; a closed loop has none to split");
            }
            workload = workload.part(index, of)?;
            if workload.arrivals().is_empty() {
                bail!(
                    "--part {index}/{of}: this part of the {} requests is empty",
                    index + 1
                );
            }
            Some(shortlist_loadgen::driver::Split {
                index,
                of,
                start_at,
                host: args
                    .host
                    .clone()
                    .unwrap_or_else(shortlist_runner::config::hostname),
            })
        }
        _ => None,
    };
    let load = match (args.load_loop, args.clients, args.max_concurrency) {
        (LoopArg::Open, None, cap) => {
            if cap == Some(0) {
                bail!("--max-concurrency 0: needs at least 1");
            }
            LoadSpec::Open { cap }
        }
        (LoopArg::Open, Some(_), _) => {
            bail!("--clients is for --loop closed; an open loop follows the trace's times")
        }
        (LoopArg::Closed, _, Some(_)) => {
            bail!("--max-concurrency is for --loop open; a closed loop's population is --clients")
        }
        (LoopArg::Closed, clients, None) => {
            let clients = clients.unwrap_or(1);
            if clients == 0 {
                bail!("--clients 0: needs at least 1");
            }
            LoadSpec::Closed {
                clients,
                think: ThinkTime::parse(&args.think)?,
            }
        }
    };
    let (target, _served) = load_target(&args.target, config)?;
    let workload = Arc::new(workload);
    let output = RunOutput {
        path: Some(args.output.clone()),
        keep: false,
        progress: !args.quiet,
    };
    let result: RunResult = match target {
        LoadTarget::Sim(_) if split.is_some() => {
            bail!("--part: the simulated target runs on virtual time, with nothing to split")
        }
        LoadTarget::Sim(config) => {
            let options = run_options(&args.target, load, args.seed, Pacing::Virtual)?;
            let mut extra = serde_json::Map::new();
            extra.insert("clock".into(), "virtual (simulated target)".into());
            let runtime = virtual_runtime().context("starting the runtime")?;
            runtime.block_on(async {
                let (_never, stop) = stop_signal();
                run_load(
                    SimTarget::spawn(config),
                    Arc::clone(&workload),
                    options,
                    slo.clone(),
                    output,
                    extra,
                    stop,
                )
                .await
            })?
        }
        LoadTarget::Http(http) => {
            let mut options = run_options(&args.target, load, args.seed, Pacing::Precise)?;
            options.split = split;
            let runtime = real_runtime().context("starting the runtime")?;
            runtime.block_on(async {
                let mut extra = serde_json::Map::new();
                // A closed loop offers what its clients can: no rate to calibrate against.
                if !args.target.no_calibrate && matches!(load, LoadSpec::Open { .. }) {
                    let peak = workload.peak_rate_1s();
                    eprintln!("calibrating this client against an in-process mock…");
                    let calibration = calibrate_for(
                        peak,
                        workload.mean_rate(),
                        calibration_tokens(&workload),
                    )
                    .await?;
                    eprintln!("{}", describe_calibration(&calibration, peak));
                    let bound = match refuses(&calibration, peak) {
                        Some(why) if !args.target.allow_client_bound => bail!(
                            "refusing to run: {why}. Use --allow-client-bound to run it anyway, flagged client-bound"
                        ),
                        Some(_) => {
                            eprintln!(
                                "warning: running beyond the client's ceiling; the records are flagged client-bound"
                            );
                            true
                        }
                        None => false,
                    };
                    extra.insert("calibration".into(), serde_json::to_value(&calibration)?);
                    extra.insert("client_bound_by_calibration".into(), bound.into());
                }
                let stop = stop_on_ctrl_c();
                let result = run_load(
                    Arc::new(http),
                    Arc::clone(&workload),
                    options,
                    slo.clone(),
                    output,
                    extra,
                    stop,
                )
                .await?;
                anyhow::Ok(result)
            })?
        }
    };
    if let Some(stopped) = result.outcome.stopped_at_s {
        eprintln!(
            "stopped at {stopped:.3} s; everything measured so far is in {}",
            args.output.display()
        );
    }
    let source = args.output.display().to_string();
    let report = analyze(&source, open(&args.output)?, AnalyzeOptions::new(slo))
        .with_context(|| format!("analyzing {source}"))?;
    if args.json {
        print_json(&report)?;
    } else {
        print!("{}", super::analyze::render(&source, &report));
    }
    if let Some(u) = &report.checks.unreachable {
        eprintln!(
            "UNREACHABLE: the target answered none of the {} requests; the first error: {}",
            u.failed, u.first_error
        );
        return Ok(Outcome::CheckFailed);
    }
    let flagged = result
        .header
        .extra
        .get("client_bound_by_calibration")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    Ok(if report.passes() && !flagged {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
