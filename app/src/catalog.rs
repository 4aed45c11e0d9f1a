//! `/evalsets`, `/evalsets/{name}`, `/evalsets/import`, `/candidates` and `/candidates/{name}`:
//! what a team keeps besides its studies. Case text, check parameters and model names are
//! untrusted and reach the page only as escaped text.

use leptos::prelude::*;
use shortlist_runner::engines::EndpointCheck;
use shortlist_runner::service::ImportFormat;
use shortlist_runner::service::views::{
    CandidateDetail, CandidateSummary, EvalCaseView, EvalSetSummary, EvalSetView, ImportPreview,
    StudyUse,
};

use crate::layout::{code_spans, document, list_table, pager};
use crate::{encode, verdict_word};

/// The studies that use something, as links.
pub(crate) fn uses(list: Vec<StudyUse>, show_verdict: bool) -> AnyView {
    if list.is_empty() {
        return view! { <span class="muted">"no study yet"</span> }.into_any();
    }
    list.into_iter()
        .map(|u| {
            let href = crate::study_url(&u.study, Some(u.version));
            let label = format!(
                "{} v{}{}",
                u.study,
                u.version,
                if u.locked { "" } else { " (draft)" }
            );
            let verdict = show_verdict.then(|| {
                let (word, tone) = verdict_word(u.verdict);
                let class = format!("badge {tone}");
                let generation = u.record_generation.map(
                    |g| view! { <span class="muted small">{format!(" generation {g}")}</span> },
                );
                view! { " "<span class=class>{word}</span>{generation} }
            });
            view! { <div><a href=href>{label}</a>{verdict}</div> }
        })
        .collect_view()
        .into_any()
}

