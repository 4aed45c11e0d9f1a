//! The HTML handlers: each calls the service and renders a page of `shortlist-app`; forms POST
//! and redirect (303). Errors become pages that say what failed, never a panic.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use shortlist_app::{CompareFilter, HomeData, study_url};
use shortlist_report::view::{Medium, screen_view};
use shortlist_report::{PaperSize, charts, render_pdf};
use shortlist_runner::ErrorClass;
use shortlist_runner::ServiceError;
use shortlist_runner::service::views::Shown;
use shortlist_runner::service::{RunParams, Trigger};

use super::extract::{Form, Query};
use super::{AppState, html};

/// A failed page: the status its error's class implies, and a page saying what failed.
pub(crate) struct PageError(pub ServiceError);

impl From<ServiceError> for PageError {
    fn from(e: ServiceError) -> Self {
        PageError(e)
    }
}

/// The HTTP status of a service error.
pub(crate) fn status_of(e: &ServiceError) -> StatusCode {
    if e.is_not_found() {
        return StatusCode::NOT_FOUND;
    }
    if matches!(e, ServiceError::Incomparable { .. }) {
        return StatusCode::UNPROCESSABLE_ENTITY;
    }
    match e.class() {
        ErrorClass::BadInput => StatusCode::BAD_REQUEST,
        ErrorClass::CheckFailed => StatusCode::CONFLICT,
        ErrorClass::Transient => StatusCode::SERVICE_UNAVAILABLE,
        ErrorClass::Corrupt => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let status = status_of(&self.0);
        let title = match status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::SERVICE_UNAVAILABLE => "Unavailable",
            StatusCode::INTERNAL_SERVER_ERROR => "Stored data could not be read",
            StatusCode::CONFLICT => "The lock no longer holds",
            StatusCode::UNPROCESSABLE_ENTITY => "Not comparable",
            _ => "Not possible",
        };
        // Records judged by other criteria: what changed between the two versions is a link away.
        let next = match &self.0 {
            ServiceError::Incomparable {
                study,
                versions: (a, b),
                ..
            } => Some((
                format!("What changed between v{a} and v{b}"),
                shortlist_app::study_diff_url(study, *a, *b),
            )),
            _ => None,
        };
        let mut response = html(
            status,
            shortlist_app::error_page_with(status.as_u16(), title, &self.0.to_string(), next),
        );
        if let Some(what) = self.0.missing() {
            response.extensions_mut().insert(Missing {
                what: what.to_owned(),
                message: self.0.to_string(),
                class: serde_json::to_value(self.0.class()).unwrap_or_default(),
            });
        }
        response
    }
}

/// On a not-found answer: what was asked for and not found ("study `supprt`") and the error's
/// whole message, for [`offer_near`] to say which stored names are close.
#[derive(Debug, Clone)]
pub(crate) struct Missing {
    pub(crate) what: String,
    pub(crate) message: String,
    /// The error's class, as the API's error document names it.
    pub(crate) class: serde_json::Value,
}

/// The middleware that answers a mistyped name with the stored names close to it: a page's 404
/// links them ("Did you mean support-assistant?"), the API's error document lists them in
/// `near` and its message says them.
pub(crate) async fn offer_near(
    axum::extract::State(st): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let api = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    let Some(missing) = response.extensions().get::<Missing>().cloned() else {
        return response;
    };
    let near = match st.service.names_near(&missing.what).await {
        Ok(near) if !near.is_empty() => near,
        _ => return response,
    };
    let message = format!(
        "{}{}",
        missing.message,
        shortlist_runner::service::near::did_you_mean(&near)
    );
    let status = response.status();
    if api {
        let body = serde_json::json!({"error": {
            "status": status.as_u16(),
            "class": missing.class,
            "message": message,
            "near": near,
        }});
        return (status, axum::Json(body)).into_response();
    }
    let links = near
        .iter()
        .map(|n| (n.clone(), href_of(&missing.what, n)))
        .collect();
    html(
        status,
        shortlist_app::not_found_page(&missing.message, links),
    )
}

/// Where the workbench shows the stored thing `name` of the kind `missing` names.
fn href_of(missing: &str, name: &str) -> String {
    let e = shortlist_app::encode(name);
    if let Some(study) = missing
        .split_once("` in the eval set of study `")
        .and_then(|(_, s)| s.strip_suffix('`'))
    {
        return format!("/studies/{}/cases/{e}", shortlist_app::encode(study));
    }
    match missing.split_once(" `").map(|(kind, _)| kind) {
        Some("study") => shortlist_app::study_url(name, None),
        Some("schedule") => format!("/schedules/{e}"),
        Some("candidate") => format!("/candidates/{e}"),
        Some("eval set") => format!("/evalsets/{e}"),
        _ => "/workloads".to_owned(),
    }
}

