//! `shortlist schedule add|list|pause|resume|remove|history|tick|webhook` and `shortlist
//! scheduler`: studies run again at the instants of a cron expression, stored in the database.
//! `tick --at` queues what is due at an instant (for tests and for teams that prefer their own
//! cron); the scheduler ticks every few seconds, inside `shortlist serve` or alone. Each pass
//! also checks the nights whose runs finished and sends their signed documents to the
//! schedules' webhooks.

use std::time::Duration;

use anyhow::Context as _;
use jiff::Timestamp;
use serde::Serialize;
use shortlist_runner::config::Config;
use shortlist_runner::service::night::{DeliveryView, NightReport, check_webhook};
use shortlist_runner::service::schedule::{ScheduleSpec, ScheduleView, TickReport};
use shortlist_runner::service::{ScheduleWhat, StudyService};

use super::Outcome;
use super::app::{existing_service, runtime};
use super::output::{JsonArgs, print_json};

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
    /// Queue what is due at an instant (default: now), check the nights whose runs finished
    /// and send what the webhooks are due: `{"started": [...], "skipped": [...], "failed":
    /// [...], "checked": [...], "deliveries": [...]}`.
    Tick(TickArgs),
    /// A schedule's webhooks: each finished night is POSTed to them as JSON, signed with
    /// `X-Shortlist-Signature: sha256=HMAC-SHA256(secret, body)`; the secret comes from
    /// SHORTLIST_WEBHOOK_SECRET.
    #[command(subcommand)]
    Webhook(WebhookCommand),
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum WebhookCommand {
    /// Notify an http:// URL of every finished night (secret: SHORTLIST_WEBHOOK_SECRET).
    Add(WebhookArgs),
    /// Enable a webhook disabled after five consecutive failed deliveries; what it missed is
    /// sent at the next pass.
    Enable(WebhookArgs),
    /// Stop notifying a URL (its pending deliveries are dropped).
    Remove(WebhookArgs),
    /// A schedule's webhooks: enabled, consecutive failures, last error, deliveries pending.
    List(NameArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct WebhookArgs {
    /// The schedule's name.
    name: String,
    /// The receiver's URL.
    url: String,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

/// How a scheduler pass notifies: shared by `schedule tick`, `scheduler` and `serve`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct NotifyArgs {
    /// The workbench's address as receivers should link to it (e.g. https://shortlist.example);
    /// default: links are paths.
    #[arg(long, default_value = "")]
    public_url: String,
    /// Seconds before retrying a failed webhook delivery, doubled per failure (at most an hour).
    #[arg(long, default_value_t = 30.0)]
    webhook_backoff: f64,
}

impl NotifyArgs {
    fn backoff(&self) -> Duration {
        Duration::try_from_secs_f64(self.webhook_backoff.max(0.0)).unwrap_or(Duration::ZERO)
    }
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
    /// Notify this http:// URL of every finished night (repeatable; secret from
    /// SHORTLIST_WEBHOOK_SECRET).
    #[arg(long)]
    webhook: Vec<String>,
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
    #[command(flatten)]
    notify: NotifyArgs,
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
    #[command(flatten)]
    notify: NotifyArgs,
}

/// What one scheduler pass did.
#[derive(Debug, Serialize)]
pub(crate) struct Pass {
    #[serde(flatten)]
    tick: TickReport,
    /// Nights whose runs finished, checked now.
    checked: Vec<NightSummary>,
    /// Webhook deliveries attempted now.
    deliveries: Vec<DeliveryView>,
}

/// A checked night, in short.
#[derive(Debug, Serialize)]
pub(crate) struct NightSummary {
    schedule: String,
    due: String,
    study: String,
    version: u32,
    generation: u32,
    state: String,
    verdict: shortlist_runner::service::check::CheckVerdict,
    baseline_verdict: Option<shortlist_runner::service::check::CheckVerdict>,
}

impl From<NightReport> for NightSummary {
    fn from(n: NightReport) -> Self {
        NightSummary {
            schedule: n.schedule,
            due: n.due,
            study: n.study,
            version: n.version,
            generation: n.generation,
            state: n.state,
            verdict: n.verdict,
            baseline_verdict: n.baseline_verdict,
        }
    }
}

/// One pass: queue what is due at `at`, check finished nights, send due deliveries.
pub(crate) async fn pass(
    service: &StudyService,
    at: Timestamp,
    name: &str,
    notify: &NotifyArgs,
) -> anyhow::Result<Pass> {
    let tick = service.tick(at, name).await?;
    let checked = service
        .check_finished_nights(&notify.public_url)
        .await?
        .into_iter()
        .map(NightSummary::from)
        .collect();
    let deliveries = service.deliver_webhooks(notify.backoff()).await?;
    Ok(Pass {
        tick,
        checked,
        deliveries,
    })
}

/// The webhook secret from SHORTLIST_WEBHOOK_SECRET.
fn webhook_secret() -> anyhow::Result<String> {
    std::env::var("SHORTLIST_WEBHOOK_SECRET").map_err(|_| {
        anyhow::anyhow!(
            "a webhook needs a secret to sign with: set SHORTLIST_WEBHOOK_SECRET (16 characters or more)"
        )
    })
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
                let report = pass(&service, at, &config.worker, &a.notify).await?;
                print_report(&report, a.json)?;
                Ok(if report.tick.failed.is_empty() {
                    Outcome::Success
                } else {
                    Outcome::CheckFailed
                })
            }
            Command::Webhook(w) => webhook(&service, w).await,
        }
    })
}

