//! `shortlist study list|show|status`: the stored studies, a study as stored (its criteria, lock
//! and candidates, or its file's text) and where its runs stand, read from the database alone.

use serde_json::json;
use shortlist_runner::service::StudyService;
use shortlist_runner::service::views::{Shown, StudyView};
use shortlist_study::record::Verdict;

use super::Outcome;
use super::output::print_json;
use super::study::NameArgs;

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    which: NameArgs,
    /// Print the study file's text (TOML) instead: every field as stored, without the version
    /// and the lock it replaces, which `study create` assigns.
    #[arg(long, conflicts_with = "json")]
    toml: bool,
}

#[derive(Debug, clap::Args)]
// `--version` is the study version here, not the program's.
#[command(disable_version_flag = true)]
pub(crate) struct StatusArgs {
    /// The study's name.
    name: String,
    /// The version (default: the latest).
    #[arg(long)]
    version: Option<u32>,
    /// Also list the stored progress events after this event id (0: all).
    #[arg(long)]
    events_after: Option<i64>,
    /// Only the newest N generations in full; the others a line each (`earlier` in JSON).
    /// Default: every generation in full.
    #[arg(long, value_name = "N")]
    generations: Option<usize>,
    /// Print one JSON document.
    #[arg(long)]
    json: bool,
}

pub(super) async fn list(
    service: &StudyService,
    args: super::output::JsonArgs,
) -> anyhow::Result<Outcome> {
    let studies = service.list_studies().await?;
    if args.json {
        print_json(&studies)?;
    } else if studies.is_empty() {
        println!("no studies stored (`shortlist study create FILE` stores one)");
    } else {
        for s in &studies {
            let verdicts = s
                .verdicts
                .iter()
                .map(|(c, v)| match v {
                    Some(v) => format!("{c} ({})", verdict_str(*v)),
                    None => format!("{c} (no record)"),
                })
                .collect::<Vec<_>>();
            println!(
                "{} v{} ({}): {}",
                s.name,
                s.version,
                shortlist_app::state_word(s.state, s.ended).0,
                listed(&verdicts, "no candidates")
            );
            println!("  {}", s.question);
        }
    }
    Ok(Outcome::Success)
}

pub(super) async fn show(service: &StudyService, args: ShowArgs) -> anyhow::Result<Outcome> {
    let a = args.which;
    let view = service.show(&a.name, a.version).await?;
    if args.toml {
        print!("{}", view.study.to_toml()?);
    } else if a.json {
        print_json(&view)?;
    } else {
        print_view(&view);
    }
    Ok(Outcome::Success)
}

