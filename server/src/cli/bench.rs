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
use shortlist_loadgen::calibrate::{Calibration, calibrate};
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
    /// Print the report as one JSON document (`shortlist.report.v1`).
    #[arg(long)]
    json: bool,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// What kind of target a `--target` names.
pub(crate) enum TargetKind {
    Http(OpenAiTarget),
    Sim(SimConfig),
}

/// Load `model` (a GGUF path or a model name of docs/models.md) into this process's engine and
/// serve it on a free loopback port from its own threads; returns the URL. The engine keeps its
/// compute threads off the load generator's runtime, and its per-request stage timings join the
/// records.
fn start_engine(model: &str) -> anyhow::Result<String> {
    use shortlist_engine::engine::{LoadOptions, LoadedModel, check_cpu_features};
    use shortlist_engine::scheduler::{EngineHandle, SchedulerConfig};
    check_cpu_features()?;
    let path = super::engine::resolve_model(model)?;
    let loaded = LoadedModel::open(&path, &LoadOptions::default())
        .with_context(|| format!("loading {}", path.display()))?;
    eprintln!(
        "loaded {} in {:.2} s",
        loaded.name(),
        loaded.load_time().as_secs_f64()
    );
    let engine = EngineHandle::spawn(Arc::new(loaded), SchedulerConfig::default(), 1024)?;
    let (ready, address) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("shortlist-engine-http".to_owned())
        .spawn(move || {
            let served = shortlist_engine::http::serve_blocking(engine, "127.0.0.1:0", 1, |addr| {
                let _ = ready.send(addr);
            });
            if let Err(e) = served {
                tracing::error!(error = %e, "the in-process engine server stopped");
            }
        })
        .context("starting the engine's HTTP thread")?;
    let address = address
        .recv_timeout(Duration::from_secs(30))
        .context("the in-process engine server did not start listening")?;
    Ok(format!("http://{address}"))
}

pub(crate) fn parse_target(args: &TargetArgs) -> anyhow::Result<TargetKind> {
    let spec = args.target.as_str();
    if spec == "sim" || spec.starts_with("sim:") {
        return Ok(TargetKind::Sim(SimConfig::parse(spec)?));
    }
    if let Some(model) = spec.strip_prefix("engine:") {
        if model.is_empty() {
            bail!(
                "target `{spec}`: name a model (a GGUF path or a MODELS.md name) after `engine:`"
            );
        }
        let url = start_engine(model)?;
        return Ok(TargetKind::Http(
            OpenAiTarget::new(&url, &args.model, args.ignore_eos)?
                .with_request_ids(args.request_ids),
        ));
    }
    Ok(TargetKind::Http(
        OpenAiTarget::new(spec, &args.model, args.ignore_eos)?.with_request_ids(args.request_ids),
    ))
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
    if !(args.timeout_s.is_finite() && args.timeout_s > 0.0) {
        bail!(
            "--timeout-s {}: needs a positive number of seconds",
            args.timeout_s
        );
    }
    Ok(RunOptions {
        load,
        timeout: Duration::from_secs_f64(args.timeout_s),
        retries: args.retries,
        retry_backoff: Duration::from_millis(100),
        seed,
        pacing,
    })
}

/// Measure the client's ceiling, enough to judge a trace peaking at `peak_rps`: from 100 req/s
/// (or 1,000 for busy traces) doubling up to the peak, stopping at the first rate that breaks the
/// lag bound, so that a hopeless trace costs a few short steps rather than its own load.
pub(crate) async fn calibrate_for(peak_rps: f64, tokens: u32) -> anyhow::Result<Calibration> {
    eprintln!("calibrating this client against an in-process mock ({tokens} tokens per answer)…");
    let peak = peak_rps.max(100.0);
    let start = peak.min(1000.0);
    let found = calibrate(start, peak, Duration::from_millis(500), tokens, 0.001)
        .await
        .context("self-calibration against the in-process mock")?;
    if found.ceiling_rps >= peak {
        eprintln!(
            "client ceiling on this host: at least {:.0} req/s with schedule-lag p99 ≤ 1 ms",
            found.ceiling_rps
        );
    } else {
        let failing = found.steps.last().map_or(0.0, |s| s.offered_rps);
        let best = found
            .steps
            .iter()
            .filter(|s| s.offered_rps == failing)
            .map(|s| s.lag_p99_s)
            .fold(f64::INFINITY, f64::min);
        eprintln!(
            "client ceiling on this host: {:.0} req/s; at {failing:.0} req/s the schedule-lag p99 was {:.2} ms (bound 1 ms)",
            found.ceiling_rps,
            best * 1000.0
        );
    }
    Ok(found)
}

/// Judge a trace's peak against the calibration: `Ok(flag)` where flag says "client-bound".
pub(crate) fn judge_ceiling(
    peak_rps: f64,
    calibration: &Calibration,
    allow: bool,
) -> anyhow::Result<bool> {
    if peak_rps <= calibration.ceiling_rps {
        return Ok(false);
    }
    if !allow {
        let tried = calibration.steps.last().map_or(0.0, |s| s.offered_rps);
        let ceiling = if calibration.ceiling_rps > 0.0 {
            format!(
                "its calibrated ceiling of {:.0} req/s",
                calibration.ceiling_rps
            )
        } else {
            format!(
                "what it could send at {tried:.0} req/s with schedule-lag p99 ≤ 1 ms (it could not)"
            )
        };
        bail!(
            "refusing to run: the workload peaks at {peak_rps:.0} req/s (busiest second), beyond this \
             client's {ceiling} on this host; its figures would describe the client, not the server. \
             Use --allow-client-bound to run it anyway, flagged client-bound"
        );
    }
    eprintln!("warning: running beyond the client's ceiling; the records are flagged client-bound");
    Ok(true)
}

fn mean_output_tokens(workload: &Workload) -> u32 {
    let n = workload.arrivals().len().max(1) as u64;
    let total: u64 = workload
        .arrivals()
        .iter()
        .map(|a| u64::from(a.request.max_tokens()))
        .sum();
    (total / n).clamp(1, 64) as u32
}

pub(crate) fn run(args: Args) -> anyhow::Result<Outcome> {
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
    let target = parse_target(&args.target)?;
    let workload = Arc::new(workload);
    let output = RunOutput {
        path: Some(args.output.clone()),
        keep: false,
        progress: !args.quiet,
    };
    let result: RunResult = match target {
        TargetKind::Sim(config) => {
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
        TargetKind::Http(http) => {
            let options = run_options(&args.target, load, args.seed, Pacing::Precise)?;
            let runtime = real_runtime().context("starting the runtime")?;
            runtime.block_on(async {
                let mut extra = serde_json::Map::new();
                if !args.target.no_calibrate {
                    let calibration =
                        calibrate_for(workload.peak_rate_1s(), mean_output_tokens(&workload))
                            .await?;
                    let bound = match load {
                        LoadSpec::Open { .. } => judge_ceiling(
                            workload.peak_rate_1s(),
                            &calibration,
                            args.target.allow_client_bound,
                        )?,
                        LoadSpec::Closed { .. } => false,
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
