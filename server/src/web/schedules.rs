//! `/schedules`, `/schedules/{name}`, pause / resume, remove, the webhooks, and the same as
//! JSON under `/api/schedules`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;
use shortlist_app::{ScheduleForm, encode};
use shortlist_runner::ServiceError;
use shortlist_runner::service::schedule::ScheduleSpec;
use shortlist_store::schedules::ScheduleWhat;

use crate::web::extract::{Form, Query};
use crate::web::pages::{PageError, status_of};
use crate::web::{AppState, html};

/// The names of the studies with a locked version: those a schedule can run.
async fn locked_studies(st: &AppState) -> Result<Vec<String>, ServiceError> {
    st.service.locked_study_names().await
}

async fn page(
    st: &AppState,
    status: StatusCode,
    form: ScheduleForm,
    error: Option<String>,
) -> Result<Response, PageError> {
    let list = st.service.list_schedules().await?;
    let studies = locked_studies(st).await?;
    Ok(html(
        status,
        shortlist_app::schedules_page(list, studies, form, error),
    ))
}

/// `/schedules[?study=NAME]`: the form's study preselected when one is named.
#[derive(Debug, Deserialize)]
pub(crate) struct ListQuery {
    #[serde(default)]
    study: Option<String>,
}

pub(crate) async fn list(
    State(st): State<AppState>,
    Query(q): Query<ListQuery>,
) -> Result<Response, PageError> {
    let form = ScheduleForm {
        study: q.study.unwrap_or_default(),
        ..ScheduleForm::default()
    };
    page(&st, StatusCode::OK, form, None).await
}

/// What a schedule runs, by its stored name (empty: all).
fn what_of(what: &str) -> Result<ScheduleWhat, ServiceError> {
    match what.trim() {
        "" => Ok(ScheduleWhat::All),
        other => ScheduleWhat::parse(other).ok_or_else(|| {
            ServiceError::invalid(
                "what to run",
                format!("`{other}`: expected all, quality or load"),
            )
        }),
    }
}

/// "a, b" as the list of names (empty: all of the study's).
fn candidates_of(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The "Add a schedule" form as sent.
#[derive(Debug, Deserialize)]
pub(crate) struct AddForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    study: String,
    #[serde(default)]
    cron: String,
    #[serde(default)]
    tz: String,
    #[serde(default)]
    what: String,
    #[serde(default)]
    candidates: String,
}

/// `POST /schedules`: add a schedule, checked whole before anything is stored; the form
/// comes back with the reason and what was sent when it is refused.
pub(crate) async fn add(
    State(st): State<AppState>,
    Form(form): Form<AddForm>,
) -> Result<Response, PageError> {
    let tz = match form.tz.trim() {
        "" => "UTC".to_owned(),
        tz => tz.to_owned(),
    };
    let spec = what_of(&form.what).map(|what| ScheduleSpec {
        name: form.name.trim().to_owned(),
        study: form.study.trim().to_owned(),
        version: None,
        cron: form.cron.trim().to_owned(),
        tz: tz.clone(),
        what,
        candidates: candidates_of(&form.candidates),
        from: None,
    });
    let added = match spec {
        Ok(spec) => st.service.add_schedule(&spec).await,
        Err(e) => Err(e),
    };
    match added {
        Ok(view) => Ok(Redirect::to(&format!("/schedules/{}", encode(&view.name))).into_response()),
        Err(e) => {
            let sent = ScheduleForm {
                name: form.name,
                study: form.study,
                cron: form.cron,
                tz,
                what: form.what,
                candidates: form.candidates,
            };
            page(&st, status_of(&e), sent, Some(e.to_string())).await
        }
    }
}

/// `POST /schedules/{name}/remove`: the schedule and its nights' history go; the runs and
/// records it made stay with their study.
pub(crate) async fn remove(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    st.service.remove_schedule(&name).await?;
    Ok(Redirect::to("/schedules").into_response())
}

