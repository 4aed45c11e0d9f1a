//! `/workloads`: the recorded traces a study can replay — each version with what it holds
//! (requests, rates, lengths, prefix reuse) and a picture of its arrivals — and the upload
//! form (a trace of ours, or a public one converted) with a preview first.

use leptos::prelude::*;
use shortlist_report::charts::num;
use shortlist_report::workload::arrivals_svg;
use shortlist_runner::service::traces::{TraceFacts, TraceFormat, TracePreview, TraceSummary};

use crate::catalog::uses;
use crate::encode;
use crate::layout::document;

/// What the upload form was filled with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceForm {
    /// A [`TraceFormat`] name.
    pub format: String,
    pub name: String,
    pub text: String,
    /// The size of an upload previewed but too large to send back in the form (bytes): the
    /// person chooses the file again to store it.
    pub not_kept: Option<usize>,
}

/// "1,234".
fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in the unit that reads best.
fn duration(s: f64) -> String {
    if s >= 7200.0 {
        format!("{} h", num(s / 3600.0, 1))
    } else if s >= 180.0 {
        format!("{} min", num(s / 60.0, 1))
    } else {
        format!("{} s", num(s, 2))
    }
}

/// The facts of a trace as a definition list and its arrivals chart.
fn facts_view(f: &TraceFacts) -> impl IntoView + use<> {
    let s = &f.stats;
    let opt = |v: Option<f64>, d: usize| v.map_or_else(|| "—".to_owned(), |v| num(v, d));
    let lengths = |ps: [Option<u64>; 3]| ps.map(|p| p.map_or("—".to_owned(), count)).join(" / ");
    let rows = vec![
        ("Requests", count(s.requests)),
        ("Duration", duration(s.duration_s)),
        (
            "Rate (req/s)",
            format!(
                "mean {} · peak 1 s {} · peak 10 s {}",
                opt(s.rate_rps.mean, 3),
                num(s.rate_rps.peak_1s, 3),
                num(s.rate_rps.peak_10s, 3)
            ),
        ),
        ("Inter-arrival CV", opt(s.interarrival_cv, 2)),
        (
            "Prompt tokens",
            format!(
                "{} sent · {} distinct",
                count(s.input_tokens.sent),
                count(s.input_tokens.distinct)
            ),
        ),
        ("Output tokens", count(s.output_tokens)),
        (
            "Prompt length p50 / p90 / p99",
            lengths([s.input_len.p50, s.input_len.p90, s.input_len.p99]),
        ),
        (
            "Output length p50 / p90 / p99",
            lengths([s.output_len.p50, s.output_len.p90, s.output_len.p99]),
        ),
        (
            "Prefix reuse",
            s.prefix_reuse.map_or("—".to_owned(), |r| {
                format!("{} % of prompt tokens", num(r * 100.0, 1))
            }),
        ),
        (
            "Sessions",
            if s.sessions == 0 {
                "none".to_owned()
            } else {
                count(s.sessions)
            },
        ),
        (
            "Failed in the source",
            if s.failed == 0 {
                "none".to_owned()
            } else {
                format!("{} (kept, marked failed)", count(s.failed))
            },
        ),
    ];
    let rows = rows
        .into_iter()
        .map(|(k, v)| view! { <dt>{k}</dt><dd>{v}</dd> })
        .collect_view();
    let source = f.source.clone().map(|src| {
        view! { <dt>"Source"</dt><dd class="mono small">{src}</dd> }
    });
    let chart = arrivals_svg(f.arrivals.bin_s, &f.arrivals.counts)
        .unwrap_or_else(|e| format!("<p class=\"muted\">{e}</p>"));
    view! {
        <div class="trace-facts">
            <dl class="grid">{rows}{source}</dl>
            <figure class="chart" data-chart="arrivals" aria-label="Requests arriving over the trace's time" inner_html=chart></figure>
        </div>
    }
}

