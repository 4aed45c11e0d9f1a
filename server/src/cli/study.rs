//! `shortlist study list|create|lock|verify|run|cancel|retry|delete|show|status|compare|case|diff|reproduce|accept|check`: studies fixed in advance, stored in the
//! database (`DATABASE_URL`, default `sqlite://shortlist.db`), run as queued jobs. Every
//! subcommand parses its arguments, calls the application service and prints its view
//! (`list`, `show` and `status`: `study_status.rs`; `compare` and `case`: `study_compare.rs`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use shortlist_runner::config::Config;
use shortlist_runner::service::check::{Against, CheckVerdict};
use shortlist_runner::service::views::Created;
use shortlist_runner::service::{RunParams, StudyService, Trigger};
use shortlist_runner::time::now_rfc3339;
use shortlist_runner::worker::{Outcome as JobOutcome, Worker};

use super::Outcome;
use super::app::{runtime, service};
use super::output::print_json;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Every stored study version: its state (draft, locked, running, done — or failed or
    /// cancelled), its question and each candidate's latest verdict (`--json`: as
    /// `GET /api/studies` gives them).
    List(super::output::JsonArgs),
    /// Store a study file with its eval set version, SLO, workload and candidates (metadata read
    /// from each GGUF). Changing a locked study makes a new version.
    Create(CreateArgs),
    /// Freeze a study: canonical serialization, SHA-256 and time.
    Lock(NameArgs),
    /// Recompute a locked study's hash (exit 1 when it no longer matches).
    Verify(NameArgs),
    /// Queue a locked study's jobs (per candidate: memory fit, quality run, load run with its
    /// capacity sweep, record) and work through the queue; a rerun resumes where a killed one
    /// stopped, `--again` runs a complete study again as a new generation.
    Run(RunArgs),
    /// Cancel a study version's unfinished run: its queued jobs fail now, its running ones stop
    /// at their workers' next heartbeat (wherever they run) and fail — cases a local model has
    /// in flight and a load step under way are dropped; what was stored stays.
    Cancel(NameArgs),
    /// Queue again the failed (or cancelled) jobs of the newest generation, in place: quality
    /// runs go on from the cases they stored, and the generation's records are made again.
    /// `study run NAME` (or any worker) then works through them.
    Retry(NameArgs),
    /// Remove a draft version (default: the latest). A locked version is kept: its criteria
    /// are what its records were judged by.
    Delete(NameArgs),
    /// Print a study as stored; `--toml`: as a study file's text, to edit and create again
    /// (a changed copy of a locked version becomes its next version).
    Show(super::study_status::ShowArgs),
    /// Where a study's runs stand: each generation's jobs with their latest progress, the runs
    /// with the worker and machine that executed them, the records made (from the database
    /// alone, so it follows runs of other processes).
    Status(super::study_status::StatusArgs),
    /// Candidates side by side, as the workbench's comparison: verdicts, pass rates with
    /// their intervals, load figures, memory and cost, the paired exact McNemar table, and the
    /// cases where they disagree. Columns may come from other versions and generations judged
    /// by the same eval set, workload and SLO (others are refused, naming what differs).
    Compare(super::study_compare::CompareArgs),
    /// One case of the study's eval set with every candidate's answer in a generation: the
    /// prompt, the checks, each answer's outcome, text and checks' verdicts with their reasons.
    Case(super::study_compare::CaseArgs),
    /// The criteria that differ between two versions of a study (default: the latest and the
    /// one before it), each with its value before and after.
    Diff(super::diff::StudyDiffArgs),
    /// Ask a generation's stored quality cases again (all, or a seeded sample with `--cases N`)
    /// of the same candidate with the same decoding, and compare every answer with the stored
    /// one: text, tool calls, tokens, each check's verdict, the top-2 gap to the bit. Says what
    /// changed since the run (weights, runtime, machine); the check is stored and the record
    /// page shows it. Exit 1 when any answer differs.
    Reproduce(super::reproduce::ReproduceArgs),
    /// Accept a finished generation as the study version's baseline.
    Accept(AcceptArgs),
    /// Each candidate's latest run against the baseline or the previous run: paired exact
    /// McNemar overall and per category (Holm), high-value cases lost, disqualifiers newly
    /// tripped, what changed. Exit 1 on a regression, so a pipeline can stop a rollout.
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct AcceptArgs {
    /// The study's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// The generation to accept.
    #[arg(long)]
    generation: u32,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum AgainstArg {
    Baseline,
    Previous,
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct CheckArgs {
    /// The study's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// The reference: the accepted baseline, or the run before the latest.
    #[arg(long, value_enum)]
    against: AgainstArg,
    /// Significance level of the paired tests.
    #[arg(long, default_value_t = 0.05)]
    alpha: f64,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
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
    pub(super) name: String,
    /// The version (default: the latest).
    #[arg(long)]
    pub(super) version: Option<u32>,
    /// Print one JSON document.
    #[arg(long)]
    pub(super) json: bool,
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
    /// Run a complete study version again as a new generation (earlier runs and records stay
    /// as they are).
    #[arg(long)]
    again: bool,
    /// Only queue the jobs; leave them to `shortlist serve` or other workers.
    #[arg(long)]
    queue_only: bool,
    /// Split each candidate's quality run into this many jobs that idle workers (`shortlist
    /// worker`, on any host) claim side by side.
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// Send each load step of an endpoint candidate from this many workers at once (`shortlist
    /// worker`, on any host): each sends its share of the arrival schedule from one agreed start
    /// instant, and the step is analysed from all their raw records, each worker's client
    /// checked on its own. A GGUF candidate's steps are sent whole by the worker serving it.
    #[arg(long, default_value_t = 1)]
    load_workers: u32,
    /// How long a split load step waits, in seconds, for its workers to gather before its load
    /// job sends it whole.
    #[arg(long, default_value_t = 300)]
    gather_wait: u64,
    /// Compute threads of the candidates' engine (default: cores - 1, at least 1, so that one
    /// core is left to the load generator and the HTTP server during load runs;
    /// CANDLE_NUM_THREADS in the environment wins).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Print one JSON document at the end.
    #[arg(long)]
    json: bool,
}

/// The compute threads a command asks for, if it asks.
pub(crate) fn requested_threads(cmd: &Command) -> Option<usize> {
    match cmd {
        Command::Run(a) => a.threads,
        _ => None,
    }
}

pub(crate) fn run(cmd: Command, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    let rt = runtime()?;
    rt.block_on(async move {
        // Only `create` may make a new database.
        let service = match &cmd {
            Command::Create(_) => service(&config).await?,
            _ => super::app::existing_service(&config).await?,
        };
        match cmd {
            Command::Create(a) => create(&service, a).await,
            Command::Lock(a) => lock(&service, a).await,
            Command::Verify(a) => verify(&service, a).await,
            Command::Run(a) => run_study(&service, a).await,
            Command::List(a) => super::study_status::list(&service, a).await,
            Command::Show(a) => super::study_status::show(&service, a).await,
            Command::Compare(a) => super::study_compare::compare(&service, a).await,
            Command::Case(a) => super::study_compare::case(&service, a).await,
            Command::Diff(a) => super::diff::study(&service, a).await,
            Command::Reproduce(a) => super::reproduce::run(&service, a).await,
            Command::Status(a) => super::study_status::status(&service, a).await,
            Command::Accept(a) => accept(&service, a, &config.worker).await,
            Command::Retry(a) => {
                let done = service.retry_run(&a.name, a.version).await?;
                if a.json {
                    print_json(&done)?;
                } else {
                    println!(
                        "study {} v{} generation {}: {} job{} queued again",
                        done.study,
                        done.version,
                        done.generation,
                        done.requeued,
                        if done.requeued == 1 { "" } else { "s" }
                    );
                    if let Some(note) = service.workers().await?.queue.stranded_note() {
                        eprintln!("{note}");
                    }
                }
                Ok(Outcome::Success)
            }
            Command::Cancel(a) => {
                let by = format!(
                    "with `shortlist study cancel` on {}",
                    shortlist_runner::config::hostname()
                );
                let done = service.cancel_run(&a.name, a.version, &by).await?;
                if a.json {
                    print_json(&done)?;
                } else {
                    println!(
                        "study {} v{} generation {}: {} job{} cancelled now (queued, or its worker gone), {} running stop at their worker's next heartbeat, keeping what they stored ({})",
                        done.study,
                        done.version,
                        done.generation,
                        done.failed,
                        if done.failed == 1 { "" } else { "s" },
                        done.stopping,
                        done.reason
                    );
                }
                Ok(Outcome::Success)
            }
            Command::Delete(a) => {
                let done = service.delete_draft(&a.name, a.version).await?;
                if a.json {
                    print_json(&done)?;
                } else {
                    let left = match done.remaining {
                        Some(v) => format!("its latest version is now v{v}"),
                        None => "the study is gone with it".to_owned(),
                    };
                    println!("study {} v{}: draft deleted; {left}", done.name, done.version);
                }
                Ok(Outcome::Success)
            }
            Command::Check(a) => check(&service, a).await,
        }
    })
}

async fn accept(service: &StudyService, a: AcceptArgs, by: &str) -> anyhow::Result<Outcome> {
    service
        .accept_baseline(&a.name, a.version, a.generation, by)
        .await?;
    if a.json {
        print_json(&json!({"study": a.name, "generation": a.generation, "accepted": true}))?;
    } else {
        println!(
            "study {}: generation {} is the baseline",
            a.name, a.generation
        );
    }
    Ok(Outcome::Success)
}

async fn check(service: &StudyService, a: CheckArgs) -> anyhow::Result<Outcome> {
    let against = match a.against {
        AgainstArg::Baseline => Against::Baseline,
        AgainstArg::Previous => Against::Previous,
    };
    let view = service.check(&a.name, a.version, against, a.alpha).await?;
    if a.json {
        print_json(&view)?;
    } else {
        for c in &view.candidates {
            let gens = match (c.reference_generation, c.current_generation) {
                (Some(r), Some(n)) => format!(" (generation {n} against {r})"),
                _ => String::new(),
            };
            let verdict = serde_json::to_value(c.verdict).unwrap_or_default();
            println!(
                "{}: {}{gens}",
                c.candidate,
                verdict.as_str().unwrap_or("?").replace('_', " ")
            );
            for r in &c.reasons {
                println!("  {r}");
            }
        }
    }
    Ok(if view.verdict == CheckVerdict::Regression {
        Outcome::CheckFailed
    } else {
        Outcome::Success
    })
}

async fn create(service: &StudyService, a: CreateArgs) -> anyhow::Result<Outcome> {
    let created = service.create_study(&a.file).await?;
    let (name, version) = created.name_version();
    let (state, previous) = match &created {
        Created::Saved { .. } => ("saved", None),
        Created::NewVersion { previous, .. } => ("new-version", Some(previous.clone())),
        Created::Unchanged { .. } => ("unchanged", None),
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

/// Check the endpoint candidates of study `name` v`version` now and warn on stderr of each that
/// would fail its cases (nothing answers, a model it does not list): said before a run rather
/// than found as every case failing. The checks, as `(name, check)`.
async fn warn_of_endpoints(
    service: &StudyService,
    name: &str,
    version: u32,
) -> anyhow::Result<Vec<(String, shortlist_runner::engines::EndpointCheck)>> {
    let view = service.show(name, Some(version)).await?;
    let checks = service.check_endpoints(&view.candidates).await;
    for (candidate, check) in &checks {
        if let Some(problem) = &check.problem {
            eprintln!("warning: candidate {candidate}: {problem}");
        }
    }
    Ok(checks)
}

async fn lock(service: &StudyService, a: NameArgs) -> anyhow::Result<Outcome> {
    let locked = service.lock(&a.name, a.version, &now_rfc3339()).await?;
    let checks = warn_of_endpoints(service, &a.name, locked.version).await?;
    if a.json {
        let mut doc = serde_json::to_value(&locked)?;
        doc["endpoints"] = checks
            .iter()
            .map(|(candidate, check)| json!({"candidate": candidate, "check": check}))
            .collect();
        print_json(&doc)?;
    } else {
        println!(
            "study {} v{}: {} at {} under {}",
            a.name,
            locked.version,
            if locked.locked_now {
                "locked"
            } else {
                "already locked"
            },
            locked.locked_at,
            locked.sha256
        );
    }
    Ok(Outcome::Success)
}

async fn verify(service: &StudyService, a: NameArgs) -> anyhow::Result<Outcome> {
    match service.verify(&a.name, a.version).await {
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

async fn run_study(service: &StudyService, a: RunArgs) -> anyhow::Result<Outcome> {
    let params = RunParams {
        max_tokens: a.max_tokens,
        trigger: Trigger::Manual,
        again: a.again,
        refresh_records: a.refresh_records,
        shards: a.shards,
        load_workers: a.load_workers,
        gather_wait: std::time::Duration::from_secs(a.gather_wait),
        ..RunParams::default()
    };
    let requested = service.request_run(&a.name, a.version, &params).await?;
    let (name, version, generation) = (&a.name, requested.version, requested.generation);
    if requested.queued > 0 {
        eprintln!(
            "study {name} v{version} generation {generation}: {} jobs queued",
            requested.queued
        );
        warn_of_endpoints(service, name, version).await?;
    } else {
        eprintln!("study {name} v{version} generation {generation}: jobs already queued; resuming");
    }
    if a.queue_only {
        if a.json {
            print_json(&requested)?;
        } else if let Some(note) = service.workers().await?.queue.stranded_note() {
            // Queued for whom? Say so now rather than leave the jobs to wait unexplained.
            eprintln!("{note}");
        }
        return Ok(Outcome::Success);
    }
    let (requeued, failed) = service
        .requeue_stale(Duration::from_secs(a.stale_after))
        .await?;
    if requeued + failed > 0 {
        eprintln!("{requeued} stale jobs requeued, {failed} out of attempts");
    }
    let bars = tokio::spawn(super::progress::draw(service.subscribe()));
    let worker = Worker::new(service.clone());
    // Ctrl-C or SIGTERM stops the job in hand, which goes back to the queue as it was: running
    // the study again goes on from there at once, instead of after its heartbeat goes stale.
    // A second signal leaves now.
    let stopper = worker.clone();
    let study = a.name.clone();
    let watch = tokio::spawn(async move {
        let signal = super::app::interrupted().await;
        eprintln!(
            "{signal}: stopping — the job in hand stops, keeping what it stored, and goes back to the queue; `shortlist study run {study}` goes on from there ({signal} again leaves now)"
        );
        stopper.stop();
        super::app::interrupted().await;
        eprintln!(
            "leaving now: the job in hand goes back to the queue once its heartbeat is stale"
        );
        std::process::exit(130);
    });
    let mut done = Vec::new();
    let mut failures = Vec::new();
    // Work until nothing of this study is left queued: a job requeued after a transient failure
    // waits for its backoff, and is then run here too.
    let mut outcomes = Vec::new();
    loop {
        let left = a.max_jobs.map(|m| m.saturating_sub(outcomes.len()));
        if left == Some(0) {
            break;
        }
        outcomes.extend(worker.run_until_idle(left, |_| {}).await?);
        service
            .requeue_stale(Duration::from_secs(a.stale_after))
            .await?;
        let queued = !service.queued_jobs(&a.name, version).await?.is_empty();
        if !queued || worker.stopping() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    watch.abort();
    let stopped = worker.stopping();
    worker.retire().await;
    for outcome in outcomes {
        match outcome {
            JobOutcome::Done {
                id,
                kind,
                candidate,
                note,
            } => done.push(json!({"id": id, "kind": kind, "candidate": candidate, "note": note})),
            JobOutcome::Failed {
                id,
                kind,
                candidate,
                why,
                class,
                requeued,
            } => failures.push(json!({
                "id": id, "kind": kind, "candidate": candidate, "why": why,
                "class": class, "state": if requeued { "queued" } else { "failed" },
            })),
            JobOutcome::Cancelled { id, reason } => failures.push(json!({
                "id": id, "why": reason, "class": "cancelled", "state": "failed",
            })),
            JobOutcome::Released { .. } | JobOutcome::Idle => {}
        }
    }
    bars.abort();
    // Jobs requeued after a transient failure wait for their backoff: say so, they are not lost.
    let waiting = service
        .queued_jobs(&a.name, version)
        .await?
        .get(&generation)
        .copied()
        .unwrap_or(0);
    if a.json {
        print_json(&json!({
            "study": a.name, "version": version, "generation": generation,
            "done": done, "failed": failures, "waiting": waiting, "stopped": stopped,
        }))?;
    } else {
        println!(
            "study {} v{version} generation {generation}: {} jobs done, {} failed{}",
            a.name,
            done.len(),
            failures.len(),
            if stopped {
                format!(", {waiting} waiting: stopped, run again to go on")
            } else if waiting > 0 {
                format!(
                    ", {waiting} waiting (retry after a backoff, or for a job they follow): run again to go on"
                )
            } else {
                String::new()
            }
        );
        for f in &failures {
            println!(
                "  job {} ({} {}) failed [{}]: {}",
                f["id"],
                f["kind"].as_str().unwrap_or("?"),
                f["candidate"].as_str().unwrap_or("?"),
                f["class"].as_str().unwrap_or("?"),
                f["why"].as_str().unwrap_or("?")
            );
        }
    }
    Ok(if failures.is_empty() && waiting == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
