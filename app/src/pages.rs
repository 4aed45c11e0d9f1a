//! A study's page: its frozen criteria, lock, run, delete and live progress (the studies
//! list: `home.rs`).

use leptos::prelude::*;
use shortlist_runner::engines::EndpointCheck;
use shortlist_runner::progress::{Phase, ProgressEvent};
use shortlist_runner::service::views::{
    BaselineView, Ended, GenerationSummary, GenerationView, JobView, QueueView, RunProgress,
    StudyState, StudyVersionView, StudyView,
};

use shortlist_runner::time::duration_in_words;

use crate::layout::{card_table, document, list_table};
use crate::verdict_word;

/// A study version's state as a word and its tone. A latest generation that ended with cancelled
/// or failed jobs says so: it never reads as a clean, green finish.
pub fn state_word(state: StudyState, ended: Ended) -> (&'static str, &'static str) {
    match state {
        StudyState::Draft => ("draft", "none"),
        StudyState::Locked => ("locked", "info"),
        StudyState::Running => ("running", "info"),
        StudyState::Done if ended.cancelled > 0 => ("cancelled", "warn"),
        StudyState::Done if ended.failed > 0 => ("failed", "bad"),
        StudyState::Done => ("done", "good"),
    }
}

/// A study's candidates' columns.
const CANDIDATE_COLUMNS: &[&str] = &["Candidate", "Identity", "Verdict"];

/// A generation's jobs' columns.
const JOB_COLUMNS: &[&str] = &[
    "Candidate",
    "Job",
    "State",
    "Progress",
    "Attempt",
    "Last error",
];

/// A generation's runs' columns.
const RUN_COLUMNS: &[&str] = &[
    "Run",
    "Candidate",
    "State",
    "Machine",
    "Worker",
    "Started",
    "Finished",
];

/// A job's latest progress in words.
pub(crate) fn progress_text(p: Option<&ProgressEvent>) -> String {
    let Some(p) = p else {
        return String::new();
    };
    let mut parts = Vec::new();
    if let Some(c) = &p.cases {
        parts.push(format!(
            "{}/{} cases, {} passed, {} failed{}",
            c.done,
            c.total,
            c.passed,
            c.failed,
            if c.errors > 0 {
                format!(", {} errors", c.errors)
            } else {
                String::new()
            }
        ));
    }
    if let Some(l) = &p.load {
        parts.push(format!(
            "step {} at {} req/s: {}/{} requests",
            l.label, l.offered_rps, l.finished, l.total
        ));
    }
    // An estimate of the time left, while the job goes on (events stored before ended jobs
    // stopped carrying one may still hold one).
    let going = matches!(p.phase, Phase::Started | Phase::Running);
    if let Some(eta) = p.eta_s.filter(|_| going) {
        parts.push(format!("ETA {}", duration_in_words(eta)));
    }
    parts.join(" · ")
}

fn job_row(job: JobView) -> impl IntoView {
    let fraction = if job.state == "done" {
        Some(1.0)
    } else {
        job.progress.as_ref().and_then(ProgressEvent::fraction)
    };
    let value = format!("{:.3}", fraction.unwrap_or(0.0));
    let percent = fraction.map_or_else(|| "–".to_owned(), |f| format!("{:.0} %", f * 100.0));
    // A finished job's counts are its last; a load step's request counts are not (they were
    // sampled while it ran), so a finished load job shows its closing message only.
    let text = match job.progress.as_ref() {
        Some(p) if job.state == "done" && p.cases.is_none() => String::new(),
        p => progress_text(p),
    };
    // A failure's message is its last error, shown in its own cell: not twice. A finished
    // quality job's closing message restates the counts its progress line shows.
    let message = job
        .progress
        .as_ref()
        .filter(|p| !(job.state == "done" && p.cases.is_some()))
        .and_then(|p| p.message.clone())
        .filter(|m| job.last_error.as_deref() != Some(m.as_str()))
        .unwrap_or_default();
    let state = job.state_in_words().to_owned();
    let state_class = format!(
        "badge {}",
        match state.as_str() {
            "done" => "good",
            "failed" => "bad",
            "cancelled" => "warn",
            "running" => "info",
            _ => "none",
        }
    );
    let id = job.id.to_string();
    let attempts = format!("{}/{}", job.attempts, job.max_attempts);
    // Cancelled while it runs: it stops when its worker next hears from the database.
    let last_error = match (&job.cancel_reason, job.state.as_str()) {
        (Some(reason), "running") => Some(format!(
            "Stopping at its worker's next heartbeat, keeping what it stored: {reason}"
        )),
        _ => job.last_error.filter(|e| !e.is_empty()),
    };
    view! {
        <tr data-job=id.clone()>
            <td data-label=JOB_COLUMNS[0] class="inline">{job.candidate}</td>
            <td data-label=JOB_COLUMNS[1] class="inline">{job.kind.as_str()}</td>
            <td data-label=JOB_COLUMNS[2] class="inline"><span class=state_class data-field="state">{state}</span></td>
            <td data-label=JOB_COLUMNS[3] class="progress-cell">
                <progress max="1" value=value data-field="bar"></progress>
                <span data-field="percent">{percent}</span>
                <div class="muted small" data-field="text">{text}</div>
                <div class="muted small" data-field="message">{message}</div>
            </td>
            <td data-label=JOB_COLUMNS[4] class="inline">{attempts}</td>
            <td data-label=JOB_COLUMNS[5] class="small" data-field="error">{last_error}</td>
        </tr>
    }
}

