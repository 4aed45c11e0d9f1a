//! Query strings and forms read as the rest of the workbench reads input: a malformed one is
//! refused as bad input — the API's JSON error (`{"error": {"status", "class", "message"}}`), a
//! page's error page — naming what could not be read and why, never axum's plain-text rejection.

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

use super::security::too_large;
use super::{AppState, html};

/// A query string read as `T` (axum's `Query`, refused in the workbench's own shape).
pub(crate) struct Query<T>(pub T);

/// A urlencoded form read as `T` (axum's `Form`, refused in the workbench's own shape).
pub(crate) struct Form<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(e) => Err(refused(
                parts.uri.path().starts_with("/api/"),
                e.status(),
                "the query string",
                &e.body_text(),
            )),
        }
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for Form<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let path = request.uri().path().to_owned();
        let api = path.starts_with("/api/");
        match axum::Form::<T>::from_request(request, state).await {
            Ok(axum::Form(value)) => Ok(Form(value)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(too_large(api, &state.limits.refusal(&path)))
            }
            Err(e) => Err(refused(api, e.status(), "the form", &e.body_text())),
        }
    }
}

/// The refusal of input that could not be read: `what` (the query string, the form) and axum's
/// reason without its own preamble ("Failed to deserialize query string: version: invalid digit
/// found in string" → "version: invalid digit found in string").
fn refused(api: bool, status: StatusCode, what: &str, reason: &str) -> Response {
    // axum answers a form it cannot deserialize with 422; here 422 means "not comparable", and
    // bad input is 400 wherever it is found.
    let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
        StatusCode::BAD_REQUEST
    } else {
        status
    };
    let why = match reason.split_once(": ") {
        Some((preamble, rest)) if preamble.starts_with("Failed to deserialize") => rest,
        _ => reason,
    };
    let message = format!("{what} could not be read: {why}");
    if api {
        let body = serde_json::json!({"error": {
            "status": status.as_u16(),
            "class": "bad_input",
            "message": message,
        }});
        (status, Json(body)).into_response()
    } else {
        html(
            status,
            shortlist_app::error_page(status.as_u16(), "Bad input", &message),
        )
    }
}