fn categories_text(cats: &[(String, usize)]) -> String {
    cats.iter()
        .map(|(c, n)| format!("{c} {n}"))
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The eval sets list's columns.
const EVALSET_COLUMNS: &[&str] = &[
    "Eval set",
    "Versions (sha256)",
    "Cases",
    "Categories (latest)",
    "Used by",
];
/// The candidates list's columns.
const CANDIDATE_COLUMNS: &[&str] = &[
    "Candidate",
    "Versions",
    "Source",
    "Identity",
    "Studies and verdicts",
];

/// `/evalsets`: every eval set with its versions and the studies that pin them.
pub fn evalsets_page(sets: Vec<EvalSetSummary>) -> String {
    document("Eval sets", move || {
        let empty = sets.is_empty();
        let rows = sets
            .into_iter()
            .map(|s| {
                let href = format!("/evalsets/{}", encode(&s.name));
                let latest = s.versions.last().cloned();
                let versions = s
                    .versions
                    .iter()
                    .map(|v| {
                        let href = format!("/evalsets/{}?version={}", encode(&s.name), v.version);
                        let label =
                            format!("v{} {}", v.version, &v.sha256[..12.min(v.sha256.len())]);
                        view! { <div><a class="mono small" href=href>{label}</a></div> }
                    })
                    .collect_view();
                let (cases, cats) = latest.map_or((String::new(), String::new()), |v| {
                    (v.cases.to_string(), categories_text(&v.categories))
                });
                view! {
                    <tr>
                        <td data-label=EVALSET_COLUMNS[0]><a href=href>{s.name.clone()}</a></td>
                        <td data-label=EVALSET_COLUMNS[1]>{versions}</td>
                        <td data-label=EVALSET_COLUMNS[2]>{cases}</td>
                        <td data-label=EVALSET_COLUMNS[3] class="small">{cats}</td>
                        <td data-label=EVALSET_COLUMNS[4]>{uses(s.used_by, false)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Eval sets"</h1>
            <section class="card">
                {empty.then(|| view! { <p class="muted">"No eval set is stored yet. A study stores the set it pins; or import one."</p> })}
                {(!empty).then(|| list_table(EVALSET_COLUMNS, rows))}
                <p><a class="button" href="/evalsets/import">"Import an eval set"</a></p>
            </section>
        }
    })
}

/// `/evalsets/{name}`: one version's cases with their text and checks, by category — a large
/// set a few cases per category, one category or a search's matches a page at a time.
pub fn evalset_page(v: EvalSetView, filter: CaseFilter) -> String {
    let title = format!("{} v{}", v.name, v.version);
    document(&title.clone(), move || {
        let name = v.name.clone();
        let removable = v.used_by.is_empty();
        let download_href = format!(
            "/evalsets/{}/evalset.yaml?version={}",
            encode(&v.name),
            v.version
        );
        let edit_href = format!(
            "/evalsets/import?from={}&version={}",
            encode(&v.name),
            v.version
        );
        // The stored version before this one, to see what this one changed.
        let changes_href = v
            .versions
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| *n < v.version)
            .max()
            .map(|prev| (crate::evalset_diff_url(&v.name, prev, v.version), prev));
        let remove_action = format!("/evalsets/{}/remove", encode(&v.name));
        let remove_question = format!(
            "Remove {} v{} ({} cases) from the workbench? No study pins it; the other versions stay.",
            v.name,
            v.version,
            v.cases.len()
        );
        let versions = v
            .versions
            .iter()
            .map(|(n, sha)| {
                let href = format!("/evalsets/{}?version={n}", encode(&name));
                let class = if *n == v.version { "mono small active" } else { "mono small" };
                view! { <li><a class=class href=href>{format!("v{n}")}</a>" "<span class="mono small">{sha.clone()}</span></li> }
            })
            .collect_view();
        let cases = case_sections(&v.name, v.version, &v.categories, v.cases, &filter);
        let desc = v.description.clone();
        view! {
            <p class="crumbs"><a href="/evalsets">"Eval sets"</a> " / " {v.name.clone()}</p>
            <h1>{title.clone()}</h1>
            {desc.map(|d| view! { <p class="question">{d}</p> })}
            <div class="columns">
                <section class="card">
                    <h2>"Versions"</h2>
                    <ul class="plain">{versions}</ul>
                </section>
                <section class="card">
                    <h2>"This version"</h2>
                    <dl class="grid">
                        <dt>"sha256"</dt><dd class="mono small">{v.sha256.clone()}</dd>
                        <dt>"Categories"</dt><dd>{categories_text(&v.categories)}</dd>
                        <dt>"Used by"</dt><dd>{uses(v.used_by, false)}</dd>
                    </dl>
                    <p class="actions">
                        <a class="button secondary" href=download_href.clone() id="download" download="">"Download (YAML)"</a>
                        <a class="button secondary" href=edit_href.clone() id="edit">"Edit as the next version…"</a>
                        {changes_href.map(|(href, prev)| view! { <a class="button secondary" href=href id="changes">{format!("Changes from v{prev}")}</a> })}
                    </p>
                    {removable.then(|| view! {
                        <form method="post" action=remove_action.clone() data-confirm=remove_question.clone() class="actions">
                            <input type="hidden" name="version" value=v.version.to_string()/>
                            <button type="submit" class="secondary danger" id="remove">"Remove this version"</button>
                        </form>
                    })}
                    {(!removable).then(|| view! {
                        <p class="muted small">"Remove is offered once no study version pins it: a study's eval set is part of its criteria."</p>
                    })}
                </section>
            </div>
            {cases}
        }
    })
}

/// Which of an eval set's cases its page shows: one category's, those whose id or text holds
/// `q` (any case), and which page of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaseFilter {
    pub category: Option<String>,
    pub q: Option<String>,
    /// From 1.
    pub page: usize,
}

/// A set of at most this many cases is shown whole, each case unfolded up to 40.
const SHOWN_WHOLE: usize = 200;
/// A larger set shows this many cases of each category, each category's whole list a link.
const CASES_PER_CATEGORY: usize = 20;
/// One category's cases, or a search's, a page at a time.
pub const CASES_PER_PAGE: usize = 100;

/// The cases part of an eval set's page: small sets whole; larger ones a search form, a few
/// cases per category and each category's list (or a search's matches) a page at a time.
fn case_sections(
    name: &str,
    version: u32,
    categories: &[(String, usize)],
    cases: Vec<EvalCaseView>,
    filter: &CaseFilter,
) -> AnyView {
    let total = cases.len();
    let q = filter.q.as_deref().map(str::trim).filter(|q| !q.is_empty());
    let category = filter.category.as_deref().filter(|c| !c.is_empty());
    let base = format!("/evalsets/{}?version={version}", encode(name));
    if total <= SHOWN_WHOLE && q.is_none() && category.is_none() {
        // A small set is shown whole; a larger one keeps each case folded until asked for.
        let open = total <= 40;
        return by_category(cases)
            .into_iter()
            .map(|(cat, list)| {
                let heading = cases_heading(&cat, list.len());
                let items = list.into_iter().map(|c| case_item(c, open)).collect_view();
                view! { <section class="card"><h2>{heading}</h2>{items}</section> }
            })
            .collect_view()
            .into_any();
    }
    let options = categories
        .iter()
        .map(|(c, n)| {
            let selected = category == Some(c.as_str());
            view! { <option value=c.clone() selected=selected>{format!("{c} ({n})")}</option> }
        })
        .collect_view();
    let search = view! {
        <section class="card" id="cases">
            <h2>{format!("Cases ({total})")}</h2>
            <form method="get" action=format!("/evalsets/{}", encode(name)) class="row search">
                <input type="hidden" name="version" value=version.to_string()/>
                <label for="q" class="small muted">"Find"</label>
                <input id="q" name="q" type="search" value=q.unwrap_or_default().to_owned() placeholder="a case id or words from its text" autocomplete="off"/>
                <span class="pair">
                    <label for="category" class="small muted">"in"</label>
                    <select id="category" name="category">
                        <option value="" selected=category.is_none()>"every category"</option>
                        {options}
                    </select>
                    <button type="submit" class="secondary">"Show"</button>
                </span>
            </form>
        </section>
    };
    if q.is_none() && category.is_none() {
        // The first cases of each category, each category's list a link away.
        let sections = by_category(cases)
            .into_iter()
            .map(|(cat, list)| {
                let n = list.len();
                let heading = cases_heading(&cat, n);
                let all = format!("{base}&category={}#cases", encode(&cat));
                let items = list
                    .into_iter()
                    .take(CASES_PER_CATEGORY)
                    .map(|c| case_item(c, false))
                    .collect_view();
                let more = (n > CASES_PER_CATEGORY).then(|| view! {
                    <p class="small more">{format!("The first {CASES_PER_CATEGORY} of {n}. ")}<a href=all>{format!("All {n} cases of {cat}")}</a></p>
                });
                view! { <section class="card"><h2>{heading}</h2>{items}{more}</section> }
            })
            .collect_view();
        return view! { {search}{sections} }.into_any();
    }
    let needle = q.map(str::to_lowercase);
    let matching: Vec<EvalCaseView> = cases
        .into_iter()
        .filter(|c| category.is_none_or(|k| c.category == k))
        .filter(|c| needle.as_deref().is_none_or(|n| case_matches(c, n)))
        .collect();
    let found = matching.len();
    let pages = found.div_ceil(CASES_PER_PAGE).max(1);
    let page = filter.page.clamp(1, pages);
    let what = match (category, q) {
        (Some(c), Some(q)) => format!("{found} cases of {c} holding “{q}”"),
        (Some(c), None) => cases_heading(c, found),
        (None, Some(q)) => format!("{found} cases holding “{q}”"),
        (None, None) => unreachable!("a filter is set here"),
    };
    let link = |p: usize| {
        let mut href = base.clone();
        if let Some(c) = category {
            href.push_str(&format!("&category={}", encode(c)));
        }
        if let Some(q) = q {
            href.push_str(&format!("&q={}", encode(q)));
        }
        href.push_str(&format!("&page={p}#cases"));
        href
    };
    let page_links = || pager(page, pages, &link);
    let items = matching
        .into_iter()
        .skip((page - 1) * CASES_PER_PAGE)
        .take(CASES_PER_PAGE)
        .map(|c| case_item(c, false))
        .collect_view();
    let empty = (found == 0).then(|| view! { <p class="muted">"No case matches."</p> });
    let back = format!("{base}#cases");
    view! {
        {search}
        <section class="card">
            <h2>{what}</h2>
            <p class="small"><a href=back>"Every category"</a></p>
            {page_links()}
            {empty}
            {items}
            {page_links()}
        </section>
    }
    .into_any()
}

/// `cat · N cases`.
fn cases_heading(category: &str, n: usize) -> String {
    format!("{category} · {n} case{}", if n == 1 { "" } else { "s" })
}

/// Cases grouped by category, in the order the categories first appear.
fn by_category(cases: Vec<EvalCaseView>) -> Vec<(String, Vec<EvalCaseView>)> {
    let mut groups: Vec<(String, Vec<EvalCaseView>)> = Vec::new();
    for c in cases {
        match groups.iter_mut().find(|(k, _)| *k == c.category) {
            Some((_, list)) => list.push(c),
            None => groups.push((c.category.clone(), vec![c])),
        }
    }
    groups
}

/// Whether a case's id or text holds `needle` (lower case), ignoring case.
fn case_matches(c: &EvalCaseView, needle: &str) -> bool {
    c.id.to_lowercase().contains(needle)
        || c.messages
            .iter()
            .any(|(_, text)| text.to_lowercase().contains(needle))
        || c.system
            .as_deref()
            .is_some_and(|s| s.to_lowercase().contains(needle))
}

/// One case, folded under its id unless `open`: its messages, tools and checks.
fn case_item(c: EvalCaseView, open: bool) -> impl IntoView {
    let messages = c
        .messages
        .into_iter()
        .map(|(role, text)| view! { <div class="msg"><span class="role">{role}</span><pre class="text">{text}</pre></div> })
        .collect_view();
    let checks = c
        .checks
        .into_iter()
        .map(
            |(n, json)| view! { <li><strong>{n}</strong>" "<code class="small">{json}</code></li> },
        )
        .collect_view();
    let tools = (!c.tools.is_empty())
        .then(|| view! { <p class="small">"Tools: " {c.tools.join(", ")}</p> });
    let system = c.system.map(|s| view! { <div class="msg"><span class="role">"system"</span><pre class="text">{s}</pre></div> });
    view! {
        <details class="case-item" open=open>
            <summary><span class="mono">{c.id}</span></summary>
            {system}
            {messages}
            {tools}
            <ul class="checks">{checks}</ul>
        </details>
    }
}

/// What the import form was filled with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportForm {
    /// `shortlist` (an eval set's own YAML) or an [`ImportFormat`] name.
    pub format: String,
    pub name: String,
    pub text: String,
    pub answers: String,
    /// The stored version the text was taken from, to edit into the set's next version.
    pub editing: Option<(String, u32)>,
}

/// `/evalsets/import`: upload or paste another tool's file, see what it becomes (cases by
/// category, every unmapped item), then store it.
pub fn import_page(
    form: ImportForm,
    preview: Option<ImportPreview>,
    error: Option<String>,
    max_bytes: usize,
) -> String {
    document("Import an eval set", move || {
        let editing = form.editing.clone();
        let options = ImportFormat::ALL
            .iter()
            .map(|(_, n)| {
                let label = match *n {
                    "shortlist" => "shortlist.evalset.v1 (YAML)",
                    "promptfoo" => "promptfoo tests (YAML)",
                    "openai-evals" => "OpenAI evals samples (JSONL)",
                    "inspect" => "inspect samples (JSONL)",
                    "inspect-csv" => "inspect samples (CSV)",
                    _ => "BFCL questions (JSONL)",
                };
                (*n, label)
            })
            .map(|(value, label)| {
                let selected = form.format == value;
                view! { <option value=value selected=selected>{label}</option> }
            })
            .collect_view();
        let preview_view = preview.map(|p| {
            let stored = p.stored.map(|(v, new)| {
                let href = format!("/evalsets/{}?version={v}", encode(&p.name));
                let line = if new { format!("Stored as {} v{v}.", p.name) } else { format!("Already stored as {} v{v} (same content).", p.name) };
                view! { <p class="ok-box" role="status">{line}" "<a href=href>"Open it"</a></p> }
            });
            let unmapped = p
                .unmapped
                .iter()
                .map(|u| view! { <tr><td class="mono small">{u.case.clone()}</td><td>{u.what.clone()}</td><td>{u.reason.clone()}</td></tr> })
                .collect_view();
            let notes = p.notes.iter().map(|n| view! { <li>{n.clone()}</li> }).collect_view();
            let unmapped_count = match p.unmapped.len() {
                0 => "Unmapped: none; every item became a case".to_owned(),
                1 => "Unmapped: 1 item".to_owned(),
                n => format!("Unmapped: {n} items"),
            };
            view! {
                <section class="card">
                    <h2>"Preview"</h2>
                    {stored}
                    <dl class="grid">
                        <dt>"Name"</dt><dd>{p.name.clone()}</dd>
                        <dt>"Cases"</dt><dd>{p.cases.to_string()}</dd>
                        <dt>"Categories"</dt><dd>{categories_text(&p.categories)}</dd>
                        <dt>"sha256"</dt><dd class="mono small">{p.sha256.clone()}</dd>
                    </dl>
                    {p.changes.as_ref().map(|c| {
                        let title = format!("Against the stored {} {}", c.name, c.from.label());
                        view! { <h3>{title}</h3>{crate::changes::summary(c)}{crate::changes::changes(c)} }
                    })}
                    <h3>{unmapped_count}</h3>
                    {(!p.unmapped.is_empty()).then(|| view! {
                        <div class="scroll"><table>
                            <thead><tr><th>"Case"</th><th>"What"</th><th>"Why"</th></tr></thead>
                            <tbody>{unmapped}</tbody>
                        </table></div>
                    })}
                    {(!p.notes.is_empty()).then(|| view! { <h3>"Notes"</h3><ul>{notes}</ul> })}
                    <details><summary>"The eval set (YAML)"</summary><pre class="text">{p.yaml.clone()}</pre></details>
                </section>
            }
        });
        view! {
            <p class="crumbs"><a href="/evalsets">"Eval sets"</a> " / import"</p>
            <h1>"Import an eval set"</h1>
            <section class="card">
                <p>"Upload or paste a file from promptfoo, OpenAI evals, inspect or BFCL (or an eval set of ours). Preview first: what could not be mapped is listed item by item; nothing is stored until you press Store."</p>
                {editing.map(|(name, v)| {
                    let href = format!("/evalsets/{}?version={v}", encode(&name));
                    view! {
                        <p class="notice" role="status">
                            "The text of " <a href=href>{format!("{name} v{v}")}</a> " to edit. Stored with changed cases, it becomes the set's next version; the studies that pin v" {v.to_string()} " keep it. Unchanged, it stores nothing."
                        </p>
                    }
                })}
                {error.map(|e| view! { <p class="error-box" role="alert">{crate::layout::code_spans(&e)}</p> })}
                <form method="post" action="/evalsets/import" enctype="multipart/form-data" class="stack">
                    <label for="format">"Format"</label>
                    <select id="format" name="format">{options}</select>
                    <label for="name">"Name of the eval set"</label>
                    <input id="name" name="name" value=form.name.clone() placeholder="support-v2" autocomplete="off"/>
                    <label for="file">"File"</label>
                    <input id="file" type="file" name="file" data-max-bytes=max_bytes.to_string() data-larger="the command line stores an eval set of any size: shortlist eval store FILE" aria-describedby="file-limit"/>
                    <span class="hint" id="file-limit">{format!("At most {} here; the command line stores an eval set of any size: ", crate::layout::size(max_bytes))} <code>"shortlist eval store FILE"</code></span>
                    <label for="text">"…or its text"</label>
                    <textarea id="text" name="text" rows="10" spellcheck="false">{form.text.clone()}</textarea>
                    <label for="answers">"BFCL possible answers (optional file)"</label>
                    <input id="answers" type="file" name="answers"/>
                    <div class="row">
                        <button type="submit" name="action" value="preview">"Preview"</button>
                        <button type="submit" name="action" value="store" class="secondary">"Store"</button>
                    </div>
                </form>
            </section>
            {preview_view}
        }
    })
}

/// What the register form was filled with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterForm {
    pub name: String,
    pub source: String,
    pub price: String,
}