/// A generation's card. `baseline`: the accepted baseline's generation and who accepted it when;
/// `accept`: where a finished generation's **Accept as baseline** posts.
fn generation(
    g: GenerationView,
    version: u32,
    baseline: Option<&BaselineView>,
    accept: &str,
    record_base: &str,
) -> impl IntoView {
    // Each record of this generation, with its verdict, linked as this generation's (not the
    // newest): its page, PDF and JSON stay the ones it was.
    let records = (!g.records.is_empty()).then(|| {
        let items = g
            .records
            .iter()
            .map(|c| {
                let (word, tone) = verdict_word(g.verdicts.get(c).copied());
                let class = format!("badge {tone}");
                let href = format!(
                    "{record_base}{}?version={version}&generation={}",
                    crate::encode(c),
                    g.number
                );
                let pdf = format!(
                    "{record_base}{}/record.pdf?version={version}&generation={}",
                    crate::encode(c),
                    g.number
                );
                let name = c.clone();
                view! {
                    <li>
                        <a href=href>{name}</a> " " <span class=class>{word}</span>
                        " " <a class="small" href=pdf>"PDF"</a>
                    </li>
                }
            })
            .collect_view();
        view! {
            <div class="records">
                <span class="small muted">"Records:"</span>
                <ul class="plain inline-list">{items}</ul>
            </div>
        }
    });
    let version = version.to_string();
    let is_baseline = baseline.is_some_and(|b| b.generation == g.number);
    let baseline_note = baseline.filter(|_| is_baseline).map(|b| {
        format!(
            "accepted as the baseline by {} at {}",
            b.accepted_by, b.accepted_at
        )
    });
    // Only a run with records can be a baseline; later runs are checked against it.
    let can_accept = !is_baseline && !g.records.is_empty();
    let accept = accept.to_owned();
    let number = g.number.to_string();
    let title = format!(
        "Generation {} · {} · {}",
        g.number,
        g.trigger,
        if g.created_at.is_empty() {
            "-".to_owned()
        } else {
            g.created_at.clone()
        }
    );
    let runs = g.runs.clone();
    let id = format!("generation-{}", g.number);
    view! {
        <section class="card" id=id>
            <div class="generation-head">
                <h3>{title}</h3>
                {baseline_note.map(|note| view! { <span class="badge good">"baseline"</span><span class="small muted">{note}</span> })}
                {can_accept.then(|| view! {
                    <form method="post" action=accept.clone()>
                        <input type="hidden" name="version" value=version.clone()/>
                        <input type="hidden" name="generation" value=number.clone()/>
                        <button type="submit" class="secondary small">"Accept as baseline"</button>
                    </form>
                })}
            </div>
            {records}
            {card_table("jobs", JOB_COLUMNS, g.jobs.into_iter().map(job_row).collect_view())}
            <details>
                <summary>"Runs and where they were executed"</summary>
                {card_table("", RUN_COLUMNS, runs
                    .into_iter()
                    .map(|r| {
                        let what = format!("{} {}", r.kind, r.label);
                        let state = r.state_in_words().to_owned();
                        view! {
                            <tr>
                                <td data-label=RUN_COLUMNS[0] class="inline">{what}</td>
                                <td data-label=RUN_COLUMNS[1] class="inline">{r.candidate}</td>
                                <td data-label=RUN_COLUMNS[2] class="inline">{state}</td>
                                <td data-label=RUN_COLUMNS[3] class="small">{r.machine.unwrap_or_default()}</td>
                                <td data-label=RUN_COLUMNS[4] class="small inline">{r.worker.unwrap_or_default()}</td>
                                <td data-label=RUN_COLUMNS[5] class="small inline">{r.started_at.unwrap_or_default()}</td>
                                <td data-label=RUN_COLUMNS[6] class="small inline">{r.finished_at.unwrap_or_default()}</td>
                            </tr>
                        }
                    })
                    .collect_view())}
            </details>
        </section>
    }
}

