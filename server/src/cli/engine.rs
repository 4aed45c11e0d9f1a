//! `shortlist engine tokenize|serve`: the local inference engine (shortlist-engine) from the CLI.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;
use shortlist_engine::device::{DeviceSpec, KvFit};
use shortlist_engine::engine::{LoadOptions, LoadedModel, check_cpu_features, load_tokenizer_path};
use shortlist_engine::fetch::{MODELS, default_models_dir, model_path};
use shortlist_engine::http::Listener;
use shortlist_engine::invariance::check_batch_invariance;
use shortlist_engine::reference::{check_greedy as check_against_reference, read_greedy_reference};
use shortlist_engine::scheduler::{EngineHandle, SchedulerConfig};
use shortlist_engine::speed::{SpeedPlan, measure};
use shortlist_runner::placement::Placement;

use shortlist_runner::config::Config;

use super::Outcome;
use super::output::print_json;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Token ids of the text on stdin, as the engine's tokenizer sees a prompt.
    Tokenize(TokenizeArgs),
    /// Serve a GGUF model over an OpenAI-compatible HTTP API with continuous batching.
    Serve(ServeArgs),
    /// Greedy generation held to llama.cpp's pinned token ids (tests/data/engine/greedy_ref_*):
    /// free running and teacher forced, on any device. Exit 1 when a prompt fails.
    CheckGreedy(CheckGreedyArgs),
    /// Whether the forward pass on a device is batch-invariant: each reference prompt's logits
    /// alone against copies of the same prompts batched (joining two at a step, fed the lone
    /// runs' tokens), bit for bit. Exit 1 when any step differs.
    CheckBatch(CheckBatchArgs),
    /// Raw forward-pass speed on a device: prefill of N-token prompts, and decode steps of B
    /// sequences together (one forward pass per step). Compute throughput, not goodput.
    Speed(SpeedArgs),
}

/// Where the model runs: `cpu`, `cuda` or `cuda:N` (default: GPU 0 in a binary built with
/// `--features cuda` when one is visible, else the CPU).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct DeviceArg {
    /// cpu, cuda or cuda:N (default: GPU 0 when this binary has CUDA and a GPU is visible, else
    /// the CPU).
    #[arg(long, value_parser = parse_device)]
    device: Option<DeviceSpec>,
}

fn parse_device(s: &str) -> Result<DeviceSpec, String> {
    s.parse()
        .map_err(|e: shortlist_engine::EngineError| e.to_string())
}

impl DeviceArg {
    /// The model at `path` loaded with `context` on the device named; on the CPU, our kernels'
    /// instruction set checked first.
    pub(crate) fn load(
        &self,
        config: &Config,
        path: &Path,
        context: usize,
    ) -> anyhow::Result<(Placement, LoadedModel)> {
        let placement = self.place(config)?;
        if !placement.spec.is_cuda() {
            check_cpu_features()?;
        }
        let options = LoadOptions {
            context: Some(context),
            device: placement.device.clone(),
        };
        // The engine's errors name the model file already.
        let model = LoadedModel::open(path, &options)?;
        Ok((placement, model))
    }

