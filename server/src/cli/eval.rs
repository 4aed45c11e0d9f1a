//! `shortlist eval`: import eval sets from other tools, describe a set, score outputs produced
//! elsewhere, and compare two result sets with the exact McNemar test; `store`, `list`,
//! `export` and `remove` work on the sets kept in the database (`cli/catalog.rs`), `diff` on
//! their versions (`cli/diff.rs`).
//!
//! Exit status: 0 success; 1 when the command's check failed — `score`: a case failed or had no
//! output; `compare`: B is significantly worse than A (exact McNemar, p < 0.05); `import`: some
//! source item could not be mapped (the set is still written, and the items are listed); 2 bad
//! input, with the file, line and field.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use shortlist_evals::import::{self, Imported};
use shortlist_evals::response::parse_outputs;
use shortlist_evals::results::{RunResults, compare, score_outputs};
use shortlist_evals::score::judge::{GatePolicy, JudgeGate};
use shortlist_evals::set::EvalSet;

use super::Outcome;
use super::output::{print_json, read_text};

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Convert another tool's eval files into a shortlist.evalset.v1 YAML file.
    Import(ImportArgs),
    /// Check an eval set and print its version (SHA-256) and case counts per category, or with
    /// --requests the chat request of every case (JSON Lines) for generating outputs elsewhere.
    Show(ShowArgs),
    /// Score outputs produced elsewhere (one JSON line per case) against an eval set.
    Score(ScoreArgs),
    /// Compare two result sets on their shared cases (exact McNemar, per category).
    Compare(CompareArgs),
    /// Run one candidate (a GGUF model on the local engine, or an OpenAI-compatible endpoint) over
    /// an eval set; resumable case by case; judge checks asked of the --judge candidates.
    Run(super::quality::RunArgs),
    /// Run a judge over human-labelled replies and record its agreement and Cohen's κ
    /// (shortlist.judge-calibration.v1); exit 1 when the bar for driving disqualifiers is not met.
    CalibrateJudge(super::quality::CalibrateArgs),
    /// Store an eval set in the database (DATABASE_URL) under the name inside it, as the
    /// workbench's import does; changed content under a stored name becomes its next version.
    Store(super::catalog::EvalStoreArgs),
    /// The eval sets stored in the database: every version with its hash and cases, and the
    /// study versions that pin one.
    List(super::output::JsonArgs),
    /// Write a stored eval set version (default: the latest) as its YAML file, exactly as
    /// stored: an imported set kept beside the product's code.
    Export(super::catalog::EvalExportArgs),
    /// Remove a stored eval set version (default: the latest). Refused while a study version
    /// — a draft included — pins it.
    Remove(super::catalog::EvalRemoveArgs),
    /// What changed between two stored versions of an eval set (default: the latest and the
    /// one before it), or what storing a file would change (`--file`): cases added, removed
    /// and changed, each change of a field once with the cases it was made to.
    Diff(super::diff::DiffArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum From {
    /// promptfoo tests (YAML list or config with `tests:`).
    Promptfoo,
    /// OpenAI evals samples (JSONL with `input`, `ideal`).
    OpenaiEvals,
    /// inspect_ai samples (JSONL, or CSV when the file ends in .csv).
    Inspect,
    /// BFCL questions (JSONL); pass the possible_answer file with --answers.
    Bfcl,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TemplateArg {
    /// Output contains any ideal answer.
    Includes,
    /// Output starts with an ideal answer.
    Match,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The source format.
    #[arg(long, value_enum)]
    from: From,
    /// The source file.
    input: PathBuf,
    /// BFCL possible_answer file (JSONL with `id`, `ground_truth`).
    #[arg(long)]
    answers: Option<PathBuf>,
    /// The eval set's name (default: the output file's stem).
    #[arg(long)]
    name: Option<String>,
    /// openai-evals: which template the samples were written for.
    #[arg(long, value_enum, default_value_t = TemplateArg::Includes)]
    template: TemplateArg,
    /// Where to write the eval set (YAML).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print a JSON summary (cases, version, unmapped items) on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The eval set (YAML).
    evalset: PathBuf,
    #[arg(long)]
    json: bool,
    /// Print one OpenAI-style chat request per line instead: `{"id", "messages", "tools"}`, the
    /// system prompt first. Generate with any harness, then `eval score` the outputs.
    #[arg(long, conflicts_with = "json")]
    requests: bool,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// The eval set (YAML).
    #[arg(long)]
    evalset: PathBuf,
    /// The outputs (JSONL: id, output, optional tool_calls in OpenAI's shape, finish_reason).
    #[arg(long)]
    outputs: PathBuf,
    /// Name the candidate in the results.
    #[arg(long)]
    candidate: Option<String>,
    /// Read `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks in the output text as
    /// tool calls (for models without native tool calling); lines with `tool_calls` are unchanged.
    #[arg(long)]
    text_tool_calls: bool,
    /// A judge calibration record (shortlist.judge-calibration.v1). Repeatable. A judge check may
    /// drive a disqualifier only with a calibration that meets the bar for its judge and rubric;
    /// otherwise it is advisory.
    #[arg(long = "judge-calibration", value_name = "FILE")]
    judge_calibrations: Vec<PathBuf>,
    /// Also write the results document (shortlist.eval-results.v1) here.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// Print the results document on stdout instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Results of candidate A (shortlist.eval-results.v1).
    a: PathBuf,
    /// Results of candidate B.
    b: PathBuf,
    #[arg(long)]
    json: bool,
}

/// Compute threads for `eval run`: `--threads`, else every core. A quality run serves no load
/// generator, so it need not leave a core free as a load run does (measured on 2 cores, the
/// demo set's 92 short cases: 108 s on one thread, 74 s on two, the same answers).
pub(crate) fn requested_threads(cmd: &Command) -> Option<usize> {
    match cmd {
        Command::Run(a) => Some(super::threads_or_every_core(a.threads)),
        _ => None,
    }
}

/// `config`: the compute threads `main` resolved (and gave candle) for this process, and the
/// device setting.
pub fn run(cmd: Command, config: &shortlist_runner::config::Config) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Import(a) => run_import(a),
        Command::Show(a) => run_show(a),
        Command::Score(a) => run_score(a),
        Command::Compare(a) => run_compare(a),
        Command::Run(a) => super::quality::run(a, config),
        Command::CalibrateJudge(a) => super::quality::calibrate_judge(a),
        Command::Store(a) => super::catalog::run_eval(super::catalog::EvalStored::Store(a), config),
        Command::List(a) => super::catalog::run_eval(super::catalog::EvalStored::List(a), config),
        Command::Export(a) => {
            super::catalog::run_eval(super::catalog::EvalStored::Export(a), config)
        }
        Command::Remove(a) => {
            super::catalog::run_eval(super::catalog::EvalStored::Remove(a), config)
        }
        Command::Diff(a) => super::diff::run(a, config),
    }
}

