//! The JSON API: the same documents as the command line's `--json`, for every page and action.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use shortlist_runner::ServiceError;
use shortlist_runner::service::views::Shown;
use shortlist_runner::service::{Pick, RunParams, Trigger};

use super::AppState;
use super::extract::Query;
use super::pages::{Which, status_of};

/// A failed API call: the status its class implies and `{"error": {"status", "class", "message"}}`.
pub(crate) struct ApiError(pub(crate) ServiceError);

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status_of(&self.0);
        let body = serde_json::json!({"error": {
            "status": status.as_u16(),
            "class": self.0.class(),
            "message": self.0.to_string(),
        }});
        let mut response = (status, Json(body)).into_response();
        if let Some(what) = self.0.missing() {
            response.extensions_mut().insert(super::pages::Missing {
                what: what.to_owned(),
                message: self.0.to_string(),
                class: serde_json::to_value(self.0.class()).unwrap_or_default(),
            });
        }
        response
    }
}

/// A JSON answer, or the API's error document.
pub(crate) type ApiResult = Result<Response, ApiError>;

/// `value` as the JSON answer.
pub(crate) fn ok(value: impl serde::Serialize) -> ApiResult {
    Ok(Json(serde_json::to_value(value).unwrap_or_default()).into_response())
}

/// `GET /api/workers`: the queue and the workers seen lately (`shortlist workers --json`).
pub(crate) async fn workers(State(st): State<AppState>) -> ApiResult {
    ok(st.service.workers().await?)
}

pub(crate) async fn studies(State(st): State<AppState>) -> ApiResult {
    ok(st.service.list_studies().await?)
}

pub(crate) async fn study(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(which): Query<Which>,
) -> ApiResult {
    ok(st.service.show(&name, which.version).await?)
}

/// `GET /api/studies/{name}/status[?version=N][&generations=N]`: with `generations`, the
/// newest N generations in full and the others a line each (`earlier`).
pub(crate) async fn status(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(which): Query<Which>,
) -> ApiResult {
    let shown = which
        .generations
        .map_or(Shown::All, |count| Shown::Newest { count, also: None });
    ok(st
        .service
        .run_progress_shown(&name, which.version, shown)
        .await?)
}

/// `POST /api/studies` with a study file (TOML) as the body.
pub(crate) async fn create_study(State(st): State<AppState>, body: Bytes) -> ApiResult {
    let text = String::from_utf8(body.to_vec()).map_err(|_| {
        ApiError(ServiceError::Invalid {
            what: "the request body".to_owned(),
            why: "not UTF-8 text (a study file is TOML)".to_owned(),
        })
    })?;
    let base = std::env::current_dir()
        .unwrap_or_default()
        .join("posted.study.toml");
    let created = st
        .service
        .create_study_text("the posted study", &text, &base)
        .await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub(crate) async fn lock(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    ok(st
        .service
        .lock(&name, None, &shortlist_runner::time::now_rfc3339())
        .await?)
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RunBody {
    #[serde(default)]
    again: bool,
    #[serde(default)]
    max_tokens: Option<usize>,
}

/// `POST /api/studies/{name}/cancel[?version=N]`: what cancelling the unfinished run did.
pub(crate) async fn cancel(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(which): Query<Which>,
) -> ApiResult {
    ok(st
        .service
        .cancel_run(&name, which.version, "through the API")
        .await?)
}

/// `DELETE /api/studies/{name}[?version=N]`: a draft removed (a locked version is refused).
pub(crate) async fn delete(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(which): Query<Which>,
) -> ApiResult {
    ok(st.service.delete_draft(&name, which.version).await?)
}

/// `POST /api/studies/{name}/retry[?version=N]`: the newest generation's failed jobs queued
/// again (202).
pub(crate) async fn retry(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(which): Query<Which>,
) -> ApiResult {
    let retried = st.service.retry_run(&name, which.version).await?;
    Ok((StatusCode::ACCEPTED, Json(retried)).into_response())
}

pub(crate) async fn run(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let body: RunBody = if body.is_empty() {
        RunBody::default()
    } else {
        json_body(&body, r#"{"again": bool, "max_tokens": n}"#)?
    };
    let requested = st
        .service
        .request_run(
            &name,
            None,
            &RunParams {
                trigger: Trigger::Api,
                again: body.again,
                max_tokens: body.max_tokens.unwrap_or(RunParams::default().max_tokens),
                ..RunParams::default()
            },
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(requested)).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct CompareQuery {
    /// Columns: `name`, `name@v2`, `name@g3` or `name@v2.g3`, comma-separated.
    candidates: String,
    /// The default study version of the columns (else the latest).
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    generation: Option<u32>,
}

pub(crate) async fn compare(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<CompareQuery>,
) -> ApiResult {
    let picks = Pick::parse_list(&q.candidates)?;
    ok(st
        .service
        .compare(&name, q.version, &picks, q.generation)
        .await?)
}

/// `GET /api/studies/{name}/cases/{case}[?version=N&generation=G]`: one case with every
/// candidate's answer (`study case --json`).
pub(crate) async fn case(
    State(st): State<AppState>,
    Path((name, case)): Path<(String, String)>,
    Query(which): Query<Which>,
) -> ApiResult {
    ok(st
        .service
        .case(&name, which.version, &case, which.generation)
        .await?)
}

pub(crate) async fn record(
    State(st): State<AppState>,
    Path((name, candidate)): Path<(String, String)>,
    Query(which): Query<Which>,
) -> ApiResult {
    ok(st
        .service
        .record(&name, which.version, &candidate, which.generation)
        .await?
        .record)
}

/// The stored reproduction checks of a candidate, newest first (of `generation`, or of all).
pub(crate) async fn reproductions(
    State(st): State<AppState>,
    Path((name, candidate)): Path<(String, String)>,
    Query(which): Query<Which>,
) -> ApiResult {
    ok(st
        .service
        .reproductions(&name, which.version, &candidate, which.generation)
        .await?)
}

/// A JSON body read as `T`, or the API's error (in its JSON shape, like every other refusal)
/// naming what was expected: `expected` is the body's shape in words.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(
    body: &Bytes,
    expected: &str,
) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError(ServiceError::Invalid {
            what: "the request body".to_owned(),
            why: format!("expected {expected}: {e}"),
        })
    })
}

/// `POST /api/studies/{name}/baseline`'s body.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct BaselineBody {
    generation: u32,
    /// Default: the latest version.
    #[serde(default)]
    version: Option<u32>,
}

/// `POST /api/studies/{name}/baseline` with `{"generation", "version"?}`: accept a finished run
/// as the baseline later runs are checked against.
pub(crate) async fn accept_baseline(
    State(st): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult {
    let b: BaselineBody = json_body(&body, r#"{"generation": n, "version": n?}"#)?;
    st.service
        .accept_baseline(&name, b.version, b.generation, "api")
        .await?;
    ok(st.service.run_progress(&name, b.version).await?.baseline)
}
