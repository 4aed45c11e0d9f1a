//! What a team keeps in the database besides its studies, from the command line — as the
//! workbench's `/candidates` and `/evalsets` pages do: `shortlist candidate add|list|show|remove`
//! and `shortlist eval store|list|export|remove` (the other `eval` subcommands work on files).
//! Every subcommand calls the application service and prints its view; `--json` prints it whole.

use std::path::PathBuf;

use serde_json::json;
use shortlist_runner::config::Config;
use shortlist_runner::service::views::StudyUse;
use shortlist_study::record::Verdict;

use super::Outcome;
use super::app::{existing_service, runtime, service};
use super::output::{JsonArgs, print_json, read_text, write_out};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum CandidateCommand {
    /// Register a candidate from its source: `gguf:PATH` (the file is read for what it says
    /// about itself), a model folder holding one GGUF file, or `http://HOST:PORT#MODEL` (an
    /// OpenAI-compatible endpoint). A changed configuration becomes the name's next version.
    Add(AddArgs),
    /// Every registered candidate: versions, identity, the study versions that name it.
    List(JsonArgs),
    /// One candidate: its identity, every configuration version, the studies that name it;
    /// with `--check`, whether its endpoint answers now and lists the model named.
    Show(ShowArgs),
    /// Remove a candidate with every version of its configuration (its model file is not
    /// touched). Refused while a study version — a draft included — names it.
    Remove(NameArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct AddArgs {
    /// The candidate's name (letters, digits, `-`, `_`, `.`).
    name: String,
    /// `gguf:PATH`, `folder:PATH` (or a folder's path) or `http://HOST:PORT#MODEL`.
    source: String,
    /// What one device of its kind costs an hour, for the record's cost section.
    #[arg(long)]
    price_per_device_hour: Option<f64>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct NameArgs {
    /// The candidate's name.
    name: String,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// The candidate's name.
    name: String,
    /// Check an endpoint candidate's endpoint now: whether it answers, what it is, whether it
    /// lists the model named (a warning on stderr, `endpoint` in the JSON).
    #[arg(long)]
    check: bool,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EvalStoreArgs {
    /// The eval set (`shortlist.evalset.v1` YAML; `shortlist eval import` converts other
    /// tools' files to it). Stored under the name inside it; changed content under a stored
    /// name becomes its next version.
    file: PathBuf,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
// `--version` is the eval set's version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct EvalRemoveArgs {
    /// The eval set's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
// `--version` is the eval set's version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct EvalExportArgs {
    /// The eval set's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Write the YAML here (default: stdout).
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
}

/// What `eval store|list|export|remove` do: the stored eval sets.
#[derive(Debug)]
pub(crate) enum EvalStored {
    Store(EvalStoreArgs),
    List(JsonArgs),
    Export(EvalExportArgs),
    Remove(EvalRemoveArgs),
}

/// "study a v1 (locked, qualifies); study b v2 (draft)", or "no study" when none.
fn uses(list: &[StudyUse]) -> String {
    if list.is_empty() {
        return "no study".to_owned();
    }
    list.iter()
        .map(|u| {
            let state = if u.locked { "locked" } else { "draft" };
            let verdict = u
                .verdict
                .map(|v| match v {
                    Verdict::Qualifies => ", qualifies",
                    Verdict::Disqualified => ", disqualified",
                    Verdict::Incomplete => ", incomplete",
                })
                .unwrap_or_default();
            format!("study {} v{} ({state}{verdict})", u.study, u.version)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What checking an endpoint found, in words: what answers on stdout, what would make its
/// cases fail as a warning on stderr.
fn say_endpoint(check: &shortlist_runner::engines::EndpointCheck) {
    match &check.problem {
        Some(problem) => eprintln!("warning: {problem} (a run asks it for every case)"),
        None => println!(
            "endpoint answers now: {}",
            check.identity.as_deref().unwrap_or(&check.url)
        ),
    }
}

pub(crate) fn run_candidate(cmd: CandidateCommand, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        // Only `add` may make a new database.
        let service = match &cmd {
            CandidateCommand::Add(_) => service(&config).await?,
            _ => existing_service(&config).await?,
        };
        match cmd {
            CandidateCommand::Add(a) => {
                let (version, inserted) = service
                    .register_candidate(&a.name, &a.source, a.price_per_device_hour)
                    .await?;
                // An endpoint is asked now whether it answers and serves the model named: a
                // typo is found here rather than as every case of a run failing.
                let endpoint = service.check_endpoint(&a.source).await;
                if a.json {
                    print_json(&json!({
                        "name": a.name, "version": version, "inserted": inserted,
                        "endpoint": endpoint,
                    }))?;
                } else {
                    if inserted {
                        println!("candidate {} v{version} registered", a.name);
                    } else {
                        println!("candidate {} v{version}: unchanged, nothing stored", a.name);
                    }
                    if let Some(check) = &endpoint {
                        say_endpoint(check);
                    }
                }
            }
            CandidateCommand::List(a) => {
                let list = service.list_candidates().await?;
                if a.json {
                    print_json(&list)?;
                } else if list.is_empty() {
                    println!("no candidates registered");
                } else {
                    for c in &list {
                        println!(
                            "{} ({} version{}): {}",
                            c.name,
                            c.versions,
                            if c.versions == 1 { "" } else { "s" },
                            c.identity,
                        );
                        // An endpoint's identity is its source already.
                        if !c.identity.contains(&c.source) {
                            println!("  {}", c.source);
                        }
                        println!("  named by {}", uses(&c.used_by));
                    }
                }
            }
            CandidateCommand::Show(a) => {
                let c = service.candidate(&a.name).await?;
                let endpoint = if a.check {
                    service.check_endpoint(c.source()).await
                } else {
                    None
                };
                if a.json {
                    let mut doc = serde_json::to_value(&c)?;
                    if a.check {
                        doc["endpoint"] = serde_json::to_value(&endpoint)?;
                    }
                    print_json(&doc)?;
                } else {
                    println!("candidate {}", c.name);
                    for (label, value) in &c.identity {
                        println!("  {label}: {value}");
                    }
                    for v in &c.versions {
                        println!("  v{} sha256 {}", v.version, v.sha256);
                    }
                    println!("  named by {}", uses(&c.used_by));
                    if let Some(check) = &endpoint {
                        say_endpoint(check);
                    }
                }
            }
            CandidateCommand::Remove(a) => {
                let done = service.remove_candidate(&a.name).await?;
                if a.json {
                    print_json(&done)?;
                } else {
                    let n = done.versions.len();
                    println!(
                        "candidate {} removed ({n} version{})",
                        done.name,
                        if n == 1 { "" } else { "s" }
                    );
                }
            }
        }
        Ok(Outcome::Success)
    })
}

pub(crate) fn run_eval(cmd: EvalStored, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        // Only `store` may make a new database.
        let service = match &cmd {
            EvalStored::Store(_) => service(&config).await?,
            _ => existing_service(&config).await?,
        };
        match cmd {
            EvalStored::Store(a) => {
                let text = read_text(&a.file)?;
                let p = service
                    .store_eval_set(&a.file.display().to_string(), &text)
                    .await?;
                let (version, inserted) = p.stored.unwrap_or_default();
                if a.json {
                    print_json(&json!({
                        "name": p.name, "version": version, "inserted": inserted,
                        "sha256": p.sha256, "cases": p.cases, "categories": p.categories,
                    }))?;
                } else {
                    let what = if inserted {
                        "stored"
                    } else {
                        "already stored with this content, nothing stored"
                    };
                    println!(
                        "eval set {} v{version} {what}: {} cases, sha256 {}",
                        p.name, p.cases, p.sha256
                    );
                }
            }
            EvalStored::List(a) => {
                let list = service.list_eval_sets().await?;
                if a.json {
                    print_json(&list)?;
                } else if list.is_empty() {
                    println!("no eval sets stored");
                } else {
                    for s in &list {
                        println!("{}", s.name);
                        for v in &s.versions {
                            println!("  v{} {} cases, sha256 {}", v.version, v.cases, v.sha256);
                        }
                        println!("  pinned by {}", uses(&s.used_by));
                    }
                }
            }
            EvalStored::Export(a) => {
                let (version, yaml) = service.eval_set_text(&a.name, a.version).await?;
                let what = format!("eval set {} v{version}", a.name);
                write_out(a.output.as_deref(), &yaml, &what)?;
            }
            EvalStored::Remove(a) => {
                let done = service.remove_eval_set(&a.name, a.version).await?;
                if a.json {
                    print_json(&done)?;
                } else {
                    println!("{}", done.sentence("eval set"));
                }
            }
        }
        Ok(Outcome::Success)
    })
}
