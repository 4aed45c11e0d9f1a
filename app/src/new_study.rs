//! `/studies/new`: the guided form — a study's criteria field by field, from the stored eval
//! sets and registered candidates (or a stored study's, to start from), with each refusal shown
//! at its field and the study file it makes shown before it is saved.

use leptos::prelude::*;
use shortlist_runner::service::guided::FormChoices;
use shortlist_study::form::{FieldError, OPS, RuleRow, StudyForm, WORKLOAD_SHAPES};
use shortlist_study::rule::Metric;

use crate::layout::document;

/// The errors of one field, as the line under it.
fn error_of(errors: &[FieldError], field: &str) -> Option<String> {
    let why: Vec<&str> = errors
        .iter()
        .filter(|e| e.field == field)
        .map(|e| e.why.as_str())
        .collect();
    (!why.is_empty()).then(|| why.join("; "))
}

/// Each form field's label, by its name.
const LABELS: [(&str, &str); 26] = [
    ("name", "Study name"),
    ("question", "The question it answers"),
    ("evalset", "Eval set version"),
    ("candidate", "Candidates"),
    ("fallback", "Declared fallback (optional)"),
    ("workload", "Workload"),
    ("requests", "Requests"),
    ("prompt_tokens", "Prompt tokens per request"),
    ("output_tokens", "Output tokens per request"),
    ("rate_rps", "Rate (req/s)"),
    ("seed", "Seed"),
    ("replay_rps", "Replay rate (req/s)"),
    ("slo_name", "SLO name"),
    ("ttft_ms", "Time to first token (ms)"),
    ("max_itl_ms", "Worst token gap (ms)"),
    ("tpot_ms", "Time per output token (ms)"),
    ("e2e_ms", "End to end (ms)"),
    ("ordinary_rps", "Ordinary traffic (req/s)"),
    ("peak_rps", "Peak traffic (req/s)"),
    ("attainment_target", "Attainment target"),
    ("context_tokens", "Context (tokens)"),
    ("concurrency", "Concurrent sequences"),
    ("device", "Device kind"),
    ("device_memory_gib", "Device memory (GiB)"),
    ("max_devices", "Most devices per replica"),
    ("currency", "Currency"),
];

/// A field's label (`rule.N.part`: "Disqualifier N+1"); the name itself for an unknown one.
fn label_of(field: &str) -> String {
    if let Some(i) = field
        .strip_prefix("rule.")
        .and_then(|r| r.split('.').next())
        .and_then(|i| i.parse::<usize>().ok())
    {
        return format!("Disqualifier {}", i + 1);
    }
    LABELS
        .iter()
        .find(|(name, _)| *name == field)
        .map_or_else(|| field.to_owned(), |(_, label)| (*label).to_owned())
}

/// The element a field's error points to (a rule row's first input; the first candidate box).
fn anchor_of(field: &str) -> String {
    match field {
        "candidate" => "f-candidates".to_owned(),
        f if f.starts_with("rule.") => {
            format!("f-rule-{}", label_of(f).trim_start_matches("Disqualifier "))
        }
        f => format!("f-{f}"),
    }
}

/// A labelled text input with its hint and error.
fn input(
    errors: &[FieldError],
    name: &'static str,
    value: &str,
    hint: Option<&'static str>,
) -> impl IntoView + use<> {
    let label = label_of(name);
    let error = error_of(errors, name);
    let id = format!("f-{name}");
    let error_id = format!("{id}-error");
    let invalid = error.is_some().then_some("true");
    let described = error.is_some().then(|| error_id.clone());
    view! {
        <div class="field">
            <label for=id.clone()>{label}</label>
            <input id=id name=name value=value.to_owned() autocomplete="off" spellcheck="false"
                aria-invalid=invalid aria-describedby=described/>
            {hint.map(|h| view! { <span class="hint">{h}</span> })}
            {error.map(|e| view! { <span class="field-error" id=error_id>{e}</span> })}
        </div>
    }
}

/// The stored traces as workload options (`trace:SHA256`), newest version first.
fn trace_options(form: &StudyForm, choices: &FormChoices) -> Option<AnyView> {
    if choices.traces.is_empty() {
        return None;
    }
    let options = choices
        .traces
        .iter()
        .flat_map(|t| t.versions.iter().rev().map(move |v| (t.name.as_str(), v)))
        .map(|(name, v)| {
            let value = format!("trace:{}", v.sha256);
            let s = &v.facts.stats;
            let label = format!(
                "{name} v{}: {} requests over {} s, mean {} req/s",
                v.version,
                s.requests,
                shortlist_report::charts::num(s.duration_s, 1),
                s.rate_rps
                    .mean
                    .map_or("—".to_owned(), |r| shortlist_report::charts::num(r, 3))
            );
            let selected = form.workload.eq_ignore_ascii_case(&value);
            view! { <option value=value selected=selected>{label}</option> }
        })
        .collect_view();
    Some(view! { <optgroup label="Recorded traces (stored)">{options}</optgroup> }.into_any())
}