/// The 404 page.
pub(crate) fn not_found(why: &str) -> Response {
    html(
        StatusCode::NOT_FOUND,
        shortlist_app::error_page(404, "Not found", why),
    )
}

pub(crate) async fn home(State(st): State<AppState>) -> Result<Response, PageError> {
    let studies = st.service.study_listing().await?;
    let running = st.service.running_jobs().await?;
    let evalsets = st.service.list_eval_sets().await?;
    let candidates = st.service.candidate_count().await?;
    let recent = st.service.recent_runs(12).await?;
    let queue = st.service.workers().await?.queue;
    Ok(html(
        StatusCode::OK,
        shortlist_app::home_page(HomeData {
            studies,
            running,
            evalsets,
            candidates,
            recent,
            queue,
        }),
    ))
}

/// `/workers`: the queue and the workers seen lately.
pub(crate) async fn workers(State(st): State<AppState>) -> Result<Response, PageError> {
    Ok(html(
        StatusCode::OK,
        shortlist_app::workers_page(st.service.workers().await?),
    ))
}

/// Which version of a study a page shows (default: the latest), and which of its generations
/// (default: the newest that has what the page shows).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Which {
    #[serde(default)]
    pub(crate) version: Option<u32>,
    #[serde(default)]
    pub(crate) generation: Option<u32>,
    /// `1` on a study's page: check its endpoint candidates now.
    #[serde(default)]
    pub(crate) check: Option<String>,
    /// How many of the newest generations a study's page (default
    /// [`GENERATIONS_IN_FULL`]) or status (default: all) shows in full.
    #[serde(default)]
    pub(crate) generations: Option<usize>,
}

/// How many of a study's newest generations its page shows with their jobs and runs; the others
/// are a line each (a study run nightly has one a day), and `?generation=G` opens one in full.
const GENERATIONS_IN_FULL: usize = 5;

pub(crate) async fn study(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(which): Query<Which>,
) -> Result<Response, PageError> {
    let view = st.service.show(&name, which.version).await?;
    // The newest generations in full, and the one the URL names; the others a line each.
    let shown = Shown::Newest {
        count: which.generations.unwrap_or(GENERATIONS_IN_FULL),
        also: which.generation,
    };
    let progress = st
        .service
        .run_progress_shown(&name, Some(view.version), shown)
        .await?;
    let versions = st.service.study_versions(&name).await?;
    let queue = st.service.workers().await?.queue;
    let slo = shortlist_study::study::Study::from_file("stored", view.study.clone())
        .map(|s| s.slo().describe())
        .unwrap_or_default();
    let checks = match which.check.as_deref() {
        Some("1") => st.service.check_endpoints(&view.candidates).await,
        _ => Vec::new(),
    };
    Ok(html(
        StatusCode::OK,
        shortlist_app::study_page(view, progress, slo, versions, queue, checks),
    ))
}

