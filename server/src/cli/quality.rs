//! `shortlist eval run`: one candidate over one eval set, resumable case by case.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use shortlist_evals::EvalSet;
use shortlist_runner::candidate::{CandidateSpec, Decoding, open};
use shortlist_runner::quality::{Progress, run_quality_on};

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
    /// Most tokens generated per case.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Sample with this temperature instead of greedy decoding (needs --seed).
    #[arg(long, requires = "seed")]
    temperature: Option<f32>,
    /// Seed for sampling.
    #[arg(long)]
    seed: Option<u64>,
    /// Run only every K-th case (the 1st, (K+1)-th, …): a quick spread over the set's categories.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    every: Option<u64>,
    /// Print the results as one JSON document.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: RunArgs) -> anyhow::Result<Outcome> {
    let source = a.evalset.display().to_string();
    let set = EvalSet::from_yaml(&source, &read_text(&a.evalset)?)?;
    let spec = CandidateSpec::parse(&a.candidate)?;
    let decoding = Decoding {
        max_tokens: a.max_tokens,
        sampling: match (a.temperature, a.seed) {
            (Some(t), Some(seed)) if t > 0.0 => Some((t, seed)),
            _ => None,
        },
    };
    let progress_path = a.progress.clone().unwrap_or_else(|| match &a.output {
        Some(out) => out.with_extension("progress.jsonl"),
        None => PathBuf::from("eval-run.progress.jsonl"),
    });
    let loading = Instant::now();
    let mut generator =
        open(&spec).with_context(|| format!("opening candidate {}", a.candidate))?;
    eprintln!(
        "candidate {} ready in {:.1} s",
        generator.name(),
        loading.elapsed().as_secs_f64()
    );
    let mut progress = Progress::open(&progress_path, &set, &generator.name(), &decoding)?;
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
    let every = a.every.unwrap_or(1) as usize;
    let results = run_quality_on(
        &set,
        &|i| i % every == 0,
        generator.as_mut(),
        &decoding,
        &mut progress,
        |tick| {
            if let Some(ok) = tick.result.outcome.decided() {
                decided += 1;
                passed += usize::from(ok);
            }
            bar.set_position(tick.finished as u64);
            bar.set_message(format!(
                "{passed}/{decided} passed, last {} ({})",
                tick.result.id,
                if tick.resumed { "resumed" } else { "ran" }
            ));
        },
    )?;
    bar.finish_and_clear();
    eprintln!(
        "{} cases in {:.1} s ({})",
        results.cases.len(),
        started.elapsed().as_secs_f64(),
        decoding.describe()
    );
    if let Some(path) = &a.output {
        let text = serde_json::to_string_pretty(&results)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("{}: cannot write", path.display()))?;
    }
    if a.json {
        print_json(&results)?;
    } else {
        print!("{}", results.table());
    }
    Ok(if results.failed() == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