/// The eval set choice: every stored version, newest first within a name.
fn evalset_choice(form: &StudyForm, choices: &FormChoices, errors: &[FieldError]) -> AnyView {
    let error = error_of(errors, "evalset");
    if choices.evalsets.is_empty() {
        return view! {
            <p class="notice warn">"No eval set is stored yet: " <a href="/evalsets/import">"import one"</a> " (a shortlist.evalset.v1 file, or promptfoo, OpenAI evals or lm-evaluation-harness), then come back."</p>
            {error.map(|e| view! { <span class="field-error" id="f-evalset-error">{e}</span> })}
        }
        .into_any();
    }
    let options = choices
        .evalsets
        .iter()
        .flat_map(|s| {
            s.versions.iter().rev().map(move |v| {
                let label = format!(
                    "{} v{} · {} cases · sha256 {}",
                    s.name,
                    v.version,
                    v.cases,
                    v.sha256.get(..12).unwrap_or(&v.sha256)
                );
                let selected = form.evalset == v.sha256;
                view! { <option value=v.sha256.clone() selected=selected>{label}</option> }
            })
        })
        .collect_view();
    let invalid = error.is_some().then_some("true");
    view! {
        <div class="field wide">
            <label for="f-evalset">"Eval set version"</label>
            <select id="f-evalset" name="evalset" aria-invalid=invalid>
                <option value="" selected=form.evalset.is_empty()>"Choose one…"</option>
                {options}
            </select>
            <span class="hint">"The study pins this version by its hash: a later version of the set is another study's."</span>
            {error.map(|e| view! { <span class="field-error" id="f-evalset-error">{e}</span> })}
        </div>
    }
    .into_any()
}

/// The candidates: a box each, ticked when chosen.
fn candidate_choice(form: &StudyForm, choices: &FormChoices, errors: &[FieldError]) -> AnyView {
    let error = error_of(errors, "candidate")
        .map(|e| view! { <span class="field-error" id="f-candidate-error">{e}</span> });
    if choices.candidates.is_empty() {
        return view! {
            <p class="notice warn">"No candidate is registered yet: " <a href="/candidates">"register one"</a> " (a GGUF file, a model folder or an OpenAI-compatible endpoint), then come back."</p>
            {error}
        }
        .into_any();
    }
    let boxes = choices
        .candidates
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let id = format!("f-candidate-{i}");
            let checked = form.candidates.contains(&c.name);
            // An endpoint's identity is its address, which the line under it shows.
            let identity = if c.identity.starts_with("endpoint ") {
                "OpenAI-compatible endpoint".to_owned()
            } else {
                c.identity.clone()
            };
            view! {
                <li>
                    <input type="checkbox" id=id.clone() name="candidate" value=c.name.clone() checked=checked/>
                    <label for=id>
                        <strong>{c.name.clone()}</strong>
                        <span class="small muted">" · " {identity}</span>
                        <span class="mono small muted block">{c.source.clone()}</span>
                    </label>
                </li>
            }
        })
        .collect_view();
    view! {
        <ul class="plain checks" id="f-candidates">{boxes}</ul>
        {error}
    }
    .into_any()
}

