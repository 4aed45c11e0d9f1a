//! The OpenAI-compatible HTTP API over the engine thread: `/v1/chat/completions`,
//! `/v1/completions`, `/v1/models`, `/metrics`, `/health`.
//!
//! Handlers only parse, template and tokenize (on the blocking pool), then wait on the request's
//! reply channel; the forward pass runs on the engine thread, never on a tokio worker. A client
//! that goes away drops its receiver, which cancels the request in the scheduler.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Json, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use crate::chat::Message;
use crate::error::EngineError;
use crate::sampling::SamplingParams;
use crate::scheduler::{Completion, EngineHandle, Event, GenRequest};

/// Shared state of the HTTP layer.
#[derive(Debug, Clone)]
pub struct AppState {
    engine: EngineHandle,
}

static REQUEST_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The application as a value, so tests can call it in memory.
pub fn router(engine: EngineHandle) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/health", get(|| async { "ok" }))
        .with_state(AppState { engine })
}

/// An OpenAI-style error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    code: Option<&'static str>,
    param: Option<&'static str>,
    message: String,
}

impl ApiError {
    fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            code: None,
            param,
            message: message.into(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        match &e {
            EngineError::ContextLimit { .. } => Self {
                status: StatusCode::BAD_REQUEST,
                kind: "invalid_request_error",
                code: Some("context_length_exceeded"),
                param: Some("messages"),
                message: e.to_string(),
            },
            EngineError::InvalidParameter { field, .. } => {
                Self::bad_request(e.to_string(), Some(field))
            }
            EngineError::Template(_) | EngineError::Tokenizer(_) => {
                Self::bad_request(e.to_string(), None)
            }
            EngineError::Unavailable(_) => Self {
                status: StatusCode::SERVICE_UNAVAILABLE,
                kind: "server_error",
                code: Some("overloaded"),
                param: None,
                message: e.to_string(),
            },
            // Internal details stay in the log, not in the response.
            _ => {
                tracing::error!(error = %e, "request failed");
                Self {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    kind: "server_error",
                    code: None,
                    param: None,
                    message: "the engine failed to complete the request".into(),
                }
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}});
        (self.status, Json(body)).into_response()
    }
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StopField {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// Sampling fields shared by both endpoints.
#[derive(Debug, Deserialize)]
struct Common {
    #[serde(default)]
    max_tokens: Option<usize>,
    #[serde(default)]
    max_completion_tokens: Option<usize>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    #[serde(default)]
    #[allow(dead_code)] // Accepted for compatibility: one model is served whatever is named.
    model: Option<String>,
    messages: Vec<ChatMessage>,
    #[serde(flatten)]
    common: Common,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    #[serde(default)]
    #[allow(dead_code)] // Accepted for compatibility: one model is served whatever is named.
    model: Option<String>,
    prompt: Value,
    #[serde(flatten)]
    common: Common,
}

fn params(c: &Common, default_max: usize) -> Result<SamplingParams, ApiError> {
    let stop = match &c.stop {
        None => Vec::new(),
        Some(StopField::One(s)) => vec![s.clone()],
        Some(StopField::Many(v)) => v.clone(),
    };
    let top_k = match c.top_k {
        None => 0,
        Some(k) if k <= 0 => 0,
        Some(k) => k as usize,
    };
    let max = c
        .max_completion_tokens
        .or(c.max_tokens)
        .unwrap_or(default_max);
    Ok(SamplingParams::new(
        c.temperature.unwrap_or(1.0),
        c.top_p.unwrap_or(1.0),
        top_k,
        c.seed.unwrap_or(0),
        max,
        stop,
    )?)
}

fn content_text(v: &Option<Value>) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        // The content-parts form: concatenate the text parts.
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("")),
        Some(_) => Err(ApiError::bad_request(
            "message content must be a string or a list of text parts",
            Some("messages"),
        )),
    }
}

fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|s| !s.is_empty() && s.len() <= 128)
        .map_or_else(
            || {
                format!(
                    "req-{}-{}",
                    std::process::id(),
                    REQUEST_COUNTER.fetch_add(1, Ordering::Relaxed)
                )
            },
            str::to_owned,
        )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Text,
}

async fn chat_completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<ChatBody>, JsonRejection>,
) -> Response {
    let arrival = Instant::now();
    let rid = request_id(&headers);
    let result = async {
        let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text(), None))?;
        if body.messages.is_empty() {
            return Err(ApiError::bad_request(
                "messages must not be empty",
                Some("messages"),
            ));
        }
        let messages = body
            .messages
            .iter()
            .map(|m| {
                Ok(Message {
                    role: m.role.clone(),
                    content: content_text(&m.content)?,
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        let params = params(&body.common, 256)?;
        let include_usage = body
            .common
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        let model = st.engine.model().clone();
        let pre = tokio::task::spawn_blocking(move || {
            let t0 = Instant::now();
            let ids = model
                .render_chat(&messages)
                .and_then(|p| model.encode_prompt(&p));
            (ids, t0, Instant::now())
        })
        .await
        .map_err(|e| ApiError::from(EngineError::Unavailable(e.to_string())))?;
        let ids = pre.0?;
        Ok::<_, ApiError>((
            ids,
            (pre.1, pre.2),
            params,
            body.common.stream,
            include_usage,
        ))
    }
    .await;
    respond(st, rid, arrival, Kind::Chat, result).await
}

async fn completions(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Result<Json<CompletionBody>, JsonRejection>,
) -> Response {
    let arrival = Instant::now();
    let rid = request_id(&headers);
    let result = async {
        let Json(body) = body.map_err(|e| ApiError::bad_request(e.body_text(), None))?;
        let prompt = match &body.prompt {
            Value::String(s) => s.clone(),
            Value::Array(a) if a.len() == 1 && a[0].is_string() => {
                a[0].as_str().unwrap_or_default().to_owned()
            }
            _ => {
                return Err(ApiError::bad_request(
                    "prompt must be a string (one prompt per request)",
                    Some("prompt"),
                ));
            }
        };
        let params = params(&body.common, 16)?;
        let include_usage = body
            .common
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage);
        let model = st.engine.model().clone();
        let pre = tokio::task::spawn_blocking(move || {
            let t0 = Instant::now();
            let ids = model.encode_prompt(&prompt);
            (ids, t0, Instant::now())
        })
        .await
        .map_err(|e| ApiError::from(EngineError::Unavailable(e.to_string())))?;
        let ids = pre.0?;
        Ok::<_, ApiError>((
            ids,
            (pre.1, pre.2),
            params,
            body.common.stream,
            include_usage,
        ))
    }
    .await;
    respond(st, rid, arrival, Kind::Text, result).await
}

type Prepared = (Vec<u32>, (Instant, Instant), SamplingParams, bool, bool);

async fn respond(
    st: AppState,
    rid: String,
    arrival: Instant,
    kind: Kind,
    prepared: Result<Prepared, ApiError>,
) -> Response {
    let mut resp = match start(&st, &rid, arrival, prepared) {
        Err(e) => e.into_response(),
        Ok((rx, stream, include_usage)) => {
            let id = match kind {
                Kind::Chat => format!("chatcmpl-{rid}"),
                Kind::Text => format!("cmpl-{rid}"),
            };
            let model = st.engine.model().name().to_owned();
            if stream {
                Sse::new(sse_stream(rx, id, model, kind, include_usage)).into_response()
            } else {
                collect(rx, id, model, kind).await
            }
        }
    };
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

fn start(
    st: &AppState,
    rid: &str,
    arrival: Instant,
    prepared: Result<Prepared, ApiError>,
) -> Result<(UnboundedReceiver<Event>, bool, bool), ApiError> {
    let (ids, preprocess, params, stream, include_usage) = prepared?;
    st.engine
        .model()
        .check_context(ids.len(), params.max_tokens())?;
    let (tx, rx) = unbounded_channel();
    st.engine.submit(GenRequest {
        id: rid.to_owned(),
        prompt: ids,
        params,
        arrival,
        preprocess,
        events: tx,
    })?;
    Ok((rx, stream, include_usage))
}

fn usage(c: &Completion) -> Value {
    json!({
        "prompt_tokens": c.prompt_tokens,
        "completion_tokens": c.completion_tokens,
        "total_tokens": c.prompt_tokens + c.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": c.cached_tokens},
    })
}

async fn collect(
    mut rx: UnboundedReceiver<Event>,
    id: String,
    model: String,
    kind: Kind,
) -> Response {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Admitted { .. } => {}
            Event::Token { text: t, .. } => text.push_str(&t),
            Event::Failed(e) => return ApiError::from(e).into_response(),
            Event::Done(c) => {
                let choice = match kind {
                    Kind::Chat => {
                        json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": c.finish.as_str()})
                    }
                    Kind::Text => {
                        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": c.finish.as_str()})
                    }
                };
                let object = if kind == Kind::Chat {
                    "chat.completion"
                } else {
                    "text_completion"
                };
                return Json(json!({
                    "id": id, "object": object, "created": unix_now(), "model": model,
                    "choices": [choice], "usage": usage(&c), "shortlist_timings": c.timings,
                }))
                .into_response();
            }
        }
    }
    ApiError::from(EngineError::Unavailable(
        "the engine dropped the request".into(),
    ))
    .into_response()
}