/// `/candidates`: stored candidate configurations, and the form that registers one.
pub fn candidates_page(
    list: Vec<CandidateSummary>,
    form: RegisterForm,
    error: Option<String>,
) -> String {
    document("Candidates", move || {
        let empty = list.is_empty();
        let existing = list
            .iter()
            .find(|c| c.name == form.name)
            .map(|c| (c.name.clone(), c.versions));
        let rows = list
            .into_iter()
            .map(|c| {
                let href = format!("/candidates/{}", encode(&c.name));
                view! {
                    <tr>
                        <td data-label=CANDIDATE_COLUMNS[0]><a href=href>{c.name.clone()}</a></td>
                        <td data-label=CANDIDATE_COLUMNS[1]>{c.versions.to_string()}</td>
                        <td data-label=CANDIDATE_COLUMNS[2] class="mono small">{c.source.clone()}</td>
                        <td data-label=CANDIDATE_COLUMNS[3] class="small">{c.identity.clone()}</td>
                        <td data-label=CANDIDATE_COLUMNS[4]>{uses(c.used_by, true)}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h1>"Candidates"</h1>
            <section class="card">
                {empty.then(|| view! { <p class="muted">"No candidate is stored yet."</p> })}
                {(!empty).then(|| list_table(CANDIDATE_COLUMNS, rows))}
            </section>
            <section class="card" id="register">
                <h2>"Register a candidate"</h2>
                {existing.map(|(name, versions)| view! {
                    <p class="notice" role="status">
                        {format!("{name} is registered ({versions} version{}). ", if versions == 1 { "" } else { "s" })}
                        "A changed source or price becomes its next version; a study runs the candidates its own file names, so locked studies are not changed."
                    </p>
                })}
                <p class="small">"A GGUF file (" <code>"gguf:PATH"</code> "), a model folder holding one (" <code>"folder:PATH"</code> "), or an OpenAI-compatible endpoint (" <code>"http://host:port#MODEL"</code> "). A GGUF file is read for what it says about itself. Paths are on the server."</p>
                {error.map(|e| view! { <p class="error-box" role="alert">{crate::layout::code_spans(&e)}</p> })}
                <form method="post" action="/candidates" class="stack">
                    <label for="cname">"Name"</label>
                    <input id="cname" name="name" value=form.name.clone() autocomplete="off"/>
                    <label for="source">"Source"</label>
                    <input id="source" name="source" value=form.source.clone() placeholder="gguf:~/.cache/shortlist/models/model.gguf" autocomplete="off"/>
                    <label for="price">"Price per device-hour (optional)"</label>
                    <input id="price" name="price" value=form.price.clone() inputmode="decimal"/>
                    <button type="submit">"Register"</button>
                </form>
            </section>
        }
    })
}

/// The register form filled in from the candidate's latest configuration: its name, the
/// source it was registered from (a model folder stays a folder), its price.
fn register_again_href(d: &CandidateDetail) -> String {
    let latest = d.versions.last().map(|v| &v.config);
    let field = |key: &str| {
        latest
            .and_then(|c| c.get(key))
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let from = field("registered_from");
    let source = if from.is_empty() {
        field("source")
    } else {
        from
    };
    format!(
        "/candidates?name={}&source={}&price={}#register",
        encode(&d.name),
        encode(&source),
        encode(&field("price_per_device_hour"))
    )
}

/// `/candidates/{name}`: a candidate's identity, every version of its configuration, and the
/// studies and records that used it.
/// What checking candidate `name`'s endpoint found, as a notice: what it is when nothing is
/// wrong, else what would make its cases fail; `named`: the notice starts with the name (a
/// study's page lists several).
pub(crate) fn endpoint_notice(name: &str, check: &EndpointCheck, named: bool) -> AnyView {
    let id = format!("endpoint-check-{name}");
    let who = named.then(|| view! { <strong>{format!("{name}: ")}</strong> });
    match &check.problem {
        None => {
            let what = check.identity.clone().unwrap_or_else(|| check.url.clone());
            let serves = if check.served.is_empty() {
                String::new()
            } else {
                format!("; it lists `{}`", check.model)
            };
            view! {
                <p class="notice" role="status" id=id>
                    {who}{code_spans(&format!("The endpoint answers now: {what}{serves}."))}
                </p>
            }
            .into_any()
        }
        Some(problem) => view! {
            <p class="notice warn" role="status" id=id>
                {who}{code_spans(&format!("Checked now: {problem}. A run asks the endpoint for every case."))}
            </p>
        }
        .into_any(),
    }
}

/// A candidate's page; `check`: what checking its endpoint just found, if it was asked.
pub fn candidate_page(d: CandidateDetail, check: Option<EndpointCheck>) -> String {
    let title = format!("Candidate {}", d.name);
    let endpoint = d.source().starts_with("http://") || d.source().starts_with("https://");
    let check_href = format!("/candidates/{}?check=1", encode(&d.name));
    document(&title.clone(), move || {
        let identity = d
            .identity
            .iter()
            .map(|(k, v)| view! { <dt>{k.clone()}</dt><dd class="mono small">{v.clone()}</dd> })
            .collect_view();
        let versions = d
            .versions
            .iter()
            .rev()
            .map(|v| {
                let json = serde_json::to_string_pretty(&v.config).unwrap_or_default();
                let summary = format!("v{} · sha256 {}", v.version, v.sha256);
                view! { <details><summary class="mono small">{summary}</summary><pre class="text">{json}</pre></details> }
            })
            .collect_view();
        let records = d
            .used_by
            .iter()
            .filter_map(|u| {
                u.record_generation.map(|g| {
                    let href = format!(
                        "/studies/{}/candidates/{}",
                        encode(&u.study),
                        encode(&d.name)
                    );
                    let (word, tone) = verdict_word(u.verdict);
                    let class = format!("badge {tone}");
                    let label = format!("{} v{} · generation {g}", u.study, u.version);
                    view! { <li><a href=href>{label}</a>" "<span class=class>{word}</span></li> }
                })
            })
            .collect_view();
        let used = d.used_by.clone();
        let has_records = d.used_by.iter().any(|u| u.record_generation.is_some());
        let removable = d.used_by.is_empty();
        let again_href = register_again_href(&d);
        let remove_action = format!("/candidates/{}/remove", encode(&d.name));
        let n = d.versions.len();
        let remove_question = format!(
            "Remove candidate {} with its {n} configuration version{}? No study names it; its model file stays where it is.",
            d.name,
            if n == 1 { "" } else { "s" }
        );
        view! {
            <p class="crumbs"><a href="/candidates">"Candidates"</a> " / " {d.name.clone()}</p>
            <h1>{title.clone()}</h1>
            <div class="columns">
                <section class="card">
                    <h2>"Identity (latest version)"</h2>
                    <dl class="grid">{identity}</dl>
                    {check.as_ref().map(|c| endpoint_notice(&d.name, c, false))}
                    {endpoint.then(|| view! {
                        <p class="actions"><a class="button secondary" href=check_href.clone() id="check">"Check the endpoint now"</a></p>
                    })}
                </section>
                <section class="card">
                    <h2>"Studies"</h2>
                    {uses(used, true)}
                    {has_records.then(|| view! { <h3>"Records"</h3><ul class="plain">{records}</ul> })}
                    <p class="actions"><a class="button secondary" href=again_href.clone() id="again">"Register a new version…"</a></p>
                    {removable.then(|| view! {
                        <form method="post" action=remove_action.clone() data-confirm=remove_question.clone() class="actions">
                            <button type="submit" class="secondary danger" id="remove">"Remove candidate"</button>
                        </form>
                    })}
                    {(!removable).then(|| view! {
                        <p class="muted small">"Remove is offered once no study version names it: a study's candidates are part of its criteria."</p>
                    })}
                </section>
            </div>
            <section class="card">
                <h2>"Configuration versions"</h2>
                {versions}
            </section>
        }
    })
}