/// One disqualifier row: its name, metric, operator and threshold.
fn rule_row(i: usize, row: &RuleRow, errors: &[FieldError]) -> impl IntoView + use<> {
    let field = |part: &str| format!("rule.{i}.{part}");
    let errs: Vec<String> = ["name", "metric", "op", "value"]
        .iter()
        .filter_map(|p| error_of(errors, &field(p)))
        .collect();
    let invalid = (!errs.is_empty()).then_some("true");
    let metrics = Metric::ALL
        .iter()
        .map(|m| {
            let label = format!("{} — {}", m.name(), m.describe());
            view! { <option value=m.name() selected=row.metric == m.name()>{label}</option> }
        })
        .collect_view();
    let ops = OPS
        .iter()
        .map(|op| view! { <option value=*op selected=row.op == *op>{*op}</option> })
        .collect_view();
    let n = i + 1;
    view! {
        <div class="rule-row" role="group" aria-label=format!("Disqualifier {n}")>
            <input id=format!("f-rule-{n}") name=field("name") value=row.name.clone() placeholder="What it means, in your words" aria-label=format!("Disqualifier {n}: its name") autocomplete="off"/>
            <select name=field("metric") aria-label=format!("Disqualifier {n}: metric") aria-invalid=invalid>
                <option value="" selected=row.metric.is_empty()>"(no rule)"</option>
                {metrics}
            </select>
            <select name=field("op") aria-label=format!("Disqualifier {n}: comparison")>{ops}</select>
            <input name=field("value") value=row.value.clone() placeholder="0, 0.05, false, mit, apache-2.0" aria-label=format!("Disqualifier {n}: threshold") autocomplete="off" aria-invalid=invalid/>
            {(!errs.is_empty()).then(|| view! { <span class="field-error">{errs.join("; ")}</span> })}
        </div>
    }
}

/// What the guided form's page shows.
#[derive(Debug, Clone)]
pub struct StudyFormPage {
    /// The fields, as sent or as started.
    pub form: StudyForm,
    pub choices: FormChoices,
    /// The last check's refusals, each at its field.
    pub errors: Vec<FieldError>,
    /// The study file a passing check made.
    pub checked: Option<String>,
    /// The stored study version the fields were filled in from, and what did not carry over.
    pub started_from: Option<(String, u32, Vec<String>)>,
    /// The stored studies' latest versions, offered to fill the form in from.
    pub starts: Vec<(String, u32)>,
}

