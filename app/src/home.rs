//! `/`: the studies list — each study once, its latest version with each candidate's verdict
//! and, while that version has not run, the records that stand meanwhile —, what is running
//! now, the recent runs, and — on a workbench without a study — the three steps to the first
//! one.

use leptos::prelude::*;
use shortlist_runner::service::views::{
    EvalSetSummary, JobView, QueueView, RecentRun, StudyListing,
};

use crate::layout::{card_table, document, list_table};
use crate::pages::{progress_text, state_word};
use crate::verdict_word;

/// What the studies list shows.
#[derive(Debug, Clone)]
pub struct HomeData {
    /// Each study once: its latest version, with the version whose records stand meanwhile.
    pub studies: Vec<StudyListing>,
    /// Jobs running now: study, version and the job.
    pub running: Vec<(String, u32, JobView)>,
    /// Stored eval sets.
    pub evalsets: Vec<EvalSetSummary>,
    /// How many candidates are registered.
    pub candidates: usize,
    /// The newest runs, newest first.
    pub recent: Vec<RecentRun>,
    /// The job queue and how many workers are alive to take it.
    pub queue: QueueView,
}

/// The studies list's columns.
const STUDY_COLUMNS: &[&str] = &["Study", "Question", "State", "Candidates"];

/// The home page's recent runs' columns.
const RECENT_COLUMNS: &[&str] = &["Study", "Candidate", "Run", "State", "Finished"];

/// `/`: studies with their state and each candidate's verdict, and what is running now.
pub fn home_page(data: HomeData) -> String {
    document("Studies", move || {
        let running = data.running.clone();
        let queue = data.queue.clone();
        let studies = data.studies.clone();
        let evalsets = data.evalsets.clone();
        let recent = data.recent.clone();
        let recent_rows = recent
            .into_iter()
            .map(|r| {
                let href = crate::study_url(&r.study, Some(r.version));
                let (tone, word) = match r.state.as_str() {
                    "done" => ("good", "done"),
                    "failed" if r.cancelled => ("warn", "cancelled"),
                    "failed" => ("bad", "failed"),
                    "running" => ("warn", "running"),
                    other => ("none", if other == "pending" { "pending" } else { "queued" }),
                };
                let class = format!("badge {tone}");
                let what = format!("{} v{} · g{}", r.study, r.version, r.generation);
                let when = r.finished_at.clone().unwrap_or_default();
                view! {
                    <tr>
                        <td data-label=RECENT_COLUMNS[0]><a href=href>{what}</a></td>
                        <td data-label=RECENT_COLUMNS[1] class="inline">{r.candidate.clone()}</td>
                        <td data-label=RECENT_COLUMNS[2] class="inline">{r.kind.clone()}</td>
                        <td data-label=RECENT_COLUMNS[3] class="inline"><span class=class>{word}</span>{r.error.clone().map(|e| view! { <div class="muted small">{e}</div> })}</td>
                        <td data-label=RECENT_COLUMNS[4] class="small mono inline">{when}</td>
                    </tr>
                }
            })
            .collect_view();
        let study_rows = studies
            .into_iter()
            .map(|listing| {
                let s = listing.latest;
                let href = crate::study_url(&s.name, Some(s.version));
                let name = format!("{} v{}", s.name, s.version);
                let (word, tone) = state_word(s.state, s.ended);
                let versions = (listing.versions > 1).then(|| {
                    view! { <div class="muted small">{format!("{} versions", listing.versions)}</div> }
                });
                // While the latest has not run to the end, the records of the newest version
                // that has stand: a line under the latest's badges, linked to it.
                let standing = listing.standing.map(|earlier| {
                    let href = crate::study_url(&earlier.name, Some(earlier.version));
                    let (state, _) = state_word(earlier.state, earlier.ended);
                    let verdicts = earlier
                        .verdicts
                        .iter()
                        .map(|(c, v)| format!("{c} {}", verdict_word(*v).0))
                        .collect::<Vec<_>>()
                        .join(", ");
                    view! {
                        <div class="muted small standing">
                            <a href=href>{format!("v{} ({state})", earlier.version)}</a>
                            {format!(": {verdicts}")}
                        </div>
                    }
                });
                let verdicts = s
                    .verdicts
                    .iter()
                    .map(|(c, v)| {
                        let (word, tone) = verdict_word(*v);
                        let class = format!("badge {tone}");
                        let label = format!("{c}: {word}");
                        view! { <span class=class>{label}</span> }
                    })
                    .collect_view();
                let state_class = format!("badge {tone}");
                view! {
                    <tr>
                        <td data-label=STUDY_COLUMNS[0]><a href=href>{name}</a>{versions}</td>
                        <td data-label=STUDY_COLUMNS[1]>{s.question}</td>
                        <td data-label=STUDY_COLUMNS[2]><span class=state_class>{word}</span></td>
                        <td data-label=STUDY_COLUMNS[3]><div class="badges">{verdicts}</div>{standing}</td>
                    </tr>
                }
            })
            .collect_view();
        let no_runs = data.recent.is_empty();
        let evalset_items = evalsets
            .into_iter()
            .map(|e| {
                let href = format!("/evalsets/{}", crate::encode(&e.name));
                let line = e.versions.last().map_or_else(String::new, |v| {
                    format!(" · v{} · {} cases · sha256 {}", v.version, v.cases, &v.sha256[..12.min(v.sha256.len())])
                });
                view! { <li><a href=href>{e.name.clone()}</a><span class="muted small">{line}</span></li> }
            })
            .collect_view();
        let no_sets = data.evalsets.is_empty();
        let no_studies = data.studies.is_empty();
        view! {
            <h1>"Studies"</h1>
            <section class="card">
                <h2>"Running now"</h2>
                {crate::workers::stranded_notice(queue.stranded_note(), true)}
                {if running.is_empty() {
                    view! { <p class="muted">"Nothing is running."</p> }.into_any()
                } else {
                    view! {
                        <ul class="plain">
                            {running
                                .into_iter()
                                .map(|(study, version, job)| {
                                    let href = crate::study_url(&study, Some(version));
                                    let line = format!(
                                        "{study} v{version}: {} {} {}",
                                        job.candidate,
                                        job.kind.as_str(),
                                        progress_text(job.progress.as_ref()),
                                    );
                                    view! { <li><a href=href>{line}</a></li> }
                                })
                                .collect_view()}
                        </ul>
                    }
                        .into_any()
                }}
                <p class="muted small" id="queue-line">
                    {queue.summary()} " · " <a href="/workers">"Workers"</a>
                </p>
            </section>
            {if no_studies {
                first_steps(data.evalsets.len(), data.candidates).into_any()
            } else {
                view! {
                    <section class="card">
                        {list_table(STUDY_COLUMNS, study_rows)}
                        <p><a class="button" href="/studies/new">"New study"</a></p>
                    </section>
                }
                .into_any()
            }}
            <section class="card">
                <h2>"Eval sets"</h2>
                {if no_sets {
                    view! { <p class="muted">"None stored yet."</p> }.into_any()
                } else {
                    view! { <ul class="plain">{evalset_items}</ul> }.into_any()
                }}
                <p class="small"><a href="/evalsets/import">"Import an eval set"</a></p>
            </section>
            <section class="card">
                <h2>"Recent runs"</h2>
                {if no_runs {
                    view! { <p class="muted">"No run yet."</p> }.into_any()
                } else {
                    card_table("runs", RECENT_COLUMNS, recent_rows).into_any()
                }}
            </section>
        }
    })
}

