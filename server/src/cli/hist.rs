//! `shortlist hist merge`: honest merges of explicit-bucket (ours, Prometheus) and HDR histograms.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::json;
use shortlist_measure::hdr::{HDR_FORMAT, HdrFile, LatencyHdr};
use shortlist_measure::hist::{BucketHistogram, HISTOGRAM_FORMAT, merge, parse_prometheus};
use shortlist_measure::percentile::Quantile;

use super::Outcome;
use super::output::{print_json, read_text};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Merge histograms bucket by bucket; refuse (exit 2) when their layouts differ.
    Merge(MergeArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct MergeArgs {
    /// `shortlist.histogram.v1` JSON, `shortlist.hdr.v1` JSON or Prometheus text exposition files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// The metric to take from Prometheus files (base name, without `_bucket`).
    #[arg(long)]
    metric: Option<String>,
    /// Quantiles to report, as bucket ranges.
    #[arg(long, value_delimiter = ',', default_values_t = [0.5, 0.9, 0.99])]
    quantiles: Vec<f64>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

enum Input {
    Buckets(Vec<BucketHistogram>),
    Hdr(LatencyHdr),
}

fn read_input(path: &std::path::Path, metric: Option<&str>) -> anyhow::Result<Input> {
    let source = path.display().to_string();
    let text = read_text(path)?;
    if !text.trim_start().starts_with('{') {
        return Ok(Input::Buckets(parse_prometheus(&source, &text, metric)?));
    }
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{source}: not JSON and not Prometheus text"))?;
    let format = value
        .get("format")
        .and_then(|f| f.as_str())
        .unwrap_or_default();
    if format.starts_with("shortlist.hdr.") {
        let file: HdrFile = serde_json::from_value(value)
            .with_context(|| format!("{source}: not a {HDR_FORMAT} file"))?;
        return Ok(Input::Hdr(LatencyHdr::from_file(&source, file)?));
    }
    let histogram = BucketHistogram::from_json(&source, &text)?;
    if let Some(m) = metric
        && histogram.metric() != m
    {
        anyhow::bail!("{source}: holds metric `{}`, not `{m}`", histogram.metric());
    }
    Ok(Input::Buckets(vec![histogram]))
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<Outcome> {
    let Command::Merge(args) = cmd;
    let quantiles: Vec<Quantile> = args
        .quantiles
        .iter()
        .map(|&q| {
            Quantile::new(q).ok_or_else(|| anyhow::anyhow!("--quantiles: {q} is not in (0, 1]"))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut buckets = Vec::new();
    let mut hdrs = Vec::new();
    for path in &args.files {
        match read_input(path, args.metric.as_deref())? {
            Input::Buckets(hs) => buckets.extend(hs),
            Input::Hdr(h) => hdrs.push(h),
        }
    }
    if !buckets.is_empty() && !hdrs.is_empty() {
        anyhow::bail!(
            "cannot merge explicit-bucket histograms with HDR histograms: their buckets differ. The only correct path is back to the raw samples"
        );
    }
    if !hdrs.is_empty() {
        return merge_hdr(hdrs, &quantiles, args.json);
    }
    let merged = merge(&buckets)?;
    let h = &merged.histogram;
    let ranges: Vec<_> = quantiles
        .iter()
        .filter_map(|q| h.quantile_range(*q))
        .collect();
    if args.json {
        let file = h.to_file();
        print_json(&json!({
            "format": HISTOGRAM_FORMAT,
            "metric": file.metric,
            "unit": file.unit,
            "population": file.population,
            "window": file.window,
            "host": file.host,
            "edges": file.edges,
            "counts": file.counts,
            "upper_inclusive": file.upper_inclusive,
            "total": h.total(),
            "quantiles": ranges,
            "inputs": merged.inputs,
            "partial_coverage": merged.partial_coverage,
        }))?;
    } else {
        println!(
            "{} [{}] — {} inputs, {} observations",
            h.metric(),
            h.unit(),
            merged.inputs.len(),
            h.total()
        );
        for input in &merged.inputs {
            println!(
                "  {}{}: {} observations{}",
                input.source,
                if input.host.is_empty() {
                    String::new()
                } else {
                    format!(" (host {})", input.host)
                },
                input.total,
                input
                    .coverage
                    .map(|c| format!(", {:.0} % of the window", c * 100.0))
                    .unwrap_or_default()
            );
        }
        let (open, close) = if h.upper_inclusive() {
            ("(", "]")
        } else {
            ("[", ")")
        };
        for (i, count) in h.counts().iter().enumerate() {
            let hi = h.edges()[i + 1];
            let hi = if hi.is_finite() {
                format!("{hi}")
            } else {
                "+∞".to_owned()
            };
            println!("  {open}{}, {hi}{close}  {count}", h.edges()[i]);
        }
        for r in &ranges {
            println!("{}", r.describe(h.unit(), h.upper_inclusive()));
        }
        for warning in &merged.partial_coverage {
            println!("warning: {warning}");
        }
        println!(
            "Percentiles are the bucket that holds them; bucket width bounds their resolution."
        );
    }
    Ok(Outcome::Success)
}

fn merge_hdr(hdrs: Vec<LatencyHdr>, quantiles: &[Quantile], json: bool) -> anyhow::Result<Outcome> {
    let mut iter = hdrs.into_iter();
    let mut merged = iter.next().context("nothing to merge")?;
    let count = 1 + iter.len();
    for h in iter {
        merged.merge(&h)?;
    }
    let ranges: Vec<_> = quantiles
        .iter()
        .filter_map(|q| merged.quantile_range(*q))
        .collect();
    if json {
        let file = merged.to_file()?;
        print_json(&json!({
            "format": HDR_FORMAT,
            "metric": file.metric,
            "unit": "s",
            "population": file.population,
            "host": file.host,
            "window_s": file.window_s,
            "total": merged.len(),
            "significant_digits": file.significant_digits,
            "quantiles": ranges,
            "hdr_v2_deflate_base64": file.hdr_v2_deflate_base64,
        }))?;
    } else {
        println!(
            "{} — {count} HDR histograms merged exactly, {} observations",
            merged.metric(),
            merged.len()
        );
        for r in &ranges {
            println!("{}", r.describe("s", false));
        }
    }
    Ok(Outcome::Success)
}