/// `POST /api/schedules`'s body.
#[derive(Debug, Deserialize)]
pub(crate) struct AddBody {
    name: String,
    study: String,
    #[serde(default)]
    version: Option<u32>,
    cron: String,
    #[serde(default)]
    tz: Option<String>,
    /// `all` (the default), `quality` or `load`.
    #[serde(default)]
    what: Option<String>,
    #[serde(default)]
    candidates: Vec<String>,
    /// RFC 3339: due only at instants after this (default: now).
    #[serde(default)]
    from: Option<String>,
}

/// `POST /api/schedules` with `{"name", "study", "cron", "tz"?, "what"?, "candidates"?,
/// "version"?, "from"?}`: the schedule as stored, or the error in the API's shape.
pub(crate) async fn api_add(
    State(st): State<AppState>,
    body: axum::body::Bytes,
) -> Result<Response, crate::web::api::ApiError> {
    let b: AddBody = crate::web::api::json_body(
        &body,
        r#"{"name", "study", "cron", "tz"?, "what"?, "candidates"?, "version"?, "from"?}"#,
    )?;
    let from = match b.from.as_deref() {
        None => None,
        Some(t) => Some(t.parse::<jiff::Timestamp>().map_err(|e| {
            ServiceError::invalid("from", format!("`{t}` is not an RFC 3339 instant: {e}"))
        })?),
    };
    let view = st
        .service
        .add_schedule(&ScheduleSpec {
            name: b.name,
            study: b.study,
            version: b.version,
            cron: b.cron,
            tz: b.tz.unwrap_or_else(|| "UTC".to_owned()),
            what: what_of(b.what.as_deref().unwrap_or("all"))?,
            candidates: b.candidates,
            from,
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(serde_json::to_value(view).unwrap_or_default()),
    )
        .into_response())
}

