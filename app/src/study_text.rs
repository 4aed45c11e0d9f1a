//! `/studies/new?as=file` and `?from=NAME` (the study page's **Edit criteria…**): a study
//! file's text to paste, upload or edit, errors shown with their line and field.

use leptos::prelude::*;

use crate::layout::document;

/// A stored study version whose text the new-study form holds to edit, and what saving it does.
#[derive(Debug, Clone)]
pub struct Editing {
    pub name: String,
    /// The version the text comes from.
    pub version: u32,
    pub locked: bool,
    /// The study's latest version, and whether it is locked.
    pub latest: u32,
    pub latest_locked: bool,
}

impl Editing {
    /// What saving the form does, in words.
    fn consequence(&self) -> String {
        let name = &self.name;
        if !self.latest_locked {
            let from = if self.version == self.latest {
                "this draft".to_owned()
            } else {
                format!("the draft v{} with this text", self.latest)
            };
            return format!(
                "Saving replaces {from}: a draft can change until it is locked. Saved under another name, it becomes a new study."
            );
        }
        format!(
            "Saving a changed copy stores {name} v{} as a draft to lock; v{}, its runs and its records stay as they are. Saved unchanged, nothing is stored. Saved under another name, it becomes a new study.",
            self.latest + 1,
            self.latest
        )
    }
}

/// `/studies/new?as=file`: paste a study file; errors are shown with their line and field, and nothing
/// is stored on error. `editing`: the stored version the text comes from (the study page's
/// **Edit criteria…**); `starts`: the stored studies' latest versions, offered as texts to start
/// from when the form is empty.
pub fn new_study_page(
    text: String,
    error: Option<String>,
    editing: Option<Editing>,
    starts: Vec<(String, u32)>,
) -> String {
    let title = match &editing {
        Some(e) => format!("Edit {} v{}", e.name, e.version),
        None => "New study".to_owned(),
    };
    document(&title.clone(), move || {
        let intro = match &editing {
            Some(e) => {
                let href = crate::study_url(&e.name, Some(e.version));
                let state = if e.locked { "locked" } else { "draft" };
                view! {
                    <p class="crumbs"><a href=href>{format!("{} v{}", e.name, e.version)}</a> " / edit"</p>
                    <h1>{title.clone()}</h1>
                    <p class="notice" id="consequence">
                        {format!("The text of {} v{} ({state}), as stored. ", e.name, e.version)}
                        {e.consequence()}
                    </p>
                }
                .into_any()
            }
            None => {
                let starts = (!starts.is_empty())
                    .then(|| start_links(&starts, "from", "Or start from a stored study's text:"));
                view! {
                    <h1>"New study"</h1>
                    <nav class="tabs" aria-label="How to write it">
                        <a class="tab" href="/studies/new">"Fill in the form"</a>
                        <a class="tab active" href="/studies/new?as=file" aria-current="page">"Paste or upload a study file"</a>
                    </nav>
                    <p>
                        "Upload or paste a study file (" <code>"shortlist.study.v1"</code>
                        "), and upload its eval set with it — or let the study find it on the server: by its path, or among the stored eval sets by the sha256 it pins. A draft can be edited until it is locked."
                    </p>
                    {starts}
                }
                .into_any()
            }
        };
        let button = if editing.is_some() {
            "Save"
        } else {
            "Save draft"
        };
        // Sent back with the form, so a refused save shows this page again, not a blank one.
        let from = editing.as_ref().map(|e| (e.name.clone(), e.version));
        view! {
            {intro}
            <section class="card">
                {error.map(|e| view! { <p class="error-box" role="alert">{crate::layout::code_spans(&e)}</p> })}
                <form method="post" action="/studies" enctype="multipart/form-data" class="stack">
                    {from.map(|(name, version)| view! {
                        <input type="hidden" name="from" value=name/>
                        <input type="hidden" name="from_version" value=version.to_string()/>
                    })}
                    <label for="file">"Study file"</label>
                    <input id="file" type="file" name="file" accept=".toml"/>
                    <label for="toml">"…or its text (TOML)"</label>
                    <textarea id="toml" name="toml" rows="22" spellcheck="false">{text}</textarea>
                    <label for="evalset">"Its eval set (optional: a shortlist.evalset.v1 file)"</label>
                    <input id="evalset" type="file" name="evalset" accept=".yaml,.yml"/>
                    <button type="submit">{button}</button>
                </form>
            </section>
        }
    })
}

/// The stored studies' latest versions as links to `/studies/new?{param}=NAME&version=N`, after
/// `label`.
pub(crate) fn start_links(
    starts: &[(String, u32)],
    param: &str,
    label: &'static str,
) -> impl IntoView + use<> {
    let links = starts
        .iter()
        .map(|(name, version)| {
            let href = format!(
                "/studies/new?{param}={}&version={version}",
                crate::encode(name)
            );
            view! { <li><a href=href>{format!("{name} v{version}")}</a></li> }
        })
        .collect_view();
    view! {
        <div class="records" id="starts">
            <span class="small muted">{label}</span>
            <ul class="plain inline-list">{links}</ul>
        </div>
    }
}
