//! `/studies/{name}/compare`: candidates side by side — verdicts and tripped rules, pass rate per
//! category with 95 % Wilson intervals, the paired exact McNemar table of each pair, load
//! figures, memory, cost and identity — and below, the case table with its filters. The view
//! state (candidates, mode, category, search) lives in the URL.

use leptos::prelude::*;
use shortlist_runner::service::views::{CaseRow, Comparison};
use shortlist_study::record::{Cost, SelectionRecord};

use crate::layout::document;

/// Which cases the table shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompareFilter {
    /// `disagreements` (one passes, another fails), `failures` (any fails), or `all`.
    pub mode: String,
    /// Only this category (empty: all).
    pub category: String,
    /// Case ids containing this text (empty: all).
    pub search: String,
}

impl CompareFilter {
    fn keeps(&self, row: &CaseRow) -> bool {
        let mode = match self.mode.as_str() {
            "failures" => row.outcomes.contains(&Some(false)),
            "all" => true,
            _ => row.disagreement,
        };
        mode && (self.category.is_empty() || row.category == self.category)
            && (self.search.is_empty()
                || row.id.to_lowercase().contains(&self.search.to_lowercase()))
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |a| format!("{:.1} %", a * 100.0))
}

fn summary_row(
    label: &str,
    records: &[SelectionRecord],
    f: impl Fn(&SelectionRecord) -> String,
) -> AnyView {
    let label = label.to_owned();
    let values: Vec<String> = records.iter().map(f).collect();
    let cells = values
        .into_iter()
        .map(|v| view! { <td>{v}</td> })
        .collect_view();
    view! { <tr><th scope="row">{label}</th>{cells}</tr> }.into_any()
}

