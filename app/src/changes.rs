//! What changed between versions. `/evalsets/{name}/diff`: two versions of an eval set —
//! cases added, removed and changed, each change of a field once with the cases it was made to,
//! the changed words marked — and the same changes in the import preview, against the stored
//! version a file would follow. `/studies/{name}/diff`: the criteria that differ between two
//! versions of a study. Case text is untrusted and reaches the page only as escaped text.

use leptos::prelude::*;
use shortlist_runner::service::evalset_diff::{CaseRef, Edit, EvalSetDiffView, Piece, WordDiff};
use shortlist_runner::service::study_diff::StudyDiffView;

use crate::encode;
use crate::layout::{card_table, document};

/// Characters of shared text shown on each side of a change.
const CONTEXT: usize = 80;
/// Case names listed on an edit before "and N more".
const IDS_SHOWN: usize = 12;
/// Cases listed as added or removed, and changes shown, at most on a page (the command line
/// and the API give them all).
pub const LISTED_AT_MOST: usize = 200;

/// The URL of the comparison of `name`'s versions `from` and `to`.
pub fn evalset_diff_url(name: &str, from: u32, to: u32) -> String {
    format!("/evalsets/{}/diff?from={from}&to={to}", encode(name))
}

/// `/evalsets/{name}/diff?from=A&to=B`.
pub fn evalset_diff_page(v: EvalSetDiffView) -> String {
    let title = format!("{}: {} → {}", v.name, v.from.label(), v.to.label());
    document(&title.clone(), move || {
        let set_href = format!("/evalsets/{}", encode(&v.name));
        let picker = version_picker(
            format!("/evalsets/{}/diff", encode(&v.name)),
            v.versions.clone(),
            v.from.version,
            v.to.version,
        );
        view! {
            <p class="crumbs"><a href="/evalsets">"Eval sets"</a> " / " <a href=set_href>{v.name.clone()}</a> " / changes"</p>
            <h1>{title.clone()}</h1>
            <section class="card">
                {picker}
                {summary(&v)}
            </section>
            {changes(&v)}
        }
    })
}

/// The form that picks two versions to compare.
fn version_picker(
    action: String,
    versions: Vec<u32>,
    from: Option<u32>,
    to: Option<u32>,
) -> impl IntoView {
    let choose = |field: &'static str, chosen: Option<u32>| {
        let options = versions
            .iter()
            .map(|&n| {
                let selected = chosen == Some(n);
                view! { <option value=n.to_string() selected=selected>{format!("v{n}")}</option> }
            })
            .collect_view();
        view! { <select id=field name=field>{options}</select> }
    };
    view! {
        <form method="get" action=action class="row search">
            <label for="from" class="small muted">"From"</label>
            {choose("from", from)}
            <label for="to" class="small muted">"to"</label>
            {choose("to", to)}
            <button type="submit" class="secondary">"Compare"</button>
        </form>
    }
}

/// The URL of the comparison of study `name`'s versions `from` and `to`.
pub fn study_diff_url(name: &str, from: u32, to: u32) -> String {
    format!("/studies/{}/diff?from={from}&to={to}", encode(name))
}

