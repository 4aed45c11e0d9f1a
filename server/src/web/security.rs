//! What every request passes through: the security headers (a strict Content-Security-Policy:
//! only this origin's style and script), the refusal of cross-site form posts, the access token
//! for writes and the API when one is set, and the request metrics behind `/metrics`.

use std::sync::Mutex;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use shortlist_runner::service::views::WorkerState;

use super::AppState;

/// The cookie the login form sets.
pub const TOKEN_COOKIE: &str = "shortlist_token";

/// Upper bounds of the request-latency histogram, seconds.
const BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Request counts and a latency histogram of the app.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<MetricsInner>,
}

#[derive(Debug, Default)]
struct MetricsInner {
    counts: [u64; BUCKETS.len() + 1],
    sum_s: f64,
    by_status: std::collections::BTreeMap<u16, u64>,
}

impl Metrics {
    fn observe(&self, seconds: f64, status: u16) {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let i = BUCKETS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(BUCKETS.len());
        m.counts[i] += 1;
        m.sum_s += seconds;
        *m.by_status.entry(status).or_default() += 1;
    }
}

/// Whether a write came from another site: `Sec-Fetch-Site` says so, or `Origin` names another
/// host than the one asked.
fn cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .split_once("://")
        .map_or(origin, |(_, rest)| rest)
        .trim_end_matches('/');
    origin == "null" || origin_host != host
}

/// The token a request carries (bearer header, or the login cookie).
fn presented_token(headers: &HeaderMap) -> Option<String> {
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(bearer.trim().to_owned());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == TOKEN_COOKIE)
        .map(|(_, v)| v.to_owned())
}

/// Constant-time comparison of two tokens.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn refuse(status: StatusCode, api: bool, why: &str) -> Response {
    if api {
        let body = serde_json::json!({"error": {"status": status.as_u16(), "message": why}});
        (status, axum::Json(body)).into_response()
    } else {
        super::html(
            status,
            shortlist_app::error_page(status.as_u16(), "Refused", why),
        )
    }
}

/// Whether `response` is axum's own plain-text 413 (a body past the route's limit, refused by
/// an extractor before the handler ran).
fn axum_refused_as_too_large(response: &Response) -> bool {
    response.status() == StatusCode::PAYLOAD_TOO_LARGE
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/plain"))
}

/// A body past its limit refused in the workbench's shape (413, `too_large`).
pub(crate) fn too_large(api: bool, why: &str) -> Response {
    let status = StatusCode::PAYLOAD_TOO_LARGE;
    if api {
        let body = serde_json::json!({"error": {
            "status": status.as_u16(),
            "class": "too_large",
            "message": why,
        }});
        (status, axum::Json(body)).into_response()
    } else {
        super::html(
            status,
            shortlist_app::error_page(status.as_u16(), "Too large", why),
        )
    }
}

/// The middleware.
pub async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let path = request.uri().path().to_owned();
    let api = path.starts_with("/api/");
    let write = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let headers = request.headers();
    let response = if write && cross_site(headers) {
        refuse(
            StatusCode::FORBIDDEN,
            api,
            "a cross-site request may not change anything here",
        )
    } else if let Some(token) = &state.token
        && (write || api)
        && path != "/login"
        && !presented_token(headers).is_some_and(|t| same(&t, token))
    {
        refuse(
            StatusCode::UNAUTHORIZED,
            api,
            "this workbench needs its access token for writes and the API: log in at /login, or send Authorization: Bearer TOKEN",
        )
    } else {
        let response = next.run(request).await;
        if axum_refused_as_too_large(&response) {
            too_large(api, &state.limits.refusal(&path))
        } else {
            response
        }
    };
    let mut response = response;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    state
        .metrics
        .observe(started.elapsed().as_secs_f64(), response.status().as_u16());
    response
}

/// `/metrics`: jobs by state, the oldest queued job's wait, workers by state and the app's
/// request latency histogram, in Prometheus text.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let view = match state.service.workers().await {
        Ok(view) => view,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the job queue: {e}\n"),
            )
                .into_response();
        }
    };
    let q = &view.queue;
    let mut text = String::new();
    text.push_str(
        "# HELP shortlist_jobs Jobs in the queue by state (failed: the cancelled ones apart).\n# TYPE shortlist_jobs gauge\n",
    );
    for (s, n) in [
        ("queued", q.queued),
        ("running", q.running),
        ("done", q.done),
        ("failed", q.failed),
        ("cancelled", q.cancelled),
    ] {
        text.push_str(&format!("shortlist_jobs{{state=\"{s}\"}} {n}\n"));
    }
    text.push_str(&format!(
        "# HELP shortlist_oldest_queued_job_seconds How long the oldest queued job has waited (0: none queued).\n# TYPE shortlist_oldest_queued_job_seconds gauge\nshortlist_oldest_queued_job_seconds {}\n",
        q.oldest_waiting_s.unwrap_or(0)
    ));
    text.push_str(
        "# HELP shortlist_workers Workers seen in the last day by state.\n# TYPE shortlist_workers gauge\n",
    );
    for s in WorkerState::ALL {
        let n = view.workers.iter().filter(|w| w.state == s).count();
        text.push_str(&format!(
            "shortlist_workers{{state=\"{}\"}} {n}\n",
            s.as_str()
        ));
    }
    let m = state
        .metrics
        .inner
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    text.push_str("# HELP shortlist_http_request_seconds Latency of the app's responses.\n# TYPE shortlist_http_request_seconds histogram\n");
    let mut cumulative = 0;
    for (i, b) in BUCKETS.iter().enumerate() {
        cumulative += m.counts[i];
        text.push_str(&format!(
            "shortlist_http_request_seconds_bucket{{le=\"{b}\"}} {cumulative}\n"
        ));
    }
    cumulative += m.counts[BUCKETS.len()];
    text.push_str(&format!(
        "shortlist_http_request_seconds_bucket{{le=\"+Inf\"}} {cumulative}\nshortlist_http_request_seconds_sum {}\nshortlist_http_request_seconds_count {cumulative}\n",
        m.sum_s
    ));
    text.push_str("# HELP shortlist_http_responses Responses by status.\n# TYPE shortlist_http_responses counter\n");
    for (status, n) in &m.by_status {
        text.push_str(&format!(
            "shortlist_http_responses{{status=\"{status}\"}} {n}\n"
        ));
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        Body::from(text),
    )
        .into_response()
}
