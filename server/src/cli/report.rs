//! `shortlist report`: a selection record (its JSON export) as the one-page PDF and the SVG
//! charts the web page shows. The record's own hash is checked first: the page prints it, so a
//! record edited after it was sealed is refused rather than printed under a hash it no longer has.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde_json::json;
use shortlist_report::charts::PDF_MAX_CATEGORIES;
use shortlist_report::{PaperSize, charts, render};
use shortlist_study::record::{RECORD_FORMAT, SelectionRecord};

use super::Outcome;
use super::output::{print_json, read_text};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Paper {
    A4,
    Letter,
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("output").required(true).multiple(true).args(["pdf", "charts"])))]
pub(crate) struct Args {
    /// A selection record as exported with `--json` (format `shortlist.record.v1`).
    #[arg(required_unless_present = "sample")]
    record: Option<PathBuf>,
    /// Render the built-in sample record instead, to try the layout.
    #[arg(long, conflicts_with = "record")]
    sample: bool,
    /// Write the one-page PDF to this file.
    #[arg(long)]
    pdf: Option<PathBuf>,
    /// Paper size of the PDF.
    #[arg(long, value_enum, default_value_t = Paper::A4)]
    paper: Paper,
    /// Write the three charts into this folder: ttft.svg, goodput.svg, pass-rate.svg (all
    /// categories, not only the ones the PDF has room for).
    #[arg(long)]
    charts: Option<PathBuf>,
    /// Print one JSON document: pages, bytes, timings and the files written.
    #[arg(long)]
    json: bool,
}

fn read_record(path: &std::path::Path) -> anyhow::Result<SelectionRecord> {
    let source = path.display().to_string();
    let text = read_text(path)?;
    let record: SelectionRecord =
        serde_json::from_str(&text).with_context(|| format!("{source}: not a selection record"))?;
    if record.format != RECORD_FORMAT {
        bail!(
            "{source}: field `format`: `{}`, expected `{RECORD_FORMAT}`",
            record.format
        );
    }
    if !record.verify() {
        bail!(
            "{source}: field `record_sha256`: {} does not match the content ({}): the record was changed after it was sealed",
            record.record_sha256,
            record.compute_hash()
        );
    }
    Ok(record)
}

pub(crate) fn run(args: Args) -> anyhow::Result<Outcome> {
    let record = match &args.record {
        Some(path) => read_record(path)?,
        None => shortlist_report::sample::sample_record(),
    };
    let mut written = Vec::new();
    if let Some(dir) = &args.charts {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create the folder", dir.display()))?;
        let c = charts(&record, usize::MAX)?;
        for (name, svg) in [
            ("ttft.svg", &c.ttft),
            ("goodput.svg", &c.goodput),
            ("pass-rate.svg", &c.pass_rate),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, svg)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            written.push(path.display().to_string());
        }
    }
    let mut summary = json!({ "format": "shortlist.report-render.v1", "candidate": record.identity.candidate, "record_sha256": record.record_sha256 });
    if let Some(path) = &args.pdf {
        let paper = match args.paper {
            Paper::A4 => PaperSize::A4,
            Paper::Letter => PaperSize::Letter,
        };
        let started = Instant::now();
        let rendered = render(&record, paper)?;
        let elapsed = started.elapsed();
        std::fs::write(path, &rendered.pdf)
            .with_context(|| format!("{}: cannot write", path.display()))?;
        written.push(path.display().to_string());
        summary["pdf"] = json!({
            "path": path.display().to_string(),
            "paper": if paper == PaperSize::A4 { "a4" } else { "letter" },
            "pages": rendered.pages,
            "bytes": rendered.pdf.len(),
            "render_s": elapsed.as_secs_f64(),
            "max_categories_charted": PDF_MAX_CATEGORIES,
        });
        if !args.json {
            println!(
                "{}: 1 page ({}), {} KB, rendered in {:.2} s",
                path.display(),
                if paper == PaperSize::A4 {
                    "A4"
                } else {
                    "Letter"
                },
                rendered.pdf.len().div_ceil(1024),
                elapsed.as_secs_f64()
            );
        }
    }
    summary["files"] = json!(written);
    if args.json {
        print_json(&summary)?;
    } else if let Some(dir) = &args.charts {
        println!("{}: ttft.svg, goodput.svg, pass-rate.svg", dir.display());
    }
    Ok(Outcome::Success)
}