/// Where a study's record pages are, by candidate (`{study path}/candidates/`).
fn record_base_of(path: &str) -> String {
    format!("{path}/candidates/")
}

fn baseline_generation(b: &Option<BaselineView>) -> Option<u32> {
    b.as_ref().map(|b| b.generation)
}

/// The earlier generations' columns.
const EARLIER_COLUMNS: &[&str] = &["Generation", "Started", "Jobs", "Records"];

/// The generations not shown in full, a row each: when and why each ran, how its jobs ended,
/// its records with their verdicts; each opens in full on the page (`?generation=G`).
fn earlier_generations(
    earlier: &[GenerationSummary],
    version: u32,
    baseline: Option<u32>,
    path: &str,
    record_base: &str,
) -> Option<impl IntoView + use<>> {
    if earlier.is_empty() {
        return None;
    }
    let rows = earlier
        .iter()
        .map(|g| {
            let href = format!(
                "{path}?version={version}&generation={0}#generation-{0}",
                g.number
            );
            let label = format!("Generation {}", g.number);
            let started = format!(
                "{} · {}",
                g.trigger,
                if g.created_at.is_empty() { "-" } else { &g.created_at }
            );
            let jobs = g
                .job_counts()
                .into_iter()
                .map(|(state, n)| {
                    let tone = match state {
                        "done" => "good",
                        "failed" => "bad",
                        "cancelled" => "warn",
                        "running" => "info",
                        _ => "none",
                    };
                    let class = format!("badge {tone}");
                    view! { <span class=class>{format!("{n} {state}")}</span> " " }
                })
                .collect_view();
            let records = g
                .verdicts
                .iter()
                .map(|(c, v)| {
                    let (word, tone) = verdict_word(Some(*v));
                    let class = format!("badge {tone}");
                    let href = format!(
                        "{record_base}{}?version={version}&generation={}",
                        crate::encode(c),
                        g.number
                    );
                    let name = c.clone();
                    view! { <li><a href=href>{name}</a> " " <span class=class>{word}</span></li> }
                })
                .collect_view();
            let is_baseline = baseline == Some(g.number);
            view! {
                <tr>
                    <td data-label=EARLIER_COLUMNS[0] class="inline">
                        <a href=href>{label}</a>
                        {is_baseline.then(|| view! { " " <span class="badge good">"baseline"</span> })}
                    </td>
                    <td data-label=EARLIER_COLUMNS[1] class="small">{started}</td>
                    <td data-label=EARLIER_COLUMNS[2] class="inline">{jobs}</td>
                    <td data-label=EARLIER_COLUMNS[3] class="inline">
                        {if g.verdicts.is_empty() {
                            view! { <span class="muted small">"none"</span> }.into_any()
                        } else {
                            view! { <ul class="plain inline-list">{records}</ul> }.into_any()
                        }}
                    </td>
                </tr>
            }
        })
        .collect_view();
    let title = format!("Earlier generations ({})", earlier.len());
    Some(view! {
        <section class="card" id="earlier">
            <h3>{title}</h3>
            <p class="muted small">"A line each, newest first; a generation opens in full with its jobs and runs."</p>
            {list_table(EARLIER_COLUMNS, rows)}
        </section>
    })
}

/// The compare view of the candidates that have a record, each from the generation of its
/// latest one (`a@g3`) when those differ; `None` with fewer than two: nothing to put side by
/// side, and a link would lead to a refusal.
fn compare_href(path: &str, v: &StudyView) -> Option<String> {
    let recorded: Vec<(&str, u32)> = v
        .candidates
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.record_generation?)))
        .collect();
    if recorded.len() < 2 {
        return None;
    }
    let same = recorded.iter().all(|(_, g)| *g == recorded[0].1);
    let picks: Vec<String> = recorded
        .iter()
        .map(|(name, g)| {
            let name = crate::encode(name);
            if same { name } else { format!("{name}@g{g}") }
        })
        .collect();
    Some(format!(
        "{path}/compare?version={}&candidates={}",
        v.version,
        picks.join(",")
    ))
}