fn print_view(view: &StudyView) {
    println!(
        "study {} v{} ({})",
        view.name,
        view.version,
        serde_json::to_value(view.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    );
    if let (Some(sha), Some(at)) = (&view.lock_sha256, &view.locked_at) {
        println!("  locked at {at} under {sha}");
    }
    let study = &view.study;
    println!("  question: {}", study.question);
    println!(
        "  eval set: {} ({})",
        study.evalset.path, study.evalset.sha256
    );
    println!(
        "  traffic: ordinary {} req/s, peak {} req/s",
        study.traffic.ordinary_rps, study.traffic.peak_rps
    );
    for c in &view.candidates {
        let id = &c.stored["gguf"]["identity"];
        println!(
            "  candidate {}: {} {} params, {}, license {}, weights {}{}",
            c.name,
            id["architecture"].as_str().unwrap_or("?"),
            id["parameters"],
            id["quantization"].as_str().unwrap_or("?"),
            id["license"].as_str().unwrap_or("?"),
            id["weights_sha256"].as_str().unwrap_or("?"),
            c.verdict
                .map_or_else(String::new, |v| format!(" — verdict {v:?}")),
        );
    }
    for r in &study.disqualifiers {
        println!(
            "  disqualify when {} {} {}",
            r.metric,
            serde_json::to_value(r.op)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            r.values.as_ref().map_or_else(
                || r.value.as_ref().map_or_else(String::new, |v| v.to_string()),
                |v| format!("{v:?}")
            )
        );
    }
}

pub(super) async fn status(service: &StudyService, a: StatusArgs) -> anyhow::Result<Outcome> {
    let shown = a
        .generations
        .map_or(Shown::All, |count| Shown::Newest { count, also: None });
    let progress = service
        .run_progress_shown(&a.name, a.version, shown)
        .await?;
    let events = match a.events_after {
        Some(after) => Some(
            service
                .progress_after(&a.name, progress.version, after)
                .await?
                .into_iter()
                .map(|(id, event)| json!({"id": id, "event": event}))
                .collect::<Vec<_>>(),
        ),
        None => None,
    };
    if a.json {
        let mut doc = serde_json::to_value(&progress)?;
        if let Some(events) = events {
            doc["events"] = serde_json::Value::Array(events);
        }
        print_json(&doc)?;
        return Ok(Outcome::Success);
    }
    // A finish with failed or cancelled jobs says how many.
    let ended = progress.ended;
    let ends = [(ended.failed, "failed"), (ended.cancelled, "cancelled")]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect::<Vec<_>>();
    println!(
        "study {} v{}: {}{}",
        progress.study,
        progress.version,
        serde_json::to_value(progress.state)?
            .as_str()
            .unwrap_or_default(),
        if ends.is_empty() {
            String::new()
        } else {
            format!(" ({})", ends.join(", "))
        }
    );
    for g in &progress.generations {
        let records = g
            .records
            .iter()
            .map(|c| match g.verdicts.get(c) {
                Some(v) => format!("{c} ({})", verdict_str(*v)),
                None => c.clone(),
            })
            .collect::<Vec<_>>();
        let baseline = progress
            .baseline
            .as_ref()
            .filter(|b| b.generation == g.number)
            .map_or_else(String::new, |b| {
                format!(
                    "; the accepted baseline (by {} at {})",
                    b.accepted_by, b.accepted_at
                )
            });
        println!(
            "  generation {} ({}, {}): records of {}{baseline}",
            g.number,
            g.trigger,
            g.created_at,
            listed(&records, "none yet")
        );
        for j in &g.jobs {
            let progress = j.progress.as_ref().map_or_else(String::new, |p| {
                let done = p.fraction().map_or_else(String::new, |f| {
                    format!(
                        " {:.0} %{}",
                        f * 100.0,
                        p.eta_s
                            .filter(|_| j.state == "running")
                            .map_or_else(String::new, |s| format!(" (ETA {:.0} s)", s))
                    )
                });
                // A failure's message is its last error, printed after: not twice.
                format!(
                    "{done}{}",
                    p.message
                        .as_ref()
                        .filter(|m| j.last_error.as_ref() != Some(*m))
                        .map_or_else(String::new, |m| format!(" — {m}"))
                )
            });
            println!(
                "    job {:>4} {:<8} {:<12} {:<9} attempt {}/{}{}{}",
                j.id,
                j.kind.as_str(),
                j.candidate,
                j.state_in_words(),
                j.attempts,
                j.max_attempts,
                progress,
                j.last_error
                    .as_ref()
                    .map_or_else(String::new, |e| format!(" (last error: {e})"))
            );
        }
        for r in &g.runs {
            println!(
                "    run {:>4} {:<8} {:<10} {:<9} on {} ({})",
                r.id,
                r.kind,
                r.candidate,
                r.state_in_words(),
                r.machine.as_deref().unwrap_or("-"),
                r.worker.as_deref().unwrap_or("-")
            );
        }
    }
    for g in &progress.earlier {
        let jobs = g
            .job_counts()
            .into_iter()
            .map(|(state, n)| format!("{n} {state}"))
            .collect::<Vec<_>>();
        let records = g
            .verdicts
            .iter()
            .map(|(c, v)| format!("{c} ({})", verdict_str(*v)))
            .collect::<Vec<_>>();
        println!(
            "  generation {} ({}, {}): jobs {}; records of {}",
            g.number,
            g.trigger,
            g.created_at,
            listed(&jobs, "none"),
            listed(&records, "none")
        );
    }
    Ok(Outcome::Success)
}

/// Items joined with commas, or `none` when there are none.
fn listed(items: &[String], none: &str) -> String {
    if items.is_empty() {
        none.to_owned()
    } else {
        items.join(", ")
    }
}

/// A verdict as its JSON name (`qualified`, `disqualified`, …).
fn verdict_str(v: Verdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
