//! `shortlist eval run`: one candidate over one eval set, resumable case by case, with LLM judges
//! for the judge checks; `shortlist eval calibrate-judge`: a judge against human labels.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use shortlist_engine::device::Device;
use shortlist_evals::EvalSet;
use shortlist_evals::score::judge::{
    GatePolicy, JudgeCalibration, calibration_items, parse_labels,
};
use shortlist_runner::candidate::{CandidateSpec, Decoding, open};
use shortlist_runner::config::Config;
use shortlist_runner::judge::{
    JUDGE_MAX_TOKENS, Judges, calibrate, open_judges, parse_judge_arg, parse_judge_args,
};
use shortlist_runner::quality::{Progress, cases_in_flight, run_quality_on};

use super::Outcome;
use super::output::{print_json, read_text};

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The eval set (`shortlist.evalset.v1` YAML).
    #[arg(long)]
    evalset: PathBuf,
    /// `gguf:PATH` (local engine), a `.gguf` path, or `http(s)://HOST:PORT[#MODEL]` (an
    /// OpenAI-compatible endpoint).
    #[arg(long)]
    candidate: String,
    /// Write the results (`shortlist.eval-results.v1`, the shape `eval score` writes) here.
    #[arg(long, short = 'o')]
    output: Option<PathBuf>,
    /// Progress file: finished cases are appended here, and a rerun with the same file resumes
    /// where it stopped. Default: OUTPUT with `.progress.jsonl`, else `eval-run.progress.jsonl`.
    #[arg(long)]
    progress: Option<PathBuf>,
    /// Most tokens generated per case (at least 1).
    #[arg(long, default_value_t = 256, value_parser = positive_tokens)]
    max_tokens: u64,
    /// Sample with this temperature instead of greedy decoding (needs --seed).
    #[arg(long, requires = "seed")]
    temperature: Option<f32>,
    /// Seed for sampling.
    #[arg(long)]
    seed: Option<u64>,
    /// Cases in flight at once (1 to 64): a local model batches them in its scheduler and
    /// shares their common prompt prefix; an endpoint gets as many concurrent requests. A case's
    /// answer does not depend on it.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=64))]
    concurrency: u64,
    /// Run only every K-th case (the 1st, (K+1)-th, …): a quick spread over the set's categories.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    every: Option<u64>,
    /// Compute threads of the local engine. Default: every core — a quality run has no load
    /// generator to leave a core to (a load run does). `CANDLE_NUM_THREADS` wins when set.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) threads: Option<u64>,
    /// A judge for the set's judge checks: NAME (as the checks' `judge:` says) = SOURCE (as
    /// --candidate takes it). Repeatable. Checks whose judge is not given stay unscored.
    #[arg(long = "judge", value_name = "NAME=SOURCE")]
    judges: Vec<String>,
    /// Most tokens a judge generates per verdict (greedy).
    #[arg(long, default_value_t = JUDGE_MAX_TOKENS)]
    judge_max_tokens: usize,
    /// A judge calibration record (shortlist.judge-calibration.v1, from `eval calibrate-judge`).
    /// Repeatable. A judge check may drive a disqualifier only with a calibration that meets the
    /// bar (≥ 20 items, κ ≥ 0.6) for its judge, rubric and model; otherwise it is advisory.
    #[arg(long = "judge-calibration", value_name = "FILE")]
    judge_calibrations: Vec<PathBuf>,
    /// Where a local (GGUF) candidate runs; judges run on the CPU.
    #[command(flatten)]
    device: super::engine::DeviceArg,
    /// Print the results as one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CalibrateArgs {
    /// The eval set (YAML) whose judge checks the labels refer to.
    #[arg(long)]
    evalset: PathBuf,
    /// Human labels (JSON Lines): `{"id": CASE, "output": REPLY, "human": "pass"|"fail"}`, with
    /// `"check": NAME` when the case has several judge checks for this judge.
    #[arg(long)]
    labels: PathBuf,
    /// The judge: NAME (as the checks' `judge:` says) = SOURCE (as --candidate takes it).
    #[arg(long, value_name = "NAME=SOURCE")]
    judge: String,
    /// Most tokens the judge generates per verdict (greedy).
    #[arg(long, default_value_t = JUDGE_MAX_TOKENS)]
    max_tokens: usize,
    /// Where to write the calibration record (shortlist.judge-calibration.v1).
    #[arg(long, short = 'o')]
    output: PathBuf,
    /// Print the calibration record as one JSON document.
    #[arg(long)]
    json: bool,
}