/// `/studies/{name}`: the frozen criteria, the lock, Run, every candidate's verdict and the
/// live progress of every generation.
pub fn study_page(
    view_: StudyView,
    progress: RunProgress,
    slo: String,
    versions: Vec<StudyVersionView>,
    queue: QueueView,
    checks: Vec<(String, EndpointCheck)>,
) -> String {
    let title = format!("{} v{}", view_.name, view_.version);
    document(&title.clone(), move || {
        let v = view_;
        let name = v.name.clone();
        let f = v.study.clone();
        let (state, state_tone) = state_word(v.state, v.ended);
        let locked = v.lock_sha256.is_some();
        let lock_line = match (&v.lock_sha256, &v.locked_at) {
            (Some(sha), Some(at)) => format!("Locked at {at} under {sha}"),
            _ => "Draft: not locked yet. Runs start only on a locked study.".to_owned(),
        };
        let workload = f.workload.describe();
        let traffic = format!(
            "ordinary {} req/s, peak {} req/s, target {} req/s, attainment ≥ {:.0} %",
            f.traffic.ordinary_rps,
            f.traffic.peak_rps,
            f.traffic.target_rps.unwrap_or(f.traffic.peak_rps),
            f.traffic.attainment_target.unwrap_or(0.9) * 100.0
        );
        let memory = format!(
            "context {} tokens × {} concurrent on {} ({} GiB)",
            f.memory.context_tokens,
            f.memory.concurrency,
            f.memory.device,
            f.memory.device_memory_gib
        );
        let evalset = format!("{} · sha256 {}", f.evalset.path, f.evalset.sha256);
        let rules = f
            .disqualifiers
            .iter()
            .map(|r| {
                let threshold = r.values.as_ref().map_or_else(
                    || r.value.as_ref().map_or_else(String::new, |v| v.to_string()),
                    |v| format!("{v:?}"),
                );
                let line = format!(
                    "{}{} {} {threshold}",
                    r.name
                        .as_ref()
                        .map_or_else(String::new, |n| format!("{n}: ")),
                    r.metric,
                    serde_json::to_value(r.op)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                );
                view! { <li>{line}</li> }
            })
            .collect_view();
        // The name and candidates go into URLs encoded: a name may hold any character.
        let path = format!("/studies/{}", crate::encode(&name));
        let compare_href = compare_href(&path, &v);
        let lock_action = format!("{path}/lock");
        let run_action = format!("{path}/runs");
        let cancel_action = format!("{path}/cancel");
        let retry_action = format!("{path}/retry");
        // The newest generation finished with failed or cancelled jobs: they can be retried in
        // place.
        let ended_early: Vec<&str> = progress.generations.first().map_or_else(Vec::new, |g| {
            g.jobs
                .iter()
                .filter(|j| j.state == "failed")
                .map(|j| j.state_in_words())
                .collect()
        });
        let failed_now = ended_early.len();
        let retry_label = {
            let cancelled = ended_early.iter().filter(|s| **s == "cancelled").count();
            let which = match (cancelled, failed_now - cancelled) {
                (0, _) => "failed",
                (_, 0) => "cancelled",
                _ => "failed and cancelled",
            };
            format!("Retry {which} jobs ({failed_now})")
        };
        // Something left to cancel: a queued job, or a running one not yet told to stop.
        let cancellable =
            progress.generations.iter().flat_map(|g| &g.jobs).any(|j| {
                j.state == "queued" || (j.state == "running" && j.cancel_reason.is_none())
            }) || progress.earlier.iter().any(|g| g.cancellable > 0);
        let cancel_question = format!(
            "Cancel the run of {} v{}? Its queued jobs are cancelled now; running ones stop at their worker's next heartbeat, dropping the cases and load step under way. What was stored so far stays.",
            v.name, v.version
        );
        let delete_action = format!("{path}/delete");
        let delete_question = format!(
            "Delete the draft {} v{}? Its criteria go; nothing ran on a draft, and other versions stay.",
            v.name, v.version
        );
        let shown = v.version.to_string();
        // This version's own page: links and forms name it, so a newer version changes nothing here.
        let here = format!("{path}?version={shown}");
        let edit_href = format!("/studies/new?from={}&version={shown}", crate::encode(&name));
        // The version before this one, to see which criteria this one changed.
        let changes_href = versions
            .iter()
            .map(|s| s.version)
            .filter(|n| *n < v.version)
            .max()
            .map(|prev| (crate::study_diff_url(&name, prev, v.version), prev));
        let latest = versions.last().cloned();
        let newer = latest.filter(|l| l.version > v.version).map(|l| {
            let href = format!("{path}?version={}", l.version);
            let state = if l.lock_sha256.is_some() { "locked" } else { "a draft" };
            view! {
                <p class="notice" id="newer-version">
                    {format!("A newer version replaces these criteria: v{} ({state}). ", l.version)}
                    <a href=href>{format!("Open v{}", l.version)}</a>
                    ". This version's runs and records stay as they were, judged by the criteria below."
                </p>
            }
        });
        let version_tabs = (versions.len() > 1).then(|| {
            let tabs = versions
                .iter()
                .map(|s| {
                    let label = format!(
                        "v{} · {}",
                        s.version,
                        s.locked_at.as_deref().map_or_else(
                            || "draft".to_owned(),
                            |at| format!("locked {}", at.get(..10).unwrap_or(at))
                        )
                    );
                    if s.version == v.version {
                        view! { <span class="tab active" aria-current="page">{label}</span> }
                            .into_any()
                    } else {
                        let href = format!("{path}?version={}", s.version);
                        view! { <a class="tab" href=href>{label}</a> }.into_any()
                    }
                })
                .collect_view();
            view! { <nav class="tabs" aria-label="Versions of this study">{tabs}</nav> }
        });
        let schedule_href = format!("/schedules?study={}#add", crate::encode(&name));
        let done = v.state == StudyState::Done;
        let has_endpoints = v.candidates.iter().any(|c| {
            c.stored["source"]
                .as_str()
                .is_some_and(|s| s.starts_with("http://") || s.starts_with("https://"))
        });
        let check_href = format!("{path}?version={}&check=1#candidates", v.version);
        let candidate_rows = v
            .candidates
            .iter()
            .map(|c| {
                let (word, tone) = verdict_word(c.verdict);
                let class = format!("badge {tone}");
                let href = format!(
                    "{path}/candidates/{}?version={}",
                    crate::encode(&c.name),
                    v.version
                );
                let source = c.stored["source"].as_str().unwrap_or("").to_owned();
                let identity = &c.stored["gguf"]["identity"];
                let what = if identity.is_null() {
                    source.clone()
                } else {
                    format!(
                        "{} · {} · license {}",
                        identity["architecture"].as_str().unwrap_or("?"),
                        identity["quantization"].as_str().unwrap_or("?"),
                        identity["license"].as_str().unwrap_or("?")
                    )
                };
                let cname = c.name.clone();
                // Its record page, once it has a record (before, the link would lead nowhere).
                let name_cell = match c.verdict {
                    Some(_) => view! { <a href=href>{cname}</a> }.into_any(),
                    None => view! { <span>{cname}</span> }.into_any(),
                };
                view! {
                    <tr>
                        <td data-label=CANDIDATE_COLUMNS[0]>{name_cell}</td>
                        <td data-label=CANDIDATE_COLUMNS[1] class="small">{what}</td>
                        <td data-label=CANDIDATE_COLUMNS[2]><span class=class>{word}</span></td>
                    </tr>
                }
            })
            .collect_view();
        let generations = progress.generations.clone();
        // This version's jobs that wait in the queue (for a worker, a dependency or a backoff).
        let queued_here = (generations
            .iter()
            .flat_map(|g| &g.jobs)
            .filter(|j| j.state == "queued")
            .count()
            + progress
                .earlier
                .iter()
                .filter_map(|g| g.jobs.get("queued"))
                .sum::<usize>()) as u64;
        let earlier = earlier_generations(
            &progress.earlier,
            progress.version,
            baseline_generation(&progress.baseline),
            &path,
            &record_base_of(&path),
        );
        let baseline = progress.baseline.clone();
        let accept_action = format!("{path}/baseline");
        let record_base = record_base_of(&path);
        let after = progress.last_event_id.to_string();
        view! {
            <h1>{format!("{} v{}", v.name, v.version)} " " <span class=format!("badge {state_tone}") id="study-state">{state}</span></h1>
            {version_tabs}
            <p class="question">{f.question.clone()}</p>
            {newer}
            <section class="card">
                <h2>{if locked { "Frozen criteria" } else { "Criteria" }}</h2>
                <p class="mono small">{lock_line}</p>
                <dl class="grid">
                    <dt>"Eval set"</dt><dd class="mono small">{evalset}</dd>
                    <dt>"Workload"</dt><dd>{workload}</dd>
                    <dt>"SLO"</dt><dd>{slo}</dd>
                    <dt>"Traffic"</dt><dd>{traffic}</dd>
                    <dt>"Memory budget"</dt><dd>{memory}</dd>
                    <dt>"Cost"</dt><dd>{f.cost.currency.clone().unwrap_or_else(|| "USD".to_owned())}</dd>
                </dl>
                <h3>"Disqualifiers"</h3>
                <ul>{rules}</ul>
                <div class="actions">
                    {(!locked).then(|| view! {
                        <form method="post" action=lock_action.clone()>
                            <input type="hidden" name="version" value=shown.clone()/>
                            <button type="submit">"Lock"</button>
                        </form>
                    })}
                    {(locked && v.state == StudyState::Locked).then(|| view! {
                        <form method="post" action=run_action.clone()>
                            <input type="hidden" name="version" value=shown.clone()/>
                            <button type="submit" id="run">"Run"</button>
                        </form>
                    })}
                    {(v.state == StudyState::Running).then(|| view! {
                        <span class="muted">"Running: see the progress below."</span>
                    })}
                    {cancellable.then(|| view! {
                        <form method="post" action=cancel_action.clone() data-confirm=cancel_question.clone()>
                            <input type="hidden" name="version" value=shown.clone()/>
                            <button type="submit" class="secondary danger" id="cancel">"Cancel run"</button>
                        </form>
                    })}
                    {(locked && done && failed_now > 0).then(|| view! {
                        <form method="post" action=retry_action.clone()>
                            <input type="hidden" name="version" value=shown.clone()/>
                            <button type="submit" class="secondary" id="retry">{retry_label.clone()}</button>
                        </form>
                    })}
                    {(locked && done).then(|| view! {
                        <form method="post" action=run_action.clone()>
                            <input type="hidden" name="version" value=shown.clone()/>
                            <input type="hidden" name="again" value="true"/>
                            <button type="submit" class="secondary">"Run again (new generation)"</button>
                        </form>
                    })}
                    {locked.then(|| view! {
                        <a class="button secondary" href=schedule_href.clone()>"Run it on a schedule…"</a>
                    })}
                    <a class="button secondary" href=edit_href id="edit">"Edit criteria…"</a>
                    {changes_href.map(|(href, prev)| view! {
                        <a class="button secondary" href=href id="changes">{format!("Changes from v{prev}")}</a>
                    })}
                    {(!locked).then(|| view! {
                        <form method="post" action=delete_action.clone() data-confirm=delete_question.clone()>
                            <input type="hidden" name="version" value=shown.clone()/>
                            <button type="submit" class="secondary danger" id="delete">"Delete draft"</button>
                        </form>
                    })}
                </div>
            </section>
            <section class="card" id="candidates">
                <h2>"Candidates"</h2>
                {list_table(CANDIDATE_COLUMNS, candidate_rows)}
                {(!checks.is_empty()).then(|| view! {
                    <ul class="plain" id="endpoint-checks">
                        {checks.iter().map(|(name, check)| view! {
                            <li>{crate::catalog::endpoint_notice(name, check, true)}</li>
                        }).collect_view()}
                    </ul>
                })}
                {has_endpoints.then(|| view! {
                    <p class="actions"><a class="button secondary" href=check_href.clone() id="check">"Check the endpoints now"</a></p>
                })}
                {match compare_href {
                    Some(href) => view! { <p><a href=href id="compare">"Compare side by side"</a></p> }.into_any(),
                    None if v.candidates.len() > 1 => view! {
                        <p class="muted small" id="compare">"Side by side once two candidates have a record."</p>
                    }.into_any(),
                    None => ().into_any(),
                }}
            </section>
            <section id="progress" data-study=name.clone() data-version=shown.clone() data-after=after>
                <h2>"Runs"</h2>
                <p class="muted small" id="live">
                    "Live progress needs JavaScript; without it, "
                    <a href=here.clone()>"refresh"</a> "."
                </p>
                {crate::workers::stranded_notice(queue.no_worker_note(queued_here, None), true)}
                {if generations.is_empty() {
                    view! { <p class="muted">"Not run yet."</p> }.into_any()
                } else {
                    generations
                        .into_iter()
                        .map(|g| generation(g, progress.version, baseline.as_ref(), &accept_action, &record_base))
                        .collect_view()
                        .into_any()
                }}
                {earlier}
            </section>
        }
    })
}
