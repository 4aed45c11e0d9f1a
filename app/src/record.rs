//! `/studies/{name}/candidates/{candidate}`: the one-page selection record as a web page — the
//! same seven sections and the same SVG charts as the PDF, from the same view model
//! (`shortlist_report::view`).

use leptos::prelude::*;
use shortlist_report::Charts;
use shortlist_report::view::{Row, View};
use shortlist_runner::service::reproduce::StoredReproductionView;
use shortlist_runner::service::views::RecordView;

use crate::layout::{card_table, document};

/// The disqualifiers' columns.
const RULE_COLUMNS: &[&str] = &["Rule", "Condition", "Outcome", "Observed", "Evidence"];

/// The latencies' columns: each percentile with the population it is over.
const LATENCY_COLUMNS: &[&str] = &["Metric", "Population", "n", "p50", "p90", "p99"];

fn rows(rows: Vec<Row>) -> impl IntoView {
    view! {
        <dl class="grid">
            {rows
                .into_iter()
                .map(|r| {
                    let class = if r.mono { "mono small" } else { "" };
                    view! { <dt>{r.key}</dt><dd class=class>{r.value}</dd> }
                })
                .collect_view()}
        </dl>
    }
}

/// The record page. `charts` are the record's SVG charts (drawn from its numbers; category
/// names in them are escaped by the chart library); `reproduced` the newest check of whether
/// its quality run reproduces, if any was made.
pub fn record_page(
    study: &str,
    record: RecordView,
    view_: View,
    charts: Charts,
    reproduced: Option<StoredReproductionView>,
) -> String {
    let title = format!("{} · {}", record.record.identity.candidate, study);
    let study = study.to_owned();
    document(&title.clone(), move || {
        let v = view_;
        let r = record.record;
        let candidate = r.identity.candidate.clone();
        let base = format!(
            "/studies/{}/candidates/{}",
            crate::encode(&study),
            crate::encode(&candidate)
        );
        let verdict_class = format!("verdict {}", v.verdict.tone);
        let generation = format!(
            "study v{} · generation {} · stored {} · record sha256 {}",
            r.study.version, record.generation, record.stored_at, r.record_sha256
        );
        let incomplete = r.incomplete.clone();
        // This record's own version and generation: the PDF and JSON are this record's, not
        // whichever is newest when the link is followed.
        let which = format!(
            "?version={}&generation={}",
            r.study.version, record.generation
        );
        let study_href = crate::study_url(&study, Some(r.study.version));
        let crumb = format!("{study} v{}", r.study.version);
        // A later version's record: which criteria it was judged by that the version before
        // did not have (every earlier version of a locked one is kept).
        let criteria_changes = (r.study.version > 1).then(|| {
            let (to, from) = (r.study.version, r.study.version - 1);
            let href = crate::study_diff_url(&study, from, to);
            view! { " · " <a href=href id="criteria-changes">{format!("Criteria changed since v{from}")}</a> }
        });
        let run = format!("generation {}", record.generation);
        let reproduced = reproduction(&study, &candidate, record.generation, reproduced);
        view! {
            <p class="crumbs"><a href=study_href>{crumb}</a> " / " {candidate.clone()} " · " {run}</p>
            <h1>{v.title.clone()}</h1>
            <p class="question">{v.question.clone()}</p>
            <section class=verdict_class>
                <strong>{v.verdict.word.clone()}</strong>
                <span>{v.verdict.reason.clone()}</span>
            </section>
            {(!incomplete.is_empty()).then(|| view! {
                <ul class="warn-box">{incomplete.into_iter().map(|m| view! { <li>{m}</li> }).collect_view()}</ul>
            })}
            <p class="small">
                <a href=format!("{base}/record.pdf{which}")>"PDF (one page)"</a> " · "
                <a href=format!("{base}/record.json{which}")>"JSON"</a>
                {criteria_changes}
            </p>
            <div>
                <section class="card">
                    <h2>"1 · Identity"</h2>
                    {rows(v.identity.clone())}
                </section>
                <section class="card">
                    <h2>"2 · Quality"</h2>
                    {rows(v.quality_summary.clone())}
                    <div class="chart" inner_html=charts.pass_rate.clone()></div>
                    <p class="muted small">{v.categories_note.clone()}</p>
                    {v.paired.clone().map(|p| view! { <p class="small">{p}</p> })}
                    {reproduced}
                </section>
                <section class="card">
                    <h2>"3 · Disqualifiers"</h2>
                    <p class="small">{v.rules_summary.clone()}</p>
                    {card_table("", RULE_COLUMNS, v.rules.clone().into_iter().map(|rule| {
                        let class = format!("badge {}", rule.tone);
                        view! {
                            <tr>
                                <td data-label=RULE_COLUMNS[0]>{rule.rule}</td>
                                <td data-label=RULE_COLUMNS[1] class="mono small">{rule.condition}</td>
                                <td data-label=RULE_COLUMNS[2] class="inline"><span class=class>{rule.outcome}</span></td>
                                <td data-label=RULE_COLUMNS[3] class="inline">{rule.observed}</td>
                                <td data-label=RULE_COLUMNS[4] class="small">{(!rule.evidence.is_empty()).then_some(rule.evidence)}</td>
                            </tr>
                        }
                    }).collect_view())}
                </section>
                <section class="card">
                    <h2>"4 · Memory fit"</h2>
                    <p>{v.memory_summary.clone()}</p>
                    {rows(v.memory.clone())}
                    <p class="muted small">{v.memory_assumptions.clone()}</p>
                </section>
                <section class="card">
                    <h2>"5 · Latency and goodput"</h2>
                    {rows(v.performance.clone())}
                    <div class="charts">
                        <div class="chart" inner_html=charts.ttft.clone()></div>
                        <div class="chart" inner_html=charts.goodput.clone()></div>
                    </div>
                    {card_table("", LATENCY_COLUMNS, v.latencies.clone().into_iter().map(|l| view! {
                        <tr>
                            <td data-label=LATENCY_COLUMNS[0]>{l.metric}</td>
                            <td data-label=LATENCY_COLUMNS[1] class="small">{l.population}</td>
                            <td data-label=LATENCY_COLUMNS[2] class="inline">{l.count}</td>
                            <td data-label=LATENCY_COLUMNS[3] class="inline">{l.p50}</td>
                            <td data-label=LATENCY_COLUMNS[4] class="inline">{l.p90}</td>
                            <td data-label=LATENCY_COLUMNS[5] class="inline">{l.p99}</td>
                        </tr>
                    }).collect_view())}
                    <h3>"Sweep"</h3>
                    <div class="scroll">
                        <table>
                            <thead><tr><th>"Offered req/s"</th><th>"Goodput req/s"</th><th>"Throughput req/s"</th><th>"Attainment"</th><th>"Lower bound (95 %)"</th><th>"Excluded"</th></tr></thead>
                            <tbody>
                                {r.performance.sweep.clone().into_iter().map(|row| {
                                    let pct = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |a| format!("{:.1} %", a * 100.0));
                                    view! {
                                        <tr>
                                            <td>{row.offered_rps.to_string()}</td>
                                            <td>{format!("{:.3}", row.goodput_rps)}</td>
                                            <td>{format!("{:.3}", row.throughput_rps)}</td>
                                            <td>{pct(row.attainment)}</td>
                                            <td>{pct(row.attainment_lower_bound)}</td>
                                            <td class="small">{row.excluded.unwrap_or_default()}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                    <p class="muted small">{r.performance.capacity_rule.clone()}</p>
                </section>
                <section class="card">
                    <h2>"6 · Operations"</h2>
                    {rows(v.operations.clone())}
                </section>
                <section class="card">
                    <h2>"7 · Cost"</h2>
                    {v.cost_missing.clone().map(|m| view! { <p>{m}</p> })}
                    {(!v.cost.is_empty()).then(|| view! {
                        <p class="muted small">{format!("{} Devices = replicas needed to hold the SLO at that rate × devices per replica.", v.cost_currency)}</p>
                        <div class="scroll">
                            <table>
                                <thead><tr><th>"Traffic"</th><th>"Rate"</th><th>"Devices"</th><th>"Per hour"</th><th>"Per 1M requests"</th><th>"Per 1M output tokens"</th></tr></thead>
                                <tbody>
                                    {v.cost.clone().into_iter().map(|c| view! {
                                        <tr><td>{c.level}</td><td>{c.rate}</td><td>{c.devices}</td><td>{c.per_hour}</td><td>{c.per_million_requests}</td><td>{c.per_million_output_tokens}</td></tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                        </div>
                    })}
                    {rows(v.cost_basis.clone())}
                </section>
            </div>
            <p class="mono small muted">{v.footer_lock.clone()}</p>
            <p class="mono small muted">{generation}</p>
            <p class="small muted">{v.footer_meta.clone()}</p>
        }
    })
}

/// Most case ids a reproduction line names.
const REPRODUCTION_IDS: usize = 8;

/// Whether the record's quality run reproduced when its cases were asked again: the newest
/// check, or how to make one.
fn reproduction(
    study: &str,
    candidate: &str,
    generation: u32,
    checked: Option<StoredReproductionView>,
) -> impl IntoView + use<> {
    let Some(checked) = checked else {
        let command = format!(
            "shortlist study reproduce {study} --candidate {candidate} --generation {generation}"
        );
        return view! {
            <p class="small muted" id="reproduced">
                "Not asked again yet: " <code>{command}</code>
                " asks its cases again and compares every answer with the stored one."
            </p>
        }
        .into_any();
    };
    let c = checked.check;
    let when = checked
        .stored_at
        .get(..16)
        .unwrap_or(&checked.stored_at)
        .replace('T', " ");
    let sample = if c.asked < c.stored {
        format!(" (a sample of {} of {} stored cases)", c.asked, c.stored)
    } else {
        String::new()
    };
    let endpoint = c.kind == "endpoint";
    let since = if c.changed.is_empty() && endpoint {
        "the server behind it is not fingerprinted".to_owned()
    } else if c.changed.is_empty() {
        "nothing changed since the run".to_owned()
    } else {
        format!("since the run: {}", c.changed.join("; "))
    };
    let (word, tone) = if c.ok {
        ("Reproduced", "badge good")
    } else if c.verdicts_changed > 0 {
        ("Not reproduced", "badge bad")
    } else if c.different > 0 {
        ("Answers differ", "badge warn")
    } else {
        // Only errors: the candidate could not be asked (an endpoint down).
        ("Not asked", "badge warn")
    };
    // Every answer the same says it all; otherwise how many verdicts moved and how many
    // cases could not be asked.
    let moved_counts = if c.ok {
        String::new()
    } else {
        format!(
            ", {} verdict{} changed, {} error{}",
            c.verdicts_changed,
            if c.verdicts_changed == 1 { "" } else { "s" },
            c.errors,
            if c.errors == 1 { "" } else { "s" },
        )
    };
    // Another batch size than the run's is worth saying: the answers did not depend on it.
    let batch = match c.concurrency_then {
        Some(then) if then as usize != c.concurrency_now => {
            format!(", {} in flight where the run had {then}", c.concurrency_now)
        }
        _ => String::new(),
    };
    let counts = format!(
        "{} of {} answers the same{sample}{moved_counts}{batch} · asked {when} UTC {} {} · {since}",
        c.same,
        c.asked,
        if endpoint { "of" } else { "on" },
        c.machine,
    );
    let moved: Vec<String> = c
        .cases
        .iter()
        .filter(|k| !k.same)
        .map(|k| k.id.clone())
        .collect();
    let more = moved.len().saturating_sub(REPRODUCTION_IDS);
    let cases = (!moved.is_empty()).then(|| {
        let links = moved
            .into_iter()
            .take(REPRODUCTION_IDS)
            .map(|id| {
                let href = format!(
                    "/studies/{}/cases/{}?version={}&generation={generation}",
                    crate::encode(study),
                    crate::encode(&id),
                    c.version
                );
                view! { " " <a href=href class="mono">{id}</a> }
            })
            .collect_view();
        view! {
            <br/> "Not the same:" {links}
            {(more > 0).then(|| format!(" and {more} more"))}
        }
    });
    view! {
        <p class="small" id="reproduced">
            <span class=tone>{word}</span> " " {counts} {cases}
        </p>
    }
    .into_any()
}
