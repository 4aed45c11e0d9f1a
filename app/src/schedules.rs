//! `/schedules` and `/schedules/{name}`: studies run again at the instants of a cron
//! expression — when each is next due, what its ticks did (started, skipped by a catch-up,
//! failed with the reason), and pause / resume.

use leptos::prelude::*;
use shortlist_report::overlay::{HistorySeries, HistorySpec, NightMark, history_svg};
use shortlist_runner::service::night::WebhookView;
use shortlist_runner::service::schedule::{HistoryPoint, ScheduleView, TickView};

use crate::layout::{card_table, document, list_table};
use crate::{encode, generation_url, study_url};

fn version_text(v: Option<u32>) -> String {
    v.map_or_else(|| "latest locked".to_owned(), |v| format!("v{v}"))
}

/// How many of a schedule's newest nights its page's tables show in full unless asked
/// (`?nights=N`); the charts show every night.
pub const NIGHTS_IN_FULL: usize = 30;

/// The nights table's columns.
const NIGHT_COLUMNS: &[&str; 9] = &[
    "Due (UTC)",
    "Candidate, run",
    "Pass rate (95 % Wilson)",
    "TTFT p99",
    "Attainment",
    "Goodput",
    "Record",
    "Night check",
    "Changed",
];

/// The schedules list's columns.
const SCHEDULE_COLUMNS: &[&str] = &[
    "Schedule",
    "Study",
    "When",
    "Runs",
    "State",
    "Next due (UTC)",
    "Last due (UTC)",
];

/// What the "Add a schedule" form holds: empty for a new form, what was sent when it comes back
/// with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleForm {
    pub name: String,
    pub study: String,
    pub cron: String,
    pub tz: String,
    /// `all`, `quality` or `load`.
    pub what: String,
    /// Comma-separated; empty: all of the study's.
    pub candidates: String,
}

impl Default for ScheduleForm {
    fn default() -> Self {
        ScheduleForm {
            name: String::new(),
            study: String::new(),
            cron: "30 2 * * *".to_owned(),
            tz: "UTC".to_owned(),
            what: "all".to_owned(),
            candidates: String::new(),
        }
    }
}

/// The form that adds a schedule: `studies` are the names of the studies with a locked version
/// (only those can be scheduled).
fn add_form(studies: Vec<String>, form: ScheduleForm, error: Option<String>) -> impl IntoView {
    let no_study = studies.is_empty();
    // A fresh form's zone is the browser's (the script fills it in); one sent back keeps its own.
    let local_zone = error.is_none().then_some("true");
    let options = studies
        .into_iter()
        .map(|name| {
            let selected = name == form.study;
            view! { <option value=name.clone() selected=selected>{name.clone()}</option> }
        })
        .collect_view();
    let what = [
        ("all", "quality and load"),
        ("quality", "quality only"),
        ("load", "load only"),
    ]
    .into_iter()
    .map(|(value, label)| {
        let selected = form.what == value;
        view! { <option value=value selected=selected>{label}</option> }
    })
    .collect_view();
    view! {
        <section class="card" id="add">
            <h2>"Add a schedule"</h2>
            {error.map(|e| view! { <p class="error-box" role="alert">{crate::layout::code_spans(&e)}</p> })}
            {no_study.then(|| view! {
                <p class="muted">"No study is locked yet: a schedule runs a locked study again, so lock one first (its page has the button)."</p>
            })}
            {(!no_study).then(|| view! {
                <form method="post" action="/schedules" class="stack narrow">
                    <label for="sname">"Name"</label>
                    <input id="sname" name="name" value=form.name.clone() autocomplete="off" placeholder="nightly"/>
                    <label for="sstudy">"Study (its latest locked version at each run)"</label>
                    <select id="sstudy" name="study">{options}</select>
                    <label for="scron">"When: minute hour day-of-month month day-of-week, or @daily, @hourly, @weekly, @monthly"</label>
                    <input id="scron" name="cron" value=form.cron.clone() class="mono" autocomplete="off"/>
                    <p class="small muted">"30 2 * * * is 02:30 every night; 0 3 * * 1-5 is 03:00 on weekdays."</p>
                    <label for="stz">"Time zone (IANA, e.g. Europe/Berlin)"</label>
                    <input id="stz" name="tz" value=form.tz.clone() autocomplete="off" data-local-zone=local_zone/>
                    <label for="swhat">"Runs"</label>
                    <select id="swhat" name="what">{what}</select>
                    <label for="scands">"Candidates (comma-separated; empty: all of the study's)"</label>
                    <input id="scands" name="candidates" value=form.candidates.clone() autocomplete="off"/>
                    <button type="submit">"Add schedule"</button>
                </form>
            })}
        </section>
    }
}

