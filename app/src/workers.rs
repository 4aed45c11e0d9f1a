//! `/workers`: the job queue and the workers that take its jobs — which are alive, what each
//! holds, on which machine, and whether queued jobs wait for a worker that is not there.

use leptos::prelude::*;
use shortlist_runner::service::views::{WorkerState, WorkersView};
use shortlist_runner::time::duration_in_words;

use crate::layout::{card_table, code_spans, document};
use crate::study_url;

/// The workers list's columns.
const WORKER_COLUMNS: &[&str] = &["Worker", "State", "Job", "Machine", "Last seen", "Started"];

/// A worker's state as a word and its tone.
fn state_word(state: WorkerState) -> (&'static str, &'static str) {
    match state {
        WorkerState::Working => ("working", "info"),
        WorkerState::Idle => ("idle", "good"),
        WorkerState::Stopped => ("stopped", "none"),
        WorkerState::Gone => ("gone", "bad"),
    }
}

/// The notice that queued jobs have no worker to take them (`note`: what
/// [`shortlist_runner::service::views::QueueView::no_worker_note`] says), with a link to the workers page where `link`.
pub fn stranded_notice(note: Option<String>, link: bool) -> Option<impl IntoView + use<>> {
    note.map(|note| {
        view! {
            <p class="notice warn" id="stranded" role="status">
                {code_spans(&note)}
                {link.then(|| view! { " " <a href="/workers">"See the workers"</a> })}
            </p>
        }
    })
}

/// `/workers`.
pub fn workers_page(view_: WorkersView) -> String {
    document("Workers", move || {
        let v = view_;
        let q = v.queue.clone();
        let rows = v
            .workers
            .iter()
            .map(|w| {
                let (word, tone) = state_word(w.state);
                let class = format!("badge {tone}");
                let job = w.job.as_ref().map_or_else(
                    || view! { <span class="muted">"–"</span> }.into_any(),
                    |j| {
                        let href = study_url(&j.study, Some(j.version));
                        let text = format!(
                            "{} v{} · g{}: {} {}",
                            j.study, j.version, j.generation, j.candidate, j.kind
                        );
                        view! { <a href=href>{text}</a> }.into_any()
                    },
                );
                let seen = format!("{} ago", duration_in_words(w.seen_ago_s as f64));
                let seen_title = format!(
                    "{} (says it is alive every {})",
                    w.seen_at,
                    duration_in_words(w.beat_ms as f64 / 1000.0)
                );
                let machine = match &w.code_version {
                    Some(code) => format!("{} · host {} · version {code}", w.machine, w.host),
                    None => format!("{} · host {}", w.machine, w.host),
                };
                view! {
                    <tr>
                        <td data-label=WORKER_COLUMNS[0] class="mono small nowrap">{w.name.clone()}</td>
                        <td data-label=WORKER_COLUMNS[1] class="inline"><span class=class>{word}</span></td>
                        <td data-label=WORKER_COLUMNS[2]>{job}</td>
                        <td data-label=WORKER_COLUMNS[3] class="small">{machine}</td>
                        <td data-label=WORKER_COLUMNS[4] class="small inline" title=seen_title>{seen}</td>
                        <td data-label=WORKER_COLUMNS[5] class="small mono inline nowrap">{w.started_at.clone()}</td>
                    </tr>
                }
            })
            .collect_view();
        let none = v.workers.is_empty();
        let waited = q.oldest_queued_at.clone().map(|at| {
            format!(
                " — the oldest waiting {}, since {at}",
                duration_in_words(q.oldest_waiting_s.unwrap_or(0) as f64)
            )
        });
        view! {
            <h1>"Workers"</h1>
            <p class="question">
                "Workers take the queued jobs of every study — in the workbench's own process ("
                <code>"shortlist serve --workers N"</code>") or on other hosts ("
                <code>"shortlist worker"</code>
                " with DATABASE_URL naming this database; PostgreSQL for several hosts)."
            </p>
            {stranded_notice(q.stranded_note(), false)}
            <section class="card">
                <h2>"Queue"</h2>
                <dl class="grid" id="queue">
                    <dt>"Queued"</dt><dd>{q.queued.to_string()}{waited}</dd>
                    <dt>"Running"</dt><dd>{q.running.to_string()}</dd>
                    <dt>"Done"</dt><dd>{q.done.to_string()}</dd>
                    <dt>"Failed"</dt><dd>{q.failed.to_string()}</dd>
                    <dt>"Cancelled"</dt><dd>{q.cancelled.to_string()}</dd>
                    <dt>"Workers alive"</dt><dd>{q.live_workers.to_string()}</dd>
                </dl>
            </section>
            <section class="card">
                <h2>{format!("Seen in the last {} hours", WorkersView::WINDOW_HOURS)}</h2>
                {if none {
                    view! {
                        <p class="muted" id="no-workers">"No worker has been seen in that time."</p>
                    }
                        .into_any()
                } else {
                    view! {
                        <div id="workers">{card_table("", WORKER_COLUMNS, rows)}</div>
                        <p class="muted small">
                            "Alive: seen within three of its beats. Gone: it stopped answering without saying it stopped (killed, crashed, or cut off from the database); a job it held goes back to the queue once its heartbeat is stale."
                        </p>
                    }
                        .into_any()
                }}
            </section>
        }
    })
}