    /// The device opened, with what it is: `--device`, else `SHORTLIST_DEVICE`, else the
    /// default.
    pub(crate) fn place(&self, config: &Config) -> anyhow::Result<Placement> {
        let named = self.device.map(|d| d.to_string());
        Ok(Placement::resolve(&[
            ("--device", named.as_deref()),
            ("SHORTLIST_DEVICE", config.device.as_deref()),
        ])?)
    }
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckGreedyArgs {
    /// A GGUF file, a model folder, or the name of a fetched model.
    #[arg(long)]
    model: String,
    /// The pinned reference (JSON lines: name, prompt_ids, ids, margins).
    #[arg(long)]
    reference: PathBuf,
    #[command(flatten)]
    device: DeviceArg,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckBatchArgs {
    /// A GGUF file, a model folder, or the name of a fetched model.
    #[arg(long)]
    model: String,
    /// The prompts: a reference file as `check-greedy` takes (its `name` and `prompt_ids`).
    #[arg(long)]
    reference: PathBuf,
    /// Steps compared per prompt: its prefill and then one per greedy token.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=4096))]
    steps: u64,
    /// Copies of each prompt in the batched run (they join two at a step, so batches grow past
    /// the row counts where GPU libraries switch kernels).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    copies: u64,
    #[command(flatten)]
    device: DeviceArg,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SpeedArgs {
    /// A GGUF file, a model folder, or the name of a fetched model.
    #[arg(long)]
    model: String,
    #[command(flatten)]
    device: DeviceArg,
    /// Prompt lengths to prefill (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "512,2048")]
    prefill: Vec<usize>,
    /// Prompt tokens per forward pass during prefill.
    #[arg(long, default_value_t = 512)]
    prefill_chunk: usize,
    /// Sequence counts decoded together (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,8,32,64")]
    batch: Vec<usize>,
    /// Prompt tokens each decoding sequence holds before the timed steps.
    #[arg(long, default_value_t = 128)]
    decode_context: usize,
    /// Timed decode steps per batch size.
    #[arg(long, default_value_t = 32)]
    decode_steps: usize,
    /// CPU compute threads (default: every core — a speed measurement runs alone, with no
    /// server or load generator to leave a core to; CANDLE_NUM_THREADS in the environment wins).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) threads: Option<u64>,
    /// Context window to load the model with.
    #[arg(long, default_value_t = 4096)]
    context: usize,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// A GGUF file, a model folder (one GGUF file, with `tokenizer.json` used when present), or
    /// the name of a fetched model (`shortlist models list`).
    #[arg(long)]
    model: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    addr: String,
    /// Context window to enforce (default: the model's, capped at 8192).
    #[arg(long)]
    context: Option<usize>,
    /// Compute threads (default: cores - 1, at least 1, so that one core is left to the server;
    /// CANDLE_NUM_THREADS in the environment wins).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 8)]
    max_running: usize,
    /// New tokens per forward step (prefill chunks plus decode tokens).
    #[arg(long, default_value_t = 256)]
    step_tokens: usize,
    /// While requests decode, cut each step's prefill so the step is predicted to take at most
    /// this many milliseconds, from the steps already run (0: chunks by `--step-tokens` alone).
    #[arg(long, default_value_t = 100)]
    max_step_ms: u64,
    /// KV cache tokens the running requests may reserve together.
    #[arg(long, default_value_t = 32768)]
    kv_budget_tokens: usize,
    /// Prefix cache size in MiB (0 disables it).
    #[arg(long, default_value_t = 256)]
    prefix_cache_mib: usize,
    #[command(flatten)]
    device: DeviceArg,
    #[command(flatten)]
    limits: super::limits::LimitArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TokenizeArgs {
    /// A GGUF file, a model folder (one GGUF file, with `tokenizer.json` used when present), or
    /// the name of a fetched model (`shortlist models list`).
    #[arg(long)]
    model: String,
    /// Parse control tokens written in the text (such as `<|im_start|>`) as their ids.
    #[arg(long)]
    special: bool,
    /// Do not prepend BOS even when the model asks for it.
    #[arg(long)]
    no_bos: bool,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// The log filter when `SHORTLIST_LOG` is unset: `engine serve` logs one line per request.
pub(crate) fn default_log_filter(cmd: &Command) -> &'static str {
    match cmd {
        Command::Serve(_) => "warn,shortlist_engine::http=info",
        Command::Tokenize(_)
        | Command::CheckGreedy(_)
        | Command::CheckBatch(_)
        | Command::Speed(_) => "warn",
    }
}

/// The compute threads a command asks for, if it asks.
pub(crate) fn requested_threads(cmd: &Command) -> Option<usize> {
    match cmd {
        Command::Serve(args) => args.threads,
        Command::Speed(args) => Some(super::threads_or_every_core(args.threads)),
        Command::Tokenize(_) | Command::CheckGreedy(_) | Command::CheckBatch(_) => None,
    }
}

pub(crate) fn run(cmd: Command, config: &Config) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Tokenize(args) => tokenize(args),
        Command::Serve(args) => serve(args, config),
        Command::CheckGreedy(args) => check_greedy(args, config),
        Command::CheckBatch(args) => check_batch(args, config),
        Command::Speed(args) => speed(args, config),
    }
}

/// A model argument: an existing path (a GGUF file, or a model folder that the engine opens with
/// its `tokenizer.json` when it has one), else a known model name in the models folder.
pub(crate) fn resolve_model(arg: &str) -> anyhow::Result<PathBuf> {
    let path = Path::new(arg);
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    if let Some(spec) = MODELS.iter().find(|m| m.name == arg) {
        let p = model_path(&default_models_dir(), spec);
        anyhow::ensure!(
            p.exists(),
            "model {arg} is not fetched yet ({} is absent); run `shortlist models fetch`",
            p.display()
        );
        return Ok(p);
    }
    anyhow::bail!(
        "{arg}: no such file, and not a known model name ({})",
        MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
    )
}

fn tokenize(args: TokenizeArgs) -> anyhow::Result<Outcome> {
    let path = resolve_model(&args.model)?;
    // The engine's errors name the model file already.
    let tok = load_tokenizer_path(&path)?;
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .context("reading the text from stdin")?;
    let ids = tok.encode(&text, args.special, !args.no_bos)?;
    if args.json {
        print_json(&json!({"ids": ids, "count": ids.len()}))?;
    } else {
        println!(
            "{}",
            ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ")
        );
        eprintln!("{} tokens", ids.len());
    }
    Ok(Outcome::Success)
}

fn serve(args: ServeArgs, config: &Config) -> anyhow::Result<Outcome> {
    let threads = config.threads;
    let path = resolve_model(&args.model)?;
    let limits = args.limits.limits()?;
    // Listen before loading: a busy port is reported at once, not after the weights are read.
    let listener = Listener::bind(&args.addr, 1)?.with_limits(limits);
    let (placement, model) = args
        .device
        .load(config, &path, args.context.unwrap_or(8192))?;
    let spec = placement.spec;
    let fit = KvFit::on_gpu_of(
        &model,
        args.kv_budget_tokens as u64,
        (args.prefix_cache_mib << 20) as u64,
    )?;
    let on = match fit {
        Some((gpu, fit)) => {
            // The KV cache and the prefix cache live in the GPU's memory: refuse to start with
            // more than fits, rather than fail a request later.
            fit.check(spec)?;
            format!("{spec}: {}", gpu.describe())
        }
        None => format!("{threads} compute threads"),
    };
    eprintln!(
        "loaded {} in {:.2} s: {} MiB of weights, context {}, {on}, tokenizer from {}",
        model.name(),
        model.load_time().as_secs_f64(),
        model.model().weight_bytes() >> 20,
        model.context(),
        model.tokenizer_source()
    );
    let cfg = SchedulerConfig {
        step_tokens: args.step_tokens.max(1),
        prefill_chunk: args.step_tokens.max(1),
        max_running: args.max_running.max(1),
        kv_budget_tokens: args.kv_budget_tokens,
        prefix_cache_bytes: args.prefix_cache_mib << 20,
        step_time_target: (args.max_step_ms > 0)
            .then(|| std::time::Duration::from_millis(args.max_step_ms)),
        ..SchedulerConfig::default()
    };
    let engine = EngineHandle::spawn(std::sync::Arc::new(model), cfg, 1024)?;
    let addr = listener
        .local_addr()
        .with_context(|| format!("reading the address bound for {}", args.addr))?;
    eprintln!("listening on http://{addr}");
    listener
        .serve_until(engine, std::future::pending())
        .with_context(|| format!("serving on {addr}"))?;
    Ok(Outcome::Success)
}

fn check_greedy(args: CheckGreedyArgs, config: &Config) -> anyhow::Result<Outcome> {
    let path = resolve_model(&args.model)?;
    let refs = read_greedy_reference(&args.reference)?;
    let longest = refs
        .iter()
        .map(|r| r.prompt.len() + r.want.len())
        .max()
        .unwrap_or(0);
    let (placement, model) = args.device.load(config, &path, longest.max(2048))?;
    let report = check_against_reference(&model, &refs)?;
    let spec = placement.spec;
    let lines = report.cases.iter().map(|c| c.describe()).chain([format!(
        "{}: {} of {} prompts pass on {spec}",
        model.name(),
        report
            .cases
            .iter()
            .filter(|c| c.failures.is_empty())
            .count(),
        report.cases.len()
    )]);
    let passed = report.passed;
    print_check(
        args.json,
        &model,
        &placement,
        &args.reference,
        &report,
        lines,
        passed,
    )
}

fn check_batch(args: CheckBatchArgs, config: &Config) -> anyhow::Result<Outcome> {
    let path = resolve_model(&args.model)?;
    let prompts: Vec<(String, Vec<u32>)> = read_greedy_reference(&args.reference)?
        .into_iter()
        .map(|r| (r.name, r.prompt))
        .collect();
    let (steps, copies) = (usize::try_from(args.steps)?, usize::try_from(args.copies)?);
    let longest = prompts.iter().map(|(_, p)| p.len()).max().unwrap_or(0) + steps;
    let (placement, model) = args.device.load(config, &path, longest.max(2048))?;
    let report = check_batch_invariance(&model, &prompts, steps, copies)?;
    let spec = placement.spec;
    let summary = format!(
        "{} on {spec}: {} of {} prompts the same bits alone and in batches of up to {} sequences",
        model.name(),
        report
            .cases
            .iter()
            .filter(|c| c.first_difference.is_none())
            .count(),
        report.cases.len(),
        report.largest_batch
    );
    let repeat = (!report.repeatable)
        .then(|| format!("the lone runs themselves differ from run to run on {spec}"));
    let lines = report
        .cases
        .iter()
        .map(|c| c.describe())
        .chain([summary])
        .chain(repeat);
    let identical = report.identical;
    print_check(
        args.json,
        &model,
        &placement,
        &args.reference,
        &report,
        lines,
        identical,
    )
}

/// A check's report: one JSON document naming the model, device and reference, or its lines;
/// the outcome is a failed check unless it `passed`.
fn print_check(
    json: bool,
    model: &LoadedModel,
    placement: &Placement,
    reference: &Path,
    report: &impl serde::Serialize,
    lines: impl Iterator<Item = String>,
    passed: bool,
) -> anyhow::Result<Outcome> {
    if json {
        print_json(&json!({
            "model": model.name(),
            "device": placement.spec.to_string(),
            "gpu": placement.gpu,
            "reference": reference.display().to_string(),
            "report": report,
        }))?;
    } else {
        for line in lines {
            println!("{line}");
        }
    }
    Ok(if passed {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

fn speed(args: SpeedArgs, config: &Config) -> anyhow::Result<Outcome> {
    let path = resolve_model(&args.model)?;
    let (placement, model) = args.device.load(config, &path, args.context)?;
    let spec = placement.spec;
    let plan = SpeedPlan {
        prefill: args.prefill,
        prefill_chunk: args.prefill_chunk,
        batches: args.batch,
        decode_context: args.decode_context,
        decode_steps: args.decode_steps,
    };
    let report = measure(&model, &spec.to_string(), &plan, |what| {
        eprintln!("{}: {what} on {spec}", model.name());
    })?;
    if args.json {
        print_json(&serde_json::to_value(&report)?)?;
    } else {
        println!(
            "{} on {spec}, {} CPU compute thread{}",
            report.model,
            report.threads,
            if report.threads == 1 { "" } else { "s" }
        );
        for p in &report.prefill {
            println!(
                "prefill {:>5} tokens: {:>9.1} tok/s ({:.3} s)",
                p.tokens, p.tokens_per_s, p.seconds
            );
        }
        for d in &report.decode {
            println!(
                "decode batch {:>3}: {:>9.1} tok/s ({:.2} ms a step)",
                d.batch, d.tokens_per_s, d.step_ms
            );
        }
    }
    Ok(Outcome::Success)
}