fn name_of(p: &Path) -> String {
    p.display().to_string()
}

pub(crate) fn load_set(path: &Path) -> anyhow::Result<EvalSet> {
    let text = read_text(path)?;
    Ok(EvalSet::from_yaml(&name_of(path), &text)?)
}

fn run_import(a: ImportArgs) -> anyhow::Result<Outcome> {
    let mut inputs = vec![("source file", a.input.as_path())];
    if let Some(answers) = &a.answers {
        inputs.push(("answers file", answers.as_path()));
    }
    super::output::refuse_overwriting_input("-o", &a.output, &inputs)?;
    let text = read_text(&a.input)?;
    let file = name_of(&a.input);
    let name = a.name.clone().unwrap_or_else(|| {
        let stem = a
            .output
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        stem.trim_end_matches(".evalset").to_owned()
    });
    let imported: Imported = match a.from {
        From::Promptfoo => import::promptfoo::import(&file, &text, &name)?,
        From::OpenaiEvals => {
            let t = match a.template {
                TemplateArg::Includes => import::openai_evals::Template::Includes,
                TemplateArg::Match => import::openai_evals::Template::Match,
            };
            import::openai_evals::import(&file, &text, &name, t)?
        }
        From::Inspect => {
            if a.input
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
            {
                import::inspect::import_csv(&file, &text, &name)?
            } else {
                import::inspect::import_jsonl(&file, &text, &name)?
            }
        }
        From::Bfcl => {
            let answers = a.answers.as_deref().map(read_text).transpose()?;
            let afile = a.answers.as_deref().map(name_of).unwrap_or_default();
            import::bfcl::import(&file, &text, &afile, answers.as_deref(), &name)?
        }
    };
    if imported.set.cases.is_empty() {
        for u in &imported.unmapped {
            eprintln!("unmapped: case {}: {}: {}", u.case, u.what, u.reason);
        }
        anyhow::bail!("{file}: nothing could be imported as a case");
    }
    let out_name = name_of(&a.output);
    let yaml = imported.to_yaml(&out_name)?;
    super::output::write_atomically(&a.output, yaml.as_bytes())
        .with_context(|| format!("{out_name}: cannot write"))?;
    let set = EvalSet::from_yaml(&out_name, &yaml)?;
    for u in &imported.unmapped {
        eprintln!("unmapped: case {}: {}: {}", u.case, u.what, u.reason);
    }
    for n in &imported.notes {
        eprintln!("note: {n}");
    }
    if a.json {
        print_json(&json!({
            "format": "shortlist.eval-import.v1",
            "output": out_name,
            "name": set.name(),
            "sha256": set.sha256(),
            "cases": set.cases().len(),
            "unmapped": imported.unmapped,
            "notes": imported.notes,
        }))?;
    } else {
        println!(
            "wrote {out_name}: {} cases, sha256 {}; {} item{} unmapped",
            set.cases().len(),
            set.sha256(),
            imported.unmapped.len(),
            if imported.unmapped.len() == 1 {
                ""
            } else {
                "s"
            }
        );
    }
    Ok(if imported.unmapped.is_empty() {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

fn run_show(a: ShowArgs) -> anyhow::Result<Outcome> {
    let set = load_set(&a.evalset)?;
    if a.requests {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        for c in set.cases() {
            let messages: Vec<serde_json::Value> = c
                .chat()
                .iter()
                .map(|m| json!({"role": m.role.as_str(), "content": m.content}))
                .collect();
            let tools: Vec<serde_json::Value> = c.tools().iter().map(|t| t.to_openai()).collect();
            let line = json!({"id": c.id(), "category": c.category().as_string(), "messages": messages, "tools": tools});
            writeln!(out, "{line}")?;
        }
        return Ok(Outcome::Success);
    }
    let mut cats: Vec<(String, usize)> = Vec::new();
    for c in set.cases() {
        let k = c.category().as_string();
        match cats.iter_mut().find(|(n, _)| *n == k) {
            Some((_, n)) => *n += 1,
            None => cats.push((k, 1)),
        }
    }
    if a.json {
        print_json(&json!({
            "format": "shortlist.evalset-summary.v1",
            "name": set.name(),
            "sha256": set.sha256(),
            "cases": set.cases().len(),
            "categories": cats.iter().map(|(k, n)| json!({"category": k, "cases": n})).collect::<Vec<_>>(),
        }))?;
    } else {
        println!(
            "{} — {} cases, sha256 {}",
            set.name(),
            set.cases().len(),
            set.sha256()
        );
        for (k, n) in &cats {
            println!("  {k:<22} {n:>5}");
        }
    }
    Ok(Outcome::Success)
}

fn run_score(a: ScoreArgs) -> anyhow::Result<Outcome> {
    if let Some(output) = &a.output {
        let mut inputs = vec![
            ("eval set", a.evalset.as_path()),
            ("outputs file", a.outputs.as_path()),
        ];
        inputs.extend(
            a.judge_calibrations
                .iter()
                .map(|p| ("judge calibration", p.as_path())),
        );
        super::output::refuse_overwriting_input("-o", output, &inputs)?;
    }
    let set = load_set(&a.evalset)?;
    let file = name_of(&a.outputs);
    let mut outputs = parse_outputs(&file, &read_text(&a.outputs)?)?;
    if a.text_tool_calls {
        outputs = outputs
            .into_iter()
            .map(|(id, line, r)| (id, line, r.with_text_tool_calls()))
            .collect();
    }
    let calibrations = super::quality::load_calibrations(&a.judge_calibrations)?;
    let mut results = score_outputs(&set, &file, &outputs)?;
    results.regate(&set, |check| {
        JudgeGate::of(check, &calibrations, GatePolicy::default())
    });
    results.candidate = a.candidate;
    emit_results(&results, a.output.as_deref(), a.json)
}

/// Write `results` to `output` (when given), print them as JSON or as the per-category table, and
/// say whether any case failed.
pub(crate) fn emit_results(
    results: &RunResults,
    output: Option<&Path>,
    json: bool,
) -> anyhow::Result<Outcome> {
    if let Some(path) = output {
        let text = serde_json::to_string_pretty(results)?;
        super::output::write_atomically(path, (text + "\n").as_bytes())?;
    }
    if json {
        print_json(results)?;
    } else {
        print!("{}", results.table());
    }
    if !results.errors.is_empty() {
        // Errors are not failures: they were never scored, and a rerun asks them again.
        eprintln!(
            "INCOMPLETE: {} cases failed outside the model and are not scored (a rerun with the same progress file asks them again):",
            results.errors.len()
        );
        for e in &results.errors {
            eprintln!("  {} ({} attempts): {}", e.id, e.attempts, e.error);
        }
        return Ok(Outcome::CheckFailed);
    }
    Ok(if results.failed() == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}

fn load_results(path: &Path) -> anyhow::Result<RunResults> {
    Ok(RunResults::from_json(&name_of(path), &read_text(path)?)?)
}

fn run_compare(a: CompareArgs) -> anyhow::Result<Outcome> {
    let ra = load_results(&a.a)?;
    let rb = load_results(&a.b)?;
    let label = |r: &RunResults, p: &Path| r.candidate.clone().unwrap_or_else(|| name_of(p));
    let cmp = compare(&label(&ra, &a.a), &ra, &label(&rb, &a.b), &rb);
    if a.json {
        print_json(&cmp)?;
    } else {
        print!("{}", cmp.table());
    }
    Ok(if cmp.b_significantly_worse() {
        Outcome::CheckFailed
    } else {
        Outcome::Success
    })
}
