//! `shortlist schedule add|list|pause|resume|remove|history|tick` and `shortlist scheduler`:
//! studies run again at the instants of a cron expression, stored in the database. `tick --at`
//! queues what is due at an instant (for tests and for teams that prefer their own cron); the
//! scheduler ticks every few seconds, inside `shortlist serve` or alone.

use std::time::Duration;

use anyhow::Context as _;
use jiff::Timestamp;
use shortlist_runner::config::Config;
use shortlist_runner::service::schedule::{ScheduleSpec, ScheduleView, TickReport};
use shortlist_runner::service::{ScheduleWhat, StudyService};

use super::Outcome;
use super::app::{existing_service, runtime};
use super::output::print_json;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Add a schedule: a study run again at the instants of a cron expression (minute hour
    /// day-of-month month day-of-week) in a time zone; due only at instants after `--from`.
    Add(AddArgs),
    /// Every schedule with its last and next due instants.
    List(JsonArgs),
    /// Stop a schedule from running (its history stays).
    Pause(NameArgs),
    /// Let a paused schedule run again (one missed instant is caught up, the rest skipped).
    Resume(NameArgs),
    /// Remove a schedule and its history (the runs it started stay).
    Remove(NameArgs),
    /// A schedule's handled instants: runs started, instants skipped, failures with reasons.
    History(HistoryArgs),
    /// Queue what is due at an instant (default: now) and print what started and what was
    /// skipped: `{"started": [...], "skipped": [...], "failed": [...]}`.
    Tick(TickArgs),
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct AddArgs {
    /// The schedule's name.
    name: String,
    /// The study to run.
    #[arg(long)]
    study: String,
    /// Pin this locked version (default: the latest locked version at each tick).
    #[arg(long)]
    version: Option<u32>,
    /// Five fields (`30 2 * * *`: 02:30 every night) or @daily, @hourly, @weekly, @monthly.
    #[arg(long)]
    cron: String,
    /// IANA time zone of the expression.
    #[arg(long, default_value = "UTC")]
    tz: String,
    /// What to run: the quality run, the load run, or both.
    #[arg(long, value_enum, default_value_t = WhatArg::All)]
    what: WhatArg,
    /// Only these candidates, comma-separated (default: all of the study's).
    #[arg(long, value_delimiter = ',')]
    candidates: Vec<String>,
    /// Due only at instants after this (RFC 3339; default: now).
    #[arg(long)]
    from: Option<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum WhatArg {
    Quality,
    Load,
    All,
}

#[derive(Debug, clap::Args)]
pub(crate) struct JsonArgs {
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct NameArgs {
    /// The schedule's name.
    name: String,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// The schedule's name.
    name: String,
    /// Most instants listed, newest first.
    #[arg(long, default_value_t = 100)]
    limit: u32,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TickArgs {
    /// The instant (RFC 3339; default: now).
    #[arg(long)]
    at: Option<String>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// `shortlist scheduler`: tick every `--every` seconds until Ctrl-C.
#[derive(Debug, clap::Args)]
pub(crate) struct SchedulerArgs {
    /// Seconds between ticks.
    #[arg(long, default_value_t = 30)]
    every: u64,
}

fn instant(flag: &str, text: &str) -> anyhow::Result<Timestamp> {
    text.parse().with_context(|| {
        format!("{flag} {text}: not an RFC 3339 instant (e.g. 2026-12-01T03:00:00Z)")
    })
}

pub(crate) fn run(cmd: Command, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        let service = existing_service(&config).await?;
        match cmd {
            Command::Add(a) => add(&service, a).await,
            Command::List(a) => {
                let list = service.list_schedules().await?;
                if a.json {
                    print_json(&list)?;
                } else if list.is_empty() {
                    println!("no schedules");
                } else {
                    for s in &list {
                        print_schedule(s);
                    }
                }
                Ok(Outcome::Success)
            }
            Command::Pause(a) => enable(&service, a, false).await,
            Command::Resume(a) => enable(&service, a, true).await,
            Command::Remove(a) => {
                service.remove_schedule(&a.name).await?;
                if a.json {
                    print_json(&serde_json::json!({"removed": a.name}))?;
                } else {
                    println!("schedule {} removed", a.name);
                }
                Ok(Outcome::Success)
            }
            Command::History(a) => {
                let ticks = service.schedule_history(&a.name, a.limit).await?;
                if a.json {
                    print_json(&ticks)?;
                } else {
                    for t in &ticks {
                        let run = match (t.version, t.generation) {
                            (Some(v), Some(g)) => format!(" {} v{v} generation {g}", t.study),
                            _ => String::new(),
                        };
                        println!(
                            "{} {}{run}{}",
                            t.due,
                            t.state,
                            t.detail
                                .as_deref()
                                .map(|d| format!(": {d}"))
                                .unwrap_or_default()
                        );
                    }
                }
                Ok(Outcome::Success)
            }
            Command::Tick(a) => {
                let at = match &a.at {
                    Some(t) => instant("--at", t)?,
                    None => Timestamp::now(),
                };
                let report = service.tick(at, &config.worker).await?;
                print_report(&report, a.json)?;
                Ok(if report.failed.is_empty() {
                    Outcome::Success
                } else {
                    Outcome::CheckFailed
                })
            }
        }
    })
}

async fn add(service: &StudyService, a: AddArgs) -> anyhow::Result<Outcome> {
    let from = a
        .from
        .as_deref()
        .map(|t| instant("--from", t))
        .transpose()?;
    let view = service
        .add_schedule(&ScheduleSpec {
            name: a.name,
            study: a.study,
            version: a.version,
            cron: a.cron,
            tz: a.tz,
            what: match a.what {
                WhatArg::Quality => ScheduleWhat::Quality,
                WhatArg::Load => ScheduleWhat::Load,
                WhatArg::All => ScheduleWhat::All,
            },
            candidates: a.candidates,
            from,
        })
        .await?;
    if a.json {
        print_json(&view)?;
    } else {
        print_schedule(&view);
    }
    Ok(Outcome::Success)
}

async fn enable(service: &StudyService, a: NameArgs, on: bool) -> anyhow::Result<Outcome> {
    let view = service.set_schedule_enabled(&a.name, on).await?;
    if a.json {
        print_json(&view)?;
    } else {
        print_schedule(&view);
    }
    Ok(Outcome::Success)
}

fn print_schedule(s: &ScheduleView) {
    let version = s
        .version
        .map_or_else(|| "latest locked".to_owned(), |v| format!("v{v}"));
    println!(
        "{}: study {} ({version}), `{}` {} , {}{}; next {}; last {}",
        s.name,
        s.study,
        s.cron,
        s.tz,
        s.what,
        if s.enabled { "" } else { ", paused" },
        s.next_due.as_deref().unwrap_or("–"),
        s.last_due.as_deref().unwrap_or("–"),
    );
}

fn print_report(report: &TickReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    for t in &report.started {
        println!(
            "started {} due {}: {} v{} generation {}",
            t.schedule,
            t.due,
            t.study,
            t.version.unwrap_or(0),
            t.generation.unwrap_or(0)
        );
    }
    for t in &report.skipped {
        println!("skipped {} due {}", t.schedule, t.due);
    }
    for t in &report.failed {
        println!(
            "failed {} due {}: {}",
            t.schedule,
            t.due,
            t.detail.as_deref().unwrap_or("")
        );
    }
    if report.started.is_empty() && report.skipped.is_empty() && report.failed.is_empty() {
        println!("nothing due");
    }
    Ok(())
}

/// Tick until stopped: what `shortlist scheduler` and `shortlist serve` run.
pub(crate) async fn scheduler_loop(service: StudyService, name: String, every: Duration) {
    loop {
        match service.tick(Timestamp::now(), &name).await {
            Ok(r) => {
                for t in &r.started {
                    eprintln!(
                        "schedule {}: started {} v{} for {}",
                        t.schedule,
                        t.study,
                        t.version.unwrap_or(0),
                        t.due
                    );
                }
                for t in &r.failed {
                    eprintln!(
                        "schedule {}: due {} failed: {}",
                        t.schedule,
                        t.due,
                        t.detail.as_deref().unwrap_or("")
                    );
                }
            }
            Err(e) => eprintln!("scheduler: {e}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// `shortlist scheduler`.
pub(crate) fn run_scheduler(a: SchedulerArgs, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        let service = existing_service(&config).await?;
        eprintln!("scheduler {}: ticking every {} s (Ctrl-C stops)", config.worker, a.every);
        tokio::select! {
            () = scheduler_loop(service, config.worker.clone(), Duration::from_secs(a.every.max(1))) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        anyhow::Ok(Outcome::Success)
    })
}