struct SseState {
    rx: UnboundedReceiver<Event>,
    pending: VecDeque<SseEvent>,
    id: String,
    model: String,
    kind: Kind,
    include_usage: bool,
    sent_role: bool,
    done: bool,
}

impl SseState {
    fn chunk(
        &self,
        delta_text: Option<&str>,
        finish: Option<&str>,
        extra: Option<(&str, Value)>,
    ) -> SseEvent {
        let created = unix_now();
        let mut v = match self.kind {
            Kind::Chat => {
                let delta = match (delta_text, self.sent_role) {
                    (Some(t), true) => json!({"content": t}),
                    (Some(t), false) => json!({"role": "assistant", "content": t}),
                    (None, _) => json!({}),
                };
                json!({"id": self.id, "object": "chat.completion.chunk", "created": created, "model": self.model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
            }
            Kind::Text => {
                json!({"id": self.id, "object": "text_completion", "created": created, "model": self.model,
                                 "choices": [{"index": 0, "text": delta_text.unwrap_or(""), "logprobs": null, "finish_reason": finish}]})
            }
        };
        if let Some((k, x)) = extra {
            v[k] = x;
        }
        SseEvent::default().data(v.to_string())
    }

    fn on_event(&mut self, ev: Event) {
        match ev {
            Event::Admitted { .. } => {}
            Event::Token { text, .. } => {
                if !text.is_empty() || !self.sent_role {
                    let e = self.chunk(Some(&text), None, None);
                    self.sent_role = true;
                    self.pending.push_back(e);
                }
            }
            Event::Done(c) => {
                let last = self.chunk(
                    None,
                    Some(c.finish.as_str()),
                    Some(("shortlist_timings", json!(c.timings))),
                );
                self.pending.push_back(last);
                if self.include_usage {
                    let object = if self.kind == Kind::Chat {
                        "chat.completion.chunk"
                    } else {
                        "text_completion"
                    };
                    let u = json!({"id": self.id, "object": object, "created": unix_now(), "model": self.model,
                                   "choices": [], "usage": usage(&c)});
                    self.pending
                        .push_back(SseEvent::default().data(u.to_string()));
                }
                self.pending.push_back(SseEvent::default().data("[DONE]"));
                self.done = true;
            }
            Event::Failed(e) => {
                let ApiError {
                    kind,
                    code,
                    message,
                    ..
                } = ApiError::from(e);
                let v = json!({"error": {"message": message, "type": kind, "code": code}});
                self.pending
                    .push_back(SseEvent::default().data(v.to_string()));
                self.pending.push_back(SseEvent::default().data("[DONE]"));
                self.done = true;
            }
        }
    }
}

fn sse_stream(
    rx: UnboundedReceiver<Event>,
    id: String,
    model: String,
    kind: Kind,
    include_usage: bool,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let state = SseState {
        rx,
        pending: VecDeque::new(),
        id,
        model,
        kind,
        include_usage,
        sent_role: false,
        done: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(e) = st.pending.pop_front() {
                return Some((Ok(e), st));
            }
            if st.done {
                return None;
            }
            match st.rx.recv().await {
                Some(ev) => st.on_event(ev),
                None => {
                    st.on_event(Event::Failed(EngineError::Unavailable(
                        "the engine dropped the request".into(),
                    )));
                }
            }
        }
    })
}