/// A workbench without a study: the three steps to the first one, each marked done once it is.
fn first_steps(evalsets: usize, candidates: usize) -> impl IntoView {
    let step = |done: bool, count: String| {
        if done {
            ("step done", count)
        } else {
            ("step", String::new())
        }
    };
    let (sets_class, sets_note) = step(evalsets > 0, format!(" — {evalsets} stored"));
    let (candidates_class, candidates_note) =
        step(candidates > 0, format!(" — {candidates} registered"));
    view! {
        <section class="card" id="first-steps">
            <h2>"Your first study"</h2>
            <ol class="steps">
                <li class=sets_class>
                    <a href="/evalsets/import">"Import the product's eval set"</a>
                    " (ours, or promptfoo, OpenAI evals, inspect or BFCL)" {sets_note}
                </li>
                <li class=candidates_class>
                    <a href="/candidates">"Register the candidates"</a>
                    ": a GGUF file, a model folder or an OpenAI-compatible endpoint" {candidates_note}
                </li>
                <li class="step">
                    <a href="/studies/new">"Write down the study"</a>
                    ": the question, the workload, the SLO and what disqualifies a candidate — before anything runs"
                </li>
            </ol>
            <p class="small muted">
                "Or the demo study, from the command line: " <code>"shortlist models fetch"</code> ", then "
                <code>"shortlist study create studies/support-assistant.study.toml"</code> "."
            </p>
        </section>
    }
}