/// `/schedules`: the schedules, and the form that adds one.
pub fn schedules_page(
    list: Vec<ScheduleView>,
    studies: Vec<String>,
    form: ScheduleForm,
    error: Option<String>,
) -> String {
    document("Schedules", move || {
        let empty = list.is_empty();
        let rows = list
            .into_iter()
            .map(|s| {
                let href = format!("/schedules/{}", encode(&s.name));
                let study_href = study_url(&s.study, s.version);
                let (word, tone) = if s.enabled { ("active", "good") } else { ("paused", "none") };
                let class = format!("badge {tone}");
                let when = format!("{} ({})", s.cron, s.tz);
                view! {
                    <tr>
                        <td data-label=SCHEDULE_COLUMNS[0]><a href=href>{s.name.clone()}</a></td>
                        <td data-label=SCHEDULE_COLUMNS[1]><a href=study_href>{s.study.clone()}</a>" "<span class="muted small">{version_text(s.version)}</span></td>
                        <td data-label=SCHEDULE_COLUMNS[2] class="mono small">{when}</td>
                        <td data-label=SCHEDULE_COLUMNS[3]>{s.what.clone()}</td>
                        <td data-label=SCHEDULE_COLUMNS[4]><span class=class>{word}</span></td>
                        <td data-label=SCHEDULE_COLUMNS[5] class="mono small nowrap">{s.next_due.as_deref().map_or_else(|| "–".to_owned(), short_due)}</td>
                        <td data-label=SCHEDULE_COLUMNS[6] class="mono small nowrap">{s.last_due.as_deref().map_or_else(|| "–".to_owned(), short_due)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Schedules"</h1>
            <section class="card">
                {empty.then(|| view! {
                    <p class="muted">"No schedule yet. Add one below, or with "<code>"shortlist schedule add NAME --study S --cron \"30 2 * * *\" --tz Europe/Berlin"</code>"."</p>
                })}
                {(!empty).then(|| list_table(SCHEDULE_COLUMNS, rows))}
            </section>
            {add_form(studies, form, error)}
        }
    })
}

/// The nights of a timeline (x labels, oldest first) and each point's night index.
fn nights(timeline: &[HistoryPoint]) -> Vec<(String, u32, u32)> {
    let mut runs: Vec<(String, u32, u32)> = Vec::new();
    for p in timeline {
        let key = (
            p.due.get(..10).unwrap_or(&p.due).to_owned(),
            p.version,
            p.generation,
        );
        if !runs.contains(&key) {
            runs.push(key);
        }
    }
    runs
}

type Pick = fn(&HistoryPoint) -> Option<(f64, Option<(f64, f64)>)>;

/// The history charts: pass rate, attainment at the target rate, TTFT p99 and goodput, each
/// night with its 95 % interval, regression nights shaded and machine-only nights marked; `runs`
/// are the timeline's [`nights`].
fn history_charts(
    timeline: &[HistoryPoint],
    runs: &[(String, u32, u32)],
) -> Vec<(&'static str, String, Result<String, String>)> {
    let index = |p: &HistoryPoint| {
        runs.iter()
            .position(|(_, v, g)| *v == p.version && *g == p.generation)
    };
    let mut names: Vec<&str> = Vec::new();
    for p in timeline {
        if !names.contains(&p.candidate.as_str()) {
            names.push(&p.candidate);
        }
    }
    let mut marks: Vec<(usize, NightMark)> = Vec::new();
    for p in timeline {
        let Some(i) = index(p) else { continue };
        let mark = if p.check.as_deref() == Some("regression") {
            Some(NightMark::Regression)
        } else if p.what_changed.as_deref() == Some("machine") {
            Some(NightMark::MachineOnly)
        } else {
            None
        };
        if let Some(m) = mark
            && !marks.contains(&(i, m))
        {
            marks.push((i, m));
        }
    }
    let labels: Vec<String> = runs.iter().map(|(d, _, _)| d.clone()).collect();
    let specs: [(HistorySpec<'static>, Pick); 4] = [
        (
            HistorySpec {
                id: "history-pass",
                title: "Pass rate by night",
                axis: "pass rate (%)",
                interval: "pass rate, 95 % Wilson interval",
                percent: true,
            },
            |p| Some((p.pass_rate, Some((p.lo, p.hi)))),
        ),
        (
            HistorySpec {
                id: "history-attainment",
                title: "SLO attainment at the target rate by night",
                axis: "attainment (%)",
                interval: "attainment, 95 % Clopper–Pearson interval",
                percent: true,
            },
            |p| {
                p.attainment_interval
                    .map(|i| (i.value, Some((i.lo, i.hi))))
                    .or(p.attainment.map(|a| (a, None)))
            },
        ),
        (
            HistorySpec {
                id: "history-ttft",
                title: "TTFT p99 by night (requests that produced a token)",
                axis: "TTFT p99 (s)",
                interval: "p99, 95 % order-statistic interval (none under 368 requests)",
                percent: false,
            },
            |p| {
                p.ttft_p99_interval
                    .map(|i| (i.value, Some((i.lo, i.hi))))
                    .or(p.ttft_p99_s.map(|t| (t, None)))
            },
        ),
        (
            HistorySpec {
                id: "history-goodput",
                title: "Goodput at the target rate by night",
                axis: "goodput (req/s)",
                interval: "goodput, 95 % Poisson interval",
                percent: false,
            },
            |p| {
                p.goodput_interval
                    .map(|i| (i.value, Some((i.lo, i.hi))))
                    .or(p.goodput_rps.map(|g| (g, None)))
            },
        ),
    ];
    specs
        .iter()
        .map(|(spec, pick)| {
            let columns: Vec<HistorySeries<'_>> = names
                .iter()
                .map(|n| {
                    let pts = timeline
                        .iter()
                        .filter(|p| p.candidate == *n)
                        .filter_map(|p| {
                            let (v, i) = pick(p)?;
                            Some((index(p)?, v, i))
                        })
                        .collect();
                    (*n, pts)
                })
                .collect();
            (
                spec.id,
                spec.title.to_owned(),
                history_svg(spec, &labels, &columns, &marks).map_err(|e| e.to_string()),
            )
        })
        .collect()
}

/// An RFC 3339 instant in UTC to the minute, as the nights' tables show it
/// (`2026-12-01T02:00:00Z` → `2026-12-01 02:00`); anything else as it is.
fn short_due(due: &str) -> String {
    match (due.get(..10), due.get(11..16), due.ends_with('Z')) {
        (Some(day), Some(time), true) if due.as_bytes().get(10) == Some(&b'T') => {
            format!("{day} {time}")
        }
        _ => due.to_owned(),
    }
}

/// A blank value as a dash.
fn dash(text: &str) -> String {
    if text.trim().is_empty() {
        "–".to_owned()
    } else {
        text.to_owned()
    }
}

fn short(h: &Option<String>) -> String {
    h.as_deref()
        .map_or_else(|| "–".to_owned(), |h| h.get(..12).unwrap_or(h).to_owned())
}

/// The schedule page's form that adds a webhook: whether the workbench has a secret of its own
/// (`SHORTLIST_WEBHOOK_SECRET`, used when the form's is left empty), and a refused add's reason
/// with the URL that was sent.
#[derive(Debug, Clone, Default)]
pub struct WebhookAdd {
    pub server_secret: bool,
    pub error: Option<String>,
    pub url: String,
}

/// `/schedules/{name}`.
pub fn schedule_page(
    s: ScheduleView,
    history: Vec<TickView>,
    timeline: Vec<HistoryPoint>,
    webhooks: Vec<WebhookView>,
    add: WebhookAdd,
    shown: usize,
) -> String {
    let title = format!("Schedule {}", s.name);
    document(&title.clone(), move || {
        let shown = shown.max(1);
        let runs = nights(&timeline);
        // The nights the tables show in full: the newest `shown` (by index into `runs`).
        let first_shown = runs.len().saturating_sub(shown);
        let in_full = |p: &HistoryPoint| {
            runs.iter()
                .position(|(_, v, g)| *v == p.version && *g == p.generation)
                .is_some_and(|i| i >= first_shown)
        };
        let base = format!("/schedules/{}", encode(&s.name));
        let more_nights = more(&base, "nights", shown, runs.len(), "nights");
        let more_fingerprints = more(&base, "fingerprints", shown, runs.len(), "nights");
        let more_instants = more(&base, "due", shown, history.len(), "due instants");
        let charts = history_charts(&timeline, &runs)
            .into_iter()
            .map(|(id, label, chart)| match chart {
                Ok(svg) => view! {
                    <figure class="chart" data-chart=id aria-label=label inner_html=svg></figure>
                }
                .into_any(),
                Err(why) => view! { <p class="error-box">{why}</p> }.into_any(),
            })
            .collect_view();
        let changes = what_changed(&timeline);
        let fingerprints = fingerprint_rows(&timeline, &in_full);
        let hooks = webhook_rows(&s.name, webhooks, add);
        let timeline_rows = timeline
            .iter()
            .rev()
            .filter(|p| in_full(p))
            .map(|p| {
                let (word, tone) = crate::verdict_word(Some(p.verdict));
                let class = format!("badge {tone}");
                let (check, check_tone) = match p.check.as_deref() {
                    Some("regression") => ("regression", "bad"),
                    Some("improved") => ("improved", "good"),
                    Some("ok") => ("ok", "good"),
                    Some("indeterminate") => ("indeterminate", "warn"),
                    Some("not_comparable") => ("not comparable", "warn"),
                    Some("insufficient_data") => ("insufficient data", "none"),
                    _ => ("not checked yet", "none"),
                };
                let check_class = format!("badge {check_tone}");
                let evidence = (!p.reasons.is_empty()).then(|| {
                    let items = p
                        .reasons
                        .iter()
                        .map(|r| view! { <li class="small">{r.clone()}</li> })
                        .collect_view();
                    view! { <details><summary class="small">"evidence"</summary><ul>{items}</ul></details> }
                });
                let changed = match p.what_changed.as_deref() {
                    Some("machine") => "only the machine".to_owned(),
                    Some("runtime") => "the runtime".to_owned(),
                    Some("model") => "the model".to_owned(),
                    Some(_) => "nothing".to_owned(),
                    None => "–".to_owned(),
                };
                let changed_title = p.changed.join("\n");
                let rate = view! {
                    <span class="nowrap">{format!("{:.1} %", p.pass_rate * 100.0)}</span><br/>
                    <span class="small muted nowrap">{format!("{}/{} [{:.1}–{:.1} %]", p.passed, p.n, p.lo * 100.0, p.hi * 100.0)}</span>
                };
                let ttft = p
                    .ttft_p99_s
                    .map_or_else(|| "–".to_owned(), |t| format!("{t:.2} s"));
                let attainment = p
                    .attainment
                    .map_or_else(|| "–".to_owned(), |a| format!("{:.1} %", a * 100.0));
                let run = generation_url(&s.study, p.version, p.generation);
                let [due, candidate, pass, ttft_label, attained, goodput, record, checked, changes] =
                    NIGHT_COLUMNS;
                view! {
                    <tr>
                        <td data-label=*due class="mono small nowrap">{short_due(&p.due)}</td>
                        <td data-label=*candidate>{p.candidate.clone()}<br/><a class="small nowrap" href=run>{format!("v{} · generation {}", p.version, p.generation)}</a></td>
                        <td data-label=*pass>{rate}</td>
                        <td data-label=*ttft_label class="inline">{ttft}</td>
                        <td data-label=*attained class="inline">{attainment}</td>
                        <td data-label=*goodput class="inline nowrap">{p.goodput_rps.map_or_else(|| "–".to_owned(), |g| format!("{g:.3} req/s"))}</td>
                        <td data-label=*record class="inline"><span class=class>{word}</span></td>
                        <td data-label=*checked><span class=check_class>{check}</span>{evidence}</td>
                        <td data-label=*changes class="small inline" title=changed_title>{changed}</td>
                    </tr>
                }
            })
            .collect_view();
        let (action, label) = if s.enabled {
            (format!("{base}/pause"), "Pause")
        } else {
            (format!("{base}/resume"), "Resume")
        };
        let study_href = study_url(&s.study, s.version);
        let candidates = if s.candidates.is_empty() {
            "all of the study's".to_owned()
        } else {
            s.candidates.join(", ")
        };
        let rows = history
            .into_iter()
            .take(shown)
            .map(|t| {
                let tone = match t.state.as_str() {
                    "started" => "good",
                    "failed" => "bad",
                    _ => "none",
                };
                let class = format!("badge {tone}");
                let run = match (t.version, t.generation) {
                    (Some(v), Some(g)) => {
                        let href = generation_url(&t.study, v, g);
                        view! { <a href=href>{format!("v{v} · generation {g}")}</a> }.into_any()
                    }
                    _ => view! { <span class="muted">"–"</span> }.into_any(),
                };
                view! {
                    <tr>
                        <td class="mono small nowrap">{short_due(&t.due)}</td>
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
                    <dt>"Due after (UTC)"</dt><dd class="mono small">{short_due(&s.from)}</dd>
                    <dt>"Next due (UTC)"</dt><dd class="mono small">{s.next_due.as_deref().map_or_else(|| if s.enabled { "never again".to_owned() } else { "paused".to_owned() }, short_due)}</dd>
                </dl>
                <div class="row">
                    <form method="post" action=action class="actions"><button type="submit" class="secondary">{label}</button></form>
                    <form method="post" action=format!("{base}/remove") class="actions" data-confirm=format!("Remove the schedule {}? Its nights' history goes with it; the runs and records it made stay with their study.", s.name)><button type="submit" class="secondary danger">"Remove"</button></form>
                </div>
            </section>
            <section class="card">
                <h2>"What changed"</h2>
                {changes}
            </section>
            <section class="card" id="nights">
                <h2>"Nights"</h2>
                <p class="small muted">"Each night's check compares it with the night before: quality by the paired exact McNemar test (α = 0.05, per category with Holm's correction; a lost high-value case or a newly tripped disqualifier is always a regression), load figures by their 95 % intervals against the spread of the earlier nights."</p>
                <div class="charts two">{charts}</div>
                {card_table("nights", NIGHT_COLUMNS, timeline_rows)}
                {more_nights}
            </section>
            <section class="card" id="fingerprints">
                <h2>"Fingerprints"</h2>
                <p class="small muted">"What each night ran: a candidate's first night in full; after it, a value that differs from the candidate's night before is shown and marked, one that does not says “same”. Of the nights before the ones shown, only those where something changed."</p>
                <div class="scroll">
                    <table class="wide fingerprints">
                        <thead><tr><th>"Due (UTC)"</th><th>"Candidate"</th><th>"Source"</th><th>"Weights"</th><th>"Tokenizer"</th><th>"Template"</th><th>"Runtime"</th><th>"Code"</th><th>"Machine"</th></tr></thead>
                        <tbody>{fingerprints}</tbody>
                    </table>
                </div>
                {more_fingerprints}
            </section>
            <section class="card">
                <h2>"Webhooks"</h2>
                {hooks}
            </section>
            <section class="card" id="due">
                <h2>"Due instants"</h2>
                <p class="small muted">"Each due instant is handled once: started, skipped (caught up by a later run after a downtime), or failed with the reason."</p>
                <div class="scroll">
                    <table>
                        <thead><tr><th>"Due (UTC)"</th><th>"State"</th><th>"Run"</th><th>"Detail"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
                {more_instants}
            </section>
        }
    })
}

/// Under a table that shows the newest `shown` of `total` nights (or due instants): how many it
/// shows, and links that show more (at `#anchor`); nothing when it shows them all.
fn more(base: &str, anchor: &str, shown: usize, total: usize, what: &str) -> Option<AnyView> {
    if total <= shown {
        return None;
    }
    let next = (shown * 3).min(total);
    let link = |n: usize| format!("{base}?nights={n}#{anchor}");
    let longer = (next < total).then(|| {
        view! { <a href=link(next)>{format!("Show the newest {next}")}</a>" · " }
    });
    let charts = if anchor == "due" {
        ""
    } else {
        "; the charts above show every night"
    };
    Some(
        view! {
            <p class="small muted more">
                {format!("The newest {shown} of {total} {what}{charts}. ")}
                {longer}
                <a href=link(total)>{format!("Show all {total}")}</a>
            </p>
        }
        .into_any(),
    )
}

/// What changed since the accepted baseline — or, without one, since the first night —
/// per candidate, shown first.
fn what_changed(timeline: &[HistoryPoint]) -> AnyView {
    let mut names: Vec<&str> = Vec::new();
    for p in timeline {
        if !names.contains(&p.candidate.as_str()) {
            names.push(&p.candidate);
        }
    }
    if names.is_empty() {
        return view! { <p class="muted">"No night has a record yet."</p> }.into_any();
    }
    let items = names
        .into_iter()
        .map(|n| {
            let of: Vec<&HistoryPoint> = timeline.iter().filter(|p| p.candidate == n).collect();
            let (first, last) = (of[0], of[of.len() - 1]);
            let (since, diffs) = match (&last.baseline_changed, last.baseline_generation) {
                (Some(changed), Some(g)) => {
                    (format!("since the accepted baseline (generation {g})"), changed.clone())
                }
                _ => (
                    format!(
                        "since the first night ({})",
                        first.due.get(..10).unwrap_or(&first.due)
                    ),
                    last.fingerprint.changes_since(&first.fingerprint).1,
                ),
            };
            let text = if diffs.is_empty() {
                "nothing".to_owned()
            } else {
                diffs.join("; ")
            };
            view! { <li><strong>{n.to_owned()}</strong>" "<span class="muted small">{since}</span>": "<span class="small">{text}</span></li> }
        })
        .collect_view();
    view! { <ul class="plain">{items}</ul> }.into_any()
}

/// One row per night and candidate — for the nights before those shown in full, only a
/// candidate's first night and the nights where something changed; a cell that differs from
/// the candidate's night before is marked.
fn fingerprint_rows(
    timeline: &[HistoryPoint],
    in_full: &dyn Fn(&HistoryPoint) -> bool,
) -> impl IntoView + use<> {
    let mut rows = Vec::new();
    for (i, p) in timeline.iter().enumerate().rev() {
        let before = timeline[..i]
            .iter()
            .rev()
            .find(|q| q.candidate == p.candidate);
        let changed =
            before.is_none_or(|b| !p.fingerprint.changes_since(&b.fingerprint).1.is_empty());
        if !changed && !in_full(p) {
            continue;
        }
        let f = &p.fingerprint;
        // A ledger: a candidate's first night shows every value; later nights show a value only
        // where it changed (marked), and "same" (the value on hover) where it did not, so the
        // nights that differ stand out and long values (the machine) are not repeated each row.
        let cell = |now: String, then: Option<String>| match then {
            Some(t) if t == now => {
                view! { <td class="small muted same" title=now>"same"</td> }.into_any()
            }
            Some(_) => view! { <td class="small mono changed">{now}</td> }.into_any(),
            None => view! { <td class="small mono">{now}</td> }.into_any(),
        };
        let b = before.map(|q| &q.fingerprint);
        rows.push(view! {
            <tr>
                <td class="mono small nowrap">{short_due(&p.due)}</td>
                <td>{p.candidate.clone()}</td>
                {cell(f.source.clone(), b.map(|b| b.source.clone()))}
                {cell(short(&f.weights_sha256), b.map(|b| short(&b.weights_sha256)))}
                {cell(short(&f.tokenizer_sha256), b.map(|b| short(&b.tokenizer_sha256)))}
                {cell(short(&f.chat_template_sha256), b.map(|b| short(&b.chat_template_sha256)))}
                {cell(dash(&f.runtime), b.map(|b| dash(&b.runtime)))}
                {cell(f.code_version.clone(), b.map(|b| b.code_version.clone()))}
                {cell(f.machine.clone(), b.map(|b| b.machine.clone()))}
            </tr>
        });
    }
    rows.collect_view()
}

/// The webhooks with their state, a button that enables a disabled one and one that removes
/// any (after a confirmation), then the form that adds one.
fn webhook_rows(schedule: &str, hooks: Vec<WebhookView>, add: WebhookAdd) -> AnyView {
    let base = format!("/schedules/{}/webhooks", encode(schedule));
    let action = format!("{base}/enable");
    let remove = format!("{base}/remove");
    let table = (!hooks.is_empty()).then(|| {
        let rows = hooks
            .into_iter()
            .map(|h| {
                let (word, tone) = if h.enabled {
                    ("enabled", "good")
                } else {
                    ("disabled", "bad")
                };
                let class = format!("badge {tone}");
                let enable = (!h.enabled).then(|| {
                    let action = action.clone();
                    let url = h.url.clone();
                    view! {
                        <form method="post" action=action class="inline">
                            <input type="hidden" name="url" value=url/>
                            <button type="submit" class="secondary">"Enable again"</button>
                        </form>
                    }
                });
                let question = format!(
                    "Remove the webhook {}? Its pending deliveries go with it.",
                    h.url
                );
                let url = h.url.clone();
                let remove = remove.clone();
                view! {
                    <tr>
                        <td class="mono small">{h.url.clone()}</td>
                        <td><span class=class>{word}</span>{enable}</td>
                        <td>{format!("{} of 5", h.failures)}</td>
                        <td>{h.pending}</td>
                        <td class="small">{h.last_error.clone().unwrap_or_else(|| "–".to_owned())}</td>
                        <td class="mono small">{h.last_attempt.clone().unwrap_or_else(|| "–".to_owned())}</td>
                        <td>
                            <form method="post" action=remove data-confirm=question>
                                <input type="hidden" name="url" value=url/>
                                <button type="submit" class="secondary danger small">"Remove"</button>
                            </form>
                        </td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <p class="small muted">"A webhook is disabled after 5 consecutive failed deliveries (retried with doubling backoff); enabled again, it receives what it missed."</p>
            <div class="scroll">
                <table>
                    <thead><tr><th>"URL"</th><th>"State"</th><th>"Consecutive failures"</th><th>"Pending"</th><th>"Last error"</th><th>"Last attempt"</th><th></th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        }
    });
    let empty = table.is_none();
    let secret_hint = if add.server_secret {
        "At least 16 characters; left empty, the workbench's own (SHORTLIST_WEBHOOK_SECRET) signs."
    } else {
        "At least 16 characters. It is stored with the webhook and not shown again."
    };
    view! {
        {empty.then(|| view! { <p class="muted">"No webhook yet."</p> })}
        {table}
        <h3 id="add-webhook">"Add a webhook"</h3>
        <p class="small muted">
            "Each finished night is POSTed as JSON (" <code>"shortlist.night.v1"</code> "), signed with "
            <code>"X-Shortlist-Signature: sha256=HMAC-SHA256(secret, body)"</code>
            ", which the receiver checks with the same secret. http:// only: put a relay in front of an https receiver."
        </p>
        {add.error.map(|e| view! { <p class="error-box" role="alert">{crate::layout::code_spans(&e)}</p> })}
        <form method="post" action=base class="stack narrow">
            <label for="wurl">"URL"</label>
            <input id="wurl" name="url" type="text" required placeholder="http://receiver.internal:9000/shortlist" value=add.url spellcheck="false"/>
            <label for="wsecret">"Secret"</label>
            <input id="wsecret" name="secret" type="password" autocomplete="new-password" required=!add.server_secret minlength="16"/>
            <span class="small muted">{secret_hint}</span>
            <button type="submit">"Add webhook"</button>
        </form>
    }
    .into_any()
}