/// Reads calibration records, each checked for its format.
pub(crate) fn load_calibrations(paths: &[PathBuf]) -> anyhow::Result<Vec<JudgeCalibration>> {
    paths
        .iter()
        .map(|p| {
            let text = read_text(p)?;
            Ok(JudgeCalibration::from_json(
                &p.display().to_string(),
                &text,
            )?)
        })
        .collect()
}

/// A token count of at least 1.
fn positive_tokens(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("0: a case needs at least one generated token".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("`{text}` is not a number of tokens")),
    }
}

fn open_judges_reporting(
    set: &EvalSet,
    specs: Vec<(String, CandidateSpec)>,
    source: &str,
) -> anyhow::Result<Judges> {
    let (judges, warnings) = open_judges(set, specs, source, |name, model, seconds| {
        eprintln!("judge {name} = {model} ready in {seconds:.1} s");
    })?;
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    Ok(judges)
}

/// `config`: the local engine's compute threads, as `main` resolved them, and the device setting.
pub(crate) fn run(a: RunArgs, config: &Config) -> anyhow::Result<Outcome> {
    let threads = config.threads;
    let source = a.evalset.display().to_string();
    let set = EvalSet::from_yaml(&source, &read_text(&a.evalset)?)?;
    let spec = CandidateSpec::parse(&a.candidate)?;
    if let Some(output) = &a.output {
        let mut inputs = vec![("eval set", a.evalset.as_path())];
        inputs.extend(
            a.judge_calibrations
                .iter()
                .map(|p| ("judge calibration", p.as_path())),
        );
        super::output::refuse_overwriting_input("-o", output, &inputs)?;
    }
    let decoding = Decoding {
        max_tokens: a.max_tokens as usize,
        sampling: match (a.temperature, a.seed) {
            (Some(t), Some(seed)) if t > 0.0 => Some((t, seed)),
            _ => None,
        },
    };
    let progress_path = a.progress.clone().unwrap_or_else(|| match &a.output {
        Some(out) => out.with_extension("progress.jsonl"),
        None => PathBuf::from("eval-run.progress.jsonl"),
    });
    super::output::refuse_overwriting_input(
        "--progress",
        &progress_path,
        &[("eval set", a.evalset.as_path())],
    )?;
    if let Some(output) = &a.output {
        super::output::refuse_overwriting_input(
            "-o",
            output,
            &[("progress file", progress_path.as_path())],
        )?;
    }
    let judge_specs = parse_judge_args(&a.judges)?;
    let calibrations = load_calibrations(&a.judge_calibrations)?;
    let loading = Instant::now();
    let placement = match &spec {
        CandidateSpec::Gguf(_) => Some(a.device.place(config)?),
        CandidateSpec::Endpoint { .. } => None,
    };
    let device = placement.as_ref().map_or(Device::Cpu, |p| p.device.clone());
    let mut generator =
        open(&spec, &device).with_context(|| format!("opening candidate {}", a.candidate))?;
    let threads = match &placement {
        Some(p) => format!(
            " on {}, {threads} compute thread{}",
            p.describe(),
            if threads == 1 { "" } else { "s" }
        ),
        None => String::new(),
    };
    eprintln!(
        "candidate {} ready in {:.1} s{threads}",
        generator.name(),
        loading.elapsed().as_secs_f64()
    );
    let mut judges = open_judges_reporting(&set, judge_specs, &source)?
        .with_calibrations(calibrations, GatePolicy::default())
        .with_max_tokens(a.judge_max_tokens);
    let mut progress =
        Progress::open_judged(&progress_path, &set, &generator.name(), &decoding, &judges)?;
    if progress.done() > 0 {
        eprintln!(
            "resuming: {} of {} cases already done in {}",
            progress.done(),
            set.cases().len(),
            progress_path.display()
        );
    }
    let bar = indicatif::ProgressBar::new(
        set.cases().len().div_ceil(a.every.unwrap_or(1) as usize) as u64,
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} cases  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut passed = 0usize;
    let mut decided = 0usize;
    let mut ran = 0usize;
    let every = a.every.unwrap_or(1) as usize;
    let results = run_quality_on(
        &set,
        &|i| i % every == 0,
        generator.as_mut(),
        &mut judges,
        &decoding,
        a.concurrency as usize,
        &mut progress,
        |tick| {
            if let Some(ok) = tick.result.outcome.decided() {
                decided += 1;
                passed += usize::from(ok);
            }
            ran += usize::from(!tick.resumed);
            bar.set_position(tick.finished as u64);
            bar.set_message(format!(
                "{passed}/{decided} passed, last {} ({})",
                tick.result.id,
                if tick.resumed { "resumed" } else { "ran" }
            ));
        },
        |position, _total, case, error| {
            bar.set_position(position as u64);
            bar.println(format!(
                "case {case}: failed outside the model, not scored: {error}"
            ));
        },
    )?;
    bar.finish_and_clear();
    // The cases asked now (answered or failed outside the model), and the most in flight, as
    // each stored case says.
    let asked = ran + results.errors.len();
    let in_flight = if asked == 0 {
        "none asked now, every case resumed".to_owned()
    } else {
        let most = cases_in_flight(a.concurrency as usize, asked);
        format!("{asked} asked now, up to {most} in flight")
    };
    eprintln!(
        "{} cases in {:.1} s, {in_flight} ({})",
        results.cases.len(),
        started.elapsed().as_secs_f64(),
        decoding.describe()
    );
    super::eval::emit_results(&results, a.output.as_deref(), a.json)
}

