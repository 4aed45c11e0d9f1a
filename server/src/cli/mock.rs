//! `shortlist mock serve`: an OpenAI-compatible mock that streams configurable tokens at a
//! configurable speed, for calibration, tests and comparing load tools on equal terms.

use std::time::Duration;

use anyhow::{Context as _, bail};
use shortlist_loadgen::mock::{Answers, MockConfig, serve_limited};

use super::Outcome;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Serve `/v1/chat/completions` and `/v1/completions` until Ctrl-C (or `--max-seconds`).
    Serve(ServeArgs),
    /// Measure this client's own ceiling: offer growing rates of short streaming requests to a
    /// mock (in-process, or one already serving at `--target`) until schedule lag breaks its bound.
    Calibrate(CalibrateArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CalibrateArgs {
    /// A running mock (`shortlist mock serve`); without it an in-process mock is started.
    #[arg(long)]
    target: Option<String>,
    /// Tokens per answer.
    #[arg(long, default_value_t = 16)]
    tokens: u32,
    /// First offered rate, req/s.
    #[arg(long, default_value_t = 250.0)]
    start_rps: f64,
    /// Highest offered rate, req/s.
    #[arg(long, default_value_t = 64_000.0)]
    max_rps: f64,
    /// Factor between successive rates.
    #[arg(long, default_value_t = 2.0)]
    growth: f64,
    /// Seconds per step.
    #[arg(long, default_value_t = 1.0)]
    step_s: f64,
    /// Schedule-lag p99 bound, in ms.
    #[arg(long, default_value_t = 1.0)]
    lag_ms: f64,
    /// Worker threads of the client (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0 picks a free one; the address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:8000")]
    addr: String,
    /// Tokens per answer (fewer when a request's `max_tokens` asks for fewer).
    #[arg(long, default_value_t = 16)]
    tokens: u32,
    /// Gap between tokens, in ms.
    #[arg(long, default_value_t = 0.0)]
    itl_ms: f64,
    /// Time to the first token, in ms.
    #[arg(long, default_value_t = 0.0)]
    ttft_ms: f64,
    /// Stop by itself after this many seconds (tests, scripted benchmarks).
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Worker threads of the server (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Canned answers (JSON lines: `{"match": TEXT, "content": ANSWER, "tool_calls": [...]}`, or
    /// `{"match": TEXT, "status": 503, "error": WHY}`): a chat request whose last user message
    /// contains `match` gets that answer; others get the token stream.
    #[arg(long)]
    answers: Option<std::path::PathBuf>,
    #[command(flatten)]
    limits: super::limits::LimitArgs,
}

fn millis(flag: &str, value: f64) -> anyhow::Result<Duration> {
    if !(value.is_finite() && value >= 0.0) {
        bail!("{flag} {value}: needs a number of milliseconds ≥ 0");
    }
    Ok(Duration::from_secs_f64(value / 1000.0))
}

pub(crate) fn run(command: Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Serve(args) => serve_command(args),
        Command::Calibrate(args) => calibrate_command(args),
    }
}

fn calibrate_command(args: CalibrateArgs) -> anyhow::Result<Outcome> {
    use shortlist_loadgen::calibrate::{calibrate, calibrate_against};
    if !(args.start_rps > 0.0
        && args.max_rps >= args.start_rps
        && args.growth > 1.0
        && args.step_s > 0.0)
    {
        bail!("need 0 < --start-rps ≤ --max-rps, --growth > 1 and --step-s > 0");
    }
    let lag = millis("--lag-ms", args.lag_ms)?.as_secs_f64();
    let step = Duration::from_secs_f64(args.step_s);
    let runtime = shortlist_loadgen::run::real_runtime_with_threads(args.threads)
        .context("starting the runtime")?;
    let found = runtime.block_on(async {
        match &args.target {
            Some(url) => {
                calibrate_against(
                    url,
                    args.start_rps,
                    args.max_rps,
                    args.growth,
                    step,
                    args.tokens,
                    lag,
                )
                .await
            }
            None if args.growth == 2.0 => {
                calibrate(args.start_rps, args.max_rps, step, args.tokens, lag).await
            }
            None => bail_io("--growth other than 2 needs --target (a mock in its own process)"),
        }
    })?;
    // A target that failed every calibration request was never measured: it is unreachable,
    // not a client with a ceiling of 0 req/s.
    let answered = found.steps.iter().any(|s| s.failed < s.requests);
    if !answered {
        let what = args.target.as_deref().unwrap_or("the in-process mock");
        eprintln!(
            "UNREACHABLE: {what} answered none of the {} calibration requests; no ceiling was measured",
            found.steps.iter().map(|s| s.requests).sum::<u64>()
        );
        if args.json {
            super::output::print_json(&found)?;
        }
        return Ok(Outcome::CheckFailed);
    }
    if args.json {
        super::output::print_json(&found)?;
    } else {
        println!("  offered req/s   achieved req/s   lag p99 ms   failed   requests");
        for s in &found.steps {
            println!(
                "  {:>13.0}   {:>14.0}   {:>10.3}   {:>6}   {:>8}",
                s.offered_rps,
                s.achieved_rps,
                s.lag_p99_s * 1000.0,
                s.failed,
                s.requests
            );
        }
        println!(
            "ceiling: {:.0} req/s with schedule-lag p99 ≤ {} ms",
            found.ceiling_rps, args.lag_ms
        );
    }
    Ok(Outcome::Success)
}

fn bail_io<T>(why: &str) -> std::io::Result<T> {
    Err(std::io::Error::other(why.to_owned()))
}

fn serve_command(args: ServeArgs) -> anyhow::Result<Outcome> {
    let config = MockConfig {
        tokens: args.tokens,
        ttft: millis("--ttft-ms", args.ttft_ms)?,
        itl: millis("--itl-ms", args.itl_ms)?,
    };
    let limits = args.limits.limits()?;
    let limit = match args.max_seconds {
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => bail!("--max-seconds {s}: needs a positive number of seconds"),
        None => None,
    };
    let answers = match &args.answers {
        Some(path) => Answers::from_jsonl(
            &path.display().to_string(),
            &super::output::read_text(path)?,
        )?,
        None => Answers::default(),
    };
    let runtime = shortlist_loadgen::run::real_runtime_with_threads(args.threads)
        .context("starting the runtime")?;
    runtime.block_on(async {
        let listener = tokio_listener(&args.addr).await?;
        let address = listener.local_addr().context("reading the bound address")?;
        println!("http://{address}");
        eprintln!(
            "mock serving on http://{address}: {} tokens, TTFT {} ms, ITL {} ms (Ctrl-C stops)",
            config.tokens, args.ttft_ms, args.itl_ms
        );
        let shutdown = shortlist_loadgen::run::ctrl_c_or_after(limit);
        serve_limited(listener, config, answers, limits, shutdown)
            .await
            .context("serving")
    })?;
    Ok(Outcome::Success)
}

async fn tokio_listener(addr: &str) -> anyhow::Result<shortlist_loadgen::mock::Listener> {
    shortlist_loadgen::mock::bind(addr)
        .await
        .with_context(|| format!("--addr {addr}: cannot listen"))
}
