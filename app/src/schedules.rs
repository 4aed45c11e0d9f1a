//! `/schedules` and `/schedules/{name}`: studies run again at the instants of a cron
//! expression — when each is next due, what its ticks did (started, skipped by a catch-up,
//! failed with the reason), and pause / resume.

use leptos::prelude::*;
use shortlist_runner::service::schedule::{ScheduleView, TickView};

use crate::encode;
use crate::layout::document;

fn version_text(v: Option<u32>) -> String {
    v.map_or_else(|| "latest locked".to_owned(), |v| format!("v{v}"))
}

/// `/schedules`.
pub fn schedules_page(list: Vec<ScheduleView>) -> String {
    document("Schedules", move || {
        let empty = list.is_empty();
        let rows = list
            .into_iter()
            .map(|s| {
                let href = format!("/schedules/{}", encode(&s.name));
                let study_href = format!("/studies/{}", encode(&s.study));
                let (word, tone) = if s.enabled { ("active", "good") } else { ("paused", "none") };
                let class = format!("badge {tone}");
                let when = format!("{} ({})", s.cron, s.tz);
                view! {
                    <tr>
                        <td><a href=href>{s.name.clone()}</a></td>
                        <td><a href=study_href>{s.study.clone()}</a>" "<span class="muted small">{version_text(s.version)}</span></td>
                        <td class="mono small">{when}</td>
                        <td>{s.what.clone()}</td>
                        <td><span class=class>{word}</span></td>
                        <td class="mono small">{s.next_due.clone().unwrap_or_else(|| "–".to_owned())}</td>
                        <td class="mono small">{s.last_due.clone().unwrap_or_else(|| "–".to_owned())}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Schedules"</h1>
            <section class="card">
                {empty.then(|| view! {
                    <p class="muted">"No schedule yet. Add one with "<code>"shortlist schedule add NAME --study S --cron \"30 2 * * *\" --tz Europe/Berlin"</code>"."</p>
                })}
                <div class="scroll">
                    <table>
                        <thead><tr><th>"Schedule"</th><th>"Study"</th><th>"When"</th><th>"Runs"</th><th>"State"</th><th>"Next due"</th><th>"Last due"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            </section>
        }
    })
}

/// `/schedules/{name}`.
pub fn schedule_page(s: ScheduleView, history: Vec<TickView>) -> String {
    let title = format!("Schedule {}", s.name);
    document(&title.clone(), move || {
        let base = format!("/schedules/{}", encode(&s.name));
        let (action, label) = if s.enabled {
            (format!("{base}/pause"), "Pause")
        } else {
            (format!("{base}/resume"), "Resume")
        };
        let study_href = format!("/studies/{}", encode(&s.study));
        let candidates = if s.candidates.is_empty() {
            "all of the study's".to_owned()
        } else {
            s.candidates.join(", ")
        };
        let rows = history
            .into_iter()
            .map(|t| {
                let tone = match t.state.as_str() {
                    "started" => "good",
                    "failed" => "bad",
                    _ => "none",
                };
                let class = format!("badge {tone}");
                let run = match (t.version, t.generation) {
                    (Some(v), Some(g)) => {
                        let href = format!("/studies/{}", encode(&t.study));
                        view! { <a href=href>{format!("v{v} · generation {g}")}</a> }.into_any()
                    }
                    _ => view! { <span class="muted">"–"</span> }.into_any(),
                };
                view! {
                    <tr>
                        <td class="mono small">{t.due.clone()}</td>
                        <td><span class=class>{t.state.clone()}</span></td>
                        <td>{run}</td>
                        <td class="small">{t.detail.clone().unwrap_or_default()}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <p class="crumbs"><a href="/schedules">"Schedules"</a> " / " {s.name.clone()}</p>
            <h1>{title.clone()}</h1>
            <section class="card">
                <dl class="grid">
                    <dt>"Study"</dt><dd><a href=study_href>{s.study.clone()}</a>" "{version_text(s.version)}</dd>
                    <dt>"When"</dt><dd class="mono">{format!("{} in {}", s.cron, s.tz)}</dd>
                    <dt>"Runs"</dt><dd>{format!("{} · candidates: {candidates}", s.what)}</dd>
                    <dt>"Due after"</dt><dd class="mono small">{s.from.clone()}</dd>
                    <dt>"Next due"</dt><dd class="mono small">{s.next_due.clone().unwrap_or_else(|| if s.enabled { "never again".to_owned() } else { "paused".to_owned() })}</dd>
                </dl>
                <form method="post" action=action class="actions"><button type="submit" class="secondary">{label}</button></form>
            </section>
            <section class="card">
                <h2>"History"</h2>
                <p class="small muted">"Each due instant is handled once: started, skipped (caught up by a later run after a downtime), or failed with the reason."</p>
                <div class="scroll">
                    <table>
                        <thead><tr><th>"Due"</th><th>"State"</th><th>"Run"</th><th>"Detail"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            </section>
        }
    })
}
