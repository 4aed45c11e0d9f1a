//! The web workbench's pages, rendered on the server with Leptos (`ssr` only: no hydration, no
//! WebAssembly, no inline script). Each page is a function from the application service's view
//! structs to an HTML string; the server's handlers do the I/O and call these. Text from eval
//! sets and model outputs is untrusted: it only ever reaches the page as escaped text.
//!
//! ```
//! let html = shortlist_app::error_page(404, "Not found", "no study `x` <here>");
//! assert!(html.starts_with("<!DOCTYPE html>"));
//! // Backticked names as code; the rest as escaped text.
//! assert!(html.contains("no study <code>x</code> &lt;here&gt;"));
//! ```

mod case;
mod catalog;
mod changes;
mod compare;
mod home;
mod layout;
mod new_study;
mod pages;
mod record;
mod schedules;
mod study_text;
mod workers;
mod workloads;

pub use case::case_page;
pub use catalog::{
    CASES_PER_PAGE, CaseFilter, ImportForm, RegisterForm, candidate_page, candidates_page,
    evalset_page, evalsets_page, import_page,
};
pub use changes::{evalset_diff_page, evalset_diff_url, study_diff_page, study_diff_url};
pub use compare::{CompareFilter, compare_page, pair_verdict, summary_rows, ttft_population};
pub use home::{HomeData, home_page};
pub use layout::{document, error_page, error_page_with, login_page, not_found_page, size};
pub use new_study::{StudyFormPage, study_form_page};
pub use pages::{state_word, study_page};
pub use record::record_page;
pub use schedules::{NIGHTS_IN_FULL, ScheduleForm, WebhookAdd, schedule_page, schedules_page};
pub use study_text::{Editing, new_study_page};
pub use workers::workers_page;
pub use workloads::{TraceForm, workloads_page};

/// The URL of a study's page: at `version`, or (none) the latest version.
pub fn study_url(name: &str, version: Option<u32>) -> String {
    match version {
        Some(v) => format!("/studies/{}?version={v}", encode(name)),
        None => format!("/studies/{}", encode(name)),
    }
}

/// Generation `generation` of a study version, opened in full where its page lands.
pub fn generation_url(name: &str, version: u32, generation: u32) -> String {
    format!(
        "{}&generation={generation}#generation-{generation}",
        study_url(name, Some(version))
    )
}

/// A URL path segment or query value, percent-encoded (unreserved characters kept).
pub fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The verdict as a word and its tone (the colour class; the word carries the meaning too).
pub fn verdict_word(v: Option<shortlist_study::record::Verdict>) -> (&'static str, &'static str) {
    use shortlist_study::record::Verdict;
    match v {
        Some(Verdict::Qualifies) => ("qualifies", "good"),
        Some(Verdict::Disqualified) => ("disqualified", "bad"),
        Some(Verdict::Incomplete) => ("incomplete", "warn"),
        None => ("no record yet", "none"),
    }
}