/// The comparison page.
pub fn compare_page(cmp: Comparison, filter: CompareFilter) -> String {
    let title = format!("Compare · {}", cmp.study);
    document(&title.clone(), move || {
        let records = cmp.records.clone();
        let candidates = cmp.candidates.clone();
        let heads = candidates
            .iter()
            .map(|c| view! { <th scope="col">{c.clone()}</th> })
            .collect_view();
        let categories: Vec<String> = {
            let mut seen = Vec::new();
            for row in &cmp.cases {
                if !seen.contains(&row.category) {
                    seen.push(row.category.clone());
                }
            }
            seen
        };
        let rate_rows = categories
            .iter()
            .map(|cat| {
                let cat = cat.clone();
                let cells = records
                    .iter()
                    .map(|r| {
                        let text = r
                            .quality
                            .categories
                            .iter()
                            .find(|c| c.label == cat)
                            .map_or_else(
                                || "–".to_owned(),
                                |c| {
                                    format!(
                                        "{}/{} · {:.0} % [{:.0}–{:.0} %]",
                                        c.passed,
                                        c.n,
                                        c.rate * 100.0,
                                        c.lo * 100.0,
                                        c.hi * 100.0
                                    )
                                },
                            );
                        view! { <td>{text}</td> }
                    })
                    .collect_view();
                view! { <tr><th scope="row">{cat}</th>{cells}</tr> }
            })
            .collect_view();
        let pairs = cmp
            .pairs
            .clone()
            .into_iter()
            .map(|p| {
                let line = format!("{} vs {}", p.a, p.b);
                let verdict = if p.p_value < 0.05 {
                    format!("differ (p = {:.3})", p.p_value)
                } else {
                    format!("no significant difference (p = {:.3})", p.p_value)
                };
                view! {
                    <tr>
                        <td>{line}</td>
                        <td>{p.both_pass.to_string()}</td>
                        <td>{p.only_a.to_string()}</td>
                        <td>{p.only_b.to_string()}</td>
                        <td>{p.both_fail.to_string()}</td>
                        <td>{verdict}</td>
                    </tr>
                }
            })
            .collect_view();
        let shown: Vec<CaseRow> = cmp
            .cases
            .iter()
            .filter(|r| filter.keeps(r))
            .cloned()
            .collect();
        let total = cmp.cases.len();
        let count = format!("{} of {total} cases", shown.len());
        let study = cmp.study.clone();
        let case_rows = shown
            .into_iter()
            .map(|row| {
                let href = format!("/studies/{study}/cases/{}", row.id);
                let cells = (0..row.outcomes.len())
                    .map(|i| {
                        let (word, tone) = match row.outcomes[i] {
                            Some(true) => ("pass", "good"),
                            Some(false) => ("fail", "bad"),
                            None => ("–", "none"),
                        };
                        let detail = format!(
                            "{} · {}",
                            row.latencies_s[i].map_or_else(|| "–".to_owned(), |s| format!("{s:.2} s")),
                            row.tokens[i].map_or_else(|| "–".to_owned(), |t| format!("{t} tokens"))
                        );
                        let class = format!("badge {tone}");
                        view! { <td><span class=class>{word}</span><div class="muted small">{detail}</div></td> }
                    })
                    .collect_view();
                view! { <tr><td><a href=href>{row.id.clone()}</a></td><td>{row.category.clone()}</td>{cells}</tr> }
            })
            .collect_view();
        let joined = candidates.join(",");
        let mode_links = ["disagreements", "failures", "all"]
            .into_iter()
            .map(|m| {
                let href = format!(
                    "/studies/{}/compare?candidates={joined}&mode={m}&category={}&q={}",
                    cmp.study, filter.category, filter.search
                );
                let class = if filter.mode == m || (filter.mode.is_empty() && m == "disagreements")
                {
                    "tab active"
                } else {
                    "tab"
                };
                view! { <a class=class href=href>{m}</a> }
            })
            .collect_view();
        let category_options = std::iter::once(String::new())
            .chain(categories.clone())
            .map(|c| {
                let selected = c == filter.category;
                let label = if c.is_empty() {
                    "all categories".to_owned()
                } else {
                    c.clone()
                };
                view! { <option value=c selected=selected>{label}</option> }
            })
            .collect_view();
        let action = format!("/studies/{}/compare", cmp.study);
        let header = format!(
            "{} v{} · generation {} · lock {}",
            cmp.study,
            cmp.version,
            cmp.generation,
            &cmp.lock_sha256[..12.min(cmp.lock_sha256.len())]
        );
        view! {
            <h1>"Side by side"</h1>
            <p class="mono small">{header}</p>
            <section class="card">
                <h2>"Verdicts"</h2>
                <div class="scroll">
                    <table class="compare">
                        <thead><tr><th></th>{heads}</tr></thead>
                        <tbody>
                            <tr>
                                <th scope="row">"Verdict"</th>
                                {records.iter().map(|r| {
                                    let (word, tone) = crate::verdict_word(Some(r.verdict));
                                    let class = format!("badge {tone}");
                                    view! { <td><span class=class>{word}</span></td> }
                                }).collect_view()}
                            </tr>
                            {summary_row("Tripped rules", &records, |r| {
                                let tripped: Vec<String> = r.disqualifiers.iter()
                                    .filter(|d| d.outcome == shortlist_study::rule::Outcome::Trip)
                                    .map(|d| format!("{} (observed {})", d.rule, d.observed.clone().unwrap_or_default()))
                                    .collect();
                                if tripped.is_empty() { "none".to_owned() } else { tripped.join("; ") }
                            })}
                            {summary_row("Pass rate", &records, |r| format!(
                                "{}/{} · {:.1} % [{:.1}–{:.1} %]",
                                r.quality.overall.passed, r.quality.overall.n, r.quality.overall.rate * 100.0,
                                r.quality.overall.lo * 100.0, r.quality.overall.hi * 100.0))}
                            {summary_row("Attainment at target", &records, |r| pct(r.performance.attainment))}
                            {summary_row("Goodput at target", &records, |r| format!("{:.3} req/s (throughput {:.3})", r.performance.goodput_rps, r.performance.throughput_rps))}
                            {summary_row("TTFT p99", &records, |r| r.performance.latencies.iter().find(|l| l.metric == "TTFT").and_then(|l| l.p99_s).map_or_else(|| "–".to_owned(), |s| format!("{s:.2} s")))}
                            {summary_row("Capacity", &records, |r| r.performance.capacity_rps.map_or_else(|| "none".to_owned(), |c| format!("{c} req/s")))}
                            {summary_row("Memory", &records, |r| r.memory.summary.clone())}
                            {summary_row("Cost per hour (ordinary / peak)", &records, |r| match &r.cost {
                                Cost::Estimate(e) => format!("{:.4} / {:.4} {}", e.ordinary.cost_per_hour, e.peak.cost_per_hour, e.currency),
                                Cost::Unavailable(no) => format!("not available: {}", no.why),
                            })}
                            {summary_row("Weights sha256", &records, |r| r.identity.weights_sha256.clone().unwrap_or_else(|| "–".to_owned()))}
                        </tbody>
                    </table>
                </div>
            </section>
            <section class="card">
                <h2>"Pass rate per category (95 % Wilson intervals)"</h2>
                <div class="scroll">
                    <table class="compare">
                        <thead><tr><th>"Category"</th>{candidates.iter().map(|c| view! { <th>{c.clone()}</th> }).collect_view()}</tr></thead>
                        <tbody>{rate_rows}</tbody>
                    </table>
                </div>
            </section>
            <section class="card">
                <h2>"Paired comparison (exact McNemar, same cases)"</h2>
                <div class="scroll">
                    <table>
                        <thead><tr><th>"Pair"</th><th>"Both pass"</th><th>"Only first"</th><th>"Only second"</th><th>"Both fail"</th><th>"Verdict"</th></tr></thead>
                        <tbody>{pairs}</tbody>
                    </table>
                </div>
            </section>
            <section class="card">
                <h2>"Cases"</h2>
                <nav class="tabs">{mode_links}</nav>
                <form method="get" action=action class="filters">
                    <input type="hidden" name="candidates" value=joined.clone()/>
                    <input type="hidden" name="mode" value=filter.mode.clone()/>
                    <select name="category" aria-label="Category">{category_options}</select>
                    <input type="search" name="q" value=filter.search.clone() placeholder="case id contains…" aria-label="Search"/>
                    <button type="submit">"Filter"</button>
                </form>
                <p class="muted small" id="case-count">{count}</p>
                <div class="scroll">
                    <table class="cases">
                        <thead><tr><th>"Case"</th><th>"Category"</th>{candidates.iter().map(|c| view! { <th>{c.clone()}</th> }).collect_view()}</tr></thead>
                        <tbody>{case_rows}</tbody>
                    </table>
                </div>
            </section>
        }
    })
}