pub(crate) async fn lock(
    State(st): State<AppState>,
    Path(name): Path<String>,
    // The version the Lock button was shown for (absent: the latest).
    Form(form): Form<Which>,
) -> Result<Response, PageError> {
    let locked = st
        .service
        .lock(&name, form.version, &shortlist_runner::time::now_rfc3339())
        .await?;
    Ok(Redirect::to(&study_url(&name, form.version.map(|_| locked.version))).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct RunForm {
    #[serde(default)]
    again: Option<String>,
    #[serde(default)]
    version: Option<u32>,
}

/// **Cancel run**: the shown version's unfinished generation (its page's form names it).
pub(crate) async fn cancel(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<Which>,
) -> Result<Response, PageError> {
    st.service
        .cancel_run(&name, form.version, "from the workbench")
        .await?;
    Ok(Redirect::to(&format!("{}#progress", study_url(&name, form.version))).into_response())
}

/// **Delete draft**: the shown draft goes; the page of what is left (the study's latest
/// version, or the studies list when it was the only one).
pub(crate) async fn delete(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<Which>,
) -> Result<Response, PageError> {
    let done = st.service.delete_draft(&name, form.version).await?;
    let to = match done.remaining {
        Some(_) => study_url(&name, None),
        None => "/".to_owned(),
    };
    Ok(Redirect::to(&to).into_response())
}

/// **Retry failed jobs**: the shown version's newest generation, in place.
pub(crate) async fn retry(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<Which>,
) -> Result<Response, PageError> {
    st.service.retry_run(&name, form.version).await?;
    Ok(Redirect::to(&format!("{}#progress", study_url(&name, form.version))).into_response())
}

pub(crate) async fn run(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<RunForm>,
) -> Result<Response, PageError> {
    // Idempotent: while a generation is unfinished, asking again queues nothing.
    st.service
        .request_run(
            &name,
            form.version,
            &RunParams {
                trigger: Trigger::Manual,
                again: form.again.as_deref() == Some("true"),
                ..RunParams::default()
            },
        )
        .await?;
    Ok(Redirect::to(&format!("{}#progress", study_url(&name, form.version))).into_response())
}

/// The form that accepts a finished generation as its version's baseline.
#[derive(Debug, Deserialize)]
pub(crate) struct BaselineForm {
    version: u32,
    generation: u32,
}

/// `POST /studies/{name}/baseline`: later runs are checked against this one (the schedule's
/// nights, `shortlist study check --against baseline`).
pub(crate) async fn accept_baseline(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<BaselineForm>,
) -> Result<Response, PageError> {
    st.service
        .accept_baseline(&name, Some(form.version), form.generation, "workbench")
        .await?;
    Ok(Redirect::to(&format!(
        "{}#progress",
        study_url(&name, Some(form.version))
    ))
    .into_response())
}

/// `/studies/{name}/events`: server-sent events of the study's stored progress (each event's id
/// is its row id, so a reconnecting browser resumes where it was), and its state.
#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    /// The newest event the page already shows.
    #[serde(default)]
    after: Option<i64>,
    /// The study version the page shows (default: the latest).
    #[serde(default)]
    version: Option<u32>,
}

pub(crate) async fn events(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<EventsQuery>,
    headers: axum::http::HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PageError> {
    let version = st.service.version_of(&name, q.version).await?;
    // A reconnecting browser says the last event it saw; a new page, the last it was drawn with.
    let start: i64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .or(q.after)
        .unwrap_or(0);
    let service = st.service.clone();
    let state = (
        service,
        name,
        version,
        start,
        None::<String>,
        st.progress.clone(),
        true,
    );
    let stream = stream::unfold(
        state,
        |(service, name, version, mut after, mut last_state, mut announced, first)| async move {
            if !first {
                let listening = match announced.as_mut() {
                    // PostgreSQL announces each stored event: read as soon as one is, and at
                    // least every 2 s (a run's state can change without a progress event).
                    Some(rx) => !matches!(
                        tokio::time::timeout(Duration::from_secs(2), rx.changed()).await,
                        Ok(Err(_))
                    ),
                    None => {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        false
                    }
                };
                if !listening {
                    // The listener is gone: poll from now on.
                    announced = None;
                }
            }
            let mut events = Vec::new();
            if let Ok(rows) = service.progress_after(&name, version, after).await {
                for (id, event) in rows {
                    after = id;
                    if let Ok(data) = serde_json::to_string(&event) {
                        events.push(Ok(Event::default()
                            .id(id.to_string())
                            .event("progress")
                            .data(data)));
                    }
                }
            }
            // The state alone, from the newest generation's jobs: this runs every half second
            // for every open page, whatever the study's history.
            if let Ok((state, ended)) = service.study_state(&name, version).await {
                // The word the page's badge shows (a finish with cancelled or failed jobs says so).
                let s = shortlist_app::state_word(state, ended).0.to_owned();
                if last_state.as_deref() != Some(&s) {
                    events.push(Ok(Event::default().event("state").data(s.clone())));
                    last_state = Some(s);
                }
            }
            Some((
                stream::iter(events),
                (service, name, version, after, last_state, announced, false),
            ))
        },
    );
    use futures_util::StreamExt as _;
    Ok(Sse::new(stream.flatten()).keep_alive(KeepAlive::default()))
}

#[derive(Debug, Deserialize)]
pub(crate) struct CompareQuery {
    /// Columns: `name`, `name@v2`, `name@g3` or `name@v2.g3`, comma-separated.
    #[serde(default)]
    candidates: Option<String>,
    /// The default study version of the columns (else the latest).
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    q: Option<String>,
    /// Which page of the cases (from 1).
    #[serde(default)]
    page: Option<usize>,
}

pub(crate) async fn compare(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<CompareQuery>,
) -> Result<Response, PageError> {
    let picks = st
        .service
        .picks_or_all(&name, q.version, q.candidates.as_deref())
        .await?;
    let cmp = st.service.compare(&name, q.version, &picks, None).await?;
    Ok(html(
        StatusCode::OK,
        shortlist_app::compare_page(
            cmp,
            CompareFilter {
                candidates: q.candidates.unwrap_or_default(),
                mode: q.mode.unwrap_or_default(),
                category: q.category.unwrap_or_default(),
                search: q.q.unwrap_or_default(),
                page: q.page.unwrap_or(1),
            },
        ),
    ))
}

pub(crate) async fn case(
    State(st): State<AppState>,
    Path((name, case)): Path<(String, String)>,
    Query(which): Query<Which>,
) -> Result<Response, PageError> {
    let view = st
        .service
        .case(&name, which.version, &case, which.generation)
        .await?;
    Ok(html(StatusCode::OK, shortlist_app::case_page(view)))
}

pub(crate) async fn record(
    State(st): State<AppState>,
    Path((name, candidate)): Path<(String, String)>,
    Query(which): Query<Which>,
) -> Result<Response, PageError> {
    let record = st
        .service
        .record(&name, which.version, &candidate, which.generation)
        .await?;
    let view = screen_view(&record.record);
    let charts = charts(&record.record, Medium::Screen.chart_categories()).map_err(|e| {
        PageError(ServiceError::Corrupt {
            what: format!("the charts of {candidate}'s record"),
            why: e.to_string(),
        })
    })?;
    // The newest check of whether this generation's quality run reproduces, if any.
    let reproduced = st
        .service
        .reproductions(
            &name,
            Some(record.record.study.version),
            &candidate,
            Some(record.generation),
        )
        .await?
        .into_iter()
        .next();
    Ok(html(
        StatusCode::OK,
        shortlist_app::record_page(&name, record, view, charts, reproduced),
    ))
}

/// A name as part of a file name: letters, digits, `.`, `-` and `_` kept, anything else `_`
/// (a header's quoted file name cannot hold every character a study name may).
/// A download: `body` as the file `file` (its name made of [`file_name_part`]s).
pub(crate) fn attachment(content_type: &str, file: &str, body: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file}\""),
            ),
        ],
        body,
    )
        .into_response()
}