async fn models(State(st): State<AppState>) -> Json<Value> {
    let m = st.engine.model();
    Json(json!({"object": "list", "data": [{
        "id": m.name(), "object": "model", "created": unix_now(), "owned_by": "shortlist",
        "max_model_len": m.context(),
        "memory": {
            "weights_bytes": m.model().weight_bytes(),
            "kv_bytes_per_token": m.model().config().kv_bytes_per_token(),
            "rss_bytes": proc_status_bytes("VmRSS:"),
            "peak_rss_bytes": proc_status_bytes("VmHWM:"),
        },
    }]}))
}

async fn metrics(State(st): State<AppState>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4")],
        st.engine.metrics().render(),
    )
}

/// A listening socket with the runtime that will serve it. Binding comes first, so that a busy
/// or wrong address is reported at once, before a model is loaded for nothing.
#[derive(Debug)]
pub struct Listener {
    runtime: tokio::runtime::Runtime,
    listener: tokio::net::TcpListener,
}

impl Listener {
    /// Listen on `addr` (`host:port`; port 0 picks a free one), with a small tokio runtime of
    /// `io_threads` workers for the HTTP side (the compute threads live elsewhere).
    pub fn bind(addr: &str, io_threads: usize) -> Result<Self, EngineError> {
        Self::bind_io(addr, io_threads).map_err(|error| EngineError::Listen {
            addr: addr.to_owned(),
            error,
        })
    }

    fn bind_io(addr: &str, io_threads: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(io_threads.max(1))
            .max_blocking_threads(4)
            .thread_name("shortlist-http")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(tokio::net::TcpListener::bind(addr))?;
        Ok(Self { runtime, listener })
    }

    /// The address bound (with the port chosen when port 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve `engine` until `shutdown` resolves: then the listener closes, open responses are
    /// finished, and the engine thread ends once the last handle is dropped.
    pub fn serve_until(
        self,
        engine: EngineHandle,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Self { runtime, listener } = self;
        runtime.block_on(async move {
            axum::serve(listener, router(engine))
                .with_graceful_shutdown(shutdown)
                .await
        })
    }
}

/// Serve `engine` on `addr` until the process is stopped, on a small tokio runtime of
/// `io_threads` workers (the compute threads live elsewhere). Calls `on_ready` with the bound
/// address once listening.
pub fn serve_blocking(
    engine: EngineHandle,
    addr: &str,
    io_threads: usize,
    on_ready: impl FnOnce(SocketAddr),
) -> std::io::Result<()> {
    serve_until(engine, addr, io_threads, on_ready, std::future::pending())
}

/// [`serve_blocking`] until `shutdown` resolves (see [`Listener::serve_until`]).
pub fn serve_until(
    engine: EngineHandle,
    addr: &str,
    io_threads: usize,
    on_ready: impl FnOnce(SocketAddr),
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = Listener::bind_io(addr, io_threads)?;
    on_ready(listener.local_addr()?);
    listener.serve_until(engine, shutdown)
}

/// A memory figure of this process from `/proc/self/status` (Linux), in bytes.
pub fn proc_status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}
