//! What changed between versions: `/evalsets/{name}/diff` and `/studies/{name}/diff`, pages and
//! JSON (`GET /api/…/diff`, the command line's `eval diff --json` and `study diff --json`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::api::{ApiResult, ok};
use super::extract::Query;
use super::pages::PageError;
use super::{AppState, html};

/// `?from=A&to=B` (default: the latest version and the one before it).
#[derive(Debug, Deserialize)]
pub(crate) struct DiffQuery {
    #[serde(default)]
    from: Option<u32>,
    #[serde(default)]
    to: Option<u32>,
}

pub(crate) async fn evalset(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Result<Response, PageError> {
    let view = st.service.eval_set_diff(&name, q.from, q.to).await?;
    Ok(html(StatusCode::OK, shortlist_app::evalset_diff_page(view)))
}

pub(crate) async fn study(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Result<Response, PageError> {
    let view = st.service.study_diff(&name, q.from, q.to).await?;
    Ok(html(StatusCode::OK, shortlist_app::study_diff_page(view)))
}

pub(crate) async fn api_evalset(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<DiffQuery>,
) -> ApiResult {
    ok(st.service.eval_set_diff(&name, q.from, q.to).await?)
}

pub(crate) async fn api_study(
    State(st): State<AppState>,
    Path(name): Path<String>,
    Query(q): Query<DiffQuery>,
) -> ApiResult {
    ok(st.service.study_diff(&name, q.from, q.to).await?)
}
