//! `shortlist record CANDIDATE --study S`: a candidate's stored selection record, printed, as
//! JSON, or as the one-page PDF.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use shortlist_report::view::amount;
use shortlist_report::{PaperSize, render_pdf};
use shortlist_runner::config::Config;
use shortlist_study::cost::CostAt;
use shortlist_study::record::{Cost, SelectionRecord};
use shortlist_study::rule::Outcome as RuleOutcome;

use super::Outcome;
use super::output::print_json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Paper {
    A4,
    Letter,
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct Args {
    /// The candidate's name in the study.
    candidate: String,
    /// The study's name.
    #[arg(long)]
    study: String,
    /// The study version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// The generation whose record to show (default: the newest record).
    #[arg(long)]
    generation: Option<u32>,
    /// Write the one-page PDF here.
    #[arg(long)]
    pdf: Option<PathBuf>,
    /// Paper size of the PDF.
    #[arg(long, value_enum, default_value_t = Paper::A4)]
    paper: Paper,
    /// Print the record as JSON (the export `shortlist report` reads).
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args, config: &Config) -> anyhow::Result<Outcome> {
    let rt = super::app::runtime()?;
    let view = rt.block_on(async {
        let service = super::app::existing_service(config).await?;
        match service
            .record(&a.study, a.version, &a.candidate, a.generation)
            .await
        {
            Ok(view) => Ok(view),
            // The candidate is in the locked study, and no run has made its record yet.
            Err(e)
                if e.missing().is_some_and(|w| w.starts_with("a record"))
                    && a.generation.is_none() =>
            {
                Err(anyhow::Error::from(e)).with_context(|| {
                    format!("no record yet? run `shortlist study run {}` first", a.study)
                })
            }
            Err(e) => Err(e.into()),
        }
    })?;
    let record = view.record;
    if !record.verify() {
        bail!(
            "the stored record of {} has hash {} but its content hashes to {}",
            a.candidate,
            record.record_sha256,
            record.compute_hash()
        );
    }
    if let Some(path) = &a.pdf {
        let paper = match a.paper {
            Paper::A4 => PaperSize::A4,
            Paper::Letter => PaperSize::Letter,
        };
        let pdf = render_pdf(&record, paper)?;
        std::fs::write(path, &pdf).with_context(|| format!("{}: cannot write", path.display()))?;
        eprintln!("{}: {} KB", path.display(), pdf.len().div_ceil(1024));
    }
    if a.json {
        print_json(&record)?;
    } else if a.pdf.is_none() {
        print_text(&record);
    }
    Ok(Outcome::Success)
}

fn print_text(r: &SelectionRecord) {
    println!(
        "{} in study {} v{}{} — {:?}",
        r.identity.candidate,
        r.study.name,
        r.study.version,
        r.generation
            .map_or_else(String::new, |g| format!(" generation {g}")),
        r.verdict
    );
    for missing in &r.incomplete {
        println!("  incomplete: {missing}");
    }
    println!("  question: {}", r.study.question);
    println!(
        "  study locked at {} under {}",
        r.study.locked_at, r.study.lock_sha256
    );
    let id = &r.identity;
    println!(
        "  identity: {}, {} parameters, {} ({}), context {}, license {}",
        id.architecture,
        id.parameters.map(|p| p.to_string()).unwrap_or("?".into()),
        id.quantization,
        id.precision,
        id.context_limit
            .map(|p| p.to_string())
            .unwrap_or("?".into()),
        id.license
    );
    println!(
        "  weights sha256 {}",
        id.weights_sha256.as_deref().unwrap_or("?")
    );
    let q = &r.quality;
    println!(
        "  quality on {}: {}/{} passed, {:.1} % [95 % CI {:.1}–{:.1} %] ({})",
        q.evalset,
        q.overall.passed,
        q.overall.n,
        q.overall.rate * 100.0,
        q.overall.lo * 100.0,
        q.overall.hi * 100.0,
        q.decoding
    );
    for c in &q.categories {
        println!(
            "    {:<20} {:>3}/{:<3} {:5.1} % [{:.1}–{:.1} %]",
            c.label,
            c.passed,
            c.n,
            c.rate * 100.0,
            c.lo * 100.0,
            c.hi * 100.0
        );
    }
    if let Some(p) = &q.paired {
        println!(
            "  paired with {} on the same cases: both pass {}, only this {}, only {} {}, both fail {}; exact McNemar p = {:.3}",
            p.other, p.both_pass, p.only_this, p.other, p.only_other, p.both_fail, p.p_value
        );
    }
    println!("  disqualifiers:");
    for d in &r.disqualifiers {
        let outcome = match d.outcome {
            RuleOutcome::Pass => "pass",
            RuleOutcome::Trip => "TRIPPED",
            RuleOutcome::NotMeasured => "not measured",
        };
        println!(
            "    {:<40} {outcome:<12} observed {}{}",
            d.condition,
            d.observed.as_deref().unwrap_or("-"),
            if d.evidence.is_empty() {
                String::new()
            } else {
                format!(" (evidence: {})", d.evidence.join(", "))
            }
        );
    }
    println!("  memory: {}", r.memory.summary);
    println!(
        "  performance: {}; capacity rule: {}",
        r.performance.loop_label, r.performance.capacity_rule
    );
    let perf = &r.performance;
    if !perf.latencies.is_empty() {
        println!(
            "    at the target rate {} req/s ({}, SLO {}): throughput {:.3} req/s, goodput {:.3} req/s, attainment {}{}",
            perf.target_rps,
            perf.workload,
            perf.slo,
            perf.throughput_rps,
            perf.goodput_rps,
            perf.attainment
                .map_or_else(|| "-".to_owned(), |a| format!("{:.1} %", a * 100.0)),
            if perf.client_bound {
                " — CLIENT-BOUND: cannot qualify"
            } else {
                ""
            }
        );
        let s = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3} s"));
        for l in &perf.latencies {
            println!(
                "    {:<22} n={:<4} p50 {:>9} p90 {:>9} p99 {:>9}  ({})",
                l.metric,
                l.count,
                s(l.p50_s),
                s(l.p90_s),
                s(l.p99_s),
                l.population
            );
        }
        for row in &perf.sweep {
            println!(
                "    sweep: offered {:>6} req/s → goodput {:.3}, throughput {:.3}, attainment {} (95 % lower bound {})",
                row.offered_rps,
                row.goodput_rps,
                row.throughput_rps,
                row.attainment
                    .map_or_else(|| "-".to_owned(), |a| format!("{:.1} %", a * 100.0)),
                row.attainment_lower_bound
                    .map_or_else(|| "-".to_owned(), |a| format!("{:.1} %", a * 100.0)),
            );
            if let Some(why) = &row.excluded {
                println!("      excluded: {why}");
            }
        }
        println!(
            "    knee {}, capacity {} (measured on {})",
            perf.knee_rps
                .map_or_else(|| "-".to_owned(), |k| format!("{k} req/s")),
            perf.capacity_rps
                .map_or_else(|| "none".to_owned(), |k| format!("{k} req/s")),
            perf.hardware
        );
    }
    println!(
        "  operations: {}; {}",
        r.operations.overload_behaviour, r.operations.error_behaviour
    );
    match &r.cost {
        Cost::Estimate(e) => {
            let line = |label: &str, c: &CostAt| {
                println!(
                    "  cost at {label} ({} req/s): {} device{}, {} {}/h, {} per million requests",
                    c.rate_rps,
                    c.devices,
                    if c.devices == 1 { "" } else { "s" },
                    amount(c.cost_per_hour),
                    e.currency,
                    amount(c.cost_per_million_requests)
                )
            };
            line("ordinary", &e.ordinary);
            line("peak", &e.peak);
        }
        Cost::Unavailable(no) => println!("  cost: not available: {}", no.why),
    }
    println!("  record sha256 {}", r.record_sha256);
}
