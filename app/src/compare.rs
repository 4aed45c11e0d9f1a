//! `/studies/{name}/compare`: candidates side by side — verdicts and tripped rules, pass rate per
//! category with 95 % Wilson intervals, the paired exact McNemar table of each pair, load
//! figures, memory, cost and identity — and below, the case table with its filters. The view
//! state (candidates, mode, category, search) lives in the URL.

use leptos::prelude::*;
use shortlist_report::charts::num;
use shortlist_report::overlay;
use shortlist_report::view::amount;
use shortlist_runner::service::views::{CaseRow, Comparison};
use shortlist_study::record::{Cost, NEAR_TIE, SelectionRecord};

use crate::encode;
use crate::layout::document;

/// Which cases the table shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompareFilter {
    /// The columns as the query string gave them (`a,b@g2`; empty: the study's candidates).
    pub candidates: String,
    /// `disagreements` (one passes, another fails), `failures` (any fails), or `all`.
    pub mode: String,
    /// Only this category (empty: all).
    pub category: String,
    /// Case ids containing this text (empty: all).
    pub search: String,
    /// Which page of the cases kept, from 1 ([`CASE_ROWS_PER_PAGE`] a page).
    pub page: usize,
}

/// Case rows a page of the comparison shows.
pub const CASE_ROWS_PER_PAGE: usize = 200;

