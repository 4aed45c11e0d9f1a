//! The page shell (head, header, navigation) and the error page.

use leptos::prelude::*;

/// A whole HTML document: `body` inside the shell, rendered to a string.
pub fn document<V: IntoView + 'static>(title: &str, body: impl FnOnce() -> V + 'static) -> String {
    let owner = Owner::new();
    let title = format!("{title} · Shortlist");
    let html = owner.with(move || {
        view! {
            <html lang="en">
                <head>
                    <meta charset="utf-8"/>
                    <meta name="viewport" content="width=device-width, initial-scale=1"/>
                    <title>{title}</title>
                    <link rel="stylesheet" href="/static/style.css"/>
                    <script src="/static/app.js" defer></script>
                </head>
                <body>
                    <header class="top">
                        <a class="brand" href="/">"Shortlist"</a>
                        <nav>
                            <a href="/">"Studies"</a>
                            <a href="/evalsets">"Eval sets"</a>
                            <a href="/candidates">"Candidates"</a>
                            <a href="/workloads">"Workloads"</a>
                            <a href="/schedules">"Schedules"</a>
                            <a href="/workers">"Workers"</a>
                            <a href="/studies/new">"New study"</a>
                        </nav>
                    </header>
                    <main>{body()}</main>
                    <footer class="foot">
                        "Every percentile names its population; goodput is never throughput; open and closed loop are never confused."
                    </footer>
                </body>
            </html>
        }
        .to_html()
    });
    format!("<!DOCTYPE html>{html}")
}

/// A message as the command line writes it, with its `backticked` spans (commands, flags) as
/// code.
pub fn code_spans(text: &str) -> impl IntoView + use<> {
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            let part = part.to_owned();
            if i % 2 == 1 {
                view! { <code>{part}</code> }.into_any()
            } else {
                part.into_any()
            }
        })
        .collect_view()
}

/// A size as people read it: `16 MiB`, `1.5 MiB (1572864 bytes)`, `4000 bytes`.
pub fn size(bytes: usize) -> String {
    const MIB: usize = 1 << 20;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= MIB {
        format!("{:.1} MiB ({bytes} bytes)", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

/// A page for an error: its status, a title and what happened, in words.
pub fn error_page(status: u16, title: &str, message: &str) -> String {
    error_page_with(status, title, message, None)
}

/// An error page with a way forward under the message: `(label, href)`.
pub fn error_page_with(
    status: u16,
    title: &str,
    message: &str,
    next: Option<(String, String)>,
) -> String {
    let (title, message) = (title.to_owned(), message.to_owned());
    document(&title.clone(), move || {
        view! {
            <section class="card error">
                <h1>{format!("{status} · {title}")}</h1>
                <p>{code_spans(&message)}</p>
                {next.map(|(label, href)| view! { <p class="next"><a href=href>{label}</a></p> })}
                <p><a href="/">"Back to the studies"</a></p>
            </section>
        }
    })
}

/// A 404 for a mistyped name: what was not found, and links to the stored names close to it
/// (`near`: each name with its page).
pub fn not_found_page(message: &str, near: Vec<(String, String)>) -> String {
    let message = message.to_owned();
    document("Not found", move || {
        let count = near.len();
        let links = near
            .into_iter()
            .enumerate()
            .map(|(i, (name, href))| {
                let sep = match i {
                    0 => "",
                    i if i + 1 == count => " or ",
                    _ => ", ",
                };
                view! { {sep}<a href=href>{name}</a> }
            })
            .collect_view();
        view! {
            <section class="card error">
                <h1>"404 · Not found"</h1>
                <p>{code_spans(&message)}</p>
                <p class="near">"Did you mean " {links} "?"</p>
                <p><a href="/">"Back to the studies"</a></p>
            </section>
        }
    })
}

/// `/login`: the access token, for a workbench that needs one.
pub fn login_page(error: Option<String>) -> String {
    document("Log in", move || {
        view! {
            <h1>"Log in"</h1>
            <section class="card">
                <p>"This workbench needs its access token for changes and the API."</p>
                {error.map(|e| view! { <p class="error-box" role="alert">{e}</p> })}
                <form method="post" action="/login" class="stack">
                    <label for="token">"Access token"</label>
                    <input id="token" type="password" name="token" autocomplete="current-password"/>
                    <button type="submit">"Log in"</button>
                </form>
            </section>
        }
    })
}

/// A list (studies, eval sets, candidates, schedules): a table whose rows stand as blocks on a
/// phone (`table.cards`), each cell after its column's name. Rows label their cells from the
/// same `columns` (`data-label=COLUMNS[i]`), so a label cannot drift from its header.
pub fn list_table(
    columns: &'static [&'static str],
    rows: impl IntoView + 'static,
) -> impl IntoView {
    card_table("", columns, rows)
}

/// A table whose rows stand as blocks on a phone, as [`list_table`]'s, with `class` added to
/// the table's. Cells marked `inline` sit side by side there, each after its column's name
/// (short values: counts, states, percentiles); the others take the whole width.
pub fn card_table(
    class: &'static str,
    columns: &'static [&'static str],
    rows: impl IntoView + 'static,
) -> impl IntoView {
    let class = if class.is_empty() {
        "cards".to_owned()
    } else {
        format!("cards {class}")
    };
    view! {
        <div class="scroll">
            <table class=class>
                <thead><tr>{columns.iter().map(|&c| view! { <th>{c}</th> }).collect_view()}</tr></thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

/// Links to the pages before and after page `page` of `pages` (from 1), `href` giving a page's
/// address; nothing when there is one page.
pub fn pager(
    page: usize,
    pages: usize,
    href: &dyn Fn(usize) -> String,
) -> Option<impl IntoView + use<>> {
    let previous = (page > 1).then(|| href(page - 1));
    let next = (page < pages).then(|| href(page + 1));
    (pages > 1).then(move || {
        let previous = previous.map(|h| view! { <a href=h rel="prev">"← Previous"</a>" " });
        let next = next.map(|h| view! { " "<a href=h rel="next">"Next →"</a> });
        view! { <p class="small pager">{previous}{format!("Page {page} of {pages}")}{next}</p> }
    })
}