async fn webhook(service: &StudyService, w: WebhookCommand) -> anyhow::Result<Outcome> {
    let (name, json) = match &w {
        WebhookCommand::Add(a) | WebhookCommand::Enable(a) | WebhookCommand::Remove(a) => {
            (a.name.clone(), a.json)
        }
        WebhookCommand::List(a) => (a.name.clone(), a.json),
    };
    match &w {
        WebhookCommand::Add(a) => {
            service
                .add_webhook(&a.name, &a.url, &webhook_secret()?)
                .await?;
        }
        WebhookCommand::Enable(a) => service.enable_webhook(&a.name, &a.url).await?,
        WebhookCommand::Remove(a) => service.remove_webhook(&a.name, &a.url).await?,
        WebhookCommand::List(_) => {}
    }
    let hooks = service.webhooks(&name).await?;
    if json {
        print_json(&hooks)?;
    } else if hooks.is_empty() {
        println!("schedule {name} notifies no webhook");
    } else {
        for h in &hooks {
            println!(
                "{} {} ({} consecutive failures, {} pending){}",
                h.url,
                if h.enabled { "enabled" } else { "DISABLED" },
                h.failures,
                h.pending,
                h.last_error
                    .as_deref()
                    .map(|e| format!(": last error: {e}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(Outcome::Success)
}

async fn add(service: &StudyService, a: AddArgs) -> anyhow::Result<Outcome> {
    let from = a
        .from
        .as_deref()
        .map(|t| instant("--from", t))
        .transpose()?;
    // Checked before the schedule is stored, so a bad webhook stores nothing.
    let secret = if a.webhook.is_empty() {
        String::new()
    } else {
        webhook_secret()?
    };
    for url in &a.webhook {
        check_webhook(url, &secret)?;
    }
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
    for url in &a.webhook {
        service.add_webhook(&view.name, url, &secret).await?;
    }
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

fn print_report(pass: &Pass, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(pass);
    }
    let report = &pass.tick;
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
    for n in &pass.checked {
        println!(
            "checked {} due {}: {} v{} generation {}: {:?} against the previous night{}",
            n.schedule,
            n.due,
            n.study,
            n.version,
            n.generation,
            n.verdict,
            n.baseline_verdict
                .map(|b| format!(", {b:?} against the baseline"))
                .unwrap_or_default()
        );
    }
    for d in &pass.deliveries {
        match &d.error {
            None => println!("delivered to {} (attempt {})", d.url, d.attempt),
            Some(e) => println!("delivery to {} failed (attempt {}): {e}", d.url, d.attempt),
        }
    }
    if report.started.is_empty()
        && report.skipped.is_empty()
        && report.failed.is_empty()
        && pass.checked.is_empty()
        && pass.deliveries.is_empty()
    {
        println!("nothing due");
    }
    Ok(())
}

/// Tick until stopped: what `shortlist scheduler` and `shortlist serve` run.
pub(crate) async fn scheduler_loop(
    service: StudyService,
    name: String,
    every: Duration,
    notify: NotifyArgs,
) {
    loop {
        match pass(&service, Timestamp::now(), &name, &notify).await {
            Ok(p) => {
                for t in &p.tick.started {
                    eprintln!(
                        "schedule {}: started {} v{} for {}",
                        t.schedule,
                        t.study,
                        t.version.unwrap_or(0),
                        t.due
                    );
                }
                for t in &p.tick.failed {
                    eprintln!(
                        "schedule {}: due {} failed: {}",
                        t.schedule,
                        t.due,
                        t.detail.as_deref().unwrap_or("")
                    );
                }
                for n in &p.checked {
                    eprintln!(
                        "schedule {}: night {} checked: {:?}",
                        n.schedule, n.due, n.verdict
                    );
                }
                for d in p.deliveries.iter().filter(|d| !d.delivered) {
                    eprintln!(
                        "webhook {}: {}",
                        d.url,
                        d.error.as_deref().unwrap_or("failed")
                    );
                }
            }
            Err(e) => eprintln!("scheduler: {e:#}"),
        }
        tokio::time::sleep(every).await;
    }
}

/// `shortlist scheduler`.
pub(crate) fn run_scheduler(a: SchedulerArgs, config: &Config) -> anyhow::Result<Outcome> {
    let config = config.clone();
    runtime()?.block_on(async move {
        let service = existing_service(&config).await?;
        eprintln!(
            "scheduler {}: ticking every {} s (Ctrl-C or SIGTERM stops)",
            config.worker, a.every
        );
        let every = Duration::from_secs(a.every.max(1));
        tokio::select! {
            () = scheduler_loop(service, config.worker.clone(), every, a.notify) => {}
            _ = super::app::interrupted() => {}
        }
        anyhow::Ok(Outcome::Success)
    })
}
