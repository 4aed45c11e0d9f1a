//! `shortlist study create|lock|verify|run|show`: studies fixed in advance, stored in the
//! database (`DATABASE_URL`, default `sqlite://shortlist.db`), run as queued jobs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use shortlist_runner::study::{Created, Event, Outcome as JobOutcome, StudyRunner, now_rfc3339};

use super::Outcome;
use super::output::print_json;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Store a study file with its eval set version, SLO, workload and candidates (metadata read
    /// from each GGUF). Changing a locked study makes a new version.
    Create(CreateArgs),
    /// Freeze a study: canonical serialization, SHA-256 and time.
    Lock(NameArgs),
    /// Recompute a locked study's hash (exit 1 when it no longer matches).
    Verify(NameArgs),
    /// Queue a locked study's jobs (per candidate: memory fit, quality run, load run and capacity
    /// sweep, record) and work through the queue; a rerun resumes where a killed one stopped.
    Run(RunArgs),
    /// Print a study as stored.
    Show(NameArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CreateArgs {
    /// The study file (`*.study.toml`, format `shortlist.study.v1`).
    file: PathBuf,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct NameArgs {
    /// The study's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct RunArgs {
    /// The study's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Most tokens generated per eval case (greedy decoding).
    #[arg(long, default_value_t = 128)]
    max_tokens: usize,
    /// A job whose worker has not reported for this many seconds is taken over (a worker
    /// killed mid-job). Use 0 when no other worker is running.
    #[arg(long, default_value_t = 60)]
    stale_after: u64,
    /// Stop after this many jobs (default: until the queue is empty).
    #[arg(long)]
    max_jobs: Option<usize>,
    /// Queue a fresh record per candidate of a study whose work is all queued: the record is
    /// assembled again from the stored runs (earlier records stay stored).
    #[arg(long)]
    refresh_records: bool,
    /// Compute threads of the candidates' engine (default: cores - 1, at least 1, so that one
    /// core is left to the load generator and the HTTP server during load runs).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON document at the end.
    #[arg(long)]
    json: bool,
}

fn connect() -> anyhow::Result<StudyRunner> {
    let url = shortlist_store_url();
    StudyRunner::connect(&url).with_context(|| "opening the database (DATABASE_URL)")
}

/// `DATABASE_URL`, else a SQLite file `shortlist.db` in the working directory.
fn shortlist_store_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "sqlite://shortlist.db?mode=rwc".to_owned())
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<Outcome> {
    match cmd {
        Command::Create(a) => create(a),
        Command::Lock(a) => lock(a),
        Command::Verify(a) => verify(a),
        Command::Run(a) => run_study(a),
        Command::Show(a) => show(a),
    }
}

fn create(a: CreateArgs) -> anyhow::Result<Outcome> {
    let runner = connect()?;
    let created = runner.create(&a.file)?;
    let (name, version, state, previous) = match &created {
        Created::Saved { name, version } => (name, *version, "saved", None),
        Created::NewVersion {
            name,
            version,
            previous,
        } => (name, *version, "new-version", Some(previous.clone())),
        Created::Unchanged { name, version } => (name, *version, "unchanged", None),
    };
    if a.json {
        print_json(
            &json!({"name": name, "version": version, "state": state, "previous": previous}),
        )?;
    } else {
        match &created {
            Created::Saved { .. } => println!("study {name} v{version}: saved (draft)"),
            Created::NewVersion { previous, .. } => println!(
                "study {name} v{version}: new version (v{} is locked under {previous})",
                version - 1
            ),
            Created::Unchanged { .. } => {
                println!("study {name} v{version}: unchanged (locked, same content)")
            }
        }
    }
    Ok(Outcome::Success)
}

fn lock(a: NameArgs) -> anyhow::Result<Outcome> {
    let runner = connect()?;
    let (locked, now) = runner.lock(&a.name, a.version, &now_rfc3339())?;
    let version = locked.study.version();
    if a.json {
        print_json(&json!({
            "name": a.name, "version": version, "sha256": locked.sha256,
            "locked_at": locked.locked_at, "locked_now": now,
        }))?;
    } else if now {
        println!(
            "study {} v{version}: locked at {} under {}",
            a.name, locked.locked_at, locked.sha256
        );
    } else {
        println!(
            "study {} v{version}: already locked at {} under {}",
            a.name, locked.locked_at, locked.sha256
        );
    }
    Ok(Outcome::Success)
}

fn verify(a: NameArgs) -> anyhow::Result<Outcome> {
    let runner = connect()?;
    match runner.verify(&a.name, a.version) {
        Ok(locked) => {
            if a.json {
                print_json(&json!({
                    "name": a.name, "version": locked.study.version(), "ok": true,
                    "sha256": locked.sha256, "locked_at": locked.locked_at,
                }))?;
            } else {
                println!(
                    "study {} v{}: OK, content hashes to {} (locked at {})",
                    a.name,
                    locked.study.version(),
                    locked.sha256,
                    locked.locked_at
                );
            }
            Ok(Outcome::Success)
        }
        Err(e) if e.is_tampered() => {
            if a.json {
                print_json(&json!({"name": a.name, "ok": false, "why": e.to_string()}))?;
            } else {
                println!("study {}: MISMATCH: {e}", a.name);
            }
            Ok(Outcome::CheckFailed)
        }
        Err(e) => Err(e.into()),
    }
}

fn show(a: NameArgs) -> anyhow::Result<Outcome> {
    let runner = connect()?;
    let view = runner.show(&a.name, a.version)?;
    if a.json {
        print_json(&view)?;
        return Ok(Outcome::Success);
    }
    println!(
        "study {} v{} ({})",
        view["name"].as_str().unwrap_or_default(),
        view["version"],
        view["state"].as_str().unwrap_or_default()
    );
    if let Some(sha) = view["lock_sha256"].as_str() {
        println!(
            "  locked at {} under {sha}",
            view["locked_at"].as_str().unwrap_or_default()
        );
    }
    let study = &view["study"];
    println!(
        "  question: {}",
        study["question"].as_str().unwrap_or_default()
    );
    println!(
        "  eval set: {} ({})",
        study["evalset"]["path"].as_str().unwrap_or_default(),
        study["evalset"]["sha256"].as_str().unwrap_or_default()
    );
    println!(
        "  traffic: ordinary {} req/s, peak {} req/s",
        study["traffic"]["ordinary_rps"], study["traffic"]["peak_rps"]
    );
    for c in view["candidates"].as_array().into_iter().flatten() {
        let id = &c["stored"]["gguf"]["identity"];
        println!(
            "  candidate {}: {} {} params, {}, license {}, weights {}",
            c["name"].as_str().unwrap_or_default(),
            id["architecture"].as_str().unwrap_or("?"),
            id["parameters"],
            id["quantization"].as_str().unwrap_or("?"),
            id["license"].as_str().unwrap_or("?"),
            id["weights_sha256"].as_str().unwrap_or("?"),
        );
    }
    for r in study["disqualifier"]
        .as_array()
        .or(study["disqualifiers"].as_array())
        .into_iter()
        .flatten()
    {
        println!(
            "  disqualify when {} {} {}",
            r["metric"].as_str().unwrap_or_default(),
            r["op"].as_str().unwrap_or_default(),
            if r["values"].is_null() {
                r["value"].to_string()
            } else {
                r["values"].to_string()
            }
        );
    }
    Ok(Outcome::Success)
}

fn run_study(a: RunArgs) -> anyhow::Result<Outcome> {
    super::engine::set_compute_threads(a.threads);
    let runner = connect()?;
    let version = runner.version_of(&a.name, a.version)?;
    let queued = runner.enqueue_with(&a.name, version, a.max_tokens, a.refresh_records)?;
    if queued > 0 {
        eprintln!("study {} v{version}: {queued} jobs queued", a.name);
    } else {
        eprintln!("study {} v{version}: jobs already queued; resuming", a.name);
    }
    let (requeued, failed) = runner.requeue_stale(Duration::from_secs(a.stale_after))?;
    if requeued + failed > 0 {
        eprintln!("{requeued} stale jobs requeued, {failed} out of attempts");
    }
    let mut done = Vec::new();
    let mut failures = Vec::new();
    let mut on_event = |e: Event<'_>| match e {
        Event::CaseDone {
            candidate,
            case,
            passed,
            done,
            total,
        } => eprintln!(
            "{candidate}: case {case} done ({}) {done}/{total}",
            match passed {
                Some(true) => "pass",
                Some(false) => "fail",
                None => "unscored",
            }
        ),
        Event::Resumed {
            candidate,
            done,
            total,
        } => eprintln!("{candidate}: resuming, {done}/{total} cases already stored"),
        Event::Note(note) => eprintln!("{note}"),
    };
    loop {
        if a.max_jobs.is_some_and(|m| done.len() + failures.len() >= m) {
            break;
        }
        match runner.try_execute_next_job(&mut on_event)? {
            JobOutcome::Idle => break,
            JobOutcome::Done {
                id,
                kind,
                candidate,
            } => {
                eprintln!("job {id} ({kind} {candidate}) done");
                done.push(json!({"id": id, "kind": kind, "candidate": candidate}));
            }
            JobOutcome::Failed {
                id,
                kind,
                candidate,
                why,
                state,
            } => {
                eprintln!(
                    "job {id} ({kind} {candidate}) failed ({}): {why}",
                    state.as_str()
                );
                failures.push(json!({"id": id, "kind": kind, "candidate": candidate, "why": why, "state": state.as_str()}));
            }
        }
    }
    if a.json {
        print_json(
            &json!({"study": a.name, "version": version, "done": done, "failed": failures}),
        )?;
    } else {
        println!(
            "study {} v{version}: {} jobs done, {} failed",
            a.name,
            done.len(),
            failures.len()
        );
    }
    Ok(if failures.is_empty() {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