/// `/studies/{name}/diff?from=A&to=B`: the criteria that differ, each with its value before and
/// after (the differing words marked), and the pinned eval set's own changes a link away.
pub fn study_diff_page(v: StudyDiffView) -> String {
    let title = format!("{}: v{} → v{}", v.name, v.from.version, v.to.version);
    document(&title.clone(), move || {
        let study_href = crate::study_url(&v.name, None);
        let picker = version_picker(
            format!("/studies/{}/diff", encode(&v.name)),
            v.versions.clone(),
            Some(v.from.version),
            Some(v.to.version),
        );
        let state = |s: &shortlist_runner::service::views::StudyVersionView| {
            let href = crate::study_url(&v.name, Some(s.version));
            let when = s.locked_at.as_deref().map_or_else(
                || "draft".to_owned(),
                |at| format!("locked {}", at.get(..10).unwrap_or(at)),
            );
            view! { <dt><a href=href>{format!("v{}", s.version)}</a></dt><dd>{when}{s.lock_sha256.clone().map(|h| view! { " · " <span class="mono small">{h}</span> })}</dd> }
        };
        let n = v.changes.len();
        let summary = if n == 0 {
            view! { <p class="ok-box" role="status" id="diff-summary">"The same criteria."</p> }
                .into_any()
        } else {
            view! { <div class="badges" id="diff-summary"><span class="badge warn">{format!("{n} criteri{} changed", if n == 1 { "on" } else { "a" })}</span></div> }.into_any()
        };
        let rows = v
            .changes
            .iter()
            .map(|c| {
                let change = match (&c.before, &c.after) {
                    (Some(b), Some(a)) => word_diff_view(WordDiff::of(b, a, CONTEXT)).into_any(),
                    (None, Some(a)) => view! { <span class="muted small">"added: "</span><ins>{a.clone()}</ins> }.into_any(),
                    (Some(b), None) => view! { <span class="muted small">"removed: "</span><del>{b.clone()}</del> }.into_any(),
                    (None, None) => ().into_any(),
                };
                view! { <tr><td><code>{c.path.clone()}</code></td><td data-label="Change" class="change">{change}</td></tr> }
            })
            .collect_view();
        let evalset = v.evalset.clone().map(|e| {
            let href = crate::evalset_diff_url(&e.name, e.from, e.to);
            view! {
                <p id="evalset-changes">"The eval set pinned changed: " <a href=href>{format!("{} v{} → v{}: its cases' changes", e.name, e.from, e.to)}</a></p>
            }
        });
        view! {
            <p class="crumbs"><a href="/">"Studies"</a> " / " <a href=study_href>{v.name.clone()}</a> " / changes"</p>
            <h1>{title.clone()}</h1>
            <section class="card">
                {picker}
                {summary}
                <dl class="grid">{state(&v.from)}{state(&v.to)}</dl>
            </section>
            {(n > 0).then(|| view! {
                <section class="card" id="changed">
                    <h2>"Criteria that differ"</h2>
                    {card_table("", &["Criterion", "Change"], rows)}
                    {evalset}
                </section>
            })}
        }
    })
}

/// The counts of a comparison as badges, with each side's hash and size.
pub(crate) fn summary(v: &EvalSetDiffView) -> AnyView {
    let d = &v.diff;
    if d.is_empty() {
        return view! {
            <p class="ok-box" role="status" id="diff-summary">"The same cases: nothing a score depends on changed (the same SHA-256)."</p>
        }
        .into_any();
    }
    let badge = |n: usize, word: &'static str, tone: &'static str| {
        let tone = if n == 0 { "none" } else { tone };
        view! { <span class=format!("badge {tone}")>{format!("{n} {word}")}</span> }
    };
    let reordered = d.reordered.then(|| {
        view! { <p class="small muted">"The cases both versions hold come in another order, which changes the version's SHA-256 too."</p> }
    });
    let side = |label: String, cases: usize, sha: &str| {
        view! { <dt>{label}</dt><dd>{format!("{cases} cases · ")}<span class="mono small">{sha.to_owned()}</span></dd> }
    };
    view! {
        <div class="badges" id="diff-summary">
            {badge(d.added.len(), "added", "good")}
            {badge(d.removed.len(), "removed", "bad")}
            {badge(d.changed.len(), "changed", "warn")}
            {badge(d.same, "the same", "none")}
        </div>
        {reordered}
        <dl class="grid">
            {side(v.from.label(), v.from.cases, &v.from.sha256)}
            {side(v.to.label(), v.to.cases, &v.to.sha256)}
        </dl>
    }
    .into_any()
}