impl CompareFilter {
    /// Whether the case table shows `row`.
    pub fn keeps(&self, row: &CaseRow) -> bool {
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

/// The non-empty parts joined, or a dash when there are none.
fn words(parts: &[&str], sep: &str) -> String {
    let kept: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| !p.trim().is_empty())
        .collect();
    if kept.is_empty() {
        "–".to_owned()
    } else {
        kept.join(sep)
    }
}

/// What the cases' times are: each case's wall time in its candidate's quality run, with the
/// most cases each run kept in flight — a time shared with other cases is not the model's
/// latency (the Latency section has that, with its population).
fn case_times(candidates: &[String], cases: &[CaseRow]) -> String {
    let most: Vec<Option<u32>> = (0..candidates.len())
        .map(|i| {
            cases
                .iter()
                .filter_map(|r| r.concurrency.get(i).copied().flatten())
                .max()
        })
        .collect();
    let head = "Times: each case's wall time in its candidate's quality run";
    if most.iter().all(Option::is_none) {
        return format!("{head}.");
    }
    if most.iter().all(|m| *m == Some(1)) {
        return format!("{head}, each case run alone.");
    }
    let each = candidates
        .iter()
        .zip(&most)
        .map(|(c, m)| match m {
            Some(1) => format!("{c}: alone"),
            Some(n) => format!("{c}: up to {n}"),
            None => format!("{c}: not told"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{head}, shared with the cases in flight beside it ({each}), so not the model's latency: \
         that is under Latency, with its population."
    )
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

/// The comparison's figures under the verdicts, a row each, a cell per record: what the page's
/// Verdicts table and `shortlist study compare` show.
pub fn summary_rows(records: &[SelectionRecord]) -> Vec<(&'static str, Vec<String>)> {
    type Cell = fn(&SelectionRecord) -> String;
    let rows: [(&'static str, Cell); 9] = [
        ("Tripped rules", |r| {
            let tripped: Vec<String> = r
                .disqualifiers
                .iter()
                .filter(|d| d.outcome == shortlist_study::rule::Outcome::Trip)
                .map(|d| {
                    format!(
                        "{}: {}, observed {}",
                        d.rule,
                        d.condition,
                        d.observed.clone().unwrap_or_else(|| "–".to_owned())
                    )
                })
                .collect();
            if tripped.is_empty() {
                "none".to_owned()
            } else {
                tripped.join("; ")
            }
        }),
        ("Pass rate", |r| {
            let o = &r.quality.overall;
            format!(
                "{}/{} · {:.1} % [{:.1}–{:.1} %]",
                o.passed,
                o.n,
                o.rate * 100.0,
                o.lo * 100.0,
                o.hi * 100.0
            )
        }),
        ("Near-ties", |r| {
            r.quality.near_ties.as_ref().map_or_else(
                || "not measured".to_owned(),
                |n| {
                    format!(
                        "{} of {} cases (top-2 logit gap < {})",
                        n.cases, n.known, n.threshold
                    )
                },
            )
        }),
        ("Attainment at target", |r| pct(r.performance.attainment)),
        ("Goodput at target", |r| {
            format!(
                "{:.3} req/s (throughput {:.3})",
                r.performance.goodput_rps, r.performance.throughput_rps
            )
        }),
        ("TTFT p99", |r| {
            r.performance
                .latencies
                .iter()
                .find(|l| l.metric == "TTFT")
                .and_then(|l| l.p99_s)
                .map_or_else(|| "–".to_owned(), |s| format!("{s:.2} s"))
        }),
        ("Capacity", |r| {
            r.performance
                .capacity_rps
                .map_or_else(|| "none".to_owned(), |c| format!("{c} req/s"))
        }),
        ("Memory", |r| r.memory.summary.clone()),
        ("Cost per hour (ordinary / peak)", |r| match &r.cost {
            Cost::Estimate(e) => format!(
                "{} / {} {}",
                amount(e.ordinary.cost_per_hour),
                amount(e.peak.cost_per_hour),
                e.currency
            ),
            Cost::Unavailable(no) => format!("not available: {}", no.why),
        }),
    ];
    rows.into_iter()
        .map(|(label, cell)| (label, records.iter().map(cell).collect()))
        .collect()
}

/// A pair's exact McNemar verdict in words, and its badge's tone.
pub fn pair_verdict(p_value: f64) -> (String, &'static str) {
    // Three decimals say 0.000 for a p that is not zero.
    let p = if p_value < 0.001 {
        "p < 0.001".to_owned()
    } else {
        format!("p = {p_value:.3}")
    };
    if p_value < 0.05 {
        (format!("differ ({p})"), "warn")
    } else {
        (format!("no significant difference ({p})"), "none")
    }
}

/// Which requests the TTFT figures — the p99 row and the overlaid curves — are of: one line
/// when every column's population is the same (the workload and SLO are), else one per column.
pub fn ttft_population(candidates: &[String], records: &[SelectionRecord]) -> String {
    let of = |r: &SelectionRecord| {
        r.performance
            .latencies
            .iter()
            .find(|l| l.metric == "TTFT")
            .map_or_else(|| "no TTFT measured".to_owned(), |l| l.population.clone())
    };
    let populations: Vec<String> = records.iter().map(of).collect();
    match populations.first() {
        Some(first) if populations.iter().all(|p| p == first) => {
            format!("TTFT population (every column): {first}")
        }
        _ => candidates
            .iter()
            .zip(&populations)
            .map(|(c, p)| format!("{c}: {p}"))
            .collect::<Vec<_>>()
            .join("; "),
    }
}

/// The four overlaid charts, drawn from the comparison's records (pure, like the record's).
struct Charts {
    pass_rates: Result<String, String>,
    ttft: Result<String, String>,
    goodput: Result<String, String>,
    memory: Result<String, String>,
}

fn charts_of(cmp: &Comparison) -> Charts {
    let labels = &cmp.candidates;
    let quality: Vec<(&str, &_)> = labels
        .iter()
        .zip(&cmp.records)
        .map(|(l, r)| (l.as_str(), &r.quality))
        .collect();
    let perf: Vec<(&str, &_)> = labels
        .iter()
        .zip(&cmp.records)
        .map(|(l, r)| (l.as_str(), &r.performance))
        .collect();
    let memory: Vec<(&str, &_)> = labels
        .iter()
        .zip(&cmp.records)
        .map(|(l, r)| (l.as_str(), &r.memory))
        .collect();
    let text = |e: shortlist_report::ReportError| e.to_string();
    Charts {
        pass_rates: overlay::pass_rates_svg(&quality).map_err(text),
        ttft: overlay::ttft_cdfs_svg(&perf).map_err(text),
        goodput: overlay::goodput_svg(&perf, cmp.attainment_target).map_err(text),
        memory: overlay::memory_svg(&memory).map_err(text),
    }
}

/// A chart, or what kept it from being drawn.
fn chart(svg: Result<String, String>, label: &'static str) -> AnyView {
    match svg {
        Ok(svg) => {
            view! { <figure class="chart" aria-label=label inner_html=svg></figure> }.into_any()
        }
        Err(why) => view! { <p class="error-box">{format!("{label}: {why}")}</p> }.into_any(),
    }
}

/// The comparison page.
pub fn compare_page(cmp: Comparison, filter: CompareFilter) -> String {
    let title = format!("Compare · {}", cmp.study);
    document(&title.clone(), move || {
        let charts = charts_of(&cmp);
        let records = cmp.records.clone();
        let candidates = cmp.candidates.clone();
        let heads = cmp
            .columns
            .iter()
            .map(|c| {
                let sub = format!("v{} · generation {}", c.version, c.generation);
                view! { <th scope="col">{c.label.clone()}<div class="muted small">{sub}</div></th> }
            })
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
        let pairs = cmp
            .pairs
            .clone()
            .into_iter()
            .map(|p| {
                let line = format!("{} vs {}", p.a, p.b);
                let (verdict, tone) = pair_verdict(p.p_value);
                let tone = format!("badge {tone}");
                view! {
                    <tr>
                        <td>{line}</td>
                        <td>{p.both_pass.to_string()}</td>
                        <td>{p.only_a.to_string()}</td>
                        <td>{p.only_b.to_string()}</td>
                        <td>{p.both_fail.to_string()}</td>
                        <td><span class=tone>{verdict}</span></td>
                    </tr>
                }
            })
            .collect_view();
        let kept: Vec<&CaseRow> = cmp.cases.iter().filter(|r| filter.keeps(r)).collect();
        let times = case_times(&candidates, &cmp.cases);
        let total = cmp.cases.len();
        let pages = kept.len().div_ceil(CASE_ROWS_PER_PAGE).max(1);
        let page = filter.page.clamp(1, pages);
        let first = (page - 1) * CASE_ROWS_PER_PAGE;
        let count = if pages == 1 {
            format!("{} of {total} cases", kept.len())
        } else {
            format!(
                "{} of {total} cases; {}–{} shown",
                kept.len(),
                first + 1,
                (first + CASE_ROWS_PER_PAGE).min(kept.len())
            )
        };
        let shown: Vec<CaseRow> = kept
            .into_iter()
            .skip(first)
            .take(CASE_ROWS_PER_PAGE)
            .cloned()
            .collect();
        let study = cmp.study.clone();
        // A case's page shows the answers of the comparison's own version and generation.
        let which = format!("?version={}&generation={}", cmp.version, cmp.generation);
        let case_rows = shown
            .into_iter()
            .map(|row| {
                let href = format!(
                    "/studies/{}/cases/{}{which}",
                    encode(&study),
                    encode(&row.id)
                );
                let cells = (0..row.outcomes.len())
                    .map(|i| {
                        let (word, tone) = match row.outcomes[i] {
                            Some(true) => ("pass", "good"),
                            Some(false) => ("fail", "bad"),
                            None => ("–", "none"),
                        };
                        let mut detail = format!(
                            "{} · {}",
                            row.latencies_s[i].map_or_else(|| "–".to_owned(), |s| format!("{s:.2} s")),
                            row.tokens[i].map_or_else(|| "–".to_owned(), |t| format!("{t} token{}", if t == 1 { "" } else { "s" }))
                        );
                        if let Some(gap) = row.gaps.get(i).copied().flatten().filter(|&g| g < NEAR_TIE) {
                            detail.push_str(&format!(" · near-tie (gap {gap:.3})"));
                        }
                        let class = format!("badge {tone}");
                        view! { <td><span class=class>{word}</span><div class="muted small">{detail}</div></td> }
                    })
                    .collect_view();
                view! { <tr><td><a href=href>{row.id.clone()}</a></td><td>{row.category.clone()}</td>{cells}</tr> }
            })
            .collect_view();
        let joined = if filter.candidates.is_empty() {
            candidates.join(",")
        } else {
            filter.candidates.clone()
        };
        let page_href = |p: usize| {
            format!(
                "/studies/{}/compare?version={}&candidates={}&mode={}&category={}&q={}&page={p}#case-count",
                encode(&cmp.study),
                cmp.version,
                encode(&joined),
                encode(&filter.mode),
                encode(&filter.category),
                encode(&filter.search)
            )
        };
        let page_links = || crate::layout::pager(page, pages, &page_href);
        let mode_links = ["disagreements", "failures", "all"]
            .into_iter()
            .map(|m| {
                let href = format!(
                    "/studies/{}/compare?version={}&candidates={}&mode={m}&category={}&q={}",
                    encode(&cmp.study),
                    cmp.version,
                    encode(&joined),
                    encode(&filter.category),
                    encode(&filter.search)
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
        let action = format!("/studies/{}/compare", encode(&cmp.study));
        let header = format!(
            "{} · lock {}",
            cmp.study,
            &cmp.lock_sha256[..12.min(cmp.lock_sha256.len())]
        );
        let study_href = crate::study_url(&cmp.study, Some(cmp.version));
        let criteria = cmp.criteria.clone();
        let attainment = cmp.attainment_target.map_or_else(
            || "none set".to_owned(),
            |a| format!("{} %", num(a * 100.0, 4)),
        );
        view! {
            <p class="crumbs"><a href=study_href>{format!("{} v{}", cmp.study, cmp.version)}</a> " / compare"</p>
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
                            {summary_rows(&records).into_iter().map(|(label, values)| {
                                let cells = values.into_iter().map(|v| view! { <td>{v}</td> }).collect_view();
                                view! { <tr><th scope="row">{label}</th>{cells}</tr> }
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            </section>
            <section class="card">
                <h2>"Quality"</h2>
                {chart(charts.pass_rates, "Pass rate per category with 95 % Wilson intervals")}
                <h3>"Paired comparison (exact McNemar, same cases)"</h3>
                <div class="scroll">
                    <table>
                        <thead><tr><th>"Pair"</th><th>"Both pass"</th><th>"Only first"</th><th>"Only second"</th><th>"Both fail"</th><th>"Verdict"</th></tr></thead>
                        <tbody>{pairs}</tbody>
                    </table>
                </div>
            </section>
            <div class="columns">
                <section class="card">
                    <h2>"Latency"</h2>
                    {chart(charts.ttft, "TTFT distributions overlaid")}
                    <p class="muted small" id="ttft-population">{ttft_population(&candidates, &records)}</p>
                </section>
                <section class="card">
                    <h2>"Goodput under load"</h2>
                    {chart(charts.goodput, "Goodput against offered load")}
                    <p class="muted small">{format!("Attainment target of the study: {attainment} of requests within the SLO. A point under the attainment line misses it at that load.")}</p>
                </section>
            </div>
            <section class="card">
                <h2>"Memory"</h2>
                {chart(charts.memory, "Memory fit")}
            </section>
            <section class="card">
                <h2>"Criteria and identity"</h2>
                <p class="small">"Every column was judged by these criteria; records made under other ones are refused, not compared."</p>
                <dl class="grid">
                    <dt>"Eval set"</dt><dd class="mono small">{criteria.evalset}</dd>
                    <dt>"Workload"</dt><dd class="small">{criteria.workload_words}</dd>
                    <dt>"SLO"</dt><dd class="small">{criteria.slo_words}</dd>
                </dl>
                <div class="scroll">
                    <table class="compare">
                        <thead><tr><th></th>{candidates.iter().map(|c| view! { <th scope="col">{c.clone()}</th> }).collect_view()}</tr></thead>
                        <tbody>
                            {summary_row("Source", &records, |r| r.identity.source.clone())}
                            {summary_row("Architecture", &records, |r| words(&[&r.identity.architecture, &r.identity.quantization, &r.identity.precision], " · "))}
                            {summary_row("Runtime", &records, |r| words(&[&r.identity.runtime, &r.identity.runtime_version], " "))}
                            {summary_row("Weights sha256", &records, |r| r.identity.weights_sha256.clone().unwrap_or_else(|| "–".to_owned()))}
                            {summary_row("Tokenizer sha256", &records, |r| r.identity.tokenizer_sha256.clone().unwrap_or_else(|| "–".to_owned()))}
                            {summary_row("Record sha256", &records, |r| r.record_sha256.clone())}
                        </tbody>
                    </table>
                </div>
            </section>
            <section class="card">
                <h2>"Cases"</h2>
                <nav class="tabs">{mode_links}</nav>
                <form method="get" action=action class="filters">
                    <input type="hidden" name="version" value=cmp.version.to_string()/>
                    <input type="hidden" name="candidates" value=joined.clone()/>
                    <input type="hidden" name="mode" value=filter.mode.clone()/>
                    <select name="category" aria-label="Category">{category_options}</select>
                    <input type="search" name="q" value=filter.search.clone() placeholder="case id contains…" aria-label="Search"/>
                    <button type="submit">"Filter"</button>
                </form>
                <p class="muted small" id="case-count">{count}</p>
                {page_links()}
                <p class="muted small" id="case-times">{times}</p>
                <div class="scroll">
                    <table class="cases">
                        <thead><tr><th>"Case"</th><th>"Category"</th>{candidates.iter().map(|c| view! { <th>{c.clone()}</th> }).collect_view()}</tr></thead>
                        <tbody>{case_rows}</tbody>
                    </table>
                </div>
                {page_links()}
            </section>
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pairs_p_is_never_written_as_zero() {
        assert_eq!(
            pair_verdict(1e-12),
            ("differ (p < 0.001)".to_owned(), "warn")
        );
        assert_eq!(pair_verdict(0.0123).0, "differ (p = 0.012)");
        assert_eq!(
            pair_verdict(0.81),
            ("no significant difference (p = 0.810)".to_owned(), "none")
        );
    }

    fn row(concurrency: Vec<Option<u32>>) -> CaseRow {
        CaseRow {
            id: "c".into(),
            category: "ordinary".into(),
            outcomes: vec![None; concurrency.len()],
            latencies_s: vec![Some(1.0); concurrency.len()],
            tokens: vec![None; concurrency.len()],
            gaps: vec![None; concurrency.len()],
            concurrency,
            disagreement: false,
        }
    }

    /// The cases' times name how many cases shared the engine, per candidate.
    #[test]
    fn the_cases_times_say_how_many_were_in_flight() {
        let names = vec!["smollm2".to_owned(), "gemma3".to_owned()];
        let batched = case_times(
            &names,
            &[row(vec![Some(32), Some(5)]), row(vec![Some(32), Some(8)])],
        );
        assert!(
            batched.contains(
                "shared with the cases in flight beside it (smollm2: up to 32, gemma3: up to 8)"
            ),
            "{batched}"
        );
        assert!(batched.contains("not the model's latency"), "{batched}");
        let alone = case_times(&names, &[row(vec![Some(1), Some(1)])]);
        assert!(alone.ends_with("each case run alone."), "{alone}");
        let mixed = case_times(&names, &[row(vec![Some(1), None])]);
        assert!(
            mixed.contains("(smollm2: alone, gemma3: not told)"),
            "{mixed}"
        );
        let old = case_times(&names, &[row(vec![None, None])]);
        assert_eq!(
            old,
            "Times: each case's wall time in its candidate's quality run."
        );
    }
}