/// `DELETE /api/schedules/{name}`.
pub(crate) async fn api_remove(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, crate::web::api::ApiError> {
    st.service.remove_schedule(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `/schedules/{name}[?nights=N]`: how many of the newest nights the tables show.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ScheduleQuery {
    #[serde(default)]
    nights: Option<usize>,
}

pub(crate) async fn show(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<ScheduleQuery>,
) -> Result<Response, PageError> {
    let shown = q.nights.unwrap_or(shortlist_app::NIGHTS_IN_FULL);
    schedule_page(&st, &name, shown, StatusCode::OK, None, String::new()).await
}

/// The workbench's own webhook secret, when it has one.
fn server_secret() -> Option<String> {
    std::env::var("SHORTLIST_WEBHOOK_SECRET")
        .ok()
        .filter(|s| !s.is_empty())
}

/// A schedule's page, its tables showing the newest `shown` nights; `error` and `url`: a
/// refused webhook and the URL that was sent.
async fn schedule_page(
    st: &AppState,
    name: &str,
    shown: usize,
    status: StatusCode,
    error: Option<String>,
    url: String,
) -> Result<Response, PageError> {
    let view = st.service.schedule_view(name).await?;
    let history = st.service.schedule_history(name, u32::MAX).await?;
    let timeline = st.service.schedule_timeline(name).await?;
    let webhooks = st.service.webhooks(name).await?;
    let add = shortlist_app::WebhookAdd {
        server_secret: server_secret().is_some(),
        error,
        url,
    };
    Ok(html(
        status,
        shortlist_app::schedule_page(view, history, timeline, webhooks, add, shown),
    ))
}

/// The form that adds a webhook.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct AddWebhookForm {
    url: String,
    #[serde(default)]
    secret: String,
}

/// The secret a webhook is added with: the one given, else the workbench's own.
fn secret_of(given: String) -> Result<String, ServiceError> {
    if !given.is_empty() {
        return Ok(given);
    }
    server_secret().ok_or_else(|| {
        ServiceError::invalid(
            "the webhook secret",
            "give one (16 characters or more): it signs each delivery, and the receiver checks it",
        )
    })
}

/// `POST /schedules/{name}/webhooks`: add a webhook; refused, the page comes back with the
/// reason and the URL sent (never the secret).
pub(crate) async fn add_webhook(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<AddWebhookForm>,
) -> Result<Response, PageError> {
    let url = form.url.trim().to_owned();
    let added = match secret_of(form.secret) {
        Ok(secret) => st.service.add_webhook(&name, &url, &secret).await,
        Err(e) => Err(e),
    };
    match added {
        Ok(_) => {
            Ok(Redirect::to(&format!("/schedules/{}#add-webhook", encode(&name))).into_response())
        }
        Err(e) if e.is_not_found() => Err(e.into()),
        Err(e) => {
            let shown = shortlist_app::NIGHTS_IN_FULL;
            schedule_page(&st, &name, shown, status_of(&e), Some(e.to_string()), url).await
        }
    }
}

/// `POST /schedules/{name}/webhooks/remove`: remove a webhook and its pending deliveries.
pub(crate) async fn remove_webhook(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<WebhookForm>,
) -> Result<Response, PageError> {
    st.service.remove_webhook(&name, &form.url).await?;
    Ok(Redirect::to(&format!("/schedules/{}", encode(&name))).into_response())
}

/// `POST /api/schedules/{name}/webhooks` with `{"url", "secret"?}` (default: the
/// workbench's own secret): the webhook as stored (201).
pub(crate) async fn api_add_webhook(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, crate::web::api::ApiError> {
    let form: AddWebhookForm =
        crate::web::api::json_body(&body, r#"{"url": "http://…", "secret"?: "…"}"#)?;
    let secret = secret_of(form.secret)?;
    let hook = st
        .service
        .add_webhook(&name, form.url.trim(), &secret)
        .await?;
    Ok((StatusCode::CREATED, axum::Json(hook)).into_response())
}

/// `DELETE /api/schedules/{name}/webhooks?url=…`.
pub(crate) async fn api_remove_webhook(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(form): Query<WebhookForm>,
) -> Result<Response, crate::web::api::ApiError> {
    st.service.remove_webhook(&name, &form.url).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The form that enables a disabled webhook.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct WebhookForm {
    url: String,
}

/// `POST /schedules/{name}/webhooks/enable`: enable a webhook disabled after five failed
/// deliveries; what it missed goes out at the scheduler's next pass.
pub(crate) async fn enable_webhook(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<WebhookForm>,
) -> Result<Response, PageError> {
    st.service.enable_webhook(&name, &form.url).await?;
    Ok(Redirect::to(&format!("/schedules/{}", encode(&name))).into_response())
}

pub(crate) async fn pause(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    st.service.set_schedule_enabled(&name, false).await?;
    Ok(Redirect::to(&format!("/schedules/{}", encode(&name))).into_response())
}

pub(crate) async fn resume(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, PageError> {
    st.service.set_schedule_enabled(&name, true).await?;
    Ok(Redirect::to(&format!("/schedules/{}", encode(&name))).into_response())
}

/// `GET /api/schedules`.
pub(crate) async fn api_list(
    State(st): State<AppState>,
) -> Result<Response, crate::web::api::ApiError> {
    let list = st.service.list_schedules().await?;
    Ok(axum::Json(serde_json::to_value(list).unwrap_or_default()).into_response())
}

/// `GET /api/schedules/{name}`: the schedule and its history.
pub(crate) async fn api_show(
    State(st): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, crate::web::api::ApiError> {
    let view = st.service.schedule_view(&name).await?;
    let history = st.service.schedule_history(&name, u32::MAX).await?;
    let timeline = st.service.schedule_timeline(&name).await?;
    let webhooks = st.service.webhooks(&name).await?;
    Ok(axum::Json(serde_json::json!({
        "schedule": view,
        "history": history,
        "runs": timeline,
        "webhooks": webhooks,
    }))
    .into_response())
}