/// The cases added, removed and changed, each list a card.
pub(crate) fn changes(v: &EvalSetDiffView) -> AnyView {
    let d = &v.diff;
    // Where a case of either side is shown: its version's page, found by its id.
    let case_href = |version: Option<u32>, id: &str| {
        version.map(|n| {
            format!(
                "/evalsets/{}?version={n}&q={}#cases",
                encode(&v.name),
                encode(id)
            )
        })
    };
    let rows = |cases: &[CaseRef], version: Option<u32>| {
        cases
            .iter()
            .take(LISTED_AT_MOST)
            .map(|c| {
                let id = match case_href(version, &c.id) {
                    Some(href) => view! { <a class="mono" href=href>{c.id.clone()}</a> }.into_any(),
                    None => view! { <span class="mono">{c.id.clone()}</span> }.into_any(),
                };
                view! { <tr><td>{id}</td><td data-label="Category">{c.category.clone()}</td></tr> }
            })
            .collect_view()
    };
    let list = |title: &'static str, id: &'static str, cases: &[CaseRef], version: Option<u32>| {
        (!cases.is_empty()).then(|| {
            view! {
                <section class="card" id=id>
                    <h2>{format!("{title} ({})", cases.len())}</h2>
                    {card_table("", &["Case", "Category"], rows(cases, version))}
                    {more(cases.len(), "cases")}
                </section>
            }
        })
    };
    let edits = d
        .edits
        .iter()
        .take(LISTED_AT_MOST)
        .map(|e| edit_view(e, |id| case_href(v.to.version, id)))
        .collect_view();
    let changed = (!d.edits.is_empty()).then(|| {
        let n = d.changed.len();
        view! {
            <section class="card" id="changed">
                <h2>{format!("Changed ({n} case{})", if n == 1 { "" } else { "s" })}</h2>
                <p class="small muted">"Each change once, with the cases it was made to; the words that differ struck through (before) and underlined (after)."</p>
                {edits}
                {more(d.edits.len(), "changes")}
            </section>
        }
    });
    view! {
        {list("Added", "added", &d.added, v.to.version)}
        {list("Removed", "removed", &d.removed, v.from.version)}
        {changed}
    }
    .into_any()
}

/// Under a list cut at [`LISTED_AT_MOST`]: how many it holds and where they all are.
fn more(n: usize, what: &'static str) -> Option<impl IntoView> {
    (n > LISTED_AT_MOST).then(|| {
        view! {
            <p class="small muted more">
                {format!("The first {LISTED_AT_MOST} of {n} {what}; ")}
                <code>"shortlist eval diff"</code>" and "<code>"GET /api/evalsets/{name}/diff"</code>" list them all."
            </p>
        }
    })
}

/// One field's change: the field, its cases, and the change with the differing words marked;
/// the whole values a click away when they were cut.
fn edit_view(e: &Edit, href: impl Fn(&str) -> Option<String>) -> impl IntoView {
    let n = e.cases.len();
    let ids = e
        .cases
        .iter()
        .take(IDS_SHOWN)
        .enumerate()
        .map(|(i, id)| {
            let sep = (i > 0).then_some(", ");
            let name = match href(id) {
                Some(h) => view! { <a class="mono" href=h>{id.clone()}</a> }.into_any(),
                None => view! { <span class="mono">{id.clone()}</span> }.into_any(),
            };
            view! { {sep}{name} }
        })
        .collect_view();
    let more = (n > IDS_SHOWN).then(|| format!(" and {} more", n - IDS_SHOWN));
    let (change, cut) = match (&e.before, &e.after) {
        (Some(b), Some(a)) => {
            let d = WordDiff::of(b, a, CONTEXT);
            let cut = d.pieces.contains(&Piece::Gap);
            (word_diff_view(d).into_any(), cut)
        }
        (None, Some(a)) => (
            view! { <span class="muted small">"added: "</span><ins>{a.clone()}</ins> }.into_any(),
            false,
        ),
        (Some(b), None) => (
            view! { <span class="muted small">"removed: "</span><del>{b.clone()}</del> }.into_any(),
            false,
        ),
        (None, None) => (().into_any(), false),
    };
    let whole = cut.then(|| {
        let before = e.before.clone().unwrap_or_default();
        let after = e.after.clone().unwrap_or_default();
        view! {
            <details>
                <summary class="small">"The whole texts"</summary>
                <p class="small muted">"Before"</p><pre class="text">{before}</pre>
                <p class="small muted">"After"</p><pre class="text">{after}</pre>
            </details>
        }
    });
    view! {
        <div class="edit">
            <p><code>{e.field.clone()}</code>{format!(" · {n} case{}: ", if n == 1 { "" } else { "s" })}{ids}{more}</p>
            <p class="change">{change}</p>
            {whole}
        </div>
    }
}

/// `…shared <del>old</del><ins>new</ins> shared…`: the shared text cut to some context around
/// each change.
fn word_diff_view(d: WordDiff) -> impl IntoView {
    d.pieces
        .into_iter()
        .map(|p| match p {
            Piece::Same(t) => t.into_any(),
            Piece::Gap => {
                view! { <span class="gap" title="shared text left out">"…"</span> }.into_any()
            }
            Piece::Removed(t) => view! { <del>{t}</del> }.into_any(),
            Piece::Added(t) => view! { <ins>{t}</ins> }.into_any(),
        })
        .collect_view()
}