pub(crate) fn file_name_part(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

pub(crate) async fn record_pdf(
    State(st): State<AppState>,
    Path((name, candidate)): Path<(String, String)>,
    Query(which): Query<Which>,
) -> Result<Response, PageError> {
    let record = st
        .service
        .record(&name, which.version, &candidate, which.generation)
        .await?
        .record;
    // Saved PDFs of other studies, versions and generations keep apart.
    let file_name = format!(
        "{}-{}-v{}-g{}.pdf",
        file_name_part(&name),
        file_name_part(&candidate),
        record.study.version,
        record.generation.unwrap_or(0)
    );
    // Typesetting takes milliseconds of CPU: off the runtime's workers.
    let pdf = tokio::task::spawn_blocking(move || render_pdf(&record, PaperSize::A4))
        .await
        .map_err(|e| {
            PageError(ServiceError::Panicked {
                what: "rendering the PDF".to_owned(),
                why: e.to_string(),
            })
        })?
        .map_err(|e| {
            PageError(ServiceError::Corrupt {
                what: format!("the PDF of {candidate}'s record"),
                why: e.to_string(),
            })
        })?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/pdf".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{file_name}\""),
            ),
        ],
        pdf,
    )
        .into_response())
}

pub(crate) async fn login_form() -> Response {
    html(StatusCode::OK, shortlist_app::login_page(None))
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginForm {
    token: String,
}

pub(crate) async fn login(State(st): State<AppState>, Form(form): Form<LoginForm>) -> Response {
    let ok = st
        .token
        .as_deref()
        .is_some_and(|t| t.len() == form.token.len() && t == form.token.as_str());
    if !ok {
        return html(
            StatusCode::UNAUTHORIZED,
            shortlist_app::login_page(Some("That is not this workbench's token.".to_owned())),
        );
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/".to_owned()),
            (
                header::SET_COOKIE,
                format!(
                    "{}={}; HttpOnly; SameSite=Strict; Path=/",
                    super::security::TOKEN_COOKIE,
                    form.token
                ),
            ),
        ],
    )
        .into_response()
}
