//! `/workloads`: the recorded traces a study can replay — the list with each version's facts
//! and arrivals, the upload (preview, then store; a public format converted), a version's
//! download and its removal when no study pins it — and their JSON API.

use axum::extract::{Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use shortlist_app::TraceForm;
use shortlist_http::FieldsError;
use shortlist_runner::ServiceError;
use shortlist_runner::service::traces::{TraceFormat, TracePreview};

use super::catalog::VersionQuery;
use super::extract::{Form, Query};
use super::pages::{PageError, attachment, file_name_part, status_of};
use super::{AppState, html};

/// The most text a previewed upload sends back in the form, to be stored with the next press.
const KEEP_IN_FORM_BYTES: usize = 2 << 20;

async fn page(
    st: &AppState,
    status: StatusCode,
    form: TraceForm,
    preview: Option<TracePreview>,
    error: Option<String>,
) -> Result<Response, PageError> {
    let traces = st.service.list_traces().await?;
    Ok(html(
        status,
        shortlist_app::workloads_page(traces, form, preview, error, st.limits.trace),
    ))
}

/// The upload form as it first stands.
fn upload_form() -> TraceForm {
    TraceForm {
        format: "shortlist".to_owned(),
        ..TraceForm::default()
    }
}

pub(crate) async fn list(State(st): State<AppState>) -> Result<Response, PageError> {
    page(&st, StatusCode::OK, upload_form(), None, None).await
}

/// The upload form's fields, read from its multipart body (files as UTF-8 text).
async fn read_upload(body: Multipart) -> Result<(TraceForm, bool), FieldsError> {
    let mut form = TraceForm::default();
    let (mut file, mut store) = (String::new(), false);
    for (name, text) in shortlist_http::text_fields(body).await? {
        match name.as_str() {
            "format" => form.format = text,
            "name" => form.name = text.trim().to_owned(),
            "file" => file = text,
            "text" => form.text = text,
            "action" => store = text == "store",
            _ => {}
        }
    }
    // An uploaded file wins over the text box, and comes back in it for the next step.
    if !file.is_empty() {
        form.text = file;
    }
    Ok((form, store))
}

async fn upload_of(
    st: &AppState,
    form: &TraceForm,
    store: bool,
) -> Result<TracePreview, ServiceError> {
    if form.text.trim().is_empty() {
        return Err(ServiceError::invalid(
            "the trace",
            "choose a file or paste its text",
        ));
    }
    let format = TraceFormat::parse(&form.format)?;
    st.service
        .import_trace(format, "the uploaded trace", &form.name, &form.text, store)
        .await
}

/// **Preview** / **Store**: the page with what the upload comes to, or why it was refused
/// (nothing stored, the form as sent).
pub(crate) async fn upload(
    State(st): State<AppState>,
    body: Multipart,
) -> Result<Response, PageError> {
    let (form, store) = match read_upload(body).await {
        Ok(f) => f,
        Err(e) => {
            let (status, why) = st.limits.unread("/workloads", e);
            return page(&st, status, upload_form(), None, Some(why)).await;
        }
    };
    match upload_of(&st, &form, store).await {
        Ok(preview) => {
            // A large previewed file is not sent back in the form's text box.
            let mut form = form;
            if preview.stored.is_none() && form.text.len() > KEEP_IN_FORM_BYTES {
                form.not_kept = Some(form.text.len());
                form.text.clear();
            }
            page(&st, StatusCode::OK, form, Some(preview), None).await
        }
        Err(ServiceError::Store(e)) => Err(PageError(ServiceError::Store(e))),
        Err(e) => page(&st, status_of(&e), form, None, Some(e.to_string())).await,
    }
}

/// `/workloads/{name}/trace.jsonl[?version=N]`: a version's trace as stored (default: the
/// latest), byte for byte — the bytes whose SHA-256 a study pins.
pub(crate) async fn download(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<VersionQuery>,
) -> Result<Response, PageError> {
    let (version, text) = st.service.trace_text(&name, q.version).await?;
    let file = format!("{}-v{version}.trace.jsonl", file_name_part(&name));
    Ok(attachment("application/jsonl; charset=utf-8", &file, text))
}

/// **Remove this version**: a trace version that no study pins; back to the list.
pub(crate) async fn remove(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Form(form): Form<VersionQuery>,
) -> Result<Response, PageError> {
    st.service.remove_trace(&name, form.version).await?;
    Ok(Redirect::to("/workloads").into_response())
}

/// The JSON API of the same page.
pub(crate) mod api {
    use axum::Json;
    use axum::body::Bytes;
    use axum::extract::{Path, State};
    use axum::response::{IntoResponse, Response};
    use serde::Deserialize;
    use shortlist_runner::ServiceError;
    use shortlist_runner::service::traces::TraceFormat;

    use crate::web::AppState;
    use crate::web::api::ApiError;
    use crate::web::catalog::VersionQuery;
    use crate::web::extract::Query;

    type ApiResult = Result<Response, ApiError>;

    /// `GET /api/workloads`: every stored trace with its versions, facts and users.
    pub(crate) async fn list(State(st): State<AppState>) -> ApiResult {
        let traces = st.service.list_traces().await?;
        Ok(Json(serde_json::to_value(traces).unwrap_or_default()).into_response())
    }

    #[derive(Debug, Deserialize)]
    pub(crate) struct UploadQuery {
        #[serde(default = "shortlist")]
        format: String,
        #[serde(default)]
        name: String,
        /// `false` (the default): preview only.
        #[serde(default)]
        store: bool,
    }

    fn shortlist() -> String {
        "shortlist".to_owned()
    }

    /// `POST /api/workloads?format=azure&name=N[&store=true]` with the trace as body.
    pub(crate) async fn upload(
        State(st): State<AppState>,
        Query(q): Query<UploadQuery>,
        body: Bytes,
    ) -> ApiResult {
        let text = std::str::from_utf8(&body)
            .map_err(|_| ServiceError::invalid("the request body", "not UTF-8 text"))?;
        let format = TraceFormat::parse(&q.format)?;
        let p = st
            .service
            .import_trace(format, "the request body", &q.name, text, q.store)
            .await?;
        Ok(Json(serde_json::to_value(p).unwrap_or_default()).into_response())
    }

    /// `DELETE /api/workloads/{name}[?version=N]`: a version no study pins (default: the
    /// latest) removed; 400 while one does.
    pub(crate) async fn remove(
        State(st): State<AppState>,
        Path(name): Path<String>,
        Query(q): Query<VersionQuery>,
    ) -> ApiResult {
        let done = st.service.remove_trace(&name, q.version).await?;
        Ok(Json(serde_json::to_value(done).unwrap_or_default()).into_response())
    }
}
