//! `shortlist trace`: synthesize the practice traces, import public traces, describe a trace and
//! fit a new one to it (docs/formats.md, "Workload trace" and "The command line"); `store`,
//! `list`, `export` and `remove` keep traces in the database (`trace_store.rs`).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use shortlist_workload::fit::{FitMethod, FitReport, FitSpec, fit};
use shortlist_workload::import::{Importer, Source};
use shortlist_workload::stats::{StatsBuilder, TraceStats};
use shortlist_workload::synth::{Shape, SynthSpec, synthesize};
use shortlist_workload::trace::{
    Request, TraceHeader, TraceReader, TraceWriter, read_all, write_all,
};

use super::Outcome;
use shortlist_runner::config::Config;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write one of the chapter's practice traces, with exact token totals.
    Synth(SynthArgs),
    /// Convert a public trace (Azure, Mooncake, BurstGPT) to shortlist.trace.v1, streaming.
    Import(ImportArgs),
    /// Describe a trace: volume, rates, burstiness, lengths, correlation, prefix reuse.
    Stats(StatsArgs),
    /// Synthesize a new trace that keeps a source trace's joint structure; prints both side by side.
    Fit(FitArgs),
    /// Store a trace in the database (a public one converted with `--from`), for studies to
    /// replay: found there by the SHA-256 a study pins. Changed content under a stored name
    /// becomes its next version.
    Store(super::trace_store::StoreArgs),
    /// Every stored trace: versions, size, hash, the study versions that pin each.
    List(super::output::JsonArgs),
    /// A stored trace version's text, byte for byte (the bytes its SHA-256 is of).
    Export(super::trace_store::ExportArgs),
    /// Remove a stored trace version. Refused while a study version — a draft included — pins
    /// it.
    Remove(super::trace_store::RemoveArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ShapeArg {
    Uniform,
    Bursts,
    PrefixGroups,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FromArg {
    Azure,
    Mooncake,
    Burstgpt,
}

impl FromArg {
    pub fn source(self) -> Source {
        match self {
            FromArg::Azure => Source::Azure,
            FromArg::Mooncake => Source::Mooncake,
            FromArg::Burstgpt => Source::BurstGpt,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ByArg {
    Auto,
    Requests,
    Sessions,
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// uniform: evenly spaced, equal requests; bursts: five bursts, mixed lengths; prefix-groups:
    /// ten conversations sharing 8,000-token prefixes.
    #[arg(long, value_enum)]
    shape: ShapeArg,
    /// Requests in the trace.
    #[arg(long, default_value_t = 100)]
    requests: u64,
    /// Input tokens in total (distinct tokens for prefix groups: each shared prefix counts once).
    #[arg(long, default_value_t = 100_000)]
    input_tokens: u64,
    /// Output tokens in total.
    #[arg(long, default_value_t = 20_000)]
    output_tokens: u64,
    /// Mean arrival rate, requests per second.
    #[arg(long, default_value_t = 8.0)]
    rate: f64,
    /// Seed of the ChaCha generator: the same seed gives the same trace.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Number of bursts (shape bursts).
    #[arg(long, default_value_t = 5)]
    bursts: u64,
    /// Number of conversation groups (shape prefix-groups).
    #[arg(long, default_value_t = 10)]
    groups: u64,
    /// Tokens of each group's shared prefix (shape prefix-groups).
    #[arg(long, default_value_t = 8_000)]
    prefix_tokens: u64,
    /// Replace the evenly spaced arrivals of uniform and prefix-groups with gamma-distributed gaps
    /// of this coefficient of variation at the same mean rate (1 = Poisson, above 1 = bursty).
    #[arg(long)]
    cv: Option<f64>,
    /// The trace to write (`*.trace.jsonl`).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print the written trace's statistics as one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The public format of IN.
    #[arg(long, value_enum)]
    from: FromArg,
    /// The public trace: Azure or BurstGPT CSV, Mooncake JSONL; sorted by time.
    input: PathBuf,
    /// The shortlist.trace.v1 file to write.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print a JSON summary of the import.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A shortlist.trace.v1 file.
    trace: PathBuf,
    /// Print one JSON document (`shortlist.trace-stats.v1`).
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct FitArgs {
    /// The shortlist.trace.v1 file whose structure to keep.
    source: PathBuf,
    /// Requests in the synthetic trace.
    #[arg(long)]
    requests: u64,
    /// Seed of the ChaCha generator: the same seed gives the same trace.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Spread quantized source timestamps uniformly within their bucket before fitting.
    #[arg(long)]
    spread: bool,
    /// What to resample: whole requests, or whole sessions with their turns' timing (auto: sessions
    /// when most requests belong to multi-turn sessions).
    #[arg(long, value_enum, default_value_t = ByArg::Auto)]
    by: ByArg,
    /// Units (requests or sessions) per resampled block (default: √ of their number).
    #[arg(long)]
    block: Option<usize>,
    /// The synthetic trace to write.
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
    /// Print one JSON document (`shortlist.trace-fit.v1`) with both traces' statistics.
    #[arg(long)]
    json: bool,
}

pub fn run(cmd: Command, config: &Config) -> anyhow::Result<Outcome> {
    use super::trace_store::{Stored, run as stored};
    match cmd {
        Command::Synth(args) => synth(args),
        Command::Import(args) => import(args),
        Command::Stats(args) => stats(args),
        Command::Fit(args) => fit_cmd(args),
        Command::Store(a) => stored(Stored::Store(a), config),
        Command::List(a) => stored(Stored::List(a), config),
        Command::Export(a) => stored(Stored::Export(a), config),
        Command::Remove(a) => stored(Stored::Remove(a), config),
    }
}

fn synth(args: SynthArgs) -> anyhow::Result<Outcome> {
    let shape = match args.shape {
        ShapeArg::Uniform => Shape::Uniform,
        ShapeArg::Bursts => Shape::Bursts,
        ShapeArg::PrefixGroups => Shape::PrefixGroups,
    };
    let spec = SynthSpec {
        shape,
        requests: args.requests,
        input_tokens: args.input_tokens,
        output_tokens: args.output_tokens,
        rate: args.rate,
        bursts: args.bursts,
        groups: args.groups,
        prefix_tokens: args.prefix_tokens,
        arrival_cv: args.cv,
    };
    let (header, requests) = synthesize(&spec, args.seed)?;
    write_trace(&args.output, &header, &requests)?;
    let stats = TraceStats::compute(&header, &requests);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        println!(
            "wrote {} ({} shape, seed {})",
            args.output.display(),
            shape.name(),
            args.seed
        );
        print_rows(&[("trace", &stats)]);
    }
    Ok(Outcome::Success)
}

fn import(args: ImportArgs) -> anyhow::Result<Outcome> {
    super::output::refuse_overwriting_input(
        "-o",
        &args.output,
        &[("public trace", args.input.as_path())],
    )?;
    let from = args.from.source();
    let name = args
        .input
        .file_stem()
        .map_or_else(|| "trace".to_owned(), |s| s.to_string_lossy().into_owned());
    let src_name = args.input.display().to_string();
    // Two streaming passes, so memory stays bounded however long the file: the first finds the
    // duration the header needs, the second writes.
    let (mut count, mut last_t, mut failed) = (0u64, 0.0_f64, 0u64);
    for req in Importer::new(from, open(&args.input)?, &src_name)? {
        let req = req?;
        count += 1;
        last_t = req.t();
        failed += u64::from(req.failed());
    }
    if count == 0 {
        bail!("{src_name}: no requests to import");
    }
    let header = from
        .header(&name)
        .with_duration_s(last_t)
        .map_err(|e| anyhow::anyhow!("{src_name}: {e}"))?;
    let (tmp, out) = create_partial(&args.output)?;
    let mut writer = TraceWriter::new(out, &header, args.output.display().to_string())?;
    for req in Importer::new(from, open(&args.input)?, &src_name)? {
        writer.write(&req?)?;
    }
    writer.finish()?;
    finish_partial(&tmp, &args.output)?;
    if args.json {
        let doc = json!({
            "format": "shortlist.trace-import.v1",
            "from": from.name(),
            "input": src_name,
            "output": args.output.display().to_string(),
            "requests": count,
            "failed": failed,
            "duration_s": last_t,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "imported {count} requests over {last_t:.3} s from {src_name} ({} format) into {}{}",
            from.name(),
            args.output.display(),
            if failed > 0 {
                format!("; {failed} failed in the source, kept and marked `failed`")
            } else {
                String::new()
            }
        );
    }
    Ok(Outcome::Success)
}

fn stats(args: StatsArgs) -> anyhow::Result<Outcome> {
    // Streamed: only arrival times, lengths and identities are kept, not whole requests.
    let reader = TraceReader::new(open(&args.trace)?, args.trace.display().to_string())?;
    let header = reader.header().clone();
    let mut builder = StatsBuilder::new(&header);
    for req in reader {
        builder.push(&req?);
    }
    let stats = builder.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        println!("{} ({})", args.trace.display(), header.name());
        print_rows(&[("trace", &stats)]);
        if let Some(q) = stats.quantization {
            println!(
                "note: arrival times are quantized into {} s buckets ({} distinct times); `trace fit --spread` spreads them",
                num(q.bucket_s),
                q.distinct_times
            );
        }
    }
    Ok(Outcome::Success)
}

fn fit_cmd(args: FitArgs) -> anyhow::Result<Outcome> {
    super::output::refuse_overwriting_input(
        "-o",
        &args.output,
        &[("source trace", args.source.as_path())],
    )?;
    let (header, source) = read_trace(&args.source)?;
    let method = match args.by {
        ByArg::Auto => FitMethod::Auto,
        ByArg::Requests => FitMethod::Requests,
        ByArg::Sessions => FitMethod::Sessions,
    };
    let spec = FitSpec {
        requests: args.requests,
        seed: args.seed,
        spread: args.spread,
        block: args.block,
        method,
    };
    let (fitted, requests, report) = fit(&header, &source, &spec)?;
    write_trace(&args.output, &fitted, &requests)?;
    let a = TraceStats::compute(&header, &source);
    let b = TraceStats::compute(&fitted, &requests);
    if args.json {
        let doc = json!({
            "format": "shortlist.trace-fit.v1",
            "output": args.output.display().to_string(),
            "seed": args.seed,
            "method": report.method,
            "units": report.units,
            "block": report.block,
            "quantization": report.quantization,
            "spread": report.spread,
            "source": a,
            "synthetic": b,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "wrote {} ({} requests, seed {}; moving-block bootstrap of whole {}: {} in the source, {} per block)",
            args.output.display(),
            requests.len(),
            args.seed,
            report.method,
            report.units,
            report.block
        );
        print_rows(&[("source", &a), ("synthetic", &b)]);
        print_quantization(&report);
    }
    Ok(Outcome::Success)
}

fn print_quantization(report: &FitReport) {
    match (report.quantization, report.spread) {
        (Some(q), true) => println!(
            "source arrival times are quantized into {} s buckets ({} distinct times); spread uniformly within their buckets",
            num(q.bucket_s),
            q.distinct_times
        ),
        (Some(q), false) => println!(
            "source arrival times are quantized into {} s buckets ({} distinct times); kept as they are (pass --spread to spread them within their buckets)",
            num(q.bucket_s),
            q.distinct_times
        ),
        (None, _) => {}
    }
}

fn open(path: &Path) -> anyhow::Result<BufReader<File>> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    Ok(BufReader::new(file))
}

fn read_trace(path: &Path) -> anyhow::Result<(TraceHeader, Vec<Request>)> {
    Ok(read_all(open(path)?, &path.display().to_string())?)
}

/// Write next to the destination and rename at the end, so a failure never leaves half a trace
/// under the requested name.
fn create_partial(path: &Path) -> anyhow::Result<(PathBuf, BufWriter<File>)> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".partial");
    let tmp = PathBuf::from(tmp);
    let file = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    Ok((tmp, BufWriter::new(file)))
}

fn finish_partial(tmp: &Path, path: &Path) -> anyhow::Result<()> {
    std::fs::rename(tmp, path)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))
}

fn write_trace(path: &Path, header: &TraceHeader, requests: &[Request]) -> anyhow::Result<()> {
    let (tmp, out) = create_partial(path)?;
    let mut out = write_all(out, header, requests, &path.display().to_string())?;
    out.flush()
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    drop(out);
    finish_partial(&tmp, path)
}

/// At most four decimals, without trailing zeros.
fn num(x: f64) -> String {
    let s = format!("{x:.4}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), num)
}

fn opt_u(x: Option<u64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn rows(s: &TraceStats) -> Vec<(&'static str, String)> {
    vec![
        ("requests", s.requests.to_string()),
        ("duration (s)", num(s.duration_s)),
        ("input tokens, sent", s.input_tokens.sent.to_string()),
        (
            "input tokens, distinct",
            s.input_tokens.distinct.to_string(),
        ),
        ("output tokens", s.output_tokens.to_string()),
        ("rate, mean (req/s)", opt(s.rate_rps.mean)),
        ("rate, peak 1 s (req/s)", num(s.rate_rps.peak_1s)),
        ("rate, peak 10 s (req/s)", num(s.rate_rps.peak_10s)),
        ("inter-arrival CV", opt(s.interarrival_cv)),
        ("dispersion of counts, 1 s", opt(s.dispersion.counts_1s)),
        ("dispersion of counts, 10 s", opt(s.dispersion.counts_10s)),
        ("input length p50", opt_u(s.input_len.p50)),
        ("input length p90", opt_u(s.input_len.p90)),
        ("input length p99", opt_u(s.input_len.p99)),
        ("output length p50", opt_u(s.output_len.p50)),
        ("output length p90", opt_u(s.output_len.p90)),
        ("output length p99", opt_u(s.output_len.p99)),
        ("length correlation (Spearman)", opt(s.length_spearman)),
        ("prefix groups", s.prefix_groups.to_string()),
        ("prefix reuse, infinite cache", opt(s.prefix_reuse)),
        ("sessions", s.sessions.to_string()),
        ("turns per session", opt(s.turns_per_session)),
        ("failed in source", s.failed.to_string()),
    ]
}

/// One column per trace, one row per figure.
fn print_rows(columns: &[(&str, &TraceStats)]) {
    let tables: Vec<Vec<(&str, String)>> = columns.iter().map(|(_, s)| rows(s)).collect();
    let label_w = tables[0]
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    let col_w: Vec<usize> = columns
        .iter()
        .zip(&tables)
        .map(|((name, _), t)| {
            t.iter()
                .map(|(_, v)| v.len())
                .max()
                .unwrap_or(0)
                .max(name.len())
        })
        .collect();
    if columns.len() > 1 {
        let mut line = format!("{:label_w$}", "");
        for ((name, _), w) in columns.iter().zip(&col_w) {
            line.push_str(&format!("  {name:>w$}"));
        }
        println!("{line}");
    }
    for (i, (label, _)) in tables[0].iter().enumerate() {
        let mut line = format!("{label:label_w$}");
        for (t, w) in tables.iter().zip(&col_w) {
            line.push_str(&format!("  {:>w$}", t[i].1));
        }
        println!("{line}");
    }
    // docs/metrics.md: a percentile with fewer samples than it needs is printed with a warning.
    for (name, s) in columns {
        if s.requests > 0 && s.requests < 100 {
            println!(
                "warning: {name}: p99 of {} requests (fewer than 100) is nearly the maximum, not a tail estimate",
                s.requests
            );
        }
    }
}