/// `/studies/new`: the guided form (an error's field `""` is about the form as a whole).
pub fn study_form_page(page: StudyFormPage) -> String {
    let StudyFormPage {
        form,
        choices,
        errors,
        checked,
        started_from,
        starts,
    } = page;
    document("New study", move || {
        let e = &errors;
        let started = started_from.map(|(name, version, left)| {
            let href = crate::study_url(&name, Some(version));
            let left = (!left.is_empty()).then(|| {
                format!(
                    " Not carried over, as the form cannot hold it (write it in the study file): {}.",
                    left.join("; ")
                )
            });
            view! {
                <p class="notice" id="started-from">
                    "Filled in from " <a href=href>{format!("{name} v{version}")}</a>
                    ": give the new study its own name, and change what differs."
                    {left}
                </p>
            }
        });
        let starts = (!starts.is_empty() && started.is_none() && checked.is_none() && e.is_empty())
            .then(|| {
                crate::study_text::start_links(
                    &starts,
                    "start",
                    "Or fill it in from a stored study:",
                )
            });
        let summary = (!e.is_empty()).then(|| {
            let items = e
                .iter()
                .map(|err| {
                    if err.field.is_empty() {
                        return view! { <li>{err.why.clone()}</li> }.into_any();
                    }
                    let href = format!("#{}", anchor_of(&err.field));
                    view! { <li><a href=href>{label_of(&err.field)}</a>": "{err.why.clone()}</li> }
                        .into_any()
                })
                .collect_view();
            let n = e.len();
            let head = if n == 1 {
                "Nothing was stored: one thing to fix.".to_owned()
            } else {
                format!("Nothing was stored: {n} things to fix.")
            };
            view! { <div class="error-box" role="alert"><strong>{head}</strong><ul>{items}</ul></div> }
        });
        let preview = checked.map(|toml| {
            view! {
                <div class="ok-box row-between" role="status">
                    <span>"It checks out: the eval set, every candidate's model and the workload were read. Below is the study file it makes; saving stores it as a draft (nothing runs until the study is locked)."</span>
                    <button type="submit" form="study-form" name="action" value="save">"Save draft"</button>
                </div>
                <details open><summary>"The study file"</summary><pre class="text" id="study-file">{toml}</pre></details>
            }
        });
        let rules = form
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| rule_row(i, r, e))
            .collect_view();
        let shapes = WORKLOAD_SHAPES
            .iter()
            .map(|(value, label)| {
                view! { <option value=*value selected=form.workload == *value>{*label}</option> }
            })
            .collect_view();
        let traces = trace_options(&form, &choices);
        let question_error = error_of(e, "question");
        view! {
            <h1>"New study"</h1>
            <nav class="tabs" aria-label="How to write it">
                <a class="tab active" href="/studies/new" aria-current="page">"Fill in the form"</a>
                <a class="tab" href="/studies/new?as=file">"Paste or upload a study file"</a>
            </nav>
            <p class="question">"Write down what would disqualify a candidate before anything runs. Locking the study freezes all of it under a hash; runs start only on a locked study."</p>
            {starts}
            {started}
            {summary}
            {preview}
            <form method="post" action="/studies/new" class="guided" id="study-form">
                <fieldset class="card">
                    <legend>"The question"</legend>
                    <div class="fields one">
                        {input(e, "name", &form.name, Some("Letters, digits, - _ . — part of its address"))}
                    </div>
                    <div class="field wide">
                        <label for="f-question">"The question it answers"</label>
                        <textarea id="f-question" name="question" rows="2" class="prose" placeholder="Which model can answer our support chats correctly, within an interactive SLO, on the hardware we have?" aria-invalid=question_error.is_some().then_some("true")>{form.question.clone()}</textarea>
                        {question_error.map(|q| view! { <span class="field-error">{q}</span> })}
                    </div>
                    {evalset_choice(&form, &choices, e)}
                </fieldset>
                <fieldset class="card">
                    <legend>"Candidates"</legend>
                    {candidate_choice(&form, &choices, e)}
                    <div class="fields one">
                        {input(e, "fallback", &form.fallback, Some("What happens if the chosen model fails in production"))}
                    </div>
                </fieldset>
                <fieldset class="card">
                    <legend>"Workload (open loop)"</legend>
                    <div class="field wide">
                        <label for="f-workload">"Workload"</label>
                        <select id="f-workload" name="workload">
                            <optgroup label="Practice shapes (synthesized)">{shapes}</optgroup>
                            {traces}
                        </select>
                        <span class="hint">"A practice shape is synthesized from the seed below, the same for every candidate. A recorded trace replays its own requests at the replay rate. "<a href="/workloads#upload">"Upload a trace"</a></span>
                    </div>
                    <p class="small muted">"For a practice shape:"</p>
                    <div class="fields">
                        {input(e, "requests", &form.requests, None)}
                        {input(e, "prompt_tokens", &form.prompt_tokens, Some("On average"))}
                        {input(e, "output_tokens", &form.output_tokens, Some("On average; generated exactly"))}
                        {input(e, "rate_rps", &form.rate_rps, Some("Mean arrival rate"))}
                        {input(e, "seed", &form.seed, None)}
                    </div>
                    <p class="small muted">"For a recorded trace:"</p>
                    <div class="fields">
                        {input(e, "replay_rps", &form.replay_rps, Some("Blank: the trace's own; a rate rescales it, its shape kept"))}
                    </div>
                </fieldset>
                <fieldset class="card">
                    <legend>"SLO"</legend>
                    <p class="small muted">"A request counts toward goodput only when it meets every bound you set; leave a bound blank to set none."</p>
                    <div class="fields">
                        {input(e, "slo_name", &form.slo_name, None)}
                        {input(e, "ttft_ms", &form.ttft_ms, None)}
                        {input(e, "max_itl_ms", &form.max_itl_ms, None)}
                        {input(e, "tpot_ms", &form.tpot_ms, None)}
                        {input(e, "e2e_ms", &form.e2e_ms, None)}
                    </div>
                </fieldset>
                <fieldset class="card">
                    <legend>"Traffic and memory"</legend>
                    <div class="fields">
                        {input(e, "ordinary_rps", &form.ordinary_rps, None)}
                        {input(e, "peak_rps", &form.peak_rps, Some("The load run's target rate"))}
                        {input(e, "attainment_target", &form.attainment_target, Some("Share of requests that must meet the SLO"))}
                        {input(e, "context_tokens", &form.context_tokens, None)}
                        {input(e, "concurrency", &form.concurrency, None)}
                        {input(e, "device", &form.device, Some("e.g. cpu, H200"))}
                        {input(e, "device_memory_gib", &form.device_memory_gib, None)}
                        {input(e, "max_devices", &form.max_devices, None)}
                        {input(e, "currency", &form.currency, None)}
                    </div>
                </fieldset>
                <fieldset class="card">
                    <legend>"Disqualifiers"</legend>
                    <p class="small muted">"A candidate is disqualified when any rule's condition holds, e.g. high_value_failures > 0. For in and not_in, list the values with commas. Rows left at (no rule) are skipped."</p>
                    <div class="rules">{rules}</div>
                </fieldset>
                <div class="actions">
                    <button type="submit" name="action" value="check" class="secondary">"Check"</button>
                    <button type="submit" name="action" value="save">"Save draft"</button>
                </div>
            </form>
        }
    })
}
