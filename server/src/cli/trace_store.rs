//! `shortlist trace store|list|export|remove`: the recorded traces the database keeps for studies
//! to replay, as the workbench's `/workloads` page does (the other `trace` subcommands work on
//! files). Every subcommand calls the application service; `--json` prints its view whole.

use std::path::PathBuf;

use clap::Args;
use shortlist_runner::config::Config;
use shortlist_runner::service::traces::TraceFormat;
use shortlist_runner::service::views::StudyUse;

use super::Outcome;
use super::app::{existing_service, runtime, service};
use super::output::{JsonArgs, print_json, read_text, write_out};
use super::trace::FromArg;

#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The trace: `shortlist.trace.v1` (stored byte for byte), or a public trace with `--from`.
    file: PathBuf,
    /// FILE's public format, converted to ours before it is stored.
    #[arg(long, value_enum)]
    from: Option<FromArg>,
    /// The name to store it under (default: the name in the trace's header; required with
    /// `--from`). Changed content under a stored name becomes its next version.
    #[arg(long)]
    name: Option<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
// `--version` is the trace's version here, not the program's.
#[command(disable_version_flag = true)]
pub struct ExportArgs {
    /// The trace's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Write the trace here (default: stdout).
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
}

#[derive(Debug, Args)]
// `--version` is the trace's version here, not the program's.
#[command(disable_version_flag = true)]
pub struct RemoveArgs {
    /// The trace's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// What `trace store|list|export|remove` do.
#[derive(Debug)]
pub enum Stored {
    Store(StoreArgs),
    List(JsonArgs),
    Export(ExportArgs),
    Remove(RemoveArgs),
}

fn pinned_by(list: &[StudyUse]) -> String {
    if list.is_empty() {
        return "no study".to_owned();
    }
    list.iter()
        .map(|u| {
            let state = if u.locked { "locked" } else { "draft" };
            format!("study {} v{} ({state})", u.study, u.version)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn run(cmd: Stored, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        // Only `store` may make a new database.
        let service = match &cmd {
            Stored::Store(_) => service(&config).await?,
            _ => existing_service(&config).await?,
        };
        match cmd {
            Stored::Store(a) => {
                let text = read_text(&a.file)?;
                let format = match a.from {
                    None => TraceFormat::Shortlist,
                    Some(from) => TraceFormat::Public(from.source()),
                };
                let name = a.name.unwrap_or_default();
                let what = a.file.display().to_string();
                let p = service
                    .import_trace(format, &what, &name, &text, true)
                    .await?;
                let (version, inserted) = p.stored.unwrap_or_default();
                if a.json {
                    print_json(&serde_json::json!({
                        "name": p.name, "version": version, "inserted": inserted,
                        "sha256": p.sha256, "format": p.format, "stats": p.facts.stats,
                    }))?;
                } else {
                    let what = if inserted {
                        "stored"
                    } else {
                        "already stored with this content, nothing stored"
                    };
                    let s = &p.facts.stats;
                    println!(
                        "trace {} v{version} {what}: {} requests over {:.3} s, sha256 {}",
                        p.name, s.requests, s.duration_s, p.sha256
                    );
                }
            }
            Stored::List(a) => {
                let list = service.list_traces().await?;
                if a.json {
                    print_json(&list)?;
                } else if list.is_empty() {
                    println!("no traces stored");
                } else {
                    for t in &list {
                        println!("{}", t.name);
                        for v in &t.versions {
                            let s = &v.facts.stats;
                            println!(
                                "  v{} {} requests over {:.3} s, sha256 {}; pinned by {}",
                                v.version,
                                s.requests,
                                s.duration_s,
                                v.sha256,
                                pinned_by(&v.used_by)
                            );
                        }
                    }
                }
            }
            Stored::Export(a) => {
                let (version, text) = service.trace_text(&a.name, a.version).await?;
                let what = format!("trace {} v{version}", a.name);
                write_out(a.output.as_deref(), &text, &what)?;
            }
            Stored::Remove(a) => {
                let done = service.remove_trace(&a.name, a.version).await?;
                if a.json {
                    print_json(&done)?;
                } else {
                    println!("{}", done.sentence("trace"));
                }
            }
        }
        Ok(Outcome::Success)
    })
}
