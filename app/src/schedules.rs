//! `/schedules` and `/schedules/{name}`: studies run again at the instants of a cron
//! expression — when each is next due, what its ticks did (started, skipped by a catch-up,
//! failed with the reason), and pause / resume.

use leptos::prelude::*;
use shortlist_report::overlay::{HistorySeries, history_svg};
use shortlist_runner::service::schedule::{HistoryPoint, ScheduleView, TickView};

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

/// The pass-rate history chart: one x position per run (its due date), one series per
/// candidate.
fn history_chart(timeline: &[HistoryPoint]) -> Result<String, String> {
    let mut runs: Vec<(String, u32, u32)> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for p in timeline {
        let key = (
            p.due.get(..10).unwrap_or(&p.due).to_owned(),
            p.version,
            p.generation,
        );
        if !runs.contains(&key) {
            runs.push(key);
        }
        if !names.contains(&p.candidate) {
            names.push(p.candidate.clone());
        }
    }
    let columns: Vec<HistorySeries<'_>> = names
        .iter()
        .map(|n| {
            let pts = timeline
                .iter()
                .filter(|p| &p.candidate == n)
                .filter_map(|p| {
                    let i = runs
                        .iter()
                        .position(|(_, v, g)| *v == p.version && *g == p.generation)?;
                    Some((i, p.pass_rate, p.lo, p.hi))
                })
                .collect();
            (n.as_str(), pts)
        })
        .collect();
    let labels: Vec<String> = runs.into_iter().map(|(d, _, _)| d).collect();
    history_svg(&labels, &columns).map_err(|e| e.to_string())
}

/// `/schedules/{name}`.
pub fn schedule_page(
    s: ScheduleView,
    history: Vec<TickView>,
    timeline: Vec<HistoryPoint>,
) -> String {
    let title = format!("Schedule {}", s.name);
    document(&title.clone(), move || {
        let chart = match history_chart(&timeline) {
            Ok(svg) => view! { <figure class="chart" aria-label="Pass rate by scheduled run" inner_html=svg></figure> }.into_any(),
            Err(why) => view! { <p class="error-box">{why}</p> }.into_any(),
        };
        let timeline_rows = timeline
            .iter()
            .rev()
            .map(|p| {
                let (word, tone) = crate::verdict_word(Some(p.verdict));
                let class = format!("badge {tone}");
                let rate = format!(
                    "{}/{} · {:.1} % [{:.1}–{:.1} %]",
                    p.passed,
                    p.n,
                    p.pass_rate * 100.0,
                    p.lo * 100.0,
                    p.hi * 100.0
                );
                let ttft = p
                    .ttft_p99_s
                    .map_or_else(|| "–".to_owned(), |t| format!("{t:.2} s"));
                let attainment = p
                    .attainment
                    .map_or_else(|| "–".to_owned(), |a| format!("{:.1} %", a * 100.0));
                view! {
                    <tr>
                        <td class="mono small">{p.due.clone()}</td>
                        <td>{p.candidate.clone()}</td>
                        <td>{format!("v{} · g{}", p.version, p.generation)}</td>
                        <td>{rate}</td>
                        <td>{ttft}</td>
                        <td>{attainment}</td>
                        <td>{p.goodput_rps.map_or_else(|| "–".to_owned(), |g| format!("{g:.3} req/s"))}</td>
                        <td><span class=class>{word}</span></td>
                    </tr>
                }
            })
            .collect_view();
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
                <h2>"Runs"</h2>
                {chart}
                <div class="scroll">
                    <table>
                        <thead><tr><th>"Due"</th><th>"Candidate"</th><th>"Run"</th><th>"Pass rate (95 % Wilson)"</th><th>"TTFT p99"</th><th>"Attainment"</th><th>"Goodput"</th><th>"Verdict"</th></tr></thead>
                        <tbody>{timeline_rows}</tbody>
                    </table>
                </div>
            </section>
            <section class="card">
                <h2>"Due instants"</h2>
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