pub(crate) fn calibrate_judge(a: CalibrateArgs) -> anyhow::Result<Outcome> {
    let source = a.evalset.display().to_string();
    let set = EvalSet::from_yaml(&source, &read_text(&a.evalset)?)?;
    let labels_file = a.labels.display().to_string();
    let labels = parse_labels(&labels_file, &read_text(&a.labels)?)?;
    let (name, spec) = parse_judge_arg(&a.judge)?;
    let (check, cases) = calibration_items(&set, &labels_file, &labels, &name)?;
    let items: Vec<(&shortlist_evals::Case, &str, bool)> = cases
        .iter()
        .zip(&labels)
        .map(|(case, l)| (*case, l.output.as_str(), l.human))
        .collect();
    let loading = Instant::now();
    // Judges run on the CPU, as in `eval run`.
    let mut judge =
        open(&spec, &Device::Cpu).with_context(|| format!("opening judge {}", a.judge))?;
    eprintln!(
        "judge {name} = {} ready in {:.1} s; {} labelled replies, rubric {}",
        judge.name(),
        loading.elapsed().as_secs_f64(),
        items.len(),
        &check.rubric_sha256()[..12]
    );
    let bar = indicatif::ProgressBar::new(items.len() as u64);
    let policy = GatePolicy::default();
    let record = calibrate(
        &check,
        &items,
        judge.as_mut(),
        a.max_tokens,
        policy,
        |done, _| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    write_json(&a.output, &record)?;
    let summary = record.summarize(policy);
    if a.json {
        print_json(&record)?;
    } else {
        println!(
            "judge {} ({}), check {}, rubric {}",
            record.judge,
            record.judge_model.as_deref().unwrap_or("?"),
            check.name(),
            &record.rubric_sha256[..12]
        );
        println!(
            "{} labelled replies: {} decided by the judge, {} with neither PASS nor FAIL (left out of κ)",
            items.len(),
            summary.items,
            summary.undecided
        );
        let agreed = record.labels.iter().filter(|l| l.human == l.judge).count();
        println!(
            "agreement {:.1}% ({agreed}/{}), Cohen's κ {:.2}",
            100.0 * summary.agreement,
            summary.items,
            summary.kappa
        );
        println!(
            "gate (≥ {} items, κ ≥ {}): {}",
            summary.min_items,
            summary.min_kappa,
            if summary.meets_gate {
                "met: this judge's verdicts on this rubric may drive a disqualifier"
            } else {
                "not met: this judge's verdicts on this rubric stay advisory"
            }
        );
        println!("wrote {}", a.output.display());
    }
    Ok(if summary.meets_gate {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

fn write_json(path: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value)?;
    std::fs::write(path, text + "\n").with_context(|| format!("{}: cannot write", path.display()))
}