/// `/workloads`: every stored trace version, and the upload form with its preview;
/// `max_bytes`: the largest upload the server takes there.
pub fn workloads_page(
    traces: Vec<TraceSummary>,
    form: TraceForm,
    preview: Option<TracePreview>,
    error: Option<String>,
    max_bytes: usize,
) -> String {
    document("Workloads", move || {
        let empty = traces.is_empty();
        let stored = traces
            .into_iter()
            .flat_map(|t| {
                let name = t.name.clone();
                t.versions.into_iter().rev().map(move |v| (name.clone(), v))
            })
            .map(|(name, v)| {
                let title = format!("{name} v{}", v.version);
                let id = format!("trace-{}-v{}", name, v.version);
                let download = format!("/workloads/{}/trace.jsonl?version={}", encode(&name), v.version);
                let use_href = format!("/studies/new?workload=trace:{}#f-workload", v.sha256);
                let remove_action = format!("/workloads/{}/remove", encode(&name));
                let question = format!(
                    "Remove {title} ({} requests) from the workbench? No study pins it; the other versions stay.",
                    v.facts.stats.requests
                );
                let removable = v.used_by.is_empty();
                view! {
                    <section class="card" id=id>
                        <h2>{title}</h2>
                        <p class="mono small">"sha256 " {v.sha256.clone()}</p>
                        {facts_view(&v.facts)}
                        <p>"Used by: " {uses(v.used_by, false)}</p>
                        <p class="actions">
                            <a class="button" href=use_href>"Use in a new study"</a>
                            <a class="button secondary" href=download download="">"Download (JSONL)"</a>
                        </p>
                        {removable.then(|| view! {
                            <form method="post" action=remove_action data-confirm=question class="actions">
                                <input type="hidden" name="version" value=v.version.to_string()/>
                                <button type="submit" class="secondary danger">"Remove this version"</button>
                            </form>
                        })}
                    </section>
                }
            })
            .collect_view();
        let options = TraceFormat::ALL
            .iter()
            .map(|(value, label)| {
                let selected = form.format == *value;
                view! { <option value=*value selected=selected>{*label}</option> }
            })
            .collect_view();
        let preview_view = preview.map(|p| {
            let note = p.stored.map(|(v, new)| {
                let href = format!("#trace-{}-v{v}", p.name);
                let line = if new {
                    format!("Stored as {} v{v}.", p.name)
                } else {
                    format!("Already stored as {} v{v} (same content).", p.name)
                };
                view! { <p class="ok-box" role="status">{line}" "<a href=href>"See it below"</a></p> }
            });
            let converted = (p.format != "shortlist").then(|| {
                view! { <p class="small muted">{format!("Converted from the {} format; the study pins the converted trace's hash.", p.format)}</p> }
            });
            view! {
                <section class="card" id="preview">
                    <h2>{format!("Preview: {}", p.name)}</h2>
                    {note}
                    {converted}
                    <p class="mono small">"sha256 " {p.sha256.clone()}</p>
                    {facts_view(&p.facts)}
                </section>
            }
        });
        view! {
            <h1>"Workloads"</h1>
            <p class="question">"A study replays one workload against every candidate: a practice shape synthesized from a seed (chosen in the new-study form), or your product's own traffic as a recorded trace, kept here. A study pins a trace by the SHA-256 of its bytes."</p>
            {error.map(|e| view! { <p class="error-box" role="alert">{crate::layout::code_spans(&e)}</p> })}
            {preview_view}
            {empty.then(|| view! { <section class="card"><p class="muted">"No trace is stored yet. Upload one below; a study whose file names a trace stores it too."</p></section> })}
            {stored}
            <section class="card" id="upload">
                <h2>"Upload a trace"</h2>
                <p>"A trace of ours (shortlist.trace.v1, as " <code>"shortlist trace synth"</code> " and " <code>"trace import"</code> " write it), or a public one converted on the way. Preview first; nothing is stored until you press Store."</p>
                <form method="post" action="/workloads" enctype="multipart/form-data" class="stack">
                    <label for="format">"Format"</label>
                    <select id="format" name="format">{options}</select>
                    <label for="name">"Name (blank: the name in the trace's header)"</label>
                    <input id="name" name="name" value=form.name.clone() placeholder="support-traffic" autocomplete="off"/>
                    <label for="file">"File"</label>
                    <input id="file" type="file" name="file" data-max-bytes=max_bytes.to_string() data-larger="the command line stores a trace of any size: shortlist trace store FILE" aria-describedby="file-limit"/>
                    <span class="hint" id="file-limit">{format!("At most {} here; the command line stores a trace of any size: ", crate::layout::size(max_bytes))} <code>"shortlist trace store FILE"</code></span>
                    <label for="text">"…or its text"</label>
                    <textarea id="text" name="text" rows="8" spellcheck="false">{form.text.clone()}</textarea>
                    {form.not_kept.map(|n| view! {
                        <p class="notice" role="status">{format!("The previewed file ({} MiB) is too large to keep in the form: choose it again, then press Store.", num(n as f64 / 1_048_576.0, 1))}</p>
                    })}
                    <div class="row">
                        <button type="submit" name="action" value="preview">"Preview"</button>
                        <button type="submit" name="action" value="store" class="secondary">"Store"</button>
                    </div>
                </form>
            </section>
        }
    })
}
